// SPDX-License-Identifier: MIT
// libFuzzer target: UTF-8 decoding/validation/sanitizing and the English and Chinese tokenizers
// on arbitrary bytes. The first input byte picks the tokenizer options, the rest is the text.
// Contract checked: the UTF-8 functions agree with each other, sanitized text is valid and equals
// decode+encode, tokens are non-empty valid UTF-8, the invalid-byte counts match the decoder, and
// tokenizing raw bytes equals tokenizing their sanitized form.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <attn/data/tokenizer.hpp>
#include <attn/data/utf8.hpp>

#include "fuzz_common.hpp"

namespace {

using namespace attn::data;

Utf8Decoded check_utf8(std::string_view s) {
  const Utf8Decoded d = decode_utf8(s);
  const std::size_t first = first_invalid_utf8(s);
  fuzz::require((first == std::string_view::npos) == (d.invalid == 0), "first_invalid_utf8 disagrees with decode_utf8");
  fuzz::require(is_valid_utf8(s) == (d.invalid == 0), "is_valid_utf8 disagrees with decode_utf8");
  fuzz::require(d.code_points.size() <= s.size(), "more code points than bytes");
  if (first != std::string_view::npos) {
    fuzz::require(first < s.size() && is_valid_utf8(s.substr(0, first)), "bytes before the first invalid one are invalid");
    fuzz::require(!decode_step(s, first).valid, "first_invalid_utf8 points at a valid sequence");
  }
  std::size_t invalid = 0;
  const std::string clean = sanitize_utf8(s, &invalid);
  fuzz::require(invalid == d.invalid, "sanitize_utf8 and decode_utf8 count different substitutions");
  fuzz::require(is_valid_utf8(clean), "sanitize_utf8 produced invalid UTF-8");
  fuzz::require(clean == encode_utf8(d.code_points), "sanitize_utf8 differs from encode_utf8(decode_utf8)");
  if (d.invalid == 0) fuzz::require(clean == s, "sanitize_utf8 changed valid text");
  for (char32_t cp : d.code_points) fuzz::require(is_scalar_value(cp), "decoder produced a non-scalar value");
  return d;
}

void check_tokens(const std::vector<std::string>& toks, const TokenizeStats& st, std::size_t invalid, bool lowercase) {
  fuzz::require(st.texts == 1 && st.tokens == toks.size(), "tokenizer stats miscounted");
  fuzz::require(st.invalid == invalid, "tokenizer invalid count disagrees with the decoder");
  for (const auto& t : toks) {
    fuzz::require(!t.empty(), "empty token");
    fuzz::require(is_valid_utf8(t), "token is not valid UTF-8");
    for (char c : t) {
      fuzz::require(c != ' ' && c != '\n' && c != '\t' && c != '\r', "token contains white space");
      if (lowercase) fuzz::require(!(c >= 'A' && c <= 'Z'), "lowercasing left an ASCII capital");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  const Utf8Decoded d = check_utf8(text);
  const std::string clean = sanitize_utf8(text);

  const bool lower = (mode & 1) != 0;
  const EnglishTokenizer en({.lowercase = lower, .html_breaks = (mode & 2) != 0});
  TokenizeStats en_raw, en_clean;
  const auto en_toks = en(text, &en_raw);
  check_tokens(en_toks, en_raw, d.invalid, lower);
  fuzz::require(en(clean, &en_clean) == en_toks, "English tokens of raw and sanitized text differ");
  fuzz::require(en_clean.invalid == 0, "sanitized text counted as invalid");

  const ChineseCharTokenizer zh({.lowercase = lower, .group_ascii = (mode & 4) != 0});
  TokenizeStats zh_raw, zh_clean;
  const auto zh_toks = zh(text, &zh_raw);
  check_tokens(zh_toks, zh_raw, d.invalid, lower);
  fuzz::require(zh(clean, &zh_clean) == zh_toks, "Chinese tokens of raw and sanitized text differ");
  return 0;
}
