// SPDX-License-Identifier: MIT
// attn::compiled: the float instantiations of the CPU kernels (attn/core/instantiate.hpp).
#include <attn/impl/instantiate_cpu.hpp>

namespace attn {
ATTN_INSTANTIATE_ALL_CPU(, float)
}  // namespace attn
