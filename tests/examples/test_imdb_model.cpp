// SPDX-License-Identifier: MIT
// The IMDb model's batches and its [CLS] entropy penalty (examples/imdb/model.hpp): make_batch's
// 1 / log n per review, entropy_fraction's value and gradient, and the perturbation of adversarial
// training.
#include <catch2/catch.hpp>

#include <cmath>

#include "../../examples/imdb/model.hpp"
#include "../gradcheck_util.hpp"

namespace {

using attn::Dims;

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

TEST_CASE("imdb entropy_fraction: the mean row entropy over log n, with padded keys, and its gradient in double") {
  // Two samples, two heads, one row each, over 4 keys; sample 1 has 2 real keys (zeros after them).
  const std::vector<double> w{0.25, 0.25, 0.25, 0.25, 0.7, 0.1, 0.1, 0.1,  // sample 0: heads 0, 1
                              0.5,  0.5,  0.0,  0.0,  1.0, 0.0, 0.0, 0.0};  // sample 1: heads 0, 1
  const auto wt = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 2, 1, 4}, std::span<const double>(w));
  const std::vector<double> nv{1 / std::log(4.0), 1 / std::log(2.0)};
  const auto norm = attn::Tensor<double, attn::AnyShape>::from(Dims{2, 1, 1}, std::span<const double>(nv));
  attn::NoGrad ng;
  const double got = imdb::entropy_fraction(ng, attn::Var<double, attn::AnyShape>(wt), norm).value().to_vector()[0];
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
    return attn::Var<double>(imdb::entropy_fraction(t, attn::Var<double, attn::AnyShape>(attn::softmax(t, s)), norm));
  };
  testutil::check_gradients("entropy_fraction", f, {attn::Tensor<double>::from(Dims{2, 2, 1, 4}, std::span<const double>(sv))});
}

TEST_CASE("imdb adversarial_delta: each review's gradient scaled to norm eps, zero where the gradient is") {
  // Three reviews of 2 positions x 2 dims: a gradient along one axis, a general one, and none.
  const std::vector<float> g{3, 0, 0, 4, /**/ 1, -2, 2, 4, /**/ 0, 0, 0, 0};
  const auto gt = attn::Tensor<float, attn::AnyShape>::from(Dims{3, 2, 2}, std::span<const float>(g));
  const auto d = imdb::adversarial_delta(gt, 0.5).to_vector();
  REQUIRE(d.size() == g.size());
  for (std::size_t k = 0; k < 4; ++k) CHECK(d[k] == Approx(0.5 * g[k] / 5.0));
  for (std::size_t k = 4; k < 8; ++k) CHECK(d[k] == Approx(0.5 * g[k] / 5.0));  // |(1,-2,2,4)| = 5
  for (std::size_t k = 8; k < 12; ++k) CHECK(d[k] == 0.0f);
  // To first order the loss rises by eps times the gradient's norm: for L(x) = <a, x>, exactly.
  double rise = 0;
  for (std::size_t k = 4; k < 8; ++k) rise += double(g[k]) * double(d[k]);
  CHECK(rise == Approx(0.5 * 5.0));
}

}  // namespace
