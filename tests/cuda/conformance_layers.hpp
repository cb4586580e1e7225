// SPDX-License-Identifier: MIT
// Conformance cases of the layers and layer functions: layer_norm, masked pooling, dropout,
// Linear, Embedding, LSTM, BiLSTM, a small BiLSTM classifier trained one step's worth
// (forward, cross-entropy, backward), checkpointed residual blocks with dropout and an encoder's
// first rows (forward_rows). Parameters are initialised on the host from their names,
// so both backends start from the same weights. Included by the TUs that instantiate run_layers<T, B>.
#pragma once
#include "conformance_support.hpp"

namespace conformance::layers {

namespace nn = attn::nn;

/// Every parameter's gradient of a module, by its PyTorch name.
template <class T, class B>
void record_parameter_grads(Result& r, const nn::Module& m) {
  const auto named = m.named_parameters();
  const auto vars = m.parameters<T, B>();
  for (std::size_t i = 0; i < vars.size(); ++i) record_grad(r, named[i].first, vars[i]);
}

template <class T, class B>
Result layer_norm(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 9, 48}, -2, 3);
  auto gamma = input<T, B>(rng, {48}, 0.5, 1.5);
  auto beta = input<T, B>(rng, {48});
  auto y = nn::layer_norm(tape, x, gamma, beta, 1e-5);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_grad(r, "gamma", gamma);
  record_grad(r, "beta", beta);
  return r;
}
/// The module over many rows, so that its parameter gradients are split over blocks.
template <class T, class B>
Result layer_norm_module(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  nn::LayerNorm<48, T, B> norm(nullptr, "norm");
  auto x = input<T, B>(rng, {64, 70, 48});
  auto y = norm(tape, x);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, norm);
  return r;
}

/// x (4, 11, 24) and a mask (4, 11) with sample 1 fully masked and ragged others.
template <class T, class B>
Ten<T, B> pool_mask() {
  std::vector<T> m(4 * 11, T(0));
  const int len[4] = {11, 0, 5, 8};
  for (int i = 0; i < 4; ++i)
    for (int s = 0; s < len[i]; ++s) m[std::size_t(i) * 11 + std::size_t(s)] = T(1);
  m[3 * 11 + 2] = T(0);  // a hole inside sample 3
  return tensor<T, B>({4, 11}, m);
}
template <class T, class B, class F>
Result pool_case(std::uint64_t seed, F f) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 11, 24});
  auto y = f(tape, x, attn::KeepMask(pool_mask<T, B>()));
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  return r;
}
template <class T, class B>
Result masked_mean(std::uint64_t seed) {
  return pool_case<T, B>(seed, [](Tape& t, auto& x, const auto& m) { return nn::masked_mean(t, x, m); });
}
template <class T, class B>
Result masked_max(std::uint64_t seed) {
  return pool_case<T, B>(seed, [](Tape& t, auto& x, const auto& m) { return nn::masked_max(t, x, m); });
}
/// The mask comes from the tape's random stream, drawn on the host: the same on every backend.
template <class T, class B>
Result dropout(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  auto x = input<T, B>(rng, {5, 40});
  auto y = nn::dropout(tape, x, 0.3, true);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  return r;
}
template <class T, class B>
Result linear(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  nn::Linear<24, 10, T, B> lin(nullptr, "lin");
  auto x = input<T, B>(rng, {3, 7, 24});
  auto y = lin(tape, x);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, lin);
  return r;
}
template <class T, class B>
Result embedding_layer(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  nn::Embedding<16, T, B> emb(nullptr, "emb", 30, {.padding_idx = 0});
  std::vector<std::int64_t> ids(5 * 8);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.below(30));
  ids[0] = ids[9] = 0;
  auto y = emb(tape, attn::Tensor<std::int64_t, AnyShape, B>::from({5, 8}, std::span<const std::int64_t>(ids)));
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_parameter_grads<T, B>(r, emb);
  return r;
}

/// A recurrent layer over a ragged, unsorted batch; the loss reads out, h_n and c_n.
template <class T, class B, class Layer>
Result recurrent(std::uint64_t seed, Layer& rnn) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 6, 12});
  const std::vector<int> lengths = {3, 6, 1, 3};
  auto res = rnn(tape, x, std::span<const int>(lengths));
  auto loss = attn::add(tape, attn::add(tape, weighted_sum(tape, res.out, rng), weighted_sum(tape, res.h_n, rng)),
                        weighted_sum(tape, res.c_n, rng));
  tape.backward(loss);
  Result r;
  record_value(r, "out", res.out);
  record_value(r, "h_n", res.h_n);
  record_value(r, "c_n", res.c_n);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, rnn);
  return r;
}
template <class T, class B>
Result lstm(std::uint64_t seed) {
  nn::LSTM<12, 16, T, B> rnn(nullptr, "rnn");
  return recurrent<T, B>(seed, rnn);
}
template <class T, class B>
Result bilstm(std::uint64_t seed) {
  nn::BiLSTM<12, 16, T, B> rnn(nullptr, "rnn");
  return recurrent<T, B>(seed, rnn);
}

/// ids (B, T) -> Embedding<16> -> BiLSTM<16, 12> (B, T, 24) -> dropout -> LayerNorm<24> ->
/// masked mean -> Linear<24, 5> -> cross-entropy.
template <class T, class B>
struct Classifier : nn::Module {
  nn::Embedding<16, T, B> embed{this, "embed", 40, {.padding_idx = 0}};
  nn::BiLSTM<16, 12, T, B> rnn{this, "rnn"};
  nn::LayerNorm<24, T, B> norm{this, "norm"};
  nn::Linear<24, 5, T, B> head{this, "head"};
};
template <class T, class B>
Result bilstm_classifier(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  Classifier<T, B> model;
  const std::size_t b = 6, t = 9;
  const std::vector<int> lengths = {9, 4, 7, 1, 9, 5};
  std::vector<std::int64_t> ids(b * t, 0), labels(b);
  for (std::size_t i = 0; i < b; ++i) {
    labels[i] = static_cast<std::int64_t>(rng.below(5));
    for (std::size_t s = 0; s < std::size_t(lengths[i]); ++s) ids[i * t + s] = 1 + static_cast<std::int64_t>(rng.below(39));
  }
  const attn::Lengths batch{9, 4, 7, 1, 9, 5};  // the same batch for the BiLSTM and the pooling
  using I = attn::Tensor<std::int64_t, AnyShape, B>;
  auto x = model.embed(tape, I::from({b, t}, std::span<const std::int64_t>(ids)));
  auto h = model.rnn(tape, x, batch).out;
  h = nn::dropout(tape, h, 0.2, true);
  auto pooled = nn::masked_mean(tape, model.norm(tape, h), batch);
  auto logits = model.head(tape, pooled);
  auto loss = attn::cross_entropy(tape, logits, I::from({b}, std::span<const std::int64_t>(labels)));
  tape.backward(loss);
  Result r;
  record_value(r, "logits", logits);
  record_value(r, "loss", loss);
  record_parameter_grads<T, B>(r, model);
  return r;
}

/// x + fc2(dropout(tanh(fc1(x)))), twice, each block under attn::checkpoint (the second nested
/// in a checkpoint of its own): the recomputation runs on the backend, the dropout masks come
/// from the tape's stream on the host.
template <class T, class B>
struct Blocks : nn::Module {
  nn::Linear<12, 20, T, B> fc1{this, "fc1"}, fc3{this, "fc3"};
  nn::Linear<20, 12, T, B> fc2{this, "fc2"}, fc4{this, "fc4"};
};
template <class T, class B>
Result checkpointed_blocks(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  Blocks<T, B> m;
  using Var = V<T, B>;
  auto block = [](const auto& up, const auto& down) {
    return [&up, &down](auto& c, const Var& x) { return attn::add(c, x, down(c, nn::dropout(c, attn::tanh(c, up(c, x)), 0.3, true))); };
  };
  auto x = input<T, B>(rng, {4, 7, 12});
  Var h = attn::checkpoint(tape, block(m.fc1, m.fc2), x);
  Var y = attn::checkpoint(tape, [&](auto& c, const Var& v) { return attn::checkpoint(c, block(m.fc3, m.fc4), v); }, h);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, m);
  return r;
}

/// A two-layer pre-norm TransformerEncoder under a window with one global token, of which only
/// the first row of the last layer is computed (forward_rows), over a padded batch.
template <class T, class B>
Result encoder_rows(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::TransformerEncoder<4, 32, T, B> enc(
      nullptr, "enc", {.num_layers = 2, .layer = {.dim_feedforward = 48, .dropout = 0.0, .norm_first = true, .window = 3, .global_tokens = 1},
                       .final_norm = true});
  auto x = input<T, B>(rng, {3, 13, 32});
  auto y = enc.forward_rows(tape, x, attn::Lengths{13, 6, 9}, 1);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, enc);
  return r;
}

/// A two-layer post-norm TransformerEncoder under a causal window with global tokens at chosen
/// positions of each sample (global_mask), over a padded batch, attention dropout on.
template <class T, class B>
Result encoder_global_mask(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::TransformerEncoder<4, 32, T, B> enc(
      nullptr, "enc", {.num_layers = 2, .layer = {.dim_feedforward = 48, .dropout = 0.0, .attention_dropout = 0.2, .window = 2,
                                                  .causal = true}});
  auto x = input<T, B>(rng, {3, 13, 32});
  std::vector<T> marks(3 * 13, T(0));
  marks[0 * 13 + 5] = marks[0 * 13 + 12] = marks[2 * 13 + 0] = marks[2 * 13 + 7] = T(1);
  const auto gm = attn::Tensor<T, AnyShape, B>::from({3, 13}, std::span<const T>(marks));
  auto y = enc(tape, x, attn::Lengths{13, 6, 9}, {.global_mask = gm});
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, enc);
  return r;
}

}  // namespace conformance::layers

namespace conformance {

template <class T, class B>
Result run_layers(const std::string& name, std::uint64_t seed) {
#define ATTN_CONFORMANCE_RUN(n) \
  if (name == #n) return layers::n<T, B>(seed);
  ATTN_CONFORMANCE_LAYERS(ATTN_CONFORMANCE_RUN)
#undef ATTN_CONFORMANCE_RUN
  throw attn::ArgumentError("conformance::run_layers: no case '" + name + "'");
}

}  // namespace conformance
