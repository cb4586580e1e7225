// SPDX-License-Identifier: MIT
// Layer and RMS normalisation on Vars over the last axis, PyTorch's layer_norm and rms_norm: a
// fused forward that keeps xhat and 1/std for a hand-written backward; the loops are
// kernels::layer_norm_forward/backward and rms_norm_forward/backward
// (backend/cpu/vector_kernels.hpp, backend/cuda/layer_kernels.cuh).
//   auto y = attn::layer_norm(ctx, x, gamma, beta, 1e-5);   // x (..., D), gamma, beta (D)
//   auto z = attn::rms_norm(ctx, x, gamma, 1e-6);           // x (..., D), gamma (D)
#pragma once
#include "elementwise.hpp"

namespace attn {

/// Layer normalisation over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta,
/// with the biased variance (PyTorch). gamma, beta: (D); beta may be undefined (no shift, torch's
/// LayerNorm(bias=False)), and so may gamma (no scale: with both undefined, torch's
/// LayerNorm(elementwise_affine=False)).
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> layer_norm(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, const Var<T, SG, B>& beta, double eps) {
  const std::size_t d = x.rank() ? x.dims().back() : 0;
  const bool has_gamma = gamma.defined(), has_beta = beta.defined();
  if (d == 0 || (has_gamma && gamma.numel() != d) || (has_beta && beta.numel() != d))
    throw ShapeError("layer_norm: input " + x.dims().str() + " vs weight " + (has_gamma ? gamma.dims().str() : std::string("(none)")) +
                     " and bias " + (has_beta ? beta.dims().str() : std::string("(none)")));
  const std::size_t rows = x.numel() / d;
  Tensor<T, AnyShape, B> out(x.dims()), xhat(x.dims());
  auto rstd = Tensor<T, AnyShape, B>(Dims{rows});
  // Without a scale the kernels multiply by ones (kept for backward).
  const auto ones = has_gamma ? Tensor<T, AnyShape, B>() : Tensor<T, AnyShape, B>::full(Dims{d}, T(1));
  {
    const auto zero = has_beta ? Tensor<T, AnyShape, B>() : Tensor<T, AnyShape, B>::zeros(Dims{d});
    kernels::layer_norm_forward(B{}, x.raw().data(), has_gamma ? gamma.raw().data() : ones.data(), has_beta ? beta.raw().data() : zero.data(),
                                rows, d, eps, out.data(), xhat.data(), rstd.data());
  }
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x, gamma, beta);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), has_gamma ? gamma.data().get() : nullptr, has_beta ? beta.data().get() : nullptr},
               [xd = x.data(), gd = has_gamma ? gamma.data() : nullptr, bd = has_beta ? beta.data() : nullptr, od = o.data(), xhat, rstd,
                ones, rows, d] {
      if (od->grad.empty()) return;
      // dgamma = sum_rows gy * xhat; dbeta = sum_rows gy;
      // dx = rstd * (gy*gamma - mean(gy*gamma) - xhat * mean(gy*gamma*xhat)).
      T* dx = xd->requires_grad ? xd->grad_ref().data() : nullptr;
      T* dg = gd && gd->requires_grad ? gd->grad_ref().data() : nullptr;
      T* db = bd && bd->requires_grad ? bd->grad_ref().data() : nullptr;
      kernels::layer_norm_backward(B{}, od->grad.data(), xhat.data(), gd ? gd->value.data() : ones.data(), rstd.data(), rows, d, dx, dg, db);
    });
  }
  return o;
}

/// RMS normalisation over the last axis (torch.nn.functional.rms_norm): y = x / sqrt(mean(x^2) +
/// eps) * gamma. gamma: (D), or undefined for no scale (torch's RMSNorm(elementwise_affine=False)).
/// eps is the value itself: torch's default eps=None is the element type's epsilon
/// (nn::RMSNorm applies that default).
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> rms_norm(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, double eps) {
  const std::size_t d = x.rank() ? x.dims().back() : 0;
  const bool has_gamma = gamma.defined();
  if (d == 0 || (has_gamma && gamma.numel() != d))
    throw ShapeError("rms_norm: input " + x.dims().str() + " vs weight " + (has_gamma ? gamma.dims().str() : std::string("(none)")));
  if (!(eps >= 0 && eps <= 1e30)) throw ArgumentError("rms_norm: eps must be a finite value >= 0, got " + std::to_string(eps));
  const std::size_t rows = x.numel() / d;
  Tensor<T, AnyShape, B> out(x.dims()), xhat(x.dims());
  auto rstd = Tensor<T, AnyShape, B>(Dims{rows});
  // Without a scale the kernels multiply by ones (kept for backward).
  const auto ones = has_gamma ? Tensor<T, AnyShape, B>() : Tensor<T, AnyShape, B>::full(Dims{d}, T(1));
  kernels::rms_norm_forward(B{}, x.raw().data(), has_gamma ? gamma.raw().data() : ones.data(), rows, d, eps, out.data(), xhat.data(),
                            rstd.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x, gamma);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), has_gamma ? gamma.data().get() : nullptr},
               [xd = x.data(), gd = has_gamma ? gamma.data() : nullptr, od = o.data(), xhat, rstd, ones, rows, d] {
      if (od->grad.empty()) return;
      // dgamma = sum_rows gy * xhat; dx = rstd * (gy*gamma - xhat * mean(gy*gamma*xhat)).
      T* dx = xd->requires_grad ? xd->grad_ref().data() : nullptr;
      T* dg = gd && gd->requires_grad ? gd->grad_ref().data() : nullptr;
      kernels::rms_norm_backward(B{}, od->grad.data(), xhat.data(), gd ? gd->value.data() : ones.data(), rstd.data(), rows, d, dx, dg);
    });
  }
  return o;
}

}  // namespace attn
