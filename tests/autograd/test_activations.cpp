// SPDX-License-Identifier: MIT
// torch.nn.functional's element-wise activations: outputs and gradients against PyTorch goldens
// (tests/golden/activations.safetensors, kinks included, where torch's gradient conventions
// apply), on the Var ops and on the tensor expressions, plus the argument checks.
#include "../golden_util.hpp"
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include <attn/attn.hpp>

using attn::Tape;

namespace {

template <class T>
using Fn = std::function<attn::Var<T>(Tape&, const attn::Var<T>&)>;

template <class T>
void check_activation(const attn::io::SafetensorsFile& f, const std::string& name, const std::string& input, const Fn<T>& fn, double tol) {
  Tape tape;
  attn::Var<T> x(golden::tensor<T>(f, input), true);
  auto y = fn(tape, x);
  golden::expect_close(f, "out." + name, y.value(), tol);
  tape.backward(y, golden::tensor<T>(f, "dout"));
  golden::expect_close(f, "grad." + name, x.grad(), tol);
}

template <class T>
void check_all(const attn::io::SafetensorsFile& f, double tol) {
  using V = attn::Var<T>;
  auto c = [&](const std::string& name, const Fn<T>& fn, const std::string& input = "x") { check_activation<T>(f, name, input, fn, tol); };
  c("relu", [](Tape& t, const V& x) { return attn::relu(t, x); });
  c("relu6", [](Tape& t, const V& x) { return attn::relu6(t, x); });
  c("leaky_relu_0.2", [](Tape& t, const V& x) { return attn::leaky_relu(t, x, 0.2); });
  c("elu_0.5", [](Tape& t, const V& x) { return attn::elu(t, x, 0.5); });
  c("selu", [](Tape& t, const V& x) { return attn::selu(t, x); });
  c("gelu", [](Tape& t, const V& x) { return attn::gelu(t, x); });
  c("gelu_tanh", [](Tape& t, const V& x) { return attn::gelu_tanh(t, x); });
  c("silu", [](Tape& t, const V& x) { return attn::silu(t, x); });
  c("mish", [](Tape& t, const V& x) { return attn::mish(t, x); });
  c("softplus", [](Tape& t, const V& x) { return attn::softplus(t, x); });
  c("softplus_2_5", [](Tape& t, const V& x) { return attn::softplus(t, x, 2.0, 5.0); });
  c("hardtanh_-0.5_2", [](Tape& t, const V& x) { return attn::hardtanh(t, x, -0.5, 2.0); });
  c("sigmoid", [](Tape& t, const V& x) { return attn::sigmoid(t, x); });
  c("log_sigmoid", [](Tape& t, const V& x) { return attn::log_sigmoid(t, x); });
  c("tanh", [](Tape& t, const V& x) { return attn::tanh(t, x); });
  c("abs", [](Tape& t, const V& x) { return attn::abs(t, x); });
  c("sqrt", [](Tape& t, const V& x) { return attn::sqrt(t, x); }, "x_pos");
}

}  // namespace

TEST_CASE("golden: activations match torch.nn.functional, gradients at the kinks included") {
  auto f = golden::load("activations");
  check_all<float>(f, 2e-6);
  check_all<double>(f, 1e-12);
}

TEST_CASE("activations: the tensor expressions compute what the Var ops do") {
  auto f = golden::load("activations");
  const auto x = golden::tensor<double>(f, "x");
  auto check = [&](const std::string& name, const auto& e) {
    attn::Tensor<double> y = e;
    golden::expect_close(f, "out." + name, y, 1e-12);
  };
  check("gelu_tanh", attn::gelu_tanh(x));
  check("silu", attn::silu(x));
  check("mish", attn::mish(x));
  check("log_sigmoid", attn::log_sigmoid(x));
  check("leaky_relu_0.2", attn::apply<attn::expr::LeakyRelu>(x, {0.2}));
}

TEST_CASE("activations: bad arguments are refused, naming the function") {
  Tape tape;
  attn::Var<float> x(attn::Tensor<float>::from({3}, {-1.0f, 0.0f, 1.0f}), true);
  CHECK_THROWS_WITH(attn::softplus(tape, x, 0.0), Catch::Contains("attn::softplus: beta must be positive"));
  CHECK_THROWS_WITH(attn::softplus(tape, x, -1.0), Catch::Contains("attn::softplus: beta must be positive"));
  CHECK_THROWS_WITH(attn::hardtanh(tape, x, 1.0, 1.0), Catch::Contains("attn::hardtanh: min_val must be below max_val"));
  CHECK_THROWS_AS(attn::hardtanh(tape, x, 2.0, -2.0), attn::ArgumentError);
}

TEST_CASE("activations: large inputs give finite values and gradients in float") {
  for (auto* fn : {+[](Tape& t, const attn::Var<float>& v) { return attn::softplus(t, v); },
                   +[](Tape& t, const attn::Var<float>& v) { return attn::log_sigmoid(t, v); },
                   +[](Tape& t, const attn::Var<float>& v) { return attn::mish(t, v); },
                   +[](Tape& t, const attn::Var<float>& v) { return attn::silu(t, v); },
                   +[](Tape& t, const attn::Var<float>& v) { return attn::selu(t, v); }}) {
    Tape t;
    attn::Var<float> x(attn::Tensor<float>::from({6}, {-200.0f, -90.0f, -30.0f, 30.0f, 90.0f, 200.0f}), true);
    auto y = fn(t, x);
    t.backward(attn::sum(t, y));
    for (std::size_t i = 0; i < 6; ++i) {
      CHECK(std::isfinite(y.value()[i]));
      CHECK(std::isfinite(x.grad()[i]));
    }
  }
}
