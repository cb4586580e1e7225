// SPDX-License-Identifier: MIT
// The CUDA kernel of rotary position embeddings (autograd/rotary.hpp): one thread per element,
// each from rotary_element (backend/rotary_problem.hpp), as cpu/rotary.hpp.
//   attn::kernels::rotary(attn::cuda{}, p, cos, sin, x, y, false, false);
#pragma once
#include <cstddef>

#include "../cuda.hpp"
#include "../rotary_problem.hpp"

namespace attn::cuda_detail {

template <class T>
__global__ void rotary_kernel(kernels::RotaryProblem p, const T* cos, const T* sin, const T* x, T* y, bool inverse, bool accumulate) {
  const std::size_t total = p.rows * p.width, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / p.width, c = e - r * p.width;
    const T v = kernels::rotary_element(p, cos, sin, x, r, c, inverse);
    y[e] = accumulate ? y[e] + v : v;
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// y = R x (inverse: y = Rᵀ x), or y += that when accumulate. x and y must not overlap.
template <class T>
void rotary(cuda, const RotaryProblem& p, const T* cos, const T* sin, const T* x, T* y, bool inverse, bool accumulate) {
  using namespace cuda_detail;
  if (p.rows == 0 || p.width == 0) return;
  const DeviceState& dev = current_device();
  rotary_kernel<T><<<grid_blocks(p.rows * p.width, dev), block_threads, 0, dev.stream>>>(p, cos, sin, x, y, inverse, accumulate);
  check_launch("cuda rotary: rotary_kernel launch");
}

}  // namespace attn::kernels
