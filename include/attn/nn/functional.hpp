// Differentiable layer functions: dropout, layer_norm, masked_mean and masked_max pooling.
// Each has a fused forward and a hand-written backward (formulas cited at each).
//   auto pooled = attn::nn::masked_mean(ctx, y, mask);     // (B, T, D), (B, T) -> (B, D)
#pragma once
#include <cmath>
#include <limits>

#include "../autograd/elementwise.hpp"
#include "../core/rng.hpp"

namespace attn::nn {

/// Inverted dropout: zeroes each element with probability p and scales survivors by 1/(1-p).
/// Identity when !training or p == 0. The mask comes from the context's random stream.
template <Context C, class T, class S, class B>
Var<T, S, B> dropout(C& ctx, const Var<T, S, B>& x, double p, bool training) {
  static_assert(B::host_accessible, "nn::dropout: this backend provides its own kernel");
  if (p < 0 || p >= 1) throw ArgumentError("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0) return x;
  Tensor<T, AnyShape, B> mask(x.dims());
  const T keep = T(1) / T(1 - p);
  Rng& rng = ctx.rng();
  for (std::size_t i = 0; i < mask.numel(); ++i) mask[i] = rng.uniform() < p ? T(0) : keep;
  Tensor<T, AnyShape, B> out = x.raw() * mask;
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), [xd = x.data(), od = o.data(), mask] {
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
  static_assert(B::host_accessible, "nn::layer_norm: this backend provides its own kernel");
  const std::size_t d = x.rank() ? x.dims().back() : 0;
  if (d == 0 || gamma.numel() != d || beta.numel() != d)
    throw ShapeError("layer_norm: input " + x.dims().str() + " vs weight " + gamma.dims().str() + " and bias " + beta.dims().str());
  const std::size_t rows = x.numel() / d;
  Tensor<T, AnyShape, B> out(x.dims()), xhat(x.dims());
  auto rstd = Tensor<T, AnyShape, B>(Dims{rows});
  const T* X = x.raw().data();
  const T* G = gamma.raw().data();
  const T* Bt = beta.raw().data();
  const long long nr = static_cast<long long>(rows);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (rows * d > (1u << 15))
#endif
  for (long long r = 0; r < nr; ++r) {
    const T* xr = X + r * d;
    double mu = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mu += xr[j];
    mu /= double(d);
    for (std::size_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(d);
    const T rs = T(1.0 / std::sqrt(var + eps));
    rstd[r] = rs;
    T* hr = xhat.data() + r * d;
    T* yr = out.data() + r * d;
    for (std::size_t j = 0; j < d; ++j) {
      hr[j] = (xr[j] - T(mu)) * rs;
      yr[j] = hr[j] * G[j] + Bt[j];
    }
  }
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x, gamma, beta);
  auto o = attn::detail::make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), [xd = x.data(), gd = gamma.data(), bd = beta.data(), od = o.data(), xhat, rstd, rows, d] {
      if (od->grad.empty()) return;
      const T* gy = od->grad.data();
      const T* H = xhat.data();
      const T* Gm = gd->value.data();
      // dgamma = sum_rows gy * xhat; dbeta = sum_rows gy;
      // dx = rstd * (gy*gamma - mean(gy*gamma) - xhat * mean(gy*gamma*xhat)).
      if (gd->requires_grad || bd->requires_grad) {
        T* dg = gd->requires_grad ? gd->grad_ref().data() : nullptr;
        T* db = bd->requires_grad ? bd->grad_ref().data() : nullptr;
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < d; ++j) {
            if (dg) dg[j] += gy[r * d + j] * H[r * d + j];
            if (db) db[j] += gy[r * d + j];
          }
      }
      if (xd->requires_grad) {
        T* dx = xd->grad_ref().data();
        const long long nr = static_cast<long long>(rows);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (rows * d > (1u << 15))
#endif
        for (long long r = 0; r < nr; ++r) {
          double m1 = 0, m2 = 0;
          for (std::size_t j = 0; j < d; ++j) {
            const double gg = double(gy[r * d + j]) * Gm[j];
            m1 += gg;
            m2 += gg * H[r * d + j];
          }
          m1 /= double(d);
          m2 /= double(d);
          for (std::size_t j = 0; j < d; ++j) {
            const double gg = double(gy[r * d + j]) * Gm[j];
            dx[r * d + j] += T(rstd[r] * (gg - m1 - H[r * d + j] * m2));
          }
        }
      }
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
  static_assert(B::host_accessible, "nn::masked_mean: this backend provides its own kernel");
  pool_detail::check_pool("masked_mean", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  auto inv = Tensor<T, AnyShape, B>(Dims{b});
  for (std::size_t i = 0; i < b; ++i) {
    double cnt = 0;
    for (std::size_t s = 0; s < t; ++s) cnt += mask.data()[i * t + s] != T(0);
    inv[i] = cnt > 0 ? T(1.0 / cnt) : T(0);
    T* o = out.data() + i * d;
    for (std::size_t s = 0; s < t; ++s) {
      if (mask.data()[i * t + s] == T(0)) continue;
      const T* xr = x.raw().data() + (i * t + s) * d;
      for (std::size_t j = 0; j < d; ++j) o[j] += xr[j];
    }
    for (std::size_t j = 0; j < d; ++j) o[j] *= inv[i];
  }
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), [xd = x.data(), od = o.data(), m = mask.erased(), inv, b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      T* gx = xd->grad_ref().data();
      for (std::size_t i = 0; i < b; ++i)
        for (std::size_t s = 0; s < t; ++s) {
          if (m.data()[i * t + s] == T(0)) continue;
          const T* g = od->grad.data() + i * d;
          T* dst = gx + (i * t + s) * d;
          for (std::size_t j = 0; j < d; ++j) dst[j] += g[j] * inv[i];
        }
    });
  }
  return o;
}

/// Maximum over the time axis of the positions where mask != 0: x (B, T, D), mask (B, T) -> (B, D).
/// The gradient goes to the (first) arg-max; a sample with no unmasked position pools to zeros.
template <Context C, class T, class S, class SM, class B>
auto masked_max(C& ctx, const Var<T, S, B>& x, const Tensor<T, SM, B>& mask) {
  using R = shapes::drop_t<S, 1>;
  static_assert(B::host_accessible, "nn::masked_max: this backend provides its own kernel");
  pool_detail::check_pool("masked_max", x.dims(), mask.dims());
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2);
  auto out = Tensor<T, AnyShape, B>::zeros({b, d});
  std::vector<long long> arg(b * d, -1);
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t s = 0; s < t; ++s) {
      if (mask.data()[i * t + s] == T(0)) continue;
      const T* xr = x.raw().data() + (i * t + s) * d;
      for (std::size_t j = 0; j < d; ++j)
        if (arg[i * d + j] < 0 || xr[j] > out[i * d + j]) {
          out[i * d + j] = xr[j];
          arg[i * d + j] = static_cast<long long>(s);
        }
    }
  Tape* tape = attn::detail::tape_of(ctx);
  const bool rg = attn::detail::needs_grad(tape, x);
  auto o = attn::detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), [xd = x.data(), od = o.data(), arg = std::move(arg), b, t, d] {
      if (od->grad.empty() || !xd->requires_grad) return;
      T* gx = xd->grad_ref().data();
      for (std::size_t i = 0; i < b; ++i)
        for (std::size_t j = 0; j < d; ++j)
          if (arg[i * d + j] >= 0) gx[(i * t + static_cast<std::size_t>(arg[i * d + j])) * d + j] += od->grad.data()[i * d + j];
    });
  }
  return o;
}

}  // namespace attn::nn
