// SPDX-License-Identifier: MIT
// UTF-8 decoding: valid boundaries, every class of ill-formed input, and a naive reference check.
#include <catch2/catch.hpp>

#include <attn/core/rng.hpp>
#include <attn/data/utf8.hpp>

#include <optional>
#include <string>

using namespace attn::data;
using namespace std::string_literals;

namespace {
constexpr char32_t R = replacement_char;

/// Reference: a byte string is one valid code point iff naive bit decoding gives a scalar
/// value whose shortest encoding is exactly these bytes.
std::optional<char32_t> naive_single(const std::string& s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  std::size_t n;
  char32_t cp;
  if (b(0) < 0x80) return s.size() == 1 ? std::optional<char32_t>(b(0)) : std::nullopt;
  if ((b(0) & 0xE0) == 0xC0) n = 2, cp = b(0) & 0x1F;
  else if ((b(0) & 0xF0) == 0xE0) n = 3, cp = b(0) & 0x0F;
  else if ((b(0) & 0xF8) == 0xF0) n = 4, cp = b(0) & 0x07;
  else return std::nullopt;
  if (s.size() != n) return std::nullopt;
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if (!is_scalar_value(cp) || encode_utf8(std::u32string(1, cp)) != s) return std::nullopt;
  return cp;
}
}  // namespace

TEST_CASE("utf8: valid text decodes and encodes back") {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  const auto d = decode_utf8(s);
  CHECK(d.code_points == U"a\u00E9\u4E2D\U0001F600");
  CHECK(d.invalid == 0);
  CHECK(encode_utf8(d.code_points) == s);
  CHECK(is_valid_utf8(s));
}

TEST_CASE("utf8: boundary code points are valid") {
  for (const char32_t cp : {U'\u0000', U'\u007F', U'\u0080', U'\u07FF', U'\u0800', U'\uD7FF', U'\uE000', U'\uFFFD',
                            U'\uFFFF', U'\U00010000', U'\U0010FFFF'}) {
    const std::string s = encode_utf8(std::u32string(1, cp));
    INFO("code point " << static_cast<std::uint32_t>(cp));
    CHECK(is_valid_utf8(s));
    CHECK(decode_utf8(s).code_points == std::u32string(1, cp));
  }
  CHECK(encode_utf8(U"\U0010FFFF") == "\xF4\x8F\xBF\xBF");
  CHECK(encode_utf8(U"\u0800") == "\xE0\xA0\x80");
}

TEST_CASE("utf8: overlong forms are invalid, one U+FFFD per maximal subpart") {
  CHECK(decode_utf8("\xC0\x80"s).code_points == std::u32string{R, R});  // C0 never starts a sequence
  CHECK(decode_utf8("\xC1\xBF"s).invalid == 2);
  CHECK(decode_utf8("\xE0\x80\x80"s).code_points == std::u32string{R, R, R});
  CHECK(decode_utf8("\xF0\x82\x82\xAC"s).invalid == 4);  // overlong euro sign
  CHECK_FALSE(is_valid_utf8("\xE0\x9F\xBF"));
}

TEST_CASE("utf8: encoded surrogates and values above U+10FFFF are invalid") {
  CHECK(decode_utf8("\xED\xA0\x80"s).code_points == std::u32string{R, R, R});  // U+D800
  CHECK(decode_utf8("\xED\xBF\xBF"s).invalid == 3);                             // U+DFFF
  CHECK(decode_utf8("\xF4\x90\x80\x80"s).invalid == 4);                         // U+110000
  CHECK(decode_utf8("\xF5\x80\x80\x80"s).invalid == 4);
  CHECK(decode_utf8("\xFF"s).invalid == 1);
}

TEST_CASE("utf8: truncated sequences and stray continuation bytes") {
  CHECK(decode_utf8("\xE4\xB8"s).code_points == std::u32string{R});  // truncated at end: one U+FFFD
  CHECK(decode_utf8("\xE4\xB8" "a"s).code_points == U"\uFFFDa");     // the next byte is not eaten
  CHECK(decode_utf8("\xF0\x9F\x98"s).code_points == std::u32string{R});
  CHECK(decode_utf8("\x80\xBF"s).code_points == std::u32string{R, R});
  CHECK(decode_utf8("x\xC3"s).code_points == U"x\uFFFD");
  CHECK(first_invalid_utf8("abc\xE4\xB8") == 3);
  CHECK(first_invalid_utf8("abc") == std::string_view::npos);
}

TEST_CASE("utf8: sanitize replaces and counts, and leaves valid text alone") {
  std::size_t n = 0;
  CHECK(sanitize_utf8("ok \xFF\xFE end \xE4\xB8", &n) == "ok \xEF\xBF\xBD\xEF\xBF\xBD end \xEF\xBF\xBD");
  CHECK(n == 3);
  const std::string good = "\xE4\xB8\xAD\xE6\x96\x87";
  CHECK(sanitize_utf8(good, &n) == good);
  CHECK(n == 3);
}

TEST_CASE("utf8: encoding a surrogate or out-of-range value writes U+FFFD") {
  CHECK(encode_utf8(std::u32string{char32_t(0xD800)}) == "\xEF\xBF\xBD");
  CHECK(encode_utf8(std::u32string{char32_t(0x110000)}) == "\xEF\xBF\xBD");
}

TEST_CASE("utf8: every scalar value round-trips") {
  std::size_t bad = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (!is_scalar_value(cp)) continue;
    const std::string s = encode_utf8(std::u32string(1, cp));
    const Utf8Step st = decode_step(s, 0);
    bad += (st.valid && st.code_point == cp && st.length == s.size()) ? 0 : 1;
  }
  CHECK(bad == 0);
}

TEST_CASE("utf8: agrees with a naive reference on all 1- and 2-byte and sampled 3/4-byte strings") {
  std::size_t mismatches = 0;
  const auto check_one = [&](const std::string& s) {
    const auto ref = naive_single(s);
    const Utf8Step st = decode_step(s, 0);
    const bool ours = st.valid && st.length == s.size();
    if (ours != ref.has_value() || (ours && st.code_point != *ref)) ++mismatches;
  };
  for (int a = 0; a < 256; ++a) check_one(std::string(1, char(a)));
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) check_one(std::string{char(a), char(b)});
  attn::Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    std::string s(3 + rng.below(2), '\0');
    s[0] = char(0xE0 + rng.below(32));  // leads of 3- and 4-byte forms and invalid F5..FF
    for (std::size_t k = 1; k < s.size(); ++k) s[k] = char(0x70 + rng.below(0x60));  // around 80..BF
    check_one(s);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("utf8: decoding random bytes always yields text that re-encodes as valid UTF-8") {
  attn::Rng rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng.below(40), '\0');
    for (auto& c : s) c = char(rng.below(256));
    const auto d = decode_utf8(s);
    const std::string back = encode_utf8(d.code_points);
    REQUIRE(is_valid_utf8(back));
    std::size_t n = 0;
    REQUIRE(sanitize_utf8(s, &n) == back);
    REQUIRE(n == d.invalid);
  }
}
