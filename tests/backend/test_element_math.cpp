// SPDX-License-Identifier: MIT
// The element math both backends share (backend/element_math.hpp), on the host: each backward
// formula against central differences of its forward, the online softmax against a direct
// log-sum-exp, the dropout hash's rate and determinism; and the CPU LSTM cell (Eigen's vectorised
// activations) against its scalar reference.
#include <attn/backend/cpu/lstm.hpp>
#include <attn/backend/element_math.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace elem = attn::elem;
using testutil::filled;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// Central difference of f at x.
template <class F>
double numeric_derivative(F f, double x, double h = 1e-6) {
  return (f(x + h) - f(x - h)) / (2 * h);
}

/// One unit of the LSTM cell, forward: pre-activations (ai, af, ag, ao), c_prev -> (c, h).
struct Cell {
  double ai, af, ag, ao, c_prev;
  bool has_prev;
  double c() const { return elem::lstm_cell_state(elem::lstm_activate(ai, af, ag, ao), c_prev, has_prev); }
  double h() const { return elem::lstm_hidden(elem::lstm_activate(ai, af, ag, ao).o, std::tanh(c())); }
};

}  // namespace

TEST_CASE("element math: sigmoid and tanh activations of the LSTM gates, without overflow") {
  const auto a = elem::lstm_activate(0.5, -1.25, 0.75, 2.0);
  CHECK(a.i == Approx(1 / (1 + std::exp(-0.5))).epsilon(1e-15));
  CHECK(a.f == Approx(1 / (1 + std::exp(1.25))).epsilon(1e-15));
  CHECK(a.g == Approx(std::tanh(0.75)).epsilon(1e-15));
  CHECK(a.o == Approx(1 / (1 + std::exp(-2.0))).epsilon(1e-15));
  const auto big = elem::lstm_activate(1000.f, -1000.f, 1000.f, -1000.f);
  CHECK(big.i == 1.f);
  CHECK(big.f == 0.f);
  CHECK(big.g == 1.f);
  CHECK(big.o == 0.f);
  CHECK(elem::lstm_cell_state(a, 0.3, true) == Approx(a.f * 0.3 + a.i * a.g));
  CHECK(elem::lstm_cell_state(a, 123.0, false) == a.i * a.g);  // the zero state ignores c_prev
}

TEST_CASE("element math: the LSTM cell's backward is the derivative of its forward") {
  for (bool has_prev : {true, false}) {
    const Cell x{0.3, -0.7, 0.45, 1.1, has_prev ? -0.8 : 0.0, has_prev};
    const double dh = 0.6, dc = -0.35;  // dL/dh of this step, dL/dc from the next step: L = dh h + dc c
    const auto loss = [&](const Cell& y) { return dh * y.h() + dc * y.c(); };
    const auto a = elem::lstm_activate(x.ai, x.af, x.ag, x.ao);
    const auto d = elem::lstm_cell_backward(a, std::tanh(x.c()), x.c_prev, has_prev, dh, dc);
    INFO((has_prev ? "with c_prev" : "zero state"));
    CHECK(d.i == Approx(numeric_derivative([&](double v) { Cell y = x; y.ai = v; return loss(y); }, x.ai)).epsilon(1e-8));
    CHECK(d.f == Approx(numeric_derivative([&](double v) { Cell y = x; y.af = v; return loss(y); }, x.af)).margin(1e-9));
    CHECK(d.g == Approx(numeric_derivative([&](double v) { Cell y = x; y.ag = v; return loss(y); }, x.ag)).epsilon(1e-8));
    CHECK(d.o == Approx(numeric_derivative([&](double v) { Cell y = x; y.ao = v; return loss(y); }, x.ao)).epsilon(1e-8));
    if (has_prev)
      CHECK(d.c_prev ==
            Approx(numeric_derivative([&](double v) { Cell y = x; y.c_prev = v; return loss(y); }, x.c_prev)).epsilon(1e-8));
  }
}

TEMPLATE_TEST_CASE("element math: the CPU LSTM cell (vectorised) against its scalar reference", "", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (std::size_t h : {1, 7, 16, 33}) {
    for (bool has_prev : {true, false}) {
      const std::size_t n = 5;
      const auto pre = filled<T>(n * 4 * h, 1), bias = filled<T>(4 * h, 2), c_prev = filled<T>(n * h, 3);
      auto g1 = pre, g2 = pre;
      std::vector<T> c1(n * h), h1(n * h), c2(n * h), h2(n * h);
      attn::kernels::lstm_cell_forward(attn::cpu{}, n, h, g1.data(), bias.data(), has_prev ? c_prev.data() : nullptr, c1.data(),
                                       h1.data());
      attn::kernels::lstm_cell_forward_reference(attn::cpu{}, n, h, g2.data(), bias.data(), has_prev ? c_prev.data() : nullptr,
                                                 c2.data(), h2.data());
      double err = 0;
      for (std::size_t i = 0; i < g1.size(); ++i) err = std::max(err, std::abs(double(g1[i]) - double(g2[i])));
      for (std::size_t i = 0; i < c1.size(); ++i)
        err = std::max({err, std::abs(double(c1[i]) - double(c2[i])), std::abs(double(h1[i]) - double(h2[i]))});
      INFO("h " << h << (has_prev ? " with c_prev" : " zero state"));
      CHECK(err <= tol);
      // Backward: the kernel against elem::lstm_cell_backward unit by unit.
      const auto dh = filled<T>(n * h, 4), dc0 = filled<T>(n * h, 5);
      auto dc = dc0;
      std::vector<T> dg(n * 4 * h);
      attn::kernels::lstm_cell_backward(attn::cpu{}, n, h, g1.data(), c1.data(), has_prev ? c_prev.data() : nullptr, dh.data(),
                                        dc.data(), dg.data());
      double berr = 0;
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t k = 0; k < h; ++k) {
          const T* a = g1.data() + r * 4 * h;
          const auto d = elem::lstm_cell_backward(elem::LstmGates<T>{a[k], a[h + k], a[2 * h + k], a[3 * h + k]},
                                                  std::tanh(c1[r * h + k]), c_prev[r * h + k], has_prev, dh[r * h + k],
                                                  dc0[r * h + k]);
          const T* got = dg.data() + r * 4 * h;
          berr = std::max({berr, std::abs(double(got[k]) - d.i), std::abs(double(got[h + k]) - d.f),
                           std::abs(double(got[2 * h + k]) - d.g), std::abs(double(got[3 * h + k]) - d.o),
                           std::abs(double(dc[r * h + k]) - d.c_prev)});
        }
      CHECK(berr <= 10 * tol);
    }
  }
}

TEST_CASE("element math: layer-norm statistics and dx are the derivative of the normalisation") {
  const std::vector<double> x = {0.3, -1.2, 2.5, 0.05, -0.7, 1.9}, gamma = {1.1, 0.9, -0.4, 2.0, 0.5, 1.3},
                            gy = {0.2, -0.6, 0.45, 0.1, -0.3, 0.8};
  const double eps = 1e-5;
  const std::size_t d = x.size();
  // L = sum_j gy_j * (xhat_j * gamma_j) as a function of x.
  const auto forward = [&](const std::vector<double>& v, std::vector<double>* xhat, double* rstd) {
    double mu = 0, sq = 0;
    for (double e : v) mu += e;
    mu /= double(d);
    for (double e : v) sq += (e - mu) * (e - mu);
    const double rs = elem::layer_norm_rstd<double>(sq, d, eps);
    double var = sq / double(d);
    CHECK(rs == Approx(1 / std::sqrt(var + eps)).epsilon(1e-15));
    double loss = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const double h = elem::layer_norm_xhat(v[j], mu, rs);
      if (xhat) (*xhat)[j] = h;
      loss += gy[j] * h * gamma[j];
    }
    if (rstd) *rstd = rs;
    return loss;
  };
  std::vector<double> xhat(d);
  double rstd = 0;
  forward(x, &xhat, &rstd);
  double m1 = 0, m2 = 0;
  for (std::size_t j = 0; j < d; ++j) {
    m1 += gy[j] * gamma[j];
    m2 += gy[j] * gamma[j] * xhat[j];
  }
  m1 /= double(d);
  m2 /= double(d);
  for (std::size_t j = 0; j < d; ++j) {
    const double dx = elem::layer_norm_dx(rstd, gy[j], gamma[j], m1, m2, xhat[j]);
    const double num = numeric_derivative([&](double v) { auto y = x; y[j] = v; return forward(y, nullptr, nullptr); }, x[j]);
    INFO("j " << j);
    CHECK(dx == Approx(num).epsilon(1e-7));
  }
}

TEST_CASE("element math: softmax, log-softmax and cross-entropy gradients") {
  const std::vector<double> s = {0.4, -1.3, 2.2, 0.9}, dy = {0.3, -0.5, 0.1, 0.7};
  const std::size_t c = s.size();
  const auto logp_of = [&](const std::vector<double>& v) {
    double m = -inf, sum = 0;
    for (double e : v) m = std::max(m, e);
    for (double e : v) sum += std::exp(e - m);
    std::vector<double> out(v.size());
    for (std::size_t j = 0; j < v.size(); ++j) out[j] = v[j] - m - std::log(sum);
    return out;
  };
  const auto lp = logp_of(s);
  double sum_dy = 0, sum_dyy = 0;
  for (std::size_t j = 0; j < c; ++j) {
    sum_dy += dy[j];
    sum_dyy += dy[j] * std::exp(lp[j]);
  }
  for (std::size_t j = 0; j < c; ++j) {
    const auto shifted = [&](double v) { auto y = s; y[j] = v; return logp_of(y); };
    const double num_log = numeric_derivative([&](double v) { const auto l = shifted(v); double a = 0; for (std::size_t k = 0; k < c; ++k) a += dy[k] * l[k]; return a; }, s[j]);
    const double num_soft = numeric_derivative([&](double v) { const auto l = shifted(v); double a = 0; for (std::size_t k = 0; k < c; ++k) a += dy[k] * std::exp(l[k]); return a; }, s[j]);
    INFO("j " << j);
    CHECK(elem::log_softmax_grad(lp[j], dy[j], sum_dy) == Approx(num_log).epsilon(1e-8));
    CHECK(elem::softmax_grad(std::exp(lp[j]), dy[j], sum_dyy) == Approx(num_soft).epsilon(1e-8));
    // attention_score_grad is the softmax Jacobian with D = rowsum(p * dp).
    CHECK(elem::attention_score_grad(std::exp(lp[j]), dy[j], sum_dyy) == elem::softmax_grad(std::exp(lp[j]), dy[j], sum_dyy));
  }
  for (double eps : {0.0, 0.1}) {
    const std::size_t t = 2;
    const auto loss = [&](const std::vector<double>& v) {
      const auto l = logp_of(v);
      double sum = 0;
      for (double e : l) sum += e;
      return elem::cross_entropy_row(l[t], sum, eps, c);
    };
    double smooth = 0;
    for (double e : lp) smooth += e;
    CHECK(loss(s) == Approx(-(1 - eps) * lp[t] - eps * smooth / double(c)).epsilon(1e-15));
    const double scale = 0.5, g0 = 0.25;  // dloss / count, and a gradient already there
    for (std::size_t j = 0; j < c; ++j) {
      const double num = numeric_derivative([&](double v) { auto y = s; y[j] = v; return loss(y); }, s[j]);
      INFO("eps " << eps << " j " << j);
      CHECK(elem::cross_entropy_grad(g0, lp[j], j == t, scale, eps, c) == Approx(g0 + scale * num).epsilon(1e-8));
    }
  }
}

TEST_CASE("element math: the online softmax step gives the direct log-sum-exp and weighted sum") {
  const std::vector<double> s = {-inf, -inf, 0.5, 3.0, -2.0, -inf, 7.5, 1.0, -0.25, 4.0};
  const std::vector<double> v = {9, 9, 1, 2, 3, 9, 4, 5, 6, 7};  // one value per score
  double m_ref = -inf, l_ref = 0, o_ref = 0;
  for (double e : s) m_ref = std::max(m_ref, e);
  for (std::size_t j = 0; j < s.size(); ++j) {
    l_ref += std::exp(s[j] - m_ref);
    o_ref += std::exp(s[j] - m_ref) * v[j];
  }
  for (std::size_t block : {1, 2, 3, 10}) {
    double m = -inf, l = 0, o = 0;
    for (std::size_t j0 = 0; j0 < s.size(); j0 += block) {
      const std::size_t j1 = std::min(s.size(), j0 + block);
      double bm = -inf;
      for (std::size_t j = j0; j < j1; ++j) bm = std::max(bm, s[j]);
      const auto step = elem::online_softmax_step(m, bm);
      if (step.m_new == -inf) continue;  // nothing visible yet
      l *= step.alpha;
      o *= step.alpha;
      for (std::size_t j = j0; j < j1; ++j) {
        l += std::exp(s[j] - step.m_new);
        o += std::exp(s[j] - step.m_new) * v[j];
      }
      m = step.m_new;
    }
    INFO("block " << block);
    CHECK(elem::log_sum_exp(m, l) == Approx(m_ref + std::log(l_ref)).epsilon(1e-14));
    CHECK(o / l == Approx(o_ref / l_ref).epsilon(1e-14));
  }
  const auto none = elem::online_softmax_step(-inf, -inf);
  CHECK(none.m_new == -inf);
  CHECK(none.alpha == 0.0);  // never NaN
  CHECK(elem::log_sum_exp(-inf, 0.0) == inf);
  CHECK(elem::log_sum_exp(2.0f, 0.f) == std::numeric_limits<float>::infinity());
}

TEST_CASE("element math: the dropout hash is deterministic and drops at rate p") {
  const double p = 0.3;
  const auto threshold = static_cast<std::uint32_t>(p * double(1u << 24));
  const float keep = float(1 / (1 - p));
  std::size_t dropped = 0;
  const std::size_t n = 200000;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float z = elem::dropout_factor(42u, i, threshold, keep);
    REQUIRE((z == 0.f || z == keep));
    dropped += z == 0.f;
    REQUIRE(z == elem::dropout_factor(42u, i, threshold, keep));
  }
  CHECK(double(dropped) / double(n) == Approx(p).margin(0.005));
  std::size_t same = 0;  // another seed draws another mask
  for (std::uint64_t i = 0; i < 1000; ++i)
    same += (elem::dropout_factor(42u, i, threshold, 1.0) == 0) == (elem::dropout_factor(43u, i, threshold, 1.0) == 0);
  CHECK(same < 800);
  CHECK(elem::dropout_factor(42u, 7u, 0u, 2.0) == 2.0);  // p = 0: nothing dropped
}
