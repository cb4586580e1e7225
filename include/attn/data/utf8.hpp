// SPDX-License-Identifier: MIT
// UTF-8 decoding, encoding and validation. Invalid input never throws: every ill-formed
// sequence becomes U+FFFD and is counted, so readers can report "N bytes replaced" and go on.
//   auto d = attn::data::decode_utf8(bytes);  // d.code_points, d.invalid (number of U+FFFD substitutions)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "../core/utf8.hpp"

namespace attn::data {

using utf8::decode_step;
using utf8::first_invalid_utf8;
using utf8::is_valid_utf8;
using utf8::replacement_char;
using utf8::Utf8Step;

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

/// The byte offset in `s` of byte offset `pos` of sanitize_utf8(s): each replaced sequence is
/// three bytes there (U+FFFD), its own length here. An offset inside a replacement maps to the
/// start of the sequence it replaced; one past the end maps past the end of `s`.
inline std::size_t unsanitized_offset(std::string_view s, std::size_t pos) {
  std::size_t i = 0, o = 0;
  while (i < s.size()) {
    const Utf8Step st = decode_step(s, i);
    const std::size_t out = st.valid ? st.length : 3;
    if (pos < o + out) return st.valid ? i + (pos - o) : i;
    o += out;
    i += st.length;
  }
  return s.size() + (pos - o);
}

}  // namespace attn::data
