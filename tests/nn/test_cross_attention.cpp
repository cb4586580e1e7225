// SPDX-License-Identifier: MIT
// Cross-attention: attn::cross_attention (gradient checks in double), nn::Attention's (query, key,
// value) call against its own self-attention and against torch.nn.MultiheadAttention, and
// nn::CrossAttention (torch's kdim, vdim) against torch.
#include "../gradcheck_util.hpp"
#include "attention_test_util.hpp"
#include "../golden_util.hpp"

#include <limits>

#include <attn/autograd/cross_attention.hpp>
#include <attn/nn/attention.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::check_gradients;
using testutil::lengths_mask;
using testutil::rel_diff;
using testutil::set_value;

namespace {

attn::Rng rng(2025);

template <class T>
Tensor<T> random(const Dims& d, double lo = -1, double hi = 1) {
  Tensor<T> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = T(rng.uniform(lo, hi));
  return t;
}

constexpr double inf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("gradcheck: cross_attention w.r.t. q, k and v, with key padding, a fully padded sample, 2-D and per-head masks, dropout") {
  const std::size_t nb = 3, tq = 4, tk = 5;
  const auto key_mask = lengths_mask<double>({5, 0, 2}, tk);
  Tensor<double> am = random<double>({tq, tk});
  am(0, 1) = am(2, 0) = am(3, 4) = -inf;
  Tensor<double> per_head = random<double>({nb * 2, tq, tk});
  per_head(1, 2, 0) = per_head(4, 1, 1) = -inf;
  const std::vector<Tensor<double>> in = {random<double>({nb, tq, 8}), random<double>({nb, tk, 8}), random<double>({nb, tk, 8})};
  check_gradients("plain", [&](Tape& t, V& x) { return attn::cross_attention(t, x[0], x[1], x[2], {.heads = 2}); }, in);
  check_gradients("key mask", [&](Tape& t, V& x) {
    return attn::cross_attention(t, x[0], x[1], x[2], {.heads = 2, .key_mask = key_mask});
  }, in);
  check_gradients("key mask + (Tq, Tk) mask, one head", [&](Tape& t, V& x) {
    return attn::cross_attention(t, x[0], x[1], x[2], {.heads = 1, .key_mask = key_mask, .attn_mask = am});
  }, in);
  check_gradients("key mask + per-head mask", [&](Tape& t, V& x) {
    return attn::cross_attention(t, x[0], x[1], x[2], {.heads = 2, .key_mask = key_mask, .attn_mask = per_head});
  }, in);
  check_gradients("dropout", [&](Tape& t, V& x) {
    return attn::cross_attention(t, x[0], x[1], x[2], {.heads = 4, .key_mask = key_mask, .dropout = 0.3});
  }, in);
  check_gradients("key and value one tensor", [&](Tape& t, V& x) {
    return attn::cross_attention(t, x[0], x[1], x[1], {.heads = 2, .key_mask = key_mask, .attn_mask = am});
  }, {in[0], in[1]});
}

TEST_CASE("cross_attention: a query with no visible key gets zero weights and output, never NaN, and padded keys get no weight") {
  Tape tape;
  attn::Var<double> q(random<double>({2, 3, 4}), true), k(random<double>({2, 5, 4}), true);
  Tensor<double> am = Tensor<double>::zeros({3, 5});
  for (std::size_t j = 0; j < 5; ++j) am(1, j) = -inf;  // query 1 sees nothing
  Tensor<double> w;
  auto o = attn::cross_attention(tape, q, k, k, {.heads = 2, .key_mask = lengths_mask<double>({5, 3}, 5), .attn_mask = am, .weights = &w});
  REQUIRE(w.dims() == Dims{2, 2, 3, 5});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < 3; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j < 5; ++j) {
          sum += w(b, h, i, j);
          if (i == 1 || (b == 1 && j >= 3)) CHECK(w(b, h, i, j) == 0.0);
        }
        CHECK(sum == Approx(i == 1 ? 0.0 : 1.0));
      }
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t c = 0; c < 4; ++c) CHECK(o.value()(b, 1, c) == 0.0);
  tape.backward(o, Tensor<double>::full({2, 3, 4}, 1.0));
  CHECK(testutil::all_finite(q.grad()));
  CHECK(testutil::all_finite(k.grad()));
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t c = 0; c < 4; ++c) CHECK(q.grad()(b, 1, c) == 0.0);
  for (std::size_t t = 3; t < 5; ++t)  // sample 1's padded keys and values pass no gradient
    for (std::size_t c = 0; c < 4; ++c) CHECK(k.grad()(1, t, c) == 0.0);
}

TEST_CASE("nn::Attention: the (query, key, value) call on x, x, x equals self-attention, outputs and every gradient") {
  const std::size_t nb = 3, n = 7;
  const auto mask = lengths_mask<double>({7, 4, 1}, n);
  Tensor<double> am = random<double>({n, n});
  am(0, 5) = am(3, 1) = -inf;
  for (bool bias : {true, false}) {
    nn::Attention<2, 8, double> a(nullptr, "attn", {.bias = bias});
    const Tensor<double> x0 = random<double>({nb, n, 8}), dout = random<double>({nb, n, 8});
    std::vector<std::vector<Tensor<double>>> grads;
    std::vector<Tensor<double>> outs;
    for (int cross = 0; cross < 2; ++cross) {
      a.zero_grad();
      Tape tape;
      attn::Var<double, Shape<dyn, dyn, 8>> x(x0, true);
      auto y = cross ? a(tape, x, x, x, attn::KeepMask(mask), {.attn_mask = am}) : a(tape, x, attn::KeepMask(mask), {.attn_mask = am});
      static_assert(std::is_same_v<decltype(y), attn::Var<double, Shape<dyn, dyn, 8>>>);
      tape.backward(y, dout);
      outs.push_back(y.value().erased().clone());
      std::vector<Tensor<double>> g;  // pushed one by one: GCC 12 warns (-Warray-bounds) of a braced list here
      g.reserve(4);
      g.push_back(x.grad().erased().clone());
      g.push_back(a.in_proj_weight.grad().erased().clone());
      g.push_back(a.out_proj.weight.grad().erased().clone());
      if (bias) g.push_back(a.in_proj_bias.grad().erased().clone());
      grads.push_back(g);
    }
    INFO("bias " << bias);
    CHECK(rel_diff(outs[1], outs[0]) < 1e-12);
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(rel_diff(grads[1][i], grads[0][i]) < 1e-12);
  }
}

TEST_CASE("nn::Attention: project, project_key_value, project_query and attend compose the cross-attention call") {
  const auto mask = lengths_mask<double>({6, 2}, 6);
  const auto keep = attn::KeepMask(mask);
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    nn::Attention<2, 8, double> a(nullptr, "attn", {.bias = bias});
    const Tensor<double> x0 = random<double>({2, 3, 8}), y0 = random<double>({2, 6, 8}), dout = random<double>({2, 3, 8});
    std::vector<std::vector<Tensor<double>>> grads;
    std::vector<Tensor<double>> outs;
    for (int halves = 0; halves < 2; ++halves) {
      a.zero_grad();
      Tape tape;
      attn::Var<double, Shape<dyn, dyn, 8>> x(x0, true), y(y0, true);
      attn::Var<double, Shape<dyn, dyn, 8>> out;
      if (halves) {
        const auto kv = a.project_key_value(tape, y);
        const auto all = a.project(tape, y);
        CHECK(rel_diff(kv.k.value(), all.k.value()) < 1e-14);
        CHECK(rel_diff(kv.v.value(), all.v.value()) < 1e-14);
        CHECK(kv.k.dims() == Dims{2, 6, 8});
        out = attn::Var<double, Shape<dyn, dyn, 8>>(a.attend(tape, a.project_query(tape, x), kv.k, kv.v, &keep));
      } else {
        out = a(tape, x, y, y, keep);
      }
      tape.backward(out, dout);
      outs.push_back(out.value().erased().clone());
      std::vector<Tensor<double>> g;
      g.reserve(4);
      g.push_back(x.grad().erased().clone());
      g.push_back(y.grad().erased().clone());
      g.push_back(a.in_proj_weight.grad().erased().clone());
      if (bias) g.push_back(a.in_proj_bias.grad().erased().clone());
      grads.push_back(g);
    }
    CHECK(rel_diff(outs[1], outs[0]) < 1e-12);
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(rel_diff(grads[1][i], grads[0][i]) < 1e-12);
  }
}

namespace {

template <std::size_t H, std::size_t D, class T>
void golden_packed(double tol) {
  auto f = golden::load("mha_cross_h" + std::to_string(H));
  INFO((sizeof(T) == 4 ? "float32" : "float64"));
  nn::Attention<H, D, T> a(nullptr, "attn");
  set_value(a.in_proj_weight, golden::tensor<T>(f, "in_proj_weight"));
  set_value(a.in_proj_bias, golden::tensor<T>(f, "in_proj_bias"));
  set_value(a.out_proj.weight, golden::tensor<T>(f, "out_proj.weight"));
  set_value(a.out_proj.bias, golden::tensor<T>(f, "out_proj.bias"));
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, D>> q(golden::tensor<T>(f, "query"), true);
  attn::Var<T, Shape<dyn, dyn, D>> memory(golden::tensor<T>(f, "memory"), true);
  auto r = a.forward_with_weights(tape, q, memory, memory, attn::KeepMask(golden::tensor<T>(f, "mask")),
                                  {.attn_mask = golden::tensor<T>(f, "attn_mask")});
  golden::expect_close(f, "weights", r.weights, tol);
  golden::expect_close(f, "out", r.out.value(), tol);
  tape.backward(r.out, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.query", q.grad(), tol);
  golden::expect_close(f, "grad.memory", memory.grad(), tol);  // through both the key and the value
  golden::expect_close(f, "grad.in_proj_weight", a.in_proj_weight.grad(), tol);
  golden::expect_close(f, "grad.in_proj_bias", a.in_proj_bias.grad(), tol);
  golden::expect_close(f, "grad.out_proj.weight", a.out_proj.weight.grad(), tol);
  golden::expect_close(f, "grad.out_proj.bias", a.out_proj.bias.grad(), tol);
}

template <class T>
void golden_kv_dims(double tol) {
  auto f = golden::load("mha_cross_h2_k12_v10");
  INFO((sizeof(T) == 4 ? "float32" : "float64"));
  nn::CrossAttention<2, 16, 12, 10, T> a(nullptr, "attn");
  set_value(a.q_proj_weight, golden::tensor<T>(f, "q_proj_weight"));
  set_value(a.k_proj_weight, golden::tensor<T>(f, "k_proj_weight"));
  set_value(a.v_proj_weight, golden::tensor<T>(f, "v_proj_weight"));
  set_value(a.in_proj_bias, golden::tensor<T>(f, "in_proj_bias"));
  set_value(a.out_proj.weight, golden::tensor<T>(f, "out_proj.weight"));
  set_value(a.out_proj.bias, golden::tensor<T>(f, "out_proj.bias"));
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, 16>> q(golden::tensor<T>(f, "query"), true);
  attn::Var<T, Shape<dyn, dyn, 12>> k(golden::tensor<T>(f, "key"), true);
  attn::Var<T, Shape<dyn, dyn, 10>> v(golden::tensor<T>(f, "value"), true);
  // torch's key_padding_mask form (1 = padding)
  Tensor<T> keep = golden::tensor<T>(f, "mask"), pad(keep.dims());
  for (std::size_t i = 0; i < keep.numel(); ++i) pad[i] = keep[i] == T(0) ? T(1) : T(0);
  auto r = a.forward_with_weights(tape, q, k, v, attn::PaddingMask(pad), {.attn_mask = golden::tensor<T>(f, "attn_mask")});
  static_assert(std::is_same_v<decltype(r.out), attn::Var<T, Shape<dyn, dyn, 16>>>);
  golden::expect_close(f, "weights", r.weights, tol);
  golden::expect_close(f, "out", r.out.value(), tol);
  tape.backward(r.out, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.query", q.grad(), tol);
  golden::expect_close(f, "grad.key", k.grad(), tol);
  golden::expect_close(f, "grad.value", v.grad(), tol);
  golden::expect_close(f, "grad.q_proj_weight", a.q_proj_weight.grad(), tol);
  golden::expect_close(f, "grad.k_proj_weight", a.k_proj_weight.grad(), tol);
  golden::expect_close(f, "grad.v_proj_weight", a.v_proj_weight.grad(), tol);
  golden::expect_close(f, "grad.in_proj_bias", a.in_proj_bias.grad(), tol);
  golden::expect_close(f, "grad.out_proj.weight", a.out_proj.weight.grad(), tol);
  golden::expect_close(f, "grad.out_proj.bias", a.out_proj.bias.grad(), tol);
}

}  // namespace

TEST_CASE("golden: nn::Attention's cross-attention call matches torch.nn.MultiheadAttention(query, memory, memory)") {
  golden_packed<4, 16, float>(1e-5);
  golden_packed<4, 16, double>(1e-12);
}

TEST_CASE("golden: nn::CrossAttention (kdim 12, vdim 10, per-head attn_mask) matches torch.nn.MultiheadAttention") {
  golden_kv_dims<float>(1e-5);
  golden_kv_dims<double>(1e-12);
}

TEST_CASE("nn::CrossAttention: PyTorch parameter names and shapes, Xavier-uniform projections, zero biases") {
  nn::CrossAttention<4, 16, 24, 8> a(nullptr, "cross");
  std::vector<std::string> names;
  for (const auto& [name, p] : a.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "out_proj.weight",
                                          "out_proj.bias"});  // torch's named_parameters() order
  CHECK(a.k_proj_weight.dims() == Dims{16, 24});
  CHECK(a.v_proj_weight.dims() == Dims{16, 8});
  CHECK(a.in_proj_bias.dims() == Dims{48});
  const double bound = std::sqrt(6.0 / (16 + 24));  // xavier_uniform of (16, 24)
  double mx = 0;
  for (std::size_t i = 0; i < a.k_proj_weight.numel(); ++i) mx = std::max(mx, double(std::abs(a.k_proj_weight.raw()[i])));
  CHECK(mx <= bound);
  CHECK(mx > 0.8 * bound);
  for (std::size_t i = 0; i < 48; ++i) CHECK(a.in_proj_bias.raw()[i] == 0.0f);
  nn::CrossAttention<4, 16, 24, 8> nobias(nullptr, "nobias", {.bias = false});
  CHECK(!nobias.in_proj_bias.defined());
  CHECK(!nobias.out_proj.bias.defined());
  attn::NoGrad ng;
  attn::Var<float> q(random<float>({2, 3, 16})), k(random<float>({2, 5, 24})), v(random<float>({2, 5, 8}));
  CHECK(nobias(ng, q, k, v, attn::Lengths{5, 2}).value().dims() == Dims{2, 3, 16});
}

TEST_CASE("cross-attention: dropout only in training, the weights returned are those that made the output") {
  nn::Attention<2, 8> a(nullptr, "attn", {.dropout = 0.5});
  attn::Var<float> q(random<float>({2, 3, 8})), m(random<float>({2, 6, 8}));
  a.eval();
  attn::NoGrad ng;
  auto e1 = a.forward_with_weights(ng, q, m, m);
  auto e2 = a(ng, q, m, m);
  CHECK(rel_diff(e1.out.value(), e2.value()) == 0);
  a.train();
  Tape tape;
  auto r = a.forward_with_weights(tape, q, m, m);
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < r.weights.numel(); ++i) zeros += r.weights[i] == 0.0f;
  CHECK(zeros > 0);
  // out = merge_heads(weights V) W_o^T + b_o, V the value projection of m
  const std::size_t nb = 2, tq = 3, tk = 6, D = 8, hd = 4;
  Tensor<float> vproj({nb, tk, D});
  const auto& w = a.in_proj_weight.raw();
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t t = 0; t < tk; ++t)
      for (std::size_t o = 0; o < D; ++o) {
        float s = 0;  // in_proj_bias starts at zero
        for (std::size_t c = 0; c < D; ++c) s += m.raw()(b, t, c) * w[(2 * D + o) * D + c];
        vproj(b, t, o) = s;
      }
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t i = 0; i < tq; ++i) {
      float merged[D] = {};
      for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t c = 0; c < hd; ++c)
          for (std::size_t j = 0; j < tk; ++j) merged[h * hd + c] += r.weights(b, h, i, j) * vproj(b, j, h * hd + c);
      for (std::size_t o = 0; o < D; ++o) {
        float y = 0;
        for (std::size_t c = 0; c < D; ++c) y += merged[c] * a.out_proj.weight.raw()(o, c);
        CHECK(r.out.value()(b, i, o) == Approx(y).margin(1e-5));
      }
    }
}

TEST_CASE("cross-attention: wrong shapes, self-attention options, the flash kernel and bad masks are errors naming the layer") {
  nn::Attention<2, 8> a(nullptr, "attn");
  attn::NoGrad ng;
  attn::Var<float> q(random<float>({2, 3, 8})), m(random<float>({2, 5, 8}));
  CHECK_THROWS_WITH(a(ng, q, attn::Var<float>(random<float>({3, 5, 8})), m),
                    Catch::Contains("nn::Attention<2, 8>: key shape (3, 5, 8) is not (2, time, 8)"));
  CHECK_THROWS_WITH(a(ng, q, m, attn::Var<float>(random<float>({2, 4, 8}))),
                    Catch::Contains("nn::Attention<2, 8>: value shape (2, 4, 8) is not (2, 5, 8)"));
  CHECK_THROWS_WITH(a(ng, attn::Var<float>(random<float>({2, 3, 6})), m, m), Catch::Contains("query shape (2, 3, 6)"));
  CHECK_THROWS_WITH(a(ng, q, m, m, attn::Lengths{5, 6}), Catch::Contains("nn::Attention") && Catch::Contains("lengths[1] = 6"));
  CHECK_THROWS_WITH(a(ng, q, m, m, {.attn_mask = Tensor<float>::zeros({3, 3})}),
                    Catch::Contains("attn_mask must be (Tq, Tk) or (batch * heads, Tq, Tk)"));
  CHECK_THROWS_WITH(a(ng, q, m, m, {.kernel = attn::AttentionKernel::flash}), Catch::Contains("not the flash kernel"));
  CHECK_THROWS_WITH(a(ng, q, m, m, {.global_mask = Tensor<float>::zeros({2, 5})}), Catch::Contains("global_mask applies to self-attention only"));
  attn::AttentionStats stats;
  CHECK_THROWS_WITH(a(ng, q, m, m, {.stats = &stats}), Catch::Contains("self-attention's kernels only"));
  CHECK_THROWS_WITH(attn::cross_attention(ng, q, m, m, {.heads = 2, .attn_mask = Tensor<float>::zeros({2, 3, 5})}),
                    Catch::Contains("(4, 3, 5)"));
  nn::Attention<2, 8> causal(nullptr, "causal", {.causal = true});
  CHECK_THROWS_WITH(causal(ng, q, m, m), Catch::Contains("self-attention patterns"));
  CHECK_THROWS_WITH((nn::CrossAttention<2, 8, 4>(nullptr, "c", {.window = 3})), Catch::Contains("nn::CrossAttention 'c'") &&
                                                                                    Catch::Contains("self-attention patterns"));
  CHECK_THROWS_WITH((nn::CrossAttention<2, 8, 4>(nullptr, "r", {.rotary = nn::RotaryOptions{}})),
                    Catch::Contains("nn::CrossAttention 'r'") && Catch::Contains("rotary"));
  nn::CrossAttention<2, 8, 4> c(nullptr, "c");
  CHECK_THROWS_WITH(c(ng, q, m, attn::Var<float>(random<float>({2, 5, 4}))),
                    Catch::Contains("nn::CrossAttention<2, 8, 4, 4>: key shape (2, 5, 8) is not (2, time, 4)"));
  CHECK_THROWS_WITH(attn::cross_attention(ng, q, m, m, {.heads = 3}), Catch::Contains("D divisible by heads = 3"));
  CHECK_THROWS_WITH(attn::cross_attention(ng, q, m, m, {.heads = 2, .dropout = 1.0}), Catch::Contains("dropout must be in [0, 1)"));
  CHECK_THROWS_WITH(attn::cross_attention(ng, q, m, m, {.heads = 2, .key_mask = Tensor<float>::full({2, 3}, 1.0f)}),
                    Catch::Contains("key_mask must be (batch, Tk)"));
  CHECK_THROWS_WITH(attn::cross_attention(ng, q, attn::Var<float>(random<float>({2, 0, 8})), attn::Var<float>(random<float>({2, 0, 8})),
                                          {.heads = 2}),
                    Catch::Contains("empty batch, queries or keys"));
}

TEST_CASE("cross-attention in int8 and bf16: the three-input call on x, x, x gives self-attention's output") {
  attn::Rng r(17);
  for (auto prec : {attn::Precision::int8, attn::Precision::bf16}) {
    INFO(attn::precision_name(prec));
    nn::Attention<2, 16> a(nullptr, "attn");
    a.eval();
    attn::Var<float> x(random<float>({2, 6, 16}));
    const auto mask = attn::Lengths{6, 4};
    if (prec == attn::Precision::int8) nn::quantize_dynamic(a);
    attn::PrecisionScope scope(prec);
    attn::NoGrad ng;
    const auto self = a(ng, x, mask, {.kernel = attn::AttentionKernel::naive}).value();
    const auto cross = a(ng, x, x, x, mask).value();
    CHECK(rel_diff(cross.erased(), self.erased()) < 1e-5);
  }
}

TEST_CASE("average_heads: torch's average_attn_weights, the mean of the per-head weights") {
  nn::Attention<4, 16, double> att(nullptr, "attn");
  attn::NoGrad ng;
  attn::Rng rng(8);
  attn::Var<double> q(testutil::random<double>(rng, {2, 3, 16})), memory(testutil::random<double>(rng, {2, 5, 16}));
  const auto r = att.forward_with_weights(ng, q, memory, memory, attn::Lengths{5, 2});
  const auto avg = nn::average_heads(r.weights);
  REQUIRE(avg.dims() == Dims{2, 3, 5});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i) {
      double row = 0;
      for (std::size_t j = 0; j < 5; ++j) {
        double m = 0;
        for (std::size_t h = 0; h < 4; ++h) m += r.weights[((b * 4 + h) * 3 + i) * 5 + j];
        CHECK(avg[(b * 3 + i) * 5 + j] == Approx(m / 4).margin(1e-15));
        row += avg[(b * 3 + i) * 5 + j];
      }
      CHECK(row == Approx(1.0).margin(1e-12));  // still a distribution over the keys
    }
  CHECK(avg[(1 * 3 + 0) * 5 + 3] == 0.0);  // a padded key keeps no weight
  CHECK_THROWS_WITH(nn::average_heads(Tensor<double>(Dims{2, 3, 5})), Catch::Contains("is not (batch, heads, Tq, Tk)"));
}
