// SPDX-License-Identifier: MIT
// `predict --dump FILE`: the batch of all given texts as the model saw it (its input tensors) and
// the logits it gave, written as one safetensors file. A PyTorch model of the same architecture
// loads the run's model.safetensors and must reproduce the logits from these inputs
// (scripts/torch_roundtrip.py); it is how the example models are checked against PyTorch.
#pragma once
#include <attn/io/safetensors.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace examples {

/// A tensor's elements as a safetensors record of dtype d.
template <class T, class S>
attn::io::TensorRecord dump_record(const attn::Tensor<T, S>& t, attn::io::DType d) {
  const auto& dims = t.dims();
  std::vector<std::size_t> shape(dims.v.begin(), dims.v.begin() + dims.n);
  return attn::io::TensorRecord::from_values(d, std::move(shape), t.to_vector());
}

/// The keep mask (batch, time) of a batch's lengths, 1 = real token, as U8.
inline attn::io::TensorRecord dump_lengths_mask(std::span<const int> lengths, std::size_t time) {
  std::vector<std::uint8_t> m(lengths.size() * time, 0);
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::size_t t = 0; t < std::size_t(lengths[b]) && t < time; ++t) m[b * time + t] = 1;
  return attn::io::TensorRecord::from_values(attn::io::DType::U8, {lengths.size(), time}, m);
}

/// Writes the records atomically (an existing file is replaced only once the new one is complete).
inline void write_dump(const std::filesystem::path& path, const attn::io::TensorMap& tensors, const std::string& model) {
  attn::io::write_safetensors(path, tensors, {{"format", "attn predict --dump"}, {"model", model}});
}

}  // namespace examples
