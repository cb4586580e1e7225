// SPDX-License-Identifier: MIT
// attn::cuda against the CPU backend on a GPU: GEMMs (every transpose, plain and strided batched,
// float and double) against attn::cpu::gemm, copies, fill, and map with attn::expr's functors.
// Its main (cuda_main.cpp) checks for a device first: without one the program prints
// "SKIPPED: no CUDA device (...)" and exits 77, which ctest reports as skipped.
#include <catch2/catch.hpp>

#include <attn/backend/cpu.hpp>  // Tensor::to<attn::cpu>
#include <attn/backend/cuda.hpp>
#include <attn/core/expr.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cpu_reference.hpp"

using attn::Trans;

namespace {

/// Device storage for the length of one test.
template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(std::size_t count) : p(attn::cuda::allocate<T>(count)), n(count) {}
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { attn::cuda::from_host(p, host.data(), n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { attn::cuda::deallocate(p, n); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    attn::cuda::to_host(h.data(), p, n);
    return h;
  }
};

template <class T>
std::vector<T> random_vector(std::size_t n, T lo, T hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<T> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// Every element within tol * (1 + |want|); two NaNs (untouched NaN padding) count as equal.
template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, double tol) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool ok = (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= tol * (1.0 + std::abs(w));
    if (!ok && bad++ == 0) first = i;
  }
  if (bad) {
    INFO(bad << " of " << got.size() << " elements differ; first at " << first << ": got " << got[first] << ", want "
              << want[first] << " (tol " << tol << ")");
    CHECK(bad == 0);
  } else {
    CHECK(bad == 0);
  }
}

const char* trans_name(Trans t) { return t == Trans::yes ? "T" : "N"; }

/// One GEMM problem with padded row strides: A, B and C are stored with `pad` extra columns, and
/// consecutive batch entries `gap` elements further apart than they need, so a wrong stride
/// writes where the CPU result keeps the original values.
struct GemmCase {
  Trans ta, tb;
  int m, n, k, pad, gap, batch;
  int a_rows() const { return ta == Trans::no ? m : k; }
  int a_cols() const { return ta == Trans::no ? k : m; }
  int b_rows() const { return tb == Trans::no ? k : n; }
  int b_cols() const { return tb == Trans::no ? n : k; }
  int lda() const { return a_cols() + pad; }
  int ldb() const { return b_cols() + pad; }
  int ldc() const { return n + pad; }
  long long sa() const { return static_cast<long long>(a_rows()) * lda() + gap; }
  long long sb() const { return static_cast<long long>(b_rows()) * ldb() + gap; }
  long long sc() const { return static_cast<long long>(m) * ldc() + gap; }
};

const std::vector<std::tuple<int, int, int>>& gemm_sizes() {
  static const std::vector<std::tuple<int, int, int>> s = {
      {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 128, 96}, {130, 3, 257}, {2, 300, 40}, {256, 384, 512}};
  return s;
}

template <class T>
void run_gemm_case(const GemmCase& g, T alpha, T beta, bool nan_c, unsigned seed) {
  INFO("op(A) " << trans_name(g.ta) << ", op(B) " << trans_name(g.tb) << ", m " << g.m << " n " << g.n << " k " << g.k
                << " batch " << g.batch << " alpha " << alpha << " beta " << beta);
  const bool batched = g.batch > 0;
  const int batch = batched ? g.batch : 1;
  const std::size_t na = static_cast<std::size_t>(g.sa()) * batch, nb = static_cast<std::size_t>(g.sb()) * batch,
                    nc = static_cast<std::size_t>(g.sc()) * batch;
  const auto a = random_vector<T>(na, T(-1), T(1), seed);
  const auto b = random_vector<T>(nb, T(-1), T(1), seed + 1);
  auto c = random_vector<T>(nc, T(-1), T(1), seed + 2);
  if (nan_c) c.assign(nc, std::numeric_limits<T>::quiet_NaN());

  DeviceBuffer<T> da(a), db(b), dc(c);
  auto want = c;
  if (batched) {
    attn_test::cpu_gemm_strided_batched(g.ta, g.tb, g.m, g.n, g.k, alpha, a.data(), g.lda(), g.sa(), b.data(), g.ldb(),
                                        g.sb(), beta, want.data(), g.ldc(), g.sc(), g.batch);
    attn::cuda::gemm_strided_batched<T>(g.ta, g.tb, g.m, g.n, g.k, alpha, da.p, g.lda(), g.sa(), db.p, g.ldb(), g.sb(),
                                        beta, dc.p, g.ldc(), g.sc(), g.batch);
  } else {
    attn_test::cpu_gemm(g.ta, g.tb, g.m, g.n, g.k, alpha, a.data(), g.lda(), b.data(), g.ldb(), beta, want.data(), g.ldc());
    attn::cuda::gemm<T>(g.ta, g.tb, g.m, g.n, g.k, alpha, da.p, g.lda(), db.p, g.ldb(), beta, dc.p, g.ldc());
  }
  // Rounding grows with the length k of each dot product; a wrong operand order is off by O(1).
  const double eps = std::numeric_limits<T>::epsilon();
  check_close(dc.host(), want, 4.0 * eps * (g.k + 2));
}

}  // namespace

TEMPLATE_TEST_CASE("cuda::gemm matches cpu::gemm for every transpose pair", "[cuda][gemm]", float, double) {
  unsigned seed = 1;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      for (auto [m, n, k] : gemm_sizes()) {
        run_gemm_case<TestType>({ta, tb, m, n, k, 3, 0, 0}, TestType(1.25), TestType(0.5), false, seed += 3);
        run_gemm_case<TestType>({ta, tb, m, n, k, 0, 0, 0}, TestType(-0.75), TestType(0), true, seed += 3);
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda::gemm_strided_batched matches cpu::gemm_strided_batched", "[cuda][gemm]", float, double) {
  unsigned seed = 100;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      for (auto [m, n, k] : gemm_sizes()) {
        run_gemm_case<TestType>({ta, tb, m, n, k, 2, 5, 3}, TestType(0.5), TestType(-1.5), false, seed += 3);
        run_gemm_case<TestType>({ta, tb, m, n, k, 0, 0, 4}, TestType(1), TestType(0), true, seed += 3);
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda::gemm edge sizes follow cpu::gemm", "[cuda][gemm]", float, double) {
  using T = TestType;
  SECTION("k = 0 scales C by beta; beta = 0 overwrites NaN") {
    for (T beta : {T(0), T(1), T(2.5)}) {
      run_gemm_case<T>({Trans::no, Trans::no, 9, 11, 0, 2, 0, 0}, T(1), beta, false, 7);
      run_gemm_case<T>({Trans::no, Trans::yes, 9, 11, 0, 2, 3, 3}, T(1), beta, false, 8);
    }
    run_gemm_case<T>({Trans::yes, Trans::no, 4, 6, 0, 1, 0, 0}, T(1), T(0), true, 9);
  }
  SECTION("m = 0, n = 0 or batch = 0 leave C alone") {
    std::vector<T> c(16, T(3));
    DeviceBuffer<T> dc(c);
    attn::cuda::gemm<T>(Trans::no, Trans::no, 0, 4, 4, T(1), nullptr, 4, nullptr, 4, T(0), dc.p, 4);
    attn::cuda::gemm<T>(Trans::no, Trans::no, 4, 0, 4, T(1), nullptr, 4, nullptr, 4, T(0), dc.p, 4);
    attn::cuda::gemm_strided_batched<T>(Trans::no, Trans::no, 4, 4, 4, T(1), nullptr, 4, 16, nullptr, 4, 16, T(0), dc.p,
                                        4, 16, 0);
    CHECK(dc.host() == c);
  }
}

TEST_CASE("cuda::gemm rejects row strides shorter than a row", "[cuda][gemm][errors]") {
  DeviceBuffer<float> a(64), b(64), c(64);
  CHECK_THROWS_AS(attn::cuda::gemm<float>(Trans::no, Trans::no, 4, 4, 8, 1.f, a.p, 4, b.p, 4, 0.f, c.p, 4),
                  attn::ArgumentError);
  CHECK_THROWS_WITH(attn::cuda::gemm<float>(Trans::no, Trans::yes, 4, 4, 4, 1.f, a.p, 4, b.p, 3, 0.f, c.p, 4),
                    Catch::Contains("ldb = 3"));
  CHECK_THROWS_AS(attn::cuda::gemm_strided_batched<float>(Trans::no, Trans::no, 4, 4, 4, 1.f, a.p, 4, 16, b.p, 4, 16,
                                                          0.f, c.p, 2, 16, 2),
                  attn::ArgumentError);
  attn::cuda::synchronize();
}

TEST_CASE("cuda: each thread gets its own cuBLAS handle on the shared stream", "[cuda][gemm]") {
  const int m = 48, n = 40, k = 56;
  std::vector<std::vector<float>> got(2), want(2);
  auto work = [&](int t) {
    const auto a = random_vector<float>(m * k, -1.f, 1.f, 500 + t), b = random_vector<float>(k * n, -1.f, 1.f, 600 + t);
    std::vector<float> c(m * n, 0.f);
    DeviceBuffer<float> da(a), db(b), dc(c);
    for (int rep = 0; rep < 20; ++rep) {
      attn::cuda::gemm<float>(Trans::no, Trans::no, m, n, k, 1.f, da.p, k, db.p, n, 1.f, dc.p, n);
      attn_test::cpu_gemm(Trans::no, Trans::no, m, n, k, 1.f, a.data(), k, b.data(), n, 1.f, c.data(), n);
    }
    got[t] = dc.host();
    want[t] = c;
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  for (int t = 0; t < 2; ++t) check_close(got[t], want[t], 1e-4);
}

TEMPLATE_TEST_CASE("cuda copies round-trip through the host", "[cuda][memory]", float, double, int, std::int64_t,
                   std::uint8_t) {
  using T = TestType;
  for (std::size_t n : {std::size_t(1), std::size_t(255), std::size_t(1000003)}) {
    std::vector<T> h(n);
    std::mt19937 gen(static_cast<unsigned>(n));
    for (auto& x : h) x = static_cast<T>(gen() % 251);
    DeviceBuffer<T> a(h), b(n);
    attn::cuda::fill(b.p, n, T(9));
    attn::cuda::copy(b.p, a.p, n);
    CHECK(b.host() == h);
    if (n > 20) {
      // A copy between interior ranges moves only those elements.
      DeviceBuffer<T> c(n);
      attn::cuda::fill(c.p, n, T(1));
      attn::cuda::copy(c.p + 5, a.p + 10, n - 20);
      const auto hc = c.host();
      std::vector<T> want(n, T(1));
      std::copy(h.begin() + 10, h.end() - 10, want.begin() + 5);
      CHECK(hc == want);
    }
  }
}

TEMPLATE_TEST_CASE("cuda::fill writes exactly [p, p + n)", "[cuda][memory]", float, double, int, std::uint8_t) {
  using T = TestType;
  const std::size_t n = 1000003;  // not a multiple of the block size
  DeviceBuffer<T> a(n);
  attn::cuda::fill(a.p, n, T(7));
  CHECK(a.host() == std::vector<T>(n, T(7)));
  attn::cuda::fill(a.p + 3, n - 6, T(0));  // the memset path
  std::vector<T> want(n, T(0));
  for (std::size_t i : {std::size_t(0), std::size_t(1), std::size_t(2), n - 3, n - 2, n - 1}) want[i] = T(7);
  CHECK(a.host() == want);
  attn::cuda::fill(a.p + 1, 1, T(5));
  want[1] = T(5);
  CHECK(a.host() == want);
}

TEST_CASE("cuda::allocate reports failures as attn::Error and stays usable", "[cuda][memory][errors]") {
  const auto before = attn::cuda::allocations();
  { DeviceBuffer<float> a(10); }
  CHECK(attn::cuda::allocations() == before + 1);
  // 512 GiB: more than any current GPU has.
  CHECK_THROWS_WITH(attn::cuda::allocate<float>(std::size_t(1) << 37), Catch::Contains("cuda::allocate") && Catch::Contains("bytes"));
  CHECK_THROWS_AS(attn::cuda::allocate<float>(std::size_t(1) << 39), attn::Error);
  DeviceBuffer<float> b(std::vector<float>{1.f, 2.f, 3.f});
  CHECK(b.host() == std::vector<float>{1.f, 2.f, 3.f});
  attn::cuda::release_cached_memory();
}

TEST_CASE("Tensor works on the cuda backend", "[cuda][tensor]") {
  using X = attn::Tensor<float, attn::Shape<attn::dyn, 3>, attn::cuda>;
  auto x = X::from({2, 3}, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  auto y = x.clone();
  x.fill(0.f);
  CHECK(y.to_vector() == std::vector<float>{1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  CHECK(x.to_vector() == std::vector<float>(6, 0.f));
  CHECK(X::full({4, 3}, 2.5f).to_vector() == std::vector<float>(12, 2.5f));
}

TEST_CASE("Tensor::to moves a tensor between the host and the device", "[cuda][tensor]") {
  auto h = attn::Tensor<std::int32_t, attn::Shape<attn::dyn, 2>>::from({3, 2}, {1, 2, 3, 4, 5, 6});
  auto d = h.to<attn::cuda>();
  static_assert(std::is_same_v<decltype(d), attn::Tensor<std::int32_t, attn::Shape<attn::dyn, 2>, attn::cuda>>);
  CHECK(d.dims() == h.dims());
  CHECK(d.to_vector() == h.to_vector());
  CHECK(d.to<attn::cuda>().data() == d.data());  // the same tensor
  h.fill(0);                                      // a copy, not a view
  auto back = d.to<attn::cpu>();
  CHECK(back.to_vector() == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  CHECK(back.data() != h.data());
  CHECK(attn::Tensor<float, attn::AnyShape>(attn::Dims{0}).to<attn::cuda>().numel() == 0);
}

namespace {

/// Runs cuda::map(f) on device copies of the inputs and f itself on the host, element by element.
template <class T, class F, class... V>
void check_map(F f, double tol, const V&... in) {
  const std::size_t n = std::get<0>(std::tie(in...)).size();
  std::vector<T> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<T>(f(in[i]...));
  std::tuple<DeviceBuffer<typename V::value_type>...> dev(in...);
  DeviceBuffer<T> out(n);
  std::apply([&](auto&... d) { attn::cuda::map(n, out.p, f, d.p...); }, dev);
  check_close(out.host(), want, tol);
}

template <class T>
double map_tol() {
  return std::is_same_v<T, float> ? 4e-6 : 1e-13;  // a few ulps: device and host libm differ slightly
}

}  // namespace

TEMPLATE_TEST_CASE("cuda::map with attn::expr functors matches the host", "[cuda][map]", float, double) {
  using T = TestType;
  namespace ex = attn::expr;
  const std::size_t n = 100003;
  auto x = random_vector<T>(n, T(-10), T(10), 11);
  x[0] = T(0), x[1] = T(-80), x[2] = T(80), x[3] = T(-0.5);
  auto y = random_vector<T>(n, T(-3), T(3), 12);
  auto pos = random_vector<T>(n, T(0.01), T(50), 13);
  const double tol = map_tol<T>();
  SECTION("unary") {
    check_map<T>(ex::Exp{}, tol, y);
    check_map<T>(ex::Log{}, tol, pos);
    check_map<T>(ex::Sqrt{}, tol, pos);
    check_map<T>(ex::Tanh{}, tol, x);
    check_map<T>(ex::Sigmoid{}, tol, x);
    check_map<T>(ex::Relu{}, 0.0, x);
    check_map<T>(ex::Gelu{}, tol, x);
    check_map<T>(ex::Neg{}, 0.0, x);
    check_map<T>(ex::Abs{}, 0.0, x);
  }
  SECTION("binary") {
    check_map<T>(ex::Add{}, tol, x, y);
    check_map<T>(ex::Sub{}, tol, x, y);
    check_map<T>(ex::Mul{}, tol, x, y);
    check_map<T>(ex::Div{}, tol, x, pos);
    check_map<T>(ex::Max{}, 0.0, x, y);
    check_map<T>(ex::Min{}, 0.0, x, y);
  }
  SECTION("an extended lambda over three inputs of two types") {
    std::vector<int> mask(n);
    for (std::size_t i = 0; i < n; ++i) mask[i] = static_cast<int>(i % 3 != 0);
    check_map<T>([] __host__ __device__(T a, T b, int keep) { return keep ? a * b + T(1) : T(0); }, tol, x, y, mask);
  }
  SECTION("in place: out aliases an input") {
    DeviceBuffer<T> d(x);
    attn::cuda::map(n, d.p, ex::Neg{}, d.p);
    std::vector<T> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = -x[i];
    check_close(d.host(), want, 0.0);
  }
}

TEST_CASE("cuda::map on integers and on empty arrays", "[cuda][map]") {
  std::vector<int> a(1000), b(1000);
  for (int i = 0; i < 1000; ++i) a[i] = i - 500, b[i] = 3 * i;
  check_map<int>(attn::expr::Add{}, 0.0, a, b);
  check_map<int>(attn::expr::Max{}, 0.0, a, b);
  attn::cuda::map(0, static_cast<int*>(nullptr), attn::expr::Neg{}, static_cast<const int*>(nullptr));
  attn::cuda::synchronize();
}
