// SPDX-License-Identifier: MIT
// Saving and loading a module's named parameters (and an optimizer's state) as safetensors,
// with PyTorch's names, so that files move between attn and torch's load_state_dict.
//   attn::io::save(model, "model.safetensors");   attn::io::load(model, "model.safetensors");
#pragma once
#include <charconv>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../nn/module.hpp"
#include "../optim/optimizer.hpp"
#include "safetensors.hpp"

namespace attn::io {

namespace detail {
inline DType file_dtype(attn::DType t) {
  switch (t) {
    case attn::DType::f32: return DType::F32;
    case attn::DType::f64: return DType::F64;
    case attn::DType::i64: return DType::I64;
    case attn::DType::i32: return DType::I32;
    case attn::DType::u8: return DType::U8;
  }
  return DType::F32;
}
inline std::vector<std::size_t> shape_of(const Dims& d) { return {d.v.begin(), d.v.begin() + d.n}; }

template <class T, class S, class B>
TensorRecord record_of(const Tensor<T, S, B>& t) {
  TensorRecord r{file_dtype(dtype_of<T>()), shape_of(t.dims()), std::vector<std::byte>(t.numel() * sizeof(T))};
  if (t.numel()) B::template to_host<T>(reinterpret_cast<T*>(r.bytes.data()), t.data(), t.numel());
  return r;
}
}  // namespace detail

/// The parameters of `model` as safetensors records, by their dotted names.
inline TensorMap state_dict(const nn::Module& model) {
  TensorMap m;
  for (auto& [name, p] : model.named_parameters()) {
    TensorRecord r{detail::file_dtype(p->dtype()), detail::shape_of(p->dims()), std::vector<std::byte>(p->numel() * dtype_size(detail::file_dtype(p->dtype())))};
    p->copy_to_host(r.bytes.data());
    m.emplace(name, std::move(r));
  }
  return m;
}

/// Writes the parameters of `model` to `path` atomically.
inline void save(const nn::Module& model, const std::filesystem::path& path, const MetadataMap& metadata = {}) {
  write_safetensors(path, state_dict(model), metadata);
}

/// Copies tensors into `model`'s parameters. Every name, shape and dtype must match exactly
/// (strict, like torch's load_state_dict); otherwise nothing is changed and a FormatError lists
/// every difference. Tensors whose names start with a prefix in `ignore_prefixes` are skipped.
inline void load_state_dict(nn::Module& model, const SafetensorsFile& file, const std::vector<std::string>& ignore_prefixes = {}) {
  std::vector<std::string> problems;
  std::set<std::string> used;
  auto params = model.named_parameters();
  for (auto& [name, p] : params) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      problems.push_back("missing tensor '" + name + "' " + p->dims().str());
      continue;
    }
    used.insert(name);
    const auto want_shape = detail::shape_of(p->dims());
    const auto want_dtype = detail::file_dtype(p->dtype());
    if (it->second.shape != want_shape)
      problems.push_back("'" + name + "': shape " + attn::io::detail::shape_str(it->second.shape) + " in the file, model has " +
                         attn::io::detail::shape_str(want_shape));
    if (it->second.dtype != want_dtype)
      problems.push_back("'" + name + "': dtype " + std::string(dtype_name(it->second.dtype)) + " in the file, model has " +
                         std::string(dtype_name(want_dtype)));
  }
  for (auto& [name, r] : file.tensors) {
    if (used.count(name)) continue;
    bool ignored = false;
    for (auto& pre : ignore_prefixes) ignored = ignored || name.rfind(pre, 0) == 0;
    if (!ignored) problems.push_back("unexpected tensor '" + name + "' " + attn::io::detail::shape_str(r.shape));
  }
  if (!problems.empty()) {
    std::string msg = "does not fit the model (" + std::to_string(problems.size()) + " difference" +
                      (problems.size() > 1 ? "s" : "") + "):";
    for (auto& p : problems) msg += "\n  " + p;
    throw FormatError::at_offset(file.source, 0, msg);
  }
  for (auto& [name, p] : params) p->copy_from_host(file.tensors.at(name).bytes.data());
}

/// Reads `path` and loads it into `model` (see load_state_dict). Returns the file's metadata.
inline MetadataMap load(nn::Module& model, const std::filesystem::path& path) {
  auto f = read_safetensors(path);
  load_state_dict(model, f);
  return f.metadata;
}

/// Writes an Adam/AdamW optimizer's moments ("<param>.exp_avg", "<param>.exp_avg_sq") and its
/// step count (metadata "step") atomically, for exact resumption.
template <class T, class B>
void save_optimizer(const optim::Adam<T, B>& opt, const std::filesystem::path& path, MetadataMap metadata = {}) {
  TensorMap m;
  for (auto& [name, t] : opt.state()) m.emplace(name, detail::record_of(t));
  metadata["step"] = std::to_string(opt.steps());
  metadata["lr"] = std::to_string(opt.lr());
  write_safetensors(path, m, metadata);
}

/// Restores what save_optimizer wrote; names, shapes and dtypes must match the optimizer's.
template <class T, class B>
MetadataMap load_optimizer(optim::Adam<T, B>& opt, const std::filesystem::path& path) {
  auto f = read_safetensors(path);
  std::vector<std::string> problems;
  auto state = opt.state();
  for (auto& [name, t] : state) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) problems.push_back("missing tensor '" + name + "'");
    else if (it->second.shape != detail::shape_of(t.dims()) || it->second.dtype != detail::file_dtype(dtype_of<T>()))
      problems.push_back("'" + name + "': shape or dtype differs from the optimizer's " + t.dims().str());
  }
  if (f.tensors.size() != state.size()) problems.push_back("the file holds " + std::to_string(f.tensors.size()) + " tensors, the optimizer " + std::to_string(state.size()));
  if (!f.metadata.count("step")) problems.push_back("metadata has no 'step'");
  if (!problems.empty()) {
    std::string msg = "does not fit the optimizer:";
    for (auto& p : problems) msg += "\n  " + p;
    throw FormatError::at_offset(f.source, 0, msg);
  }
  for (auto& [name, t] : state) {
    auto& r = f.tensors.at(name);
    auto dst = t;  // shares storage with the optimizer's moment
    B::template from_host<T>(dst.data(), reinterpret_cast<const T*>(r.bytes.data()), dst.numel());
  }
  long long step = 0;
  const std::string& sv = f.metadata.at("step");
  auto [ptr, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), step);
  if (ec != std::errc() || ptr != sv.data() + sv.size() || step < 0)
    throw FormatError::at_offset(f.source, 8, "metadata 'step' is not a non-negative integer: '" + sv + "'");
  opt.set_steps(step);
  return f.metadata;
}

}  // namespace attn::io
