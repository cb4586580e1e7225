// SPDX-License-Identifier: MIT
// oneDNN's BLAS-like GEMM functions (row-major), loaded at run time from libdnnl.so.2 (Debian's
// libdnnl2) so that the benchmarks can set them beside attn's own GEMMs whether or not attn was
// built against oneDNN. Shared by bench (its --ceiling candidate) and gemm_shapes.
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <string>

namespace bench {

struct OneDnn {
  using Sgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                        std::int64_t, float, float*, std::int64_t);
  using GemmBf16 = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const std::uint16_t*, std::int64_t,
                           const std::uint16_t*, std::int64_t, float, float*, std::int64_t);
  using GemmU8s8 = int (*)(char, char, char, std::int64_t, std::int64_t, std::int64_t, float, const std::uint8_t*, std::int64_t,
                           std::uint8_t, const std::int8_t*, std::int64_t, std::int8_t, float, std::int32_t*, std::int64_t,
                           const std::int32_t*);
  /// dnnl_version_t as oneDNN 2.x declares it.
  struct Version {
    int major, minor, patch;
    const char* hash;
    unsigned cpu_runtime, gpu_runtime;
  };

  Sgemm sgemm = nullptr;
  GemmBf16 bf16 = nullptr;
  GemmU8s8 u8s8 = nullptr;
  std::string name;   // "oneDNN 2.6.3" once loaded
  std::string error;  // why it did not load

  /// Loads the library; loaded() says whether every function was found.
  OneDnn() {
    void* h = ::dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      error = std::string("cannot load libdnnl.so.2: ") + (e ? e : "unknown error");
      return;
    }
    auto s = reinterpret_cast<Sgemm>(::dlsym(h, "dnnl_sgemm"));
    auto b = reinterpret_cast<GemmBf16>(::dlsym(h, "dnnl_gemm_bf16bf16f32"));
    auto u = reinterpret_cast<GemmU8s8>(::dlsym(h, "dnnl_gemm_u8s8s32"));
    auto version = reinterpret_cast<const Version* (*)()>(::dlsym(h, "dnnl_version"));
    if (!s || !b || !u || !version) {
      error = "libdnnl.so.2 lacks one of dnnl_sgemm, dnnl_gemm_bf16bf16f32, dnnl_gemm_u8s8s32, dnnl_version";
      return;
    }
    const Version* v = version();
    sgemm = s, bf16 = b, u8s8 = u;
    name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  }
  bool loaded() const { return sgemm != nullptr; }
};

}  // namespace bench
