// SPDX-License-Identifier: MIT
// Run-time instruction-set levels (backend/cpu/isa.hpp): detection, ATTN_ISA and cpu::set_isa, and the
// attention softmax's exponential at every level the machine runs against std::exp.
#include <attn/attn.hpp>
#include <attn/backend/cpu/exp.hpp>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

using attn::Isa;

TEST_CASE("isa: the detected features are consistent and the level follows them") {
  const auto& f = attn::cpu::features();
  CHECK((!f.avx512 || f.avx2_fma));
  CHECK((!f.avx512_bf16 || f.avx512));
  CHECK((!f.amx_bf16 || f.amx_tile));
  CHECK_FALSE((f.intel && f.amd));
  const Isa best = attn::cpu::isa_supported();
  CHECK(best == (f.avx512_bf16 ? Isa::avx512_bf16 : f.avx512 ? Isa::avx512 : f.avx2_fma ? Isa::avx2 : Isa::generic));
  CHECK(attn::fp32_level(Isa::avx512_bf16) == Isa::avx512);
  CHECK(attn::fp32_level(Isa::avx2) == Isa::avx2);
#if defined(__AVX2__) && defined(__FMA__)
  CHECK(best >= Isa::avx2);  // a binary built for AVX2 only starts on such a machine
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  CHECK(best >= Isa::avx512);
#endif
  WARN("this machine: " << attn::isa_name(best) << (f.avx512_bf16 ? ", avx512_bf16" : "") << (f.avx512_vnni ? ", avx512_vnni" : "")
                        << (f.amx_tile ? ", amx" : "") << (f.intel ? " (Intel)" : f.amd ? " (AMD)" : ""));
}

TEST_CASE("isa: names parse, set_isa goes down but never above the machine, ScopedIsa restores") {
  CHECK(attn::parse_isa("generic") == Isa::generic);
  CHECK(attn::parse_isa("sse2") == Isa::generic);
  CHECK(attn::parse_isa("avx2") == Isa::avx2);
  CHECK(attn::parse_isa("avx512") == Isa::avx512);
  CHECK(attn::parse_isa("avx512_bf16") == Isa::avx512_bf16);
  CHECK(attn::parse_isa("avx512bf16") == Isa::avx512_bf16);
  CHECK_THROWS_WITH(attn::parse_isa("avx3", "ATTN_ISA"), Catch::Contains("ATTN_ISA") && Catch::Contains("avx3") &&
                                                              Catch::Contains("generic, avx2, avx512 or avx512_bf16"));
  for (Isa l : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) CHECK(attn::parse_isa(attn::isa_name(l)) == l);

  const Isa before = attn::cpu::isa();
  {
    const attn::ScopedIsa g(Isa::generic);
    CHECK(attn::cpu::isa() == Isa::generic);
    if (attn::cpu::isa_supported() >= Isa::avx2) {
      const attn::ScopedIsa a(Isa::avx2);
      CHECK(attn::cpu::isa() == Isa::avx2);
    }
    CHECK(attn::cpu::isa() == Isa::generic);
  }
  CHECK(attn::cpu::isa() == before);
  if (attn::cpu::isa_supported() < Isa::avx512)
    CHECK_THROWS_WITH(attn::cpu::set_isa(Isa::avx512), Catch::Contains("at most"));
  if (attn::cpu::isa_supported() < Isa::avx512_bf16)
    CHECK_THROWS_WITH(attn::cpu::set_isa(Isa::avx512_bf16), Catch::Contains("at most"));
  attn::cpu::set_isa(Isa::generic);
  CHECK(attn::cpu::isa() == Isa::generic);
  attn::cpu::reset_isa();
  CHECK(attn::cpu::isa() == before);
}

// Run by ctest with ATTN_ISA set (tests/CMakeLists.txt): the variable decides the level, and an unknown
// or unavailable level is an error that names it.
TEST_CASE("isa: ATTN_ISA sets the level", "[.][attn_isa_env]") {
  const char* v = std::getenv("ATTN_ISA");
  REQUIRE(v != nullptr);
  const Isa want = attn::parse_isa(v);
  if (want > attn::cpu::isa_supported()) {
    CHECK_THROWS_WITH(attn::cpu::isa(), Catch::Contains(std::string("ATTN_ISA=") + v) && Catch::Contains("at most"));
  } else {
    CHECK(attn::cpu::isa() == want);
  }
}
TEST_CASE("isa: an unknown ATTN_ISA is an error naming the variable", "[.][attn_isa_bad]") {
  CHECK_THROWS_WITH(attn::cpu::isa(), Catch::Contains("ATTN_ISA") && Catch::Contains("unknown level"));
}
// The kernels read the level inside their OpenMP teams, where an exception ends the process: the
// first tensor reports the bad value instead, before any kernel runs.
TEST_CASE("isa: an unknown ATTN_ISA throws from the first tensor, not from a kernel's threads", "[.][attn_isa_bad]") {
  const auto big_layer_norm = [] {  // 2^18 elements: a team of threads (one per core)
    attn::Tape tape;
    const attn::Var<float> x(attn::Tensor<float>::zeros({512, 512}), false);
    const attn::Var<float> g(attn::Tensor<float>::full({512}, 1.0f), false), b(attn::Tensor<float>::zeros({512}), false);
    return attn::layer_norm(tape, x, g, b, 1e-5).value().to_vector();
  };
  CHECK_THROWS_WITH(big_layer_norm(), Catch::Contains("ATTN_ISA") && Catch::Contains("unknown level"));
}

TEST_CASE("exp_shift_sum at every level: within 3 ulp of std::exp, exact zeros below -87 and for -inf, every tail length") {
  namespace mha = attn::kernels::mha;
  const float inf = std::numeric_limits<float>::infinity();
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{Isa(level)};
    for (std::size_t n : {1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 100}) {
      INFO("level " << attn::isa_name(Isa(level)) << " n " << n);
      std::vector<float> x(n);
      for (std::size_t j = 0; j < n; ++j) x[j] = -float((j * 37) % 101) * 0.9f + 1.5f;  // -89.4 .. 1.5
      if (n > 2) x[1] = -inf;
      const float m = 1.5f;
      std::vector<float> y = x;
      const float s = mha::exp_shift_sum(y.data(), n, m);
      double ref_sum = 0, worst = 0;
      bool zeros = true;
      for (std::size_t j = 0; j < n; ++j) {
        const float d = x[j] - m;  // the kernels' argument, rounded to float as theirs is
        ref_sum += double(y[j]);
        if (d < -87.0f) {
          zeros = zeros && y[j] == 0.0f;
        } else {
          const double ref = std::exp(double(d));
          worst = std::max(worst, std::abs(double(y[j]) - ref) / ref / double(std::numeric_limits<float>::epsilon()));
        }
      }
      CHECK(zeros);
      CHECK(worst <= 3.0);  // in units of FLT_EPSILON, relative
      CHECK(std::abs(double(s) - ref_sum) <= 1e-6 * ref_sum);
    }
  }
}

TEST_CASE("exp_shift_sum at every level: NaN stays NaN in every lane position, and the sum is NaN") {
  namespace mha = attn::kernels::mha;
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{Isa(level)};
    for (std::size_t n : {1, 5, 16, 17, 40}) {
      for (std::size_t at = 0; at < n; at += 3) {
        INFO("level " << attn::isa_name(Isa(level)) << " n " << n << " at " << at);
        std::vector<float> x(n, -1.0f);
        x[at] = std::numeric_limits<float>::quiet_NaN();
        const float s = mha::exp_shift_sum(x.data(), n, 0.0f);
        CHECK(std::isnan(x[at]));
        CHECK(std::isnan(s));
        for (std::size_t j = 0; j < n; ++j)
          if (j != at) CHECK(x[j] == Approx(std::exp(-1.0)).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("row_max at every level: the maximum for every tail length, -inf for a row of -inf") {
  namespace mha = attn::kernels::mha;
  const float inf = std::numeric_limits<float>::infinity();
  for (int level = 0; level <= int(attn::cpu::isa_supported()); ++level) {
    const attn::ScopedIsa scoped{Isa(level)};
    for (std::size_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 47, 64, 100, 128}) {
      INFO("level " << attn::isa_name(Isa(level)) << " n " << n);
      for (std::size_t at = 0; at < n; at += (n > 20 ? 7 : 1)) {  // the maximum in every lane position
        std::vector<float> x(n);
        for (std::size_t j = 0; j < n; ++j) x[j] = -float((j * 37) % 101) - 1.0f;
        if (n > 2) x[(at + 1) % n] = -inf;
        x[at] = 3.5f;
        CHECK(mha::row_max(x.data(), n) == 3.5f);
      }
      std::vector<float> all(n, -inf);
      CHECK(mha::row_max(all.data(), n) == -inf);
    }
  }
}

// attn::compiled's start-up check (src/compiled_guard.cpp): the extensions its units were compiled
// for against the CPU's, by the functions its constructor calls.
extern "C" const unsigned attn_compiled_march;
extern "C" unsigned attn_compiled_cpu_features();
extern "C" int attn_compiled_missing_features(unsigned required, unsigned have, char* buf, std::size_t size);

TEST_CASE("isa: attn::compiled's start-up check names the extensions a CPU lacks") {
  char buf[160];
  // This program started, so the check passed here; it agrees with attn's own probe.
  const unsigned have = attn_compiled_cpu_features();
  CHECK(attn_compiled_missing_features(attn_compiled_march, have, buf, sizeof buf) == 0);
  CHECK(std::string(buf).empty());
  const auto& f = attn::cpu::features();
  CHECK(bool(have & 2u) == f.avx2_fma);
  CHECK(bool(have & 4u) == f.avx512);
  CHECK(bool(have & 8u) == f.avx512_bf16);
  CHECK(bool(have & 16u) == f.avx512_vnni);
#if defined(__AVX2__) && defined(__FMA__)
  CHECK((attn_compiled_march & 2u) != 0);  // the library's units have this unit's flags (attn's own)
#endif
  // A library built on an AVX-512 machine, a CPU with AVX2 only; then one with AVX alone.
  CHECK(attn_compiled_missing_features(1u | 2u | 4u, 1u | 2u, buf, sizeof buf) == 1);
  CHECK(std::string(buf) == "AVX-512 (F/CD/BW/DQ/VL)");
  CHECK(attn_compiled_missing_features(1u | 2u | 4u | 8u, 1u, buf, sizeof buf) == 1);
  CHECK(std::string(buf) == "AVX2/FMA, AVX-512 (F/CD/BW/DQ/VL), AVX512-BF16");
  CHECK(attn_compiled_missing_features(1u | 2u, 1u | 2u | 4u, buf, sizeof buf) == 0);
  char small[8];  // truncated, never overrun
  CHECK(attn_compiled_missing_features(2u | 4u, 0u, small, sizeof small) == 1);
  CHECK(std::string(small) == "AVX2/FM");
}
