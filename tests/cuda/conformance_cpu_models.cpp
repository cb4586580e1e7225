// SPDX-License-Identifier: MIT
// The conformance cases on the CPU backend, compiled by g++ (the reference the CUDA runs are
// compared with; see conformance.hpp): the models, one unit per family so that they compile in parallel.
#include "conformance_models.hpp"

namespace conformance {

template Result run_models<attn::cpu>(const std::string&, std::uint64_t);

}  // namespace conformance
