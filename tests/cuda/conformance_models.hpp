// SPDX-License-Identifier: MIT
// Conformance cases of the example programs' models, as the programs build them (examples/*/model.hpp):
// one training step (forward, cross-entropy, backward, AdamW) and inference in eval mode without a
// tape, with the attention weights. Float only, as the programs. Parameters come from Module::init's
// one host stream, as in the programs, so both backends start from the same weights.
#pragma once
#include "../../examples/clue/heads.hpp"
#include "../../examples/imdb/heads.hpp"
#include "conformance_layers.hpp"

namespace conformance::models {

/// One training step as the programs take it: forward, cross-entropy (with label_smoothing),
/// backward; records the logits, the loss and every parameter's gradient; clips the gradients'
/// norm to 1 (recording the norm before clipping) and takes one AdamW step.
template <class B, class Model, class Batch>
void train_one_step(Result& r, Model& model, const Batch& batch, std::uint64_t seed, double label_smoothing) {
  attn::optim::Adam<float, B> opt(model, {.lr = 1e-3, .weight_decay = 0.01, .decoupled = true});
  Tape tape(seed);
  auto logits = model.forward(tape, batch);
  auto loss = attn::cross_entropy(tape, logits, batch.labels, {.label_smoothing = label_smoothing});
  tape.backward(loss);
  record_value(r, "logits", logits);
  record_value(r, "loss", loss);
  layers::record_parameter_grads<float, B>(r, model);
  r.push_back({"clipped norm", {attn::optim::clip_grad_norm(opt.params(), 1.0)}});
  opt.step();
  opt.zero_grad();
}

/// TNEWS's classifier (Embedding, BiLSTM, 4-head attention with dropout over padded rows zeroed,
/// residual LayerNorm, masked mean, linear head) over 5 ragged sequences of a 60-character vocabulary.
template <class B>
Result clue_model(std::uint64_t seed) {
  Rng rng(seed);
  clue::TnewsClassifier<B> model(clue::ModelConfig{.vocab = 60, .max_len = 12}, 4);
  model.init(seed);  // as the program does: one host stream over every parameter
  const int lengths[5] = {12, 3, 7, 1, 9};
  std::vector<std::vector<std::int32_t>> seqs(5);
  std::vector<int> labels(5);
  for (std::size_t i = 0; i < 5; ++i) {
    for (int s = 0; s < lengths[i]; ++s) seqs[i].push_back(1 + static_cast<std::int32_t>(rng.below(59)));
    labels[i] = static_cast<int>(rng.below(clue::kTnewsClasses));
  }
  std::vector<const std::vector<std::int32_t>*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  const auto batch = clue::to_backend<B>(clue::make_batch(ptrs, labels));

  Result r;
  train_one_step<B>(r, model, batch, seed, 0.0);
  model.eval();
  attn::NoGrad ng;
  attn::Tensor<float, AnyShape, B> weights;
  record_value(r, "eval logits", model.forward(ng, batch, &weights));
  record(r, "eval weights", weights);
  return r;
}

/// IMDb's classifier over 5 ragged reviews of an 80-word vocabulary: word, position and hashed bi- and
/// trigram embeddings (sparse tables, n-gram dropout), two encoder layers of 2 heads, and either
/// mean+max pooling with the NB-LR ensemble's score (post-norm, full attention) or a [CLS] token
/// (pre-norm, a window of 3, checkpointed layers, the last computing the [CLS] row alone).
template <class B>
Result imdb_case(std::uint64_t seed, bool cls) {
  Rng rng(seed);
  imdb::ModelConfig cfg{.vocab = 80, .max_len = 16, .layers = 2, .pool = cls ? imdb::Pool::cls : imdb::Pool::mean_max,
                        .norm_first = cls, .window = cls ? 3u : 0u, .ngram_buckets = 32, .ngram_order = 3,
                        .nblr_buckets = cls ? 0u : 16u, .dropout = 0.1, .attn_dropout = 0.1, .ngram_dropout = 0.2, .checkpoint = cls};
  imdb::ImdbClassifier<B> model(cfg, 2);
  model.init(seed);
  if (cfg.ensemble()) {
    imdb::NbLr nb;
    for (std::size_t i = 0; i <= 16; ++i) nb.weight.push_back(static_cast<float>(rng.uniform(-1, 1)));
    nb.bias = 0.25f;
    model.set_nblr(nb, imdb::PlattScale{.a = 1.5, .b = -0.2});
  }
  const int lengths[5] = {20, 3, 9, 1, 16};  // the first is truncated (head+tail)
  std::vector<std::vector<std::int32_t>> seqs(5);
  std::vector<int> labels(5);
  std::vector<float> nbs;
  for (std::size_t i = 0; i < 5; ++i) {
    for (int s = 0; s < lengths[i]; ++s) seqs[i].push_back(2 + static_cast<std::int32_t>(rng.below(78)));
    labels[i] = static_cast<int>(rng.below(2));
    nbs.push_back(model.nb_logit(seqs[i]));
  }
  std::vector<const std::vector<std::int32_t>*> ptrs;
  for (auto& s : seqs) ptrs.push_back(&s);
  const auto batch = imdb::to_backend<B>(imdb::make_batch(ptrs, labels, cfg.ensemble() ? nbs : std::vector<float>{}, cfg));

  Result r;
  r.push_back({"nb logits", std::vector<double>(nbs.begin(), nbs.end())});
  train_one_step<B>(r, model, batch, seed, 0.1);
  model.eval();
  attn::NoGrad ng;
  std::vector<attn::Tensor<float, AnyShape, B>> weights;
  record_value(r, "eval logits", model.forward(ng, batch));
  record_value(r, "eval logits with weights", model.forward(ng, batch, &weights));
  for (std::size_t l = 0; l < weights.size(); ++l) record(r, "eval weights " + std::to_string(l), weights[l]);
  layers::record_values<float, B>(r, model, "after a step ");
  return r;
}
template <class B>
Result imdb_model(std::uint64_t seed) {
  return imdb_case<B>(seed, false);
}
template <class B>
Result imdb_model_cls(std::uint64_t seed) {
  return imdb_case<B>(seed, true);
}

}  // namespace conformance::models

namespace conformance {

template <class B>
Result run_models(const std::string& name, std::uint64_t seed) {
#define ATTN_CONFORMANCE_RUN(n) \
  if (name == #n) return models::n<B>(seed);
  ATTN_CONFORMANCE_MODELS(ATTN_CONFORMANCE_RUN)
#undef ATTN_CONFORMANCE_RUN
  throw attn::ArgumentError("conformance::run_models: no case '" + name + "'");
}

}  // namespace conformance
