// SPDX-License-Identifier: MIT
// kernels::tile::gemm, the attention kernels' register-tiled GEMM, and tile::gemm_bf16, its
// bfloat16 twin, against a plain triple loop, at every instruction-set level this machine runs
// (cpu::set_isa).
#include <attn/backend/cpu/tile_gemm.hpp>
#include <attn/backend/cpu/tile_gemm_bf16.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <vector>

namespace tile = attn::kernels::tile;

using testutil::filled;

namespace {

/// Checks a tile product `call(m, n, k, alpha, a, ai, ak, b, ldb, accumulate, c, ldc)` over every
/// shape of ms x ns x ks, A row-major and stored transposed, with and without accumulation: each
/// entry of C against the double sum of round(a) round(b) (round: what the kernel does to its
/// operands), within tol of the sum of the magnitudes, and the gap between C's rows unwritten. With
/// `rounding`, also that rounding shows beyond tol once k and m n are not tiny (so that the check
/// tells rounded operands from exact ones).
template <class T, class Call, class Round>
void check_tile_product(std::initializer_list<std::size_t> ms, std::initializer_list<std::size_t> ns, std::initializer_list<std::size_t> ks,
                        std::uint32_t seed, double tol, Call call, Round round, bool rounding) {
  for (std::size_t m : ms) {
    for (std::size_t n : ns) {
      for (std::size_t k : ks) {
        for (bool transposed : {false, true}) {
          for (bool acc : {false, true}) {
            INFO("m " << m << " n " << n << " k " << k << (transposed ? " A^T" : " A") << (acc ? " accumulate" : ""));
            // A is (m, k) read as a[i * ai + p * ak]: row-major with a row stride of k + 3, or stored
            // transposed (k, m) with a row stride of m + 2.
            const std::size_t ai = transposed ? 1 : k + 3, ak = transposed ? m + 2 : 1;
            const std::size_t ldb = n + 5, ldc = n + 4;
            const auto a = filled<T>((transposed ? k * ak + m : m * ai + k) + 1, seed);
            const auto b = filled<T>(k * ldb + n + 1, seed + 1);
            auto c = filled<T>(m * ldc, seed + 2);
            const auto c0 = c;
            const T alpha = T(0.75);
            call(m, n, k, alpha, a.data(), ai, ak, b.data(), ldb, acc, c.data(), ldc);
            bool ok = true, rounded_differs = false;
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < ldc; ++j) {
                const T got = c[i * ldc + j];
                if (j >= n) {  // the gap between rows of C stays as it was
                  ok = ok && got == c0[i * ldc + j];
                  continue;
                }
                double ref = 0, exact = 0, mag = 0;
                for (std::size_t p = 0; p < k; ++p) {
                  const T x = a[i * ai + p * ak], y = b[p * ldb + j];
                  ref += double(round(x)) * double(round(y));
                  exact += double(x) * double(y);
                  mag += std::abs(double(x) * double(y));
                }
                const double base = acc ? double(c0[i * ldc + j]) : 0.0;
                ok = ok && std::abs(double(got) - (double(alpha) * ref + base)) <= tol * (double(alpha) * mag + std::abs(base) + 1);
                rounded_differs = rounded_differs || std::abs(ref - exact) > 10 * tol * (mag + 1);
              }
            CHECK(ok);
            if (rounding && k >= 16 && m * n >= 16) CHECK(rounded_differs);
          }
        }
      }
    }
  }
}

template <class T>
void check_tile_gemm(double tol) {
  check_tile_product<T>({1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 128}, {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 64, 130},
                        {0, 1, 5, 16, 129}, 1, tol, [](auto... args) { tile::gemm<T>(args...); }, [](T x) { return x; }, false);
}

}  // namespace

TEST_CASE("tile::gemm in float at every level the machine runs: every row and column tail, A and A^T, with and without accumulation, nothing outside C written") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    CHECK(tile::available() == (level >= int(attn::Isa::avx2)));
    check_tile_gemm<float>(1e-6);
  }
  if (attn::cpu::isa_supported() < attn::Isa::avx512)
    WARN("this machine runs at most " << attn::isa_name(attn::cpu::isa_supported()) << ": the AVX-512 kernel was not run");
}

TEST_CASE("tile::gemm in double (the general GEMM behind the same call): A and A^T, accumulation, nothing outside C written") {
  check_tile_gemm<double>(1e-14);
}

TEST_CASE("tile::gemm: a single row or column of A may have both strides 1") {
  // (1, 3) row-major and (3, 1) stored transposed both read a[0..2] with ai = ak = 1.
  const std::vector<double> a{1, 2, 3}, b{1, 10, 100, 1000, 10000, 100000};  // b: (3, 2) for m = 1; (1, 2) for k = 1
  std::vector<double> c(6, -1);
  tile::gemm<double>(1, 2, 3, 1.0, a.data(), 1, 1, b.data(), 2, false, c.data(), 2);
  CHECK(c[0] == 1 + 2 * 100 + 3 * 10000);
  CHECK(c[1] == 10 + 2 * 1000 + 3 * 100000);
  tile::gemm<double>(3, 2, 1, 2.0, a.data(), 1, 1, b.data(), 2, false, c.data(), 2);
  CHECK(c == std::vector<double>{2, 20, 4, 40, 6, 60});
  CHECK_THROWS_AS(tile::gemm<double>(2, 2, 2, 1.0, a.data(), 2, 2, b.data(), 2, false, c.data(), 2), std::invalid_argument);
}

TEST_CASE("tile::transpose at every level the machine runs: every row and column tail, strides wider than the tile, nothing outside dst written") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    for (std::size_t rows : {1, 3, 7, 8, 9, 16, 17, 128, 130}) {
      for (std::size_t cols : {1, 5, 8, 15, 16, 24, 33, 128}) {
        INFO("level " << attn::isa_name(attn::Isa(level)) << " rows " << rows << " cols " << cols);
        const std::size_t ld = cols + 5, ldd = rows + 3;
        const auto src = filled<float>(rows * ld, 7);
        std::vector<float> dst(cols * ldd, -99.0f);
        tile::transpose(src.data(), ld, rows, cols, dst.data(), ldd);
        bool ok = true;
        for (std::size_t c = 0; c < cols; ++c)
          for (std::size_t r = 0; r < ldd; ++r) ok = ok && dst[c * ldd + r] == (r < rows ? src[r * ld + c] : -99.0f);
        CHECK(ok);
      }
    }
  }
}

TEST_CASE("tile::gemm_bf16 at every level the machine runs: the float sum of the bf16-rounded products, every row, column and pair tail, A and A^T, nothing outside C written") {
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    INFO("level " << attn::isa_name(attn::cpu::isa()));
    CHECK(tile::bf16_tiles_native() == (level >= int(attn::Isa::avx512_bf16)));
    // The operands are not bf16 values: from a few products on, the rounding shows beyond the
    // tolerance, so the check tells rounded operands from float ones.
    check_tile_product<float>({1, 3, 7, 8, 9, 16, 17, 64}, {1, 7, 15, 16, 17, 31, 32, 33, 48, 128, 130},
                              {0, 1, 2, 3, 16, 17, 31, 32, 33, 64, 129}, 11, 1e-6, [](auto... args) { tile::gemm_bf16(args...); },
                              [](float x) { return attn::bf16_round(x); }, true);
  }
  if (attn::cpu::isa_supported() < attn::Isa::avx512_bf16)
    WARN("this machine runs at most " << attn::isa_name(attn::cpu::isa_supported()) << ": the vdpbf16ps tile kernel was not run");
}

TEST_CASE("tile::bf16_detail::round_row at every level is bf16_round: ties to even, NaN quieted, infinities and zeros kept, every length") {
  std::vector<float> x = filled<float>(37, 21);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, 1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, inf, -inf, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff800001u)})
    x.push_back(v);
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{attn::Isa(level)};
    for (std::size_t n = 0; n <= x.size(); ++n) {
      INFO("level " << attn::isa_name(attn::Isa(level)) << " n " << n);
      std::vector<float> out(n + 1, -7.f);
      tile::bf16_detail::round_row(x.data(), n, out.data());
      bool ok = out[n] == -7.f;
      for (std::size_t j = 0; j < n; ++j)
        ok = ok && std::bit_cast<std::uint32_t>(out[j]) == std::bit_cast<std::uint32_t>(attn::bf16_round(x[j]));
      CHECK(ok);
    }
  }
}
