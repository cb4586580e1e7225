// SPDX-License-Identifier: MIT
// The reference models of the benchmarks (R1-R4), identical in shape to the PyTorch peer's
// (benchmarks/peer/peer.py): R1 the IMDb attention classifier, R2 the TNEWS BiLSTM + attention
// classifier (R2-gru: with a BiGRU in the BiLSTM's place), R3 the attention layer alone; each on backend B (bench --device cuda: bench_cuda.cu).
// Also the FLOP counts the ceiling fractions use.
#pragma once
#include <attn/attn.hpp>

#include <span>
#include <type_traits>

namespace bench {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

template <class B = attn::cpu>
struct BatchOn {
  Tensor<std::int32_t, attn::AnyShape, B> ids, pos;
  attn::Lengths lengths;  // real tokens first, then padding
  Tensor<std::int64_t, attn::AnyShape, B> labels;
};
using Batch = BatchOn<attn::cpu>;

/// A host batch on backend B.
template <class B>
BatchOn<B> to_backend(const Batch& b) {
  if constexpr (std::is_same_v<B, attn::cpu>) {
    return b;
  } else {
    return {b.ids.template to<B>(), b.pos.template to<B>(), b.lengths, b.labels.template to<B>()};
  }
}

/// R1: Embedding(20000, 128) + learned positions, Attention<H, 128>, masked mean, Linear(128, 2).
template <std::size_t H, class B = attn::cpu>
struct R1 : nn::Module {
  nn::Embedding<128, float, B> tokens{this, "tokens", 20000};
  nn::Embedding<128, float, B> positions{this, "positions", 256};
  nn::Attention<H, 128, float, B> attention{this, "attn"};
  nn::Linear<128, 2, float, B> head{this, "head"};
  template <attn::Context C>
  auto forward(C& ctx, const BatchOn<B>& b) const {
    auto x = tokens(ctx, b.ids) + positions(ctx, b.pos);
    auto y = attention(ctx, attn::Var<float, Shape<dyn, dyn, 128>, B>(x), b.lengths);
    return head(ctx, nn::masked_mean(ctx, y, b.lengths));
  }
};

/// R2: Embedding(6000, 128), BiLSTM<128, 128> (256 out), Attention<H, 256>, masked mean, Linear(256, 15);
/// with Gru, R2-gru: a BiGRU<128, 128> in the BiLSTM's place. The attention skips padded rows (the
/// pooling reads real tokens only); R2's training batches have none, R4's do.
template <std::size_t H, class B = attn::cpu, bool Gru = false>
struct R2 : nn::Module {
  nn::Embedding<128, float, B> tokens{this, "tokens", 6000};
  std::conditional_t<Gru, nn::BiGRU<128, 128, float, B>, nn::BiLSTM<128, 128, float, B>> lstm{this, "lstm"};
  nn::Attention<H, 256, float, B> attention{this, "attn", {.padded = nn::PaddedRows::zero}};
  nn::Linear<256, 15, float, B> head{this, "head"};
  template <attn::Context C>
  auto forward(C& ctx, const BatchOn<B>& b) const {
    auto x = tokens(ctx, b.ids);
    auto out = lstm(ctx, attn::Var<float, Shape<dyn, dyn, 128>, B>(x), b.lengths).out;
    auto y = attention(ctx, out, b.lengths);
    return head(ctx, nn::masked_mean(ctx, y, b.lengths));
  }
};

/// Synthetic batch: ids uniform in [1, vocab), lengths given (padding after them).
inline Batch make_batch(attn::Rng& rng, std::size_t vocab, std::size_t classes, const std::vector<int>& lengths) {
  const std::size_t b = lengths.size();
  std::size_t t = 1;
  for (int l : lengths) t = std::max<std::size_t>(t, std::size_t(l));
  Batch out;
  out.ids = Tensor<std::int32_t>::zeros({b, t});
  out.pos = Tensor<std::int32_t>::zeros({b, t});
  out.labels = Tensor<std::int64_t>::zeros({b});
  out.lengths = attn::Lengths(lengths);
  for (std::size_t i = 0; i < b; ++i) {
    for (std::size_t j = 0; j < std::size_t(lengths[i]); ++j) {
      out.ids(i, j) = std::int32_t(1 + rng.below(vocab - 1));
      out.pos(i, j) = std::int32_t(j);
    }
    out.labels(i) = std::int64_t(rng.below(classes));
  }
  return out;
}

/// FLOPs of one attention layer (projections + scores + weighted sum), forward only; `pairs` is the
/// number of (query, key) pairs the scores cover (t * t when dense).
inline double attention_flops(double b, double t, double d, double pairs) { return b * (2 * t * d * 3 * d + 2 * t * d * d + 4 * pairs * d); }
inline double attention_flops(double b, double t, double d) { return attention_flops(b, t, d, t * t); }

/// FLOPs of a bidirectional LSTM's products, forward only: per token and direction, the input
/// projection (in -> 4 hidden) and the recurrent one (hidden -> 4 hidden); the gates' element-wise
/// work is not counted.
inline double bilstm_flops(double b, double t, double in, double hidden, double gates = 4) {
  return b * t * 2 * (2 * in * gates * hidden + 2 * hidden * gates * hidden);
}
/// The same for a bidirectional GRU (3 gates).
inline double bigru_flops(double b, double t, double in, double hidden) { return bilstm_flops(b, t, in, hidden, 3); }

/// The (query, key) pairs of a sliding window: i sees j iff |i - j| <= w, 0 <= i, j < t. Only these
/// count for R5: t (2w + 1) less the w (w + 1) cut off at the two ends.
inline double band_pairs(double t, double w) { return w < t ? t * (2 * w + 1) - w * (w + 1) : t * t; }

/// R4's batch of titles: their lengths.
inline const std::vector<int> kR4Lengths = {38, 45, 23, 26, 15, 22, 15, 10, 21, 22, 22, 22, 19, 18, 9,  19, 9,  11, 13, 12, 27, 11,
                                            17, 32, 30, 16, 28, 14, 19, 23, 19, 28, 13, 26, 31, 45, 19, 18, 17, 20, 13, 11, 14, 20,
                                            9,  21, 11, 9,  21, 32, 17, 72, 29, 25, 14, 25, 30, 29, 16, 13, 12, 16, 18, 30};

}  // namespace bench
