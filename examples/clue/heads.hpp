// SPDX-License-Identifier: MIT
// The CLUE model's attention for each head count the program offers (kOfferedHeads): the one part of
// the model whose type depends on it. Included by one translation unit per backend, which
// instantiates make_attention<B> (heads.cpp for the CPU, cuda.cu for CUDA).
#pragma once
#include "model.hpp"

namespace clue {

template <std::size_t Heads, class B>
class AttentionOf final : public AnyAttention<B> {
 public:
  using typename AnyAttention<B>::V;

  AttentionOf(nn::Module* parent, const ModelConfig& c)
      : attention_(parent, "attn", {.dropout = c.attn_dropout, .padded = nn::PaddedRows::zero}) {}  // only real tokens are pooled
  std::size_t heads() const noexcept override { return Heads; }
  V forward(attn::Tape& ctx, const V& h, const attn::Lengths& lengths) const override { return attention_(ctx, h, lengths); }
  V forward(attn::NoGrad& ctx, const V& h, const attn::Lengths& lengths) const override { return attention_(ctx, h, lengths); }
  V forward_with_weights(attn::Tape& ctx, const V& h, const attn::Lengths& lengths, Tensor<float, attn::AnyShape, B>& weights) const override {
    return with_weights(ctx, h, lengths, weights);
  }
  V forward_with_weights(attn::NoGrad& ctx, const V& h, const attn::Lengths& lengths,
                         Tensor<float, attn::AnyShape, B>& weights) const override {
    return with_weights(ctx, h, lengths, weights);
  }

 private:
  nn::Attention<Heads, kDim, float, B> attention_;

  template <attn::Context C>
  V with_weights(C& ctx, const V& h, const attn::Lengths& lengths, Tensor<float, attn::AnyShape, B>& weights) const {
    auto r = attention_.forward_with_weights(ctx, h, lengths);
    weights = r.weights.erased();
    return r.out;
  }
};

template <class B>
std::unique_ptr<AnyAttention<B>> make_attention(std::size_t heads, nn::Module* parent, const ModelConfig& c) {
  return dispatch_heads(heads, "heads", [&]<std::size_t H>() -> std::unique_ptr<AnyAttention<B>> {
    if constexpr (H == 0)
      return nullptr;  // the ablation
    else
      return std::make_unique<AttentionOf<H, B>>(parent, c);
  });
}

}  // namespace clue
