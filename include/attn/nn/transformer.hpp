// SPDX-License-Identifier: MIT
// nn::Transformer<Heads, Dim>: PyTorch's torch.nn.Transformer with batch_first=True, an encoder
// stack and a decoder stack, each with its final LayerNorm, under torch's names
// ("encoder.layers.0.self_attn.in_proj_weight", "encoder.norm.weight", "decoder.layers.0.multihead_attn...",
// "decoder.norm.bias"), so a checkpoint moves between the two. nn::square_subsequent_mask is
// torch's Transformer.generate_square_subsequent_mask.
//   attn::nn::Transformer<8, 512> model{this, "transformer", {.num_encoder_layers = 6, .num_decoder_layers = 6,
//                                                            .layer = {.dim_feedforward = 2048}, .tgt_causal = true}};
//   auto y = model(ctx, src, tgt, attn::Lengths{12, 9}, attn::Lengths{7, 5});  // (B, T, 512)
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "decoder.hpp"
#include "encoder.hpp"
#include "init.hpp"
#include "module.hpp"

namespace attn::nn {

/// torch's Transformer.generate_square_subsequent_mask(n): an additive (n, n) mask, 0 on and below
/// the diagonal and -inf above it (position i sees positions 0..i). For an extras' attn_mask; the
/// layers' `causal` option applies the same pattern without a mask tensor (and lets the flash
/// kernel skip the masked tiles).
template <class T = float, class B = cpu>
Tensor<T, AnyShape, B> square_subsequent_mask(std::size_t n) {
  static_assert(std::is_floating_point_v<T>, "nn::square_subsequent_mask: an additive mask holds -inf, so T must be a floating-point type");
  std::vector<T> host(n * n, T(0));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) host[i * n + j] = -std::numeric_limits<T>::infinity();
  return Tensor<T, AnyShape, B>::from(Dims{n, n}, std::span<const T>(host));
}

struct TransformerOptions {
  std::size_t num_encoder_layers = 6;  // torch's defaults
  std::size_t num_decoder_layers = 6;
  /// Every layer's options, encoder's and decoder's (torch's dim_feedforward, dropout, activation,
  /// layer_norm_eps, norm_first, bias; attn's attention_dropout, padded, window, ...). Its `causal`
  /// applies to both stacks' self-attention; tgt_causal to the decoder's alone.
  TransformerEncoderLayerOptions layer = {};
  /// The decoder's self-attention is causal (torch: tgt_mask = generate_square_subsequent_mask(T),
  /// tgt_is_causal=True): the usual sequence-to-sequence model.
  bool tgt_causal = false;
  /// Each layer of both stacks goes through attn::checkpoint (TransformerEncoderOptions::checkpoint).
  bool checkpoint = false;
};

/// Per-call inputs besides the key masks: torch's src_mask (extras.src.attn_mask, (S, S)), tgt_mask
/// (extras.tgt.attn_mask, (T, T)) and memory_mask (extras.memory.attn_mask, (T, S)), each also per
/// sample and head ((B * Heads, ., .)), all additive, and the other AttentionExtras of each attention.
template <class T, class B = cpu>
struct TransformerExtras {
  AttentionExtras<T, B> src = {};
  AttentionExtras<T, B> tgt = {};
  AttentionExtras<T, B> memory = {};
};

/// encoder (TransformerEncoder, final norm "encoder.norm") and decoder (TransformerDecoder, final
/// norm "decoder.norm"), as torch.nn.Transformer builds them. Initial values as torch's: after the
/// layers draw theirs, every parameter of two or more dimensions is drawn again, Xavier uniform
/// (torch's _reset_parameters); the biases and norms keep the layers' values.
template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class Transformer : public Module {
 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;

  Transformer(Module* parent, std::string name, TransformerOptions opt = {})
      : Module(parent, std::move(name)),
        encoder(this, "encoder", {.num_layers = opt.num_encoder_layers, .layer = opt.layer, .final_norm = true, .checkpoint = opt.checkpoint}),
        decoder(this, "decoder", {.num_layers = opt.num_decoder_layers, .layer = decoder_layer(opt), .final_norm = true, .checkpoint = opt.checkpoint}),
        opt_(opt) {
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_after_children(rng);
    }
  }

  /// torch's _reset_parameters: Xavier uniform on every parameter of two or more dimensions, the
  /// layers' and the stacks' alike. Module::init(seed) runs it after the layers' own draws.
  void reset_after_children(Rng& rng) override {
    for (const auto& v : this->template parameters<T, B>())  // registration order, as torch's self.parameters()
      if (v.dims().n > 1) init::xavier_uniform(v, rng);
  }

  /// src (B, S, Dim) and tgt (B, T, Dim) -> (B, T, Dim): decoder(tgt, encoder(src)). src_key_mask
  /// says which source positions are real tokens (torch's src_key_padding_mask) and applies to the
  /// memory as well (torch's memory_key_padding_mask, None unless passed in torch: its users pass
  /// the source's mask; encode and decoder take the two separately); tgt_key_mask is torch's
  /// tgt_key_padding_mask. Each is attn::Lengths, KeepMask(m), PaddingMask(m), or nullptr for none.
  template <Context C, class SS, class ST, DecoderKeyMask MS, DecoderKeyMask MT>
  Var<T, ST, B> operator()(C& ctx, const Var<T, SS, B>& src, const Var<T, ST, B>& tgt, const MS& src_key_mask, const MT& tgt_key_mask,
                           TransformerExtras<T, B> extras = {}) const {
    const auto memory = encode(ctx, src, src_key_mask, extras.src);
    return decoder(ctx, tgt, memory, tgt_key_mask, src_key_mask, DecoderExtras<T, B>{.tgt = extras.tgt, .memory = extras.memory});
  }
  /// Every source and target position a real token.
  template <Context C, class SS, class ST>
  Var<T, ST, B> operator()(C& ctx, const Var<T, SS, B>& src, const Var<T, ST, B>& tgt, TransformerExtras<T, B> extras = {}) const {
    return (*this)(ctx, src, tgt, nullptr, nullptr, extras);
  }
  template <Context C, class SS, class ST, class MS, class MT>
    requires(BareMaskTensor<MS> || BareMaskTensor<MT>)
  Var<T, ST, B> operator()(C&, const Var<T, SS, B>&, const Var<T, ST, B>&, const MS&, const MT&, TransformerExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<MS>,
                  "nn::Transformer: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's *_key_padding_mask), attn::Lengths or nullptr");
    return {};
  }

  /// The encoder's output (the memory) for src with its key mask (or nullptr): for decoding
  /// several targets against one source, with decoder(ctx, tgt, memory, tgt_key_mask, src_key_mask).
  template <Context C, class SS, DecoderKeyMask MS>
  Var<T, SS, B> encode(C& ctx, const Var<T, SS, B>& src, const MS& src_key_mask, AttentionExtras<T, B> extras = {}) const {
    if constexpr (std::is_null_pointer_v<std::remove_cvref_t<MS>>) return encoder(ctx, src, extras);
    else return encoder(ctx, src, src_key_mask, extras);
  }

  /// Incremental decoding against src (TransformerDecoder::start, step): the encoder's output with
  /// src's key mask (or nullptr), then model.decoder.step(ctx, tgt, state) per target block. The
  /// decoder must be causal (tgt_causal).
  template <Context C, class SS, DecoderKeyMask MS>
  DecoderState<T, B> start(C& ctx, const Var<T, SS, B>& src, const MS& src_key_mask, AttentionExtras<T, B> extras = {}) const {
    return decoder.start(ctx, encode(ctx, src, src_key_mask, extras), src_key_mask);
  }

  const TransformerOptions& options() const noexcept { return opt_; }

  TransformerEncoder<Heads, Dim, T, B> encoder;
  TransformerDecoder<Heads, Dim, T, B> decoder;

 private:
  TransformerOptions opt_;

  static TransformerDecoderLayerOptions decoder_layer(const TransformerOptions& opt) {
    TransformerDecoderLayerOptions l = opt.layer;
    l.causal = opt.layer.causal || opt.tgt_causal;
    return l;
  }
};

}  // namespace attn::nn
