// SPDX-License-Identifier: MIT
// CUDA runtime plumbing for attn::cuda: error checks that throw attn::Error, one stream and memory
// pool per device, cuBLAS loaded on first use and one cuBLAS handle per device per thread, and
// launch sizes for grid-stride kernels.
//   cudaStream_t s = attn::cuda_detail::current_device().stream;
//   check(cublas().sgemm(blas_handle(), ...), "what");   // cuBLAS through the table cublas() loads
#pragma once
#if !defined(__CUDACC__)
#error "attn's CUDA backend must be compiled by nvcc as CUDA: name the source .cu and link attn::cuda"
#endif
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "../../core/error.hpp"

namespace attn::cuda_detail {

/// "cudaErrorMemoryAllocation (2): out of memory".
inline std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e);
}

/// Throws attn::Error("<what>: <CUDA error>"). Clears the runtime's last error first, so that a
/// recoverable failure (out of memory, bad argument) does not resurface in the next unrelated check.
[[noreturn]] inline void fail(cudaError_t e, const std::string& what) {
  (void)cudaGetLastError();
  throw Error(what + ": " + error_text(e));
}
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

/// The cuBLAS functions attn calls, from libcublas.so.<major> opened with dlopen on first use
/// rather than linked: loading cuBLAS and cuBLASLt (about 600 MB of libraries) cost every start of
/// a program built with the CUDA backend about 0.2 s, on the CPU too, and tied it to a machine
/// that has them. Their types come from cublas_v2.h (the _v2 entry points its macros name).
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;
  decltype(&::cublasDgemm_v2) dgemm = nullptr;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&::cublasDgemmStridedBatched) dgemm_strided_batched = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

/// Opens cuBLAS of the major version attn was compiled against: by its soname (the loader's
/// search path: LD_LIBRARY_PATH, ld.so.cache, the program's RUNPATH), else from the directory that
/// libcudart was loaded from (a CUDA toolkit keeps both in its lib directory). Throws attn::Error
/// naming the library and the loader's reason.
inline void* open_cublas() {
  const auto reason = [] {
    const char* e = dlerror();
    return std::string(e ? e : "no reason given");
  };
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  std::string why = reason();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    const std::size_t slash = path.rfind('/');
    if (slash != std::string::npos) {
      path = path.substr(0, slash + 1) + soname;
      if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
      why += "; " + reason();
    }
  }
  throw Error("attn::cuda: cannot load cuBLAS (" + soname + "): " + why);
}

/// The cuBLAS table, loaded once for the process (a failed load throws and is tried again on the
/// next call).
inline const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lib = open_cublas();
    CublasApi a;
    auto bind = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) throw Error(std::string("attn::cuda: cuBLAS lacks ") + name);
    };
    bind(a.create, "cublasCreate_v2");
    bind(a.destroy, "cublasDestroy_v2");
    bind(a.set_stream, "cublasSetStream_v2");
    bind(a.sgemm, "cublasSgemm_v2");
    bind(a.dgemm, "cublasDgemm_v2");
    bind(a.sgemm_strided_batched, "cublasSgemmStridedBatched");
    bind(a.dgemm_strided_batched, "cublasDgemmStridedBatched");
    bind(a.status_name, "cublasGetStatusName");
    bind(a.status_string, "cublasGetStatusString");
    return a;
  }();
  return api;
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    const CublasApi& b = cublas();  // loaded: a status came from it
    throw Error(std::string(what) + ": " + b.status_name(s) + " (" + std::to_string(static_cast<int>(s)) +
                "): " + b.status_string(s));
  }
}
/// Checks the launch of the kernel just enqueued (bad configuration, no image for this GPU, ...).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

/// Devices attn can tell apart; more than any machine it runs on.
inline constexpr int max_devices = 64;

/// What attn keeps for one device for the life of the process: the stream every attn operation on
/// that device is ordered on, whether it has a stream-ordered pool, and its multiprocessor count.
/// The stream is created with default (blocking) flags, so work a user puts on the legacy default
/// stream stays ordered with attn's.
struct DeviceState {
  int device = 0;
  cudaStream_t stream = nullptr;
  bool pooled = false;  // cudaMallocAsync available: frees are stream-ordered and memory is cached
  int multiprocessors = 1;
  int smem_optin = 48 * 1024;  // the most dynamic shared memory a block may opt into
};

/// Process-wide table of DeviceState. Deliberately never destroyed: tensors with static storage may
/// free their memory after every destructor of this header's objects would have run.
struct Registry {
  std::mutex mutex;
  std::atomic<DeviceState*> states[max_devices] = {};
  std::atomic<int> count{0};  // states made: above 1, a free must find the device that owns its pointer
};
inline Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

inline int current_device_index() {
  int d = 0;
  check(cudaGetDevice(&d), "attn::cuda: cudaGetDevice");
  if (d < 0 || d >= max_devices) throw Error("attn::cuda: device index " + std::to_string(d) + " is out of range");
  return d;
}

inline DeviceState* make_device_state(int d) {
  auto s = std::make_unique<DeviceState>();
  s->device = d;
  check(cudaStreamCreate(&s->stream), "attn::cuda: cudaStreamCreate");
  check(cudaDeviceGetAttribute(&s->multiprocessors, cudaDevAttrMultiProcessorCount, d),
        "attn::cuda: cudaDeviceGetAttribute(MultiProcessorCount)");
  check(cudaDeviceGetAttribute(&s->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d),
        "attn::cuda: cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, d),
        "attn::cuda: cudaDeviceGetAttribute(MemoryPoolsSupported)");
  if (pools) {
    // Keep freed blocks in the pool instead of returning them at every synchronisation: the
    // same sizes come back every training step. cuda::release_cached_memory() trims it.
    cudaMemPool_t pool;
    check(cudaDeviceGetDefaultMemPool(&pool, d), "attn::cuda: cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "attn::cuda: cudaMemPoolSetAttribute(ReleaseThreshold)");
    s->pooled = true;
  }
  return s.release();
}

/// The state of the calling thread's current device, created on first use.
inline DeviceState& current_device() {
  const int d = current_device_index();
  Registry& r = registry();
  if (DeviceState* s = r.states[d].load(std::memory_order_acquire)) return *s;
  std::lock_guard<std::mutex> lock(r.mutex);
  DeviceState* s = r.states[d].load(std::memory_order_relaxed);
  if (!s) {
    s = make_device_state(d);
    r.states[d].store(s, std::memory_order_release);
    r.count.fetch_add(1, std::memory_order_release);
  }
  return *s;
}

/// The device state that owns device pointer p where this process uses several devices (the
/// pointer's own device, from cudaPointerGetAttributes), else the current one; nullptr when p's
/// device has no state (not attn's memory).
inline DeviceState* owner_device(const void* p) {
  DeviceState& current = current_device();
  if (registry().count.load(std::memory_order_acquire) <= 1) return &current;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return &current;
  }
  if (attr.device < 0 || attr.device >= max_devices || attr.device == current.device) return &current;
  return registry().states[attr.device].load(std::memory_order_acquire);
}

/// cuBLAS handles are not safe to share between threads, so each thread owns one per device,
/// bound to that device's attn stream. Destroyed when the thread ends.
struct BlasHandles {
  cublasHandle_t handles[max_devices] = {};
  BlasHandles() = default;
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;
  ~BlasHandles() {
    for (cublasHandle_t h : handles) {
      if (h) (void)cublas().destroy(h);
    }
  }
};

inline cublasHandle_t blas_handle() {
  thread_local BlasHandles local;
  DeviceState& dev = current_device();
  cublasHandle_t& h = local.handles[dev.device];
  if (!h) {
    cublasHandle_t made = nullptr;
    const CublasApi& b = cublas();
    check(b.create(&made), "attn::cuda: cublasCreate");
    cublasStatus_t s = b.set_stream(made, dev.stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
      (void)b.destroy(made);
      check(s, "attn::cuda: cublasSetStream");
    }
    h = made;
  }
  return h;
}

/// Threads per block for attn's element-wise kernels.
inline constexpr unsigned block_threads = 256;

/// Blocks for a grid-stride loop over n items: enough to fill every multiprocessor several times,
/// never more than the items need. n > 0.
inline unsigned grid_blocks(std::size_t n, const DeviceState& dev) {
  const std::size_t need = (n + block_threads - 1) / block_threads;
  const std::size_t cap = static_cast<std::size_t>(dev.multiprocessors) * 32;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(need, cap)));
}

/// Why attn::cuda cannot run here, or "" when it can. Probed once per process: a device must be
/// visible and its context must start.
inline const std::string& probe() {
  static const std::string reason = []() -> std::string {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return "cudaGetDeviceCount: " + error_text(e);
    }
    if (count <= 0) return "cudaGetDeviceCount: no CUDA device is visible";
    e = cudaFree(nullptr);  // starts the current device's context: fails on a busy, exclusive or broken device
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return "cudaFree(nullptr) (starting the device context): " + error_text(e);
    }
    return std::string();
  }();
  return reason;
}

}  // namespace attn::cuda_detail
