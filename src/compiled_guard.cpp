// SPDX-License-Identifier: MIT
// attn::compiled's start-up check. Its units are compiled with attn's flags, -march=native when
// ATTN_NATIVE is on, so the compiler may use the building machine's extensions anywhere in them (not
// only in the kernels that attn dispatches at run time). A program linked with such a library on a CPU
// without them would stop with SIGILL at some later point; this check names what is missing and exits
// with status 1 before any of that code runs (a constructor of the highest user priority).
//
// This unit is compiled for plain x86-64 (CMakeLists.txt) and shares no inline function with the
// other units: the linker keeps one copy of each inline function, and it could be a -march=native one.
// So it uses C's stdio and the compiler's __builtin_cpu_supports only.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "compiled_march.hpp"

extern "C" const unsigned attn_compiled_march;
extern "C" const int attn_compiled_guard_anchor = 0;

extern "C" unsigned attn_compiled_cpu_features() {
  unsigned have = 0;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx")) have |= ATTN_MARCH_AVX;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) have |= ATTN_MARCH_AVX2_FMA;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    have |= ATTN_MARCH_AVX512;
  if (__builtin_cpu_supports("avx512bf16")) have |= ATTN_MARCH_AVX512_BF16;
  if (__builtin_cpu_supports("avx512vnni")) have |= ATTN_MARCH_AVX512_VNNI;
#else
  have = ~0u;  // another architecture: its -march has no such bits
#endif
  return have;
}

/// The extensions of `required` missing from `have`, comma-separated into buf (empty when none);
/// returns whether any is missing.
extern "C" int attn_compiled_missing_features(unsigned required, unsigned have, char* buf, std::size_t size) {
  static const struct {
    unsigned bit;
    const char* name;
  } names[] = {{ATTN_MARCH_AVX, "AVX"},
               {ATTN_MARCH_AVX2_FMA, "AVX2/FMA"},
               {ATTN_MARCH_AVX512, "AVX-512 (F/CD/BW/DQ/VL)"},
               {ATTN_MARCH_AVX512_BF16, "AVX512-BF16"},
               {ATTN_MARCH_AVX512_VNNI, "AVX512-VNNI"}};
  if (size > 0) buf[0] = '\0';
  int missing = 0;
  for (const auto& n : names) {
    if ((required & n.bit) == 0 || (have & n.bit) != 0) continue;
    if (size > 0) {
      if (missing) std::strncat(buf, ", ", size - std::strlen(buf) - 1);
      std::strncat(buf, n.name, size - std::strlen(buf) - 1);
    }
    missing = 1;
  }
  return missing;
}

namespace {
__attribute__((constructor(101))) void attn_compiled_guard() {
  char missing[160];
  if (!attn_compiled_missing_features(attn_compiled_march, attn_compiled_cpu_features(), missing, sizeof missing)) return;
  std::fprintf(stderr,
               "attn: this program's attn::compiled library was compiled for CPUs with %s (-march=native on the "
               "machine that built it), and this CPU lacks it; build attn with -DATTN_NATIVE=OFF for a library "
               "that runs on any x86-64 CPU (its kernels still choose AVX2 or AVX-512 at run time)\n",
               missing);
  std::_Exit(EXIT_FAILURE);
}
}  // namespace
