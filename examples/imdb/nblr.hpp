// SPDX-License-Identifier: MIT
// NB-LR: Wang and Manning's NBSVM ("Baselines and Bigrams", ACL 2012) with the logistic loss. Each
// review is the set of its distinct hashed n-grams (orders 1..order); feature i has the value
// r_i, the naive-Bayes log-count ratio of n-gram i counted over the training reviews, and an
// L2-regularised logistic regression is fitted on those features by LIBLINEAR's dual coordinate
// descent. The classifier uses its log-odds as one input of the head: for the training reviews
// from k-fold cross-fitting (each review scored by a fit that did not see it, so the head learns
// how far to trust the score on unseen text), for everything else from the fit on all of them.
#pragma once
#include <attn/attn.hpp>

#include <linear.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

namespace imdb {

struct NbLrConfig {
  std::size_t buckets = std::size_t(1) << 22;  // hash buckets of the n-grams (0: no NB-LR)
  std::size_t order = 3;                       // unigrams .. order-grams
  std::size_t max_tokens = 4096;               // tokens of a review counted
  double c = 1.0;                              // inverse regularisation strength (LIBLINEAR's C)
  double alpha = 1.0;                          // smoothing of the naive-Bayes counts
  double eps = 0.1;                            // LIBLINEAR's stopping tolerance
  std::size_t folds = 5;                       // cross-fitting folds for the training reviews' scores
};

/// Hash of the n-gram t[0..n) into [1, buckets] (0 is padding).
inline std::int32_t ngram_hash(const std::int32_t* t, std::size_t n, std::size_t buckets) {
  std::uint64_t h = 0x632BE59BD9B4E019ULL ^ n;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= std::uint64_t(std::uint32_t(t[i]));
    h *= 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
  }
  return std::int32_t(1 + h % buckets);
}

/// The distinct hashed n-grams of a review, ascending (LIBLINEAR wants ascending indices).
inline std::vector<std::int32_t> distinct_ngrams(const std::vector<std::int32_t>& s, const NbLrConfig& c) {
  std::vector<std::int32_t> out;
  const std::size_t n = std::min(s.size(), c.max_tokens);
  out.reserve(n * c.order);
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t k = 1; k <= c.order && j + k <= n; ++k) out.push_back(ngram_hash(s.data() + j, k, c.buckets));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// NB-LR's log-odds of the positive class for a review's distinct n-grams, from the effective
/// weight of every bucket and the bias.
inline float nblr_logit(const float* weight, float bias, const std::vector<std::int32_t>& ngrams) {
  double z = bias;
  for (auto i : ngrams) z += weight[std::size_t(i)];
  return float(z);
}

/// A fitted NB-LR: the effective weight r_i * w_i of every bucket (index 0 unused) and the bias.
struct NbLr {
  std::vector<float> weight;
  float bias = 0;
  float logit(const std::vector<std::int32_t>& ngrams) const { return nblr_logit(weight.data(), bias, ngrams); }
};

namespace detail {
inline void liblinear_quiet(const char*) {}
}  // namespace detail

/// Fits NB-LR on the reviews `rows` of `docs` (distinct n-grams) with labels 0/1.
inline NbLr fit_nblr(const std::vector<std::vector<std::int32_t>>& docs, const std::vector<int>& labels,
                     const std::vector<std::size_t>& rows, const NbLrConfig& c) {
  const std::size_t nb = c.buckets;
  if (nb == 0 || nb >= std::size_t(1) << 30) throw attn::ArgumentError("NB-LR: buckets must be in [1, 2^30), got " + std::to_string(nb));
  std::size_t npos = 0;
  for (auto d : rows) npos += labels[d] == 1;
  if (npos == 0 || npos == rows.size()) {  // one class only: its smoothed prior log-odds, no n-gram weights
    NbLr out;
    out.weight.assign(nb + 1, 0.0f);
    out.bias = float((npos ? 1.0 : -1.0) * std::log(double(rows.size()) + 1.0));
    return out;
  }
  // Naive-Bayes log-count ratios over these reviews (binarized: the n-gram lists are distinct).
  std::vector<double> p(nb + 1, c.alpha), q(nb + 1, c.alpha);
  for (auto d : rows) {
    auto& cnt = labels[d] == 1 ? p : q;
    for (auto i : docs[d]) cnt[std::size_t(i)] += 1;
  }
  const double sp = std::accumulate(p.begin() + 1, p.end(), 0.0), sq = std::accumulate(q.begin() + 1, q.end(), 0.0);
  std::vector<double> r(nb + 1, 0.0);
  for (std::size_t i = 1; i <= nb; ++i) r[i] = std::log(p[i] / sp) - std::log(q[i] / sq);
  p = {}, q = {};

  // The problem: feature i has the value r_i; a constant feature nb + 1 carries the bias.
  std::size_t nnz = 0;
  for (auto d : rows) nnz += docs[d].size() + 2;
  std::vector<feature_node> nodes(nnz);
  std::vector<feature_node*> x(rows.size());
  std::vector<double> y(rows.size());
  std::size_t k = 0;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    x[j] = nodes.data() + k;
    for (auto i : docs[rows[j]]) nodes[k++] = {i, r[std::size_t(i)]};
    nodes[k++] = {int(nb + 1), 1.0};
    nodes[k++] = {-1, 0.0};
    y[j] = labels[rows[j]] == 1 ? 1.0 : -1.0;
  }
  problem prob{};
  prob.l = int(rows.size());
  prob.n = int(nb + 1);
  prob.y = y.data();
  prob.x = x.data();
  prob.bias = 1.0;
  parameter param{};
  param.solver_type = L2R_LR_DUAL;
  param.eps = c.eps;
  param.C = c.c;
  if (const char* err = check_parameter(&prob, &param)) throw attn::ArgumentError(std::string("NB-LR: ") + err);
  set_print_string_function(&detail::liblinear_quiet);
  std::srand(1);  // LIBLINEAR shuffles with rand(): the same fit on every run
  model* m = train(&prob, &param);
  std::unique_ptr<model, void (*)(model*)> guard(m, [](model* mm) { free_and_destroy_model(&mm); });
  // LIBLINEAR's decision value favours the first label it saw.
  const double sign = m->label[0] == 1 ? 1.0 : -1.0;
  NbLr out;
  out.weight.assign(nb + 1, 0.0f);
  for (std::size_t i = 1; i <= nb; ++i) out.weight[i] = float(sign * m->w[i - 1] * r[i]);
  out.bias = float(sign * m->w[nb]);
  return out;
}

/// k-fold cross-fitted log-odds of every review in `docs` (each from a fit without its fold);
/// the folds are a fixed-seed shuffle.
inline std::vector<float> cross_fit_nblr(const std::vector<std::vector<std::int32_t>>& docs, const std::vector<int>& labels,
                                         const NbLrConfig& c, std::uint64_t seed) {
  const std::size_t n = docs.size(), k = std::max<std::size_t>(2, std::min(c.folds, n));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  attn::Rng rng(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  std::vector<float> out(n, 0.0f);
  for (std::size_t f = 0; f < k; ++f) {
    std::vector<std::size_t> fit_rows, held;
    for (std::size_t i = 0; i < n; ++i) (i % k == f ? held : fit_rows).push_back(order[i]);
    const auto m = fit_nblr(docs, labels, fit_rows, c);
    for (auto d : held) out[d] = m.logit(docs[d]);
  }
  return out;
}

/// Platt scaling: the (a, b) for which sigmoid(a * z + b) best fits the labels, by Newton's method
/// on the cross-entropy with Platt's smoothed targets (which keep a finite when the scores
/// separate the classes). Fitted on cross-fitted scores, a says how far to trust the raw log-odds.
struct PlattScale {
  double a = 1, b = 0;
};

inline PlattScale platt_scale(const std::vector<float>& z, const std::vector<int>& labels) {
  double npos = 0;
  for (int y : labels) npos += y == 1;
  const double nneg = double(labels.size()) - npos;
  const double tpos = (npos + 1) / (npos + 2), tneg = 1 / (nneg + 2);
  auto loss = [&](double a, double b) {
    double l = 0;
    for (std::size_t i = 0; i < z.size(); ++i) {
      const double f = a * z[i] + b, t = labels[i] == 1 ? tpos : tneg;
      // -t log p - (1 - t) log(1 - p) with p = sigmoid(f), computed without overflow
      l += (f >= 0 ? (1 - t) * f + std::log1p(std::exp(-f)) : -t * f + std::log1p(std::exp(f)));
    }
    return l;
  };
  PlattScale s{0, 0};
  double cur = loss(s.a, s.b);
  for (int it = 0; it < 100; ++it) {
    double ga = 0, gb = 0, haa = 1e-12, hab = 0, hbb = 1e-12;
    for (std::size_t i = 0; i < z.size(); ++i) {
      const double p = 1 / (1 + std::exp(-(s.a * z[i] + s.b))), t = labels[i] == 1 ? tpos : tneg, w = p * (1 - p);
      ga += (p - t) * z[i], gb += p - t;
      haa += w * z[i] * z[i], hab += w * z[i], hbb += w;
    }
    const double det = haa * hbb - hab * hab;
    if (!(det > 0)) break;
    const double da = -(hbb * ga - hab * gb) / det, db = -(haa * gb - hab * ga) / det;
    double step = 1;  // halve the Newton step until the loss does not rise
    while (step > 1e-10 && loss(s.a + step * da, s.b + step * db) > cur) step /= 2;
    if (step <= 1e-10) break;
    s.a += step * da, s.b += step * db;
    const double next = loss(s.a, s.b);
    const bool done = cur - next < 1e-12 * (1 + cur);
    cur = next;
    if (done) break;
  }
  return s;
}

}  // namespace imdb
