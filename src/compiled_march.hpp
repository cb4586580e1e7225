// SPDX-License-Identifier: MIT
// The extensions the compiler may use anywhere in a unit built with this unit's flags, as bits
// (macros only, so that the portable guard unit and the -march=native units share no code).
#pragma once

#define ATTN_MARCH_AVX 1u
#define ATTN_MARCH_AVX2_FMA 2u
#define ATTN_MARCH_AVX512 4u  // any of AVX-512 F, CD, BW, DQ, VL
#define ATTN_MARCH_AVX512_BF16 8u
#define ATTN_MARCH_AVX512_VNNI 16u

#if defined(__AVX__)
#define ATTN_MARCH_BIT_AVX ATTN_MARCH_AVX
#else
#define ATTN_MARCH_BIT_AVX 0u
#endif
#if defined(__AVX2__) || defined(__FMA__)
#define ATTN_MARCH_BIT_AVX2_FMA ATTN_MARCH_AVX2_FMA
#else
#define ATTN_MARCH_BIT_AVX2_FMA 0u
#endif
#if defined(__AVX512F__) || defined(__AVX512CD__) || defined(__AVX512BW__) || defined(__AVX512DQ__) || defined(__AVX512VL__)
#define ATTN_MARCH_BIT_AVX512 ATTN_MARCH_AVX512
#else
#define ATTN_MARCH_BIT_AVX512 0u
#endif
#if defined(__AVX512BF16__)
#define ATTN_MARCH_BIT_AVX512_BF16 ATTN_MARCH_AVX512_BF16
#else
#define ATTN_MARCH_BIT_AVX512_BF16 0u
#endif
#if defined(__AVX512VNNI__)
#define ATTN_MARCH_BIT_AVX512_VNNI ATTN_MARCH_AVX512_VNNI
#else
#define ATTN_MARCH_BIT_AVX512_VNNI 0u
#endif

#define ATTN_MARCH_FEATURES \
  (ATTN_MARCH_BIT_AVX | ATTN_MARCH_BIT_AVX2_FMA | ATTN_MARCH_BIT_AVX512 | ATTN_MARCH_BIT_AVX512_BF16 | ATTN_MARCH_BIT_AVX512_VNNI)
