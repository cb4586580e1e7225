// SPDX-License-Identifier: MIT
// The CPU's bf16 GEMM: C (m, n) = alpha op(A) B + beta C with A and C in float, B packed once in
// bfloat16 (a layer's weights), A rounded to bfloat16 as it is packed, and every product summed in
// float. At the avx512_bf16 level (cpu::isa()) the products run on vdpbf16ps, two bf16 products per
// float lane and instruction, twice the FP32 FMA's rate; below it the same rounded operands are
// multiplied by the FP32 GEMM (cpu::gemm), so every level computes the same rounded product up to
// float summation order. Packed below avx512_bf16, B is kept as rounded floats (the FP32 route's
// operand, ready for every call) instead of in panels.
//   attn::kernels::PackedBf16 w;
//   w.pack(Trans::yes, in, out, weight, in);   // B = W^T (in, out) of a Linear's W (out, in)
//   attn::kernels::gemm_bf16(Trans::no, rows, out, in, 1.f, x, in, w, 0.f, y, out);   // y = x W^T
//
// Layout of a packed B (k, n): panels of 32 columns, the last one padded with zeros; in a panel, for
// each pair of rows (2p, 2p + 1) of B (the last one padded when k is odd), 64 bf16 in two halves of
// 16 columns, each column's two values adjacent: the operand vdpbf16ps takes, one 64-byte vector per
// half. The kernel holds an R x 32 block of C in 2R registers and, per pair of rows, broadcasts one
// (a[i][2p], a[i][2p+1]) pair of A per row.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/bf16.hpp"
#include "../../core/error.hpp"
#include "../../core/pool.hpp"
#include "../cpu.hpp"
#include "gemm.hpp"
#include "isa.hpp"
#include "packed_gemm_util.hpp"

#if defined(ATTN_CPU_X86)
#include <immintrin.h>
#define ATTN_GEMM_BF16_AVX512 1
#endif

namespace attn::kernels {

#if defined(ATTN_GEMM_BF16_AVX512)
#define ATTN_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")))

namespace bf16_detail {

/// Sixteen pairs (lo[j], hi[j]) as bf16, lo in the low half of each 32-bit lane.
ATTN_TARGET_AVX512_BF16 inline __m512i interleave_bf16(__m512 lo, __m512 hi) {
  alignas(64) static constexpr std::uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                         8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(order), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/// PackedBf16::pack's vector path: op(B) (k, n) into `out` (zeroed beforehand), kp row pairs per panel.
ATTN_TARGET_AVX512_BF16 inline void pack_b_avx512(Trans tb, int k, int n, const float* b, int ldb, int kp,
                                                   std::uint16_t* out) {
  const int panels = (n + 31) / 32;
  if (tb == Trans::no) {  // B (k, n): rows 2p and 2p + 1, sixteen columns at a time
    for (int jp = 0; jp < panels; ++jp)
      for (int h = 0; h < 2; ++h) {
        const int j = jp * 32 + h * 16, cols = std::min(16, n - j);
        if (cols <= 0) continue;
        const __mmask16 mc = __mmask16(cols == 16 ? 0xffffu : (1u << cols) - 1u);
        std::uint16_t* dst = out + std::size_t(jp) * std::size_t(kp) * 64 + h * 32;
        for (int p = 0; p < kp; ++p) {
          const __m512 lo = _mm512_maskz_loadu_ps(mc, b + std::size_t(2 * p) * ldb + j);
          const __m512 hi = 2 * p + 1 < k ? _mm512_maskz_loadu_ps(mc, b + std::size_t(2 * p + 1) * ldb + j) : _mm512_setzero_ps();
          _mm512_storeu_si512(dst + std::size_t(p) * 64, interleave_bf16(lo, hi));
        }
      }
  } else {  // B = W^T, W (n, k): row j of W holds column j's pairs side by side
    alignas(64) std::uint32_t tmp[16];
    for (int j = 0; j < n; ++j) {
      const float* src = b + std::size_t(j) * ldb;
      std::uint16_t* col = out + std::size_t(j / 32) * std::size_t(kp) * 64 + ((j % 32) / 16) * 32 + (j % 16) * 2;
      for (int r = 0; r < k; r += 32) {
        const int left = std::min(32, k - r);
        const __mmask16 ml = __mmask16(left >= 16 ? 0xffffu : (1u << left) - 1u);
        const __mmask16 mh = __mmask16(left >= 32 ? 0xffffu : left > 16 ? (1u << (left - 16)) - 1u : 0u);
        const __m512 lo = _mm512_maskz_loadu_ps(ml, src + r), hi = _mm512_maskz_loadu_ps(mh, src + r + 16);
        _mm512_store_si512(tmp, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        const int pairs = (left + 1) / 2;
        for (int q = 0; q < pairs; ++q) std::memcpy(col + std::size_t(r / 2 + q) * 64, tmp + q, 4);
      }
    }
  }
}

}  // namespace bf16_detail
#endif

/// A (k, n) operand of gemm_bf16 in bfloat16, in the layout described at the top of this file.
/// Packing rounds each value to the nearest bfloat16 (ties to even).
class PackedBf16 {
 public:
  static constexpr int kPanel = 32;

  PackedBf16() = default;

  /// Packs op(B) (k, n): B stored (k, n) with row stride ldb when tb is Trans::no, (n, k) when
  /// Trans::yes (then B = W^T for a weight W stored (n, k), as nn::Linear keeps it).
  void pack(Trans tb, int k, int n, const float* b, int ldb) {
    if (k < 0 || n < 0) throw ArgumentError("PackedBf16::pack: negative extent (k " + std::to_string(k) + ", n " + std::to_string(n) + ")");
    k_ = k;
    n_ = n;
    kp_ = (k + 1) / 2;
    panels_ = (n + kPanel - 1) / kPanel;
    if (cpu::isa() < Isa::avx512_bf16) {
      // The FP32 route multiplies B as floats: B rounded, row-major (k, n), and no panels.
      data_.clear();
      rounded_.resize(std::size_t(k) * std::size_t(n));
      // Rounded in B's own layout ((k, n), or (n, k) under Trans::yes), read by the GEMM as stored.
      rounded_trans_ = tb;
      const int rows = tb == Trans::no ? k : n, cols = tb == Trans::no ? n : k;
      for (int r = 0; r < rows; ++r) round_row(b + std::size_t(r) * ldb, cols, rounded_.data() + std::size_t(r) * cols);
      return;
    }
    rounded_.clear();
    data_.assign(std::size_t(panels_) * std::size_t(kp_) * 2 * kPanel, 0);
    if (data_.empty()) return;  // k or n is 0
#if defined(ATTN_GEMM_BF16_AVX512)
    if (cpu::isa() >= Isa::avx512_bf16) return bf16_detail::pack_b_avx512(tb, k, n, b, ldb, kp_, data_.data());
#endif
    const bool t = tb == Trans::yes;
    for (int jp = 0; jp < panels_; ++jp) {
      std::uint16_t* panel = data_.data() + std::size_t(jp) * std::size_t(kp_) * 2 * kPanel;
      const int j0 = jp * kPanel, jn = std::min(kPanel, n - j0);
      for (int p = 0; p < kp_; ++p) {
        std::uint16_t* row = panel + std::size_t(p) * 2 * kPanel;
        for (int jj = 0; jj < jn; ++jj) {
          const int j = j0 + jj;
          std::uint16_t* slot = row + (jj / 16) * 32 + (jj % 16) * 2;
          for (int h = 0; h < 2; ++h) {
            const int r = 2 * p + h;
            if (r < k) slot[h] = bf16_bits(t ? b[std::size_t(j) * ldb + r] : b[std::size_t(r) * ldb + j]);
          }
        }
      }
    }
  }

  /// out[0, n) = x[0, n) rounded to bf16.
  static void round_row(const float* x, int n, float* out) {
    for (int j = 0; j < n; ++j) out[j] = bf16_round(x[j]);
  }

  int k() const { return k_; }
  int n() const { return n_; }
  bool empty() const { return k_ == 0 || n_ == 0; }
  /// Whether B is in vdpbf16ps's panels (packed at avx512_bf16), rather than as rounded floats.
  bool has_panels() const { return !data_.empty(); }
  /// B rounded to bf16 values as floats in the layout it was packed from, when packed below
  /// avx512_bf16 (the FP32 route's operand): (k, n) row-major, or (n, k) when rounded_trans() is
  /// Trans::yes; nullptr otherwise.
  const float* rounded() const { return rounded_.empty() ? nullptr : rounded_.data(); }
  Trans rounded_trans() const { return rounded_trans_; }
  /// Panel jp (columns [32 jp, 32 jp + 32)) from row pair p on.
  const std::uint16_t* panel(int jp, int p = 0) const {
    return data_.data() + (std::size_t(jp) * std::size_t(kp_) + std::size_t(p)) * 2 * kPanel;
  }
  /// Element (r, j) of the packed B, as a float.
  float at(int r, int j) const {
    if (!rounded_.empty()) return rounded_trans_ == Trans::no ? rounded_[std::size_t(r) * n_ + j] : rounded_[std::size_t(j) * k_ + r];
    const std::uint16_t* row = panel(j / kPanel, r / 2);
    const int jj = j % kPanel;
    return bf16_value(row[(jj / 16) * 32 + (jj % 16) * 2 + (r % 2)]);
  }
  /// B back as a row-major float (k, n) matrix of its bf16 values.
  void unpack(float* out, int ldo) const {
    for (int r = 0; r < k_; ++r)
      for (int j = 0; j < n_; ++j) out[std::size_t(r) * ldo + j] = at(r, j);
  }

 private:
  int k_ = 0, n_ = 0, kp_ = 0, panels_ = 0;
  std::vector<std::uint16_t, attn::detail::PoolAllocator<std::uint16_t>> data_;
  std::vector<float, attn::detail::PoolAllocator<float>> rounded_;
  Trans rounded_trans_ = Trans::no;
};

namespace bf16_detail {

using detail::PoolAllocator;

using packed_detail::notice_once;
using packed_detail::panel_masks;
using packed_detail::scratch;

/// The reference path: op(A) and B rounded to bf16, multiplied by the FP32 GEMM.
template <class F = float>
void gemm_bf16_fp32(Trans ta, int m, int n, int k, float alpha, const float* a, int lda, const PackedBf16& b,
                    float beta, float* c, int ldc) {
  static std::atomic<bool> said{false};
  notice_once(said, "bf16 products below the avx512_bf16 level (no AVX512-BF16, or ATTN_ISA): bf16-rounded operands through "
                    "the FP32 GEMM, at FP32's speed");
  thread_local std::vector<float, PoolAllocator<float>> ar, br;
  // A rounded in its own layout ((m, k), or (k, m) under Trans::yes), the GEMM reading it as stored.
  const int rows = ta == Trans::no ? m : k, cols = ta == Trans::no ? k : m;
  float* ra = scratch(ar, std::size_t(m) * std::size_t(k));
  for (int r = 0; r < rows; ++r) PackedBf16::round_row(a + std::size_t(r) * lda, cols, ra + std::size_t(r) * cols);
  const float* rb = b.rounded();
  Trans tb = b.rounded_trans();
  if (!rb) {  // packed at avx512_bf16, run below it (a lowered level): unpack the panels
    float* u = scratch(br, std::size_t(k) * std::size_t(n));
    b.unpack(u, n);
    rb = u;
    tb = Trans::no;
  }
  cpu::gemm<F>(ta, tb, m, n, k, alpha, ra, cols, rb, tb == Trans::no ? n : k, beta, c, ldc);
}

#if defined(ATTN_GEMM_BF16_AVX512)

/// Rows [i0, i1) of op(A), row pairs [p0, p0 + kpb), as bf16 pairs (a[i][2p], a[i][2p + 1]), the low
/// half first, zero past k. A stored (m, k) packs row by row, pair (i, p) at (i - i0) kpb + (p - p0); A
/// stored transposed packs pair by pair, at (p - p0) (i1 - i0) + (i - i0): either way contiguous
/// loads and stores, the kernel reading both through its strides (a_strides).
ATTN_TARGET_AVX512_BF16 inline void pack_a_bf16(Trans ta, int i0, int i1, int p0, int kpb, int k, const float* a, int lda,
                                                 std::uint32_t* out) {
  const int c0 = 2 * p0, c1 = std::min(k, 2 * (p0 + kpb));  // columns of op(A) in this slab
  if (ta == Trans::no) {
    for (int i = i0; i < i1; ++i) {
      const float* src = a + std::size_t(i) * lda;
      std::uint32_t* dst = out + std::size_t(i - i0) * kpb;
      int c = c0;
      for (; c + 32 <= c1; c += 32) {
        const __m512 lo = _mm512_loadu_ps(src + c), hi = _mm512_loadu_ps(src + c + 16);
        _mm512_storeu_si512(dst + (c - c0) / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
      if (c < c1) {
        const int left = c1 - c;  // 1..31
        const __mmask16 ml = __mmask16(left >= 16 ? 0xffffu : (1u << left) - 1u);
        const __mmask16 mh = __mmask16(left > 16 ? (1u << (left - 16)) - 1u : 0u);
        const __m512 lo = _mm512_maskz_loadu_ps(ml, src + c), hi = _mm512_maskz_loadu_ps(mh, src + c + 16);
        const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        const int words = (left + 1) / 2;
        _mm512_mask_storeu_epi32(dst + (c - c0) / 2, __mmask16(words >= 16 ? 0xffffu : (1u << words) - 1u), v);
        c += 2 * words;
      }
      for (int w = (c - c0) / 2; w < kpb; ++w) dst[w] = 0;
    }
  } else {
    // op(A)(i, c) = a[c * lda + i]: 16 values of i from each of the pair's two rows, interleaved.
    const int rows = i1 - i0;
    for (int p = p0; p < p0 + kpb; ++p) {
      const int c = 2 * p;
      std::uint32_t* dst = out + std::size_t(p - p0) * rows;
      for (int i = i0; i < i1; i += 16) {
        const int n = std::min(16, i1 - i);
        const __mmask16 mr = __mmask16(n == 16 ? 0xffffu : (1u << n) - 1u);
        const __m512 lo = c < k ? _mm512_maskz_loadu_ps(mr, a + std::size_t(c) * lda + i) : _mm512_setzero_ps();
        const __m512 hi = c + 1 < k ? _mm512_maskz_loadu_ps(mr, a + std::size_t(c + 1) * lda + i) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(dst + (i - i0), mr, interleave_bf16(lo, hi));
      }
    }
  }
}

/// C block (R, 32) (columns masked by m0, m1) = alpha A_block B_panel + beta C, over kpb pairs; pair
/// (r, p) of A at a[r ai + p ap], b the panel from the slab's first pair on.
template <int R>
ATTN_TARGET_AVX512_BF16 inline void micro_bf16(int kpb, const std::uint32_t* a, std::size_t ai, std::size_t ap,
                                                const std::uint16_t* b, float alpha, float beta, float* c, std::size_t ldc,
                                                __mmask16 m0, __mmask16 m1) {
  __m512 s[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm512_setzero_ps();
  for (int p = 0; p < kpb; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + std::size_t(p) * 64);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + std::size_t(p) * 64 + 32);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[std::size_t(r) * ai + std::size_t(p) * ap]));
      s[r][0] = _mm512_dpbf16_ps(s[r][0], av, b0);
      s[r][1] = _mm512_dpbf16_ps(s[r][1], av, b1);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + std::size_t(r) * ldc;
    __m512 o0 = _mm512_mul_ps(al, s[r][0]), o1 = _mm512_mul_ps(al, s[r][1]);
    if (beta != 0.f) {
      o0 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m0, cr), o0);
      o1 = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m1, cr + 16), o1);
    }
    _mm512_mask_storeu_ps(cr, m0, o0);
    _mm512_mask_storeu_ps(cr + 16, m1, o1);
  }
}

inline constexpr int kBf16Rows = 12;        // rows of C per kernel call (24 accumulators)
inline constexpr int kBf16SlabPairs = 256;  // row pairs of B per slab (512 values of k)
inline constexpr int kBf16RowBlock = 96;    // rows of A per task: 96 x 256 pairs, 96 KB
inline constexpr int kBf16PanelGroup = 8;   // panels of B visited together: 8 x 256 pairs x 128 B, 256 KB

template <int R>
ATTN_TARGET_AVX512_BF16 inline void rows_bf16(int rows, int kpb, const std::uint32_t* a, std::size_t ai, std::size_t ap,
                                               const std::uint16_t* b, float alpha, float beta, float* c, std::size_t ldc,
                                               __mmask16 m0, __mmask16 m1) {
  int i = 0;
  for (; i + R <= rows; i += R)
    micro_bf16<R>(kpb, a + std::size_t(i) * ai, ai, ap, b, alpha, beta, c + std::size_t(i) * ldc, ldc, m0, m1);
  const std::uint32_t* at = a + std::size_t(i) * ai;
  float* ct = c + std::size_t(i) * ldc;
  switch (rows - i) {
    case 11: micro_bf16<11>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 10: micro_bf16<10>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 9: micro_bf16<9>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 8: micro_bf16<8>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 7: micro_bf16<7>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 6: micro_bf16<6>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 5: micro_bf16<5>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 4: micro_bf16<4>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 3: micro_bf16<3>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 2: micro_bf16<2>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    case 1: micro_bf16<1>(kpb, at, ai, ap, b, alpha, beta, ct, ldc, m0, m1); break;
    default: break;
  }
}

ATTN_TARGET_AVX512_BF16 inline void gemm_bf16_avx512(Trans ta, int m, int n, int k, float alpha, const float* a, int lda,
                                                      const PackedBf16& b, float beta, float* c, int ldc) {
  static_assert(kBf16Rows == 12);
  thread_local std::vector<std::uint32_t, PoolAllocator<std::uint32_t>> slab;
  const int kp = (k + 1) / 2, panels = (n + PackedBf16::kPanel - 1) / PackedBf16::kPanel;
  const int blocks = (m + kBf16RowBlock - 1) / kBf16RowBlock;
  // Panel groups of at most kBf16PanelGroup, as even as the count allows (few empty tasks).
  const int groups = (panels + kBf16PanelGroup - 1) / kBf16PanelGroup, group = (panels + groups - 1) / groups;
  const double flops = 2.0 * m * n * k;
  for (int p0 = 0; p0 < kp; p0 += kBf16SlabPairs) {
    const int kpb = std::min(kBf16SlabPairs, kp - p0);
    std::uint32_t* packed = scratch(slab, std::size_t(m) * kpb);
    const float slab_beta = p0 == 0 ? beta : 1.f;
#if defined(_OPENMP)
#pragma omp parallel if (flops > 2.0e6)
#endif
    {
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
      for (int blk = 0; blk < blocks; ++blk) {
        const int i0 = blk * kBf16RowBlock, i1 = std::min(m, i0 + kBf16RowBlock);
        pack_a_bf16(ta, i0, i1, p0, kpb, k, a, lda, packed + std::size_t(i0) * kpb);
      }
      // Groups of up to kBf16PanelGroup panels (their slab of B, 256 KB, stays in L2) outer, row blocks, then
      // the group's panels: each thread's tasks are consecutive, so its block of A is reused across
      // the group and the group's B across its row blocks.
#if defined(_OPENMP)
#pragma omp for collapse(3) schedule(static)
#endif
      for (int grp = 0; grp < groups; ++grp) {
        for (int blk = 0; blk < blocks; ++blk) {
          for (int jj = 0; jj < group; ++jj) {
            const int jp = grp * group + jj;
            if (jp >= panels) continue;
            const int i0 = blk * kBf16RowBlock, rows = std::min(m, i0 + kBf16RowBlock) - i0;
            const int j0 = jp * PackedBf16::kPanel, cols = std::min(PackedBf16::kPanel, n - j0);
            const auto mk = panel_masks(cols);
            const std::size_t ai = ta == Trans::no ? std::size_t(kpb) : 1, ap = ta == Trans::no ? 1 : std::size_t(rows);
            rows_bf16<kBf16Rows>(rows, kpb, packed + std::size_t(i0) * kpb, ai, ap, b.panel(jp, p0), alpha, slab_beta,
                                 c + std::size_t(i0) * ldc + j0, std::size_t(ldc), mk.lo, mk.hi);
          }
        }
      }
    }
  }
}
#endif

}  // namespace bf16_detail

/// Whether gemm_bf16 runs on vdpbf16ps now (cpu::isa() >= avx512_bf16), rather than through the FP32 GEMM.
inline bool bf16_native() {
#if defined(ATTN_GEMM_BF16_AVX512)
  return cpu::isa() >= Isa::avx512_bf16;
#else
  return false;
#endif
}

/// C (m, n) = alpha op(A) B + beta C, op(A) (m, k) rounded to bf16 (A stored (m, k) with row stride
/// lda, or (k, m) under Trans::yes), B (k, n) packed; products summed in float. beta == 0 leaves C
/// unread. At cpu::isa() >= avx512_bf16 on vdpbf16ps, below it through the FP32 GEMM.
/// A template (F is float) only so that a translation unit that never calls it does not compile the
/// FP32 GEMM it falls back on: as an inline function it would instantiate cpu::gemm<float> in every
/// unit that includes attn (2-3 s of each, header-only).
template <class F = float>
void gemm_bf16(Trans ta, int m, int n, int k, float alpha, const float* a, int lda, const PackedBf16& b, float beta,
               float* c, int ldc) {
  static_assert(std::is_same_v<F, float>, "gemm_bf16: F is float");
  if (b.k() != k || b.n() != n)
    throw ShapeError("gemm_bf16: B is packed (" + std::to_string(b.k()) + ", " + std::to_string(b.n()) + "), the product needs (" +
                     std::to_string(k) + ", " + std::to_string(n) + ")");
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[std::size_t(i) * ldc + j] = beta == 0.f ? 0.f : beta * c[std::size_t(i) * ldc + j];
    return;
  }
#if defined(ATTN_GEMM_BF16_AVX512)
  if (cpu::isa() >= Isa::avx512_bf16 && b.has_panels())
    return bf16_detail::gemm_bf16_avx512(ta, m, n, k, alpha, a, lda, b, beta, c, ldc);
#endif
  bf16_detail::gemm_bf16_fp32<F>(ta, m, n, k, alpha, a, lda, b, beta, c, ldc);
}

}  // namespace attn::kernels
