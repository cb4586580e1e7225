// SPDX-License-Identifier: MIT
// The layer conformance cases on the CUDA backend (see conformance.hpp).
#include <attn/cuda.hpp>

#include "conformance_layers.hpp"

namespace conformance {

template Result run_layers<float, attn::cuda>(const std::string&, std::uint64_t);
template Result run_layers<double, attn::cuda>(const std::string&, std::uint64_t);

/// nn::Attention instantiates for the CUDA backend (its projections are the op attn::linear, its
/// kernels the op self_attention's; nothing in nn/ needs host memory), under both padded-row
/// modes and with each form of mask (core/mask.hpp: a KeepMask on the device is read through a host
/// copy; Lengths become a device mask). Compiled only: no conformance case compares it with the CPU yet.
template <class T>
attn::Var<T, attn::Shape<attn::dyn, attn::dyn, 8>, attn::cuda> attention_compiles(
    attn::Tape& tape, const attn::Var<T, attn::Shape<attn::dyn, attn::dyn, 8>, attn::cuda>& x,
    const attn::Tensor<T, attn::Shape<attn::dyn, attn::dyn>, attn::cuda>& mask) {
  attn::nn::Attention<2, 8, T, attn::cuda> plain(nullptr, "plain");
  attn::nn::Attention<2, 8, T, attn::cuda> packed(nullptr, "packed", {.padded = attn::nn::PaddedRows::zero});
  const auto lengths = attn::mask_lengths(attn::KeepMask(mask), x.size(0), x.size(1), "attention_compiles");
  const attn::Lengths batch(std::vector<int>(lengths.begin(), lengths.end()));
  return packed(tape, plain(tape, x, attn::PaddingMask(mask)), batch);
}
template attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 8>, attn::cuda> attention_compiles<float>(
    attn::Tape&, const attn::Var<float, attn::Shape<attn::dyn, attn::dyn, 8>, attn::cuda>&,
    const attn::Tensor<float, attn::Shape<attn::dyn, attn::dyn>, attn::cuda>&);

}  // namespace conformance
