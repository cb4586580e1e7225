// SPDX-License-Identifier: MIT
// The int8 GEMM of dynamic quantization (backend/cpu/gemm_int8.hpp): the weight quantization against
// PyTorch's per-channel symmetric rule, the activation quantization's parameters, and the product
// at every level the machine runs against the int32 reference, and against the float product
// within the bound the two quantization steps give.
#include <attn/backend/cpu/gemm_int8.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using testutil::filled;

TEST_CASE("PackedInt8: per-channel symmetric scales and values, ties to even, read back unpacked, bad input refused") {
  // One channel (row of W): max |w| = 15.9375, scale 15.9375 / 127.5 = 0.125 (all exact in float);
  // 0.0625 / 0.125 = 0.5 ties to 0, 0.1875 to 2 (1.5), -0.3125 to -2 (-2.5), -15.9375 to -128
  // (-127.5), 15.9375 to 128, clamped to 127.
  const std::vector<float> w = {0.0625f, 0.1875f, -15.9375f, 15.9375f, 0.f, -0.3125f, 1.f};
  attn::kernels::PackedInt8 p;
  p.quantize(7, 1, w.data(), 7);
  CHECK(p.scales()[0] == 0.125f);
  const std::vector<int> want = {0, 2, -128, 127, 0, -2, 8};
  for (int i = 0; i < 7; ++i) CHECK(int(p.at(i, 0)) == want[std::size_t(i)]);
  CHECK(p.column_sums()[0] == 0 + 2 - 128 + 127 + 0 - 2 + 8);
  // An all-zero channel gets the smallest scale, not zero.
  const std::vector<float> z(5, 0.f);
  p.quantize(5, 1, z.data(), 5);
  CHECK(p.scales()[0] == FLT_EPSILON);
  // Shapes that cross panels and quads: values() gives back what assign() took.
  for (int k : {1, 3, 4, 5, 130})
    for (int n : {1, 31, 32, 33, 70}) {
      const auto wv = filled<float>(std::size_t(k) * n, 5);
      attn::kernels::PackedInt8 a, b;
      a.quantize(k, n, wv.data(), k);
      const auto q = a.values();
      b.assign(k, n, q, std::vector<float>(a.scales(), a.scales() + n));
      bool same = true;
      for (int j = 0; j < n; ++j) {
        std::int32_t s = 0;
        for (int i = 0; i < k; ++i) {
          same = same && a.at(i, j) == b.at(i, j) &&
                 a.at(i, j) == attn::kernels::int8_quantize(wv[std::size_t(j) * k + i], a.scales()[j]);
          s += a.at(i, j);
        }
        same = same && b.column_sums()[j] == s;
      }
      CHECK(same);
    }
  std::vector<float> bad = {1.f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_AS(p.quantize(2, 1, bad.data(), 2), attn::ArgumentError);
  CHECK_THROWS_AS(p.quantize(-1, 1, bad.data(), 2), attn::ArgumentError);
  const std::vector<std::int8_t> q2 = {1, 2};
  CHECK_THROWS_AS(p.assign(2, 1, q2, std::vector<float>{0.f}), attn::ArgumentError);
  CHECK_THROWS_AS(p.assign(3, 1, q2, std::vector<float>{1.f}), attn::ShapeError);
}

namespace {

void check_gemm_int8() {
  for (int m : {1, 5, 7, 8, 9, 97, 200}) {
    for (int n : {1, 15, 16, 17, 32, 33, 70}) {
      for (int k : {0, 1, 3, 4, 5, 64, 515}) {
        for (float beta : {0.f, 1.f, -0.5f}) {
          INFO("m " << m << " n " << n << " k " << k << " beta " << beta);
          const int lda = k + 3, ldw = k + 1, ldc = n + 4;
          auto a = filled<float>(std::size_t(m) * lda + 1, 11);
          // Rows of one sign, and a zero row: the zero point at either end of its range.
          if (m > 2)
            for (int p = 0; p < k; ++p) {
              a[std::size_t(1) * lda + p] = std::abs(a[std::size_t(1) * lda + p]);
              a[std::size_t(2) * lda + p] = -std::abs(a[std::size_t(2) * lda + p]) * 3.f;
            }
          if (m > 3)
            for (int p = 0; p < k; ++p) a[std::size_t(3) * lda + p] = 0.f;
          const auto w = filled<float>(std::size_t(n) * ldw + 1, 12);
          auto c = filled<float>(std::size_t(m) * ldc, 13);
          if (beta == 0.f && m > 1 && n > 1) c[std::size_t(1) * ldc + 1] = std::numeric_limits<float>::quiet_NaN();
          const auto c0 = c;
          attn::kernels::PackedInt8 pw;
          pw.quantize(k, n, w.data(), ldw);
          attn::kernels::gemm_int8(m, n, k, a.data(), lda, pw, beta, c.data(), ldc);
          auto ref = c0;
          attn::kernels::gemm_int8_reference(m, n, k, a.data(), lda, pw, beta, ref.data(), ldc);
          bool ok = true;
          double worst = 0, worst_float = 0;
          for (int i = 0; i < m; ++i) {
            // The row's activation step, for the bound against the float product.
            float lo = 0.f, hi = 0.f;
            for (int p = 0; p < k; ++p) {
              lo = std::min(lo, a[std::size_t(i) * lda + p]);
              hi = std::max(hi, a[std::size_t(i) * lda + p]);
            }
            const double step_a = (hi - lo) / 255.0;
            for (int j = 0; j < ldc; ++j) {
              const float got = c[std::size_t(i) * ldc + j];
              if (j >= n) {
                ok = ok && std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(c0[std::size_t(i) * ldc + j]);
                continue;
              }
              // Against the int32 reference: the same integers; the FP32 path rounds sums past 2^24.
              const double want = ref[std::size_t(i) * ldc + j];
              const double err = std::abs(double(got) - want), tol = 1e-6 * (std::abs(want) + 1.0);
              worst = std::max(worst, err / tol);
              ok = ok && std::isfinite(got) && err <= tol;
              // Against the float product: each activation is off by at most half its row's step and
              // each weight by half its channel's, so the sum by at most
              // sum_p (|w_p| step_a / 2 + |a_p| step_w / 2 + step_a step_w / 4).
              double exact = 0, bound = 1e-5 * ((beta != 0.f ? std::abs(c0[std::size_t(i) * ldc + j]) : 0.0) + 1.0);
              const double step_w = pw.scales()[j];
              for (int p = 0; p < k; ++p) {
                const double av = a[std::size_t(i) * lda + p], wv = w[std::size_t(j) * ldw + p];
                exact += av * wv;
                bound += std::abs(wv) * step_a / 2 + std::abs(av) * step_w / 2 + step_a * step_w / 4;
              }
              if (beta != 0.f) exact += double(beta) * c0[std::size_t(i) * ldc + j];
              const double ef = std::abs(double(got) - exact);
              worst_float = std::max(worst_float, ef / bound);
              ok = ok && ef <= bound;
            }
          }
          INFO("worst error / tolerance " << worst << ", against the float product " << worst_float);
          REQUIRE(ok);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm_int8 at every level the machine runs: row, column and k tails, beta 0 / 1 / -0.5, nothing outside C written") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()) << (attn::kernels::int8_native() ? " (vpdpbusd)" : " (FP32 GEMM)"));
    check_gemm_int8();
  }
}

TEST_CASE("gemm_int8: a row holding a NaN or an infinity comes out NaN, the other rows as they were, a shape mismatch is an error") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    const int m = 3, n = 20, k = 37;
    auto a = filled<float>(std::size_t(m) * k, 3);
    const auto w = filled<float>(std::size_t(n) * k, 4);
    attn::kernels::PackedInt8 pw;
    pw.quantize(k, n, w.data(), k);
    std::vector<float> clean(std::size_t(m) * n), c(std::size_t(m) * n);
    attn::kernels::gemm_int8(m, n, k, a.data(), k, pw, 0.f, clean.data(), n);
    a[5] = std::numeric_limits<float>::quiet_NaN();
    a[2 * k + 7] = std::numeric_limits<float>::infinity();
    attn::kernels::gemm_int8(m, n, k, a.data(), k, pw, 0.f, c.data(), n);
    for (int j = 0; j < n; ++j) {
      CHECK(std::isnan(c[std::size_t(j)]));
      CHECK(c[std::size_t(n + j)] == clean[std::size_t(n + j)]);
      CHECK(std::isnan(c[std::size_t(2 * n + j)]));
    }
    CHECK_THROWS_AS(attn::kernels::gemm_int8(m, n, k + 1, a.data(), k + 1, pw, 0.f, c.data(), n), attn::ShapeError);
  }
}

TEST_CASE("gemm_int8: the activation's zero point and scale follow the row's range with zero in it") {
  // A row in [0, 2.55]: scale 0.01, zero point 0; a row in [-2.55, 0]: zero point 255; a row in
  // [-1, 1.55]: scale 0.01, zero point 100. The product with a weight of ones is exact to a step.
  const int k = 4, n = 1;
  const std::vector<float> a = {0.f, 1.f, 2.55f, 0.5f, -2.55f, -1.f, 0.f, -0.3f, -1.f, 1.55f, 0.2f, 0.f};
  const std::vector<float> w = {1.f, 1.f, 1.f, 1.f};
  attn::kernels::PackedInt8 pw;
  pw.quantize(k, n, w.data(), k);
  std::vector<float> c(3);
  attn::kernels::gemm_int8(3, n, k, a.data(), k, pw, 0.f, c.data(), n);
  // Weights 1 quantize to 127 (scale 1 / 127.5): the product is 127 / 127.5 of the sum.
  CHECK(c[0] == Approx((0.f + 1.f + 2.55f + 0.5f) * 127.f / 127.5f).epsilon(1e-5));
  CHECK(c[1] == Approx((-2.55f - 1.f + 0.f - 0.3f) * 127.f / 127.5f).epsilon(1e-5));
  CHECK(c[2] == Approx((-1.f + 1.55f + 0.2f + 0.f) * 127.f / 127.5f).epsilon(1e-4));
}

TEST_CASE("gemm_int8: rows of a tiny or an overflowing range stay finite, at every level, and k is bounded by int32 sums") {
  // A range below what a normal scale can resolve (the row quantizes as zeros) and one whose width
  // overflows a float (-2e38 .. 2e38, taken in double): finite results, as the reference's.
  const int m = 3, n = 5, k = 20;
  std::vector<float> a(std::size_t(m) * k, 0.f);
  a[0] = 1e-37f;                                            // row 0: [0, 1e-37]
  a[std::size_t(k)] = 1e-44f, a[std::size_t(k) + 3] = -1e-44f;  // row 1: subnormal ends
  a[std::size_t(2 * k)] = -1.8e38f, a[std::size_t(2 * k) + 1] = 1.8e38f;  // row 2: the width overflows a float
  auto w = filled<float>(std::size_t(n) * k, 4);
  for (auto& v : w) v *= 0.1f;  // small weights: row 2's products stay finite
  attn::kernels::PackedInt8 pw;
  pw.quantize(k, n, w.data(), k);
  std::vector<float> ref(std::size_t(m) * n);
  attn::kernels::gemm_int8_reference(m, n, k, a.data(), k, pw, 0.f, ref.data(), n);
  for (int j = 0; j < n; ++j) {
    CHECK(std::abs(ref[std::size_t(j)]) < 1e-30f);
    CHECK(std::abs(ref[std::size_t(n + j)]) < 1e-30f);
    CHECK(std::isfinite(ref[std::size_t(2 * n + j)]));
    // Row 2 is 1.8e38 (w(1, j) - w(0, j)), to about a quantization step (3.6e38 / 255) of it.
    const double want = 1.8e38 * (double(w[std::size_t(j) * k + 1]) - double(w[std::size_t(j) * k]));
    CHECK(std::abs(double(ref[std::size_t(2 * n + j)]) - want) < 2e36);
  }
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    std::vector<float> c(std::size_t(m) * n);
    attn::kernels::gemm_int8(m, n, k, a.data(), k, pw, 0.f, c.data(), n);
    for (std::size_t i = 0; i < c.size(); ++i) {
      CHECK(std::isfinite(c[i]));
      CHECK(std::abs(double(c[i]) - double(ref[i])) <= 1e-5 * std::abs(double(ref[i])) + 1e-30);
    }
  }
  // k past the int32 bound is refused before anything overflows.
  constexpr int too_long = attn::kernels::PackedInt8::kMaxK + 1;
  const std::vector<float> wide(std::size_t(too_long), 1.f);
  CHECK_THROWS_WITH(pw.quantize(too_long, 1, wide.data(), too_long), Catch::Contains("exceeds 65793"));
  CHECK_NOTHROW(pw.quantize(too_long - 1, 1, wide.data(), too_long - 1));
}
