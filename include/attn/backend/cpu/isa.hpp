// SPDX-License-Identifier: MIT
// The instruction-set level attn's own CPU kernels run at, chosen at run time from what the CPU
// reports (cpuid) and what the operating system saves on a context switch (XCR0, read by xgetbv):
// one binary runs its AVX-512 kernels on an AVX-512 machine and its AVX2 kernels on an AVX2 one,
// whatever -march built it. ATTN_ISA=generic|avx2|avx512|avx512_bf16 (or attn::cpu::set_isa) asks for
// a lower level, for tests and comparisons. attn::cpu (backend/cpu.hpp) forwards to these functions.
//   std::printf("kernels: %s\n", attn::isa_name(attn::cpu::isa()));   // "avx512"
//   attn::cpu::set_isa(attn::Isa::avx2);                               // as on an AVX2 machine
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "../../core/error.hpp"

// cpuid and xgetbv in every unit, nvcc's host code too: probe_features() is an inline function, and
// the linker keeps one of its copies for the whole program, so a copy that saw no CPU would lower
// every unit's kernels to generic. ATTN_CPU_X86 (the kernels' intrinsics) stays out of nvcc's units.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define ATTN_CPU_X86_CPUID 1
#if !defined(__CUDACC__)
#define ATTN_CPU_X86 1
#endif
#endif

namespace attn {

/// Kernel levels, lowest first. Each level's kernels need every feature of the levels below it.
enum class Isa : int {
  generic = 0,  // portable code: SSE2 on x86-64, through the compiler and the general GEMM
  avx2 = 1,     // AVX2 + FMA (Haswell, Zen 1 and later)
  avx512 = 2,   // AVX-512 F, CD, BW, DQ, VL (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later)
  avx512_bf16 = 3,  // avx512 plus AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later): the FP32
                    // kernels of avx512, bf16 products by vdpbf16ps instead of conversions
};

/// The level of attn's FP32 kernels at `level`: every level above avx512 runs avx512's.
constexpr Isa fp32_level(Isa level) { return level > Isa::avx512 ? Isa::avx512 : level; }

/// What the CPU and the operating system together allow; extensions that later levels build on are
/// reported even before a kernel level uses them.
struct CpuFeatures {
  bool avx2_fma = false;    // AVX, AVX2, FMA, with YMM state saved by the OS
  bool avx512 = false;      // AVX-512 F/CD/BW/DQ/VL, with opmask and ZMM state saved by the OS
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool amx_tile = false;    // AMX, with tile state enabled in XCR0 (Linux grants it per process on request)
  bool amx_bf16 = false;
  bool amx_int8 = false;
  bool intel = false;       // vendor "GenuineIntel"
  bool amd = false;         // vendor "AuthenticAMD"
};

namespace detail {

#if defined(ATTN_CPU_X86_CPUID)
inline std::uint64_t xgetbv0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
}
#endif

inline CpuFeatures probe_features() {
  CpuFeatures f;
#if defined(ATTN_CPU_X86_CPUID)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  f.intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;  // "Genu" "ineI" "ntel"
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;    // "Auth" "enti" "cAMD"
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
  if (!osxsave || max_leaf < 7) return f;
  const std::uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;                   // XMM and YMM
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;    // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;          // XTILECFG, XTILEDATA
  unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  const bool avx2 = (b7 >> 5) & 1;
  f.avx2_fma = ymm_state && avx && fma && avx2;
  const bool f512 = (b7 >> 16) & 1, dq = (b7 >> 17) & 1, cd = (b7 >> 28) & 1, bw = (b7 >> 30) & 1, vl = (b7 >> 31) & 1;
  f.avx512 = f.avx2_fma && zmm_state && f512 && dq && cd && bw && vl;
  f.avx512_vnni = f.avx512 && ((c7 >> 11) & 1);
  if (a7 >= 1) {
    unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
    // Through pointers: nvcc warns of the macro __cpuid_count's registers that are set and not read.
    __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
    f.avx512_bf16 = f.avx512 && ((a71 >> 5) & 1);
  }
  f.amx_tile = tile_state && ((d7 >> 24) & 1);
  f.amx_bf16 = f.amx_tile && ((d7 >> 22) & 1);
  f.amx_int8 = f.amx_tile && ((d7 >> 25) & 1);
#endif
  return f;
}

inline Isa best_isa(const CpuFeatures& f) {
  return f.avx512_bf16 ? Isa::avx512_bf16 : f.avx512 ? Isa::avx512 : f.avx2_fma ? Isa::avx2 : Isa::generic;
}

inline std::atomic<int>& isa_override() {  // -1: none (ATTN_ISA or the machine's best)
  static std::atomic<int> v{-1};
  return v;
}

}  // namespace detail

inline const char* isa_name(Isa level) {
  switch (level) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "?";
}

/// "generic", "avx2", "avx512" or "avx512_bf16" (also "sse2" for generic, "avx512f" and "avx-512" for
/// avx512, "avx512bf16" for avx512_bf16); throws
/// ArgumentError naming the accepted values otherwise. `what` names the source in the message.
inline Isa parse_isa(std::string_view s, std::string_view what = "ISA level") {
  if (s == "generic" || s == "sse2" || s == "scalar") return Isa::generic;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512" || s == "avx512f" || s == "avx-512") return Isa::avx512;
  if (s == "avx512_bf16" || s == "avx512bf16") return Isa::avx512_bf16;
  throw ArgumentError(std::string(what) + ": unknown level '" + std::string(s) +
                      "' (expected generic, avx2, avx512 or avx512_bf16)");
}

namespace detail {

/// The features of the CPU this process runs on (probed once).
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detail::probe_features();
  return f;
}

/// The best level this machine runs.
inline Isa isa_supported() { return best_isa(cpu_features()); }

/// The level ATTN_ISA asks for, checked once: unset or empty gives the machine's best. A level above
/// the machine's best, or an unknown name, throws ArgumentError naming the variable.
inline Isa isa_from_environment() {
  static const Isa level = [] {
    const char* v = std::getenv("ATTN_ISA");
    if (v == nullptr || *v == '\0') return isa_supported();
    const Isa want = parse_isa(v, "ATTN_ISA");
    if (int(want) > int(isa_supported()))
      throw ArgumentError(std::string("ATTN_ISA=") + v + ": this CPU runs at most " + isa_name(isa_supported()));
    return want;
  }();
  return level;
}

/// The level attn's CPU kernels run at now: set_isa's choice, else ATTN_ISA's, else the machine's best.
inline Isa isa() {
  const int o = isa_override().load(std::memory_order_relaxed);
  return o >= 0 ? Isa(o) : isa_from_environment();
}

/// Runs attn's CPU kernels at `level` from now on (for every thread); throws ArgumentError when the
/// machine cannot. Not meant to be changed while kernels run on other threads.
inline void set_isa(Isa level) {
  if (int(level) > int(isa_supported()))
    throw ArgumentError(std::string("cpu::set_isa: this CPU runs at most ") + isa_name(isa_supported()) + ", not " +
                        isa_name(level));
  isa_override().store(int(level), std::memory_order_relaxed);
}

/// Forgets set_isa's choice: back to ATTN_ISA or the machine's best.
inline void reset_isa() { isa_override().store(-1, std::memory_order_relaxed); }

}  // namespace detail

/// set_isa for a scope, restoring the previous choice at its end (tests and comparisons).
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa level) : previous_(detail::isa_override().load()) { detail::set_isa(level); }
  ~ScopedIsa() { detail::isa_override().store(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int previous_;
};

}  // namespace attn
