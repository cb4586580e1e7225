// SPDX-License-Identifier: MIT
// Token <-> id vocabulary with PAD = 0 and UNK = 1, built from corpus counts and stored as a
// text file with one token per line (line n holds id n-1).
//   attn::data::TokenCounts c; c.add(tokens);  auto v = attn::data::Vocab::build(c, {.min_freq = 2});
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "file_io.hpp"
#include "utf8.hpp"

namespace attn::data {

namespace detail {
/// Hash that accepts std::string and std::string_view, so lookups by view do not allocate.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// A token for an error message: quoted, escaped like the file format, at most ~40 bytes.
inline std::string quote_token(std::string_view t) {
  std::string q = "'";
  for (std::size_t i = 0; i < t.size() && i < 40; ++i) q += t[i];
  if (t.size() > 40) q += "...";
  return q + "'";
}
}  // namespace detail

/// Token frequencies over a corpus.
class TokenCounts {
 public:
  void add(std::string_view token, std::uint64_t n = 1) {
    auto it = counts_.find(token);
    if (it == counts_.end()) it = counts_.emplace(std::string(token), 0).first;
    it->second += n;
  }
  void add(std::span<const std::string> tokens) {
    for (const auto& t : tokens) add(t);
  }
  std::uint64_t count(std::string_view token) const {
    const auto it = counts_.find(token);
    return it == counts_.end() ? 0 : it->second;
  }
  std::size_t size() const noexcept { return counts_.size(); }
  const detail::StringMap<std::uint64_t>& map() const noexcept { return counts_; }

 private:
  detail::StringMap<std::uint64_t> counts_;
};

/// How Vocab::build chooses its tokens.
struct VocabBuildOptions {
  std::uint64_t min_freq = 1;  ///< keep tokens seen at least this often
  std::size_t max_size = 0;    ///< total size including <pad> and <unk>; 0 = no limit
};

/// Token <-> id mapping. Ids are dense: 0 is padding, 1 is the unknown token, then the corpus
/// tokens from most to least frequent.
///
/// File format (UTF-8, '\n' line ends, no BOM): one token per line, line 1 `<pad>`, line 2
/// `<unk>`. Inside a token, backslash, newline, carriage return and tab are written as `\\`,
/// `\n`, `\r`, `\t`; no other escapes exist. Empty tokens are not allowed.
class Vocab {
 public:
  static constexpr std::int32_t pad_id = 0;
  static constexpr std::int32_t unk_id = 1;
  static constexpr std::string_view pad_token = "<pad>";
  static constexpr std::string_view unk_token = "<unk>";

  using BuildOptions = VocabBuildOptions;

  /// Just <pad> and <unk>.
  Vocab() {
    push(std::string(pad_token));
    push(std::string(unk_token));
  }

  /// Keeps tokens with count >= min_freq, most frequent first; ties go to the smaller token in
  /// byte order, so the result never depends on hash-map iteration order. Tokens spelled
  /// `<pad>` / `<unk>` in the corpus are dropped (they already have ids 0 and 1).
  static Vocab build(const TokenCounts& counts, const BuildOptions& options = {}) {
    if (options.min_freq == 0) throw ArgumentError("Vocab::build: min_freq must be >= 1");
    if (options.max_size == 1) throw ArgumentError("Vocab::build: max_size must be 0 (no limit) or >= 2");
    std::vector<std::pair<const std::string*, std::uint64_t>> kept;
    for (const auto& [tok, n] : counts.map())
      if (n >= options.min_freq && tok != pad_token && tok != unk_token) kept.emplace_back(&tok, n);
    std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : *a.first < *b.first;  // std::string compares bytes unsigned
    });
    if (options.max_size != 0 && kept.size() > options.max_size - 2) kept.resize(options.max_size - 2);
    Vocab v;
    v.tokens_.reserve(kept.size() + 2);
    for (const auto& k : kept) v.add_checked(*k.first);
    return v;
  }

  /// A vocabulary of <pad>, <unk>, then `tokens` in the given order (duplicates are an error).
  static Vocab from_tokens(std::span<const std::string> tokens) {
    Vocab v;
    for (const auto& t : tokens) v.add_checked(t);
    return v;
  }

  std::size_t size() const noexcept { return tokens_.size(); }
  bool contains(std::string_view token) const { return index_.find(token) != index_.end(); }
  /// The id of `token`, or unk_id.
  std::int32_t id(std::string_view token) const {
    const auto it = index_.find(token);
    return it == index_.end() ? unk_id : it->second;
  }
  /// The token of `id`; ArgumentError when out of range.
  const std::string& token(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size())
      throw ArgumentError("Vocab::token: id " + std::to_string(id) + " out of range [0, " +
                          std::to_string(tokens_.size()) + ")");
    return tokens_[static_cast<std::size_t>(id)];
  }
  const std::vector<std::string>& tokens() const noexcept { return tokens_; }

  /// Ids of `tokens`; `*unknown` (if given) is increased by the number mapped to unk_id.
  std::vector<std::int32_t> encode(std::span<const std::string> tokens, std::size_t* unknown = nullptr) const {
    std::vector<std::int32_t> ids;
    ids.reserve(tokens.size());
    std::size_t unk = 0;
    for (const auto& t : tokens) {
      ids.push_back(id(t));
      unk += ids.back() == unk_id ? 1 : 0;
    }
    if (unknown) *unknown += unk;
    return ids;
  }
  std::vector<std::string> decode(std::span<const std::int32_t> ids) const {
    std::vector<std::string> out;
    out.reserve(ids.size());
    for (const std::int32_t i : ids) out.push_back(token(i));
    return out;
  }

  /// Writes the vocabulary atomically (temp file, fsync, rename). IoError on failure.
  void save(const std::filesystem::path& path) const {
    std::string text;
    for (const auto& t : tokens_) {
      for (const char c : t) {
        switch (c) {
          case '\\': text += "\\\\"; break;
          case '\n': text += "\\n"; break;
          case '\r': text += "\\r"; break;
          case '\t': text += "\\t"; break;
          default: text += c;
        }
      }
      text += '\n';
    }
    write_file_atomic(path, text);
  }

  /// Reads a file written by save(). FormatError ("path: line N: ...") for an empty file, a
  /// missing <pad>/<unk> header, an empty line, a raw tab, a bad escape, invalid UTF-8 or a
  /// duplicate token (naming the line of its first occurrence). A UTF-8 BOM and CRLF line
  /// ends are accepted. IoError when the file cannot be read or exceeds `max_bytes`.
  static Vocab load(const std::filesystem::path& path, std::uintmax_t max_bytes = std::uintmax_t(1) << 30) {
    const std::string p = path.string();
    const std::string text = read_file(path, max_bytes);
    Vocab v;
    v.tokens_.clear();
    v.index_.clear();
    std::uint64_t lines = 0;
    for_each_line(text, [&](std::uint64_t line_no, std::string_view line) {
      lines = line_no;
      if (line.empty()) throw FormatError(p, line_no, "empty line (tokens cannot be empty)");
      if (const std::size_t bad = first_invalid_utf8(line); bad != std::string_view::npos)
        throw FormatError(p, line_no, "invalid UTF-8 at byte " + std::to_string(bad) + " of the line");
      std::string tok;
      tok.reserve(line.size());
      for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (c == '\t')
          throw FormatError(p, line_no, "raw tab character; one token per line, tabs inside tokens are written \\t");
        if (c == '\r') throw FormatError(p, line_no, "raw carriage return; inside tokens it is written \\r");
        if (c != '\\') {
          tok += c;
          continue;
        }
        if (++i == line.size()) throw FormatError(p, line_no, "backslash at end of line (write \\\\ for a backslash)");
        switch (line[i]) {
          case '\\': tok += '\\'; break;
          case 'n': tok += '\n'; break;
          case 'r': tok += '\r'; break;
          case 't': tok += '\t'; break;
          default: throw FormatError(p, line_no, std::string("unknown escape \\") + line[i] + " (known: \\\\ \\n \\r \\t)");
        }
      }
      const std::string_view expected = line_no == 1 ? pad_token : unk_token;
      if (line_no <= 2 && tok != expected)
        throw FormatError(p, line_no, "expected the header token " + detail::quote_token(expected) + ", found " +
                                          detail::quote_token(tok));
      if (const auto it = v.index_.find(tok); it != v.index_.end())
        throw FormatError(p, line_no, "duplicate token " + detail::quote_token(tok) + " (first on line " +
                                          std::to_string(it->second + 1) + ")");
      v.push(std::move(tok));
    });
    if (lines == 0) throw FormatError(p, 1, "empty file; expected '<pad>' on line 1 and '<unk>' on line 2");
    if (lines == 1) throw FormatError(p, 2, "missing the header token '<unk>' (file ends after line 1)");
    return v;
  }

  friend bool operator==(const Vocab& a, const Vocab& b) { return a.tokens_ == b.tokens_; }

 private:
  void push(std::string token) {
    index_.emplace(token, static_cast<std::int32_t>(tokens_.size()));
    tokens_.push_back(std::move(token));
  }
  void add_checked(const std::string& token) {
    if (token.empty()) throw ArgumentError("Vocab: empty token");
    if (!is_valid_utf8(token)) throw ArgumentError("Vocab: token " + detail::quote_token(token) + " is not valid UTF-8");
    if (contains(token)) throw ArgumentError("Vocab: duplicate token " + detail::quote_token(token));
    push(token);
  }

  std::vector<std::string> tokens_;
  detail::StringMap<std::int32_t> index_;
};

}  // namespace attn::data
