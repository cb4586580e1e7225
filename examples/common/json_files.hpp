// SPDX-License-Identifier: MIT
// JSON files of the example programs (config.json, state.json, metrics.jsonl): reading with
// errors that name the file, appending lines.
#pragma once
#include <attn/core/error.hpp>
#include <attn/data/file_io.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace examples {

/// Parses a JSON file; a malformed one is a FormatError naming the file and the byte offset.
inline nlohmann::json read_json(const std::filesystem::path& p, std::uintmax_t max_bytes = 1 << 24) {
  const std::string text = attn::data::read_file(p, max_bytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw attn::FormatError::at_offset(p.string(), e.byte, e.what());
  }
}

/// Runs f(json) on the parsed file; a missing or mistyped field is a FormatError naming the file.
template <class F>
auto with_json_file(const std::filesystem::path& p, F&& f) {
  auto j = read_json(p);
  try {
    return f(j);
  } catch (const nlohmann::json::exception& e) {
    throw attn::FormatError(p.string(), 1, std::string("unexpected content: ") + e.what());
  }
}

/// Appends one line to a JSON-lines file.
inline void append_line(const std::filesystem::path& p, const std::string& line) {
  std::ofstream f(p, std::ios::app);
  f << line << "\n";
  f.flush();
  if (!f) throw attn::IoError(p.string(), "cannot append");
}

}  // namespace examples
