// SPDX-License-Identifier: MIT
// optim::Ema: the running average against its closed form and a step-by-step reference, the
// warm-up rule, folding every N steps, swap() in both directions, and its checkpoint file.
#include <attn/attn.hpp>
#include <attn/optim/ema.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../temp_dir.hpp"

using attn::Tensor;
namespace optim = attn::optim;
namespace nn = attn::nn;

namespace {
struct Two : nn::Module {
  nn::Linear<3, 2, double> fc{this, "fc"};
};
std::vector<double> values(const attn::Var<double>& v) {
  const auto t = v.value();
  return {t.data(), t.data() + t.numel()};
}
void set_values(const attn::Var<double>& v, double x) {
  auto& d = *v.data();
  std::fill_n(d.value.data(), d.value.numel(), x);
  d.mark_value_written();
}
}  // namespace

TEST_CASE("Ema: the average of a constant parameter is d^k init + (1 - d^k) p without warm-up") {
  Two m;
  auto params = optim::NamedParams<double, attn::cpu>::of(m);
  for (auto& v : params.vars) set_values(v, 1.0);
  optim::Ema<double> ema(m, {.decay = 0.9, .warmup = false});
  for (auto& v : params.vars) set_values(v, 3.0);
  for (int k = 1; k <= 5; ++k) ema.update();
  const double dk = std::pow(0.9, 5);
  for (std::size_t i = 0; i < params.vars.size(); ++i)
    for (std::size_t j = 0; j < ema.other(i).numel(); ++j) CHECK(ema.other(i).data()[j] == Approx(dk * 1.0 + (1 - dk) * 3.0).epsilon(1e-14));
  CHECK(ema.steps() == 5);
  CHECK(ema.updates() == 5);
}

TEST_CASE("Ema: a moving parameter against the step-by-step rule, with warm-up and every = 3") {
  Two m;
  auto params = optim::NamedParams<double, attn::cpu>::of(m);
  attn::Rng rng(5);
  for (auto& v : params.vars) {
    auto& d = *v.data();
    for (std::size_t j = 0; j < d.value.numel(); ++j) d.value.data()[j] = rng.uniform() - 0.5;
    d.mark_value_written();
  }
  optim::Ema<double> ema(m, {.decay = 0.99, .every = 3, .warmup = true});
  std::vector<std::vector<double>> ref;
  for (auto& v : params.vars) ref.push_back(values(v));
  long long folds = 0;
  for (int step = 1; step <= 40; ++step) {
    for (auto& v : params.vars) {  // an "optimizer step"
      auto& d = *v.data();
      for (std::size_t j = 0; j < d.value.numel(); ++j) d.value.data()[j] += 0.1 * std::sin(double(step * 7 + j));
      d.mark_value_written();
    }
    ema.update();
    if (step % 3 == 0) {
      const double dd = std::min(std::pow(0.99, 3), (1.0 + double(folds)) / (10.0 + double(folds)));
      CHECK(ema.decay_at(folds) == Approx(dd).epsilon(1e-15));
      ++folds;
      for (std::size_t i = 0; i < params.vars.size(); ++i) {
        const auto p = values(params.vars[i]);
        for (std::size_t j = 0; j < p.size(); ++j) ref[i][j] = dd * ref[i][j] + (1 - dd) * p[j];
      }
    }
  }
  CHECK(ema.updates() == 13);
  CHECK(ema.decay_at(0) == Approx(0.1));            // warm-up: the first fold keeps 1/10 of the initial weights
  CHECK(ema.decay_at(100000) == Approx(std::pow(0.99, 3)));  // then decay^every
  for (std::size_t i = 0; i < params.vars.size(); ++i)
    for (std::size_t j = 0; j < ref[i].size(); ++j) CHECK(ema.other(i).data()[j] == Approx(ref[i][j]).epsilon(1e-13));
}

TEST_CASE("Ema: swap puts the average into the model and back, and update refuses while swapped") {
  Two m;
  auto params = optim::NamedParams<double, attn::cpu>::of(m);
  for (auto& v : params.vars) set_values(v, 0.0);
  optim::Ema<double> ema(m, {.decay = 0.5, .warmup = false});
  for (auto& v : params.vars) set_values(v, 4.0);
  ema.update();  // average 2
  const Tensor<double> x = Tensor<double>::from({1, 3}, {1, 1, 1});
  auto out = [&] {
    attn::NoGrad ng;
    return m.fc(ng, attn::Var<double>(x)).value()[0];
  };
  CHECK(out() == Approx(4.0 * 3 + 4.0));
  ema.swap();
  CHECK(ema.swapped());
  CHECK(out() == Approx(2.0 * 3 + 2.0));  // the layer sees the new values (mark_value_written)
  CHECK_THROWS_AS(ema.update(), std::logic_error);
  ema.swap();
  CHECK_FALSE(ema.swapped());
  CHECK(out() == Approx(4.0 * 3 + 4.0));
  CHECK(ema.other(0).data()[0] == 2.0);
}

TEST_CASE("Ema: bad options are errors that name the option") {
  Two m;
  CHECK_THROWS_WITH(optim::Ema<double>(m, {.decay = 1.0}), Catch::Contains("decay must be in [0, 1)"));
  CHECK_THROWS_WITH(optim::Ema<double>(m, {.decay = -0.1}), Catch::Contains("decay"));
  CHECK_THROWS_WITH(optim::Ema<double>(m, {.decay = 0.9, .every = 0}), Catch::Contains("every must be at least 1"));
}

TEST_CASE("Ema: save_ema and load_ema restore the average and the counters, and a bad file changes nothing") {
  namespace fs = std::filesystem;
  TempDir tmp;
  const fs::path& dir = tmp.path();
  Two m;
  auto params = optim::NamedParams<double, attn::cpu>::of(m);
  for (auto& v : params.vars) set_values(v, 1.0);
  optim::Ema<double> ema(m, {.decay = 0.9, .every = 2});
  for (auto& v : params.vars) set_values(v, 2.0);
  for (int k = 0; k < 5; ++k) ema.update();
  attn::io::save_ema(ema, dir / "ema.safetensors");

  Two m2;
  optim::Ema<double> ema2(m2, {.decay = 0.9, .every = 2});
  attn::io::load_ema(ema2, dir / "ema.safetensors");
  CHECK(ema2.steps() == 5);
  CHECK(ema2.updates() == 2);
  for (std::size_t i = 0; i < params.vars.size(); ++i)
    for (std::size_t j = 0; j < ema.other(i).numel(); ++j) CHECK(ema2.other(i).data()[j] == ema.other(i).data()[j]);

  // Another fold interval: refused, nothing changed.
  optim::Ema<double> ema3(m2, {.decay = 0.9, .every = 3});
  const double before = ema3.other(0).data()[0];
  CHECK_THROWS_WITH(attn::io::load_ema(ema3, dir / "ema.safetensors"), Catch::Contains("ema.safetensors") && Catch::Contains("every"));
  CHECK(ema3.steps() == 0);
  CHECK(ema3.other(0).data()[0] == before);
  // Another decay: refused (files of earlier versions wrote it with 6 decimals, and still load).
  optim::Ema<double> ema4(m2, {.decay = 0.99, .every = 2});
  CHECK_THROWS_WITH(attn::io::load_ema(ema4, dir / "ema.safetensors"), Catch::Contains("metadata 'ema_decay' is '0.9', the Ema's decay is 0.99"));
  CHECK(ema4.steps() == 0);
  {
    auto file = attn::io::read_safetensors(dir / "ema.safetensors");
    file.metadata["ema_decay"] = "0.900000";
    attn::io::write_safetensors(dir / "old.safetensors", file.tensors, file.metadata);
    optim::Ema<double> ema5(m2, {.decay = 0.9, .every = 2});
    CHECK_NOTHROW(attn::io::load_ema(ema5, dir / "old.safetensors"));
  }
  // Counters that do not follow from each other (5 steps fold twice at every = 2): refused before
  // anything is copied.
  for (const char* updates : {"50", "1"}) {
    auto file = attn::io::read_safetensors(dir / "ema.safetensors");
    file.metadata["ema_updates"] = updates;
    attn::io::write_safetensors(dir / "counts.safetensors", file.tensors, file.metadata);
    optim::Ema<double> ema6(m2, {.decay = 0.9, .every = 2});
    const double first = ema6.other(0).data()[0];
    CHECK_THROWS_AS(attn::io::load_ema(ema6, dir / "counts.safetensors"), attn::FormatError);
    CHECK_THROWS_WITH(attn::io::load_ema(ema6, dir / "counts.safetensors"),
                      Catch::Contains(std::string("metadata 'ema_updates' ") + updates + " does not follow from 'ema_steps' 5"));
    CHECK(ema6.steps() == 0);
    CHECK(ema6.other(0).data()[0] == first);
  }
  // A model's weights are not an average file.
  attn::io::save(m, dir / "model.safetensors");
  CHECK_THROWS_WITH(attn::io::load_ema(ema3, dir / "model.safetensors"), Catch::Contains("model.safetensors") && Catch::Contains("ema_steps"));
}

TEST_CASE("Ema in float: the fold's weight 1 - decay is rounded once, from double") {
  attn::nn::Linear<1, 1, float> m(nullptr, "m");
  auto params = optim::NamedParams<float, attn::cpu>::of(m);
  for (auto& v : params.vars) {
    auto& d = *v.data();
    std::fill_n(d.value.data(), d.value.numel(), 0.0f);
    d.mark_value_written();
  }
  optim::Ema<float> ema(m, {.decay = 0.99999, .warmup = false});
  for (auto& v : params.vars) {
    auto& d = *v.data();
    std::fill_n(d.value.data(), d.value.numel(), 1.0f);
    d.mark_value_written();
  }
  ema.update();
  // avg = 0.99999 * 0 + (1 - 0.99999) * 1; 1 - float(0.99999) would give 1.00136e-5.
  CHECK(ema.other(0).data()[0] == float(1 - 0.99999));
}
