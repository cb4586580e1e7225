// SPDX-License-Identifier: MIT
// nn::TransformerEncoderLayer<Heads, Dim> and nn::TransformerEncoder<Heads, Dim>: PyTorch's
// torch.nn.TransformerEncoderLayer(batch_first=True) and torch.nn.TransformerEncoder, with their
// parameter names ("layers.0.self_attn.in_proj_weight", "layers.0.linear1.weight", "norm.weight").
//   attn::nn::TransformerEncoder<4, 128> enc{this, "encoder", {.num_layers = 6, .layer = {.norm_first = true},
//                                                              .final_norm = true, .checkpoint = true}};
//   auto y = enc(ctx, x, attn::Lengths{12, 7});   // (B, T, 128) -> (B, T, 128)
#pragma once
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../autograd/checkpoint.hpp"
#include "../autograd/elementwise.hpp"
#include "../autograd/linear.hpp"
#include "../autograd/matmul.hpp"
#include "../autograd/shape_ops.hpp"
#include "../autograd/softmax.hpp"
#include "attention.hpp"
#include "init.hpp"
#include "layer_norm.hpp"
#include "layer_stack.hpp"
#include "linear.hpp"
#include "module.hpp"

namespace attn::nn {

/// The feed-forward block's activation: PyTorch's activation="relu" or "gelu" (the exact, erf
/// form), or one of the callables torch's layers also take: F.gelu(x, approximate="tanh")
/// (gelu_tanh; GPT-2's "gelu_new") and F.silu (silu).
enum class Activation { relu, gelu, gelu_tanh, silu };

/// Every Activation, in the enum's order (for option lists and messages).
inline constexpr Activation activations[] = {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu};

/// The activation's name ("relu", "gelu", "gelu_tanh", "silu"); a value outside the enum throws
/// ArgumentError.
const char* activation_name(Activation a);

/// Every activation's name, separated by sep: "relu, gelu, gelu_tanh, silu".
inline std::string activation_names(std::string_view sep = ", ") {
  std::string s;
  for (const Activation a : activations) s += (s.empty() ? "" : std::string(sep)) + activation_name(a);
  return s;
}

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
  }
  throw ArgumentError("nn::Activation: value " + std::to_string(static_cast<int>(a)) + " is none of " + activation_names());
}

/// The activation of a name activation_name gives; anything else throws ArgumentError naming the
/// choices.
inline Activation activation_from_name(std::string_view name) {
  for (const Activation a : activations)
    if (name == activation_name(a)) return a;
  throw ArgumentError("nn::Activation: unknown activation '" + std::string(name) + "' (" + activation_names() + ")");
}

namespace detail {
/// The checks every transformer layer makes of its options (who: "nn::TransformerEncoderLayer 'l'").
template <class Options>
void check_layer_options(const Options& opt, const std::string& who) {
  if (!(opt.dropout >= 0 && opt.dropout < 1)) throw ArgumentError(who + ": dropout must be in [0, 1), got " + std::to_string(opt.dropout));
  if (opt.attention_dropout && !(*opt.attention_dropout >= 0 && *opt.attention_dropout < 1))
    throw ArgumentError(who + ": attention_dropout must be in [0, 1), got " + std::to_string(*opt.attention_dropout));
  if (!(opt.layer_norm_eps > 0)) throw ArgumentError(who + ": layer_norm_eps must be positive, got " + std::to_string(opt.layer_norm_eps));
  activation_name(opt.activation);  // each throws for a value outside its enum
  norm_kind_name(opt.norm);
}

/// The feed-forward block's activation applied to h.
template <Context C, class T, class S, class B>
Var<T, S, B> activate(C& ctx, const Var<T, S, B>& h, Activation a) {
  switch (a) {
    case Activation::relu: return relu(ctx, h);
    case Activation::gelu: return gelu(ctx, h);
    case Activation::gelu_tanh: return gelu_tanh(ctx, h);
    case Activation::silu: return silu(ctx, h);
  }
  throw ArgumentError(std::string("nn: unknown activation ") + std::to_string(static_cast<int>(a)));
}

/// A transformer layer's feed-forward block on x (B, T, Dim): linear2(dropout(act(linear1(x)))),
/// or with opt.gated linear2(dropout(act(a) * b)) where a and b are the first and second halves of
/// linear1(x)'s columns.
template <Context C, class T, class S, class B, class L1, class L2, class Options>
Var<T, S, B> feed_forward(C& ctx, const Var<T, S, B>& x, const L1& linear1, const Dropout& dropout, const L2& linear2, const Options& opt) {
  auto h = linear1(ctx, x);
  using H = decltype(h);
  if (opt.gated) {
    const std::size_t axis = h.rank() - 1, f = h.dims().back() / 2;
    h = H(mul(ctx, activate(ctx, slice(ctx, h, axis, 0, f), opt.activation), slice(ctx, h, axis, f, f)));
  } else {
    h = activate(ctx, h, opt.activation);
  }
  return Var<T, S, B>(linear2(ctx, dropout(ctx, h)));
}

/// linear1's width: 2F for a gated feed-forward of width F.
template <class Options>
std::size_t linear1_width(const Options& opt, std::size_t f) {
  return opt.gated ? 2 * f : f;
}
}  // namespace detail

struct TransformerEncoderLayerOptions {
  /// Width F of the feed-forward block (linear1: Dim -> F, linear2: F -> Dim). 0: 4 * Dim, the
  /// usual ratio (PyTorch's fixed default, 2048, is 4 * Dim at Dim = 512); pass 2048 for PyTorch's.
  std::size_t dim_feedforward = 0;
  /// PyTorch's dropout: after the activation, on both residual branches, and on the attention
  /// weights (nn.MultiheadAttention(dropout=p)). In training mode only.
  double dropout = 0.1;
  Activation activation = Activation::relu;
  /// A gated feed-forward (GLU): linear1 (2F, Dim) projects to 2F, and the activation of the first
  /// F columns times the other F goes to linear2: with Activation::silu, LLaMA's SwiGLU (with gelu,
  /// GEGLU). linear1's rows hold the gate first, then the up projection (Phi-3's gate_up_proj;
  /// LLaMA's gate_proj and up_proj stacked in that order).
  bool gated = false;
  /// true: x + sa(norm1(x)), then x + ff(norm2(x)) (pre-norm); false: norm1(x + sa(x)), then
  /// norm2(x + ff(x)) (post-norm, PyTorch's default).
  bool norm_first = false;
  /// Every norm of the layer (and a stack's final one): torch's LayerNorm, or NormKind::rms, torch's
  /// RMSNorm (a "weight", no centring or bias), as LLaMA's layers.
  NormKind norm = NormKind::layer;
  /// The norms' eps (LayerNorm's and RMSNorm's alike).
  double layer_norm_eps = 1e-5;
  /// Every Linear's bias, the attention's biases and the norms' (torch's bias=False drops all of
  /// them since 2.1; the final norm of a TransformerEncoder follows its layers).
  bool bias = true;
  /// Passed to self_attn. Under PaddedRows::zero the rows of real tokens are the same; the padded
  /// rows still run through the residual, feed-forward and norms, and hold other values than PyTorch's.
  PaddedRows padded = PaddedRows::compute;
  /// Dropout on the attention weights alone, when it should differ from `dropout` (PyTorch has one
  /// rate for both); empty: `dropout`.
  std::optional<double> attention_dropout = {};
  /// The self-attention's sparse pattern (nn::AttentionOptions): a sliding window of `window` keys
  /// on each side, causal, the first `global_tokens` positions global.
  std::optional<std::int64_t> window = {};
  bool causal = false;
  std::size_t global_tokens = 0;
  /// Rotary position embeddings on the self-attention's queries and keys (nn::AttentionOptions::rotary).
  std::optional<RotaryOptions> rotary = {};
};

/// forward_rows_with_weights' result: the first rows' output (B, rows, Dim) and their attention
/// weights (B, Heads, rows, T), both on the tape.
template <class T, class B>
struct RowsOutput {
  Var<T, AnyShape, B> out, weights;
};

/// One encoder layer: self-attention and a feed-forward block (linear1, activation, dropout,
/// linear2; gated: SwiGLU and its kin), each with a residual connection, its dropout (dropout1,
/// dropout2) and a norm (norm1, norm2: LayerNorm, or RMSNorm), before (norm_first) or after the
/// residual sum. x (B, T, Dim) -> (B, T, Dim).
///
/// Padded positions: the mask removes padded keys from the attention; every query row is computed
/// (PaddedRows::compute), as PyTorch's training path does, so the output matches PyTorch at every
/// position, padded ones included.
template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class TransformerEncoderLayer : public Module {
  static_assert(Heads > 0 && Heads != dyn && Dim > 0 && Dim != dyn,
                "nn::TransformerEncoderLayer<Heads, Dim>: Heads and Dim must be static, positive");
  static_assert(Dim % Heads == 0, "nn::TransformerEncoderLayer<Heads, Dim>: Dim must be divisible by Heads");

 public:
  static constexpr std::size_t heads = Heads;
  static constexpr std::size_t dim = Dim;

  TransformerEncoderLayer(Module* parent, std::string name, TransformerEncoderLayerOptions opt = {})
      : Module(parent, std::move(name)),
        self_attn(this, "self_attn",
                  {.dropout = checked(opt, this->name()).attention_dropout.value_or(opt.dropout),
                   .bias = opt.bias,
                   .padded = opt.padded,
                   .window = opt.window,
                   .causal = opt.causal,
                   .global_tokens = opt.global_tokens,
                   .rotary = opt.rotary}),
        linear1(this, "linear1", detail::linear1_width(opt, width(opt)), {.bias = opt.bias}),
        dropout(this, "dropout", opt.dropout),
        linear2(this, "linear2", width(opt), Dim, {.bias = opt.bias}),
        norm1(this, "norm1", opt.norm, opt.layer_norm_eps, opt.bias),
        norm2(this, "norm2", opt.norm, opt.layer_norm_eps, opt.bias),
        dropout1(this, "dropout1", opt.dropout),
        dropout2(this, "dropout2", opt.dropout),
        opt_(opt) {}

  /// x (B, T, Dim) -> (B, T, Dim). mask says which positions are real tokens, as for nn::Attention:
  /// attn::Lengths, attn::KeepMask(m) or attn::PaddingMask(m) (torch's src_key_padding_mask).
  /// extras.attn_mask (T, T) is added to every head's scores, (B * Heads, T, T) to each sample's
  /// and head's (torch's src_mask, additive form).
  template <Context C, class S, TokenMask M>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, const M& mask, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, &mask, extras);
  }
  /// Every position a real token.
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, static_cast<const Lengths*>(nullptr), extras);
  }
  template <Context C, class S, BareMaskTensor M>
  Var<T, S, B> operator()(C&, const Var<T, S, B>&, const M&, AttentionExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<M>,
                  "nn::TransformerEncoderLayer: a bare mask tensor does not say which value means padding; pass "
                  "attn::KeepMask(m) (1 = real token), attn::PaddingMask(m) (1 = padding, torch's src_key_padding_mask) "
                  "or attn::Lengths");
    return {};
  }

  /// The output and the self-attention's per-head weights (B, Heads, T, T), as
  /// Attention::forward_with_weights (for heatmaps and diagnostics: the weights are dense).
  template <Context C, class S, TokenMask M>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, const M& mask, AttentionExtras<T, B> extras = {}) const {
    Tensor<T, Shape<dyn, Heads, dyn, dyn>, B> w;
    auto out = forward(ctx, x, &mask, extras, &w);
    return {out, w};
  }
  template <Context C, class S>
  AttentionOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, AttentionExtras<T, B> extras = {}) const {
    Tensor<T, Shape<dyn, Heads, dyn, dyn>, B> w;
    auto out = forward(ctx, x, static_cast<const Lengths*>(nullptr), extras, &w);
    return {out, w};
  }

  /// The output at positions [0, rows) alone, (B, rows, Dim): the first `rows` rows of what the
  /// layer's forward gives, at a fraction of its cost when rows << T. Every position still gives its
  /// key and value, but only those rows' queries, attention, feed-forward and norms are computed:
  /// for a last layer of which a model reads only its first tokens (a [CLS] token). Each of those
  /// rows must see every key: with a window, rows <= global_tokens, and not causal (ArgumentError
  /// otherwise); it takes no attn_mask. The attention weights go through the dense path (no flash
  /// kernel): rows x T scores per head. With dropout in training, its masks are drawn for those
  /// rows alone, so they are not the ones the full forward would draw (the same distribution; the
  /// values equal the full forward's rows in eval mode or without dropout).
  template <Context C, class S, TokenMask M>
  Var<T, AnyShape, B> forward_rows(C& ctx, const Var<T, S, B>& x, const M& mask, std::size_t rows) const {
    return rows_impl(ctx, x, &mask, rows);
  }
  template <Context C, class S>
  Var<T, AnyShape, B> forward_rows(C& ctx, const Var<T, S, B>& x, std::size_t rows) const {
    return rows_impl(ctx, x, static_cast<const Lengths*>(nullptr), rows);
  }
  /// forward_rows, also giving those rows' attention weights (B, Heads, rows, T), before attention
  /// dropout, as a Var recorded on ctx: a training loss may use them (an entropy penalty, attention
  /// supervision) and backward reaches x and the layer's parameters through them too.
  template <Context C, class S, TokenMask M>
  RowsOutput<T, B> forward_rows_with_weights(C& ctx, const Var<T, S, B>& x, const M& mask, std::size_t rows) const {
    RowsOutput<T, B> r;
    r.out = rows_impl(ctx, x, &mask, rows, &r.weights);
    return r;
  }
  template <Context C, class S>
  RowsOutput<T, B> forward_rows_with_weights(C& ctx, const Var<T, S, B>& x, std::size_t rows) const {
    RowsOutput<T, B> r;
    r.out = rows_impl(ctx, x, static_cast<const Lengths*>(nullptr), rows, &r.weights);
    return r;
  }

  const TransformerEncoderLayerOptions& options() const noexcept { return opt_; }
  /// The feed-forward width F.
  std::size_t dim_feedforward() const noexcept { return width(opt_); }

  Attention<Heads, Dim, T, B> self_attn;
  Linear<Dim, dyn, T, B> linear1;  // Dim -> dim_feedforward (2 dim_feedforward when gated)
  Dropout dropout;
  Linear<dyn, Dim, T, B> linear2;
  Norm<Dim, T, B> norm1, norm2;    // LayerNorm or RMSNorm (options().norm)
  Dropout dropout1, dropout2;

 private:
  TransformerEncoderLayerOptions opt_;

  static std::size_t width(const TransformerEncoderLayerOptions& opt) { return opt.dim_feedforward ? opt.dim_feedforward : 4 * Dim; }
  static const TransformerEncoderLayerOptions& checked(const TransformerEncoderLayerOptions& opt, const std::string& name) {
    detail::check_layer_options(opt, "nn::TransformerEncoderLayer '" + name + "'");
    return opt;
  }

  /// (B, T, Dim) -> (B, T, F) -> (B, T, Dim).
  template <Context C, class S>
  Var<T, S, B> feed_forward(C& ctx, const Var<T, S, B>& x) const {
    return detail::feed_forward(ctx, x, linear1, dropout, linear2, opt_);
  }

  template <Context C, class S, class M>
  Var<T, AnyShape, B> rows_impl(C& ctx, const Var<T, S, B>& x_in, const M* key_mask, std::size_t rows,
                                Var<T, AnyShape, B>* weights = nullptr) const {
    const Dims& d = x_in.dims();
    const std::string who = "nn::TransformerEncoderLayer '" + this->name() + "'::forward_rows";
    if (d.n != 3 || d.v[2] != Dim) throw ShapeError(who + ": input shape " + d.str() + " is not (batch, time, " + std::to_string(Dim) + ")");
    const std::size_t batch = d.v[0], time = d.v[1];
    if (rows == 0 || rows > time)
      throw ArgumentError(who + ": rows must be in [1, " + std::to_string(time) + "], got " + std::to_string(rows));
    if (opt_.causal) throw ArgumentError(who + ": a causal layer's first rows do not see every key");
    if (opt_.window && rows > opt_.global_tokens)
      throw ArgumentError(who + ": under a window only global rows see every key; rows " + std::to_string(rows) + " > global_tokens " +
                          std::to_string(opt_.global_tokens));
    // Padded keys get no weight: -inf where the keep mask is 0, as (B, 1, 1, T) over the scores.
    Tensor<T, AnyShape, B> pad;
    if (key_mask) {
      const auto keep = keep_mask<T, B>(*key_mask, batch, time, "nn::TransformerEncoderLayer::forward_rows");
      PoolVector<T> host(keep.numel());
      keep.copy_to_host(std::span<T>(host.data(), host.size()));
      for (auto& v : host) v = v != T(0) ? T(0) : T(1);
      pad = Tensor<T, AnyShape, B>(Dims{batch, 1, 1, time});
      pad.copy_from_host(std::span<const T>(host.data(), host.size()));
    }
    constexpr std::size_t hd = Dim / Heads;
    const Var<T, AnyShape, B> x = x_in.erased();
    const auto first = [&](const Var<T, AnyShape, B>& v) { return slice(ctx, v, 1, 0, rows); };
    // Self-attention of the first rows' queries over every key: (B, T, Dim) -> (B, rows, Dim).
    const auto sa = [&](const Var<T, AnyShape, B>& h) {
      const auto& a = self_attn;
      // The first rows' queries (B, rows, Dim), every row's keys and values (B, T, Dim), turned by
      // the rotary embeddings if the layer has them (in bf16 or int8 each projection takes
      // in_proj_weight's own pack: Attention::project_part).
      const Var<T, AnyShape, B> q = a.project_query(ctx, first(h));
      const auto kv = a.project_key_value(ctx, h);
      const auto split = [&](const Var<T, AnyShape, B>& v, std::size_t n) {              // (B, n, Dim) -> (B, H, n, hd)
        return permute(ctx, reshape(ctx, v, Dims{batch, n, Heads, hd}), {0, 2, 1, 3});
      };
      auto k = split(kv.k, time), v = split(kv.v, time);
      auto scores = scale(ctx, matmul_nt(ctx, split(q, rows), k), T(1 / std::sqrt(double(hd))));  // (B, H, rows, T)
      if (!pad.empty()) scores = masked_fill(ctx, scores, pad, -std::numeric_limits<T>::infinity());
      auto sm = softmax(ctx, scores);
      if (weights) *weights = sm;
      auto w = attn::dropout(ctx, sm, opt_.attention_dropout.value_or(opt_.dropout), training());
      auto o = reshape(ctx, permute(ctx, matmul(ctx, w, v), {0, 2, 1, 3}), Dims{batch, rows, Dim});
      return Var<T, AnyShape, B>(linear(ctx, o, a.out_proj.weight, a.out_proj.bias));
    };
    Var<T, AnyShape, B> y = first(x);
    if (opt_.norm_first) {
      y = add(ctx, y, dropout1(ctx, sa(norm1(ctx, x))));
      y = add(ctx, y, dropout2(ctx, feed_forward(ctx, norm2(ctx, y))));
    } else {
      y = norm1(ctx, Var<T, AnyShape, B>(add(ctx, y, dropout1(ctx, sa(x)))));
      y = norm2(ctx, Var<T, AnyShape, B>(add(ctx, y, dropout2(ctx, feed_forward(ctx, y)))));
    }
    return y;
  }

  /// weights: when given, the attention's weights are stored there.
  template <Context C, class S, class M>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& x, const M* mask, const AttentionExtras<T, B>& extras,
                       Tensor<T, Shape<dyn, Heads, dyn, dyn>, B>* weights = nullptr) const {
    // self_attn checks the input's shape (B, T, Dim) and the masks.
    auto sa = [&](const Var<T, S, B>& h) -> Var<T, S, B> {
      if (weights) {
        auto r = mask ? self_attn.forward_with_weights(ctx, h, *mask, extras) : self_attn.forward_with_weights(ctx, h, extras);
        *weights = r.weights;
        return r.out;
      }
      return mask ? self_attn(ctx, h, *mask, extras) : self_attn(ctx, h, extras);
    };
    Var<T, S, B> y = x;
    if (opt_.norm_first) {
      y = Var<T, S, B>(add(ctx, y, dropout1(ctx, sa(norm1(ctx, y)))));
      y = Var<T, S, B>(add(ctx, y, dropout2(ctx, feed_forward(ctx, norm2(ctx, y)))));
    } else {
      y = norm1(ctx, Var<T, S, B>(add(ctx, y, dropout1(ctx, sa(y)))));
      y = norm2(ctx, Var<T, S, B>(add(ctx, y, dropout2(ctx, feed_forward(ctx, y)))));
    }
    return y;
  }
};

/// TransformerEncoder::forward_with_weights' result.
template <class T, class S, std::size_t Heads, class B>
struct EncoderOutput {
  Var<T, S, B> out;
  std::vector<Tensor<T, Shape<dyn, Heads, dyn, dyn>, B>> weights;  // one per layer
};

struct TransformerEncoderOptions {
  std::size_t num_layers = 1;  // at run time; every layer has the same options
  TransformerEncoderLayerOptions layer = {};
  /// A norm "norm" after the last layer (PyTorch's TransformerEncoder(norm=LayerNorm(Dim))), of the
  /// layers' kind (an RMSNorm under NormKind::rms), layer_norm_eps and bias. Usual with norm_first.
  bool final_norm = false;
  /// Each layer's forward goes through attn::checkpoint: its intermediate values are recomputed
  /// during backward instead of kept, so a training step keeps about one layer's activations plus
  /// each layer's input. Gradients and the random stream are those of a plain run, bit for bit.
  bool checkpoint = false;
};

/// num_layers TransformerEncoderLayers, "layers.0" ... "layers.<N-1>", then the optional "norm".
/// Like PyTorch's (whose layers are deep copies of one layer), every layer starts from the same
/// initial values, those of layers.0; Module::init(seed) draws them all from one stream, each layer
/// its own values.
template <std::size_t Heads, std::size_t Dim, class T = float, class B = cpu>
class TransformerEncoder : public detail::LayerStack<TransformerEncoderLayer<Heads, Dim, T, B>, Dim, T, B> {
  using Stack = detail::LayerStack<TransformerEncoderLayer<Heads, Dim, T, B>, Dim, T, B>;
  using Stack::layers_;

 public:
  using Layer = TransformerEncoderLayer<Heads, Dim, T, B>;

  TransformerEncoder(Module* parent, std::string name, TransformerEncoderOptions opt = {})
      : Stack(parent, std::move(name), "nn::TransformerEncoder", opt.num_layers, opt.layer, opt.final_norm), opt_(opt) {}

  /// x (B, T, Dim) -> (B, T, Dim), every layer with the same mask (see TransformerEncoderLayer).
  template <Context C, class S, TokenMask M>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, const M& mask, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, [&](const Layer& l, auto& c, const Var<T, S, B>& h) { return l(c, h, mask, extras); },
                   [&](const Layer* l, auto& c, const Var<T, S, B>& h) {
                     return attn::checkpoint(
                         c, [l](auto& c2, const auto& v, const M& m, const AttentionExtras<T, B>& e) { return (*l)(c2, v, m, e); }, h,
                         mask, extras);
                   });
  }
  /// Every position a real token.
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x, AttentionExtras<T, B> extras = {}) const {
    return forward(ctx, x, [&](const Layer& l, auto& c, const Var<T, S, B>& h) { return l(c, h, extras); },
                   [&](const Layer* l, auto& c, const Var<T, S, B>& h) {
                     return attn::checkpoint(c, [l](auto& c2, const auto& v, const AttentionExtras<T, B>& e) { return (*l)(c2, v, e); }, h,
                                             extras);
                   });
  }
  template <Context C, class S, BareMaskTensor M>
  Var<T, S, B> operator()(C&, const Var<T, S, B>&, const M&, AttentionExtras<T, B> = {}) const {
    static_assert(mask_detail::always_false<M>,
                  "nn::TransformerEncoder: a bare mask tensor does not say which value means padding; pass "
                  "attn::KeepMask(m) (1 = real token), attn::PaddingMask(m) (1 = padding, torch's src_key_padding_mask) "
                  "or attn::Lengths");
    return {};
  }

  /// The output and every layer's attention weights (B, Heads, T, T), first layer first. For
  /// heatmaps and diagnostics: the weights are dense, and the layers run without checkpointing.
  template <Context C, class S, TokenMask M>
  EncoderOutput<T, S, Heads, B> forward_with_weights(C& ctx, const Var<T, S, B>& x, const M& mask, AttentionExtras<T, B> extras = {}) const {
    EncoderOutput<T, S, Heads, B> r{x, {}};
    for (const auto& l : layers_) {
      auto o = l->forward_with_weights(ctx, r.out, mask, extras);
      r.out = o.out;
      r.weights.push_back(o.weights);
    }
    r.out = this->finish(ctx, r.out);
    return r;
  }

  /// The output at positions [0, rows) alone, (B, rows, Dim): every layer but the last runs in
  /// full, the last through TransformerEncoderLayer::forward_rows (see its conditions), then the
  /// final norm. For a model that reads only its first tokens, e.g. a [CLS] token's state.
  template <Context C, class S, TokenMask M>
  Var<T, AnyShape, B> forward_rows(C& ctx, const Var<T, S, B>& x, const M& mask, std::size_t rows) const {
    Var<T, S, B> h = x;
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
      const Layer* l = layers_[i].get();
      h = opt_.checkpoint ? attn::checkpoint(ctx, [l](auto& c, const auto& v, const M& m) { return (*l)(c, v, m); }, h, mask) : (*l)(ctx, h, mask);
    }
    const Layer* last = layers_.back().get();
    Var<T, AnyShape, B> y =
        opt_.checkpoint ? attn::checkpoint(ctx, [last, rows](auto& c, const auto& v, const M& m) { return last->forward_rows(c, v, m, rows); }, h, mask)
                        : last->forward_rows(ctx, h, mask, rows);
    return this->finish(ctx, y);
  }

  /// forward_rows, also giving the last layer's attention weights of those rows (B, Heads, rows,
  /// T), before attention dropout, as a Var on ctx (TransformerEncoderLayer::forward_rows_with_weights).
  /// With checkpointing the layers before the last are checkpointed as in forward_rows, and the last
  /// layer is not (the weights are part of its graph): it keeps its keys and values, the rows' scores
  /// and the rows' activations for backward.
  template <Context C, class S, TokenMask M>
  RowsOutput<T, B> forward_rows_with_weights(C& ctx, const Var<T, S, B>& x, const M& mask, std::size_t rows) const {
    Var<T, S, B> h = x;
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
      const Layer* l = layers_[i].get();
      h = opt_.checkpoint ? attn::checkpoint(ctx, [l](auto& c, const auto& v, const M& m) { return (*l)(c, v, m); }, h, mask) : (*l)(ctx, h, mask);
    }
    auto r = layers_.back()->forward_rows_with_weights(ctx, h, mask, rows);
    r.out = this->finish(ctx, r.out);
    return r;
  }

  const TransformerEncoderOptions& options() const noexcept { return opt_; }

 private:
  TransformerEncoderOptions opt_;

  template <Context C, class S, class Plain, class Checkpointed>
  Var<T, S, B> forward(C& ctx, const Var<T, S, B>& x, Plain&& plain, Checkpointed&& checkpointed) const {
    Var<T, S, B> h = x;
    for (const auto& l : layers_) h = opt_.checkpoint ? checkpointed(l.get(), ctx, h) : plain(*l, ctx, h);
    return this->finish(ctx, h);
  }
};

}  // namespace attn::nn
