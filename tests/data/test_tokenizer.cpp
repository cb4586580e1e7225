// SPDX-License-Identifier: MIT
// English word and Chinese character tokenizers on mixed scripts, emoji and invalid bytes.
#include <catch2/catch.hpp>

#include <attn/data/tokenizer.hpp>

#include <string>
#include <vector>

using attn::data::ChineseCharTokenizer;
using attn::data::EnglishTokenizer;
using attn::data::TokenizeStats;
using V = std::vector<std::string>;

TEST_CASE("english: lowercases, splits punctuation, keeps inner apostrophes, drops <br />") {
  EnglishTokenizer tok;
  CHECK(tok("A wonderful film.<br /><br />I didn't expect it to be THIS good!") ==
        V{"a", "wonderful", "film", ".", "i", "didn't", "expect", "it", "to", "be", "this", "good", "!"});
  CHECK(tok("one<BR>two<br/>three<br  / >four") == V{"one", "two", "three", "four"});
  CHECK(tok("<brx> <b>") == V{"<", "brx", ">", "<", "b", ">"});
}

TEST_CASE("english: apostrophes at word edges are punctuation") {
  EnglishTokenizer tok;
  CHECK(tok("'quoted' students' rock'n'roll don''t") ==
        V{"'", "quoted", "'", "students", "'", "rock'n'roll", "don", "'", "'", "t"});
  CHECK(tok("don\u2019t") == V{"don\u2019t"});  // typographic apostrophe
}

TEST_CASE("english: numbers, symbols and white space") {
  EnglishTokenizer tok;
  CHECK(tok("3.5/10 \u2014 meh...") == V{"3", ".", "5", "/", "10", "\u2014", "meh", ".", ".", "."});
  CHECK(tok(" \t\r\n\u00A0 ").empty());
  CHECK(tok("a\x01z\x7F").size() == 2);  // control characters separate and vanish
  CHECK(tok("").empty());
}

TEST_CASE("english: is_word_token tells words from punctuation, symbols and emoji of any script") {
  using attn::data::is_word_token;
  EnglishTokenizer tok;
  std::size_t words = 0;
  for (auto& t : tok("3.5/10 \u2014 meh... don\u00B4t \u00A3 5 \u2026 \u201Cok\u201D \U0001F600 caf\u00E9 \u041C\u0418\u0420 \xFF"))
    words += is_word_token(t) ? 1 : 0;
  CHECK(words == 11);  // 3 5 10 meh don t 5 ok café МИР U+FFFD
  CHECK_FALSE(is_word_token(""));
  CHECK_FALSE(is_word_token("\u2014"));
  CHECK_FALSE(is_word_token("\U0001F600"));
  CHECK(is_word_token("\u00C9cole"));
}

TEST_CASE("english: non-ASCII letters are word characters and keep their case") {
  EnglishTokenizer tok;
  CHECK(tok("Caf\u00E9 \u00C9COLE na\u00EFve \u041C\u0418\u0420") ==
        V{"caf\u00E9", "\u00C9cole", "na\u00EFve", "\u041C\u0418\u0420"});
  EnglishTokenizer keep_case({.lowercase = false});
  CHECK(keep_case("Hello World") == V{"Hello", "World"});
  EnglishTokenizer raw_html({.lowercase = true, .html_breaks = false});
  CHECK(raw_html("a<br/>b") == V{"a", "<", "br", "/", ">", "b"});
}

TEST_CASE("english: invalid bytes become U+FFFD inside words and are counted") {
  EnglishTokenizer tok;
  TokenizeStats st;
  CHECK(tok("bad\xFFword ok", &st) == V{"bad\uFFFDword", "ok"});
  CHECK(tok("\xE4\xB8", &st) == V{"\uFFFD"});
  CHECK(st.invalid == 2);
  CHECK(st.texts == 2);
  CHECK(st.tokens == 3);
}

TEST_CASE("chinese: one token per character, ASCII runs grouped and lowercased") {
  ChineseCharTokenizer tok;
  CHECK(tok("iPhone12\u53D1\u5E03\u4E86\uFF01") == V{"iphone12", "\u53D1", "\u5E03", "\u4E86", "\uFF01"});
  CHECK(tok("5G\u624B\u673A,GPU") == V{"5g", "\u624B", "\u673A", ",", "gpu"});
  ChineseCharTokenizer split_ascii({.lowercase = false, .group_ascii = false});
  CHECK(split_ascii("MV\u6B4C") == V{"M", "V", "\u6B4C"});
}

TEST_CASE("chinese: white space of every kind is dropped") {
  ChineseCharTokenizer tok;
  CHECK(tok("\u4F60\u3000\u597D \t!\r\n") == V{"\u4F60", "\u597D", "!"});
  CHECK(tok("   ").empty());
}

TEST_CASE("chinese: mixed Chinese, ASCII and emoji, an emoji with its modifiers is one token") {
  ChineseCharTokenizer tok;
  CHECK(tok("\u5468\u6770\u4F26 \u65B0\u6B4CMV\U0001F600") ==
        V{"\u5468", "\u6770", "\u4F26", "\u65B0", "\u6B4C", "mv", "\U0001F600"});
  CHECK(tok("\U0001F44D\U0001F3FD\u597D") == V{"\U0001F44D\U0001F3FD", "\u597D"});  // skin tone
  CHECK(tok("\u2764\uFE0F!") == V{"\u2764\uFE0F", "!"});                             // variation selector
  const std::string family = "\U0001F468\u200D\U0001F469\u200D\U0001F467";
  CHECK(tok(family + "\u5BB6") == V{family, "\u5BB6"});                            // ZWJ sequence
  CHECK(tok("\U0001F1E8\U0001F1F3\U0001F1FA\U0001F1F8") ==
        V{"\U0001F1E8\U0001F1F3", "\U0001F1FA\U0001F1F8"});                        // two flags
  CHECK(tok("\U0001F600 \U0001F3FD") == V{"\U0001F600", "\U0001F3FD"});            // a space breaks the cluster
  CHECK(tok("a\u200Db\uFE0F") == V{"a", "b"});                                     // stray joiners vanish
  // Keycaps: the digit, '#' or '*' with its keycap (and variation selector) is one token.
  CHECK(tok("1\uFE0F\u20E3#\uFE0F\u20E3*\u20E3") == V{"1\uFE0F\u20E3", "#\uFE0F\u20E3", "*\u20E3"});
  CHECK(tok("ab12\uFE0F\u20E3\u597D") == V{"ab1", "2\uFE0F\u20E3", "\u597D"});
  CHECK(tok("12\uFE0F") == V{"12"});  // no keycap: the selector vanishes after an ASCII run
}

TEST_CASE("chinese: invalid bytes become U+FFFD tokens and are counted") {
  ChineseCharTokenizer tok;
  TokenizeStats st;
  CHECK(tok("\u597D\xFF\xE4\xB8", &st) == V{"\u597D", "\uFFFD", "\uFFFD"});
  CHECK(st.invalid == 2);
  CHECK(tok("ab\xC0\xAF" "cd", &st) == V{"ab", "\uFFFD", "\uFFFD", "cd"});
  CHECK(st.invalid == 4);
  CHECK(st.tokens == 7);
}
