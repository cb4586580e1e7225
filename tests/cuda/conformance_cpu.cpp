// SPDX-License-Identifier: MIT
// The conformance cases on the CPU backend, compiled by g++ (the reference the CUDA runs are
// compared with; see conformance.hpp).
#include "conformance_layers.hpp"
#include "conformance_models.hpp"
#include "conformance_ops.hpp"

namespace conformance {

template Result run_ops<float, attn::cpu>(const std::string&, std::uint64_t);
template Result run_ops<double, attn::cpu>(const std::string&, std::uint64_t);
template Result run_layers<float, attn::cpu>(const std::string&, std::uint64_t);
template Result run_layers<double, attn::cpu>(const std::string&, std::uint64_t);
template Result run_models<attn::cpu>(const std::string&, std::uint64_t);

}  // namespace conformance
