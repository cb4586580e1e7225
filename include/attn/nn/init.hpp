// SPDX-License-Identifier: MIT
// Parameter initialisers, torch.nn.init's: uniform, normal, trunc_normal, constant, eye, Xavier
// (Glorot) and Kaiming (He) uniform and normal with torch's fans and gains, orthogonal; and
// PyTorch's Linear/LSTM default uniform.
//   attn::nn::init::xavier_uniform(w, rng);                                   // w (fan_out, fan_in)
//   attn::nn::init::kaiming_normal(w, rng, 0, init::FanMode::fan_out, init::Nonlinearity::relu);
#pragma once
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "../autograd/var.hpp"
#include "../core/eigen.hpp"
#include "../core/rng.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/QR>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

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
/// The activation a gain is for (torch.nn.init.calculate_gain's names).
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };
/// Which fan Kaiming initialisation preserves: the forward pass's variance (fan_in) or backward's.
enum class FanMode { fan_in, fan_out };

/// torch.nn.init.calculate_gain: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2) (relu),
/// sqrt(2 / (1 + slope^2)) (leaky_relu, slope = param), 3/4 (selu).
inline double calculate_gain(Nonlinearity n, double param = 0.01) {
  switch (n) {
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu: return 0.75;
    default: return 1.0;
  }
}

struct Fans {
  std::size_t fan_in = 0, fan_out = 0;
};
/// torch's _calculate_fan_in_and_fan_out: for dims (out, in, k...) fan_in = in * prod(k),
/// fan_out = out * prod(k). A tensor of fewer than 2 axes has no fans: ShapeError naming `who`.
inline Fans fans(const Dims& d, const char* who) {
  if (d.n < 2) throw ShapeError(std::string(who) + ": fan in and fan out need at least 2 axes, got " + d.str());
  std::size_t field = 1;
  for (std::size_t i = 2; i < d.n; ++i) field *= d.v[i];
  return {d.v[1] * field, d.v[0] * field};
}

/// Xavier/Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)); a (fan_out, fan_in) matrix.
template <class T, class S, class B>
void xavier_uniform(const Var<T, S, B>& v, Rng& rng, double gain = 1.0) {
  const Fans f = fans(v.dims(), "xavier_uniform");
  uniform(v, rng, gain * std::sqrt(6.0 / double(f.fan_in + f.fan_out)));
}
/// Xavier/Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
template <class T, class S, class B>
void xavier_normal(const Var<T, S, B>& v, Rng& rng, double gain = 1.0) {
  const Fans f = fans(v.dims(), "xavier_normal");
  normal(v, rng, 0.0, gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out)));
}

namespace detail {
inline double kaiming_std(const Dims& d, double a, FanMode mode, Nonlinearity nl, const char* who) {
  const Fans f = fans(d, who);
  const std::size_t fan = mode == FanMode::fan_in ? f.fan_in : f.fan_out;
  if (fan == 0) throw ShapeError(std::string(who) + ": a zero fan in " + d.str());
  return calculate_gain(nl, a) / std::sqrt(double(fan));
}
}  // namespace detail

/// Kaiming/He uniform (torch's defaults: a = 0, fan_in, leaky_relu): U(-b, b), b = gain *
/// sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
template <class T, class S, class B>
void kaiming_uniform(const Var<T, S, B>& v, Rng& rng, double a = 0, FanMode mode = FanMode::fan_in,
                     Nonlinearity nonlinearity = Nonlinearity::leaky_relu) {
  uniform(v, rng, std::sqrt(3.0) * detail::kaiming_std(v.dims(), a, mode, nonlinearity, "kaiming_uniform"));
}
/// Kaiming/He normal: N(0, std^2), std = gain / sqrt(fan).
template <class T, class S, class B>
void kaiming_normal(const Var<T, S, B>& v, Rng& rng, double a = 0, FanMode mode = FanMode::fan_in,
                    Nonlinearity nonlinearity = Nonlinearity::leaky_relu) {
  normal(v, rng, 0.0, detail::kaiming_std(v.dims(), a, mode, nonlinearity, "kaiming_normal"));
}

/// N(mean, std^2) truncated to [lo, hi] (torch's trunc_normal_, defaults a = -2, b = 2 in absolute
/// units): draws outside are redrawn, which is the truncated law exactly. Needs lo < hi and
/// [lo, hi] within 6 std of the mean, so that a draw lands inside with reasonable probability.
template <class T, class S, class B>
void trunc_normal(const Var<T, S, B>& v, Rng& rng, double mean = 0, double std = 1, double lo = -2, double hi = 2) {
  if (!(std > 0) || !(lo < hi) || hi < mean - 6 * std || lo > mean + 6 * std)
    throw ArgumentError("trunc_normal: needs std > 0 and lo < hi with [lo, hi] reaching within 6 std of the mean; got mean " +
                        std::to_string(mean) + ", std " + std::to_string(std) + ", [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  fill_with(v, rng, [=](Rng& r) {
    for (;;) {
      const double x = r.normal(mean, std);
      if (x >= lo && x <= hi) return x;
    }
  });
}

/// The identity matrix (torch's eye_): 1 on the diagonal of a 2-D (rows, cols) tensor, 0 elsewhere.
template <class T, class S, class B>
void eye(const Var<T, S, B>& v) {
  if (v.rank() != 2) throw ShapeError("eye: needs a matrix, got " + v.dims().str());
  const std::size_t cols = v.size(1);
  std::size_t i = 0;
  Rng unused(0);
  fill_with(v, unused, [&](Rng&) { const std::size_t r = i / cols, c = i % cols; ++i; return r == c ? 1.0 : 0.0; });
}

/// A (semi-)orthogonal matrix times gain (torch's orthogonal_): the tensor seen as (rows =
/// size(0), cols = the rest), filled from N(0, 1), then replaced by the Q of its QR decomposition
/// (of its transpose when rows < cols) with Q's columns signed by R's diagonal, so that the law is
/// uniform (Haar). Rows (rows <= cols) or columns (rows >= cols) come out orthonormal.
template <class T, class S, class B>
void orthogonal(const Var<T, S, B>& v, Rng& rng, double gain = 1.0) {
  if (v.rank() < 2) throw ShapeError("orthogonal: needs at least 2 axes, got " + v.dims().str());
  const std::size_t rows = v.size(0), cols = v.numel() / std::max<std::size_t>(rows, 1);
  if (rows == 0 || cols == 0) return;
  using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const bool wide = rows < cols;
  M a(wide ? cols : rows, wide ? rows : cols);  // tall: at least as many rows as columns
  for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = rng.normal();
  Eigen::HouseholderQR<M> qr(a);
  M q = qr.householderQ() * M::Identity(a.rows(), a.cols());
  const M r = qr.matrixQR();
  for (Eigen::Index c = 0; c < q.cols(); ++c)
    if (r(c, c) < 0) q.col(c) *= -1.0;
  const M out = wide ? M(q.transpose()) : q;
  std::size_t i = 0;
  fill_with(v, rng, [&](Rng&) { return gain * out.data()[i++]; });
}
/// PyTorch's nn.Linear default (kaiming_uniform with a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
template <class T, class S, class B>
void torch_linear_default(const Var<T, S, B>& v, Rng& rng, std::size_t fan_in) {
  uniform(v, rng, fan_in ? 1.0 / std::sqrt(double(fan_in)) : 0.0);
}

}  // namespace attn::nn::init
