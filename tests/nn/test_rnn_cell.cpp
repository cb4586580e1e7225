// SPDX-License-Identifier: MIT
// LSTMCell / GRUCell: PyTorch goldens over two chained steps (gradients back through the recurrence
// into the inputs and the initial state), gradient checks, agreement with the sequence layers step
// by step, names, init, bias = false, and the errors.
#include "../gradcheck_util.hpp"
#include "../golden_util.hpp"
#include "rnn_test_util.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <attn/nn/gru.hpp>
#include <attn/nn/lstm.hpp>
#include <attn/nn/rnn_cell.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using golden::load_parameters;
using rnn_test::leaf;

namespace {
attn::Rng rng(5151);
Tensor<double> rnd(Dims d, double lo = -1, double hi = 1) { return attn::random_tensor(rng, d, lo, hi); }


/// Copies src's values into the parameter dst (same element count).
template <class D, class S>
void copy(const D& dst, const S& src) {
  REQUIRE(dst.numel() == src.numel());
  std::copy_n(src.raw().data(), src.numel(), const_cast<double*>(dst.raw().data()));
}
}  // namespace

TEST_CASE("golden: LSTMCell and GRUCell over two chained steps match torch.nn.LSTMCell / GRUCell, gradients into the inputs and the initial state") {
  auto run = [](auto tag, double tol) {
    using T = decltype(tag);
    using X = attn::Var<T, Shape<dyn, 6>>;
    using H = attn::Var<T, Shape<dyn, 5>>;
    auto term = [](Tape& tape, const auto& v, const Tensor<T>& w) { return attn::sum(tape, attn::mul(tape, v, leaf(w))); };
    {
      auto f = golden::load("lstm_cell");
      nn::LSTMCell<6, 5, T> cell(nullptr, "cell");
      REQUIRE(cell.named_parameters().size() == 4);
      load_parameters<T>(cell, f);
      Tape tape;
      X x1(golden::tensor<T>(f, "x1"), true), x2(golden::tensor<T>(f, "x2"), true);
      H h0(golden::tensor<T>(f, "h0"), true), c0(golden::tensor<T>(f, "c0"), true);
      const auto s1 = cell(tape, x1, {h0, c0});
      const auto s2 = cell(tape, x2, s1);
      static_assert(std::is_same_v<std::decay_t<decltype(s2.h)>, H>);
      golden::expect_close(f, "h1", s1.h.value(), tol);
      golden::expect_close(f, "c1", s1.c.value(), tol);
      golden::expect_close(f, "h2", s2.h.value(), tol);
      golden::expect_close(f, "c2", s2.c.value(), tol);
      tape.backward(attn::add(tape, attn::add(tape, term(tape, s1.h, golden::tensor<T>(f, "dh1")), term(tape, s2.h, golden::tensor<T>(f, "dh2"))),
                              term(tape, s2.c, golden::tensor<T>(f, "dc2"))));
      for (auto [name, v] : {std::pair{"grad.x1", &x1}, std::pair{"grad.x2", &x2}}) golden::expect_close(f, name, v->grad(), tol);
      golden::expect_close(f, "grad.h0", h0.grad(), tol);
      golden::expect_close(f, "grad.c0", c0.grad(), tol);
      for (auto& [n, p] : cell.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + n, p.grad(), tol);
    }
    {
      auto f = golden::load("gru_cell");
      nn::GRUCell<6, 5, T> cell(nullptr, "cell");
      REQUIRE(cell.named_parameters().size() == 4);
      load_parameters<T>(cell, f);
      Tape tape;
      X x1(golden::tensor<T>(f, "x1"), true), x2(golden::tensor<T>(f, "x2"), true);
      const H h1 = cell(tape, x1);  // the zero state
      const H h2 = cell(tape, x2, h1);
      golden::expect_close(f, "h1", h1.value(), tol);
      golden::expect_close(f, "h2", h2.value(), tol);
      tape.backward(attn::add(tape, term(tape, h1, golden::tensor<T>(f, "dh1")), term(tape, h2, golden::tensor<T>(f, "dh2"))));
      golden::expect_close(f, "grad.x1", x1.grad(), tol);
      golden::expect_close(f, "grad.x2", x2.grad(), tol);
      for (auto& [n, p] : cell.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + n, p.grad(), tol);
    }
  };
  run(float{}, 1e-5);
  run(double{}, 1e-12);
}

TEST_CASE("gradcheck: LSTMCell and GRUCell steps w.r.t. x, the state and every parameter") {
  nn::LSTMCell<3, 2, double> lstm(nullptr, "lstm");
  nn::GRUCell<3, 2, double> gru(nullptr, "gru");
  // The parameters are made inputs of the check through their Vars: each gets rnd values.
  testutil::check_gradients("lstm cell", [&](Tape& t, V& x) {
    const auto s = lstm(t, x[0], {attn::Var<double, Shape<dyn, 2>>(x[1]), attn::Var<double, Shape<dyn, 2>>(x[2])});
    return attn::concat(t, V{attn::reshape(t, s.h, {8}), attn::reshape(t, s.c, {8})}, 0);
  }, {rnd({4, 3}), rnd({4, 2}), rnd({4, 2})});
  testutil::check_gradients("gru cell", [&](Tape& t, V& x) {
    return attn::reshape(t, gru(t, x[0], attn::Var<double, Shape<dyn, 2>>(x[1])), {8});
  }, {rnd({4, 3}), rnd({4, 2})});
  testutil::check_gradients("gru cell, zero state", [&](Tape& t, V& x) { return attn::reshape(t, gru(t, x[0]), {8}); }, {rnd({4, 3})});
}

TEST_CASE("LSTMCell and GRUCell stepped over a sequence equal nn::LSTM and nn::GRU on it") {
  const std::size_t b = 3, t = 5;
  auto xs = rnd({b, t, 4});
  auto h0 = rnd({1, b, 3}), c0 = rnd({1, b, 3});
  attn::NoGrad ng;
  using X = attn::Var<double, Shape<dyn, 4>>;
  auto step_input = [&](std::size_t s) {
    Tensor<double> x({b, 4});
    for (std::size_t i = 0; i < b; ++i) std::copy_n(xs.data() + (i * t + s) * 4, 4, x.data() + i * 4);
    return X(x);
  };
  const std::vector<int> full(b, int(t));
  {
    nn::LSTM<4, 3, double> seq(nullptr, "seq");
    nn::LSTMCell<4, 3, double> cell(nullptr, "cell");
    copy(cell.weight_ih, seq.weight_ih_l0);
    copy(cell.weight_hh, seq.weight_hh_l0);
    copy(cell.bias_ih, seq.bias_ih_l0);
    copy(cell.bias_hh, seq.bias_hh_l0);
    const auto whole = seq(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xs), full, {attn::Var<double>(h0), attn::Var<double>(c0)});
    nn::LSTMCell<4, 3, double>::State s{attn::Var<double, Shape<dyn, 3>>(h0.reshape({b, 3})), attn::Var<double, Shape<dyn, 3>>(c0.reshape({b, 3}))};
    for (std::size_t k = 0; k < t; ++k) {
      s = cell(ng, step_input(k), s);
      for (std::size_t i = 0; i < b; ++i)
        for (std::size_t j = 0; j < 3; ++j) CHECK(s.h.value()(i, j) == Approx(whole.out.value()(i, k, j)).margin(1e-14));
    }
    for (std::size_t i = 0; i < b * 3; ++i) CHECK(s.c.value()[i] == Approx(whole.c_n.value()[i]).margin(1e-14));
  }
  {
    nn::GRU<4, 3, double> seq(nullptr, "seq");
    nn::GRUCell<4, 3, double> cell(nullptr, "cell");
    const auto& w = seq.layers()[0][0];
    copy(cell.weight_ih, w.w_ih);
    copy(cell.weight_hh, w.w_hh);
    copy(cell.bias_ih, w.b_ih);
    copy(cell.bias_hh, w.b_hh);
    const auto whole = seq(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xs), full);
    nn::GRUCell<4, 3, double>::State h;
    for (std::size_t k = 0; k < t; ++k) {
      h = cell(ng, step_input(k), h);
      for (std::size_t i = 0; i < b; ++i)
        for (std::size_t j = 0; j < 3; ++j) CHECK(h.value()(i, j) == Approx(whole.out.value()(i, k, j)).margin(1e-14));
    }
  }
}

TEST_CASE("LSTMCell / GRUCell: torch's names and init range, bias = false, bad shapes") {
  struct Net : nn::Module {
    nn::LSTMCell<7, 4> lstm{this, "lstm"};
    nn::GRUCell<7, 4> gru{this, "gru", {.bias = false}};
  } net;
  const auto np = net.named_parameters();
  const std::vector<std::string> names = {"lstm.weight_ih", "lstm.weight_hh", "lstm.bias_ih", "lstm.bias_hh", "gru.weight_ih", "gru.weight_hh"};
  const std::vector<Dims> dims = {{16, 7}, {16, 4}, {16}, {16}, {12, 7}, {12, 4}};
  REQUIRE(np.size() == names.size());
  for (std::size_t i = 0; i < np.size(); ++i) {
    CHECK(np[i].first == names[i]);
    CHECK(np[i].second->dims() == dims[i]);
  }
  for (auto& p : net.parameters<float>()) {
    const auto v = p.raw().to_vector();
    CHECK(*std::min_element(v.begin(), v.end()) >= -0.5f);  // 1/sqrt(4)
    CHECK(*std::max_element(v.begin(), v.end()) <= 0.5f);
  }
  CHECK(net.gru.bias_ih.raw().to_vector() == std::vector<float>(12, 0.f));
  attn::NoGrad ng;
  CHECK_THROWS_WITH(net.lstm(ng, attn::Var<float>(Tensor<float>::zeros({2, 5}))),
                    Catch::Contains("nn::LSTMCell 'lstm': input shape (2, 5) is not (batch, 7)"));
  CHECK_THROWS_WITH(net.gru(ng, attn::Var<float>(Tensor<float>::zeros({2, 3, 7}))), Catch::Contains("nn::GRUCell 'gru': input shape (2, 3, 7)"));
  const attn::Var<float, Shape<dyn, 7>> x(Tensor<float>::zeros({2, 7}));
  CHECK_THROWS_WITH(net.gru(ng, x, attn::Var<float, Shape<dyn, 4>>(Tensor<float>::zeros({3, 4}))),
                    Catch::Contains("nn::GRUCell 'gru'") && Catch::Contains("h must be (batch, hidden)"));
  CHECK_THROWS_WITH(net.lstm(ng, x, {{}, attn::Var<float, Shape<dyn, 4>>(Tensor<float>::zeros({1, 4}))}),
                    Catch::Contains("c must be (batch, hidden)"));
}
