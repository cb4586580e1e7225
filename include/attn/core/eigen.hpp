// SPDX-License-Identifier: MIT
// Eigen's dense core, included once for all of attn with the third-party warnings it triggers
// silenced. GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (avx512fintrin.h's _mm256_undefined_pd) when they are inlined through Eigen's AVX-512 packet
// code, a false positive that would stop any -Werror build at -march=x86-64-v4 or -march=native on
// an AVX-512 CPU. The pragma covers only what is included here; attn's own code keeps every warning.
//   #include "../core/eigen.hpp"
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
