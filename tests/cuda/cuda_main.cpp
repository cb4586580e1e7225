// SPDX-License-Identifier: MIT
// Catch2 main for the CUDA device tests. Checks for a device before Catch2 starts: without one it
// prints "SKIPPED: no CUDA device (<reason>)" and exits 77, which ctest reports as skipped, unless
// ATTN_CUDA_REQUIRE_DEVICE is set (not "0"), which makes a missing device a failure.
#include "../catch_run.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "device_check.hpp"

int main(int argc, char** argv) {
  const std::string reason = attn_test::cuda_unavailable_reason();
  if (!reason.empty()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", reason.c_str());
    const char* req = std::getenv("ATTN_CUDA_REQUIRE_DEVICE");
    if (req && *req && std::string(req) != "0") {
      std::printf("ATTN_CUDA_REQUIRE_DEVICE=%s: a device is required, so this counts as a failure\n", req);
      return 1;
    }
    return 77;
  }
  std::printf("attn::cuda on %s\n", attn_test::cuda_device_summary().c_str());
  std::fflush(stdout);
  return attn_test::run_catch(argc, argv);
}
