// SPDX-License-Identifier: MIT
// Warp- and block-level reductions shared by attn's CUDA kernels (row softmax, layer norm,
// reductions, attention), and launch sizes for one-warp-per-row kernels.
//   T s = attn::cuda_detail::warp_sum(partial);   // every lane of the warp gets the sum
#pragma once
#include <cstddef>

#include "runtime.cuh"

namespace attn::cuda_detail {

inline constexpr unsigned warp_size = 32;
/// Rows per block of the one-warp-per-row kernels (256 threads).
inline constexpr unsigned rows_per_block = 8;

/// Sum over the 32 lanes, returned to every lane (butterfly).
template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/// Maximum over the 32 lanes, returned to every lane.
template <class T>
__device__ inline T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
/// True on every lane when p holds on every lane.
__device__ inline bool warp_all(bool p) { return __all_sync(0xffffffffu, p) != 0; }

/// Sum over a block of up to 1024 threads (blockDim.x a multiple of 32, y = z = 1), returned to
/// every thread. Every thread of the block must call it; it synchronises twice.
template <class T>
__device__ inline T block_sum(T v) {
  __shared__ T part[32];
  const unsigned lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size, warps = blockDim.x / warp_size;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  T s = lane < warps ? part[lane] : T(0);
  s = warp_sum(s);
  __syncthreads();  // part may be reused by the caller's next block_sum
  return s;
}

/// Blocks for `rows` rows at rows_per_block per block, for a grid-stride loop over rows.
inline unsigned row_blocks(std::size_t rows) {
  const std::size_t need = (rows + rows_per_block - 1) / rows_per_block;
  return static_cast<unsigned>(need < 65535u * 16u ? (need ? need : 1) : 65535u * 16u);
}

}  // namespace attn::cuda_detail
