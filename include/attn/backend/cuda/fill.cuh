// SPDX-License-Identifier: MIT
// Fill kernels for attn::cuda: a contiguous array set to one value, and a strided batch of row-major
// matrices scaled in place (what a GEMM with k == 0 leaves: C = beta * C).
//   attn::cuda_detail::fill(dev, p, n, 1.5f);
#pragma once
#include <cstddef>
#include <string>

#include "runtime.cuh"

namespace attn::cuda_detail {

// p: (n). Grid-stride.
template <class T>
__global__ void fill_kernel(T* p, std::size_t n, T v) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = v;
}

/// p[0, n) = v on dev's stream. Zero is a memset (every attn element type is all-zero bits at 0).
template <class T>
void fill(const DeviceState& dev, T* p, std::size_t n, T v) {
  if (n == 0) return;
  if (v == T(0)) {
    check(cudaMemsetAsync(p, 0, n * sizeof(T), dev.stream), "cuda::fill: cudaMemsetAsync");
    return;
  }
  fill_kernel<T><<<grid_blocks(n, dev), block_threads, 0, dev.stream>>>(p, n, v);
  check_launch("cuda::fill: fill_kernel launch");
}

// c: batch x (m, n) row-major, row stride ldc, matrices sc elements apart. beta == 0 writes zeros
// without reading C, so NaNs in an uninitialised C do not survive (as in BLAS).
template <class T>
__global__ void scale_matrices_kernel(T* c, int m, int n, int ldc, long long sc, int batch, T beta) {
  const std::size_t per = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  const std::size_t total = per * static_cast<std::size_t>(batch);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::size_t b = i / per, r = (i % per) / static_cast<std::size_t>(n), col = i % static_cast<std::size_t>(n);
    T* x = c + static_cast<long long>(b) * sc + static_cast<long long>(r) * ldc + static_cast<long long>(col);
    *x = beta == T(0) ? T(0) : beta * *x;
  }
}

/// C = beta * C for `batch` (m, n) matrices; nothing to do when beta == 1. m, n, batch > 0.
template <class T>
void scale_matrices(const DeviceState& dev, T* c, int m, int n, int ldc, long long sc, int batch, T beta) {
  if (beta == T(1)) return;
  const std::size_t total = static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * static_cast<std::size_t>(batch);
  scale_matrices_kernel<T><<<grid_blocks(total, dev), block_threads, 0, dev.stream>>>(c, m, n, ldc, sc, batch, beta);
  check_launch("cuda::gemm: scale_matrices_kernel launch");
}

}  // namespace attn::cuda_detail
