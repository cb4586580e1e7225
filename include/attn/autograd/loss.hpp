// SPDX-License-Identifier: MIT
// Losses on Vars: cross-entropy over class logits with ignore_index, label smoothing and class
// weights (PyTorch's semantics: mean over the targets that are not ignored, weighted by their
// classes' weights when weights are given).
//   auto loss = attn::cross_entropy(tape, logits, labels);   // (N, C), (N) -> ()
//   auto loss = attn::cross_entropy(tape, logits, labels, {.label_smoothing = 0.1, .weight = w});
#pragma once
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "elementwise.hpp"
#include "reduce.hpp"
#include "softmax.hpp"

namespace attn {

struct CrossEntropyOptions {
  long long ignore_index = -100;
  double label_smoothing = 0.0;
  /// A weight per class (C values, finite and >= 0), torch's `weight`: empty for all 1. Each row's
  /// term is scaled by its target's weight (the smoothing term's classes by their own) and the mean
  /// divides by the sum of the counted rows' target weights (when that sum is 0 the loss is 0, as
  /// when every row is ignored; torch gives NaN).
  std::vector<double> weight = {};
};

namespace detail {

/// cross_entropy with class weights, composed of differentiable ops: -sum(M * log_softmax(logits)) / W
/// with M[i, j] = (1 - eps) w[t_i] [j == t_i] + eps / C w[j] on the counted rows (0 on the others)
/// and W the sum of w[t_i] over them (torch's reduction "mean" with `weight` and `label_smoothing`).
template <Context C, class T, class S, class B, class I>
Var<T, Shape<>, B> weighted_cross_entropy(C& ctx, const Var<T, S, B>& logits, const I* tg, std::size_t n, std::size_t c,
                                          const CrossEntropyOptions& opt) {
  const auto& w = opt.weight;
  std::vector<T> m(n * c, T(0));
  double total_weight = 0;
  const double eps = opt.label_smoothing;
  for (std::size_t i = 0; i < n; ++i) {
    const long long t = static_cast<long long>(tg[i]);
    if (t == opt.ignore_index) continue;
    total_weight += w[std::size_t(t)];
    for (std::size_t j = 0; j < c; ++j) m[i * c + j] = T(eps / double(c) * w[j]);
    m[i * c + std::size_t(t)] += T((1 - eps) * w[std::size_t(t)]);
  }
  if (!(total_weight > 0))  // nothing counted (or only classes of weight 0): 0, as without weights
    return detail::make_out<Shape<>>(detail::tape_of(ctx), Tensor<T, AnyShape, B>::full(Dims{}, T(0)), false);
  const Var<T, AnyShape, B> mv(Tensor<T, AnyShape, B>::from(logits.dims(), std::span<const T>(m)));
  const auto picked = mul(ctx, log_softmax(ctx, logits.erased()), mv);
  return scale(ctx, mean(ctx, picked), T(-double(n * c) / total_weight));
}

}  // namespace detail

/// Mean cross-entropy of logits (N, C) against integer targets (N). Targets equal to
/// ignore_index count neither in the loss nor in the mean; if all are ignored the loss is 0.
/// With opt.weight, the weighted mean (CrossEntropyOptions::weight).
template <Context C, class T, class S, class B, std::integral I, class SI>
Var<T, Shape<>, B> cross_entropy(C& ctx, const Var<T, S, B>& logits, const Tensor<I, SI, B>& targets,
                                 const CrossEntropyOptions& opt = {}) {
  if constexpr (!std::is_same_v<S, AnyShape>) static_assert(S::rank == 2, "cross_entropy: logits must be (N, C)");
  if (logits.rank() != 2) throw ShapeError("cross_entropy: logits must be (N, C), got " + logits.dims().str());
  const std::size_t n = logits.size(0), c = logits.size(1);
  if (targets.numel() != n) shape_mismatch("cross_entropy", "one target per row of logits", logits.dims(), targets.dims());
  if (opt.label_smoothing < 0 || opt.label_smoothing > 1) throw ArgumentError("cross_entropy: label_smoothing must be in [0, 1]");
  if (!opt.weight.empty()) {
    if (opt.weight.size() != c)
      throw ArgumentError("cross_entropy: " + std::to_string(opt.weight.size()) + " class weights for " + std::to_string(c) + " classes");
    for (std::size_t j = 0; j < c; ++j)
      if (!std::isfinite(opt.weight[j]) || opt.weight[j] < 0)
        throw ArgumentError("cross_entropy: class weight " + std::to_string(j) + " is " + std::to_string(opt.weight[j]) +
                            "; weights must be finite and >= 0");
  }
  // Targets are checked (and counted) on the host: a bad one is a ShapeError naming its row.
  std::vector<I> host_targets;
  const I* tg = targets.data();
  if constexpr (!B::host_accessible) {
    host_targets = targets.to_vector();
    tg = host_targets.data();
  }
  const std::size_t count = kernels::cross_entropy_count(tg, n, c, opt.ignore_index);
  if (!opt.weight.empty()) return detail::weighted_cross_entropy(ctx, logits, tg, n, c, opt);
  Tensor<T, AnyShape, B> logp(logits.dims());
  kernels::softmax_rows(B{}, logits.raw().data(), logp.data(), n, c, true);
  const T eps = T(opt.label_smoothing);
  const double total = kernels::cross_entropy_forward(B{}, logp.data(), targets.data(), n, c, opt.ignore_index, eps);
  auto out = Tensor<T, AnyShape, B>::full(Dims{}, count ? T(total / double(count)) : T(0));
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, logits);
  auto o = detail::make_out<Shape<>>(tape, std::move(out), rg);
  if (rg && count) {
    tape->push(o.data(), {logits.data().get()}, [ld = logits.data(), od = o.data(), logp, tg = targets.erased(), ignore = opt.ignore_index,
                                                  smoothing = opt.label_smoothing, n, c, count] {
      if (od->grad.empty() || !ld->requires_grad) return;
      // d/dlogits = (softmax - q) / count, q = (1 - eps) onehot + eps / C.
      kernels::cross_entropy_backward(B{}, logp.data(), tg.data(), n, c, ignore, T(smoothing), od->grad.data(), count,
                                      ld->grad_ref().data());
    });
  }
  return o;
}

}  // namespace attn
