// SPDX-License-Identifier: MIT
// UTF-8 decoding, encoding and validation. Invalid input never throws: every ill-formed
// sequence becomes U+FFFD and is counted, so readers can report "N bytes replaced" and go on.
//   auto d = attn::data::decode_utf8(bytes);  // d.code_points, d.invalid (number of U+FFFD substitutions)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attn::data {

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

/// Decoded text: code points plus the number of U+FFFD substitutions made for invalid input.
struct Utf8Decoded {
  std::u32string code_points;
  std::size_t invalid = 0;
};

/// Appends the code points of `s` to `out`; returns the number of substitutions made.
inline std::size_t decode_utf8(std::string_view s, std::u32string& out) {
  std::size_t invalid = 0;
  out.reserve(out.size() + s.size());
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Step st = decode_step(s, i);
    out.push_back(st.code_point);
    invalid += st.valid ? 0 : 1;
    i += st.length;
  }
  return invalid;
}

inline Utf8Decoded decode_utf8(std::string_view s) {
  Utf8Decoded d;
  d.invalid = decode_utf8(s, d.code_points);
  return d;
}

/// True for a Unicode scalar value (a code point that UTF-8 may encode).
constexpr bool is_scalar_value(char32_t cp) noexcept { return cp < 0xD800 || (cp > 0xDFFF && cp <= 0x10FFFF); }

/// Appends the UTF-8 encoding of `cp`; surrogates and values above U+10FFFF are written as U+FFFD.
inline void append_utf8(std::string& out, char32_t cp) {
  if (!is_scalar_value(cp)) cp = replacement_char;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(out, cp);
  return out;
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

/// `s` with every ill-formed sequence replaced by U+FFFD; `*invalid` (if given) is increased by
/// the number of substitutions. Valid input is returned unchanged.
inline std::string sanitize_utf8(std::string_view s, std::size_t* invalid = nullptr) {
  const std::size_t first = first_invalid_utf8(s);
  if (first == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, first));
  out.reserve(s.size() + 8);
  std::size_t n = 0;
  for (std::size_t i = first; i < s.size();) {
    const Utf8Step st = decode_step(s, i);
    if (st.valid) {
      out.append(s.substr(i, st.length));
    } else {
      append_utf8(out, replacement_char);
      ++n;
    }
    i += st.length;
  }
  if (invalid) *invalid += n;
  return out;
}

}  // namespace attn::data
