// SPDX-License-Identifier: MIT
// Adversarial training on the input embeddings (Miyato, Dai and Goodfellow, "Adversarial Training
// Methods for Semi-Supervised Text Classification", 2017), shared by the example programs: the
// training loss is the mean of the loss on the clean inputs and on inputs moved by eps along the
// loss gradient, normalised per sample over all its positions.
//   auto loss = examples::adversarial_loss<B>(tape, {n, t, dim}, eps, [&](attn::Tape& t, const V* delta, float scale) {
//     return scale * the loss with `delta` (B, T, Dim) added to the inputs (none when delta is null);
//   });
#pragma once
#include <attn/attn.hpp>

#include <cmath>
#include <span>
#include <vector>

namespace examples {

/// The perturbation: the loss gradient g (B, T, Dim) of a batch's inputs, normalised to L2 norm
/// eps over each sample's positions together (zero for a sample whose gradient is zero).
template <class B>
attn::Tensor<float, attn::AnyShape, B> adversarial_delta(const attn::Tensor<float, attn::AnyShape, B>& g, double eps) {
  const auto& d = g.dims();
  std::vector<float> v = g.to_vector();
  const std::size_t n = d.v[0], per = n ? v.size() / n : 0;
  for (std::size_t i = 0; i < n; ++i) {
    double ss = 0;
    for (std::size_t k = 0; k < per; ++k) ss += double(v[i * per + k]) * double(v[i * per + k]);
    const double f = ss > 0 ? eps / std::sqrt(ss) : 0.0;
    for (std::size_t k = 0; k < per; ++k) v[i * per + k] = float(double(v[i * per + k]) * f);
  }
  return attn::Tensor<float, attn::AnyShape, B>::from(d, std::span<const float>(v));
}

/// The adversarial training loss of one batch whose inputs have dims `inputs` (B, T, Dim), for
/// eps > 0: objective(tape, delta, scale) must return `scale` times the loss with `delta` added to
/// the inputs. The clean pass runs on its own tape (seeded from `tape`'s stream) and leaves its
/// gradients in the parameters; the adversarial pass is on `tape`, whose value includes the clean
/// loss as a constant, so that backward on it completes the gradient of the mean.
template <class B, class Objective>
attn::Var<float, attn::AnyShape, B> adversarial_loss(attn::Tape& tape, const attn::Dims& inputs, double eps, Objective&& objective) {
  using V = attn::Var<float, attn::AnyShape, B>;
  V r(attn::Tensor<float, attn::AnyShape, B>::zeros(inputs), true);
  attn::Tape clean(tape.rng().next());
  const V clean_loss = objective(clean, &r, 0.5f);
  clean.backward(clean_loss);
  const V delta(adversarial_delta(r.grad().erased(), eps));
  const V adv_loss = objective(tape, &delta, 0.5f);
  return attn::add(tape, adv_loss, V(clean_loss.value())).erased();
}

}  // namespace examples
