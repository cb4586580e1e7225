// SPDX-License-Identifier: MIT
// CPU kernels that the autograd ops call beyond GEMM and element-wise expressions: broadcast
// reductions, row softmax, row gather/scatter/copy. Each is overloaded on the backend tag, so that
// another backend adds its own overloads (backend/kernels.hpp gathers them).
//   attn::kernels::softmax_rows(attn::cpu{}, x, y, rows, cols, /*log=*/false);
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../core/shape.hpp"
#include "cpu.hpp"

namespace attn::kernels {

/// dst (dst_dims) (+)= src (src_dims) summed over the axes where dst is broadcast (extent 1 or absent).
template <class T>
void sum_to(cpu, const T* src, const Dims& src_dims, T* dst, const Dims& dst_dims, bool accumulate) {
  const std::size_t r = src_dims.n;
  Dims ds = Dims::of_rank(r);  // dst strides aligned to src axes, 0 where broadcast
  {
    Dims cs = contiguous_strides(dst_dims);
    for (std::size_t i = 0; i < r; ++i) {
      if (i + dst_dims.n < r) continue;
      std::size_t k = i + dst_dims.n - r;
      if (dst_dims.v[k] == src_dims.v[i]) ds.v[i] = cs.v[k];
      else if (dst_dims.v[k] != 1) shape_mismatch("sum_to", "cannot reduce", src_dims, dst_dims);
    }
  }
  if (!accumulate) cpu::fill(dst, dst_dims.numel(), T(0));
  const std::size_t inner = r ? src_dims.v[r - 1] : 1;
  const std::size_t outer = inner ? src_dims.numel() / inner : 0;
  const std::size_t is = r ? ds.v[r - 1] : 0;
  std::size_t idx[max_rank] = {};
  for (std::size_t o = 0; o < outer; ++o) {
    std::size_t off = 0;
    for (std::size_t a = 0; a + 1 < r; ++a) off += idx[a] * ds.v[a];
    const T* s = src + o * inner;
    T* d = dst + off;
    if (is == 1) {
      for (std::size_t j = 0; j < inner; ++j) d[j] += s[j];
    } else if (is == 0) {
      T acc = 0;
      for (std::size_t j = 0; j < inner; ++j) acc += s[j];
      d[0] += acc;
    } else {
      for (std::size_t j = 0; j < inner; ++j) d[j * is] += s[j];
    }
    for (std::size_t a = r - 1; a-- > 0;) {  // odometer over the outer axes
      if (++idx[a] < src_dims.v[a]) break;
      idx[a] = 0;
    }
  }
}

/// y = softmax(x) (or log_softmax) over each row of a (rows, cols) matrix. A row that is all
/// -inf (fully masked) gives zeros (log: -inf), never NaN.
template <class T>
void softmax_rows(cpu, const T* x, T* y, std::size_t rows, std::size_t cols, bool log) {
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
      const T ls = m + std::log(s);
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
      for (std::size_t j = 0; j < cols; ++j) xr[j] += gr[j] - std::exp(yr[j]) * s;
    } else {
      T s = 0;
      for (std::size_t j = 0; j < cols; ++j) s += gr[j] * yr[j];
      for (std::size_t j = 0; j < cols; ++j) xr[j] += yr[j] * (gr[j] - s);
    }
  }
}

/// out[i, :] = table[ids[i], :] for i < n; ids are checked against rows.
template <class T, class I>
void gather_rows(cpu, const T* table, std::size_t rows, std::size_t dim, const I* ids, std::size_t n, T* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= rows)
      throw ShapeError("embedding: id " + std::to_string(static_cast<long long>(id)) + " at position " + std::to_string(i) +
                       " is outside the table of " + std::to_string(rows) + " rows");
    std::copy_n(table + static_cast<std::size_t>(id) * dim, dim, out + i * dim);
  }
}

/// table_grad[ids[i], :] += g[i, :], skipping ids equal to skip (the padding index, or -1 for none).
template <class T, class I>
void scatter_add_rows(cpu, T* table_grad, std::size_t dim, const I* ids, std::size_t n, const T* g, long long skip) {
  for (std::size_t i = 0; i < n; ++i) {
    if (static_cast<long long>(ids[i]) == skip) continue;
    T* dst = table_grad + static_cast<std::size_t>(ids[i]) * dim;
    const T* src = g + i * dim;
    for (std::size_t j = 0; j < dim; ++j) dst[j] += src[j];
  }
}

/// Row copies through index maps: dst row dst_rows[i] = (or +=) src row src_rows[i], w elements
/// each, for i < n; a null map is the identity. Rows are src_ld / dst_ld elements apart. The dst
/// rows must be distinct (the LSTM's packing and unpacking of ragged batches).
template <class T>
void copy_rows(cpu, std::size_t n, std::size_t w, const T* src, std::size_t src_ld, const std::int64_t* src_rows, T* dst,
               std::size_t dst_ld, const std::int64_t* dst_rows, bool accumulate) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* from = src + (src_rows ? static_cast<std::size_t>(src_rows[i]) : i) * src_ld;
    T* to = dst + (dst_rows ? static_cast<std::size_t>(dst_rows[i]) : i) * dst_ld;
    if (accumulate)
      for (std::size_t k = 0; k < w; ++k) to[k] += from[k];
    else
      std::copy_n(from, w, to);
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_KERNELS(X, T)                                                                                 \
  X template void kernels::sum_to<T>(cpu, const T*, const Dims&, T*, const Dims&, bool);                                   \
  X template void kernels::softmax_rows<T>(cpu, const T*, T*, std::size_t, std::size_t, bool);                             \
  X template void kernels::softmax_rows_backward<T>(cpu, const T*, const T*, T*, std::size_t, std::size_t, bool);          \
  X template void kernels::gather_rows<T, int>(cpu, const T*, std::size_t, std::size_t, const int*, std::size_t, T*);       \
  X template void kernels::gather_rows<T, std::int64_t>(cpu, const T*, std::size_t, std::size_t, const std::int64_t*,       \
                                                        std::size_t, T*);                                                  \
  X template void kernels::scatter_add_rows<T, int>(cpu, T*, std::size_t, const int*, std::size_t, const T*, long long);    \
  X template void kernels::scatter_add_rows<T, std::int64_t>(cpu, T*, std::size_t, const std::int64_t*, std::size_t,        \
                                                             const T*, long long);                                         \
  X template void kernels::copy_rows<T>(cpu, std::size_t, std::size_t, const T*, std::size_t, const std::int64_t*, T*,      \
                                        std::size_t, const std::int64_t*, bool);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_KERNELS)
}  // namespace attn
