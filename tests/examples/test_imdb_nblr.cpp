// SPDX-License-Identifier: MIT
// The IMDb example's NB-LR score (examples/imdb/nblr.hpp): n-gram extraction, the sign of the
// fitted log-odds whichever label LIBLINEAR sees first, and cross-fitting (a review's score comes
// from a fit that did not see it).
#include <catch2/catch.hpp>

#include "../../examples/imdb/nblr.hpp"

using imdb::NbLrConfig;

namespace {

NbLrConfig small_config() {
  NbLrConfig c;
  c.buckets = 1 << 16;
  c.order = 3;
  return c;
}

// Reviews of 30 tokens from a 200-word vocabulary; word 7 marks the positive class and word 8 the
// negative one (each present in 60% of its class's reviews, and in no review of the other class).
struct Corpus {
  std::vector<std::vector<std::int32_t>> docs;
  std::vector<int> labels;
};

Corpus make_corpus(std::size_t n, std::uint64_t seed, int first_label) {
  attn::Rng rng(seed);
  Corpus c;
  for (std::size_t i = 0; i < n; ++i) {
    const int y = (int(i) + first_label) % 2;
    std::vector<std::int32_t> d;
    for (int t = 0; t < 30; ++t) d.push_back(std::int32_t(10 + rng.below(190)));
    if (rng.uniform() < 0.6) d[rng.below(30)] = y == 1 ? 7 : 8;
    c.docs.push_back(d);
    c.labels.push_back(y);
  }
  return c;
}

std::vector<std::vector<std::int32_t>> grams(const std::vector<std::vector<std::int32_t>>& docs, const NbLrConfig& c) {
  std::vector<std::vector<std::int32_t>> g;
  for (auto& d : docs) g.push_back(imdb::distinct_ngrams(d, c));
  return g;
}

}  // namespace

TEST_CASE("distinct_ngrams: every n-gram up to the order once, ascending, in [1, buckets]") {
  auto c = small_config();
  const auto g = imdb::distinct_ngrams({5, 6, 7}, c);
  CHECK(g.size() == 6);  // 3 unigrams, 2 bigrams, 1 trigram (no collisions at 2^16 buckets)
  CHECK(std::is_sorted(g.begin(), g.end()));
  for (auto i : g) CHECK((i >= 1 && std::size_t(i) <= c.buckets));
  // A repeated phrase adds nothing; the order bounds the n-grams.
  CHECK(imdb::distinct_ngrams({5, 6, 7, 5, 6, 7}, c).size() == 6 + 3);  // + (7 5), (7 5 6), (6 7 5)
  c.order = 1;
  CHECK(imdb::distinct_ngrams({5, 6, 7, 5}, c).size() == 3);
  c.order = 3, c.max_tokens = 2;
  CHECK(imdb::distinct_ngrams({5, 6, 7}, c).size() == 3);  // (5) (6) (5 6)
  // Bigram order matters.
  CHECK(imdb::ngram_hash(std::vector<std::int32_t>{5, 6}.data(), 2, 1 << 30) !=
        imdb::ngram_hash(std::vector<std::int32_t>{6, 5}.data(), 2, 1 << 30));
}

TEST_CASE("fit_nblr: positive log-odds mean the positive class, whichever label comes first") {
  const auto c = small_config();
  for (int first : {0, 1}) {
    const auto train = make_corpus(400, 1, first), held = make_corpus(400, 2, 0);
    const auto tg = grams(train.docs, c), hg = grams(held.docs, c);
    std::vector<std::size_t> rows(tg.size());
    std::iota(rows.begin(), rows.end(), 0);
    const auto m = imdb::fit_nblr(tg, train.labels, rows, c);
    REQUIRE(m.weight.size() == c.buckets + 1);
    const std::int32_t pos = 7, neg = 8;
    CHECK(m.weight[std::size_t(imdb::ngram_hash(&pos, 1, c.buckets))] > 0.5f);
    CHECK(m.weight[std::size_t(imdb::ngram_hash(&neg, 1, c.buckets))] < -0.5f);
    // Held-out reviews holding a marker word are classified by it; the others are near chance.
    std::size_t marked = 0, right = 0;
    for (std::size_t i = 0; i < hg.size(); ++i) {
      const auto& d = held.docs[i];
      if (std::find(d.begin(), d.end(), 7) == d.end() && std::find(d.begin(), d.end(), 8) == d.end()) continue;
      ++marked;
      right += (m.logit(hg[i]) > 0) == (held.labels[i] == 1);
    }
    INFO("first label " << first << ": " << right << " of " << marked);
    CHECK(double(right) >= 0.95 * double(marked));
  }
}

TEST_CASE("cross_fit_nblr: a review's score comes from a fit that did not see it") {
  // Labels are random and every review holds a word of its own: a fit that saw a review
  // memorises it through that word, one that did not can only guess.
  auto c = small_config();
  c.folds = 4;
  attn::Rng rng(3);
  std::vector<std::vector<std::int32_t>> docs;
  std::vector<int> labels;
  for (std::size_t i = 0; i < 400; ++i) {
    std::vector<std::int32_t> d{std::int32_t(1000 + i)};
    for (int t = 0; t < 10; ++t) d.push_back(std::int32_t(10 + rng.below(50)));
    docs.push_back(d);
    labels.push_back(rng.uniform() < 0.5 ? 1 : 0);
  }
  const auto g = grams(docs, c);
  std::vector<std::size_t> rows(g.size());
  std::iota(rows.begin(), rows.end(), 0);
  const auto full = imdb::fit_nblr(g, labels, rows, c);
  const auto oof = imdb::cross_fit_nblr(g, labels, c, 11);
  REQUIRE(oof.size() == g.size());
  std::size_t in_sample = 0, crossed = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    in_sample += (full.logit(g[i]) > 0) == (labels[i] == 1);
    crossed += (oof[i] > 0) == (labels[i] == 1);
  }
  INFO("in-sample " << in_sample << ", cross-fitted " << crossed << " of 400");
  CHECK(in_sample > 380);
  CHECK(crossed < 240);
  // The folds are a fixed-seed shuffle: the same seed gives the same scores.
  CHECK(imdb::cross_fit_nblr(g, labels, c, 11) == oof);
}

TEST_CASE("platt_scale: recovers the scale and offset of over-confident scores, stays finite on separable ones") {
  // Labels drawn with P(y = 1) = sigmoid(u); the scores are 3u - 1, so the fit is a = 1/3, b = 1/3.
  attn::Rng rng(5);
  std::vector<float> z;
  std::vector<int> y;
  for (int i = 0; i < 20000; ++i) {
    const double u = rng.normal() * 2;
    y.push_back(rng.uniform() < 1 / (1 + std::exp(-u)) ? 1 : 0);
    z.push_back(float(3 * u - 1));
  }
  const auto s = imdb::platt_scale(z, y);
  CHECK(s.a == Approx(1.0 / 3).margin(0.02));
  CHECK(s.b == Approx(1.0 / 3).margin(0.05));
  // Perfectly separated scores: Platt's smoothed targets keep the fit finite.
  const auto sep = imdb::platt_scale({-2, -1, 1, 2}, {0, 0, 1, 1});
  CHECK(std::isfinite(sep.a));
  CHECK(sep.a > 0);
  CHECK(sep.a < 10);
}

TEST_CASE("fit_nblr: reviews of one class only give that class's prior, not an error") {
  const auto c = small_config();
  const std::vector<std::vector<std::int32_t>> docs{{5, 6}, {6, 7}, {7, 8}};
  const std::vector<int> labels{1, 1, 1};
  const auto m = imdb::fit_nblr(docs, labels, {0, 1, 2}, c);
  CHECK(m.logit(imdb::distinct_ngrams({5, 6}, c)) > 0);
  const auto n = imdb::fit_nblr(docs, {0, 0, 0}, {0, 1, 2}, c);
  CHECK(n.logit(imdb::distinct_ngrams({5, 6}, c)) < 0);
}
