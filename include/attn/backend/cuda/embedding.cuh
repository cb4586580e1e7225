// SPDX-License-Identifier: MIT
// Row gather, scatter-add and indexed row copies for attn::cuda: the embedding lookup and its
// gradient, and the LSTM's packing of ragged batches. One thread per element of a row.
//   attn::kernels::gather_rows(attn::cuda{}, table, rows, dim, ids, n, out);   // ids on the device
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../cuda.hpp"
#include "scratch.cuh"

namespace attn::cuda_detail {

// out (n, dim) = table (rows, dim) [ids]. An id outside [0, rows) writes zeros and records the
// smallest such position in *bad (which starts at n) for the host to report.
template <class T, class I>
__global__ void gather_rows_kernel(const T* table, std::size_t rows, std::size_t dim, const I* ids, std::size_t n, T* out,
                                   unsigned long long* bad) {
  const std::size_t total = n * dim, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / dim, k = e - i * dim;
    const I id = ids[i];
    if (id < 0 || static_cast<unsigned long long>(id) >= rows) {
      out[e] = T(0);
      if (k == 0) atomicMin(bad, static_cast<unsigned long long>(i));
    } else {
      out[e] = table[static_cast<std::size_t>(id) * dim + k];
    }
  }
}

// table_grad (rows, dim) [ids[i]] += g (n, dim) [i], skipping ids == skip. Repeated ids add atomically.
template <class T, class I>
__global__ void scatter_add_rows_kernel(T* table_grad, std::size_t dim, const I* ids, std::size_t n, const T* g, long long skip) {
  const std::size_t total = n * dim, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / dim, k = e - i * dim;
    const I id = ids[i];
    if (static_cast<long long>(id) == skip) continue;
    atomicAdd(table_grad + static_cast<std::size_t>(id) * dim + k, g[e]);
  }
}

// dst row dst_rows[i] = (or +=) src row src_rows[i] (w elements; null map: identity).
template <class T>
__global__ void copy_rows_kernel(std::size_t n, std::size_t w, const T* src, std::size_t src_ld, const std::int64_t* src_rows, T* dst,
                                 std::size_t dst_ld, const std::int64_t* dst_rows, bool accumulate) {
  const std::size_t total = n * w, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t i = e / w, k = e - i * w;
    const T v = src[(src_rows ? static_cast<std::size_t>(src_rows[i]) : i) * src_ld + k];
    T* to = dst + (dst_rows ? static_cast<std::size_t>(dst_rows[i]) : i) * dst_ld + k;
    *to = accumulate ? *to + v : v;
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// out[i, :] = table[ids[i], :] for i < n, table, ids and out on the device. Ids are checked: one
/// outside [0, rows) throws ShapeError naming it and its position, as the cpu overload does (this
/// costs one wait for the device).
template <class T, class I>
void gather_rows(cuda, const T* table, std::size_t rows, std::size_t dim, const I* ids, std::size_t n, T* out) {
  using namespace cuda_detail;
  if (n == 0 || dim == 0) return;
  const DeviceState& dev = current_device();
  DeviceScratch<unsigned long long> bad(1, n);  // the first position with a bad id; n: none
  gather_rows_kernel<T, I><<<grid_blocks(n * dim, dev), block_threads, 0, dev.stream>>>(table, rows, dim, ids, n, out, bad.get());
  check_launch("cuda embedding: gather_rows_kernel launch");
  const unsigned long long first = bad.read();
  if (first < n) {
    I id{};
    cuda::to_host(&id, ids + first, 1);
    throw ShapeError("embedding: id " + std::to_string(static_cast<long long>(id)) + " at position " + std::to_string(first) +
                     " is outside the table of " + std::to_string(rows) + " rows");
  }
}

/// table_grad[ids[i], :] += g[i, :], skipping ids equal to skip, with atomic adds (ids repeat).
template <class T, class I>
void scatter_add_rows(cuda, T* table_grad, std::size_t dim, const I* ids, std::size_t n, const T* g, long long skip) {
  using namespace cuda_detail;
  if (n == 0 || dim == 0) return;
  const DeviceState& dev = current_device();
  scatter_add_rows_kernel<T, I><<<grid_blocks(n * dim, dev), block_threads, 0, dev.stream>>>(table_grad, dim, ids, n, g, skip);
  check_launch("cuda embedding: scatter_add_rows_kernel launch");
}

/// Row copies through index maps (device arrays of int64), as the cpu overload.
template <class T>
void copy_rows(cuda, std::size_t n, std::size_t w, const T* src, std::size_t src_ld, const std::int64_t* src_rows, T* dst,
               std::size_t dst_ld, const std::int64_t* dst_rows, bool accumulate) {
  using namespace cuda_detail;
  if (n == 0 || w == 0) return;
  const DeviceState& dev = current_device();
  copy_rows_kernel<T><<<grid_blocks(n * w, dev), block_threads, 0, dev.stream>>>(n, w, src, src_ld, src_rows, dst, dst_ld, dst_rows,
                                                                                 accumulate);
  check_launch("cuda copy_rows: copy_rows_kernel launch");
}

}  // namespace attn::kernels
