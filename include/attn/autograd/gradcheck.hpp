// SPDX-License-Identifier: MIT
// Checks an op's backward against central finite differences, in double precision.
//   auto r = attn::gradcheck([](attn::Tape& t, auto& in) { return attn::tanh(t, in[0]); }, {x});
//   REQUIRE(r.ok);
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../backend/cpu.hpp"
#include "../core/rng.hpp"
#include "var.hpp"

namespace attn {

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;   // largest |analytic - numeric|
  double max_rel_error = 0;   // largest |analytic - numeric| / max(|numeric|, 1)
  std::string worst;          // "input 1, element 7: analytic 0.31, numeric 0.29"
};

struct GradcheckOptions {
  double eps = 1e-6;
  double tolerance = 1e-6;   // on |a - n| / max(|n|, 1)
  std::uint64_t seed = 1234;
};

/// The function a gradient check evaluates, its result with the shape erased.
using GradcheckFunction = std::function<Var<double>(Tape&, std::vector<Var<double>>&)>;

/// gradcheck on an erased function: the check's body is compiled once, not once per caller's lambda.
inline GradcheckResult gradcheck_function(const GradcheckFunction& f, const std::vector<Tensor<double>>& inputs, GradcheckOptions opt = {}) {
  GradcheckResult res;
  std::vector<Var<double>> vars;
  for (const auto& x : inputs) vars.emplace_back(x.clone(), true);
  Tape tape;
  auto out = f(tape, vars);
  Rng rng(opt.seed);
  auto w = Tensor<double>(out.dims());
  for (std::size_t i = 0; i < w.numel(); ++i) w[i] = rng.uniform(-1, 1);
  tape.backward(out, w);

  auto loss_at = [&](std::vector<Tensor<double>>& xs) {
    std::vector<Var<double>> vs;
    for (auto& x : xs) vs.emplace_back(x, false);
    Tape t;
    auto o = f(t, vs);
    double s = 0;
    for (std::size_t i = 0; i < o.numel(); ++i) s += o.raw()[i] * w[i];
    return s;
  };
  std::vector<Tensor<double>> xs;
  for (const auto& x : inputs) xs.push_back(x.clone());
  for (std::size_t k = 0; k < xs.size(); ++k) {
    auto analytic = vars[k].grad();
    for (std::size_t i = 0; i < xs[k].numel(); ++i) {
      const double orig = xs[k][i];
      xs[k][i] = orig + opt.eps;
      const double lp = loss_at(xs);
      xs[k][i] = orig - opt.eps;
      const double lm = loss_at(xs);
      xs[k][i] = orig;
      const double num = (lp - lm) / (2 * opt.eps);
      const double an = analytic.empty() ? 0.0 : analytic[i];
      const double abs_err = std::abs(an - num);
      const double rel = abs_err / std::max(std::abs(num), 1.0);
      res.max_abs_error = std::max(res.max_abs_error, abs_err);
      if (rel > res.max_rel_error || !std::isfinite(an)) {
        res.max_rel_error = std::isfinite(an) ? rel : INFINITY;
        res.worst = "input " + std::to_string(k) + ", element " + std::to_string(i) + ": analytic " + std::to_string(an) +
                    ", numeric " + std::to_string(num);
      }
    }
  }
  res.ok = res.max_rel_error <= opt.tolerance;
  return res;
}

/// f(Tape&, std::vector<Var<double>>& inputs) returns a Var of any shape. The check projects it
/// onto random weights w, L = sum(f * w), and compares dL/dinput from the tape against
/// (L(x + eps) - L(x - eps)) / (2 eps) for every element of every input.
template <class F>
GradcheckResult gradcheck(F&& f, const std::vector<Tensor<double>>& inputs, GradcheckOptions opt = {}) {
  return gradcheck_function([&f](Tape& t, std::vector<Var<double>>& in) { return f(t, in).erased(); }, inputs, opt);
}

/// A tensor of the given dims with values uniform in [lo, hi) from rng.
inline Tensor<double> random_tensor(Rng& rng, const Dims& d, double lo = -1, double hi = 1) {
  Tensor<double> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = rng.uniform(lo, hi);
  return t;
}

}  // namespace attn
