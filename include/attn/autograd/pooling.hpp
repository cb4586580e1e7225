// SPDX-License-Identifier: MIT
// Masked pooling over the time axis on Vars: the mean and the maximum of the real positions of a
// padded batch, described by attn::Lengths, KeepMask or PaddingMask (core/mask.hpp). The loops are
// kernels::masked_mean_*/masked_max_* (backend/cpu/layer_kernels.hpp, backend/cuda/layer_kernels.cuh).
//   auto pooled = attn::masked_mean(ctx, y, attn::Lengths{5, 3});     // (B, T, D) -> (B, D)
#pragma once
#include <cstdint>

#include "../core/mask.hpp"
#include "elementwise.hpp"

namespace attn {

namespace detail {
inline void check_pool(const char* op, const Dims& x) {
  if (x.n != 3) throw ShapeError(std::string(op) + ": x must be (B, T, D), got " + x.str());
}
}  // namespace detail

/// Mean over the time axis of the real positions: x (B, T, D) -> (B, D).
/// A sample with no unmasked position pools to zeros.
template <Context C, class T, class S, class B, TokenMask M>
auto masked_mean(C& ctx, const Var<T, S, B>& x, const M& key_mask) {
  using R = shapes::drop_t<S, 1>;
  detail::check_pool("masked_mean", x.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  const Tensor<T, AnyShape, B> mask = keep_mask<T, B>(key_mask, b, t, "masked_mean");
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto inv = Tensor<T, AnyShape, B>(Dims{b});
  kernels::masked_mean_forward(B{}, x.raw().data(), mask.data(), b, t, d, out.data(), inv.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), m = mask, inv, b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::masked_mean_backward(B{}, od->grad.data(), m.data(), inv.data(), b, t, d, xd->grad_ref().data());
    });
  }
  return o;
}

/// Maximum over the time axis of the real positions: x (B, T, D) -> (B, D), torch's
/// x.masked_fill(padding, -inf).max(1).values: the gradient goes to the first arg-max (all of it,
/// where torch.amax would share it between ties), a NaN is the maximum, and a sample with no
/// unmasked position pools to zeros.
template <Context C, class T, class S, class B, TokenMask M>
auto masked_max(C& ctx, const Var<T, S, B>& x, const M& key_mask) {
  using R = shapes::drop_t<S, 1>;
  detail::check_pool("masked_max", x.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  const Tensor<T, AnyShape, B> mask = keep_mask<T, B>(key_mask, b, t, "masked_max");
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

/// A bare tensor in the mask's place: rejected at compile time.
template <Context C, class T, class S, class B, BareMaskTensor M>
auto masked_mean(C&, const Var<T, S, B>&, const M&) {
  static_assert(mask_detail::always_false<M>,
                "attn::masked_mean / masked_max: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) (1 = real token), attn::PaddingMask(m) (1 = padding) or attn::Lengths");
}
template <Context C, class T, class S, class B, BareMaskTensor M>
auto masked_max(C&, const Var<T, S, B>&, const M&) {
  static_assert(mask_detail::always_false<M>,
                "attn::masked_mean / masked_max: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) (1 = real token), attn::PaddingMask(m) (1 = padding) or attn::Lengths");
}

}  // namespace attn
