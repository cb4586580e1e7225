// SPDX-License-Identifier: MIT
// The definitions behind ATTN_SEPARATE_COMPILATION (see attn/core/instantiate.hpp) for a program
// that does not link the attn::compiled CMake target: define ATTN_SEPARATE_COMPILATION for all of
// its translation units and include this header in exactly one of them.
//   // attn_kernels.cpp
//   #include <attn/impl/src.hpp>
#pragma once
#include "instantiate_cpu.hpp"

namespace attn {
ATTN_INSTANTIATE_ALL_CPU(, float)
ATTN_INSTANTIATE_ALL_CPU(, double)
}  // namespace attn
