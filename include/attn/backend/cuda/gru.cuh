// SPDX-License-Identifier: MIT
// The fused GRU cell for attn::cuda, forward and backward: overloads of the cpu kernels in
// backend/cpu/vector_kernels.hpp (same layouts: gates (n, 4H) r, z, n, hn; gh (n, 3H)), one thread
// per (row, unit).
//   attn::kernels::gru_cell_forward(attn::cuda{}, n, h, gates, gh, b_ih, b_hh, h_prev, h_out);
#pragma once
#include <cstddef>

#include "../cuda.hpp"
#include "../element_math.hpp"

namespace attn::cuda_detail {

template <class T>
__global__ void gru_cell_forward_kernel(std::size_t n, std::size_t h, T* gates, const T* gh, const T* b_ih, const T* b_hh, const T* h_prev,
                                        T* hout) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n * h; e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = e / h, k = e % h;
    hout[e] = elem::gru_cell_unit(gates + r * 4 * h, gh ? gh + r * 3 * h : nullptr, b_ih, b_hh, h, k, h_prev ? h_prev[e] : T(0));
  }
}

template <class T>
__global__ void gru_cell_backward_kernel(std::size_t n, std::size_t h, const T* act, const T* h_prev, const T* dh, T* dh_prev, T* dgi,
                                         T* dgh) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n * h; e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t r = e / h, k = e % h;
    const T* a = act + r * 4 * h;
    const auto d = elem::gru_cell_backward(elem::GruGates<T>{a[k], a[h + k], a[2 * h + k], a[3 * h + k]}, h_prev ? h_prev[e] : T(0), dh[e]);
    T* gi = dgi + r * 3 * h;
    T* gq = dgh + r * 3 * h;
    gi[k] = d.r;
    gi[h + k] = d.z;
    gi[2 * h + k] = d.n_in;
    gq[k] = d.r;
    gq[h + k] = d.z;
    gq[2 * h + k] = d.n_h;
    if (h_prev) dh_prev[e] += d.h_prev;
  }
}

}  // namespace attn::cuda_detail

namespace attn::kernels {

/// As gru_cell_forward(cpu, ...): gates (n, 4H) input projections in, activations r, z, n, hn out;
/// gh (n, 3H) and h_prev (n, H) null for the zero state.
template <class T>
void gru_cell_forward(cuda, std::size_t n, std::size_t h, T* gates, const T* gh, const T* b_ih, const T* b_hh, const T* h_prev, T* hout) {
  using namespace cuda_detail;
  if (n == 0 || h == 0) return;
  const DeviceState& dev = current_device();
  gru_cell_forward_kernel<T><<<grid_blocks(n * h, dev), block_threads, 0, dev.stream>>>(n, h, gates, gh, b_ih, b_hh, h_prev, hout);
  check_launch("cuda gru: gru_cell_forward_kernel launch");
}

/// As gru_cell_backward(cpu, ...): dgi, dgh (n, 3H) from the saved activations; z dh added to dh_prev.
template <class T>
void gru_cell_backward(cuda, std::size_t n, std::size_t h, const T* act, const T* h_prev, const T* dh, T* dh_prev, T* dgi, T* dgh) {
  using namespace cuda_detail;
  if (n == 0 || h == 0) return;
  const DeviceState& dev = current_device();
  gru_cell_backward_kernel<T><<<grid_blocks(n * h, dev), block_threads, 0, dev.stream>>>(n, h, act, h_prev, dh, dh_prev, dgi, dgh);
  check_launch("cuda gru: gru_cell_backward_kernel launch");
}

}  // namespace attn::kernels
