// SPDX-License-Identifier: MIT
// Tape::backward with a BackwardObserver: each watched leaf is reported once, right after the
// last step that can add to its gradient, with its final gradient already in place.
#include <catch2/catch.hpp>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <attn/attn.hpp>

using attn::Dims;
using attn::Tape;
using attn::Tensor;
using V = attn::Var<double>;

namespace {

struct Recorder final : attn::BackwardObserver {
  static constexpr std::size_t before_any = std::numeric_limits<std::size_t>::max();
  std::vector<V> leaves;
  std::vector<std::size_t> steps;                  // step_done indices, in call order
  std::map<std::size_t, std::size_t> reported_at;  // leaf -> last step done when reported
  std::map<std::size_t, std::vector<double>> grad_at_report;
  void leaf_ready(std::size_t k) override {
    CHECK(reported_at.count(k) == 0);  // once
    reported_at[k] = steps.empty() ? before_any : steps.back();
    grad_at_report[k] = leaves[k].grad().empty() ? std::vector<double>{} : leaves[k].grad().to_vector();
  }
  void step_done(std::size_t i) override { steps.push_back(i); }
};

}  // namespace

TEST_CASE("tape: an observer hears of each leaf after the last step that writes its gradient") {
  attn::Rng rng(7);
  auto leaf = [&](Dims d) { return V(attn::random_tensor(rng, d, -1.0, 1.0), true); };
  V x = leaf({2, 3}), w1 = leaf({3, 3}), w2 = leaf({2, 3}), w3 = leaf({2, 2}), unused = leaf({4});
  Tape tape;
  auto h = attn::matmul(tape, x, w1);           // step 0: x, w1
  auto z = h * w2;                              // step 1: h, w2
  auto q = attn::matmul(tape, z, w1);           // step 2: z, w1 (w1's second use)
  auto c = attn::concat(tape, std::vector<V>{q, w3}, 1);  // step 3: q, w3
  auto loss = attn::sum(tape, c);               // step 4
  REQUIRE(tape.size() == 5);

  Recorder rec;
  rec.leaves = {x, w1, w2, w3, unused};
  const std::vector<const void*> ptrs{x.data().get(), w1.data().get(), w2.data().get(), w3.data().get(), unused.data().get()};
  tape.backward(loss, std::span<const void* const>(ptrs), rec);

  CHECK(rec.steps == std::vector<std::size_t>{4, 3, 2, 1, 0});
  REQUIRE(rec.reported_at.size() == 5);
  CHECK(rec.reported_at[4] == Recorder::before_any);  // no step reads it
  CHECK(rec.reported_at[3] == 3);                     // after concat's step
  CHECK(rec.reported_at[2] == 1);                     // after h * w2
  CHECK(rec.reported_at[1] == 0);                     // w1: its first use is the last step to run
  CHECK(rec.reported_at[0] == 0);
  for (std::size_t k = 0; k < 4; ++k) {
    INFO("leaf " << k);
    CHECK(rec.grad_at_report[k] == rec.leaves[k].grad().to_vector());  // final when reported
  }
  CHECK(rec.grad_at_report[4].empty());
  CHECK(unused.grad().empty());

  // The same gradients as a plain backward.
  V x2(x.value(), true), w12(w1.value(), true), w22(w2.value(), true), w32(w3.value(), true);
  Tape t2;
  auto loss2 = attn::sum(t2, attn::concat(t2, std::vector<V>{attn::matmul(t2, attn::matmul(t2, x2, w12) * w22, w12), w32}, 1));
  t2.backward(loss2);
  CHECK(x2.grad().to_vector() == x.grad().to_vector());
  CHECK(w12.grad().to_vector() == w1.grad().to_vector());
  CHECK(w22.grad().to_vector() == w2.grad().to_vector());
  CHECK(w32.grad().to_vector() == w3.grad().to_vector());
}

TEST_CASE("tape: the LSTM step lists every weight it writes") {
  attn::Rng rng(9);
  attn::nn::BiLSTM<3, 4, double> lstm(nullptr, "lstm");
  Tape tape;
  attn::Var<double, attn::Shape<attn::dyn, attn::dyn, 3>> x(attn::random_tensor(rng, Dims{2, 5, 3}, -1.0, 1.0), true);
  auto out = lstm(tape, x, std::vector<int>{5, 3});
  auto loss = attn::sum(tape, out.out);
  Recorder rec;
  std::vector<const void*> ptrs;
  for (auto& p : lstm.parameters<double, attn::cpu>()) {
    rec.leaves.push_back(p);
    ptrs.push_back(p.data().get());
  }
  REQUIRE(ptrs.size() == 8);
  tape.backward(loss, std::span<const void* const>(ptrs), rec);
  REQUIRE(rec.reported_at.size() == 8);
  for (auto& [k, at] : rec.reported_at) {
    INFO("parameter " << k);
    CHECK(at != Recorder::before_any);  // every weight is read by the LSTM's step
    CHECK(rec.grad_at_report[k] == rec.leaves[k].grad().to_vector());
  }
}

TEST_CASE("tape: backward_once_from_grads drops each step, and what it kept, as soon as it has run") {
  attn::Rng rng(9);
  V x(attn::random_tensor(rng, {2, 3}, -1.0, 1.0), true);
  V y(attn::random_tensor(rng, {2, 3}, -1.0, 1.0), true);  // the steps below are pushed by hand
  Tape tape;
  auto first = std::make_shared<int>(1), second = std::make_shared<int>(2);
  std::weak_ptr<int> second_seen = second;
  bool second_gone_when_first_ran = false;
  int runs = 0;
  // Step 0 (runs last) checks that step 1's closure, and the value it held, are gone by then.
  tape.push(x.data(), {x.data().get()}, [keep = std::move(first), &second_gone_when_first_ran, second_seen, &runs] {
    second_gone_when_first_ran = second_seen.expired();
    runs += *keep;
  });
  tape.push(y.data(), {x.data().get()}, [keep = std::move(second), &runs] { runs += *keep; });
  REQUIRE(tape.size() == 2);
  tape.backward_once_from_grads();
  CHECK(runs == 3);
  CHECK(second_gone_when_first_ran);
  CHECK(tape.size() == 0);
  // A plain backward keeps the steps (a second backward may follow) until clear().
  auto held = std::make_shared<int>(5);
  std::weak_ptr<int> held_seen = held;
  tape.push(x.data(), {x.data().get()}, [keep = std::move(held)] { (void)keep; });
  tape.backward_from_grads();
  CHECK(tape.size() == 1);
  CHECK(!held_seen.expired());
  tape.clear();
  CHECK(held_seen.expired());
}

TEST_CASE("sum and mean of floats add in double: a running float total stops at 2^24") {
  std::vector<float> v(1001, 1.0f);
  v[0] = 16777216.0f;  // 2^24: + 1 rounds back to it in float
  attn::NoGrad ng;
  attn::Var<float> x(Tensor<float>::from({1001}, v));
  CHECK(attn::sum(ng, x).value().data()[0] == 16778216.0f);
  CHECK(attn::mean(ng, x).value().data()[0] == Approx(16778216.0 / 1001).epsilon(1e-7));
}

TEST_CASE("slice and matmul refuse extents that would wrap instead of reading outside the operand") {
  Tape tape;
  attn::Var<float> x(Tensor<float>::full({2, 4}, 1.0f));
  const std::size_t t = 2, w = 3;
  CHECK_THROWS_AS(attn::slice(tape, x, 0, t - w, w), attn::ShapeError);  // start wrapped below 0: start + len == 2
  CHECK_THROWS_AS(attn::slice(tape, x, 1, 2, 3), attn::ShapeError);
  CHECK(attn::slice(tape, x, 1, 1, 3).dims() == Dims{2, 3});
  CHECK_THROWS_WITH((attn::detail::matmul_geometry<float, attn::cpu>("matmul", Dims{std::size_t{1} << 16, std::size_t{1} << 16, 8}, Dims{8, 4},
                                                                      false)),
                    Catch::Contains("above 2^31 - 1"));
}
