// SPDX-License-Identifier: MIT
// nn::TransformerDecoderLayer and nn::TransformerDecoder: PyTorch's parameter names, PyTorch goldens
// (post-norm relu with a causal target and a memory mask, pre-norm gelu, a stack of two with a final
// norm, checkpointed or not; padded targets and memories), a gradient check in double, dropout's
// checkpointed gradients bit for bit, incremental decoding (and its beam-search reorder), and errors.
#include "../gradcheck_util.hpp"
#include "attention_test_util.hpp"
#include "../golden_util.hpp"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <attn/nn/decoder.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
namespace nn = attn::nn;

using testutil::random;
using testutil::set_value;

namespace {

const std::vector<std::string> torch_layer_names = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
    "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias",
    "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
    "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"};

nn::TransformerDecoderLayerOptions golden_options(const attn::io::SafetensorsFile& f) {
  return {.dim_feedforward = std::stoul(f.metadata.at("dim_feedforward")),
          .dropout = 0.0,
          .activation = nn::activation_from_name(f.metadata.at("activation")),
          .norm_first = f.metadata.at("norm_first") == "true",
          .layer_norm_eps = std::stod(f.metadata.at("layer_norm_eps")),
          .causal = f.metadata.count("causal") && f.metadata.at("causal") == "true"};
}

/// Loads m's parameters from f by torch's names, runs (tgt, memory) with both padding masks (the
/// target's as a KeepMask, the memory's as torch's PaddingMask) and the memory mask if stored, and
/// compares out, both inputs' gradients and every parameter's.
template <class T, class Model>
void golden_check(const attn::io::SafetensorsFile& f, Model& m, double tol) {
  INFO(f.metadata.at("case") << (sizeof(T) == 4 ? " float32" : " float64"));
  for (auto& [name, v] : m.template named_parameter_vars<T>()) set_value(v, golden::tensor<T>(f, name));
  m.train();
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, 16>> tgt(golden::tensor<T>(f, "tgt"), true);
  attn::Var<T, Shape<dyn, dyn, 16>> memory(golden::tensor<T>(f, "memory"), true);
  Tensor<T> keep = golden::tensor<T>(f, "memory_key_mask"), pad(keep.dims());
  for (std::size_t i = 0; i < keep.numel(); ++i) pad[i] = keep[i] == T(0) ? T(1) : T(0);
  nn::DecoderExtras<T> extras;
  if (f.tensors.count("memory_mask")) extras.memory.attn_mask = golden::tensor<T>(f, "memory_mask");
  auto y = m(tape, tgt, memory, attn::KeepMask(golden::tensor<T>(f, "tgt_key_mask")), attn::PaddingMask(pad), extras);
  static_assert(std::is_same_v<decltype(y), attn::Var<T, Shape<dyn, dyn, 16>>>);
  golden::expect_close(f, "out", y.value(), tol);
  tape.backward(y, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.tgt", tgt.grad(), tol);
  golden::expect_close(f, "grad.memory", memory.grad(), tol);
  for (auto& [name, v] : m.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + name, v.grad(), tol);
}

template <class T>
void golden_layer(const std::string& file, double tol) {
  auto f = golden::load(file);
  nn::TransformerDecoderLayer<4, 16, T> layer(nullptr, "layer", golden_options(f));
  golden_check<T>(f, layer, tol);
}

template <class T>
void golden_stack(bool checkpoint, double tol) {
  auto f = golden::load("decoder_stack");
  nn::TransformerDecoder<4, 16, T> dec(nullptr, "decoder",
                                       {.num_layers = 2, .layer = golden_options(f), .final_norm = true, .checkpoint = checkpoint});
  golden_check<T>(f, dec, tol);
}

}  // namespace

TEST_CASE("TransformerDecoderLayer: PyTorch parameter names, shapes, options and errors") {
  nn::TransformerDecoderLayer<4, 16> layer(nullptr, "layer", {.dim_feedforward = 32});
  auto np = layer.named_parameters();
  REQUIRE(np.size() == torch_layer_names.size());
  for (std::size_t i = 0; i < np.size(); ++i) CHECK(np[i].first == torch_layer_names[i]);
  CHECK(layer.parameter("linear1.weight").dims() == Dims{32, 16});
  CHECK(layer.parameter("multihead_attn.in_proj_weight").dims() == Dims{48, 16});
  CHECK(layer.dim_feedforward() == 32);
  CHECK(nn::TransformerDecoderLayer<4, 16>(nullptr, "nb", {.bias = false}).named_parameters().size() == 9);  // 4 attention, 2 linear, 3 norm weights
  CHECK_THROWS_WITH((nn::TransformerDecoderLayer<4, 16>(nullptr, "bad", {.dropout = 1.0})), Catch::Contains("TransformerDecoderLayer 'bad'"));
  CHECK_THROWS_WITH((nn::TransformerDecoderLayer<4, 16>(nullptr, "bad", {.attention_dropout = -1.0})), Catch::Contains("attention_dropout"));
  CHECK_THROWS_AS((nn::TransformerDecoderLayer<4, 16>(nullptr, "bad", {.layer_norm_eps = 0})), attn::ArgumentError);
  CHECK_THROWS_WITH((nn::TransformerDecoder<4, 16>(nullptr, "bad", {.num_layers = 0})), Catch::Contains("num_layers must be at least 1"));

  nn::TransformerDecoder<4, 16> dec(nullptr, "decoder", {.num_layers = 3, .layer = {.dim_feedforward = 32}, .final_norm = true});
  auto names = dec.named_parameters();
  REQUIRE(names.size() == 3 * 18 + 2);
  CHECK(names[18].first == "layers.1.self_attn.in_proj_weight");
  CHECK(names[55].first == "norm.bias");
  CHECK(dec.size() == 3);
  CHECK(dec.norm() != nullptr);
  // Every layer starts as layers.0, as torch's deep copies do.
  CHECK(dec.layer(2).multihead_attn.in_proj_weight.raw().to_vector() == dec.layer(0).multihead_attn.in_proj_weight.raw().to_vector());

  attn::NoGrad ng;
  attn::Rng rng(5);
  attn::Var<float> tgt(random<float>(rng, {2, 3, 16})), memory(random<float>(rng, {2, 4, 16}));
  CHECK(layer(ng, tgt, memory).dims() == Dims{2, 3, 16});
  CHECK_THROWS_WITH(layer(ng, tgt, attn::Var<float>(random<float>(rng, {3, 4, 16}))),
                    Catch::Contains("nn::Attention<4, 16>: key shape (3, 4, 16) is not (2, time, 16)"));
  CHECK_THROWS_WITH(layer(ng, tgt, memory, attn::Lengths{3, 2}, attn::Lengths{4, 5}), Catch::Contains("lengths[1] = 5"));
  CHECK_THROWS_WITH(layer(ng, tgt, memory, attn::Lengths{3, 4}, attn::Lengths{4, 4}), Catch::Contains("lengths[1] = 4"));
  // Without masks every position is real; nullptr stands for one side's mask.
  layer.eval();
  const auto all = layer(ng, tgt, memory).value().to_vector();
  CHECK(all == layer(ng, tgt, memory, attn::Lengths{3, 3}, attn::Lengths{4, 4}).value().to_vector());
  CHECK(all == layer(ng, tgt, memory, nullptr, nullptr).value().to_vector());
  const auto mem_only = layer(ng, tgt, memory, nullptr, attn::Lengths{4, 2}).value().to_vector();
  CHECK(mem_only == layer(ng, tgt, memory, attn::Lengths{3, 3}, attn::Lengths{4, 2}).value().to_vector());
  CHECK(mem_only != all);
  CHECK(layer(ng, tgt, memory, attn::Lengths{3, 1}, nullptr).value().to_vector() ==
        layer(ng, tgt, memory, attn::Lengths{3, 1}, attn::Lengths{4, 4}).value().to_vector());
  dec.eval();
  CHECK(dec(ng, tgt, memory, nullptr, attn::Lengths{4, 2}).value().to_vector() ==
        dec(ng, tgt, memory, attn::Lengths{3, 3}, attn::Lengths{4, 2}).value().to_vector());
}

TEST_CASE("golden: TransformerDecoderLayer matches torch.nn.TransformerDecoderLayer (post-norm relu causal with a memory mask, pre-norm gelu)") {
  golden_layer<float>("decoder_layer_post_relu", 1e-5);
  golden_layer<double>("decoder_layer_post_relu", 1e-10);
  golden_layer<float>("decoder_layer_pre_gelu", 1e-5);
  golden_layer<double>("decoder_layer_pre_gelu", 1e-10);
}

TEST_CASE("golden: TransformerDecoderLayer with silu (pre-norm, causal) matches torch's layer given F.silu") {
  golden_layer<float>("decoder_layer_pre_silu", 1e-5);
  golden_layer<double>("decoder_layer_pre_silu", 1e-10);
  CHECK_THROWS_AS((nn::TransformerDecoderLayer<4, 16>(nullptr, "bad", {.activation = static_cast<nn::Activation>(7)})), attn::ArgumentError);
}

TEST_CASE("golden: TransformerDecoder (2 pre-norm causal layers and a final norm) matches torch.nn.TransformerDecoder, checkpointed or not") {
  golden_stack<float>(false, 1e-5);
  golden_stack<double>(false, 1e-10);
  golden_stack<float>(true, 1e-5);
  golden_stack<double>(true, 1e-10);
}

TEST_CASE("gradcheck: a decoder layer w.r.t. tgt and memory, both norm orders, padded target and memory") {
  // The parameters' gradients are checked against torch's in double by the goldens above.
  for (bool norm_first : {false, true}) {
    nn::TransformerDecoderLayer<2, 4, double> layer(nullptr, "layer",
                                                    {.dim_feedforward = 6, .dropout = 0.0, .norm_first = norm_first, .causal = true});
    attn::Rng rng(11);
    testutil::check_gradients(norm_first ? "pre-norm" : "post-norm", [&](Tape& t, std::vector<attn::Var<double>>& x) {
      return layer(t, x[0], x[1], attn::Lengths{3, 2}, attn::Lengths{5, 3});
    }, {random<double>(rng, {2, 3, 4}), random<double>(rng, {2, 5, 4})});
  }
  // RMS norms (three, weights only) and a gated feed-forward (linear1 (2F, Dim)).
  nn::TransformerDecoderLayer<2, 4, double> rms(
      nullptr, "layer",
      {.dim_feedforward = 6, .dropout = 0.0, .activation = nn::Activation::silu, .gated = true, .norm = nn::NormKind::rms, .causal = true});
  CHECK(rms.linear1.weight.dims() == Dims{12, 4});
  CHECK(!rms.norm3.bias.defined());
  attn::Rng rng(12);
  testutil::check_gradients("rms, swiglu", [&](Tape& t, std::vector<attn::Var<double>>& x) {
    return rms(t, x[0], x[1], attn::Lengths{3, 2}, attn::Lengths{5, 3});
  }, {random<double>(rng, {2, 3, 4}), random<double>(rng, {2, 5, 4})});
}

TEST_CASE("TransformerDecoder: checkpointed layers give the plain run's output and gradients bit for bit, with dropout") {
  std::map<std::string, std::vector<float>> grads[2];
  std::vector<float> outs[2], dtgt[2], dmem[2];
  for (int c = 0; c < 2; ++c) {
    nn::TransformerDecoder<2, 8> dec(nullptr, "decoder", {.num_layers = 2, .layer = {.dim_feedforward = 16, .dropout = 0.2, .causal = true},
                                                          .checkpoint = c == 1});
    dec.init(7);
    attn::Rng rng(9);
    Tape tape(123);
    attn::Var<float> tgt(random<float>(rng, {2, 5, 8}), true), memory(random<float>(rng, {2, 6, 8}), true);
    auto y = dec(tape, tgt, memory, attn::Lengths{5, 3}, attn::Lengths{6, 2});
    tape.backward(attn::sum(tape, attn::mul(tape, y, y)));
    outs[c] = y.value().to_vector();
    dtgt[c] = tgt.grad().to_vector();
    dmem[c] = memory.grad().to_vector();
    for (auto& [name, v] : dec.named_parameter_vars<float>()) grads[c][name] = v.grad().to_vector();
  }
  CHECK(outs[0] == outs[1]);
  CHECK(dtgt[0] == dtgt[1]);
  CHECK(dmem[0] == dmem[1]);
  CHECK(grads[0] == grads[1]);
  CHECK(grads[0].size() == 2 * 18);
}

namespace {

/// The decoder's output for tgt (B, T, 8) in one call, and step by step: a prompt of `prompt`
/// positions, then one position per step; the steps' rows must be the full call's.
template <class T>
void check_incremental(const nn::TransformerDecoderOptions& opt, std::size_t prompt, double tol) {
  nn::TransformerDecoder<2, 8, T> dec(nullptr, "decoder", opt);
  dec.init(21);
  dec.eval();
  attn::NoGrad ng;
  attn::Rng rng(17);
  const std::size_t nb = 2, nt = 7, ns = 6;
  attn::Var<T> tgt(random<T>(rng, {nb, nt, 8})), memory(random<T>(rng, {nb, ns, 8}));
  const attn::Lengths mem_lengths{6, 3};
  const auto full = dec(ng, tgt, memory, nullptr, mem_lengths).value();
  auto state = dec.start(ng, memory, mem_lengths);
  std::size_t at = 0;
  double worst = 0;
  while (at < nt) {
    const std::size_t n = at == 0 ? prompt : 1;
    const auto y = dec.step(ng, attn::slice(ng, tgt, 1, at, n), state).value();
    REQUIRE(y.dims() == Dims{nb, n, 8});
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t c = 0; c < 8; ++c)
          worst = std::max(worst, std::abs(double(y[(b * n + i) * 8 + c]) - double(full[(b * nt + at + i) * 8 + c])));
    at += n;
    CHECK(state.length == at);
  }
  CHECK(state.layers[0].self_k.dims() == Dims{nb, nt, 8});
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("TransformerDecoder: incremental decoding with the key/value cache gives the full call's rows") {
  for (bool norm_first : {false, true})
    for (std::size_t prompt : {1, 3}) {
      INFO("norm_first " << norm_first << ", prompt " << prompt);
      const nn::TransformerDecoderOptions opt{
          .num_layers = 2, .layer = {.dim_feedforward = 16, .dropout = 0.1, .norm_first = norm_first, .causal = true}, .final_norm = norm_first};
      check_incremental<double>(opt, prompt, 1e-12);
      check_incremental<float>(opt, prompt, 1e-5);
    }
  // RMS norms and a SwiGLU feed-forward (LLaMA's block), with the final RMS norm.
  const nn::TransformerDecoderOptions llama{
      .num_layers = 2,
      .layer = {.dim_feedforward = 12, .activation = nn::Activation::silu, .gated = true, .norm_first = true, .norm = nn::NormKind::rms,
                .bias = false, .causal = true},
      .final_norm = true};
  check_incremental<double>(llama, 3, 1e-12);
  check_incremental<float>(llama, 1, 1e-5);
  // The self-attention patterns: a causal window of 2 with a global first token.
  const nn::TransformerDecoderOptions local{.num_layers = 2, .layer = {.dim_feedforward = 16, .window = 2, .causal = true, .global_tokens = 1}};
  check_incremental<double>(local, 4, 1e-12);
  check_incremental<double>(local, 1, 1e-12);
  // Rotary embeddings: step n's queries and keys turn at position n.
  for (bool interleaved : {false, true}) {
    const nn::TransformerDecoderOptions rope{
        .num_layers = 2, .layer = {.dim_feedforward = 16, .causal = true, .rotary = nn::RotaryOptions{.interleaved = interleaved}}};
    check_incremental<double>(rope, 3, 1e-12);
    check_incremental<double>(rope, 1, 1e-12);
    check_incremental<float>(rope, 1, 1e-5);
  }
}

namespace {
/// Rows `order` of x (n, ...) along the first axis.
template <class T>
Tensor<T> rows_of(const Tensor<T>& x, const std::vector<std::int64_t>& order) {
  const std::size_t width = x.numel() / x.dims().v[0];
  std::vector<T> out;
  for (const auto r : order)
    for (std::size_t i = 0; i < width; ++i) out.push_back(x[std::size_t(r) * width + i]);
  Dims d = x.dims();
  d.v[0] = order.size();
  return Tensor<T>::from(d, std::span<const T>(out));
}
}  // namespace

TEST_CASE("TransformerDecoder: reorder keeps, repeats and drops batch rows (beam search), as a decode of the reordered batch") {
  nn::TransformerDecoder<2, 8, double> dec(nullptr, "decoder", {.num_layers = 2, .layer = {.dim_feedforward = 16, .causal = true}});
  dec.init(5);
  dec.eval();
  attn::NoGrad ng;
  attn::Rng rng(23);
  const std::size_t nt = 6, ns = 5;
  const auto tgt = random<double>(rng, {3, nt, 8}), memory = random<double>(rng, {3, ns, 8});
  const std::vector<std::int64_t> order = {2, 0, 0};  // row 1 dropped, row 0 twice
  for (bool masked : {true, false}) {
    INFO("memory mask " << masked);
    const std::vector<int> lengths = {5, 2, 4};
    auto state = masked ? dec.start(ng, attn::Var<double>(memory), attn::Lengths(lengths)) : dec.start(ng, attn::Var<double>(memory));
    dec.step(ng, attn::slice(ng, attn::Var<double>(tgt), 1, 0, 3), state);
    state.reorder(order);
    CHECK(state.batch == 3);
    CHECK(state.length == 3);
    CHECK(state.layers[1].self_k.dims() == Dims{3, 3, 8});
    CHECK(state.memory_keep.empty() == !masked);
    // The reference: the whole reordered batch at once.
    const attn::Var<double> tgt2(rows_of(tgt, order)), memory2(rows_of(memory, order));
    const auto full = masked ? dec(ng, tgt2, memory2, nullptr, attn::Lengths{4, 5, 5}).value() : dec(ng, tgt2, memory2).value();
    double worst = 0;
    for (std::size_t t = 3; t < nt; ++t) {
      const auto y = dec.step(ng, attn::slice(ng, tgt2, 1, t, 1), state).value();
      for (std::size_t b = 0; b < 3; ++b)
        for (std::size_t c = 0; c < 8; ++c) worst = std::max(worst, std::abs(y[b * 8 + c] - full[(b * nt + t) * 8 + c]));
    }
    CHECK(worst <= 1e-12);
    // Growing the beam: 3 rows to 5.
    state.reorder({0, 1, 2, 2, 1});
    CHECK(state.batch == 5);
    CHECK(dec.step(ng, attn::Var<double>(random<double>(rng, {5, 1, 8})), state).dims() == Dims{5, 1, 8});
  }
}

TEST_CASE("TransformerDecoder: reorder's errors leave the state as it was") {
  nn::TransformerDecoder<2, 8> dec(nullptr, "dec", {.num_layers = 2, .layer = {.dim_feedforward = 16, .causal = true}});
  attn::Rng rng(4);
  const attn::Var<float> memory(random<float>(rng, {2, 4, 8})), tgt(random<float>(rng, {2, 1, 8}));
  {
    attn::NoGrad ng;
    auto state = dec.start(ng, memory, attn::Lengths{4, 2});
    dec.step(ng, tgt, state);
    CHECK_THROWS_WITH(state.reorder(std::vector<std::int64_t>{}), Catch::Contains("nn::DecoderState::reorder: the new order is empty"));
    CHECK_THROWS_WITH(state.reorder({1, 2}), Catch::Contains("new_order[1] = 2 is not a row of the batch of 2"));
    CHECK_THROWS_WITH(state.reorder({-1}), Catch::Contains("new_order[0] = -1 is not a row"));
    CHECK(state.batch == 2);
    CHECK(state.layers[0].self_k.dims() == Dims{2, 1, 8});
    CHECK(state.memory_keep.dims() == Dims{2, 4});
  }
  Tape tape;  // decoding under a Tape: the cache carries the graph to the parameters
  auto state = dec.start(tape, memory);
  dec.step(tape, tgt, state);
  CHECK_THROWS_WITH(state.reorder({0, 0}), Catch::Contains("the cache carries a graph"));
  CHECK(state.batch == 2);
}

TEST_CASE("TransformerDecoder: incremental decoding's errors") {
  attn::NoGrad ng;
  attn::Rng rng(3);
  attn::Var<float> memory(random<float>(rng, {2, 4, 8})), tgt(random<float>(rng, {2, 1, 8}));
  nn::TransformerDecoder<2, 8> plain(nullptr, "plain", {.layer = {.dim_feedforward = 16}});
  CHECK_THROWS_WITH(plain.start(ng, memory), Catch::Contains("nn::TransformerDecoder 'plain': incremental decoding needs causal self-attention"));
  nn::TransformerDecoder<2, 8> dec(nullptr, "dec", {.num_layers = 2, .layer = {.dim_feedforward = 16, .causal = true}});
  auto state = dec.start(ng, memory, attn::Lengths{4, 2});
  CHECK_THROWS_WITH(dec.step(ng, attn::Var<float>(random<float>(rng, {3, 1, 8})), state), Catch::Contains("target shape (3, 1, 8) is not (2, time, 8)"));
  CHECK_THROWS_WITH(dec.step(ng, attn::Var<float>(random<float>(rng, {2, 0, 8})), state), Catch::Contains("the target has no positions"));
  CHECK_THROWS_WITH(dec.start(ng, memory, attn::Lengths{4, 5}), Catch::Contains("lengths[1] = 5"));
  nn::TransformerDecoder<2, 8> one(nullptr, "one", {.num_layers = 1, .layer = {.dim_feedforward = 16, .causal = true}});
  CHECK_THROWS_WITH(one.step(ng, tgt, state), Catch::Contains("the state holds 2 layers' caches, not 1"));
  CHECK(state.length == 0);
  CHECK(dec.step(ng, tgt, state).dims() == Dims{2, 1, 8});
  CHECK(state.length == 1);
  // A layer's step checks its cache against the position count; a failed step leaves the state alone.
  CHECK_THROWS_WITH(dec.layer(0).step(ng, tgt, state.layers[0], state.memory_keep, 3),
                    Catch::Contains("nn::TransformerDecoderLayer '0'::step: the cache holds 1 positions, not 3"));
  auto broken = state;  // layer 1's cache claims 2 positions: layer 0 extends its copy, layer 1 throws
  broken.layers[1].self_k = attn::Var<float>(random<float>(rng, {2, 2, 8}));
  CHECK_THROWS_WITH(dec.step(ng, tgt, broken), Catch::Contains("'1'::step: the cache holds 2 positions, not 1"));
  CHECK(broken.length == 1);
  CHECK(broken.layers[0].self_k.dims() == Dims{2, 1, 8});
  CHECK(dec.step(ng, tgt, state).dims() == Dims{2, 1, 8});
  CHECK(state.layers[0].self_k.dims() == Dims{2, 2, 8});
}
