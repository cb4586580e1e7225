// SPDX-License-Identifier: MIT
// softmax, log_softmax (last axis) and masked_fill on Vars. A row whose every entry is -inf
// (a fully masked row) gives all-zero softmax weights, never NaN.
//   auto w = attn::softmax(tape, attn::masked_fill(tape, scores, pad, -INFINITY));
#pragma once
#include "elementwise.hpp"

namespace attn {

namespace detail {
template <class T, class S, class B>
Var<T, S, B> softmax_impl(Tape* tape, const Var<T, S, B>& x, bool log) {
  const Dims& d = x.dims();
  if (d.n == 0) throw ShapeError("softmax: needs rank >= 1");
  const std::size_t cols = d.back(), rows = cols ? x.numel() / cols : 0;
  Tensor<T, AnyShape, B> out(d);
  kernels::softmax_rows(B{}, x.raw().data(), out.data(), rows, cols, log);
  const bool rg = needs_grad(tape, x);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), rows, cols, log] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::softmax_rows_backward(B{}, od->value.data(), od->grad.data(), xd->grad_ref().data(), rows, cols, log);
    });
  }
  return o;
}
struct MaskSelect {  // where(mask != 0, v, x)
  template <class T> ATTN_HD T operator()(T x, T m) const { return m != T(0) ? T(fill) : x; }
  double fill;
};
struct MaskGrad {  // g where mask == 0, else 0
  template <class T> ATTN_HD T operator()(T g, T m) const { return m != T(0) ? T(0) : g; }
};
}  // namespace detail

/// softmax over the last axis.
template <Context C, class T, class S, class B>
Var<T, S, B> softmax(C& ctx, const Var<T, S, B>& x) { return detail::softmax_impl(detail::tape_of(ctx), x, false); }
/// log(softmax(x)) over the last axis, computed stably.
template <Context C, class T, class S, class B>
Var<T, S, B> log_softmax(C& ctx, const Var<T, S, B>& x) { return detail::softmax_impl(detail::tape_of(ctx), x, true); }

/// x with `value` wherever mask != 0; mask (same element type) broadcasts to x's shape.
template <Context C, class T, class S, class SM, class B>
Var<T, S, B> masked_fill(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask, T value) {
  Tensor<T, AnyShape, B> out(x.dims());
  out = apply(x.raw(), mask, detail::MaskSelect{double(value)});
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), m = mask.erased()] {
      if (od->grad.empty() || !xd->requires_grad) return;
      detail::accumulate(*xd, apply<detail::MaskGrad>(od->grad, m), od->grad.dims());
    });
  }
  return o;
}

}  // namespace attn
