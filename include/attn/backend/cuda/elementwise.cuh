// SPDX-License-Identifier: MIT
// Element-wise map over contiguous device arrays for attn::cuda: out[i] = f(in0[i], in1[i], ...).
// f is any functor callable on the device: attn::expr's Add, Exp, Sigmoid, ... (shared with the CPU
// loops) or an extended lambda.
//   attn::cuda::map(n, y, attn::expr::Sigmoid{}, x);                          // y = sigmoid(x)
//   attn::cuda::map(n, z, [] __device__(float a, float b) { return a * b + 1.f; }, x, y);
#pragma once
#include <cstddef>
#include <type_traits>

#include "runtime.cuh"

namespace attn::cuda_detail {

// out, in...: (n), contiguous. Grid-stride, one element per step, so out may alias any input
// (each element is read before it is written, by the same thread).
template <class T, class F, class... In>
__global__ void map_kernel(std::size_t n, T* out, F f, const In*... in) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(f(in[i]...));
  }
}

/// Enqueues map_kernel on dev's stream. F is passed by value to the kernel, so it must be trivially
/// copyable (stateless functors, or lambdas capturing plain values).
template <class T, class F, class... In>
void map(const DeviceState& dev, std::size_t n, T* out, F f, const In*... in) {
  static_assert(sizeof...(In) >= 1, "attn::cuda::map: give at least one input array");
  static_assert(std::is_trivially_copyable_v<F>, "attn::cuda::map: the functor is copied to the device, so it must be trivially copyable");
  if (n == 0) return;
  map_kernel<T, F, In...><<<grid_blocks(n, dev), block_threads, 0, dev.stream>>>(n, out, f, in...);
  check_launch("cuda::map: map_kernel launch");
}

}  // namespace attn::cuda_detail
