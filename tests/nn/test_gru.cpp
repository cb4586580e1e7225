// SPDX-License-Identifier: MIT
// GRU / BiGRU: gradient checks of the fused op on ragged, unsorted batches (from a zero and a given
// state, shared weights, one output alone), PyTorch goldens (one layer and stacked, with and without
// biases and a state), per-sample consistency, thread-count independence, module names and init,
// the errors, the reduced-precision forward passes, and the embedding fold (embedded_gru).
#include "../gradcheck_util.hpp"
#include "../golden_util.hpp"
#include "rnn_test_util.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <attn/autograd/gru.hpp>
#include <attn/nn/gru.hpp>

using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::check_gradients;

using rnn_test::leaf;
using rnn_test::max_diff;
using rnn_test::ragged;

namespace {
attn::Rng rng(4343);
Tensor<double> rnd(Dims d, double lo = -1, double hi = 1) { return attn::random_tensor(rng, d, lo, hi); }

/// out and h_n in one Var, so that one gradcheck covers both outputs.
template <class R>
attn::Var<double> both_outputs(Tape& t, const R& r) { return rnn_test::flat(t, r.out, r.h_n); }
}  // namespace

TEST_CASE("gradcheck: gru and bigru w.r.t. x, every weight and h0, ragged unsorted lengths") {
  const std::size_t b = 4, t = 6, in = 4, h = 3, g = 3 * h;
  check_gradients("gru uni",
        [](Tape& tp, V& x) { return both_outputs(tp, attn::gru(tp, x[0], ragged, {x[1], x[2], x[3], x[4]})); },
        {rnd({b, t, in}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g})});
  check_gradients("gru uni from h0",
        [](Tape& tp, V& x) { return both_outputs(tp, attn::gru(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, x[5])); },
        {rnd({b, t, in}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g}), rnd({1, b, h})});
  check_gradients("gru bi",
        [](Tape& tp, V& x) {
          return both_outputs(tp, attn::bigru(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}));
        },
        {rnd({b, t, in}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g}), rnd({g, in}, -1.5, 1.5), rnd({g, h}, -1.5, 1.5), rnd({g}),
         rnd({g})});
  check_gradients("gru bi from h0",
        [](Tape& tp, V& x) {
          return both_outputs(tp, attn::bigru(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}, x[9]));
        },
        {rnd({b, t, in}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g}), rnd({2, b, h})});
}

TEST_CASE("gradcheck: bigru with the same weights for both directions, and with one output alone in the loss") {
  const std::size_t b = 4, t = 6, in = 4, h = 3, g = 3 * h;
  check_gradients("bigru shared weights",
        [](Tape& tp, V& x) { return both_outputs(tp, attn::bigru(tp, x[0], ragged, {x[1], x[2], x[3], x[4]}, {x[1], x[2], x[3], x[4]})); },
        {rnd({b, t, in}), rnd({g, in}), rnd({g, h}), rnd({g}), rnd({g})});
  const std::vector<int> len = {2, 4, 3};
  check_gradients("h_n only",
        [&](Tape& tp, V& x) { return attn::bigru(tp, x[0], len, {x[1], x[2], x[3], x[4]}, {x[5], x[6], x[7], x[8]}, x[9]).h_n; },
        {rnd({3, 4, 2}), rnd({6, 2}), rnd({6, 2}), rnd({6}), rnd({6}), rnd({6, 2}), rnd({6, 2}), rnd({6}), rnd({6}), rnd({2, 3, 2})});
  check_gradients("out only", [&](Tape& tp, V& x) { return attn::gru(tp, x[0], len, {x[1], x[2], x[3], x[4]}).out; },
        {rnd({3, 4, 2}), rnd({6, 2}), rnd({6, 2}), rnd({6}), rnd({6})});
}

TEST_CASE("golden: GRU and BiGRU, one layer and stacked, with and without biases and an initial state, match torch.nn.GRU on a packed batch") {
  for (std::string name : {"gru_uni", "gru_bi_state", "gru_uni_3layers_state", "gru_bi_2layers_nobias_state"}) {
    INFO(name);
    auto f = golden::load(name);
    const bool bi = name.starts_with("gru_bi"), bias = name.find("nobias") == std::string::npos;
    const bool state = name.ends_with("_state");
    const std::size_t layers = name.find("3layers") != std::string::npos ? 3 : name.find("2layers") != std::string::npos ? 2 : 1;
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      auto go = [&](auto& gru) {
        REQUIRE(gru.named_parameters().size() == layers * (bi ? 2 : 1) * (bias ? 4 : 2));  // torch's names, each in the file
        golden::load_parameters<T>(gru, f);
        Tape tape;
        attn::Var<T, Shape<dyn, dyn, 6>> x(golden::tensor<T>(f, "x"), true);
        attn::Var<T> h0;
        if (state) h0 = attn::Var<T>(golden::tensor<T>(f, "h0"), true);
        const auto l = golden::tensor<std::int64_t>(f, "lengths");
        auto [out, h_n] = gru(tape, x, l, h0);  // lengths as an int64 tensor
        golden::expect_close(f, "out", out.value(), tol);
        golden::expect_close(f, "h_n", h_n.value(), tol);
        auto term = [&](const auto& v, const char* seed) { return attn::sum(tape, attn::mul(tape, v, leaf(golden::tensor<T>(f, seed)))); };
        tape.backward(attn::add(tape, term(out, "dout"), term(h_n, "dh_n")));
        golden::expect_close(f, "grad.x", x.grad(), tol);
        if (state) golden::expect_close(f, "grad.h0", h0.grad(), tol);
        for (auto& [n, p] : gru.template named_parameter_vars<T>()) golden::expect_close(f, "grad." + n, p.grad(), tol);
      };
      if (bi) {
        nn::BiGRU<6, 5, T> gru(nullptr, "gru", {.num_layers = layers, .bias = bias});
        go(gru);
      } else {
        nn::GRU<6, 5, T> gru(nullptr, "gru", {.num_layers = layers, .bias = bias});
        go(gru);
      }
    };
    run(float{}, 1e-5);
    run(double{}, 1e-12);
  }
}

TEST_CASE("BiGRU: each sample of a ragged batch equals the same sample run alone, from its own h0") {
  nn::BiGRU<4, 3, double> gru(nullptr, "gru");
  const std::size_t t = 6, bn = ragged.size();
  auto xb = rnd({bn, t, 4});
  auto h0 = rnd({2, bn, 3});
  attn::NoGrad ng;
  auto [out, h_n] = gru(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xb), ragged, attn::Var<double>(h0));
  static_assert(std::is_same_v<decltype(out), attn::Var<double, Shape<dyn, dyn, 6>>>);
  static_assert(std::is_same_v<decltype(h_n), attn::Var<double, Shape<dyn, dyn, 3>>>);
  for (std::size_t i = 0; i < bn; ++i) {
    const std::size_t len = std::size_t(ragged[i]);
    Tensor<double> xi({1, len, 4}), hi({2, 1, 3});
    std::copy_n(xb.data() + i * t * 4, len * 4, xi.data());
    for (std::size_t d = 0; d < 2; ++d) std::copy_n(h0.data() + (d * bn + i) * 3, 3, hi.data() + d * 3);
    auto one = gru(ng, attn::Var<double, Shape<dyn, dyn, 4>>(xi), attn::Lengths(std::vector<int>{int(len)}), attn::Var<double>(hi));
    for (std::size_t s = 0; s < t; ++s)
      for (std::size_t k = 0; k < 6; ++k)
        CHECK(out.value()(i, s, k) == (s < len ? Approx(one.out.value()(0, s, k)).margin(1e-14) : Approx(0.0).margin(0)));
    for (std::size_t d = 0; d < 2; ++d)
      for (std::size_t k = 0; k < 3; ++k) CHECK(h_n.value()(d, i, k) == Approx(one.h_n.value()(d, 0, k)).margin(1e-14));
    // The reverse direction starts at the sample's own last token: its h_n is the output at step 0.
    for (std::size_t k = 0; k < 3; ++k) CHECK(h_n.value()(1, i, k) == out.value()(i, 0, 3 + k));
    for (std::size_t k = 0; k < 3; ++k) CHECK(h_n.value()(0, i, k) == out.value()(i, len - 1, k));
  }
}

TEST_CASE("GRU state: a zero h0 equals none, and a sequence split in two and continued from h_n equals it run whole") {
  nn::GRU<3, 4, double> gru(nullptr, "gru", {.num_layers = 2});
  auto x = rnd({2, 7, 3});
  attn::NoGrad ng;
  using X = attn::Var<double, Shape<dyn, dyn, 3>>;
  const std::vector<int> full = {7, 7};
  const auto whole = gru(ng, X(x), full);
  const auto zero = gru(ng, X(x), full, attn::Var<double>(Tensor<double>::zeros({2, 2, 4})));
  CHECK(zero.out.value().to_vector() == whole.out.value().to_vector());
  Tensor<double> a({2, 3, 3}), b({2, 4, 3});
  for (std::size_t s = 0; s < 2; ++s) {
    std::copy_n(x.data() + s * 21, 9, a.data() + s * 9);
    std::copy_n(x.data() + s * 21 + 9, 12, b.data() + s * 12);
  }
  const auto first = gru(ng, X(a), std::vector<int>{3, 3});
  const auto second = gru(ng, X(b), std::vector<int>{4, 4}, first.h_n.erased());
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t t = 0; t < 4; ++t)
      for (std::size_t k = 0; k < 4; ++k) CHECK(second.out.value()(s, t, k) == Approx(whole.out.value()(s, 3 + t, k)).margin(1e-14));
  for (std::size_t i = 0; i < whole.h_n.numel(); ++i) CHECK(second.h_n.value()[i] == Approx(whole.h_n.value()[i]).margin(1e-14));
}

TEST_CASE("BiGRU: one thread and two threads give the same values and gradients") {
  nn::BiGRU<5, 4, float> gru(nullptr, "gru", {.num_layers = 2});
  attn::Rng r(9);
  Tensor<float> xv({4, 6, 5});
  for (std::size_t i = 0; i < xv.numel(); ++i) xv[i] = float(r.uniform(-1, 1));
  auto run = [&](int threads) {
    attn::cpu::set_threads(threads);
    gru.zero_grad();
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, 5>> x(xv, true);
    auto res = gru(tape, x, ragged);
    tape.backward(attn::add(tape, attn::sum(tape, attn::tanh(tape, res.out)), attn::sum(tape, res.h_n)));
    std::vector<float> all = res.out.value().to_vector();
    for (float v : x.grad().to_vector()) all.push_back(v);
    for (auto& [n, p] : gru.named_parameter_vars<float>())
      for (float v : p.grad().to_vector()) all.push_back(v);
    return all;
  };
  const auto one = run(1), two = run(2);
  attn::cpu::set_threads(0);
  REQUIRE(one.size() == two.size());
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(one[i] - two[i])));
  CHECK(worst < 1e-6);
}

TEST_CASE("GRU/BiGRU modules: PyTorch names, shapes, default init range, dropout between layers only in training") {
  struct Net : nn::Module {
    nn::BiGRU<7, 4> rnn{this, "gru", {.num_layers = 2}};
  } net;
  auto np = net.named_parameters();
  const std::vector<std::string> names = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                          "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
                                          "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
                                          "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  const std::vector<Dims> dims = {{12, 7}, {12, 4}, {12}, {12}, {12, 7}, {12, 4}, {12}, {12},
                                  {12, 8}, {12, 4}, {12}, {12}, {12, 8}, {12, 4}, {12}, {12}};
  REQUIRE(np.size() == names.size());
  for (std::size_t i = 0; i < np.size(); ++i) {
    CHECK(np[i].first == "gru." + names[i]);
    CHECK(np[i].second->dims() == dims[i]);
  }
  CHECK(net.parameter_count() == 2 * (12 * 7 + 12 * 4 + 24) + 2 * (12 * 8 + 12 * 4 + 24));
  for (auto& p : net.parameters<float>()) {
    const auto v = p.raw().to_vector();
    float lo = 1, hi = -1;
    for (float e : v) lo = std::min(lo, e), hi = std::max(hi, e);
    CHECK(lo >= -0.5f);  // 1/sqrt(4)
    CHECK(hi <= 0.5f);
    CHECK(hi - lo > 0.2f);
  }
  nn::GRU<7, 4> nobias(nullptr, "u", {.bias = false});
  REQUIRE(nobias.named_parameters().size() == 2);
  CHECK(nobias.named_parameters()[1].first == "weight_hh_l0");
  // Dropout acts between layers in training only: eval runs twice alike, a training run differs,
  // and layer 0's final state does not see the dropout above it.
  nn::GRU<3, 4, double> drop(nullptr, "d", {.num_layers = 2, .dropout = 0.5});
  const attn::Var<double, Shape<dyn, dyn, 3>> x(rnd({2, 5, 3}));
  const std::vector<int> len = {5, 4};
  attn::NoGrad ng;
  drop.eval();
  const auto a = drop(ng, x, len), b = drop(ng, x, len);
  CHECK(a.out.value().to_vector() == b.out.value().to_vector());
  drop.train();
  Tape tape;
  const auto c = drop(tape, x, len);
  CHECK(a.out.value().to_vector() != c.out.value().to_vector());
  for (std::size_t i = 0; i < 2 * 4; ++i) CHECK(a.h_n.value()[i] == c.h_n.value()[i]);
  CHECK(a.h_n.value()[8] != c.h_n.value()[8]);
}

TEST_CASE("GRU: bad lengths, shapes, states and options throw with clear messages") {
  nn::BiGRU<3, 2, double> gru(nullptr, "gru");
  attn::NoGrad ng;
  using X = attn::Var<double, Shape<dyn, dyn, 3>>;
  const X x(rnd({2, 4, 3}));
  CHECK_THROWS_WITH(gru(ng, x, std::vector<int>{4}), Catch::Contains("1 lengths for a batch of 2"));
  CHECK_THROWS_WITH(gru(ng, x, std::vector<int>{0, 4}), Catch::Contains("lengths[0] = 0 is outside [1, 4]"));
  CHECK_THROWS_WITH(gru(ng, x, std::vector<int>{5, 4}), Catch::Contains("lengths[0] = 5"));
  CHECK_THROWS_WITH(gru(ng, attn::Var<double>(rnd({2, 4, 5})), std::vector<int>{4, 4}),
                    Catch::Contains("nn::BiGRU: input shape (2, 4, 5) is not (batch, time, 3)"));
  CHECK_THROWS_WITH(gru(ng, x, std::vector<int>{4, 4}, attn::Var<double>(rnd({1, 2, 2}))),
                    Catch::Contains("nn::BiGRU") && Catch::Contains("h0 must be (num_layers * directions, batch, hidden)"));
  CHECK_THROWS_WITH((nn::GRU<3, 2>(nullptr, "g", {.num_layers = 0})), Catch::Contains("nn::GRU 'g': num_layers must be in [1, 1024]"));
  CHECK_THROWS_WITH((nn::BiGRU<3, 2>(nullptr, "g", {.dropout = 1.0})), Catch::Contains("nn::BiGRU 'g': dropout must be in [0, 1)"));
  // The op: weights of the wrong shapes name the direction and the weight.
  const attn::Var<double> w_ih(rnd({6, 3})), w_hh(rnd({6, 2})), b(rnd({6})), bad(rnd({8, 2}));
  CHECK_THROWS_WITH(attn::gru(ng, x, std::vector<int>{4, 4}, {w_ih, bad, b, b}), Catch::Contains("weight_hh must be (3H, H), got (8, 2)"));
  CHECK_THROWS_WITH(attn::gru(ng, x, std::vector<int>{4, 4}, {w_ih, w_hh, attn::Var<double>(rnd({5})), b}),
                    Catch::Contains("gru: direction 0: bias_ih must be (3H)"));
  CHECK_THROWS_WITH(attn::bigru(ng, x, std::vector<int>{4, 4}, {w_ih, w_hh, b, b}, {attn::Var<double>(rnd({6, 4})), w_hh, b, b}),
                    Catch::Contains("gru: direction 1: weight_ih must be (3H, input)"));
  CHECK_THROWS_WITH(attn::gru(ng, x, std::vector<int>{4, 4}, {w_ih, w_hh, b, {}}), Catch::Contains("a weight or bias is undefined"));
}

TEST_CASE("GRU under reduced precision: bf16 and int8 forward passes stay close to fp32, and int8 refuses a tape") {
  nn::BiGRU<16, 12> gru(nullptr, "gru");
  attn::Rng r(17);
  Tensor<float> xv({3, 9, 16});
  for (std::size_t i = 0; i < xv.numel(); ++i) xv[i] = float(r.uniform(-1, 1));
  const attn::Var<float, Shape<dyn, dyn, 16>> x(xv);
  const std::vector<int> len = {9, 4, 7};
  attn::NoGrad ng;
  const auto fp32 = gru(ng, x, len).out.value().to_vector();
  auto worst = [&](attn::Precision p) {
    const attn::PrecisionScope scope(p);
    const auto got = gru(ng, x, len).out.value().to_vector();
    double w = 0;
    for (std::size_t i = 0; i < got.size(); ++i) w = std::max(w, double(std::abs(got[i] - fp32[i])));
    return w;
  };
  const double bf16 = worst(attn::Precision::bf16), int8 = worst(attn::Precision::int8);
  INFO("bf16 " << bf16 << " int8 " << int8);
  CHECK(bf16 > 0);  // the products really ran in another precision
  CHECK(bf16 < 2e-2);
  CHECK(int8 > 0);
  CHECK(int8 < 5e-2);
  const attn::PrecisionScope int8_scope(attn::Precision::int8);
  Tape tape;
  const attn::Var<float, Shape<dyn, dyn, 16>> xg(xv, true);
  CHECK_THROWS_WITH(gru(tape, xg, len), Catch::Contains("int8") && Catch::Contains("NoGrad"));
}

namespace {
template <class T, class Gru>
void check_embedded(const Gru& gru, const nn::Embedding<6, T>& emb, double tol) {
  rnn_test::check_embedded_fold(
      gru, emb, tol, 3, "gru_from_table", [](const auto& e, const auto& g) { return nn::gru_input_tables(e, g); },
      [](attn::NoGrad& ng, const auto& g, const auto& t, const auto& ids, std::span<const int> len) { return nn::embedded_gru(ng, g, t, ids, len); },
      [](const auto&, const auto&, double) {});
}
}  // namespace

TEST_CASE("embedded_gru: an Embedding + GRU/BiGRU from input-projection tables equals the two layers run in turn") {
  nn::Embedding<6, double> emb_d(nullptr, "embed", 13, {.padding_idx = 0, .init_std = 0.5});
  nn::BiGRU<6, 4, double> bi_d(nullptr, "gru");
  nn::GRU<6, 4, double> uni_d(nullptr, "gru");
  check_embedded<double>(bi_d, emb_d, 1e-13);
  check_embedded<double>(uni_d, emb_d, 1e-13);
  // Stacked: the tables fold layer 0; the layers above run as usual.
  nn::BiGRU<6, 4, double> bi2_d(nullptr, "gru2", {.num_layers = 2});
  nn::GRU<6, 4, double> uni3_d(nullptr, "gru3", {.num_layers = 3, .bias = false});
  check_embedded<double>(bi2_d, emb_d, 1e-13);
  check_embedded<double>(uni3_d, emb_d, 1e-13);
  nn::Embedding<6, float> emb_f(nullptr, "embed", 13, {.padding_idx = 0, .init_std = 0.5});
  nn::BiGRU<6, 4, float> bi_f(nullptr, "gru");
  check_embedded<float>(bi_f, emb_f, 1e-6);
  // Under bf16 and int8 the tables hold the input projections gru() computes in that precision.
  for (const auto prec : {attn::Precision::bf16, attn::Precision::int8}) {
    INFO(attn::precision_name(prec));
    const attn::PrecisionScope scope(prec);
    check_embedded<float>(bi_f, emb_f, 1e-6);
  }
  attn::NoGrad ng;
  auto ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({1, 2});
  const auto tables = nn::gru_input_tables(emb_f, bi_f);
  {
    const attn::PrecisionScope int8(attn::Precision::int8);
    CHECK_THROWS_WITH(nn::embedded_gru(ng, bi_f, tables, ids, std::vector<int>{2}),
                      Catch::Contains("nn::embedded_gru") && Catch::Contains("built under Precision::fp32") &&
                          Catch::Contains("runs under int8"));
  }
  // Tables of another GRU, or once a weight has changed, refuse to run.
  nn::BiGRU<6, 4, float> other(nullptr, "gru");
  CHECK_THROWS_WITH(nn::embedded_gru(ng, other, tables, ids, std::vector<int>{2}), Catch::Contains("another GRU"));
  CHECK_NOTHROW(nn::embedded_gru(ng, bi_f, tables, ids, std::vector<int>{2}));
  CHECK_NOTHROW(nn::embedded_gru(ng, bi_f, tables, ids, attn::Lengths(std::vector<int>{2})));
  bi_f.layers()[0][1].w_ih.data()->mark_value_written();
  CHECK_THROWS_WITH(nn::embedded_gru(ng, bi_f, tables, ids, std::vector<int>{2}),
                    Catch::Contains("stale") && Catch::Contains("weight_ih of direction 1") && Catch::Contains("nn::gru_input_tables"));
  // The op itself: a table per direction.
  const auto w = bi_f.layers()[0];
  CHECK_THROWS_WITH(attn::gru_from_table<float>(ng, std::span<const Tensor<float, attn::AnyShape>>(tables.dirs.data(), 1), ids,
                                                std::vector<int>{2}, std::span<const attn::GruWeights<float>>(w)),
                    Catch::Contains("gru_from_table: 1 tables for 2 directions"));
  CHECK_THROWS_WITH(attn::gru_input_table<float>(emb_f.weight.erased(), attn::Var<float>(Tensor<float>::zeros({13, 6}))),
                    Catch::Contains("gru_input_table: weight_ih (13, 6) is not (3H, 6)"));
}
