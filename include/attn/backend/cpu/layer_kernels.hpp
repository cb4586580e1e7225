// SPDX-License-Identifier: MIT
// CPU kernels of the loss and layer functions: cross-entropy over log-probabilities, masked
// mean/max pooling over time, and (from vector_kernels.hpp, one copy per ISA level) layer
// and RMS normalisation. Overloaded on the backend tag, as cuda/layer_kernels.cuh; the ops in
// autograd/loss.hpp, autograd/norm.hpp and autograd/pooling.hpp call them as kernels::xxx(B{}, ...).
//   attn::kernels::layer_norm_forward(attn::cpu{}, x, gamma, beta, rows, d, 1e-5, y, xhat, rstd);
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

/// Targets (n) of a cross-entropy against c classes: throws ShapeError naming the first target
/// that is neither ignore_index nor in [0, c); returns how many are not ignored.
template <class I>
std::size_t cross_entropy_count(const I* targets, std::size_t n, std::size_t c, long long ignore_index) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long long t = static_cast<long long>(targets[i]);
    if (t == ignore_index) continue;
    if (t < 0 || static_cast<std::size_t>(t) >= c)
      throw ShapeError("cross_entropy: target " + std::to_string(t) + " at row " + std::to_string(i) + " is outside [0, " +
                       std::to_string(c) + ")");
    ++count;
  }
  return count;
}

/// Sum over the rows whose target is not ignore_index of -(1 - eps) logp[t] - eps mean_j logp[j]
/// (label smoothing eps), in double. logp (n, c) holds log_softmax(logits); targets (n) are valid
/// (cross_entropy_count checked them).
template <class T, class I>
double cross_entropy_forward(cpu, const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index, T eps) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long long t = static_cast<long long>(targets[i]);
    if (t == ignore_index) continue;
    const T* lp = logp + i * c;
    double s = 0;
    if (eps != T(0))
      for (std::size_t j = 0; j < c; ++j) s += lp[j];
    total += elem::cross_entropy_row(lp[t], s, double(eps), c);
  }
  return total;
}

/// dlogits (n, c) += dloss[0] / count * (softmax - q), q = (1 - eps) onehot(t) + eps / c, on the
/// rows not ignored. dloss: the loss's gradient (one element, in the backend's memory).
template <class T, class I>
void cross_entropy_backward(cpu, const T* logp, const I* targets, std::size_t n, std::size_t c, long long ignore_index, T eps,
                            const T* dloss, std::size_t count, T* dlogits) {
  const T scale = dloss[0] / T(count);
  T* g = dlogits;
  for (std::size_t i = 0; i < n; ++i) {
    const long long t = static_cast<long long>(targets[i]);
    if (t == ignore_index) continue;
    const T* lp = logp + i * c;
    T* gi = g + i * c;
    for (std::size_t j = 0; j < c; ++j) gi[j] = elem::cross_entropy_grad(gi[j], lp[j], static_cast<long long>(j) == t, scale, eps, c);
  }
}

/// Masked mean over time: out (b, d) = sum over s with mask (b, t) != 0 of x (b, t, d) [i, s, :],
/// times inv[i] = 1 / count (0 when no position is unmasked). out must be zero on entry.
template <class T>
void masked_mean_forward(cpu, const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out, T* inv) {
  const auto prof = profile::Scope::of<T>("masked mean forward", b, t, d);
  const long long nb = static_cast<long long>(b);
  const int nt = vec::threads_for(b, b * t * d);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (long long ib = 0; ib < nb; ++ib) {
    const std::size_t i = static_cast<std::size_t>(ib);
    double cnt = 0;
    for (std::size_t s = 0; s < t; ++s) cnt += mask[i * t + s] != T(0);
    inv[i] = cnt > 0 ? T(1.0 / cnt) : T(0);
    T* o = out + i * d;
    for (std::size_t s = 0; s < t; ++s) {
      if (mask[i * t + s] == T(0)) continue;
      const T* xr = x + (i * t + s) * d;
      for (std::size_t j = 0; j < d; ++j) o[j] += xr[j];
    }
    for (std::size_t j = 0; j < d; ++j) o[j] *= inv[i];
  }
}

/// gx (b, t, d) [i, s, :] += g (b, d) [i, :] * inv[i] where mask != 0.
template <class T>
void masked_mean_backward(cpu, const T* g, const T* mask, const T* inv, std::size_t b, std::size_t t, std::size_t d, T* gx) {
  const auto prof = profile::Scope::of<T>("masked mean backward", b, t, d);
  const long long nb = static_cast<long long>(b);
  const int nt = vec::threads_for(b, b * t * d);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (long long ib = 0; ib < nb; ++ib)
    for (std::size_t s = 0, i = static_cast<std::size_t>(ib); s < t; ++s) {
      if (mask[i * t + s] == T(0)) continue;
      const T* gi = g + i * d;
      T* dst = gx + (i * t + s) * d;
      for (std::size_t j = 0; j < d; ++j) dst[j] += gi[j] * inv[i];
    }
}

/// Masked max over time: out (b, d) = max over unmasked s of x[i, s, :], arg (b, d) the first
/// arg-max s (-1, out 0, when no position is unmasked), a NaN counting as the maximum (torch.max
/// over a dimension). out zero and arg -1 on entry.
template <class T>
void masked_max_forward(cpu, const T* x, const T* mask, std::size_t b, std::size_t t, std::size_t d, T* out, std::int64_t* arg) {
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t s = 0; s < t; ++s) {
      if (mask[i * t + s] == T(0)) continue;
      const T* xr = x + (i * t + s) * d;
      for (std::size_t j = 0; j < d; ++j)
        if (arg[i * d + j] < 0 || xr[j] > out[i * d + j] || (xr[j] != xr[j] && out[i * d + j] == out[i * d + j])) {
          out[i * d + j] = xr[j];
          arg[i * d + j] = static_cast<std::int64_t>(s);
        }
    }
}

/// gx (b, t, d) [i, arg[i, j], j] += g (b, d) [i, j] where arg >= 0.
template <class T>
void masked_max_backward(cpu, const T* g, const std::int64_t* arg, std::size_t b, std::size_t t, std::size_t d, T* gx) {
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t j = 0; j < d; ++j)
      if (arg[i * d + j] >= 0) gx[(i * t + static_cast<std::size_t>(arg[i * d + j])) * d + j] += g[i * d + j];
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_LAYER_KERNELS(X, T)                                                                           \
  X template double kernels::cross_entropy_forward<T, int>(cpu, const T*, const int*, std::size_t, std::size_t, long long, T); \
  X template double kernels::cross_entropy_forward<T, std::int64_t>(cpu, const T*, const std::int64_t*, std::size_t,        \
                                                                    std::size_t, long long, T);                             \
  X template void kernels::cross_entropy_backward<T, int>(cpu, const T*, const int*, std::size_t, std::size_t, long long, T, \
                                                          const T*, std::size_t, T*);                                      \
  X template void kernels::cross_entropy_backward<T, std::int64_t>(cpu, const T*, const std::int64_t*, std::size_t,         \
                                                                   std::size_t, long long, T, const T*, std::size_t, T*);  \
  X template void kernels::masked_mean_forward<T>(cpu, const T*, const T*, std::size_t, std::size_t, std::size_t, T*, T*);  \
  X template void kernels::masked_mean_backward<T>(cpu, const T*, const T*, const T*, std::size_t, std::size_t, std::size_t, \
                                                   T*);                                                                    \
  X template void kernels::masked_max_forward<T>(cpu, const T*, const T*, std::size_t, std::size_t, std::size_t, T*,        \
                                                 std::int64_t*);                                                           \
  X template void kernels::masked_max_backward<T>(cpu, const T*, const std::int64_t*, std::size_t, std::size_t, std::size_t, \
                                                  T*);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_LAYER_KERNELS)
}  // namespace attn
