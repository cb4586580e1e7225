// SPDX-License-Identifier: MIT
// The CPU's int8 GEMM for dynamic quantization (torch.ao.quantization.quantize_dynamic's model):
// C (m, n) = A W + beta C with A (m, k) in float, quantized per row as it is read, and W (k, n)
// quantized once per output column (a layer's weights).
//
// - Weights: int8, symmetric per output channel, PyTorch's per_channel_symmetric observer:
//   scale_j = max_p |W(p, j)| / 127.5 (at least FLT_EPSILON), q = clamp(round(W (1 / scale_j)), -128, 127),
//   rounding half to even.
// - Activations: uint8, asymmetric per row: the row's range [min(0, min x), max(0, max x)] over 255
//   steps, zero point z_i = round(-min / scale_i), q = clamp(round(x / scale_i) + z_i, 0, 255). A
//   row holding a NaN or an infinity comes out NaN.
// - C(i, j) = scale_i scale_j (sum_p qa(i, p) qw(p, j) - z_i sum_p qw(p, j)), the sums in int32.
//
// On a CPU with AVX512-VNNI (at cpu::isa() >= avx512) the sums run on vpdpbusd, four u8 x s8
// products per int32 lane and instruction; below it the same integers are multiplied as floats by
// the FP32 GEMM (cpu::gemm): the same result up to the float rounding of sums past 2^24.
//   attn::kernels::PackedInt8 w;
//   w.quantize(in, out, weight);                               // W^T (in, out) of a Linear's W (out, in)
//   attn::kernels::gemm_int8(rows, out, in, x, in, w, 0.f, y, out);   // y ~= x W^T
//
// Layout of a packed W (k, n): panels of 32 columns, the last one padded with zeros; in a panel, for
// each quad of rows (4p .. 4p + 3) of W (the last one padded with zeros), 32 columns of 4 bytes, a
// column's four values adjacent: the operand vpdpbusd takes, one 64-byte vector per 16 columns.
#pragma once
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/pool.hpp"
#include "../cpu.hpp"
#include "gemm.hpp"
#include "isa.hpp"
#include "packed_gemm_util.hpp"

#if defined(ATTN_CPU_X86)
#include <immintrin.h>
#define ATTN_GEMM_INT8_AVX512 1
#endif

namespace attn::kernels {

/// Whether gemm_int8 runs its sums on vpdpbusd now (see int8_native below).
inline bool int8_native_now() {
#if defined(ATTN_GEMM_INT8_AVX512)
  return cpu::isa() >= Isa::avx512 && ::attn::detail::cpu_features().avx512_vnni;
#else
  return false;
#endif
}

/// PyTorch's per-channel symmetric int8 scale for a channel whose largest magnitude is amax.
inline float int8_weight_scale(float amax) { return std::max(amax / 127.5f, FLT_EPSILON); }

/// w quantized with scale: round(w * (1 / scale)), half to even, clamped to [-128, 127] (PyTorch
/// multiplies by the inverse scale; dividing differs where w / scale is within an ulp of a tie).
inline std::int8_t int8_quantize(float w, float scale) {
  const float r = std::nearbyint(w * (1.f / scale));
  return static_cast<std::int8_t>(r < -128.f ? -128 : r > 127.f ? 127 : int(r));
}

/// A (k, n) weight operand of gemm_int8: int8 values, a float scale per column, the column sums of
/// the values, packed in the layout described at the top of this file.
class PackedInt8 {
 public:
  static constexpr int kPanel = 32;
  /// The longest product (k, the input width) whose int32 sums of u8 x s8 terms (at most 255 x 128
  /// each) cannot overflow.
  static constexpr int kMaxK = std::numeric_limits<std::int32_t>::max() / (255 * 128);

  PackedInt8() = default;

  /// Quantizes W^T (k, n) of a weight W stored (n, k) with row stride ldw (nn::Linear's (Out, In)
  /// layout): each row of W is one output channel.
  void quantize(int k, int n, const float* w, int ldw) {
    check(k, n, "quantize");
    std::vector<std::int8_t> q(static_cast<std::size_t>(k) * static_cast<std::size_t>(n));
    std::vector<float> s(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
      const float* row = w + std::size_t(j) * ldw;
      float amax = 0.f;
      bool finite = true;
      for (int p = 0; p < k; ++p) {
        finite = finite && std::isfinite(row[p]);
        amax = std::max(amax, std::fabs(row[p]));
      }
      if (!finite)
        throw ArgumentError("PackedInt8::quantize: output channel " + std::to_string(j) + " holds a NaN or an infinity");
      s[std::size_t(j)] = int8_weight_scale(amax);
      for (int p = 0; p < k; ++p) q[std::size_t(j) * k + p] = int8_quantize(row[p], s[std::size_t(j)]);
    }
    assign(k, n, q, s);
  }

  /// Takes quantized values as they are: q (n, k) row-major, one row per output channel, and a
  /// scale per channel (finite, > 0).
  void assign(int k, int n, std::span<const std::int8_t> q, std::span<const float> scales) {
    check(k, n, "assign");
    if (q.size() != std::size_t(k) * std::size_t(n) || scales.size() != std::size_t(n))
      throw ShapeError("PackedInt8::assign: " + std::to_string(q.size()) + " values and " + std::to_string(scales.size()) +
                       " scales for (" + std::to_string(n) + ", " + std::to_string(k) + ")");
    for (std::size_t j = 0; j < scales.size(); ++j)
      if (!(scales[j] > 0.f) || !std::isfinite(scales[j]))
        throw ArgumentError("PackedInt8::assign: the scale of output channel " + std::to_string(j) + " is " +
                            std::to_string(scales[j]) + " (it must be finite and positive)");
    k_ = k;
    n_ = n;
    kq_ = (k + 3) / 4;
    panels_ = (n + kPanel - 1) / kPanel;
    scale_.assign(scales.begin(), scales.end());
    colsum_.assign(std::size_t(n), 0);
    data_.assign(std::size_t(panels_) * std::size_t(kq_) * 4 * kPanel, 0);
    for (int j = 0; j < n; ++j) {
      std::int32_t sum = 0;
      for (int p = 0; p < k; ++p) {
        const std::int8_t v = q[std::size_t(j) * k + p];
        sum += v;
        data_[offset(p, j)] = v;
      }
      colsum_[std::size_t(j)] = sum;
    }
    // Without vpdpbusd the FP32 route multiplies the values as floats: kept ready, row-major (k, n).
    wf_.clear();
    if (!int8_native_now()) {
      wf_.resize(std::size_t(k) * std::size_t(n));
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p) wf_[std::size_t(p) * n + j] = float(q[std::size_t(j) * k + p]);
    }
  }

  int k() const { return k_; }
  int n() const { return n_; }
  bool empty() const { return k_ == 0 || n_ == 0; }
  /// The quantized value of W(p, j) (row p of the (k, n) operand, column j).
  std::int8_t at(int p, int j) const { return data_[offset(p, j)]; }
  const float* scales() const { return scale_.data(); }
  /// The values as floats, row-major (k, n), when packed on a CPU level without vpdpbusd (the FP32
  /// route's operand); nullptr otherwise.
  const float* float_values() const { return wf_.empty() ? nullptr : wf_.data(); }
  const std::int32_t* column_sums() const { return colsum_.data(); }
  /// Panel jp (columns [32 jp, 32 jp + 32)).
  const std::int8_t* panel(int jp) const { return data_.data() + std::size_t(jp) * std::size_t(kq_) * 4 * kPanel; }
  /// The values as (n, k), a row per output channel (the layout assign() takes).
  std::vector<std::int8_t> values() const {
    std::vector<std::int8_t> q(std::size_t(k_) * std::size_t(n_));
    for (int j = 0; j < n_; ++j)
      for (int p = 0; p < k_; ++p) q[std::size_t(j) * k_ + p] = at(p, j);
    return q;
  }
  /// Bytes held: the values (padded), scales and sums, and on a level without vpdpbusd the values
  /// as floats (the FP32 route's operand).
  std::size_t bytes() const {
    return data_.size() + scale_.size() * sizeof(float) + colsum_.size() * sizeof(std::int32_t) + wf_.size() * sizeof(float);
  }

 private:
  static void check(int k, int n, const char* who) {
    if (k < 0 || n < 0)
      throw ArgumentError(std::string("PackedInt8::") + who + ": negative extent (k " + std::to_string(k) + ", n " + std::to_string(n) + ")");
    if (k > kMaxK)
      throw ArgumentError(std::string("PackedInt8::") + who + ": k = " + std::to_string(k) + " exceeds " + std::to_string(kMaxK) +
                          ", the longest product whose int32 sums cannot overflow (255 x 128 per term)");
  }
  std::size_t offset(int p, int j) const {
    return (std::size_t(j / kPanel) * std::size_t(kq_) + std::size_t(p / 4)) * 4 * kPanel + std::size_t(j % kPanel) * 4 + std::size_t(p % 4);
  }

  int k_ = 0, n_ = 0, kq_ = 0, panels_ = 0;
  std::vector<std::int8_t, attn::detail::PoolAllocator<std::int8_t>> data_;
  std::vector<float> scale_;
  std::vector<std::int32_t> colsum_;
  std::vector<float, attn::detail::PoolAllocator<float>> wf_;
};

namespace int8_detail {

using detail::PoolAllocator;

using packed_detail::notice_once;
using packed_detail::panel_masks;
using packed_detail::scratch;

/// Row i's quantization: scale (NaN for a row holding a non-finite value) and zero point.
struct RowQuant {
  float scale;
  std::int32_t zero;
};

/// The range [lo, hi] of a row (with 0 in it) to its parameters. Finite ends so far apart that
/// their difference overflows a float (-FLT_MAX and FLT_MAX) take the range in double. A range too
/// small for its scale to be a normal float with a finite inverse (below about 3e-36) is quantized
/// as an all-zero row: its values are within that range of 0.
inline RowQuant row_params(float lo, float hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {std::numeric_limits<float>::quiet_NaN(), 0};
  const float range = hi - lo;
  const float scale = std::isfinite(range) ? range / 255.f : float((double(hi) - double(lo)) / 255.0);
  if (!(scale >= FLT_MIN) || !std::isfinite(1.f / scale)) return {1.f, 0};  // an all-zero (or all but zero) row
  const float z = std::nearbyint(-lo / scale);  // |lo| <= 255 scale
  return {scale, z < 0.f ? 0 : z > 255.f ? 255 : std::int32_t(z)};
}

inline std::uint8_t quantize_u8(float x, float inv, std::int32_t zero) {
  const float r = std::nearbyint(x * inv) + float(zero);
  return static_cast<std::uint8_t>(r < 0.f ? 0 : r > 255.f ? 255 : int(r));
}

/// Quantizes rows [i0, i1) of A (m, k) into out (row i at (i - i0) ldq, zero past k).
inline void quantize_rows_scalar(int i0, int i1, int k, const float* a, int lda, int ldq, std::uint8_t* out, RowQuant* rq) {
  for (int i = i0; i < i1; ++i) {
    const float* x = a + std::size_t(i) * lda;
    float lo = 0.f, hi = 0.f;
    bool finite = true;
    for (int p = 0; p < k; ++p) {
      finite = finite && std::isfinite(x[p]);
      lo = std::min(lo, x[p]);
      hi = std::max(hi, x[p]);
    }
    RowQuant q = finite ? row_params(lo, hi) : RowQuant{std::numeric_limits<float>::quiet_NaN(), 0};
    rq[i - i0] = q;
    std::uint8_t* dst = out + std::size_t(i - i0) * ldq;
    std::memset(dst, 0, std::size_t(ldq));
    if (!std::isnan(q.scale)) {
      const float inv = 1.f / q.scale;
      for (int p = 0; p < k; ++p) dst[p] = quantize_u8(x[p], inv, q.zero);
    }
  }
}

/// The reference path: the integers as floats through the FP32 GEMM, then the scales.
template <class F = float>
void gemm_int8_fp32(int m, int n, int k, const float* a, int lda, const PackedInt8& w, float beta, float* c, int ldc) {
  static std::atomic<bool> said{false};
  notice_once(said, "int8 products without AVX512-VNNI at this level (or ATTN_ISA below avx512): the int8 values through the "
                    "FP32 GEMM, at FP32's speed");
  thread_local std::vector<float, PoolAllocator<float>> af, wf, cf;
  thread_local std::vector<std::uint8_t, PoolAllocator<std::uint8_t>> aq;
  thread_local std::vector<RowQuant, PoolAllocator<RowQuant>> rq;
  std::uint8_t* q = scratch(aq, std::size_t(m) * std::size_t(k));
  RowQuant* r = scratch(rq, std::size_t(m));
  quantize_rows_scalar(0, m, k, a, lda, k, q, r);
  float* fa = scratch(af, std::size_t(m) * std::size_t(k));
  float* fc = scratch(cf, std::size_t(m) * std::size_t(n));
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) fa[std::size_t(i) * k + p] = float(std::int32_t(q[std::size_t(i) * k + p]) - r[i].zero);
  const float* fw = w.float_values();
  if (!fw) {  // packed where vpdpbusd ran, run below it (a lowered level)
    float* u = scratch(wf, std::size_t(k) * std::size_t(n));
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) u[std::size_t(p) * n + j] = float(w.at(p, j));
    fw = u;
  }
  cpu::gemm<F>(Trans::no, Trans::no, m, n, k, 1.f, fa, k, fw, n, 0.f, fc, n);
  const float* s = w.scales();
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float& o = c[std::size_t(i) * ldc + j];
      const float v = r[i].scale * s[j] * fc[std::size_t(i) * n + j];
      o = beta == 0.f ? v : beta * o + v;
    }
}

#if defined(ATTN_GEMM_INT8_AVX512)
#define ATTN_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")))

/// quantize_rows_scalar on AVX-512: the same parameters and values (round half to even, as the
/// default MXCSR rounds).
ATTN_TARGET_AVX512_VNNI inline void quantize_rows_avx512(int i0, int i1, int k, const float* a, int lda, int ldq, std::uint8_t* out,
                                                         RowQuant* rq) {
  for (int i = i0; i < i1; ++i) {
    const float* x = a + std::size_t(i) * lda;
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    __m512 bad = _mm512_setzero_ps();  // x - x: NaN where x is not finite
    int p = 0;
    for (; p + 16 <= k; p += 16) {
      const __m512 v = _mm512_loadu_ps(x + p);
      lo = _mm512_min_ps(lo, v);
      hi = _mm512_max_ps(hi, v);
      bad = _mm512_add_ps(bad, _mm512_sub_ps(v, v));
    }
    if (p < k) {
      const __mmask16 mk = __mmask16((1u << (k - p)) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(mk, x + p);
      lo = _mm512_min_ps(lo, v);
      hi = _mm512_max_ps(hi, v);
      bad = _mm512_add_ps(bad, _mm512_sub_ps(v, v));
    }
    const bool finite = _mm512_cmp_ps_mask(bad, bad, _CMP_UNORD_Q) == 0;
    RowQuant q = finite ? row_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
                        : RowQuant{std::numeric_limits<float>::quiet_NaN(), 0};
    rq[i - i0] = q;
    std::uint8_t* dst = out + std::size_t(i - i0) * ldq;
    if (std::isnan(q.scale)) {
      std::memset(dst, 0, std::size_t(ldq));
      continue;
    }
    const __m512 inv = _mm512_set1_ps(1.f / q.scale);
    const __m512i z = _mm512_set1_epi32(q.zero), zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
    for (p = 0; p < ldq; p += 16) {
      const int left = std::min(16, k - p);
      const __mmask16 mk = left >= 16 ? __mmask16(0xffffu) : left > 0 ? __mmask16((1u << left) - 1u) : __mmask16(0);
      __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + p), inv)), z);
      v = _mm512_maskz_min_epi32(mk, _mm512_max_epi32(v, zero), top);  // zero past k
      const int store = std::min(16, ldq - p);
      _mm_mask_storeu_epi8(dst + p, __mmask16(store >= 16 ? 0xffffu : (1u << store) - 1u), _mm512_cvtepi32_epi8(v));
    }
  }
}

/// acc += the four u8 x s8 products of a and b per int32 lane (vpdpbusd), as inline assembly: GCC 12
/// copies every accumulator around the intrinsic's call (twice the instructions, and spills at
/// 16 accumulators), which halves the kernel's rate.
ATTN_TARGET_AVX512_VNNI inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
#if defined(__GNUC__) && !defined(__clang__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
#else
  acc = _mm512_dpbusd_epi32(acc, a, b);
#endif
}

/// C block (R, 32), columns masked by m0, m1: = scale_i s_j (sum - z_i colsum_j) + beta C, over kq
/// quads; row r of A's quads at a + r lda (bytes).
template <int R>
ATTN_TARGET_AVX512_VNNI inline void micro_int8(int kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b, const RowQuant* rq,
                                               const float* ws, const std::int32_t* wsum, float beta, float* c, std::size_t ldc,
                                               __mmask16 m0, __mmask16 m1) {
  __m512i s[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm512_setzero_si512();
  for (int p = 0; p < kq; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + std::size_t(p) * 128);
    const __m512i b1 = _mm512_loadu_si512(b + std::size_t(p) * 128 + 64);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      std::int32_t quad;
      std::memcpy(&quad, a + std::size_t(r) * lda + std::size_t(p) * 4, 4);
      const __m512i av = _mm512_set1_epi32(quad);
      dpbusd(s[r][0], av, b0);
      dpbusd(s[r][1], av, b1);
    }
  }
  const __m512 ws0 = _mm512_maskz_loadu_ps(m0, ws), ws1 = _mm512_maskz_loadu_ps(m1, ws + 16);
  const __m512i cs0 = _mm512_maskz_loadu_epi32(m0, wsum), cs1 = _mm512_maskz_loadu_epi32(m1, wsum + 16);
  const __m512 be = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + std::size_t(r) * ldc;
    const __m512i z = _mm512_set1_epi32(rq[r].zero);
    const __m512 sa = _mm512_set1_ps(rq[r].scale);
    __m512 o0 = _mm512_mul_ps(_mm512_mul_ps(sa, ws0), _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][0], _mm512_mullo_epi32(z, cs0))));
    __m512 o1 = _mm512_mul_ps(_mm512_mul_ps(sa, ws1), _mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][1], _mm512_mullo_epi32(z, cs1))));
    if (beta != 0.f) {
      o0 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m0, cr), o0);
      o1 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m1, cr + 16), o1);
    }
    _mm512_mask_storeu_ps(cr, m0, o0);
    _mm512_mask_storeu_ps(cr + 16, m1, o1);
  }
}

inline constexpr int kInt8Rows = 8;        // rows of C per kernel call (16 accumulators)
inline constexpr int kInt8RowBlock = 96;   // rows of A per task
inline constexpr int kInt8PanelGroup = 8;  // panels of W visited together

ATTN_TARGET_AVX512_VNNI inline void rows_int8(int rows, int kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
                                              const RowQuant* rq, const float* ws, const std::int32_t* wsum, float beta, float* c,
                                              std::size_t ldc, __mmask16 m0, __mmask16 m1) {
  static_assert(kInt8Rows == 8);
  int i = 0;
  for (; i + kInt8Rows <= rows; i += kInt8Rows)
    micro_int8<kInt8Rows>(kq, a + std::size_t(i) * lda, lda, b, rq + i, ws, wsum, beta, c + std::size_t(i) * ldc, ldc, m0, m1);
  const std::uint8_t* at = a + std::size_t(i) * lda;
  float* ct = c + std::size_t(i) * ldc;
  switch (rows - i) {
    case 7: micro_int8<7>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 6: micro_int8<6>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 5: micro_int8<5>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 4: micro_int8<4>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 3: micro_int8<3>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 2: micro_int8<2>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    case 1: micro_int8<1>(kq, at, lda, b, rq + i, ws, wsum, beta, ct, ldc, m0, m1); break;
    default: break;
  }
}

ATTN_TARGET_AVX512_VNNI inline void gemm_int8_vnni(int m, int n, int k, const float* a, int lda, const PackedInt8& w, float beta,
                                                   float* c, int ldc) {
  thread_local std::vector<std::uint8_t, PoolAllocator<std::uint8_t>> aq;
  thread_local std::vector<RowQuant, PoolAllocator<RowQuant>> rqs;
  const int kq = (k + 3) / 4, ldq = 4 * kq, panels = (n + PackedInt8::kPanel - 1) / PackedInt8::kPanel;
  const int blocks = (m + kInt8RowBlock - 1) / kInt8RowBlock;
  const int groups = (panels + kInt8PanelGroup - 1) / kInt8PanelGroup, group = (panels + groups - 1) / groups;
  std::uint8_t* q = scratch(aq, std::size_t(m) * std::size_t(ldq));
  RowQuant* rq = scratch(rqs, std::size_t(m));
  const double ops = 2.0 * m * n * k;
#if defined(_OPENMP)
#pragma omp parallel if (ops > 4.0e6)
#endif
  {
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
    for (int blk = 0; blk < blocks; ++blk) {
      const int i0 = blk * kInt8RowBlock, i1 = std::min(m, i0 + kInt8RowBlock);
      quantize_rows_avx512(i0, i1, k, a, lda, ldq, q + std::size_t(i0) * ldq, rq + i0);
    }
#if defined(_OPENMP)
#pragma omp for collapse(3) schedule(static)
#endif
    for (int grp = 0; grp < groups; ++grp) {
      for (int blk = 0; blk < blocks; ++blk) {
        for (int jj = 0; jj < group; ++jj) {
          const int jp = grp * group + jj;
          if (jp >= panels) continue;
          const int i0 = blk * kInt8RowBlock, rows = std::min(m, i0 + kInt8RowBlock) - i0;
          const int j0 = jp * PackedInt8::kPanel, cols = std::min(PackedInt8::kPanel, n - j0);
          const auto mk = panel_masks(cols);
          rows_int8(rows, kq, q + std::size_t(i0) * ldq, std::size_t(ldq), w.panel(jp), rq + i0, w.scales() + j0, w.column_sums() + j0,
                    beta, c + std::size_t(i0) * ldc + j0, std::size_t(ldc), mk.lo, mk.hi);
        }
      }
    }
  }
}
#endif

}  // namespace int8_detail

/// Whether gemm_int8 runs its sums on vpdpbusd now (AVX512-VNNI at cpu::isa() >= avx512), rather
/// than through the FP32 GEMM.
inline bool int8_native() { return int8_native_now(); }

/// C (m, n) = A W + beta C: A (m, k) float with row stride lda, quantized per row; W (k, n) packed
/// int8. beta == 0 leaves C unread. See the top of this file for the arithmetic.
/// A template (F is float) only so that a translation unit that never calls it does not compile the
/// FP32 GEMM it falls back on: as an inline function it would instantiate cpu::gemm<float> in every
/// unit that includes attn (2-3 s of each, header-only).
template <class F = float>
void gemm_int8(int m, int n, int k, const float* a, int lda, const PackedInt8& w, float beta, float* c, int ldc) {
  static_assert(std::is_same_v<F, float>, "gemm_int8: F is float");
  if (w.k() != k || w.n() != n)
    throw ShapeError("gemm_int8: W is packed (" + std::to_string(w.k()) + ", " + std::to_string(w.n()) + "), the product needs (" +
                     std::to_string(k) + ", " + std::to_string(n) + ")");
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[std::size_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * c[std::size_t(i) * ldc + j];
    return;
  }
#if defined(ATTN_GEMM_INT8_AVX512)
  if (int8_native()) return int8_detail::gemm_int8_vnni(m, n, k, a, lda, w, beta, c, ldc);
#endif
  int8_detail::gemm_int8_fp32<F>(m, n, k, a, lda, w, beta, c, ldc);
}

/// gemm_int8's arithmetic written out with int32 sums, one element at a time: the reference the
/// kernels are tested against.
inline void gemm_int8_reference(int m, int n, int k, const float* a, int lda, const PackedInt8& w, float beta, float* c, int ldc) {
  std::vector<std::uint8_t> q(std::size_t(std::max(k, 1)));
  for (int i = 0; i < m; ++i) {
    int8_detail::RowQuant rq{};
    int8_detail::quantize_rows_scalar(i, i + 1, k, a, lda, std::max(k, 1), q.data(), &rq);
    for (int j = 0; j < n; ++j) {
      std::int32_t sum = 0;
      for (int p = 0; p < k; ++p) sum += (std::int32_t(q[std::size_t(p)]) - rq.zero) * std::int32_t(w.at(p, j));
      float& o = c[std::size_t(i) * ldc + j];
      const float v = rq.scale * w.scales()[j] * float(sum);
      o = beta == 0.f ? v : beta * o + v;
    }
  }
}

}  // namespace attn::kernels
