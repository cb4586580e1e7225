// SPDX-License-Identifier: MIT
// oneDNN's FP32 GEMM under cpu::gemm<float>, when attn was configured with it (ATTN_DNNL=auto|on:
// CMake finds Debian's libdnnl2, defines ATTN_GEMM_DNNL and links libdnnl.so.2). dnnl_sgemm takes
// row-major operands, attn's own contract, and picks its kernels for the CPU at run time, AVX-512
// included, which Debian's BLIS 0.9 must be told about (blas.hpp). Measured on a Zen 5 (2 threads,
// benchmarks/gemm_shapes): 1.1-1.9x BLIS `skx` on every FP32 shape of the reference models.
// Only the symbols used are declared (Debian's libdnnl2 ships no headers; libdnnl-dev would add
// them), as blas.hpp does for the BLAS. Double stays with the BLAS or Eigen.
#pragma once
#include <atomic>

namespace attn::detail {
/// How many threads are inside a third-party GEMM call now (oneDNN's dnnl_sgemm). What is allocated
/// meanwhile is the library's, not attn's: tests/core/test_steady_state_alloc.cpp counts it apart.
inline std::atomic<int>& third_party_calls() {
  static std::atomic<int> n{0};
  return n;
}
}  // namespace attn::detail

#if defined(ATTN_GEMM_DNNL)
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../core/error.hpp"
#include "isa.hpp"

extern "C" {
int dnnl_sgemm(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
               std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
struct attn_dnnl_version_t {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;  // dnnl_version_t's runtime flags
};
const attn_dnnl_version_t* dnnl_version(void);
}

namespace attn::detail {

/// Smallest m n k that goes to oneDNN: the BLAS's threshold (blas.hpp), for the same reason.
inline constexpr long long kDnnlMinVolume = 64LL * 64 * 64;

/// oneDNN's ISA cap (DNNL_MAX_CPU_ISA's value) for attn's level, so that ATTN_ISA lowers oneDNN's
/// kernels with attn's own: AVX2 at avx2, SSE41 at generic, none (its own choice) from avx512 on. A
/// value the user set wins. oneDNN reads the variable once, at its first call.
inline const char* dnnl_isa_choice(const char* user_value, Isa level) {
  if (user_value != nullptr) return nullptr;
  if (level == Isa::avx2) return "AVX2";
  if (level == Isa::generic) return "SSE41";
  return nullptr;
}

inline void dnnl_configure_once() {
  [[maybe_unused]] static const bool configured = [] {
    if (const char* v = dnnl_isa_choice(std::getenv("DNNL_MAX_CPU_ISA"), detail::isa())) ::setenv("DNNL_MAX_CPU_ISA", v, 0);
    return true;
  }();
}

/// Row-major C (m, n) = alpha op(A) op(B) + beta C through dnnl_sgemm.
inline void dnnl_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                      float beta, float* c, int ldc) {
  dnnl_configure_once();
  struct Inside {
    Inside() { third_party_calls().fetch_add(1, std::memory_order_relaxed); }
    ~Inside() { third_party_calls().fetch_sub(1, std::memory_order_relaxed); }
  };
  int status = 0;
  {
    const Inside inside;
    status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  if (status != 0)
    throw Error("cpu::gemm: dnnl_sgemm(" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) +
                ") failed with oneDNN status " + std::to_string(status));
}

/// "oneDNN 2.6.3 (dnnl_sgemm)".
inline std::string dnnl_description() {
  const attn_dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (dnnl_sgemm)";
}

}  // namespace attn::detail
#endif
