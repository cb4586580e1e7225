// SPDX-License-Identifier: MIT
// Rule-based tokenizers for the text classifiers: English words (IMDb) and Chinese characters
// (CLUE). Input is UTF-8; invalid bytes become U+FFFD tokens/characters and are counted.
//   attn::data::EnglishTokenizer en;  auto toks = en("Don't<br />stop!");  // {"don't", "stop", "!"}
#pragma once
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "utf8.hpp"

namespace attn::data {

/// Counters a tokenizer adds to (they accumulate over calls, so one object can cover a corpus).
struct TokenizeStats {
  std::size_t texts = 0;    ///< calls
  std::size_t tokens = 0;   ///< tokens produced
  std::size_t invalid = 0;  ///< ill-formed UTF-8 sequences replaced by U+FFFD
};

/// What the readers, the vocabulary builder and the examples need from a tokenizer.
template <class T>
concept Tokenizer = requires(const T& t, std::string_view text, TokenizeStats* stats) {
  { t(text, stats) } -> std::same_as<std::vector<std::string>>;
};

namespace detail {

constexpr bool is_ascii_alnum(char32_t c) noexcept {
  return (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') || (c >= U'0' && c <= U'9');
}
constexpr char32_t ascii_lower(char32_t c) noexcept { return (c >= U'A' && c <= U'Z') ? c + 32 : c; }

/// White space of any script, plus invisible format characters that only separate (ZWSP, BOM).
constexpr bool is_space(char32_t c) noexcept {
  return c == U' ' || (c >= U'\t' && c <= U'\r') || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200B) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000 || c == 0xFEFF;
}

/// C0/C1 control characters (white-space controls are handled by is_space first).
constexpr bool is_control(char32_t c) noexcept { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

/// Punctuation and symbols, approximated by blocks (no Unicode tables): ASCII punctuation,
/// Latin-1 signs, General Punctuation, arrows/math/technical/box/misc symbols, CJK punctuation,
/// full-width punctuation, and the emoji/pictograph planes.
constexpr bool is_punct_or_symbol(char32_t c) noexcept {
  if (c < 0x80) return !is_ascii_alnum(c) && !is_control(c) && c != U' ';
  return (c >= 0xA1 && c <= 0xBF) || c == 0xD7 || c == 0xF7 || (c >= 0x2010 && c <= 0x2027) ||
         (c >= 0x2030 && c <= 0x205E) || (c >= 0x2190 && c <= 0x2BFF) || (c >= 0x3001 && c <= 0x303F) ||
         (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
         (c >= 0xFF5B && c <= 0xFF65) || (c >= 0x1F000 && c <= 0x1FAFF);
}

/// Word characters: ASCII letters and digits, and every other code point that is not white space,
/// a control, punctuation or a symbol (letters of any script; U+FFFD from invalid bytes).
constexpr bool is_word_char(char32_t c) noexcept {
  return is_ascii_alnum(c) || (c >= 0x80 && !is_space(c) && !is_control(c) && !is_punct_or_symbol(c));
}

constexpr bool is_regional_indicator(char32_t c) noexcept { return c >= 0x1F1E6 && c <= 0x1F1FF; }
/// Invisible emoji continuations: variation selectors and tag characters (subdivision flags).
constexpr bool is_invisible_modifier(char32_t c) noexcept {
  return c == 0xFE0E || c == 0xFE0F || (c >= 0xE0020 && c <= 0xE007F);
}
/// Visible modifiers that belong to the preceding emoji: skin tones and the combining keycap.
constexpr bool is_visible_modifier(char32_t c) noexcept { return (c >= 0x1F3FB && c <= 0x1F3FF) || c == 0x20E3; }
inline constexpr char32_t zero_width_joiner = 0x200D;
/// Code points of a keycap emoji at cps[i] (a digit, '#' or '*', an optional U+FE0F, then the
/// combining keycap U+20E3: "1️⃣"), or 0.
inline std::size_t keycap_length(const std::u32string& cps, std::size_t i) noexcept {
  const char32_t c = cps[i];
  if (!((c >= U'0' && c <= U'9') || c == U'#' || c == U'*')) return 0;
  std::size_t k = i + 1;
  if (k < cps.size() && cps[k] == 0xFE0F) ++k;
  return k < cps.size() && cps[k] == 0x20E3 ? k + 1 - i : 0;
}

/// Length in bytes of an HTML line break at text[i] ("<br>", "<br/>", "<br />", any case), or 0.
inline std::size_t html_break_length(std::string_view text, std::size_t i) noexcept {
  const auto at = [&](std::size_t k) { return k < text.size() ? text[k] : '\0'; };
  if (at(i) != '<' || (at(i + 1) | 0x20) != 'b' || (at(i + 2) | 0x20) != 'r') return 0;
  std::size_t j = i + 3;
  while (at(j) == ' ') ++j;
  if (at(j) == '/') ++j;
  while (at(j) == ' ') ++j;
  return at(j) == '>' ? j + 1 - i : 0;
}

}  // namespace detail

/// English word tokenizer (the usual IMDb preprocessing).
///
/// - HTML line breaks (`<br />`, `<br/>`, `<br>`) are white space.
/// - A word is a run of letters/digits; an apostrophe (' or U+2019) between two word characters
///   stays inside the word ("don't", "rock'n'roll"), elsewhere it is punctuation.
/// - Every other punctuation or symbol character is a token of its own; white space and control
///   characters separate tokens and are dropped.
/// - ASCII letters are lowercased; other letters (é, ß, Cyrillic, CJK) are word characters left
///   as they are; U+FFFD from invalid bytes counts as a word character.
class EnglishTokenizer {
 public:
  struct Options {
    bool lowercase = true;
    bool html_breaks = true;  ///< treat <br /> and friends as white space
  };

  EnglishTokenizer() = default;
  explicit EnglishTokenizer(Options options) : options_(options) {}

  std::vector<std::string> operator()(std::string_view text, TokenizeStats* stats = nullptr) const {
    // Works on the bytes with an ASCII fast path (reviews are mostly ASCII); other code points
    // are decoded in place, and a valid one is copied as its original bytes.
    std::vector<std::string> out;
    out.reserve(text.size() / 5 + 1);
    std::size_t invalid = 0;
    const auto step = [&](std::size_t pos) -> Utf8Step {
      const auto b = static_cast<unsigned char>(text[pos]);
      return b < 0x80 ? Utf8Step{b, 1, true} : decode_step(text, pos);
    };
    const auto is_word = [](char32_t c) { return detail::is_word_char(c); };
    const auto is_apostrophe = [](char32_t c) { return c == U'\'' || c == 0x2019; };
    const auto append = [&](std::string& tok, std::size_t pos, const Utf8Step& st) {
      if (st.code_point < 0x80)
        tok.push_back(static_cast<char>(options_.lowercase ? detail::ascii_lower(st.code_point) : st.code_point));
      else if (st.valid)
        tok.append(text.substr(pos, st.length));
      else
        append_utf8(tok, replacement_char);
      invalid += st.valid ? 0 : 1;
    };
    for (std::size_t i = 0; i < text.size();) {
      const Utf8Step c = step(i);
      if (options_.html_breaks && c.code_point == U'<') {
        if (const std::size_t n = detail::html_break_length(text, i)) {
          i += n;
          continue;
        }
      }
      if (detail::is_space(c.code_point) || detail::is_control(c.code_point)) {
        i += c.length;
      } else if (is_word(c.code_point)) {
        std::string& tok = out.emplace_back();
        while (i < text.size()) {
          const Utf8Step w = step(i);
          if (!is_word(w.code_point)) {
            // An apostrophe stays inside the word only when a word character follows it.
            if (!is_apostrophe(w.code_point) || i + w.length >= text.size() ||
                !is_word(step(i + w.length).code_point))
              break;
          }
          append(tok, i, w);
          i += w.length;
        }
      } else {
        append(out.emplace_back(), i, c);
        i += c.length;
      }
    }
    if (stats) {
      ++stats->texts;
      stats->tokens += out.size();
      stats->invalid += invalid;
    }
    return out;
  }

 private:
  Options options_{};
};

/// Whether a token of EnglishTokenizer is a word (it begins with a word character: a letter or a
/// digit of any script) rather than punctuation, a symbol or an emoji ("—", "…", "´", "£").
inline bool is_word_token(std::string_view token) noexcept {
  if (token.empty()) return false;
  const auto b = static_cast<unsigned char>(token[0]);
  return detail::is_word_char(b < 0x80 ? char32_t{b} : decode_step(token, 0).code_point);
}

/// Chinese character-level tokenizer (the usual CLUE baseline without a word segmenter).
///
/// - Every non-ASCII code point (ideograph, kana, punctuation, U+FFFD) is one token.
/// - A run of ASCII letters/digits is one token, lowercased ("iPhone12" -> "iphone12").
/// - ASCII punctuation characters are one token each; white space (incl. U+3000) and control
///   characters are dropped.
/// - An emoji is one token together with its modifiers: variation selectors, skin tones,
///   keycap (with its base: "1️⃣" and "#️⃣" are one token each, "a1️⃣" is "a" and "1️⃣"), tag
///   characters, zero-width-joiner sequences, and regional-indicator pairs (flags).
class ChineseCharTokenizer {
 public:
  struct Options {
    bool lowercase = true;
    bool group_ascii = true;  ///< false: every ASCII letter/digit is its own token too
  };

  ChineseCharTokenizer() = default;
  explicit ChineseCharTokenizer(Options options) : options_(options) {}

  std::vector<std::string> operator()(std::string_view text, TokenizeStats* stats = nullptr) const {
    std::u32string cps;
    const std::size_t invalid = decode_utf8(text, cps);
    std::vector<std::string> out;
    // True while the last token may still take emoji modifiers: it was produced by the previous
    // code point (nothing dropped in between) and is a single non-ASCII-run character or cluster.
    bool extendable = false;
    bool lone_regional = false;  // last token is one regional indicator, waiting for its pair
    for (std::size_t i = 0; i < cps.size();) {
      const char32_t c = cps[i];
      if (const std::size_t k = detail::keycap_length(cps, i)) {  // "1️⃣", "#️⃣": one emoji token
        std::string tok;
        for (std::size_t j = 0; j < k; ++j) append_utf8(tok, cps[i + j]);
        out.push_back(std::move(tok));
        i += k;
        extendable = true;  // skin tones and joiners may still follow, as after any emoji
        lone_regional = false;
      } else if (detail::is_ascii_alnum(c)) {
        std::string tok;
        do {
          append_utf8(tok, options_.lowercase ? detail::ascii_lower(cps[i]) : cps[i]);
          ++i;
        } while (options_.group_ascii && i < cps.size() && detail::is_ascii_alnum(cps[i]) && !detail::keycap_length(cps, i));
        out.push_back(std::move(tok));
        extendable = lone_regional = false;
      } else if (c == detail::zero_width_joiner) {
        ++i;
        if (extendable && i < cps.size() && cps[i] >= 0x80 && !detail::is_space(cps[i]) &&
            !detail::is_control(cps[i])) {
          append_utf8(out.back(), c);  // joins the next pictograph into the same token
          append_utf8(out.back(), cps[i++]);
          lone_regional = false;
        } else {
          extendable = lone_regional = false;  // a dangling joiner is invisible: drop it
        }
      } else if (detail::is_invisible_modifier(c) || detail::is_visible_modifier(c)) {
        ++i;
        if (extendable) {
          append_utf8(out.back(), c);
        } else if (detail::is_visible_modifier(c)) {
          out.emplace_back();
          append_utf8(out.back(), c);
          extendable = true;
        }
        lone_regional = false;
      } else if (detail::is_regional_indicator(c) && lone_regional) {
        append_utf8(out.back(), c);  // second half of a flag
        ++i;
        lone_regional = false;
      } else if (detail::is_space(c) || detail::is_control(c)) {
        ++i;
        extendable = lone_regional = false;
      } else {
        out.emplace_back();
        append_utf8(out.back(), c);
        ++i;
        extendable = c >= 0x80;
        lone_regional = detail::is_regional_indicator(c);
      }
    }
    if (stats) {
      ++stats->texts;
      stats->tokens += out.size();
      stats->invalid += invalid;
    }
    return out;
  }

 private:
  Options options_{};
};

static_assert(Tokenizer<EnglishTokenizer> && Tokenizer<ChineseCharTokenizer>);

}  // namespace attn::data
