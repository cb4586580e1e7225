// SPDX-License-Identifier: MIT
// attn::compiled: the float instantiations of the CPU kernels (attn/core/instantiate.hpp).
#include <attn/impl/instantiate_cpu.hpp>

namespace attn {
ATTN_INSTANTIATE_ALL_CPU(, float)
}  // namespace attn

// Links attn::compiled's start-up check (compiled_guard.cpp) into every program that uses these kernels.
extern "C" const int attn_compiled_guard_anchor;
extern "C" const int* const attn_compiled_guard_ref_float = &attn_compiled_guard_anchor;
