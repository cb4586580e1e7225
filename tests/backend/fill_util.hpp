// SPDX-License-Identifier: MIT
// Test helper for the GEMM tests: reproducible operands from a fixed seed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace testutil {

/// n values in [-2, 2] on a grid of 1/500, from a linear congruential sequence seeded by `seed`.
template <class T>
std::vector<T> filled(std::size_t n, std::uint32_t seed) {
  std::vector<T> v(n);
  std::uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = T(int(s >> 9) % 2001 - 1000) / T(500);  // [-2, 2]
  }
  return v;
}

}  // namespace testutil
