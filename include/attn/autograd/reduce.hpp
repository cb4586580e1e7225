// SPDX-License-Identifier: MIT
// Reductions on Vars: sum and mean over everything or over one axis.
//   auto loss = attn::mean(tape, attn::mul(tape, err, err));     // -> shape ()
//   auto s = attn::sum<1>(tape, x);                               // (B, T, D) -> (B, D)
#pragma once
#include "elementwise.hpp"

namespace attn {

namespace detail {

/// out = scale * sum over axis (kept as extent 1 when keep); backward broadcasts g back.
template <class S, class T, class S0, class B>
Var<T, S, B> reduce_axis(Tape* tape, const Var<T, S0, B>& x, std::size_t axis, T scale, bool keep) {
  const Dims& d = x.dims();
  if (axis >= d.n) throw ShapeError("sum: axis " + std::to_string(axis) + " out of range for shape " + d.str());
  Dims kd = d;
  kd.v[axis] = 1;
  Tensor<T, AnyShape, B> out(kd);
  kernels::sum_to(B{}, x.raw().data(), d, out.data(), kd, false);
  if (scale != T(1)) out *= scale;
  Dims od;
  for (std::size_t i = 0; i < d.n; ++i)
    if (i != axis || keep) od.push_back(kd.v[i]);
  const bool rg = needs_grad(tape, x);
  auto o = make_out<S>(tape, out.reshape(od), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od_ = o.data(), kd, scale] {
      if (od_->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      gx += od_->grad.reshape(kd) * scale;
    });
  }
  return o;
}

template <class T, class S0, class B>
Var<T, Shape<>, B> reduce_all(Tape* tape, const Var<T, S0, B>& x, T scale) {
  auto out = Tensor<T, AnyShape, B>::zeros(Dims{});
  kernels::sum_to(B{}, x.raw().data(), x.dims(), out.data(), Dims{}, false);
  if (scale != T(1)) out *= scale;
  const bool rg = needs_grad(tape, x);
  auto o = make_out<Shape<>>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od_ = o.data(), scale] {
      if (od_->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      gx += od_->grad * scale;
    });
  }
  return o;
}

}  // namespace detail

/// Sum of all elements; shape ().
template <Context C, class T, class S, class B>
Var<T, Shape<>, B> sum(C& ctx, const Var<T, S, B>& x) {
  return detail::reduce_all(detail::tape_of(ctx), x, T(1));
}
/// Mean of all elements; shape ().
template <Context C, class T, class S, class B>
Var<T, Shape<>, B> mean(C& ctx, const Var<T, S, B>& x) {
  if (x.numel() == 0) throw ShapeError("mean: empty input " + x.dims().str());
  return detail::reduce_all(detail::tape_of(ctx), x, T(1) / T(x.numel()));
}

/// Sum over static axis Axis, which is dropped from the shape.
template <std::size_t Axis, Context C, class T, class S, class B>
auto sum(C& ctx, const Var<T, S, B>& x) {
  using R = shapes::drop_t<S, Axis>;
  return detail::reduce_axis<R>(detail::tape_of(ctx), x, Axis, T(1), false);
}
/// Mean over static axis Axis, which is dropped from the shape.
template <std::size_t Axis, Context C, class T, class S, class B>
auto mean(C& ctx, const Var<T, S, B>& x) {
  using R = shapes::drop_t<S, Axis>;
  if (Axis >= x.rank() || x.size(Axis) == 0) throw ShapeError("mean: empty or missing axis in " + x.dims().str());
  return detail::reduce_axis<R>(detail::tape_of(ctx), x, Axis, T(1) / T(x.size(Axis)), false);
}
/// Sum over a run-time axis; keepdim keeps it as extent 1.
template <Context C, class T, class S, class B>
Var<T, AnyShape, B> sum(C& ctx, const Var<T, S, B>& x, std::size_t axis, bool keepdim = false) {
  return detail::reduce_axis<AnyShape>(detail::tape_of(ctx), x, axis, T(1), keepdim);
}
/// Mean over a run-time axis; keepdim keeps it as extent 1.
template <Context C, class T, class S, class B>
Var<T, AnyShape, B> mean(C& ctx, const Var<T, S, B>& x, std::size_t axis, bool keepdim = false) {
  if (axis >= x.rank() || x.size(axis) == 0) throw ShapeError("mean: empty or missing axis in " + x.dims().str());
  return detail::reduce_axis<AnyShape>(detail::tape_of(ctx), x, axis, T(1) / T(x.size(axis)), keepdim);
}

}  // namespace attn
