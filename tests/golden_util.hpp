// SPDX-License-Identifier: MIT
// Test helpers: load PyTorch golden tensors (tests/golden/*.safetensors) and compare with a
// norm-relative error, max|a - b| / max(max|b|, tiny), recording the largest error seen.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <attn/attn.hpp>
#include <attn/io/safetensors.hpp>

namespace golden {

inline attn::io::SafetensorsFile load(const std::string& name) {
  return attn::io::read_safetensors(std::string(ATTN_TEST_DATA_DIR) + "/golden/" + name + ".safetensors");
}

template <class T>
attn::Tensor<T> tensor(const attn::io::SafetensorsFile& f, const std::string& name) {
  const auto& r = f.at(name);
  auto v = r.to_vector<T>();
  attn::Dims d;
  for (auto e : r.shape) d.push_back(e);
  return attn::Tensor<T>::from(d, std::span<const T>(v));
}

/// Largest norm-relative error per golden tensor; printed at exit when ATTN_GOLDEN_REPORT is set.
struct WorstErrors {
  std::map<std::string, double> w;
  ~WorstErrors() {
    if (!std::getenv("ATTN_GOLDEN_REPORT")) return;
    for (auto& [k, v] : w) std::fprintf(stderr, "golden %-48s %.3g\n", k.c_str(), v);
  }
};
inline std::map<std::string, double>& worst() {
  static WorstErrors w;
  return w.w;
}

template <class T, class S, class B>
double rel_error(const attn::Tensor<T, S, B>& got, const attn::Tensor<double>& want) {
  REQUIRE(got.numel() == want.numel());
  double num = 0, den = 1e-30;
  for (std::size_t i = 0; i < want.numel(); ++i) {
    num = std::max(num, std::abs(double(got[i]) - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / den;
}

/// Checks got against golden tensor `name` of file f within tol (norm-relative).
template <class T, class S, class B>
void expect_close(const attn::io::SafetensorsFile& f, const std::string& name, const attn::Tensor<T, S, B>& got, double tol) {
  auto want = tensor<double>(f, name);
  INFO(f.source << " / " << name);
  REQUIRE(got.dims().numel() == want.dims().numel());
  const double e = rel_error(got, want);
  auto& w = worst()[f.source.substr(f.source.find_last_of('/') + 1) + ":" + name];
  w = std::max(w, e);
  CHECK(e <= tol);
}

/// Copies golden tensor `name` of f into the parameter p (same shape).
template <class T, class S>
void copy_param(const attn::Var<T, S>& p, const attn::io::SafetensorsFile& f, const std::string& name) {
  auto t = tensor<T>(f, name);
  REQUIRE(t.dims() == p.dims());
  std::copy_n(t.data(), t.numel(), const_cast<T*>(p.raw().data()));
}

/// Loads every parameter of module m from f, each under its torch name.
template <class T, class M>
void load_parameters(M& m, const attn::io::SafetensorsFile& f) {
  for (auto& [n, p] : m.named_parameters()) {
    auto v = tensor<T>(f, n);
    REQUIRE(v.numel() == p->numel());
    p->copy_from_host(v.data());
  }
}

}  // namespace golden
