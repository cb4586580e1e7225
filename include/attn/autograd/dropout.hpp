// SPDX-License-Identifier: MIT
// Inverted dropout on Vars. The mask is drawn on the host from the context's random stream (each
// Tape and NoGrad owns one), so every backend drops the same elements; backward multiplies by it.
//   auto y = attn::dropout(ctx, x, 0.1, training);
#pragma once
#include <string>
#include <vector>

#include "../core/rng.hpp"
#include "elementwise.hpp"

namespace attn {

/// Inverted dropout: zeroes each element with probability p and scales survivors by 1/(1-p).
/// Identity when !training or p == 0; p == 1 zeroes everything (x * 0, as torch), gradient 0. The
/// mask comes from the context's random stream.
template <Context C, class T, class S, class B>
Var<T, S, B> dropout(C& ctx, const Var<T, S, B>& x, double p, bool training) {
  if (!(p >= 0 && p <= 1)) throw ArgumentError("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0) return x;
  Tensor<T, AnyShape, B> mask(x.dims());
  const T keep = p < 1 ? T(1) / T(1 - p) : T(0);
  Rng& rng = ctx.rng();
  if constexpr (B::host_accessible) {
    for (std::size_t i = 0; i < mask.numel(); ++i) mask[i] = rng.uniform() < p ? T(0) : keep;
  } else {
    std::vector<T> h(mask.numel());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = rng.uniform() < p ? T(0) : keep;
    B::template from_host<T>(mask.data(), h.data(), h.size());
  }
  Tensor<T, AnyShape, B> out = x.raw() * mask;
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), mask] {
      if (od->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      gx += od->grad * mask;
    });
  }
  return o;
}

}  // namespace attn
