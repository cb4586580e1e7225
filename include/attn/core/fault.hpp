// SPDX-License-Identifier: MIT
// A fault-injection point for testing crash consistency: with ATTN_FAULT_AFTER_WRITES=N in the
// environment, the process ends with _exit(kFaultExitCode) at the N-th file-system step it takes
// (a temporary file fully written, a rename done, a line appended), as a kill -9 would. Unset,
// empty or 0: never. Every atomic writer of attn and the example programs' logs call fault_point().
#pragma once
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace attn {

/// The exit status of a process ended by ATTN_FAULT_AFTER_WRITES.
inline constexpr int kFaultExitCode = 86;

/// Counts one file-system step; ends the process at the step ATTN_FAULT_AFTER_WRITES names.
inline void fault_point() noexcept {
  static const unsigned long long limit = [] {
    const char* e = std::getenv("ATTN_FAULT_AFTER_WRITES");
    if (e == nullptr || *e == '\0') return 0ULL;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    return *end == '\0' ? v : 0ULL;
  }();
  if (limit == 0) return;
  static std::atomic<unsigned long long> count{0};
  if (count.fetch_add(1) + 1 == limit) ::_exit(kFaultExitCode);
}

}  // namespace attn
