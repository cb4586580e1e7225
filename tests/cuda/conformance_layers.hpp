// SPDX-License-Identifier: MIT
// Conformance cases of the layers and layer functions: layer_norm, rms_norm, masked pooling, dropout,
// Linear, Embedding, LSTM, BiLSTM, a small BiLSTM classifier trained one step's worth
// (forward, cross-entropy, backward), checkpointed residual blocks with dropout and an encoder's
// first rows (forward_rows). Parameters are initialised on the host from their names,
// so both backends start from the same weights. Included by the TUs that instantiate run_layers<T, B>.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <limits>

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

/// Every parameter's value of a module, by its PyTorch name after `prefix`.
template <class T, class B>
void record_values(Result& r, const nn::Module& m, const std::string& prefix) {
  const auto named = m.named_parameters();
  const auto vars = m.parameters<T, B>();
  for (std::size_t i = 0; i < vars.size(); ++i) record(r, prefix + named[i].first, vars[i].value());
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

template <class T, class B>
Result rms_norm(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 9, 48}, -2, 3);
  auto gamma = input<T, B>(rng, {48}, 0.5, 1.5);
  auto y = nn::rms_norm(tape, x, gamma, 1e-5);
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_grad(r, "gamma", gamma);
  return r;
}
/// The module over many rows (its weight's gradient split over blocks), and one without a weight.
template <class T, class B>
Result rms_norm_module(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape;
  nn::RMSNorm<48, T, B> norm(nullptr, "norm");
  nn::RMSNorm<attn::dyn, T, B> bare(nullptr, "bare", 48, 1e-3, false);
  auto x = input<T, B>(rng, {64, 70, 48});
  auto y = norm(tape, x);
  auto z = bare(tape, x);
  backward_from(tape, attn::add(tape, y, z), rng);
  Result r;
  record_value(r, "y", y);
  record_value(r, "z", z);
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

/// A GRU stack over a ragged, unsorted batch from a given h0 (rows, B, 16); the loss reads out and h_n.
template <class T, class B, class Layer>
Result recurrent_gru(std::uint64_t seed, Layer& rnn, std::size_t state_rows) {
  Rng rng(seed);
  Tape tape;
  auto x = input<T, B>(rng, {4, 6, 12});
  auto h0 = input<T, B>(rng, {state_rows, 4, 16});
  const std::vector<int> lengths = {3, 6, 1, 3};
  auto res = rnn(tape, x, std::span<const int>(lengths), h0);
  tape.backward(attn::add(tape, weighted_sum(tape, res.out, rng), weighted_sum(tape, res.h_n, rng)));
  Result r;
  record_value(r, "out", res.out);
  record_value(r, "h_n", res.h_n);
  record_grad(r, "x", x);
  record_grad(r, "h0", h0);
  record_parameter_grads<T, B>(r, rnn);
  return r;
}
template <class T, class B>
Result gru(std::uint64_t seed) {
  nn::GRU<12, 16, T, B> rnn(nullptr, "rnn");
  return recurrent_gru<T, B>(seed, rnn, 1);
}
template <class T, class B>
Result bigru_stacked(std::uint64_t seed) {
  nn::BiGRU<12, 16, T, B> rnn(nullptr, "rnn", {.num_layers = 2});
  return recurrent_gru<T, B>(seed, rnn, 4);
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

/// LLaMA's encoder block: two pre-norm layers with RMS norms and a SwiGLU feed-forward, no biases,
/// a final RMS norm, over a padded batch with dropout.
template <class T, class B>
Result encoder_rms_swiglu(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::TransformerEncoder<4, 32, T, B> enc(
      nullptr, "enc",
      {.num_layers = 2,
       .layer = {.dim_feedforward = 40, .dropout = 0.1, .activation = nn::Activation::silu, .gated = true, .norm_first = true,
                 .norm = nn::NormKind::rms, .bias = false},
       .final_norm = true});
  auto x = input<T, B>(rng, {3, 11, 32});
  auto y = enc(tape, x, attn::Lengths{11, 4, 7});
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, enc);
  return r;
}

/// nn::Attention<4, 32> over a padded batch (lengths 11, 5, 8) with attention dropout, the padded
/// query rows computed (PaddedRows::compute, under a KeepMask) or zeroed and skipped
/// (PaddedRows::zero, under Lengths).
template <class T, class B>
Result attention_case(std::uint64_t seed, attn::nn::PaddedRows padded) {
  Rng rng(seed);
  Tape tape(seed);
  nn::Attention<4, 32, T, B> att(nullptr, "attn", {.dropout = 0.2, .padded = padded});
  auto x = input<T, B>(rng, {3, 11, 32});
  std::vector<T> keep(3 * 11, T(0));
  const int len[3] = {11, 5, 8};
  for (int i = 0; i < 3; ++i)
    for (int s = 0; s < len[i]; ++s) keep[std::size_t(i) * 11 + std::size_t(s)] = T(1);
  auto y = padded == nn::PaddedRows::zero ? att(tape, x, attn::Lengths{11, 5, 8})
                                          : att(tape, x, attn::KeepMask(tensor<T, B>({3, 11}, keep)));
  backward_from(tape, y, rng);
  Result r;
  record_value(r, "y", y);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, att);
  return r;
}
template <class T, class B>
Result attention_compute(std::uint64_t seed) {
  return attention_case<T, B>(seed, nn::PaddedRows::compute);
}
template <class T, class B>
Result attention_zero(std::uint64_t seed) {
  return attention_case<T, B>(seed, nn::PaddedRows::zero);
}

/// A forward_with_weights case's record: the output, the weights, x's gradient and every parameter's.
template <class T, class B, class Out, class SX, class Layer>
Result attention_record(const Out& res, const attn::Var<T, SX, B>& x, const Layer& layer) {
  Result r;
  record_value(r, "y", res.out);
  record(r, "weights", res.weights);
  record_grad(r, "x", x);
  record_parameter_grads<T, B>(r, layer);
  return r;
}

/// forward_with_weights under padding and an additive (T, T) attn_mask (causal, -inf above the
/// diagonal, plus a learned-bias-like ramp), without bias terms: the output, the returned weights
/// and every gradient; then the same layer in eval mode without a tape (NoGrad).
template <class T, class B>
Result attention_weights_mask(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::Attention<2, 16, T, B> att(nullptr, "attn", {.dropout = 0.1, .bias = false});
  auto x = input<T, B>(rng, {2, 7, 16});
  std::vector<T> am(7 * 7);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j)
      am[std::size_t(i) * 7 + std::size_t(j)] = j > i ? -std::numeric_limits<T>::infinity() : T(0.1) * T(i - j);
  const auto mask = tensor<T, B>({7, 7}, am);
  auto res = att.forward_with_weights(tape, x, attn::Lengths{7, 4}, {.attn_mask = mask});
  backward_from(tape, res.out, rng);
  Result r = attention_record<T, B>(res, x, att);
  att.eval();
  attn::NoGrad ng;
  record_value(r, "y eval", att(ng, x, attn::Lengths{7, 4}, {.attn_mask = mask}));
  return r;
}

/// Self-attention under a per-head attn_mask (batch * heads, T, T) with a causal window of 2, a
/// global token and a global_mask folded into it, attention dropout, padded rows skipped
/// (PaddedRows::zero): the output, the weights and every gradient.
template <class T, class B>
Result attention_per_head_mask(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::Attention<2, 16, T, B> att(nullptr, "attn",
                                 {.dropout = 0.1, .padded = nn::PaddedRows::zero, .window = 2, .causal = true, .global_tokens = 1});
  auto x = input<T, B>(rng, {2, 8, 16});
  std::vector<T> per_head(2 * 2 * 8 * 8), global(2 * 8, T(0));
  for (std::size_t i = 0; i < per_head.size(); ++i) per_head[i] = i % 11 == 5 ? -std::numeric_limits<T>::infinity() : T(0.02) * T(i % 9);
  global[5] = T(1);
  auto res = att.forward_with_weights(tape, x, attn::Lengths{8, 6},
                                      {.attn_mask = tensor<T, B>({4, 8, 8}, per_head), .global_mask = tensor<T, B>({2, 8}, global)});
  backward_from(tape, res.out, rng);
  return attention_record<T, B>(res, x, att);
}

/// Rotary position embeddings: a causal nn::Attention<2, 16> turning half of each head's features
/// (interleaved pairs) over a padded batch, then its queries and keys projected at position 5 and
/// attended (the decoder's path); and attn::rotary alone on the first columns with an offset.
template <class T, class B>
Result attention_rotary(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::Attention<2, 16, T, B> att(nullptr, "attn", {.causal = true, .rotary = nn::RotaryOptions{.base = 100, .dim = 4, .interleaved = true}});
  auto x = input<T, B>(rng, {2, 7, 16});
  auto z = input<T, B>(rng, {2, 7, 24});
  auto y = att(tape, x, attn::Lengths{7, 4});
  const auto kv = att.project_key_value(tape, x, 5);
  auto y2 = att.attend(tape, att.project_query(tape, x, 5), kv.k, kv.v);
  auto zr = attn::rotary(tape, z, {.head_dim = 6, .columns = 18, .offset = 3, .base = 10});
  const auto ly = weighted_sum(tape, y, rng);  // one statement each: the random draws in a fixed order
  const auto ly2 = weighted_sum(tape, y2, rng);
  const auto lz = weighted_sum(tape, zr, rng);
  tape.backward(attn::add(tape, ly, attn::add(tape, ly2, lz)));
  Result r;
  record_value(r, "y", y);
  record_value(r, "y2", y2);
  record_value(r, "zr", zr);
  record_grad(r, "x", x);
  record_grad(r, "z", z);
  record_parameter_grads<T, B>(r, att);
  return r;
}

/// Cross-attention: nn::Attention's (query, memory, memory) call with attention dropout, padded
/// keys and a (Tq, Tk) attn_mask, returning the weights; then nn::CrossAttention (key width 12,
/// value width 8) under a PaddingMask and a per-head mask. Outputs, weights and every gradient.
template <class T, class B>
Result cross_attention(std::uint64_t seed) {
  Rng rng(seed);
  Tape tape(seed);
  nn::Attention<2, 16, T, B> att(nullptr, "attn", {.dropout = 0.2});
  nn::CrossAttention<4, 16, 12, 8, T, B> cross(nullptr, "cross");
  auto q = input<T, B>(rng, {3, 5, 16});
  auto memory = input<T, B>(rng, {3, 9, 16});
  auto k = input<T, B>(rng, {3, 9, 12});
  auto v = input<T, B>(rng, {3, 9, 8});
  std::vector<T> am(5 * 9), per_head(3 * 4 * 5 * 9), pad(3 * 9, T(0));
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 9; ++j) am[std::size_t(i) * 9 + std::size_t(j)] = (i + j) % 4 == 3 ? -std::numeric_limits<T>::infinity() : T(0.05) * T(j - i);
  for (std::size_t i = 0; i < per_head.size(); ++i) per_head[i] = i % 7 == 2 ? -std::numeric_limits<T>::infinity() : T(0.01) * T(i % 13);
  for (int j = 6; j < 9; ++j) pad[std::size_t(2) * 9 + std::size_t(j)] = T(1);
  auto res = att.forward_with_weights(tape, q, memory, memory, attn::Lengths{9, 4, 7}, {.attn_mask = tensor<T, B>({5, 9}, am)});
  auto y2 = cross(tape, res.out, k, v, attn::PaddingMask(tensor<T, B>({3, 9}, pad)), {.attn_mask = tensor<T, B>({12, 5, 9}, per_head)});
  backward_from(tape, y2, rng);
  Result r;
  record_value(r, "y", res.out);
  record(r, "weights", res.weights);
  record_value(r, "y2", y2);
  record_grad(r, "q", q);
  record_grad(r, "memory", memory);
  record_grad(r, "k", k);
  record_grad(r, "v", v);
  record_parameter_grads<T, B>(r, att);
  record_parameter_grads<T, B>(r, cross);
  return r;
}

/// nn::Transformer decoding from its key/value cache (one encoder layer, two causal pre-norm decoder
/// layers with a window of 2 and a global token, a padded source): the whole call, then a prompt of
/// 3 positions and one position per step, then a step after a beam-search reorder of the cache.
template <class T, class B>
Result decoder_incremental(std::uint64_t seed) {
  Rng rng(seed);
  attn::NoGrad ng;
  nn::Transformer<2, 16, T, B> model(nullptr, "t",
                                     {.num_encoder_layers = 1,
                                      .num_decoder_layers = 2,
                                      .layer = {.dim_feedforward = 32, .norm_first = true, .window = 2, .global_tokens = 1},
                                      .tgt_causal = true});
  model.eval();
  auto src = input<T, B>(rng, {2, 7, 16});
  auto tgt = input<T, B>(rng, {2, 6, 16});
  const attn::Lengths src_lengths{7, 4};
  Result r;
  record_value(r, "whole", model(ng, src, tgt, src_lengths, nullptr));
  auto state = model.start(ng, src, src_lengths);
  record_value(r, "prompt", model.decoder.step(ng, attn::slice(ng, tgt, 1, 0, 3), state));
  for (std::size_t t = 3; t < 6; ++t) record_value(r, "step " + std::to_string(t), model.decoder.step(ng, attn::slice(ng, tgt, 1, t, 1), state));
  state.reorder({1, 0, 1});  // beam search: three hypotheses from two rows
  record_value(r, "reordered step", model.decoder.step(ng, input<T, B>(rng, {3, 1, 16}), state));
  return r;
}

/// A sparse word table, a dense position table and a linear head trained three steps: AdamW
/// (SparseAdam's lazy update for the word table), gradient clipping that binds, the non-finite
/// guard, a moving average; then a step with a NaN loss that the guard skips; then SGD with
/// Nesterov momentum. Records the norms, the guard's verdicts, the weights, Adam's moments and the
/// average. Rows 40..49 of the word table are never looked up: SparseAdam must leave them alone.
template <class T, class B>
struct TrainNet : nn::Module {
  nn::Embedding<8, T, B> words{this, "words", 50, {.padding_idx = 0, .sparse = true}};
  nn::Embedding<8, T, B> pos{this, "pos", 6};
  nn::Linear<8, 3, T, B> head{this, "head"};

  template <attn::Context C>
  auto loss(C& ctx, Rng& rng) const {
    const std::size_t b = 4, t = 6;
    const std::vector<int> lengths = {6, 3, 1, 5};
    std::vector<std::int32_t> ids(b * t, 0), pos_ids(b * t, 0);
    std::vector<std::int64_t> labels(b);
    for (std::size_t i = 0; i < b; ++i) {
      labels[i] = static_cast<std::int64_t>(rng.below(3));
      for (std::size_t s = 0; s < std::size_t(lengths[i]); ++s) {
        ids[i * t + s] = 1 + static_cast<std::int32_t>(rng.below(39));
        pos_ids[i * t + s] = static_cast<std::int32_t>(s);
      }
    }
    using I = attn::Tensor<std::int32_t, AnyShape, B>;
    auto x = attn::add(ctx, words(ctx, I::from({b, t}, std::span<const std::int32_t>(ids))),
                       pos(ctx, I::from({b, t}, std::span<const std::int32_t>(pos_ids))));
    auto logits = head(ctx, nn::masked_mean(ctx, x, attn::Lengths(lengths)));
    return attn::cross_entropy(ctx, logits, attn::Tensor<std::int64_t, AnyShape, B>::from({b}, std::span<const std::int64_t>(labels)));
  }
};
template <class T, class B>
Result training_steps(std::uint64_t seed) {
  Rng rng(seed);
  TrainNet<T, B> m;
  attn::optim::Adam<T, B> opt(m, {.lr = 0.05, .weight_decay = 0.1, .decoupled = true});
  attn::optim::Ema<T, B> ema(m, {.decay = 0.8});
  attn::optim::NonFiniteGuard guard(attn::optim::OnNonFinite::skip);
  Result r;
  record_values<T, B>(r, m, "init ");
  auto scalar = [&](const std::string& name, double v) { r.push_back({name, {v}}); };
  for (int step = 0; step < 4; ++step) {
    Tape tape(seed + std::uint64_t(step));
    auto loss = m.loss(tape, rng);
    const bool poison = step == 3;
    if (poison) {
      tape.backward(loss, Ten<T, B>::full(loss.dims(), std::numeric_limits<T>::quiet_NaN()));
    } else {
      tape.backward(loss);
    }
    const double norm = attn::optim::clip_grad_norm(opt.params(), 0.05);
    if (!poison) scalar("norm " + std::to_string(step), norm);
    std::string bad;
    const bool finite = attn::optim::grads_finite(opt.named_params(), &bad);
    scalar("finite " + std::to_string(step), finite ? 1 : 0);
    const bool apply = guard.check(poison ? std::numeric_limits<double>::quiet_NaN() : loss.value().to_vector()[0], norm,
                                   opt.named_params(), step);
    scalar("applied " + std::to_string(step), apply ? 1 : 0);
    if (!finite) scalar("first non-finite is words.weight", bad == "words.weight" ? 1 : 0);
    if (apply) {
      opt.step();
      ema.update();
    }
    opt.zero_grad();
  }
  record_values<T, B>(r, m, "adam ");
  for (std::size_t k = 0; k < opt.params().size(); ++k) {
    record(r, "exp_avg " + std::to_string(k), opt.exp_avg(k));
    record(r, "exp_avg_sq " + std::to_string(k), opt.exp_avg_sq(k));
    record(r, "ema " + std::to_string(k), ema.other(k));
  }
  ema.swap();
  record_values<T, B>(r, m, "swapped ");
  ema.swap();
  attn::optim::Sgd<T, B> sgd(m, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  for (int step = 0; step < 2; ++step) {
    Tape tape(seed + 10 + std::uint64_t(step));
    tape.backward(m.loss(tape, rng));
    sgd.step();
    sgd.zero_grad();
  }
  record_values<T, B>(r, m, "sgd ");
  return r;
}

/// Weights trained one step on B, saved with the optimizer and the moving average, then loaded
/// into fresh models on B and on the CPU and into a fresh optimizer and average on B: a file
/// written from one backend loads on the other.
template <class T, class B>
Result checkpoint_roundtrip(std::uint64_t seed) {
  namespace fs = std::filesystem;
  Rng rng(seed);
  TrainNet<T, B> m;
  attn::optim::Adam<T, B> opt(m, {.lr = 0.05});
  attn::optim::Ema<T, B> ema(m, {.decay = 0.5});
  Tape tape(seed);
  tape.backward(m.loss(tape, rng));
  opt.step();
  ema.update();
  const fs::path dir = fs::temp_directory_path() /
                       ("attn-conformance-" + std::string(B::name) + "-" + std::to_string(seed) + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove{dir};
  attn::io::save(m, dir / "model.safetensors", {{"step", "1"}});
  attn::io::save_optimizer(opt, dir / "optimizer.safetensors");
  attn::io::save_ema(ema, dir / "ema.safetensors");
  TrainNet<T, B> same;
  TrainNet<T, attn::cpu> host;
  attn::nn::init::constant(same.head.weight, T(0));
  attn::nn::init::constant(host.head.weight, T(0));
  attn::io::load(same, dir / "model.safetensors");
  attn::io::load(host, dir / "model.safetensors");
  attn::optim::Adam<T, B> opt2(same, {.lr = 0.05});
  attn::io::load_optimizer(opt2, dir / "optimizer.safetensors");
  attn::optim::Ema<T, B> ema2(same, {.decay = 0.5});
  attn::io::load_ema(ema2, dir / "ema.safetensors");
  Result r;
  record_values<T, B>(r, same, "loaded ");
  record_values<T, attn::cpu>(r, host, "loaded on the cpu ");
  r.push_back({"steps", {double(opt2.steps()), double(ema2.steps())}});
  for (std::size_t k = 0; k < opt2.params().size(); ++k) {
    record(r, "exp_avg " + std::to_string(k), opt2.exp_avg(k));
    record(r, "ema " + std::to_string(k), ema2.other(k));
  }
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
