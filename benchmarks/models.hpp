// SPDX-License-Identifier: MIT
// The reference models of the benchmarks (R1-R4), identical in shape to the PyTorch peer's
// (benchmarks/peer/peer.py): R1 the IMDb attention classifier, R2 the TNEWS BiLSTM + attention
// classifier, R3 the attention layer alone.
#pragma once
#include <attn/attn.hpp>

namespace bench {

namespace nn = attn::nn;
using attn::dyn;
using attn::Shape;
using attn::Tensor;

struct Batch {
  Tensor<std::int32_t> ids, pos;
  attn::Lengths lengths;  // real tokens first, then padding
  Tensor<std::int64_t> labels;
};

/// R1: Embedding(20000, 128) + learned positions, Attention<H, 128>, masked mean, Linear(128, 2).
template <std::size_t H>
struct R1 : nn::Module {
  nn::Embedding<128> tokens{this, "tokens", 20000};
  nn::Embedding<128> positions{this, "positions", 256};
  nn::Attention<H, 128> attention{this, "attn"};
  nn::Linear<128, 2> head{this, "head"};
  template <attn::Context C>
  auto forward(C& ctx, const Batch& b) const {
    auto x = tokens(ctx, b.ids) + positions(ctx, b.pos);
    auto y = attention(ctx, attn::Var<float, Shape<dyn, dyn, 128>>(x), b.lengths);
    return head(ctx, nn::masked_mean(ctx, y, b.lengths));
  }
};

/// R2: Embedding(6000, 128), BiLSTM<128, 128> (256 out), Attention<H, 256>, masked mean, Linear(256, 15).
/// The attention skips padded rows (the pooling reads real tokens only); R2's training batches
/// have none, R4's do.
template <std::size_t H>
struct R2 : nn::Module {
  nn::Embedding<128> tokens{this, "tokens", 6000};
  nn::BiLSTM<128, 128> lstm{this, "lstm"};
  nn::Attention<H, 256> attention{this, "attn", {.padded = nn::PaddedRows::zero}};
  nn::Linear<256, 15> head{this, "head"};
  template <attn::Context C>
  auto forward(C& ctx, const Batch& b) const {
    auto x = tokens(ctx, b.ids);
    auto out = lstm(ctx, attn::Var<float, Shape<dyn, dyn, 128>>(x), b.lengths).out;
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

}  // namespace bench
