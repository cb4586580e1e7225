// SPDX-License-Identifier: MIT
// The FP32 GEMM rate of attn's CPU backend (cpu::gemm as configured: its BLAS, else Eigen): what
// bounds a model's throughput from its FLOP count. The machine's ceiling, which benchmarks quote
// their fractions against, is the best of every GEMM at hand: `bench --ceiling` measures it.
//   const double gflops = attn::cpu_gemm_ceiling_gflops();          // 2048^3, current thread count
//   const double quick = attn::cpu_gemm_ceiling_gflops(2048, 5, 3);  // within about 3 seconds
//   const double other = attn::gemm_gflops([](int n, const float* a, const float* b, float* c) { ... });
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "../cpu.hpp"

namespace attn {

/// GFLOP/s of single-precision n x n x n products C = A B (row-major) through `product(n, a, b, c)`:
/// the median of `reps` products after one warm-up, for n = 256, 512, ... up to max_n, returning
/// the largest size's rate. A size whose products would not fit in what is left of
/// `budget_seconds` (judged from the size before, 8x its time) is not started, so a slow build
/// (Debug, sanitizers) returns a smaller product's rate instead of taking minutes.
template <class Product>
double gemm_gflops(Product&& product, int max_n = 2048, int reps = 5, double budget_seconds = 1e9) {
  reps = std::max(reps, 1);
  double rate = 0, spent = 0;
  for (int n = std::min(256, max_n);; n = std::min(2 * n, max_n)) {
    const std::size_t nn = std::size_t(n) * std::size_t(n);
    std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn);
    std::vector<double> secs;
    for (int i = 0; i <= reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      product(n, a.data(), b.data(), c.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      spent += s;
      if (i > 0 || spent > budget_seconds) secs.push_back(s);  // the warm-up counts only when it is all there is
      if (spent > budget_seconds) break;
    }
    std::nth_element(secs.begin(), secs.begin() + std::ptrdiff_t(secs.size() / 2), secs.end());
    const double median = secs[secs.size() / 2];
    rate = 2.0 * double(n) * double(n) * double(n) / median / 1e9;
    if (n >= max_n || spent + 8 * median * double(reps + 1) > budget_seconds) return rate;
  }
}

/// gemm_gflops through cpu::gemm on attn::cpu::threads() threads.
inline double cpu_gemm_ceiling_gflops(int max_n = 2048, int reps = 5, double budget_seconds = 1e9) {
  return gemm_gflops(
      [](int n, const float* a, const float* b, float* c) {
        cpu::gemm<float>(Trans::no, Trans::no, n, n, n, 1.f, a, n, b, n, 0.f, c, n);
      },
      max_n, reps, budget_seconds);
}

}  // namespace attn
