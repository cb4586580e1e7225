// SPDX-License-Identifier: MIT
// The host side of attn::cuda, which runs with or without a GPU: the row-major to cuBLAS mapping
// (checked against a column-major GEMM written from cuBLAS's definition), argument checks, calls
// that must not touch the device, clean attn::Errors when there is no device, and cuBLAS loaded on
// first use rather than at start-up.
// Also compiles the attn/cuda.hpp umbrella (Eigen and all) under nvcc.
#include <catch2/catch.hpp>

#include <attn/cuda.hpp>
#include <dlfcn.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using attn::Trans;

namespace {

/// cuBLAS's column-major GEMM by its definition: element (r, c) of a stored matrix X is
/// X[r + c * ldX]; C(i,j) = alpha sum_p op(A)(i,p) op(B)(p,j) + beta C(i,j), C not read when beta = 0.
template <class T>
void col_major_reference(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A, int lda,
                         const T* B, int ldb, T beta, T* C, int ldc) {
  auto a = [&](int i, int p) { return ta == CUBLAS_OP_N ? A[i + std::size_t(p) * lda] : A[p + std::size_t(i) * lda]; };
  auto b = [&](int p, int j) { return tb == CUBLAS_OP_N ? B[p + std::size_t(j) * ldb] : B[j + std::size_t(p) * ldb]; };
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T acc = 0;
      for (int p = 0; p < k; ++p) acc += a(i, p) * b(p, j);
      T& c = C[i + std::size_t(j) * ldc];
      c = alpha * acc + (beta == T(0) ? T(0) : beta * c);
    }
  }
}

template <class T>
std::vector<T> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  std::vector<T> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// Our row-major GEMM, run through col_major_gemm's arguments on the reference, against cpu::gemm.
template <class T>
void check_mapping(Trans ta, Trans tb, int m, int n, int k, int pad, unsigned seed) {
  INFO("ta " << (ta == Trans::yes) << " tb " << (tb == Trans::yes) << " m " << m << " n " << n << " k " << k << " pad " << pad);
  const int lda = (ta == Trans::no ? k : m) + pad, ldb = (tb == Trans::no ? n : k) + pad, ldc = n + pad;
  const auto a = random_vector<T>(std::size_t(ta == Trans::no ? m : k) * lda, seed);
  const auto b = random_vector<T>(std::size_t(tb == Trans::no ? k : n) * ldb, seed + 1);
  const auto c0 = random_vector<T>(std::size_t(m) * ldc, seed + 2);
  const T alpha = T(1.5), beta = T(-0.5);

  auto want = c0;
  attn::cpu::gemm<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);

  const auto g = attn::cuda_detail::col_major_gemm("test", ta, tb, m, n, k, lda, ldb, ldc);
  auto got = c0;
  col_major_reference<T>(g.op_first, g.op_second, g.m, g.n, g.k, alpha, b.data(), g.ld_first, a.data(), g.ld_second, beta,
                         got.data(), g.ldc);

  const double tol = 8.0 * std::numeric_limits<T>::epsilon() * (k + 2);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(double(got[i]) - double(want[i])) <= tol * (1.0 + std::abs(double(want[i]))))) ++bad;
  }
  CHECK(bad == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("row-major GEMMs map onto column-major cuBLAS with operands swapped", "[cuda][gemm]", float, double) {
  unsigned seed = 1;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{5, 7, 3}, std::tuple{9, 2, 13}, std::tuple{16, 16, 1}}) {
        check_mapping<TestType>(ta, tb, m, n, k, 0, seed += 3);
        check_mapping<TestType>(ta, tb, m, n, k, 3, seed += 3);
      }
    }
  }
}

namespace {
const std::string cublas_soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
/// Whether cuBLAS was in the process before main: RTLD_NOLOAD finds a library only if it is loaded.
bool loaded(const std::string& soname) {
  void* h = dlopen(soname.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}
const bool cublas_at_start = loaded(cublas_soname);
}  // namespace

TEST_CASE("cuBLAS is opened on first use, not linked: a program starts without it", "[cuda][cublas]") {
  CHECK_FALSE(cublas_at_start);
  const attn::cuda_detail::CublasApi& api = attn::cuda_detail::cublas();
  CHECK(loaded(cublas_soname));
  CHECK(&api == &attn::cuda_detail::cublas());  // loaded once
  // The table's entries are cuBLAS's own: its status names and texts need no device.
  CHECK(std::string(api.status_name(CUBLAS_STATUS_INVALID_VALUE)) == "CUBLAS_STATUS_INVALID_VALUE");
  CHECK(std::string(api.status_string(CUBLAS_STATUS_NOT_INITIALIZED)).size() > 0);
  for (const void* f : {(const void*)api.create, (const void*)api.destroy, (const void*)api.set_stream, (const void*)api.sgemm,
                        (const void*)api.dgemm, (const void*)api.sgemm_strided_batched, (const void*)api.dgemm_strided_batched})
    CHECK(f != nullptr);
  CHECK_THROWS_WITH(attn::cuda_detail::check(CUBLAS_STATUS_INVALID_VALUE, "attn::cuda: some call"),
                    Catch::Contains("attn::cuda: some call: CUBLAS_STATUS_INVALID_VALUE (7)"));
}

TEST_CASE("col_major_gemm swaps operands and keeps each one's transpose flag", "[cuda][gemm]") {
  // Row-major C(2,3) = A^T B with A stored (4,2), B stored (4,3).
  const auto g = attn::cuda_detail::col_major_gemm("test", Trans::yes, Trans::no, 2, 3, 4, 2, 3, 3);
  CHECK(g.op_first == CUBLAS_OP_N);   // B, not transposed
  CHECK(g.op_second == CUBLAS_OP_T);  // A, transposed
  CHECK(g.m == 3);
  CHECK(g.n == 2);
  CHECK(g.k == 4);
  CHECK(g.ld_first == 3);
  CHECK(g.ld_second == 2);
  CHECK(g.ldc == 3);
}

TEST_CASE("cuda::gemm rejects short row strides before touching the device", "[cuda][gemm][errors]") {
  // Checked before any CUDA call, so the same errors come with or without a GPU.
  float* none = nullptr;
  CHECK_THROWS_WITH(attn::cuda::gemm<float>(Trans::no, Trans::no, 4, 5, 6, 1.f, none, 5, none, 5, 0.f, none, 5),
                    Catch::Contains("lda = 5") && Catch::Contains("row length 6") && Catch::Contains("cuda::gemm<float>"));
  CHECK_THROWS_WITH(attn::cuda::gemm<float>(Trans::yes, Trans::no, 4, 5, 6, 1.f, none, 3, none, 5, 0.f, none, 5),
                    Catch::Contains("lda = 3") && Catch::Contains("transposed"));
  CHECK_THROWS_WITH(attn::cuda::gemm<double>(Trans::no, Trans::yes, 4, 5, 6, 1.0, nullptr, 6, nullptr, 5, 0.0, nullptr, 5),
                    Catch::Contains("ldb = 5") && Catch::Contains("B (n,k)"));
  CHECK_THROWS_AS(attn::cuda::gemm<double>(Trans::no, Trans::no, 4, 5, 6, 1.0, nullptr, 6, nullptr, 5, 0.0, nullptr, 4),
                  attn::ArgumentError);
  CHECK_THROWS_AS(attn::cuda::gemm_strided_batched<float>(Trans::no, Trans::no, 4, 5, 0, 1.f, none, 0, 0, none, 5, 0, 0.f,
                                                          none, 4, 20, 2),
                  attn::ArgumentError);
}

TEST_CASE("empty cuda operations are no-ops that need no device", "[cuda]") {
  float* none = nullptr;
  CHECK_NOTHROW(attn::cuda::fill(none, 0, 1.f));
  CHECK_NOTHROW(attn::cuda::copy(none, static_cast<const float*>(none), 0));
  CHECK_NOTHROW(attn::cuda::to_host(none, static_cast<const float*>(none), 0));
  CHECK_NOTHROW(attn::cuda::from_host(none, static_cast<const float*>(none), 0));
  CHECK_NOTHROW(attn::cuda::map(0, none, attn::expr::Exp{}, static_cast<const float*>(none)));
  CHECK_NOTHROW(attn::cuda::gemm<float>(Trans::no, Trans::no, 0, 5, 6, 1.f, none, 6, none, 5, 0.f, none, 5));
  CHECK_NOTHROW(attn::cuda::gemm_strided_batched<double>(Trans::no, Trans::no, 4, 5, 6, 1.0, nullptr, 6, 24, nullptr, 5,
                                                         30, 0.0, nullptr, 5, 20, 0));
  CHECK_NOTHROW(attn::cuda::deallocate(none, 0));
}

TEST_CASE("cuda::allocate refuses absurd sizes before asking the driver", "[cuda][errors]") {
  CHECK_THROWS_WITH(attn::cuda::allocate<double>(std::size_t(1) << 38), Catch::Contains("too large"));
}

TEST_CASE("without a device, cuda reports why and every operation throws attn::Error", "[cuda][errors]") {
  const bool ok = attn::cuda::available();
  CHECK(ok == attn::cuda::unavailable_reason().empty());
  CHECK(attn::cuda::available() == ok);  // probed once, stable
  if (ok) {
    SUCCEED("a device is present: " << attn::cuda::name);
    return;
  }
  INFO("reason: " << attn::cuda::unavailable_reason());
  CHECK_THAT(attn::cuda::unavailable_reason(), Catch::Contains("cudaGetDeviceCount") || Catch::Contains("cudaFree"));
  CHECK_THROWS_AS(attn::cuda::allocate<float>(16), attn::Error);
  CHECK_THROWS_AS(attn::cuda::synchronize(), attn::Error);
  CHECK_THROWS_AS(attn::cuda::stream(), attn::Error);
  std::vector<float> h(4, 1.f);
  float* fake = h.data();
  CHECK_THROWS_AS(attn::cuda::fill(fake, 4, 2.f), attn::Error);
  CHECK_THROWS_AS(attn::cuda::gemm<float>(Trans::no, Trans::no, 2, 2, 2, 1.f, fake, 2, fake, 2, 0.f, fake, 2), attn::Error);
  CHECK_THROWS_AS(attn::cuda::map(4, fake, attn::expr::Neg{}, static_cast<const float*>(fake)), attn::Error);
  CHECK_NOTHROW(attn::cuda::deallocate(fake, 4));  // destructors must not throw, even here
  CHECK(h == std::vector<float>(4, 1.f));
}

TEST_CASE("the cuda backend satisfies the Backend concept", "[cuda]") {
  STATIC_REQUIRE(attn::Backend<attn::cuda>);
  STATIC_REQUIRE(!attn::cuda::host_accessible);
  CHECK(std::string(attn::cuda::name) == "cuda");
}

// nvcc's units detect the CPU as g++'s do: attn's probe is one inline function for the whole program,
// and this program's only copy of it is this nvcc unit's.
TEST_CASE("nvcc units detect the CPU's kernel level as g++ units do", "[cuda][isa]") {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  CHECK((attn::cpu::isa_supported() >= attn::Isa::avx2) == avx2);
  CHECK(attn::cpu::features().avx2_fma == avx2);
#endif
}
