// SPDX-License-Identifier: MIT
// A register-tiled FP32 GEMM for the small, cache-resident tiles of the attention kernels:
//   C (m, n) = alpha A B (+ C),   A(i, p) = a[i * ai + p * ak],   B (k, n) row-major (row stride ldb).
// A is read in place through two strides (so A and A^T are the same call) and B in place by rows:
// nothing is packed. Eigen's GEMM packs both operands on every call, which costs as much as the
// arithmetic when one side is a 128 x 16 tile of a 16-wide head. AVX-512 (8 x 32 blocks in 16-lane
// registers, masked tails) or AVX2 + FMA (6 x 16 blocks), chosen at run time by cpu::isa() whatever
// the build's -m flags. Elsewhere (double, the generic level, another CPU, nvcc's host pass)
// tile::gemm hands the same product to the general GEMM, so callers make one call either way.
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <type_traits>

#include "../cpu.hpp"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#define ATTN_TILE_GEMM_AVX2 1
#endif

namespace attn::kernels::tile {

#if defined(ATTN_TILE_GEMM_AVX2)
/// Whether the AVX2 kernels run now (cpu::isa() is avx2 or higher).
inline bool available() { return cpu::isa() >= Isa::avx2; }

/// An R x (8 NV) block of C from k steps of rank-1 updates: R broadcasts of A and NV loads of B per
/// step. With Mask the block's single vector covers the first lanes of `mask` only (n's tail).
template <int R, int NV, bool Mask>
__attribute__((target("avx2,fma"))) inline void micro(std::size_t k, float alpha, const float* a, std::size_t ai, std::size_t ak,
                                                      const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                                                      __m256i mask) {
  static_assert(NV == 1 || !Mask);
  __m256 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) s[r][v] = _mm256_setzero_ps();
  for (std::size_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m256 bv[NV];
    if constexpr (Mask) {
      bv[0] = _mm256_maskload_ps(bp, mask);
    } else {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(bp + 8 * v);
    }
    const float* ap = a + p * ak;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r * ai);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) s[r][v] = _mm256_fmadd_ps(av, bv[v], s[r][v]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha);
  const bool scaled = alpha != 1.0f;  // most of the flash kernels' products have alpha 1
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 o = scaled ? _mm256_mul_ps(al, s[r][v]) : s[r][v];
      if constexpr (Mask) {
        if (accumulate) o = _mm256_add_ps(o, _mm256_maskload_ps(cr, mask));
        _mm256_maskstore_ps(cr, mask, o);
      } else {
        if (accumulate) o = _mm256_add_ps(o, _mm256_loadu_ps(cr + 8 * v));
        _mm256_storeu_ps(cr + 8 * v, o);
      }
    }
  }
}

/// Rows [0, R) of C over all of n: 16-wide blocks, then an 8-wide one, then the masked tail.
template <int R>
__attribute__((target("avx2,fma"))) inline void row_block(std::size_t n, std::size_t k, float alpha, const float* a, std::size_t ai,
                                                          std::size_t ak, const float* b, std::size_t ldb, bool accumulate, float* c,
                                                          std::size_t ldc) {
  const __m256i none = _mm256_setzero_si256();
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) micro<R, 2, false>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, none);
  if (j + 8 <= n) {
    micro<R, 1, false>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, none);
    j += 8;
  }
  if (j < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - j)), lane);
    micro<R, 1, true>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, mask);
  }
}

__attribute__((target("avx2,fma"))) inline void gemm_avx2(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                                                          std::size_t ai, std::size_t ak, const float* b, std::size_t ldb,
                                                          bool accumulate, float* c, std::size_t ldc) {
  constexpr std::size_t mr = 6;
  std::size_t i = 0;
  for (; i + mr <= m; i += mr) row_block<6>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc);
  switch (m - i) {
    case 5: row_block<5>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 4: row_block<4>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 3: row_block<3>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 2: row_block<2>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 1: row_block<1>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    default: break;
  }
}

#define ATTN_TARGET_AVX512 __attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma")))

/// An R x (16 NV) block of C from k steps of rank-1 updates: R broadcasts of A and NV loads of B per
/// step. With Mask the block's single vector covers the lanes of `mask` only (n's tail).
template <int R, int NV, bool Mask>
ATTN_TARGET_AVX512 inline void micro512(std::size_t k, float alpha, const float* a, std::size_t ai, std::size_t ak,
                                        const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                                        __mmask16 mask) {
  static_assert(NV == 1 || !Mask);
  __m512 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[NV];
    if constexpr (Mask) {
      bv[0] = _mm512_maskz_loadu_ps(mask, bp);
    } else {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
    }
    const float* ap = a + p * ak;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * ai]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  const bool scaled = alpha != 1.0f;  // most of the flash kernels' products have alpha 1
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m512 o = scaled ? _mm512_mul_ps(al, s[r][v]) : s[r][v];
      if constexpr (Mask) {
        if (accumulate) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(mask, cr));
        _mm512_mask_storeu_ps(cr, mask, o);
      } else {
        if (accumulate) o = _mm512_add_ps(o, _mm512_loadu_ps(cr + 16 * v));
        _mm512_storeu_ps(cr + 16 * v, o);
      }
    }
  }
}

/// Rows [0, R) of C over all of n: 32-wide blocks, then a 16-wide one, then the masked tail.
template <int R>
ATTN_TARGET_AVX512 inline void row_block512(std::size_t n, std::size_t k, float alpha, const float* a, std::size_t ai,
                                            std::size_t ak, const float* b, std::size_t ldb, bool accumulate, float* c,
                                            std::size_t ldc) {
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) micro512<R, 2, false>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, 0);
  if (j + 16 <= n) {
    micro512<R, 1, false>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, 0);
    j += 16;
  }
  if (j < n) {
    const __mmask16 mask = __mmask16((1u << (n - j)) - 1u);
    micro512<R, 1, true>(k, alpha, a, ai, ak, b + j, ldb, accumulate, c + j, ldc, mask);
  }
}

ATTN_TARGET_AVX512 inline void gemm_avx512(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                                           std::size_t ai, std::size_t ak, const float* b, std::size_t ldb, bool accumulate,
                                           float* c, std::size_t ldc) {
  constexpr std::size_t mr = 8;
  std::size_t i = 0;
  for (; i + mr <= m; i += mr) row_block512<8>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc);
  switch (m - i) {
    case 7: row_block512<7>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 6: row_block512<6>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 5: row_block512<5>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 4: row_block512<4>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 3: row_block512<3>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 2: row_block512<2>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 1: row_block512<1>(n, k, alpha, a + i * ai, ai, ak, b, ldb, accumulate, c + i * ldc, ldc); break;
    default: break;
  }
}

/// dst (rows, cols) = src (rows, cols), row strides ld and ldd; cols a multiple of 8.
__attribute__((target("avx2,fma"))) inline void copy_rows_avx2(const float* src, std::size_t ld, std::size_t rows, std::size_t cols,
                                                               float* dst, std::size_t ldd) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; c += 8) _mm256_storeu_ps(dst + r * ldd + c, _mm256_loadu_ps(src + r * ld + c));
}

/// dst (cols, rows) = the transpose of src (rows, cols) (row strides ld and ldd), in 8 x 8 blocks of
/// AVX registers (unpack, shuffle, lane permute); the edges element by element.
__attribute__((target("avx2,fma"))) inline void transpose_avx2(const float* src, std::size_t ld, std::size_t rows,
                                                               std::size_t cols, float* dst, std::size_t ldd) {
  std::size_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    std::size_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const float* s = src + i * ld + j;
      __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ld), r2 = _mm256_loadu_ps(s + 2 * ld), r3 = _mm256_loadu_ps(s + 3 * ld);
      __m256 r4 = _mm256_loadu_ps(s + 4 * ld), r5 = _mm256_loadu_ps(s + 5 * ld), r6 = _mm256_loadu_ps(s + 6 * ld),
             r7 = _mm256_loadu_ps(s + 7 * ld);
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                   t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                   t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee), u2 = _mm256_shuffle_ps(t1, t3, 0x44),
                   u3 = _mm256_shuffle_ps(t1, t3, 0xee), u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee),
                   u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
      float* d = dst + j * ldd + i;
      _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    for (std::size_t r = i; r < i + 8; ++r)
      for (std::size_t c = j; c < cols; ++c) dst[c * ldd + r] = src[r * ld + c];
  }
  for (std::size_t c = 0; c < cols; ++c)
    for (std::size_t r = i; r < rows; ++r) dst[c * ldd + r] = src[r * ld + c];
}
#else
inline bool available() { return false; }
#endif

/// C (m, n) = alpha A B, plus C when accumulate; when k is 0, C becomes 0 (or stays, accumulating).
/// A must be row-major (ak == 1, row stride ai) or stored transposed (ai == 1, row stride ak).
template <class T>
void gemm(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t ai, std::size_t ak, const T* b,
          std::size_t ldb, bool accumulate, T* c, std::size_t ldc) {
#if defined(ATTN_TILE_GEMM_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    switch (cpu::isa()) {
      case Isa::avx512_bf16:
      case Isa::avx512: return gemm_avx512(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
      case Isa::avx2: return gemm_avx2(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
      case Isa::generic: break;
    }
  }
#endif
  if (ak != 1 && ai != 1) throw std::invalid_argument("tile::gemm: A needs a unit stride along its rows or its columns");
  const bool at = ak != 1;  // stored (k, m); a single row or column may have both strides 1
  const std::size_t lda = at ? std::max(ak, m) : std::max(ai, k);
  cpu::gemm<T>(at ? Trans::yes : Trans::no, Trans::no, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb),
               accumulate ? T(1) : T(0), c, int(ldc));
}

/// dst (cols, rows) = the transpose of src (rows, cols), row strides ld and ldd: a key or value tile
/// laid out as the B operand of gemm. Float goes through 8 x 8 register blocks from AVX2 on.
template <class T>
void transpose(const T* src, std::size_t ld, std::size_t rows, std::size_t cols, T* dst, std::size_t ldd) {
#if defined(ATTN_TILE_GEMM_AVX2)
  if constexpr (std::is_same_v<T, float>)
    if (available()) return transpose_avx2(src, ld, rows, cols, dst, ldd);
#endif
  for (std::size_t c = 0; c < cols; ++c)  // contiguous writes; the source rows stay in L1
    for (std::size_t r = 0; r < rows; ++r) dst[c * ldd + r] = src[r * ld + c];
}

}  // namespace attn::kernels::tile

namespace attn {
#define ATTN_INSTANTIATE_CPU_TILE_GEMM(X, T)                                                                               \
  X template void kernels::tile::gemm<T>(std::size_t, std::size_t, std::size_t, T, const T*, std::size_t, std::size_t,      \
                                         const T*, std::size_t, bool, T*, std::size_t);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_TILE_GEMM)
}  // namespace attn
