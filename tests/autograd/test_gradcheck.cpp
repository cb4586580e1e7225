// SPDX-License-Identifier: MIT
// Every differentiable op: backward against central finite differences in double precision, on
// random inputs (never zeros or ones), including broadcasting cases.
#include "../gradcheck_util.hpp"
#include <catch2/catch.hpp>

#include <utility>

#include <attn/attn.hpp>

using attn::Dims;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;

using testutil::check_gradients;

namespace {
attn::Rng rng(20261129);
Tensor<double> rnd(Dims d, double lo = -1, double hi = 1) { return attn::random_tensor(rng, d, lo, hi); }

}  // namespace

TEST_CASE("gradcheck: add, sub, mul, div with broadcasting") {
  check_gradients("add", [](Tape& t, V& x) { return attn::add(t, x[0], x[1]); }, {rnd({3, 4}), rnd({4})});
  check_gradients("sub", [](Tape& t, V& x) { return attn::sub(t, x[0], x[1]); }, {rnd({3, 1}), rnd({2, 1, 4})});
  check_gradients("mul", [](Tape& t, V& x) { return attn::mul(t, x[0], x[1]); }, {rnd({2, 3, 4}), rnd({3, 1})});
  check_gradients("div", [](Tape& t, V& x) { return attn::div(t, x[0], x[1]); }, {rnd({3, 4}), rnd({3, 4}, 0.5, 2)});
  check_gradients("div broadcast", [](Tape& t, V& x) { return attn::div(t, x[0], x[1]); }, {rnd({3, 4}), rnd({1, 4}, -2, -0.5)});
  check_gradients("operators", [](Tape& t, V& x) { return attn::tanh(t, x[0]) * x[1] + attn::scale(t, x[0], 1 / 3.0) - 1.5; }, {rnd({2, 5}), rnd({5})});
  check_gradients("same input twice", [](Tape& t, V& x) { return attn::mul(t, x[0], x[0]); }, {rnd({4})});
}

TEST_CASE("gradcheck: unary functions") {
  check_gradients("exp", [](Tape& t, V& x) { return attn::exp(t, x[0]); }, {rnd({3, 4})});
  check_gradients("log", [](Tape& t, V& x) { return attn::log(t, x[0]); }, {rnd({3, 4}, 0.2, 3)});
  check_gradients("tanh", [](Tape& t, V& x) { return attn::tanh(t, x[0]); }, {rnd({3, 4}, -3, 3)});
  check_gradients("sigmoid", [](Tape& t, V& x) { return attn::sigmoid(t, x[0]); }, {rnd({3, 4}, -5, 5)});
  check_gradients("relu", [](Tape& t, V& x) { return attn::relu(t, x[0]); }, {rnd({3, 4})});
  check_gradients("gelu", [](Tape& t, V& x) { return attn::gelu(t, x[0]); }, {rnd({3, 4}, -3, 3)});
  check_gradients("neg/scale", [](Tape& t, V& x) { return attn::scale(t, attn::neg(t, x[0]), 2.5); }, {rnd({5})});
  check_gradients("sqrt", [](Tape& t, V& x) { return attn::sqrt(t, x[0]); }, {rnd({3, 4}, 0.2, 3)});
  check_gradients("abs", [](Tape& t, V& x) { return attn::mul(t, attn::abs(t, x[0]), attn::abs(t, x[1])); },
                  {rnd({3, 4}, 0.1, 2), rnd({3, 4}, -2, -0.1)});
  check_gradients("log_sigmoid", [](Tape& t, V& x) { return attn::log_sigmoid(t, x[0]); }, {rnd({3, 4}, -6, 6)});
}

TEST_CASE("gradcheck: activations away from their kinks") {
  // Smooth ones anywhere; piecewise ones on each side of each kink (inputs at least 0.05 from it).
  check_gradients("gelu_tanh", [](Tape& t, V& x) { return attn::gelu_tanh(t, x[0]); }, {rnd({3, 4}, -4, 4)});
  check_gradients("silu", [](Tape& t, V& x) { return attn::silu(t, x[0]); }, {rnd({3, 4}, -6, 6)});
  check_gradients("mish", [](Tape& t, V& x) { return attn::mish(t, x[0]); }, {rnd({3, 4}, -5, 5)});
  check_gradients("softplus", [](Tape& t, V& x) { return attn::softplus(t, x[0]); }, {rnd({3, 4}, -6, 6)});
  for (auto [lo, hi] : {std::pair{-3.0, 2.45}, std::pair{2.55, 4.0}})  // beta x on each side of the threshold
    check_gradients("softplus beta 2 threshold 5", [](Tape& t, V& x) { return attn::softplus(t, x[0], 2.0, 5.0); }, {rnd({3, 4}, lo, hi)});
  for (double lo : {-3.0, 0.05}) {
    const double hi = lo < 0 ? -0.05 : 3.0;
    check_gradients("leaky_relu", [](Tape& t, V& x) { return attn::leaky_relu(t, x[0], 0.2); }, {rnd({3, 4}, lo, hi)});
    check_gradients("elu", [](Tape& t, V& x) { return attn::elu(t, x[0], 0.7); }, {rnd({3, 4}, lo, hi)});
    check_gradients("selu", [](Tape& t, V& x) { return attn::selu(t, x[0]); }, {rnd({3, 4}, lo, hi)});
  }
  for (auto [lo, hi] : {std::pair{-3.0, -0.55}, std::pair{-0.45, 1.95}, std::pair{2.05, 4.0}})
    check_gradients("hardtanh", [](Tape& t, V& x) { return attn::hardtanh(t, x[0], -0.5, 2.0); }, {rnd({4}, lo, hi)});
  for (auto [lo, hi] : {std::pair{-2.0, -0.05}, std::pair{0.05, 5.95}, std::pair{6.05, 8.0}})
    check_gradients("relu6", [](Tape& t, V& x) { return attn::relu6(t, x[0]); }, {rnd({4}, lo, hi)});
}

TEST_CASE("gradcheck: matmul, batched matmul and matmul_nt") {
  check_gradients("matmul 2d", [](Tape& t, V& x) { return attn::matmul(t, x[0], x[1]); }, {rnd({3, 4}), rnd({4, 5})});
  check_gradients("matmul folded batch", [](Tape& t, V& x) { return attn::matmul(t, x[0], x[1]); }, {rnd({2, 3, 4}), rnd({4, 2})});
  check_gradients("matmul batched", [](Tape& t, V& x) { return attn::matmul(t, x[0], x[1]); }, {rnd({2, 2, 3, 4}), rnd({2, 2, 4, 3})});
  check_gradients("matmul_nt", [](Tape& t, V& x) { return attn::matmul_nt(t, x[0], x[1]); }, {rnd({2, 3, 4}), rnd({5, 4})});
  check_gradients("matmul_nt batched", [](Tape& t, V& x) { return attn::matmul_nt(t, x[0], x[1]); }, {rnd({2, 3, 4}), rnd({2, 5, 4})});
}

TEST_CASE("gradcheck: reshape, permute, transpose, slice, concat") {
  check_gradients("reshape", [](Tape& t, V& x) { return attn::mul(t, attn::reshape(t, x[0], {4, 3}), x[1]); }, {rnd({2, 6}), rnd({4, 3})});
  check_gradients("permute", [](Tape& t, V& x) { return attn::permute(t, x[0], {2, 0, 1}); }, {rnd({2, 3, 4})});
  check_gradients("permute static", [](Tape& t, V& x) { return attn::permute<1, 0, 2>(t, x[0]); }, {rnd({2, 3, 4})});
  check_gradients("transpose", [](Tape& t, V& x) { return attn::transpose<0, 2>(t, x[0]); }, {rnd({2, 3, 4})});
  check_gradients("slice", [](Tape& t, V& x) { return attn::slice(t, x[0], 1, 1, 2); }, {rnd({2, 4, 3})});
  check_gradients("concat", [](Tape& t, V& x) { return attn::concat(t, V{x[0], x[1], x[0]}, 1); }, {rnd({2, 3}), rnd({2, 2})});
}

TEST_CASE("gradcheck: sum and mean") {
  check_gradients("sum all", [](Tape& t, V& x) { return attn::sum(t, x[0]); }, {rnd({3, 4})});
  check_gradients("mean all", [](Tape& t, V& x) { return attn::mean(t, x[0]); }, {rnd({3, 4})});
  check_gradients("sum axis", [](Tape& t, V& x) { return attn::sum(t, x[0], 1); }, {rnd({2, 3, 4})});
  check_gradients("sum axis keepdim", [](Tape& t, V& x) { return attn::sum(t, x[0], 0, true); }, {rnd({2, 3, 4})});
  check_gradients("mean axis", [](Tape& t, V& x) { return attn::mean(t, x[0], 2); }, {rnd({2, 3, 4})});
  check_gradients("mean static axis", [](Tape& t, V& x) { return attn::mean<1>(t, x[0]); }, {rnd({2, 3, 4})});
}

TEST_CASE("gradcheck: softmax, log_softmax, masked_fill") {
  check_gradients("softmax", [](Tape& t, V& x) { return attn::softmax(t, x[0]); }, {rnd({3, 5}, -2, 2)});
  check_gradients("log_softmax", [](Tape& t, V& x) { return attn::log_softmax(t, x[0]); }, {rnd({3, 5}, -2, 2)});
  auto mask = Tensor<double>::from({2, 1, 4}, {0, 0, 1, 1, 0, 1, 0, 1});
  check_gradients("masked_fill + softmax",
        [&](Tape& t, V& x) { return attn::softmax(t, attn::masked_fill(t, x[0], mask, -1e9)); }, {rnd({2, 3, 4}, -2, 2)});
  // Alone, times another input: the filled positions take no gradient (softmax above would hide
  // a gradient that leaked through them).
  check_gradients("masked_fill alone",
        [&](Tape& t, V& x) { return attn::mul(t, attn::masked_fill(t, x[0], mask, 0.7), x[1]); }, {rnd({2, 3, 4}), rnd({2, 3, 4})});
}

TEST_CASE("gradcheck: embedding gathers rows and scatters only into used rows") {
  auto ids = Tensor<std::int64_t>::from({2, 3}, {1, 3, 1, 0, 4, 3});
  check_gradients("embedding", [&](Tape& t, V& x) { return attn::embedding(t, x[0], ids); }, {rnd({6, 4})});
  // With padding_idx the padding row takes no gradient by definition (torch's rule), whatever its
  // values: it is a constant here, above the checked rows.
  check_gradients("embedding, padding row", [&](Tape& t, V& x) {
    const attn::Var<double> pad(Tensor<double>::zeros({1, 4}), false);
    return attn::embedding(t, attn::concat(t, V{pad, x[0]}, 0), ids, 0);
  }, {rnd({5, 4})});
  // A row-sparse table (nn::Embedding{.sparse = true}): the compact gradient of the rows used.
  check_gradients("embedding, row-sparse gradient", [&](Tape& t, V& x) {
    x[0].data()->sparse_rows = true;
    return attn::embedding(t, x[0], ids);
  }, {rnd({6, 4})});
  Tape t;
  attn::Var<double> table(rnd({6, 4}), true);
  auto e = attn::embedding(t, table, ids, 0);
  t.backward(attn::sum(t, e));
  auto g = table.grad();
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK(g(0, j) == 0.0);  // padding row
    CHECK(g(1, j) == 2.0);  // used twice
    CHECK(g(2, j) == 0.0);  // never used
    CHECK(g(5, j) == 0.0);
  }
  auto bad = Tensor<std::int64_t>::from({1}, {6});
  CHECK_THROWS_AS(attn::embedding(t, table, bad), attn::ShapeError);
}

TEST_CASE("gradcheck: cross-entropy with ignore_index, label smoothing and class weights") {
  auto tg = Tensor<std::int64_t>::from({5}, {2, -100, 0, 4, 1});
  check_gradients("cross_entropy", [&](Tape& t, V& x) { return attn::cross_entropy(t, x[0], tg); }, {rnd({5, 5}, -2, 2)});
  check_gradients("cross_entropy smoothing",
        [&](Tape& t, V& x) { return attn::cross_entropy(t, x[0], tg, {.label_smoothing = 0.1}); }, {rnd({5, 5}, -2, 2)});
  // Another ignore_index: class 4's row is ignored, -100 is then an ordinary (out-of-range) value
  // and so is not used here.
  auto tg4 = Tensor<std::int64_t>::from({5}, {2, 4, 0, 4, 1});
  check_gradients("cross_entropy ignore_index 4",
        [&](Tape& t, V& x) { return attn::cross_entropy(t, x[0], tg4, {.ignore_index = 4, .label_smoothing = 0.1}); },
        {rnd({5, 5}, -2, 2)});
  const std::vector<double> w{0.5, 2.0, 1.25, 0.0, 3.0};
  check_gradients("cross_entropy weighted", [&](Tape& t, V& x) { return attn::cross_entropy(t, x[0], tg, {.weight = w}); },
                  {rnd({5, 5}, -2, 2)});
  check_gradients("cross_entropy weighted smoothing",
                  [&](Tape& t, V& x) { return attn::cross_entropy(t, x[0], tg, {.label_smoothing = 0.2, .weight = w}); },
                  {rnd({5, 5}, -2, 2)});
}

TEST_CASE("gradcheck: rotary position embeddings (both pair orders, part of each head, an offset, the first columns)") {
  check_gradients("rotary", [](Tape& t, V& x) { return attn::rotary(t, x[0], {.head_dim = 4}); }, {rnd({2, 5, 8})});
  check_gradients("rotary interleaved, partial, offset, columns",
                  [](Tape& t, V& x) {
                    return attn::rotary(t, x[0], {.head_dim = 6, .columns = 12, .dim = 4, .offset = 3, .base = 50, .interleaved = true});
                  },
                  {rnd({2, 4, 18})});
  check_gradients("rotary rotate_half, partial",
                  [](Tape& t, V& x) { return attn::rotary(t, x[0], {.head_dim = 6, .dim = 4, .offset = 2, .base = 30}); }, {rnd({2, 3, 12})});
}

TEST_CASE("rotary: position 0 is the identity, pairs keep their length, scores depend on the distance alone, errors") {
  attn::NoGrad ng;
  attn::Rng rng(7);
  attn::Tensor<double> x0(attn::Dims{1, 9, 16});
  for (std::size_t i = 0; i < x0.numel(); ++i) x0[i] = rng.uniform(-1, 1);
  const attn::Var<double> x(x0);
  for (bool interleaved : {false, true}) {
    INFO("interleaved " << interleaved);
    const auto y = attn::rotary(ng, x, {.head_dim = 8, .base = 100, .interleaved = interleaved}).value();
    for (std::size_t c = 0; c < 16; ++c) CHECK(y[c] == x0[c]);  // time step 0
    for (std::size_t t = 0; t < 9; ++t)
      for (std::size_t g = 0; g < 2; ++g)
        for (std::size_t i = 0; i < 4; ++i) {
          const std::size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + 4, o = t * 16 + g * 8;
          const double before = x0[o + a] * x0[o + a] + x0[o + b] * x0[o + b], after = y[o + a] * y[o + a] + y[o + b] * y[o + b];
          CHECK(after == Approx(before).epsilon(1e-12));
          // The angle of pair i at time t: t * 100^(-2i/8).
          const double th = double(t) * std::pow(100.0, -2.0 * double(i) / 8.0);
          CHECK(y[o + a] == Approx(x0[o + a] * std::cos(th) - x0[o + b] * std::sin(th)).margin(1e-12));
        }
    // q at position p and k at position s: q·k after the turn depends on p - s alone.
    const auto at = [&](std::size_t offset) { return attn::rotary(ng, x, {.head_dim = 8, .offset = offset, .interleaved = interleaved}).value(); };
    const auto y0 = at(0), y5 = at(5);
    for (std::size_t p = 0; p < 9; ++p)
      for (std::size_t s = 0; s < 9; ++s) {
        double d0 = 0, d5 = 0;
        for (std::size_t c = 0; c < 8; ++c) d0 += y0[p * 16 + c] * y0[s * 16 + 8 + c], d5 += y5[p * 16 + c] * y5[s * 16 + 8 + c];
        CHECK(d5 == Approx(d0).margin(1e-12));
      }
  }
  // Part of each head in the half layout: pairs (i, i + 2) of the first 4 of 8 features turn, the rest pass.
  const auto part = attn::rotary(ng, x, {.head_dim = 8, .dim = 4, .base = 100}).value();
  for (std::size_t t = 0; t < 9; ++t)
    for (std::size_t g = 0; g < 2; ++g) {
      const std::size_t o = t * 16 + g * 8;
      for (std::size_t i = 0; i < 2; ++i) {
        const double th = double(t) * std::pow(100.0, -2.0 * double(i) / 4.0);
        CHECK(part[o + i] == Approx(x0[o + i] * std::cos(th) - x0[o + i + 2] * std::sin(th)).margin(1e-12));
        CHECK(part[o + i + 2] == Approx(x0[o + i + 2] * std::cos(th) + x0[o + i] * std::sin(th)).margin(1e-12));
      }
      for (std::size_t c = 4; c < 8; ++c) CHECK(part[o + c] == x0[o + c]);
    }
  CHECK_THROWS_WITH(attn::rotary(ng, x, {.head_dim = 8, .dim = 3}), Catch::Contains("dim 3 must be even"));
  CHECK_THROWS_WITH(attn::rotary(ng, x, {.head_dim = 8, .dim = 10}), Catch::Contains("at most the head width 8"));
  CHECK_THROWS_WITH(attn::rotary(ng, x, {.head_dim = 8, .columns = 12}), Catch::Contains("multiple of head_dim"));
  CHECK_THROWS_WITH(attn::rotary(ng, x, {.head_dim = 8, .columns = 24}), Catch::Contains("no wider than"));
  CHECK_THROWS_WITH(attn::rotary(ng, x, {}), Catch::Contains("head_dim 0"));
  CHECK_THROWS_WITH(attn::rotary(ng, x, {.head_dim = 8, .base = 0}), Catch::Contains("base must be positive"));
  CHECK_THROWS_AS(attn::rotary(ng, attn::Var<double>(attn::Tensor<double>(attn::Dims{4, 8})), {.head_dim = 8}), attn::ShapeError);
}

TEST_CASE("tape: gradients accumulate over two backward passes, and NoGrad records nothing") {
  Tape t;
  attn::Var<double> x(rnd({3}), true);
  auto y = attn::sum(t, attn::mul(t, x, x));
  t.backward(y);
  auto g1 = x.grad().clone();
  t.backward(y);
  for (std::size_t i = 0; i < 3; ++i) CHECK(x.grad()[i] == Approx(2 * g1[i]));
  CHECK(t.size() == 2);
  t.clear();
  CHECK(t.size() == 0);
  attn::NoGrad ng;
  auto z = attn::tanh(ng, x);
  CHECK_FALSE(z.requires_grad());
  CHECK(z.tape() == nullptr);
}

TEST_CASE("shape errors name the op and both shapes") {
  Tape t;
  attn::Var<double> a(rnd({3, 4}), true), b(rnd({5, 6}), true);
  CHECK_THROWS_WITH(attn::matmul(t, a, b), Catch::Contains("matmul") && Catch::Contains("(3, 4)") && Catch::Contains("(5, 6)"));
  CHECK_THROWS_WITH(attn::add(t, a, b), Catch::Contains("(3, 4)") && Catch::Contains("(5, 6)"));
}
