// SPDX-License-Identifier: MIT
// Vocabulary: deterministic build, encode/decode, save/load round trip and hostile files.
#include <catch2/catch.hpp>

#include <attn/core/rng.hpp>
#include <attn/data/vocab.hpp>

#include <string>
#include <vector>

#include <sys/stat.h>

#include "../temp_dir.hpp"

using attn::data::TokenCounts;
using attn::data::Vocab;
using V = std::vector<std::string>;

namespace {
TokenCounts counts_of(const std::vector<std::pair<std::string, int>>& items) {
  TokenCounts c;
  for (const auto& [t, n] : items) c.add(t, static_cast<std::uint64_t>(n));
  return c;
}
}  // namespace

TEST_CASE("vocab: build orders by count, then by token bytes, applies min_freq and max_size") {
  const auto c = counts_of({{"the", 5}, {"b", 3}, {"a", 5}, {"c", 3}, {"z", 1}, {"<pad>", 9}, {"<unk>", 9}});
  const Vocab v = Vocab::build(c, {.min_freq = 2});
  CHECK(v.tokens() == V{"<pad>", "<unk>", "a", "the", "b", "c"});
  CHECK(Vocab::build(c, {.min_freq = 1, .max_size = 4}).tokens() == V{"<pad>", "<unk>", "a", "the"});
  CHECK(Vocab::build(c, {.min_freq = 1, .max_size = 2}).size() == 2);
  CHECK(Vocab::build(c).size() == 7);  // <pad>/<unk> from the corpus are not added twice
}

TEST_CASE("vocab: ties compare bytes unsigned, independent of insertion order") {
  // "\u00E9" starts with byte 0xC3, which sorts after 'z' as unsigned but before it as signed char.
  const auto a = counts_of({{"z", 2}, {"\u00E9", 2}, {"y", 2}});
  const auto b = counts_of({{"\u00E9", 1}, {"y", 2}, {"z", 2}, {"\u00E9", 1}});
  const Vocab va = Vocab::build(a);
  CHECK(va.tokens() == V{"<pad>", "<unk>", "y", "z", "\u00E9"});
  CHECK(Vocab::build(b) == va);
}

TEST_CASE("vocab: encode maps unknown tokens to UNK and counts them, decode inverts") {
  TokenCounts c;
  c.add(V{"the", "cat", "sat", "the"});
  const Vocab v = Vocab::build(c);
  CHECK(v.id("the") == 2);
  CHECK(v.id("dog") == Vocab::unk_id);
  std::size_t unknown = 0;
  const auto ids = v.encode(V{"the", "dog", "cat", "emu"}, &unknown);
  CHECK(ids == std::vector<std::int32_t>{2, 1, v.id("cat"), 1});
  CHECK(unknown == 2);
  CHECK(v.decode(ids) == V{"the", "<unk>", "cat", "<unk>"});
  CHECK_THROWS_AS(v.token(99), attn::ArgumentError);
  CHECK_THROWS_AS(v.token(-1), attn::ArgumentError);
}

TEST_CASE("vocab: invalid build arguments and tokens are rejected") {
  TokenCounts c;
  c.add("x");
  CHECK_THROWS_AS(Vocab::build(c, {.min_freq = 0}), attn::ArgumentError);
  CHECK_THROWS_AS(Vocab::build(c, {.min_freq = 1, .max_size = 1}), attn::ArgumentError);
  CHECK_THROWS_AS(Vocab::from_tokens(V{"a", "a"}), attn::ArgumentError);
  CHECK_THROWS_AS(Vocab::from_tokens(V{""}), attn::ArgumentError);
  CHECK_THROWS_AS(Vocab::from_tokens(V{"bad\xFF"}), attn::ArgumentError);
}

TEST_CASE("vocab: save/load round trip, with escapes for newline, tab, CR and backslash") {
  TempDir tmp;
  const V tokens{"the", "\u4E2D", "\U0001F600", "a\nb", "tab\there", "cr\r", "back\\slash", "\\n", "<br", "\u00E9t\u00E9"};
  const Vocab v = Vocab::from_tokens(tokens);
  const auto path = tmp.path() / "vocab.txt";
  v.save(path);
  const std::string text = attn::data::read_file(path, 1 << 20);
  CHECK(text.starts_with("<pad>\n<unk>\nthe\n"));
  CHECK(text.find("a\\nb\ntab\\there\ncr\\r\nback\\\\slash\n\\\\n\n") != std::string::npos);
  const Vocab back = Vocab::load(path);
  CHECK(back == v);
  CHECK(back.id("a\nb") == v.id("a\nb"));
  CHECK(back.size() == tokens.size() + 2);
}

TEST_CASE("vocab: save replaces the file atomically and leaves no temp files") {
  TempDir tmp;
  const auto path = tmp.path() / "v.txt";
  write_bytes(path, "old contents");
  Vocab::from_tokens(V{"new"}).save(path);
  CHECK(Vocab::load(path).tokens() == V{"<pad>", "<unk>", "new"});
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);
  CHECK_THROWS_WITH(Vocab().save(tmp.path() / "no" / "such" / "dir.txt"), Catch::Contains("dir.txt"));
}

TEST_CASE("vocab: load accepts a BOM and CRLF line ends") {
  const Vocab v = Vocab::load(fixture("vocab/good_crlf_bom.txt"));
  CHECK(v.tokens() == V{"<pad>", "<unk>", "the", "a\tb"});
}

TEST_CASE("vocab: load errors name the file and the line") {
  using Catch::Contains;
  CHECK_THROWS_AS(Vocab::load(fixture("vocab/missing.txt")), attn::IoError);
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/missing.txt")), Contains("missing.txt"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/empty.txt")), Contains("empty.txt: line 1: empty file"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/no_header.txt")),
                    Contains("no_header.txt: line 1: expected the header token '<pad>', found 'the'"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/no_unk.txt")), Contains("no_unk.txt: line 2: missing"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/duplicate.txt")),
                    Contains("duplicate.txt: line 5: duplicate token 'the' (first on line 3)"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/invalid_utf8.txt")), Contains("invalid_utf8.txt: line 4: invalid UTF-8"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/counts.txt")), Contains("counts.txt: line 1: raw tab"));
  CHECK_THROWS_WITH(Vocab::load(fixture("vocab/bad_escape.txt")), Contains("bad_escape.txt: line 3: unknown escape \\q"));
  CHECK_THROWS_AS(Vocab::load(fixture("vocab/duplicate.txt")), attn::FormatError);
}

TEST_CASE("vocab: more hostile files made on the fly") {
  using Catch::Contains;
  TempDir tmp;
  const auto load = [&](const std::string& bytes) {
    const auto p = tmp.path() / "v.txt";
    write_bytes(p, bytes);
    return Vocab::load(p);
  };
  CHECK_THROWS_WITH(load("<pad>\n<unk>\n\nx\n"), Contains("line 3: empty line"));
  CHECK_THROWS_WITH(load("<pad>\n<unk>\nx\\"), Contains("line 3: backslash at end of line"));
  CHECK_THROWS_WITH(load("<pad>\n<unk>\nx\ry\n"), Contains("line 3: raw carriage return"));
  CHECK_THROWS_WITH(load("<pad>\n<pad>\n"), Contains("line 2: expected the header token '<unk>'"));
  CHECK_THROWS_WITH(load("<pad>\n<unk>\n<pad>\n"), Contains("line 3: duplicate token '<pad>' (first on line 1)"));
  CHECK(load("<pad>\n<unk>\nlast-without-newline").size() == 3);
  CHECK_THROWS_WITH(Vocab::load(tmp.path()), Contains("is a directory"));
  write_bytes(tmp.path() / "big.txt", std::string(100, 'x'));
  CHECK_THROWS_WITH(Vocab::load(tmp.path() / "big.txt", 10), Contains("larger than the limit"));
}

TEST_CASE("vocab: randomly corrupted files load or throw attn::FormatError, nothing else") {
  TempDir tmp;
  const auto good = tmp.path() / "good.txt";
  Vocab::from_tokens(V{"the", "a\tb", "\u4E2D", "x\\y", "\U0001F600", "end"}).save(good);
  const std::string base = attn::data::read_file(good, 1 << 20);
  attn::Rng rng(9);
  int ok = 0, errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s = base;
    const std::size_t at = rng.below(s.size());
    switch (rng.below(3)) {
      case 0: s[at] = static_cast<char>(rng.below(256)); break;
      case 1: s.erase(at, 1 + rng.below(6)); break;
      default: s.insert(at, 1, "\n\t\\\r\xFF"[rng.below(5)]); break;
    }
    const auto p = tmp.path() / "fuzz.txt";
    write_bytes(p, s);
    try {
      const Vocab v = Vocab::load(p);
      REQUIRE(v.token(0) == "<pad>");
      REQUIRE(v.token(1) == "<unk>");
      for (const auto& t : v.tokens()) REQUIRE(attn::data::is_valid_utf8(t));
      ++ok;
    } catch (const attn::FormatError& e) {
      REQUIRE(std::string(e.what()).find("fuzz.txt: line ") != std::string::npos);
      ++errors;
    }
  }
  CHECK(ok > 0);
  CHECK(errors > 0);
}

TEST_CASE("read_file and Vocab::load reject a FIFO instead of waiting for a writer") {
  TempDir tmp;
  const auto fifo = tmp.path() / "vocab.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(attn::data::read_file(fifo, 1 << 20), Catch::Matchers::Contains("vocab.fifo: is a pipe or socket"));
  CHECK_THROWS_AS(Vocab::load(fifo), attn::IoError);
}
