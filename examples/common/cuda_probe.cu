// SPDX-License-Identifier: MIT
// The example programs' question to the CUDA runtime (common/device.hpp), compiled by nvcc.
#include <attn/backend/cuda.hpp>

#include <string>

namespace examples {

std::string cuda_unavailable_reason() { return attn::cuda::unavailable_reason(); }

}  // namespace examples
