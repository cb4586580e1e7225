// SPDX-License-Identifier: MIT
// Error types thrown by attn. Every message names what failed and where.
//   try { io::load(model, "m.safetensors"); } catch (const attn::FormatError& e) { std::cerr << e.what(); }
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attn {

/// Base class of every exception attn throws.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A run-time extent mismatch; the message names the op and both shapes.
struct ShapeError : Error {
  using Error::Error;
};

/// A file could not be opened, read or written.
struct IoError : Error {
  IoError(const std::string& path, const std::string& what) : Error(path + ": " + what), path_(path) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// Malformed content. The message is "path: line N: what", "path: byte offset N: what", or for a
/// value of a structured file (a JSON configuration) "path: field NAME: what".
struct FormatError : IoError {
  enum class Kind { line, offset, field };
  FormatError(const std::string& path, std::uint64_t line, const std::string& what)
      : IoError(path, "line " + std::to_string(line) + ": " + what), kind_(Kind::line), where_(line) {}
  FormatError(const std::string& path, Kind kind, std::uint64_t where, const std::string& what)
      : IoError(path, (kind == Kind::line ? "line " : "byte offset ") + std::to_string(where) + ": " + what),
        kind_(kind), where_(where) {}
  static FormatError at_offset(const std::string& path, std::uint64_t offset, const std::string& what) {
    return FormatError(path, Kind::offset, offset, what);
  }
  /// "path: field NAME: what" (where() is 0).
  static FormatError in_field(const std::string& path, const std::string& field, const std::string& what) {
    return FormatError(path, field, what);
  }
  Kind kind() const noexcept { return kind_; }
  std::uint64_t where() const noexcept { return where_; }

 private:
  FormatError(const std::string& path, const std::string& field, const std::string& what)
      : IoError(path, "field " + field + ": " + what), kind_(Kind::field), where_(0) {}
  Kind kind_;
  std::uint64_t where_;
};

/// An invalid argument or configuration value (for example an unsupported head count).
struct ArgumentError : Error {
  using Error::Error;
};

/// Training produced a non-finite value (NaN or infinity) in the loss or a gradient; the message
/// names the step and the first parameter affected.
struct NumericalError : Error {
  using Error::Error;
};

}  // namespace attn
