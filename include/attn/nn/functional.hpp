// SPDX-License-Identifier: MIT
// Differentiable layer functions: dropout, layer_norm, masked_mean and masked_max pooling.
// Each has a fused forward and a hand-written backward (formulas cited at each); the loops are
// backend kernels (backend/cpu/layer_kernels.hpp, backend/cuda/layer_kernels.cuh).
//   auto pooled = attn::nn::masked_mean(ctx, y, mask);     // (B, T, D), (B, T) -> (B, D)
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../autograd/elementwise.hpp"
#include "../core/rng.hpp"

namespace attn::nn {

/// Inverted dropout: zeroes each element with probability p and scales survivors by 1/(1-p).
/// Identity when !training or p == 0. The mask comes from the context's random stream.
template <Context C, class T, class S, class B>
Var<T, S, B> dropout(C& ctx, const Var<T, S, B>& x, double p, bool training) {
  if (p < 0 || p >= 1) throw ArgumentError("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0) return x;
  // The mask is drawn on the host from the context's stream, so every backend drops the same elements.
  Tensor<T, AnyShape, B> mask(x.dims());
  const T keep = T(1) / T(1 - p);
  Rng& rng = ctx.rng();
  if constexpr (B::host_accessible) {
    for (std::size_t i = 0; i < mask.numel(); ++i) mask[i] = rng.uniform() < p ? T(0) : keep;
  } else {
    std::vector<T> h(mask.numel());
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = rng.uniform() < p ? T(0) : keep;
    B::template from_host<T>(mask.data(), h.data(), h.size());
  }
  Tensor<T, AnyShape, B> out = x.raw() * mask;
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), mask] {
      if (od->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      gx += od->grad * mask;
    });
  }
  return o;
}

/// Layer normalisation over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta,
/// with the biased variance (PyTorch). gamma, beta: (D).
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> layer_norm(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, const Var<T, SG, B>& beta, double eps) {
  const std::size_t d = x.rank() ? x.dims().back() : 0;
  if (d == 0 || gamma.numel() != d || beta.numel() != d)
    throw ShapeError("layer_norm: input " + x.dims().str() + " vs weight " + gamma.dims().str() + " and bias " + beta.dims().str());
  const std::size_t rows = x.numel() / d;
  Tensor<T, AnyShape, B> out(x.dims()), xhat(x.dims());
  auto rstd = Tensor<T, AnyShape, B>(Dims{rows});
  kernels::layer_norm_forward(B{}, x.raw().data(), gamma.raw().data(), beta.raw().data(), rows, d, eps, out.data(), xhat.data(),
                             rstd.data());
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x, gamma, beta);
  auto o = attn::detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), gamma.data().get(), beta.data().get()}, [xd = x.data(), gd = gamma.data(), bd = beta.data(), od = o.data(), xhat, rstd, rows, d] {
      if (od->grad.empty()) return;
      // dgamma = sum_rows gy * xhat; dbeta = sum_rows gy;
      // dx = rstd * (gy*gamma - mean(gy*gamma) - xhat * mean(gy*gamma*xhat)).
      T* dx = xd->requires_grad ? xd->grad_ref().data() : nullptr;
      T* dg = gd->requires_grad ? gd->grad_ref().data() : nullptr;
      T* db = bd->requires_grad ? bd->grad_ref().data() : nullptr;
      kernels::layer_norm_backward(B{}, od->grad.data(), xhat.data(), gd->value.data(), rstd.data(), rows, d, dx, dg, db);
    });
  }
  return o;
}

namespace pool_detail {
inline void check_pool(const char* op, const Dims& x, const Dims& m) {
  if (x.n != 3 || m.n != 2 || m.v[0] != x.v[0] || m.v[1] != x.v[1]) shape_mismatch(op, "expected x (B, T, D) and mask (B, T)", x, m);
}
}  // namespace pool_detail

/// Mean over the time axis of the positions where mask != 0: x (B, T, D), mask (B, T) -> (B, D).
/// A sample with no unmasked position pools to zeros.
template <Context C, class T, class S, class SM, class B>
auto masked_mean(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask) {
  using R = shapes::drop_t<S, 1>;
  pool_detail::check_pool("masked_mean", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto inv = Tensor<T, AnyShape, B>(Dims{b});
  kernels::masked_mean_forward(B{}, x.raw().data(), mask.data(), b, t, d, out.data(), inv.data());
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<R>(tape, std::move(out), rg);
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
  pool_detail::check_pool("masked_max", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto arg = Tensor<std::int64_t, AnyShape, B>::full(Dims{b, d}, -1);
  kernels::masked_max_forward(B{}, x.raw().data(), mask.data(), b, t, d, out.data(), arg.data());
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), arg, b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      kernels::masked_max_backward(B{}, od->grad.data(), arg.data(), b, t, d, xd->grad_ref().data());
    });
  }
  return o;
}

}  // namespace attn::nn
