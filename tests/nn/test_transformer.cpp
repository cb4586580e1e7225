// SPDX-License-Identifier: MIT
// nn::Transformer: PyTorch's names, torch's initial values (Xavier uniform on every matrix), a
// PyTorch golden (padded source and target, causal target, checkpointed or not),
// square_subsequent_mask against the causal option, encode + decoder and incremental decoding
// against the whole call, and the errors.
#include "attention_test_util.hpp"
#include "../golden_util.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <attn/nn/transformer.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
namespace nn = attn::nn;

using testutil::random;
using testutil::set_value;

namespace {

template <class T>
void golden_transformer(bool checkpoint, bool mask_tensor, double tol) {
  auto f = golden::load("transformer");
  INFO((sizeof(T) == 4 ? "float32" : "float64") << (checkpoint ? ", checkpointed" : "") << (mask_tensor ? ", tgt_mask tensor" : ""));
  nn::Transformer<4, 16, T> model(nullptr, "transformer",
                                  {.num_encoder_layers = 2,
                                   .num_decoder_layers = 1,
                                   .layer = {.dim_feedforward = 32, .dropout = 0.0},
                                   .tgt_causal = !mask_tensor,
                                   .checkpoint = checkpoint});
  const auto params = model.template named_parameter_vars<T>();
  REQUIRE(params.size() == 2 * 12 + 2 + 18 + 2);
  for (auto& [name, v] : params) set_value(v, golden::tensor<T>(f, name));
  model.train();
  Tape tape;
  attn::Var<T, Shape<dyn, dyn, 16>> src(golden::tensor<T>(f, "src"), true), tgt(golden::tensor<T>(f, "tgt"), true);
  nn::TransformerExtras<T> extras;
  if (mask_tensor) extras.tgt.attn_mask = nn::square_subsequent_mask<T>(5);
  auto y = model(tape, src, tgt, attn::KeepMask(golden::tensor<T>(f, "src_key_mask")), attn::KeepMask(golden::tensor<T>(f, "tgt_key_mask")),
                 extras);
  static_assert(std::is_same_v<decltype(y), attn::Var<T, Shape<dyn, dyn, 16>>>);
  golden::expect_close(f, "out", y.value(), tol);
  tape.backward(y, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad.src", src.grad(), tol);
  golden::expect_close(f, "grad.tgt", tgt.grad(), tol);
  for (auto& [name, v] : params) golden::expect_close(f, "grad." + name, v.grad(), tol);
}

}  // namespace

TEST_CASE("Transformer: PyTorch parameter names, Xavier uniform matrices as torch's _reset_parameters") {
  nn::Transformer<4, 16> model(nullptr, "transformer", {.num_encoder_layers = 2, .num_decoder_layers = 3, .layer = {.dim_feedforward = 32}});
  const auto np = model.named_parameters();
  REQUIRE(np.size() == 2 * 12 + 2 + 3 * 18 + 2);
  CHECK(np[0].first == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(np[24].first == "encoder.norm.weight");
  CHECK(np[26].first == "decoder.layers.0.self_attn.in_proj_weight");
  CHECK(np.back().first == "decoder.norm.bias");
  CHECK(model.encoder.size() == 2);
  CHECK(model.decoder.size() == 3);
  CHECK(model.encoder.norm() != nullptr);
  CHECK(model.decoder.norm() != nullptr);
  // Every matrix is Xavier uniform: within sqrt(6 / (fan_in + fan_out)), and out_proj (16, 16)
  // reaches past nn.Linear's default bound 1 / sqrt(16); the layers no longer start equal.
  for (const auto& [name, v] : model.named_parameter_vars<float>()) {
    if (v.dims().n != 2) continue;
    const double bound = std::sqrt(6.0 / double(v.dims()[0] + v.dims()[1]));
    double top = 0;
    for (float e : v.value().to_vector()) top = std::max(top, double(std::abs(e)));
    INFO(name);
    CHECK(top <= bound);
    if (name.ends_with("out_proj.weight")) CHECK(top > 0.25);
  }
  CHECK(model.parameter("decoder.layers.1.linear1.weight").raw().to_vector() !=
        model.parameter("decoder.layers.0.linear1.weight").raw().to_vector());
  // The biases keep the layers' values (torch's deep copies: equal across layers).
  CHECK(model.parameter("encoder.layers.1.linear1.bias").raw().to_vector() ==
        model.parameter("encoder.layers.0.linear1.bias").raw().to_vector());
  // Module::init redraws the same way: matrices Xavier after the layers' own draws.
  model.init(3);
  const auto w = model.parameter("decoder.layers.2.multihead_attn.out_proj.weight").raw().to_vector();
  double top = 0;
  for (float e : w) top = std::max(top, double(std::abs(e)));
  CHECK(top > 0.25);
  CHECK(top <= std::sqrt(6.0 / 32));

  CHECK_THROWS_WITH((nn::Transformer<4, 16>(nullptr, "bad", {.num_encoder_layers = 0})), Catch::Contains("num_layers must be at least 1"));
  CHECK_THROWS_WITH((nn::Transformer<4, 16>(nullptr, "bad", {.layer = {.dropout = 1.5}})), Catch::Contains("dropout must be in [0, 1)"));
}

TEST_CASE("golden: Transformer matches torch.nn.Transformer (padded source and target, causal target), checkpointed or not") {
  golden_transformer<float>(false, false, 1e-5);
  golden_transformer<double>(false, false, 1e-10);
  golden_transformer<double>(true, false, 1e-10);
  golden_transformer<double>(false, true, 1e-10);
}

TEST_CASE("square_subsequent_mask: torch's causal mask") {
  const auto m = nn::square_subsequent_mask<double>(4);
  REQUIRE(m.dims() == Dims{4, 4});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(m[i * 4 + j] == (j > i ? -std::numeric_limits<double>::infinity() : 0.0));
  CHECK(nn::square_subsequent_mask<float>(0).numel() == 0);
}

TEST_CASE("Transformer: encode then decoder is the whole call, and masks as nullptr") {
  nn::Transformer<2, 8> model(nullptr, "t", {.num_encoder_layers = 1, .num_decoder_layers = 2, .layer = {.dim_feedforward = 16}, .tgt_causal = true});
  model.eval();
  attn::NoGrad ng;
  attn::Rng rng(4);
  attn::Var<float> src(random<float>(rng, {2, 5, 8})), tgt(random<float>(rng, {2, 3, 8}));
  const attn::Lengths sl{5, 2}, tl{3, 3};
  const auto whole = model(ng, src, tgt, sl, tl).value().to_vector();
  const auto memory = model.encode(ng, src, sl);
  CHECK(model.decoder(ng, tgt, memory, tl, sl).value().to_vector() == whole);
  CHECK(model(ng, src, tgt, sl, nullptr).value().to_vector() == whole);  // every target position is real anyway
  CHECK(model(ng, src, tgt).value().to_vector() == model(ng, src, tgt, attn::Lengths{5, 5}, nullptr).value().to_vector());
  CHECK(model(ng, src, tgt).value().to_vector() != whole);
  CHECK_THROWS_WITH(model(ng, src, tgt, attn::Lengths{5, 6}, nullptr), Catch::Contains("lengths[1] = 6"));
  // Decoding position by position from the cache gives the whole call's rows.
  auto state = model.start(ng, src, sl);
  for (std::size_t t = 0; t < 3; ++t) {
    const auto y = model.decoder.step(ng, attn::slice(ng, tgt, 1, t, 1), state).value();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t c = 0; c < 8; ++c) CHECK(y[b * 8 + c] == Approx(whole[(b * 3 + t) * 8 + c]).margin(1e-5));
  }
}
