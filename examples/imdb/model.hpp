// The IMDb sentiment classifier: token + learned position embeddings, one multi-head self-attention
// block (residual, LayerNorm, optional feed-forward) over the first and last --max-len/2 tokens,
// masked mean+max pooling, a hashed unigram+bigram bag over the whole review, an NBSVM-style score
// (naive-Bayes log-count ratios of the n-grams times learned weights), and a linear head.
// Heads is a template argument: each head count is its own type. The token and n-gram tables
// have row-sparse gradients (only the rows a batch uses are updated).
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

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
  std::size_t ngram_buckets = 0;   // 0: no n-gram feature
  double dropout = 0.1;
  double attn_dropout = 0.1;
  bool ffn = true;

  nlohmann::json to_json() const {
    return {{"vocab", vocab}, {"max_len", max_len}, {"truncate", to_string(truncate)}, {"bag_max_len", bag_max_len},
            {"ngram_buckets", ngram_buckets}, {"dropout", dropout}, {"attn_dropout", attn_dropout}, {"ffn", ffn}};
  }
  static ModelConfig from_json(const nlohmann::json& j) {
    ModelConfig c;
    c.vocab = j.at("vocab").get<std::size_t>();
    c.max_len = j.at("max_len").get<std::size_t>();
    c.truncate = parse_truncate(j.at("truncate").get<std::string>());
    c.bag_max_len = j.at("bag_max_len").get<std::size_t>();
    c.ngram_buckets = j.at("ngram_buckets").get<std::size_t>();
    c.dropout = j.at("dropout").get<double>();
    c.attn_dropout = j.at("attn_dropout").get<double>();
    c.ffn = j.at("ffn").get<bool>();
    return c;
  }
};

/// One padded batch: ids, positions and the mask (B, T), 1 = real token, for the attention; the
/// hashed n-gram ids and their mask (B, N) for the bag.
struct Batch {
  Tensor<std::int32_t, Shape<dyn, dyn>> ids, pos, ngrams;
  Tensor<float, Shape<dyn, dyn>> mask, ngram_mask;
  Tensor<std::int64_t, Shape<dyn>> labels;
  std::size_t size() const { return ids.size(0); }
};

/// Hash of the bigram (a, b), or of the unigram a when b is -1, into [1, buckets] (0 is padding).
inline std::int32_t ngram_id(std::int32_t a, std::int32_t b, std::size_t buckets) {
  const std::uint64_t h = (std::uint64_t(std::uint32_t(a)) * 0x9E3779B97F4A7C15ULL) ^ (std::uint64_t(std::uint32_t(b)) + 0x632BE59BD9B4E019ULL);
  return std::int32_t(1 + (h ^ (h >> 29)) % buckets);
}

/// Calls f(id) for every hashed n-gram (unigrams and bigrams) of the first cfg.bag_max_len tokens.
template <class F>
void for_each_ngram(const std::vector<std::int32_t>& s, const ModelConfig& cfg, F&& f) {
  const std::size_t n = std::min(s.size(), cfg.bag_max_len);
  for (std::size_t j = 0; j < n; ++j) {
    f(ngram_id(s[j], -1, cfg.ngram_buckets));
    if (j + 1 < n) f(ngram_id(s[j], s[j + 1], cfg.ngram_buckets));
  }
}

/// Naive-Bayes log-count ratios per n-gram bucket (Wang and Manning's NBSVM, binarized counts,
/// smoothing alpha): r = log((p + alpha) / |p + alpha|_1) - log((q + alpha) / |q + alpha|_1) with p and
/// q the numbers of positive and negative reviews holding the n-gram. Bucket 0 (padding) gets 0.
inline std::vector<float> nb_ratios(const std::vector<std::vector<std::int32_t>>& docs, const std::vector<int>& labels,
                                    const ModelConfig& cfg, double alpha = 1.0) {
  const std::size_t rows = std::max<std::size_t>(cfg.ngram_buckets + 1, 2);
  std::vector<double> p(rows, alpha), q(rows, alpha);
  std::vector<std::size_t> last(rows, std::size_t(-1));
  for (std::size_t d = 0; d < docs.size(); ++d) {
    auto& c = labels[d] == 1 ? p : q;
    for_each_ngram(docs[d], cfg, [&](std::int32_t id) {
      if (last[std::size_t(id)] == d) return;  // binarized: once per review
      last[std::size_t(id)] = d;
      c[std::size_t(id)] += 1;
    });
  }
  double sp = 0, sq = 0;
  for (std::size_t i = 1; i < rows; ++i) sp += p[i], sq += q[i];
  std::vector<float> r(rows, 0.0f);
  for (std::size_t i = 1; i < rows; ++i) r[i] = float(std::log(p[i] / sp) - std::log(q[i] / sq));
  return r;
}

/// Builds a batch from whole encoded reviews and their labels (empty: zeros).
inline Batch make_batch(const std::vector<const std::vector<std::int32_t>*>& seqs, const std::vector<int>& labels,
                        const ModelConfig& cfg) {
  const std::size_t b = seqs.size();
  std::size_t t = 1, nb = 1;
  for (auto* s : seqs) {
    t = std::max(t, std::min(s->size(), cfg.max_len));
    if (cfg.ngram_buckets) nb = std::max(nb, 2 * std::min(s->size(), cfg.bag_max_len));
  }
  Batch out;
  out.ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.pos = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, t});
  out.ngrams = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, nb});
  out.ngram_mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, nb});
  out.labels = Tensor<std::int64_t, Shape<dyn>>::zeros({b});
  for (std::size_t i = 0; i < b; ++i) {
    const auto& s = *seqs[i];
    const auto kept = kept_positions(s.size(), cfg.max_len, cfg.truncate);
    for (std::size_t j = 0; j < kept.size(); ++j) {
      out.ids(i, j) = s[kept[j]];
      out.pos(i, j) = std::int32_t(j);
      out.mask(i, j) = 1.0f;
    }
    if (cfg.ngram_buckets) {
      std::size_t k = 0;
      for_each_ngram(s, cfg, [&](std::int32_t id) {
        out.ngrams(i, k) = id;
        out.ngram_mask(i, k++) = 1.0f;
      });
    }
    out.labels(i) = labels.empty() ? 0 : labels[i];
  }
  return out;
}

template <std::size_t Heads>
struct ImdbClassifier : nn::Module {
  explicit ImdbClassifier(const ModelConfig& c)
      : cfg(c),
        tokens(this, "embed", c.vocab, {.padding_idx = 0, .init_std = 0.1, .sparse = true}),
        positions(this, "pos", c.max_len, {.init_std = 0.02}),
        attention(this, "attn", {.dropout = c.attn_dropout}),
        norm1(this, "norm1"),
        ff1(this, "ff1", {.xavier = true}),
        ff2(this, "ff2", {.xavier = true}),
        norm2(this, "norm2"),
        ngrams(this, "ngram", std::max<std::size_t>(c.ngram_buckets + 1, 2), {.padding_idx = 0, .init_std = 0.1, .sparse = true}),
        head(this, "head", {.xavier = true}) {
    const std::size_t rows = std::max<std::size_t>(c.ngram_buckets + 1, 2);
    nb_ratio = register_parameter<float, Shape<dyn, 1>>("nb.ratio", {rows, 1});
    nb_ratio.data()->requires_grad = false;  // fixed: set from the training counts (set_nb_ratios)
    nb_weight = register_parameter<float, Shape<dyn, 1>>("nb.weight", {rows, 1});
    nb_weight.data()->sparse_rows = true;
    attn::nn::init::constant(nb_weight, 1.0f);
  }

  void reset_parameters(attn::Rng&) override { attn::nn::init::constant(nb_weight, 1.0f); }

  /// The naive-Bayes log-count ratio of every n-gram bucket (index 0: padding, ratio 0).
  void set_nb_ratios(const std::vector<float>& r) {
    if (r.size() != nb_ratio.size(0)) throw attn::ArgumentError("set_nb_ratios: expected " + std::to_string(nb_ratio.size(0)) + " ratios");
    std::copy(r.begin(), r.end(), const_cast<float*>(nb_ratio.raw().data()));
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
    attn::Var<float> nb;
    if (cfg.ngram_buckets) {
      feats.push_back(nn::masked_mean(ctx, ngrams(ctx, b.ngrams), b.ngram_mask).erased());
      // NBSVM-style score: the mean over the review's n-grams of ratio * learned weight.
      auto rw = attn::mul(ctx, attn::embedding(ctx, nb_ratio, b.ngrams, 0), attn::embedding(ctx, nb_weight, b.ngrams, 0));
      nb = nn::masked_mean(ctx, rw, b.ngram_mask).erased();                  // (B, 1)
    } else {
      feats.push_back(attn::Var<float>(Tensor<float>::zeros({b.size(), kNgramDim})));
      nb = attn::Var<float>(Tensor<float>::zeros({b.size(), 1}));
    }
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
  attn::Var<float, Shape<dyn, 1>> nb_ratio, nb_weight;
};

}  // namespace imdb
