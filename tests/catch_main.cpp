// SPDX-License-Identifier: MIT
// The one Catch2 main shared by the CPU test programs (Catch2 itself is attn_catch_impl).
//
// A repeat of a whole test program at a lower kernel level (ATTN_ISA=..., ctest's
// "<program>:all_at_isa_<level>" entries) sets ATTN_TEST_SKIP_AT_BEST_ISA=1: where the level it asks
// for is this machine's best (the plain run's level already) or above it, the program exits with 77,
// which ctest reports as skipped (SKIP_RETURN_CODE), instead of running the same tests twice.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <attn/backend/cpu/isa.hpp>

#include "catch_run.hpp"

int main(int argc, char** argv) {
  const char* skip = std::getenv("ATTN_TEST_SKIP_AT_BEST_ISA");
  const char* level = std::getenv("ATTN_ISA");
  if (skip != nullptr && std::string_view(skip) == "1" && level != nullptr && *level != '\0') {
    try {
      const attn::Isa want = attn::parse_isa(level, "ATTN_ISA");
      const attn::Isa best = attn::detail::isa_supported();
      if (int(want) >= int(best)) {
        std::printf("skipped: ATTN_ISA=%s is %s this machine's best kernel level (%s)\n", level,
                    want == best ? "already" : "above", attn::isa_name(best));
        return 77;
      }
    } catch (const attn::ArgumentError&) {
      // An unknown level: the tests run and report it where attn reads ATTN_ISA.
    }
  }
  return attn_test::run_catch(argc, argv);
}
