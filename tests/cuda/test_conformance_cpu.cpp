// SPDX-License-Identifier: MIT
// The conformance cases on the CPU alone, in every build (also without nvcc): each case runs, records
// something, records no NaN, and gives the same numbers when run again, so that a
// case's own code is checked where no GPU is (test_conformance.cu compares the backends).
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include <catch2/catch.hpp>

#include <attn/attn.hpp>

#include "conformance.hpp"

namespace {

template <class T>
void run_cases(const std::vector<std::string>& names, int group) {
  for (const auto& name : names) {
    DYNAMIC_SECTION(name) {
      auto run = [&] {
        if constexpr (std::is_same_v<T, float>)
          if (group == 2) return conformance::run_models<attn::cpu>(name, 11);
        return group == 1 ? conformance::run_layers<T, attn::cpu>(name, 11) : conformance::run_ops<T, attn::cpu>(name, 11);
      };
      const conformance::Result a = run(), b = run();
      REQUIRE(!a.empty());
      REQUIRE(a.size() == b.size());
      std::size_t values = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO(a[i].name);
        CHECK(a[i].name == b[i].name);
        CHECK(a[i].values == b[i].values);
        for (double v : a[i].values) CHECK(!std::isnan(v));  // infinities are legitimate (a masked log-softmax)
        values += a[i].values.size();
      }
      CHECK(values > 0);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("conformance cases run on the cpu: deterministic and without NaN", "[conformance]", float, double) {
  run_cases<TestType>(conformance::ops_cases(), 0);
  run_cases<TestType>(conformance::layer_cases(), 1);
  if constexpr (std::is_same_v<TestType, float>) run_cases<TestType>(conformance::model_cases(), 2);
}

namespace {
const conformance::Array& find(const conformance::Result& r, const std::string& prefix) {
  for (const auto& a : r)
    if (a.name.rfind(prefix, 0) == 0) return a;
  FAIL("no array '" << prefix << "'");
  throw std::logic_error("unreachable");
}
}  // namespace

TEST_CASE("conformance case training_steps: the guard, clipping and SparseAdam's untouched rows", "[conformance]") {
  const auto r = conformance::run_layers<double, attn::cpu>("training_steps", 5);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    CHECK(find(r, "finite " + std::to_string(step)).values == std::vector<double>{1});
    CHECK(find(r, "applied " + std::to_string(step)).values == std::vector<double>{1});
    CHECK(find(r, "norm " + std::to_string(step)).values[0] > 0.05);  // so clipping binds
  }
  CHECK(find(r, "finite 3").values == std::vector<double>{0});
  CHECK(find(r, "applied 3").values == std::vector<double>{0});
  CHECK(find(r, "first non-finite is words.weight").values == std::vector<double>{1});
  // exp_avg of the word table (50, 8): rows 1..39 are looked up, rows 40..49 never, row 0 is padding.
  const auto& m = find(r, "exp_avg 0").values;
  REQUIRE(m.size() == 50 * 8);
  for (std::size_t i = 40 * 8; i < 50 * 8; ++i) CHECK(m[i] == 0.0);
  for (std::size_t i = 0; i < 8; ++i) CHECK(m[i] == 0.0);
  double moved = 0;
  for (std::size_t i = 8; i < 40 * 8; ++i) moved += std::abs(m[i]);
  CHECK(moved > 0);
  // The weights: AdamW's decay would shrink every row of a dense table; SparseAdam leaves the rows
  // never looked up (and the padding row) exactly as they were.
  const auto& w0 = find(r, "init words.weight").values;
  const auto& w1 = find(r, "adam words.weight").values;
  REQUIRE(w0.size() == w1.size());
  for (std::size_t i = 40 * 8; i < 50 * 8; ++i) CHECK(w1[i] == w0[i]);
  for (std::size_t i = 0; i < 8; ++i) CHECK(w1[i] == w0[i]);
  std::size_t changed = 0;
  for (std::size_t i = 8; i < 40 * 8; ++i) changed += w1[i] != w0[i];
  CHECK(changed > 10 * 8);  // about 27 of the 39 rows are drawn in three steps
  const auto& p0 = find(r, "init pos.weight").values;  // the dense position table: decayed and moved
  const auto& p1 = find(r, "adam pos.weight").values;
  for (std::size_t i = 0; i < p0.size(); ++i) CHECK(p1[i] != p0[i]);
}

TEST_CASE("conformance case checkpoint_roundtrip: a file loads on the backend that wrote it and on the cpu", "[conformance]") {
  const auto r = conformance::run_layers<float, attn::cpu>("checkpoint_roundtrip", 5);
  for (const char* p : {"words.weight", "pos.weight", "head.weight", "head.bias"}) {
    INFO(p);
    CHECK(find(r, std::string("loaded ") + p).values == find(r, std::string("loaded on the cpu ") + p).values);
  }
  CHECK(find(r, "steps").values == std::vector<double>{1, 1});
}
