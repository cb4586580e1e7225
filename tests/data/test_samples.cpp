// SPDX-License-Identifier: MIT
// The data samples bundled with the examples (scripts/make-samples.sh) read cleanly end to end.
#include <catch2/catch.hpp>

#include <attn/data/clue.hpp>
#include <attn/data/imdb.hpp>
#include <attn/data/split.hpp>
#include <attn/data/tokenizer.hpp>
#include <attn/data/vocab.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace {
const std::filesystem::path examples = std::filesystem::path(ATTN_TEST_DATA_DIR) / ".." / "examples";
}

TEST_CASE("samples: the IMDb sample is 1,250 + 1,250 clean reviews") {
  const auto s = attn::data::read_imdb(examples / "imdb/sample/aclImdb", "train");
  CHECK(s.reviews.size() == 2500);
  CHECK(s.stats.skipped == 0);
  CHECK(s.stats.invalid_utf8 == 0);
  std::vector<int> labels;
  for (const auto& r : s.reviews) labels.push_back(r.label);
  CHECK(std::count(labels.begin(), labels.end(), 1) == 1250);
  const auto split = attn::data::stratified_split(labels, 0.2, 42);
  CHECK(split.valid.size() == 500);
  attn::data::EnglishTokenizer tok;
  attn::data::TokenizeStats st;
  attn::data::TokenCounts counts;
  for (const auto& r : s.reviews) counts.add(tok(r.text, &st));
  CHECK(st.invalid == 0);
  CHECK(attn::data::Vocab::build(counts, {.min_freq = 2}).size() > 5000);
}

TEST_CASE("samples: the TNEWS sample is 5,000 labeled lines over 15 classes") {
  const auto dir = examples / "clue/sample/tnews_public";
  const auto labels = attn::data::read_clue_labels(dir / "labels.json");
  CHECK(labels.size() == 15);
  const auto d = attn::data::read_clue(dir / "train.json", labels);
  CHECK(d.examples.size() == 5000);
  CHECK(d.stats.skipped == 0);
  std::vector<int> seen(15, 0);
  for (const auto& e : d.examples) seen.at(static_cast<std::size_t>(e.label)) = 1;
  CHECK(std::count(seen.begin(), seen.end(), 1) == 15);
  attn::data::ChineseCharTokenizer tok;
  attn::data::TokenizeStats st;
  for (const auto& e : d.examples) tok(e.sentence, &st);
  CHECK(st.invalid == 0);
  CHECK(st.tokens > 5000 * 10);
}
