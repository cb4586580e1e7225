// SPDX-License-Identifier: MIT
// UTF-8 validation (Unicode Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF),
// the one check behind the data readers (data/utf8.hpp) and the safetensors header (io/).
//   if (attn::utf8::first_invalid_utf8(bytes) != std::string_view::npos) { /* ill-formed */ }
#pragma once
#include <cstddef>
#include <string_view>

namespace attn::utf8 {

/// U+FFFD REPLACEMENT CHARACTER, substituted for each ill-formed sequence.
inline constexpr char32_t replacement_char = U'\uFFFD';

/// One decoding step: the code point (U+FFFD when invalid) and how many bytes it consumed (>= 1).
struct Utf8Step {
  char32_t code_point;
  std::size_t length;
  bool valid;
};

/// Decodes the code point starting at byte `pos` (pos < s.size()).
///
/// Well-formed sequences are exactly those of Unicode Table 3-7: no overlong forms (C0, C1,
/// E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing above U+10FFFF (F4 90.., F5..FF).
/// An ill-formed sequence consumes its "maximal subpart" (the longest prefix that could still
/// have started a valid sequence, at least one byte), as the Unicode standard recommends and as
/// WHATWG, Python and ICU do; so a truncated 3-byte sequence gives one U+FFFD, a stray
/// continuation byte gives one, and an encoded surrogate ED A0 80 gives three.
constexpr Utf8Step decode_step(std::string_view s, std::size_t pos) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, true};
  std::size_t need;        // continuation bytes after the lead
  unsigned char lo = 0x80;  // allowed range of the first continuation byte
  unsigned char hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates D800..DFFF
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {replacement_char, 1, false};  // 80..BF stray continuation, C0/C1 overlong, F5..FF
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {replacement_char, k, false};  // truncated at end of input
    const unsigned char b = byte(pos + k);
    const unsigned char l = k == 1 ? lo : 0x80;
    const unsigned char h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {replacement_char, k, false};  // b starts the next sequence
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {cp, need + 1, true};
}

/// Byte offset of the first ill-formed sequence, or std::string_view::npos when `s` is valid.
constexpr std::size_t first_invalid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // fast path for ASCII
      ++i;
      continue;
    }
    const Utf8Step st = decode_step(s, i);
    if (!st.valid) return i;
    i += st.length;
  }
  return std::string_view::npos;
}

constexpr bool is_valid_utf8(std::string_view s) noexcept { return first_invalid_utf8(s) == std::string_view::npos; }

}  // namespace attn::utf8
