// SPDX-License-Identifier: MIT
// The conformance cases on the CPU backend, compiled by g++ (the reference the CUDA runs are
// compared with; see conformance.hpp): the ops, one unit per family so that they compile in parallel.
#include "conformance_ops.hpp"

namespace conformance {

template Result run_ops<float, attn::cpu>(const std::string&, std::uint64_t);
template Result run_ops<double, attn::cpu>(const std::string&, std::uint64_t);

}  // namespace conformance
