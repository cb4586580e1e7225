// The machine's FP32 GEMM ceiling as attn's CPU backend reaches it: what benchmarks quote their
// GFLOP/s against, and what bounds a model's throughput from its FLOP count.
//   const double gflops = attn::cpu_gemm_ceiling_gflops();  // 2048^3, current thread count
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "cpu.hpp"

namespace attn {

/// The median GFLOP/s of `reps` single-precision n x n x n products through cpu::gemm (after one
/// warm-up), on attn::cpu::threads() threads.
inline double cpu_gemm_ceiling_gflops(int n = 2048, int reps = 5) {
  const std::size_t nn = std::size_t(n) * std::size_t(n);
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn);
  std::vector<double> secs;
  for (int i = 0; i <= std::max(reps, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::gemm<float>(Trans::no, Trans::no, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    if (i > 0) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(secs.begin(), secs.begin() + std::ptrdiff_t(secs.size() / 2), secs.end());
  return 2.0 * double(n) * double(n) * double(n) / secs[secs.size() / 2] / 1e9;
}

}  // namespace attn
