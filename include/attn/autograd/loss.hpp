// SPDX-License-Identifier: MIT
// Losses on Vars: cross-entropy over class logits with ignore_index and label smoothing
// (PyTorch's semantics: mean over the targets that are not ignored).
//   auto loss = attn::cross_entropy(tape, logits, labels);   // (N, C), (N) -> ()
#pragma once
#include <cmath>
#include <concepts>
#include <vector>

#include "elementwise.hpp"

namespace attn {

struct CrossEntropyOptions {
  long long ignore_index = -100;
  double label_smoothing = 0.0;
};

/// Mean cross-entropy of logits (N, C) against integer targets (N). Targets equal to
/// ignore_index count neither in the loss nor in the mean; if all are ignored the loss is 0.
template <Context C, class T, class S, class B, std::integral I, class SI>
Var<T, Shape<>, B> cross_entropy(C& ctx, const Var<T, S, B>& logits, const Tensor<I, SI, B>& targets,
                                 CrossEntropyOptions opt = {}) {
  if constexpr (!std::is_same_v<S, AnyShape>) static_assert(S::rank == 2, "cross_entropy: logits must be (N, C)");
  if (logits.rank() != 2) throw ShapeError("cross_entropy: logits must be (N, C), got " + logits.dims().str());
  const std::size_t n = logits.size(0), c = logits.size(1);
  if (targets.numel() != n) shape_mismatch("cross_entropy", "one target per row of logits", logits.dims(), targets.dims());
  if (opt.label_smoothing < 0 || opt.label_smoothing > 1) throw ArgumentError("cross_entropy: label_smoothing must be in [0, 1]");
  Tensor<T, AnyShape, B> logp(logits.dims());
  kernels::softmax_rows(B{}, logits.raw().data(), logp.data(), n, c, true);
  const T eps = T(opt.label_smoothing);
  // Targets are checked (and counted) on the host: a bad one is a ShapeError naming its row.
  std::vector<I> host_targets;
  const I* tg = targets.data();
  if constexpr (!B::host_accessible) {
    host_targets = targets.to_vector();
    tg = host_targets.data();
  }
  const std::size_t count = kernels::cross_entropy_count(tg, n, c, opt.ignore_index);
  const double total = kernels::cross_entropy_forward(B{}, logp.data(), targets.data(), n, c, opt.ignore_index, eps);
  auto out = Tensor<T, AnyShape, B>::full(Dims{}, count ? T(total / double(count)) : T(0));
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, logits);
  auto o = detail::make_out<Shape<>>(tape, std::move(out), rg);
  if (rg && count) {
    tape->push(o.data(), {logits.data().get()}, [ld = logits.data(), od = o.data(), logp, tg = targets.erased(), opt, n, c, count] {
      if (od->grad.empty() || !ld->requires_grad) return;
      // d/dlogits = (softmax - q) / count, q = (1 - eps) onehot + eps / C.
      kernels::cross_entropy_backward(B{}, logp.data(), tg.data(), n, c, opt.ignore_index, T(opt.label_smoothing), od->grad.data(),
                                      count, ld->grad_ref().data());
    });
  }
  return o;
}

}  // namespace attn
