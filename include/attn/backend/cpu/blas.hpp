// SPDX-License-Identifier: MIT
// An optional BLAS under cpu::gemm: BLIS or OpenBLAS, chosen when attn is configured
// (ATTN_BLAS=auto|blis|openblas|none; the CMake target defines ATTN_BLAS_BLIS or
// ATTN_BLAS_OPENBLAS and links the library). Their GEMM kernels are tuned per CPU and chosen at
// run time; Eigen's are fixed at compile time and on Zen 3 run at 0.55-0.9x of BLIS's speed on attn's
// projection shapes (benchmarks/README.md). Without either macro nothing here is declared and
// cpu::gemm uses Eigen's product.
//
// Only the reference BLAS ABI is used (sgemm_/dgemm_ with 32-bit integers, which the Debian
// packages export), declared here instead of including blis.h or cblas.h: those headers differ
// between the two libraries and cost compile time in every unit.
#pragma once

#if defined(ATTN_BLAS_BLIS) || defined(ATTN_BLAS_OPENBLAS)
#define ATTN_HAVE_BLAS 1
#include <atomic>
#include <cstdlib>
#include <type_traits>
#if defined(_OPENMP)
#include <omp.h>
#endif

extern "C" {
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha, const float* a,
            const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc);
#if defined(ATTN_BLAS_BLIS)
void bli_thread_set_num_threads(long long n);  // dim_t: 64-bit in Debian's build; the register is the same for 32
#else
void openblas_set_num_threads(int n);
#endif
}

namespace attn::detail {

/// Smallest m n k that goes to the BLAS: below it (a 64^3 product) the library's per-call
/// set-up costs more than Eigen's small-product path (16 x 48 x 16 runs at 0.35-0.45x).
inline constexpr long long kBlasMinVolume = 64LL * 64 * 64;

/// The BLIS sub-configuration attn asks for, or nullptr to leave BLIS's own choice. BLIS picks
/// its kernels when it initialises (on its first call) from the CPU it finds; on Intel CPUs with
/// AVX-512 whose FMA-unit count it does not know (0.9.0 on Sapphire/Emerald Rapids and later) it
/// falls back to 'haswell', the AVX2 kernels, at about half the machine's GEMM rate. A value the
/// user set in BLIS_ARCH_TYPE always wins.
inline const char* blis_arch_choice(const char* user_value, bool intel, bool avx512) {
  if (user_value != nullptr) return nullptr;
  return intel && avx512 ? "skx" : nullptr;
}

/// Names BLIS's sub-configuration (BLIS_ARCH_TYPE, see blis_arch_choice) once, before attn's first
/// BLAS call. OpenBLAS reads OPENBLAS_CORETYPE when it is loaded, before any of attn's code runs:
/// there the variable is the user's to set (docs/design.md).
inline void blas_configure_once() {
#if defined(ATTN_BLAS_BLIS) && defined(__x86_64__) && defined(__GNUC__)
  [[maybe_unused]] static const bool configured = [] {
    __builtin_cpu_init();
    // __builtin_cpu_supports reports AVX-512 only where the OS also saves its registers (XCR0).
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl");
    if (const char* arch = blis_arch_choice(std::getenv("BLIS_ARCH_TYPE"), __builtin_cpu_is("intel"), avx512))
      ::setenv("BLIS_ARCH_TYPE", arch, 0);
    return true;
  }();
#endif
}

/// The BLAS keeps its own thread count; this hands it attn's (omp_get_max_threads(), which
/// cpu::set_threads, ATTN_NUM_THREADS and OMP_NUM_THREADS set) before a call from outside a
/// parallel region. Inside one, the OpenMP builds of both libraries run on the calling thread.
inline void blas_sync_threads() {
#if defined(_OPENMP)
  static std::atomic<int> current{0};
  if (omp_in_parallel()) return;
  const int n = omp_get_max_threads();
  if (current.load(std::memory_order_relaxed) == n) return;
  current.store(n, std::memory_order_relaxed);
#if defined(ATTN_BLAS_BLIS)
  bli_thread_set_num_threads(n);
#else
  openblas_set_num_threads(n);
#endif
#endif
}

/// Row-major C (m, n) = alpha op(A) op(B) + beta C through the column-major BLAS: C^T = op(B)^T op(A)^T.
template <class T>
inline void blas_gemm(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c,
                      int ldc) {
  blas_configure_once();
  blas_sync_threads();
  const char ca = ta ? 'T' : 'N', cb = tb ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) sgemm_(&cb, &ca, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  else dgemm_(&cb, &ca, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
}

}  // namespace attn::detail
#endif
