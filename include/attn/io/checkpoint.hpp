// SPDX-License-Identifier: MIT
// Saving and loading a module's named parameters (and an optimizer's state) as safetensors,
// with PyTorch's names, so that files move between attn and torch's load_state_dict.
//   attn::io::save(model, "model.safetensors");   attn::io::load(model, "model.safetensors");
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../nn/module.hpp"
#include "../optim/ema.hpp"
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

/// The first F32 or F64 value among `bytes` of dtype `t` for which bad(value as double) holds: its
/// index, or npos (integer dtypes, and no such value).
template <class Bad>
std::size_t first_float_where(DType t, std::span<const std::byte> bytes, Bad&& bad) {
  auto scan = [&]<class T>() -> std::size_t {
    const std::size_t n = bytes.size() / sizeof(T);
    for (std::size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
      if (bad(double(v))) return i;
    }
    return std::string::npos;
  };
  if (t == DType::F32) return scan.template operator()<float>();
  if (t == DType::F64) return scan.template operator()<double>();
  return std::string::npos;
}
/// The same over a tensor of an open file, read in bounded chunks.
template <class Bad>
std::size_t first_float_where(const SafetensorsReader& f, const SafetensorsReader::Entry& e, Bad&& bad) {
  if (e.dtype != DType::F32 && e.dtype != DType::F64) return std::string::npos;
  std::size_t found = std::string::npos;
  f.for_each_chunk(e, [&](const std::byte* b, std::uint64_t offset, std::size_t n) {
    const std::size_t i = first_float_where(e.dtype, {b, n}, bad);
    if (i != std::string::npos) found = static_cast<std::size_t>(offset / dtype_size(e.dtype)) + i;
    return i == std::string::npos;
  });
  return found;
}
inline constexpr auto non_finite = [](double v) { return !std::isfinite(v); };

/// The first non-finite value among `bytes` of dtype `t`: its index, or npos (integer dtypes and
/// finite data). A checkpoint must not bring NaN or infinity into a model or an optimizer.
inline std::size_t first_non_finite(DType t, std::span<const std::byte> bytes) { return first_float_where(t, bytes, non_finite); }
inline std::size_t first_non_finite(const TensorRecord& r) { return first_non_finite(r.dtype, r.bytes); }
inline std::size_t first_non_finite(const SafetensorsReader& f, const SafetensorsReader::Entry& e) {
  return first_float_where(f, e, non_finite);
}
inline std::string non_finite_message(const std::string& name, std::size_t i) {
  return "'" + name + "': non-finite value (NaN or infinity) at element " + std::to_string(i);
}
inline void non_finite_problem(std::vector<std::string>& problems, const std::string& name, const TensorRecord& r) {
  if (const std::size_t i = first_non_finite(r); i != std::string::npos) problems.push_back(non_finite_message(name, i));
}
inline void non_finite_problem(std::vector<std::string>& problems, const std::string& name, const SafetensorsFile&, const TensorRecord& r) {
  non_finite_problem(problems, name, r);
}
inline void non_finite_problem(std::vector<std::string>& problems, const std::string& name, const SafetensorsReader& f,
                               const SafetensorsReader::Entry& e) {
  if (const std::size_t i = first_non_finite(f, e); i != std::string::npos) problems.push_back(non_finite_message(name, i));
}

/// What FileMatch and the state checks need of a file in memory and of an open one alike.
inline const TensorMap& tensor_map(const SafetensorsFile& f) noexcept { return f.tensors; }
inline const std::map<std::string, SafetensorsReader::Entry>& tensor_map(const SafetensorsReader& f) noexcept { return f.tensors(); }
inline const std::string& file_source(const SafetensorsFile& f) noexcept { return f.source; }
inline const std::string& file_source(const SafetensorsReader& f) noexcept { return f.source(); }

/// The error of a value found non-finite at element i of tensor `name` on the second read.
[[noreturn]] inline void changed_while_read(const SafetensorsReader& f, const SafetensorsReader::Entry& e, const std::string& name,
                                            std::size_t i, const char* what) {
  throw FormatError::at_offset(f.source(), e.offset + i * dtype_size(e.dtype),
                               "the file changed while it was being read (" + non_finite_message(name, i) + "); " + what +
                                   " is partially loaded");
}

/// The second read of tensor `name` of `f`, whose every value was found finite when the file was
/// checked: fn(const std::byte* bytes, std::size_t first, std::size_t count) receives its elements
/// [first, first + count) chunk by chunk, each checked again as it arrives. A file changed in
/// place between the check and this read (attn's own files never are: they are replaced by a
/// rename, and an open file keeps its content) is a FormatError saying that `what` (the model, the
/// optimizer) is partially loaded.
template <class F>
void for_each_checked_chunk(const SafetensorsReader& f, const std::string& name, const char* what, F&& fn) {
  const auto& e = f.at(name);
  const std::size_t width = dtype_size(e.dtype);
  f.for_each_chunk(e, [&](const std::byte* b, std::uint64_t offset, std::size_t n) {
    const std::size_t first = static_cast<std::size_t>(offset / width);
    if (const std::size_t i = first_non_finite(e.dtype, {b, n}); i != std::string::npos) changed_while_read(f, e, name, first + i, what);
    fn(b, first, n / width);
  });
}

/// Reads the checked tensor `name` of `f` into `count` elements of T at `dst` on backend B:
/// straight into host memory, through bounded chunks into a device's, checking the values again as
/// for_each_checked_chunk does.
template <class T, class B>
void read_checked(const SafetensorsReader& f, const std::string& name, T* dst, std::size_t count, const char* what) {
  const auto& e = f.at(name);
  if (e.size != count * sizeof(T)) throw std::logic_error("io::read_checked: the tensor's size was not checked");
  if constexpr (B::host_accessible) {
    f.read(e, 0, e.size, dst);
    if (const std::size_t i = first_non_finite(e.dtype, {reinterpret_cast<const std::byte*>(dst), e.size}); i != std::string::npos)
      changed_while_read(f, e, name, i, what);
  } else {
    for_each_checked_chunk(f, name, what, [&](const std::byte* b, std::size_t first, std::size_t n) {
      B::template from_host<T>(dst + first, reinterpret_cast<const T*>(b), n);
    });
  }
}

/// `s` as a double when the whole of it is one (std::from_chars: the C locale's form whatever the
/// program's LC_NUMERIC, the form detail::shortest writes).
inline std::optional<double> parse_double(const std::string& s) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// The first negative value (below -0.0) of an F32 or F64 tensor of an open file, or npos: an
/// Adam second moment never is one, and a negative one makes the next step's square root NaN.
inline std::size_t first_negative(const SafetensorsReader& f, const SafetensorsReader::Entry& e) {
  return first_float_where(f, e, [](double v) { return v < 0; });
}

/// The largest step count an optimizer file may hold: far beyond any real run, and small enough
/// that the step and the bias corrections derived from it stay exact.
inline constexpr long long kMaxOptimizerStep = 1LL << 53;

}  // namespace detail

namespace detail {
/// A parameter's value as a safetensors record in its own dtype.
inline TensorRecord record_of(const nn::ParameterSlot& p) {
  TensorRecord r{file_dtype(p.dtype()), shape_of(p.dims()), std::vector<std::byte>(p.numel() * dtype_size(file_dtype(p.dtype())))};
  p.copy_to_host(r.bytes.data());
  return r;
}
}  // namespace detail

namespace detail {
/// A parameter as a TensorSource: its bytes are read from its storage while the file is written.
inline TensorSource source_of(const nn::ParameterSlot& p) {
  const std::size_t width = dtype_size(file_dtype(p.dtype()));
  return {file_dtype(p.dtype()), shape_of(p.dims()), p.numel() * width,
          [&p, width](std::size_t offset, std::size_t count, std::byte* dst) {
            if (offset % width || count % width) throw ArgumentError("source_of: a chunk splits an element");
            p.copy_to_host(dst, offset / width, count / width);
          }};
}
/// A tensor (sharing its owner's storage) as a TensorSource.
template <class T, class S, class B>
TensorSource source_of(const Tensor<T, S, B>& t) {
  return {file_dtype(dtype_of<T>()), shape_of(t.dims()), t.numel() * sizeof(T),
          [t](std::size_t offset, std::size_t count, std::byte* dst) {
            if (offset % sizeof(T) || count % sizeof(T)) throw ArgumentError("source_of: a chunk splits an element");
            if (count) B::template to_host<T>(reinterpret_cast<T*>(dst), t.data() + offset / sizeof(T), count / sizeof(T));
          }};
}
}  // namespace detail

/// The parameters of `model` as safetensors records, by their dotted names (a copy of every value).
inline TensorMap state_dict(const nn::Module& model) {
  TensorMap m;
  for (auto& [name, p] : model.named_parameters()) m.emplace(name, detail::record_of(*p));
  return m;
}

/// Writes the parameters of `model` to `path` atomically, straight from their storage (no copy of
/// the model in memory: a few MiB of staging, whatever the model's size).
inline void save(const nn::Module& model, const std::filesystem::path& path, const MetadataMap& metadata = {}) {
  SourceMap m;
  for (auto& [name, p] : model.named_parameters()) m.emplace(name, detail::source_of(*p));
  write_safetensors(path, m, metadata);
}

namespace detail {

/// Reads the checked tensor `name` of `f` into parameter `p` (see for_each_checked_chunk).
inline void read_parameter(const SafetensorsReader& f, const std::string& name, nn::ParameterSlot& p) {
  for_each_checked_chunk(f, name, "the model", [&](const std::byte* b, std::size_t first, std::size_t n) { p.copy_from_host(b, first, n); });
}

/// A strict match of a file's tensors (a SafetensorsFile in memory or an open SafetensorsReader)
/// against what a model expects: require() each expected tensor, then unexpected() for what is
/// left over; every difference becomes one line of `problems` (nothing thrown), in the order found.
/// io::load, io::load_state_dict and io::load_quantized.
template <class File>
class FileMatch {
 public:
  using Entry = typename std::remove_cvref_t<decltype(tensor_map(std::declval<const File&>()))>::mapped_type;

  explicit FileMatch(const File& file) : file_(file) {}
  /// The tensor `name` when it is present with `shape` and `dtype` and finite values; else nullptr
  /// and the problems noted.
  const Entry* require(const std::string& name, DType dtype, const std::vector<std::size_t>& shape) {
    const auto& tensors = tensor_map(file_);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      problems.push_back("missing tensor '" + name + "' " + shape_str(shape));
      return nullptr;
    }
    used_.insert(name);
    bool ok = true;
    if (it->second.shape != shape) {
      problems.push_back("'" + name + "': shape " + shape_str(it->second.shape) + " in the file, model has " + shape_str(shape));
      ok = false;
    }
    if (it->second.dtype != dtype) {
      problems.push_back("'" + name + "': dtype " + std::string(dtype_name(it->second.dtype)) + " in the file, model has " +
                         std::string(dtype_name(dtype)));
      ok = false;
    }
    if constexpr (requires { it->second.bytes; }) {  // a record built in memory: its bytes must hold its shape
      const auto n = checked_numel(it->second.shape);
      const std::size_t width = dtype_size(it->second.dtype);
      if (ok && (!n || *n > std::numeric_limits<std::size_t>::max() / width || it->second.bytes.size() != *n * width)) {
        problems.push_back("'" + name + "': " + std::to_string(it->second.bytes.size()) + " bytes, shape " +
                           shape_str(it->second.shape) + " of " + std::string(dtype_name(it->second.dtype)) + " needs " +
                           (n && *n <= std::numeric_limits<std::size_t>::max() / width ? std::to_string(*n * width) : std::string("more")));
        ok = false;
      }
    }
    const std::size_t before = problems.size();
    if (ok) non_finite_problem(problems, name, file_, it->second);
    return ok && problems.size() == before ? &it->second : nullptr;
  }
  /// Notes every tensor no require() asked for, unless its name starts with one of `ignore_prefixes`.
  void unexpected(const std::vector<std::string>& ignore_prefixes = {}) {
    for (auto& [name, r] : tensor_map(file_)) {
      if (used_.count(name)) continue;
      bool ignored = false;
      for (auto& pre : ignore_prefixes) ignored = ignored || name.rfind(pre, 0) == 0;
      if (!ignored) problems.push_back("unexpected tensor '" + name + "' " + shape_str(r.shape));
    }
  }
  /// Throws FormatError "<what> (N differences):" and the list, if there is any problem.
  void throw_if_any(const std::string& what) const {
    if (problems.empty()) return;
    std::string msg = what + " (" + std::to_string(problems.size()) + " difference" + (problems.size() > 1 ? "s" : "") + "):";
    for (auto& p : problems) msg += "\n  " + p;
    throw FormatError::at_offset(file_source(file_), 0, msg);
  }

  std::vector<std::string> problems;

 private:
  const File& file_;
  std::set<std::string> used_;
};

/// load_state_dict's and io::load's checks of `file` against `model` (every name, shape, dtype and
/// value; tensors starting with one of `ignore_prefixes` skipped); throws the FormatError listing
/// every difference. Returns the model's named parameters.
template <class File>
std::vector<std::pair<std::string, nn::ParameterSlot*>> check_fits(const nn::Module& model, const File& file,
                                                                    const std::vector<std::string>& ignore_prefixes) {
  FileMatch match(file);
  auto params = model.named_parameters();
  for (auto& [name, p] : params) match.require(name, file_dtype(p->dtype()), shape_of(p->dims()));
  match.unexpected(ignore_prefixes);
  match.throw_if_any("does not fit the model");
  return params;
}

}  // namespace detail

/// Copies tensors into `model`'s parameters. Every name, shape and dtype must match exactly
/// (strict, like torch's load_state_dict) and every floating-point value must be finite;
/// otherwise nothing is changed and a FormatError lists every difference and names every tensor
/// holding NaN or infinity. Tensors whose names start with a prefix in `ignore_prefixes` are skipped.
inline void load_state_dict(nn::Module& model, const SafetensorsFile& file, const std::vector<std::string>& ignore_prefixes = {}) {
  const auto params = detail::check_fits(model, file, ignore_prefixes);
  for (auto& [name, p] : params) p->copy_from_host(file.tensors.at(name).bytes.data());
}

/// Reads `path` into `model`'s parameters with load_state_dict's checks, every one made before a
/// parameter is changed, without holding the file in memory: the header and the values are
/// checked in one pass over the file, then read a second time straight into the parameters (a few
/// MiB of staging). Returns the file's metadata.
inline MetadataMap load(nn::Module& model, const std::filesystem::path& path) {
  const SafetensorsReader f(path);
  const auto params = detail::check_fits(model, f, {});
  for (auto& [name, p] : params) detail::read_parameter(f, name, *p);
  return f.metadata();
}

namespace detail {

/// Checks that `file` holds exactly the tensors of `state` (an optimizer's moments, an Ema's
/// averages), each with its shape, attn's dtype and finite values; `whose` names the owner in the
/// messages ("the optimizer's", "the parameter's") and `count` what state.size() counts.
template <class T, class State>
void check_state_tensors(const SafetensorsReader& file, const State& state, const char* whose, const std::string& count,
                         std::vector<std::string>& problems) {
  const auto& tensors = file.tensors();
  for (auto& [name, t] : state) {
    auto it = tensors.find(name);
    if (it == tensors.end()) problems.push_back("missing tensor '" + name + "'");
    else if (it->second.shape != shape_of(t.dims()) || it->second.dtype != file_dtype(dtype_of<T>()))
      problems.push_back("'" + name + "': shape or dtype differs from " + whose + " " + t.dims().str());
    else
      non_finite_problem(problems, name, file, it->second);
  }
  if (tensors.size() != state.size()) problems.push_back("the file holds " + std::to_string(tensors.size()) + " tensors, " + count);
}

/// Metadata `key` as a count in [0, 2^53]; a problem if it is missing or is not one (then 0).
inline long long metadata_count(const MetadataMap& md, const char* key, std::vector<std::string>& problems) {
  long long v = 0;
  auto m = md.find(key);
  if (m == md.end()) {
    problems.push_back(std::string("metadata has no '") + key + "'");
    return 0;
  }
  const std::string& sv = m->second;
  auto [ptr, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), v);
  if (ec != std::errc() || ptr != sv.data() + sv.size() || v < 0 || v > kMaxOptimizerStep) {
    problems.push_back(std::string("metadata '") + key + "' is not an integer in [0, 2^53]: '" + sv + "'");
    return 0;
  }
  return v;
}

/// v in the fewest digits that read back as v in its own type ("0.002", "1e-07"; a float -1e-30f
/// as "-1e-30").
template <class R>
  requires std::is_floating_point_v<R>
std::string shortest(R v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// Metadata 'param_steps': one count per parameter, comma-separated, each in [0, step]; the
/// optimizer's own counts (empty: absent, every parameter at `step`).
inline std::vector<long long> metadata_param_steps(const MetadataMap& md, std::size_t params, long long step,
                                                   std::vector<std::string>& problems) {
  const auto m = md.find("param_steps");
  if (m == md.end()) return {};
  std::vector<long long> out;
  const std::string& sv = m->second;
  std::size_t pos = 0;
  while (pos <= sv.size()) {
    const std::size_t end = std::min(sv.find(',', pos), sv.size());
    long long v = -1;
    auto [ptr, ec] = std::from_chars(sv.data() + pos, sv.data() + end, v);
    if (ec != std::errc() || ptr != sv.data() + end || v < 0 || v > step) {
      problems.push_back("metadata 'param_steps' holds '" + sv.substr(pos, end - pos) + "', not an integer in [0, " + std::to_string(step) +
                         "] (the optimizer's step)");
      return {};
    }
    out.push_back(v);
    pos = end + 1;
  }
  if (out.size() != params) {
    problems.push_back("metadata 'param_steps' holds " + std::to_string(out.size()) + " counts for " + std::to_string(params) + " parameters");
    return {};
  }
  return out;
}

/// Throws a FormatError at `file` listing `problems` under `what`, if there are any.
inline void throw_problems(const SafetensorsReader& file, const char* what, const std::vector<std::string>& problems) {
  if (problems.empty()) return;
  std::string msg = what;
  for (auto& p : problems) msg += "\n  " + p;
  throw FormatError::at_offset(file.source(), 0, msg);
}

/// Reads the checked tensors of `file` into `state`'s (which share storage with their owner).
template <class T, class B, class State>
void copy_state(const SafetensorsReader& file, State& state, const char* what) {
  for (auto& [name, t] : state) {
    auto dst = t;
    read_checked<T, B>(file, name, dst.data(), dst.numel(), what);
  }
}

}  // namespace detail

/// Writes an Adam/AdamW optimizer's moments ("<param>.exp_avg", "<param>.exp_avg_sq") and its
/// step count (metadata "step") atomically, for exact resumption; where some parameter had no
/// gradient in some step, also each parameter's own count (metadata "param_steps", in the order
/// of the parameters, comma-separated), torch's per-parameter state['step'].
template <class T, class B>
void save_optimizer(const optim::Adam<T, B>& opt, const std::filesystem::path& path, MetadataMap metadata = {}) {
  SourceMap m;
  for (auto& [name, t] : opt.state()) m.emplace(name, detail::source_of(t));
  metadata["step"] = std::to_string(opt.steps());
  const auto& counts = opt.param_steps();
  if (std::any_of(counts.begin(), counts.end(), [&](long long c) { return c != opt.steps(); })) {
    std::string list;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      if (k) list += ',';
      list += std::to_string(counts[k]);
    }
    metadata["param_steps"] = list;
  } else {
    metadata.erase("param_steps");  // a caller's (from an earlier load_optimizer) would contradict 'step'
  }
  metadata["lr"] = detail::shortest(opt.lr());
  write_safetensors(path, m, metadata);
}

/// Restores what save_optimizer wrote; names, shapes and dtypes must match the optimizer's, every
/// moment must be finite and metadata 'step' an integer in [0, 2^53]. Everything is checked before
/// the optimizer is modified: on a FormatError it is left as it was (unless the file is changed
/// in place while it is read, which the error says). The file is never held whole in memory.
template <class T, class B>
MetadataMap load_optimizer(optim::Adam<T, B>& opt, const std::filesystem::path& path) {
  const SafetensorsReader f(path);
  std::vector<std::string> problems;
  auto state = opt.state();
  detail::check_state_tensors<T>(f, state, "the optimizer's", "the optimizer " + std::to_string(state.size()), problems);
  for (auto& [name, t] : state) {
    const std::string_view suffix = ".exp_avg_sq";
    const auto it = f.tensors().find(name);
    if (it == f.tensors().end() || name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (const std::size_t i = detail::first_negative(f, it->second); i != std::string::npos)
      problems.push_back("'" + name + "': negative value at element " + std::to_string(i) + " (a second moment is never negative)");
  }
  const long long step = detail::metadata_count(f.metadata(), "step", problems);
  const auto counts = detail::metadata_param_steps(f.metadata(), opt.params().size(), step, problems);
  detail::throw_problems(f, "does not fit the optimizer:", problems);
  // Everything is checked: from here on only a file changed in place while being read throws.
  detail::copy_state<T, B>(f, state, "the optimizer");
  opt.set_steps(step);
  if (!counts.empty()) opt.set_param_steps(counts);
  return f.metadata();
}

/// Writes an SGD optimizer's momentum buffers ("<param>.momentum_buffer", torch's state name, for
/// each parameter that has one) atomically, with metadata 'optimizer' ("sgd"), 'momentum' and
/// 'lr'. With momentum 0 the file holds no tensors: SGD then has no state.
template <class T, class B>
void save_optimizer(const optim::Sgd<T, B>& opt, const std::filesystem::path& path, MetadataMap metadata = {}) {
  SourceMap m;
  for (auto& [name, t] : opt.state()) m.emplace(name, detail::source_of(t));
  metadata["optimizer"] = "sgd";
  metadata["momentum"] = detail::shortest(opt.options().momentum);
  metadata["lr"] = detail::shortest(opt.lr());
  write_safetensors(path, m, metadata);
}

/// Restores what save_optimizer wrote for SGD: metadata 'optimizer' "sgd" and 'momentum' the
/// optimizer's own; every tensor the momentum buffer of one of its parameters, of that parameter's
/// shape and attn's dtype, finite. A parameter without a buffer in the file gets none (its next
/// step starts one from the gradient). Everything is checked before the optimizer is modified.
template <class T, class B>
MetadataMap load_optimizer(optim::Sgd<T, B>& opt, const std::filesystem::path& path) {
  const SafetensorsReader f(path);
  const MetadataMap& md = f.metadata();
  std::vector<std::string> problems;
  if (const auto o = md.find("optimizer"); o == md.end() || o->second != "sgd")
    problems.push_back(o == md.end() ? std::string("metadata has no 'optimizer' (an SGD state file says \"sgd\")")
                                     : "metadata 'optimizer' is '" + o->second + "', not 'sgd'");
  if (const auto mo = md.find("momentum"); mo == md.end()) {
    problems.push_back("metadata has no 'momentum'");
  } else {
    const auto mu = detail::parse_double(mo->second);
    if (!mu || *mu != opt.options().momentum)
      problems.push_back("metadata 'momentum' is '" + mo->second + "', the optimizer's momentum is " + detail::shortest(opt.options().momentum));
  }
  // The buffers the file holds, each of its parameter's shape.
  const auto& named = opt.named_params();
  std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> state;
  std::vector<std::size_t> owner;
  for (std::size_t k = 0; k < named.vars.size(); ++k) {
    const std::string name = named.names[k] + ".momentum_buffer";
    if (f.tensors().count(name)) {
      state.push_back({name, Tensor<T, AnyShape, B>(named.vars[k].dims())});
      owner.push_back(k);
    }
  }
  detail::check_state_tensors<T>(f, state, "the parameter's",
                                 std::to_string(state.size()) + " of them momentum buffers of the optimizer's parameters", problems);
  if (opt.options().momentum == 0 && !state.empty())
    problems.push_back("the file holds " + std::to_string(state.size()) + " momentum buffers; the optimizer has momentum 0 and keeps none");
  detail::throw_problems(f, "does not fit the optimizer:", problems);
  detail::copy_state<T, B>(f, state, "the optimizer");
  std::vector<Tensor<T, AnyShape, B>> buffers(named.vars.size());
  for (std::size_t i = 0; i < owner.size(); ++i) buffers[owner[i]] = state[i].second;
  for (std::size_t k = 0; k < buffers.size(); ++k) opt.set_momentum_buffer(k, std::move(buffers[k]));
  return md;
}

/// Writes a parameter average (optim::Ema) atomically: one tensor per parameter under the
/// parameter's own name (so the file also loads into the model as its weights, as a torch
/// AveragedModel's averages do), and metadata 'ema_steps', 'ema_updates', 'ema_decay', 'ema_every'.
/// The Ema must not be swapped (the model would hold the average and the Ema the live weights).
template <class T, class B>
void save_ema(const optim::Ema<T, B>& ema, const std::filesystem::path& path, MetadataMap metadata = {}) {
  if (ema.swapped()) throw std::logic_error("io::save_ema: the Ema is swapped (the model holds the average); swap() back first");
  SourceMap m;
  for (auto& [name, t] : ema.state()) m.emplace(name, detail::source_of(t));
  metadata["ema_steps"] = std::to_string(ema.steps());
  metadata["ema_updates"] = std::to_string(ema.updates());
  metadata["ema_decay"] = detail::shortest(ema.options().decay);
  metadata["ema_every"] = std::to_string(ema.options().every);
  write_safetensors(path, m, metadata);
}

/// Restores what save_ema wrote into an Ema made with the same options: names, shapes and dtypes
/// must match, every value be finite, 'ema_every' equal the Ema's and the counters consistent.
/// Everything is checked first: on a FormatError the Ema is left as it was (unless the file is
/// changed in place while it is read, which the error says). The file is never held whole in memory.
template <class T, class B>
MetadataMap load_ema(optim::Ema<T, B>& ema, const std::filesystem::path& path) {
  if (ema.swapped()) throw std::logic_error("io::load_ema: the Ema is swapped (the model holds the average); swap() back first");
  const SafetensorsReader f(path);
  const MetadataMap& md = f.metadata();
  std::vector<std::string> problems;
  auto state = ema.state();
  detail::check_state_tensors<T>(f, state, "the parameter's", "the model " + std::to_string(state.size()) + " parameters", problems);
  const long long steps = detail::metadata_count(md, "ema_steps", problems);
  const long long updates = detail::metadata_count(md, "ema_updates", problems);
  const long long every = detail::metadata_count(md, "ema_every", problems);
  if (md.count("ema_every") && every != ema.options().every)
    problems.push_back("metadata 'ema_every' is " + std::to_string(every) + ", the Ema folds every " + std::to_string(ema.options().every) + " steps");
  // The decay (written with 6 decimals by earlier versions, so compared to within their rounding).
  if (const auto d = md.find("ema_decay"); d != md.end()) {
    const auto decay = detail::parse_double(d->second);
    if (!decay || !(std::abs(*decay - ema.options().decay) <= 5e-7))
      problems.push_back("metadata 'ema_decay' is '" + d->second + "', the Ema's decay is " + detail::shortest(ema.options().decay));
  }
  if (md.count("ema_steps") && md.count("ema_updates") && every == ema.options().every && updates != steps / every)
    problems.push_back("metadata 'ema_updates' " + std::to_string(updates) + " does not follow from 'ema_steps' " + std::to_string(steps));
  detail::throw_problems(f, "does not fit the parameter average:", problems);
  detail::copy_state<T, B>(f, state, "the parameter average");
  ema.set_counts(steps, updates);
  return md;
}

}  // namespace attn::io
