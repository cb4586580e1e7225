// SPDX-License-Identifier: MIT
// `predict --dump FILE`: the batch of all given texts as the model saw it (its input tensors) and
// the logits it gave, written as one safetensors file. A PyTorch model of the same architecture
// loads the run's model.safetensors and must reproduce the logits from these inputs
// (scripts/torch_roundtrip.py); it is how the example models are checked against PyTorch.
#pragma once
#include <attn/core/tensor.hpp>
#include <attn/io/safetensors.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

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

inline constexpr const char* kDumpFormat = "attn predict --dump";

/// Checks, before anything is predicted, that `path` can take a dump: its directory exists and can
/// be written, and the path is new or holds an earlier dump (which the new one replaces). Any other
/// file there, a model or checkpoint given by mistake say, is refused and kept.
inline void check_dump_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::exists(st)) {
    if (!fs::is_regular_file(st)) throw attn::IoError(path.string(), "--dump: exists and is not a file");
    bool dump = false;
    try {
      const attn::io::SafetensorsReader reader(path);
      const auto it = reader.metadata().find("format");
      dump = it != reader.metadata().end() && it->second == kDumpFormat;
    } catch (const std::exception&) {
    }
    if (!dump)
      throw attn::ArgumentError(fmt::format("--dump {}: the file exists and is not an earlier predict --dump output; it is kept: "
                                            "remove it, or give another path",
                                            path.string()));
  }
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const auto pst = fs::status(parent, ec);
  if (!fs::is_directory(pst)) throw attn::IoError(parent.string(), "--dump: no such directory");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw attn::IoError(parent.string(), fmt::format("--dump: cannot write into this directory: {}", std::strerror(errno)));
}

/// Writes the records atomically (an existing file is replaced only once the new one is complete).
inline void write_dump(const std::filesystem::path& path, const attn::io::TensorMap& tensors, const std::string& model) {
  attn::io::write_safetensors(path, tensors, {{"format", kDumpFormat}, {"model", model}});
}

}  // namespace examples
