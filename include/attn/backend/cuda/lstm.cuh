// SPDX-License-Identifier: MIT
// The fused LSTM cell for attn::cuda, forward and backward: overloads of the cpu kernels in
// backend/cpu/lstm.hpp (same layouts: gates (n, 4H) stacked i, f, g, o), one thread per (row, unit).
//   attn::kernels::lstm_cell_forward(attn::cuda{}, n, h, gates, bias, c_prev, c, h_out);
#pragma once
#include <cmath>
#include <cstddef>

#include "../cuda.hpp"
#include "../element_math.hpp"

namespace attn::cuda_detail {

// gates (n, 4H): pre-activations in, activations out; c, hout (n, H); c_prev (n, H) or null.
template <class T>
__global__ void lstm_cell_forward_kernel(std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  const std::size_t total = n * h, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / h, k = e - r * h;
    const auto s = elem::lstm_cell_unit(gates + r * 4 * h, bias, h, k, c_prev ? c_prev[e] : T(0), c_prev != nullptr);
    c[e] = s.c;
    hout[e] = s.h;
  }
}

// The backward of one unit per thread: elem::lstm_cell_backward, as the cpu kernel.
template <class T>
__global__ void lstm_cell_backward_kernel(std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc,
                                          T* dgates) {
  using std::tanh;
  const std::size_t total = n * h, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / h, k = e - r * h;
    const T* a = act + r * 4 * h;
    T* dg = dgates + r * 4 * h;
    const auto d = elem::lstm_cell_backward(elem::LstmGates<T>{a[k], a[h + k], a[2 * h + k], a[3 * h + k]}, tanh(c[e]),
                                            c_prev ? c_prev[e] : T(0), c_prev != nullptr, dh[e], dc[e]);
    dg[k] = d.i;
    dg[h + k] = d.f;
    dg[2 * h + k] = d.g;
    dg[3 * h + k] = d.o;
    dc[e] = d.c_prev;
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// As lstm_cell_forward(cpu, ...): gates (n, 4H) pre-activations in, activations out; bias (4H);
/// c = f c_prev + i g (c_prev null: zero state); h = o tanh(c).
template <class T>
void lstm_cell_forward(cuda, std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  using namespace cuda_detail;
  if (n == 0 || h == 0) return;
  const DeviceState& dev = current_device();
  lstm_cell_forward_kernel<T><<<grid_blocks(n * h, dev), block_threads, 0, dev.stream>>>(n, h, gates, bias, c_prev, c, hout);
  check_launch("cuda lstm: lstm_cell_forward_kernel launch");
}

/// As lstm_cell_backward(cpu, ...): dgates (n, 4H) from the saved activations and cells; dc carries
/// dL/dc in and dL/dc_prev out.
template <class T>
void lstm_cell_backward(cuda, std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc, T* dgates) {
  using namespace cuda_detail;
  if (n == 0 || h == 0) return;
  const DeviceState& dev = current_device();
  lstm_cell_backward_kernel<T><<<grid_blocks(n * h, dev), block_threads, 0, dev.stream>>>(n, h, act, c, c_prev, dh, dc, dgates);
  check_launch("cuda lstm: lstm_cell_backward_kernel launch");
}

}  // namespace attn::kernels
