// SPDX-License-Identifier: MIT
// Dynamic int8 quantization (Precision::int8, core/precision.hpp) at every kernel level the machine
// runs: the linear op equals gemm_int8's int32 reference plus the bias, with and without a row map;
// it refuses to record a gradient; the weight's int8 pack is kept and remade when the weight
// changes; a BiLSTM on a ragged batch follows a step-by-step int8 reference; and PyTorch's
// quantize_dynamic (per-channel weights) on the same weights: the same int8 weights, and outputs
// within the bound of the two activation quantizations.
#include "../golden_util.hpp"

#include <attn/attn.hpp>
#include <attn/backend/cpu/gemm_int8.hpp>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using attn::Dims;
using attn::Precision;
using attn::Tape;
using attn::Tensor;

namespace {

Tensor<float> values(Dims d, std::uint32_t seed, float scale = 1.f) {
  Tensor<float> t(d);
  std::uint32_t s = seed;
  for (std::size_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data()[i] = scale * float(int(s >> 9) % 2001 - 1000) / 1000.f;
  }
  return t;
}

template <class SA, class SB>
double max_diff(const attn::Tensor<float, SA>& a, const attn::Tensor<float, SB>& b) {
  REQUIRE(a.numel() == b.numel());
  double d = 0;
  for (std::size_t i = 0; i < a.numel(); ++i) d = std::max(d, double(std::abs(a.data()[i] - b.data()[i])));
  return d;
}

/// y = x W^T + b by gemm_int8_reference, row by row.
Tensor<float> linear_reference(const Tensor<float>& x, const Tensor<float>& w, const Tensor<float>& b) {
  const int in = int(w.dims().v[1]), out = int(w.dims().v[0]), rows = int(x.numel()) / in;
  attn::kernels::PackedInt8 p;
  p.quantize(in, out, w.data(), in);
  Dims od = x.dims();
  od.v[od.n - 1] = std::size_t(out);
  Tensor<float> y(od);
  for (int r = 0; r < rows; ++r) std::copy_n(b.data(), out, y.data() + std::size_t(r) * out);
  attn::kernels::gemm_int8_reference(rows, out, in, x.data(), in, p, 1.f, y.data(), out);
  return y;
}

}  // namespace

TEST_CASE("precision int8: the name parses and prints") {
  CHECK(attn::parse_precision("int8") == Precision::int8);
  CHECK(std::string(attn::precision_name(Precision::int8)) == "int8");
  CHECK_THROWS_WITH(attn::parse_precision("int4", "--precision"), Catch::Contains("fp32, bf16 or int8"));
}

TEST_CASE("linear under int8 at every level: the int32 reference plus the bias, with and without a row map, no gradient recorded") {
  const std::size_t n = 3, t = 21, in = 45, out = 37;
  const auto x = values({n, t, in}, 1, 2.f), w = values({out, in}, 2, 0.3f), b = values({out}, 3);
  std::vector<std::int64_t> keep;
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t i = 0; i < (s == 0 ? 15u : s == 1 ? 4u : t); ++i) keep.push_back(std::int64_t(s * t + i));
  const auto map = Tensor<std::int64_t>::from(Dims{keep.size()}, std::span<const std::int64_t>(keep));
  const auto want = linear_reference(x, w, b);
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()) << (attn::kernels::int8_native() ? " (vpdpbusd)" : " (FP32 GEMM)"));
    attn::Var<float> xv(x, false), wv(w, true), bv(b, true);
    const attn::PrecisionScope int8(Precision::int8);
    attn::NoGrad ctx;
    const auto y = attn::linear(ctx, xv, wv, bv).value();
    CHECK(max_diff(y, want) <= 1e-5);
    const auto ym = attn::linear(ctx, xv, wv, bv, {.map = &map}).value();
    bool rows_ok = true;
    for (std::size_t r = 0, k = 0; r < n * t; ++r) {
      const bool kept = k < keep.size() && keep[k] == std::int64_t(r);
      for (std::size_t j = 0; j < out; ++j) {
        const float got = ym.data()[r * out + j];
        rows_ok = rows_ok && (kept ? std::abs(got - want.data()[r * out + j]) <= 1e-5f : got == 0.f);
      }
      k += kept;
    }
    CHECK(rows_ok);
    // Under a tape whose inputs need gradients: refused, naming the way out.
    Tape tape;
    CHECK_THROWS_WITH(attn::linear(tape, xv, wv, bv), Catch::Contains("int8") && Catch::Contains("NoGrad"));
  }
}

TEST_CASE("linear under int8: the weight's pack is made once, kept, and remade when the weight is written") {
  const std::size_t in = 16, out = 8;
  const auto x = values({4, in}, 5), w = values({out, in}, 6), b = values({out}, 7);
  attn::Var<float> xv(x, false), wv(w, true), bv(b, true);
  const attn::PrecisionScope int8(Precision::int8);
  attn::NoGrad ctx;
  const auto y1 = attn::linear(ctx, xv, wv, bv).value();
  const void* pack = attn::detail::pack_slot(*wv.data(), attn::detail::PackKind::int8_wt).data.get();
  REQUIRE(pack != nullptr);
  const auto y2 = attn::linear(ctx, xv, wv, bv).value();
  CHECK(attn::detail::pack_slot(*wv.data(), attn::detail::PackKind::int8_wt).data.get() == pack);
  CHECK(max_diff(y1, y2) == 0);
  // A library write (an optimizer step, a load) advances value_writes: the next call quantizes anew.
  for (std::size_t i = 0; i < w.numel(); ++i) wv.data()->value.data()[i] *= -1.f;
  wv.data()->mark_value_written();
  const auto y3 = attn::linear(ctx, xv, wv, bv).value();
  auto wneg = values({out, in}, 6);
  for (std::size_t i = 0; i < wneg.numel(); ++i) wneg.data()[i] *= -1.f;
  CHECK(max_diff(y3, linear_reference(x, wneg, b)) <= 1e-5);
  CHECK(max_diff(y3, y1) > 0.1);
  // Back in fp32 the weight's own values are used: no pack in the way.
  const attn::PrecisionScope fp32(Precision::fp32);
  const auto y4 = attn::linear(ctx, xv, wv, bv).value();
  CHECK(max_diff(y4, y3) < 0.05);
  CHECK(max_diff(y4, y3) > 0);
}

namespace {

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

/// One direction of an LSTM over sample b's first len steps, its products by gemm_int8_reference:
/// writes h into out (B, T, dirs H) at column offset d H.
void lstm_int8_reference(const Tensor<float>& x, std::size_t b, int len, bool reverse, const Tensor<float>& w_ih,
                         const Tensor<float>& w_hh, const Tensor<float>& b_ih, const Tensor<float>& b_hh, std::size_t col,
                         Tensor<float>& out) {
  const int in = int(w_ih.dims().v[1]), h = int(w_hh.dims().v[1]), g = 4 * h;
  const std::size_t tn = x.dims().v[1], width = out.dims().v[2];
  attn::kernels::PackedInt8 pih, phh;
  pih.quantize(in, g, w_ih.data(), in);
  phh.quantize(h, g, w_hh.data(), h);
  std::vector<float> hs(static_cast<std::size_t>(h), 0.f), cs(static_cast<std::size_t>(h), 0.f), gates(static_cast<std::size_t>(g));
  for (int s = 0; s < len; ++s) {
    const int tt = reverse ? len - 1 - s : s;
    for (int j = 0; j < g; ++j) gates[std::size_t(j)] = b_ih.data()[j] + b_hh.data()[j];
    attn::kernels::gemm_int8_reference(1, g, in, x.data() + (b * tn + std::size_t(tt)) * std::size_t(in), in, pih, 1.f, gates.data(), g);
    attn::kernels::gemm_int8_reference(1, g, h, hs.data(), h, phh, 1.f, gates.data(), g);
    for (int j = 0; j < h; ++j) {  // PyTorch's gate order: input, forget, cell, output
      const float ig = sigmoid(gates[std::size_t(j)]), fg = sigmoid(gates[std::size_t(h + j)]);
      const float cg = std::tanh(gates[std::size_t(2 * h + j)]), og = sigmoid(gates[std::size_t(3 * h + j)]);
      cs[std::size_t(j)] = fg * cs[std::size_t(j)] + ig * cg;
      hs[std::size_t(j)] = og * std::tanh(cs[std::size_t(j)]);
    }
    std::copy(hs.begin(), hs.end(), out.data() + (b * tn + std::size_t(tt)) * width + col);
  }
}

}  // namespace

TEST_CASE("BiLSTM under int8 at every level: a ragged batch follows the step-by-step int8 reference and is refused under a tape") {
  constexpr std::size_t In = 24, H = 16;
  attn::nn::BiLSTM<In, H> lstm(nullptr, "lstm");
  const std::vector<int> lengths = {9, 3, 6};
  const std::size_t bn = lengths.size(), tn = 9;
  const auto x = values({bn, tn, In}, 11, 1.5f);
  auto p = [&](const char* name) { return lstm.parameter(name).value(); };
  Tensor<float> want = Tensor<float>::zeros({bn, tn, 2 * H});
  for (std::size_t b = 0; b < bn; ++b) {
    lstm_int8_reference(x, b, lengths[b], false, p("weight_ih_l0"), p("weight_hh_l0"), p("bias_ih_l0"), p("bias_hh_l0"), 0, want);
    lstm_int8_reference(x, b, lengths[b], true, p("weight_ih_l0_reverse"), p("weight_hh_l0_reverse"), p("bias_ih_l0_reverse"),
                        p("bias_hh_l0_reverse"), H, want);
  }
  attn::NoGrad ctx;
  attn::Var<float, attn::Shape<attn::dyn, attn::dyn, In>> xv(x, false);
  const auto fp32 = lstm(ctx, xv, lengths).out.value();
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()) << (attn::kernels::int8_native() ? " (vpdpbusd)" : " (FP32 GEMM)"));
    const attn::PrecisionScope int8(Precision::int8);
    const auto got = lstm(ctx, xv, lengths).out.value();
    // The reference's cell runs std::exp where attn's runs its vector approximations: a hidden state
    // may land across a rounding boundary of its row's quantization, one step (1/255 of the row's
    // range) times a weight, which the recurrence then carries. Errors in the quantization (a scale,
    // a zero point, a transposed weight) are 10-100x larger.
    CHECK(max_diff(got, want) <= 2e-3);
    const double vs_fp32 = max_diff(got, fp32);
    INFO("int8 vs fp32 " << vs_fp32);
    CHECK(vs_fp32 > 1e-5);  // quantized, not the FP32 path
    CHECK(vs_fp32 < 5e-2);
    Tape tape;
    attn::Var<float, attn::Shape<attn::dyn, attn::dyn, In>> xg(x, true);
    CHECK_THROWS_WITH(lstm(tape, xg, lengths), Catch::Contains("int8") && Catch::Contains("NoGrad"));
  }
}

TEST_CASE("golden: int8 Linear and BiLSTM against torch quantize_dynamic with per-channel weights") {
  const auto f = golden::load("quantized_dynamic");
  const auto x = golden::tensor<float>(f, "x"), w = golden::tensor<float>(f, "weight"), b = golden::tensor<float>(f, "bias");
  const auto wq = golden::tensor<std::int64_t>(f, "weight_q");
  const auto ws = golden::tensor<double>(f, "weight_scale");
  const auto out_q = golden::tensor<double>(f, "out_q"), out = golden::tensor<double>(f, "out");
  const std::size_t in = w.dims().v[1], nout = w.dims().v[0], rows = x.numel() / in;
  // The int8 weights: the same values and scales as torch's.
  attn::kernels::PackedInt8 pw;
  pw.quantize(int(in), int(nout), w.data(), int(in));
  bool same = true;
  for (std::size_t j = 0; j < nout; ++j) {
    same = same && std::abs(double(pw.scales()[j]) - ws.data()[j]) <= 1e-7 * ws.data()[j];
    for (std::size_t p = 0; p < in; ++p) same = same && std::int64_t(pw.at(int(p), int(j))) == wq.data()[j * in + p];
  }
  CHECK(same);
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    attn::nn::Linear<64, 24> lin(nullptr, "lin");
    lin.weight.data()->value = w;
    lin.bias.data()->value = b;
    lin.weight.data()->mark_value_written();
    const attn::PrecisionScope int8(Precision::int8);
    attn::NoGrad ctx;
    const auto y = lin(ctx, attn::Var<float>(x, false)).value();
    // Both use the same int8 weights; the activations differ: attn's per row over 255 steps, torch's
    // per tensor over 127 (reduce_range). Each dequantized activation is within half its step of x,
    // so |attn - torch| <= sum_p |w_q(p) s| (step_attn / 2 + step_torch / 2).
    float tlo = 0.f, thi = 0.f;
    for (std::size_t i = 0; i < x.numel(); ++i) {
      tlo = std::min(tlo, x.data()[i]);
      thi = std::max(thi, x.data()[i]);
    }
    const double step_torch = double(thi - tlo) / 127.0;
    bool within = true;
    double err_attn = 0, err_torch = 0, worst = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      float lo = 0.f, hi = 0.f;
      for (std::size_t p = 0; p < in; ++p) {
        lo = std::min(lo, x.data()[r * in + p]);
        hi = std::max(hi, x.data()[r * in + p]);
      }
      const double step_attn = double(hi - lo) / 255.0;
      for (std::size_t j = 0; j < nout; ++j) {
        double wsum = 0;
        for (std::size_t p = 0; p < in; ++p) wsum += std::abs(double(wq.data()[j * in + p]) * ws.data()[j]);
        const double bound = wsum * (step_attn + step_torch) / 2 + 1e-5;
        const double d = std::abs(double(y.data()[r * nout + j]) - out_q.data()[r * nout + j]);
        worst = std::max(worst, d / bound);
        within = within && d <= bound;
        err_attn += std::abs(double(y.data()[r * nout + j]) - out.data()[r * nout + j]);
        err_torch += std::abs(out_q.data()[r * nout + j] - out.data()[r * nout + j]);
      }
    }
    INFO("worst |attn - torch| / bound " << worst << "; mean error against float64: attn " << err_attn / double(y.numel())
                                         << ", torch " << err_torch / double(y.numel()));
    CHECK(within);
    CHECK(err_attn < err_torch);  // per-row 8-bit activations are the finer grid
  }
  // The BiLSTM: no closed bound through the recurrence; attn's int8 output stays within twice
  // torch's own int8 error (its distance from float64) of torch's int8 output.
  attn::nn::BiLSTM<16, 12> lstm(nullptr, "lstm");
  for (auto& [name, slot] : lstm.named_parameters()) {
    const auto t = golden::tensor<float>(f, "lstm." + name);
    REQUIRE(t.numel() == slot->numel());
    slot->copy_from_host(t.data());
  }
  const auto x2 = golden::tensor<float>(f, "lstm.x");
  const auto lq = golden::tensor<double>(f, "lstm.out_q"), l64 = golden::tensor<double>(f, "lstm.out");
  double torch_err = 0;
  for (std::size_t i = 0; i < lq.numel(); ++i) torch_err = std::max(torch_err, std::abs(lq.data()[i] - l64.data()[i]));
  const std::vector<int> full(x2.dims().v[0], int(x2.dims().v[1]));
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    const attn::PrecisionScope int8(Precision::int8);
    attn::NoGrad ctx;
    const auto y = lstm(ctx, attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 16>>(x2, false), full).out.value();
    double d_torch = 0, d_64 = 0;
    for (std::size_t i = 0; i < lq.numel(); ++i) {
      d_torch = std::max(d_torch, std::abs(double(y.data()[i]) - lq.data()[i]));
      d_64 = std::max(d_64, std::abs(double(y.data()[i]) - l64.data()[i]));
    }
    INFO("level " << attn::isa_name(attn::cpu::isa()) << ": max |attn - torch int8| " << d_torch << ", |attn - float64| " << d_64
                  << ", |torch int8 - float64| " << torch_err);
    CHECK(d_torch <= 2 * torch_err);
    CHECK(d_64 <= torch_err);
    CHECK(d_64 > 1e-6);
  }
}
