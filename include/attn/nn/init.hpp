// SPDX-License-Identifier: MIT
// Parameter initialisers: Xavier (Glorot) uniform, PyTorch's Linear/LSTM default uniform, normal.
//   attn::nn::init::xavier_uniform(w, rng);          // w (fan_out, fan_in)
#pragma once
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "../autograd/var.hpp"
#include "../core/rng.hpp"

namespace attn::nn::init {

/// Fills v's value from f(rng), element by element in row-major order: in place on a host backend,
/// through a staging buffer of at most 2^20 elements on a device.
template <class T, class S, class B, class F>
void fill_with(const Var<T, S, B>& v, Rng& rng, F&& f) {
  auto& value = v.data()->value;
  const std::size_t n = v.numel();
  if constexpr (B::host_accessible) {  // in place: no second copy of a large table
    T* p = value.data();
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(f(rng));
  } else {  // through a bounded staging buffer, in the same order
    std::vector<T> h(std::min(n, std::size_t(1) << 20));
    for (std::size_t off = 0; off < n; off += h.size()) {
      const std::size_t k = std::min(h.size(), n - off);
      for (std::size_t i = 0; i < k; ++i) h[i] = static_cast<T>(f(rng));
      value.copy_from_host(std::span<const T>(h.data(), k), off);
    }
  }
  v.data()->mark_value_written();
}

/// U(-a, a).
template <class T, class S, class B>
void uniform(const Var<T, S, B>& v, Rng& rng, double a) {
  fill_with(v, rng, [a](Rng& r) { return r.uniform(-a, a); });
}
/// N(mean, std).
template <class T, class S, class B>
void normal(const Var<T, S, B>& v, Rng& rng, double mean = 0, double std = 1) {
  fill_with(v, rng, [=](Rng& r) { return r.normal(mean, std); });
}
template <class T, class S, class B>
void constant(const Var<T, S, B>& v, T c) {
  v.data()->value.fill(c);
  v.data()->mark_value_written();
}
/// Xavier/Glorot uniform for a (fan_out, fan_in) matrix: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
template <class T, class S, class B>
void xavier_uniform(const Var<T, S, B>& v, Rng& rng, double gain = 1.0) {
  if (v.rank() != 2) throw ShapeError("xavier_uniform: needs a matrix, got " + v.dims().str());
  const double a = gain * std::sqrt(6.0 / double(v.size(0) + v.size(1)));
  uniform(v, rng, a);
}
/// PyTorch's nn.Linear default (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
template <class T, class S, class B>
void torch_linear_default(const Var<T, S, B>& v, Rng& rng, std::size_t fan_in) {
  uniform(v, rng, fan_in ? 1.0 / std::sqrt(double(fan_in)) : 0.0);
}

}  // namespace attn::nn::init
