// SPDX-License-Identifier: MIT
// nn::Attention<Heads, Dim>: multi-head attention, torch.nn.MultiheadAttention(batch_first=True)
// with PyTorch's parameter names. Self-attention (q = k = v = x): one fused QKV projection
// (attn::linear), the flash kernel unless the weights are asked for (attn::self_attention), output
// projection. Cross-attention (query, key, value) through the same weights: attn::cross_attention.
// nn::CrossAttention<Heads, Dim, KDim, VDim>: cross-attention to keys and values of other widths
// (torch's kdim, vdim: separate q/k/v_proj_weight).
//   attn::nn::Attention<8, 128> attention{this, "attn", {.dropout = 0.1}};
//   attn::nn::Attention<8, 128> local{this, "local", {.window = 256, .global_tokens = 1}};  // Longformer-style
//   auto y = attention(ctx, x, attn::Lengths{12, 7});          // or attn::KeepMask(m), attn::PaddingMask(m)
//   auto z = attention(ctx, y, memory, memory, attn::Lengths{9, 4});  // cross: y's rows attend to memory's
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../autograd/attention.hpp"
#include "../autograd/cross_attention.hpp"
#include "../autograd/linear.hpp"
#include "../autograd/rotary.hpp"
#include "../core/mask.hpp"
#include "init.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace attn::nn {

/// The head count the library suggests for a model width: max(4, hidden / 64).
constexpr std::size_t recommended_heads(std::size_t hidden) { return std::max<std::size_t>(4, hidden / 64); }

/// Rotary position embeddings (RoFormer's RoPE) on the queries and keys, after the projection
/// (attn::rotary): each head's first `dim` features turn in pairs by angles t * base^(-2i / dim)
/// at position t, so the scores depend on the positions' distance.
struct RotaryOptions {
  double base = 10000;
  std::size_t dim = 0;       // features of each head that turn (even; GPT-NeoX's rotary_dim); 0: the head width
  bool interleaved = false;  // pairs (2i, 2i + 1) (RoFormer, GPT-J, Meta's Llama); false: (i, i + dim / 2) (Hugging Face's rotate_half)
};

/// What the layer returns at padded positions.
enum class PaddedRows {
  compute,  // every row is computed, padded queries attending to the real keys: torch.nn.MultiheadAttention's output
  zero,     // padded rows are skipped in both projections and come out as zero (PyTorch's nested-tensor fast
            // path); the rows of real tokens are the same. For models that read only real tokens (masked pooling).
};

struct AttentionOptions {
  double dropout = 0;                        // dropout on the attention weights, in training mode only
  bool bias = true;                          // in_proj_bias and out_proj.bias
  PaddedRows padded = PaddedRows::compute;  // see PaddedRows
  // Sparse (local + global) attention, as attn::AttentionArgs and AttentionPattern: query i sees key
  // j iff |i - j| <= window (empty: any distance), j <= i if causal, or either is one of the first
  // global_tokens positions (causality still holds), or a position AttentionExtras::global_mask
  // marks. The flash kernel then runs in O(T window).
  std::optional<std::int64_t> window = {};
  bool causal = false;
  std::size_t global_tokens = 0;
  // Rotary position embeddings on the self-attention's queries and keys (position t of the input
  // is t; project, project_query and project_key_value take the first row's position); empty: none.
  // A cross-attention call of a rotary layer is refused.
  std::optional<RotaryOptions> rotary = {};
};

/// Optional inputs of one forward call.
template <class T, class B = cpu>
struct AttentionExtras {
  // Added to the scores, may hold -inf (e.g. causal); empty: none. Self-attention: (T, T), or
  // (B * Heads, T, T) per sample and head (torch's 3-D attn_mask; sample b's head h is row
  // b * Heads + h; the call then runs attn::cross_attention, memory O(T^2) per head, not the flash
  // kernel). Cross-attention: (Tq, Tk), or (B * Heads, Tq, Tk).
  Tensor<T, AnyShape, B> attn_mask = {};
  // (B, T): != 0 marks a global token at a chosen position of each sample (Longformer's
  // global_attention_mask), on top of AttentionOptions::global_tokens; empty: none
  Tensor<T, AnyShape, B> global_mask = {};
  AttentionKernel kernel = AttentionKernel::automatic;
  AttentionStats* stats = nullptr;   // filled with the attention op's allocations (must outlive backward)
};

/// forward_with_weights' result: the output and the per-head softmax weights (B, Heads, T, T)
/// (cross-attention: (B, Heads, Tq, Tk)),
/// after attention dropout in training (zeros and weights / (1 - p), as torch's need_weights
/// returns them: the weights that made the output). Without dropout they are the ones saved for
/// backward: treat them as read-only.
template <class T, class S, std::size_t Heads, class B>
struct AttentionOutput {
  Var<T, S, B> out;
  Tensor<T, Shape<dyn, Heads, dyn, dyn>, B> weights;
};

/// torch's average_attn_weights=True: forward_with_weights' per-head weights (B, Heads, Tq, Tk)
/// averaged over the heads -> (B, Tq, Tk), on the weights' backend.
template <class T, class S, class B>
Tensor<T, AnyShape, B> average_heads(const Tensor<T, S, B>& weights) {
  const Dims& d = weights.dims();
  if (d.n != 4 || d.v[1] == 0) throw ShapeError("nn::average_heads: weights shape " + d.str() + " is not (batch, heads, Tq, Tk)");
  Tensor<T, AnyShape, B> sum(Dims{d.v[0], 1, d.v[2], d.v[3]});
  kernels::sum_to(B{}, weights.data(), d, sum.data(), sum.dims(), false);
  sum = sum * T(1.0 / double(d.v[1]));
  return sum.reshape(Dims{d.v[0], d.v[2], d.v[3]});
}

/// Attention::project's result: the query, key and value projections of one input, each (B, T, Dim).
template <class T, class B>
struct Projections {
  Var<T, AnyShape, B> q, k, v;
};

/// Attention::project_key_value's result: the key and value projections of one input, each (B, T, Dim).
template <class T, class B>
struct KeyValues {
  Var<T, AnyShape, B> k, v;
};

namespace detail {

/// torch's MultiheadAttention.out_proj: a Linear whose bias starts at zero.
template <std::size_t Dim, class T, class B>
class MhaOutProj : public Linear<Dim, Dim, T, B> {
 public:
  MhaOutProj(Module* parent, std::string name, bool bias) : Linear<Dim, Dim, T, B>(parent, std::move(name), {.bias = bias}) {
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      MhaOutProj::reset_parameters(rng);
    }
  }
  void reset_parameters(Rng& rng) override {
    init::torch_linear_default(this->weight, rng, Dim);
    if (this->bias.defined()) init::constant(this->bias, T(0));
  }
};

/// Throws unless x is (batch, time, width) (batch and time as given where nonzero); returns x's dims.
inline const Dims& check_attention_input(const std::string& who, const char* what, const Dims& d, std::size_t width,
                                         std::size_t batch = 0, std::size_t time = 0) {
  if (d.n != 3 || d.v[2] != width || (batch && d.v[0] != batch) || (time && d.v[1] != time))
    throw ShapeError(who + ": " + what + " shape " + d.str() + " is not (" + (batch ? std::to_string(batch) : std::string("batch")) + ", " +
                     (time ? std::to_string(time) : std::string("time")) + ", " + std::to_string(width) + ")");
  return d;
}

/// The part of a cross-attention call after the input projections: the options and extras that
/// apply, the key mask, attn::cross_attention and the output projection.
template <std::size_t Heads, class SQ, Context C, class T, class B, class M, class OutProj>
Var<T, SQ, B> cross_attend(C& ctx, const char* who, const AttentionOptions& opt, bool training, const Var<T, AnyShape, B>& q,
                           const Var<T, AnyShape, B>& k, const Var<T, AnyShape, B>& v, const M* key_mask,
                           const AttentionExtras<T, B>& extras, Tensor<T, AnyShape, B>* weights, const OutProj& out_proj) {
  if (opt.window || opt.causal || opt.global_tokens)
    throw ArgumentError(std::string(who) + ": window, causal and global_tokens are self-attention patterns; a cross-attention call " +
                        "takes its pattern as extras.attn_mask (Tq, Tk)");
  if (!extras.global_mask.empty()) throw ArgumentError(std::string(who) + ": global_mask applies to self-attention only");
  if (extras.kernel == AttentionKernel::flash)
    throw ArgumentError(std::string(who) + ": cross-attention runs attn::cross_attention, not the flash kernel");
  if (extras.stats) throw ArgumentError(std::string(who) + ": AttentionStats are filled by self-attention's kernels only");
  const std::size_t nb = q.size(0), tk = k.size(1);
  const Tensor<T, AnyShape, B> mask = key_mask ? keep_mask<T, B>(*key_mask, nb, tk, who) : Tensor<T, AnyShape, B>{};
  auto o = cross_attention(ctx, q, k, v,
                           CrossAttentionArgs<T, B>{.heads = Heads,
                                                    .key_mask = mask,
                                                    .attn_mask = extras.attn_mask,
                                                    .dropout = training ? opt.dropout : 0.0,
                                                    .weights = weights});
  return Var<T, SQ, B>(linear(ctx, o, out_proj.weight, out_proj.bias));
}

/// A per-head additive mask (nb * heads, T, T) with the self-attention pattern of opt (window,
/// causal, global_tokens) and global_mask ((nb, T), != 0: a global position) folded in as -inf;
/// the mask itself where the pattern hides nothing.
template <class T, class B>
Tensor<T, AnyShape, B> with_pattern(const Tensor<T, AnyShape, B>& attn_mask, const AttentionOptions& opt, const Tensor<T, AnyShape, B>& global_mask,
                                    std::size_t nb, std::size_t heads) {
  const auto pattern = AttentionPattern::of(opt.window, opt.causal, opt.global_tokens);
  const std::size_t n = attn_mask.size(1);
  if (!global_mask.empty() && !(global_mask.dims() == Dims{nb, n}))
    shape_mismatch("nn::Attention", "global_mask must be (batch, time)", global_mask.dims(), Dims{nb, n});
  if (!pattern.active()) return attn_mask;  // global tokens widen a window only
  std::vector<T> m = attn_mask.to_vector();
  std::vector<T> g;
  if (!global_mask.empty()) g = global_mask.to_vector();
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const bool gi = !g.empty() && g[b * n + i] != T(0), gj = !g.empty() && g[b * n + j] != T(0);
        if (pattern.visible(i, j, gi, gj)) continue;
        for (std::size_t h = 0; h < heads; ++h) m[((b * heads + h) * n + i) * n + j] = -std::numeric_limits<T>::infinity();
      }
  return Tensor<T, AnyShape, B>::from(attn_mask.dims(), std::span<const T>(m));
}

/// The public forms of a cross-attention call, shared by nn::Attention's (query, key, value) call
/// and nn::CrossAttention: with a token mask or without, returning the weights or not. Derived
/// provides cross_forward(ctx, query, key, value, const M* mask (null: every key real), extras,
/// Tensor* weights (null: not wanted)).
template <class Derived, std::size_t Heads, class T, class B>
class CrossAttentionCalls {
 public:
  /// query (B, Tq, Dim), key and value (B, Tk, ...) -> (B, Tq, Dim); mask says which of the (B, Tk)
  /// keys are real (attn::Lengths, KeepMask, PaddingMask).
  template <Context C, class SQ, class SK, class SV, TokenMask M>
  Var<T, SQ, B> operator()(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key, const Var<T, SV, B>& value, const M& mask,
                           AttentionExtras<T, B> extras = {}) const {
    return self().cross_forward(ctx, query, key, value, &mask, extras, nullptr);
  }
  /// Every key a real token.
  template <Context C, class SQ, class SK, class SV>
  Var<T, SQ, B> operator()(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key, const Var<T, SV, B>& value,
                           AttentionExtras<T, B> extras = {}) const {
    return self().cross_forward(ctx, query, key, value, static_cast<const Lengths*>(nullptr), extras, nullptr);
  }
  template <Context C, class SQ, class SK, class SV, BareMaskTensor M>
  Var<T, SQ, B> operator()(C&, const Var<T, SQ, B>&, const Var<T, SK, B>&, const Var<T, SV, B>&, const M&, AttentionExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<M>,
                  "cross-attention: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's key_padding_mask) or attn::Lengths");
    return {};
  }
  /// The same, also returning the weights (B, Heads, Tq, Tk), after dropout in training.
  template <Context C, class SQ, class SK, class SV, TokenMask M>
  AttentionOutput<T, SQ, Heads, B> forward_with_weights(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key,
                                                        const Var<T, SV, B>& value, const M& mask, AttentionExtras<T, B> extras = {}) const {
    return with_weights(ctx, query, key, value, &mask, extras);
  }
  template <Context C, class SQ, class SK, class SV>
  AttentionOutput<T, SQ, Heads, B> forward_with_weights(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key,
                                                        const Var<T, SV, B>& value, AttentionExtras<T, B> extras = {}) const {
    return with_weights(ctx, query, key, value, static_cast<const Lengths*>(nullptr), extras);
  }

 private:
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
  template <Context C, class SQ, class SK, class SV, class M>
  AttentionOutput<T, SQ, Heads, B> with_weights(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key, const Var<T, SV, B>& value,
                                                const M* mask, const AttentionExtras<T, B>& extras) const {
    Tensor<T, AnyShape, B> w;
    auto out = self().cross_forward(ctx, query, key, value, mask, extras, &w);
    return {out, Tensor<T, Shape<dyn, Heads, dyn, dyn>, B>(w)};
  }
};

}  // namespace detail

template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class Attention : public Module, public detail::CrossAttentionCalls<Attention<Heads, Dim, T, B>, Heads, T, B> {
  static_assert(Heads > 0 && Heads != dyn && Dim > 0 && Dim != dyn, "nn::Attention<Heads, Dim>: Heads and Dim must be static, positive");
  static_assert(Dim % Heads == 0, "nn::Attention<Heads, Dim>: Dim must be divisible by Heads (head_dim = Dim / Heads)");

 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;
  static constexpr std::size_t head_dim = Dim / Heads;

  Attention(Module* parent, std::string name, AttentionOptions opt = {})
      : Module(parent, std::move(name)), out_proj(this, "out_proj", opt.bias), opt_(opt) {
    if (!(opt.dropout >= 0 && opt.dropout < 1))
      throw ArgumentError("nn::Attention '" + this->name() + "': dropout must be in [0, 1), got " + std::to_string(opt.dropout));
    if (opt.window && *opt.window < 1)
      throw ArgumentError("nn::Attention '" + this->name() + "': window must be >= 1 (keys within window positions on each side), got " +
                          std::to_string(*opt.window));
    if (opt.rotary) attn::detail::rotary_dim(head_dim, opt.rotary->dim, opt.rotary->base, "nn::Attention '" + this->name() + "'");
    in_proj_weight = register_parameter<T, Shape<3 * Dim, Dim>, B>("in_proj_weight", {3 * Dim, Dim}, true);
    if (opt.bias) in_proj_bias = register_parameter<T, Shape<3 * Dim>, B>("in_proj_bias", {3 * Dim});
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
      out_proj.reset_parameters(rng);
    }
  }

  /// PyTorch's scheme: Xavier uniform in_proj_weight (as one (3 Dim, Dim) matrix), zero in_proj_bias.
  /// out_proj (a child) keeps nn.Linear's default weight and a zero bias.
  void reset_parameters(Rng& rng) override {
    init::xavier_uniform(in_proj_weight, rng);
    if (in_proj_bias.defined()) init::constant(in_proj_bias, T(0));
  }

  /// x (B, T, Dim) -> (B, T, Dim). mask says which of the (B, T) positions are real tokens (the
  /// others get no attention weight): attn::Lengths, attn::KeepMask(m) (1 = real token) or
  /// attn::PaddingMask(m) (1 = padding, torch's key_padding_mask); see core/mask.hpp.
  template <Context C, class S, TokenMask M>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, const M& mask, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, &mask, extras, nullptr);
  }
  /// Every position a real token.
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, static_cast<const Lengths*>(nullptr), extras, nullptr);
  }
  /// A bare tensor does not say whether 1 means a real token or padding: rejected at compile time.
  template <Context C, class S, BareMaskTensor M>
  Var<T, S, B> operator()(C&, const Var<T, S, B>&, const M&, AttentionExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<M>,
                  "nn::Attention: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's key_padding_mask) or attn::Lengths");
    return {};
  }

  /// The same, also returning the softmax weights (B, Heads, T, T) (runs the naive kernel). Under
  /// PaddedRows::zero a padded query's projection is zero, so its row holds softmax(attn_mask's
  /// row) over the real keys: uniform weights without an attn_mask.
  template <Context C, class S, TokenMask M>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, const M& mask,
                                                       AttentionExtras<T, B> extras = {}) const {
    return with_weights(ctx, x, &mask, extras);
  }
  template <Context C, class S>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, AttentionExtras<T, B> extras = {}) const {
    return with_weights(ctx, x, static_cast<const Lengths*>(nullptr), extras);
  }
  template <Context C, class S, BareMaskTensor M>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C&, const Var<T, S, B>&, const M&, AttentionExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<M>,
                  "nn::Attention: a bare mask tensor does not say which value means padding; pass attn::KeepMask(m) "
                  "(1 = real token), attn::PaddingMask(m) (1 = padding, torch's key_padding_mask) or attn::Lengths");
    return {};
  }

  /// Cross-attention, torch's forward(query, key, value): query (B, Tq, Dim) attends to key and
  /// value (B, Tk, Dim), e.g. a decoder's states to an encoder's output (pass it as both). The same
  /// parameters project them (in_proj_weight's Q rows on query, K rows on key, V rows on value),
  /// then out_proj. mask says which of the (B, Tk) keys are real. -> (B, Tq, Dim). Runs
  /// attn::cross_attention (memory O(Tq Tk)); every query row is computed (PaddedRows does not
  /// apply). The pattern options (window, causal, global_tokens) are self-attention's and are
  /// refused: a cross pattern is an extras.attn_mask of (Tq, Tk) or (B * Heads, Tq, Tk).
  using detail::CrossAttentionCalls<Attention, Heads, T, B>::operator();
  using detail::CrossAttentionCalls<Attention, Heads, T, B>::forward_with_weights;

  /// The two halves of a call, for a caller that keeps keys and values between calls (a
  /// decoder's key/value cache): project gives x's query, key and value projections (B, T, Dim)
  /// each, in one product with the packed in_proj_weight; project_key_value the key's and value's
  /// (in one product with in_proj_weight's K and V rows); project_query the query's alone. attend
  /// runs attention of projected queries (B, Tq, Dim) over projected keys and values (B, Tk, Dim)
  /// (attn::cross_attention), then out_proj: mask (or nullptr) says which keys are real, and
  /// extras.attn_mask (Tq, Tk) carries any pattern (the options' window, causal and global tokens
  /// are not applied here). attention(ctx, x, y, y, mask) is attend(ctx, project_query(ctx, x),
  /// kv.k, kv.v, &mask) with kv = project_key_value(ctx, y). With AttentionOptions::rotary the
  /// projections turn the queries and keys, x's first row at `position` (a decoder's past length).
  template <Context C, class S>
  Projections<T, B> project(C& ctx, const Var<T, S, B>& x, std::size_t position = 0) const {
    detail::check_attention_input("nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">::project", "input", x.dims(), Dim);
    Var<T, AnyShape, B> all(linear(ctx, x, in_proj_weight, in_proj_bias));
    if (opt_.rotary) all = rotary(ctx, all, rotary_args(position, 2 * Dim));
    return {slice(ctx, all, 2, 0, Dim), slice(ctx, all, 2, Dim, Dim), slice(ctx, all, 2, 2 * Dim, Dim)};
  }
  template <Context C, class S>
  KeyValues<T, B> project_key_value(C& ctx, const Var<T, S, B>& x, std::size_t position = 0) const {
    detail::check_attention_input("nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">::project_key_value", "input",
                                  x.dims(), Dim);
    Var<T, AnyShape, B> kv;
    std::size_t at = Dim;  // K's first column in kv
    if (precision() != Precision::fp32) {
      kv = linear(ctx, x, in_proj_weight, in_proj_bias);  // the weight's own bf16/int8 pack, as project_part
    } else {
      auto w = slice(ctx, in_proj_weight, 0, Dim, 2 * Dim);
      kv = in_proj_bias.defined() ? linear(ctx, x, w, slice(ctx, in_proj_bias, 0, Dim, 2 * Dim)) : linear(ctx, x, w);
      at = 0;
    }
    Var<T, AnyShape, B> k = slice(ctx, kv, 2, at, Dim);
    if (opt_.rotary) k = rotary(ctx, k, rotary_args(position, Dim));
    return {k, slice(ctx, kv, 2, at + Dim, Dim)};
  }
  template <Context C, class S>
  Var<T, AnyShape, B> project_query(C& ctx, const Var<T, S, B>& x, std::size_t position = 0) const {
    detail::check_attention_input("nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">::project_query", "input", x.dims(),
                                  Dim);
    Var<T, AnyShape, B> q = project_part(ctx, x, 0);
    if (opt_.rotary) q = rotary(ctx, q, rotary_args(position, Dim));
    return q;
  }
  template <Context C, class M = Lengths>
  Var<T, AnyShape, B> attend(C& ctx, const Var<T, AnyShape, B>& q, const Var<T, AnyShape, B>& k, const Var<T, AnyShape, B>& v,
                             const M* mask = nullptr, const AttentionExtras<T, B>& extras = {}) const {
    const std::string who = "nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">::attend";
    const Dims& dq = detail::check_attention_input(who, "query", q.dims(), Dim);
    const Dims& dk = detail::check_attention_input(who, "key", k.dims(), Dim, dq.v[0]);
    detail::check_attention_input(who, "value", v.dims(), Dim, dq.v[0], dk.v[1]);
    AttentionOptions o = opt_;
    o.window.reset(), o.causal = false, o.global_tokens = 0;
    return detail::cross_attend<Heads, AnyShape>(ctx, "nn::Attention::attend", o, training(), q, k, v, mask, extras, static_cast<Tensor<T, AnyShape, B>*>(nullptr), out_proj);
  }

  const AttentionOptions& options() const noexcept { return opt_; }

  Var<T, Shape<3 * Dim, Dim>, B> in_proj_weight;
  Var<T, Shape<3 * Dim>, B> in_proj_bias;  // undefined when !bias
  detail::MhaOutProj<Dim, T, B> out_proj;

 private:
  AttentionOptions opt_;

  friend class detail::CrossAttentionCalls<Attention, Heads, T, B>;

  template <Context C, class SQ, class SK, class SV, class M>
  Var<T, SQ, B> cross_forward(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key, const Var<T, SV, B>& value, const M* mask,
                              const AttentionExtras<T, B>& extras, Tensor<T, AnyShape, B>* weights) const {
    if constexpr (!std::is_same_v<SQ, AnyShape>) {
      static_assert(SQ::rank == 3, "nn::Attention: the query must be (batch, Tq, Dim)");
      static_assert(shapes::may_equal(shapes::back<SQ, 0>, Dim), "nn::Attention: the query's last extent differs from Dim");
    }
    if constexpr (!std::is_same_v<SK, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<SK, 0>, Dim), "nn::Attention: the key's last extent differs from Dim");
    if constexpr (!std::is_same_v<SV, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<SV, 0>, Dim), "nn::Attention: the value's last extent differs from Dim");
    const std::string who = "nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">";
    if (opt_.rotary)
      throw ArgumentError(who + " '" + this->name() + "': rotary position embeddings apply to self-attention; for queries and keys at " +
                          "chosen positions, call project_query and project_key_value with them, then attend");
    const Dims& dq = detail::check_attention_input(who, "query", query.dims(), Dim);
    const Dims& dk = detail::check_attention_input(who, "key", key.dims(), Dim, dq.v[0]);
    detail::check_attention_input(who, "value", value.dims(), Dim, dq.v[0], dk.v[1]);
    Var<T, AnyShape, B> q, k, v;
    if (key.data() == value.data()) {  // a key that is the value is projected once
      const auto kv = project_key_value(ctx, key);
      q = project_part(ctx, query, 0), k = kv.k, v = kv.v;
    } else {
      q = project_part(ctx, query, 0), k = project_part(ctx, key, 1), v = project_part(ctx, value, 2);
    }
    return detail::cross_attend<Heads, SQ>(ctx, "nn::Attention", opt_, training(), q, k, v, mask, extras, weights, out_proj);
  }

  /// attn::rotary's arguments for this layer's heads: the first `columns` columns, row 0 at `position`.
  RotaryArgs rotary_args(std::size_t position, std::size_t columns) const {
    return {.head_dim = head_dim, .columns = columns, .dim = opt_.rotary->dim, .offset = position, .base = opt_.rotary->base,
            .interleaved = opt_.rotary->interleaved};
  }

  /// x's projection by in_proj_weight's part-th block of Dim rows (0: Q, 1: K, 2: V).
  template <Context C, class S>
  Var<T, AnyShape, B> project_part(C& ctx, const Var<T, S, B>& x, std::size_t part) const {
    if (precision() != Precision::fp32) {
      // In bf16 or int8 the product takes in_proj_weight's own pack (the one quantize_dynamic or
      // load_quantized made; a slice would be packed or quantized afresh on every call): the whole
      // projection, then the part's columns.
      const Var<T, AnyShape, B> all(linear(ctx, x, in_proj_weight, in_proj_bias));
      return slice(ctx, all, 2, part * Dim, Dim);
    }
    auto w = slice(ctx, in_proj_weight, 0, part * Dim, Dim);
    return in_proj_bias.defined() ? linear(ctx, x, w, slice(ctx, in_proj_bias, 0, part * Dim, Dim)) : linear(ctx, x, w);
  }

  template <Context C, class S, class M>
  AttentionOutput<T, S, Heads, B> with_weights(C& ctx, const Var<T, S, B>& x, const M* mask, const AttentionExtras<T, B>& extras) const {
    if (extras.kernel == AttentionKernel::flash)
      throw ArgumentError("nn::Attention::forward_with_weights: the flash kernel does not form the weights");
    Tensor<T, AnyShape, B> w;
    auto out = forward(ctx, x, mask, extras, &w);
    return {out, Tensor<T, Shape<dyn, Heads, dyn, dyn>, B>(w)};
  }

  /// mask null: every position real.
  template <Context C, class S, class M>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& x, const M* key_mask, const AttentionExtras<T, B>& extras,
                       Tensor<T, AnyShape, B>* weights) const {
    if constexpr (!std::is_same_v<S, AnyShape>) {
      static_assert(S::rank == 3, "nn::Attention: the input must be (batch, time, Dim)");
      static_assert(shapes::may_equal(shapes::back<S, 0>, Dim), "nn::Attention: the input's last extent differs from Dim");
    }
    const Dims& d = x.dims();
    if (d.n != 3 || d.v[2] != Dim)
      throw ShapeError("nn::Attention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ">: input shape " + d.str() +
                       " is not (batch, time, " + std::to_string(Dim) + ")");
    const Tensor<T, AnyShape, B> mask = key_mask ? keep_mask<T, B>(*key_mask, d.v[0], d.v[1], "nn::Attention") : Tensor<T, AnyShape, B>{};
    const bool per_head = extras.attn_mask.dims().n == 3;
    if (per_head) {
      if (!(extras.attn_mask.dims() == Dims{d.v[0] * Heads, d.v[1], d.v[1]}))
        shape_mismatch("nn::Attention", "a per-head attn_mask must be (batch * heads, time, time)", extras.attn_mask.dims(),
                       Dims{d.v[0] * Heads, d.v[1], d.v[1]});
      if (extras.kernel == AttentionKernel::flash)
        throw ArgumentError("nn::Attention: a per-head attn_mask (batch * heads, time, time) runs attn::cross_attention, not the flash kernel");
      if (extras.stats) throw ArgumentError("nn::Attention: AttentionStats are not filled under a per-head attn_mask (attn::cross_attention runs)");
    } else if (!extras.attn_mask.empty() && !(extras.attn_mask.dims() == Dims{d.v[1], d.v[1]})) {
      shape_mismatch("nn::Attention", "attn_mask must be (time, time) or (batch * heads, time, time)", extras.attn_mask.dims(),
                     Dims{d.v[1], d.v[1]});
    }
    // PaddedRows::zero: the projections run on the real rows only. A padded row's Q, K and V are
    // zero (or never read, below); its key is masked and its query's output is dropped by the
    // output projection.
    Tensor<std::int64_t, AnyShape, B> rows;
    bool prefix = false;
    const bool packed = opt_.padded == PaddedRows::zero && !mask.empty() && real_rows(mask, rows, &prefix);
    const Tensor<std::int64_t, AnyShape, B>* map = packed ? &rows : nullptr;
    // The CPU's flash kernel skipping padded queries never reads the rows after a sample's last
    // real token (which are all its padded rows under a lengths mask): they need not be zeroed.
    // The CUDA kernels read every row (a padded key's weight is 0, but 0 times a stale non-finite
    // value is not), so there they are zeroed.
    const bool flash = !weights && extras.kernel != AttentionKernel::naive && !per_head;
    const bool rows_unread = flash && prefix && B::host_accessible;
    // (B, T, Dim) x (3 Dim, Dim)^T -> (B, T, 3 Dim): Q, K, V side by side, each split into heads.
    auto qkv = linear(ctx, x, in_proj_weight, in_proj_bias, {.map = map, .fill_rest = !rows_unread});
    if (opt_.rotary) qkv = rotary(ctx, qkv, rotary_args(0, 2 * Dim));  // Q and K
    if (per_head) {
      const Var<T, AnyShape, B> all(qkv);
      auto o = cross_attention(ctx, slice(ctx, all, 2, 0, Dim), slice(ctx, all, 2, Dim, Dim), slice(ctx, all, 2, 2 * Dim, Dim),
                               CrossAttentionArgs<T, B>{.heads = Heads,
                                                        .key_mask = mask,
                                                        .attn_mask = detail::with_pattern(extras.attn_mask, opt_, extras.global_mask, d.v[0], Heads),
                                                        .dropout = training() ? opt_.dropout : 0.0,
                                                        .weights = weights});
      return Var<T, S, B>(linear(ctx, o, out_proj.weight, out_proj.bias, {.map = map}));
    }
    auto o = self_attention(ctx, qkv,
                            AttentionArgs<T, B>{.heads = Heads,
                                                .key_mask = mask,
                                                .attn_mask = extras.attn_mask,
                                                .window = opt_.window,
                                                .causal = opt_.causal,
                                                .global_tokens = opt_.global_tokens,
                                                .global_mask = extras.global_mask,
                                                .dropout = training() ? opt_.dropout : 0.0,
                                                .kernel = extras.kernel,
                                                .skip_padded_queries = packed,
                                                .weights = weights,
                                                .stats = extras.stats});
    return Var<T, S, B>(linear(ctx, o, out_proj.weight, out_proj.bias, {.map = map}));
  }
};

/// Cross-attention to keys of width KDim and values of width VDim (torch.nn.MultiheadAttention
/// (Dim, Heads, kdim=KDim, vdim=VDim, batch_first=True); note that VDim defaults to KDim here,
/// where torch's vdim defaults to embed_dim). Parameters as torch names them when kdim or vdim
/// differs from embed_dim: q_proj_weight (Dim, Dim), k_proj_weight (Dim, KDim), v_proj_weight
/// (Dim, VDim), in_proj_bias (3 Dim), out_proj; each projection weight Xavier uniform, the biases
/// zero. Where KDim and VDim both equal Dim, torch packs the three into in_proj_weight: use
/// nn::Attention, whose (query, key, value) call is this one.
///   attn::nn::CrossAttention<8, 256, 512> cross{this, "cross"};
///   auto y = cross(ctx, x, memory, memory, attn::Lengths{9, 4});  // x (B, Tq, 256), memory (B, Tk, 512)
template <std::size_t Heads, std::size_t Dim, std::size_t KDim, std::size_t VDim = KDim, class T = float, class B = cpu>
class CrossAttention : public Module,
                       public detail::CrossAttentionCalls<CrossAttention<Heads, Dim, KDim, VDim, T, B>, Heads, T, B> {
  static_assert(Heads > 0 && Heads != dyn && Dim > 0 && Dim != dyn && KDim > 0 && KDim != dyn && VDim > 0 && VDim != dyn,
                "nn::CrossAttention<Heads, Dim, KDim, VDim>: all static, positive");
  static_assert(Dim % Heads == 0, "nn::CrossAttention<Heads, Dim, KDim, VDim>: Dim must be divisible by Heads (head_dim = Dim / Heads)");
  static_assert(KDim != Dim || VDim != Dim,
                "nn::CrossAttention: with KDim == VDim == Dim torch packs the projections into in_proj_weight; use nn::Attention, "
                "whose operator()(ctx, query, key, value, ...) is cross-attention");

 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;
  static constexpr std::size_t kdim = KDim;
  static constexpr std::size_t vdim = VDim;
  static constexpr std::size_t head_dim = Dim / Heads;

  /// options: dropout and bias apply; the self-attention patterns (window, causal, global_tokens)
  /// and rotary embeddings are refused, and PaddedRows does not apply.
  CrossAttention(Module* parent, std::string name, AttentionOptions opt = {})
      : Module(parent, std::move(name)), out_proj(this, "out_proj", opt.bias), opt_(opt) {
    const std::string who = "nn::CrossAttention '" + this->name() + "'";
    if (!(opt.dropout >= 0 && opt.dropout < 1)) throw ArgumentError(who + ": dropout must be in [0, 1), got " + std::to_string(opt.dropout));
    if (opt.window || opt.causal || opt.global_tokens)
      throw ArgumentError(who + ": window, causal and global_tokens are self-attention patterns; pass a cross pattern as extras.attn_mask");
    if (opt.rotary)
      throw ArgumentError(who + ": rotary position embeddings apply to self-attention (nn::Attention); turn queries and keys at chosen " +
                          "positions with attn::rotary");
    q_proj_weight = register_parameter<T, Shape<Dim, Dim>, B>("q_proj_weight", {Dim, Dim}, true);
    k_proj_weight = register_parameter<T, Shape<Dim, KDim>, B>("k_proj_weight", {Dim, KDim}, true);
    v_proj_weight = register_parameter<T, Shape<Dim, VDim>, B>("v_proj_weight", {Dim, VDim}, true);
    if (opt.bias) in_proj_bias = register_parameter<T, Shape<3 * Dim>, B>("in_proj_bias", {3 * Dim});
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
      out_proj.reset_parameters(rng);
    }
  }

  /// PyTorch's scheme: each of q/k/v_proj_weight Xavier uniform, zero in_proj_bias; out_proj keeps
  /// nn.Linear's default weight and a zero bias.
  void reset_parameters(Rng& rng) override {
    init::xavier_uniform(q_proj_weight, rng);
    init::xavier_uniform(k_proj_weight, rng);
    init::xavier_uniform(v_proj_weight, rng);
    if (in_proj_bias.defined()) init::constant(in_proj_bias, T(0));
  }

  /// query (B, Tq, Dim), key (B, Tk, KDim), value (B, Tk, VDim) -> (B, Tq, Dim); mask says which of
  /// the (B, Tk) keys are real (attn::Lengths, KeepMask, PaddingMask). As nn::Attention's
  /// cross-attention call otherwise; forward_with_weights also returns the weights (B, Heads, Tq, Tk).
  using detail::CrossAttentionCalls<CrossAttention, Heads, T, B>::operator();
  using detail::CrossAttentionCalls<CrossAttention, Heads, T, B>::forward_with_weights;

  Var<T, Shape<Dim, Dim>, B> q_proj_weight;
  Var<T, Shape<Dim, KDim>, B> k_proj_weight;
  Var<T, Shape<Dim, VDim>, B> v_proj_weight;
  Var<T, Shape<3 * Dim>, B> in_proj_bias;  // undefined when !bias
  detail::MhaOutProj<Dim, T, B> out_proj;

 private:
  AttentionOptions opt_;

  friend class detail::CrossAttentionCalls<CrossAttention, Heads, T, B>;

  template <Context C, class SQ, class SK, class SV, class M>
  Var<T, SQ, B> cross_forward(C& ctx, const Var<T, SQ, B>& query, const Var<T, SK, B>& key, const Var<T, SV, B>& value, const M* mask,
                              const AttentionExtras<T, B>& extras, Tensor<T, AnyShape, B>* weights) const {
    if constexpr (!std::is_same_v<SQ, AnyShape>) {
      static_assert(SQ::rank == 3, "nn::CrossAttention: the query must be (batch, Tq, Dim)");
      static_assert(shapes::may_equal(shapes::back<SQ, 0>, Dim), "nn::CrossAttention: the query's last extent differs from Dim");
    }
    if constexpr (!std::is_same_v<SK, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<SK, 0>, KDim), "nn::CrossAttention: the key's last extent differs from KDim");
    if constexpr (!std::is_same_v<SV, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<SV, 0>, VDim), "nn::CrossAttention: the value's last extent differs from VDim");
    const std::string who = "nn::CrossAttention<" + std::to_string(Heads) + ", " + std::to_string(Dim) + ", " + std::to_string(KDim) +
                            ", " + std::to_string(VDim) + ">";
    const Dims& dq = detail::check_attention_input(who, "query", query.dims(), Dim);
    const Dims& dk = detail::check_attention_input(who, "key", key.dims(), KDim, dq.v[0]);
    detail::check_attention_input(who, "value", value.dims(), VDim, dq.v[0], dk.v[1]);
    auto project = [&](const auto& x, const auto& w, std::size_t part) {
      return in_proj_bias.defined() ? linear(ctx, x, w, slice(ctx, in_proj_bias, 0, part * Dim, Dim)) : linear(ctx, x, w);
    };
    Var<T, AnyShape, B> q = project(query, q_proj_weight, 0), k = project(key, k_proj_weight, 1), v = project(value, v_proj_weight, 2);
    return detail::cross_attend<Heads, SQ>(ctx, "nn::CrossAttention", opt_, training(), q, k, v, mask, extras, weights, out_proj);
  }
};

}  // namespace attn::nn
