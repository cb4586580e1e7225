// SPDX-License-Identifier: MIT
// Skip-gram pretraining of the IMDb model's input tables on the training reviews alone (no labels,
// no outside data). Each position's input vector is what the model sums there, positions aside:
// its word's embedding plus the embeddings of the hashed n-grams starting at it (the same hash,
// buckets and orders as make_batch). That vector predicts the words around it (a random window of
// 1..window words on each side, after frequent words are subsampled) against `negatives` words drawn
// from the unigram distribution to the power 0.75: word2vec's skip-gram objective with fastText's
// n-gram inputs, trained by SGD with a linearly decaying rate. The n-gram rows, which the classifier
// would otherwise learn from labels alone (and memorise), start from what their contexts say.
//
// One thread, a fixed order and one random stream: the tables are a pure function of the reviews
// and the seed.
#pragma once
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <attn/core/rng.hpp>

#include "nblr.hpp"

namespace imdb {

struct PretrainOptions {
  std::size_t epochs = 0;     // 0: no pretraining
  std::size_t window = 5;     // context words on each side (each centre draws 1..window)
  std::size_t negatives = 5;  // negative samples per context word
  double lr = 0.025;          // SGD rate at the start, decaying linearly to lr * 1e-4
  double subsample = 1e-4;    // word2vec's threshold t: a word of frequency f is kept with probability sqrt(t/f) + t/f
  std::uint64_t seed = 1;
};

/// The pretrained input tables (row-major, dim wide): words (vocab rows, row 0 = padding, zero) and
/// n-grams (buckets + 1 rows, row 0 = none, zero); the mean loss per context pair of each epoch.
struct Pretrained {
  std::size_t dim = 0;
  std::vector<float> words, ngrams;
  std::vector<double> epoch_loss;
  double seconds = 0;
  bool empty() const { return words.empty(); }
};

/// Pretrains on reviews (encoded word ids in [0, vocab)). progress(epoch, loss) is called after each epoch.
inline Pretrained pretrain_skipgram(const std::vector<std::vector<std::int32_t>>& reviews, std::size_t vocab, std::size_t dim,
                                    std::size_t ngram_buckets, std::size_t ngram_order, const PretrainOptions& o,
                                    const std::function<void(std::size_t, double)>& progress = {}) {
  using Vec = Eigen::Map<Eigen::VectorXf>;
  const auto start = std::chrono::steady_clock::now();
  Pretrained r;
  r.dim = dim;
  if (!o.epochs || vocab < 2 || reviews.empty()) return r;
  std::vector<double> count(vocab, 0.0);
  double total = 0;
  for (const auto& s : reviews)
    for (auto w : s) count[std::size_t(w)] += 1, total += 1;
  if (total == 0) return r;
  // Subsampling: the probability of keeping each word.
  std::vector<float> keep(vocab, 1.0f);
  for (std::size_t w = 0; w < vocab; ++w)
    if (count[w] > 0) {
      const double f = count[w] / total, t = o.subsample;
      keep[w] = float(std::min(1.0, std::sqrt(t / f) + t / f));
    }
  // Negative samples: a table of word ids in proportion to count^0.75.
  constexpr std::size_t kTable = std::size_t(1) << 22;
  std::vector<std::int32_t> table;
  table.reserve(kTable);
  {
    double z = 0;
    for (double c : count) z += std::pow(c, 0.75);
    double cum = 0;
    for (std::size_t w = 0; w < vocab && table.size() < kTable; ++w) {
      cum += std::pow(count[w], 0.75) / z;
      while (table.size() < kTable && double(table.size()) < cum * double(kTable)) table.push_back(std::int32_t(w));
    }
    while (table.size() < kTable) table.push_back(std::int32_t(vocab - 1));
  }
  attn::Rng rng(o.seed);
  const std::size_t orders = ngram_buckets ? ngram_order - 1 : 0;
  r.words.assign(vocab * dim, 0.0f);
  r.ngrams.assign(orders ? (ngram_buckets + 1) * dim : 0, 0.0f);
  const float a = 0.5f / float(dim);
  for (std::size_t i = dim; i < r.words.size(); ++i) r.words[i] = float(rng.uniform(-a, a));
  for (std::size_t i = dim; i < r.ngrams.size(); ++i) r.ngrams[i] = float(rng.uniform(-a, a));
  std::vector<float> out(vocab * dim, 0.0f);  // the context (output) vectors
  Eigen::VectorXf u(dim), grad(dim);
  std::vector<std::int32_t> ids;       // the kept words of a review
  std::vector<std::size_t> at;         // their positions in the review
  std::vector<std::int32_t> grams;     // the n-gram rows of a centre
  const double steps = double(o.epochs) * total;
  double done = 0;
  for (std::size_t epoch = 0; epoch < o.epochs; ++epoch) {
    double loss = 0, pairs = 0;
    for (const auto& s : reviews) {
      ids.clear();
      at.clear();
      for (std::size_t i = 0; i < s.size(); ++i)
        if (keep[std::size_t(s[i])] >= 1.0f || rng.uniform() < keep[std::size_t(s[i])]) ids.push_back(s[i]), at.push_back(i);
      const float lr = float(o.lr * std::max(1e-4, 1.0 - done / steps));
      done += double(s.size());
      for (std::size_t c = 0; c < ids.size(); ++c) {
        // The centre's input vector: its word and the n-grams starting at it in the review.
        grams.clear();
        for (std::size_t k = 0; k < orders; ++k)
          if (at[c] + k + 2 <= s.size()) grams.push_back(ngram_hash(s.data() + at[c], k + 2, ngram_buckets));
        u = Vec(&r.words[std::size_t(ids[c]) * dim], Eigen::Index(dim));
        for (auto g : grams) u += Vec(&r.ngrams[std::size_t(g) * dim], Eigen::Index(dim));
        grad.setZero();
        const std::size_t b = 1 + std::size_t(rng.below(o.window));
        const std::size_t lo = c >= b ? c - b : 0, hi = std::min(ids.size() - 1, c + b);
        for (std::size_t j = lo; j <= hi; ++j) {
          if (j == c) continue;
          for (std::size_t n = 0; n <= o.negatives; ++n) {
            const std::int32_t target = n == 0 ? ids[j] : table[std::size_t(rng.below(kTable))];
            if (n > 0 && target == ids[j]) continue;
            Vec v(&out[std::size_t(target) * dim], Eigen::Index(dim));
            const float score = u.dot(v), label = n == 0 ? 1.0f : 0.0f;
            const float p = 1.0f / (1.0f + std::exp(-std::clamp(score, -30.0f, 30.0f)));
            loss -= std::log(std::max(1e-7f, n == 0 ? p : 1.0f - p));
            pairs += n == 0;
            const float g = (label - p) * lr;
            grad += g * v;
            v += g * u;
          }
        }
        Vec(&r.words[std::size_t(ids[c]) * dim], Eigen::Index(dim)) += grad;
        for (auto g : grams) Vec(&r.ngrams[std::size_t(g) * dim], Eigen::Index(dim)) += grad;
      }
    }
    r.epoch_loss.push_back(pairs ? loss / pairs : 0.0);
    if (progress) progress(epoch + 1, r.epoch_loss.back());
  }
  std::fill(r.words.begin(), r.words.begin() + std::ptrdiff_t(dim), 0.0f);  // padding rows stay zero
  if (!r.ngrams.empty()) std::fill(r.ngrams.begin(), r.ngrams.begin() + std::ptrdiff_t(dim), 0.0f);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace imdb
