// SPDX-License-Identifier: MIT
// The IMDb model's batches and its [CLS] entropy penalty (examples/imdb/model.hpp): make_batch's
// 1 / log n per review, the row entropies' mean and its gradient, and the penalty's hinge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "../../examples/imdb/model.hpp"
#include "../gradcheck_util.hpp"

namespace {

using attn::Dims;

/// The training loss's penalty on attention weights w: entropy_rows, then entropy_penalty at target.
template <class C>
attn::Var<double, attn::AnyShape> penalty_of(C& ctx, const attn::Var<double, attn::AnyShape>& w, const attn::Tensor<double, attn::AnyShape>& norm,
                                             double target = 0) {
  return imdb::entropy_penalty(ctx, imdb::entropy_rows(ctx, w, norm), target);
}

TEST_CASE("imdb make_batch: cls_norm is 1 / log of the keys the [CLS] row sees") {
  imdb::ModelConfig cfg;
  cfg.vocab = 50;
  cfg.pool = imdb::Pool::cls;
  cfg.max_len = 6;
  const std::vector<std::int32_t> a{5, 6, 7}, b{8, 9, 10, 11, 12, 13, 14, 15, 16}, c{};
  const auto batch = imdb::make_batch({&a, &b, &c}, {1, 0, 1}, {}, cfg);
  REQUIRE(batch.cls_norm.dims() == Dims{3, 1, 1});
  CHECK(batch.cls_norm.data()[0] == Approx(1 / std::log(4.0)));  // [CLS] and 3 tokens
  CHECK(batch.cls_norm.data()[1] == Approx(1 / std::log(7.0)));  // [CLS] and max_len tokens
  CHECK(batch.cls_norm.data()[2] == 0.0f);                        // [CLS] alone: nothing to spread over
  cfg.pool = imdb::Pool::mean_max;
  const auto plain = imdb::make_batch({&a}, {1}, {}, cfg);
  CHECK(plain.cls_norm.data()[0] == 0.0f);
}

TEST_CASE("imdb entropy_rows and entropy_penalty: the mean row entropy over log n, with padded keys, and its gradient in double") {
  // Two samples, two heads, one row each, over 4 keys; sample 1 has 2 real keys (zeros after them).
  const std::vector<double> w{0.25, 0.25, 0.25, 0.25, 0.7, 0.1, 0.1, 0.1,  // sample 0: heads 0, 1
                              0.5,  0.5,  0.0,  0.0,  1.0, 0.0, 0.0, 0.0};  // sample 1: heads 0, 1
  const auto wt = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 2, 1, 4}, std::span<const double>(w));
  const std::vector<double> nv{1 / std::log(4.0), 1 / std::log(2.0)};
  const auto norm = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 1, 1}, std::span<const double>(nv));
  attn::NoGrad ng;
  const double got = penalty_of(ng, attn::Var<double, attn::AnyShape>(wt), norm).value().to_vector()[0];
  const double h01 = -(0.7 * std::log(0.7) + 3 * 0.1 * std::log(0.1)) / std::log(4.0);
  CHECK(got == Approx((1.0 + h01 + 1.0 + 0.0) / 4).epsilon(1e-12));
  // Through a softmax of scores with -inf at the padded keys, as the model's weights are formed.
  attn::Rng rng(5);
  std::vector<double> sv(16);
  for (auto& v : sv) v = rng.uniform() * 2 - 1;
  auto pad = attn::Tensor<double, attn::AnyShape>::zeros(Dims{2, 1, 1, 4});
  pad.data()[6] = pad.data()[7] = 1;  // sample 1's keys 2 and 3
  auto f = [&](attn::Tape& t, std::vector<attn::Var<double>>& v) {
    auto s = attn::masked_fill(t, attn::Var<double, attn::AnyShape>(v[0].erased()), pad, -std::numeric_limits<double>::infinity());
    return attn::Var<double>(penalty_of(t, attn::Var<double, attn::AnyShape>(attn::softmax(t, s)), norm));
  };
  testutil::check_gradients("entropy_rows + entropy_penalty", f, {attn::Tensor<double>::from(Dims{2, 2, 1, 4}, std::span<const double>(sv))});
}

TEST_CASE("imdb entropy_penalty: a hinge at the target, with its gradient zero below it, in double") {
  // The rows of the case above: fractions 1, h01 (about 0.68), 1 and 0.
  const std::vector<double> w{0.25, 0.25, 0.25, 0.25, 0.7, 0.1, 0.1, 0.1, 0.5, 0.5, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0};
  const auto wt = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 2, 1, 4}, std::span<const double>(w));
  const std::vector<double> nv{1 / std::log(4.0), 1 / std::log(2.0)};
  const auto norm = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 1, 1}, std::span<const double>(nv));
  const double h01 = -(0.7 * std::log(0.7) + 3 * 0.1 * std::log(0.1)) / std::log(4.0);
  attn::NoGrad ng;
  const attn::Var<double, attn::AnyShape> wv(wt);
  CHECK(penalty_of(ng, wv, norm, 0.5).value().to_vector()[0] == Approx((0.5 + (h01 - 0.5) + 0.5 + 0.0) / 4).epsilon(1e-12));
  CHECK(penalty_of(ng, wv, norm, 0.9).value().to_vector()[0] == Approx((0.1 + 0.0 + 0.1 + 0.0) / 4).epsilon(1e-12));
  CHECK(penalty_of(ng, wv, norm, 0.0).value().to_vector()[0] == Approx((1.0 + h01 + 1.0 + 0.0) / 4).epsilon(1e-12));

  // Rows on both sides of the target, well away from the kink: the gradient flows through the
  // rows above it only.
  attn::Rng rng(11);
  std::vector<double> sv(4 * 4);
  for (auto& v : sv) v = (rng.uniform() * 2 - 1) * 4;
  const auto st = attn::Tensor<double, attn::AnyShape>::from(Dims{4, 1, 1, 4}, std::span<const double>(sv));
  const std::vector<double> n4(4, 1 / std::log(4.0));
  const auto norm4 = attn::Tensor<double, attn::AnyShape>::from(Dims{4, 1, 1}, std::span<const double>(n4));
  const auto rows = imdb::entropy_rows(ng, attn::Var<double, attn::AnyShape>(attn::softmax(ng, attn::Var<double, attn::AnyShape>(st))), norm4)
                        .value()
                        .to_vector();
  REQUIRE(rows.size() == 4);
  const double target = 0.5 * (*std::min_element(rows.begin(), rows.end()) + *std::max_element(rows.begin(), rows.end()));
  std::size_t below = 0;
  for (double r : rows) {
    INFO("row fraction " << r << ", target " << target);
    REQUIRE(std::abs(r - target) > 1e-3);
    below += r < target;
  }
  REQUIRE(below > 0);
  REQUIRE(below < rows.size());
  auto f = [&](attn::Tape& t, std::vector<attn::Var<double>>& v) {
    auto p = attn::softmax(t, attn::Var<double, attn::AnyShape>(v[0].erased()));
    return attn::Var<double>(penalty_of(t, attn::Var<double, attn::AnyShape>(p), norm4, target));
  };
  testutil::check_gradients("entropy_penalty", f, {attn::Tensor<double>::from(Dims{4, 1, 1, 4}, std::span<const double>(sv))});
  // The rows below the target get no gradient at all.
  attn::Tape tape;
  attn::Var<double, attn::AnyShape> s(st, true);
  tape.backward(penalty_of(tape, attn::Var<double, attn::AnyShape>(attn::softmax(tape, s)), norm4, target));
  const auto g = s.grad().to_vector();
  for (std::size_t r = 0; r < 4; ++r) {
    double mag = 0;
    for (std::size_t k = 0; k < 4; ++k) mag += std::abs(g[r * 4 + k]);
    INFO("row " << r << " fraction " << rows[r]);
    if (rows[r] < target)
      CHECK(mag == 0.0);
    else
      CHECK(mag > 1e-6);
  }
}

}  // namespace

TEST_CASE("imdb ModelConfig: the feed-forward activation round-trips through config.json, defaults to gelu, and a bad name names the field") {
  imdb::ModelConfig cfg;
  cfg.vocab = 50;
  cfg.activation = attn::nn::Activation::silu;
  auto j = cfg.to_json();
  CHECK(j.at("activation") == "silu");
  CHECK(imdb::ModelConfig::from_json(j).activation == attn::nn::Activation::silu);
  j.erase("activation");  // a configuration written before the option
  CHECK(imdb::ModelConfig::from_json(j).activation == attn::nn::Activation::gelu);
  j["activation"] = "swish";
  try {
    imdb::ModelConfig::from_json(j);
    FAIL("no throw");
  } catch (const examples::FieldError& e) {
    CHECK(e.field == "model.activation");
    CHECK_THAT(e.what(), Catch::Contains("'swish' is none of relu, gelu, gelu_tanh, silu"));
  }
  CHECK(imdb::encoder_options(imdb::ModelConfig::from_json(cfg.to_json())).layer.activation == attn::nn::Activation::silu);
}

TEST_CASE("imdb ModelConfig: the gated feed-forward and the RMS norms round-trip through config.json and reach the encoder") {
  imdb::ModelConfig cfg;
  cfg.vocab = 50;
  cfg.gated = true;
  cfg.norm = attn::nn::NormKind::rms;
  auto j = cfg.to_json();
  CHECK(j.at("gated") == true);
  CHECK(j.at("norm") == "rms");
  const auto back = imdb::ModelConfig::from_json(j);
  CHECK(back.gated);
  CHECK(back.norm == attn::nn::NormKind::rms);
  const auto enc = imdb::encoder_options(back);
  CHECK(enc.layer.gated);
  CHECK(enc.layer.norm == attn::nn::NormKind::rms);
  j.erase("gated");  // a configuration written before the options
  j.erase("norm");
  CHECK(!imdb::ModelConfig::from_json(j).gated);
  CHECK(imdb::ModelConfig::from_json(j).norm == attn::nn::NormKind::layer);
  j["norm"] = "batch";
  try {
    imdb::ModelConfig::from_json(j);
    FAIL("no throw");
  } catch (const examples::FieldError& e) {
    CHECK(e.field == "model.norm");
  }
}
