// SPDX-License-Identifier: MIT
// The fused LSTM cell of the CPU backend, forward and backward, over the rows of one time step
// (gates (n, 4H) stacked i, f, g, o, as PyTorch). Twin of cuda/lstm.cuh; the op is autograd/lstm.hpp.
//   attn::kernels::lstm_cell_forward(attn::cpu{}, n, h, gates, bias, c_prev, c, h_out);
#pragma once
#include <cstddef>

#include "../../core/eigen.hpp"
#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"

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

namespace lstm_detail {

/// One row of lstm_cell_backward: the gates' activations ai..ao and gradients di..d_o (H each);
/// d_o holds tanh(c) on entry.
template <class T, bool HasPrev>
inline void cell_backward_row(std::size_t h, const T* __restrict ai, const T* __restrict af, const T* __restrict ag,
                              const T* __restrict ao, const T* __restrict c_prev, const T* __restrict dh, T* __restrict dc,
                              T* __restrict di, T* __restrict df, T* __restrict dgg, T* __restrict d_o) {
  for (std::size_t k = 0; k < h; ++k) {
    const auto d = elem::lstm_cell_backward(elem::LstmGates<T>{ai[k], af[k], ag[k], ao[k]}, d_o[k], HasPrev ? c_prev[k] : T(0),
                                            HasPrev, dh[k], dc[k]);
    di[k] = d.i;
    df[k] = d.f;
    dgg[k] = d.g;
    d_o[k] = d.o;
    dc[k] = d.c_prev;
  }
}

}  // namespace lstm_detail

/// Backward of lstm_cell_forward over n rows, from the saved activations act (n, 4H) and cells
/// c (n, H), c_prev (n, H) or nullptr. dh (n, H) is dL/dh of this step; dc (n, H) carries dL/dc
/// from the next step in and dL/dc_prev out. Writes dL/d(pre-activation) to dgates (n, 4H), by
/// elem::lstm_cell_backward; tanh(c) is Eigen's vectorised one.
template <class T>
void lstm_cell_backward(cpu, std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc,
                        T* dgates) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  const Eigen::Index H = static_cast<Eigen::Index>(h);
  for (std::size_t r = 0; r < n; ++r) {
    T* dg = dgates + r * 4 * h;
    Eigen::Map<Arr>(dg + 3 * h, H) = Eigen::Map<const Arr>(c + r * h, H).tanh();
    const T* a = act + r * 4 * h;
    if (c_prev)
      lstm_detail::cell_backward_row<T, true>(h, a, a + h, a + 2 * h, a + 3 * h, c_prev + r * h, dh + r * h, dc + r * h, dg, dg + h,
                                              dg + 2 * h, dg + 3 * h);
    else
      lstm_detail::cell_backward_row<T, false>(h, a, a + h, a + 2 * h, a + 3 * h, nullptr, dh + r * h, dc + r * h, dg, dg + h,
                                               dg + 2 * h, dg + 3 * h);
  }
}

/// The scalar reference of lstm_cell_forward (elem::lstm_cell_unit for every unit), for tests.
template <class T>
void lstm_cell_forward_reference(cpu, std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t k = 0; k < h; ++k) {
      const auto s = elem::lstm_cell_unit(gates + r * 4 * h, bias, h, k, c_prev ? c_prev[r * h + k] : T(0), c_prev != nullptr);
      c[r * h + k] = s.c;
      hout[r * h + k] = s.h;
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
