// SPDX-License-Identifier: MIT
// Reader for the Large Movie Review Dataset (aclImdb) directory layout:
// ROOT/{train,test}/{pos,neg}/<id>_<rating>.txt, one review per file.
//   auto train = attn::data::read_imdb("data/aclImdb", "train");  // train.reviews[i].text, .label
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "file_io.hpp"
#include "utf8.hpp"

namespace attn::data {

struct Review {
  std::string text;  ///< UTF-8 (invalid bytes already replaced by U+FFFD)
  int label = 0;     ///< 1 = pos, 0 = neg
  std::filesystem::path path;
};

struct ImdbOptions {
  std::uintmax_t max_file_bytes = std::uintmax_t(1) << 20;  ///< a larger review file is an error
};

struct ImdbStats {
  std::size_t files = 0;             ///< reviews read
  std::size_t skipped = 0;           ///< entries in pos/ and neg/ that are not *.txt regular files
  std::size_t invalid_utf8 = 0;      ///< ill-formed UTF-8 sequences replaced by U+FFFD, all files
  std::vector<std::filesystem::path> invalid_utf8_files;  ///< files that had any
};

struct ImdbSplit {
  std::vector<Review> reviews;  ///< neg/ files then pos/ files, each in byte order of file name
  ImdbStats stats;
};

/// Reads SPLIT_DIR/neg/*.txt and SPLIT_DIR/pos/*.txt.
///
/// Errors (all name the path): IoError if SPLIT_DIR, neg/ or pos/ is missing or not a
/// directory, a file (a *.txt entry, a dangling link included) cannot be read, or a file is
/// larger than max_file_bytes; FormatError if a review file is empty. Invalid UTF-8 is not an
/// error: it is replaced and counted in stats. Anything else in neg/ and pos/ (README, .DS_Store,
/// sub-directories) is skipped and counted.
inline ImdbSplit read_imdb_dir(const std::filesystem::path& split_dir, const ImdbOptions& options = {}) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(split_dir, ec))
    throw IoError(split_dir.string(), fs::exists(split_dir, ec) ? "not a directory" : "directory not found");
  ImdbSplit out;
  for (const auto& [sub, label] : {std::pair{"neg", 0}, std::pair{"pos", 1}}) {
    const fs::path dir = split_dir / sub;
    if (!fs::is_directory(dir, ec))
      throw IoError(dir.string(), fs::exists(dir, ec) ? "not a directory (expected the aclImdb layout)"
                                                      : "directory not found (expected the aclImdb layout "
                                                        "ROOT/{train,test}/{pos,neg}/*.txt)");
    std::vector<fs::path> files;
    fs::directory_iterator it(dir, ec);
    if (ec) throw IoError(dir.string(), "cannot list directory: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() != ".txt") {
        ++out.stats.skipped;
        continue;
      }
      // A review file that cannot be looked at (a dangling or looping link) is an error, not a review
      // silently left out.
      const bool regular = it->is_regular_file(ec);
      if (ec) throw IoError(p.string(), "cannot read the review file: " + ec.message());
      if (regular)
        files.push_back(p);
      else
        ++out.stats.skipped;
    }
    if (ec) throw IoError(dir.string(), "cannot list directory: " + ec.message());
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().native() < b.filename().native(); });
    for (const auto& p : files) {
      const std::string bytes = read_file(p, options.max_file_bytes);
      if (bytes.empty()) throw FormatError::at_offset(p.string(), 0, "empty review file");
      std::size_t invalid = 0;
      std::string text = sanitize_utf8(bytes, &invalid);
      if (invalid) {
        out.stats.invalid_utf8 += invalid;
        out.stats.invalid_utf8_files.push_back(p);
      }
      out.reviews.push_back({std::move(text), label, p});
      ++out.stats.files;
    }
  }
  return out;
}

/// Reads ROOT/SPLIT (split is "train" or "test" in the official archive; any sub-directory
/// with the same layout works, e.g. a prepared "valid").
inline ImdbSplit read_imdb(const std::filesystem::path& root, std::string_view split, const ImdbOptions& options = {}) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec))
    throw IoError(root.string(), "aclImdb root directory not found");
  return read_imdb_dir(root / split, options);
}

}  // namespace attn::data
