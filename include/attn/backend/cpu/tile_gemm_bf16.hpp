// SPDX-License-Identifier: MIT
// The attention kernels' tile product in bfloat16: tile::gemm's call (same operands, same strides)
// with A and B rounded to bfloat16 (nearest, ties to even) and the sums in float:
//   C (m, n) = alpha round(A) round(B) (+ C),   A(i, p) = a[i * ai + p * ak],   B (k, n) row-major.
// At cpu::isa() >= avx512_bf16 both operands are packed into vdpbf16ps's pairs along k (A broadcast
// one pair at a time, B 16 pairs per vector) in per-thread scratch and multiplied in 8 x 32 blocks,
// two products per lane and instruction. Below it the rounded operands go to tile::gemm in float:
// the same products, slower than FP32 by the rounding. Under Precision::bf16 at avx512_bf16 the
// flash kernels (attention.hpp) run their score and value products through here (below it they keep
// FP32 tiles); softmax statistics, the online rescaling and every accumulator stay float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../../core/bf16.hpp"
#include "../../core/pool.hpp"
#include "packed_gemm_util.hpp"
#include "tile_gemm.hpp"

namespace attn::kernels::tile {

/// Whether gemm_bf16 runs on vdpbf16ps now (cpu::isa() >= avx512_bf16), rather than in float.
inline bool bf16_tiles_native() {
#if defined(ATTN_TILE_GEMM_AVX2)
  return cpu::isa() >= Isa::avx512_bf16;
#else
  return false;
#endif
}

namespace bf16_detail {

using Scratch32 = std::vector<std::uint32_t, attn::detail::PoolAllocator<std::uint32_t>>;
using ScratchF = std::vector<float, attn::detail::PoolAllocator<float>>;

#if defined(ATTN_TILE_GEMM_AVX2)
#define ATTN_TARGET_TILE_BF16 __attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))

/// The 16 lanes' pairs (lo[j], hi[j]) as the 32-bit words vdpbf16ps reads: lo's bfloat16 in the
/// low half, hi's in the high half.
ATTN_TARGET_TILE_BF16 inline __m512i pair_words(__m512 lo, __m512 hi) {
  const __m512i l = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
  const __m512i h = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
  return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}

/// out[q * ldo + j] = the pair (src[2q][j], src[2q + 1][j]) of a (rows, cols) row-major source (row
/// stride ld), for q < ceil(rows / 2); an odd last row pairs with 0. B's layout, and A's when A is
/// stored transposed (its rows are then A's columns).
ATTN_TARGET_TILE_BF16 inline void pack_pairs_down(const float* src, std::size_t ld, std::size_t rows, std::size_t cols,
                                                  std::uint32_t* out, std::size_t ldo) {
  const std::size_t kp = (rows + 1) / 2;
  for (std::size_t q = 0; q < kp; ++q) {
    const float* r0 = src + 2 * q * ld;
    const bool odd = 2 * q + 1 == rows;
    const float* r1 = odd ? r0 : r0 + ld;  // unread when odd
    std::uint32_t* o = out + q * ldo;
    std::size_t j = 0;
    for (; j + 16 <= cols; j += 16) {
      const __m512 lo = _mm512_loadu_ps(r0 + j), hi = odd ? _mm512_setzero_ps() : _mm512_loadu_ps(r1 + j);
      _mm512_storeu_si512(o + j, pair_words(lo, hi));
    }
    if (j < cols) {
      const __mmask16 m = __mmask16((1u << (cols - j)) - 1u);
      const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + j), hi = odd ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, r1 + j);
      _mm512_mask_storeu_epi32(o + j, m, pair_words(lo, hi));
    }
  }
}

/// out[i * ldo + q] = the pair (a[i][2q], a[i][2q + 1]) of a row-major A (row stride ai), for q <
/// ceil(k / 2); an odd k pairs its last column with 0.
ATTN_TARGET_TILE_BF16 inline void pack_pairs_across(const float* a, std::size_t ai, std::size_t m, std::size_t k,
                                                    std::uint32_t* out, std::size_t ldo) {
  for (std::size_t i = 0; i < m; ++i) {
    const float* row = a + i * ai;
    std::uint32_t* o = out + i * ldo;
    std::size_t p = 0;
    for (; p + 32 <= k; p += 32)  // 32 floats: 16 pairs in order (the low half from the first 16)
      _mm512_storeu_si512(o + p / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + p + 16), _mm512_loadu_ps(row + p)));
    if (p < k) {
      const std::size_t left = k - p;  // 1..31
      const __mmask16 m0 = __mmask16(left >= 16 ? 0xffffu : (1u << left) - 1u);
      const __mmask16 m1 = __mmask16(left > 16 ? (1u << (left - 16)) - 1u : 0u);
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, row + p + 16), _mm512_maskz_loadu_ps(m0, row + p));
      _mm512_mask_storeu_epi32(o + p / 2, __mmask16((1u << ((left + 1) / 2)) - 1u), v);
    }
  }
}

/// An R x (16 NV) block of C from kp pair steps: R broadcast pairs of A, NV vectors of B's pairs.
template <int R, int NV, bool Mask>
ATTN_TARGET_TILE_BF16 inline void micro_bf16(std::size_t kp, float alpha, const std::uint32_t* a, std::size_t ai, std::size_t aq,
                                             const std::uint32_t* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                                             __mmask16 mask) {
  static_assert(NV == 1 || !Mask);
  __m512 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (std::size_t q = 0; q < kp; ++q) {
    const std::uint32_t* bq = b + q * ldb;
    __m512bh bv[NV];
    if constexpr (Mask) {
      bv[0] = (__m512bh)_mm512_maskz_loadu_epi32(mask, bq);
    } else {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bq + 16 * v);
    }
    const std::uint32_t* aq_ = a + q * aq;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(aq_[r * ai]));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_dpbf16_ps(s[r][v], av, bv[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m512 o = _mm512_mul_ps(al, s[r][v]);
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

template <int R>
ATTN_TARGET_TILE_BF16 inline void row_block_bf16(std::size_t n, std::size_t kp, float alpha, const std::uint32_t* a, std::size_t ai,
                                                 std::size_t aq, const std::uint32_t* b, std::size_t ldb, bool accumulate, float* c,
                                                 std::size_t ldc) {
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) micro_bf16<R, 2, false>(kp, alpha, a, ai, aq, b + j, ldb, accumulate, c + j, ldc, 0);
  if (j + 16 <= n) {
    micro_bf16<R, 1, false>(kp, alpha, a, ai, aq, b + j, ldb, accumulate, c + j, ldc, 0);
    j += 16;
  }
  if (j < n) micro_bf16<R, 1, true>(kp, alpha, a, ai, aq, b + j, ldb, accumulate, c + j, ldc, __mmask16((1u << (n - j)) - 1u));
}

/// The product on packed pairs: A's pair (i, q) at a[i * ai + q * aq], B's row of pairs q at b + q * ldb.
ATTN_TARGET_TILE_BF16 inline void gemm_pairs(std::size_t m, std::size_t n, std::size_t kp, float alpha, const std::uint32_t* a,
                                             std::size_t ai, std::size_t aq, const std::uint32_t* b, std::size_t ldb, bool accumulate,
                                             float* c, std::size_t ldc) {
  std::size_t i = 0;
  for (; i + 8 <= m; i += 8) row_block_bf16<8>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc);
  switch (m - i) {
    case 7: row_block_bf16<7>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 6: row_block_bf16<6>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 5: row_block_bf16<5>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 4: row_block_bf16<4>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 3: row_block_bf16<3>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 2: row_block_bf16<2>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    case 1: row_block_bf16<1>(n, kp, alpha, a + i * ai, ai, aq, b, ldb, accumulate, c + i * ldc, ldc); break;
    default: break;
  }
}

inline void gemm_native(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t ai, std::size_t ak,
                        const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc) {
  thread_local Scratch32 apack, bpack;
  const std::size_t kp = (k + 1) / 2;
  std::uint32_t* bp = packed_detail::scratch(bpack, kp * n);
  std::uint32_t* ap = packed_detail::scratch(apack, kp * m);
  pack_pairs_down(b, ldb, k, n, bp, n);
  if (ak == 1) {  // row-major A: each row's pairs in turn
    pack_pairs_across(a, ai, m, k, ap, kp);
    gemm_pairs(m, n, kp, alpha, ap, kp, 1, bp, n, accumulate, c, ldc);
  } else {  // A stored (k, m): its stored rows pair downwards, A's pair (i, q) at q * m + i
    pack_pairs_down(a, ak, k, m, ap, m);
    gemm_pairs(m, n, kp, alpha, ap, 1, m, bp, n, accumulate, c, ldc);
  }
}
#endif

#if defined(ATTN_TILE_GEMM_AVX2)
/// out[0, n) = x[0, n) rounded to bf16 (as bf16_round: nearest, ties to even, NaN quieted), 8 lanes
/// at a time.
__attribute__((target("avx2,fma"))) inline void round_row_avx2(const float* x, std::size_t n, float* out) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), high = _mm256_set1_epi32(int(0xffff0000u));
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x00400000);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + j));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), high);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i q = _mm256_and_si256(_mm256_or_si256(u, quiet), high);
    _mm256_storeu_ps(out + j, _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan)));
  }
  for (; j < n; ++j) out[j] = bf16_round(x[j]);
}
#endif

/// out[0, n) = x[0, n) rounded to bf16.
inline void round_row(const float* x, std::size_t n, float* out) {
#if defined(ATTN_TILE_GEMM_AVX2)
  if (available()) return round_row_avx2(x, n, out);
#endif
  for (std::size_t j = 0; j < n; ++j) out[j] = bf16_round(x[j]);
}

/// Below avx512_bf16: the operands rounded into float scratch, each in its own layout (A's stored
/// rows, B's rows), then tile::gemm in float.
template <class F = float>
void gemm_rounded(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t ai, std::size_t ak,
                  const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc) {
  thread_local ScratchF ar, br;
  float* ra = packed_detail::scratch(ar, m * k);
  float* rb = packed_detail::scratch(br, k * n);
  const bool at = ak != 1;  // A stored (k, m)
  const std::size_t rows = at ? k : m, cols = at ? m : k, ld = at ? ak : ai;
  for (std::size_t r = 0; r < rows; ++r) round_row(a + r * ld, cols, ra + r * cols);
  for (std::size_t p = 0; p < k; ++p) round_row(b + p * ldb, n, rb + p * n);
  if (at) gemm<F>(m, n, k, alpha, ra, 1, m, rb, n, accumulate, c, ldc);
  else gemm<F>(m, n, k, alpha, ra, k, 1, rb, n, accumulate, c, ldc);
}

}  // namespace bf16_detail

/// C (m, n) = alpha round(A) round(B), plus C when accumulate (k = 0: C becomes 0, or stays), with
/// round() to the nearest bfloat16 and float sums. Operands as tile::gemm's: A row-major (ak == 1)
/// or stored transposed (ai == 1), B row-major. A template (F is float) only so that a unit that
/// never calls it does not compile tile::gemm<float> and the FP32 GEMM behind it.
template <class F = float>
void gemm_bf16(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t ai, std::size_t ak,
               const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc) {
  static_assert(std::is_same_v<F, float>, "tile::gemm_bf16: F is float");
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm<F>(m, n, 0, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
#if defined(ATTN_TILE_GEMM_AVX2)
  if (bf16_tiles_native()) return bf16_detail::gemm_native(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
#endif
  bf16_detail::gemm_rounded<F>(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc);
}

}  // namespace attn::kernels::tile
