// SPDX-License-Identifier: MIT
// JSON files of the example programs (config.json, state.json, metrics.jsonl): reading with
// errors that name the file and the field, range-checked fields, appending lines.
#pragma once
#include <attn/core/error.hpp>
#include <attn/data/file_io.hpp>
#include <attn/core/fault.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

namespace examples {

/// A field of a JSON file that is missing, mistyped or out of range; with_json_file turns it into
/// the FormatError "path: field NAME: what".
struct FieldError : std::runtime_error {
  FieldError(std::string name, const std::string& what) : std::runtime_error(what), field(std::move(name)) {}
  std::string field;
};

namespace json_detail {
inline const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& name) {
  if (!j.is_object()) throw FieldError(name, "the enclosing value is not an object");
  const auto it = j.find(key);
  if (it == j.end()) throw FieldError(name, "missing");
  return *it;
}
inline std::string num(double v) {
  std::string s = nlohmann::json(v).dump();
  return s;
}
}  // namespace json_detail

/// An integer field in [lo, hi]. A negative, fractional, too large or non-numeric value is a
/// FieldError (never a wrapped or undefined conversion).
inline std::uint64_t json_count(const nlohmann::json& j, const std::string& key, std::uint64_t lo, std::uint64_t hi,
                                const std::string& prefix = "") {
  const std::string name = prefix + key;
  const auto& v = json_detail::field(j, key, name);
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  std::uint64_t u = 0;
  if (v.is_number_unsigned()) {
    u = v.get<std::uint64_t>();
  } else if (v.is_number_integer()) {
    throw FieldError(name, v.dump() + " is outside " + range);  // negative
  } else {
    throw FieldError(name, "expected an integer in " + range + ", found " + v.dump());
  }
  if (u < lo || u > hi) throw FieldError(name, v.dump() + " is outside " + range);
  return u;
}

/// A finite number in [lo, hi].
inline double json_real(const nlohmann::json& j, const std::string& key, double lo, double hi, const std::string& prefix = "") {
  const std::string name = prefix + key;
  const auto& v = json_detail::field(j, key, name);
  const std::string range = "[" + json_detail::num(lo) + ", " + json_detail::num(hi) + "]";
  if (!v.is_number()) throw FieldError(name, "expected a number in " + range + ", found " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) throw FieldError(name, v.dump() + " is outside " + range);
  return d;
}

/// A finite number in [lo, hi], or null (returned as NaN: not measured).
inline double json_real_or_nan(const nlohmann::json& j, const std::string& key, double lo, double hi, const std::string& prefix = "") {
  if (j.is_object() && j.contains(key) && j.at(key).is_null()) return std::numeric_limits<double>::quiet_NaN();
  return json_real(j, key, lo, hi, prefix);
}

inline bool json_bool(const nlohmann::json& j, const std::string& key, const std::string& prefix = "") {
  const auto& v = json_detail::field(j, key, prefix + key);
  if (!v.is_boolean()) throw FieldError(prefix + key, "expected true or false, found " + v.dump());
  return v.get<bool>();
}

inline std::string json_string(const nlohmann::json& j, const std::string& key, const std::string& prefix = "") {
  const auto& v = json_detail::field(j, key, prefix + key);
  if (!v.is_string()) throw FieldError(prefix + key, "expected a string, found " + v.dump());
  return v.get<std::string>();
}

/// Parses a JSON file; a malformed one is a FormatError naming the file and the byte offset.
inline nlohmann::json read_json(const std::filesystem::path& p, std::uintmax_t max_bytes = 1 << 24) {
  const std::string text = attn::data::read_file(p, max_bytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw attn::FormatError::at_offset(p.string(), e.byte, e.what());
  }
}

/// Runs f(json) on the parsed file; a missing, mistyped or out-of-range field is a FormatError
/// naming the file (and, for a FieldError, the field).
template <class F>
auto with_json_file(const std::filesystem::path& p, F&& f);

/// Runs f(j) on JSON already read from p, with with_json_file's errors.
template <class F>
auto with_json(const std::filesystem::path& p, const nlohmann::json& j, F&& f) {
  try {
    return f(j);
  } catch (const FieldError& e) {
    throw attn::FormatError::in_field(p.string(), e.field, e.what());
  } catch (const nlohmann::json::exception& e) {
    throw attn::FormatError(p.string(), 1, std::string("unexpected content: ") + e.what());
  }
}

template <class F>
auto with_json_file(const std::filesystem::path& p, F&& f) {
  const auto j = read_json(p);
  return with_json(p, j, std::forward<F>(f));
}

/// Appends one line to a JSON-lines file.
inline void append_line(const std::filesystem::path& p, const std::string& line) {
  {
    errno = 0;
    std::ofstream f(p, std::ios::app);
    f << line << "\n";
    f.flush();
    if (!f) throw attn::IoError(p.string(), std::string("cannot append a line") + (errno ? std::string(": ") + std::strerror(errno) : ""));
  }
  attn::fault_point();
}

}  // namespace examples
