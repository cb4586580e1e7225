// SPDX-License-Identifier: MIT
// The GEMMs of the reference models (benchmarks/README.md), FP32 through cpu::gemm (the BLAS) against
// bf16 through kernels::gemm_bf16 at the level cpu::isa() names (ATTN_ISA lowers it): GFLOP/s, the
// median of --reps runs after one warm-up, B packed once beforehand (a layer's weights), A rounded
// to bf16 inside each timed call; and int8 through kernels::gemm_int8 (the forward shapes: W
// quantized once beforehand, A quantized per row inside each timed call). One JSON line per shape
// with --json.
//   OMP_NUM_THREADS=2 gemm_shapes [--reps 9] [--json]
#include <attn/attn.hpp>
#include <attn/backend/cpu/gemm_bf16.hpp>
#include <attn/backend/cpu/gemm_int8.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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
  std::printf("%s, %d threads, attn kernels %s, FP32 GEMM %s, int8 sums %s\n", cpu_name().c_str(), attn::cpu::threads(),
              attn::isa_name(attn::cpu::isa()), attn::cpu_gemm_description().c_str(),
              attn::kernels::int8_native() ? "vpdpbusd" : "FP32 GEMM");
  std::printf("%-36s %10s %10s %7s %10s %7s\n", "shape (m x k -> n)", "fp32 GF/s", "bf16 GF/s", "ratio", "int8 GOP/s", "ratio");
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
    if (s.ta == attn::Trans::no) {
      std::vector<float> wt(std::size_t(s.k) * s.n);  // B^T: the (n, k) weight PackedInt8 quantizes
      for (int p = 0; p < s.k; ++p)
        for (int j = 0; j < s.n; ++j) wt[std::size_t(j) * s.k + p] = b[std::size_t(p) * s.n + j];
      attn::kernels::PackedInt8 pw;
      pw.quantize(s.k, s.n, wt.data(), s.k);
      t8 = time_median(reps, [&] { attn::kernels::gemm_int8(s.m, s.n, s.k, a.data(), lda, pw, 0.f, c.data(), s.n); });
    }
    if (t8 > 0)
      std::printf("%-36s %10.1f %10.1f %6.2fx %10.1f %6.2fx\n", s.name, flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16, flops / t8 / 1e9,
                  t32 / t8);
    else
      std::printf("%-36s %10.1f %10.1f %6.2fx %10s %7s\n", s.name, flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16, "-", "-");
    if (json)
      std::printf("{\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"fp32_gflops\":%.2f,\"bf16_gflops\":%.2f,\"int8_gops\":%.2f,\"isa\":\"%s\"}\n",
                  s.name, s.m, s.n, s.k, flops / t32 / 1e9, flops / t16 / 1e9, t8 > 0 ? flops / t8 / 1e9 : 0.0,
                  attn::isa_name(attn::cpu::isa()));
  }
  return 0;
}
