// SPDX-License-Identifier: MIT
// The IMDb sentiment classifier: token + learned position embeddings, one multi-head self-attention
// block (residual, LayerNorm, optional feed-forward) over the first and last --max-len/2 tokens,
// masked mean+max pooling, an optional hashed unigram+bigram bag over the whole review, the log-odds
// of an NB-LR model over the review's uni-, bi- and trigrams (nblr.hpp), and a linear head.
// Heads is a template argument: each head count is its own type. The token and n-gram tables
// have row-sparse gradients (only the rows a batch uses are updated).
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include "../common/json_files.hpp"
#include "nblr.hpp"
#include "options.hpp"

namespace imdb {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

inline constexpr std::size_t kDim = 128;       // model width
inline constexpr std::size_t kNgramDim = 64;   // width of the n-gram bag feature

/// Which tokens of a review longer than max_len the attention sees.
enum class Truncate { head, tail, head_tail };

inline Truncate parse_truncate(const std::string& s) {
  if (s == "head") return Truncate::head;
  if (s == "tail") return Truncate::tail;
  if (s == "head+tail") return Truncate::head_tail;
  throw attn::ArgumentError("truncate: unknown mode '" + s + "' (expected head, tail or head+tail)");
}
inline std::string to_string(Truncate t) { return t == Truncate::head ? "head" : t == Truncate::tail ? "tail" : "head+tail"; }

/// Source positions kept from a review of n tokens: all of them when n <= max_len; else the first
/// max_len, the last max_len, or the first max_len/2 and the last max_len - max_len/2.
inline std::vector<std::size_t> kept_positions(std::size_t n, std::size_t max_len, Truncate mode) {
  std::vector<std::size_t> pos;
  if (n <= max_len) {
    for (std::size_t i = 0; i < n; ++i) pos.push_back(i);
    return pos;
  }
  const std::size_t head = mode == Truncate::head ? max_len : mode == Truncate::tail ? 0 : max_len / 2;
  for (std::size_t i = 0; i < head; ++i) pos.push_back(i);
  for (std::size_t i = n - (max_len - head); i < n; ++i) pos.push_back(i);
  return pos;
}

struct ModelConfig {
  std::size_t vocab = 0;
  std::size_t max_len = 256;       // tokens the attention sees
  Truncate truncate = Truncate::head_tail;
  std::size_t bag_max_len = 2048;  // tokens the n-gram bag sees
  std::size_t ngram_buckets = 0;   // buckets of the n-gram bag (0: no bag)
  std::size_t nblr_buckets = 0;    // buckets of the NB-LR n-grams (0: no NB-LR score)
  std::size_t nblr_order = 3;
  std::size_t nblr_max_tokens = NbLrConfig{}.max_tokens;
  double dropout = 0.1;
  double attn_dropout = 0.1;
  bool ffn = true;

  nlohmann::json to_json() const {
    return {{"vocab", vocab}, {"max_len", max_len}, {"truncate", to_string(truncate)}, {"bag_max_len", bag_max_len},
            {"ngram_buckets", ngram_buckets}, {"nblr_buckets", nblr_buckets}, {"nblr_order", nblr_order},
            {"nblr_max_tokens", nblr_max_tokens}, {"dropout", dropout}, {"attn_dropout", attn_dropout}, {"ffn", ffn}};
  }
  /// Reads config.json's "model" object; every field is range-checked (examples::FieldError
  /// "model.max_len: ..." otherwise) before anything is allocated from it.
  static ModelConfig from_json(const nlohmann::json& j) {
    using namespace examples;
    const std::string m = "model.";
    ModelConfig c;
    c.vocab = json_count(j, "vocab", 2, kMaxVocab, m);
    c.max_len = json_count(j, "max_len", 1, kMaxLen, m);
    const std::string t = json_string(j, "truncate", m);
    if (t != "head" && t != "tail" && t != "head+tail") throw FieldError(m + "truncate", "'" + t + "' is not head, tail or head+tail");
    c.truncate = parse_truncate(t);
    c.bag_max_len = json_count(j, "bag_max_len", 1, kMaxBagLen, m);
    c.ngram_buckets = json_count(j, "ngram_buckets", 0, kMaxNgramBuckets, m);
    c.nblr_buckets = json_count(j, "nblr_buckets", 0, kMaxNblrBuckets, m);
    c.nblr_order = json_count(j, "nblr_order", 1, 5, m);
    c.nblr_max_tokens = json_count(j, "nblr_max_tokens", 1, kMaxBagLen, m);
    c.dropout = json_real(j, "dropout", 0.0, 0.95, m);
    c.attn_dropout = json_real(j, "attn_dropout", 0.0, 0.95, m);
    c.ffn = json_bool(j, "ffn", m);
    return c;
  }
  /// The n-gram settings of the NB-LR score (C and the folds only matter when fitting).
  NbLrConfig nblr() const {
    NbLrConfig n;
    n.buckets = nblr_buckets, n.order = nblr_order, n.max_tokens = nblr_max_tokens;
    return n;
  }
};

/// One padded batch: ids, positions and the mask (B, T) of real tokens, for the attention; the
/// hashed n-gram ids and their mask (B, N) for the bag; the NB-LR log-odds (B, 1).
struct Batch {
  Tensor<std::int32_t, Shape<dyn, dyn>> ids, pos, ngrams;
  attn::KeepMask<float, Shape<dyn, dyn>> mask, ngram_mask;
  Tensor<float, Shape<dyn, 1>> nb;
  Tensor<std::int64_t, Shape<dyn>> labels;
  std::size_t size() const { return ids.size(0); }
};

/// Calls f(id) for every hashed n-gram (unigrams and bigrams) of the first cfg.bag_max_len tokens.
template <class F>
void for_each_ngram(const std::vector<std::int32_t>& s, const ModelConfig& cfg, F&& f) {
  const std::size_t n = std::min(s.size(), cfg.bag_max_len);
  for (std::size_t j = 0; j < n; ++j) {
    f(ngram_hash(s.data() + j, 1, cfg.ngram_buckets));
    if (j + 1 < n) f(ngram_hash(s.data() + j, 2, cfg.ngram_buckets));
  }
}

/// Builds a batch from whole encoded reviews, their labels and their NB-LR log-odds (empty: zeros).
inline Batch make_batch(const std::vector<const std::vector<std::int32_t>*>& seqs, const std::vector<int>& labels,
                        const std::vector<float>& nb_logits, const ModelConfig& cfg) {
  const std::size_t b = seqs.size();
  std::size_t t = 1, nb = 1;
  for (auto* s : seqs) {
    t = std::max(t, std::min(s->size(), cfg.max_len));
    if (cfg.ngram_buckets) nb = std::max(nb, 2 * std::min(s->size(), cfg.bag_max_len));
  }
  Batch out;
  out.ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.pos = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  auto mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, t});  // 1 = a real token
  out.ngrams = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, nb});
  auto ngram_mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, nb});
  out.labels = Tensor<std::int64_t, Shape<dyn>>::zeros({b});
  out.nb = Tensor<float, Shape<dyn, 1>>::zeros({b, 1});
  for (std::size_t i = 0; i < b; ++i) {
    const auto& s = *seqs[i];
    const auto kept = kept_positions(s.size(), cfg.max_len, cfg.truncate);
    for (std::size_t j = 0; j < kept.size(); ++j) {
      out.ids(i, j) = s[kept[j]];
      out.pos(i, j) = std::int32_t(j);
      mask(i, j) = 1.0f;
    }
    if (cfg.ngram_buckets) {
      std::size_t k = 0;
      for_each_ngram(s, cfg, [&](std::int32_t id) {
        out.ngrams(i, k) = id;
        ngram_mask(i, k++) = 1.0f;
      });
    }
    out.labels(i) = labels.empty() ? 0 : labels[i];
    out.nb(i, 0) = nb_logits.empty() ? 0.0f : nb_logits[i];
  }
  out.mask = attn::KeepMask(mask);
  out.ngram_mask = attn::KeepMask(ngram_mask);
  return out;
}

template <std::size_t Heads>
struct ImdbClassifier : nn::Module {
  explicit ImdbClassifier(const ModelConfig& c)
      : cfg(c),
        tokens(this, "embed", c.vocab, {.padding_idx = 0, .init_std = 0.1, .sparse = true}),
        positions(this, "pos", c.max_len, {.init_std = 0.02}),
        attention(this, "attn", {.dropout = c.attn_dropout, .padded = nn::PaddedRows::zero}),  // only real tokens are pooled
        norm1(this, "norm1"),
        ff1(this, "ff1", {.xavier = true}),
        ff2(this, "ff2", {.xavier = true}),
        norm2(this, "norm2"),
        ngrams(this, "ngram", std::max<std::size_t>(c.ngram_buckets + 1, 2), {.padding_idx = 0, .init_std = 0.1, .sparse = true}),
        head(this, "head", {.xavier = true}) {
    const std::size_t rows = std::max<std::size_t>(c.nblr_buckets + 1, 2);
    // Fitted by LIBLINEAR (set_nblr), not by the optimizer; saved with the other weights.
    nblr_weight = register_parameter<float, Shape<dyn, 1>>("nblr.weight", {rows, 1});
    nblr_weight.data()->requires_grad = false;
    nblr_bias = register_parameter<float, Shape<1, 1>>("nblr.bias", {1, 1});
    nblr_bias.data()->requires_grad = false;
  }

  void reset_parameters(attn::Rng&) override {
    attn::nn::init::constant(nblr_weight, 0.0f);
    attn::nn::init::constant(nblr_bias, 0.0f);
  }

  /// Stores a fitted NB-LR and starts the head from its calibrated log-odds alone: the score's
  /// column of the head gets weights (-a/2, +a/2), the biases (-b/2, +b/2) and every other column
  /// zeros, so that before training the logit difference is a * score + b (Platt scaling of the
  /// cross-fitted training scores) and the attention's features enter as a learned correction.
  void set_nblr(const NbLr& m, const PlattScale& s) {
    if (m.weight.size() != nblr_weight.size(0)) throw attn::ArgumentError("set_nblr: expected " + std::to_string(nblr_weight.size(0)) + " weights");
    std::copy(m.weight.begin(), m.weight.end(), const_cast<float*>(nblr_weight.raw().data()));
    const_cast<float*>(nblr_bias.raw().data())[0] = m.bias;
    constexpr std::size_t col = 2 * kDim + kNgramDim;
    float* w = const_cast<float*>(head.weight.raw().data());
    std::fill(w, w + 2 * (col + 1), 0.0f);
    w[0 * (col + 1) + col] = float(-s.a / 2);
    w[1 * (col + 1) + col] = float(s.a / 2);
    float* bias = const_cast<float*>(head.bias.raw().data());
    bias[0] = float(-s.b / 2);
    bias[1] = float(s.b / 2);
  }

  /// The NB-LR log-odds of a whole encoded review (0 without NB-LR).
  float nb_logit(const std::vector<std::int32_t>& ids) const {
    if (!cfg.nblr_buckets) return 0.0f;
    return nblr_logit(nblr_weight.raw().data(), nblr_bias.raw().data()[0], distinct_ngrams(ids, cfg.nblr()));
  }

  /// Logits (B, 2). When weights is given, the attention weights (B, Heads, T, T) are stored there.
  template <attn::Context C>
  auto forward(C& ctx, const Batch& b, Tensor<float>* weights = nullptr) const {
    const bool tr = training();
    auto x = tokens(ctx, b.ids) + positions(ctx, b.pos);                  // (B, T, Dim)
    x = nn::dropout(ctx, x, cfg.dropout, tr);
    attn::Var<float, Shape<dyn, dyn, kDim>> a;
    if (weights) {
      auto r = attention.forward_with_weights(ctx, x, b.mask);
      a = r.out;
      *weights = r.weights.erased();
    } else {
      a = attention(ctx, x, b.mask);
    }
    auto h = norm1(ctx, x + nn::dropout(ctx, a, cfg.dropout, tr));
    if (cfg.ffn) h = norm2(ctx, h + nn::dropout(ctx, ff2(ctx, attn::gelu(ctx, ff1(ctx, h))), cfg.dropout, tr));
    std::vector<attn::Var<float>> feats{nn::masked_mean(ctx, h, b.mask).erased(), nn::masked_max(ctx, h, b.mask).erased()};
    feats.push_back(cfg.ngram_buckets ? nn::masked_mean(ctx, ngrams(ctx, b.ngrams), b.ngram_mask).erased()
                                      : attn::Var<float>(Tensor<float>::zeros({b.size(), kNgramDim})));
    attn::Var<float> nb(b.nb.erased());  // (B, 1), an input: no gradient
    auto pooled = nn::dropout(ctx, attn::concat(ctx, feats, 1), cfg.dropout, tr);  // (B, 2 Dim + NgramDim)
    return head(ctx, attn::concat(ctx, std::vector<attn::Var<float>>{pooled.erased(), nb}, 1));  // (B, 2)
  }

  ModelConfig cfg;
  nn::Embedding<kDim> tokens, positions;
  nn::Attention<Heads, kDim> attention;
  nn::LayerNorm<kDim> norm1;
  nn::Linear<kDim, 2 * kDim> ff1;
  nn::Linear<2 * kDim, kDim> ff2;
  nn::LayerNorm<kDim> norm2;
  nn::Embedding<kNgramDim> ngrams;
  nn::Linear<2 * kDim + kNgramDim + 1, 2> head;
  attn::Var<float, Shape<dyn, 1>> nblr_weight;
  attn::Var<float, Shape<1, 1>> nblr_bias;
};

}  // namespace imdb
