// SPDX-License-Identifier: MIT
// Row softmax and log-softmax of the CPU backend, forward and backward. A row that is all -inf
// (fully masked) gives zeros (log: -inf) and gets no gradient, never NaN. Twin of cuda/softmax.cuh.
//   attn::kernels::softmax_rows(attn::cpu{}, x, y, rows, cols, /*log=*/false);   // x, y (rows, cols)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"

namespace attn::kernels {

/// y = softmax(x) (or log_softmax) over each row of a (rows, cols) matrix. A row that is all
/// -inf (fully masked) gives zeros (log: -inf), never NaN.
template <class T>
void softmax_rows(cpu, const T* x, T* y, std::size_t rows, std::size_t cols, bool log) {
  const auto prof = profile::Scope::of<T>("softmax rows", rows, cols);
  const long long n = static_cast<long long>(rows);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (rows * cols > (1u << 14))
#endif
  for (long long r = 0; r < n; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T m = -std::numeric_limits<T>::infinity();
    for (std::size_t j = 0; j < cols; ++j) m = std::max(m, xr[j]);
    if (m == -std::numeric_limits<T>::infinity()) {
      for (std::size_t j = 0; j < cols; ++j) yr[j] = log ? -std::numeric_limits<T>::infinity() : T(0);
      continue;
    }
    T s = 0;
    if (log) {
      for (std::size_t j = 0; j < cols; ++j) s += std::exp(xr[j] - m);
      const T ls = elem::log_sum_exp(m, s);
      for (std::size_t j = 0; j < cols; ++j) yr[j] = xr[j] - ls;
    } else {
      for (std::size_t j = 0; j < cols; ++j) s += (yr[j] = std::exp(xr[j] - m));
      const T inv = T(1) / s;
      for (std::size_t j = 0; j < cols; ++j) yr[j] *= inv;
    }
  }
}

/// dx += J^T dy for y = softmax(x): dx = y * (dy - sum(dy * y)); for log_softmax:
/// dx = dy - exp(y) * sum(dy). Rows of a fully masked softmax (all zero) get no gradient.
template <class T>
void softmax_rows_backward(cpu, const T* y, const T* dy, T* dx, std::size_t rows, std::size_t cols, bool log) {
  const auto prof = profile::Scope::of<T>("softmax rows backward", rows, cols);
  const long long n = static_cast<long long>(rows);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (rows * cols > (1u << 14))
#endif
  for (long long r = 0; r < n; ++r) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* xr = dx + r * cols;
    if (log) {
      if (cols && yr[0] == -std::numeric_limits<T>::infinity() && std::isinf(yr[cols - 1])) {
        bool all = true;
        for (std::size_t j = 0; j < cols && all; ++j) all = std::isinf(yr[j]);
        if (all) continue;
      }
      T s = 0;
      for (std::size_t j = 0; j < cols; ++j) s += gr[j];
      for (std::size_t j = 0; j < cols; ++j) xr[j] += elem::log_softmax_grad(yr[j], gr[j], s);
    } else {
      T s = 0;
      for (std::size_t j = 0; j < cols; ++j) s += gr[j] * yr[j];
      for (std::size_t j = 0; j < cols; ++j) xr[j] += elem::softmax_grad(yr[j], gr[j], s);
    }
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_SOFTMAX(X, T)                                                                               \
  X template void kernels::softmax_rows<T>(cpu, const T*, T*, std::size_t, std::size_t, bool);                           \
  X template void kernels::softmax_rows_backward<T>(cpu, const T*, const T*, T*, std::size_t, std::size_t, bool);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_SOFTMAX)
}  // namespace attn
