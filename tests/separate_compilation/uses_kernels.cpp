// SPDX-License-Identifier: MIT
// Odr-uses one instantiation from each list of attn/core/instantiate.hpp's extern templates.
// check.cmake compiles this file with and without ATTN_SEPARATE_COMPILATION and reads its symbols.
#include <attn/attn.hpp>

void* const uses[] = {
    reinterpret_cast<void*>(&attn::cpu::gemm<float>),
    reinterpret_cast<void*>(&attn::cpu::gemm_strided_batched<double>),
    reinterpret_cast<void*>(&attn::kernels::tile::gemm<float>),
    reinterpret_cast<void*>(&attn::kernels::softmax_rows<double>),
    reinterpret_cast<void*>(&attn::kernels::gather_rows<float, std::int64_t>),
    reinterpret_cast<void*>(&attn::kernels::layer_norm_forward<float>),
    reinterpret_cast<void*>(&attn::kernels::cross_entropy_backward<double, int>),
    reinterpret_cast<void*>(&attn::kernels::lstm_cell_backward<float>),
    reinterpret_cast<void*>(&attn::kernels::adam_update<double>),
    reinterpret_cast<void*>(&attn::detail::lstm_impl<float, attn::cpu>),
    reinterpret_cast<void*>(&attn::kernels::mha_flash_forward<float>),
    reinterpret_cast<void*>(&attn::kernels::mha_naive_backward<double>),
};

int main() { return uses[0] == nullptr; }
