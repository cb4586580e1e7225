// SPDX-License-Identifier: MIT
// The IMDb model's encoder for each head count the program offers (1, 2, 4, 8, 16): the one part of
// the model whose type depends on it. Included by one translation unit per backend, which
// instantiates make_encoder<B> (heads.cpp for the CPU, cuda.cu for CUDA).
#pragma once
#include "model.hpp"

namespace imdb {

template <std::size_t Heads, class B>
class EncoderOf final : public AnyEncoder<B> {
 public:
  using typename AnyEncoder<B>::V;
  using typename AnyEncoder<B>::Mask;
  using typename AnyEncoder<B>::Weights;

  EncoderOf(nn::Module* parent, const ModelConfig& c) : encoder_(parent, "encoder", encoder_options(c)) {}
  std::size_t heads() const noexcept override { return Heads; }
  V forward(attn::Tape& ctx, const V& x, const Mask& mask) const override { return encoder_(ctx, x, mask); }
  V forward(attn::NoGrad& ctx, const V& x, const Mask& mask) const override { return encoder_(ctx, x, mask); }
  V forward_rows(attn::Tape& ctx, const V& x, const Mask& mask, std::size_t rows) const override {
    return encoder_.forward_rows(ctx, x, mask, rows);
  }
  V forward_rows(attn::NoGrad& ctx, const V& x, const Mask& mask, std::size_t rows) const override {
    return encoder_.forward_rows(ctx, x, mask, rows);
  }
  attn::nn::RowsOutput<float, B> forward_rows_with_weights(attn::Tape& ctx, const V& x, const Mask& mask, std::size_t rows) const override {
    return encoder_.forward_rows_with_weights(ctx, x, mask, rows);
  }
  V forward_with_weights(attn::Tape& ctx, const V& x, const Mask& mask, Weights& weights) const override {
    return with_weights(ctx, x, mask, weights);
  }
  V forward_with_weights(attn::NoGrad& ctx, const V& x, const Mask& mask, Weights& weights) const override {
    return with_weights(ctx, x, mask, weights);
  }

 private:
  nn::TransformerEncoder<Heads, kDim, float, B> encoder_;

  template <attn::Context C>
  V with_weights(C& ctx, const V& x, const Mask& mask, Weights& weights) const {
    auto r = encoder_.forward_with_weights(ctx, x, mask);
    for (auto& w : r.weights) weights.push_back(w.erased());
    return r.out;
  }
};

template <class B>
std::unique_ptr<AnyEncoder<B>> make_encoder(std::size_t heads, nn::Module* parent, const ModelConfig& c) {
  return attn::dispatch<1, 2, 4, 8, 16>(heads, "heads",
                                        [&]<std::size_t H>() -> std::unique_ptr<AnyEncoder<B>> { return std::make_unique<EncoderOf<H, B>>(parent, c); });
}

}  // namespace imdb
