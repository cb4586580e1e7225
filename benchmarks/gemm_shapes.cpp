// SPDX-License-Identifier: MIT
// The GEMMs of the reference models (benchmarks/README.md), FP32 through cpu::gemm (the BLAS) against
// bf16 through kernels::gemm_bf16 at the level cpu::isa() names (ATTN_ISA lowers it): GFLOP/s, the
// median of --reps runs after one warm-up, B packed once beforehand (a layer's weights), A rounded
// to bf16 inside each timed call; and int8 through kernels::gemm_int8 (the forward shapes: W
// quantized once beforehand, A quantized per row inside each timed call). Where libdnnl.so.2 (Debian's
// libdnnl2, oneDNN 2.6) loads, the same products through oneDNN's GEMM functions beside them, doing
// what attn's kernels do in their timed calls: dnnl_sgemm (FP32); dnnl_gemm_bf16bf16f32 with A
// converted to bf16 in the call (B, the weight, beforehand); dnnl_gemm_u8s8s32 with A quantized
// per row in the call (attn's own quantizer, the same values) and the int32 sums scaled back to
// float (W quantized beforehand). One JSON line per shape with --json.
// Then the flash attention kernels' tile products (kernels::tile::gemm, FP32, one thread, as each of
// the kernels' threads runs them): the six products of a 128 x 128 query-key tile (forward's two,
// backward's four and its recomputation of the scores) for heads 16, 32, 64 and 128 wide (R1-h8, R3,
// R2-h4, R1-h1), on the packed, padded tiles the kernels use, to set beside the per-core FMA peak
// that `peak` reports. Between them, the weight-gradient products A^T B on one thread, A and B at 25
// placements, through cpu::gemm and through dnnl_sgemm directly.
//   OMP_NUM_THREADS=2 gemm_shapes [--reps 9] [--json]
#include <attn/attn.hpp>
#include <attn/backend/cpu/attention.hpp>
#include <attn/backend/cpu/gemm_bf16.hpp>
#include <attn/backend/cpu/gemm_int8.hpp>
#include <attn/backend/cpu/tile_gemm.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "onednn.hpp"

namespace {

struct Shape {
  const char* name;
  attn::Trans ta;
  int m, n, k;
};

// Forward y = x W^T is (rows, out, in); backward dx = dy W is (rows, in, out); dW = dy^T x is
// (out, in, rows) with A transposed.
constexpr Shape kShapes[] = {
    {"square 2048", attn::Trans::no, 2048, 2048, 2048},
    {"R1 qkv fwd (8192x128 -> 384)", attn::Trans::no, 8192, 384, 128},
    {"R1 qkv dx (8192x384 -> 128)", attn::Trans::no, 8192, 128, 384},
    {"R1 qkv dW (384x8192 -> 128)", attn::Trans::yes, 384, 128, 8192},
    {"R2 lstm x-proj (3072x128 -> 1024)", attn::Trans::no, 3072, 1024, 128},
    {"R2 lstm step (64x128 -> 512)", attn::Trans::no, 64, 512, 128},
    {"R3 qkv fwd (8192x256 -> 768)", attn::Trans::no, 8192, 768, 256},
    {"R6 ffn up (8192x256 -> 1024)", attn::Trans::no, 8192, 1024, 256},
    {"R4 qkv b64 (1344x256 -> 768)", attn::Trans::no, 1344, 768, 256},
};

/// "AMD EPYC (family 26, model 2)": /proc/cpuinfo's model name, family and model ("" without it).
std::string cpu_name() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char line[512];
  std::string name, family, model;
  auto value = [](const std::string& l) {
    std::string v = l.substr(l.find(':') + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    return v;
  };
  while (std::fgets(line, sizeof line, f) && (name.empty() || family.empty() || model.empty())) {
    const std::string l = line;
    if (l.rfind("model name", 0) == 0) name = value(l);
    else if (l.rfind("cpu family", 0) == 0) family = value(l);
    else if (l.rfind("model", 0) == 0 && l.find(':') != std::string::npos && l.rfind("model name", 0) != 0) model = value(l);
  }
  std::fclose(f);
  return name + " (family " + family + ", model " + model + ")";
}

using bench::OneDnn;

/// out[i] = a[i] as bf16 bits, in parallel (what attn's bf16 GEMM does to A inside its call).
void to_bf16(const float* a, std::size_t n, std::uint16_t* out) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) out[i] = attn::bf16_bits(a[i]);
}

/// Dynamic int8 through oneDNN: A (m, k) quantized per row by attn's quantizer, the u8 x s8 sums by
/// dnnl_gemm_u8s8s32, then C = scale_a(i) scale_w(j) (sum - zero_a(i) colsum_w(j)) as attn's kernel.
struct DnnlInt8 {
  std::vector<std::uint8_t> aq;
  std::vector<attn::kernels::int8_detail::RowQuant> rq;
  std::vector<std::int32_t> c32;
  void operator()(const OneDnn& d, int m, int n, int k, const float* a, int lda, const std::int8_t* w, const float* ws,
                  const std::int32_t* colsum, float* c) {
    aq.resize(std::size_t(m) * k);
    rq.resize(std::size_t(m));
    c32.resize(std::size_t(m) * n);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; i += 64) {
      const int i1 = std::min(m, i + 64);
#if defined(ATTN_GEMM_INT8_AVX512)
      if (attn::kernels::int8_native()) {
        attn::kernels::int8_detail::quantize_rows_avx512(i, i1, k, a, lda, k, aq.data() + std::size_t(i) * k, rq.data() + i);
        continue;
      }
#endif
      attn::kernels::int8_detail::quantize_rows_scalar(i, i1, k, a, lda, k, aq.data() + std::size_t(i) * k, rq.data() + i);
    }
    const std::int32_t co = 0;
    d.u8s8('N', 'N', 'F', m, n, k, 1.f, aq.data(), k, 0, w, n, 0, 0.f, c32.data(), n, &co);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        c[std::size_t(i) * n + j] =
            rq[i].scale * ws[j] * float(c32[std::size_t(i) * n + j] - rq[i].zero * colsum[j]);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_median(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

/// The flash kernels' tile products for a head hd wide: GFLOP/s of each (tile::gemm on this thread),
/// as mha_flash_forward / mha_flash_backward call them on a 128 x 128 tile: every operand and sum in
/// its packed per-thread tile, rows tile_ld(hd) or tile_ld(bc) floats apart (a head's rows of Q, K,
/// V and dO copied out of qkv, K_j^T and V_j^T transposed, the score, P and dS tiles, the O, dQ,
/// dK and dV sums).
void tile_products(int reps, bool json) {
  constexpr std::size_t br = 128, bc = 128;
  using attn::kernels::mha::tile_ld;
  std::printf("\nflash tile products (tile::gemm, FP32, one thread, %s), GFLOP/s:\n", attn::isa_name(attn::cpu::isa()));
  std::printf("%-10s %10s %10s %10s %10s %10s %10s\n", "head dim", "S=QK^T", "O+=PV", "dP=dOV^T", "dV+=P^TdO", "dQ+=dSK", "dK+=dS^TQ");
  for (std::size_t hd : {16, 32, 64, 128}) {
    const std::size_t lh = tile_ld(hd), lk = tile_ld(bc);
    // q, g: Q_i and dO_i (br x hd); k, v: K_j and V_j (bc x hd); kt, vt: their transposes (hd x bc);
    // s, pt, dp: score, P and dS tiles (br x bc); o, dq, dk, dv: the sums.
    std::vector<float> q(br * lh), g(br * lh), k(bc * lh), v(bc * lh), kt(hd * lk), vt(hd * lk), s(br * lk), pt(br * lk),
        dp(br * lk), o(br * lh), dq(br * lh), dk(bc * lh), dv(bc * lh);
    attn::Rng rng(3);
    for (auto* x : {&q, &g, &k, &v, &kt, &vt, &s, &pt, &dp})
      for (auto& e : *x) e = float(rng.uniform()) - 0.5f;
    // Many calls per timing: one product is a few microseconds.
    const int calls = int(std::max<std::size_t>(1, 20000000 / (2 * br * bc * hd)));
    const double flops = 2.0 * br * bc * hd * calls;
    auto rate = [&](auto&& f) {
      return flops / time_median(reps, [&] { for (int c = 0; c < calls; ++c) f(); }) / 1e9;
    };
    using attn::kernels::tile::gemm;
    const float scale = 0.125f;
    const double r[6] = {
        rate([&] { gemm<float>(br, bc, hd, scale, q.data(), lh, 1, kt.data(), lk, false, s.data(), lk); }),
        rate([&] { gemm<float>(br, hd, bc, 1.f, s.data(), lk, 1, v.data(), lh, true, o.data(), lh); }),
        rate([&] { gemm<float>(br, bc, hd, 1.f, g.data(), lh, 1, vt.data(), lk, false, dp.data(), lk); }),
        rate([&] { gemm<float>(bc, hd, br, 1.f, pt.data(), 1, lk, g.data(), lh, true, dv.data(), lh); }),
        rate([&] { gemm<float>(br, hd, bc, scale, dp.data(), lk, 1, k.data(), lh, true, dq.data(), lh); }),
        rate([&] { gemm<float>(bc, hd, br, scale, dp.data(), 1, lk, q.data(), lh, true, dk.data(), lh); }),
    };
    std::printf("%-10zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n", hd, r[0], r[1], r[2], r[3], r[4], r[5]);
    if (json)
      std::printf("{\"tile_head_dim\":%zu,\"qk_gflops\":%.2f,\"pv_gflops\":%.2f,\"dp_gflops\":%.2f,\"dv_gflops\":%.2f,"
                  "\"dq_gflops\":%.2f,\"dk_gflops\":%.2f,\"isa\":\"%s\"}\n",
                  hd, r[0], r[1], r[2], r[3], r[4], r[5], attn::isa_name(attn::cpu::isa()));
  }
}

/// The weight gradients dW = dY^T X (A^T B, A (k, m) and B (k, n), rows m and n floats apart), one
/// thread each, as attn's Linear and LSTM run them (their rows split over the threads, one GEMM per
/// thread inside a parallel region): cpu::gemm<float> beside oneDNN's dnnl_sgemm called directly,
/// with A and B at 25 placements (offsets of 0, 4, 8, 16 and 200 floats from a page), since
/// oneDNN's speed on these operands depends on where they lie: min / median / max GFLOP/s.
void weight_gradients(int reps, bool json, const OneDnn& dnnl) {
  struct Tn {
    const char* name;
    int m, n, k;
  };
  constexpr Tn shapes[] = {{"R1 qkv dW, a thread's rows (384x4096 -> 128)", 384, 128, 4096},
                           {"R2 lstm dW (512x3008 -> 128)", 512, 128, 3008},
                           {"R2 qkv dW, a thread's rows (768x1536 -> 256)", 768, 256, 1536},
                           {"R6 ffn up dW, a thread's rows (1024x4096 -> 256)", 1024, 256, 4096},
                           {"R6 ffn down dW, a thread's rows (256x4096 -> 1024)", 256, 1024, 4096}};
  const int threads = attn::cpu::threads();
  attn::cpu::set_threads(1);
  std::printf("\nweight gradients A^T B (FP32, one thread, A and B at 25 placements), GFLOP/s min / median / max:\n");
  std::printf("%-52s %20s %20s\n", "shape (m x k -> n)", "attn cpu::gemm", dnnl.loaded() ? "dnnl_sgemm direct" : "");
  for (const Tn& s : shapes) {
    std::vector<float> a0(std::size_t(s.k) * s.m + 2048), b0(std::size_t(s.k) * s.n + 2048), c(std::size_t(s.m) * s.n);
    for (std::size_t i = 0; i < a0.size(); ++i) a0[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.f;
    for (std::size_t i = 0; i < b0.size(); ++i) b0[i] = float(int(i * 40503u % 2001) - 1000) / 1000.f;
    auto place = [](std::vector<float>& v, int off) {
      const auto p = (reinterpret_cast<std::uintptr_t>(v.data()) + 4095) & ~std::uintptr_t(4095);
      return reinterpret_cast<float*>(p) + off;
    };
    const double flops = 2.0 * s.m * s.n * s.k;
    std::vector<double> mine, theirs;
    for (int oa : {0, 4, 8, 16, 200})
      for (int ob : {0, 4, 8, 16, 200}) {
        const float *a = place(a0, oa), *b = place(b0, ob);
        mine.push_back(flops / time_median(reps, [&] {
          attn::cpu::gemm<float>(attn::Trans::yes, attn::Trans::no, s.m, s.n, s.k, 1.f, a, s.m, b, s.n, 1.f, c.data(), s.n);
        }) / 1e9);
        if (dnnl.loaded())
          theirs.push_back(flops / time_median(reps, [&] { dnnl.sgemm('T', 'N', s.m, s.n, s.k, 1.f, a, s.m, b, s.n, 1.f, c.data(), s.n); }) /
                           1e9);
      }
    std::sort(mine.begin(), mine.end());
    std::sort(theirs.begin(), theirs.end());
    std::printf("%-52s %6.1f %6.1f %6.1f", s.name, mine.front(), mine[mine.size() / 2], mine.back());
    if (!theirs.empty()) std::printf(" %6.1f %6.1f %6.1f", theirs.front(), theirs[theirs.size() / 2], theirs.back());
    std::printf("\n");
    if (json)
      std::printf("{\"dw_shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"attn_median_gflops\":%.2f,\"dnnl_median_gflops\":%.2f}\n", s.name,
                  s.m, s.n, s.k, mine[mine.size() / 2], theirs.empty() ? 0.0 : theirs[theirs.size() / 2]);
  }
  attn::cpu::set_threads(threads);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "gemm_shapes: unknown argument '%s' (expected --reps N, --json)\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "gemm_shapes: --reps must be at least 1\n");
    return 2;
  }
  const OneDnn dnnl;
  std::printf("%s, %d threads, attn kernels %s, FP32 GEMM %s, int8 sums %s; %s\n", cpu_name().c_str(), attn::cpu::threads(),
              attn::isa_name(attn::cpu::isa()), attn::cpu_gemm_description().c_str(),
              attn::kernels::int8_native() ? "vpdpbusd" : "FP32 GEMM",
              dnnl.loaded() ? (dnnl.name + " beside them (ONEDNN_VERBOSE=1 names its kernels)").c_str() : "oneDNN not found (libdnnl.so.2)");
  std::printf("%-36s %10s %10s %7s %10s %7s", "shape (m x k -> n)", "fp32 GF/s", "bf16 GF/s", "ratio", "int8 GOP/s", "ratio");
  if (dnnl.loaded()) std::printf(" | %10s %10s %10s", "dnnl fp32", "dnnl bf16", "dnnl u8s8");
  std::printf("\n");
  for (const Shape& s : kShapes) {
    const int lda = s.ta == attn::Trans::no ? s.k : s.m;
    std::vector<float> a(std::size_t(s.m) * s.k), b(std::size_t(s.k) * s.n), c(std::size_t(s.m) * s.n);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(int(i * 40503u % 2001) - 1000) / 1000.f;
    attn::kernels::PackedBf16 pb;
    pb.pack(attn::Trans::no, s.k, s.n, b.data(), s.n);
    const double flops = 2.0 * s.m * s.n * s.k;
    const double t32 = time_median(reps, [&] {
      attn::cpu::gemm<float>(s.ta, attn::Trans::no, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), s.n, 0.f, c.data(), s.n);
    });
    const double t16 = time_median(reps, [&] {
      attn::kernels::gemm_bf16(s.ta, s.m, s.n, s.k, 1.f, a.data(), lda, pb, 0.f, c.data(), s.n);
    });
    double t8 = 0;
    attn::kernels::PackedInt8 pw;
    if (s.ta == attn::Trans::no) {
      std::vector<float> wt(std::size_t(s.k) * s.n);  // B^T: the (n, k) weight PackedInt8 quantizes
      for (int p = 0; p < s.k; ++p)
        for (int j = 0; j < s.n; ++j) wt[std::size_t(j) * s.k + p] = b[std::size_t(p) * s.n + j];
      pw.quantize(s.k, s.n, wt.data(), s.k);
      t8 = time_median(reps, [&] { attn::kernels::gemm_int8(s.m, s.n, s.k, a.data(), lda, pw, 0.f, c.data(), s.n); });
    }
    // oneDNN: the weight converted beforehand, A in each call, as attn's kernels do.
    double d32 = 0, d16 = 0, d8 = 0;
    if (dnnl.loaded()) {
      const char ta = s.ta == attn::Trans::no ? 'N' : 'T';
      d32 = time_median(reps, [&] { dnnl.sgemm(ta, 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), s.n, 0.f, c.data(), s.n); });
      std::vector<std::uint16_t> ah(a.size()), bh(b.size());
      to_bf16(b.data(), b.size(), bh.data());
      d16 = time_median(reps, [&] {
        to_bf16(a.data(), a.size(), ah.data());
        dnnl.bf16(ta, 'N', s.m, s.n, s.k, 1.f, ah.data(), lda, bh.data(), s.n, 0.f, c.data(), s.n);
      });
      if (s.ta == attn::Trans::no) {
        std::vector<std::int8_t> w8(b.size());  // the same int8 weight, (k, n) row-major
        for (int p = 0; p < s.k; ++p)
          for (int j = 0; j < s.n; ++j) w8[std::size_t(p) * s.n + j] = pw.at(p, j);
        DnnlInt8 run;
        d8 = time_median(reps, [&] { run(dnnl, s.m, s.n, s.k, a.data(), lda, w8.data(), pw.scales(), pw.column_sums(), c.data()); });
        // Both routes compute the same quantized product: say so if they do not.
        std::vector<float> mine(c.size());
        attn::kernels::gemm_int8(s.m, s.n, s.k, a.data(), lda, pw, 0.f, mine.data(), s.n);
        double diff = 0, mag = 0;
        for (std::size_t i = 0; i < c.size(); ++i) {
          diff = std::max(diff, double(std::abs(c[i] - mine[i])));
          mag = std::max(mag, double(std::abs(mine[i])));
        }
        if (diff > 1e-5 * mag) std::fprintf(stderr, "gemm_shapes: %s: oneDNN's int8 route differs from attn's by %g (of %g)\n", s.name, diff, mag);
      }
    }
    if (t8 > 0)
      std::printf("%-36s %10.1f %10.1f %6.2fx %10.1f %6.2fx", s.name, flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16, flops / t8 / 1e9,
                  t32 / t8);
    else
      std::printf("%-36s %10.1f %10.1f %6.2fx %10s %7s", s.name, flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16, "-", "-");
    if (dnnl.loaded()) {
      std::printf(" | %10.1f %10.1f", flops / d32 / 1e9, flops / d16 / 1e9);
      if (d8 > 0) std::printf(" %10.1f", flops / d8 / 1e9);
      else std::printf(" %10s", "-");
    }
    std::printf("\n");
    if (json)
      std::printf("{\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"fp32_gflops\":%.2f,\"bf16_gflops\":%.2f,\"int8_gops\":%.2f,"
                  "\"dnnl_fp32_gflops\":%.2f,\"dnnl_bf16_gflops\":%.2f,\"dnnl_u8s8_gops\":%.2f,\"isa\":\"%s\"}\n",
                  s.name, s.m, s.n, s.k, flops / t32 / 1e9, flops / t16 / 1e9, t8 > 0 ? flops / t8 / 1e9 : 0.0,
                  d32 > 0 ? flops / d32 / 1e9 : 0.0, d16 > 0 ? flops / d16 / 1e9 : 0.0, d8 > 0 ? flops / d8 / 1e9 : 0.0,
                  attn::isa_name(attn::cpu::isa()));
  }
  weight_gradients(std::max(1, reps / 3), json, dnnl);
  tile_products(reps, json);
  return 0;
}
