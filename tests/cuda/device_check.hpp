// SPDX-License-Identifier: MIT
// What the CUDA test main asks before Catch2 starts: is there a device, and which one.
// Defined in device_check.cu (nvcc), called from cuda_main.cpp (g++).
#pragma once
#include <string>

namespace attn_test {

/// attn::cuda::unavailable_reason(): "" when a device is usable.
std::string cuda_unavailable_reason();
/// "device 0: NVIDIA H200, sm_90, 132 multiprocessors, 139.8 GiB".
std::string cuda_device_summary();

}  // namespace attn_test
