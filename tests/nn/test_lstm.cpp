// SPDX-License-Identifier: MIT
// LSTM / BiLSTM: gradient checks of the fused op on ragged, unsorted batches, PyTorch goldens,
// per-sample consistency, thread-count independence, module names and bad lengths; the same from a
// given initial state (h0, c0).
#include "../gradcheck_util.hpp"
#include "../golden_util.hpp"
#include "rnn_test_util.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <attn/autograd/lstm.hpp>
#include <attn/nn/lstm.hpp>
#include <attn/optim/optimizer.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::check_gradients;

using golden::copy_param;
using rnn_test::leaf;
using rnn_test::max_diff;
using rnn_test::ragged;
using rnn_test::steps;

namespace {
attn::Rng rng(4242);
Tensor<double> rnd(Dims d, double lo = -1, double hi = 1) { return attn::random_tensor(rng, d, lo, hi); }

/// out, h_n and c_n in one Var, so that one gradcheck covers all three outputs.
template <class R>
attn::Var<double> all_outputs(Tape& t, const R& r) { return rnn_test::flat(t, r.out, r.h_n, r.c_n); }
}  // namespace

TEST_CASE("gradcheck: lstm op w.r.t. x and every weight, ragged unsorted lengths") {
  const std::size_t b = 4, t = 6, in = 4, h = 3;
  check_gradients("lstm uni",
        [](Tape& tp, V& x) { return all_outputs(tp, attn::lstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]})); },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h})});
  check_gradients("lstm bi",
        [](Tape& tp, V& x) {
          return all_outputs(tp, attn::bilstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}));
        },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({4 * h, in}, -1.5, 1.5),
         rnd({4 * h, h}, -1.5, 1.5), rnd({4 * h}), rnd({4 * h})});
}

TEST_CASE("gradcheck: bilstm with the same weights for both directions (the shared-weights backward)") {
  const std::size_t b = 4, t = 6, in = 4, h = 3;
  check_gradients("bilstm shared weights",
        [](Tape& tp, V& x) {
          return all_outputs(tp, attn::bilstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[1], x[2], x[3], x[4]}));
        },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h})});
}

TEST_CASE("gradcheck: lstm with only one output in the loss (the others get no gradient)") {
  const std::size_t b = 3, t = 4, in = 2, h = 2;
  const std::vector<int> len = {2, 4, 3};
  check_gradients("h_n only", [&](Tape& tp, V& x) { return attn::bilstm(tp, x[0], len, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}).h_n; },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({4 * h, in}), rnd({4 * h, h}),
         rnd({4 * h}), rnd({4 * h})});
  check_gradients("c_n only", [&](Tape& tp, V& x) { return attn::lstm(tp, x[0], len, {x[1], x[2], x[3], x[4]}).c_n; },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h})});
  check_gradients("out only", [&](Tape& tp, V& x) { return attn::lstm(tp, x[0], len, {x[1], x[2], x[3], x[4]}).out; },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h})});
}

TEST_CASE("gradcheck: lstm and bilstm from an initial state, w.r.t. h0, c0, x and every weight") {
  const std::size_t b = 4, t = 6, in = 3, h = 3;
  check_gradients("lstm h0 c0",
        [](Tape& tp, V& x) { return all_outputs(tp, attn::lstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], x[6]})); },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({1, b, h}), rnd({1, b, h})});
  check_gradients("bilstm h0 c0",
        [](Tape& tp, V& x) {
          return all_outputs(tp, attn::bilstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}, {x[9], x[10]}));
        },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({4 * h, in}), rnd({4 * h, h}),
         rnd({4 * h}), rnd({4 * h}), rnd({2, b, h}), rnd({2, b, h})});
  // Either alone (the other a zero state).
  check_gradients("lstm h0 only", [](Tape& tp, V& x) { return all_outputs(tp, attn::lstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], {}})); },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({1, b, h})});
  check_gradients("lstm c0 only", [](Tape& tp, V& x) { return all_outputs(tp, attn::lstm(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {{}, x[5]})); },
        {rnd({b, t, in}), rnd({4 * h, in}), rnd({4 * h, h}), rnd({4 * h}), rnd({4 * h}), rnd({1, b, h})});
}

TEST_CASE("LSTM state: a zero state equals none, a sequence split in two and continued from h_n, c_n equals it run whole") {
  nn::BiLSTM<3, 4, double> bi(nullptr, "bi");
  nn::LSTM<3, 4, double> uni(nullptr, "uni");
  const std::vector<int> len = {5, 5};
  Tape tape;
  attn::Var<double> x(rnd({2, 5, 3}), false);
  const auto none = bi(tape, x, len);
  const auto zero = bi(tape, x, len, {attn::Var<double>(Tensor<double>::zeros({2, 2, 4}), false),
                                      attn::Var<double>(Tensor<double>::zeros({2, 2, 4}), false)});
  CHECK(max_diff(none.out.raw(), zero.out.raw()) == 0);
  // Forward direction only (the reverse one reads from each end): steps 0-2, then 3-4 from that state.
  const auto whole = uni(tape, x, len);
  attn::Var<double> first(steps(x.raw(), 0, 3), false), rest(steps(x.raw(), 3, 5), false);
  const auto a = uni(tape, first, std::vector<int>{3, 3});
  const auto b2 = uni(tape, rest, std::vector<int>{2, 2}, {a.h_n, a.c_n});
  CHECK(max_diff(b2.h_n.raw(), whole.h_n.raw()) < 1e-14);
  CHECK(max_diff(b2.c_n.raw(), whole.c_n.raw()) < 1e-14);
  CHECK(max_diff(b2.out.raw(), steps(whole.out.raw(), 3, 5)) < 1e-14);
  // Shapes: (directions, batch, hidden).
  CHECK_THROWS_WITH(bi(tape, x, len, {attn::Var<double>(Tensor<double>::zeros({1, 2, 4}), false), {}}),
                    Catch::Contains("nn::BiLSTM: h0 must be (num_layers * directions, batch, hidden)"));
  CHECK_THROWS_WITH(uni(tape, x, len, {{}, attn::Var<double>(Tensor<double>::zeros({1, 3, 4}), false)}),
                    Catch::Contains("nn::LSTM: c0 must be (num_layers * directions, batch, hidden)"));
  CHECK_THROWS_WITH(attn::lstm(tape, x, len, uni.weights()[0], {{}, attn::Var<double>(Tensor<double>::zeros({2, 2, 4}), false)}),
                    Catch::Contains("lstm: c0 must be (directions, batch, hidden)"));
}

TEST_CASE("golden: LSTM and BiLSTM, one layer and stacked, with and without biases, from an initial state match torch.nn.LSTM(packed, (h0, c0)), gradients into h0 and c0 too") {
  for (std::string name : {"lstm_uni_state", "lstm_bi_state", "lstm_uni_3layers_state", "lstm_bi_2layers_state", "lstm_bi_2layers_nobias_state"}) {
    INFO(name);
    auto f = golden::load(name);
    const bool bi = name.starts_with("lstm_bi"), bias = name.find("nobias") == std::string::npos;
    const std::size_t layers = name.find("3layers") != std::string::npos ? 3 : name.find("2layers") != std::string::npos ? 2 : 1;
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      auto go = [&](auto& lstm) {
        REQUIRE(lstm.named_parameters().size() == layers * (bi ? 2 : 1) * (bias ? 4 : 2));  // torch's names, each in the file
        golden::load_parameters<T>(lstm, f);
        Tape tape;
        attn::Var<T, Shape<dyn, dyn, 6>> x(golden::tensor<T>(f, "x"), true);
        attn::Var<T> h0(golden::tensor<T>(f, "h0"), true), c0(golden::tensor<T>(f, "c0"), true);
        auto lengths = golden::tensor<std::int64_t>(f, "lengths");
        const auto l = lengths.to_vector();
        const std::vector<int> li(l.begin(), l.end());
        auto [out, h_n, c_n] = lstm(tape, x, std::span<const int>(li), {h0, c0});
        golden::expect_close(f, "out", out.value(), tol);
        golden::expect_close(f, "h_n", h_n.value(), tol);
        golden::expect_close(f, "c_n", c_n.value(), tol);
        auto term = [&](const auto& v, const char* seed) { return attn::sum(tape, attn::mul(tape, v, leaf(golden::tensor<T>(f, seed)))); };
        tape.backward(attn::add(tape, attn::add(tape, term(out, "dout"), term(h_n, "dh_n")), term(c_n, "dc_n")));
        golden::expect_close(f, "grad.x", x.grad(), tol);
        golden::expect_close(f, "grad.h0", h0.grad(), tol);
        golden::expect_close(f, "grad.c0", c0.grad(), tol);
        for (auto& [n, p] : lstm.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + n, p.grad(), tol);
      };
      if (bi) {
        nn::BiLSTM<6, 5, T> lstm(nullptr, "lstm", {.num_layers = layers, .bias = bias});
        go(lstm);
      } else {
        nn::LSTM<6, 5, T> lstm(nullptr, "lstm", {.num_layers = layers, .bias = bias});
        go(lstm);
      }
    };
    run(float{}, 1e-5);
    run(double{}, 1e-12);
  }
}

TEST_CASE("stacked LSTM: torch's parameter names and order, dropout between layers only in training, bad options and state shapes") {
  {  // bias = false: torch's LSTM(bias=False) names; the biases are zeros that are no parameters
    nn::BiLSTM<3, 4> nb(nullptr, "nb", {.num_layers = 2, .bias = false});
    std::vector<std::string> names;
    for (auto& [n, p] : nb.named_parameters()) names.push_back(n);
    CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse", "weight_ih_l1",
                                            "weight_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse"});
    CHECK_FALSE(nb.bias_ih_l0.requires_grad());
    CHECK(nb.bias_hh_l0_reverse.raw().to_vector() == std::vector<float>(16, 0.0f));
    nb.init(3);  // redrawing leaves them zero
    CHECK(nb.upper_layers()[0][1].b_ih.raw().to_vector() == std::vector<float>(16, 0.0f));
  }

  nn::BiLSTM<3, 4, double> bi(nullptr, "bi", {.num_layers = 2, .dropout = 0.5});
  std::vector<std::string> names;
  for (auto& [n, p] : bi.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
                                          "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
                                          "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                          "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(bi.parameter<double>("weight_ih_l1").dims() == Dims{16, 8});
  const std::vector<int> len = {4, 2};
  attn::Var<double> x(rnd({2, 4, 3}), false);
  attn::NoGrad ng;
  bi.eval();
  const auto a = bi(ng, x, len), b = bi(ng, x, len);
  CHECK(max_diff(a.out.raw(), b.out.raw()) == 0);  // no dropout in eval
  CHECK(a.h_n.dims() == Dims{4, 2, 4});
  bi.train();
  Tape tape;
  const auto c = bi(tape, x, len);
  CHECK(max_diff(a.out.raw(), c.out.raw()) > 0);  // the layer below's output dropped at 0.5
  CHECK(max_diff(a.h_n.raw(), c.h_n.raw()) > 0);
  // Layer 0's final states do not see the dropout above them.
  for (std::size_t i = 0; i < 2 * 2 * 4; ++i) CHECK(a.h_n.raw().data()[i] == c.h_n.raw().data()[i]);
  CHECK_THROWS_WITH(bi(tape, x, len, {attn::Var<double>(Tensor<double>::zeros({2, 2, 4}), false), {}}),
                    Catch::Contains("h0 must be (num_layers * directions, batch, hidden)"));
  CHECK_THROWS_WITH((nn::LSTM<3, 4, double>(nullptr, "l", {.num_layers = 0})), Catch::Contains("num_layers must be in [1, 1024]"));
  CHECK_THROWS_WITH((nn::LSTM<3, 4, double>(nullptr, "l", {.dropout = 1.0})), Catch::Contains("dropout must be in [0, 1)"));
}

TEST_CASE("golden: LSTM and BiLSTM match torch.nn.LSTM on a packed, unsorted batch") {
  for (std::string name : {"lstm_uni", "lstm_bi"}) {
    auto f = golden::load(name);
    const bool bi = name == "lstm_bi";
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      auto go = [&](auto& lstm, const std::vector<std::pair<std::string, attn::Var<T>>>& params) {
        for (auto& [n, p] : params) copy_param(p, f, n);
        Tape tape;
        attn::Var<T, Shape<dyn, dyn, 6>> x(golden::tensor<T>(f, "x"), true);
        auto lengths = golden::tensor<std::int64_t>(f, "lengths");
        auto [out, h_n, c_n] = lstm(tape, x, lengths);
        golden::expect_close(f, "out", out.value(), tol);
        golden::expect_close(f, "h_n", h_n.value(), tol);
        golden::expect_close(f, "c_n", c_n.value(), tol);
        // loss = sum(out*dout) + sum(h_n*dh_n) + sum(c_n*dc_n): backprop into all three outputs at once.
        auto term = [&](const auto& v, const char* seed) { return attn::sum(tape, attn::mul(tape, v, leaf(golden::tensor<T>(f, seed)))); };
        auto loss = attn::add(tape, attn::add(tape, term(out, "dout"), term(h_n, "dh_n")), term(c_n, "dc_n"));
        tape.backward(loss);
        golden::expect_close(f, "grad.x", x.grad(), tol);
        for (auto& [n, p] : params) golden::expect_close(f, "grad." + n, p.grad(), tol);
        // Padded steps: exactly zero output and zero input gradient.
        const auto len = lengths.to_vector();
        for (std::size_t i = 0; i < len.size(); ++i)
          for (std::size_t s = std::size_t(len[i]); s < x.size(1); ++s) {
            for (std::size_t k = 0; k < out.size(2); ++k) CHECK(out.value()(i, s, k) == T(0));
            for (std::size_t k = 0; k < 6; ++k) CHECK(x.grad()(i, s, k) == T(0));
          }
      };
      if (bi) {
        nn::BiLSTM<6, 5, T> lstm(nullptr, "lstm");
        go(lstm, {{"weight_ih_l0", lstm.weight_ih_l0}, {"weight_hh_l0", lstm.weight_hh_l0}, {"bias_ih_l0", lstm.bias_ih_l0},
                  {"bias_hh_l0", lstm.bias_hh_l0}, {"weight_ih_l0_reverse", lstm.weight_ih_l0_reverse},
                  {"weight_hh_l0_reverse", lstm.weight_hh_l0_reverse}, {"bias_ih_l0_reverse", lstm.bias_ih_l0_reverse},
                  {"bias_hh_l0_reverse", lstm.bias_hh_l0_reverse}});
      } else {
        nn::LSTM<6, 5, T> lstm(nullptr, "lstm");
        go(lstm, {{"weight_ih_l0", lstm.weight_ih_l0}, {"weight_hh_l0", lstm.weight_hh_l0}, {"bias_ih_l0", lstm.bias_ih_l0},
                  {"bias_hh_l0", lstm.bias_hh_l0}});
      }
    };
    run(float{}, 1e-5);
    run(double{}, 1e-12);
  }
}

TEST_CASE("BiLSTM: each sample of a ragged batch equals the same sample run alone") {
  nn::BiLSTM<4, 3, double> lstm(nullptr, "lstm");
  const std::size_t t = 6;
  auto xb = rnd({ragged.size(), t, 4});
  attn::NoGrad ng;
  auto [out, h_n, c_n] = lstm(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xb), ragged);
  static_assert(std::is_same_v<decltype(out), attn::Var<double, Shape<dyn, dyn, 6>>>);
  static_assert(std::is_same_v<decltype(h_n), attn::Var<double, Shape<dyn, dyn, 3>>>);  // (num_layers * 2, B, H)
  for (std::size_t i = 0; i < ragged.size(); ++i) {
    const std::size_t len = std::size_t(ragged[i]);
    Tensor<double> xi({1, len, 4});
    std::copy_n(xb.data() + i * t * 4, len * 4, xi.data());
    auto one = lstm(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xi), std::vector<int>{int(len)});
    for (std::size_t s = 0; s < len; ++s)
      for (std::size_t k = 0; k < 6; ++k) CHECK(out.value()(i, s, k) == Approx(one.out.value()(0, s, k)).margin(1e-14));
    for (std::size_t d = 0; d < 2; ++d)
      for (std::size_t k = 0; k < 3; ++k) {
        CHECK(h_n.value()(d, i, k) == Approx(one.h_n.value()(d, 0, k)).margin(1e-14));
        CHECK(c_n.value()(d, i, k) == Approx(one.c_n.value()(d, 0, k)).margin(1e-14));
      }
    // The reverse direction starts at the sample's own last token: its h_n is the output at step 0.
    for (std::size_t k = 0; k < 3; ++k) CHECK(h_n.value()(1, i, k) == out.value()(i, 0, 3 + k));
    for (std::size_t k = 0; k < 3; ++k) CHECK(h_n.value()(0, i, k) == out.value()(i, len - 1, k));
  }
}

TEST_CASE("BiLSTM: one thread and two threads give the same values and gradients") {
  nn::BiLSTM<5, 4, float> lstm(nullptr, "lstm");
  attn::Rng r(9);
  Tensor<float> xv({4, 6, 5});
  for (std::size_t i = 0; i < xv.numel(); ++i) xv[i] = float(r.uniform(-1, 1));
  auto run = [&](int threads) {
    attn::cpu::set_threads(threads);
    lstm.zero_grad();
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, 5>> x(xv, true);
    auto res = lstm(tape, x, ragged);
    tape.backward(attn::add(tape, attn::sum(tape, attn::tanh(tape, res.out)), attn::sum(tape, res.c_n)));
    std::vector<float> all = res.out.value().to_vector();
    for (auto& g : {x.grad().erased(), lstm.weight_hh_l0.grad().erased(), lstm.weight_ih_l0_reverse.grad().erased(),
                    lstm.bias_hh_l0_reverse.grad().erased()})
      for (float v : g.to_vector()) all.push_back(v);
    return all;
  };
  const auto one = run(1), two = run(2);
  attn::cpu::set_threads(0);
  REQUIRE(one.size() == two.size());
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(one[i] - two[i])));
  CHECK(worst < 1e-6);
}

TEST_CASE("LSTM: a second backward accumulates the same parameter gradients again") {
  nn::LSTM<3, 2, double> lstm(nullptr, "lstm");
  Tape tape;
  attn::Var<double, Shape<dyn, dyn, 3>> x(rnd({2, 3, 3}), true);
  auto res = lstm(tape, x, std::vector<int>{1, 3});
  auto loss = attn::add(tape, attn::sum(tape, res.out), attn::sum(tape, res.h_n));
  tape.backward(loss);
  const auto g1 = lstm.weight_hh_l0.grad().clone();
  tape.backward(loss);
  const auto g2 = lstm.weight_hh_l0.grad();
  for (std::size_t i = 0; i < g1.numel(); ++i) CHECK(g2[i] == Approx(2 * g1[i]).margin(1e-14));
}

TEST_CASE("LSTM/BiLSTM modules: PyTorch names, shapes and default init range") {
  struct Net : nn::Module {
    nn::BiLSTM<7, 4> rnn{this, "lstm"};
  } net;
  auto np = net.named_parameters();
  const std::vector<std::string> names = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                          "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse"};
  const std::vector<Dims> dims = {{16, 7}, {16, 4}, {16}, {16}, {16, 7}, {16, 4}, {16}, {16}};
  REQUIRE(np.size() == names.size());
  for (std::size_t i = 0; i < np.size(); ++i) {
    CHECK(np[i].first == "lstm." + names[i]);
    CHECK(np[i].second->dims() == dims[i]);
  }
  CHECK(net.parameter_count() == 2 * (16 * 7 + 16 * 4 + 32));
  for (auto& p : net.parameters<float>()) {
    const auto v = p.raw().to_vector();
    float lo = 1, hi = -1;
    for (float e : v) lo = std::min(lo, e), hi = std::max(hi, e);
    CHECK(lo >= -0.5f);  // 1/sqrt(4)
    CHECK(hi <= 0.5f);
    CHECK(hi - lo > 0.2f);
  }
  nn::LSTM<7, 4> uni(nullptr, "u");
  CHECK(uni.named_parameters().size() == 4);
  CHECK(uni.named_parameters()[1].first == "weight_hh_l0");
}

TEST_CASE("LSTM: bad lengths and shapes throw with clear messages") {
  nn::BiLSTM<3, 2, double> lstm(nullptr, "lstm");
  attn::NoGrad ng;
  attn::Var<double, Shape<dyn, dyn, 3>> x(rnd({3, 4, 3}));
  auto throws_arg = [&](std::vector<int> len, const std::string& what) {
    CHECK_THROWS_WITH(lstm(ng, x, len), Catch::Contains(what));
    CHECK_THROWS_AS(lstm(ng, x, len), attn::ArgumentError);
  };
  throws_arg({2, 0, 4}, "lengths[1] = 0 is outside [1, 4]");
  throws_arg({2, 5, 4}, "lengths[1] = 5 is outside [1, 4]");
  throws_arg({-1, 2, 4}, "lengths[0] = -1");
  CHECK_THROWS_AS(lstm(ng, x, std::vector<int>{2, 3}), attn::ShapeError);
  CHECK_THROWS_WITH(lstm(ng, x, std::vector<int>{2, 3}), Catch::Contains("2 lengths for a batch of 3"));
  // Integer-tensor lengths are checked the same way.
  CHECK_THROWS_AS(lstm(ng, x, Tensor<std::int64_t>::from({3}, {1, 9, 2})), attn::ArgumentError);
  CHECK_THROWS_WITH(lstm(ng, x, Tensor<std::int64_t>::from({3}, {1, 2, 0})), Catch::Contains("lengths[2] = 0"));
  CHECK_THROWS_AS(lstm(ng, x, Tensor<std::int64_t>::from({3, 1}, {1, 2, 2})), attn::ShapeError);
  CHECK_NOTHROW(lstm(ng, x, Tensor<std::int64_t>::from({3}, {1, 4, 2})));
  // A torch-style (batch, time) mask given as lengths: the message names the mask types.
  CHECK_THROWS_WITH(lstm(ng, x, Tensor<std::uint8_t>::from({3, 4}, std::vector<std::uint8_t>(12, 1))),
                    Catch::Contains("lengths must be a vector (batch), got (3, 4)") && Catch::Contains("attn::KeepMask(m)") &&
                        Catch::Contains("attn::PaddingMask(m)"));
  // Wrong input width (run time) and mismatched weights in the op.
  attn::Var<double> wide(rnd({3, 4, 5}));
  CHECK_THROWS_AS(lstm(ng, wide, std::vector<int>{1, 1, 1}), attn::ShapeError);
  attn::Var<double> flat(rnd({3, 4}));
  CHECK_THROWS_AS(lstm(ng, flat, std::vector<int>{1, 1, 1}), attn::ShapeError);
  attn::Var<double> w_ih(rnd({8, 3})), w_hh(rnd({8, 2})), b(rnd({8})), bad_hh(rnd({8, 3}));
  CHECK_THROWS_AS(attn::lstm(ng, x, std::vector<int>{1, 2, 3}, {w_ih, bad_hh, b, b}), attn::ShapeError);
  CHECK_THROWS_AS(attn::lstm(ng, x, std::vector<int>{1, 2, 3}, {w_hh, w_hh, b, b}), attn::ShapeError);
  CHECK_THROWS_AS(attn::lstm(ng, x, std::vector<int>{1, 2, 3}, {w_ih, w_hh, b, attn::Var<double>(rnd({7}))}), attn::ShapeError);
  CHECK_NOTHROW(attn::lstm(ng, x, std::vector<int>{1, 2, 3}, {w_ih, w_hh, b, b}));
}

namespace {
template <class T, class Lstm>
void check_embedded(const Lstm& lstm, const nn::Embedding<6, T>& emb, double tol) {
  rnn_test::check_embedded_fold(
      lstm, emb, tol, 4, "lstm_from_table", [](const auto& e, const auto& l) { return nn::lstm_input_tables(e, l); },
      [](attn::NoGrad& ng, const auto& l, const auto& t, const auto& ids, std::span<const int> len) { return nn::embedded_lstm(ng, l, t, ids, len); },
      [](const auto& got, const auto& ref, double tol) { CHECK(max_diff(got.c_n, ref.c_n) <= tol); });
}
}  // namespace

TEST_CASE("embedded_lstm: an Embedding + LSTM/BiLSTM from input-projection tables equals the two layers run in turn") {
  nn::Embedding<6, double> emb_d(nullptr, "embed", 13, {.padding_idx = 0, .init_std = 0.5});
  nn::BiLSTM<6, 4, double> bi_d(nullptr, "lstm");
  nn::LSTM<6, 4, double> uni_d(nullptr, "lstm");
  check_embedded<double>(bi_d, emb_d, 1e-13);
  check_embedded<double>(uni_d, emb_d, 1e-13);
  // Stacked: the tables fold layer 0; the layers above run as usual.
  nn::BiLSTM<6, 4, double> bi2_d(nullptr, "lstm2", {.num_layers = 2});
  nn::LSTM<6, 4, double> uni3_d(nullptr, "lstm3", {.num_layers = 3});
  check_embedded<double>(bi2_d, emb_d, 1e-13);
  check_embedded<double>(uni3_d, emb_d, 1e-13);
  nn::Embedding<6, float> emb_f(nullptr, "embed", 13, {.padding_idx = 0, .init_std = 0.5});
  nn::BiLSTM<6, 4, float> bi_f(nullptr, "lstm");
  check_embedded<float>(bi_f, emb_f, 1e-6);
  // Under bf16 and int8 the tables hold the input projections lstm() computes in that precision
  // (int8: W_ih's pack, each embedding row quantized on its own, as each token's row is).
  for (const auto prec : {attn::Precision::bf16, attn::Precision::int8}) {
    INFO(attn::precision_name(prec));
    const attn::PrecisionScope scope(prec);
    check_embedded<float>(bi_f, emb_f, 1e-6);
  }
  // Tables built under one precision refuse to run under another.
  const auto tables = nn::lstm_input_tables(emb_f, bi_f);
  attn::NoGrad ng;
  const attn::PrecisionScope int8(attn::Precision::int8);
  auto ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({1, 2});
  CHECK_THROWS_WITH(nn::embedded_lstm(ng, bi_f, tables, ids, std::vector<int>{2}),
                    Catch::Contains("built under Precision::fp32") && Catch::Contains("runs under int8"));
}

namespace {
struct EmbeddedBiLstm : nn::Module {
  EmbeddedBiLstm() : emb(this, "embed", 13, {.padding_idx = 0, .init_std = 0.5}), lstm(this, "lstm") {}
  nn::Embedding<6, float> emb;
  nn::BiLSTM<6, 4, float> lstm;
};
}  // namespace

TEST_CASE("embedded_lstm: tables refuse to run once their weights have changed, or for another LSTM") {
  EmbeddedBiLstm m;
  attn::NoGrad ng;
  const std::vector<int> len{3, 2};
  auto ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({2, 3});
  for (std::size_t t = 0; t < 3; ++t) ids(0, t) = std::int32_t(t + 4), ids(1, t) = std::int32_t(2 * t + 1);
  const std::span<const int> lengths(len);
  auto tables = nn::lstm_input_tables(m.emb, m.lstm);
  CHECK_NOTHROW(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths));

  SECTION("an optimizer step") {
    attn::optim::Adam<float> opt(m, {.lr = 0.01});
    Tape tape;
    tape.backward(attn::sum(tape, m.lstm(tape, m.emb(tape, ids), lengths).out));
    opt.step();
    CHECK_THROWS_WITH(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths),
                      Catch::Contains("stale") && Catch::Contains("the embedding table"));
    tables = nn::lstm_input_tables(m.emb, m.lstm);  // built again: current, and equal to the two layers
    const auto got = nn::embedded_lstm(ng, m.lstm, tables, ids, lengths);
    CHECK(max_diff(got.out, m.lstm(ng, m.emb(ng, ids), lengths).out) <= 1e-6);
  }
  SECTION("loading a weight (a state dict)") {
    for (auto& [name, p] : m.named_parameters())
      if (name == "lstm.weight_ih_l0_reverse") {
        std::vector<float> zeros(p->numel(), 0.0f);
        p->copy_from_host(zeros.data());
      }
    CHECK_THROWS_WITH(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths),
                      Catch::Contains("stale") && Catch::Contains("weight_ih of direction 1"));
  }
  SECTION("an initialiser") {
    m.init(7);
    CHECK_THROWS_AS(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths), attn::ArgumentError);
  }
  SECTION("another LSTM of the same shape") {
    nn::BiLSTM<6, 4, float> other(nullptr, "lstm");
    CHECK_THROWS_WITH(nn::embedded_lstm(ng, other, tables, ids, lengths), Catch::Contains("another LSTM"));
  }
  SECTION("a weight the library does not see written is the caller's to mark") {
    const_cast<float*>(m.emb.weight.raw().data())[4 * 6] += 1.0f;
    CHECK_NOTHROW(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths));
    m.emb.weight.data()->mark_value_written();
    CHECK_THROWS_WITH(nn::embedded_lstm(ng, m.lstm, tables, ids, lengths), Catch::Contains("the embedding table"));
  }
}

TEST_CASE("BiLSTM: takes the batch as Lengths, KeepMask or PaddingMask, like nn::Attention, padding before a real token is an error") {
  nn::BiLSTM<4, 3, double> lstm(nullptr, "lstm");
  attn::NoGrad ng;
  attn::Var<double> x(rnd({2, 5, 4}));
  const std::vector<int> len{5, 2};
  const auto ref = lstm(ng, x, std::span<const int>(len)).out.value().to_vector();
  auto keep = Tensor<std::uint8_t>::zeros({2, 5});
  Tensor<bool> pad(Dims{2, 5});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 5; ++t) {
      keep(b, t) = t < std::size_t(len[b]) ? 1 : 0;
      pad(b, t) = keep(b, t) == 0;
    }
  CHECK(lstm(ng, x, attn::Lengths{5, 2}).out.value().to_vector() == ref);
  CHECK(lstm(ng, x, attn::KeepMask(keep)).out.value().to_vector() == ref);
  CHECK(lstm(ng, x, attn::PaddingMask(pad)).out.value().to_vector() == ref);
  keep(1, 3) = 1;  // a real token after padding: not a lengths batch
  CHECK_THROWS_WITH(lstm(ng, x, attn::KeepMask(keep)),
                    Catch::Contains("nn::BiLSTM") && Catch::Contains("sample 1") && Catch::Contains("attn::Lengths"));
  CHECK_THROWS_WITH(lstm(ng, x, attn::Lengths{5, 6}), Catch::Contains("nn::BiLSTM") && Catch::Contains("lengths[1] = 6"));
  CHECK_THROWS_WITH(lstm(ng, x, Tensor<std::int64_t>::from({2}, {5, 6})),
                    Catch::Contains("nn::BiLSTM") && Catch::Contains("the time extent of x"));
  // Each form of the batch takes an initial state too, and gives what the span form gives.
  const attn::LstmState<double> s{attn::Var<double>(rnd({2, 2, 3})), attn::Var<double>(rnd({2, 2, 3}))};
  const auto with_state = lstm(ng, x, std::span<const int>(len), s).out.value().to_vector();
  CHECK(max_diff(Tensor<double>::from({2, 5, 6}, with_state), Tensor<double>::from({2, 5, 6}, ref)) > 1e-6);
  CHECK(lstm(ng, x, attn::Lengths{5, 2}, s).out.value().to_vector() == with_state);
  CHECK(lstm(ng, x, attn::PaddingMask(pad), s).out.value().to_vector() == with_state);
  CHECK(lstm(ng, x, Tensor<std::int64_t>::from({2}, {5, 2}), s).out.value().to_vector() == with_state);
}
