// SPDX-License-Identifier: MIT
// Readers for the CLUE classification tasks stored as JSON lines (TNEWS, IFLYTEK): labels.json
// fixes the class order, train/dev/test.json hold one {"label", "sentence", ...} object per line.
//   auto labels = attn::data::read_clue_labels(dir / "labels.json");
//   auto train = attn::data::read_clue(dir / "train.json", labels);  // train.examples[i].label in 0..C-1
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "file_io.hpp"
#include "utf8.hpp"

namespace attn::data {

/// The classes of a CLUE task in labels.json order; that order defines the dense indices.
struct ClueLabels {
  std::vector<std::string> names;         ///< label strings, e.g. "100" (TNEWS) or "0" (IFLYTEK)
  std::vector<std::string> descriptions;  ///< label_desc / label_des, e.g. "news_story"; may be ""

  std::size_t size() const noexcept { return names.size(); }
  /// Dense index of a label string, or nullopt when it is not a class.
  std::optional<int> index(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? std::nullopt : std::optional<int>(it->second);
  }
  /// Appends a class; false when the name is already present.
  bool add(std::string name, std::string description) {
    if (!index_.emplace(name, static_cast<int>(names.size())).second) return false;
    names.push_back(std::move(name));
    descriptions.push_back(std::move(description));
    return true;
  }

 private:
  std::unordered_map<std::string, int> index_;
};

/// What to do with a line that is not valid JSON or lacks a required field.
enum class BadLines {
  fail,  ///< throw FormatError naming the file and line
  skip,  ///< skip it, count it in ClueStats::skipped and keep the first messages
};

struct ClueOptions {
  BadLines bad_lines = BadLines::fail;
  /// true: "label" is required (train/dev). false: it may be absent (the test split); such
  /// examples get label -1.
  bool labeled = true;
  std::uintmax_t max_file_bytes = std::uintmax_t(1) << 30;
};

struct ClueExample {
  std::string sentence;    ///< UTF-8, invalid bytes replaced by U+FFFD; may be empty
  int label = -1;          ///< dense class index 0..C-1, or -1 when unlabeled
  std::string keywords;    ///< TNEWS "keywords" (comma-separated), "" when absent
  std::int64_t id = -1;    ///< the test split's "id", -1 when absent
  std::uint64_t line = 0;  ///< 1-based line in the source file
};

struct ClueStats {
  std::size_t lines = 0;            ///< lines in the file (including empty and skipped ones)
  std::size_t empty_lines = 0;      ///< blank lines, ignored
  std::size_t skipped = 0;          ///< bad lines skipped (BadLines::skip)
  std::size_t empty_sentences = 0;  ///< examples kept whose sentence is ""
  std::size_t unlabeled = 0;        ///< examples without a label (labeled = false)
  std::size_t invalid_utf8 = 0;     ///< ill-formed UTF-8 sequences replaced by U+FFFD
  std::vector<std::string> skipped_messages;  ///< messages of the first 10 skipped lines
};

struct ClueDataset {
  std::vector<ClueExample> examples;
  ClueStats stats;
};

namespace detail {

/// A problem confined to one line; the caller decides whether it is fatal.
struct ClueLineError {
  std::string what;
};

/// Parses one line (already valid UTF-8: sanitize_utf8(raw)) as a JSON object; a syntax error's
/// byte is counted in `raw`, the file's own bytes.
inline nlohmann::json parse_json_object(std::string_view line, std::string_view raw) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann says "[json.exception.parse_error.101] parse error at line 1, column 7: <reason>";
    // the file line is ours, so keep the byte position and the reason.
    std::string reason = e.what();
    if (const auto col = reason.find("column "); col != std::string::npos)
      if (const auto colon = reason.find(": ", col); colon != std::string::npos) reason = reason.substr(colon + 2);
    const std::size_t byte = e.byte == 0 ? 0 : unsanitized_offset(raw, e.byte - 1) + 1;  // e.byte counts from 1
    throw ClueLineError{"malformed JSON at byte " + std::to_string(byte) + " of the line: " + reason};
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range for a number like 1e999
    std::string reason = e.what();
    if (const auto end = reason.find("] "); end != std::string::npos) reason = reason.substr(end + 2);
    throw ClueLineError{"malformed JSON: " + reason};
  }
  if (!j.is_object()) throw ClueLineError{std::string("expected a JSON object, found ") + j.type_name()};
  return j;
}

/// The label field as a string: CLUE writes "100", some copies write 100.
inline std::optional<std::string> label_field(const nlohmann::json& j) {
  const auto it = j.find("label");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  // dump() spells the number exactly; get<int64_t> would wrap values above 2^63-1 to negatives.
  if (it->is_number_integer()) return it->dump();
  throw ClueLineError{std::string("field 'label' must be a string or an integer, found ") + it->type_name()};
}

inline std::string string_field(const nlohmann::json& j, const char* name, bool required) {
  const auto it = j.find(name);
  if (it == j.end()) {
    if (required) throw ClueLineError{std::string("missing field '") + name + "'"};
    return {};
  }
  if (!it->is_string())
    throw ClueLineError{std::string("field '") + name + "' must be a string, found " + it->type_name()};
  return it->get<std::string>();
}

}  // namespace detail

/// Reads labels.json: one {"label": ..., "label_desc" or "label_des": ...} object per line.
/// FormatError for malformed lines, a missing label, a duplicate label or no labels at all.
inline ClueLabels read_clue_labels(const std::filesystem::path& path, std::uintmax_t max_bytes = std::uintmax_t(1) << 24) {
  const std::string p = path.string();
  const std::string text = read_file(path, max_bytes);
  ClueLabels labels;
  std::uint64_t last = 0;
  for_each_line(text, [&](std::uint64_t line_no, std::string_view raw) {
    last = line_no;
    if (raw.find_first_not_of(" \t") == std::string_view::npos) return;
    try {
      const std::string line = sanitize_utf8(raw);
      const nlohmann::json j = detail::parse_json_object(line, raw);
      const auto name = detail::label_field(j);
      if (!name) throw detail::ClueLineError{"missing field 'label'"};
      std::string desc = detail::string_field(j, "label_desc", false);
      if (desc.empty()) desc = detail::string_field(j, "label_des", false);
      if (!labels.add(*name, std::move(desc))) throw detail::ClueLineError{"duplicate label '" + *name + "'"};
    } catch (const detail::ClueLineError& e) {
      throw FormatError(p, line_no, e.what);
    }
  });
  if (labels.size() == 0) throw FormatError(p, last + 1, "no labels in file");
  return labels;
}

/// Reads a CLUE JSON-lines file. Each non-blank line is an object with "sentence" (string,
/// required), "label" (string or integer; required when options.labeled) and optionally
/// "keywords" and "id"; other fields (label_desc, label_des) are ignored. The label is mapped
/// to its index in `labels`.
///
/// A UTF-8 BOM, CRLF line ends and blank lines are accepted. Invalid UTF-8 is replaced by
/// U+FFFD and counted. Malformed JSON, a missing or mistyped field: FormatError "path: line N:
/// ..." or, with BadLines::skip, counted and skipped. A label that is not in labels.json is
/// always a FormatError (it means the wrong labels file, which skipping would hide).
inline ClueDataset read_clue(const std::filesystem::path& path, const ClueLabels& labels, const ClueOptions& options = {}) {
  const std::string p = path.string();
  const std::string text = read_file(path, options.max_file_bytes);
  ClueDataset out;
  auto& st = out.stats;
  for_each_line(text, [&](std::uint64_t line_no, std::string_view raw) {
    st.lines = line_no;
    if (raw.find_first_not_of(" \t") == std::string_view::npos) {
      ++st.empty_lines;
      return;
    }
    std::size_t invalid = 0;
    const std::string line = sanitize_utf8(raw, &invalid);
    ClueExample ex;
    ex.line = line_no;
    std::optional<std::string> label;
    try {
      const nlohmann::json j = detail::parse_json_object(line, raw);
      ex.sentence = detail::string_field(j, "sentence", true);
      ex.keywords = detail::string_field(j, "keywords", false);
      label = detail::label_field(j);
      if (!label && options.labeled) throw detail::ClueLineError{"missing field 'label'"};
      if (const auto it = j.find("id"); it != j.end()) {
        if (!it->is_number_integer())
          throw detail::ClueLineError{std::string("field 'id' must be an integer, found ") + it->type_name()};
        if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
          throw detail::ClueLineError{"field 'id' " + it->dump() + " is out of range (above 2^63-1)"};
        ex.id = it->get<std::int64_t>();
        if (ex.id < 0) throw detail::ClueLineError{"field 'id' must be >= 0, found " + it->dump()};
      }
    } catch (const detail::ClueLineError& e) {
      if (options.bad_lines == BadLines::fail) throw FormatError(p, line_no, e.what);
      ++st.skipped;
      if (st.skipped_messages.size() < 10) st.skipped_messages.push_back(p + ": line " + std::to_string(line_no) + ": " + e.what);
      return;
    }
    if (label) {
      const auto idx = labels.index(*label);
      if (!idx)
        throw FormatError(p, line_no, "label '" + *label + "' is not in labels.json (" + std::to_string(labels.size()) +
                                          " classes)");
      ex.label = *idx;
    } else {
      ++st.unlabeled;
    }
    st.invalid_utf8 += invalid;
    if (ex.sentence.empty()) ++st.empty_sentences;
    out.examples.push_back(std::move(ex));
  });
  return out;
}

}  // namespace attn::data
