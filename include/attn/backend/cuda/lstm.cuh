// SPDX-License-Identifier: MIT
// The fused LSTM cell for attn::cuda, forward and backward: overloads of the cpu kernels in
// backend/cpu/lstm.hpp (same layouts: gates (n, 4H) stacked i, f, g, o), one thread per (row, unit).
//   attn::kernels::lstm_cell_forward(attn::cuda{}, n, h, gates, bias, c_prev, c, h_out);
#pragma once
#include <cmath>
#include <cstddef>

#include "../cuda.hpp"

namespace attn::cuda_detail {

template <class T>
__device__ inline T lstm_sigmoid(T a) {
  using std::exp;
  // Two branches keep exp() from overflowing for large |a| (as attn::expr::Sigmoid).
  if (a >= T(0)) return T(1) / (T(1) + exp(-a));
  const T e = exp(a);
  return e / (T(1) + e);
}

// gates (n, 4H): pre-activations in, activations out; c, hout (n, H); c_prev (n, H) or null.
template <class T>
__global__ void lstm_cell_forward_kernel(std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  using std::tanh;
  const std::size_t total = n * h, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / h, k = e - r * h;
    T* a = gates + r * 4 * h;
    const T i = lstm_sigmoid(a[k] + bias[k]);
    const T f = lstm_sigmoid(a[h + k] + bias[h + k]);
    const T g = tanh(a[2 * h + k] + bias[2 * h + k]);
    const T o = lstm_sigmoid(a[3 * h + k] + bias[3 * h + k]);
    a[k] = i;
    a[h + k] = f;
    a[2 * h + k] = g;
    a[3 * h + k] = o;
    const T cr = c_prev ? f * c_prev[e] + i * g : i * g;
    c[e] = cr;
    hout[e] = o * tanh(cr);
  }
}

// The backward formulas of kernels::lstm_cell_backward(cpu, ...), element by element.
template <class T>
__global__ void lstm_cell_backward_kernel(std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc,
                                          T* dgates) {
  using std::tanh;
  const std::size_t total = n * h, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t r = e / h, k = e - r * h;
    const T* a = act + r * 4 * h;
    const T i = a[k], f = a[h + k], g = a[2 * h + k], o = a[3 * h + k];
    T* dg = dgates + r * 4 * h;
    const T tc = tanh(c[e]);
    const T dcr = dc[e] + dh[e] * o * (T(1) - tc * tc);
    dg[3 * h + k] = dh[e] * tc * o * (T(1) - o);
    dg[k] = dcr * g * i * (T(1) - i);
    dg[2 * h + k] = dcr * i * (T(1) - g * g);
    dg[h + k] = c_prev ? dcr * c_prev[e] * f * (T(1) - f) : T(0);
    dc[e] = dcr * f;
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
