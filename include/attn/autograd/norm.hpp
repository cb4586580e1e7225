// SPDX-License-Identifier: MIT
// Layer and RMS normalisation on Vars over the last axis, PyTorch's layer_norm and rms_norm: a
// fused forward that keeps xhat and 1/std for a hand-written backward; the loops are
// kernels::layer_norm_forward/backward and rms_norm_forward/backward
// (backend/cpu/vector_kernels.hpp, backend/cuda/layer_kernels.cuh).
//   auto y = attn::layer_norm(ctx, x, gamma, beta, 1e-5);   // x (..., D), gamma, beta (D)
//   auto z = attn::rms_norm(ctx, x, gamma, 1e-6);           // x (..., D), gamma (D)
#pragma once
#include <string>

#include "elementwise.hpp"

namespace attn {

namespace detail {

/// The op behind layer_norm (center: subtract the mean, add beta) and rms_norm (no mean, no beta):
/// one fused forward, one tape node whose backward runs the matching kernel. An undefined gamma is
/// a scale of ones (kept for backward), an undefined beta no shift.
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> norm_last_axis(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, const Var<T, SG, B>& beta, double eps, bool center) {
  const char* who = center ? "layer_norm" : "rms_norm";
  const std::size_t d = x.rank() ? x.dims().back() : 0;
  const bool has_gamma = gamma.defined(), has_beta = center && beta.defined();
  if (d == 0 || (has_gamma && gamma.numel() != d) || (has_beta && beta.numel() != d))
    throw ShapeError(std::string(who) + ": input " + (x.defined() ? x.dims().str() : std::string("undefined")) + " vs weight " +
                     (has_gamma ? gamma.dims().str() : std::string("(none)")) +
                     (center ? " and bias " + (has_beta ? beta.dims().str() : std::string("(none)")) : std::string()));
  if (!(eps >= 0 && eps <= 1e30)) throw ArgumentError(std::string(who) + ": eps must be a finite value >= 0, got " + std::to_string(eps));
  const std::size_t rows = x.numel() / d;
  Tensor<T, AnyShape, B> out(x.dims()), xhat(x.dims());
  auto rstd = Tensor<T, AnyShape, B>(Dims{rows});
  // Without a scale the kernels multiply by ones (kept for backward); without a shift they add none.
  const auto ones = has_gamma ? Tensor<T, AnyShape, B>() : Tensor<T, AnyShape, B>::full(Dims{d}, T(1));
  const T* g = has_gamma ? gamma.raw().data() : ones.data();
  if (center)
    kernels::layer_norm_forward(B{}, x.raw().data(), g, has_beta ? beta.raw().data() : static_cast<const T*>(nullptr), rows, d, eps,
                                out.data(), xhat.data(), rstd.data());
  else
    kernels::rms_norm_forward(B{}, x.raw().data(), g, rows, d, eps, out.data(), xhat.data(), rstd.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = has_beta ? detail::needs_grad(tape, x, gamma, beta) : detail::needs_grad(tape, x, gamma);
  auto o = detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), has_gamma ? gamma.data().get() : nullptr, has_beta ? beta.data().get() : nullptr},
               [xd = x.data(), gd = has_gamma ? gamma.data() : nullptr, bd = has_beta ? beta.data() : nullptr, od = o.data(), xhat, rstd,
                ones, rows, d, center] {
      if (od->grad.empty()) return;
      // dgamma = sum_rows gy * xhat; dbeta = sum_rows gy;
      // dx = rstd * (gy*gamma - mean(gy*gamma) - xhat * mean(gy*gamma*xhat)), without the mean term
      // for the RMS norm.
      T* dx = xd->requires_grad ? xd->grad_ref().data() : nullptr;
      T* dg = gd && gd->requires_grad ? gd->grad_ref().data() : nullptr;
      T* db = bd && bd->requires_grad ? bd->grad_ref().data() : nullptr;
      const T* gm = gd ? gd->value.data() : ones.data();
      if (center) kernels::layer_norm_backward(B{}, od->grad.data(), xhat.data(), gm, rstd.data(), rows, d, dx, dg, db);
      else kernels::rms_norm_backward(B{}, od->grad.data(), xhat.data(), gm, rstd.data(), rows, d, dx, dg);
    });
  }
  return o;
}

}  // namespace detail

/// Layer normalisation over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta,
/// with the biased variance (PyTorch). gamma, beta: (D); beta may be undefined (no shift, torch's
/// LayerNorm(bias=False)), and so may gamma (no scale: with both undefined, torch's
/// LayerNorm(elementwise_affine=False)).
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> layer_norm(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, const Var<T, SG, B>& beta, double eps) {
  return detail::norm_last_axis(ctx, x, gamma, beta, eps, true);
}

/// RMS normalisation over the last axis (torch.nn.functional.rms_norm): y = x / sqrt(mean(x^2) +
/// eps) * gamma. gamma: (D), or undefined for no scale (torch's RMSNorm(elementwise_affine=False)).
/// eps is the value itself: torch's default eps=None is the element type's epsilon
/// (nn::RMSNorm applies that default).
template <Context C, class T, class S, class SG, class B>
Var<T, S, B> rms_norm(C& ctx, const Var<T, S, B>& x, const Var<T, SG, B>& gamma, double eps) {
  return detail::norm_last_axis(ctx, x, gamma, Var<T, SG, B>{}, eps, false);
}

}  // namespace attn
