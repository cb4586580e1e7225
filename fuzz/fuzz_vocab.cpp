// SPDX-License-Identifier: MIT
// libFuzzer target: vocabulary files through Vocab::load. Contract checked: a vocabulary with
// <pad> = 0 and <unk> = 1, unique non-empty valid UTF-8 tokens whose ids round-trip, that
// save() writes back to a file load() reads as the same vocabulary; or a FormatError naming the
// file and one of its lines (or the line after the last).
#include <cstddef>
#include <cstdint>
#include <string>

#include <attn/data/vocab.hpp>

#include "fuzz_common.hpp"

using attn::data::Vocab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const std::filesystem::path path = fuzz::scratch_dir() / "vocab.txt";
  fuzz::write_file(path, text);
  Vocab v;
  try {
    v = Vocab::load(path);
  } catch (const attn::FormatError& e) {
    fuzz::check_format_error(e, path.string(), attn::FormatError::Kind::line, fuzz::line_count(text) + 1);
    return 0;
  }
  fuzz::require(v.size() >= 2 && v.token(Vocab::pad_id) == Vocab::pad_token && v.token(Vocab::unk_id) == Vocab::unk_token,
                "vocabulary lacks <pad>/<unk> at ids 0/1");
  fuzz::require(v.size() <= fuzz::line_count(text), "more tokens than lines");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string& t = v.token(static_cast<std::int32_t>(i));
    fuzz::require(!t.empty() && attn::data::is_valid_utf8(t), "empty or invalid token");
    fuzz::require(v.id(t) == static_cast<std::int32_t>(i), "token id does not round-trip (duplicate?)");
  }
  const std::filesystem::path saved = fuzz::scratch_dir() / "saved.txt";
  v.save(saved);
  fuzz::require(Vocab::load(saved) == v, "save/load round trip changed the vocabulary");
  return 0;
}
