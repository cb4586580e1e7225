// SPDX-License-Identifier: MIT
// nn::Attention and attn::self_attention: module contract, gradient checks of both kernels, flash
// vs naive agreement, PyTorch goldens (nn.MultiheadAttention), dropout and the O(T) memory of flash.
#include "../gradcheck_util.hpp"
#include "attention_test_util.hpp"
#include "../golden_util.hpp"

#include <cstring>
#include <limits>

#include <attn/autograd/attention.hpp>
#include <attn/nn/attention.hpp>

using attn::AttentionKernel;
using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::check_gradients;

using testutil::all_finite;
using testutil::lengths_mask;
using testutil::rel_diff;
using testutil::set_value;

namespace {

attn::Rng rng(2024);

/// (T, T) additive mask: -inf strictly above the diagonal, random finite values elsewhere.
template <class T>
Tensor<T> causal_mask(std::size_t n) {
  Tensor<T> m({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) m(i, j) = j > i ? -std::numeric_limits<T>::infinity() : T(rng.uniform(-1, 1));
  return m;
}

template <class T>
Tensor<T> random(const Dims& d, double lo = -1, double hi = 1) {
  Tensor<T> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = T(rng.uniform(lo, hi));
  return t;
}

}  // namespace

TEST_CASE("Attention: PyTorch parameter names, shapes and initialisation") {
  nn::Attention<2, 16> a(nullptr, "attn");
  auto np = a.named_parameters();
  REQUIRE(np.size() == 4);
  CHECK(np[0].first == "in_proj_weight");
  CHECK(np[1].first == "in_proj_bias");
  CHECK(np[2].first == "out_proj.weight");
  CHECK(np[3].first == "out_proj.bias");
  CHECK(np[0].second->dims() == Dims{48, 16});
  CHECK(np[1].second->dims() == Dims{48});
  CHECK(np[2].second->dims() == Dims{16, 16});
  CHECK(np[3].second->dims() == Dims{16});
  CHECK(a.parameter_count() == 48 * 16 + 48 + 16 * 16 + 16);
  static_assert(decltype(a)::head_dim == 8);

  auto check_init = [](const auto& att) {
    const double xavier = std::sqrt(6.0 / (48 + 16)), linear = 1.0 / std::sqrt(16.0);
    double wmax = 0, omax = 0;
    for (std::size_t i = 0; i < att.in_proj_weight.numel(); ++i) wmax = std::max(wmax, double(std::abs(att.in_proj_weight.raw()[i])));
    for (std::size_t i = 0; i < att.out_proj.weight.numel(); ++i) omax = std::max(omax, double(std::abs(att.out_proj.weight.raw()[i])));
    CHECK(wmax <= xavier);
    CHECK(wmax > 0.8 * xavier);  // really drawn from U(-a, a), not zeros or a narrower range
    CHECK(omax <= linear);
    CHECK(omax > 0.8 * linear);
    for (std::size_t i = 0; i < 48; ++i) CHECK(att.in_proj_bias.raw()[i] == 0.0f);
    for (std::size_t i = 0; i < 16; ++i) CHECK(att.out_proj.bias.raw()[i] == 0.0f);
  };
  check_init(a);
  // Module::init re-draws with the same scheme (children after parents must not undo the zero bias).
  set_value(a.out_proj.bias, Tensor<float>::full({16}, 1.0f));
  a.init(99);
  check_init(a);

  nn::Attention<1, 8> no_bias(nullptr, "nb", {.bias = false});
  auto nb = no_bias.named_parameters();
  REQUIRE(nb.size() == 2);
  CHECK(nb[0].first == "in_proj_weight");
  CHECK(nb[1].first == "out_proj.weight");
  CHECK_THROWS_AS((nn::Attention<1, 8>(nullptr, "bad", {.dropout = 1.0})), attn::ArgumentError);
}

TEST_CASE("Attention: recommended_heads = max(4, hidden / 64)") {
  static_assert(nn::recommended_heads(64) == 4);
  static_assert(nn::recommended_heads(128) == 4);
  static_assert(nn::recommended_heads(256) == 4);
  static_assert(nn::recommended_heads(512) == 8);
  static_assert(nn::recommended_heads(1024) == 16);
  CHECK(nn::recommended_heads(768) == 12);
}

TEST_CASE("Attention: a wrong run-time width or mask shape throws ShapeError naming Attention") {
  nn::Attention<2, 16> a(nullptr, "attn");
  attn::NoGrad ng;
  attn::Var<float> bad(random<float>({2, 3, 8}));
  auto mask = lengths_mask<float>({3, 2}, 3);
  CHECK_THROWS_AS(a(ng, bad, attn::KeepMask(mask)), attn::ShapeError);
  CHECK_THROWS_WITH(a(ng, bad, attn::KeepMask(mask)), Catch::Contains("Attention"));
  attn::Var<float> rank2(random<float>({3, 16}));
  CHECK_THROWS_WITH(a(ng, rank2, attn::KeepMask(mask)), Catch::Contains("Attention"));
  attn::Var<float, Shape<dyn, dyn, 16>> x(random<float>({2, 3, 16}));
  CHECK_THROWS_WITH(a(ng, x, attn::KeepMask(lengths_mask<float>({3, 2, 1}, 3))), Catch::Contains("Attention"));
  CHECK_THROWS_AS(a(ng, x, attn::KeepMask(lengths_mask<float>({3, 2}, 4))), attn::ShapeError);
  CHECK_THROWS_WITH(a(ng, x, attn::KeepMask(mask), {.attn_mask = causal_mask<float>(4)}), Catch::Contains("Attention"));
  CHECK_THROWS_AS(a.forward_with_weights(ng, x, attn::KeepMask(mask), {.kernel = AttentionKernel::flash}), attn::ArgumentError);
  // The op itself checks its own inputs too.
  attn::Var<float> qkv(random<float>({2, 3, 47}));
  CHECK_THROWS_AS(attn::self_attention(ng, qkv, {.heads = 2}), attn::ShapeError);
  attn::Var<float> qkv2(random<float>({2, 3, 48}));
  CHECK_THROWS_AS(attn::self_attention(ng, qkv2, {.heads = 5}), attn::ShapeError);
  CHECK_THROWS_AS(attn::self_attention(ng, qkv2, {.heads = 2, .dropout = -0.1}), attn::ArgumentError);
}

TEST_CASE("gradcheck: self_attention past one 128-row tile, the flash backward recomputing its scores") {
  // T = 130: two query and key tiles, a second tile of 2 rows; one head of width 2, so that H T is
  // well above 3 D and the flash backward recomputes the scores instead of keeping them.
  const std::size_t n = 130;
  const auto key_mask = lengths_mask<double>({130, 97}, n);
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const std::string k = kernel == AttentionKernel::flash ? "flash" : "naive";
    check_gradients(k + " two tiles, key mask", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 1, .key_mask = key_mask, .kernel = kernel});
    }, {random<double>({2, n, 6})});
    check_gradients(k + " two tiles, key mask, dropout", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 1, .key_mask = key_mask, .dropout = 0.2, .kernel = kernel,
                                            .skip_padded_queries = kernel == AttentionKernel::flash});
    }, {random<double>({2, n, 6})});
  }
}

TEST_CASE("gradcheck: self_attention, flash and naive, with padding, a fully padded sample and an additive mask") {
  const std::size_t n = 6;
  auto key_mask = lengths_mask<double>({6, 0, 3}, n);
  auto causal = causal_mask<double>(n);
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const std::string k = kernel == AttentionKernel::flash ? "flash" : "naive";
    check_gradients(k + " plain", [&](Tape& t, V& x) { return attn::self_attention(t, x[0], {.heads = 2, .kernel = kernel}); },
              {random<double>({2, n, 24})});
    check_gradients(k + " key mask", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .kernel = kernel});
    }, {random<double>({3, n, 24})});
    // skip_padded_queries (the flash kernel's; the naive one computes every row regardless).
    check_gradients(k + " key mask, skip_padded_queries", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .kernel = kernel, .skip_padded_queries = true});
    }, {random<double>({3, n, 24})});
    check_gradients(k + " key mask + causal additive mask, one head", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 1, .key_mask = key_mask, .attn_mask = causal, .kernel = kernel});
    }, {random<double>({3, n, 12})});
    check_gradients(k + " dropout", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .dropout = 0.3, .kernel = kernel});
    }, {random<double>({3, n, 24})});
    // The whole layer function: fused QKV projection, attention, output projection.
    check_gradients(k + " layer", [&](Tape& t, V& x) {
      auto qkv = attn::linear(t, x[0], x[1], x[2]);
      auto o = attn::self_attention(t, qkv, {.heads = 2, .key_mask = key_mask, .attn_mask = causal, .kernel = kernel});
      return attn::linear(t, o, x[3], x[4]);
    }, {random<double>({3, n, 8}), random<double>({24, 8}), random<double>({24}), random<double>({8, 8}), random<double>({8})});
    // PaddedRows::zero: both projections on the real rows only (flat indices of key_mask's ones).
    Tensor<std::int64_t> rows;
    REQUIRE(attn::real_rows(key_mask, rows));
    REQUIRE(rows.numel() == 9);
    check_gradients(k + " layer, padded rows skipped", [&](Tape& t, V& x) {
      auto qkv = attn::linear(t, x[0], x[1], x[2], {.map = &rows});
      auto o = attn::self_attention(t, qkv, {.heads = 2, .key_mask = key_mask, .attn_mask = causal, .kernel = kernel});
      return attn::linear(t, o, x[3], x[4], {.map = &rows});
    }, {random<double>({3, n, 8}), random<double>({24, 8}), random<double>({24}), random<double>({8, 8}), random<double>({8})});
    check_gradients(k + " layer without biases", [&](Tape& t, V& x) {
      auto qkv = attn::linear(t, x[0], x[1], attn::Var<double>());
      auto o = attn::self_attention(t, qkv, {.heads = 4, .key_mask = key_mask, .kernel = kernel});
      return attn::linear(t, o, x[2], attn::Var<double>());
    }, {random<double>({3, n, 8}), random<double>({24, 8}), random<double>({8, 8})});
  }
}

TEST_CASE("flash, skip_padded_queries: rows after the last real key are zero, the others as without it") {
  const std::size_t n = 150;  // two query and key tiles
  auto mask = lengths_mask<float>({150, 129, 40, 0, 1}, n);
  mask(2, 10) = 0.f;  // a hole before the last real key: that row is still computed
  auto qkv = random<float>({5, n, 48});
  attn::NoGrad ctx;
  auto full = attn::self_attention(ctx, attn::Var<float>(qkv), {.heads = 2, .key_mask = mask, .kernel = AttentionKernel::flash});
  auto skip = attn::self_attention(ctx, attn::Var<float>(qkv),
                                   {.heads = 2, .key_mask = mask, .kernel = AttentionKernel::flash, .skip_padded_queries = true});
  const std::size_t ends[] = {150, 129, 40, 0, 1};
  double kept = 0, zeroed = 0;
  for (std::size_t b = 0; b < 5; ++b)
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t c = 0; c < 16; ++c) {
        const float a = full.value()[(b * n + t) * 16 + c], z = skip.value()[(b * n + t) * 16 + c];
        if (t < ends[b]) kept = std::max(kept, double(std::abs(a - z)));
        else zeroed = std::max(zeroed, double(std::abs(z)));
      }
  CHECK(kept <= 1e-6);  // the tile GEMMs run on fewer rows: the same sums, possibly in another order
  CHECK(zeroed == 0.0);
}

TEST_CASE("fused projection: y = x W^T + b and its gradients match plain loops (multi-threaded GEMM split)") {
  const std::size_t rows = 1000, in = 40, out = 50;  // large enough for the row- and k-split GEMMs
  auto x = random<double>({4, rows / 4, in}), w = random<double>({out, in}), b = random<double>({out});
  auto g = random<double>({4, rows / 4, out});
  Tape tape;
  attn::Var<double> xv(x, true), wv(w, true), bv(b, true);
  auto y = attn::linear(tape, xv, wv, bv);
  tape.backward(y, g);
  double ey = 0, edx = 0, edw = 0, edb = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (std::size_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      ey = std::max(ey, std::abs(acc - y.value()[r * out + o]));
    }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < in; ++i) {
      double acc = 0;
      for (std::size_t o = 0; o < out; ++o) acc += g[r * out + o] * w[o * in + i];
      edx = std::max(edx, std::abs(acc - xv.grad()[r * in + i]));
    }
  for (std::size_t o = 0; o < out; ++o) {
    double sb = 0;
    for (std::size_t r = 0; r < rows; ++r) sb += g[r * out + o];
    edb = std::max(edb, std::abs(sb - bv.grad()[o]));
    for (std::size_t i = 0; i < in; ++i) {
      double acc = 0;
      for (std::size_t r = 0; r < rows; ++r) acc += g[r * out + o] * x[r * in + i];
      edw = std::max(edw, std::abs(acc - wv.grad()[o * in + i]));
    }
  }
  CHECK(ey < 1e-12);
  CHECK(edx < 1e-12);
  CHECK(edw < 1e-10);
  CHECK(edb < 1e-10);
}

namespace {

struct LayerRun {
  Tensor<float> out, gx;
  std::vector<Tensor<float>> gparams;
};

/// Runs Attention<H, D> forward + backward with the given kernel; parameters from `params`.
template <std::size_t H, std::size_t D>
LayerRun run_layer(AttentionKernel kernel, const Tensor<float>& x, const Tensor<float>& mask, const Tensor<float>& am,
                   const std::vector<Tensor<float>>& params, const Tensor<float>& dout, double dropout) {
  nn::Attention<H, D> a(nullptr, "attn", {.dropout = dropout});
  auto ps = a.template parameters<float>();
  for (std::size_t i = 0; i < ps.size(); ++i) set_value(ps[i], params[i]);
  Tape tape(7);
  attn::Var<float, Shape<dyn, dyn, D>> xv(x.clone(), true);
  auto y = a(tape, xv, attn::KeepMask(mask), {.attn_mask = am, .kernel = kernel});
  tape.backward(y, dout);
  LayerRun r{y.value().erased(), xv.grad().erased(), {}};
  for (auto& p : ps) r.gparams.push_back(p.grad().erased());
  return r;
}

/// Flash against naive in float, outputs and every gradient, at T = 1, 7, 64, 130, 200 (one tile, a
/// partial tile, two tiles with a 2-row or 72-row tail), with and without a causal mask and dropout.
/// The head widths cover the flash kernel's tile GEMM paths: 8 (one vector), 16, 20 (16 + a masked
/// tail of 4), 24 (16 + 8), 64 and 128 (whose packed tiles the kernels lay out with padded rows).
template <std::size_t H, std::size_t D>
void flash_matches_naive() {
  for (std::size_t n : {1, 7, 64, 130, 200}) {
    for (bool with_am : {false, true}) {
      for (double dropout : {0.0, 0.25}) {
        INFO("Attention<" << H << ", " << D << ">, T = " << n << ", attn_mask " << with_am << ", dropout " << dropout);
        auto x = random<float>({3, n, D});
        auto mask = lengths_mask<float>({n, (n + 1) / 2, 0}, n);
        Tensor<float> am = with_am ? causal_mask<float>(n) : Tensor<float>();
        std::vector<Tensor<float>> params{random<float>({3 * D, D}, -0.5, 0.5), random<float>({3 * D}, -0.5, 0.5),
                                          random<float>({D, D}, -0.5, 0.5), random<float>({D}, -0.5, 0.5)};
        auto dout = random<float>({3, n, D});
        auto f = run_layer<H, D>(AttentionKernel::flash, x, mask, am, params, dout, dropout);
        auto s = run_layer<H, D>(AttentionKernel::naive, x, mask, am, params, dout, dropout);
        REQUIRE(all_finite(f.out));
        REQUIRE(all_finite(f.gx));
        CHECK(rel_diff(f.out, s.out) <= 1e-5);
        CHECK(rel_diff(f.gx, s.gx) <= 1e-5);
        for (std::size_t i = 0; i < 4; ++i) {
          INFO("parameter " << i);
          CHECK(rel_diff(f.gparams[i], s.gparams[i]) <= 1e-5);
        }
        // The fully padded sample: zero attention output, so out = out_proj.bias, and no gradient to x.
        bool padded_ok = true;
        for (std::size_t t = 0; t < n; ++t)
          for (std::size_t c = 0; c < D; ++c)
            padded_ok = padded_ok && f.out[(2 * n + t) * D + c] == params[3][c] && f.gx[(2 * n + t) * D + c] == 0.0f;
        CHECK(padded_ok);
      }
    }
  }
}

}  // namespace

TEST_CASE("flash and naive agree in float32 on outputs and every gradient (head widths 8, 16, 20, 24, 64, 128)") {
  flash_matches_naive<4, 32>();
  flash_matches_naive<2, 32>();
  flash_matches_naive<2, 40>();
  flash_matches_naive<1, 24>();
  flash_matches_naive<2, 128>();
  flash_matches_naive<1, 128>();
}

namespace {

template <std::size_t H, std::size_t D, class T>
void golden_case(const std::string& name, AttentionKernel kernel, double tol) {
  auto f = golden::load(name);
  INFO(name << (kernel == AttentionKernel::flash ? " flash" : kernel == AttentionKernel::naive ? " naive" : " automatic")
            << (sizeof(T) == 4 ? " float32" : " float64"));
  const bool causal = f.metadata.count("causal") && f.metadata.at("causal") == "true";  // torch's is_causal
  nn::AttentionOptions opt{.causal = causal};
  if (f.metadata.count("rotary_dim"))
    opt.rotary = nn::RotaryOptions{.base = std::stod(f.metadata.at("rotary_base")),
                                   .dim = std::stoul(f.metadata.at("rotary_dim")),
                                   .interleaved = f.metadata.at("rotary_interleaved") == "true"};
  nn::Attention<H, D, T> a(nullptr, "attn", opt);
  set_value(a.in_proj_weight, golden::tensor<T>(f, "in_proj_weight"));
  set_value(a.in_proj_bias, golden::tensor<T>(f, "in_proj_bias"));
  set_value(a.out_proj.weight, golden::tensor<T>(f, "out_proj.weight"));
  set_value(a.out_proj.bias, golden::tensor<T>(f, "out_proj.bias"));
  auto mask = golden::tensor<T>(f, "mask");
  Tensor<T> am = f.tensors.count("attn_mask") ? golden::tensor<T>(f, "attn_mask") : Tensor<T>();
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, D>> x(golden::tensor<T>(f, "x"), true);
  attn::Var<T, Shape<dyn, dyn, D>> y;
  if (kernel == AttentionKernel::naive) {
    auto r = a.forward_with_weights(tape, x, attn::KeepMask(mask), {.attn_mask = am});
    static_assert(std::is_same_v<decltype(r.weights), Tensor<T, Shape<dyn, H, dyn, dyn>>>);
    golden::expect_close(f, "weights", r.weights, tol);
    y = r.out;
  } else {
    y = a(tape, x, attn::KeepMask(mask), {.attn_mask = am, .kernel = kernel});
  }
  golden::expect_close(f, "out", y.value(), tol);
  tape.backward(y, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.x", x.grad(), tol);
  golden::expect_close(f, "grad.in_proj_weight", a.in_proj_weight.grad(), tol);
  golden::expect_close(f, "grad.in_proj_bias", a.in_proj_bias.grad(), tol);
  golden::expect_close(f, "grad.out_proj.weight", a.out_proj.weight.grad(), tol);
  golden::expect_close(f, "grad.out_proj.bias", a.out_proj.bias.grad(), tol);
}

template <std::size_t H, std::size_t D>
void golden_all(const std::string& name) {
  for (auto k : {AttentionKernel::flash, AttentionKernel::naive}) {
    golden_case<H, D, float>(name, k, 1e-5);
    golden_case<H, D, double>(name, k, 1e-12);
  }
}

}  // namespace

TEST_CASE("golden: Attention matches torch.nn.MultiheadAttention (1, 2, 8 heads, with and without attn_mask)") {
  golden_all<1, 16>("mha_h1");
  golden_all<2, 16>("mha_h2");
  golden_all<8, 32>("mha_h8");
  golden_all<1, 16>("mha_h1_attnmask");
  golden_all<2, 16>("mha_h2_attnmask");
  golden_all<8, 32>("mha_h8_attnmask");
  golden_all<2, 16>("mha_h2_causal");  // AttentionOptions::causal against torch's is_causal
}

TEST_CASE("golden: a per-head attn_mask (batch * heads, T, T) matches torch's 3-D attn_mask, alone and with the causal option") {
  for (const char* name : {"mha_h4_perhead", "mha_h4_perhead_causal"})
    for (auto k : {AttentionKernel::naive, AttentionKernel::automatic}) {
      golden_case<4, 16, float>(name, k, 1e-5);
      golden_case<4, 16, double>(name, k, 1e-12);
    }
}

TEST_CASE("per-head attn_mask: equal rows for every head give the (T, T) call, with window, causal, global tokens and a global_mask") {
  const std::size_t nb = 2, n = 9, heads = 2;
  const auto mask = lengths_mask<double>({9, 6}, n);
  Tensor<double> am2 = random<double>({n, n});
  am2(4, 2) = am2(7, 8) = -std::numeric_limits<double>::infinity();
  auto am3 = Tensor<double>::zeros(Dims{nb * heads, n, n});
  for (std::size_t r = 0; r < nb * heads; ++r) std::copy_n(am2.data(), n * n, am3.data() + r * n * n);
  auto global = Tensor<double>::zeros(Dims{nb, n});
  global(0, 5) = global(1, 3) = 1;
  const Tensor<double> x0 = random<double>({nb, n, 8}), dout = random<double>({nb, n, 8});
  for (int pattern = 0; pattern < 4; ++pattern) {
    nn::AttentionOptions opt;
    if (pattern >= 1) opt.window = 1, opt.global_tokens = 1;
    if (pattern >= 2) opt.causal = true;
    if (pattern == 3) opt.window.reset();
    INFO("pattern " << pattern);
    nn::Attention<heads, 8, double> a(nullptr, "attn", opt);
    std::vector<std::vector<Tensor<double>>> grads;
    std::vector<Tensor<double>> outs;
    for (int per_head = 0; per_head < 2; ++per_head) {
      a.zero_grad();
      Tape tape;
      attn::Var<double, Shape<dyn, dyn, 8>> x(x0, true);
      auto y = a(tape, x, attn::KeepMask(mask), {.attn_mask = per_head ? am3 : am2, .global_mask = pattern ? global : Tensor<double>()});
      tape.backward(y, dout);
      outs.push_back(y.value().erased().clone());
      std::vector<Tensor<double>> g;
      g.reserve(2);
      g.push_back(x.grad().erased().clone());
      g.push_back(a.in_proj_weight.grad().erased().clone());
      grads.push_back(g);
    }
    CHECK(rel_diff(outs[1], outs[0]) < 1e-12);
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(rel_diff(grads[1][i], grads[0][i]) < 1e-12);
  }
  // Distinct heads: head 1 of sample 0 hides key 0 from query 3, which changes that row only.
  nn::Attention<heads, 8, double> a(nullptr, "attn");
  attn::NoGrad ng;
  attn::Var<double, Shape<dyn, dyn, 8>> x(x0);
  auto base = a.forward_with_weights(ng, x, attn::KeepMask(mask), {.attn_mask = am3});
  Tensor<double> am3b = am3.clone();
  am3b(1, 3, 0) = -std::numeric_limits<double>::infinity();
  auto other = a.forward_with_weights(ng, x, attn::KeepMask(mask), {.attn_mask = am3b});
  CHECK(other.weights(0, 1, 3, 0) == 0.0);
  CHECK(base.weights(0, 1, 3, 0) > 0.0);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (!(h == 1 && i == 3)) CHECK(other.weights(0, h, i, j) == base.weights(0, h, i, j));
}

TEST_CASE("per-head attn_mask: a wrong shape, the flash kernel and AttentionStats are errors naming the layer") {
  nn::Attention<2, 8> a(nullptr, "attn");
  attn::NoGrad ng;
  attn::Var<float, Shape<dyn, dyn, 8>> x(random<float>({3, 4, 8}));
  CHECK_THROWS_WITH(a(ng, x, {.attn_mask = random<float>({3, 4, 4})}), Catch::Contains("(batch * heads, time, time)"));
  CHECK_THROWS_AS(a(ng, x, {.attn_mask = random<float>({6, 4, 5})}), attn::ShapeError);
  CHECK_THROWS_WITH(a(ng, x, {.attn_mask = random<float>({6, 4, 4}), .kernel = AttentionKernel::flash}), Catch::Contains("not the flash kernel"));
  attn::AttentionStats stats;
  CHECK_THROWS_WITH(a(ng, x, {.attn_mask = random<float>({6, 4, 4}), .stats = &stats}), Catch::Contains("AttentionStats"));
  CHECK_THROWS_WITH(a(ng, x, {.attn_mask = random<float>({4, 5})}), Catch::Contains("(time, time) or (batch * heads, time, time)"));
  CHECK_NOTHROW(a(ng, x, {.attn_mask = random<float>({6, 4, 4})}));
}

TEST_CASE("golden: rotary position embeddings match torch with the rotation written out (rotate_half, and interleaved pairs on part of each head under causal)") {
  golden_all<2, 16>("mha_rotary");
  golden_all<2, 16>("mha_rotary_partial_interleaved_causal");
}

TEST_CASE("rotary: project, project_query and project_key_value at a common position give self-attention's output at any position") {
  nn::Attention<2, 8, double> a(nullptr, "attn", {.rotary = nn::RotaryOptions{.base = 50}});
  attn::NoGrad ng;
  attn::Var<double, Shape<dyn, dyn, 8>> x(random<double>({2, 6, 8}));
  const auto want = a(ng, x).value();
  for (std::size_t position : {0, 5}) {
    INFO("position " << position);
    const auto kv = a.project_key_value(ng, x, position);
    const auto y = a.attend(ng, a.project_query(ng, x, position), kv.k, kv.v).value();
    CHECK(rel_diff(y, want) < 1e-12);
    const auto p = a.project(ng, x, position);
    CHECK(rel_diff(p.k.value(), kv.k.value()) < 1e-14);
    CHECK(rel_diff(a.attend(ng, p.q, p.k, p.v).value(), want) < 1e-12);
  }
  // Without the rotation the output differs: the positions reach the scores.
  nn::Attention<2, 8, double> plain(nullptr, "attn");
  for (auto& [name, v] : plain.named_parameter_vars<double>()) set_value(v, a.named_parameter_vars<double>().at(name).value().clone());
  CHECK(rel_diff(plain(ng, x).value(), want) > 1e-6);
  CHECK_THROWS_WITH(a(ng, x, x, x), Catch::Contains("rotary"));
  CHECK_THROWS_WITH((nn::Attention<2, 8, double>(nullptr, "odd", {.rotary = nn::RotaryOptions{.dim = 3}})), Catch::Contains("'odd'"));
  CHECK_THROWS_WITH((nn::Attention<2, 8, double>(nullptr, "wide", {.rotary = nn::RotaryOptions{.dim = 6}})), Catch::Contains("head width 4"));
}

TEST_CASE("golden: a fully padded sample gives zero weights and out = out_proj.bias, never NaN") {
  golden_all<2, 16>("mha_h2_fullpad");
  nn::Attention<2, 16> a(nullptr, "attn");
  auto f = golden::load("mha_h2_fullpad");
  set_value(a.in_proj_weight, golden::tensor<float>(f, "in_proj_weight"));
  set_value(a.out_proj.bias, golden::tensor<float>(f, "out_proj.bias"));
  attn::NoGrad ng;
  attn::Var<float> x(golden::tensor<float>(f, "x"));
  auto r = a.forward_with_weights(ng, x, attn::KeepMask(golden::tensor<float>(f, "mask")));
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        CHECK(r.weights(1, h, i, j) == 0.0f);
        if (j >= 3) CHECK(r.weights(2, h, i, j) == 0.0f);  // padded keys of sample 2 get exactly no weight
      }
  for (std::size_t t = 0; t < 5; ++t)
    for (std::size_t c = 0; c < 16; ++c) CHECK(r.out.value()(1, t, c) == a.out_proj.bias.raw()[c]);
}

TEST_CASE("masks: torch's key_padding_mask is a PaddingMask, and every form of the same batch gives the same output") {
  auto f = golden::load("mha_h2");
  nn::Attention<2, 16> a(nullptr, "attn");
  set_value(a.in_proj_weight, golden::tensor<float>(f, "in_proj_weight"));
  set_value(a.in_proj_bias, golden::tensor<float>(f, "in_proj_bias"));
  set_value(a.out_proj.weight, golden::tensor<float>(f, "out_proj.weight"));
  set_value(a.out_proj.bias, golden::tensor<float>(f, "out_proj.bias"));
  const auto keep = golden::tensor<float>(f, "mask");  // 1 = a real token
  const std::size_t b = keep.size(0), t = keep.size(1);
  Tensor<bool> key_padding_mask(Dims{b, t});  // torch's convention: true = padding
  Tensor<std::uint8_t> keep_u8(Dims{b, t});
  Tensor<double> pad_f64(Dims{b, t});
  for (std::size_t i = 0; i < keep.numel(); ++i) {
    key_padding_mask[i] = keep[i] == 0.0f;
    keep_u8[i] = keep[i] != 0.0f ? 1 : 0;
    pad_f64[i] = keep[i] == 0.0f ? 1.0 : 0.0;
  }
  REQUIRE(keep.numel() > 0);
  attn::NoGrad ng;
  attn::Var<float> x(golden::tensor<float>(f, "x"));
  const auto ref = a(ng, x, attn::KeepMask(keep)).value();
  golden::expect_close(f, "out", a(ng, x, attn::PaddingMask(key_padding_mask)).value(), 1e-5);
  CHECK(rel_diff(a(ng, x, attn::KeepMask(keep_u8)).value(), ref) == 0.0);
  CHECK(rel_diff(a(ng, x, attn::PaddingMask(pad_f64)).value(), ref) == 0.0);
  const auto lengths = attn::mask_lengths(attn::KeepMask(keep), b, t, "test");
  CHECK(rel_diff(a(ng, x, attn::Lengths(std::vector<int>(lengths.begin(), lengths.end()))).value(), ref) == 0.0);
  CHECK(rel_diff(nn::masked_mean(ng, x, attn::PaddingMask(key_padding_mask)).value(), nn::masked_mean(ng, x, attn::KeepMask(keep)).value()) == 0.0);
  // The inverted reading that a bare tensor allowed gives other numbers: the forms are not interchangeable.
  CHECK(rel_diff(a(ng, x, attn::KeepMask(pad_f64)).value(), ref) > 1e-2);
}

TEST_CASE("masks: values other than 0 and 1, wrong shapes and bad lengths are errors naming the caller") {
  nn::Attention<2, 8> a(nullptr, "attn");
  attn::NoGrad ng;
  attn::Var<float> x(random<float>({2, 3, 8}));
  auto half = Tensor<float>::full({2, 3}, 1.0f);
  half(1, 2) = 0.5f;
  CHECK_THROWS_WITH(a(ng, x, attn::KeepMask(half)),
                    Catch::Contains("nn::Attention") && Catch::Contains("KeepMask holds 0.5") && Catch::Contains("(1, 2)"));
  auto additive = Tensor<float>::zeros({2, 3});  // torch's additive float key_padding_mask: -inf = padding
  additive(0, 2) = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(a(ng, x, attn::PaddingMask(additive)), Catch::Contains("0 and 1 only") && Catch::Contains("-inf"));
  CHECK_THROWS_AS(a(ng, x, attn::KeepMask(Tensor<float>::full({2, 4}, 1.0f))), attn::ShapeError);
  CHECK_THROWS_WITH(a(ng, x, attn::Lengths{3}), Catch::Contains("1 lengths for a batch of 2"));
  CHECK_THROWS_WITH(a(ng, x, attn::Lengths{3, 4}), Catch::Contains("lengths[1] = 4") && Catch::Contains("[1, 3]"));
  CHECK_THROWS_WITH(a(ng, x, attn::Lengths{0, 3}), Catch::Contains("lengths[0] = 0"));
  CHECK_THROWS_WITH(nn::masked_mean(ng, x, attn::KeepMask(half)), Catch::Contains("masked_mean"));
  CHECK_THROWS_WITH(nn::masked_max(ng, x, attn::Lengths{4, 1}), Catch::Contains("masked_max"));
  CHECK_THROWS_WITH(attn::Lengths(Tensor<std::int64_t>::from({2}, {3, -1})), Catch::Contains("lengths[1] = -1"));
  // No mask: every position real, the same as a full one.
  CHECK(rel_diff(a(ng, x).value(), a(ng, x, attn::Lengths{3, 3}).value()) == 0.0);
}

TEST_CASE("Attention: NoGrad and Tape agree, eval mode disables dropout, weights rows sum to 1") {
  nn::Attention<4, 32> a(nullptr, "attn", {.dropout = 0.5});
  auto x = random<float>({2, 9, 32});
  auto mask = lengths_mask<float>({9, 4}, 9);
  attn::NoGrad ng;
  Tape tape;
  a.eval();
  auto y0 = a(ng, attn::Var<float>(x), attn::KeepMask(mask)).value();
  auto y1 = a(tape, attn::Var<float>(x, true), attn::KeepMask(mask)).value();
  CHECK(rel_diff(y0, y1) == 0.0);
  a.train();
  auto y2 = a(ng, attn::Var<float>(x), attn::KeepMask(mask)).value();
  CHECK(rel_diff(y2, y0) > 1e-3);  // dropout is active in training mode
  a.eval();
  auto r = a.forward_with_weights(ng, attn::Var<float>(x), attn::KeepMask(mask));
  CHECK(rel_diff(r.out.value(), y0) <= 1e-6);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 4; ++h)
      for (std::size_t i = 0; i < 9; ++i) {
        double s = 0;
        for (std::size_t j = 0; j < 9; ++j) s += r.weights(b, h, i, j);
        CHECK(s == Approx(1.0).epsilon(1e-5));
      }
}

TEST_CASE("Attention: in training, forward_with_weights returns the weights after dropout, those that make the output (torch's need_weights)") {
  constexpr std::size_t H = 2, E = 8, hd = E / H, n = 5;
  nn::Attention<H, E, double> a(nullptr, "attn", {.dropout = 0.5, .bias = false});
  const auto x = random<double>({1, n, E});
  attn::NoGrad ng(11);
  a.train();
  auto r = a.forward_with_weights(ng, attn::Var<double>(x));
  const auto w_in = a.in_proj_weight.value();
  const auto w_out = a.out_proj.weight.value();
  bool dropped = false;
  std::vector<double> o(n * E, 0.0);  // concat over heads of weights_h V_h
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double wij = r.weights(0, h, i, j);
        dropped = dropped || wij == 0.0;
        for (std::size_t c = 0; c < hd; ++c) {
          double v = 0;  // V[j, h hd + c] = x[j] . w_in[2E + h hd + c]
          for (std::size_t k = 0; k < E; ++k) v += x(0, j, k) * w_in(2 * E + h * hd + c, k);
          o[i * E + h * hd + c] += wij * v;
        }
      }
  CHECK(dropped);
  const auto out = r.out.value();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < E; ++e) {
      double y = 0;
      for (std::size_t k = 0; k < E; ++k) y += o[i * E + k] * w_out(e, k);
      CHECK(out(0, i, e) == Approx(y).epsilon(1e-12));
    }
}

TEST_CASE("Attention, PaddedRows::zero: the real rows and every gradient match PaddedRows::compute, padded rows are zero") {
  const std::size_t n = 11;
  // Ragged lengths with a fully padded sample; the same with holes (padding before real tokens: the
  // padded rows are then zeroed, not skipped); no padding at all (the unpacked path); all padding.
  for (int config = 0; config < 4; ++config) {
    const auto lens = config < 2 ? std::vector<std::size_t>{11, 3, 0, 7} : config == 2 ? std::vector<std::size_t>{11, 11} : std::vector<std::size_t>{0, 0};
    const std::size_t bn = lens.size();
    auto mask = lengths_mask<float>(lens, n);
    if (config == 1) mask(0, 4) = mask(3, 0) = 0.f;
    auto x = random<float>({bn, n, 32});
    Tensor<float> dout = random<float>({bn, n, 32});
    for (std::size_t i = 0; i < bn * n; ++i)  // the loss reads the real rows only
      if (mask[i] == 0.f) std::fill_n(dout.data() + i * 32, 32, 0.f);
    nn::Attention<4, 32> ref(nullptr, "attn"), skip(nullptr, "attn", {.padded = nn::PaddedRows::zero});
    // With rotary embeddings, which turn the projection's rows (the unwritten ones too) before the kernel.
    nn::Attention<4, 32> ref_rope(nullptr, "attn", {.rotary = nn::RotaryOptions{}}),
        skip_rope(nullptr, "attn", {.padded = nn::PaddedRows::zero, .rotary = nn::RotaryOptions{}});
    struct Run {
      Tensor<float> y, gx;
      std::vector<Tensor<float>> gp;
    };
    auto run = [&](nn::Attention<4, 32>& a, AttentionKernel kernel, const Tensor<float>& am) {
      // Leaves NaN in the host pool's block of qkv's size: a padded row that is read but not
      // written would turn the result into NaN.
      Tensor<float>::full({bn, n, 96}, std::numeric_limits<float>::quiet_NaN());
      Tape tape;
      attn::Var<float, Shape<dyn, dyn, 32>> xv(x.clone(), true);
      auto y = a(tape, xv, attn::KeepMask(mask), {.attn_mask = am, .kernel = kernel});
      tape.backward(y, dout);
      Run r{y.value().erased().clone(), xv.grad().erased().clone(), {}};
      for (auto& p : a.parameters<float>()) r.gp.push_back(p.grad().erased().clone());
      a.zero_grad();
      return r;
    };
    // The flash kernel, the naive one, a per-head attn_mask (cross_attention); then the three with rotary embeddings.
    for (int mode = 0; mode < 6; ++mode) {
      const int m = mode % 3;
      INFO("mask " << config << (m == 0 ? " flash" : m == 1 ? " naive" : " per-head attn_mask") << (mode >= 3 ? ", rotary" : ""));
      const auto kernel = m == 0 ? AttentionKernel::flash : m == 1 ? AttentionKernel::naive : AttentionKernel::automatic;
      const Tensor<float> am = m == 2 ? random<float>({bn * 4, n, n}) : Tensor<float>();
      Run a = run(mode >= 3 ? ref_rope : ref, kernel, am), b = run(mode >= 3 ? skip_rope : skip, kernel, am);
      double real = 0, pad = 0, scale = 1e-30;
      for (std::size_t i = 0; i < bn * n; ++i)
        for (std::size_t c = 0; c < 32; ++c) {
          const double d = std::abs(double(a.y[i * 32 + c]) - double(b.y[i * 32 + c]));
          if (mask[i] != 0.f) real = std::max(real, d), scale = std::max(scale, std::abs(double(a.y[i * 32 + c])));
          else pad = std::max(pad, std::abs(double(b.y[i * 32 + c])));
        }
      CHECK(real / scale <= 1e-5);
      CHECK(pad == 0.0);
      CHECK(rel_diff(b.gx, a.gx) <= 1e-5);
      REQUIRE(a.gp.size() == b.gp.size());
      for (std::size_t p = 0; p < a.gp.size(); ++p) CHECK(rel_diff(b.gp[p], a.gp[p]) <= 1e-5);
    }
  }
}

TEST_CASE("attention dropout: drops about p of the weights and scales the rest by 1/(1-p)") {
  attn::kernels::mha::DropMask<double> drop(0.3, 12345);
  std::size_t zeros = 0;
  const std::size_t n = 200000;
  for (std::size_t i = 0; i < n; ++i) {
    const double z = drop(i);
    if (z == 0) ++zeros;
    else CHECK(z == Approx(1 / 0.7));
  }
  CHECK(double(zeros) / n == Approx(0.3).margin(0.005));
  attn::kernels::mha::DropMask<double> other(0.3, 12346);
  std::size_t same = 0;
  for (std::size_t i = 0; i < 1000; ++i) same += (drop(i) == 0) == (other(i) == 0);
  CHECK(same < 700);  // another seed gives another mask
}

TEST_CASE("flash attention keeps O(T) memory: no T x T buffer at T = 2048") {
  const std::size_t n = 2048;
  nn::Attention<4, 64> a(nullptr, "attn");
  auto x = random<float>({1, n, 64});
  auto mask = lengths_mask<float>({1800}, n);
  attn::AttentionStats flash;
  {
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, 64>> xv(x, true);
    const auto allocs = attn::cpu::allocations();
    auto y = a(tape, xv, attn::KeepMask(mask), {.stats = &flash});
    tape.backward(y, random<float>({1, n, 64}));
    CHECK(attn::cpu::allocations() - allocs < 40);
    REQUIRE(all_finite(xv.grad().erased()));
  }
  const std::size_t tt = n * n * sizeof(float);
  INFO("flash: largest " << flash.largest_bytes << " B, total " << flash.total_bytes << " B, saved " << flash.saved_bytes << " B");
  CHECK(flash.saved_bytes == 4 * n * sizeof(float));  // the logsumexp per (head, row)
  CHECK(flash.largest_bytes < tt / 16);
  CHECK(flash.total_bytes < tt / 4);
  // The counter sees a T x T buffer when there is one: the naive kernel at T = 512.
  attn::AttentionStats naive;
  {
    const std::size_t m = 512;
    Tape tape;
    attn::Var<float> xv(random<float>({1, m, 64}), true);
    auto y = a(tape, xv, attn::KeepMask(lengths_mask<float>({m}, m)), {.kernel = AttentionKernel::naive, .stats = &naive});
    tape.backward(y, random<float>({1, m, 64}));
    CHECK(naive.saved_bytes == 4 * m * m * sizeof(float));
    CHECK(naive.largest_bytes >= 4 * m * m * sizeof(float));
  }
}

TEST_CASE("a first gradient is written over an uninitialised buffer (flash backward, linear's dx), later ones are added") {
  // x -> linear -> qkv -> flash attention: both backward steps receive a gradient buffer that nothing
  // has written yet (VarData::grad_to_write) and must store every element of it, padding rows too.
  constexpr std::size_t B = 2, T = 37, D = 32, H = 2;
  const auto xv = random<float>({B, T, D});
  const auto w = random<float>({3 * D, D}, -0.3, 0.3), bias = random<float>({3 * D});
  const auto dout = random<float>({B, T, D});
  const Tensor<float> keep = lengths_mask<float>({T, 20}, T);
  const auto run = [&](attn::Var<float>& x, attn::Var<float>& qkv_out, AttentionKernel kernel) {
    Tape tape;
    attn::Var<float> wv(w, true), bv(bias, true);
    auto qkv = attn::linear(tape, x, wv, bv);
    auto y = attn::self_attention(tape, qkv, {.heads = H, .key_mask = keep, .kernel = kernel});
    tape.backward(y, dout);
    qkv_out = qkv;
  };
  // The pool hands out blocks it has cached: leave several blocks of both gradients' sizes full
  // of NaN (the forward's values take some of them).
  {
    std::vector<Tensor<float>> junk;
    for (int k = 0; k < 4; ++k)
      for (const Dims& d : {Dims{B, T, 3 * D}, Dims{B, T, D}}) {
        junk.emplace_back(d);
        for (std::size_t i = 0; i < junk.back().numel(); ++i) junk.back()[i] = std::numeric_limits<float>::quiet_NaN();
      }
  }
  attn::Var<float> x(xv, true), qkv, x_ref(xv, true), qkv_ref;
  run(x, qkv, AttentionKernel::flash);
  run(x_ref, qkv_ref, AttentionKernel::naive);  // naive: gradients added to zeros
  CHECK(all_finite(x.grad()));
  CHECK(rel_diff(x.grad(), x_ref.grad()) < 1e-5);
  // A second backward into the same leaf adds: twice the first gradient, exactly.
  const Tensor<float> first = x.grad().clone();
  run(x, qkv, AttentionKernel::flash);
  bool doubled = true;
  for (std::size_t i = 0; i < first.numel(); ++i) doubled = doubled && x.grad()[i] == 2 * first[i];
  CHECK(doubled);
}

TEST_CASE("flash backward, clear_grad: over a buffer of NaN it writes what accumulating into zeros gives, bit for bit") {
  // Every row of each head's dQ, dK and dV is written: rows with sums, a key tile with no real key
  // (keys 128-255 of sample 0 masked), keys and queries after the last real key (skip_padded_queries),
  // a fully padded sample, and the tiles a window pattern skips.
  constexpr std::size_t B = 3, T = 300, H = 2, hd = 16, D = H * hd;
  const auto qkv = random<float>({B, T, 3 * D});
  const auto dout = random<float>({B, T, D});
  Tensor<float> keep = lengths_mask<float>({T, 170, 0}, T);
  for (std::size_t j = 128; j < 256; ++j) keep(0, j) = 0.f;
  for (bool window : {false, true})
    for (bool skip : {false, true}) {
      INFO((window ? "window 40, 2 global" : "dense") << (skip ? ", skip_padded_queries" : ""));
      attn::kernels::MhaProblem<float> p;
      p.batch = B, p.time = T, p.heads = H, p.head_dim = hd;
      p.qkv = qkv.data(), p.key_mask = keep.data();
      p.scale = 1.f / std::sqrt(float(hd));
      p.skip_padded_queries = skip;
      if (window) p.pattern.window = 40, p.pattern.global = 2;
      Tensor<float> out({B, T, D}), lse({B, H, T});
      attn::kernels::mha_flash_forward(attn::cpu{}, p, out.data(), lse.data(), nullptr);
      auto added = Tensor<float>::zeros({B, T, 3 * D});
      attn::kernels::mha_flash_backward(attn::cpu{}, p, out.data(), dout.data(), lse.data(), added.data(), nullptr);
      Tensor<float> written({B, T, 3 * D});
      for (std::size_t i = 0; i < written.numel(); ++i) written[i] = std::numeric_limits<float>::quiet_NaN();
      p.clear_grad = true;
      attn::kernels::mha_flash_backward(attn::cpu{}, p, out.data(), dout.data(), lse.data(), written.data(), nullptr);
      std::size_t differ = 0, nonzero = 0;
      for (std::size_t i = 0; i < added.numel(); ++i) {
        differ += std::memcmp(&added[i], &written[i], sizeof(float)) != 0;
        nonzero += added[i] != 0.f;
      }
      CHECK(differ == 0);
      CHECK(nonzero > added.numel() / 4);
    }
}

TEST_CASE("flash, scores kept by forward: backward reads them and gives the recomputing backward's gradient, bit for bit") {
  // Kept scores (MhaProblem::scores) against the O(T) path on the same problem: key padding with a
  // fully padded sample, an additive mask, dropout, several tiles per side; FP32 and bf16 tiles.
  constexpr std::size_t B = 3, T = 150, H = 2, hd = 24, D = H * hd;
  const auto qkv = random<float>({B, T, 3 * D});
  const auto dout = random<float>({B, T, D});
  const Tensor<float> keep = lengths_mask<float>({T, 70, 0}, T);
  Tensor<float> am = random<float>({T, T});
  for (std::size_t i = 0; i < T; ++i) am(i, (i * 7) % T) = -std::numeric_limits<float>::infinity();
  for (bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16 tiles" : "FP32 tiles"));
    attn::kernels::MhaProblem<float> p;
    p.batch = B, p.time = T, p.heads = H, p.head_dim = hd;
    p.qkv = qkv.data(), p.key_mask = keep.data(), p.attn_mask = am.data();
    p.scale = 1.f / std::sqrt(float(hd));
    p.dropout = 0.2, p.seed = 99;
    p.bf16 = bf16;
    Tensor<float> out0({B, T, D}), lse0({B, H, T}), out1({B, T, D}), lse1({B, H, T}), scores({B, H, T, T});
    auto g0 = Tensor<float>::zeros({B, T, 3 * D}), g1 = Tensor<float>::zeros({B, T, 3 * D});
    attn::kernels::mha_flash_forward(attn::cpu{}, p, out0.data(), lse0.data(), nullptr);
    attn::kernels::mha_flash_backward(attn::cpu{}, p, out0.data(), dout.data(), lse0.data(), g0.data(), nullptr);
    p.scores = scores.data();
    attn::kernels::mha_flash_forward(attn::cpu{}, p, out1.data(), lse1.data(), nullptr);
    attn::kernels::mha_flash_backward(attn::cpu{}, p, out1.data(), dout.data(), lse1.data(), g1.data(), nullptr);
    bool same = true, nonzero = false;
    for (std::size_t i = 0; i < out0.numel(); ++i) same = same && out0[i] == out1[i];
    for (std::size_t i = 0; i < g0.numel(); ++i) {
      same = same && g0[i] == g1[i];
      nonzero = nonzero || g1[i] != 0.f;
    }
    CHECK(same);
    CHECK(nonzero);
  }
}
