// SPDX-License-Identifier: MIT
// Masked pooling over the time axis on Vars: the mean and the maximum of the positions a (B, T) mask
// keeps. The loops are kernels::masked_mean_*/masked_max_* (backend/cpu/layer_kernels.hpp,
// backend/cuda/layer_kernels.cuh).
//   auto pooled = attn::masked_mean(ctx, y, mask);     // (B, T, D), (B, T) -> (B, D)
#pragma once
#include <cstdint>

#include "elementwise.hpp"

namespace attn {

namespace detail {
inline void check_pool(const char* op, const Dims& x, const Dims& m) {
  if (x.n != 3 || m.n != 2 || m.v[0] != x.v[0] || m.v[1] != x.v[1]) shape_mismatch(op, "expected x (B, T, D) and mask (B, T)", x, m);
}
}  // namespace detail

/// Mean over the time axis of the positions where mask != 0: x (B, T, D), mask (B, T) -> (B, D).
/// A sample with no unmasked position pools to zeros.
template <Context C, class T, class S, class SM, class B>
auto masked_mean(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask) {
  using R = shapes::drop_t<S, 1>;
  detail::check_pool("masked_mean", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto inv = Tensor<T, AnyShape, B>(Dims{b});
  kernels::masked_mean_forward(B{}, x.raw().data(), mask.data(), b, t, d, out.data(), inv.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), m = mask.erased(), inv, b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::masked_mean_backward(B{}, od->grad.data(), m.data(), inv.data(), b, t, d, xd->grad_ref().data());
    });
  }
  return o;
}

/// Maximum over the time axis of the positions where mask != 0: x (B, T, D), mask (B, T) -> (B, D).
/// The gradient goes to the (first) arg-max; a sample with no unmasked position pools to zeros.
template <Context C, class T, class S, class SM, class B>
auto masked_max(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask) {
  using R = shapes::drop_t<S, 1>;
  detail::check_pool("masked_max", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto arg = Tensor<std::int64_t, AnyShape, B>::full(Dims{b, d}, -1);
  kernels::masked_max_forward(B{}, x.raw().data(), mask.data(), b, t, d, out.data(), arg.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), arg, b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::masked_max_backward(B{}, od->grad.data(), arg.data(), b, t, d, xd->grad_ref().data());
    });
  }
  return o;
}

}  // namespace attn
