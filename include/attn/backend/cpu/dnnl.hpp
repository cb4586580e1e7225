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
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>
#if defined(_OPENMP)
#include <omp.h>
#endif

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

/// Whether dnnl_gemm copies the operands of C = A^T B (A stored (k, m), B (k, n): a weight's
/// gradient, dW = dY^T X) into scratch with longer rows, a block of kDnnlPadBlock rows of each at a
/// time. oneDNN 2.6's sgemm reads such operands slowly, and by how much depends on where they lie,
/// when their rows are a multiple of 64 floats apart, as activations' and gradients' rows usually
/// are. On a Zen 3, one thread, A and B placed at 25 offsets (benchmarks/gemm_shapes, "weight
/// gradients"): (m, n, k) = (384, 128, 4096) ran at 53-81 GFLOP/s (median 67), (512, 128, 3008) at
/// 54-65 and (1024, 256, 4096) at 34-41; through the copied blocks at medians of 79-86 on these and
/// the other weight gradients of the reference models. Only for a call that runs on one thread
/// (Linear's and the LSTM's weight gradients run on one thread each, inside their own parallel
/// regions): oneDNN's threads would wait for a copy made by one. At AVX-512 (`level`) the product
/// runs twice as fast against the same copy, and on a Zen 5 with both threads at work the copy
/// cost more than it saved (R1's and R2's weight gradients 5-17% slower through it) except where
/// the rows are a multiple of 1,024 floats (4 KiB) apart (R6's feed-forward, 9-16% faster through
/// it): there the route is taken only for those.
inline bool dnnl_pad_pays(bool ta, bool tb, int k, int lda, int ldb, bool one_thread, Isa level = isa()) {
  const int period = level >= Isa::avx512 ? 1024 : 64;
  return one_thread && ta && !tb && k >= 256 && (lda % period == 0 || ldb % period == 0);
}
inline constexpr int kDnnlPadBlock = 512;
/// The scratch row length for rows of n floats: a whole number of cache lines (16 floats), at least
/// one more than n needs, and not a multiple of 64 floats.
inline std::size_t dnnl_padded_ld(int n) {
  std::size_t l = (std::size_t(n) + 15) / 16 * 16 + 16;
  return l % 64 == 0 ? l + 16 : l;
}

/// Row-major C (m, n) = alpha op(A) op(B) + beta C through dnnl_sgemm.
inline void dnnl_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                      float beta, float* c, int ldc) {
  dnnl_configure_once();
  struct Inside {
    Inside() { third_party_calls().fetch_add(1, std::memory_order_relaxed); }
    ~Inside() { third_party_calls().fetch_sub(1, std::memory_order_relaxed); }
  };
#if defined(_OPENMP)
  const bool one_thread = omp_in_parallel() || omp_get_max_threads() == 1;
#else
  const bool one_thread = true;
#endif
  int status = 0;
  if (dnnl_pad_pays(ta, tb, k, lda, ldb, one_thread)) {
    const std::size_t la = dnnl_padded_ld(m), lb = dnnl_padded_ld(n), rows = std::size_t(std::min(k, kDnnlPadBlock));
    thread_local std::vector<float> scratch;
    if (scratch.size() < rows * (la + lb) + 16) scratch.resize(rows * (la + lb) + 16);
    float* pa = scratch.data() + (16 - reinterpret_cast<std::uintptr_t>(scratch.data()) / sizeof(float) % 16) % 16;  // 64-byte aligned
    float* pb = pa + rows * la;
    for (int p0 = 0; p0 < k && status == 0; p0 += kDnnlPadBlock) {
      const int kk = std::min(kDnnlPadBlock, k - p0);
      for (int p = 0; p < kk; ++p) {
        std::copy_n(a + std::size_t(p0 + p) * lda, m, pa + std::size_t(p) * la);
        std::copy_n(b + std::size_t(p0 + p) * ldb, n, pb + std::size_t(p) * lb);
      }
      const Inside inside;
      status = dnnl_sgemm('T', 'N', m, n, kk, alpha, pa, std::int64_t(la), pb, std::int64_t(lb), p0 == 0 ? beta : 1.f, c, ldc);
    }
  } else {
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
