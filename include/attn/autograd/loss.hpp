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
  static_assert(B::host_accessible, "cross_entropy: this backend provides its own kernel");
  if constexpr (!std::is_same_v<S, AnyShape>) static_assert(S::rank == 2, "cross_entropy: logits must be (N, C)");
  if (logits.rank() != 2) throw ShapeError("cross_entropy: logits must be (N, C), got " + logits.dims().str());
  const std::size_t n = logits.size(0), c = logits.size(1);
  if (targets.numel() != n) shape_mismatch("cross_entropy", "one target per row of logits", logits.dims(), targets.dims());
  if (opt.label_smoothing < 0 || opt.label_smoothing > 1) throw ArgumentError("cross_entropy: label_smoothing must be in [0, 1]");
  Tensor<T, AnyShape, B> logp(logits.dims());
  kernels::softmax_rows(B{}, logits.raw().data(), logp.data(), n, c, true);
  const T eps = T(opt.label_smoothing);
  double total = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long long t = static_cast<long long>(targets.data()[i]);
    if (t == opt.ignore_index) continue;
    if (t < 0 || static_cast<std::size_t>(t) >= c)
      throw ShapeError("cross_entropy: target " + std::to_string(t) + " at row " + std::to_string(i) + " is outside [0, " +
                       std::to_string(c) + ")");
    const T* lp = logp.data() + i * c;
    double row = -(1 - double(eps)) * lp[t];
    if (eps != T(0)) {
      double s = 0;
      for (std::size_t j = 0; j < c; ++j) s += lp[j];
      row -= double(eps) * s / double(c);
    }
    total += row;
    ++count;
  }
  auto out = Tensor<T, AnyShape, B>::full(Dims{}, count ? T(total / double(count)) : T(0));
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, logits);
  auto o = detail::make_out<Shape<>>(tape, std::move(out), rg);
  if (rg && count) {
    tape->push(o.data(), [ld = logits.data(), od = o.data(), logp, tg = targets.erased(), opt, n, c, count] {
      if (od->grad.empty() || !ld->requires_grad) return;
      // d/dlogits = (softmax - q) / count, q = (1 - eps) onehot + eps / C.
      const T scale = od->grad.data()[0] / T(count);
      const T eps = T(opt.label_smoothing);
      T* g = ld->grad_ref().data();
      for (std::size_t i = 0; i < n; ++i) {
        const long long t = static_cast<long long>(tg.data()[i]);
        if (t == opt.ignore_index) continue;
        const T* lp = logp.data() + i * c;
        T* gi = g + i * c;
        for (std::size_t j = 0; j < c; ++j) gi[j] += scale * (std::exp(lp[j]) - eps / T(c));
        gi[t] -= scale * (T(1) - eps);
      }
    });
  }
  return o;
}

}  // namespace attn
