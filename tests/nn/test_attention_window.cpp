// SPDX-License-Identifier: MIT
// Sparse (sliding-window, causal, global-token: leading or at chosen positions) attention:
// AttentionPattern's ranges against its predicate, the flash and naive kernels against a dense 0 / -inf attn_mask built from the same
// predicate (outputs and every gradient), gradient checks, the O(T w) work and memory of the flash
// kernel, and the options' errors.
#include "../gradcheck_util.hpp"
#include "attention_test_util.hpp"

#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include <attn/autograd/attention.hpp>
#include <attn/nn/attention.hpp>

using attn::AttentionKernel;
using attn::AttentionPattern;
using attn::Dims;
using attn::dyn;
using attn::Shape;
using attn::Tape;
using attn::Tensor;
using V = std::vector<attn::Var<double>>;
namespace nn = attn::nn;

using testutil::all_finite;
using testutil::lengths_mask;
using testutil::rel_diff;
using testutil::set_value;

namespace {

attn::Rng rng(77);

template <class T>
Tensor<T> random(const Dims& d, double lo = -1, double hi = 1) {
  Tensor<T> t(d);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = T(rng.uniform(lo, hi));
  return t;
}

/// The oracle: (T, T) additive mask, 0 where pat.visible(i, j), else -inf.
template <class T>
Tensor<T> dense_mask(const AttentionPattern& pat, std::size_t n) {
  Tensor<T> m({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) m(i, j) = pat.visible(i, j) ? T(0) : -std::numeric_limits<T>::infinity();
  return m;
}

struct Run {
  Tensor<float> out, grad, weights;
};

/// self_attention forward and backward on qkv (Tape seeded 7: the same dropout mask every run).
Run run_op(const Tensor<float>& qkv, const Tensor<float>& dout, attn::AttentionArgs<float> args) {
  Tape tape(7);
  attn::Var<float> x(qkv.clone(), true);
  Tensor<float> w;
  if (args.kernel == AttentionKernel::naive) args.weights = &w;
  auto o = attn::self_attention(tape, x, args);
  tape.backward(o, dout);
  return {o.value().erased(), x.grad().erased(), w};
}

}  // namespace

TEST_CASE("AttentionPattern: the row and column ranges and the tile runs restate visible(i, j)") {
  for (std::size_t n : {1, 5, 37, 300}) {
    for (std::size_t w : {0, 1, 3, 16, 200}) {
      for (bool causal : {false, true}) {
        for (std::size_t g : {0, 1, 3}) {
          if (g > n) continue;
          const AttentionPattern pat{.window = w, .causal = causal, .global = g};
          INFO("T = " << n << ", window " << w << ", causal " << causal << ", global " << g);
          bool rows_ok = true, cols_ok = true, tiles_ok = true;
          for (std::size_t i = 0; i < n; ++i)
            for (std::size_t j = 0; j < n; ++j) {
              const bool v = pat.visible(i, j);
              const bool by_row = j < pat.global_keys_end(i, n) || (j >= pat.key_begin(i) && j < pat.key_end(i, n));
              const bool by_col = (i >= pat.global_queries_begin(j) && i < std::min(g, n)) ||
                                  (i >= pat.query_begin(j) && i < pat.query_end(j, n));
              rows_ok = rows_ok && v == by_row;
              cols_ok = cols_ok && v == by_col;
            }
          // Every tile holding a visible element lies in the runs, both ways round: own blocks of
          // o rows against tiles of t of the other side (the cpu kernels' square tiles, the cuda
          // kernels' 16 own rows against 32-row tiles), and walking the runs visits exactly those.
          for (const auto& [o, t] : {std::pair<std::size_t, std::size_t>{16, 16}, {16, 32}, {32, 16}}) {
            const std::size_t no = (n + o - 1) / o, nt = (n + t - 1) / t;
            for (std::size_t ob = 0; ob < no; ++ob) {
              const std::size_t r0 = ob * o, r1 = std::min(n, r0 + o);
              const auto kr = attn::kernels::mha::key_tiles(pat, n, r0, r1, t);    // own queries
              const auto qr = attn::kernels::mha::query_tiles(pat, n, r0, r1, t);  // own keys
              std::vector<std::size_t> kwalk, qwalk;
              for (std::size_t x = kr.begin(); x < kr.end(); x = kr.next(x)) kwalk.push_back(x);
              for (std::size_t x = qr.begin(); x < qr.end(); x = qr.next(x)) qwalk.push_back(x);
              std::vector<std::size_t> klive, qlive;
              for (std::size_t tb = 0; tb < nt; ++tb) {
                bool live_k = false, live_q = false;
                for (std::size_t r = r0; r < r1; ++r)
                  for (std::size_t c = tb * t; c < std::min(n, tb * t + t); ++c) {
                    live_k = live_k || pat.visible(r, c);
                    live_q = live_q || pat.visible(c, r);
                  }
                if (live_k) klive.push_back(tb);
                if (live_q) qlive.push_back(tb);
              }
              // Exact: a tile in the runs has a visible element (the runs skip every hidden tile).
              tiles_ok = tiles_ok && kwalk == klive && qwalk == qlive;
              // Two runs are ascending and apart (touching ones are merged).
              tiles_ok = tiles_ok && (kr.first[1] == kr.last[1] || kr.last[0] < kr.first[1]);
              tiles_ok = tiles_ok && (qr.first[1] == qr.last[1] || qr.last[0] < qr.first[1]);
            }
          }
          CHECK(rows_ok);
          CHECK(cols_ok);
          CHECK(tiles_ok);
        }
      }
    }
  }
}

TEST_CASE("window attention: flash and naive match a dense 0 / -inf attn_mask, outputs, weights and qkv gradients") {
  for (std::size_t n : {37, 300}) {
    const auto key_mask = lengths_mask<float>({n, 2 * n / 3}, n);
    for (std::optional<std::int64_t> w : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{16}, std::optional<std::int64_t>{200}}) {
      for (bool causal : {false, true}) {
        for (std::size_t g : {0, 1, 3}) {
          for (double dropout : {0.0, 0.2}) {
            for (std::size_t heads : {1, 4}) {
              INFO("T = " << n << ", window " << (w ? *w : 0) << ", causal " << causal << ", global " << g << ", dropout " << dropout
                          << ", heads " << heads);
              const AttentionPattern pat{.window = w ? std::size_t(*w) : 0, .causal = causal, .global = g};
              const auto am = dense_mask<float>(pat, n);
              const auto qkv = random<float>({2, n, 3 * 32});
              const auto dout = random<float>({2, n, 32});
              const attn::AttentionArgs<float> sparse{
                  .heads = heads, .key_mask = key_mask, .window = w, .causal = causal, .global_tokens = g, .dropout = dropout};
              const attn::AttentionArgs<float> dense{.heads = heads, .key_mask = key_mask, .attn_mask = am, .dropout = dropout};
              auto with_kernel = [](attn::AttentionArgs<float> a, AttentionKernel k) { return a.kernel = k, a; };
              const Run oracle = run_op(qkv, dout, with_kernel(dense, AttentionKernel::naive));
              const Run flash = run_op(qkv, dout, with_kernel(sparse, AttentionKernel::flash));
              const Run naive = run_op(qkv, dout, with_kernel(sparse, AttentionKernel::naive));
              const Run flash_dense = run_op(qkv, dout, with_kernel(dense, AttentionKernel::flash));
              REQUIRE(all_finite(flash.out));
              REQUIRE(all_finite(flash.grad));
              CHECK(rel_diff(flash.out, oracle.out) <= 1e-5);
              CHECK(rel_diff(flash.grad, oracle.grad) <= 1e-5);
              CHECK(rel_diff(naive.out, oracle.out) <= 1e-5);
              CHECK(rel_diff(naive.grad, oracle.grad) <= 1e-5);
              CHECK(rel_diff(naive.weights, oracle.weights) <= 1e-6);
              CHECK(rel_diff(flash.out, flash_dense.out) <= 1e-5);
              CHECK(rel_diff(flash.grad, flash_dense.grad) <= 1e-5);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("window attention through nn::Attention: output, input and parameter gradients match the dense mask, both PaddedRows") {
  constexpr std::size_t H = 2, D = 32;
  for (std::size_t n : {37, 300}) {
    for (auto padded : {nn::PaddedRows::compute, nn::PaddedRows::zero}) {
      for (auto [w, causal, g] : {std::tuple{16, false, std::size_t(1)}, std::tuple{200, true, std::size_t(3)},
                                  std::tuple{16, true, std::size_t(0)}}) {
        INFO("T = " << n << ", window " << w << ", causal " << causal << ", global " << g << ", zero rows "
                    << (padded == nn::PaddedRows::zero));
        const AttentionPattern pat{.window = std::size_t(w), .causal = causal, .global = g};
        nn::Attention<H, D> sparse(nullptr, "attn",
                                   {.dropout = 0.1, .padded = padded, .window = w, .causal = causal, .global_tokens = g});
        nn::Attention<H, D> dense(nullptr, "attn", {.dropout = 0.1, .padded = padded});
        auto ps = sparse.parameters<float>(), pd = dense.parameters<float>();
        REQUIRE(ps.size() == pd.size());
        for (std::size_t i = 0; i < ps.size(); ++i) set_value(pd[i], ps[i].value().erased().clone());
        const auto x = random<float>({3, n, D});
        const auto dout = random<float>({3, n, D});
        const attn::Lengths lengths{int(n), int(n / 2), 1};
        auto run = [&](const nn::Attention<H, D>& a, attn::nn::AttentionExtras<float> extras) {
          Tape tape(7);
          attn::Var<float, Shape<dyn, dyn, D>> xv(x.clone(), true);
          auto y = a(tape, xv, lengths, extras);
          tape.backward(y, dout);
          return std::pair{y.value().erased(), xv.grad().erased()};
        };
        for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
          sparse.zero_grad();
          dense.zero_grad();
          auto [ys, gs] = run(sparse, {.kernel = kernel});
          auto [yd, gd] = run(dense, {.attn_mask = dense_mask<float>(pat, n), .kernel = AttentionKernel::naive});
          CHECK(rel_diff(ys, yd) <= 1e-5);
          CHECK(rel_diff(gs, gd) <= 1e-5);
          for (std::size_t i = 0; i < ps.size(); ++i) {
            INFO("parameter " << i << (kernel == AttentionKernel::flash ? " flash" : " naive"));
            CHECK(rel_diff(ps[i].grad().erased(), pd[i].grad().erased()) <= 1e-5);
          }
        }
      }
    }
  }
}

TEST_CASE("gradcheck: window attention, flash and naive, causal, global tokens, padding, dropout") {
  const std::size_t n = 9;
  auto key_mask = lengths_mask<double>({9, 6, 0}, n);
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const std::string k = kernel == AttentionKernel::flash ? "flash" : "naive";
    testutil::check_gradients(k + " window 2", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .window = 2, .kernel = kernel});
    }, {random<double>({3, n, 24})});
    testutil::check_gradients(k + " window 2, causal, global 1", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .window = 2, .causal = true, .global_tokens = 1,
                                            .kernel = kernel});
    }, {random<double>({3, n, 24})});
    testutil::check_gradients(k + " window 1, global 3, dropout", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 1, .key_mask = key_mask, .window = 1, .global_tokens = 3, .dropout = 0.3,
                                            .kernel = kernel});
    }, {random<double>({3, n, 12})});
    // skip_padded_queries (the flash kernel's; the naive one computes every row regardless).
    testutil::check_gradients(k + " causal only, skip_padded_queries", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .causal = true, .kernel = kernel,
                                            .skip_padded_queries = true});
    }, {random<double>({3, n, 24})});
  }
}

namespace {

/// (B, T) global_mask with 1 at `positions[b]` (taken modulo T).
Tensor<float> global_mask(const std::vector<std::vector<std::size_t>>& positions, std::size_t n) {
  auto m = Tensor<float>::zeros({positions.size(), n});
  for (std::size_t b = 0; b < positions.size(); ++b)
    for (std::size_t p : positions[b]) m(b, p % n) = 1;
  return m;
}

/// The oracle of one sample's pattern with chosen global positions (row b of gm).
Tensor<float> dense_mask(const AttentionPattern& pat, const Tensor<float>& gm, std::size_t b) {
  const std::size_t n = gm.dims().v[1];
  Tensor<float> m({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      m(i, j) = pat.visible(i, j, gm(b, i) != 0, gm(b, j) != 0) ? 0.0f : -std::numeric_limits<float>::infinity();
  return m;
}

/// Rows [b, b + 1) of a (B, ...) tensor.
Tensor<float> sample(const Tensor<float>& t, std::size_t b) {
  Dims d = t.dims();
  const std::size_t per = t.numel() / d.v[0];
  d.v[0] = 1;
  Tensor<float> r(d);
  for (std::size_t k = 0; k < per; ++k) r[k] = t[b * per + k];
  return r;
}

}  // namespace

TEST_CASE("chosen global positions (global_mask): flash and naive match a dense mask per sample, outputs and qkv gradients") {
  // Sample 0: three scattered globals; 1: none; 2: the first position and two adjacent ones.
  const std::vector<std::vector<std::size_t>> positions = {{5, 130, 299}, {}, {0, 200, 201}};
  for (std::size_t n : {37, 300}) {
    const auto key_mask = lengths_mask<float>({n, 2 * n / 3, n}, n);
    const auto gm = global_mask(positions, n);
    for (std::int64_t w : {1, 16, 200}) {
      for (bool causal : {false, true}) {
        for (std::size_t g : {0, 1}) {
          for (std::size_t heads : {1, 4}) {
            INFO("T = " << n << ", window " << w << ", causal " << causal << ", leading global " << g << ", heads " << heads);
            const AttentionPattern pat{.window = std::size_t(w), .causal = causal, .global = g};
            const auto qkv = random<float>({3, n, 3 * 32});
            const auto dout = random<float>({3, n, 32});
            const attn::AttentionArgs<float> sparse{
                .heads = heads, .key_mask = key_mask, .window = w, .causal = causal, .global_tokens = g, .global_mask = gm};
            auto with_kernel = [](attn::AttentionArgs<float> a, AttentionKernel k) { return a.kernel = k, a; };
            const Run flash = run_op(qkv, dout, with_kernel(sparse, AttentionKernel::flash));
            const Run naive = run_op(qkv, dout, with_kernel(sparse, AttentionKernel::naive));
            REQUIRE(all_finite(flash.out));
            REQUIRE(all_finite(flash.grad));
            for (std::size_t b = 0; b < 3; ++b) {
              INFO("sample " << b);
              const attn::AttentionArgs<float> dense{.heads = heads, .key_mask = sample(key_mask, b), .attn_mask = dense_mask(pat, gm, b),
                                                     .kernel = AttentionKernel::naive};
              const Run oracle = run_op(sample(qkv, b), sample(dout, b), dense);
              CHECK(rel_diff(sample(flash.out, b), oracle.out) <= 1e-5);
              CHECK(rel_diff(sample(flash.grad, b), oracle.grad) <= 1e-5);
              CHECK(rel_diff(sample(naive.out, b), oracle.out) <= 1e-5);
              CHECK(rel_diff(sample(naive.grad, b), oracle.grad) <= 1e-5);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("chosen global positions with attention dropout: flash and naive match the dense mask") {
  // The same positions in every sample, so that one (T, T) mask is the oracle and the dropout
  // mask (a function of sample, head, query and key) is the same in all three runs.
  const std::size_t n = 300;
  const auto gm = global_mask({{3, 150}, {3, 150}}, n);
  const AttentionPattern pat{.window = 16};
  const auto qkv = random<float>({2, n, 3 * 32});
  const auto dout = random<float>({2, n, 32});
  const attn::AttentionArgs<float> sparse{.heads = 2, .window = 16, .global_mask = gm, .dropout = 0.2};
  const attn::AttentionArgs<float> dense{.heads = 2, .attn_mask = dense_mask(pat, gm, 0), .dropout = 0.2, .kernel = AttentionKernel::naive};
  auto with_kernel = [](attn::AttentionArgs<float> a, AttentionKernel k) { return a.kernel = k, a; };
  const Run oracle = run_op(qkv, dout, dense);
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const Run r = run_op(qkv, dout, with_kernel(sparse, kernel));
    CHECK(rel_diff(r.out, oracle.out) <= 1e-5);
    CHECK(rel_diff(r.grad, oracle.grad) <= 1e-5);
  }
}

TEST_CASE("chosen global positions through nn::Attention and TransformerEncoderLayer's extras") {
  constexpr std::size_t H = 2, D = 32;
  const std::size_t n = 200;
  const auto gm = global_mask({{0, 77}, {150}}, n);
  nn::Attention<H, D> sparse(nullptr, "attn", {.window = 8});
  nn::Attention<H, D> dense(nullptr, "attn");
  auto ps = sparse.parameters<float>(), pd = dense.parameters<float>();
  for (std::size_t i = 0; i < ps.size(); ++i) set_value(pd[i], ps[i].value().erased().clone());
  const auto x = random<float>({2, n, D});
  const auto dout = random<float>({2, n, D});
  for (std::size_t b = 0; b < 2; ++b) {
    INFO("sample " << b);
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, D>> xv(x.clone(), true);
    auto y = sparse(tape, xv, {.global_mask = gm});
    tape.backward(y, dout);
    Tape tape1;
    attn::Var<float, Shape<dyn, dyn, D>> xb(sample(x, b), true);
    auto yb = dense(tape1, xb, {.attn_mask = dense_mask(AttentionPattern{.window = 8}, gm, b)});
    tape1.backward(yb, sample(dout, b));
    CHECK(rel_diff(sample(y.value().erased(), b), yb.value().erased()) <= 1e-5);
    CHECK(rel_diff(sample(xv.grad().erased(), b), xb.grad().erased()) <= 1e-5);
  }
}

TEST_CASE("gradcheck: chosen global positions, flash and naive, window, causal, padding, dropout") {
  const std::size_t n = 9;
  auto key_mask = lengths_mask<double>({9, 6, 0}, n);
  auto gm = attn::Tensor<double>::zeros({3, n});
  gm(0, 4) = gm(1, 0) = gm(1, 7) = gm(2, 2) = 1;
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const std::string k = kernel == AttentionKernel::flash ? "flash" : "naive";
    testutil::check_gradients(k + " window 1, chosen globals", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .window = 1, .global_mask = gm, .kernel = kernel});
    }, {random<double>({3, n, 24})});
    testutil::check_gradients(k + " window 2, causal, chosen globals, dropout", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 1, .key_mask = key_mask, .window = 2, .causal = true, .global_mask = gm,
                                            .dropout = 0.3, .kernel = kernel});
    }, {random<double>({3, n, 12})});
  }
}

TEST_CASE("chosen global positions keep O(T w) work: T = 4096, w = 64, a global token mid-sequence") {
  nn::Attention<2, 64> a(nullptr, "attn", {.window = 64});
  auto measure = [&](std::size_t n) {
    attn::AttentionStats stats;
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, 64>> xv(random<float>({1, n, 64}), true);
    auto gm = Tensor<float>::zeros({1, n});
    gm(0, n / 2 + 5) = 1;
    auto y = a(tape, xv, {.global_mask = gm, .stats = &stats});
    tape.backward(y, random<float>({1, n, 64}));
    REQUIRE(all_finite(xv.grad().erased()));
    return stats;
  };
  const std::size_t n = 4096, nqb = n / 128;
  const auto s = measure(n);
  const auto half = measure(n / 2);
  INFO("T = 4096: tiles " << s.tiles << ", T = 2048: tiles " << half.tiles << "; dense: " << 2 * 2 * nqb * nqb << " tiles");
  // Per head and pass, with the global in tile P (mid-sequence): tile row P whole (nqb tiles); every
  // other tile row its band (3 tiles, 2 at the two ends: 3 nqb - 2 - 3 in all) and tile P where
  // the band misses it (nqb - 3 rows): 5 nqb - 8, against nqb^2 dense.
  CHECK(s.tiles == 2 * 2 * (5 * nqb - 8));
  CHECK(half.tiles == 2 * 2 * (5 * (nqb / 2) - 8));
}

TEST_CASE("window attention keeps O(T w) work and memory: T = 4096, w = 64, one global token") {
  nn::Attention<2, 64> a(nullptr, "attn", {.window = 64, .global_tokens = 1});
  auto measure = [&](std::size_t n) {
    attn::AttentionStats stats;
    Tape tape;
    attn::Var<float, Shape<dyn, dyn, 64>> xv(random<float>({1, n, 64}), true);
    auto y = a(tape, xv, {.stats = &stats});
    tape.backward(y, random<float>({1, n, 64}));
    REQUIRE(all_finite(xv.grad().erased()));
    return stats;
  };
  const std::size_t n = 4096, tt = n * n * sizeof(float), nqb = n / 128;
  const auto s = measure(n);
  const auto half = measure(n / 2);
  INFO("T = 4096: largest " << s.largest_bytes << " B, total " << s.total_bytes << " B, saved " << s.saved_bytes << " B, tiles "
                            << s.tiles << "; T = 2048: tiles " << half.tiles << "; dense: " << 2 * 2 * nqb * nqb << " tiles");
  CHECK(s.largest_bytes < tt / 32);
  CHECK(s.total_bytes < tt / 8);
  // Per head and pass (128 x 128 tiles): the tile row (column) of the global token, nqb tiles; the
  // next and the last tile 3 each (the band, merged with the global tile or cut by the end); the
  // other nqb - 3 tiles 4 each (the band of 3 and the global tile): 5 nqb - 6, against nqb^2 dense.
  CHECK(s.tiles == 2 * 2 * (5 * nqb - 6));
  CHECK(half.tiles == 2 * 2 * (5 * (nqb / 2) - 6));
}

TEST_CASE("window attention: invalid options are ArgumentErrors that say what is wrong") {
  attn::NoGrad ctx;
  attn::Var<float> qkv(random<float>({1, 5, 12}));
  auto message = [&](attn::AttentionArgs<float> a) -> std::string {
    try {
      attn::self_attention(ctx, qkv, a);
    } catch (const attn::ArgumentError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(message({.window = 0}), Catch::Contains("window must be >= 1"));
  CHECK_THAT(message({.window = -4}), Catch::Contains("got -4"));
  CHECK_THAT(message({.global_tokens = 6}), Catch::Contains("global_tokens = 6 exceeds the sequence length 5"));
  CHECK(message({.window = 1, .causal = true, .global_tokens = 5}) == "no error");
  CHECK_THROWS_WITH(attn::self_attention(ctx, qkv, {.window = 1, .global_mask = Tensor<float>::zeros({1, 4})}),
                    Catch::Contains("global_mask must be (batch, time)"));
  CHECK_THROWS_AS((nn::Attention<2, 8>(nullptr, "attn", {.window = 0})), attn::ArgumentError);
  CHECK_THROWS_WITH((nn::Attention<2, 8>(nullptr, "local", {.window = -1})), Catch::Contains("'local': window must be >= 1"));
  nn::Attention<2, 8> a(nullptr, "attn", {.window = 2, .global_tokens = 4});
  CHECK_THROWS_WITH(a(ctx, attn::Var<float, Shape<dyn, dyn, 8>>(random<float>({1, 3, 8}))), Catch::Contains("global_tokens = 4"));
}

TEST_CASE("window attention with a user attn_mask as well: flash and naive match the dense mask of both, and gradcheck") {
  // A user's additive mask (finite biases and a few -inf) on top of a window / causal / global
  // pattern: the kernels add the bias where the pattern shows a key, which is the dense oracle with
  // the pattern's -inf added to the user's mask.
  for (std::size_t n : {37, 150}) {
    const auto key_mask = lengths_mask<float>({n, n / 2}, n);
    Tensor<float> user({n, n});
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        user(i, j) = (i * 7 + j * 3) % 11 == 0 && j != i ? -std::numeric_limits<float>::infinity() : float(rng.uniform(-1, 1));
    for (auto [w, causal, g] : {std::tuple{std::size_t(8), false, std::size_t(0)}, std::tuple{std::size_t(16), true, std::size_t(2)},
                                std::tuple{std::size_t(0), true, std::size_t(0)}}) {
      INFO("T = " << n << ", window " << w << ", causal " << causal << ", global " << g);
      const AttentionPattern pat{.window = w, .causal = causal, .global = g};
      auto both = dense_mask<float>(pat, n);
      for (std::size_t i = 0; i < n * n; ++i) both[i] += user[i];
      const auto qkv = random<float>({2, n, 3 * 32});
      const auto dout = random<float>({2, n, 32});
      const attn::AttentionArgs<float> sparse{.heads = 2,
                                              .key_mask = key_mask,
                                              .attn_mask = user,
                                              .window = w ? std::optional<std::int64_t>(std::int64_t(w)) : std::nullopt,
                                              .causal = causal,
                                              .global_tokens = g};
      const attn::AttentionArgs<float> dense{.heads = 2, .key_mask = key_mask, .attn_mask = both};
      auto with_kernel = [](attn::AttentionArgs<float> a, AttentionKernel k) { return a.kernel = k, a; };
      const Run oracle = run_op(qkv, dout, with_kernel(dense, AttentionKernel::naive));
      for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
        INFO((kernel == AttentionKernel::flash ? "flash" : "naive"));
        const Run got = run_op(qkv, dout, with_kernel(sparse, kernel));
        REQUIRE(all_finite(got.out));
        REQUIRE(all_finite(got.grad));
        CHECK(rel_diff(got.out, oracle.out) <= 1e-5);
        CHECK(rel_diff(got.grad, oracle.grad) <= 1e-5);
      }
    }
  }
  // In double, with finite differences.
  const std::size_t n = 9;
  auto key_mask = lengths_mask<double>({9, 6, 0}, n);
  Tensor<double> user({n, n});
  for (std::size_t i = 0; i < n * n; ++i) user[i] = rng.uniform(-1, 1);
  user(4, 3) = -std::numeric_limits<double>::infinity();
  for (auto kernel : {AttentionKernel::flash, AttentionKernel::naive}) {
    const std::string k = kernel == AttentionKernel::flash ? "flash" : "naive";
    testutil::check_gradients(k + " window 2, causal, global 1, attn_mask", [&](Tape& t, V& x) {
      return attn::self_attention(t, x[0], {.heads = 2, .key_mask = key_mask, .attn_mask = user, .window = 2, .causal = true,
                                            .global_tokens = 1, .kernel = kernel});
    }, {random<double>({3, n, 24})});
  }
}
