// SPDX-License-Identifier: MIT
// The CLUE classifier (reference model R2 on TNEWS): character embeddings, a BiLSTM (or a BiGRU,
// "rnn": "gru"), one multi-head
// self-attention block (optionally residual + LayerNorm), masked mean pooling and a linear head
// over the task's classes (labels.json's: TNEWS's 15 news categories, IFLYTEK's 119 app
// categories), a width chosen at run time (nn::Linear<256, dyn>). With 0 heads, the ablation, it
// is the same model without its attention (LayerNorm(h), or h itself without the residual, is
// pooled). The head count is the attention's template argument (nn::Attention<Heads, 256>); the
// model reaches its attention through an interface (AnyAttention), so that the model and
// everything that trains, evaluates and serves it are compiled once per backend and only the
// attention once per head count (heads.hpp).
#pragma once
#include <attn/attn.hpp>
#include <attn/nn/attention.hpp>
#include <attn/nn/gru.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <span>
#include <type_traits>

#include "../common/json_files.hpp"
#include "options.hpp"

namespace clue {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

inline constexpr std::size_t kEmbed = 128;        // character embedding width
inline constexpr std::size_t kHidden = 128;       // recurrent layer's hidden size per direction
inline constexpr std::size_t kDim = 2 * kHidden;  // BiLSTM output = attention width
inline constexpr std::size_t kTnewsClasses = 15;  // TNEWS news categories (the default, and the benchmark's R2)
inline constexpr std::size_t kMaxClasses = 4096;   // labels.json's classes at most

struct ModelConfig {
  std::size_t vocab = 0;
  std::size_t max_len = 128;
  double dropout = 0.2;       // on the embeddings, the attention output and the pooled features
  double attn_dropout = 0.1;  // on the attention weights
  bool residual = true;       // y = LayerNorm(h + Attention(h)) instead of y = Attention(h)
  std::size_t classes = kTnewsClasses;  // the head's outputs: labels.json's classes
  std::string rnn = "lstm";             // the recurrent layer: "lstm" (nn::BiLSTM) or "gru" (nn::BiGRU)

  /// "BiLSTM" or "BiGRU", for reports.
  std::string rnn_label() const { return rnn == "gru" ? "BiGRU" : "BiLSTM"; }
  /// The recurrent layer's gates: 4 (LSTM) or 3 (GRU).
  std::size_t rnn_gates() const { return rnn == "gru" ? 3 : 4; }

  nlohmann::json to_json() const {
    return {{"vocab", vocab}, {"max_len", max_len}, {"dropout", dropout}, {"attn_dropout", attn_dropout}, {"residual", residual},
            {"classes", classes}, {"rnn", rnn}};
  }
  /// Reads config.json's "model" object; every field is range-checked (examples::FieldError
  /// "model.max_len: ..." otherwise) before anything is allocated from it.
  static ModelConfig from_json(const nlohmann::json& j) {
    using namespace examples;
    const std::string m = "model.";
    ModelConfig c;
    c.vocab = json_count(j, "vocab", 2, kMaxVocab, m);
    c.max_len = json_count(j, "max_len", 1, kMaxLen, m);
    c.dropout = json_real(j, "dropout", 0.0, 0.95, m);
    c.attn_dropout = json_real(j, "attn_dropout", 0.0, 0.95, m);
    c.residual = json_bool(j, "residual", m);
    // Absent in configurations written before other tasks than TNEWS were taken: 15.
    c.classes = j.contains("classes") ? json_count(j, "classes", 2, kMaxClasses, m) : kTnewsClasses;
    // Absent in configurations written before the GRU was offered: an LSTM.
    c.rnn = j.contains("rnn") ? json_string(j, "rnn", m) : std::string("lstm");
    if (!offered_rnn(c.rnn)) throw FieldError(m + "rnn", "\"" + c.rnn + "\" is not a recurrent layer the program offers (lstm, gru)");
    return c;
  }
};

/// One padded batch on backend B: ids (B, T), the lengths (B) in [1, T] (which the BiLSTM, the
/// attention and the pooling all take; kept on the host), labels (B) (zeros when unknown).
template <class B = attn::cpu>
struct BatchOn {
  Tensor<std::int32_t, Shape<dyn, dyn>, B> ids;
  attn::Lengths lengths;
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
    return {b.ids.template to<B>(), b.lengths, b.labels.template to<B>()};
  }
}

/// Builds a batch from encoded sequences (each non-empty and already truncated to max_len); T is
/// the longest of them.
inline Batch make_batch(const std::vector<const std::vector<std::int32_t>*>& seqs, const std::vector<int>& labels) {
  const std::size_t b = seqs.size();
  std::size_t t = 1;
  for (auto* s : seqs) t = std::max(t, s->size());
  Batch out;
  out.ids = Tensor<std::int32_t, Shape<dyn, dyn>>::zeros({b, t});
  out.labels = Tensor<std::int64_t, Shape<dyn>>::zeros({b});
  std::vector<int> lengths(b);
  for (std::size_t i = 0; i < b; ++i) {
    const auto& s = *seqs[i];
    if (s.empty()) throw attn::ArgumentError("clue::make_batch: empty sequence (encode() gives empty texts one <unk>)");
    for (std::size_t j = 0; j < s.size(); ++j) out.ids(i, j) = s[j];
    lengths[i] = int(s.size());
    out.labels(i) = labels.empty() ? 0 : labels[i];
  }
  out.lengths = attn::Lengths(lengths);
  return out;
}

/// The self-attention of a model on backend B, whatever its head count: nn::Attention<Heads, kDim,
/// float, B> behind virtual calls (heads.hpp implements it).
template <class B>
class AnyAttention {
 public:
  using V = attn::Var<float, Shape<dyn, dyn, kDim>, B>;
  virtual ~AnyAttention() = default;
  virtual std::size_t heads() const noexcept = 0;
  /// h (B, T, kDim) -> (B, T, kDim) over each sample's first `lengths` positions.
  virtual V forward(attn::Tape& ctx, const V& h, const attn::Lengths& lengths) const = 0;
  virtual V forward(attn::NoGrad& ctx, const V& h, const attn::Lengths& lengths) const = 0;
  /// forward, also storing the attention weights (B, Heads, T, T) in `weights`.
  virtual V forward_with_weights(attn::Tape& ctx, const V& h, const attn::Lengths& lengths, Tensor<float, attn::AnyShape, B>& weights) const = 0;
  virtual V forward_with_weights(attn::NoGrad& ctx, const V& h, const attn::Lengths& lengths,
                                 Tensor<float, attn::AnyShape, B>& weights) const = 0;
};

/// The attention "attn" of `parent` with `heads` heads (1, 2, 4 or 8) for configuration c; none
/// (nullptr) for 0 heads. Defined in heads.hpp, instantiated by one translation unit per backend.
template <class B>
std::unique_ptr<AnyAttention<B>> make_attention(std::size_t heads, nn::Module* parent, const ModelConfig& c);

/// The model on backend B (attn::cpu or attn::cuda; the embedding fold is the CPU's only), with
/// `heads` attention heads (0: without attention) and the recurrent layer cfg.rnn: nn::BiLSTM
/// ("lstm", parameters lstm.*) or nn::BiGRU ("gru", parameters gru.*), the other one null.
template <class B = attn::cpu>
struct TnewsClassifier : nn::Module {
  using backend = B;
  using Lstm = nn::BiLSTM<kEmbed, kHidden, float, B>;
  using Gru = nn::BiGRU<kEmbed, kHidden, float, B>;

  TnewsClassifier(const ModelConfig& c, std::size_t heads)
      : cfg(c),
        tokens(this, "embed", c.vocab, {.padding_idx = 0, .init_std = 0.1}),
        lstm(c.rnn == "lstm" ? std::make_unique<Lstm>(this, "lstm") : nullptr),
        gru(c.rnn == "gru" ? std::make_unique<Gru>(this, "gru") : nullptr),
        attention(make_attention<B>(heads, this, c)),
        norm(this, "norm"),
        head(this, "head", c.classes, {.xavier = true}) {}

  /// The attention's heads (0: the model has no attention).
  std::size_t heads() const noexcept { return attention ? attention->heads() : 0; }

  /// Logits (B, classes). When weights is given, the attention weights (B, Heads, T, T) are stored there
  /// (a model without attention leaves it as it is). When delta is given (B, T, kEmbed), it is added
  /// to the character embeddings before dropout (the perturbation of adversarial training).
  template <attn::Context C>
  auto forward(C& ctx, const BatchOn<B>& b, Tensor<float, attn::AnyShape, B>* weights = nullptr,
               const attn::Var<float, attn::AnyShape, B>* delta = nullptr) const {
    const bool tr = training();
    attn::Var<float, Shape<dyn, dyn, kDim>, B> h;                       // (B, T, 256), zero at padding
    if constexpr (std::is_same_v<C, attn::NoGrad> && B::host_accessible) {
      // The tables hold the input projections in the precision they were folded in; under another
      // one (an int8 evaluation of a model folded in fp32) the two layers run as they are.
      if (folded && !tr && !delta && folded->precision == attn::precision())
        h = lstm ? nn::embedded_lstm(ctx, *lstm, *folded, b.ids, b.lengths).out : nn::embedded_gru(ctx, *gru, *folded, b.ids, b.lengths).out;
    }
    if (!h.defined()) {
      auto x = tokens(ctx, b.ids);  // (B, T, kEmbed)
      if (delta) x = decltype(x)(attn::add(ctx, x, *delta));
      const auto xd = nn::dropout(ctx, x, cfg.dropout, tr);
      h = lstm ? (*lstm)(ctx, xd, b.lengths).out : (*gru)(ctx, xd, b.lengths).out;
    }
    attn::Var<float, Shape<dyn, dyn, kDim>, B> y;
    if (!attention) {  // the ablation: the attention branch removed, nothing else
      y = cfg.residual ? norm(ctx, h) : h;
    } else {
      attn::Var<float, Shape<dyn, dyn, kDim>, B> a;
      if (weights)
        a = attention->forward_with_weights(ctx, h, b.lengths, *weights);
      else
        a = attention->forward(ctx, h, b.lengths);                       // (B, T, 256)
      y = cfg.residual ? norm(ctx, h + nn::dropout(ctx, a, cfg.dropout, tr)) : a;
    }
    auto pooled = nn::masked_mean(ctx, y, b.lengths);                    // (B, 256)
    return head(ctx, nn::dropout(ctx, pooled, cfg.dropout, tr));       // (B, classes)
  }

  /// Inference: folds the embedding into the recurrent layer's input projections (nn::embedded_lstm,
  /// nn::embedded_gru), in the current precision, which forward() then uses in eval mode without a
  /// tape under that precision.
  /// Call it once the weights are final (after training or loading, and after quantize_dynamic):
  /// tables whose weights have changed since make forward() throw.
  void fold_embedding() {
    static_assert(B::host_accessible, "TnewsClassifier::fold_embedding: the inference-time embedding fold runs on the CPU backend only");
    folded = lstm ? nn::lstm_input_tables(tokens, *lstm) : nn::gru_input_tables(tokens, *gru);
  }

  ModelConfig cfg;
  std::optional<nn::RnnInputTables<float>> folded;
  nn::Embedding<kEmbed, float, B> tokens;
  std::unique_ptr<Lstm> lstm;  // cfg.rnn "lstm"
  std::unique_ptr<Gru> gru;    // cfg.rnn "gru"
  std::unique_ptr<AnyAttention<B>> attention;
  nn::LayerNorm<kDim, float, B> norm;
  nn::Linear<kDim, dyn, float, B> head;
};

}  // namespace clue
