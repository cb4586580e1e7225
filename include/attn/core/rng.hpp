// SPDX-License-Identifier: MIT
// A seeded, portable random generator (xoshiro256**): the same seed gives the same numbers on
// every platform and compiler, unlike std::normal_distribution, whatever -march and FP contraction
// the build uses (the scaled forms round once, through std::fma). normal() also goes through the C
// library's log, sin and cos, which can differ in the last bit between C libraries.
//   attn::Rng rng(42); float u = rng.uniform(); std::size_t k = rng.below(10);
#pragma once
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <utility>

namespace attn {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0x5eed) { reseed(seed); }
  void reseed(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& w : s_) w = splitmix(x);
    has_spare_ = false;
  }
  /// Uniform 64 random bits.
  std::uint64_t next() noexcept {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) noexcept { return std::fma(hi - lo, uniform(), lo); }
  /// Uniform integer in [0, n), unbiased.
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n <= 1) return 0;
    const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
    std::uint64_t r;
    do r = next();
    while (r >= limit);
    return r % n;
  }
  /// Standard normal (Box-Muller).
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 0;
    while (u1 <= 0) u1 = uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2 * std::numbers::pi * u2);
  }
  double normal(double mean, double stddev) noexcept { return std::fma(stddev, normal(), mean); }
  /// True with probability p.
  bool bernoulli(double p) noexcept { return uniform() < p; }
  /// Fisher-Yates shuffle.
  template <class T>
  void shuffle(std::span<T> v) noexcept {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  /// An independent generator derived from this one's next output (for per-layer streams).
  Rng split() noexcept { return Rng(next()); }

  /// The full state, for checkpoints.
  struct State {
    std::uint64_t s[4];
    double spare;
    bool has_spare;
  };
  State state() const noexcept { return {{s_[0], s_[1], s_[2], s_[3]}, spare_, has_spare_}; }
  void set_state(const State& st) noexcept {
    for (int i = 0; i < 4; ++i) s_[i] = st.s[i];
    spare_ = st.spare;
    has_spare_ = st.has_spare;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace attn
