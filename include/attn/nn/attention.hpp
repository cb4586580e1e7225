// SPDX-License-Identifier: MIT
// nn::Attention<Heads, Dim>: multi-head self-attention, torch.nn.MultiheadAttention(batch_first=True)
// with q = k = v = x and PyTorch's parameter names. One fused QKV projection (attn::linear), the
// flash kernel unless the weights are asked for (attn::self_attention), output projection.
//   attn::nn::Attention<8, 128> attention{this, "attn", {.dropout = 0.1}};
//   attn::nn::Attention<8, 128> local{this, "local", {.window = 256, .global_tokens = 1}};  // Longformer-style
//   auto y = attention(ctx, x, attn::Lengths{12, 7});          // or attn::KeepMask(m), attn::PaddingMask(m)
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../autograd/attention.hpp"
#include "../autograd/linear.hpp"
#include "../core/mask.hpp"
#include "init.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace attn::nn {

/// The head count the library suggests for a model width: max(4, hidden / 64).
constexpr std::size_t recommended_heads(std::size_t hidden) { return std::max<std::size_t>(4, hidden / 64); }

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
};

/// Optional inputs of one forward call.
template <class T, class B = cpu>
struct AttentionExtras {
  Tensor<T, AnyShape, B> attn_mask = {};  // (T, T), added to the scores; may hold -inf (e.g. causal); empty: none
  // (B, T): != 0 marks a global token at a chosen position of each sample (Longformer's
  // global_attention_mask), on top of AttentionOptions::global_tokens; empty: none
  Tensor<T, AnyShape, B> global_mask = {};
  AttentionKernel kernel = AttentionKernel::automatic;
  AttentionStats* stats = nullptr;   // filled with the attention op's allocations (must outlive backward)
};

/// forward_with_weights' result: the output and the per-head softmax weights (B, Heads, T, T),
/// after attention dropout in training (zeros and weights / (1 - p), as torch's need_weights
/// returns them: the weights that made the output). Without dropout they are the ones saved for
/// backward: treat them as read-only.
template <class T, class S, std::size_t Heads, class B>
struct AttentionOutput {
  Var<T, S, B> out;
  Tensor<T, Shape<dyn, Heads, dyn, dyn>, B> weights;
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

}  // namespace detail

template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class Attention : public Module {
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
  /// PaddedRows::zero the rows of padded queries hold uniform weights over the real keys.
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

  Var<T, Shape<3 * Dim, Dim>, B> in_proj_weight;
  Var<T, Shape<3 * Dim>, B> in_proj_bias;  // undefined when !bias
  detail::MhaOutProj<Dim, T, B> out_proj;

 private:
  AttentionOptions opt_;

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
    if (!extras.attn_mask.empty() && !(extras.attn_mask.dims() == Dims{d.v[1], d.v[1]}))
      shape_mismatch("nn::Attention", "attn_mask must be (time, time)", extras.attn_mask.dims(), Dims{d.v[1], d.v[1]});
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
    const bool flash = !weights && extras.kernel != AttentionKernel::naive;
    const bool rows_unread = flash && prefix && B::host_accessible;
    // (B, T, Dim) x (3 Dim, Dim)^T -> (B, T, 3 Dim): Q, K, V side by side, each split into heads.
    auto qkv = linear(ctx, x, in_proj_weight, in_proj_bias, {.map = map, .fill_rest = !rows_unread});
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

}  // namespace attn::nn
