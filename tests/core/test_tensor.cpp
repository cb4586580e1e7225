// SPDX-License-Identifier: MIT
// Tensor construction, views, static/dynamic shape checks and lazy expressions.
#include <catch2/catch.hpp>

#include <attn/attn.hpp>

#include <memory>

using attn::dyn;
using attn::Dims;
using attn::Shape;

TEST_CASE("tensor: static extents are checked at construction") {
  using S = Shape<dyn, 3>;
  attn::Tensor<float, S> t({2, 3});
  CHECK(t.numel() == 6);
  CHECK_THROWS_AS((attn::Tensor<float, S>({2, 4})), attn::ShapeError);
  CHECK_THROWS_WITH((attn::Tensor<float, S>({2, 4})), Catch::Contains("(2, 4)") && Catch::Contains("(dyn, 3)"));
}

TEST_CASE("tensor: from, clone and element access") {
  auto t = attn::Tensor<float, Shape<2, 3>>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(t(1, 2) == 6.0f);
  auto c = t.clone();
  c(0, 0) = 10;
  CHECK(t(0, 0) == 1.0f);
  CHECK(c(0, 0) == 10.0f);
  auto r = t.reshape<Shape<3, 2>>({3, 2});
  CHECK(r(2, 1) == 6.0f);
  CHECK_THROWS_AS(t.reshape({4, 2}), attn::ShapeError);
}

TEST_CASE("tensor: to<B>() on its own backend is the same tensor, as torch's .to") {
  auto t = attn::Tensor<float, Shape<attn::dyn, 3>>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  auto u = t.to<attn::cpu>();
  static_assert(std::is_same_v<decltype(u), decltype(t)>);
  CHECK(u.data() == t.data());
  CHECK(u.dims() == t.dims());
  auto e = attn::Tensor<std::int64_t, attn::AnyShape>(attn::Dims{0, 4}).to<attn::cpu>();
  CHECK(e.numel() == 0);
}

TEST_CASE("tensor: host copies and ranged fill stay inside the tensor") {
  auto t = attn::Tensor<float, Shape<2, 3>>::zeros({2, 3});
  const std::vector<float> in{7, 8};
  t.copy_from_host(in, 4);
  t.fill(5.0f, 1, 2);
  CHECK(t.to_vector() == std::vector<float>{0, 5, 5, 0, 7, 8});
  std::vector<float> out(3);
  t.copy_to_host(out, 2);
  CHECK(out == std::vector<float>{5, 0, 7});
  CHECK_THROWS_WITH(t.copy_from_host(in, 5), Catch::Contains("copy_from_host") && Catch::Contains("[5, 5 + 2)") &&
                                                Catch::Contains("(2, 3)"));
  CHECK_THROWS_AS(t.copy_to_host(out, 4), attn::ShapeError);
  CHECK_THROWS_AS(t.fill(1.0f, 7, 0), attn::ShapeError);
  CHECK_THROWS_AS(t.fill(1.0f, 1, std::size_t(-1)), attn::ShapeError);  // no wrap-around
  CHECK(t.to_vector() == std::vector<float>{0, 5, 5, 0, 7, 8});          // nothing written by a rejected call
}

TEST_CASE("expressions: broadcasting and one-pass evaluation") {
  auto a = attn::Tensor<double, Shape<2, 3>>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = attn::Tensor<double, Shape<3>>::from({3}, {10, 20, 30});
  attn::Tensor<double, Shape<2, 3>> out({2, 3});
  out = a * b + 1.0;
  CHECK(out(0, 0) == 11.0);
  CHECK(out(1, 2) == 181.0);
  auto col = attn::Tensor<double, Shape<2, 1>>::from({2, 1}, {1, -1});
  attn::Tensor<double, Shape<2, 3>> o2 = a * col - attn::exp(a * 0.0);
  CHECK(o2(1, 0) == -5.0);
  CHECK(o2(0, 2) == 2.0);
}

TEST_CASE("expressions: assignment allocates nothing") {
  auto a = attn::Tensor<float>::full({64, 128}, 0.5f);
  auto b = attn::Tensor<float>::full({128}, 2.0f);
  auto c = attn::Tensor<float>::full({64, 1}, 1.0f);
  attn::Tensor<float> out({64, 128});
  const auto before = attn::cpu::allocations();
  out = attn::tanh(a * b + c) / (c + 1.0f) - attn::sigmoid(a) * attn::exp(-b);
  out += a;
  const auto after = attn::cpu::allocations();
  CHECK(after == before);
  CHECK(out(3, 7) == Approx(std::tanh(2.0f) / 2 - 1 / (1 + std::exp(-0.5f)) * std::exp(-2.0f) + 0.5f));
}

TEST_CASE("expressions: a dynamic broadcast mismatch throws ShapeError naming the shapes") {
  auto a = attn::Tensor<float>::full({2, 3}, 1.0f);
  auto b = attn::Tensor<float>::full({4}, 1.0f);
  attn::Tensor<float> out({2, 3});
  CHECK_THROWS_WITH(out = a + b, Catch::Contains("(2, 3)") && Catch::Contains("(4)"));
}

TEST_CASE("expressions: an operand with more elements than the destination, or an unallocated destination, throws") {
  using attn::Tensor;
  auto y = Tensor<float>::zeros({4});
  const auto x = Tensor<float>::full({3, 4}, 1.0f);
  CHECK_THROWS_AS(y += x, attn::ShapeError);  // read its row 0 alone before
  CHECK_THROWS_WITH(y = x * 2.0f, Catch::Contains("operand has more axes than the destination"));
  CHECK(y(0) == 0.0f);
  y += Tensor<float>::full({1, 4}, 1.0f);  // leading extents of 1 broadcast away
  CHECK(y(3) == 1.0f);
  Tensor<float> unallocated;
  CHECK_THROWS_AS(unallocated += x, attn::ShapeError);
  auto none = Tensor<float>::zeros({0});
  none += Tensor<float>::zeros({0});  // a zero-size tensor is allocated enough
  CHECK(none.numel() == 0);
}

TEST_CASE("expressions: an operand that overlaps the destination other than element by element is read before any write") {
  using attn::Tensor;
  using CView = attn::TensorView<const float, attn::AnyShape, attn::cpu>;
  // In place, one pass would read a(1, 0) after writing it from a(0, 1).
  auto a = Tensor<float>::from({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  a = a.view().transpose(0, 1) * 1.0f;
  CHECK(a.to_vector() == std::vector<float>{1, 4, 7, 2, 5, 8, 3, 6, 9});
  // Each row less the first: the broadcast row is the destination's own.
  auto b = Tensor<float>::from({3, 2}, {1, 2, 3, 4, 5, 6});
  b -= CView(b.data(), Dims{1, 2});
  CHECK(b.to_vector() == std::vector<float>{0, 0, 2, 2, 4, 4});
  // A shift within one buffer: x[1:] = x[:-1].
  auto x = Tensor<float>::from({4}, {1, 2, 3, 4});
  attn::expr::assign(attn::TensorView<float, attn::AnyShape, attn::cpu>(x.data() + 1, Dims{3}),
                     attn::expr::as_expr(CView(x.data(), Dims{3})));
  CHECK(x.to_vector() == std::vector<float>{1, 1, 2, 3});
  // Element by element in place, or another part of the same buffer: one pass, no new tensor.
  auto c = Tensor<float>::from({2, 2}, {1, 2, 3, 4});
  const auto before = attn::cpu::allocations();
  c = c * 2.0f + c;
  c += c;
  attn::expr::assign(attn::TensorView<float, attn::AnyShape, attn::cpu>(c.data() + 2, Dims{2}),
                     attn::expr::as_expr(CView(c.data(), Dims{2})) + 1.0f);
  CHECK(attn::cpu::allocations() == before);
  CHECK(c.to_vector() == std::vector<float>{6, 12, 7, 13});
}

TEST_CASE("views: transpose without copying") {
  auto a = attn::Tensor<float, Shape<2, 3>>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  auto v = a.view().transpose(0, 1);
  CHECK(v.dims() == Dims{3, 2});
  CHECK(v(2, 1) == 6.0f);
  attn::Tensor<float> t({3, 2});
  t = v * 1.0f;
  CHECK(t(0, 1) == 4.0f);
}

TEST_CASE("rng: seeded and portable") {
  attn::Rng a(7), b(7);
  for (int i = 0; i < 10; ++i) CHECK(a.next() == b.next());
  // xoshiro256** seeded through splitmix64: the same bits everywhere.
  attn::Rng c(42);
  for (std::uint64_t want : {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull, 0xecb8ad4703b360a1ull})
    CHECK(c.next() == want);
  // A scaled uniform rounds once (lo + (hi - lo) u, fused) with or without FMA instructions: the
  // second and third draws here differ in the last bit when rounded twice.
  attn::Rng d(42);
  const double lo = -0.0625 * 3.3, hi = 0.0625 * 3.3;
  (void)d.uniform(lo, hi);
  CHECK(d.uniform(lo, hi) == -0x1.98f32f1193831p-5);
  CHECK(d.uniform(lo, hi) == 0x1.30338b7eb14b2p-4);
  attn::Rng r(1);
  double s = 0, s2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    s += x;
    s2 += x * x;
  }
  CHECK(std::abs(s / n) < 0.03);
  CHECK(std::abs(s2 / n - 1.0) < 0.05);
}

TEST_CASE("reductions") {
  auto a = attn::Tensor<float, Shape<2, 3>>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(attn::sum(a) == 21.0f);
  auto c = attn::sum_axis(a, 0);
  CHECK(c.dims() == Dims{3});
  CHECK(c(2) == 9.0f);
  CHECK(attn::argmax_rows(a) == std::vector<std::size_t>{2, 2});
}

TEST_CASE("dispatch: a run-time value selects a compile-time instantiation, others list the supported values") {
  auto twice = [&]<std::size_t H>() { return int(H * 2); };
  CHECK(attn::dispatch<1, 2, 4, 8, 16>(8, "--heads", twice) == 16);
  CHECK_THROWS_WITH((attn::dispatch<1, 2, 4, 8, 16>(3, "--heads", twice)),
                    Catch::Contains("--heads: unsupported value 3") && Catch::Contains("supported: 1, 2, 4, 8, 16"));
}

namespace {
struct Made {
  virtual ~Made() = default;
  virtual std::size_t value() const = 0;
};
template <std::size_t V, class Tag>
struct MadeOf final : Made {
  std::size_t value() const override { return V; }
};
// A factory of type-erased instantiations, as the example programs' make_encoder: dispatch called
// from a function template with a move-only result (Clang -Werror once rejected dispatch there,
// -Wunused-value on how it formed the result type; the sanitizer build compiles this with Clang).
template <class Tag>
std::unique_ptr<Made> make_made(std::size_t v) {
  return attn::dispatch<1, 2, 4>(v, "value", [&]<std::size_t V>() -> std::unique_ptr<Made> { return std::make_unique<MadeOf<V, Tag>>(); });
}
}  // namespace

TEST_CASE("dispatch: from a function template, with a move-only result") {
  CHECK(make_made<int>(4)->value() == 4);
  CHECK(make_made<float>(1)->value() == 1);
  CHECK_THROWS_WITH(make_made<int>(8), Catch::Contains("value: unsupported value 8") && Catch::Contains("supported: 1, 2, 4"));
}

TEST_CASE("cpu::set_threads: ATTN_NUM_THREADS must be a positive integer") {
  ::setenv("ATTN_NUM_THREADS", "abc", 1);
  CHECK_THROWS_WITH(attn::cpu::set_threads(0), Catch::Matchers::Contains("ATTN_NUM_THREADS: 'abc'"));
  ::setenv("ATTN_NUM_THREADS", "0", 1);
  CHECK_THROWS_AS(attn::cpu::set_threads(0), attn::ArgumentError);
  ::setenv("ATTN_NUM_THREADS", "1", 1);
  attn::cpu::set_threads(0);
  CHECK(attn::cpu::threads() == 1);
  ::unsetenv("ATTN_NUM_THREADS");
  attn::cpu::set_threads(0);
}
