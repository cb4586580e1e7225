// SPDX-License-Identifier: MIT
// Helpers of the conformance cases: inputs drawn on the host and copied to backend B, upstream
// gradients, and the recording of outputs and gradients into a conformance::Result.
//   auto x = conformance::input<T, B>(rng, {3, 5, 7});   y = f(tape, x);   conformance::backward_from(tape, y, rng);
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <attn/attn.hpp>

#include "conformance.hpp"

namespace conformance {

using attn::AnyShape;
using attn::Dims;
using attn::Rng;
using attn::Tape;

template <class T, class B>
using Ten = attn::Tensor<T, AnyShape, B>;
template <class T, class B>
using V = attn::Var<T, AnyShape, B>;

/// n values from U(lo, hi), drawn on the host.
template <class T>
std::vector<T> draw(Rng& rng, std::size_t n, double lo = -1, double hi = 1) {
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(rng.uniform(lo, hi));
  return v;
}

/// A tensor of dims on backend B holding host values.
template <class T, class B>
Ten<T, B> tensor(const Dims& d, const std::vector<T>& host) {
  return Ten<T, B>::from(d, std::span<const T>(host));
}
template <class T, class B>
Ten<T, B> random(Rng& rng, const Dims& d, double lo = -1, double hi = 1) {
  return tensor<T, B>(d, draw<T>(rng, d.numel(), lo, hi));
}
/// A leaf Var that wants a gradient, with values from U(lo, hi).
template <class T, class B>
V<T, B> input(Rng& rng, const Dims& d, double lo = -1, double hi = 1) {
  return V<T, B>(random<T, B>(rng, d, lo, hi), true);
}

/// Appends t's values (empty: the marker "<name> (none)", so that a gradient missing on one
/// backend only is a mismatch).
template <class T, class S, class B>
void record(Result& r, const std::string& name, const attn::Tensor<T, S, B>& t) {
  if (t.empty()) {
    r.push_back({name + " (none)", {}});
    return;
  }
  const std::vector<T> v = t.to_vector();
  r.push_back({name + " " + t.dims().str(), std::vector<double>(v.begin(), v.end())});
}
template <class T, class S, class B>
void record_value(Result& r, const std::string& name, const attn::Var<T, S, B>& v) {
  record(r, name, v.value());
}
template <class T, class S, class B>
void record_grad(Result& r, const std::string& name, const attn::Var<T, S, B>& v) {
  record(r, "d " + name, v.grad());
}

/// Backward from y with a random upstream gradient of y's shape (every element of y matters).
template <class T, class S, class B>
void backward_from(Tape& tape, const attn::Var<T, S, B>& y, Rng& rng) {
  tape.backward(y, random<T, B>(rng, y.dims()));
}

/// sum(y * w) with w random: a scalar that depends on every element of y, built from attn's ops.
template <class T, class S, class B>
attn::Var<T, attn::Shape<>, B> weighted_sum(Tape& tape, const attn::Var<T, S, B>& y, Rng& rng) {
  V<T, B> w(random<T, B>(rng, y.dims()), false);
  return attn::sum(tape, attn::mul(tape, y.erased(), w));
}

}  // namespace conformance
