// SPDX-License-Identifier: MIT
// Broadcast reduction for attn::cuda: kernels::sum_to(cuda, ...), the gradient of every broadcast
// operand and the sum/mean ops. The src axes split into kept ones (the dst's extents) and summed
// ones; each dst element is one sum over the summed index space.
//   attn::kernels::sum_to(attn::cuda{}, g, Dims{b, t, d}, db, Dims{d}, /*accumulate=*/true);   // (B,T,D) -> (D)
#pragma once
#include <algorithm>
#include <cstddef>

#include "../../core/shape.hpp"
#include "../cuda.hpp"
#include "warp.cuh"

namespace attn::cuda_detail {

/// Axes of a contiguous tensor, split into two index spaces; adjacent axes of one space merged.
struct AxisSet {
  std::size_t ext[max_rank] = {};
  std::size_t stride[max_rank] = {};
  int n = 0;
  std::size_t count = 1;  // product of ext
  void push(std::size_t e, std::size_t s) {
    if (e == 1) return;
    if (n > 0 && stride[n - 1] == e * s) {  // the previous axis is the next-outer one of this space
      ext[n - 1] *= e;
      stride[n - 1] = s;
    } else {
      ext[n] = e;
      stride[n] = s;
      ++n;
    }
    count *= e;
  }
};

/// Offset of position i of an index space (row-major over its axes).
__device__ inline std::size_t axis_offset(std::size_t i, const AxisSet& a) {
  std::size_t off = 0;
  for (int k = a.n - 1; k >= 0; --k) {
    const std::size_t q = i / a.ext[k];
    off += (i - q * a.ext[k]) * a.stride[k];
    i = q;
  }
  return off;
}

template <class T>
__device__ inline void reduce_store(T* d, T v, bool accumulate, bool atomic) {
  if (atomic) atomicAdd(d, v);
  else *d = accumulate ? *d + v : v;
}

// The summed axes include src's innermost one: a block per dst element (grid-stride over them),
// threads striding the summed space (contiguous reads), blockIdx.y one chunk of it.
template <class T>
__global__ void sum_inner_kernel(const T* src, T* dst, AxisSet kept, AxisSet red, std::size_t chunk, bool accumulate, bool atomic) {
  const std::size_t q0 = static_cast<std::size_t>(blockIdx.y) * chunk, q1 = q0 + chunk < red.count ? q0 + chunk : red.count;
  for (std::size_t m = blockIdx.x; m < kept.count; m += gridDim.x) {
    const T* base = src + axis_offset(m, kept);
    T acc = 0;
    for (std::size_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) acc += base[axis_offset(q, red)];
    acc = block_sum(acc);
    if (threadIdx.x == 0) reduce_store(dst + m, acc, accumulate, atomic);
  }
}

// src's innermost axis is kept: 32 consecutive dst elements per block (contiguous reads across
// threadIdx.x), 8 rows of threads striding the summed space, blockIdx.y one chunk of it.
template <class T>
__global__ void sum_outer_kernel(const T* src, T* dst, AxisSet kept, AxisSet red, std::size_t chunk, bool accumulate, bool atomic) {
  __shared__ T part[8][33];
  const std::size_t m = static_cast<std::size_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::size_t q0 = static_cast<std::size_t>(blockIdx.y) * chunk, q1 = q0 + chunk < red.count ? q0 + chunk : red.count;
  T acc = 0;
  if (m < kept.count) {
    const T* base = src + axis_offset(m, kept);
    for (std::size_t q = q0 + threadIdx.y; q < q1; q += 8) acc += base[axis_offset(q, red)];
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && m < kept.count) {
    T s = 0;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    reduce_store(dst + m, s, accumulate, atomic);
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// dst (dst_dims) (+)= src (src_dims) summed over the axes where dst is broadcast (extent 1 or
/// absent), as kernels::sum_to(cpu, ...). Both contiguous on the device. Large sums are split over
/// blocks that add into dst atomically, so the order of the additions is not fixed.
template <class T>
void sum_to(cuda, const T* src, const Dims& src_dims, T* dst, const Dims& dst_dims, bool accumulate) {
  using namespace cuda_detail;
  const std::size_t r = src_dims.n;
  const Dims ss = contiguous_strides(src_dims);
  AxisSet kept, red;
  bool inner_reduced = false;
  for (std::size_t i = 0; i < r; ++i) {
    bool keep = false;
    if (i + dst_dims.n >= r) {
      const std::size_t k = i + dst_dims.n - r;
      if (dst_dims.v[k] == src_dims.v[i]) keep = true;
      else if (dst_dims.v[k] != 1) shape_mismatch("sum_to", "cannot reduce", src_dims, dst_dims);
    }
    if (src_dims.v[i] == 1) continue;
    (keep ? kept : red).push(src_dims.v[i], ss.v[i]);
    inner_reduced = !keep;  // ends as the kind of the innermost axis of extent > 1
  }
  const std::size_t M = dst_dims.numel(), R = red.count;
  if (M == 0) return;
  if (src_dims.numel() == 0) {  // nothing to add
    if (!accumulate) cuda::fill(dst, M, T(0));
    return;
  }
  const DeviceState& dev = current_device();
  const std::size_t target = 4 * static_cast<std::size_t>(dev.multiprocessors);  // blocks that fill the GPU
  auto ceil_div = [](std::size_t a, std::size_t b) { return (a + b - 1) / b; };
  if (inner_reduced || kept.count == 1) {
    const std::size_t splits = std::clamp<std::size_t>(ceil_div(target, M), 1, std::min<std::size_t>(ceil_div(R, 1024), 65535));
    const std::size_t chunk = ceil_div(R, splits);
    const bool atomic = splits > 1;
    if (atomic && !accumulate) cuda::fill(dst, M, T(0));
    const dim3 grid(static_cast<unsigned>(std::min<std::size_t>(M, 1u << 30)), static_cast<unsigned>(splits));
    sum_inner_kernel<T><<<grid, 256, 0, dev.stream>>>(src, dst, kept, red, chunk, accumulate, atomic);
    check_launch("cuda sum_to: sum_inner_kernel launch");
  } else {
    const std::size_t bx = ceil_div(M, 32);
    const std::size_t splits = std::clamp<std::size_t>(ceil_div(target, bx), 1, std::min<std::size_t>(ceil_div(R, 64), 65535));
    const std::size_t chunk = ceil_div(R, splits);
    const bool atomic = splits > 1;
    if (atomic && !accumulate) cuda::fill(dst, M, T(0));
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(splits));
    sum_outer_kernel<T><<<grid, dim3(32, 8), 0, dev.stream>>>(src, dst, kept, red, chunk, accumulate, atomic);
    check_launch("cuda sum_to: sum_outer_kernel launch");
  }
}

}  // namespace attn::kernels
