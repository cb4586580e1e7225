// SPDX-License-Identifier: MIT
// CLUE JSON-lines reader: labels.json, label mapping, and truncated/missing-field/unknown-label/
// non-UTF-8/empty-sentence/BOM/CRLF lines.
#include <catch2/catch.hpp>

#include <attn/core/rng.hpp>
#include <attn/data/clue.hpp>

#include <string>

#include "../temp_dir.hpp"

using namespace attn::data;
using Catch::Contains;

namespace {
ClueLabels tnews_labels() { return read_clue_labels(fixture("clue/labels.json")); }
}  // namespace

TEST_CASE("clue: labels.json defines the dense class order") {
  const ClueLabels l = tnews_labels();
  REQUIRE(l.size() == 3);
  CHECK(l.names == std::vector<std::string>{"100", "101", "102"});
  CHECK(l.descriptions[2] == "news_entertainment");
  CHECK(l.index("101") == 1);
  CHECK_FALSE(l.index("105").has_value());
}

TEST_CASE("clue: labels.json errors name the file and line") {
  CHECK_THROWS_WITH(read_clue_labels(fixture("clue/labels_dup.json")),
                    Contains("labels_dup.json: line 4: duplicate label '101'"));
  CHECK_THROWS_WITH(read_clue_labels(fixture("clue/labels_empty.json")), Contains("labels_empty.json: line 1: no labels"));
  CHECK_THROWS_AS(read_clue_labels(fixture("clue/none.json")), attn::IoError);
  TempDir tmp;
  write_bytes(tmp.path() / "l.json", "{\"label\": \"0\", \"label_des\": \"app\"}\n{\"label_des\": \"x\"}\n");
  CHECK_THROWS_WITH(read_clue_labels(tmp.path() / "l.json"), Contains("l.json: line 2: missing field 'label'"));
  write_bytes(tmp.path() / "l.json", "{\"label\": 0, \"label_des\": \"app\"}\n");  // IFLYTEK-style, integer label
  const auto l = read_clue_labels(tmp.path() / "l.json");
  CHECK(l.names[0] == "0");
  CHECK(l.descriptions[0] == "app");
}

TEST_CASE("clue: reads sentences, maps labels, skips blank lines") {
  const ClueDataset d = read_clue(fixture("clue/train.json"), tnews_labels());
  REQUIRE(d.examples.size() == 3);
  CHECK(d.examples[0].label == 1);
  CHECK(d.examples[0].sentence == "\u4E0A\u8BFE\u65F6\u5B66\u751F\u624B\u673A\u54CD\u4E2A\u4E0D\u505C");
  CHECK(d.examples[0].keywords == "\u624B\u673A,\u8001\u5E08");
  CHECK(d.examples[1].label == 0);
  CHECK(d.examples[2].label == 2);
  CHECK(d.examples[2].line == 4);
  CHECK(d.stats.empty_lines == 1);
  CHECK(d.stats.lines == 4);
  CHECK(d.stats.invalid_utf8 == 0);
}

TEST_CASE("clue: a truncated JSON line is a FormatError with file and line, or skipped by option") {
  CHECK_THROWS_AS(read_clue(fixture("clue/truncated.json"), tnews_labels()), attn::FormatError);
  CHECK_THROWS_WITH(read_clue(fixture("clue/truncated.json"), tnews_labels()),
                    Contains("truncated.json: line 2: malformed JSON"));
  const ClueDataset d = read_clue(fixture("clue/truncated.json"), tnews_labels(), {.bad_lines = BadLines::skip});
  CHECK(d.examples.size() == 1);
  CHECK(d.stats.skipped == 1);
  REQUIRE(d.stats.skipped_messages.size() == 1);
  CHECK_THAT(d.stats.skipped_messages[0], Contains("truncated.json: line 2: malformed JSON"));
}

TEST_CASE("clue: a missing field is a FormatError with file and line, or skipped by option") {
  CHECK_THROWS_WITH(read_clue(fixture("clue/missing_field.json"), tnews_labels()),
                    Contains("missing_field.json: line 3: missing field 'sentence'"));
  const ClueDataset d = read_clue(fixture("clue/missing_field.json"), tnews_labels(), {.bad_lines = BadLines::skip});
  CHECK(d.examples.size() == 3);
  CHECK(d.examples[2].line == 4);
  CHECK(d.stats.skipped == 1);
}

TEST_CASE("clue: a label not in labels.json is always an error naming file and line") {
  CHECK_THROWS_WITH(read_clue(fixture("clue/unknown_label.json"), tnews_labels()),
                    Contains("unknown_label.json: line 2: label '105' is not in labels.json"));
  CHECK_THROWS_AS(read_clue(fixture("clue/unknown_label.json"), tnews_labels(), {.bad_lines = BadLines::skip}),
                  attn::FormatError);
}

TEST_CASE("clue: invalid UTF-8 inside a string is replaced and counted") {
  const ClueDataset d = read_clue(fixture("clue/invalid_utf8.json"), tnews_labels());
  REQUIRE(d.examples.size() == 2);
  CHECK(d.examples[1].sentence == "bad \uFFFD\uFFFD bytes \uFFFD");
  CHECK(d.stats.invalid_utf8 == 3);
}

TEST_CASE("clue: an empty sentence is kept and counted") {
  const ClueDataset d = read_clue(fixture("clue/empty_sentence.json"), tnews_labels());
  REQUIRE(d.examples.size() == 2);
  CHECK(d.examples[0].sentence.empty());
  CHECK(d.stats.empty_sentences == 1);
}

TEST_CASE("clue: a BOM and CRLF line ends are accepted") {
  const ClueDataset d = read_clue(fixture("clue/bom_crlf.json"), tnews_labels());
  REQUIRE(d.examples.size() == 2);
  CHECK(d.examples[0].sentence == "\u7B2C\u4E00\u6761");
  CHECK(d.examples[1].label == 2);
  CHECK(d.examples[1].keywords.empty());
}

TEST_CASE("clue: the unlabeled test split") {
  CHECK_THROWS_WITH(read_clue(fixture("clue/test.json"), tnews_labels()), Contains("test.json: line 1: missing field 'label'"));
  const ClueDataset d = read_clue(fixture("clue/test.json"), tnews_labels(), {.labeled = false});
  REQUIRE(d.examples.size() == 2);
  CHECK(d.examples[0].label == -1);
  CHECK(d.examples[1].id == 1);
  CHECK(d.stats.unlabeled == 2);
}

TEST_CASE("clue: mistyped fields and non-object lines are FormatErrors") {
  TempDir tmp;
  const auto p = tmp.path() / "x.json";
  const auto read = [&](const std::string& bytes) {
    write_bytes(p, bytes);
    return read_clue(p, tnews_labels());
  };
  CHECK_THROWS_WITH(read("[1, 2]\n"), Contains("x.json: line 1: expected a JSON object, found array"));
  CHECK_THROWS_WITH(read("{\"label\": \"100\", \"sentence\": 5}\n"), Contains("line 1: field 'sentence' must be a string"));
  CHECK_THROWS_WITH(read("{\"label\": [1], \"sentence\": \"a\"}\n"), Contains("line 1: field 'label' must be a string"));
  CHECK_THROWS_WITH(read("{\"label\": \"100\", \"sentence\": \"a\"} trailing\n"), Contains("line 1: malformed JSON"));
  CHECK_THROWS_WITH(read("{\"label\": \"100\", \"sentence\": \"\\ud800\"}\n"), Contains("line 1: malformed JSON"));
  CHECK_THROWS_WITH(read("\n\n{\"label\": \"100\", \"sentence\": \"a\",}\n"), Contains("line 3: malformed JSON"));
  CHECK(read("{\"label\": 101, \"sentence\": \"int label\"}").examples.at(0).label == 1);  // no final newline
  CHECK(read("").examples.empty());
  // The byte of a syntax error is the file's: invalid bytes before it (U+FFFD, three bytes, once
  // parsed) do not move it.
  const auto message = [&](const std::string& bytes) {
    try {
      read(bytes);
    } catch (const attn::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ascii = message("{\"label\": \"100\", \"sentence\": \"ab\" x}\n");
  const std::string bad = message("{\"label\": \"100\", \"sentence\": \"\xFF\xFE\" x}\n");
  const auto byte_of = [](const std::string& m) { return m.substr(m.find("at byte"), m.find(" of the line") - m.find("at byte")); };
  CHECK(byte_of(ascii) == "at byte 35");
  CHECK(byte_of(bad) == byte_of(ascii));
}

TEST_CASE("clue: numbers out of range are malformed lines, not crashes") {
  TempDir tmp;
  write_bytes(tmp.path() / "x.json", "{\"label\": \"100\", \"sentence\": \"a\", \"w\": 1e999}\n");
  CHECK_THROWS_WITH(read_clue(tmp.path() / "x.json", tnews_labels()), Contains("x.json: line 1: malformed JSON"));
}

TEST_CASE("clue: integers above 2^63-1 keep their value: no label or id wraps to a negative") {
  TempDir tmp;
  const auto p = tmp.path() / "x.json";
  ClueLabels wrapped;  // what 18446744073709551615 used to become through int64_t
  wrapped.add("-1", "");
  write_bytes(p, "{\"label\": 18446744073709551615, \"sentence\": \"a\"}\n");
  CHECK_THROWS_WITH(read_clue(p, wrapped), Contains("x.json: line 1: label '18446744073709551615' is not in labels.json"));
  write_bytes(p, "{\"label\": 18446744073709551615, \"label_des\": \"big\"}\n{\"label\": -1}\n");
  const ClueLabels big = read_clue_labels(p);
  REQUIRE(big.size() == 2);
  CHECK(big.names[0] == "18446744073709551615");
  write_bytes(p, "{\"sentence\": \"a\", \"id\": 18446744073709551615}\n");
  CHECK_THROWS_WITH(read_clue(p, tnews_labels(), {.labeled = false}),
                    Contains("x.json: line 1: field 'id' 18446744073709551615 is out of range"));
  write_bytes(p, "{\"sentence\": \"a\", \"id\": 9223372036854775807}\n");
  CHECK(read_clue(p, tnews_labels(), {.labeled = false}).examples.at(0).id == INT64_MAX);
  // A negative id is refused as such (-1 stands for "no id").
  write_bytes(p, "{\"sentence\": \"a\", \"id\": 0}\n{\"sentence\": \"b\", \"id\": -5}\n");
  CHECK_THROWS_WITH(read_clue(p, tnews_labels(), {.labeled = false}), Contains("x.json: line 2: field 'id' must be >= 0, found -5"));
}

TEST_CASE("clue: randomly corrupted files give a result or an attn::FormatError, nothing else") {
  const std::string base = read_file(fixture("clue/train.json"), 1 << 20);
  const ClueLabels labels = tnews_labels();
  attn::Rng rng(5);
  TempDir tmp;
  const auto p = tmp.path() / "fuzz.json";
  int ok = 0, errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s = base;
    for (std::uint64_t m = 0, n = 1 + rng.below(4); m < n && !s.empty(); ++m) {
      const std::size_t at = rng.below(s.size());
      switch (rng.below(4)) {
        case 0: s[at] = static_cast<char>(rng.below(256)); break;                      // overwrite a byte
        case 1: s.erase(at, 1 + rng.below(8)); break;                                  // delete a range
        case 2: s.insert(at, 1, "{}[]\",:\\\n\r"[rng.below(10)]); break;               // JSON syntax
        default: s.resize(at); break;                                                  // truncate
      }
    }
    write_bytes(p, s);
    try {
      const auto d = read_clue(p, labels, {.bad_lines = i % 2 ? BadLines::skip : BadLines::fail});
      for (const auto& e : d.examples) {
        REQUIRE(is_valid_utf8(e.sentence));
        REQUIRE(e.label >= 0);
        REQUIRE(e.label < 3);
      }
      ++ok;
    } catch (const attn::FormatError& e) {
      REQUIRE(std::string(e.what()).find("fuzz.json: line ") != std::string::npos);
      ++errors;
    }
  }
  CHECK(ok > 0);
  CHECK(errors > 0);
}
