// SPDX-License-Identifier: MIT
// nn::TransformerDecoderLayer<Heads, Dim> and nn::TransformerDecoder<Heads, Dim>: PyTorch's
// TransformerDecoderLayer / TransformerDecoder with batch_first=True, under torch's names, so a
// checkpoint moves between the two. A layer is self-attention over the target, cross-attention
// from the target to the encoder's output ("memory"), and a feed-forward block, each with its
// residual, dropout and norm (LayerNorm, or RMSNorm).
//   attn::nn::TransformerDecoder<8, 256> decoder{this, "decoder", {.num_layers = 6, .layer = {.causal = true}}};
//   auto y = decoder(ctx, tgt, memory, attn::Lengths{7, 5}, attn::Lengths{12, 9});  // target and memory padding
//   auto z = decoder(ctx, tgt, memory, nullptr, attn::PaddingMask(memory_pad));     // memory padding only
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../autograd/checkpoint.hpp"
#include "../autograd/elementwise.hpp"
#include "../backend/attention_problem.hpp"
#include "../backend/kernels.hpp"
#include "attention.hpp"
#include "encoder.hpp"
#include "layer_norm.hpp"
#include "layer_stack.hpp"
#include "module.hpp"

namespace attn::nn {

/// The options of a decoder layer are an encoder layer's: `dropout`, `activation`, `gated`,
/// `norm_first`, `norm`, `dim_feedforward`, `layer_norm_eps`, `bias` and `attention_dropout` apply to the whole layer
/// (both attentions); `padded`, `window`, `causal`, `global_tokens` and `rotary` to its self-attention.
/// `causal = true` is torch's tgt_is_causal with the causal tgt_mask: the usual decoder.
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

/// Per-call inputs of a decoder layer besides the masks: the self-attention's extras (attn_mask:
/// torch's tgt_mask, (T, T) or (B * Heads, T, T), additive) and the cross-attention's (attn_mask:
/// torch's memory_mask, (T, S) or (B * Heads, T, S), additive).
template <class T, class B = cpu>
struct DecoderExtras {
  AttentionExtras<T, B> tgt = {};
  AttentionExtras<T, B> memory = {};
};

/// A decoder's key mask of the target or of the memory: a token mask (attn::Lengths, KeepMask,
/// PaddingMask), or nullptr for none (every position real).
template <class M>
concept DecoderKeyMask = TokenMask<M> || std::is_null_pointer_v<std::remove_cvref_t<M>>;

namespace detail {
template <class M>
const auto* key_mask_ptr(const M& m) {
  if constexpr (std::is_null_pointer_v<std::remove_cvref_t<M>>) return static_cast<const Lengths*>(nullptr);
  else return &m;
}
}  // namespace detail

/// One decoder layer's cached keys and values for incremental decoding, each (B, length, Dim):
/// the self-attention's of the target positions so far, and the cross-attention's of the memory.
template <class T, class B = cpu>
struct DecoderLayerCache {
  Var<T, AnyShape, B> self_k, self_v;
  Var<T, AnyShape, B> memory_k, memory_v;
};

namespace detail {
/// Rows ids (on B) of x along its first axis: (n, ...) from (rows, ...).
template <class T, class B>
Tensor<T, AnyShape, B> batch_rows(const Tensor<T, AnyShape, B>& x, const Tensor<std::int64_t, AnyShape, B>& ids) {
  Dims d = x.dims();
  const std::size_t rows = d.v[0], width = rows ? x.numel() / rows : 0, n = ids.numel();
  d.v[0] = n;
  Tensor<T, AnyShape, B> out(d);
  kernels::gather_rows(B{}, x.data(), rows, width, ids.data(), n, out.data());
  return out;
}
}  // namespace detail

/// The state of an incremental decode (TransformerDecoder::start, step): every layer's cache, the
/// memory's key mask ((B, S), 1 = real; empty: all real), and how many target positions have run.
template <class T, class B = cpu>
struct DecoderState {
  std::vector<DecoderLayerCache<T, B>> layers;
  Tensor<T, AnyShape, B> memory_keep;
  std::size_t batch = 0;
  std::size_t length = 0;

  /// Beam search: keeps the batch rows new_order of every cache and of the memory's key mask, in
  /// that order (torch's index_select(0, new_order) on each cached tensor, as fairseq's
  /// reorder_incremental_state and Hugging Face's _reorder_cache do); rows may repeat or go, and
  /// batch becomes new_order's size. The next step takes that many target rows:
  ///   state.reorder(parents);   // parents[i]: the row hypothesis i continues
  /// For inference: a cache that carries a graph (decoding under a Tape, with parameters that
  /// require gradients) is refused, as the copies would carry none. Every index is checked before
  /// anything changes.
  void reorder(std::span<const std::int64_t> new_order) {
    const std::string who = "nn::DecoderState::reorder";
    if (new_order.empty()) throw ArgumentError(who + ": the new order is empty");
    for (std::size_t i = 0; i < new_order.size(); ++i)
      if (new_order[i] < 0 || static_cast<std::uint64_t>(new_order[i]) >= batch)
        throw ArgumentError(who + ": new_order[" + std::to_string(i) + "] = " + std::to_string(new_order[i]) + " is not a row of the batch of " +
                            std::to_string(batch));
    for (const auto& l : layers)
      for (const Var<T, AnyShape, B>* v : {&l.self_k, &l.self_v, &l.memory_k, &l.memory_v})
        if (v->defined() && v->requires_grad())
          throw ArgumentError(who + ": the cache carries a graph (decoding under a Tape with trainable parameters); reorder is for " +
                              "inference (attn::NoGrad)");
    const auto ids = Tensor<std::int64_t, AnyShape, B>::from(Dims{new_order.size()}, new_order);
    auto rows = [&](const Var<T, AnyShape, B>& v) {
      return v.defined() ? Var<T, AnyShape, B>(detail::batch_rows(v.value(), ids)) : v;
    };
    std::vector<DecoderLayerCache<T, B>> out;
    out.reserve(layers.size());
    for (const auto& l : layers)
      out.push_back({.self_k = rows(l.self_k), .self_v = rows(l.self_v), .memory_k = rows(l.memory_k), .memory_v = rows(l.memory_v)});
    auto keep = memory_keep.empty() ? memory_keep : detail::batch_rows(memory_keep, ids);
    layers = std::move(out);
    memory_keep = std::move(keep);
    batch = new_order.size();
  }
  void reorder(std::initializer_list<std::int64_t> new_order) { reorder(std::span<const std::int64_t>(new_order.begin(), new_order.size())); }
};

namespace detail {
/// The additive mask (n, past + n) of the self-attention pattern for target positions past ..
/// past + n - 1 over every position so far (causal, with opt's window and global tokens), or an
/// empty tensor where every one of those keys is visible.
template <class T, class B>
Tensor<T, AnyShape, B> step_pattern(const AttentionOptions& opt, std::size_t past, std::size_t n) {
  const std::size_t tk = past + n;
  const auto pattern = AttentionPattern::of(opt.window, true, opt.global_tokens);
  std::vector<T> host(n * tk, T(0));
  bool any = false;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < tk; ++j)
      if (!pattern.visible(past + i, j)) host[i * tk + j] = -std::numeric_limits<T>::infinity(), any = true;
  if (!any) return {};
  return Tensor<T, AnyShape, B>::from(Dims{n, tk}, std::span<const T>(host));
}
}  // namespace detail

/// One decoder layer, torch's order and names: self_attn, multihead_attn, linear1, dropout,
/// linear2, norm1, norm2, norm3, dropout1, dropout2, dropout3. tgt (B, T, Dim) and memory (B, S,
/// Dim) -> (B, T, Dim). Post-norm (torch's default): x = norm1(x + sa(x)), x = norm2(x +
/// mha(x, memory)), x = norm3(x + ff(x)); with norm_first: x = x + sa(norm1(x)), x = x +
/// mha(norm2(x), memory), x = x + ff(norm3(x)). The memory is not normalised by the layer.
template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class TransformerDecoderLayer : public Module {
  static_assert(Heads > 0 && Heads != dyn && Dim > 0 && Dim != dyn,
                "nn::TransformerDecoderLayer<Heads, Dim>: Heads and Dim must be static, positive");
  static_assert(Dim % Heads == 0, "nn::TransformerDecoderLayer<Heads, Dim>: Dim must be divisible by Heads");

 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;

  TransformerDecoderLayer(Module* parent, std::string name, TransformerDecoderLayerOptions opt = {})
      : Module(parent, std::move(name)),
        self_attn(this, "self_attn",
                  {.dropout = checked(opt, this->name()).attention_dropout.value_or(opt.dropout),
                   .bias = opt.bias,
                   .padded = opt.padded,
                   .window = opt.window,
                   .causal = opt.causal,
                   .global_tokens = opt.global_tokens,
                   .rotary = opt.rotary}),
        multihead_attn(this, "multihead_attn", {.dropout = opt.attention_dropout.value_or(opt.dropout), .bias = opt.bias}),
        linear1(this, "linear1", detail::linear1_width(opt, width(opt)), {.bias = opt.bias}),
        dropout(this, "dropout", opt.dropout),
        linear2(this, "linear2", width(opt), Dim, {.bias = opt.bias}),
        norm1(this, "norm1", opt.norm, opt.layer_norm_eps, opt.bias),
        norm2(this, "norm2", opt.norm, opt.layer_norm_eps, opt.bias),
        norm3(this, "norm3", opt.norm, opt.layer_norm_eps, opt.bias),
        dropout1(this, "dropout1", opt.dropout),
        dropout2(this, "dropout2", opt.dropout),
        dropout3(this, "dropout3", opt.dropout),
        opt_(opt) {}

  /// tgt (B, T, Dim), memory (B, S, Dim) -> (B, T, Dim). tgt_key_mask says which target positions
  /// are real tokens (torch's tgt_key_padding_mask), memory_key_mask which memory positions are
  /// (memory_key_padding_mask): attn::Lengths, attn::KeepMask(m) or attn::PaddingMask(m) each, or
  /// nullptr for none. torch's tgt_mask and memory_mask (additive) are extras.tgt.attn_mask and
  /// extras.memory.attn_mask.
  template <Context C, class S, class SM, DecoderKeyMask MT, DecoderKeyMask MM>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, const MT& tgt_key_mask,
                          const MM& memory_key_mask, DecoderExtras<T, B> extras = {}) const {
    return forward(ctx, tgt, memory, detail::key_mask_ptr(tgt_key_mask), detail::key_mask_ptr(memory_key_mask), extras);
  }
  /// Every target and memory position a real token.
  template <Context C, class S, class SM>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, DecoderExtras<T, B> extras = {}) const {
    return forward(ctx, tgt, memory, static_cast<const Lengths*>(nullptr), static_cast<const Lengths*>(nullptr), extras);
  }
  template <Context C, class S, class SM, class MT, class MM>
    requires(BareMaskTensor<MT> || BareMaskTensor<MM>)
  Var<T, S, B> operator()(C&, const Var<T, S, B>&, const Var<T, SM, B>&, const MT&, const MM&, DecoderExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<MT>,
                  "nn::TransformerDecoderLayer: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's *_key_padding_mask), attn::Lengths or nullptr");
    return {};
  }

  const TransformerDecoderLayerOptions& options() const noexcept { return opt_; }
  std::size_t dim_feedforward() const noexcept { return width(opt_); }

  Attention<Heads, Dim, T, B> self_attn;
  Attention<Heads, Dim, T, B> multihead_attn;
  Linear<Dim, dyn, T, B> linear1;  // Dim -> dim_feedforward (2 dim_feedforward when gated)
  Dropout dropout;
  Linear<dyn, Dim, T, B> linear2;
  Norm<Dim, T, B> norm1, norm2, norm3;  // LayerNorm or RMSNorm (options().norm)
  Dropout dropout1, dropout2, dropout3;

 private:
  TransformerDecoderLayerOptions opt_;

  static std::size_t width(const TransformerDecoderLayerOptions& opt) { return opt.dim_feedforward ? opt.dim_feedforward : 4 * Dim; }
  static const TransformerDecoderLayerOptions& checked(const TransformerDecoderLayerOptions& opt, const std::string& name) {
    detail::check_layer_options(opt, "nn::TransformerDecoderLayer '" + name + "'");
    return opt;
  }

  template <Context C, class S>
  Var<T, S, B> feed_forward(C& ctx, const Var<T, S, B>& x) const {
    return detail::feed_forward(ctx, x, linear1, dropout, linear2, opt_);
  }

  template <Context C, class S, class SM, class MT, class MM>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, const MT* tgt_key_mask, const MM* memory_key_mask,
                       const DecoderExtras<T, B>& extras) const {
    // The attentions check the shapes (tgt (B, T, Dim), memory (B, S, Dim)) and the masks.
    auto sa = [&](const Var<T, S, B>& h) -> Var<T, S, B> {
      return tgt_key_mask ? self_attn(ctx, h, *tgt_key_mask, extras.tgt) : self_attn(ctx, h, extras.tgt);
    };
    auto ca = [&](const Var<T, S, B>& h) -> Var<T, S, B> {
      return memory_key_mask ? multihead_attn(ctx, h, memory, memory, *memory_key_mask, extras.memory)
                             : multihead_attn(ctx, h, memory, memory, extras.memory);
    };
    return blocks(ctx, tgt, sa, ca);
  }

  /// The three residual blocks around sa (self-attention) and ca (cross-attention), in the layer's
  /// norm order.
  template <Context C, class S, class SA, class CA>
  Var<T, S, B> blocks(C& ctx, const Var<T, S, B>& tgt, SA&& sa, CA&& ca) const {
    Var<T, S, B> y = tgt;
    if (opt_.norm_first) {
      y = Var<T, S, B>(add(ctx, y, dropout1(ctx, sa(norm1(ctx, y)))));
      y = Var<T, S, B>(add(ctx, y, dropout2(ctx, ca(norm2(ctx, y)))));
      y = Var<T, S, B>(add(ctx, y, dropout3(ctx, feed_forward(ctx, norm3(ctx, y)))));
    } else {
      y = norm1(ctx, Var<T, S, B>(add(ctx, y, dropout1(ctx, sa(y)))));
      y = norm2(ctx, Var<T, S, B>(add(ctx, y, dropout2(ctx, ca(y)))));
      y = norm3(ctx, Var<T, S, B>(add(ctx, y, dropout3(ctx, feed_forward(ctx, y)))));
    }
    return y;
  }

 public:
  /// Incremental decoding, one layer (TransformerDecoder::start and step use these): the memory's
  /// cross-attention keys and values, projected once.
  template <Context C, class SM>
  DecoderLayerCache<T, B> start(C& ctx, const Var<T, SM, B>& memory) const {
    const auto kv = multihead_attn.project_key_value(ctx, memory);
    return {.self_k = {}, .self_v = {}, .memory_k = kv.k, .memory_v = kv.v};
  }
  /// The next n target positions x (B, n, Dim), after `past` earlier ones whose keys and values
  /// are in cache (which gets x's appended): the rows past .. past + n - 1 of a full causal call.
  /// pattern: detail::step_pattern's mask for those positions (null: made here).
  template <Context C, class S>
  Var<T, S, B> step(C& ctx, const Var<T, S, B>& x, DecoderLayerCache<T, B>& cache, const Tensor<T, AnyShape, B>& memory_keep,
                    std::size_t past, const Tensor<T, AnyShape, B>* pattern = nullptr) const {
    if (past != (cache.self_k.defined() ? cache.self_k.size(1) : 0))
      throw ArgumentError("nn::TransformerDecoderLayer '" + this->name() + "'::step: the cache holds " +
                          std::to_string(cache.self_k.defined() ? cache.self_k.size(1) : 0) + " positions, not " + std::to_string(past));
    const std::size_t n = x.size(1);
    auto sa = [&](const Var<T, S, B>& h) -> Var<T, S, B> {
      const auto p = self_attn.project(ctx, h, past);
      cache.self_k = past ? concat(ctx, std::vector<Var<T, AnyShape, B>>{cache.self_k, p.k}, 1) : p.k;
      cache.self_v = past ? concat(ctx, std::vector<Var<T, AnyShape, B>>{cache.self_v, p.v}, 1) : p.v;
      AttentionExtras<T, B> e;
      e.attn_mask = pattern ? *pattern : detail::step_pattern<T, B>(self_attn.options(), past, n);
      return Var<T, S, B>(self_attn.attend(ctx, p.q, cache.self_k, cache.self_v, static_cast<const Lengths*>(nullptr), e));
    };
    auto ca = [&](const Var<T, S, B>& h) -> Var<T, S, B> {
      const auto q = multihead_attn.project_query(ctx, h);
      if (memory_keep.empty()) return Var<T, S, B>(multihead_attn.attend(ctx, q, cache.memory_k, cache.memory_v));
      const KeepMask<T, AnyShape, B> keep(memory_keep);
      return Var<T, S, B>(multihead_attn.attend(ctx, q, cache.memory_k, cache.memory_v, &keep));
    };
    return blocks(ctx, x, sa, ca);
  }
};

struct TransformerDecoderOptions {
  std::size_t num_layers = 1;  // at run time; every layer has the same options
  TransformerDecoderLayerOptions layer = {};
  /// A norm "norm" after the last layer (PyTorch's TransformerDecoder(norm=LayerNorm(Dim))), of the
  /// layers' kind (an RMSNorm under NormKind::rms), layer_norm_eps and bias.
  bool final_norm = false;
  /// Each layer's forward goes through attn::checkpoint (recomputed during backward), as
  /// TransformerEncoderOptions::checkpoint. Gradients are those of a plain run, bit for bit.
  bool checkpoint = false;
};

/// num_layers TransformerDecoderLayers, "layers.0" ... "layers.<N-1>", each reading the same
/// memory, then the optional "norm". Every layer starts from layers.0's initial values, as torch's
/// deep copies do; Module::init(seed) draws them all from one stream.
template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class TransformerDecoder : public detail::LayerStack<TransformerDecoderLayer<Heads, Dim, T, B>, Dim, T, B> {
  using Stack = detail::LayerStack<TransformerDecoderLayer<Heads, Dim, T, B>, Dim, T, B>;
  using Stack::layers_;

 public:
  using Layer = TransformerDecoderLayer<Heads, Dim, T, B>;

  TransformerDecoder(Module* parent, std::string name, TransformerDecoderOptions opt = {})
      : Stack(parent, std::move(name), "nn::TransformerDecoder", opt.num_layers, opt.layer, opt.final_norm), opt_(opt) {}

  /// tgt (B, T, Dim), memory (B, S, Dim) -> (B, T, Dim), every layer with the same key masks (each
  /// a token mask or nullptr) and extras (see TransformerDecoderLayer).
  template <Context C, class S, class SM, DecoderKeyMask MT, DecoderKeyMask MM>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, const MT& tgt_key_mask,
                          const MM& memory_key_mask, DecoderExtras<T, B> extras = {}) const {
    return forward(ctx, tgt, memory, [&](const Layer* l, auto& c, const Var<T, S, B>& h, const Var<T, SM, B>& m) {
      if (!opt_.checkpoint) return (*l)(c, h, m, tgt_key_mask, memory_key_mask, extras);
      return attn::checkpoint(
          c,
          [l](auto& c2, const auto& v, const auto& mem, const MT& a, const MM& b, const DecoderExtras<T, B>& e) {
            return (*l)(c2, v, mem, a, b, e);
          },
          h, m, tgt_key_mask, memory_key_mask, extras);
    });
  }
  /// Every target and memory position a real token.
  template <Context C, class S, class SM>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, DecoderExtras<T, B> extras = {}) const {
    return forward(ctx, tgt, memory, [&](const Layer* l, auto& c, const Var<T, S, B>& h, const Var<T, SM, B>& m) {
      if (!opt_.checkpoint) return (*l)(c, h, m, extras);
      return attn::checkpoint(
          c, [l](auto& c2, const auto& v, const auto& mem, const DecoderExtras<T, B>& e) { return (*l)(c2, v, mem, e); }, h, m, extras);
    });
  }
  template <Context C, class S, class SM, class MT, class MM>
    requires(BareMaskTensor<MT> || BareMaskTensor<MM>)
  Var<T, S, B> operator()(C&, const Var<T, S, B>&, const Var<T, SM, B>&, const MT&, const MM&, DecoderExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<MT>,
                  "nn::TransformerDecoder: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's *_key_padding_mask), attn::Lengths or nullptr");
    return {};
  }

  /// Incremental (autoregressive) decoding with a key/value cache. start projects every layer's
  /// keys and values of the memory (B, S, Dim) once, with its key mask (or nullptr); each
  /// step(ctx, tgt, state) runs the next n target positions tgt (B, n, Dim) against the cached keys
  /// and values of every earlier position and of the memory, appends theirs, and returns their
  /// outputs (B, n, Dim): the rows a full call on the whole target so far would give (within
  /// rounding; the layers must be causal). A prompt goes in one step, then a position per step:
  ///   auto state = decoder.start(ctx, memory, attn::Lengths{12, 9});
  ///   auto y = decoder.step(ctx, prompt, state);   // (B, n, Dim)
  ///   auto z = decoder.step(ctx, next, state);     // (B, 1, Dim)
  ///   state.reorder(parents);                      // beam search: the rows the hypotheses continue
  /// For inference (NoGrad): under a Tape the cache's Vars keep their graphs, and checkpoint is not
  /// applied. Dropout follows the layers' training mode.
  template <Context C, class SM, DecoderKeyMask MM>
  DecoderState<T, B> start(C& ctx, const Var<T, SM, B>& memory, const MM& memory_key_mask) const {
    const std::string who = "nn::TransformerDecoder '" + this->name() + "'";
    if (!opt_.layer.causal)
      throw ArgumentError(who + ": incremental decoding needs causal self-attention (layer option causal = true), as a " +
                          "position's output may not depend on later ones");
    const Dims& d = detail::check_attention_input(who + "::start", "memory", memory.dims(), Dim);
    DecoderState<T, B> state;
    state.batch = d.v[0];
    if constexpr (!std::is_null_pointer_v<std::remove_cvref_t<MM>>) state.memory_keep = keep_mask<T, B>(memory_key_mask, d.v[0], d.v[1], "nn::TransformerDecoder::start");
    for (const auto& l : this->layers_) state.layers.push_back(l->start(ctx, memory));
    return state;
  }
  template <Context C, class SM>
  DecoderState<T, B> start(C& ctx, const Var<T, SM, B>& memory) const {
    return start(ctx, memory, nullptr);
  }
  template <Context C, class S>
  Var<T, S, B> step(C& ctx, const Var<T, S, B>& tgt, DecoderState<T, B>& state) const {
    const std::string who = "nn::TransformerDecoder '" + this->name() + "'::step";
    if (state.layers.size() != this->layers_.size())
      throw ArgumentError(who + ": the state holds " + std::to_string(state.layers.size()) + " layers' caches, not " +
                          std::to_string(this->layers_.size()) + " (start it with this decoder's start)");
    const Dims& d = detail::check_attention_input(who, "target", tgt.dims(), Dim, state.batch);
    if (d.v[1] == 0) throw ShapeError(who + ": the target has no positions");
    // The layers extend copies of their caches (handles, not data): a step that throws leaves the
    // state as it was. The pattern mask is the same for every layer.
    auto caches = state.layers;
    const auto pattern = detail::step_pattern<T, B>(this->layers_[0]->self_attn.options(), state.length, d.v[1]);
    Var<T, S, B> h = tgt;
    for (std::size_t i = 0; i < this->layers_.size(); ++i) h = this->layers_[i]->step(ctx, h, caches[i], state.memory_keep, state.length, &pattern);
    h = this->finish(ctx, h);
    state.layers = std::move(caches);
    state.length += d.v[1];
    return h;
  }

  const TransformerDecoderOptions& options() const noexcept { return opt_; }

 private:
  TransformerDecoderOptions opt_;

  template <Context C, class S, class SM, class Run>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& tgt, const Var<T, SM, B>& memory, Run&& run) const {
    Var<T, S, B> h = tgt;
    for (const auto& l : layers_) h = run(l.get(), ctx, h, memory);
    return this->finish(ctx, h);
  }
};

}  // namespace attn::nn
