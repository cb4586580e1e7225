// SPDX-License-Identifier: MIT
// The layer conformance cases on the CUDA backend (see conformance.hpp).
#include <attn/cuda.hpp>

#include "conformance_layers.hpp"

namespace conformance {

template Result run_layers<float, attn::cuda>(const std::string&, std::uint64_t);
template Result run_layers<double, attn::cuda>(const std::string&, std::uint64_t);

}  // namespace conformance
