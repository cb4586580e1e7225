// SPDX-License-Identifier: MIT
// attn::checkpoint: the gradients of inputs and parameters equal a plain run's bit for bit, with
// dropout inside (the random stream is replayed) and nested checkpoints; the context's random
// stream ends where a plain run leaves it; NoGrad just calls the function; gradient checks in
// double; and the host pool's peak during a training step drops.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <attn/attn.hpp>

#include "../gradcheck_util.hpp"

using attn::Dims;
using attn::Tape;
using attn::Tensor;

namespace {

/// x + fc2(dropout(tanh(fc1(x)))): a residual block with dropout (p = 0.3, training).
template <std::size_t D, std::size_t H, class T>
struct Block : attn::nn::Module {
  Block(Module* parent, std::string name, double p = 0.3) : Module(parent, std::move(name)), p_(p) {}
  attn::nn::Linear<D, H, T> fc1{this, "fc1"};
  attn::nn::Linear<H, D, T> fc2{this, "fc2"};
  template <attn::Context C>
  attn::Var<T> operator()(C& ctx, const attn::Var<T>& x) const {
    auto h = attn::dropout(ctx, attn::tanh(ctx, fc1(ctx, x)), p_, true);
    return x + fc2(ctx, h);
  }

 private:
  double p_;
};

template <std::size_t D, std::size_t H, class T>
struct Net : attn::nn::Module {
  Block<D, H, T> b0{this, "b0"}, b1{this, "b1"}, b2{this, "b2"}, b3{this, "b3"};
};

/// Every parameter's gradient, by name (empty when backward did not reach it).
template <class T>
std::map<std::string, std::vector<T>> grads_of(const attn::nn::Module& m) {
  std::map<std::string, std::vector<T>> g;
  for (auto& [name, v] : m.named_parameter_vars<T>()) g[name] = v.grad().empty() ? std::vector<T>{} : v.grad().to_vector();
  return g;
}

bool same_state(const attn::Rng::State& a, const attn::Rng::State& b) {
  return std::memcmp(a.s, b.s, sizeof a.s) == 0 && a.has_spare == b.has_spare && (!a.has_spare || a.spare == b.spare);
}

/// How the tests run a block: directly, or through attn::checkpoint.
enum class Mode { plain, checkpoint };

template <class T, class Blk>
attn::Var<T> run_block(Tape& t, const Blk& blk, const attn::Var<T>& x, Mode mode) {
  if (mode == Mode::plain) return blk(t, x);
  return attn::checkpoint(t, [&blk](auto& c, const attn::Var<T>& v) { return blk(c, v); }, x);
}

/// One training step's forward and backward over four blocks, where h1 is used both by block b2
/// (checkpointed) and after it (so the input's gradient has a value before the checkpoint's step
/// adds to it), and b3 runs twice on different inputs. Returns the loss.
template <class T, std::size_t D, std::size_t H>
T step(Net<D, H, T>& net, Tape& t, const attn::Var<T>& x, Mode mode) {
  auto h1 = run_block(t, net.b0, x, mode);
  auto h2 = run_block(t, net.b1, h1, mode);
  auto h3 = attn::add(t, h1, run_block(t, net.b2, h2, mode));
  auto h4 = run_block(t, net.b3, h3, mode);
  auto h5 = run_block(t, net.b3, h4 * T(0.5), mode);
  auto loss = attn::sum(t, attn::tanh(t, h5));
  t.backward(loss);
  return loss.value().to_vector()[0];
}

template <class T>
Tensor<T> random_of(attn::Rng& rng, Dims d) {
  Tensor<T> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = T(rng.uniform(-1, 1));
  return t;
}

}  // namespace

TEMPLATE_TEST_CASE("checkpoint: gradients of inputs and parameters equal a plain run's, bit for bit, with dropout", "", float, double) {
  using T = TestType;
  attn::Rng rng(3);
  Net<6, 12, T> net;
  const auto xv = random_of<T>(rng, {5, 6});

  auto run = [&](Mode mode, std::uint64_t seed, attn::Rng::State& after) {
    net.zero_grad();
    attn::Var<T> x(xv, true);
    Tape t(seed);
    const T loss = step(net, t, x, mode);
    after = t.rng().state();
    return std::make_tuple(loss, x.grad().to_vector(), grads_of<T>(net));
  };
  attn::Rng::State plain_rng{}, ckpt_rng{}, other_rng{};
  const auto [loss_p, gx_p, gp_p] = run(Mode::plain, 11, plain_rng);
  const auto [loss_c, gx_c, gp_c] = run(Mode::checkpoint, 11, ckpt_rng);
  CHECK(loss_c == loss_p);
  CHECK(gx_c == gx_p);
  REQUIRE(gp_c.size() == 16);
  for (auto& [name, g] : gp_p) {
    INFO(name);
    CHECK(!g.empty());
    CHECK(gp_c.at(name) == g);
  }
  CHECK(same_state(ckpt_rng, plain_rng));  // the stream is where a plain run leaves it

  // The comparison can fail: another dropout mask gives other gradients, and the blocks drew
  // numbers from the stream. Without the replay of the stream's state in the recomputation, its
  // masks would be those of the numbers drawn after the forward pass, and the gradients would
  // differ as these do.
  const auto [loss_o, gx_o, gp_o] = run(Mode::checkpoint, 12, other_rng);
  CHECK(gx_o != gx_p);
  CHECK(gp_o.at("b0.fc1.weight") != gp_p.at("b0.fc1.weight"));
  CHECK(!same_state(plain_rng, Tape(11).rng().state()));
}

TEST_CASE("checkpoint: nested checkpoints, a tuple of outputs and an attention layer with dropout") {
  using T = double;
  using V = attn::Var<T>;
  attn::Rng rng(5);
  Net<4, 8, T> net;
  attn::nn::Attention<2, 4, T> mha(nullptr, "mha", {.dropout = 0.3});
  const auto xv = random_of<T>(rng, {2, 5, 4});
  const attn::Lengths lengths{5, 3};

  // (b1(mha(b0(x))), b2(x)): two outputs; the first goes through a nested checkpoint.
  auto body = [&](auto& c, const V& x, const attn::Lengths& len, bool nested) {
    auto inner = [&](auto& c2, const V& h) { return mha(c2, net.b1(c2, h), len); };
    V a = nested ? attn::checkpoint(c, inner, net.b0(c, x)) : inner(c, net.b0(c, x));
    return std::make_tuple(a, net.b2(c, x));
  };
  auto run = [&](Mode mode, attn::Rng::State& after) {
    net.zero_grad();
    mha.zero_grad();
    V x(xv, true);
    Tape t(21);
    V a, b;
    if (mode == Mode::plain)
      std::tie(a, b) = body(t, x, lengths, false);
    else
      std::tie(a, b) = attn::checkpoint(t, [&](auto& c, const V& v, const attn::Lengths& len) { return body(c, v, len, true); }, x, lengths);
    auto loss = attn::sum(t, attn::tanh(t, attn::add(t, a, b)));
    t.backward(loss);
    after = t.rng().state();
    auto g = grads_of<T>(net);
    for (auto& [n, v] : grads_of<T>(mha)) g["mha." + n] = v;
    return std::make_pair(x.grad().to_vector(), g);
  };
  attn::Rng::State rp{}, rc{};
  const auto [gx_p, gp_p] = run(Mode::plain, rp);
  const auto [gx_c, gp_c] = run(Mode::checkpoint, rc);
  CHECK(gx_c == gx_p);
  for (auto& [name, g] : gp_p) {
    INFO(name);
    CHECK(gp_c.at(name) == g);
  }
  CHECK(!gp_p.at("mha.in_proj_weight").empty());
  CHECK(gp_p.at("b3.fc1.weight").empty());  // b3 is not used
  CHECK(same_state(rc, rp));
}

TEST_CASE("checkpoint: under NoGrad it calls the function, and a tape records one step") {
  using T = float;
  using V = attn::Var<T>;
  attn::Rng rng(8);
  Net<4, 8, T> net;
  V x(random_of<T>(rng, {3, 4}), true);
  auto fn = [&](auto& c, const V& v) { return net.b1(c, net.b0(c, v)); };

  attn::NoGrad a(5), b(5);
  const auto ya = attn::checkpoint(a, fn, x);
  const auto yb = fn(b, x);
  CHECK(ya.value().to_vector() == yb.value().to_vector());
  CHECK(same_state(a.rng().state(), b.rng().state()));

  Tape t(5);
  const auto yt = attn::checkpoint(t, fn, x);
  CHECK(t.size() == 1);
  CHECK(yt.requires_grad());
  CHECK(yt.value().to_vector() == yb.value().to_vector());
  CHECK(same_state(t.rng().state(), b.rng().state()));

  // Nothing to differentiate: no step.
  V c(x.value(), false);
  attn::nn::Linear<4, 4, T> frozen(nullptr, "frozen");
  for (auto& p : frozen.parameters<T>()) p.data()->requires_grad = false;
  Tape t2;
  const auto y2 = attn::checkpoint(t2, [&](auto& ctx, const V& v) { return frozen(ctx, v); }, c);
  CHECK(t2.size() == 0);
  CHECK(!y2.requires_grad());
}

TEST_CASE("checkpoint: the step lists the parameters the function uses, for backward observers") {
  using T = double;
  using V = attn::Var<T>;
  attn::Rng rng(4);
  Net<4, 8, T> net;
  V x(random_of<T>(rng, {3, 4}), true);
  Tape t;
  auto y = attn::checkpoint(t, [&](auto& c, const V& v) { return net.b1(c, net.b0(c, v)); }, x);
  auto loss = attn::sum(t, attn::tanh(t, y));
  REQUIRE(t.size() == 3);  // checkpoint, tanh, sum

  struct Observer final : attn::BackwardObserver {
    std::vector<V> leaves;
    std::vector<std::size_t> steps;
    std::map<std::size_t, std::size_t> at;  // leaf -> step after which it was reported
    std::map<std::size_t, std::vector<T>> grad;
    void leaf_ready(std::size_t k) override {
      at[k] = steps.empty() ? std::numeric_limits<std::size_t>::max() : steps.back();
      grad[k] = leaves[k].grad().empty() ? std::vector<T>{} : leaves[k].grad().to_vector();
    }
    void step_done(std::size_t i) override { steps.push_back(i); }
  } obs;
  std::vector<const void*> ptrs;
  for (auto& [name, p] : net.named_parameter_vars<T>()) {
    obs.leaves.push_back(p);
    ptrs.push_back(p.data().get());
  }
  t.backward(loss, std::span<const void* const>(ptrs), obs);
  REQUIRE(obs.at.size() == 16);
  for (std::size_t k = 0; k < ptrs.size(); ++k) {
    INFO("parameter " << k);
    const bool used = k < 8;  // b0 and b1 (registered first)
    CHECK(obs.at[k] == (used ? 0 : std::numeric_limits<std::size_t>::max()));
    CHECK(obs.grad[k] == (obs.leaves[k].grad().empty() ? std::vector<T>{} : obs.leaves[k].grad().to_vector()));
    CHECK(obs.leaves[k].grad().empty() == !used);
  }
}

TEST_CASE("checkpoint: a parameter returned as it is, read by no op inside, is listed and takes its gradient as a leaf") {
  using V = attn::Var<double>;
  attn::nn::Embedding<3, double> table(nullptr, "table", 4, {.sparse = true});
  V x(Tensor<double>::from({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}), true);
  Tape t;
  const V s = table.weight;
  auto [a, b] = attn::checkpoint(t, [&](auto& c, const V& v) { return std::make_tuple(attn::tanh(c, v), s); }, x);
  auto loss = attn::sum(t, attn::mul(t, a, b));
  struct Observer final : attn::BackwardObserver {
    std::vector<std::size_t> steps;
    std::size_t at = 99;
    void leaf_ready(std::size_t) override { at = steps.empty() ? 98 : steps.back(); }
    void step_done(std::size_t i) override { steps.push_back(i); }
  } obs;
  const void* ptr = s.data().get();
  t.backward(loss, std::span<const void* const>(&ptr, 1), obs);
  CHECK(obs.at != 98);  // reported after a step (the checkpoint's), not before any
  const auto& d = *table.weight.data();
  CHECK_FALSE(d.grad_is_row_sparse());  // a dense gradient: the optimizer will not skip it
  const auto g = table.weight.grad().to_vector();
  for (std::size_t i = 0; i < 12; ++i) CHECK(g[i] == Approx(std::tanh(double(i + 1))));
}

TEST_CASE("checkpoint: a tracing tape records nothing and names what was read from outside") {
  using T = double;
  using V = attn::Var<T>;
  attn::Rng rng(6);
  attn::nn::Linear<3, 2, T> fc(nullptr, "fc");
  V x(random_of<T>(rng, {4, 3}), true);
  Tape trace(Tape::Tracing{});
  auto y = attn::tanh(trace, fc(trace, x));
  auto z = attn::sum(trace, y * y);
  CHECK(trace.tracing());
  CHECK(trace.size() == 0);
  const std::vector<const void*> expect{x.data().get(), fc.weight.data().get(), fc.bias.data().get()};
  CHECK(trace.outside_inputs() == expect);
  trace.backward(z);  // nothing to run
  CHECK(x.grad().empty());
  CHECK(Tape().outside_inputs().empty());
}

TEST_CASE("checkpoint: an input also used directly by the function, and a parameter passed as an input") {
  using T = double;
  using V = attn::Var<T>;
  attn::Rng rng(10);
  attn::nn::Linear<3, 3, T> fc(nullptr, "fc");
  const auto xv = random_of<T>(rng, {4, 3});
  auto run = [&](Mode mode) {
    fc.zero_grad();
    V x(xv, true);
    Tape t(2);
    auto fn = [&](auto& c, const V& v, const V& w) { return attn::tanh(c, attn::add(c, fc(c, v), attn::matmul(c, v, w))); };
    const V w = fc.weight;  // (3, 3): also used by fc itself
    V y = mode == Mode::plain ? fn(t, x, w) : attn::checkpoint(t, fn, x, w);
    auto loss = attn::sum(t, attn::add(t, y, x));
    t.backward(loss);
    return std::make_pair(x.grad().to_vector(), fc.weight.grad().to_vector());
  };
  const auto [gx_p, gw_p] = run(Mode::plain);
  const auto [gx_c, gw_c] = run(Mode::checkpoint);
  CHECK(gx_c == gx_p);
  REQUIRE(gw_c.size() == gw_p.size());
  // The weight's two contributions are summed in another order: equal up to rounding.
  for (std::size_t i = 0; i < gw_p.size(); ++i) CHECK(gw_c[i] == Approx(gw_p[i]).epsilon(1e-14));
}

TEST_CASE("checkpoint: a function of parameters only") {
  using T = double;
  attn::nn::Linear<3, 2, T> fc(nullptr, "fc");
  auto run = [&](Mode mode) {
    fc.zero_grad();
    Tape t(9);
    auto fn = [&](auto& c) { return attn::dropout(c, attn::tanh(c, attn::scale(c, fc.weight, T(2))), 0.3, true); };
    auto y = mode == Mode::plain ? fn(t) : attn::checkpoint(t, fn);
    t.backward(attn::sum(t, attn::mul(t, y, y)));
    return fc.weight.grad().to_vector();
  };
  const auto plain = run(Mode::plain);
  CHECK(run(Mode::checkpoint) == plain);
}

TEST_CASE("checkpoint: errors name the input, or a recomputation that differs from the first run") {
  using V = attn::Var<double>;
  attn::Rng rng(14);
  V x(random_of<double>(rng, {2, 3}), true);
  Tape t;
  auto id = [](auto& c, const V& a, const V& b) { return attn::add(c, a, b); };
  CHECK_THROWS_AS(attn::checkpoint(t, id, x, V()), attn::ArgumentError);
  CHECK_THROWS_WITH(attn::checkpoint(t, id, x, V()), Catch::Matchers::Contains("input 1 is an undefined Var"));
  int calls = 0;  // the second run sums another axis: not a function of its inputs alone
  auto y = attn::checkpoint(t, [&](auto& c, const V& a) { return attn::sum(c, a, calls++ == 0 ? 0 : 1); }, x);
  CHECK_THROWS_WITH(t.backward(attn::sum(t, y)), Catch::Matchers::Contains("differs in shape from the first run"));
}

TEST_CASE("checkpoint: a Var the function captured from the caller's ops, used by an operator, is refused") {
  using V = attn::Var<double>;
  attn::Rng rng(15);
  V x(random_of<double>(rng, {2, 3}), true);
  Tape t;
  const V c = attn::scale(t, x, 2.0);  // made by the caller's ops, on t
  CHECK_THROWS_WITH(attn::checkpoint(t, [&](auto&, const V& a) { return c * 3.0 + a; }, x),
                    Catch::Matchers::Contains("recorded on the caller's tape"));
  // Passed as an input, it is fine.
  auto y = attn::checkpoint(t, [](auto& ctx, const V& a, const V& cc) { return attn::add(ctx, attn::scale(ctx, cc, 3.0), a); }, x, c);
  t.backward(attn::sum(t, y));
  for (double g : x.grad().to_vector()) CHECK(g == 7.0);  // 1 + 3 * 2
}

TEST_CASE("checkpoint: the recomputation runs in the forward's precision, also when backward runs outside its scope") {
  attn::Rng rng(16);
  Net<16, 32, float> plain, ckpt;
  for (auto* n : {&plain, &ckpt}) n->init(5);
  const auto xv = random_of<float>(rng, {8, 16});
  auto run = [&](Net<16, 32, float>& net, Mode mode) {
    Tape t(3);
    attn::Var<float> x(xv.clone(), true);
    attn::Var<float> loss;
    {
      const attn::PrecisionScope bf16(attn::Precision::bf16);
      loss = attn::sum(t, attn::tanh(t, run_block(t, net.b1, run_block(t, net.b0, x, mode), mode)));
    }
    t.backward(loss);  // in fp32: a checkpoint's recomputation must still run in bf16
    return std::pair{grads_of<float>(net), x.grad().to_vector()};
  };
  const auto [gp, xp] = run(plain, Mode::plain);
  const auto [gc, xc] = run(ckpt, Mode::checkpoint);
  CHECK(xc == xp);
  for (auto& [name, g] : gp) {
    INFO(name);
    CHECK(gc.at(name) == g);
  }
}

TEST_CASE("checkpoint: gradient checks in double through checkpointed functions") {
  using V = attn::Var<double>;
  attn::Rng rng(12);
  // x (3, 4), w (5, 4), b (5): dropout(tanh(x w^T + b)) * 2, inputs and weights all checked.
  auto f = [](auto& c, const V& x, const V& w, const V& b) { return attn::dropout(c, attn::tanh(c, attn::linear(c, x, w, b)), 0.3, true) * 2.0; };
  testutil::check_gradients(
      "checkpoint(linear, tanh, dropout)", [&](Tape& t, auto& in) { return attn::checkpoint(t, f, in[0], in[1], in[2]); },
      {attn::random_tensor(rng, {3, 4}), attn::random_tensor(rng, {5, 4}), attn::random_tensor(rng, {5})});
  // Nested, with a tuple of outputs combined outside.
  testutil::check_gradients(
      "nested checkpoint, two outputs",
      [&](Tape& t, auto& in) {
        auto g = [&](auto& c, const V& x, const V& w, const V& b) {
          V h = attn::checkpoint(c, f, x, w, b);
          return std::make_tuple(h, attn::sigmoid(c, h));
        };
        auto [p, q] = attn::checkpoint(t, g, in[0], in[1], in[2]);
        return attn::mul(t, p, q);
      },
      {attn::random_tensor(rng, {2, 4}), attn::random_tensor(rng, {5, 4}), attn::random_tensor(rng, {5})});
}

TEST_CASE("checkpoint: the host pool's peak during a training step drops") {
  using T = float;
  constexpr std::size_t D = 64, H = 512;
  attn::Rng rng(1);
  Net<D, H, T> net;
  const auto xv = random_of<T>(rng, {1024, D});
  auto peak_of = [&](Mode mode) {
    for (int s = 0; s < 2; ++s) {  // the second step is measured
      net.zero_grad();
      attn::Var<T> x(xv, true);
      Tape t(3);
      const std::size_t base = attn::cpu::pool_stats().in_use_bytes;
      attn::cpu::reset_pool_peak();
      step(net, t, x, mode);
      if (s == 1) return attn::cpu::pool_stats().peak_bytes - base;
    }
    return std::size_t{0};
  };
  const std::size_t plain = peak_of(Mode::plain);
  const std::size_t ckpt = peak_of(Mode::checkpoint);
  INFO("peak above the bytes in use before the step: plain " << plain << ", checkpointed " << ckpt);
  CHECK(plain > std::size_t(25) << 20);  // five blocks' intermediates, about 8 MB each
  CHECK(ckpt * 5 < plain * 2);  // under 40 % (measured: 31 %)
}
