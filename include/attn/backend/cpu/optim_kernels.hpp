// SPDX-License-Identifier: MIT
// The optimizers' kernels for attn::cpu (overloaded for CUDA in backend/cuda/optim.cuh): the sum of
// squares and the scaling of gradient-norm clipping, the finiteness check of the non-finite guard,
// SparseAdam's update of looked-up rows, SGD's step and the moving average's fold and swap. Adam's
// dense update is vector_kernels.hpp's adam_update.
//   const double ss = attn::kernels::sum_squares(attn::cpu{}, g, n);   // accumulated in double
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

#include "../cpu.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

namespace vec {
/// The scalars of one SparseAdam step over looked-up rows (optim::Adam computes them in double).
template <class T>
struct SparseAdamStep {
  T one_minus_beta1 = 0, one_minus_beta2 = 0;
  T step_size = 0;  // lr sqrt(1 - beta2^t) / (1 - beta1^t)
  T eps = 0;
};
/// The scalars of one SGD step (PyTorch's rule; the first step's momentum buffer is the gradient).
template <class T>
struct SgdStep {
  T lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the buffer is written, not updated
};
}  // namespace vec

/// A contiguous span of a gradient: the device overloads take every parameter's at once
/// (sum_squares, first_non_finite over spans in backend/cuda/optim.cuh), to wait for the device once.
template <class T>
struct GradSpan {
  const T* p = nullptr;
  std::size_t n = 0;
};

/// sum p[i]^2 over n elements, in double.
template <class T>
double sum_squares(cpu, const T* p, std::size_t n) {
  const long long len = static_cast<long long>(n);
  double s = 0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(+ : s) if (len > (1 << 16))
#endif
  for (long long i = 0; i < len; ++i) s += double(p[i]) * double(p[i]);
  return s;
}

/// p[i] *= c over n elements.
template <class T>
void scale(cpu, T* p, std::size_t n, T c) {
  for (std::size_t i = 0; i < n; ++i) p[i] *= c;
}

/// True when no element of p[0, n) is NaN or infinite.
template <class T>
bool all_finite(cpu, const T* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(double(p[i]))) return false;
  return true;
}

/// The sum of squares over spans, each summed alone and added in order (as clip_grad_norm does
/// parameter by parameter on the host).
template <class T>
double sum_squares(cpu, const GradSpan<T>* spans, std::size_t count) {
  double s = 0;
  for (std::size_t k = 0; k < count; ++k) s += sum_squares(cpu{}, spans[k].p, spans[k].n);
  return s;
}

/// The index of the first span holding a NaN or an infinity; count when none does.
template <class T>
std::size_t first_non_finite(cpu, const GradSpan<T>* spans, std::size_t count) {
  for (std::size_t k = 0; k < count; ++k)
    if (!all_finite(cpu{}, spans[k].p, spans[k].n)) return k;
  return count;
}

/// torch.optim.SparseAdam on the rows rows[0, nr) of a (rows, dim) table: only they (and their
/// moments) move; eps is added to sqrt(v) before the bias correction folded into step_size. The
/// gradient of rows[i] is row i of g when g_packed (a compact row-sparse gradient), else row
/// rows[i] (a whole-table one).
template <class T>
void sparse_adam_rows(cpu, const std::size_t* rows, std::size_t nr, std::size_t dim, T* p, const T* g, bool g_packed, T* m, T* v,
                      const vec::SparseAdamStep<T>& s) {
  const auto prof = profile::Scope::of<T>("adam rows", nr, dim);
  const long long n = static_cast<long long>(nr);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n * static_cast<long long>(dim) > (1 << 15))
#endif
  for (long long r = 0; r < n; ++r) {
    const std::size_t base = rows[std::size_t(r)] * dim;
    const T* gr = g + (g_packed ? std::size_t(r) * dim : base);
    for (std::size_t j = base; j < base + dim; ++j) {
      const T gi = gr[j - base];
      m[j] += (gi - m[j]) * s.one_minus_beta1;
      v[j] += (gi * gi - v[j]) * s.one_minus_beta2;
      p[j] -= s.step_size * (m[j] / (std::sqrt(v[j]) + s.eps));
    }
  }
}

/// SGD with momentum over n elements: gi = g + wd p; buf = gi (first step) or mu buf + (1 - damp) gi;
/// p -= lr (nesterov ? gi + mu buf : buf). Without momentum buf is null and p -= lr gi.
template <class T>
void sgd_update(cpu, std::size_t n, T* p, const T* g, T* buf, const vec::SgdStep<T>& s) {
  const auto prof = profile::Scope::of<T>("sgd", n);
  for (std::size_t i = 0; i < n; ++i) {
    T gi = g[i] + s.weight_decay * p[i];
    if (buf) {
      buf[i] = s.first ? gi : s.momentum * buf[i] + (T(1) - s.dampening) * gi;
      gi = s.nesterov ? gi + s.momentum * buf[i] : buf[i];
    }
    p[i] -= s.lr * gi;
  }
}

/// avg[i] = d avg[i] + e p[i] over n elements (a moving average's fold).
template <class T>
void ema_update(cpu, std::size_t n, T* avg, const T* p, T d, T e) {
  const long long len = static_cast<long long>(n);
#if defined(_OPENMP)
#pragma omp parallel for simd schedule(static) if (len > (1 << 16))
#endif
  for (long long i = 0; i < len; ++i) avg[i] = d * avg[i] + e * p[i];
}

/// Exchanges a[0, n) and b[0, n).
template <class T>
void swap_values(cpu, std::size_t n, T* a, T* b) {
  std::swap_ranges(a, a + n, b);
}

}  // namespace attn::kernels
