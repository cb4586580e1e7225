// SPDX-License-Identifier: MIT
// nn::TransformerEncoderLayer and nn::TransformerEncoder: PyTorch's parameter names, PyTorch goldens
// (post-norm relu, pre-norm gelu, a stack of two with a final norm, padded batches), gradient
// checks of every input and parameter in double for both norm orders, and per-layer checkpointing:
// bit-identical gradients with dropout and a lower host-pool peak.
#include "../gradcheck_util.hpp"
#include "attention_test_util.hpp"
#include "../golden_util.hpp"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <attn/nn/encoder.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
namespace nn = attn::nn;

using testutil::random;
using testutil::set_value;

namespace {

/// Every parameter's gradient, by name.
template <class T>
std::map<std::string, std::vector<T>> grads_of(const nn::Module& m) {
  std::map<std::string, std::vector<T>> g;
  for (auto& [name, v] : m.named_parameter_vars<T>()) g[name] = v.grad().empty() ? std::vector<T>{} : v.grad().to_vector();
  return g;
}

const std::vector<std::string> torch_layer_names = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "linear1.weight",           "linear1.bias",           "linear2.weight",            "linear2.bias",
    "norm1.weight",             "norm1.bias",             "norm2.weight",              "norm2.bias"};

/// The golden's hyper-parameters as layer options (dropout 0).
nn::TransformerEncoderLayerOptions golden_options(const attn::io::SafetensorsFile& f) {
  return {.dim_feedforward = std::stoul(f.metadata.at("dim_feedforward")),
          .dropout = 0.0,
          .activation = nn::activation_from_name(f.metadata.at("activation")),
          .gated = f.metadata.count("gated") && f.metadata.at("gated") == "true",
          .norm_first = f.metadata.at("norm_first") == "true",
          .norm = f.metadata.count("norm") && f.metadata.at("norm") == "rms" ? nn::NormKind::rms : nn::NormKind::layer,
          .layer_norm_eps = std::stod(f.metadata.at("layer_norm_eps")),
          .bias = !f.metadata.count("bias") || f.metadata.at("bias") == "true"};
}

/// Loads every parameter of m from golden file f (by PyTorch's names), runs x through run(tape, x,
/// mask) in training mode, and compares out, grad.x and the gradient of every parameter.
template <class T, class Model, class Run>
void golden_check(const attn::io::SafetensorsFile& f, Model& m, Run&& run, double tol) {
  std::set<std::string> stored;
  for (auto& [name, r] : f.tensors)
    if (name != "x" && name != "mask" && name != "dout" && name != "out" && name.rfind("grad.", 0) != 0) stored.insert(name);
  std::set<std::string> ours;
  for (auto& [name, p] : m.named_parameters()) ours.insert(name);
  CHECK(ours == stored);  // the same names as torch's state_dict
  for (auto& [name, v] : m.template named_parameter_vars<T>()) set_value(v, golden::tensor<T>(f, name));
  m.train();
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, 16>> x(golden::tensor<T>(f, "x"), true);
  auto y = run(tape, x, attn::KeepMask(golden::tensor<T>(f, "mask")));
  golden::expect_close(f, "out", y.value(), tol);
  tape.backward(y, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.x", x.grad(), tol);
  for (auto& [name, v] : m.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + name, v.grad(), tol);
}

using GradLayer = nn::TransformerEncoderLayer<2, 8, double>;

/// A gradient check's inputs for a layer: x of extents x_dims, then every parameter in
/// named_parameters() order (inputs 1..12), the norm weights near 1.
std::vector<Tensor<double>> gradcheck_inputs(const GradLayer& layer, attn::Rng& rng, const Dims& x_dims) {
  std::vector<Tensor<double>> in = {random<double>(rng, x_dims)};
  for (auto& [name, p] : layer.named_parameters()) in.push_back(random<double>(rng, p->dims(), -0.8, 0.8));
  for (std::size_t i = 9; i <= 12; i += 2)
    for (std::size_t k = 0; k < in[i].numel(); ++k) in[i][k] += 1.0;
  return in;
}

/// Points the layer's parameters at the check's inputs 1..12 (gradcheck_inputs' order).
void bind_parameters(GradLayer& layer, std::vector<attn::Var<double>>& v) {
  layer.self_attn.in_proj_weight = v[1];
  layer.self_attn.in_proj_bias = v[2];
  layer.self_attn.out_proj.weight = v[3];
  layer.self_attn.out_proj.bias = v[4];
  layer.linear1.weight = v[5];
  layer.linear1.bias = v[6];
  layer.linear2.weight = v[7];
  layer.linear2.bias = v[8];
  layer.norm1.weight = v[9];
  layer.norm1.bias = v[10];
  layer.norm2.weight = v[11];
  layer.norm2.bias = v[12];
}

template <class T>
void golden_layer(const std::string& file, double tol) {
  auto f = golden::load(file);
  nn::TransformerEncoderLayer<4, 16, T> layer(nullptr, "layer", golden_options(f));
  golden_check<T>(f, layer, [&](Tape& t, const auto& x, const auto& mask) { return layer(t, x, mask); }, tol);
}

template <class T>
void golden_stack(bool checkpoint, double tol, const std::string& file = "encoder_stack") {
  auto f = golden::load(file);
  nn::TransformerEncoder<4, 16, T> enc(nullptr, "encoder",
                                       {.num_layers = 2, .layer = golden_options(f), .final_norm = true, .checkpoint = checkpoint});
  golden_check<T>(f, enc, [&](Tape& t, const auto& x, const auto& mask) { return enc(t, x, mask); }, tol);
}

}  // namespace

TEST_CASE("TransformerEncoderLayer: PyTorch parameter names, shapes, options and errors") {
  nn::TransformerEncoderLayer<4, 16> layer(nullptr, "layer", {.dim_feedforward = 32});
  auto np = layer.named_parameters();
  REQUIRE(np.size() == torch_layer_names.size());
  for (std::size_t i = 0; i < np.size(); ++i) CHECK(np[i].first == torch_layer_names[i]);
  CHECK(layer.parameter("linear1.weight").dims() == Dims{32, 16});
  CHECK(layer.parameter("linear2.weight").dims() == Dims{16, 32});
  CHECK(layer.parameter("norm2.bias").dims() == Dims{16});
  CHECK(layer.dim_feedforward() == 32);
  CHECK(nn::TransformerEncoderLayer<4, 16>(nullptr, "d").dim_feedforward() == 64);  // default: 4 * Dim
  {  // bias = false drops every bias, the norms' too (torch >= 2.1's bias=False)
    const auto nb = nn::TransformerEncoderLayer<4, 16>(nullptr, "nb", {.bias = false}).named_parameters();
    std::vector<std::string> names;
    for (auto& [name, v] : nb) names.push_back(name);
    CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight", "linear2.weight",
                                            "norm1.weight", "norm2.weight"});
    nn::TransformerEncoder<4, 16> stack(nullptr, "s", {.num_layers = 2, .layer = {.bias = false}, .final_norm = true});
    CHECK(stack.named_parameters().size() == 13);  // 6 per layer, the final norm's weight
  }

  CHECK_THROWS_AS((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.dropout = 1.0})), attn::ArgumentError);
  CHECK_THROWS_WITH((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.dropout = -0.5})), Catch::Contains("TransformerEncoderLayer 'bad'"));
  CHECK_THROWS_AS((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.layer_norm_eps = 0})), attn::ArgumentError);
  CHECK_THROWS_WITH((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.attention_dropout = 1.0})), Catch::Contains("attention_dropout"));
  CHECK_THROWS_WITH((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.window = 0})), Catch::Contains("window"));
  CHECK_THROWS_AS((nn::TransformerEncoder<4, 16>(nullptr, "bad", {.num_layers = 0})), attn::ArgumentError);

  attn::NoGrad ng;
  attn::Rng rng(3);
  attn::Var<float> wrong(random<float>(rng, {2, 3, 8}));
  CHECK_THROWS_AS(layer(ng, wrong), attn::ShapeError);
  attn::Var<float> x(random<float>(rng, {2, 3, 16}));
  CHECK_THROWS_AS(layer(ng, x, attn::Lengths{3, 2, 1}), attn::ShapeError);
  CHECK(layer(ng, x, attn::Lengths{3, 2}).dims() == Dims{2, 3, 16});

  nn::TransformerEncoder<4, 16> enc(nullptr, "encoder", {.num_layers = 3, .layer = {.dim_feedforward = 32}, .final_norm = true});
  auto names = enc.named_parameters();
  REQUIRE(names.size() == 3 * 12 + 2);
  CHECK(names[0].first == "layers.0.self_attn.in_proj_weight");
  CHECK(names[12].first == "layers.1.self_attn.in_proj_weight");
  CHECK(names[35].first == "layers.2.norm2.bias");
  CHECK(names[36].first == "norm.weight");
  CHECK(names[37].first == "norm.bias");
  CHECK(enc.size() == 3);
  // Under NoGrad a checkpointed stack is the plain one; without a mask every position is real.
  nn::TransformerEncoder<4, 16> enc_c(nullptr, "encoder", {.num_layers = 3, .layer = {.dim_feedforward = 32}, .final_norm = true, .checkpoint = true});
  enc.eval();
  enc_c.eval();
  CHECK(enc(ng, x, attn::Lengths{3, 2}).value().to_vector() == enc_c(ng, x, attn::Lengths{3, 2}).value().to_vector());
  CHECK(enc(ng, x).value().to_vector() == enc_c(ng, x, attn::Lengths{3, 3}).value().to_vector());
  Tape tape;
  attn::Var<float> xg(x.value().clone(), true);
  auto y = enc_c(tape, xg);
  tape.backward(attn::sum(tape, y));
  CHECK(y.value().to_vector() == enc(ng, x).value().to_vector());
  CHECK(!xg.grad().empty());
  CHECK(enc.norm() != nullptr);
  CHECK(nn::TransformerEncoder<4, 16>(nullptr, "e").norm() == nullptr);
}

TEST_CASE("golden: TransformerEncoderLayer matches torch.nn.TransformerEncoderLayer (post-norm relu, pre-norm gelu)") {
  // Padded positions (lengths 5, 3) are compared too: every query row is computed, as torch does.
  golden_layer<float>("encoder_layer_post_relu", 1e-5);
  golden_layer<double>("encoder_layer_post_relu", 1e-10);
  golden_layer<float>("encoder_layer_pre_gelu", 1e-5);
  golden_layer<double>("encoder_layer_pre_gelu", 1e-10);
}

TEST_CASE("golden: the feed-forward activations gelu_tanh and silu match torch's layers given F.gelu(approximate=tanh) and F.silu") {
  // encoder_layer_post_gelu_tanh: one post-norm layer; encoder_stack_pre_silu: 2 pre-norm layers
  // and a final norm (checkpointed too).
  golden_layer<float>("encoder_layer_post_gelu_tanh", 1e-5);
  golden_layer<double>("encoder_layer_post_gelu_tanh", 1e-10);
  golden_stack<float>(false, 1e-5, "encoder_stack_pre_silu");
  golden_stack<double>(false, 1e-10, "encoder_stack_pre_silu");
  golden_stack<double>(true, 1e-10, "encoder_stack_pre_silu");
}

TEST_CASE("golden: RMS norms and a SwiGLU feed-forward (gated) match torch's nn.RMSNorm, nn.MultiheadAttention and F.silu") {
  // encoder_layer_post_rms_swiglu: one post-norm layer with biases; encoder_stack_pre_rms_swiglu_nobias:
  // LLaMA's arrangement, two pre-norm layers without biases and a final RMS norm (checkpointed too).
  golden_layer<float>("encoder_layer_post_rms_swiglu", 1e-5);
  golden_layer<double>("encoder_layer_post_rms_swiglu", 1e-10);
  golden_stack<float>(false, 1e-5, "encoder_stack_pre_rms_swiglu_nobias");
  golden_stack<double>(false, 1e-10, "encoder_stack_pre_rms_swiglu_nobias");
  golden_stack<double>(true, 1e-10, "encoder_stack_pre_rms_swiglu_nobias");
}

TEST_CASE("TransformerEncoderLayer with RMS norms and a gated feed-forward: names, shapes, gradients, errors") {
  nn::TransformerEncoder<2, 8, double> enc(
      nullptr, "enc",
      {.num_layers = 2,
       .layer = {.dim_feedforward = 12, .dropout = 0.0, .activation = nn::Activation::silu, .gated = true, .norm = nn::NormKind::rms},
       .final_norm = true});
  std::vector<std::string> names;
  for (auto& [n, p] : enc.named_parameters()) names.push_back(n);
  const std::vector<std::string> layer0 = {"layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                                           "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias",
                                           "layers.0.linear1.weight",            "layers.0.linear1.bias",
                                           "layers.0.linear2.weight",            "layers.0.linear2.bias",
                                           "layers.0.norm1.weight",              "layers.0.norm2.weight"};
  REQUIRE(names.size() == 2 * layer0.size() + 1);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 10) == layer0);
  CHECK(names.back() == "norm.weight");  // the final norm is an RMS norm too
  const auto& l = enc.layer(0);
  CHECK(l.linear1.weight.dims() == Dims{24, 8});  // gate and up projections, 2F rows
  CHECK(l.linear2.weight.dims() == Dims{8, 12});
  CHECK(l.dim_feedforward() == 12);
  CHECK(l.norm1.kind() == nn::NormKind::rms);
  CHECK(enc.norm()->kind() == nn::NormKind::rms);
  for (const auto& v : l.norm2.weight.raw().to_vector()) CHECK(v == 1.0);
  // Gradients of x and every parameter of one such layer (10: the norms have no bias).
  GradLayer layer(nullptr, "layer",
                  {.dim_feedforward = 12, .dropout = 0.0, .activation = nn::Activation::silu, .gated = true, .norm = nn::NormKind::rms});
  attn::Rng rng(21);
  std::vector<Tensor<double>> in = {random<double>(rng, {2, 4, 8})};
  for (auto& [name, p] : layer.named_parameters()) {
    in.push_back(random<double>(rng, p->dims(), -0.8, 0.8));
    if (name.starts_with("norm"))
      for (std::size_t k = 0; k < in.back().numel(); ++k) in.back()[k] += 1.0;
  }
  REQUIRE(in.size() == 11);
  testutil::check_gradients("rms + swiglu layer", [&](Tape& t, std::vector<attn::Var<double>>& v) {
    layer.self_attn.in_proj_weight = v[1];
    layer.self_attn.in_proj_bias = v[2];
    layer.self_attn.out_proj.weight = v[3];
    layer.self_attn.out_proj.bias = v[4];
    layer.linear1.weight = v[5];
    layer.linear1.bias = v[6];
    layer.linear2.weight = v[7];
    layer.linear2.bias = v[8];
    layer.norm1.weight = v[9];
    layer.norm2.weight = v[10];
    return layer(t, v[0], attn::Lengths{4, 2});
  }, in);
  // The norm kind is checked like the activation.
  CHECK_THROWS_WITH((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.norm = static_cast<nn::NormKind>(5)})),
                    Catch::Contains("value 5 is none of layer, rms"));
  CHECK(std::string(nn::norm_kind_name(nn::NormKind::rms)) == "rms");
}

TEST_CASE("nn::Activation: names both ways, and a value outside the enum is refused") {
  for (const auto a : {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::silu})
    CHECK(nn::activation_from_name(nn::activation_name(a)) == a);
  CHECK(std::size(nn::activations) == 4);
  CHECK(std::string(nn::activation_name(nn::Activation::gelu_tanh)) == "gelu_tanh");
  CHECK(nn::activation_names() == "relu, gelu, gelu_tanh, silu");
  CHECK(nn::activation_names("|") == "relu|gelu|gelu_tanh|silu");
  CHECK_THROWS_WITH(nn::activation_from_name("swish"), Catch::Contains("unknown activation 'swish' (relu, gelu, gelu_tanh, silu)"));
  CHECK_THROWS_WITH(nn::activation_name(static_cast<nn::Activation>(7)), Catch::Contains("value 7 is none of relu, gelu, gelu_tanh, silu"));
  CHECK_THROWS_AS(nn::activation_from_name(""), attn::ArgumentError);
  CHECK_THROWS_AS((nn::TransformerEncoderLayer<4, 16>(nullptr, "bad", {.activation = static_cast<nn::Activation>(7)})), attn::ArgumentError);
}

TEST_CASE("golden: TransformerEncoder (2 pre-norm layers and a final norm) matches torch.nn.TransformerEncoder, checkpointed or not") {
  golden_stack<float>(false, 1e-5);
  golden_stack<double>(false, 1e-10);
  golden_stack<float>(true, 1e-5);
  golden_stack<double>(true, 1e-10);
}

TEST_CASE("golden: TransformerEncoder without biases (2 post-norm layers, final norm) matches torch's bias=False") {
  // torch >= 2.1 drops the norms' biases too: 6 parameters a layer, the final norm's weight alone.
  golden_stack<float>(false, 1e-5, "encoder_stack_nobias");
  golden_stack<double>(false, 1e-10, "encoder_stack_nobias");
  golden_stack<double>(true, 1e-10, "encoder_stack_nobias");
}

TEST_CASE("TransformerEncoderLayer: every mask form and PaddedRows::zero give the same real rows") {
  auto f = golden::load("encoder_layer_pre_gelu");
  auto opt = golden_options(f);
  nn::TransformerEncoderLayer<4, 16> layer(nullptr, "layer", opt);
  opt.padded = nn::PaddedRows::zero;
  nn::TransformerEncoderLayer<4, 16> packed(nullptr, "layer", opt);
  for (auto* m : {&layer, &packed})
    for (auto& [name, v] : m->named_parameter_vars<float>()) set_value(v, golden::tensor<float>(f, name));
  attn::NoGrad ng;
  attn::Var<float> x(golden::tensor<float>(f, "x"));
  Tensor<float> padding = golden::tensor<float>(f, "mask");
  for (std::size_t i = 0; i < padding.numel(); ++i) padding[i] = 1 - padding[i];
  golden::expect_close(f, "out", layer(ng, x, attn::Lengths{5, 3}).value(), 1e-5);
  golden::expect_close(f, "out", layer(ng, x, attn::PaddingMask(padding)).value(), 1e-5);
  // Sample 0 has no padding; sample 1's first three rows are real.
  const auto want = layer(ng, x, attn::Lengths{5, 3}).value();
  const auto got = packed(ng, x, attn::Lengths{5, 3}).value();
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < (b == 0 ? 5u : 3u); ++t)
      for (std::size_t d = 0; d < 16; ++d) CHECK(got(b, t, d) == Approx(want(b, t, d)).margin(1e-5));
}

TEST_CASE("TransformerEncoder: forward_with_weights gives the plain output and each layer's weights, and the window reaches the attention") {
  attn::Rng rng(7);
  const Tensor<float> x = random<float>(rng, {2, 9, 16});
  for (const std::optional<std::int64_t> window : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{2}}) {
    nn::TransformerEncoder<4, 16> enc(nullptr, "enc", {.num_layers = 2, .layer = {.dropout = 0.3, .attention_dropout = 0.0, .window = window}});
    enc.eval();
    attn::NoGrad ng;
    const auto plain = enc(ng, attn::Var<float>(x), attn::Lengths{9, 6}).value();
    const auto r = enc.forward_with_weights(ng, attn::Var<float>(x), attn::Lengths{9, 6});
    REQUIRE(r.weights.size() == 2);
    for (std::size_t i = 0; i < plain.numel(); ++i) CHECK(r.out.value()[i] == Approx(plain[i]).margin(1e-5));
    for (const auto& w : r.weights) {
      REQUIRE(w.dims() == Dims{2, 4, 9, 9});
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t h = 0; h < 4; ++h)
          for (std::size_t q = 0; q < (b ? 6u : 9u); ++q) {
            double sum = 0;
            for (std::size_t k = 0; k < 9; ++k) {
              const bool visible = k < (b ? 6u : 9u) && (!window || (q > k ? q - k : k - q) <= std::size_t(*window));
              if (!visible) CHECK(w(b, h, q, k) == 0.0f);
              sum += w(b, h, q, k);
            }
            CHECK(sum == Approx(1.0).margin(1e-5));
          }
    }
    // The layer's own forward_with_weights agrees with the stack's first layer.
    const auto first = enc.layer(0).forward_with_weights(ng, attn::Var<float>(x), attn::Lengths{9, 6});
    for (std::size_t i = 0; i < first.weights.numel(); ++i) CHECK(first.weights.data()[i] == Approx(r.weights[0].data()[i]).margin(1e-6));
  }
  // attention_dropout is the attention's own rate: with every other dropout 0, a training-mode
  // output differs from the eval-mode one only when attention_dropout is positive.
  auto changed_by_training = [&](nn::TransformerEncoderLayerOptions opt) {
    nn::TransformerEncoderLayer<4, 16> layer(nullptr, "layer", opt);
    attn::NoGrad ng;
    layer.eval();
    const auto want = layer(ng, attn::Var<float>(x)).value();
    layer.train();
    attn::Tape tape;
    const auto got = layer(tape, attn::Var<float>(x)).value();
    bool changed = false;
    for (std::size_t i = 0; i < want.numel(); ++i) changed |= got[i] != want[i];
    return changed;
  };
  CHECK(changed_by_training({.dropout = 0.0, .attention_dropout = 0.5}));
  CHECK_FALSE(changed_by_training({.dropout = 0.0}));
  CHECK_FALSE(changed_by_training({.dropout = 0.0, .attention_dropout = 0.0}));
}

TEST_CASE("gradcheck: TransformerEncoderLayer in double, x and every parameter, post-norm and pre-norm") {
  using V = attn::Var<double>;
  for (bool norm_first : {false, true})
    for (auto act : {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh, nn::Activation::silu}) {
      nn::TransformerEncoderLayer<2, 8, double> layer(nullptr, "layer",
                                                      {.dim_feedforward = 12, .dropout = 0.0, .activation = act, .norm_first = norm_first});
      attn::Rng rng(norm_first ? 7 : 8);
      const auto in = gradcheck_inputs(layer, rng, {2, 4, 8});
      auto f = [&](Tape& t, std::vector<V>& v) {
        bind_parameters(layer, v);
        return layer(t, v[0], attn::Lengths{4, 2});
      };
      testutil::check_gradients(std::string(norm_first ? "pre-norm" : "post-norm") + ", " + nn::activation_name(act), f, in);
    }
}

TEST_CASE("TransformerEncoder, checkpoint = true: outputs and every gradient equal a plain run's bit for bit, with dropout, and the pool peak drops") {
  constexpr std::size_t H = 4, D = 64;
  const nn::TransformerEncoderOptions base{.num_layers = 3, .layer = {.dropout = 0.2, .norm_first = true}, .final_norm = true};
  auto opt_ckpt = base;
  opt_ckpt.checkpoint = true;
  nn::TransformerEncoder<H, D> plain(nullptr, "encoder", base);
  nn::TransformerEncoder<H, D> ckpt(nullptr, "encoder", opt_ckpt);
  plain.init(5);
  ckpt.init(5);
  attn::Rng rng(9);
  const auto xv = random<float>(rng, {4, 96, D});
  const auto dout = random<float>(rng, {4, 96, D});
  const attn::Lengths lengths{96, 50, 77, 12};

  struct Result {
    std::vector<float> out, gx;
    std::map<std::string, std::vector<float>> grads;
    std::size_t peak = 0, saved_peak = 0, after_forward = 0;
  };
  auto run = [&](nn::TransformerEncoder<H, D>& enc, std::uint64_t seed) {
    Result r;
    for (int s = 0; s < 2; ++s) {  // the second step is measured
      enc.zero_grad();
      attn::Var<float, Shape<dyn, dyn, D>> x(xv, true);
      Tape t(seed);
      const std::size_t before = attn::cpu::pool_stats().in_use_bytes;
      attn::cpu::reset_pool_peak();
      auto y = enc(t, x, lengths);
      r.after_forward = attn::cpu::pool_stats().in_use_bytes - before;
      t.backward(y, dout);
      r.peak = attn::cpu::pool_stats().peak_bytes - before;
      r.saved_peak = attn::cpu::pool_stats().saved_peak_bytes - before;
      r.out = y.value().to_vector();
      r.gx = x.grad().to_vector();
    }
    r.grads = grads_of<float>(enc);
    return r;
  };
  const Result a = run(plain, 17), b = run(ckpt, 17);
  CHECK(a.out == b.out);
  CHECK(a.gx == b.gx);
  REQUIRE(a.grads.size() == 3 * 12 + 2);
  for (auto& [name, g] : a.grads) {
    INFO(name);
    CHECK(!g.empty());
    CHECK(g == b.grads.at(name));
  }
  // Dropout really ran: another random stream gives another output.
  CHECK(run(plain, 18).out != a.out);
  INFO("peak above the bytes in use before the step: plain " << a.peak << ", checkpointed " << b.peak);
  CHECK(b.peak * 10 < a.peak * 6);  // under 60 % (measured: 45 %, 5.0 of 11.0 MB)
  // What is kept for backward at its largest: for the plain run when its backward begins, for the
  // checkpointed one when a layer's recomputation begins its backward (more than its forward kept).
  INFO("saved at the start of a backward pass: plain " << a.saved_peak << ", checkpointed " << b.saved_peak
                                                      << " (after its forward " << b.after_forward << ")");
  CHECK(a.saved_peak == a.after_forward);
  CHECK(b.saved_peak > b.after_forward);
  CHECK(b.saved_peak * 10 < a.saved_peak * 6);
}

TEST_CASE("forward_rows: the first rows of the full forward, their gradients, and the conditions it checks") {
  attn::Rng rng(11);
  const Tensor<float> xv = random<float>(rng, {3, 10, 16});
  const attn::Lengths lengths{10, 7, 4};
  struct Case {
    nn::TransformerEncoderLayerOptions layer;
    std::size_t rows;
  };
  const std::vector<Case> cases = {
      {{.dim_feedforward = 24, .dropout = 0.0, .norm_first = false}, 3},
      {{.dim_feedforward = 24, .dropout = 0.0, .activation = nn::Activation::gelu, .norm_first = true}, 1},
      {{.dim_feedforward = 24, .dropout = 0.0, .norm_first = true, .window = 2, .global_tokens = 2}, 2},
      {{.dim_feedforward = 24, .dropout = 0.0, .rotary = nn::RotaryOptions{.dim = 2, .interleaved = true}}, 2},
  };
  for (const auto& c : cases)
    for (bool checkpoint : {false, true}) {
      INFO("rows " << c.rows << ", norm_first " << c.layer.norm_first << ", window " << c.layer.window.value_or(0) << ", checkpoint "
                   << checkpoint);
      nn::TransformerEncoder<4, 16> enc(nullptr, "enc", {.num_layers = 2, .layer = c.layer, .final_norm = c.layer.norm_first, .checkpoint = checkpoint});
      enc.init(3);
      // The output: the full forward's first rows.
      attn::Var<float> x(xv.clone(), true);
      Tape full_tape;
      auto full = enc(full_tape, x, lengths);
      auto want = attn::slice(full_tape, full, 1, 0, c.rows);
      const auto dout = random<float>(rng, want.dims());
      full_tape.backward(want, dout);
      const auto want_gx = x.grad().to_vector();
      const auto want_grads = grads_of<float>(enc);
      enc.zero_grad();
      attn::Var<float> x2(xv.clone(), true);
      Tape tape;
      auto got = enc.forward_rows(tape, x2, lengths, c.rows);
      REQUIRE(got.dims() == Dims{3, c.rows, 16});
      for (std::size_t i = 0; i < got.numel(); ++i) CHECK(got.value()[i] == Approx(want.value()[i]).margin(2e-5));
      // The gradients of x and of every parameter, through the rows alone.
      tape.backward(got, dout);
      const auto gx = x2.grad().to_vector();
      for (std::size_t i = 0; i < gx.size(); ++i) CHECK(gx[i] == Approx(want_gx[i]).margin(2e-5));
      for (const auto& [name, g] : grads_of<float>(enc)) {
        INFO(name);
        REQUIRE(g.size() == want_grads.at(name).size());
        for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(want_grads.at(name)[i]).margin(2e-5));
      }
      // forward_rows_with_weights: the same rows, and the last layer's weights of those rows as
      // forward_with_weights forms them (B, Heads, T, T), on the tape: the same gradients again.
      enc.zero_grad();
      attn::NoGrad ng;
      const auto dense = enc.forward_with_weights(ng, attn::Var<float>(xv), lengths);
      const auto wl = dense.weights.back().to_vector();  // (3, 4, 10, 10)
      attn::Var<float> x3(xv.clone(), true);
      Tape wtape;
      const auto rw = enc.forward_rows_with_weights(wtape, x3, lengths, c.rows);
      REQUIRE(rw.out.dims() == Dims{3, c.rows, 16});
      REQUIRE(rw.weights.dims() == Dims{3, 4, c.rows, 10});
      for (std::size_t i = 0; i < rw.out.numel(); ++i) CHECK(rw.out.value()[i] == Approx(want.value()[i]).margin(2e-5));
      const auto w = rw.weights.value().to_vector();
      for (std::size_t b = 0; b < 3; ++b)
        for (std::size_t h = 0; h < 4; ++h)
          for (std::size_t r = 0; r < c.rows; ++r)
            for (std::size_t j = 0; j < 10; ++j) CHECK(w[((b * 4 + h) * c.rows + r) * 10 + j] == Approx(wl[((b * 4 + h) * 10 + r) * 10 + j]).margin(1e-6));
      wtape.backward(rw.out, dout);
      const auto gx3 = x3.grad().to_vector();
      for (std::size_t i = 0; i < gx3.size(); ++i) CHECK(gx3[i] == Approx(want_gx[i]).margin(2e-5));
    }
  // What it refuses: no rows, more rows than tokens, non-global rows under a window, causal.
  attn::NoGrad ng;
  const attn::Var<float> x(xv);
  nn::TransformerEncoderLayer<4, 16> plain(nullptr, "plain");
  CHECK_THROWS_WITH(plain.forward_rows(ng, x, lengths, 0), Catch::Contains("rows must be in [1, 10]"));
  CHECK_THROWS_AS(plain.forward_rows(ng, x, lengths, 11), attn::ArgumentError);
  nn::TransformerEncoderLayer<4, 16> local(nullptr, "local", {.window = 2, .global_tokens = 1});
  CHECK_THROWS_WITH(local.forward_rows(ng, x, lengths, 2), Catch::Contains("global_tokens 1"));
  CHECK(local.forward_rows(ng, x, lengths, 1).dims() == Dims{3, 1, 16});
  nn::TransformerEncoderLayer<4, 16> causal(nullptr, "causal", {.causal = true});
  CHECK_THROWS_WITH(causal.forward_rows(ng, x, 1), Catch::Contains("causal"));
  CHECK_THROWS_AS(plain.forward_rows(ng, attn::Var<float>(random<float>(rng, {3, 10, 8})), 1), attn::ShapeError);
}

TEST_CASE("gradcheck: TransformerEncoderLayer::forward_rows and its rows' weights in double, x and every parameter, with padded keys") {
  using V = attn::Var<double>;
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer<2, 8, double> layer(nullptr, "layer", {.dim_feedforward = 12, .dropout = 0.0, .norm_first = norm_first});
    attn::Rng rng(norm_first ? 17 : 18);
    const auto in = gradcheck_inputs(layer, rng, {2, 5, 8});
    auto f = [&](Tape& t, std::vector<V>& v) {
      bind_parameters(layer, v);
      return layer.forward_rows(t, v[0], attn::Lengths{5, 3}, 2);
    };
    testutil::check_gradients(norm_first ? "forward_rows, pre-norm" : "forward_rows, post-norm", f, in);
    // The rows' attention weights, a function of x and of norm1 and in_proj's query and key parts.
    auto fw = [&](Tape& t, std::vector<V>& v) {
      bind_parameters(layer, v);
      return layer.forward_rows_with_weights(t, v[0], attn::Lengths{5, 3}, 2).weights;
    };
    testutil::check_gradients(norm_first ? "forward_rows_with_weights, pre-norm" : "forward_rows_with_weights, post-norm", fw, in);
  }
}
