// SPDX-License-Identifier: MIT
// Vectorised exponentials and row maxima for the softmax inside the CPU attention kernels: SSE2
// (Cephes) and, chosen at run time by cpu::isa(), AVX2 + FMA or AVX-512 (the same degree-5
// polynomial, about 2 ulp), exactly 0 below -87.
//   const float sum = attn::kernels::mha::exp_shift_sum(row, n, row_max);   // row[j] = exp(row[j] - max)
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tile_gemm.hpp"
#if defined(ATTN_TILE_GEMM_AVX2)
#define ATTN_MHA_AVX2 1  // AVX2+FMA and AVX-512 exps, chosen at run time (cpu::isa()), whatever the build's -m flags
#endif

namespace attn::kernels::mha {

template <class T>
inline constexpr T neg_inf = -std::numeric_limits<T>::infinity();

#if defined(__SSE2__)
/// exp(v) for 4 floats: Cephes' polynomial on v = n ln2 + r. v < -87 (results under FLT_MIN, and
/// -inf) gives exactly 0, which also keeps denormals out of the GEMMs; NaN stays NaN.
inline __m128 exp_ps(__m128 v) {
  const __m128 keep = _mm_cmpge_ps(v, _mm_set1_ps(-87.0f));
  const __m128 nan = _mm_cmpunord_ps(v, v);
  const __m128 c = _mm_min_ps(_mm_max_ps(v, _mm_set1_ps(-87.0f)), _mm_set1_ps(88.0f));
  const __m128i ni = _mm_cvtps_epi32(_mm_mul_ps(c, _mm_set1_ps(1.44269504088896341f)));  // round to nearest
  const __m128 fn = _mm_cvtepi32_ps(ni);
  __m128 r = _mm_sub_ps(c, _mm_mul_ps(fn, _mm_set1_ps(0.693359375f)));
  r = _mm_add_ps(r, _mm_mul_ps(fn, _mm_set1_ps(2.12194440e-4f)));
  __m128 p = _mm_set1_ps(1.9875691500e-4f);
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
  p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0f));
  const __m128 scale = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(ni, _mm_set1_epi32(127)), 23));
  return _mm_or_ps(_mm_and_ps(_mm_mul_ps(p, scale), keep), _mm_and_ps(v, nan));
}
inline float hsum_ps(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}
#endif

#if defined(ATTN_MHA_AVX2)
/// The AVX2 and AVX-512 exponentials' constants: v = n ln2 + r with n = round(v log2 e), ln2 split in
/// two for an exact reduction, e^r by a degree-5 minimax polynomial (highest power first), v clamped
/// to [lo, hi].
namespace exp5 {
inline constexpr float lo = -87.0f, hi = 88.0f, log2e = 1.44269504088896341f;
inline constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
inline constexpr float c[6] = {8.2976548001e-03f, 4.1915383190e-02f, 1.6667574644e-01f,
                               4.9998894334e-01f, 9.9999970198e-01f, 1.0000001192e+00f};
}  // namespace exp5
/// exp for 8 floats with AVX2 and FMA, for softmax's arguments (<= 0): v = n ln2 + r, |r| <= ln2/2,
/// e^r by a degree-5 minimax polynomial (relative error <= 2.1e-7, about 2 ulp), 2^n added into the
/// exponent bits. v < -87 (results under FLT_MIN, and -inf) gives exactly 0, which also keeps
/// denormals out of the GEMMs; NaN stays NaN (min returns its second operand for NaN); v is
/// clamped at 88. Below -87 the lanes compute garbage (2^n under the exponent range) that the final
/// mask discards, so v needs no clamp from below.
__attribute__((target("avx2,fma"))) inline __m256 exp8_ps(__m256 v) {
  const __m256 lo = _mm256_set1_ps(exp5::lo);
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(exp5::hi), v);
  const __m256 fn = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(exp5::log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(fn, _mm256_set1_ps(-exp5::ln2_hi), c);
  r = _mm256_fmadd_ps(fn, _mm256_set1_ps(-exp5::ln2_lo), r);
  __m256 p = _mm256_set1_ps(exp5::c[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp5::c[i]));
  // c >= -87 keeps p 2^n normal, so adding n to the exponent field is exact.
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(fn), 23);
  const __m256 y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_andnot_ps(_mm256_cmp_ps(v, lo, _CMP_LT_OQ), y);
}
/// exp_shift_sum's AVX2 body: whole 8-float groups of x[0..n); returns their count and adds to *sum.
__attribute__((target("avx2,fma"))) inline std::size_t exp_shift_sum_avx2(float* x, std::size_t n, float m, float* sum) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {  // two independent chains
    const __m256 y0 = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
    const __m256 y1 = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), mv));
    _mm256_storeu_ps(x + j, y0);
    _mm256_storeu_ps(x + j + 8, y1);
    a0 = _mm256_add_ps(a0, y0);
    a1 = _mm256_add_ps(a1, y1);
  }
  if (j + 8 <= n) {
    const __m256 y = exp8_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
    _mm256_storeu_ps(x + j, y);
    a0 = _mm256_add_ps(a0, y);
    j += 8;
  }
  a0 = _mm256_add_ps(a0, a1);
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
  *sum += hsum_ps(h);
  return j;
}
/// exp8_ps for 16 floats with AVX-512: the same clamp at 88, reduction and polynomial, so both
/// levels give the same results lane for lane. p 2^n comes from vscalefps, which is exact while the
/// result is normal (as adding n to the exponent is) and takes the zeroing below -87 (and of -inf)
/// as its write mask: five instructions fewer than AVX2's integer route, which counts on Zen 4,
/// where the exponentials of a 128 x 128 tile cost a fifth of its two products.
ATTN_TARGET_AVX512 inline __m512 exp16_ps(__m512 v) {
  // min(88, v) returns v for NaN: NaN goes through the polynomial and scalef as NaN.
  const __m512 c = _mm512_min_ps(_mm512_set1_ps(exp5::hi), v);
  const __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(exp5::log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(fn, _mm512_set1_ps(-exp5::ln2_hi), c);
  r = _mm512_fmadd_ps(fn, _mm512_set1_ps(-exp5::ln2_lo), r);
  __m512 p = _mm512_set1_ps(exp5::c[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp5::c[i]));
  // Kept: v >= -87, or NaN (not less than, unordered); -inf and everything below -87 give 0.
  const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(exp5::lo), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, p, fn);
}
/// exp_shift_sum's AVX-512 body: all of x[0..n), the tail under a mask; returns n and adds to *sum.
ATTN_TARGET_AVX512 inline std::size_t exp_shift_sum_avx512(float* x, std::size_t n, float m, float* sum) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) {  // two independent chains
    const __m512 y0 = exp16_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv));
    const __m512 y1 = exp16_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), mv));
    _mm512_storeu_ps(x + j, y0);
    _mm512_storeu_ps(x + j + 16, y1);
    a0 = _mm512_add_ps(a0, y0);
    a1 = _mm512_add_ps(a1, y1);
  }
  for (; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1u);
    const __m512 y = exp16_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), mv));
    _mm512_mask_storeu_ps(x + j, k, y);
    a0 = _mm512_add_ps(a0, _mm512_maskz_mov_ps(k, y));
  }
  const __m512 a = _mm512_add_ps(a0, a1);
  const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  *sum += hsum_ps(_mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1)));
  return n;
}
#endif

/// max over x[0..n) (NaN entries: the order of the comparisons decides, as in std::max; the
/// scores the kernels take it of are finite or -inf).
template <class T>
T row_max(const T* x, std::size_t n) {
  T m = neg_inf<T>;
  for (std::size_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
#if defined(ATTN_MHA_AVX2)
/// row_max's AVX2 and AVX-512 bodies: all of x[0..n), the tail element by element (AVX2) or under a
/// mask (AVX-512), two independent chains.
__attribute__((target("avx2,fma"))) inline float row_max_avx2(const float* x, std::size_t n) {
  __m256 a0 = _mm256_set1_ps(neg_inf<float>), a1 = a0;
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    a0 = _mm256_max_ps(a0, _mm256_loadu_ps(x + j));
    a1 = _mm256_max_ps(a1, _mm256_loadu_ps(x + j + 8));
  }
  if (j + 8 <= n) {
    a0 = _mm256_max_ps(a0, _mm256_loadu_ps(x + j));
    j += 8;
  }
  a0 = _mm256_max_ps(a0, a1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float m = _mm_cvtss_f32(h);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}
ATTN_TARGET_AVX512 inline float row_max_avx512(const float* x, std::size_t n) {
  __m512 a0 = _mm512_set1_ps(neg_inf<float>), a1 = a0;
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    a0 = _mm512_max_ps(a0, _mm512_loadu_ps(x + j));
    a1 = _mm512_max_ps(a1, _mm512_loadu_ps(x + j + 16));
  }
  for (; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1u);
    a0 = _mm512_mask_max_ps(a0, k, a0, _mm512_maskz_loadu_ps(k, x + j));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
}
#endif

inline float row_max(const float* x, std::size_t n) {
#if defined(ATTN_MHA_AVX2)
  switch (cpu::isa()) {
    case Isa::avx512_bf16:
    case Isa::avx512: return row_max_avx512(x, n);
    case Isa::avx2: return row_max_avx2(x, n);
    case Isa::generic: break;
  }
#endif
  float m = neg_inf<float>;
  std::size_t j = 0;
#if defined(__SSE2__)
  __m128 mv = _mm_set1_ps(m);
  for (; j + 4 <= n; j += 4) mv = _mm_max_ps(mv, _mm_loadu_ps(x + j));
  mv = _mm_max_ps(mv, _mm_movehl_ps(mv, mv));
  mv = _mm_max_ss(mv, _mm_shuffle_ps(mv, mv, 1));
  m = _mm_cvtss_f32(mv);
#endif
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

/// x[j] = exp(x[j] - m) in place (0 where x is -inf), returning the sum. m is finite or +inf.
inline float exp_shift_sum(float* x, std::size_t n, float m) {
  float s = 0;
  std::size_t j = 0;
#if defined(ATTN_MHA_AVX2)
  switch (cpu::isa()) {
    case Isa::avx512_bf16:
    case Isa::avx512: j = exp_shift_sum_avx512(x, n, m, &s); break;
    case Isa::avx2: j = exp_shift_sum_avx2(x, n, m, &s); break;
    case Isa::generic: break;
  }
#endif
#if defined(__SSE2__)
  const __m128 mv = _mm_set1_ps(m);
  __m128 acc = _mm_setzero_ps();
  for (; j + 4 <= n; j += 4) {
    const __m128 y = exp_ps(_mm_sub_ps(_mm_loadu_ps(x + j), mv));
    _mm_storeu_ps(x + j, y);
    acc = _mm_add_ps(acc, y);
  }
  s += hsum_ps(acc);
#endif
  for (; j < n; ++j) {  // as the vector bodies: exactly 0 below -87
    const float d = x[j] - m;
    s += (x[j] = d < -87.0f ? 0.0f : std::exp(d));
  }
  return s;
}
inline double exp_shift_sum(double* x, std::size_t n, double m) {
  double s = 0;
  for (std::size_t j = 0; j < n; ++j) s += (x[j] = std::exp(x[j] - m));
  return s;
}

}  // namespace attn::kernels::mha
