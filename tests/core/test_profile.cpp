// SPDX-License-Identifier: MIT
// attn::profile: what the CPU backend records, by op and shape, when the profile is enabled, and
// that nothing is recorded when it is not.
#include <catch2/catch.hpp>

#include <attn/attn.hpp>

#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using attn::Tensor;
namespace profile = attn::profile;

/// The entry for op, shape and inner-ness, or nullptr.
const profile::Entry* find(const std::vector<profile::Entry>& es, const std::string& op, const std::vector<long long>& shape,
                           bool inner) {
  for (const auto& e : es)
    if (e.op == op && e.shape == shape && e.inner == inner) return &e;
  return nullptr;
}

/// Restores the profile's state when a test ends, whatever it ends with.
struct ProfileOff {
  ProfileOff() {
    profile::enable(false);
    profile::reset();
  }
  ~ProfileOff() {
    profile::enable(false);
    profile::reset();
  }
};

void gemm_nt(std::size_t m, std::size_t n, std::size_t k) {
  std::vector<float> a(m * k, 0.5f), b(n * k, 0.25f), c(m * n);
  attn::cpu::gemm<float>(attn::Trans::no, attn::Trans::yes, int(m), int(n), int(k), 1.f, a.data(), int(k), b.data(), int(k), 0.f,
                         c.data(), int(n));
  REQUIRE(c[0] == Approx(0.125f * float(k)));
}

}  // namespace

TEST_CASE("profile: off unless enabled, then each call counted by op and shape with its FLOPs") {
  const ProfileOff guard;
  REQUIRE_FALSE(profile::enabled());
  gemm_nt(8, 4, 3);
  CHECK(profile::entries().empty());

  profile::enable();
  CHECK(profile::enabled());
  gemm_nt(8, 4, 3);
  gemm_nt(8, 4, 3);
  gemm_nt(5, 6, 7);
  std::vector<double> d(6 * 2, 1.0), e(2 * 3, 2.0), f(6 * 3);
  attn::cpu::gemm<double>(attn::Trans::yes, attn::Trans::no, 6, 3, 2, 1.0, d.data(), 6, e.data(), 3, 0.0, f.data(), 3);
  profile::enable(false);
  gemm_nt(8, 4, 3);  // after recording stops: not counted

  const auto es = profile::entries();
  REQUIRE(es.size() == 3);
  const auto* a = find(es, "gemm NT", {8, 4, 3}, false);
  REQUIRE(a);
  CHECK(a->calls == 2);
  CHECK(a->flops == 2 * 2.0 * 8 * 4 * 3);
  CHECK(a->seconds > 0);
  const auto* b = find(es, "gemm NT", {5, 6, 7}, false);
  REQUIRE(b);
  CHECK(b->calls == 1);
  CHECK(b->flops == 2.0 * 5 * 6 * 7);
  const auto* c = find(es, "gemm TN double", {6, 3, 2}, false);
  REQUIRE(c);
  CHECK(c->calls == 1);

  const std::string table = profile::report_string();
  CHECK(table.find("gemm NT") != std::string::npos);
  CHECK(table.find("8x4x3") != std::string::npos);
  CHECK(table.find("gemm TN double") != std::string::npos);
  CHECK(table.find("outer total") != std::string::npos);
  CHECK(table.find("op, all shapes") != std::string::npos);  // the per-op summary comes first
  CHECK(table.find("op, all shapes") < table.find("8x4x3"));
  CHECK(table.find("more op and shape entries") == std::string::npos);

  // Many shapes (a program with varying batch shapes): the summary adds them up, the by-shape
  // table shows the 40 outer entries with the most time and says how many it left out.
  profile::reset();
  profile::enable();
  for (int m = 1; m <= 45; ++m) gemm_nt(std::size_t(m), 4, 3);
  profile::enable(false);
  const std::string many = profile::report_string();
  CHECK(many.find("(5 more op and shape entries") != std::string::npos);
  const auto all = profile::entries();
  CHECK(all.size() == 45);
  double flops = 0;
  for (const auto& e : all) flops += e.flops;
  CHECK(flops == 2.0 * 4 * 3 * (45 * 46 / 2));

  profile::reset();
  CHECK(profile::entries().empty());
}

TEST_CASE("profile: calls inside a recorded op or a parallel region are inner, counted on each thread") {
  const ProfileOff guard;
  profile::enable();
  {
    const auto outer = profile::Scope::of<float>("test outer", 1);
    gemm_nt(8, 4, 3);
  }
  int threads = 1;
#if defined(_OPENMP)
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    threads = omp_get_num_threads();
    std::vector<float> a(12, 0.5f), b(12, 0.25f), c(16);
    attn::cpu::gemm<float>(attn::Trans::no, attn::Trans::yes, 4, 4, 3, 1.f, a.data(), 3, b.data(), 3, 0.f, c.data(), 4);
  }
#endif
  profile::enable(false);
  const auto es = profile::entries();
  const auto* outer = find(es, "test outer", {1}, false);
  REQUIRE(outer);
  CHECK(outer->calls == 1);
  const auto* nested = find(es, "gemm NT", {8, 4, 3}, true);
  REQUIRE(nested);
  CHECK(nested->calls == 1);
  CHECK_FALSE(find(es, "gemm NT", {8, 4, 3}, false));
#if defined(_OPENMP)
  const auto* par = find(es, "gemm NT", {4, 4, 3}, threads > 1);  // a team of one is not a parallel region
  REQUIRE(par);
  CHECK(par->calls == threads);
#endif
  for (std::size_t i = 1; i < es.size(); ++i) CHECK((es[i - 1].inner <= es[i].inner));  // outer ops are listed first
}

TEST_CASE("profile: the flash kernels' FLOPs are those of the tile products they computed") {
  const ProfileOff guard;
  // Two samples, two heads of 16, T = 200 (two query and two key tiles), no mask: every tile is
  // computed, so the products cover T x T per head: forward S and P V, backward recomputing S, dP, dV,
  // dQ and dK (one fewer with the forward's scores kept).
  constexpr std::size_t B = 2, T = 200, H = 2, hd = 16, D = H * hd;
  attn::Rng rng(5);
  Tensor<float> qkv({B, T, 3 * D}), dout({B, T, D});
  for (std::size_t i = 0; i < qkv.numel(); ++i) qkv[i] = float(rng.uniform()) - 0.5f;
  for (std::size_t i = 0; i < dout.numel(); ++i) dout[i] = float(rng.uniform()) - 0.5f;
  attn::kernels::MhaProblem<float> p;
  p.batch = B, p.time = T, p.heads = H, p.head_dim = hd;
  p.qkv = qkv.data();
  p.scale = 1.f / std::sqrt(float(hd));
  Tensor<float> out({B, T, D}), lse({B, H, T}), scores({B, H, T, T});
  auto g = Tensor<float>::zeros({B, T, 3 * D});
  profile::enable();
  attn::kernels::mha_flash_forward(attn::cpu{}, p, out.data(), lse.data(), nullptr);
  attn::kernels::mha_flash_backward(attn::cpu{}, p, out.data(), dout.data(), lse.data(), g.data(), nullptr);
  p.scores = scores.data();
  attn::kernels::mha_flash_forward(attn::cpu{}, p, out.data(), lse.data(), nullptr);
  attn::kernels::mha_flash_backward(attn::cpu{}, p, out.data(), dout.data(), lse.data(), g.data(), nullptr);
  profile::enable(false);
  const auto es = profile::entries();
  const double product = 2.0 * double(B * H) * double(T * T) * double(hd);  // one T x T x hd product per head
  const std::vector<long long> shape{B, H, T, hd};
  const auto* fwd = find(es, "attention flash forward", shape, false);
  REQUIRE(fwd);
  CHECK(fwd->calls == 2);
  CHECK(fwd->flops == 2 * 2 * product);
  const auto* bwd = find(es, "attention flash backward", shape, false);
  REQUIRE(bwd);
  CHECK(bwd->calls == 2);
  CHECK(bwd->flops == (5 + 4) * product);
}

TEST_CASE("profile: a layer's forward and backward record their kernels") {
  const ProfileOff guard;
  attn::Rng rng(3);
  attn::nn::LayerNorm<8, float> ln(nullptr, "ln");
  attn::nn::Linear<8, 4, float> fc(nullptr, "fc");
  Tensor<float, attn::Shape<attn::dyn, 8>> x({64, 8});
  for (std::size_t i = 0; i < x.numel(); ++i) x[i] = float(rng.uniform());
  Tensor<float, attn::Shape<attn::dyn, 4>> dy({64, 4});
  for (std::size_t i = 0; i < dy.numel(); ++i) dy[i] = 1.f;
  profile::enable();
  attn::Tape tape;
  attn::Var<float, attn::Shape<attn::dyn, 8>> xv(x, true);
  auto y = fc(tape, ln(tape, xv));
  tape.backward(y, dy);
  profile::enable(false);
  const auto es = profile::entries();
  CHECK(find(es, "layer norm forward", {64, 8}, false));
  CHECK(find(es, "layer norm backward", {64, 8}, false));
  bool product = false;
  for (const auto& e : es) product |= e.op.rfind("gemm", 0) == 0;
  CHECK(product);
}

TEST_CASE("profile: a BiLSTM records its passes, with its steps' products and cells inner to them") {
  const ProfileOff guard;
  attn::nn::BiLSTM<5, 4, float> lstm(nullptr, "lstm");
  attn::Rng r(9);
  Tensor<float> xv({3, 6, 5});
  for (std::size_t i = 0; i < xv.numel(); ++i) xv[i] = float(r.uniform(-1, 1));
  profile::enable();
  attn::Tape tape;
  attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 5>> x(xv, true);
  auto res = lstm(tape, x, attn::Lengths{6, 4, 2});
  tape.backward(attn::sum(tape, res.out));
  profile::enable(false);
  const auto es = profile::entries();
  // batch 3, 6 + 4 + 2 = 12 packed steps, 2 directions, hidden 4
  const auto* fwd = find(es, "lstm forward", {3, 12, 2, 4}, false);
  const auto* bwd = find(es, "lstm backward", {3, 12, 2, 4}, false);
  REQUIRE(fwd);
  REQUIRE(bwd);
  CHECK(fwd->calls == 1);
  CHECK(bwd->calls == 1);
  long long cells = 0;
  for (const auto& e : es)
    if (e.op == "lstm cell forward") {
      CHECK(e.inner);
      cells += e.calls;
    }
  CHECK(cells == 2 * 6);  // a cell call per step and direction
}

TEST_CASE("profile: a batched GEMM is one outer op whose products are inner, in parallel or not, and k = 0 has no FLOPs") {
  const ProfileOff guard;
  profile::enable();
  // 8 products of 32^3 (run on the threads when there are several) and 2 of 128^3 (run one by one)
  for (int size : {32, 128}) {
    const int batch = size == 32 ? 8 : 2;
    const std::size_t nn = std::size_t(size) * std::size_t(size);
    std::vector<float> a(batch * nn, 0.5f), b(batch * nn, 0.25f), c(batch * nn);
    attn::cpu::gemm_strided_batched<float>(attn::Trans::no, attn::Trans::no, size, size, size, 1.f, a.data(), size, (long long)nn,
                                           b.data(), size, (long long)nn, 0.f, c.data(), size, (long long)nn, batch);
    REQUIRE(c.back() == Approx(0.125f * float(size)));
  }
  std::vector<float> x(4 * 3, 1.f), y(4 * 3, 1.f), z(4 * 4, 7.f);
  attn::cpu::gemm<float>(attn::Trans::no, attn::Trans::no, 4, 4, 0, 1.f, x.data(), 1, y.data(), 4, 0.f, z.data(), 4);
  CHECK(z[5] == 0.f);
  profile::enable(false);

  const auto es = profile::entries();
  for (int size : {32, 128}) {
    const long long batch = size == 32 ? 8 : 2;
    INFO("size " << size);
    const auto* outer = find(es, "gemm NN, batched", {batch, size, size, size}, false);
    REQUIRE(outer);
    CHECK(outer->calls == 1);
    CHECK(outer->flops == double(batch) * 2.0 * size * size * size);
    CHECK(find(es, "gemm NN", {size, size, size}, false) == nullptr);
    const auto* inner = find(es, "gemm NN", {size, size, size}, true);
    REQUIRE(inner);
    CHECK(inner->calls == batch);
  }
  const auto* empty = find(es, "gemm NN", {4, 4, 0}, false);
  REQUIRE(empty);
  CHECK(empty->flops == 0);
}

TEST_CASE("profile: an ended thread's records stay, and its log serves the next thread") {
  const ProfileOff guard;
  profile::enable();
  const auto work = [] {  // no Catch assertions off the main thread
    std::vector<float> a(8 * 3, 0.5f), b(4 * 3, 0.25f), c(8 * 4);
    attn::cpu::gemm<float>(attn::Trans::no, attn::Trans::yes, 8, 4, 3, 1.f, a.data(), 3, b.data(), 3, 0.f, c.data(), 4);
  };
  std::thread(work).join();  // a log for a new thread, handed back when it ends
  const std::size_t logs = [] {
    auto& r = profile::detail::registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    return r.logs.size();
  }();
  for (int i = 0; i < 5; ++i) std::thread(work).join();
  {
    auto& r = profile::detail::registry();
    const std::lock_guard<std::mutex> lock(r.mu);
    CHECK(r.logs.size() == logs);
  }
  profile::enable(false);
  const auto es = profile::entries();
  const auto* e = find(es, "gemm NT", {8, 4, 3}, false);
  REQUIRE(e);
  CHECK(e->calls == 6);
}
