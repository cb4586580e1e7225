// SPDX-License-Identifier: MIT
// Adversarial training on the input embeddings (examples/common/adversarial.hpp), which both example
// programs use: the perturbation's direction and norm, and that the loss's value and gradient are
// the mean of the clean and the perturbed loss's.
#include <catch2/catch.hpp>

#include <cmath>
#include <span>
#include <vector>

#include "../../examples/common/adversarial.hpp"

namespace {

using attn::Dims;

TEST_CASE("examples adversarial_delta: each review's gradient scaled to norm eps, zero where the gradient is") {
  // Three reviews of 2 positions x 2 dims: a gradient along one axis, a general one, and none.
  const std::vector<float> g{3, 0, 0, 4, /**/ 1, -2, 2, 4, /**/ 0, 0, 0, 0};
  const auto gt = attn::Tensor<float, attn::AnyShape>::from(Dims{3, 2, 2}, std::span<const float>(g));
  const auto d = examples::adversarial_delta(gt, 0.5).to_vector();
  REQUIRE(d.size() == g.size());
  for (std::size_t k = 0; k < 4; ++k) CHECK(d[k] == Approx(0.5 * g[k] / 5.0));
  for (std::size_t k = 4; k < 8; ++k) CHECK(d[k] == Approx(0.5 * g[k] / 5.0));  // |(1,-2,2,4)| = 5
  for (std::size_t k = 8; k < 12; ++k) CHECK(d[k] == 0.0f);
  // To first order the loss rises by eps times the gradient's norm: for L(x) = <a, x>, exactly.
  double rise = 0;
  for (std::size_t k = 4; k < 8; ++k) rise += double(g[k]) * double(d[k]);
  CHECK(rise == Approx(0.5 * 5.0));
}

TEST_CASE("examples adversarial_loss: the mean of the clean and the perturbed loss, in value and gradient") {
  // L(p, delta) = mean((p + delta)^2) over 2 samples x 3 positions x 2 dims. The input gradient at
  // delta = 0 is 2p / N, so each sample's perturbation is eps p_i / |p_i|, and the gradient of the
  // returned loss with respect to p is (2p + delta) / N.
  using V = attn::Var<float, attn::AnyShape>;
  const std::vector<float> pv{0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, /**/ -2.0f, 0.5f, 1.0f, 1.0f, -0.5f, 0.3f};
  const Dims dims{2, 3, 2};
  const V p(attn::Tensor<float, attn::AnyShape>::from(dims, std::span<const float>(pv)), true);
  const double eps = 0.7, n = double(pv.size());
  std::size_t calls = 0;
  auto objective = [&](attn::Tape& t, const V* delta, float scale) {
    ++calls;
    const V y = attn::add(t, p, *delta).erased();
    return attn::scale(t, attn::mean(t, attn::mul(t, y, y)), scale).erased();
  };
  attn::Tape tape(7);
  const V loss = examples::adversarial_loss<attn::cpu>(tape, dims, eps, objective);
  tape.backward(loss);
  CHECK(calls == 2);
  std::vector<double> delta(pv.size());
  double clean = 0, perturbed = 0;
  for (std::size_t i = 0; i < 2; ++i) {
    double norm = 0;
    for (std::size_t k = 0; k < 6; ++k) norm += double(pv[i * 6 + k]) * double(pv[i * 6 + k]);
    norm = std::sqrt(norm);
    for (std::size_t k = 0; k < 6; ++k) delta[i * 6 + k] = eps * double(pv[i * 6 + k]) / norm;
  }
  for (std::size_t k = 0; k < pv.size(); ++k) {
    clean += double(pv[k]) * double(pv[k]) / n;
    perturbed += (double(pv[k]) + delta[k]) * (double(pv[k]) + delta[k]) / n;
  }
  CHECK(double(loss.value().to_vector()[0]) == Approx(0.5 * clean + 0.5 * perturbed).epsilon(1e-5));
  const auto g = p.grad().to_vector();
  REQUIRE(g.size() == pv.size());
  for (std::size_t k = 0; k < pv.size(); ++k) {
    INFO("element " << k);
    CHECK(double(g[k]) == Approx((2 * double(pv[k]) + delta[k]) / n).epsilon(1e-5));
  }
}

}  // namespace
