// SPDX-License-Identifier: MIT
// The IMDb example's skip-gram pretraining (examples/imdb/pretrain.hpp): words that share contexts
// end up closer than words that do not, the loss falls, the padding rows stay zero, and the tables
// are a pure function of the reviews and the seed.
#include <catch2/catch.hpp>

#include <cmath>

#include "../../examples/imdb/pretrain.hpp"

namespace {

// Two topics: reviews draw their words from ids 2..11 or from 12..21 (never both).
std::vector<std::vector<std::int32_t>> two_topics(std::size_t n, std::uint64_t seed) {
  attn::Rng rng(seed);
  std::vector<std::vector<std::int32_t>> out;
  for (std::size_t r = 0; r < n; ++r) {
    const std::int32_t base = r % 2 ? 12 : 2;
    std::vector<std::int32_t> s;
    for (std::size_t i = 0; i < 40; ++i) s.push_back(base + std::int32_t(rng.below(10)));
    out.push_back(s);
  }
  return out;
}

double cosine(const std::vector<float>& t, std::size_t dim, std::size_t a, std::size_t b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t k = 0; k < dim; ++k) {
    const double x = t[a * dim + k], y = t[b * dim + k];
    ab += x * y, aa += x * x, bb += y * y;
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("pretrain_skipgram: words of one topic end up closer than words of two, and the loss falls") {
  const auto reviews = two_topics(400, 3);
  const std::size_t dim = 16, vocab = 22, buckets = 256;
  imdb::PretrainOptions o{.epochs = 4, .window = 3, .negatives = 4, .lr = 0.05, .subsample = 1.0, .seed = 5};
  const auto r = imdb::pretrain_skipgram(reviews, vocab, dim, buckets, 3, o);
  REQUIRE(r.words.size() == vocab * dim);
  REQUIRE(r.ngrams.size() == (buckets + 1) * dim);
  REQUIRE(r.epoch_loss.size() == 4);
  CHECK(r.epoch_loss.back() < r.epoch_loss.front());
  double same = 0, across = 0;
  std::size_t ns = 0, na = 0;
  for (std::size_t a = 2; a < 22; ++a)
    for (std::size_t b = a + 1; b < 22; ++b) {
      const bool one_topic = (a < 12) == (b < 12);
      (one_topic ? same : across) += cosine(r.words, dim, a, b);
      ++(one_topic ? ns : na);
    }
  INFO("mean cosine within a topic " << same / double(ns) << ", across " << across / double(na));
  CHECK(same / double(ns) > across / double(na) + 0.3);
  for (std::size_t k = 0; k < dim; ++k) {  // padding rows
    CHECK(r.words[k] == 0.0f);
    CHECK(r.ngrams[k] == 0.0f);
  }
  // The same reviews and seed give the same tables; another seed others.
  CHECK(imdb::pretrain_skipgram(reviews, vocab, dim, buckets, 3, o).words == r.words);
  o.seed = 6;
  CHECK(imdb::pretrain_skipgram(reviews, vocab, dim, buckets, 3, o).words != r.words);
  // No epochs, or no n-gram buckets.
  o.epochs = 0;
  CHECK(imdb::pretrain_skipgram(reviews, vocab, dim, buckets, 3, o).empty());
  o.epochs = 1;
  const auto words_only = imdb::pretrain_skipgram(reviews, vocab, dim, 0, 3, o);
  CHECK(words_only.ngrams.empty());
  CHECK(words_only.words.size() == vocab * dim);
}
