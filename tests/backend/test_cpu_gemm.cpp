// SPDX-License-Identifier: MIT
// cpu::gemm against a plain triple loop in both precisions, on sizes either side of the volume where
// it hands the product to the BLAS (when attn was configured with one), and the thread count the
// BLAS is given.
#include <attn/backend/cpu.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <limits>
#include <vector>

using attn::Trans;

using testutil::filled;

namespace {

struct Size {
  int m, n, k;
};

/// cpu::gemm<T>(op(A) op(B)) at the given strides against a double loop: C's gap columns
/// untouched, beta 0 never reading C (NaN there). Operands filled from seeds s, s + 1, s + 2.
template <class T>
bool gemm_matches(Trans ta, Trans tb, int m, int n, int k, int lda, int ldb, int ldc, T beta, double tol, std::uint32_t s) {
  const auto a = filled<T>(std::size_t(ta == Trans::no ? m : k) * lda, s);
  const auto b = filled<T>(std::size_t(tb == Trans::no ? k : n) * ldb, s + 1);
  auto c = filled<T>(std::size_t(m) * ldc, s + 2);
  if (beta == T(0))  // beta 0 must not read C: NaN there must not reach the result
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[std::size_t(i) * ldc + j] = std::numeric_limits<T>::quiet_NaN();
  const auto c0 = c;
  const T alpha = T(0.75);
  attn::cpu::gemm<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  auto at = [&](int i, int p) { return double(ta == Trans::no ? a[std::size_t(i) * lda + p] : a[std::size_t(p) * lda + i]); };
  auto bt = [&](int p, int j) { return double(tb == Trans::no ? b[std::size_t(p) * ldb + j] : b[std::size_t(j) * ldb + p]); };
  bool ok = true;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < ldc; ++j) {
      const T got = c[std::size_t(i) * ldc + j];
      const T old = c0[std::size_t(i) * ldc + j];
      if (j >= n) {  // the gap between rows of C stays as it was
        ok = ok && got == old;
        continue;
      }
      double ref = 0, mag = 0;
      for (int p = 0; p < k; ++p) {
        ref += at(i, p) * bt(p, j);
        mag += std::abs(at(i, p) * bt(p, j));
      }
      const double prior = beta == T(0) ? 0.0 : double(beta) * double(old);
      ref = alpha * ref + prior;
      mag = alpha * mag + std::abs(prior);
      ok = ok && std::isfinite(double(got)) && std::abs(double(got) - ref) <= tol * (mag + 1);
    }
  return ok;
}

template <class T>
void check_gemm(double tol) {
  // 5 x 7 x 3 and 40 x 33 x 17 stay below attn::detail::kBlasMinVolume (64^3); the others are above.
  for (const Size s : {Size{5, 7, 3}, Size{40, 33, 17}, Size{70, 65, 66}, Size{130, 97, 80}, Size{1, 300, 900}}) {
    for (Trans ta : {Trans::no, Trans::yes}) {
      for (Trans tb : {Trans::no, Trans::yes}) {
        for (T beta : {T(0), T(1), T(-0.5)}) {
          const int m = s.m, n = s.n, k = s.k;
          INFO("m " << m << " n " << n << " k " << k << (ta == Trans::yes ? " A^T" : " A") << (tb == Trans::yes ? " B^T" : " B")
                    << " beta " << beta);
          // Row strides wider than the rows, so that a GEMM reading or writing past a row shows.
          const int lda = (ta == Trans::no ? k : m) + 3, ldb = (tb == Trans::no ? n : k) + 2, ldc = n + 4;
          CHECK(gemm_matches<T>(ta, tb, m, n, k, lda, ldb, ldc, beta, tol, 1));
        }
      }
    }
  }
}

/// A^T B in float at the given strides (gemm_matches).
bool tn_matches(int m, int n, int k, int lda, int ldb, float beta) {
  return gemm_matches<float>(Trans::yes, Trans::no, m, n, k, lda, ldb, n + 5, beta, 1e-5, 11);
}

}  // namespace

TEST_CASE("cpu::gemm in float: A^T B with rows a multiple of 64 floats apart, on one thread and on all, beta 0 / 1 / -0.5") {
  // The padded route over one block, three with a short last one and three whole ones, m and n
  // below, at and above a multiple of 16; strides that are not a multiple of 64 floats (oneDNN
  // direct); and rows 1,024 and 2,048 floats apart, the only ones padded at AVX-512.
  struct Case {
    int m, n, k, lda, ldb;
  };
  for (const Case s : {Case{64, 64, 300, 64, 64}, Case{70, 33, 1100, 128, 64}, Case{128, 48, 1536, 128, 48}, Case{40, 100, 700, 40, 100},
                       Case{70, 33, 600, 1024, 48}, Case{16, 40, 520, 16, 2048}}) {
#if defined(ATTN_GEMM_DNNL)
    using attn::Isa;
    CHECK(attn::detail::dnnl_pad_pays(true, false, s.k, s.lda, s.ldb, true, Isa::avx2) == (s.lda % 64 == 0 || s.ldb % 64 == 0));
    CHECK(attn::detail::dnnl_pad_pays(true, false, s.k, s.lda, s.ldb, true, Isa::generic) == (s.lda % 64 == 0 || s.ldb % 64 == 0));
    for (const Isa level : {Isa::avx512, Isa::avx512_bf16})  // only rows a multiple of 4 KiB apart
      CHECK(attn::detail::dnnl_pad_pays(true, false, s.k, s.lda, s.ldb, true, level) == (s.lda % 1024 == 0 || s.ldb % 1024 == 0));
    CHECK_FALSE(attn::detail::dnnl_pad_pays(true, false, s.k, s.lda, s.ldb, false));  // oneDNN's own threads: no copy
    CHECK_FALSE(attn::detail::dnnl_pad_pays(true, true, s.k, s.lda, s.ldb, true));
    CHECK_FALSE(attn::detail::dnnl_pad_pays(false, false, s.k, s.lda, s.ldb, true));
#endif
    for (const float beta : {0.f, 1.f, -0.5f}) {
      INFO("m " << s.m << " n " << s.n << " k " << s.k << " lda " << s.lda << " ldb " << s.ldb << " beta " << beta);
      CHECK(tn_matches(s.m, s.n, s.k, s.lda, s.ldb, beta));  // from outside a parallel region: all threads
      bool ok[2] = {false, false};
#if defined(_OPENMP)
#pragma omp parallel for num_threads(2)
#endif
      for (int t = 0; t < 2; ++t) ok[t] = tn_matches(s.m, s.n, s.k, s.lda, s.ldb, beta);  // each call on one thread
      CHECK(ok[0]);
      CHECK(ok[1]);
    }
  }
#if defined(ATTN_GEMM_DNNL)
  // The scratch rows: whole cache lines, longer than the rows, never a multiple of 64 floats.
  for (int n : {1, 16, 33, 48, 64, 112, 128, 500, 1024}) {
    const std::size_t l = attn::detail::dnnl_padded_ld(n);
    CHECK(l % 16 == 0);
    CHECK(l > std::size_t(n));
    CHECK(l % 64 != 0);
  }
#endif
}

TEST_CASE("cpu::gemm in float: every transposition pair, strided rows, beta 0 / 1 / -0.5, below and above the BLAS volume") {
  check_gemm<float>(1e-5);
}

TEST_CASE("cpu::gemm in double: every transposition pair, strided rows, beta 0 / 1 / -0.5, below and above the BLAS volume") {
  check_gemm<double>(1e-12);
}

#if defined(ATTN_BLAS_BLIS)
extern "C" long long bli_thread_get_num_threads(void);
static long long blas_threads() { return bli_thread_get_num_threads(); }
#elif defined(ATTN_BLAS_OPENBLAS)
extern "C" int openblas_get_num_threads(void);
static long long blas_threads() { return openblas_get_num_threads(); }
#endif

#if defined(ATTN_HAVE_BLAS) && defined(_OPENMP)
TEST_CASE("cpu::gemm gives the BLAS attn's thread count (cpu::set_threads) before each call") {
  const int before = attn::cpu::threads();
  const int n = 96;
  // double: the BLAS's in every configuration (with oneDNN, float goes there instead).
  const auto a = filled<double>(std::size_t(n) * n, 1);
  const auto b = filled<double>(std::size_t(n) * n, 2);
  std::vector<double> c(std::size_t(n) * n);
  for (int t : {1, 3, 2}) {
    attn::cpu::set_threads(t);
    attn::cpu::gemm<double>(Trans::no, Trans::no, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
    CHECK(blas_threads() == t);
  }
  attn::cpu::set_threads(before);
}
#endif

#if defined(ATTN_BLAS_BLIS)
TEST_CASE("BLIS sub-configuration: skx (0) on any AVX-512 CPU, haswell (3) at the avx2 level, unless the user set BLIS_ARCH_TYPE", "[blis_arch]") {
  using attn::detail::blis_arch_choice;
  using attn::Isa;
  CHECK(std::string(blis_arch_choice(nullptr, true, true, Isa::avx512)) == "0");
  CHECK(std::string(blis_arch_choice(nullptr, true, true, Isa::avx2)) == "3");   // ATTN_ISA=avx2: as an AVX2 machine
  CHECK(std::string(blis_arch_choice(nullptr, false, true, Isa::avx2)) == "3");
  CHECK(blis_arch_choice(nullptr, true, true, Isa::generic) == nullptr);
  CHECK(blis_arch_choice(nullptr, true, false, Isa::avx2) == nullptr);    // AVX2 Intel: BLIS's own choice
  CHECK(std::string(blis_arch_choice(nullptr, false, true, Isa::avx512)) == "0");  // AMD Zen 4/5: no AVX-512 configuration of their own in BLIS 0.9
  CHECK(blis_arch_choice(nullptr, false, false, Isa::avx2) == nullptr);             // Zen 1-3: BLIS's own zen configurations
  CHECK(blis_arch_choice("3", true, true, Isa::avx512) == nullptr);       // the user's value wins
  CHECK(blis_arch_choice("", true, true, Isa::avx512) == nullptr);
}
#endif

#if defined(ATTN_BLAS_BLIS) && defined(__x86_64__) && defined(__GNUC__)
// The environment as the process started, before any GEMM of this program ran.
static const char* const user_blis_arch = [] {
  const char* v = std::getenv("BLIS_ARCH_TYPE");
  return v ? strdup(v) : nullptr;
}();

TEST_CASE("BLIS runs the sub-configuration attn chose, or attn leaves the user's BLIS_ARCH_TYPE alone (run again with it set, and with ATTN_ISA=avx2)", "[blis_arch]") {
  const int n = 96;
  const auto a = filled<double>(std::size_t(n) * n, 1);  // double: the BLAS's in every configuration
  std::vector<double> c(std::size_t(n) * n);
  attn::cpu::gemm<double>(Trans::no, Trans::no, n, n, n, 1.0, a.data(), n, a.data(), n, 0.0, c.data(), n);
  const std::string running = attn::detail::bli_arch_string(attn::detail::bli_arch_query_id());
  const auto& f = attn::cpu::features();
  INFO("BLIS_ARCH_TYPE at start: " << (user_blis_arch ? user_blis_arch : "(unset)") << ", BLIS runs " << running);
  // A value the user set is BLIS's to read (0.9.0 reads a number, the arch_t id, so "3" is
  // haswell there and any name reads as 0, skx): attn must leave it untouched.
  if (user_blis_arch != nullptr) CHECK(std::string(std::getenv("BLIS_ARCH_TYPE")) == user_blis_arch);
  else if (f.avx512 && attn::cpu::isa() == attn::Isa::avx2) CHECK(running == "haswell");  // ATTN_ISA=avx2
  else if (f.avx512 && attn::cpu::isa() >= attn::Isa::avx512) CHECK(running == "skx");  // Intel and AMD
  else SUCCEED("BLIS's own choice on this CPU: " << running);
}
#endif

#if defined(ATTN_GEMM_DNNL)
TEST_CASE("oneDNN: float GEMMs from 64^3 on run dnnl_sgemm, named by cpu_gemm_description, its ISA following ATTN_ISA below avx512 unless the user set DNNL_MAX_CPU_ISA") {
  using attn::Isa;
  using attn::detail::dnnl_isa_choice;
  CHECK(std::string(dnnl_isa_choice(nullptr, Isa::avx2)) == "AVX2");
  CHECK(std::string(dnnl_isa_choice(nullptr, Isa::generic)) == "SSE41");
  CHECK(dnnl_isa_choice(nullptr, Isa::avx512) == nullptr);
  CHECK(dnnl_isa_choice(nullptr, Isa::avx512_bf16) == nullptr);
  CHECK(dnnl_isa_choice("AVX2", Isa::generic) == nullptr);  // the user's value wins
  const std::string d = attn::cpu_gemm_description();
  CHECK_THAT(d, Catch::StartsWith("oneDNN ") && Catch::Contains("(dnnl_sgemm) for float") && Catch::Contains("for double"));
}
#endif
