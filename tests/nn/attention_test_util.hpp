// SPDX-License-Identifier: MIT
// Helpers of the attention, encoder and decoder tests: random tensors, padding masks from lengths,
// writing a parameter's value, relative differences, finiteness.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include <catch2/catch.hpp>

#include <attn/attn.hpp>

namespace testutil {

/// A tensor of dims d with values uniform in [lo, hi) from rng.
template <class T>
attn::Tensor<T> random(attn::Rng& rng, const attn::Dims& d, double lo = -1, double hi = 1) {
  attn::Tensor<T> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = T(rng.uniform(lo, hi));
  return t;
}

/// (B, T) mask with the given lengths: 1 for t < len, else 0.
template <class T>
attn::Tensor<T> lengths_mask(const std::vector<std::size_t>& lengths, std::size_t n) {
  attn::Tensor<T> m = attn::Tensor<T>::zeros({lengths.size(), n});
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::size_t t = 0; t < std::min(n, lengths[b]); ++t) m(b, t) = T(1);
  return m;
}

/// Overwrites parameter p's value with v (same number of elements).
template <class T, class S, class B>
void set_value(const attn::Var<T, S, B>& p, const attn::Tensor<T>& v) {
  REQUIRE(p.numel() == v.numel());
  std::copy_n(v.data(), v.numel(), const_cast<T*>(p.raw().data()));
  p.data()->mark_value_written();
}

/// max|a - b| / max|b|.
template <class T, class S1, class S2>
double rel_diff(const attn::Tensor<T, S1>& a, const attn::Tensor<T, S2>& b) {
  REQUIRE(a.numel() == b.numel());
  double num = 0, den = 1e-30;
  for (std::size_t i = 0; i < a.numel(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

template <class T>
bool all_finite(const attn::Tensor<T>& t) {
  for (std::size_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t[i])) return false;
  return true;
}

}  // namespace testutil
