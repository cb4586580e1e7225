// The IMDb sentiment classifier: token + learned position embeddings, one multi-head self-attention
// block (residual, LayerNorm, optional feed-forward), masked mean+max pooling, a hashed-bigram
// bag feature, and a linear head. Heads is a template argument: each head count is its own type.
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

namespace imdb {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

inline constexpr std::size_t kDim = 128;       // model width
inline constexpr std::size_t kNgramDim = 64;   // width of the bigram-bag feature

struct ModelConfig {
  std::size_t vocab = 0;
  std::size_t max_len = 256;
  std::size_t ngram_buckets = 0;  // 0: no bigram feature
  double dropout = 0.1;
  double attn_dropout = 0.1;
  bool ffn = true;

  nlohmann::json to_json() const {
    return {{"vocab", vocab}, {"max_len", max_len}, {"ngram_buckets", ngram_buckets}, {"dropout", dropout},
            {"attn_dropout", attn_dropout}, {"ffn", ffn}};
  }
  static ModelConfig from_json(const nlohmann::json& j) {
    ModelConfig c;
    c.vocab = j.at("vocab").get<std::size_t>();
    c.max_len = j.at("max_len").get<std::size_t>();
    c.ngram_buckets = j.at("ngram_buckets").get<std::size_t>();
    c.dropout = j.at("dropout").get<double>();
    c.attn_dropout = j.at("attn_dropout").get<double>();
    c.ffn = j.at("ffn").get<bool>();
    return c;
  }
};

/// One padded batch: ids, positions, bigram ids (B, T) and the mask (B, T), 1 = real token.
struct Batch {
  Tensor<std::int32_t, Shape<dyn, dyn>> ids, pos, bigrams;
  Tensor<float, Shape<dyn, dyn>> mask, bigram_mask;
  Tensor<std::int64_t, Shape<dyn>> labels;
  std::size_t size() const { return ids.size(0); }
};

/// Hash of the bigram (a, b) into [1, buckets] (0 is padding).
inline std::int32_t bigram_id(std::int32_t a, std::int32_t b, std::size_t buckets) {
  const std::uint64_t h = (std::uint64_t(std::uint32_t(a)) * 0x9E3779B97F4A7C15ULL) ^ (std::uint64_t(std::uint32_t(b)) + 0x632BE59BD9B4E019ULL);
  return std::int32_t(1 + (h ^ (h >> 29)) % buckets);
}

/// Builds a batch from encoded sequences (already truncated to max_len) and labels.
inline Batch make_batch(const std::vector<const std::vector<std::int32_t>*>& seqs, const std::vector<int>& labels,
                        std::size_t ngram_buckets) {
  const std::size_t b = seqs.size();
  std::size_t t = 1;
  for (auto* s : seqs) t = std::max(t, s->size());
  Batch out;
  out.ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.pos = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, t});
  const std::size_t tb = ngram_buckets ? t : 1;
  out.bigrams = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, tb});
  out.bigram_mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, tb});
  out.labels = Tensor<std::int64_t, Shape<dyn>>::zeros({b});
  for (std::size_t i = 0; i < b; ++i) {
    const auto& s = *seqs[i];
    for (std::size_t j = 0; j < s.size(); ++j) {
      out.ids(i, j) = s[j];
      out.pos(i, j) = std::int32_t(j);
      out.mask(i, j) = 1.0f;
      if (ngram_buckets && j + 1 < s.size()) {
        out.bigrams(i, j) = bigram_id(s[j], s[j + 1], ngram_buckets);
        out.bigram_mask(i, j) = 1.0f;
      }
    }
    out.labels(i) = labels.empty() ? 0 : labels[i];
  }
  return out;
}

template <std::size_t Heads>
struct ImdbClassifier : nn::Module {
  explicit ImdbClassifier(const ModelConfig& c)
      : cfg(c),
        tokens(this, "embed", c.vocab, {.padding_idx = 0, .init_std = 0.1}),
        positions(this, "pos", c.max_len, {.init_std = 0.02}),
        attention(this, "attn", {.dropout = c.attn_dropout}),
        norm1(this, "norm1"),
        ff1(this, "ff1", {.xavier = true}),
        ff2(this, "ff2", {.xavier = true}),
        norm2(this, "norm2"),
        ngrams(this, "ngram", std::max<std::size_t>(c.ngram_buckets + 1, 2), {.padding_idx = 0, .init_std = 0.1}),
        head(this, "head", {.xavier = true}) {}

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
    if (cfg.ngram_buckets) {
      feats.push_back(nn::masked_mean(ctx, ngrams(ctx, b.bigrams), b.bigram_mask).erased());
    } else {
      feats.push_back(attn::Var<float>(Tensor<float>::zeros({b.size(), kNgramDim})));
    }
    auto pooled = attn::concat(ctx, feats, 1);                                // (B, 2 Dim + NgramDim)
    return head(ctx, nn::dropout(ctx, pooled, cfg.dropout, tr));             // (B, 2)
  }

  ModelConfig cfg;
  nn::Embedding<kDim> tokens, positions;
  nn::Attention<Heads, kDim> attention;
  nn::LayerNorm<kDim> norm1;
  nn::Linear<kDim, 2 * kDim> ff1;
  nn::Linear<2 * kDim, kDim> ff2;
  nn::LayerNorm<kDim> norm2;
  nn::Embedding<kNgramDim> ngrams;
  nn::Linear<2 * kDim + kNgramDim, 2> head;
};

}  // namespace imdb
