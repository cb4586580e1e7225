// SPDX-License-Identifier: MIT
// The element math both backends share (backend/element_math.hpp), on the host: each backward
// formula against central differences of its forward, the online softmax against a direct
// log-sum-exp, the dropout hash's rate and determinism; and the CPU's compiler-vectorised kernels
// (backend/cpu/vector_kernels.hpp: the LSTM and GRU cells, layer norm, Adam) at every ISA level the machine
// runs, against scalar references.
#include <attn/backend/cpu/gru.hpp>
#include <attn/backend/cpu/lstm.hpp>
#include <attn/backend/element_math.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
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

TEST_CASE("element math: the GRU cell's backward is the derivative of its forward") {
  // Pre-activations of one unit: input side (ir, iz, in), recurrent side (hr, hz, hn), and h_prev.
  struct Unit {
    double ir, iz, in, hr, hz, hn, h_prev;
    double h() const { return elem::gru_hidden(elem::gru_activate(ir, iz, in, hr, hz, hn), h_prev); }
  };
  const Unit x{0.3, -0.7, 0.45, -0.2, 0.9, 1.3, -0.8};
  const double dh = 0.6;  // L = dh h
  const auto loss = [&](const Unit& y) { return dh * y.h(); };
  const auto a = elem::gru_activate(x.ir, x.iz, x.in, x.hr, x.hz, x.hn);
  CHECK(x.h() == Approx((1 - a.z) * a.n + a.z * x.h_prev).epsilon(1e-15));
  const auto d = elem::gru_cell_backward(a, x.h_prev, dh);
  const auto num = [&](double Unit::*m) {
    return numeric_derivative([&](double v) { Unit y = x; y.*m = v; return loss(y); }, x.*m);
  };
  CHECK(d.r == Approx(num(&Unit::ir)).epsilon(1e-8));
  CHECK(d.r == Approx(num(&Unit::hr)).epsilon(1e-8));
  CHECK(d.z == Approx(num(&Unit::iz)).epsilon(1e-8));
  CHECK(d.z == Approx(num(&Unit::hz)).epsilon(1e-8));
  CHECK(d.n_in == Approx(num(&Unit::in)).epsilon(1e-8));
  CHECK(d.n_h == Approx(num(&Unit::hn)).epsilon(1e-8));
  CHECK(d.h_prev == Approx(num(&Unit::h_prev)).epsilon(1e-8));  // the direct part: hn is held fixed here
}

namespace {

/// Every ISA level this machine runs, lowest first.
std::vector<attn::Isa> levels() {
  std::vector<attn::Isa> v;
  for (int l = 0; l <= int(attn::cpu::isa_supported()); ++l) v.push_back(attn::Isa(l));
  return v;
}

}  // namespace

TEMPLATE_TEST_CASE("vector kernels: the CPU LSTM cell at every ISA level against its scalar reference", "", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (const attn::Isa level : levels()) {
    const attn::ScopedIsa scoped(level);
    for (std::size_t h : {1, 7, 16, 33, 128}) {
      for (bool has_prev : {true, false}) {
        const std::size_t n = 5;
        auto pre = filled<T>(n * 4 * h, 1);
        const auto bias = filled<T>(4 * h, 2), c_prev = filled<T>(n * h, 3);
        // The activations' edges: saturation both ways, the tiny-argument branch of tanh, zero.
        const T edges[] = {T(-100), T(100), T(-20), T(20), T(1e-6), T(-3e-4), T(0), T(8.5), T(-8.5), T(-87.5)};
        for (std::size_t i = 0; i < std::size(edges) && i < pre.size(); ++i) pre[i * 3 % pre.size()] = edges[i];
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
        INFO("level " << attn::isa_name(level) << " h " << h << (has_prev ? " with c_prev" : " zero state"));
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
}

TEMPLATE_TEST_CASE("vector kernels: the CPU GRU cell at every ISA level against its scalar reference", "", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (const attn::Isa level : levels()) {
    const attn::ScopedIsa scoped(level);
    for (std::size_t h : {1, 7, 16, 33, 128}) {
      for (bool has_prev : {true, false}) {
        const std::size_t n = 5;
        auto pre = filled<T>(n * 4 * h, 1);
        const auto gh = filled<T>(n * 3 * h, 6), b_ih = filled<T>(3 * h, 2), b_hh = filled<T>(3 * h, 7), h_prev = filled<T>(n * h, 3);
        const T edges[] = {T(-100), T(100), T(-20), T(20), T(1e-6), T(-3e-4), T(0), T(8.5), T(-8.5), T(-87.5)};
        for (std::size_t i = 0; i < std::size(edges) && i < n * 3 * h; ++i) pre[(i * 5 % n) * 4 * h + i * 3 % (3 * h)] = edges[i];
        auto g1 = pre, g2 = pre;
        std::vector<T> h1(n * h), h2(n * h);
        const T* ghp = has_prev ? gh.data() : nullptr;
        const T* hp = has_prev ? h_prev.data() : nullptr;
        attn::kernels::gru_cell_forward(attn::cpu{}, n, h, g1.data(), ghp, b_ih.data(), b_hh.data(), hp, h1.data());
        attn::kernels::gru_cell_forward_reference(attn::cpu{}, n, h, g2.data(), ghp, b_ih.data(), b_hh.data(), hp, h2.data());
        double err = 0;
        for (std::size_t i = 0; i < g1.size(); ++i) err = std::max(err, std::abs(double(g1[i]) - double(g2[i])));
        for (std::size_t i = 0; i < h1.size(); ++i) err = std::max(err, std::abs(double(h1[i]) - double(h2[i])));
        INFO("level " << attn::isa_name(level) << " h " << h << (has_prev ? " with h_prev" : " zero state"));
        CHECK(err <= tol);
        // Backward: the kernel against elem::gru_cell_backward unit by unit; z dh is added to dh_prev.
        const auto dh = filled<T>(n * h, 4), dp0 = filled<T>(n * h, 5);
        auto dp = dp0;
        std::vector<T> dgi(n * 3 * h), dgh(n * 3 * h);
        attn::kernels::gru_cell_backward(attn::cpu{}, n, h, g1.data(), hp, dh.data(), has_prev ? dp.data() : nullptr, dgi.data(),
                                         dgh.data());
        double berr = 0;
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t k = 0; k < h; ++k) {
            const T* a = g1.data() + r * 4 * h;
            const auto d = elem::gru_cell_backward(elem::GruGates<T>{a[k], a[h + k], a[2 * h + k], a[3 * h + k]},
                                                   has_prev ? h_prev[r * h + k] : T(0), dh[r * h + k]);
            const T* gi = dgi.data() + r * 3 * h;
            const T* gq = dgh.data() + r * 3 * h;
            berr = std::max({berr, std::abs(double(gi[k]) - d.r), std::abs(double(gi[h + k]) - d.z), std::abs(double(gi[2 * h + k]) - d.n_in),
                             std::abs(double(gq[k]) - d.r), std::abs(double(gq[h + k]) - d.z), std::abs(double(gq[2 * h + k]) - d.n_h),
                             std::abs(double(dp[r * h + k]) - (has_prev ? double(dp0[r * h + k]) + d.h_prev : double(dp0[r * h + k])))});
          }
        CHECK(berr <= 10 * tol);
      }
    }
  }
}

TEST_CASE("vector kernels: the float LSTM activations are within a few ulp of std::exp and std::tanh, and keep NaN") {
  for (const attn::Isa level : levels()) {
    const attn::ScopedIsa scoped(level);
    // One row of 4 gates of width h: i, f, g, o; the zero state, so c = sigmoid(i) tanh(g).
    const std::size_t h = 2003;
    std::vector<float> gates(4 * h), bias(4 * h, 0.0f), c(h), hh(h);
    for (std::size_t k = 0; k < h; ++k) {
      const float x = -100.0f + 200.0f * float(k) / float(h - 1);  // -100 .. 100, through 0
      const float small = (float(k) - float(h / 2)) * 1e-6f;      // around tanh's tiny-argument switch
      gates[k] = x, gates[h + k] = small, gates[2 * h + k] = k % 2 ? x / 10 : small, gates[3 * h + k] = x / 25;
    }
    gates[7] = std::numeric_limits<float>::quiet_NaN();
    gates[2 * h + 9] = std::numeric_limits<float>::quiet_NaN();
    const auto pre = gates;
    attn::kernels::lstm_cell_forward<float>(attn::cpu{}, 1, h, gates.data(), bias.data(), nullptr, c.data(), hh.data());
    double worst = 0;
    for (std::size_t j = 0; j < 4 * h; ++j) {
      if (j == 7 || j == 2 * h + 9) {
        CHECK(std::isnan(gates[j]));
        continue;
      }
      const double x = pre[j];
      const double ref = j >= 2 * h && j < 3 * h ? std::tanh(x) : 1 / (1 + std::exp(-x));
      if (std::abs(ref) < 1e-30) continue;  // sigmoid(-100): both about 0
      worst = std::max(worst, std::abs(double(gates[j]) - ref) / std::abs(ref) / double(std::numeric_limits<float>::epsilon()));
    }
    INFO("level " << attn::isa_name(level));
    CHECK(worst <= 6.0);  // relative, in units of FLT_EPSILON
    CHECK(std::isnan(c[7]));
    CHECK(std::isnan(c[9]));
  }
}

TEMPLATE_TEST_CASE("vector kernels: layer norm at every ISA level against a double reference", "", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (const attn::Isa level : levels()) {
    const attn::ScopedIsa scoped(level);
    for (std::size_t d : {1, 5, 16, 33, 128}) {
      for (std::size_t rows : {3, 300}) {  // 300 x 128 rows: split over the threads
        const auto x = filled<T>(rows * d, 11), gamma = filled<T>(d, 12), beta = filled<T>(d, 13), gy = filled<T>(rows * d, 14);
        std::vector<T> y(rows * d), xhat(rows * d), rstd(rows), dx(rows * d, T(0.5)), dgamma(d, T(0)), dbeta(d, T(0));
        attn::kernels::layer_norm_forward(attn::cpu{}, x.data(), gamma.data(), beta.data(), rows, d, 1e-5, y.data(), xhat.data(),
                                          rstd.data());
        attn::kernels::layer_norm_backward(attn::cpu{}, gy.data(), xhat.data(), gamma.data(), rstd.data(), rows, d, dx.data(),
                                           dgamma.data(), dbeta.data());
        double err = 0;
        std::vector<double> rdg(d, 0), rdb(d, 0);
        for (std::size_t r = 0; r < rows; ++r) {
          double mu = 0, var = 0;
          for (std::size_t j = 0; j < d; ++j) mu += double(x[r * d + j]);
          mu /= double(d);
          for (std::size_t j = 0; j < d; ++j) var += (double(x[r * d + j]) - mu) * (double(x[r * d + j]) - mu);
          const double rs = 1 / std::sqrt(var / double(d) + 1e-5);
          double m1 = 0, m2 = 0;
          for (std::size_t j = 0; j < d; ++j) {
            const double h = (double(x[r * d + j]) - mu) * rs, gg = double(gy[r * d + j]) * double(gamma[j]);
            err = std::max({err, std::abs(double(xhat[r * d + j]) - h), std::abs(double(y[r * d + j]) - (h * double(gamma[j]) + double(beta[j])))});
            m1 += gg, m2 += gg * h;
            rdg[j] += double(gy[r * d + j]) * h, rdb[j] += double(gy[r * d + j]);
          }
          m1 /= double(d), m2 /= double(d);
          err = std::max(err, std::abs(double(rstd[r]) - rs) / rs);
          for (std::size_t j = 0; j < d; ++j) {
            const double h = (double(x[r * d + j]) - mu) * rs, gg = double(gy[r * d + j]) * double(gamma[j]);
            err = std::max(err, std::abs(double(dx[r * d + j]) - (0.5 + rs * (gg - m1 - h * m2))) / std::max(1.0, rs));
          }
        }
        for (std::size_t j = 0; j < d; ++j)
          err = std::max({err, std::abs(double(dgamma[j]) - rdg[j]) / double(rows), std::abs(double(dbeta[j]) - rdb[j]) / double(rows)});
        INFO("level " << attn::isa_name(level) << " d " << d << " rows " << rows);
        CHECK(err <= tol);
      }
    }
  }
}

TEMPLATE_TEST_CASE("vector kernels: Adam's update at every ISA level against the scalar formula", "", float, double) {
  using T = TestType;
  // Absolute, on values up to 4: a few roundings of float (2.4e-7 apart at 2-4) in each result.
  const double tol = std::is_same_v<T, float> ? 4e-6 : 1e-14;
  for (const attn::Isa level : levels()) {
    const attn::ScopedIsa scoped(level);
    // Tails of every vector width, the kernel's 1024-element blocks, and a size split over threads.
    for (std::size_t n : {1, 7, 15, 16, 17, 1023, 1024, 1025, 5000, 70001}) {
      for (int mode = 0; mode < 3; ++mode) {  // no decay, Adam's L2, AdamW
        attn::kernels::vec::AdamStep<T> s;
        s.lr = T(0.01), s.weight_decay = mode ? T(0.1) : T(0), s.decoupled = mode == 2;
        s.one_minus_beta1 = T(0.1), s.beta2 = T(0.999), s.one_minus_beta2 = T(0.001);
        s.step_size = T(0.01 / (1 - 0.9 * 0.9)), s.bc2_sqrt = T(std::sqrt(1 - 0.999 * 0.999)), s.eps = T(1e-8);
        auto p = filled<T>(n, 21), m = filled<T>(n, 23), v = filled<T>(n, 24);
        const auto g = filled<T>(n, 22);
        for (auto& e : v) e = e * e;  // a second moment is not negative
        const auto p0 = p, m0 = m, v0 = v;
        attn::kernels::adam_update(attn::cpu{}, n, p.data(), g.data(), m.data(), v.data(), s);
        double err = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double lr = double(s.lr), wd = double(s.weight_decay);
          double pi = double(p0[i]) * (mode == 2 ? 1 - lr * wd : 1.0);
          const double gi = double(g[i]) + (mode == 1 ? wd * pi : 0.0);
          const double mi = double(m0[i]) + (gi - double(m0[i])) * double(s.one_minus_beta1);
          const double vi = double(v0[i]) * double(s.beta2) + double(s.one_minus_beta2) * gi * gi;
          pi -= double(s.step_size) * mi / (std::sqrt(vi) / double(s.bc2_sqrt) + double(s.eps));
          err = std::max({err, std::abs(double(p[i]) - pi), std::abs(double(m[i]) - mi), std::abs(double(v[i]) - vi)});
        }
        INFO("level " << attn::isa_name(level) << " n " << n << " mode " << mode);
        CHECK(err <= tol);
      }
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
