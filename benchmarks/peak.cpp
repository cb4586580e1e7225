// SPDX-License-Identifier: MIT
// One core's multiply-add rate for the element types a CPU inference path could use: FP32 at each
// ISA level the machine runs (SSE2 mulps + addps, AVX2 vfmadd231ps, AVX-512 vfmadd231ps on zmm),
// with AVX2 int16 pairs (vpmaddwd) and int8 (vpmaddubsw widened to int32 by vpmaddwd, the int8
// GEMM's inner step without AVX-VNNI), bf16 pairs with AVX512-BF16 (vdpbf16ps) and u8 x s8 quads
// with AVX512-VNNI (vpdpbusd). Each loop runs
// independent accumulator chains whose operands differ, so that the compiler can neither merge the
// chains nor share a product.
// Where int8 does not run well ahead of FP32, quantized GEMMs cannot raise the FLOP ceiling.
//   peak [--iters N]
#include <immintrin.h>

#include <attn/backend/cpu/isa.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
using clk = std::chrono::steady_clock;
volatile float sink_f;
volatile int sink_i;

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

/// Multiply-adds per second: eight FMA chains of eight lanes.
__attribute__((noinline)) double fp32(long n) {
  __m256 a = _mm256_set1_ps(1.0001f), b0 = _mm256_set1_ps(0.1f), b1 = _mm256_set1_ps(0.2f), b2 = _mm256_set1_ps(0.3f),
         b3 = _mm256_set1_ps(0.4f), b4 = _mm256_set1_ps(0.5f), b5 = _mm256_set1_ps(0.6f);
  __m256 c0 = _mm256_set1_ps(1), c1 = _mm256_set1_ps(2), c2 = _mm256_set1_ps(3), c3 = _mm256_set1_ps(4), c4 = _mm256_set1_ps(5),
         c5 = _mm256_set1_ps(6), c6 = _mm256_set1_ps(7), c7 = _mm256_set1_ps(8);
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+x"(a), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3), "+x"(b4), "+x"(b5));
    c0 = _mm256_fmadd_ps(a, b0, c0), c1 = _mm256_fmadd_ps(a, b1, c1), c2 = _mm256_fmadd_ps(a, b2, c2);
    c3 = _mm256_fmadd_ps(a, b3, c3), c4 = _mm256_fmadd_ps(a, b4, c4), c5 = _mm256_fmadd_ps(a, b5, c5);
    c6 = _mm256_fmadd_ps(b0, b1, c6), c7 = _mm256_fmadd_ps(b2, b3, c7);
  }
  const double s = seconds_since(t0);
  const __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                                 _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  sink_f = _mm256_cvtss_f32(t);
  return 8.0 * 8.0 * double(n) / s;
}

/// Multiply-adds per second at AVX-512: eight FMA chains of sixteen lanes.
__attribute__((noinline, target("avx512f"))) double fp32_avx512(long n) {
  __m512 a = _mm512_set1_ps(1.0001f), b0 = _mm512_set1_ps(0.1f), b1 = _mm512_set1_ps(0.2f), b2 = _mm512_set1_ps(0.3f),
         b3 = _mm512_set1_ps(0.4f), b4 = _mm512_set1_ps(0.5f), b5 = _mm512_set1_ps(0.6f);
  __m512 c0 = _mm512_set1_ps(1), c1 = _mm512_set1_ps(2), c2 = _mm512_set1_ps(3), c3 = _mm512_set1_ps(4), c4 = _mm512_set1_ps(5),
         c5 = _mm512_set1_ps(6), c6 = _mm512_set1_ps(7), c7 = _mm512_set1_ps(8);
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+v"(a), "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3), "+v"(b4), "+v"(b5));
    c0 = _mm512_fmadd_ps(a, b0, c0), c1 = _mm512_fmadd_ps(a, b1, c1), c2 = _mm512_fmadd_ps(a, b2, c2);
    c3 = _mm512_fmadd_ps(a, b3, c3), c4 = _mm512_fmadd_ps(a, b4, c4), c5 = _mm512_fmadd_ps(a, b5, c5);
    c6 = _mm512_fmadd_ps(b0, b1, c6), c7 = _mm512_fmadd_ps(b2, b3, c7);
  }
  const double s = seconds_since(t0);
  const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                 _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, t);
  sink_f = lanes[0] + lanes[15];
  return 8.0 * 16.0 * double(n) / s;
}

/// Multiply-adds per second at SSE2 (no FMA): eight multiply-then-add chains of four lanes.
__attribute__((noinline)) double fp32_sse(long n) {
  __m128 a = _mm_set1_ps(1.0001f), b = _mm_set1_ps(0.1f);
  __m128 c[8];
  for (int i = 0; i < 8; ++i) c[i] = _mm_set1_ps(float(i));
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+x"(a), "+x"(b));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) c[j] = _mm_add_ps(_mm_mul_ps(a, b), c[j]);
    asm volatile("" : "+x"(c[0]), "+x"(c[1]), "+x"(c[2]), "+x"(c[3]), "+x"(c[4]), "+x"(c[5]), "+x"(c[6]), "+x"(c[7]));
  }
  const double s = seconds_since(t0);
  sink_f = _mm_cvtss_f32(_mm_add_ps(_mm_add_ps(c[0], c[7]), c[3]));
  return 8.0 * 4.0 * double(n) / s;
}

/// bf16 multiply-adds per second at AVX512-BF16: twelve vdpbf16ps chains of sixteen lanes, two
/// products each (the instruction's latency is longer than the FMA's: eight chains do not fill it).
__attribute__((noinline, target("avx512f,avx512bf16"))) double bf16_avx512(long n) {
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b0 = (__m512bh)_mm512_set1_epi32(0x3dcd3dcd),
           b1 = (__m512bh)_mm512_set1_epi32(0x3e4d3e4d), b2 = (__m512bh)_mm512_set1_epi32(0x3e9a3e9a),
           b3 = (__m512bh)_mm512_set1_epi32(0x3ecd3ecd);
  __m512 c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_ps(float(i + 1));
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+v"(a), "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3));
    c[0] = _mm512_dpbf16_ps(c[0], a, b0), c[1] = _mm512_dpbf16_ps(c[1], a, b1), c[2] = _mm512_dpbf16_ps(c[2], a, b2);
    c[3] = _mm512_dpbf16_ps(c[3], a, b3), c[4] = _mm512_dpbf16_ps(c[4], b0, b1), c[5] = _mm512_dpbf16_ps(c[5], b1, b2);
    c[6] = _mm512_dpbf16_ps(c[6], b2, b3), c[7] = _mm512_dpbf16_ps(c[7], b3, b0), c[8] = _mm512_dpbf16_ps(c[8], b0, b2);
    c[9] = _mm512_dpbf16_ps(c[9], b1, b3), c[10] = _mm512_dpbf16_ps(c[10], b0, b0), c[11] = _mm512_dpbf16_ps(c[11], b1, b1);
  }
  const double s = seconds_since(t0);
  __m512 t = c[0];
  for (int i = 1; i < 12; ++i) t = _mm512_add_ps(t, c[i]);
  sink_f = _mm512_cvtss_f32(t);
  return 12.0 * 32.0 * double(n) / s;
}

/// u8 x s8 multiply-adds per second at AVX512-VNNI: twelve vpdpbusd chains of sixteen int32 lanes,
/// four products each (gemm_int8's inner step).
__attribute__((noinline, target("avx512f,avx512vnni"))) double int8_vnni(long n) {
  __m512i a = _mm512_set1_epi8(3), b0 = _mm512_set1_epi8(1), b1 = _mm512_set1_epi8(2), b2 = _mm512_set1_epi8(-3),
          b3 = _mm512_set1_epi8(4);
  __m512i c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_epi32(i + 1);
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+v"(a), "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3));
    c[0] = _mm512_dpbusd_epi32(c[0], a, b0), c[1] = _mm512_dpbusd_epi32(c[1], a, b1), c[2] = _mm512_dpbusd_epi32(c[2], a, b2);
    c[3] = _mm512_dpbusd_epi32(c[3], a, b3), c[4] = _mm512_dpbusd_epi32(c[4], b0, b1), c[5] = _mm512_dpbusd_epi32(c[5], b1, b2);
    c[6] = _mm512_dpbusd_epi32(c[6], b2, b3), c[7] = _mm512_dpbusd_epi32(c[7], b3, b0), c[8] = _mm512_dpbusd_epi32(c[8], b0, b2);
    c[9] = _mm512_dpbusd_epi32(c[9], b1, b3), c[10] = _mm512_dpbusd_epi32(c[10], b0, b0), c[11] = _mm512_dpbusd_epi32(c[11], b1, b1);
  }
  const double s = seconds_since(t0);
  __m512i t = c[0];
  for (int i = 1; i < 12; ++i) t = _mm512_add_epi32(t, c[i]);
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, t);
  sink_i = lanes[0];
  return 12.0 * 64.0 * double(n) / s;
}

/// Six chains; `int8` true: 32 u8 x s8 products per step (vpmaddubsw, then vpmaddwd by ones),
/// false: 16 int16 products (vpmaddwd).
template <bool Int8>
__attribute__((noinline)) double integer(long n) {
  __m256i a = Int8 ? _mm256_set1_epi8(3) : _mm256_set1_epi16(3), b0 = _mm256_set1_epi8(1), b1 = _mm256_set1_epi8(2),
          b2 = _mm256_set1_epi8(-3), b3 = _mm256_set1_epi8(4), b4 = _mm256_set1_epi8(-5), b5 = _mm256_set1_epi8(6);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c0 = _mm256_set1_epi32(1), c1 = _mm256_set1_epi32(2), c2 = _mm256_set1_epi32(3), c3 = _mm256_set1_epi32(4),
          c4 = _mm256_set1_epi32(5), c5 = _mm256_set1_epi32(6);
  auto step = [&](__m256i c, __m256i b) {
    if constexpr (Int8) return _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    else return _mm256_add_epi32(c, _mm256_madd_epi16(a, b));
  };
  const auto t0 = clk::now();
  for (long i = 0; i < n; ++i) {
    asm volatile("" : "+x"(a), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3), "+x"(b4), "+x"(b5));
    c0 = step(c0, b0), c1 = step(c1, b1), c2 = step(c2, b2), c3 = step(c3, b3), c4 = step(c4, b4), c5 = step(c5, b5);
  }
  const double s = seconds_since(t0);
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)), _mm256_add_epi32(c4, c5));
  sink_i = _mm256_extract_epi32(t, 0);
  return 6.0 * (Int8 ? 32.0 : 16.0) * double(n) / s;
}
}  // namespace

int main(int argc, char** argv) {
  long n = 100'000'000;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--iters")) n = std::atol(argv[i + 1]);
  if (n <= 0) {
    std::fprintf(stderr, "peak: --iters must be positive\n");
    return 2;
  }
  const auto& cpu = attn::detail::cpu_features();
  if (!cpu.avx2_fma) {
    std::fprintf(stderr, "peak: this CPU has no AVX2 + FMA\n");
    return 1;
  }
  const double e = fp32_sse(n), f = fp32(n), h = integer<false>(n), q = integer<true>(n);
  std::printf("one core, FP32 multiply-adds per second at each ISA level:\n");
  std::printf("  generic (SSE2) mulps + addps  %6.1f G  (%.1f GFLOP/s)\n", e / 1e9, 2 * e / 1e9);
  std::printf("  avx2    vfmadd231ps ymm       %6.1f G  (%.1f GFLOP/s)\n", f / 1e9, 2 * f / 1e9);
  if (cpu.avx512) {
    const double z = fp32_avx512(n);
    std::printf("  avx512  vfmadd231ps zmm       %6.1f G  (%.1f GFLOP/s, %.2fx avx2)\n", z / 1e9, 2 * z / 1e9, z / f);
  } else {
    std::printf("  avx512  (not on this CPU)\n");
  }
  if (cpu.avx512_bf16) {
    const double z = bf16_avx512(n);
    std::printf("one core, bf16 multiply-adds per second (float sums):\n");
    std::printf("  avx512_bf16 vdpbf16ps zmm     %6.1f G  (%.1f GFLOP/s, %.2fx avx2 fp32)\n", z / 1e9, 2 * z / 1e9, z / f);
  } else {
    std::printf("  avx512_bf16 (not on this CPU)\n");
  }
  if (cpu.avx512_vnni) {
    const double z = int8_vnni(n);
    std::printf("one core, int8 multiply-adds per second (int32 sums):\n");
    std::printf("  avx512_vnni vpdpbusd zmm      %6.1f G  (%.1f GOP/s, %.2fx avx2 fp32)\n", z / 1e9, 2 * z / 1e9, z / f);
  } else {
    std::printf("  avx512_vnni (not on this CPU)\n");
  }
  std::printf("one core, AVX2 integer multiply-adds per second:\n");
  std::printf("  int16 vpmaddwd                %6.1f G  %.2fx avx2 fp32\n", h / 1e9, h / f);
  std::printf("  int8  vpmaddubsw + vpmaddwd   %6.1f G  %.2fx avx2 fp32\n", q / 1e9, q / f);
  return 0;
}
