// SPDX-License-Identifier: MIT
// The fused LSTM cell of the CPU backend, forward and backward, over the rows of one time step
// (gates (n, 4H) stacked i, f, g, o, as PyTorch). Twin of cuda/lstm.cuh; the op is autograd/lstm.hpp.
//   attn::kernels::lstm_cell_forward(attn::cpu{}, n, h, gates, bias, c_prev, c, h_out);
#pragma once
#include <cstddef>

#include "../../core/eigen.hpp"
#include "../../core/instantiate.hpp"
#include "../cpu.hpp"

namespace attn::kernels {

/// Fused LSTM cell over n rows. gates (n, 4H) holds W_ih x + W_hh h_prev on entry and the
/// activations sigmoid(i), sigmoid(f), tanh(g), sigmoid(o) on exit; bias (4H) = b_ih + b_hh.
/// c = f * c_prev + i * g (c_prev nullptr: the zero state), h = o * tanh(c). c, h: (n, H).
template <class T>
void lstm_cell_forward(cpu, std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Map = Eigen::Map<Arr>;
  using CMap = Eigen::Map<const Arr>;
  const Eigen::Index H = static_cast<Eigen::Index>(h);
  CMap b_if(bias, 2 * H), b_g(bias + 2 * H, H), b_o(bias + 3 * H, H);
  for (std::size_t r = 0; r < n; ++r) {
    T* a = gates + r * 4 * h;
    Map a_if(a, 2 * H), i(a, H), f(a + H, H), g(a + 2 * H, H), o(a + 3 * H, H);
    Map cr(c + r * h, H), hr(hout + r * h, H);
    a_if = (a_if + b_if).logistic();
    g = (g + b_g).tanh();
    o = (o + b_o).logistic();
    if (c_prev) cr = f * CMap(c_prev + r * h, H) + i * g;
    else cr = i * g;
    hr = o * cr.tanh();
  }
}

/// Backward of lstm_cell_forward over n rows, from the saved activations act (n, 4H) and cells
/// c (n, H), c_prev (n, H) or nullptr. dh (n, H) is dL/dh of this step; dc (n, H) carries dL/dc
/// from the next step in and dL/dc_prev out. Writes dL/d(pre-activation) to dgates (n, 4H):
///   dc += dh * o * (1 - tanh(c)^2);  d_o = dh * tanh(c) * o (1 - o);  d_i = dc * g * i (1 - i);
///   d_f = dc * c_prev * f (1 - f);   d_g = dc * i * (1 - g^2);        dc_prev = dc * f.
template <class T>
void lstm_cell_backward(cpu, std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc,
                        T* dgates) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  using Map = Eigen::Map<Arr>;
  using CMap = Eigen::Map<const Arr>;
  const Eigen::Index H = static_cast<Eigen::Index>(h);
  for (std::size_t r = 0; r < n; ++r) {
    const T* a = act + r * 4 * h;
    CMap i(a, H), f(a + H, H), g(a + 2 * H, H), o(a + 3 * H, H), cr(c + r * h, H), dhr(dh + r * h, H);
    T* dg = dgates + r * 4 * h;
    Map d_i(dg, H), d_f(dg + H, H), d_g(dg + 2 * H, H), d_o(dg + 3 * H, H), dcr(dc + r * h, H);
    d_o = cr.tanh();  // tanh(c), kept in d_o until d_o itself is computed
    dcr += dhr * o * (T(1) - d_o.square());
    d_o = dhr * d_o * o * (T(1) - o);
    d_i = dcr * g * i * (T(1) - i);
    d_g = dcr * i * (T(1) - g.square());
    if (c_prev) d_f = dcr * CMap(c_prev + r * h, H) * f * (T(1) - f);
    else d_f.setZero();
    dcr *= f;
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_LSTM_CELL(X, T)                                                                               \
  X template void kernels::lstm_cell_forward<T>(cpu, std::size_t, std::size_t, T*, const T*, const T*, T*, T*);            \
  X template void kernels::lstm_cell_backward<T>(cpu, std::size_t, std::size_t, const T*, const T*, const T*, const T*, T*, \
                                                 T*);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_LSTM_CELL)
}  // namespace attn
