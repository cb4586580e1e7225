// SPDX-License-Identifier: MIT
// The example programs' models on the CUDA backend (see conformance.hpp).
#include <attn/cuda.hpp>

#include "conformance_models.hpp"

namespace conformance {

template Result run_models<attn::cuda>(const std::string&, std::uint64_t);

}  // namespace conformance
