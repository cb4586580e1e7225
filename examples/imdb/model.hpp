// SPDX-License-Identifier: MIT
// The IMDb sentiment classifier: every position's input is the sum of its word's embedding, a
// learned position embedding and (optionally) the hashed embeddings of the n-grams starting at
// it; then N Transformer encoder layers (nn::TransformerEncoder: multi-head self-attention, full
// or over a sliding window, and a feed-forward block; pre-norm with a final norm, or post-norm),
// then pooling and a linear head. Pooling is either masked mean+max over the real tokens, or a learned [CLS] token
// placed before the review (global: every token sees it and it sees every token, also under a
// window) whose final state is the review's representation, so that what the classifier sees is
// what the [CLS] row of the attention gathered (the last layer computes that row alone: its query,
// its feed-forward, the keys and values of every token). Everything the head sees has passed through the
// attention. Two variants share the class:
//   layers = 0      the ablation: the same inputs, mean+max pooled without any attention;
//   nblr_buckets    an explicit ensemble: the log-odds of an NB-LR model over the review's uni-, bi-
//                   and trigrams (nblr.hpp) enter the head beside the pooled features.
// The head count is the encoder's template argument (nn::TransformerEncoder<Heads, 128>); the
// model reaches its encoder through an interface (AnyEncoder), so that the model and everything
// that trains, evaluates and serves it are compiled once per backend and only the encoder once per
// head count (heads.hpp). The word and n-gram tables have row-sparse gradients (only the rows a
// batch uses are updated).
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <span>
#include <type_traits>

#include "../common/adversarial.hpp"
#include "../common/json_files.hpp"
#include "nblr.hpp"
#include "pretrain.hpp"
#include "options.hpp"

namespace imdb {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

inline constexpr std::size_t kDim = 128;               // model width
inline constexpr std::size_t kFeedForward = 2 * kDim;  // the encoder layers' feed-forward width

/// How the encoder's states become one vector per review.
enum class Pool { mean_max, cls };

inline Pool parse_pool(const std::string& s) {
  if (s == "mean+max") return Pool::mean_max;
  if (s == "cls") return Pool::cls;
  throw attn::ArgumentError("pool: unknown mode '" + s + "' (expected mean+max or cls)");
}
inline std::string to_string(Pool p) { return p == Pool::cls ? "cls" : "mean+max"; }

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
  std::size_t max_len = 4096;      // tokens the attention sees
  Truncate truncate = Truncate::head_tail;
  std::size_t layers = 1;          // encoder layers; 0: no attention (the ablation)
  Pool pool = Pool::mean_max;      // cls: a [CLS] token at position 0 (then max_len + 1 positions)
  bool norm_first = false;         // pre-norm layers and a final LayerNorm (else post-norm)
  nn::Activation activation = nn::Activation::gelu;  // the feed-forward block's
  bool gated = false;                // a gated feed-forward (with silu: SwiGLU)
  nn::NormKind norm = nn::NormKind::layer;  // the encoder's norms: LayerNorm or RMSNorm
  std::size_t window = 0;          // 0: every token attends to every token; w: to the w on each side
  std::size_t ngram_buckets = 0;   // hash buckets of the n-gram embeddings (0: words only)
  std::size_t ngram_order = 2;     // n-grams of 2 .. ngram_order words start at each position
  std::size_t nblr_buckets = 0;    // buckets of the NB-LR ensemble's n-grams (0: no ensemble)
  std::size_t nblr_order = 3;
  std::size_t nblr_max_tokens = NbLrConfig{}.max_tokens;
  double dropout = 0.1;
  double attn_dropout = 0.1;
  double ngram_dropout = 0.0;      // training: each token's n-gram embedding dropped whole
  bool checkpoint = false;         // recompute each encoder layer in backward (less memory)

  bool ensemble() const { return nblr_buckets != 0; }
  /// Positions before the review's first token: 1 with a [CLS] token.
  std::size_t offset() const { return pool == Pool::cls ? 1 : 0; }

  nlohmann::json to_json() const {
    return {{"vocab", vocab}, {"max_len", max_len}, {"truncate", to_string(truncate)}, {"layers", layers},
            {"pool", to_string(pool)}, {"norm_first", norm_first},
            {"activation", nn::activation_name(activation)}, {"gated", gated}, {"norm", nn::norm_kind_name(norm)}, {"window", window}, {"ngram_buckets", ngram_buckets},
            {"ngram_order", ngram_order}, {"nblr_buckets", nblr_buckets},
            {"nblr_order", nblr_order}, {"nblr_max_tokens", nblr_max_tokens}, {"dropout", dropout},
            {"attn_dropout", attn_dropout}, {"ngram_dropout", ngram_dropout}, {"checkpoint", checkpoint}};
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
    c.layers = json_count(j, "layers", 0, kMaxLayers, m);
    const std::string pool = json_string(j, "pool", m);
    if (pool != "mean+max" && pool != "cls") throw FieldError(m + "pool", "'" + pool + "' is not mean+max or cls");
    c.pool = parse_pool(pool);
    if (c.pool == Pool::cls && !c.layers) throw FieldError(m + "pool", "cls needs at least one layer");
    c.norm_first = json_bool(j, "norm_first", m);
    if (j.contains("activation")) {  // absent in configurations written before the option: gelu
      const std::string a = json_string(j, "activation", m);
      try {
        c.activation = nn::activation_from_name(a);
      } catch (const attn::ArgumentError&) {
        throw FieldError(m + "activation", "'" + a + "' is none of " + nn::activation_names());
      }
    }
    // Absent in configurations written before the options: a plain feed-forward, LayerNorms.
    if (j.contains("gated")) c.gated = json_bool(j, "gated", m);
    if (j.contains("norm")) {
      const std::string n = json_string(j, "norm", m);
      if (n != "layer" && n != "rms") throw FieldError(m + "norm", "'" + n + "' is none of layer, rms");
      c.norm = n == "rms" ? nn::NormKind::rms : nn::NormKind::layer;
    }
    c.window = json_count(j, "window", 0, kMaxLen, m);
    c.ngram_buckets = json_count(j, "ngram_buckets", 0, kMaxNgramBuckets, m);
    c.ngram_order = json_count(j, "ngram_order", 2, kMaxNgramOrder, m);
    c.nblr_buckets = json_count(j, "nblr_buckets", 0, kMaxNblrBuckets, m);
    c.nblr_order = json_count(j, "nblr_order", 1, 5, m);
    c.nblr_max_tokens = json_count(j, "nblr_max_tokens", 1, kMaxBagLen, m);
    c.dropout = json_real(j, "dropout", 0.0, 0.95, m);
    c.attn_dropout = json_real(j, "attn_dropout", 0.0, 0.95, m);
    c.ngram_dropout = j.contains("ngram_dropout") ? json_real(j, "ngram_dropout", 0.0, 0.95, m) : 0.0;
    c.checkpoint = json_bool(j, "checkpoint", m);
    return c;
  }
  /// The n-gram settings of the NB-LR score (C and the folds only matter when fitting).
  NbLrConfig nblr() const {
    NbLrConfig n;
    n.buckets = nblr_buckets, n.order = nblr_order, n.max_tokens = nblr_max_tokens;
    return n;
  }
};

/// One padded batch on backend B: word ids, positions and the mask (B, T) of real tokens; for each
/// n-gram length n = 2 .. ngram_order, the hashed id (B, T) of the n-gram starting at each kept
/// token (0 where the review ends first, or without n-gram embeddings); the NB-LR log-odds (B, 1).
/// With a [CLS] token, position 0 of every row is it: word id 0 (no word), cls id 1 (cls_mask 1),
/// and the review follows from position 1; cls_norm (B, 1, 1) then holds 1 / log n for the n keys
/// the [CLS] row sees (itself and the review; 0 when n = 1), which turns an entropy of its weights
/// into a fraction of the uniform distribution's.
template <class B = attn::cpu>
struct BatchOn {
  Tensor<std::int32_t, Shape<dyn, dyn>, B> ids, pos, cls;
  std::vector<Tensor<std::int32_t, Shape<dyn, dyn>, B>> grams;
  attn::KeepMask<float, Shape<dyn, dyn>, B> mask, cls_mask;
  Tensor<float, attn::AnyShape, B> cls_norm;
  Tensor<float, Shape<dyn, 1>, B> nb;
  Tensor<std::int64_t, Shape<dyn>, B> labels;
  std::size_t size() const { return ids.size(0); }
};
using Batch = BatchOn<attn::cpu>;

/// A host batch on backend B (the same batch for attn::cpu).
template <class B>
BatchOn<B> to_backend(const Batch& b) {
  if constexpr (std::is_same_v<B, attn::cpu>) {
    return b;
  } else {
    auto move = [](const auto& t) { return t.template to<B>(); };
    BatchOn<B> d;
    d.ids = move(b.ids), d.pos = move(b.pos), d.cls = move(b.cls);
    for (auto& g : b.grams) d.grams.push_back(move(g));
    d.mask = attn::KeepMask(move(b.mask.tensor()));
    d.cls_mask = attn::KeepMask(move(b.cls_mask.tensor()));
    d.cls_norm = move(b.cls_norm);
    d.nb = move(b.nb), d.labels = move(b.labels);
    return d;
  }
}

/// Builds a batch from whole encoded reviews, their labels and their NB-LR log-odds (empty: zeros).
/// The n-grams are those of the review itself: where head+tail truncation joins the two parts, the
/// last n-grams of the head still run into the words that follow it in the review.
inline Batch make_batch(const std::vector<const std::vector<std::int32_t>*>& seqs, const std::vector<int>& labels,
                        const std::vector<float>& nb_logits, const ModelConfig& cfg) {
  const std::size_t b = seqs.size();
  const std::size_t off = cfg.offset();
  std::size_t t = 1;
  for (auto* s : seqs) t = std::max(t, off + std::min(s->size(), cfg.max_len));
  Batch out;
  out.ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.pos = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  auto mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, t});  // 1 = a real token (or the [CLS] token)
  auto cls_mask = Tensor<float, Shape<dyn, dyn>>::zeros({b, t});
  out.cls = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  const std::size_t orders = cfg.ngram_buckets ? cfg.ngram_order - 1 : 0;
  for (std::size_t k = 0; k < orders; ++k) out.grams.push_back(Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t}));
  out.labels = Tensor<std::int64_t, Shape<dyn>>::zeros({b});
  out.nb = Tensor<float, Shape<dyn, 1>>::zeros({b, 1});
  out.cls_norm = Tensor<float, attn::AnyShape>::zeros(attn::Dims{b, 1, 1});
  for (std::size_t i = 0; i < b; ++i) {
    const auto& s = *seqs[i];
    const auto kept = kept_positions(s.size(), cfg.max_len, cfg.truncate);
    if (off) {
      out.cls(i, 0) = 1;
      cls_mask(i, 0) = 1.0f;
      mask(i, 0) = 1.0f;
    }
    for (std::size_t j = 0; j < kept.size(); ++j) {
      out.ids(i, off + j) = s[kept[j]];
      out.pos(i, off + j) = std::int32_t(off + j);
      mask(i, off + j) = 1.0f;
      for (std::size_t k = 0; k < orders; ++k)
        if (kept[j] + k + 2 <= s.size()) out.grams[k](i, off + j) = ngram_hash(s.data() + kept[j], k + 2, cfg.ngram_buckets);
    }
    if (off && kept.size()) out.cls_norm.data()[i] = float(1 / std::log(double(off + kept.size())));
    out.labels(i) = labels.empty() ? 0 : labels[i];
    out.nb(i, 0) = nb_logits.empty() ? 0.0f : nb_logits[i];
  }
  out.mask = attn::KeepMask(mask);
  out.cls_mask = attn::KeepMask(cls_mask);
  return out;
}

/// The entropy of each attention row of w (B, Heads, rows, T) as a fraction of the uniform
/// distribution's over the keys its sample's rows see: norm (B, 1, 1) holds 1 / log n for sample b's
/// n keys (BatchOn::cls_norm). (B, Heads, rows) on ctx, differentiable in w; a zero weight (a padded
/// key) adds nothing.
template <attn::Context C, class T, class B>
attn::Var<T, attn::AnyShape, B> entropy_rows(C& ctx, const attn::Var<T, attn::AnyShape, B>& w, const Tensor<T, attn::AnyShape, B>& norm) {
  auto plogp = attn::sum(ctx, attn::mul(ctx, w, attn::log(ctx, w + T(1e-30))), 3);  // (B, H, rows): sum_j w log w
  return attn::neg(ctx, attn::mul(ctx, plogp, attn::Var<T, attn::AnyShape, B>(norm))).erased();
}

/// The entropy penalty of --attn-entropy on row fractions f (entropy_rows): the mean over rows of
/// the part of each above target, max(f - target, 0), a hinge that leaves a row alone once it is
/// that focused (--attn-entropy-target); with target 0, the mean fraction. A scalar on ctx.
template <attn::Context C, class T, class B>
attn::Var<T, attn::AnyShape, B> entropy_penalty(C& ctx, const attn::Var<T, attn::AnyShape, B>& f, double target) {
  if (!(target > 0)) return attn::mean(ctx, f).erased();
  return attn::mean(ctx, attn::relu(ctx, f - T(target))).erased();
}

/// The encoder's options for a configuration.
inline nn::TransformerEncoderOptions encoder_options(const ModelConfig& c) {
  return {.num_layers = c.layers,
          .layer = {.dim_feedforward = kFeedForward,
                    .dropout = c.dropout,
                    .activation = c.activation,
                    .gated = c.gated,
                    .norm_first = c.norm_first,
                    .norm = c.norm,
                    .padded = nn::PaddedRows::zero,  // only real tokens are pooled
                    .attention_dropout = c.attn_dropout,
                    .window = c.window ? std::optional<std::int64_t>(std::int64_t(c.window)) : std::nullopt,
                    .global_tokens = c.offset()},  // the [CLS] token
          .final_norm = c.norm_first,
          .checkpoint = c.checkpoint};
}

/// The encoder of a model on backend B, whatever its head count: the layers of
/// nn::TransformerEncoder<Heads, kDim, float, B> behind virtual calls (heads.hpp implements it).
template <class B>
class AnyEncoder {
 public:
  using V = attn::Var<float, attn::AnyShape, B>;
  using Mask = attn::KeepMask<float, Shape<dyn, dyn>, B>;
  using Weights = std::vector<Tensor<float, attn::AnyShape, B>>;
  virtual ~AnyEncoder() = default;
  virtual std::size_t heads() const noexcept = 0;
  /// x (B, T, kDim) -> (B, T, kDim).
  virtual V forward(attn::Tape& ctx, const V& x, const Mask& mask) const = 0;
  virtual V forward(attn::NoGrad& ctx, const V& x, const Mask& mask) const = 0;
  /// The first `rows` positions' states alone (B, rows, kDim): nn::TransformerEncoder::forward_rows.
  virtual V forward_rows(attn::Tape& ctx, const V& x, const Mask& mask, std::size_t rows) const = 0;
  virtual V forward_rows(attn::NoGrad& ctx, const V& x, const Mask& mask, std::size_t rows) const = 0;
  /// forward_rows, also giving the last layer's weights of those rows (B, Heads, rows, T) on the
  /// tape: nn::TransformerEncoder::forward_rows_with_weights.
  virtual attn::nn::RowsOutput<float, B> forward_rows_with_weights(attn::Tape& ctx, const V& x, const Mask& mask, std::size_t rows) const = 0;
  /// forward, also storing every layer's attention weights (B, Heads, T, T) in `weights`, first layer first.
  virtual V forward_with_weights(attn::Tape& ctx, const V& x, const Mask& mask, Weights& weights) const = 0;
  virtual V forward_with_weights(attn::NoGrad& ctx, const V& x, const Mask& mask, Weights& weights) const = 0;
};

/// The encoder "encoder" of `parent` with `heads` heads (1, 2, 4, 8 or 16) for configuration c.
/// Defined in heads.hpp, instantiated by one translation unit per backend.
template <class B>
std::unique_ptr<AnyEncoder<B>> make_encoder(std::size_t heads, nn::Module* parent, const ModelConfig& c);

/// The fitted NB-LR of the ensemble, "nblr.weight" (buckets + 1, 1) and "nblr.bias" (1, 1): set by
/// LIBLINEAR (ImdbClassifier::set_nblr), not by the optimizer; saved with the other weights.
template <class B>
struct NblrWeights : nn::Module {
  NblrWeights(nn::Module* parent, std::size_t rows) : nn::Module(parent, "nblr") {
    weight = register_parameter<float, Shape<dyn, 1>, B>("weight", {rows, 1});
    weight.data()->requires_grad = false;
    bias = register_parameter<float, Shape<1, 1>, B>("bias", {1, 1});
    bias.data()->requires_grad = false;
  }
  void reset_parameters(attn::Rng&) override {
    attn::nn::init::constant(weight, 0.0f);
    attn::nn::init::constant(bias, 0.0f);
  }
  attn::Var<float, Shape<dyn, 1>, B> weight;
  attn::Var<float, Shape<1, 1>, B> bias;
};

/// The model on backend B (attn::cpu or attn::cuda), with `heads` attention heads.
template <class B = attn::cpu>
struct ImdbClassifier : nn::Module {
  using backend = B;

  ImdbClassifier(const ModelConfig& c, std::size_t heads)
      : cfg(c),
        heads_(heads),
        nblr(this, std::max<std::size_t>(c.nblr_buckets + 1, 2)),
        tokens(this, "embed", c.vocab, {.padding_idx = 0, .init_std = 0.1, .sparse = true}),
        positions(this, "pos", c.offset() + c.max_len, {.init_std = 0.02}),
        ngrams(this, "ngram", std::max<std::size_t>(c.ngram_buckets + 1, 2), {.padding_idx = 0, .init_std = 0.1, .sparse = true}) {
    if (c.layers) encoder = make_encoder<B>(heads, this, c);
    if (c.pool == Pool::cls) {
      cls.emplace(this, "cls", 2, nn::EmbeddingOptions{.padding_idx = 0, .init_std = 0.1});
      cls_head.emplace(this, "head", nn::LinearOptions{.xavier = true});
    } else {
      head.emplace(this, "head", nn::LinearOptions{.xavier = true});
    }
  }

  /// The attention heads of every encoder layer.
  std::size_t heads() const noexcept { return heads_; }

  /// The ensemble: stores a fitted NB-LR and starts the head from its calibrated log-odds alone:
  /// the score's column of the head gets weights (-a/2, +a/2), the biases (-b/2, +b/2) and every
  /// other column zeros, so that before training the logit difference is a * score + b (Platt
  /// scaling of the cross-fitted training scores) and the attention's features enter as a learned
  /// correction.
  void set_nblr(const NbLr& m, const PlattScale& s) {
    if (m.weight.size() != nblr.weight.size(0)) throw attn::ArgumentError("set_nblr: expected " + std::to_string(nblr.weight.size(0)) + " weights");
    write(nblr.weight, m.weight);
    write(nblr.bias, std::vector<float>{m.bias});
    const std::size_t col = cls ? kDim : 2 * kDim;  // the score's column: after the pooled features
    const auto weight = cls ? cls_head->weight.erased() : head->weight.erased();
    const auto bias_var = cls ? cls_head->bias.erased() : head->bias.erased();
    std::vector<float> w = weight.value().to_vector();
    std::fill(w.begin(), w.begin() + std::ptrdiff_t(2 * (col + 1)), 0.0f);
    w[0 * (col + 1) + col] = float(-s.a / 2);
    w[1 * (col + 1) + col] = float(s.a / 2);
    write(weight, w);
    write(bias_var, std::vector<float>{float(-s.b / 2), float(s.b / 2)});
  }

  /// Starts the word and n-gram tables from pretrained ones (pretrain.hpp), both scaled by the one
  /// factor that gives the word table's rows the random initialisation's RMS (0.1).
  void set_pretrained(const Pretrained& pre) {
    if (pre.dim != kDim || pre.words.size() != tokens.weight.numel() || (cfg.ngram_buckets && pre.ngrams.size() != ngrams.weight.numel()))
      throw attn::ArgumentError("set_pretrained: the tables' shapes differ from the model's");
    double ss = 0;
    for (float v : pre.words) ss += double(v) * double(v);
    const double rms = std::sqrt(ss / double(pre.words.size() - kDim));
    const float scale = rms > 0 ? float(0.1 / rms) : 1.0f;
    auto load = [scale](nn::Embedding<kDim, float, B>& e, const std::vector<float>& w) {
      std::vector<float> v(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) v[i] = w[i] * scale;
      write(e.weight, v);
    };
    load(tokens, pre.words);
    if (cfg.ngram_buckets) load(ngrams, pre.ngrams);
  }

  /// The NB-LR log-odds of a whole encoded review (0 without the ensemble).
  float nb_logit(const std::vector<std::int32_t>& ids) const {
    if (!cfg.ensemble()) return 0.0f;
    if constexpr (B::host_accessible) {
      return nblr_logit(nblr.weight.raw().data(), nblr.bias.raw().data()[0], distinct_ngrams(ids, cfg.nblr()));
    } else {
      const auto w = nblr.weight.value().to_vector();
      return nblr_logit(w.data(), nblr.bias.value().to_vector()[0], distinct_ngrams(ids, cfg.nblr()));
    }
  }

  /// Writes host values over a parameter's value (whichever backend holds it).
  template <class S>
  static void write(const attn::Var<float, S, B>& v, const std::vector<float>& host) {
    auto t = v.data()->value;  // shares the storage
    t.copy_from_host(std::span<const float>(host));
    v.data()->mark_value_written();
  }

  /// Logits (B, 2). When weights is given, every encoder layer's attention weights (B, Heads, T, T)
  /// are stored there, first layer first (none without layers). When cls_entropy is given (a
  /// [CLS] model on a tape), it receives the entropy of the [CLS] rows' attention weights in the
  /// last layer (B, Heads, 1), each as a fraction of the uniform distribution's over the keys the
  /// row sees (entropy_rows): on the tape, for a penalty on it (--attn-entropy).
  /// When delta is given (B, T, Dim), it is added to every position's input before dropout (the
  /// perturbation of adversarial training, --adversarial).
  template <attn::Context C>
  auto forward(C& ctx, const BatchOn<B>& b, std::vector<Tensor<float, attn::AnyShape, B>>* weights = nullptr,
               attn::Var<float, attn::AnyShape, B>* cls_entropy = nullptr, const attn::Var<float, attn::AnyShape, B>* delta = nullptr) const {
    const bool tr = training();
    auto x = tokens(ctx, b.ids) + positions(ctx, b.pos);  // (B, T, Dim)
    for (const auto& g : b.grams) x = x + (tr ? drop_rows(ctx, ngrams(ctx, g), cfg.ngram_dropout) : ngrams(ctx, g));
    if (cls) x = x + (*cls)(ctx, b.cls);
    if (delta) x = decltype(x)(attn::add(ctx, x, *delta));
    const auto xe = nn::dropout(ctx, x, cfg.dropout, tr).erased();
    auto h = xe;
    if (weights) weights->clear();
    if (cfg.layers && weights)
      h = encoder->forward_with_weights(ctx, xe, b.mask, *weights);
    else if (cfg.layers && !cls)
      h = encoder->forward(ctx, xe, b.mask);
    attn::Var<float, attn::AnyShape, B> nb(b.nb.erased());  // (B, 1), an input: no gradient
    if (cls) {  // the [CLS] token's state (B, Dim): position 0
      // Only the [CLS] row of the last layer is computed (its query over every token), unless the
      // weights are asked for: the same values as the full layer's row 0.
      attn::Var<float, attn::AnyShape, B> state;
      if (weights) {
        state = nn::masked_mean(ctx, h, b.cls_mask).erased();
      } else if (cls_entropy) {
        if constexpr (std::is_same_v<C, attn::Tape>) {
          auto r = encoder->forward_rows_with_weights(ctx, xe, b.mask, 1);
          state = attn::reshape(ctx, r.out, attn::Dims{b.size(), kDim});
          *cls_entropy = entropy_rows(ctx, r.weights, b.cls_norm);
        } else {
          throw attn::ArgumentError("ImdbClassifier::forward: the [CLS] entropy is for training (a tape)");
        }
      } else {
        state = attn::reshape(ctx, encoder->forward_rows(ctx, xe, b.mask, 1), attn::Dims{b.size(), kDim});
      }
      auto pooled = nn::dropout(ctx, state, cfg.dropout, tr);
      return (*cls_head)(ctx, attn::concat(ctx, std::vector<attn::Var<float, attn::AnyShape, B>>{pooled.erased(), nb}, 1));  // (B, 2)
    }
    // Mean and max of the real tokens' states (B, 2 Dim).
    std::vector<attn::Var<float, attn::AnyShape, B>> feats{nn::masked_mean(ctx, h, b.mask).erased(), nn::masked_max(ctx, h, b.mask).erased()};
    auto pooled = nn::dropout(ctx, attn::concat(ctx, feats, 1), cfg.dropout, tr);
    return (*head)(ctx, attn::concat(ctx, std::vector<attn::Var<float, attn::AnyShape, B>>{pooled.erased(), nb}, 1));  // (B, 2)
  }

  /// Token dropout of an embedding lookup e (B, T, Dim): each token's vector is zeroed whole with
  /// probability p and the others scaled by 1 / (1 - p), from the context's random stream.
  template <attn::Context C, class S>
  static attn::Var<float, S, B> drop_rows(C& ctx, const attn::Var<float, S, B>& e, double p) {
    if (p == 0) return e;
    const auto& d = e.dims();
    std::vector<float> keep(d.v[0] * d.v[1]);  // drawn on the host, from the context's stream
    const float scale = float(1 / (1 - p));
    for (auto& k : keep) k = ctx.rng().uniform() < p ? 0.0f : scale;
    const auto kt = Tensor<float, attn::AnyShape, B>::from({d.v[0], d.v[1], 1}, std::span<const float>(keep));
    return attn::Var<float, S, B>(attn::mul(ctx, e, attn::Var<float, attn::AnyShape, B>(kt)));
  }

  ModelConfig cfg;

 private:
  std::size_t heads_;

 public:
  NblrWeights<B> nblr;  // first: "nblr.*" lead named_parameters()
  nn::Embedding<kDim, float, B> tokens, positions, ngrams;
  std::unique_ptr<AnyEncoder<B>> encoder;  // none without layers
  std::optional<nn::Embedding<kDim, float, B>> cls;                      // the [CLS] token (Pool::cls)
  std::optional<nn::Linear<2 * kDim + 1, 2, float, B>> head;          // mean+max features and the NB-LR score
  std::optional<nn::Linear<kDim + 1, 2, float, B>> cls_head;          // the [CLS] state and the NB-LR score
};

}  // namespace imdb
