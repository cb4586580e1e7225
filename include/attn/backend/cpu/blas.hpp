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
#include <string>

#include "../../core/eigen.hpp"
#include "dnnl.hpp"
#include "isa.hpp"

#if defined(ATTN_BLAS_BLIS) || defined(ATTN_BLAS_OPENBLAS)
#define ATTN_HAVE_BLAS 1
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
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
char* openblas_get_config(void);
char* openblas_get_corename(void);
#endif
}

namespace attn::detail {

/// Smallest m n k that goes to the BLAS: below it (a 64^3 product) the library's per-call
/// set-up costs more than Eigen's small-product path (16 x 48 x 16 runs at 0.35-0.45x).
inline constexpr long long kBlasMinVolume = 64LL * 64 * 64;

/// The BLIS sub-configuration attn asks for, as BLIS_ARCH_TYPE's value in BLIS 0.9's numbering (it
/// reads the variable as a number: 0 skx, 3 haswell), or nullptr to leave BLIS's own choice. BLIS
/// picks its kernels when it initialises (on its first call) from the CPU it finds, and 0.9.0 knows
/// no AVX-512 CPU newer than it: on Intel Sapphire/Emerald Rapids, whose FMA-unit count it cannot
/// read, it falls back to 'haswell' (AVX2, about half the machine's GEMM rate); on AMD Zen 5 (family
/// 0x1A) to 'generic', the reference kernels (64 against 296 GFLOP/s at skx on 2 cores). So on every
/// AVX-512 machine, Intel or AMD, BLIS runs the level attn's own kernels run at (cpu::isa(), which
/// ATTN_ISA can lower): skx at avx512, haswell at avx2. AVX2 machines keep BLIS's own choice (it
/// knows haswell and later Intel cores and Zen 1 to 3). A value the user set always wins.
inline const char* blis_arch_choice(const char* user_value, [[maybe_unused]] bool intel, bool avx512, Isa level) {
  if (user_value != nullptr || !avx512) return nullptr;
  if (level == Isa::avx2) return "3";
  if (level >= Isa::avx512) return "0";
  return nullptr;
}

#if defined(ATTN_BLAS_BLIS)
extern "C" const char* bli_info_get_version_str(void);
extern "C" void bli_init(void);
extern "C" int bli_arch_query_id(void);
extern "C" const char* bli_arch_string(int id);
#endif

/// Names BLIS's sub-configuration (BLIS_ARCH_TYPE, see blis_arch_choice) once, before attn's first
/// BLAS call; only for BLIS 0.9, whose numbering it knows. OpenBLAS reads OPENBLAS_CORETYPE when it
/// is loaded, before any of attn's code runs: there the variable is the user's to set
/// (docs/design.md).
inline void blas_configure_once() {
#if defined(ATTN_BLAS_BLIS)
  [[maybe_unused]] static const bool configured = [] {
    const std::string_view version = bli_info_get_version_str();
    if (version.substr(0, 4) != "0.9.") return false;
    const CpuFeatures& f = detail::cpu_features();
    if (const char* arch = blis_arch_choice(std::getenv("BLIS_ARCH_TYPE"), f.intel, f.avx512, detail::isa()))
      ::setenv("BLIS_ARCH_TYPE", arch, 0);
    return true;
  }();
#endif
}

/// "BLIS 0.9.0 (skx)", "OpenBLAS (SkylakeX; OpenBLAS 0.3.21 ...)": the library under cpu::gemm and the kernels it runs.
inline std::string blas_description() {
  blas_configure_once();
#if defined(ATTN_BLAS_BLIS)
  bli_init();  // idempotent; the sub-configuration is chosen here, as on the first GEMM
  return std::string("BLIS ") + bli_info_get_version_str() + " (" + bli_arch_string(bli_arch_query_id()) + ")";
#else
  std::string config = openblas_get_config(), core = openblas_get_corename();
  return "OpenBLAS (" + core + "; " + config + ")";
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

namespace attn {

/// "Eigen 3.4.0 (AVX512, FMA, AVX2, ...)": Eigen's product and the instructions it was compiled for.
inline std::string eigen_gemm_description() {
  return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION) + " (" + Eigen::SimdInstructionSetsInUse() + ")";
}

/// What runs cpu::gemm's large products, and at which kernels: "BLIS 0.9.0 (skx)", "OpenBLAS (...)",
/// or eigen_gemm_description() (Eigen's kernels are fixed when attn is compiled); with oneDNN,
/// "oneDNN 2.6.3 (dnnl_sgemm) for float, <the BLAS or Eigen> for double".
inline std::string cpu_gemm_description() {
#if defined(ATTN_HAVE_BLAS)
  std::string d = detail::blas_description();
#else
  std::string d = eigen_gemm_description();
#endif
#if defined(ATTN_GEMM_DNNL)
  d = detail::dnnl_description() + " for float, " + d + " for double";
#endif
  return d;
}

}  // namespace attn
