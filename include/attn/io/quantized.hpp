// SPDX-License-Identifier: MIT
// A dynamically quantized model (nn::quantize_dynamic) as one safetensors file: each product weight
// as its int8 values (I8, (Out, In), PyTorch's names) with its per-channel scales beside it
// ("<name>.scale", F32, (Out)), every other parameter in F32 as io::save writes it. A quarter of
// the float file for the weights, and the exact int8 values back on load.
//   attn::io::save_quantized(model, "model.int8.safetensors");
//   attn::io::load_quantized(model, "model.int8.safetensors");   // then run under Precision::int8
// Loading sets each product weight's float value to its dequantized values (q scale), so the
// model also runs fp32 on the file's weights, and keeps the file's int8 values for int8 runs.
// torch reads the file with safetensors' load_file; dequantized, the weights load into the
// float model's load_state_dict.
#pragma once
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../nn/quantize.hpp"
#include "checkpoint.hpp"

namespace attn::io {

/// The metadata key save_quantized writes and load_quantized requires, and its value.
inline constexpr const char* kQuantizationKey = "attn.quantization";
inline constexpr const char* kQuantizationValue = "int8 per-channel symmetric weights, dynamic activations";

/// The parameters of `model` with its product weights in int8 (quantized now unless current).
inline TensorMap quantized_state_dict(const nn::Module& model) {
  TensorMap m;
  for (auto& [name, p] : model.named_parameters()) {
    const bool product = p->product_weight && p->dims().n == 2;
    VarData<float, cpu>* d = product ? nn::detail::float_cpu_data(p) : nullptr;
    if (product && !d)
      throw ArgumentError("save_quantized: '" + name + "': int8 product weights are float weights on the CPU (as for nn::quantize_dynamic); "
                          "this one is " + std::string(dtype_name(detail::file_dtype(p->dtype()))) + " on " + std::string(p->backend_name()));
    if (!d) {
      m.emplace(name, detail::record_of(*p));
      continue;
    }
    std::shared_ptr<const kernels::PackedInt8> pack;
    try {
      pack = attn::detail::int8_weight(*d);
    } catch (const ArgumentError& e) {
      throw ArgumentError("save_quantized: '" + name + "': " + e.what());
    }
    const std::vector<std::int8_t> q = pack->values();
    m.emplace(name, TensorRecord::from_values(DType::I8, detail::shape_of(p->dims()), q));
    m.emplace(name + ".scale", TensorRecord::from_values(DType::F32, {std::size_t(pack->n())},
                                                          std::vector<float>(pack->scales(), pack->scales() + pack->n())));
  }
  return m;
}

/// Writes `model` with int8 product weights to `path` atomically (see the top of this file).
inline void save_quantized(const nn::Module& model, const std::filesystem::path& path, MetadataMap metadata = {}) {
  metadata[kQuantizationKey] = kQuantizationValue;
  write_safetensors(path, quantized_state_dict(model), metadata);
}

namespace detail {
/// The first element of a quantized weight's scales that is not a usable scale (positive, and 128
/// times it finite), or npos.
inline std::size_t bad_scale(const std::vector<float>& v) {
  for (std::size_t j = 0; j < v.size(); ++j)
    if (!(v[j] > 0.f) || !std::isfinite(v[j] * 128.f)) return j;
  return std::string::npos;
}
}  // namespace detail

/// Loads a file save_quantized wrote into `model`. Every name, shape and dtype must fit (product
/// weights I8 with an F32 ".scale" of finite, positive values; everything else as io::load wants
/// it), and every float value must be finite; otherwise nothing changes and a FormatError lists
/// every difference. As io::load, it checks the file in one pass and reads it into the model in a
/// second, without holding the file in memory (only one int8 weight at a time). Returns the file's
/// metadata.
inline MetadataMap load_quantized(nn::Module& model, const std::filesystem::path& path) {
  const SafetensorsReader file(path);
  detail::FileMatch match(file);
  auto& problems = match.problems;
  if (const auto it = file.metadata().find(kQuantizationKey); it == file.metadata().end())
    problems.push_back(std::string("no '") + kQuantizationKey + "' entry in the metadata: not a file io::save_quantized wrote");
  else if (it->second != kQuantizationValue)
    problems.push_back(std::string("metadata '") + kQuantizationKey + "' is '" + it->second + "', not '" + kQuantizationValue +
                       "': another quantization scheme");
  auto params = model.named_parameters();
  for (auto& [name, p] : params) {
    const auto shape = detail::shape_of(p->dims());
    if (p->product_weight && p->dims().n == 2 && nn::detail::float_cpu_data(p)) {
      if (shape[1] > std::size_t(kernels::PackedInt8::kMaxK))
        problems.push_back("'" + name + "': an input width of " + std::to_string(shape[1]) + " exceeds " +
                           std::to_string(kernels::PackedInt8::kMaxK) + ", the longest int8 product whose int32 sums cannot overflow");
      match.require(name, DType::I8, shape);
      if (const auto* s = match.require(name + ".scale", DType::F32, {shape[0]})) {
        const auto v = file.record(*s).to_vector<float>();
        if (const std::size_t j = detail::bad_scale(v); j != std::string::npos)
          problems.push_back("'" + name + ".scale': element " + std::to_string(j) + " (byte offset " +
                             std::to_string(s->offset + j * sizeof(float)) + ") is " + detail::shortest(v[j]) +
                             " (a scale must be positive, and 128 times it finite)");
      }
    } else {
      match.require(name, detail::file_dtype(p->dtype()), shape);
    }
  }
  match.unexpected();
  match.throw_if_any("does not fit the model as a quantized file");
  // Everything checked: below, only a file changed in place while it is read can fail.
  for (auto& [name, p] : params) {
    VarData<float, cpu>* d = p->product_weight && p->dims().n == 2 ? nn::detail::float_cpu_data(p) : nullptr;
    if (!d) {
      detail::read_parameter(file, name, *p);
      continue;
    }
    const auto q = file.record(file.at(name)).to_vector<std::int8_t>();
    const auto& se = file.at(name + ".scale");
    const auto s = file.record(se).to_vector<float>();
    if (const std::size_t j = detail::bad_scale(s); j != std::string::npos)
      throw FormatError::at_offset(file.source(), se.offset + j * sizeof(float),
                                   "the file changed while it was being read ('" + name + ".scale': element " + std::to_string(j) +
                                       " is not a usable scale); the model is partially loaded");
    const std::size_t out = p->dims().v[0], in = p->dims().v[1];
    std::vector<float> w(out * in);
    for (std::size_t j = 0; j < out; ++j)
      for (std::size_t k = 0; k < in; ++k) w[j * in + k] = float(q[j * in + k]) * s[j];
    p->copy_from_host(w.data());  // advances value_writes; the pack below is kept against the new count
    auto pack = std::make_shared<kernels::PackedInt8>();
    pack->assign(int(in), int(out), q, s);
    attn::detail::keep_pack<kernels::PackedInt8>(*d, attn::detail::PackKind::int8_wt, std::shared_ptr<const kernels::PackedInt8>(pack),
                                                 d->value_writes);
  }
  return file.metadata();
}

}  // namespace attn::io
