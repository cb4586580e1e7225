// SPDX-License-Identifier: MIT
// libFuzzer target: one aclImdb review file, read through read_imdb_dir from a scratch
// SPLIT/{neg,pos} layout, then tokenized as the IMDb example does. Contract checked: a non-empty
// file becomes one review whose text is the sanitized bytes (substitutions counted, file listed),
// an empty one is a FormatError naming the file at byte offset 0, and tokenizing the review equals
// tokenizing the raw bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include <attn/data/imdb.hpp>
#include <attn/data/tokenizer.hpp>

#include "fuzz_common.hpp"

namespace {

using namespace attn::data;

// SPLIT/neg/0_1.txt holds the input; SPLIT/pos/ is empty. Made once per process.
const std::filesystem::path& split_dir() {
  static const std::filesystem::path dir = [] {
    const auto d = fuzz::scratch_dir() / "train";
    std::filesystem::create_directories(d / "neg");
    std::filesystem::create_directories(d / "pos");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = fuzz::as_text(data, size);
  const std::filesystem::path file = split_dir() / "neg" / "0_1.txt";
  fuzz::write_file(file, bytes);
  ImdbSplit split;
  try {
    split = read_imdb_dir(split_dir());
  } catch (const attn::FormatError& e) {
    fuzz::check_format_error(e, file.string(), attn::FormatError::Kind::offset, 0);
    fuzz::require(size == 0, "a non-empty review file was rejected");
    return 0;
  }
  fuzz::require(size != 0, "an empty review file was accepted");
  fuzz::require(split.reviews.size() == 1 && split.stats.files == 1 && split.stats.skipped == 0,
                "expected exactly one review");
  const Review& r = split.reviews[0];
  fuzz::require(r.label == 0 && r.path == file, "wrong label or path");
  const Utf8Decoded d = decode_utf8(bytes);
  fuzz::require(r.text == encode_utf8(d.code_points) && is_valid_utf8(r.text), "review text is not the sanitized file");
  fuzz::require(split.stats.invalid_utf8 == d.invalid, "invalid UTF-8 miscounted");
  fuzz::require(split.stats.invalid_utf8_files.size() == (d.invalid ? 1u : 0u), "invalid UTF-8 file list wrong");

  const EnglishTokenizer tok;
  TokenizeStats st;
  const auto toks = tok(r.text, &st);
  fuzz::require(st.invalid == 0, "sanitized review counted as invalid");
  fuzz::require(tok(bytes) == toks, "tokens of the raw file and of the review differ");
  for (const auto& t : toks) fuzz::require(!t.empty() && is_valid_utf8(t), "bad token");
  return 0;
}
