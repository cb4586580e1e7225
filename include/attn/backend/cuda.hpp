// SPDX-License-Identifier: MIT
// The CUDA backend: device memory from a stream-ordered pool, cuBLAS GEMMs with the row-major
// contract of attn::cpu, and element-wise kernels. Compiled by nvcc only (link attn::cuda).
//   if (attn::cuda::available()) { float* p = attn::cuda::allocate<float>(n); attn::cuda::fill(p, n, 1.f); }
#pragma once
#if !defined(__CUDACC__)
#error "attn/backend/cuda.hpp must be compiled by nvcc as CUDA: name the source .cu and link attn::cuda"
#endif
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/error.hpp"
#include "../core/backend_concept.hpp"
#include "cuda/elementwise.cuh"
#include "cuda/expr.cuh"
#include "cuda/fill.cuh"
#include "cuda/gemm.cuh"
#include "cuda/runtime.cuh"

namespace attn {

namespace cuda_detail {
inline std::atomic<std::uint64_t>& allocation_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}
}  // namespace cuda_detail

/// Every operation runs on the current device (cudaSetDevice) and is enqueued on that device's one
/// attn stream, so operations are ordered with each other and with frees, whichever thread issues
/// them. Device-side calls return before the work is done; to_host and from_host return when the
/// host buffer holds the result or may be reused, and synchronize() waits for everything.
/// Failures throw attn::Error naming the call and the CUDA or cuBLAS error.
struct cuda {
  static constexpr const char* name = "cuda";
  static constexpr bool host_accessible = false;

  /// True when a CUDA device is visible and its context starts. Never throws; probed once.
  static bool available() noexcept {
    try {
      return cuda_detail::probe().empty();
    } catch (...) {
      return false;
    }
  }
  /// Why available() is false ("cudaGetDeviceCount: cudaErrorInsufficientDriver (35): ..."), or "".
  static std::string unavailable_reason() { return cuda_detail::probe(); }

  /// The stream attn uses on the current device (created on first use, lives as long as the process).
  static cudaStream_t stream() { return cuda_detail::current_device().stream; }
  /// Waits for all work attn has enqueued on the current device; reports asynchronous kernel faults.
  static void synchronize() { cuda_detail::check(cudaStreamSynchronize(stream()), "cuda::synchronize: cudaStreamSynchronize"); }

  /// Uninitialised device storage for n elements, stream-ordered on the current device: usable by
  /// attn's operations at once; synchronize() before handing it to other streams.
  template <class T>
  static T* allocate(std::size_t n) {
    if (n == 0) n = 1;
    if (n > (std::size_t(1) << 40) / sizeof(T)) {
      throw Error("cuda::allocate: request of " + std::to_string(n) + " elements is too large");
    }
    const std::size_t bytes = n * sizeof(T);
    const cuda_detail::DeviceState& dev = cuda_detail::current_device();
    void* p = nullptr;
    cudaError_t e = dev.pooled ? cudaMallocAsync(&p, bytes, dev.stream) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cuda_detail::fail(e, std::string("cuda::allocate: ") + (dev.pooled ? "cudaMallocAsync" : "cudaMalloc") + " of " +
                               std::to_string(bytes) + " bytes");
    }
    cuda_detail::allocation_counter().fetch_add(1, std::memory_order_relaxed);
    return static_cast<T*>(p);
  }
  /// Returns p to the pool of the device it came from, ordered after the work already enqueued
  /// there (with several devices in use, that device is made current for the call). Errors are
  /// dropped: this runs in destructors, also while the CUDA runtime is shutting down at exit.
  template <class T>
  static void deallocate(T* p, std::size_t) noexcept {
    if (!p) return;
    try {
      const cuda_detail::DeviceState& current = cuda_detail::current_device();
      const cuda_detail::DeviceState* dev = cuda_detail::owner_device(p);
      if (!dev) return;  // no device of attn's: leave it
      const bool other = dev->device != current.device;
      if (other && cudaSetDevice(dev->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
      }
      cudaError_t e = dev->pooled ? cudaFreeAsync(p, dev->stream) : cudaFree(p);
      if (e != cudaSuccess) (void)cudaGetLastError();
      if (other) (void)cudaSetDevice(current.device);
    } catch (...) {
    }
  }
  /// Number of device allocations made by this backend since the program started.
  static std::uint64_t allocations() noexcept { return cuda_detail::allocation_counter().load(std::memory_order_relaxed); }
  /// Gives the memory cached in the current device's pool back to the driver (waits for attn's stream).
  static void release_cached_memory() {
    const cuda_detail::DeviceState& dev = cuda_detail::current_device();
    if (!dev.pooled) return;
    cuda_detail::check(cudaStreamSynchronize(dev.stream), "cuda::release_cached_memory: cudaStreamSynchronize");
    cudaMemPool_t pool;
    cuda_detail::check(cudaDeviceGetDefaultMemPool(&pool, dev.device), "cuda::release_cached_memory: cudaDeviceGetDefaultMemPool");
    cuda_detail::check(cudaMemPoolTrimTo(pool, 0), "cuda::release_cached_memory: cudaMemPoolTrimTo");
  }

  /// Device to device, n elements.
  template <class T>
  static void copy(T* dst, const T* src, std::size_t n) {
    if (n == 0) return;
    cuda_detail::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream()),
                       "cuda::copy: cudaMemcpyAsync");
  }
  /// Device to host; returns when host[0, n) holds the data (after all earlier attn work).
  template <class T>
  static void to_host(T* host, const T* src, std::size_t n) {
    if (n == 0) return;
    cudaStream_t s = stream();
    cuda_detail::check(cudaMemcpyAsync(host, src, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cuda::to_host: cudaMemcpyAsync");
    cuda_detail::check(cudaStreamSynchronize(s), "cuda::to_host: cudaStreamSynchronize");
  }
  /// Host to device; returns when host may be reused or freed (also for pinned host memory).
  template <class T>
  static void from_host(T* dst, const T* host, std::size_t n) {
    if (n == 0) return;
    cudaStream_t s = stream();
    cuda_detail::check(cudaMemcpyAsync(dst, host, n * sizeof(T), cudaMemcpyHostToDevice, s), "cuda::from_host: cudaMemcpyAsync");
    cuda_detail::check(cudaStreamSynchronize(s), "cuda::from_host: cudaStreamSynchronize");
  }
  /// p[0, n) = v.
  template <class T>
  static void fill(T* p, std::size_t n, T v) {
    if (n == 0) return;
    cuda_detail::fill(cuda_detail::current_device(), p, n, v);
  }

  /// Row-major GEMM: C(m,n) = alpha * op(A)(m,k) * op(B)(k,n) + beta * C. lda/ldb/ldc are row strides.
  /// T is float or double; full FP32/FP64 arithmetic (cuBLAS's default math mode, no TF32).
  template <class T>
  static void gemm(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
                   T* C, int ldc) {
    cuda_detail::gemm<T>(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  /// `batch` GEMMs whose operands start sa/sb/sc elements apart (one cuBLAS call).
  template <class T>
  static void gemm_strided_batched(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda,
                                   long long sa, const T* B, int ldb, long long sb, T beta, T* C, int ldc,
                                   long long sc, int batch) {
    cuda_detail::gemm_strided_batched<T>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
  }

  /// out[i] = f(in[i]...) for i < n, over contiguous device arrays; out may alias an input.
  ///   cuda::map(n, y, attn::expr::Mul{}, a, b);
  template <class T, class F, class... In>
  static void map(std::size_t n, T* out, F f, const In*... in) {
    if (n == 0) return;
    cuda_detail::map(cuda_detail::current_device(), n, out, f, in...);
  }

  /// out (dims, strides) = a bound attn::expr expression, in one kernel. This is how assignments of
  /// lazy expressions to cuda tensors run (attn::expr::assign); the functors must be callable on
  /// the device (ATTN_HD, or extended lambdas).
  template <class T, class Bound>
  static void assign(T* out, const Dims& dims, const Dims& strides, const Bound& e) {
    if (dims.numel() == 0) return;
    cuda_detail::assign(cuda_detail::current_device(), out, dims, strides, e);
  }
};

static_assert(Backend<cuda>);

}  // namespace attn
