// kernels::tile::gemm, the attention kernels' register-tiled GEMM, against a plain triple loop.
#include <attn/backend/cpu_tile_gemm.hpp>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tile = attn::kernels::tile;

namespace {

std::vector<float> filled(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(int(s >> 9) % 2001 - 1000) / 500.0f;  // [-2, 2]
  }
  return v;
}

}  // namespace

TEST_CASE("tile::gemm: every row and column tail, A and A^T, with and without accumulation, nothing outside C written") {
  if (!tile::available()) {
    CHECK_FALSE(tile::gemm<float>(1, 1, 1, 1.f, nullptr, 1, 1, nullptr, 1, false, nullptr, 1));
    WARN("no AVX2 + FMA on this machine: tile::gemm declines, the attention kernels use the general GEMM");
    return;
  }
  CHECK_FALSE(tile::gemm<double>(1, 1, 1, 1.0, nullptr, 1, 1, nullptr, 1, false, nullptr, 1));  // float only
  for (std::size_t m : {1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 128}) {
    for (std::size_t n : {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 64, 130}) {
      for (std::size_t k : {0, 1, 5, 16, 129}) {
        for (bool transposed : {false, true}) {
          for (bool acc : {false, true}) {
            INFO("m " << m << " n " << n << " k " << k << (transposed ? " A^T" : " A") << (acc ? " accumulate" : ""));
            // A is (m, k) read as a[i * ai + p * ak]: row-major with a row stride of k + 3, or stored
            // transposed (k, m) with a row stride of m + 2.
            const std::size_t ai = transposed ? 1 : k + 3, ak = transposed ? m + 2 : 1;
            const std::size_t ldb = n + 5, ldc = n + 4;
            const auto a = filled((transposed ? k * ak + m : m * ai + k) + 1, 1);
            const auto b = filled(k * ldb + n + 1, 2);
            auto c = filled(m * ldc, 3);
            const auto c0 = c;
            const float alpha = 0.75f;
            REQUIRE(tile::gemm<float>(m, n, k, alpha, a.data(), ai, ak, b.data(), ldb, acc, c.data(), ldc));
            bool ok = true;
            for (std::size_t i = 0; i < m; ++i)
              for (std::size_t j = 0; j < ldc; ++j) {
                const float got = c[i * ldc + j];
                if (j >= n) {  // the gap between rows of C stays as it was
                  ok = ok && got == c0[i * ldc + j];
                  continue;
                }
                double ref = 0, mag = 0;
                for (std::size_t p = 0; p < k; ++p) {
                  ref += double(a[i * ai + p * ak]) * b[p * ldb + j];
                  mag += std::abs(double(a[i * ai + p * ak]) * b[p * ldb + j]);
                }
                ref = alpha * ref + (acc ? c0[i * ldc + j] : 0.0);
                mag = alpha * mag + (acc ? std::abs(c0[i * ldc + j]) : 0.0);
                ok = ok && std::abs(got - ref) <= 1e-6 * (mag + 1);
              }
            CHECK(ok);
          }
        }
      }
    }
  }
}
