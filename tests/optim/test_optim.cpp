// SPDX-License-Identifier: MIT
// Adam, AdamW and SGD with momentum against PyTorch's three-step goldens; clipping; schedules.
#include "../golden_util.hpp"

#include <limits>

using attn::Tensor;
namespace optim = attn::optim;

namespace {
template <class T>
optim::NamedParams<T, attn::cpu> one_param(const attn::io::SafetensorsFile& f) {
  optim::NamedParams<T, attn::cpu> p;
  p.names = {"p"};
  p.vars.emplace_back(golden::tensor<T>(f, "param_init"), true);
  return p;
}
template <class T>
void set_grad(const attn::Var<T>& v, const Tensor<T>& g) {
  v.data()->grad = g.clone();
}
}  // namespace

TEST_CASE("golden: Adam and AdamW match torch.optim over three steps") {
  for (std::string name : {"adam", "adamw"}) {
    auto f = golden::load(name);
    auto run = [&](auto tag, double tol) {
      using T = decltype(tag);
      auto params = one_param<T>(f);
      optim::Adam<T> opt(params, {.lr = 0.01, .weight_decay = 0.1, .decoupled = name == "adamw"});
      for (int s = 1; s <= 3; ++s) {
        set_grad(params.vars[0], golden::tensor<T>(f, "grad_step" + std::to_string(s)));
        opt.step();
        golden::expect_close(f, "param_step" + std::to_string(s), params.vars[0].value(), tol);
        golden::expect_close(f, "exp_avg_step" + std::to_string(s), opt.exp_avg(0), tol);
        golden::expect_close(f, "exp_avg_sq_step" + std::to_string(s), opt.exp_avg_sq(0), tol);
      }
    };
    run(float{}, 1e-6);
    run(double{}, 1e-12);
  }
}

TEST_CASE("golden: SGD with momentum and weight decay matches torch.optim.SGD") {
  auto f = golden::load("sgd_momentum");
  auto params = one_param<double>(f);
  optim::Sgd<double> opt(params, {.lr = std::stod(f.metadata.at("lr")), .momentum = 0.9, .weight_decay = 0.01});
  for (int s = 1; s <= 3; ++s) {
    set_grad(params.vars[0], golden::tensor<double>(f, "grad_step" + std::to_string(s)));
    opt.step();
    golden::expect_close(f, "param_step" + std::to_string(s), params.vars[0].value(), 1e-12);
    golden::expect_close(f, "momentum_buffer_step" + std::to_string(s), opt.momentum_buffer(0), 1e-12);
  }
}

TEST_CASE("golden: SGD with Nesterov momentum, and with dampening, matches torch.optim.SGD") {
  for (const char* name : {"sgd_nesterov", "sgd_dampening"}) {
    INFO(name);
    auto f = golden::load(name);
    auto params = one_param<double>(f);
    optim::Sgd<double> opt(params, {.lr = std::stod(f.metadata.at("lr")),
                                    .momentum = 0.9,
                                    .dampening = std::stod(f.metadata.at("dampening")),
                                    .weight_decay = 0.01,
                                    .nesterov = f.metadata.at("nesterov") == "true"});
    for (int s = 1; s <= 3; ++s) {
      set_grad(params.vars[0], golden::tensor<double>(f, "grad_step" + std::to_string(s)));
      opt.step();
      golden::expect_close(f, "param_step" + std::to_string(s), params.vars[0].value(), 1e-12);
      golden::expect_close(f, "momentum_buffer_step" + std::to_string(s), opt.momentum_buffer(0), 1e-12);
    }
  }
}

TEST_CASE("clip_grad_norm scales the joint norm down to max_norm and reports the norm before") {
  std::vector<attn::Var<double>> ps{attn::Var<double>(Tensor<double>::zeros({2}), true), attn::Var<double>(Tensor<double>::zeros({1}), true)};
  ps[0].data()->grad = Tensor<double>::from({2}, {3, 0});
  ps[1].data()->grad = Tensor<double>::from({1}, {4});
  CHECK(optim::clip_grad_norm(ps, 1.0) == Approx(5.0));
  CHECK(ps[0].grad()[0] == Approx(3.0 / 5));
  CHECK(ps[1].grad()[0] == Approx(4.0 / 5));
  CHECK(optim::clip_grad_norm(ps, 10.0) == Approx(1.0).epsilon(1e-5));
  CHECK(ps[1].grad()[0] == Approx(4.0 / 5));
  // max_norm 0 only measures.
  CHECK(optim::clip_grad_norm(ps, 0.0) == Approx(1.0).epsilon(1e-5));
  CHECK(ps[1].grad()[0] == Approx(4.0 / 5));
}

TEST_CASE("the kernels over several gradient spans (a device's one-wait form): sums in span order, the first non-finite span") {
  using attn::kernels::GradSpan;
  const float a[3] = {1, 2, 2}, b[1] = {4}, c[2] = {0.5f, std::numeric_limits<float>::infinity()};
  const GradSpan<float> spans[4] = {{a, 3}, {b, 0}, {b, 1}, {c, 2}};
  CHECK(attn::kernels::sum_squares(attn::cpu{}, spans, 3) == 25.0);  // 9 + 0 + 16
  CHECK(attn::kernels::sum_squares(attn::cpu{}, spans, 0) == 0.0);
  CHECK(attn::kernels::first_non_finite(attn::cpu{}, spans, 4) == 3);
  CHECK(attn::kernels::first_non_finite(attn::cpu{}, spans, 3) == 3);  // none: the count
  const GradSpan<float> nan_first[2] = {{c + 1, 1}, {a, 3}};
  CHECK(attn::kernels::first_non_finite(attn::cpu{}, nan_first, 2) == 0);
}

namespace {
optim::NamedParams<float, attn::cpu> three_params() {
  optim::NamedParams<float, attn::cpu> p;
  for (const char* n : {"embed.weight", "attn.qkv.weight", "head.bias"}) {
    p.names.push_back(n);
    p.vars.emplace_back(Tensor<float>::from({2}, {1, 2}), true);
    p.vars.back().data()->grad = Tensor<float>::from({2}, {0.5f, -0.5f});
  }
  return p;
}
}  // namespace

TEST_CASE("non-finite guard: stop names the step and the first parameter with a non-finite gradient") {
  auto p = three_params();
  optim::NonFiniteGuard guard(optim::OnNonFinite::stop);
  CHECK(guard.check(0.7, optim::clip_grad_norm(p.vars, 10.0), p, 0));
  p.vars[1].data()->grad[1] = std::numeric_limits<float>::quiet_NaN();
  p.vars[2].data()->grad[0] = std::numeric_limits<float>::infinity();
  const double norm = optim::clip_grad_norm(p.vars, 1.0);
  CHECK(std::isnan(norm));
  CHECK(p.vars[0].grad()[0] == 0.5f);  // a NaN norm scales nothing
  CHECK_THROWS_WITH(guard.check(0.7, norm, p, 41),
                    Catch::Matchers::Contains("non-finite gradient at step 41") &&
                        Catch::Matchers::Contains("'attn.qkv.weight'"));
  CHECK_THROWS_AS(guard.check(std::numeric_limits<double>::infinity(), norm, p, 42), attn::NumericalError);
  CHECK_THROWS_WITH(guard.check(std::nan(""), norm, p, 43), Catch::Matchers::Contains("non-finite loss (nan) at step 43"));
}

TEST_CASE("non-finite guard: skip counts the step, leaves weights and Adam state untouched, and gives up after a run of skips") {
  auto p = three_params();
  optim::Adam<float> opt(p, {.lr = 0.1});
  optim::NonFiniteGuard guard(optim::OnNonFinite::skip, 3);
  auto step = [&](long long s) {
    const double norm = optim::clip_grad_norm(opt.params(), 1.0);
    const bool ok = guard.check(0.5, norm, opt.named_params(), s);
    if (ok) opt.step();
    return ok;
  };
  REQUIRE(step(0));
  const auto before = opt.params()[0].value().clone();
  const auto m_before = opt.exp_avg(0).clone();
  opt.params()[0].data()->grad[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(step(1));
  CHECK_FALSE(step(2));
  CHECK(guard.skipped() == 2);
  CHECK(opt.params()[0].value()[0] == before[0]);
  CHECK(opt.exp_avg(0)[0] == m_before[0]);
  CHECK_THAT(guard.last(), Catch::Matchers::Contains("'embed.weight'"));
  CHECK_THROWS_WITH(step(3), Catch::Matchers::Contains("3 non-finite steps in a row; giving up"));
  CHECK(guard.skipped() == 2);  // the step that gives up is not a skipped one
  // A finite step resets the run.
  optim::NonFiniteGuard g2(optim::OnNonFinite::skip, 2);
  CHECK_FALSE(g2.check(std::nan(""), 1.0, p, 0));
  CHECK(g2.check(0.5, 1.0, p, 1));
  CHECK_FALSE(g2.check(std::nan(""), 1.0, p, 2));
  CHECK(g2.skipped() == 2);
  CHECK(optim::parse_on_non_finite("skip") == optim::OnNonFinite::skip);
  CHECK_THROWS_AS(optim::parse_on_non_finite("ignore"), attn::ArgumentError);
}

TEST_CASE("schedules: linear warm-up then cosine or linear decay") {
  optim::WarmupSchedule s{.base_lr = 1.0, .warmup = 10, .total = 110, .min_lr = 0.1};
  CHECK(s(0) == Approx(0.1));
  CHECK(s(9) == Approx(1.0));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(60) == Approx(0.55));
  CHECK(s(110) == Approx(0.1));
  CHECK(s(500) == Approx(0.1));
  s.decay = optim::WarmupSchedule::Decay::linear;
  CHECK(s(35) == Approx(0.1 + 0.9 * 0.75));
  CHECK(s(110) == Approx(0.1));
  // Constant: the warm-up, then base_lr whatever min_lr and total say.
  s.decay = optim::WarmupSchedule::Decay::constant;
  CHECK(s(4) == Approx(0.5));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(60) == Approx(1.0));
  CHECK(s(500) == Approx(1.0));
  // No warm-up: the decay starts at step 0.
  const optim::WarmupSchedule c{.base_lr = 2.0, .warmup = 0, .total = 4, .min_lr = 0.0};
  CHECK(c(0) == Approx(2.0));
  CHECK(c(2) == Approx(1.0));
  CHECK(c(4) == Approx(0.0).margin(1e-12));
}

TEST_CASE("golden: a sparse Embedding with Adam matches nn.Embedding(sparse=True) + torch.optim.SparseAdam") {
  auto f = golden::load("sparse_adam");
  attn::nn::Embedding<3> emb(nullptr, "emb", 6, {.padding_idx = 0, .sparse = true});
  {
    auto w = golden::tensor<float>(f, "weight_init");
    REQUIRE(w.dims() == emb.weight.dims());
    std::copy_n(w.data(), w.numel(), const_cast<float*>(emb.weight.raw().data()));
  }
  optim::Adam<float> opt(emb, {.lr = 0.01});
  for (int s = 1; s <= 3; ++s) {
    const auto k = std::to_string(s);
    auto ids = golden::tensor<std::int64_t>(f, "ids_step" + k);
    attn::Tape tape;
    auto x = emb(tape, ids);
    tape.backward(x, golden::tensor<float>(f, "upstream_step" + k));
    REQUIRE(emb.weight.data()->grad_is_row_sparse());
    for (auto r : emb.weight.data()->grad_rows) CHECK(r != 0);  // never the padding row
    opt.step();
    opt.zero_grad();
    golden::expect_close(f, "weight_step" + k, emb.weight.value(), 1e-6);
    golden::expect_close(f, "exp_avg_step" + k, opt.exp_avg(0), 1e-6);
    golden::expect_close(f, "exp_avg_sq_step" + k, opt.exp_avg_sq(0), 1e-6);
  }
}

TEST_CASE("sparse Embedding gradients: compact rows, clipping, zero_grad, and dense fallback") {
  attn::nn::Embedding<4> emb(nullptr, "emb", 10, {.padding_idx = 0, .sparse = true});
  auto ids = Tensor<std::int32_t>::from({5}, {3, 7, 3, 0, 9});
  attn::Tape tape;
  auto x = emb(tape, ids);
  tape.backward(attn::sum(tape, attn::mul(tape, x, x)));
  auto& d = *emb.weight.data();
  REQUIRE(d.grad_is_row_sparse());
  // The compact form: no whole-table buffer, one row of values per looked-up row, in first-use
  // order: d(sum x^2)/dw[r] = 2 w[r] per lookup (row 3 twice; the padding row never).
  REQUIRE(d.grad_compact);
  CHECK(d.grad.empty());
  CHECK(d.grad_rows == std::vector<std::size_t>{3, 7, 9});
  REQUIRE(d.grad_values.dims()[0] >= 3);
  const auto w = emb.weight.value();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(d.grad_values(i, j) == (i == 0 ? 4.0f : 2.0f) * w(d.grad_rows[i], j));
  // The norm over the recorded rows is the norm of the whole gradient.
  double want = 0;
  for (std::size_t i = 0; i < 3 * 4; ++i) want += double(d.grad_values[i]) * d.grad_values[i];
  auto params = optim::NamedParams<float, attn::cpu>::of(emb);
  CHECK(optim::clip_grad_norm(params.vars, 1e-3) == Approx(std::sqrt(want)));
  double after = 0;
  for (std::size_t i = 0; i < 3 * 4; ++i) after += double(d.grad_values[i]) * d.grad_values[i];
  CHECK(std::sqrt(after) == Approx(1e-3).epsilon(1e-4));
  const float* kept = d.grad_values.data();
  emb.zero_grad();
  CHECK_FALSE(d.has_grad());
  CHECK(d.grad.empty());
  CHECK(d.grad_rows.empty());
  CHECK(d.grad_values.data() == kept);  // the row buffer is kept for the next step
  for (auto slot : d.row_slot) CHECK(slot == d.kNoSlot);
  // Untouched rows do not move under Adam; touched ones do.
  optim::Adam<float> opt(emb, {.lr = 0.1, .weight_decay = 0.5, .decoupled = true});
  const auto before = emb.weight.value().clone();
  {
    attn::Tape t2;
    t2.backward(attn::sum(t2, emb(t2, Tensor<std::int32_t>::from({2}, {2, 5}))));
  }
  opt.step();
  for (std::size_t r = 0; r < 10; ++r) {
    const bool moved = emb.weight.value()(r, 0) != before(r, 0);
    CHECK(moved == (r == 2 || r == 5));
  }
  opt.zero_grad();
  // Any dense accumulation (the table used as a matrix) makes the gradient dense, keeping the
  // rows scattered so far.
  {
    attn::Tape t3;
    auto y = emb(t3, Tensor<std::int32_t>::from({1}, {4}));
    auto z = attn::matmul_nt(t3, y, emb.weight);  // (1, 4) x (10, 4)^T
    t3.backward(attn::sum(t3, z));
  }
  CHECK_FALSE(d.grad_is_row_sparse());
  CHECK_FALSE(d.grad_compact);
  {
    // d/dW of sum(y W^T) with y = W[4]: every row gets y; row 4 also sum of W's rows (its lookup).
    const auto g = emb.weight.grad();
    const auto v = emb.weight.value();
    for (std::size_t j = 0; j < 4; ++j) {
      float col = 0;
      for (std::size_t r = 0; r < 10; ++r) col += v(r, j);
      CHECK(g(0, j) == Approx(v(4, j)));
      CHECK(g(4, j) == Approx(v(4, j) + col));
    }
  }
  emb.zero_grad();
  CHECK(d.grad.empty());
}

TEST_CASE("sparse Embedding gradients: other uses of the table after a compact scatter, in either recording order") {
  const auto ids = Tensor<std::int32_t>::from({4}, {2, 6, 2, 0});
  // The reference: the same table with a dense gradient.
  auto run = [&](bool sparse, int order) {
    attn::nn::Embedding<3> emb(nullptr, "emb", 8, {.padding_idx = 0, .sparse = sparse});
    emb.init(5);
    attn::Tape t;
    attn::Var<float> total;
    if (order == 0) {  // tanh of the table recorded first: backward scatters first, then the tanh step adds
      auto a = attn::sum(t, attn::tanh(t, emb.weight));
      total = attn::add(t, a, attn::sum(t, emb(t, ids)));
    } else if (order == 1) {  // the table as a matrix first: backward scatters, then the product adds
      const attn::Var<float> x(Tensor<float>::from({1, 3}, {0.5f, -1.0f, 2.0f}));
      auto z = attn::sum(t, attn::matmul_nt(t, x, emb.weight));
      total = attn::add(t, z, attn::sum(t, emb(t, ids)));
    } else {  // the lookup first, then the table as a matrix: the product's gradient comes first
      auto y = emb(t, ids);
      total = attn::sum(t, attn::matmul_nt(t, y, emb.weight));
    }
    t.backward(total);
    auto& d = *emb.weight.data();
    const bool row_sparse = d.grad_is_row_sparse();
    return std::pair{emb.weight.grad().to_vector(), row_sparse};
  };
  for (int order : {0, 1, 2}) {
    INFO("order " << order);
    const auto [want, want_rs] = run(false, order);
    const auto [got, rs] = run(true, order);
    CHECK_FALSE(want_rs);
    CHECK_FALSE(rs);  // made dense by the other use
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  }
}

TEST_CASE("sparse Embedding gradients: scatters after Var::grad(), SGD, and checkpoint keep the sums") {
  const auto a = Tensor<std::int32_t>::from({3}, {1, 4, 4});
  const auto b = Tensor<std::int32_t>::from({3}, {4, 7, 0});
  attn::nn::Embedding<3> sparse(nullptr, "emb", 9, {.padding_idx = 0, .sparse = true});
  attn::nn::Embedding<3> dense(nullptr, "emb", 9, {.padding_idx = 0});
  sparse.init(11);
  dense.init(11);
  auto& d = *sparse.weight.data();
  auto lookups = [](auto& emb, const auto& ids) {
    attn::Tape t;
    t.backward(attn::sum(t, attn::mul(t, emb(t, ids), emb(t, ids))));
  };
  // Var::grad() in between two backward passes: the second scatters into the whole-table form.
  lookups(sparse, a);
  lookups(dense, a);
  (void)sparse.weight.grad();
  REQUIRE_FALSE(d.grad_compact);
  lookups(sparse, b);
  lookups(dense, b);
  CHECK(d.grad_is_row_sparse());
  auto rows = d.grad_rows;
  std::sort(rows.begin(), rows.end());
  CHECK(rows == std::vector<std::size_t>{1, 4, 7});
  CHECK(sparse.weight.grad().to_vector() == dense.weight.grad().to_vector());
  sparse.zero_grad();
  dense.zero_grad();
  CHECK(d.grad.empty());  // the buffer Var::grad() made is dropped ...
  lookups(sparse, a);
  CHECK(d.grad_compact);  // ... and the next step is compact again
  sparse.zero_grad();
  // SGD reads the whole table: it keeps the buffer it needs, and moves as on the dense table.
  optim::Sgd<float> s1(sparse, {.lr = 0.1, .momentum = 0.9}), s2(dense, {.lr = 0.1, .momentum = 0.9});
  for (const auto* ids : {&a, &b, &a}) {
    lookups(sparse, *ids);
    lookups(dense, *ids);
    s1.step();
    s2.step();
    s1.zero_grad();
    s2.zero_grad();
  }
  CHECK_FALSE(d.grad.empty());  // kept, zeroed in place
  CHECK(sparse.weight.value().to_vector() == dense.weight.value().to_vector());
  // A lookup inside attn::checkpoint: the same gradient, bit for bit, as without it.
  attn::nn::Embedding<3> e1(nullptr, "emb", 9, {.padding_idx = 0, .sparse = true}), e2(nullptr, "emb", 9, {.padding_idx = 0, .sparse = true});
  e1.init(3);
  e2.init(3);
  {
    attn::Tape t;
    auto y = attn::checkpoint(t, [&](auto& c, const Tensor<std::int32_t>& ids) { return attn::tanh(c, e1(c, ids)); }, b);
    t.backward(attn::sum(t, y));
  }
  {
    attn::Tape t;
    t.backward(attn::sum(t, attn::tanh(t, e2(t, b))));
  }
  CHECK(e1.weight.data()->grad_compact);
  CHECK(e1.weight.data()->grad_rows == e2.weight.data()->grad_rows);
  CHECK(e1.weight.grad().to_vector() == e2.weight.grad().to_vector());
}

TEST_CASE("sparse Embedding gradients: the compact form accumulates and grows as the whole-table one, and Adam moves the same") {
  // Three backward passes without zero_grad, touching more rows than the first pass allocated, with
  // padding and repeats; against the same table without .sparse (a dense gradient).
  attn::nn::Embedding<5> sparse(nullptr, "emb", 40, {.padding_idx = 0, .sparse = true});
  attn::nn::Embedding<5> dense(nullptr, "emb", 40, {.padding_idx = 0});
  sparse.init(7);
  dense.init(7);
  const std::vector<std::vector<std::int64_t>> batches = {{1, 2, 0, 2}, {3, 4, 5, 6, 7, 8, 1, 0}, {9, 10, 11, 12, 13, 14, 15, 16, 17, 3, 39}};
  attn::Rng rng(3);
  for (const auto& b : batches) {
    const auto ids = Tensor<std::int64_t>::from({b.size()}, std::vector<std::int64_t>(b));
    auto up = Tensor<float>({b.size(), 5});
    for (std::size_t i = 0; i < up.numel(); ++i) up[i] = float(rng.normal());
    for (auto* e : {&sparse, &dense}) {
      attn::Tape t;
      t.backward((*e)(t, ids), up);
    }
  }
  auto& d = *sparse.weight.data();
  REQUIRE(d.grad_compact);
  CHECK(d.grad_rows.size() == 18);
  const auto want = dense.weight.grad();
  std::vector<std::uint8_t> listed(40, 0);
  for (std::size_t i = 0; i < d.grad_rows.size(); ++i) {
    listed[d.grad_rows[i]] = 1;
    for (std::size_t j = 0; j < 5; ++j) CHECK(d.grad_values(i, j) == want(d.grad_rows[i], j));  // the same sums, bit for bit
  }
  for (std::size_t r = 0; r < 40; ++r)
    if (!listed[r])
      for (std::size_t j = 0; j < 5; ++j) CHECK(want(r, j) == 0.0f);
  // Adam on the compact form and on the same gradient made whole-table (Var::grad()) move the
  // table identically (SparseAdam's update either way).
  attn::nn::Embedding<5> twin(nullptr, "emb", 40, {.padding_idx = 0, .sparse = true});
  twin.init(7);
  for (const auto& b : batches) {
    attn::Tape t;
    t.backward(twin(t, Tensor<std::int64_t>::from({b.size()}, std::vector<std::int64_t>(b))), Tensor<float>::zeros({b.size(), 5}));
  }
  {
    auto& td = *twin.weight.data();
    REQUIRE(td.grad_compact);
    for (std::size_t i = 0; i < td.grad_rows.size(); ++i)
      for (std::size_t j = 0; j < 5; ++j) td.grad_values(i, j) = d.grad_values(i, j);
    const auto g = twin.weight.grad();  // materialises
    REQUIRE_FALSE(td.grad_compact);
    REQUIRE(td.grad_is_row_sparse());
    CHECK(g(0, 0) == 0.0f);
    CHECK(g(39, 2) == want(39, 2));
  }
  optim::Adam<float> a(sparse, {.lr = 0.05}), b(twin, {.lr = 0.05});
  a.step();
  b.step();
  for (std::size_t i = 0; i < 40 * 5; ++i) CHECK(sparse.weight.value()[i] == twin.weight.value()[i]);
  // zero_grad drops the materialised buffer: the next step is compact again.
  b.zero_grad();
  CHECK(twin.weight.data()->grad.empty());
  {
    attn::Tape t;
    t.backward(twin(t, Tensor<std::int64_t>::from({2}, {5, 6})), Tensor<float>::full({2, 5}, 1.0f));
  }
  CHECK(twin.weight.data()->grad_compact);
  CHECK(twin.weight.data()->grad_rows == std::vector<std::size_t>{5, 6});
}

TEST_CASE("Adam: each parameter counts its own steps for its bias correction, as torch.optim.Adam's state['step']") {
  // Two parameters; the second has no gradient in the first three steps. Its first update must be
  // that of a first step (torch: |lr| per element for Adam's first step with a constant gradient).
  optim::NamedParams<double, attn::cpu> p;
  p.names = {"a", "b"};
  p.vars.emplace_back(Tensor<double>::zeros({3}), true);
  p.vars.emplace_back(Tensor<double>::zeros({3}), true);
  optim::Adam<double> opt(p, {.lr = 0.1});
  for (int s = 0; s < 4; ++s) {
    set_grad(p.vars[0], Tensor<double>::full({3}, 1.0));
    if (s == 3) set_grad(p.vars[1], Tensor<double>::full({3}, 1.0));
    opt.step();
    opt.zero_grad();
  }
  CHECK(opt.steps() == 4);
  CHECK(opt.param_steps(0) == 4);
  CHECK(opt.param_steps(1) == 1);
  for (double v : p.vars[1].value().to_vector()) CHECK(v == Approx(-0.1).epsilon(1e-7));
  // A parameter without a gradient does not move (no decay, no momentum), as in torch.
  const auto before = p.vars[1].value().to_vector();
  set_grad(p.vars[0], Tensor<double>::full({3}, 1.0));
  opt.step();
  CHECK(p.vars[1].value().to_vector() == before);
  CHECK_THROWS_AS(opt.set_param_steps({1}), attn::ArgumentError);
  CHECK_THROWS_AS(opt.set_param_steps({1, 9}), attn::ArgumentError);  // more than steps()
}

TEST_CASE("optimizer options are checked as torch checks them") {
  optim::NamedParams<double, attn::cpu> p;
  p.names = {"a"};
  p.vars.emplace_back(Tensor<double>::zeros({3}), true);
  CHECK_THROWS_WITH(optim::Adam<double>(p, {.lr = -1}), Catch::Contains("lr"));
  CHECK_THROWS_WITH(optim::Adam<double>(p, {.beta1 = 1.0}), Catch::Contains("beta1"));
  CHECK_THROWS_WITH(optim::Adam<double>(p, {.beta2 = -0.1}), Catch::Contains("beta2"));
  CHECK_THROWS_WITH(optim::Adam<double>(p, {.eps = std::nan("")}), Catch::Contains("eps"));
  CHECK_THROWS_WITH(optim::Adam<double>(p, {.weight_decay = -0.1}), Catch::Contains("weight_decay"));
  CHECK_THROWS_WITH(optim::Sgd<double>(p, {.momentum = 0.0, .nesterov = true}), Catch::Contains("Nesterov momentum requires"));
  CHECK_THROWS_WITH(optim::Sgd<double>(p, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), Catch::Contains("Nesterov"));
  CHECK_THROWS_WITH(optim::Sgd<double>(p, {.lr = -0.1}), Catch::Contains("lr"));
  CHECK_NOTHROW(optim::Sgd<double>(p, {.momentum = 0.9, .nesterov = true}));
}

TEST_CASE("clip_grad_norm leaves the gradients alone when the norm overflows") {
  std::vector<attn::Var<double>> ps{attn::Var<double>(Tensor<double>::zeros({2}), true)};
  ps[0].data()->grad = Tensor<double>::from({2}, {1e200, 3.0});  // finite, but the sum of squares is not
  CHECK(std::isinf(optim::clip_grad_norm(ps, 1.0)));
  CHECK(ps[0].grad()[0] == 1e200);
  CHECK(ps[0].grad()[1] == 3.0);
}

TEST_CASE("schedules: a negative step is step 0") {
  const optim::WarmupSchedule s{.base_lr = 1.0, .warmup = 10, .total = 110, .min_lr = 0.1};
  CHECK(s(-3) == s(0));
  CHECK(s(-3) > 0);
}

TEST_CASE("SGD: a row-sparse table that no lookup reaches in a step does not move") {
  attn::nn::Embedding<2, double> emb(nullptr, "emb", 5, {.sparse = true});
  optim::Sgd<double> opt(emb, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  const auto ids = Tensor<std::int64_t>::from({2}, {1, 3});
  {
    attn::Tape t;
    t.backward(attn::sum(t, emb(t, ids)));
  }
  opt.step();
  opt.zero_grad();
  const auto after_first = emb.weight.value().to_vector();
  // A step in which the table is not looked up: a dense parameter would have no gradient and be
  // skipped (torch's zero_grad(set_to_none=True)); the table too, though its buffer is kept.
  opt.step();
  CHECK(emb.weight.value().to_vector() == after_first);
  opt.zero_grad();
}

TEST_CASE("Adam counts a sparse table's step only when a lookup reached it, in the kept whole-table form too") {
  attn::nn::Embedding<2, double> emb(nullptr, "e", 5, {.padding_idx = 0, .sparse = true});
  auto& d = *emb.weight.data();
  d.grad = Tensor<double>::zeros({5, 2});  // a kept whole-table buffer, as on a device backend
  optim::Adam<double> opt(emb, {.lr = 0.1});
  const auto lookup = [&](std::initializer_list<std::int32_t> ids) {
    attn::Tape tape;
    tape.backward(attn::sum(tape, emb(tape, Tensor<std::int32_t>::from({ids.size()}, ids))));
  };
  lookup({1, 3});
  REQUIRE(d.grad_is_row_sparse());
  REQUIRE_FALSE(d.grad_compact);
  opt.step();
  opt.zero_grad();
  CHECK(opt.param_steps()[0] == 1);
  opt.step();  // no lookup: torch's grad is None, the count stays
  CHECK(opt.param_steps()[0] == 1);
  lookup({0, 0});  // padding rows only: an empty sparse gradient in torch, which counts
  opt.step();
  opt.zero_grad();
  CHECK(opt.param_steps()[0] == 2);
  lookup({3});
  opt.step();
  CHECK(opt.param_steps()[0] == 3);
}

TEST_CASE("SGD with momentum: a sparse table no lookup reached stays, one reached by padding rows only moves by its momentum") {
  attn::nn::Embedding<2, double> emb(nullptr, "e", 5, {.padding_idx = 0, .sparse = true});
  auto& d = *emb.weight.data();
  d.grad = Tensor<double>::zeros({5, 2});  // a kept whole-table buffer, as on a device backend
  optim::Sgd<double> opt(emb, {.lr = 0.1, .momentum = 0.9});
  const auto lookup = [&](std::initializer_list<std::int32_t> ids) {
    attn::Tape tape;
    tape.backward(attn::sum(tape, emb(tape, Tensor<std::int32_t>::from({ids.size()}, ids))));
  };
  lookup({1, 3});
  opt.step();
  opt.zero_grad();
  const auto after_one = emb.weight.value().to_vector();
  opt.step();  // no lookup: torch's grad is None, nothing moves
  CHECK(emb.weight.value().to_vector() == after_one);
  lookup({0});  // padding only: torch's empty sparse gradient, and the momentum moves rows 1 and 3
  opt.step();
  const auto after_pad = emb.weight.value().to_vector();
  CHECK(after_pad[2] == Approx(after_one[2] - 0.1 * 0.9 * 1.0));
  CHECK(after_pad[0] == after_one[0]);
}

namespace {
struct FreezeNet : attn::nn::Module {
  attn::nn::Embedding<4> emb{this, "emb", 10, {.freeze = true}};
  attn::nn::Linear<4, 3> fc{this, "fc"};
  attn::Var<float> forward(attn::Tape& tape, const Tensor<std::int64_t>& ids) const { return fc(tape, emb(tape, ids)); }
};
}  // namespace

TEST_CASE("frozen parameters: no gradient, optimizers and clipping leave them, gradients still pass through to the inputs") {
  FreezeNet net;
  CHECK_FALSE(net.emb.weight.requires_grad());
  CHECK(net.trainable_parameter_count() == 4 * 3 + 3);
  CHECK(net.parameter_count() == 40 + 15);
  const auto ids = Tensor<std::int64_t>::from({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto emb0 = net.emb.weight.raw().to_vector();
  auto steps = [&](auto& opt, int n) {
    for (int s = 0; s < n; ++s) {
      attn::Tape tape;
      auto y = net.forward(tape, ids);
      tape.backward(attn::sum(tape, attn::mul(tape, y, y)));
      optim::clip_grad_norm(opt.params(), 0.5);
      opt.step();
      opt.zero_grad();
    }
  };
  {
    optim::Adam<float> adam(net, {.lr = 0.1, .weight_decay = 0.1, .decoupled = true});
    const auto fc0 = net.fc.weight.raw().to_vector();
    steps(adam, 3);
    CHECK(net.emb.weight.raw().to_vector() == emb0);  // decoupled weight decay too leaves a frozen table alone
    CHECK(net.fc.weight.raw().to_vector() != fc0);
    CHECK_FALSE(net.emb.weight.data()->has_grad());
  }
  // Frozen Linear, unfrozen table: the table's gradient comes through the frozen weight.
  net.fc.set_requires_grad(false);
  net.emb.set_requires_grad(true);
  CHECK(net.trainable_parameter_count() == 40);
  const auto fc1 = net.fc.weight.raw().to_vector(), b1 = net.fc.bias.raw().to_vector();
  optim::Sgd<float> sgd(net, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  steps(sgd, 2);
  CHECK(net.fc.weight.raw().to_vector() == fc1);
  CHECK(net.fc.bias.raw().to_vector() == b1);
  CHECK(net.emb.weight.raw().to_vector() != emb0);
  // Freezing drops a gradient that is there: a step after it moves nothing (momentum included).
  {
    attn::Tape tape;
    auto y = net.forward(tape, ids);
    tape.backward(attn::sum(tape, y));
  }
  REQUIRE(net.emb.weight.data()->has_grad());
  net.set_requires_grad(false);
  CHECK(net.trainable_parameter_count() == 0);
  CHECK_FALSE(net.emb.weight.data()->has_grad());
  const auto all = net.emb.weight.raw().to_vector();
  sgd.step();
  CHECK(net.emb.weight.raw().to_vector() == all);
}
