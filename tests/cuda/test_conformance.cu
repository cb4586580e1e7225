// SPDX-License-Identifier: MIT
// Backend conformance: every op and layer of conformance_ops.hpp / conformance_layers.hpp runs
// forward and backward on the CPU and on CUDA with the same random inputs, and every output and
// gradient must agree: float within 1e-4, double within 1e-10, relative to (1 + |cpu value|).
// Also the CUDA-specific error paths (bad ids and targets on device tensors).
// Its main (cuda_main.cpp) exits 77 ("SKIPPED: no CUDA device") without a GPU.
#include <catch2/catch.hpp>

#include <attn/cuda.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "conformance.hpp"

namespace {

/// FNV-1a of the case name: each case draws its own inputs.
std::uint64_t seed_of(const std::string& name) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-10;
}

/// Same arrays (names, sizes) and every value within tol * (1 + |want|); equal infinities and
/// two NaNs match.
void compare(const std::string& what, const conformance::Result& got, const conformance::Result& want, double tol) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (std::size_t a = 0; a < want.size(); ++a) {
    INFO("array " << want[a].name);
    REQUIRE(got[a].name == want[a].name);
    REQUIRE(got[a].values.size() == want[a].values.size());
    std::size_t bad = 0, first = 0;
    double worst = 0;
    for (std::size_t i = 0; i < want[a].values.size(); ++i) {
      const double g = got[a].values[i], w = want[a].values[i];
      const bool same = g == w || (std::isnan(g) && std::isnan(w));
      const double err = same ? 0.0 : std::abs(g - w) / (1.0 + std::abs(w));
      if (!(err <= tol)) {
        if (bad++ == 0) first = i;
      }
      if (err > worst || std::isnan(err)) worst = err;
    }
    if (bad) {
      INFO(bad << " of " << want[a].values.size() << " values differ; first at " << first << ": cuda " << got[a].values[first]
                << ", cpu " << want[a].values[first] << "; worst relative error " << worst << " (tolerance " << tol << ")");
      CHECK(bad == 0);
    } else {
      CHECK(bad == 0);
    }
  }
}

template <class T>
void run_all(const std::vector<std::string>& names, bool layers) {
  for (const auto& name : names) {
    DYNAMIC_SECTION(name) {
      const std::uint64_t seed = seed_of(name);
      const auto want = layers ? conformance::run_layers<T, attn::cpu>(name, seed) : conformance::run_ops<T, attn::cpu>(name, seed);
      const auto got = layers ? conformance::run_layers<T, attn::cuda>(name, seed) : conformance::run_ops<T, attn::cuda>(name, seed);
      compare(name, got, want, tolerance<T>());
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("conformance: autograd ops on cuda match cpu", "[cuda][conformance]", float, double) {
  run_all<TestType>(conformance::ops_cases(), false);
}

TEMPLATE_TEST_CASE("conformance: layers on cuda match cpu", "[cuda][conformance]", float, double) {
  run_all<TestType>(conformance::layer_cases(), true);
}

TEST_CASE("conformance: the example programs' models on cuda match cpu", "[cuda][conformance][models]") {
  for (const auto& name : conformance::model_cases()) {
    DYNAMIC_SECTION(name) {
      const std::uint64_t seed = seed_of(name);
      compare(name, conformance::run_models<attn::cuda>(name, seed), conformance::run_models<attn::cpu>(name, seed), tolerance<float>());
    }
  }
}

TEST_CASE("host-only features refuse a model on cuda, naming it", "[cuda][conformance][errors]") {
  attn::nn::Linear<8, 4, float, attn::cuda> lin(nullptr, "lin");
  CHECK_THROWS_WITH(attn::nn::quantize_dynamic(lin), Catch::Contains("'weight' is on cuda") && Catch::Contains("CPU backend"));
}

TEST_CASE("cuda ops reject bad ids and targets with the CPU's errors", "[cuda][conformance][errors]") {
  using attn::AnyShape;
  using attn::Dims;
  using Ids = attn::Tensor<std::int64_t, AnyShape, attn::cuda>;
  attn::Tape tape;
  attn::Var<float, AnyShape, attn::cuda> table(attn::Tensor<float, AnyShape, attn::cuda>::full({10, 4}, 1.f), true);
  CHECK_THROWS_WITH(attn::embedding(tape, table, Ids::from({3}, {1, 10, 2})),
                    Catch::Contains("id 10 at position 1") && Catch::Contains("10 rows"));
  CHECK_THROWS_WITH(attn::embedding(tape, table, Ids::from({4}, {1, 2, -3, 12})), Catch::Contains("id -3 at position 2"));
  attn::Var<float, AnyShape, attn::cuda> logits(attn::Tensor<float, AnyShape, attn::cuda>::zeros({2, 3}), true);
  CHECK_THROWS_WITH(attn::cross_entropy(tape, logits, Ids::from({2}, {0, 3})), Catch::Contains("target 3 at row 1"));
  // The device is still usable after the errors.
  auto y = attn::embedding(tape, table, Ids::from({2}, {9, 0}));
  CHECK(y.value().to_vector() == std::vector<float>(8, 1.f));
}

TEST_CASE("element-wise expressions on cuda tensors: broadcasting, strided views, in place", "[cuda][conformance][expr]") {
  using X = attn::Tensor<double, attn::AnyShape, attn::cuda>;
  auto a = X::from({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = X::from({3}, {10, 20, 30});
  X c = a * b + 1.0;
  CHECK(c.to_vector() == std::vector<double>{11, 41, 91, 41, 101, 181});
  c += a;
  CHECK(c.to_vector() == std::vector<double>{12, 43, 94, 45, 106, 187});
  // A transposed view (strides (1, 3)) into a contiguous (3, 2) destination.
  X t({3, 2});
  attn::expr::assign(t.view(), attn::expr::as_expr(a.view().transpose(0, 1)));
  CHECK(t.to_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
  auto e = attn::eval(attn::exp(a) - attn::exp(a));
  STATIC_REQUIRE(std::is_same_v<decltype(e)::backend, attn::cuda>);
  CHECK(e.to_vector() == std::vector<double>(6, 0.0));
}
