// SPDX-License-Identifier: MIT
// The fused LSTM cell of the CPU backend, forward and backward, over the rows of one time step
// (gates (n, 4H) stacked i, f, g, o, as PyTorch). Twin of cuda/lstm.cuh; the op is autograd/lstm.hpp.
// The kernels are in vector_kernels.hpp (one copy per ISA level); this header adds the scalar
// reference that tests hold them to.
//   attn::kernels::lstm_cell_forward(attn::cpu{}, n, h, gates, bias, c_prev, c, h_out);
#pragma once
#include <cstddef>

#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

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
