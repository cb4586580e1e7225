// SPDX-License-Identifier: MIT
// The CPU backend: aligned host memory from the host pool, thread control, and the GEMMs
// (defined in cpu/gemm.hpp: BLIS or OpenBLAS when configured, else Eigen's, threaded with OpenMP).
// Its kernel families live in backend/cpu/, one per file, as the CUDA ones in backend/cuda/.
//   attn::cpu::gemm<float>(Trans::no, Trans::yes, m, n, k, 1.f, a, k, b, k, 0.f, c, n);
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "../core/eigen.hpp"
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "../core/error.hpp"
#include "../core/instantiate.hpp"
#include "../core/pool.hpp"
#include "../core/profile.hpp"
#include "../core/backend_concept.hpp"
#include "cpu/isa.hpp"

namespace attn {

namespace detail {
inline std::atomic<std::uint64_t>& cpu_allocation_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}
}  // namespace detail

struct cpu {
  static constexpr const char* name = "cpu";
  static constexpr bool host_accessible = true;
  static constexpr std::size_t alignment = 64;

  /// Reads ATTN_ISA here, on the thread that makes a tensor, before any kernel can: a bad value
  /// throws ArgumentError from the first tensor, where a caller can catch it, and never from a
  /// kernel's OpenMP team, where an exception would end the process.
  template <class T>
  static T* allocate(std::size_t n) {
    (void)detail::isa();
    if (n == 0) n = 1;
    if (n > (std::size_t(1) << 40) / sizeof(T)) throw Error("cpu::allocate: request of " + std::to_string(n) + " elements is too large");
    void* p = detail::HostPool::get().allocate(n * sizeof(T));
    detail::cpu_allocation_counter().fetch_add(1, std::memory_order_relaxed);
    return static_cast<T*>(p);
  }
  template <class T>
  static void deallocate(T* p, std::size_t n) noexcept {
    detail::HostPool::get().deallocate(p, (n == 0 ? 1 : n) * sizeof(T));
  }
  /// Number of tensor allocations made by this backend since the program started.
  static std::uint64_t allocations() noexcept { return detail::cpu_allocation_counter().load(std::memory_order_relaxed); }
  /// The host pool that serves tensor buffers, their control blocks and VarData: how many
  /// requests it served, how many of them reached the system allocator, the bytes in use, their
  /// peak and their peak at the start of a backward pass (saved_peak_bytes).
  static PoolStats pool_stats() { return detail::HostPool::get().stats(); }
  /// Starts a new peak of the host pool's bytes in use (pool_stats().peak_bytes and
  /// saved_peak_bytes) from the bytes in use now: reset, run a training step, read the peak.
  static void reset_pool_peak() noexcept { detail::HostPool::get().reset_peak(); }
  /// Returns every cached free block of the host pool to the system.
  static void empty_cache() noexcept { detail::HostPool::get().release(); }

  template <class T>
  static void copy(T* dst, const T* src, std::size_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
  }
  template <class T>
  static void to_host(T* host, const T* src, std::size_t n) { copy(host, src, n); }
  template <class T>
  static void from_host(T* dst, const T* host, std::size_t n) { copy(dst, host, n); }
  /// p[0..n) = v. Zeroing 4 MiB or more (a fresh gradient) is split over the threads.
  template <class T>
  static void fill(T* p, std::size_t n, T v) {
    if (v == T(0)) {
      const std::size_t bytes = n * sizeof(T);
#if defined(_OPENMP)
      if (bytes >= (std::size_t(4) << 20) && !omp_in_parallel()) {
        const int nt = omp_get_max_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int c = 0; c < nt; ++c) {
          const std::size_t b0 = bytes * std::size_t(c) / std::size_t(nt) / 64 * 64;
          const std::size_t b1 = c + 1 == nt ? bytes : bytes * std::size_t(c + 1) / std::size_t(nt) / 64 * 64;
          std::memset(reinterpret_cast<unsigned char*>(p) + b0, 0, b1 - b0);
        }
        return;
      }
#endif
      if (n) std::memset(p, 0, bytes);
    } else {
      std::fill(p, p + n, v);
    }
  }

  /// Row-major GEMM: C(m,n) = alpha * op(A)(m,k) * op(B)(k,n) + beta * C. lda/ldb/ldc are row strides.
  template <class T>
  static void gemm(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
                   T* C, int ldc);

  /// `batch` GEMMs whose operands start sa/sb/sc elements apart. Small problems are spread over
  /// threads one GEMM each; large ones use Eigen's own threading.
  template <class T>
  static void gemm_strided_batched(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda,
                                   long long sa, const T* B, int ldb, long long sb, T beta, T* C, int ldc,
                                   long long sc, int batch);

  /// Threads used by attn's loops and Eigen's GEMM.
  static int threads() noexcept {
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
  }
  /// Sets the thread count (0: ATTN_NUM_THREADS, else OMP_NUM_THREADS, else the hardware's).
  static void set_threads(int n) {
#if defined(_OPENMP)
    if (n <= 0) {
      if (const char* e = std::getenv("ATTN_NUM_THREADS"); e && *e) {
        char* end = nullptr;
        const long v = std::strtol(e, &end, 10);
        if (*end != '\0' || v <= 0 || v > 4096)
          throw ArgumentError(std::string("ATTN_NUM_THREADS: '") + e + "' is not a thread count (a positive integer up to 4096)");
        n = int(v);
      }
    }
    if (n <= 0) {
      if (const char* e = std::getenv("OMP_NUM_THREADS")) n = std::atoi(e);
    }
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
    Eigen::setNbThreads(n);
#else
    (void)n;
#endif
  }

  /// The instruction-set level attn's own kernels run at (backend/cpu/isa.hpp): cpu::set_isa's
  /// choice, else ATTN_ISA's, else the best the machine runs. ATTN_ISA naming a level the machine
  /// lacks, or no level, throws ArgumentError on the first call.
  static Isa isa() { return detail::isa(); }
  /// The best level this machine runs, and the features found.
  static Isa isa_supported() { return detail::isa_supported(); }
  static const CpuFeatures& features() { return detail::cpu_features(); }
  /// Runs the kernels at a lower level from now on (tests, comparisons); throws ArgumentError for a
  /// level the machine lacks. reset_isa() returns to ATTN_ISA or the machine's best.
  static void set_isa(Isa level) { detail::set_isa(level); }
  static void reset_isa() { detail::reset_isa(); }
};

static_assert(Backend<cpu>);

}  // namespace attn

#include "cpu/gemm.hpp"
