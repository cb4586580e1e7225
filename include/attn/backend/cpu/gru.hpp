// SPDX-License-Identifier: MIT
// The fused GRU cell of the CPU backend, forward and backward, over the rows of one time step
// (gates stacked r, z, n, as PyTorch). Twin of cuda/gru.cuh; the op is autograd/gru.hpp. The
// kernels are in vector_kernels.hpp (one copy per ISA level); this header adds the scalar reference
// that tests hold them to.
//   attn::kernels::gru_cell_forward(attn::cpu{}, n, h, gates, gh, b_ih, b_hh, h_prev, h_out);
#pragma once
#include <cstddef>

#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

/// The scalar reference of gru_cell_forward (elem::gru_cell_unit for every unit), for tests.
template <class T>
void gru_cell_forward_reference(cpu, std::size_t n, std::size_t h, T* gates, const T* gh, const T* b_ih, const T* b_hh, const T* h_prev,
                                T* hout) {
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t k = 0; k < h; ++k)
      hout[r * h + k] = elem::gru_cell_unit(gates + r * 4 * h, gh ? gh + r * 3 * h : nullptr, b_ih, b_hh, h, k,
                                            h_prev ? h_prev[r * h + k] : T(0));
}

}  // namespace attn::kernels
