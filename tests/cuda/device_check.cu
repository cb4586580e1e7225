// SPDX-License-Identifier: MIT
// The device check of the CUDA test main (see device_check.hpp).
#include "device_check.hpp"

#include <attn/backend/cuda.hpp>

#include <cstdio>

namespace attn_test {

std::string cuda_unavailable_reason() { return attn::cuda::unavailable_reason(); }

std::string cuda_device_summary() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "device properties unavailable";
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "device %d: %s, sm_%d%d, %d multiprocessors, %.1f GiB", dev, prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
  return buf;
}

}  // namespace attn_test
