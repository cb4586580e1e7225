// SPDX-License-Identifier: MIT
// Row softmax and log-softmax for attn::cuda, forward and backward, one warp per row. A row that
// is all -inf (fully masked) gives zeros (log: -inf) and gets no gradient, never NaN.
//   attn::kernels::softmax_rows(attn::cuda{}, x, y, rows, cols, /*log=*/false);   // x, y (rows, cols)
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>

#include "../cuda.hpp"
#include "../element_math.hpp"
#include "warp.cuh"

namespace attn::cuda_detail {

// x, y: (rows, cols). Warp w of the grid takes rows w, w + warps, ...: max, then sum of
// exp(x - max), then the outputs, each pass a strided loop over the row's columns.
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, std::size_t rows, std::size_t cols, bool log_out) {
  using std::exp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const unsigned lane = threadIdx.x % warp_size;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / warp_size);
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / warp_size) + threadIdx.x / warp_size; r < rows;
       r += warps) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T m = -inf;
    for (std::size_t j = lane; j < cols; j += warp_size) m = xr[j] > m ? xr[j] : m;
    m = warp_max(m);
    if (m == -inf) {
      for (std::size_t j = lane; j < cols; j += warp_size) yr[j] = log_out ? -inf : T(0);
      continue;
    }
    T s = 0;
    if (log_out) {
      for (std::size_t j = lane; j < cols; j += warp_size) s += exp(xr[j] - m);
      const T ls = elem::log_sum_exp(m, warp_sum(s));
      for (std::size_t j = lane; j < cols; j += warp_size) yr[j] = xr[j] - ls;
    } else {
      for (std::size_t j = lane; j < cols; j += warp_size) s += (yr[j] = exp(xr[j] - m));
      const T inv = T(1) / warp_sum(s);
      for (std::size_t j = lane; j < cols; j += warp_size) yr[j] *= inv;
    }
  }
}

// dx += J^T dy, one warp per row: softmax dx = y (dy - sum(dy y)); log_softmax dx = dy - exp(y) sum(dy),
// skipping rows that are all -inf (fully masked).
template <class T>
__global__ void softmax_rows_backward_kernel(const T* y, const T* dy, T* dx, std::size_t rows, std::size_t cols, bool log_out) {
  using std::exp;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const unsigned lane = threadIdx.x % warp_size;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / warp_size);
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / warp_size) + threadIdx.x / warp_size; r < rows;
       r += warps) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* xr = dx + r * cols;
    T s = 0;
    if (log_out) {
      bool all_inf = true;
      for (std::size_t j = lane; j < cols; j += warp_size) all_inf = all_inf && (yr[j] == inf || yr[j] == -inf);
      if (cols && warp_all(all_inf)) continue;
      for (std::size_t j = lane; j < cols; j += warp_size) s += gr[j];
      s = warp_sum(s);
      for (std::size_t j = lane; j < cols; j += warp_size) xr[j] += elem::log_softmax_grad(yr[j], gr[j], s);
    } else {
      for (std::size_t j = lane; j < cols; j += warp_size) s += gr[j] * yr[j];
      s = warp_sum(s);
      for (std::size_t j = lane; j < cols; j += warp_size) xr[j] += elem::softmax_grad(yr[j], gr[j], s);
    }
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// y = softmax(x) (or log_softmax) over each row of a (rows, cols) device matrix, as the cpu overload.
template <class T>
void softmax_rows(cuda, const T* x, T* y, std::size_t rows, std::size_t cols, bool log) {
  using namespace cuda_detail;
  if (rows == 0 || cols == 0) return;
  const DeviceState& dev = current_device();
  softmax_rows_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(x, y, rows, cols, log);
  check_launch("cuda softmax_rows: softmax_rows_kernel launch");
}

/// dx += J^T dy for y = softmax(x) or log_softmax(x), as the cpu overload.
template <class T>
void softmax_rows_backward(cuda, const T* y, const T* dy, T* dx, std::size_t rows, std::size_t cols, bool log) {
  using namespace cuda_detail;
  if (rows == 0 || cols == 0) return;
  const DeviceState& dev = current_device();
  softmax_rows_backward_kernel<T><<<row_blocks(rows), rows_per_block * warp_size, 0, dev.stream>>>(y, dy, dx, rows, cols, log);
  check_launch("cuda softmax_rows_backward: softmax_rows_backward_kernel launch");
}

}  // namespace attn::kernels
