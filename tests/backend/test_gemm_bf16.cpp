// SPDX-License-Identifier: MIT
// bfloat16 rounding (core/bf16.hpp) and the bf16 GEMM (backend/cpu/gemm_bf16.hpp) at every level the
// machine runs, against a double-precision sum of the bf16-rounded operands.
#include <attn/backend/cpu/gemm_bf16.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using attn::Trans;
using testutil::filled;

TEST_CASE("bf16: rounding to nearest, ties to even, NaN and infinities kept, exact back to float") {
  CHECK(attn::bf16_bits(0.f) == 0x0000);
  CHECK(attn::bf16_bits(-0.f) == 0x8000);
  CHECK(attn::bf16_bits(1.f) == 0x3f80);
  CHECK(attn::bf16_bits(0.1f) == 0x3dcd);  // 0x3dcccccd rounds up
  CHECK(attn::bf16_bits(-2.5f) == 0xc020);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1); 1 + 3 * 2^-8
  // lies halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  CHECK(attn::bf16_value(attn::bf16_bits(1.f + 0x1p-8f)) == 1.f);
  CHECK(attn::bf16_value(attn::bf16_bits(1.f + 3 * 0x1p-8f)) == 1.f + 0x1p-6f);
  CHECK(attn::bf16_value(attn::bf16_bits(1.f + 0x1p-8f + 0x1p-20f)) == 1.f + 0x1p-7f);  // above half: up
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(attn::bf16_value(attn::bf16_bits(inf)) == inf);
  CHECK(attn::bf16_value(attn::bf16_bits(-inf)) == -inf);
  CHECK(attn::bf16_value(attn::bf16_bits(std::numeric_limits<float>::max())) == inf);  // rounds past the largest bf16
  CHECK(std::isnan(attn::bf16_value(attn::bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits in the low 16 bits only must not become an infinity.
  CHECK(std::isnan(attn::bf16_round(std::bit_cast<float>(0x7f800001u))));
  CHECK(std::isnan(attn::bf16_round(std::bit_cast<float>(0xff800001u))));
  // Every bf16 value converts to float and back unchanged.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = attn::bf16_value(std::uint16_t(h));
    if (!std::isnan(f) && attn::bf16_bits(f) != h) FAIL("bf16 " << h << " does not round-trip");
  }
  // The rounding error is at most half a unit in the last place: 8 significant bits, 2^-8 of |x|.
  for (float x : filled<float>(1000, 7)) CHECK(std::abs(attn::bf16_round(x) - x) <= std::abs(x) * 0x1p-8f);
}

TEST_CASE("PackedBf16 at every level: B and B^T pack alike, every element reads back rounded, a shape mismatch is an error") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    for (int k : {0, 1, 2, 31, 32, 33, 67}) {
      for (int n : {1, 16, 17, 32, 45, 64}) {
        INFO("k " << k << " n " << n);
        const int ldb = n + 3, ldt = k + 2;
        const auto b = filled<float>(std::size_t(k) * ldb + 1, 3);
        std::vector<float> bt(std::size_t(n) * ldt + 1, 7.f);
        for (int r = 0; r < k; ++r)
          for (int j = 0; j < n; ++j) bt[std::size_t(j) * ldt + r] = b[std::size_t(r) * ldb + j];
        attn::kernels::PackedBf16 p1, p2;
        p1.pack(Trans::no, k, n, b.data(), ldb);
        p2.pack(Trans::yes, k, n, bt.data(), ldt);
        CHECK(p1.k() == k);
        CHECK(p1.n() == n);
        bool same = true;
        for (int r = 0; r < k; ++r)
          for (int j = 0; j < n; ++j)
            same = same && p1.at(r, j) == attn::bf16_round(b[std::size_t(r) * ldb + j]) && p2.at(r, j) == p1.at(r, j);
        CHECK(same);
      }
    }
  }
  const int k = 5, n = 7;
  const auto b = filled<float>(std::size_t(k) * n, 3);
  attn::kernels::PackedBf16 p1;
  p1.pack(Trans::no, k, n, b.data(), n);
  std::vector<float> c(4 * n), a(4 * (k + 1));
  CHECK_THROWS_AS(attn::kernels::gemm_bf16(Trans::no, 4, n, k + 1, 1.f, a.data(), k + 1, p1, 0.f, c.data(), n), attn::ShapeError);
  CHECK_THROWS_AS(p1.pack(Trans::no, -1, n, b.data(), n), attn::ArgumentError);
}

namespace {

void check_gemm_bf16() {
  for (int m : {1, 5, 11, 12, 13, 25, 97, 200}) {
    for (int n : {1, 15, 16, 17, 31, 32, 33, 70}) {
      for (int k : {0, 1, 2, 3, 31, 64, 515}) {
        for (Trans ta : {Trans::no, Trans::yes}) {
          for (float beta : {0.f, 1.f, -0.5f}) {
            INFO("m " << m << " n " << n << " k " << k << (ta == Trans::yes ? " A^T" : " A") << " beta " << beta);
            const float alpha = 0.75f;
            const int lda = ta == Trans::no ? k + 3 : m + 2, ldb = n + 1, ldc = n + 4;
            const auto a = filled<float>(std::size_t(ta == Trans::no ? m : k) * lda + 1, 11);
            const auto b = filled<float>(std::size_t(k) * ldb + 1, 12);
            auto c = filled<float>(std::size_t(m) * ldc, 13);
            // beta == 0 must not read C: a NaN there stays out of the result.
            if (beta == 0.f && m > 1 && n > 1) c[std::size_t(1) * ldc + 1] = std::numeric_limits<float>::quiet_NaN();
            const auto c0 = c;
            attn::kernels::PackedBf16 pb;
            pb.pack(Trans::no, k, n, b.data(), ldb);
            attn::kernels::gemm_bf16(ta, m, n, k, alpha, a.data(), lda, pb, beta, c.data(), ldc);
            bool ok = true;
            double worst = 0;
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < ldc; ++j) {
                const float got = c[std::size_t(i) * ldc + j];
                if (j >= n) {  // outside C: untouched
                  ok = ok && std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(c0[std::size_t(i) * ldc + j]);
                  continue;
                }
                double s = 0, mag = 0;
                for (int p = 0; p < k; ++p) {
                  const float av = ta == Trans::no ? a[std::size_t(i) * lda + p] : a[std::size_t(p) * lda + i];
                  const double t = double(attn::bf16_round(av)) * double(attn::bf16_round(b[std::size_t(p) * ldb + j]));
                  s += t;
                  mag += std::abs(t);
                }
                double want = alpha * s;
                if (beta != 0.f) want += double(beta) * c0[std::size_t(i) * ldc + j];
                // float summation of k products: a few units of float rounding per term's magnitude;
                // a wrong or unrounded operand is off by ~2^-9 of its term.
                const double tol = 1e-6 * (mag + (beta != 0.f ? std::abs(c0[std::size_t(i) * ldc + j]) : 0.)) + 1e-7;
                const double err = std::abs(double(got) - want);
                worst = std::max(worst, err / tol);
                ok = ok && std::isfinite(got) && err <= tol;
              }
            INFO("worst error / tolerance " << worst);
            REQUIRE(ok);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("gemm_bf16 at every level the machine runs: row, column and k tails, A and A^T, beta 0 / 1 / -0.5, nothing outside C written") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    check_gemm_bf16();
  }
  if (attn::cpu::isa_supported() < attn::Isa::avx512_bf16)
    WARN("this machine runs at most " << attn::isa_name(attn::cpu::isa_supported()) << ": the vdpbf16ps kernel was not run");
}

TEST_CASE("gemm_bf16: the rounding is real (the product differs from FP32's by the bf16 step, not more)") {
  const int m = 64, n = 64, k = 256;
  const auto a = filled<float>(std::size_t(m) * k, 21), b = filled<float>(std::size_t(k) * n, 22);
  attn::kernels::PackedBf16 pb;
  pb.pack(Trans::no, k, n, b.data(), n);
  std::vector<float> c16(std::size_t(m) * n), c32(std::size_t(m) * n);
  attn::kernels::gemm_bf16(Trans::no, m, n, k, 1.f, a.data(), k, pb, 0.f, c16.data(), n);
  attn::cpu::gemm<float>(Trans::no, Trans::no, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, c32.data(), n);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < c16.size(); ++i) {
    diff += (c16[i] - c32[i]) * double(c16[i] - c32[i]);
    norm += c32[i] * double(c32[i]);
  }
  const double rel = std::sqrt(diff / norm);
  INFO("relative difference " << rel);
  CHECK(rel > 1e-4);  // bf16 operands: about 2^-9 / sqrt(k) relative
  CHECK(rel < 1e-2);
}
