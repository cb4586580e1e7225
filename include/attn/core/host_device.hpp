// SPDX-License-Identifier: MIT
// ATTN_HD marks a function that both the host and a CUDA device call: __host__ __device__ when nvcc
// compiles the source, nothing otherwise. The element functors (core/expr.hpp) and the element math
// that both backends share (backend/element_math.hpp) use it.
//   template <class T> ATTN_HD T square(T x) { return x * x; }
#pragma once

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__
#else
#define ATTN_HD
#endif
