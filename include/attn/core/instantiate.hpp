// SPDX-License-Identifier: MIT
// Separate compilation of attn's CPU kernels.
//
// attn is header-only: every translation unit that calls a kernel instantiates and optimizes it.
// A program that defines ATTN_SEPARATE_COMPILATION (linking the attn::compiled CMake target does
// that) sees the float and double instantiations of the CPU kernels, the GEMMs and the LSTM and
// attention implementations declared `extern template`, and compiles none of them; one translation
// unit defines them all by including <attn/impl/src.hpp> (attn::compiled does the same, one element
// type per unit). The two ways give the same code: the kernels are the same templates, compiled
// once.
//
// Each header lists its instantiations as a macro ATTN_INSTANTIATE_<NAME>(X, T) whose X is
// `extern` for the declarations and empty for the definitions, and passes it to
// ATTN_EXTERN_TEMPLATES at namespace attn scope.
#pragma once

#if defined(ATTN_SEPARATE_COMPILATION)
#define ATTN_EXTERN_TEMPLATES(LIST) LIST(extern, float) LIST(extern, double)
#else
#define ATTN_EXTERN_TEMPLATES(LIST)
#endif
