// SPDX-License-Identifier: MIT
// The ops under Precision::bf16 (core/precision.hpp) at every kernel level the machine runs: the linear op:
// its output and gradients equal the FP32 op's on bf16-rounded operands (x, W and dy rounded; the bias
// and the sums float), with and without a row map; a small model's training step, a BiLSTM's and the
// flash attention's output and gradients within bf16's step of FP32's.
#include <attn/attn.hpp>

#include <catch2/catch.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

using attn::Dims;
using attn::Precision;
using attn::Tape;
using attn::Tensor;

namespace {

Tensor<float> values(Dims d, std::uint32_t seed) {
  Tensor<float> t(d);
  std::uint32_t s = seed;
  for (std::size_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data()[i] = float(int(s >> 9) % 2001 - 1000) / 1000.f;  // [-1, 1] on a grid of 1/1000: mostly not bf16 values
  }
  return t;
}

Tensor<float> rounded(const Tensor<float>& t) {
  Tensor<float> r(t.dims());
  for (std::size_t i = 0; i < t.numel(); ++i) r.data()[i] = attn::bf16_round(t.data()[i]);
  return r;
}

struct Run {
  Tensor<float> y, gx, gw, gb;
};

Run run(const Tensor<float>& x, const Tensor<float>& w, const Tensor<float>& b, const Tensor<float>& g, Precision p,
        const Tensor<std::int64_t>* map) {
  Tape tape;
  attn::Var<float> xv(x, true), wv(w, true), bv(b, true);
  attn::Var<float> y;
  {
    const attn::PrecisionScope scope(p);
    y = attn::linear(tape, xv, wv, bv, {.map = map});
  }
  tape.backward(y, g);  // outside the scope: the op keeps the precision it ran in
  return {y.value(), xv.grad(), wv.grad(), bv.grad()};
}

double max_diff(const Tensor<float>& a, const Tensor<float>& b) {
  REQUIRE(a.numel() == b.numel());
  double d = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) d = std::max(d, double(std::abs(a.data()[i] - b.data()[i])));
  return d;
}

}  // namespace

TEST_CASE("precision: fp32 by default, scopes nest and restore, names parse") {
  CHECK(attn::precision() == Precision::fp32);
  {
    const attn::PrecisionScope a(Precision::bf16);
    CHECK(attn::precision() == Precision::bf16);
    {
      const attn::PrecisionScope b(Precision::fp32);
      CHECK(attn::precision() == Precision::fp32);
    }
    CHECK(attn::precision() == Precision::bf16);
  }
  CHECK(attn::precision() == Precision::fp32);
  CHECK(attn::parse_precision("bf16") == Precision::bf16);
  CHECK(attn::parse_precision("fp32") == Precision::fp32);
  CHECK(std::string(attn::precision_name(Precision::bf16)) == "bf16");
  CHECK_THROWS_WITH(attn::parse_precision("fp8", "--precision"),
                    Catch::Contains("--precision") && Catch::Contains("fp8") && Catch::Contains("fp32, bf16 or int8"));
}

TEST_CASE("linear under bf16 at every level: y, dx, dW are the FP32 op on rounded x, W, dy, db the FP32 one, with and without a row map") {
  const std::size_t n = 3, t = 70, in = 45, out = 37;
  const auto x = values({n, t, in}, 1), w = values({out, in}, 2), b = values({out}, 3), g = values({n, t, out}, 4);
  // Rows 0..59 of the first sample, 0..9 of the second, all of the third: a padded batch.
  std::vector<std::int64_t> keep;
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t i = 0; i < t; ++i)
      if (i < (s == 0 ? 60u : s == 1 ? 10u : t)) keep.push_back(std::int64_t(s * t + i));
  Tensor<std::int64_t> map(Dims{keep.size()});
  std::copy(keep.begin(), keep.end(), map.data());
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    for (const Tensor<std::int64_t>* m : std::array<const Tensor<std::int64_t>*, 2>{nullptr, &map}) {
      INFO("level " << attn::isa_name(attn::cpu::isa()) << (m ? ", row map" : ""));
      const Run low = run(x, w, b, g, Precision::bf16, m);
      const Run ref = run(rounded(x), rounded(w), b, rounded(g), Precision::fp32, m);
      const Run plain = run(x, w, b, g, Precision::fp32, m);
      // Float sums of k products of magnitude <= 1 in another order: well under 1e-6 k.
      CHECK(max_diff(low.y, ref.y) <= 1e-6 * in);
      CHECK(max_diff(low.gx, ref.gx) <= 1e-6 * out);
      CHECK(max_diff(low.gw, ref.gw) <= 1e-6 * double(n * t));
      CHECK(max_diff(low.gb, plain.gb) <= 1e-6 * double(n * t));  // the bias gradient sums dy unrounded
      // The rounding is real: bf16 operands move the result by about 2^-9 of its terms.
      CHECK(max_diff(low.y, plain.y) > 1e-4);
      CHECK(max_diff(low.y, plain.y) < 0.05);
      CHECK(max_diff(low.gw, plain.gw) > 1e-3);
    }
  }
}

namespace {

struct Mlp : attn::nn::Module {
  attn::nn::Linear<32, 64> l1{this, "l1"};
  attn::nn::Linear<64, 5> l2{this, "l2"};
};

}  // namespace

TEST_CASE("a training step under bf16: the loss and every gradient within bf16's step of FP32's") {
  const auto x = values({16, 32}, 9);
  Tensor<std::int64_t> labels(Dims{16});
  for (std::size_t i = 0; i < 16; ++i) labels.data()[i] = std::int64_t(i % 5);
  auto step = [&](Precision p) {
    Mlp m;  // the same initial weights each time (seeded by the parameters' names)
    Tape tape;
    attn::Var<float> loss;
    {
      const attn::PrecisionScope scope(p);
      attn::Var<float> xv(x);
      loss = attn::cross_entropy(tape, m.l2(tape, attn::tanh(tape, m.l1(tape, xv))), labels);
    }
    tape.backward(loss);
    std::vector<Tensor<float>> grads;
    auto keep = [&](const auto& g) {  // a copy, shape-erased
      Tensor<float> c(g.dims());
      std::copy_n(g.data(), g.numel(), c.data());
      grads.push_back(std::move(c));
    };
    keep(m.l1.weight.grad());
    keep(m.l1.bias.grad());
    keep(m.l2.weight.grad());
    keep(m.l2.bias.grad());
    return std::pair{loss.value().data()[0], grads};
  };
  const auto [loss32, g32] = step(Precision::fp32);
  const auto [loss16, g16] = step(Precision::bf16);
  CHECK(loss16 != loss32);
  CHECK(std::abs(loss16 - loss32) <= 1e-2 * std::abs(loss32));
  for (std::size_t i = 0; i < g32.size(); ++i) {
    double scale = 0;
    for (std::size_t j = 0; j < g32[i].numel(); ++j) scale = std::max(scale, double(std::abs(g32[i].data()[j])));
    INFO("parameter " << i);
    CHECK(max_diff(g16[i], g32[i]) <= 2e-2 * scale);
  }
}

namespace {

struct LstmRun {
  Tensor<float> out, gx;
  std::vector<Tensor<float>> gw;
};

LstmRun run_bilstm(Precision p) {
  const std::size_t bn = 3, tn = 9, in = 20, h = 12;
  const std::vector<int> lengths = {9, 4, 7};
  Tape tape;
  attn::Var<float> x(values({bn, tn, in}, 31), true);
  std::vector<attn::Var<float>> prm;
  std::uint32_t seed = 40;
  for (int d = 0; d < 2; ++d)
    for (Dims dims : {Dims{4 * h, in}, Dims{4 * h, h}, Dims{4 * h}, Dims{4 * h}}) {
      Tensor<float> t = values(dims, seed++);
      for (std::size_t i = 0; i < t.numel(); ++i) t.data()[i] *= 0.5f;
      prm.emplace_back(t, true);
    }
  attn::Var<float> out;
  {
    const attn::PrecisionScope scope(p);
    out = attn::bilstm(tape, x, lengths, {prm[0], prm[1], prm[2], prm[3]}, {prm[4], prm[5], prm[6], prm[7]}).out;
  }
  tape.backward(out, values(out.dims(), 99));
  LstmRun r{out.value().clone(), x.grad().clone(), {}};
  for (auto& v : prm) r.gw.push_back(v.grad().clone());
  return r;
}

double max_abs(const Tensor<float>& a) {
  double m = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::abs(a.data()[i])));
  return m;
}

}  // namespace

TEST_CASE("bilstm under bf16: within bf16's step of FP32, and the vdpbf16ps kernels equal the FP32 GEMM on the same rounded operands") {
  const LstmRun r32 = run_bilstm(Precision::fp32);
  const LstmRun r16 = run_bilstm(Precision::bf16);
  CHECK(max_diff(r16.out, r32.out) > 1e-5);
  CHECK(max_diff(r16.out, r32.out) <= 2e-2 * max_abs(r32.out));
  CHECK(max_diff(r16.gx, r32.gx) <= 3e-2 * max_abs(r32.gx));
  for (std::size_t i = 0; i < r32.gw.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_diff(r16.gw[i], r32.gw[i]) <= 3e-2 * max_abs(r32.gw[i]));
  }
  // Every level rounds the same operands; only the order of the float sums differs.
  for (int level = 0; level < int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()) << " against " << attn::isa_name(attn::cpu::isa_supported()));
    const LstmRun low = run_bilstm(Precision::bf16);
    CHECK(max_diff(low.out, r16.out) <= 1e-4 * max_abs(r16.out));
    CHECK(max_diff(low.gx, r16.gx) <= 1e-4 * max_abs(r16.gx));
    for (std::size_t i = 0; i < r16.gw.size(); ++i) CHECK(max_diff(low.gw[i], r16.gw[i]) <= 1e-4 * max_abs(r16.gw[i]));
  }
}

namespace {

struct AttnRun {
  Tensor<float> out, gqkv;
};

/// Flash (or naive) self-attention over (2, 150, 3 * 32), 2 heads, the second sample padded after
/// 97 tokens, forward and backward under precision p.
AttnRun run_attention(Precision p, attn::AttentionKernel kernel, std::optional<std::int64_t> window) {
  const std::size_t bn = 2, tn = 150, d = 32;
  Tensor<float> km(Dims{bn, tn});
  for (std::size_t t = 0; t < tn; ++t) km.data()[t] = 1.f, km.data()[tn + t] = t < 97 ? 1.f : 0.f;
  Tensor<float> q = values({bn, tn, 3 * d}, 51);
  for (std::size_t i = 0; i < q.numel(); ++i) q.data()[i] *= 2.f;  // sharper weights than [-1, 1] gives
  Tape tape;
  attn::Var<float> x(q, true);
  attn::Var<float> out;
  Tensor<float> w;
  {
    const attn::PrecisionScope scope(p);
    out = attn::self_attention(tape, x, {.heads = 2, .key_mask = km, .window = window, .kernel = kernel,
                                         .weights = kernel == attn::AttentionKernel::naive ? &w : nullptr});
  }
  tape.backward(out, values(out.dims(), 52));
  return {out.value().erased().clone(), x.grad().erased().clone()};
}

}  // namespace

TEST_CASE("flash attention under bf16: within bf16's step of FP32 at avx512_bf16 (dense and windowed), FP32 itself below it, the naive kernel FP32") {
  for (std::optional<std::int64_t> window : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{20}}) {
    INFO((window ? "window 20" : "dense"));
    for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
      const attn::ScopedIsa scoped{attn::Isa(level)};
      INFO("level " << attn::isa_name(attn::cpu::isa()));
      const AttnRun r32 = run_attention(Precision::fp32, attn::AttentionKernel::flash, window);
      const AttnRun r16 = run_attention(Precision::bf16, attn::AttentionKernel::flash, window);
      if (level >= int(attn::Isa::avx512_bf16)) {  // the tiles on vdpbf16ps
        CHECK(max_diff(r16.out, r32.out) > 1e-5);
        CHECK(max_diff(r16.out, r32.out) <= 2e-2 * max_abs(r32.out));
        CHECK(max_diff(r16.gqkv, r32.gqkv) <= 3e-2 * max_abs(r32.gqkv));
      } else {  // below it the attention core stays FP32 (attention.hpp: bf16_tiles)
        CHECK(max_diff(r16.out, r32.out) == 0);
        CHECK(max_diff(r16.gqkv, r32.gqkv) == 0);
      }
    }
  }
  if (attn::cpu::isa_supported() < attn::Isa::avx512_bf16)
    WARN("this machine runs at most " << attn::isa_name(attn::cpu::isa_supported()) << ": the bf16 attention tiles were not run");
  // The naive kernel (the one that returns the weights) keeps float products under bf16.
  const AttnRun n32 = run_attention(Precision::fp32, attn::AttentionKernel::naive, {});
  const AttnRun n16 = run_attention(Precision::bf16, attn::AttentionKernel::naive, {});
  CHECK(max_diff(n16.out, n32.out) == 0);
  CHECK(max_diff(n16.gqkv, n32.gqkv) == 0);
}
