// SPDX-License-Identifier: MIT
// kernels::tile::gemm, the attention kernels' register-tiled GEMM, against a plain triple loop, at
// every instruction-set level this machine runs (cpu::set_isa).
#include <attn/backend/cpu/tile_gemm.hpp>

#include "fill_util.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace tile = attn::kernels::tile;

using testutil::filled;

namespace {

template <class T>
void check_tile_gemm(double tol) {
  for (std::size_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 128}) {
    for (std::size_t n : {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 64, 130}) {
      for (std::size_t k : {0, 1, 5, 16, 129}) {
        for (bool transposed : {false, true}) {
          for (bool acc : {false, true}) {
            INFO("m " << m << " n " << n << " k " << k << (transposed ? " A^T" : " A") << (acc ? " accumulate" : ""));
            // A is (m, k) read as a[i * ai + p * ak]: row-major with a row stride of k + 3, or stored
            // transposed (k, m) with a row stride of m + 2.
            const std::size_t ai = transposed ? 1 : k + 3, ak = transposed ? m + 2 : 1;
            const std::size_t ldb = n + 5, ldc = n + 4;
            const auto a = filled<T>((transposed ? k * ak + m : m * ai + k) + 1, 1);
            const auto b = filled<T>(k * ldb + n + 1, 2);
            auto c = filled<T>(m * ldc, 3);
            const auto c0 = c;
            const T alpha = T(0.75);
            tile::gemm<T>(m, n, k, alpha, a.data(), ai, ak, b.data(), ldb, acc, c.data(), ldc);
            bool ok = true;
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < ldc; ++j) {
                const T got = c[i * ldc + j];
                if (j >= n) {  // the gap between rows of C stays as it was
                  ok = ok && got == c0[i * ldc + j];
                  continue;
                }
                double ref = 0, mag = 0;
                for (std::size_t p = 0; p < k; ++p) {
                  ref += double(a[i * ai + p * ak]) * double(b[p * ldb + j]);
                  mag += std::abs(double(a[i * ai + p * ak]) * double(b[p * ldb + j]));
                }
                ref = alpha * ref + (acc ? double(c0[i * ldc + j]) : 0.0);
                mag = alpha * mag + (acc ? std::abs(double(c0[i * ldc + j])) : 0.0);
                ok = ok && std::abs(double(got) - ref) <= tol * (mag + 1);
              }
            CHECK(ok);
          }
        }
      }
    }
  }
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
