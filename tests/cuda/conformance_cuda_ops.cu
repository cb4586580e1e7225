// SPDX-License-Identifier: MIT
// The op conformance cases on the CUDA backend (see conformance.hpp). A TU of its own, so that
// the op and layer instantiations compile in parallel.
#include <attn/cuda.hpp>

#include "conformance_ops.hpp"

namespace conformance {

template Result run_ops<float, attn::cuda>(const std::string&, std::uint64_t);
template Result run_ops<double, attn::cuda>(const std::string&, std::uint64_t);

}  // namespace conformance
