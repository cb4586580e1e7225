// SPDX-License-Identifier: MIT
// nn::init against torch.nn.init's definitions: gains, fans, the bounds and spreads of the Xavier,
// Kaiming and truncated-normal draws (on tensors large enough for the sample statistics to be
// tight), eye, and orthogonal's orthonormal rows or columns; errors for tensors without fans.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <attn/attn.hpp>

using attn::Dims;
namespace init = attn::nn::init;

namespace {

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};
template <class T>
Stats stats(const attn::Var<T>& v) {
  Stats s;
  const auto x = v.raw().to_vector();
  for (T e : x) s.mean += double(e);
  s.mean /= double(x.size());
  for (T e : x) {
    s.std += (double(e) - s.mean) * (double(e) - s.mean);
    s.max_abs = std::max(s.max_abs, std::abs(double(e)));
  }
  s.std = std::sqrt(s.std / double(x.size()));
  return s;
}

template <class T = double>
attn::Var<T> param(const Dims& d) {
  return attn::Var<T>(attn::Tensor<T>::zeros(d), true);
}

}  // namespace

TEST_CASE("init: calculate_gain and the fans are torch's") {
  CHECK(init::calculate_gain(init::Nonlinearity::linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::sigmoid) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::relu) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu) == Approx(std::sqrt(2.0 / (1 + 0.0001))));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, 0.2) == Approx(std::sqrt(2.0 / 1.04)));
  CHECK(init::calculate_gain(init::Nonlinearity::selu) == 0.75);
  const auto f = init::fans(Dims{8, 4, 3, 3}, "t");  // a conv weight (out, in, kh, kw)
  CHECK(f.fan_in == 36);
  CHECK(f.fan_out == 72);
  CHECK_THROWS_WITH(init::fans(Dims{5}, "kaiming_normal"), Catch::Contains("kaiming_normal") && Catch::Contains("at least 2 axes"));
  auto bias = param(Dims{5});
  attn::Rng rng(1);
  CHECK_THROWS_AS(init::xavier_uniform(bias, rng), attn::ShapeError);
  CHECK_THROWS_AS(init::kaiming_uniform(bias, rng), attn::ShapeError);
  CHECK_THROWS_AS(init::orthogonal(bias, rng), attn::ShapeError);
  CHECK_THROWS_AS(init::eye(bias), attn::ShapeError);
  CHECK_THROWS_AS(init::trunc_normal(bias, rng, 0, 1, 3, 2), attn::ArgumentError);
  CHECK_THROWS_AS(init::trunc_normal(bias, rng, 0, 1, 7, 9), attn::ArgumentError);
}

TEST_CASE("init: Xavier and Kaiming draws have torch's bounds and spreads") {
  attn::Rng rng(2026);
  const Dims d{256, 512};  // fan_out 256, fan_in 512
  auto w = param(d);
  init::xavier_uniform(w, rng);
  const double a = std::sqrt(6.0 / 768);
  auto s = stats(w);
  CHECK(s.max_abs <= a);
  CHECK(s.max_abs > 0.999 * a);
  CHECK(s.std == Approx(a / std::sqrt(3.0)).epsilon(0.02));
  init::xavier_normal(w, rng, 2.0);
  CHECK(stats(w).std == Approx(2.0 * std::sqrt(2.0 / 768)).epsilon(0.02));
  init::kaiming_uniform(w, rng, 0, init::FanMode::fan_out, init::Nonlinearity::relu);
  const double b = std::sqrt(2.0) * std::sqrt(3.0 / 256);
  s = stats(w);
  CHECK(s.max_abs <= b);
  CHECK(s.max_abs > 0.999 * b);
  init::kaiming_normal(w, rng);  // a = 0, fan_in, leaky_relu: gain sqrt(2)
  s = stats(w);
  CHECK(s.std == Approx(std::sqrt(2.0 / 512)).epsilon(0.02));
  CHECK(std::abs(s.mean) < 0.01 * s.std);
  // torch.nn.Linear's own default is kaiming_uniform with a = sqrt(5): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  init::kaiming_uniform(w, rng, std::sqrt(5.0));
  s = stats(w);
  CHECK(s.max_abs <= 1 / std::sqrt(512.0) + 1e-12);
  CHECK(s.max_abs > 0.999 / std::sqrt(512.0));
}

TEST_CASE("init: trunc_normal stays in [lo, hi] with the truncated law's spread, and eye") {
  attn::Rng rng(7);
  auto w = param(Dims{300, 400});
  init::trunc_normal(w, rng);  // N(0, 1) on [-2, 2]: std sqrt(1 - 4 phi(2) / (Phi(2) - Phi(-2)))
  auto s = stats(w);
  CHECK(s.max_abs <= 2.0);
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * M_PI), mass = std::erf(2 / std::sqrt(2.0));
  CHECK(s.std == Approx(std::sqrt(1 - 4 * phi2 / mass)).epsilon(0.01));
  init::trunc_normal(w, rng, 0.5, 0.02, 0.48, 0.54);
  const auto x = w.raw().to_vector();
  CHECK(*std::min_element(x.begin(), x.end()) >= 0.48);
  CHECK(*std::max_element(x.begin(), x.end()) <= 0.54);
  auto e = param<float>(Dims{3, 5});
  init::eye(e);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t c = 0; c < 5; ++c) CHECK(e.raw()(r, c) == (r == c ? 1.0f : 0.0f));
}

TEST_CASE("init: orthogonal gives orthonormal rows (wide) or columns (tall) times gain, any rank") {
  attn::Rng rng(11);
  struct Case {
    Dims d;
    double gain;
  };
  for (const Case& c : {Case{Dims{6, 10}, 1.0}, Case{Dims{10, 6}, 1.0}, Case{Dims{4, 2, 3}, 2.0}, Case{Dims{7, 7}, 0.5}}) {
    auto w = param(c.d);
    init::orthogonal(w, rng, c.gain);
    const std::size_t rows = c.d.v[0], cols = w.numel() / rows;
    const auto x = w.raw().to_vector();
    INFO(c.d.str());
    if (rows <= cols) {
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < rows; ++j) {
          double dot = 0;
          for (std::size_t k = 0; k < cols; ++k) dot += x[i * cols + k] * x[j * cols + k];
          CHECK(dot == Approx(i == j ? c.gain * c.gain : 0.0).margin(1e-12));
        }
    } else {
      for (std::size_t i = 0; i < cols; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          double dot = 0;
          for (std::size_t k = 0; k < rows; ++k) dot += x[k * cols + i] * x[k * cols + j];
          CHECK(dot == Approx(i == j ? c.gain * c.gain : 0.0).margin(1e-12));
        }
    }
  }
  // Drawn from the stream: the same seed, the same matrix; another seed, another.
  auto a = param<float>(Dims{5, 5}), b = param<float>(Dims{5, 5}), c = param<float>(Dims{5, 5});
  attn::Rng r1(3), r2(3), r3(4);
  init::orthogonal(a, r1);
  init::orthogonal(b, r2);
  init::orthogonal(c, r3);
  CHECK(a.raw().to_vector() == b.raw().to_vector());
  CHECK(a.raw().to_vector() != c.raw().to_vector());
}
