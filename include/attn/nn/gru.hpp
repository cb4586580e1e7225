// SPDX-License-Identifier: MIT
// nn::GRU<In, Hidden> and nn::BiGRU<In, Hidden>: GRUs over ragged batches, matching
// torch.nn.GRU(In, Hidden, batch_first=True[, bidirectional=True][, num_layers=N]) on a packed
// sequence, with its parameter names, initialisation and options (GruOptions = LstmOptions).
//   attn::nn::BiGRU<128, 128> rnn{this, "gru"};   auto [y, h_n] = rnn(ctx, x, lengths);   // y (B, T, 256)
#pragma once
#include <array>
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "../autograd/dropout.hpp"
#include "../autograd/gru.hpp"
#include "../autograd/shape_ops.hpp"
#include "../core/mask.hpp"
#include "init.hpp"
#include "lstm.hpp"
#include "module.hpp"

namespace attn::nn {

/// The result of a GRU layer: out (B, T, Dirs*Hidden), the last layer's, zero at padded steps; h_n
/// (layers*Dirs, B, Hidden), each sample's final state per layer and direction (layer 0's
/// directions first, as torch's), in the batch's own order.
template <class T, std::size_t Dirs, std::size_t Hidden, class B = cpu>
struct GruOutput {
  Var<T, Shape<dyn, dyn, Dirs * Hidden>, B> out;
  Var<T, Shape<dyn, dyn, Hidden>, B> h_n;
};

/// Options of nn::GRU and nn::BiGRU: torch.nn.GRU's num_layers, dropout (between layers, in
/// training) and bias, as the LSTMs'.
using GruOptions = LstmOptions;

namespace gru_detail {

template <std::size_t In, class SX>
void check_input(const Dims& x, const char* who) {
  if constexpr (!std::is_same_v<SX, AnyShape>) {
    static_assert(SX::rank == 3, "nn::GRU: the input must be (batch, time, In)");
    static_assert(shapes::may_equal(shapes::back<SX, 0>, In), "nn::GRU: the input's last extent differs from In");
  }
  if (x.n != 3 || x.v[2] != In)
    throw ShapeError(std::string(who) + ": input shape " + x.str() + " is not (batch, time, " + std::to_string(In) + ")");
}

/// Every layer of a GRU stack: layer k > 0 reads layer k-1's output (after dropout p, in training),
/// from rows [k Dirs, (k + 1) Dirs) of h0 (undefined: zero); h_n of all layers joined along axis 0.
template <std::size_t Dirs, Context C, class T, class B>
GruResult<T, B> run_layers(C& ctx, const Var<T, AnyShape, B>& x0, std::span<const int> lengths,
                           std::span<const std::array<GruWeights<T, B>, Dirs>> layers, const Var<T, AnyShape, B>& h0, double p) {
  std::vector<Var<T, AnyShape, B>> hs;
  Var<T, AnyShape, B> x = x0;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    if (k > 0 && p > 0) x = attn::dropout(ctx, x, p, true);
    Var<T, AnyShape, B> s;
    if (h0.defined()) s = layers.size() == 1 ? h0 : slice(ctx, h0, 0, k * Dirs, Dirs);
    GruResult<T, B> q;
    if constexpr (Dirs == 1) q = attn::gru(ctx, x, lengths, layers[k][0], s);
    else q = attn::bigru(ctx, x, lengths, layers[k][0], layers[k][1], s);
    x = q.out;
    hs.push_back(q.h_n);
  }
  return {x, hs.size() == 1 ? hs[0] : concat(ctx, hs, 0)};
}

/// The module behind nn::GRU (Dirs 1) and nn::BiGRU (Dirs 2).
template <std::size_t In, std::size_t Hidden, std::size_t Dirs, class T, class B>
class GruStack : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::GRU: In and Hidden must be static, positive extents");
  static constexpr std::size_t directions = Dirs;
  using Output = GruOutput<T, Dirs, Hidden, B>;

  GruStack(Module* parent, std::string name, GruOptions opt, const char* kind)
      : Module(parent, std::move(name)), kind_(kind), opt_(lstm_detail::checked(opt, std::string(kind) + " '" + this->name() + "'")) {
    for (std::size_t k = 0; k < opt_.num_layers; ++k) {
      std::array<GruWeights<T, B>, Dirs> layer;
      for (std::size_t d = 0; d < Dirs; ++d) {
        const std::string l = "_l" + std::to_string(k) + (d ? "_reverse" : "");
        const std::size_t in = k == 0 ? In : Dirs * Hidden;
        GruWeights<T, B>& w = layer[d];
        w.w_ih = register_parameter<T, AnyShape, B>("weight_ih" + l, {3 * Hidden, in}, true);
        w.w_hh = register_parameter<T, AnyShape, B>("weight_hh" + l, {3 * Hidden, Hidden}, true);
        w.b_ih = bias_param("bias_ih" + l);
        w.b_hh = bias_param("bias_hh" + l);
      }
      layers_.push_back(layer);
    }
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  /// torch's init: every parameter from U(-1/sqrt(H), 1/sqrt(H)), in registration order.
  void reset_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt(double(Hidden));
    for (auto& layer : layers_)
      for (auto& w : layer) {
        init::uniform(w.w_ih, rng, a);
        init::uniform(w.w_hh, rng, a);
        if (opt_.bias) {
          init::uniform(w.b_ih, rng, a);
          init::uniform(w.b_hh, rng, a);
        }
      }
  }

  /// x (B, T, In), lengths (B) each in [1, T] in any order -> out (B, T, Dirs*Hidden), h_n
  /// (num_layers*Dirs, B, Hidden). h0, as torch's gru(x, h_0): (num_layers*Dirs, B, Hidden) in the
  /// batch's order, each layer's forward direction first; undefined (the default) for zero.
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const Var<T, AnyShape, B>& h0 = {}) const {
    check_input<In, SX>(x.dims(), kind_);
    const Dims want{opt_.num_layers * Dirs, x.size(0), Hidden};
    if (h0.defined() && !(h0.dims() == want))
      shape_mismatch(kind_, "h0 must be (num_layers * directions, batch, hidden)", h0.dims(), want);
    const auto r = run_layers<Dirs>(ctx, x.erased(), lengths, std::span<const std::array<GruWeights<T, B>, Dirs>>(layers_), h0,
                                    this->training() ? opt_.dropout : 0.0);
    return {r.out, r.h_n};
  }
  /// The same with lengths as an integer tensor (B), e.g. int64.
  template <Context C, class SX, std::integral I, class SL, class LB>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const Tensor<I, SL, LB>& lengths, const Var<T, AnyShape, B>& h0 = {}) const {
    check_input<In, SX>(x.dims(), kind_);
    const PoolVector<int> l = mask_detail::lengths_from_tensor(lengths, x.size(1), kind_, "the time extent of x");
    return (*this)(ctx, x, std::span<const int>(l), h0);
  }
  /// The same with the batch described as for nn::Attention: attn::Lengths, or a KeepMask or
  /// PaddingMask whose real tokens come first in each sample.
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask, const Var<T, AnyShape, B>& h0 = {}) const {
    check_input<In, SX>(x.dims(), kind_);
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), kind_);
    return (*this)(ctx, x, std::span<const int>(l), h0);
  }

  /// The parameters of every layer, each direction's (forward first), for attn::gru / attn::bigru.
  std::span<const std::array<GruWeights<T, B>, Dirs>> layers() const noexcept { return layers_; }
  const GruOptions& options() const noexcept { return opt_; }

 private:
  /// A bias parameter, or (bias = false) a constant zero (3H) that is none.
  Var<T, AnyShape, B> bias_param(const std::string& name) {
    return lstm_detail::bias_or_zero<T, B, AnyShape>(opt_.bias, [&] { return register_parameter<T, AnyShape, B>(name, {3 * Hidden}); },
                                                     3 * Hidden);
  }
  const char* kind_;
  GruOptions opt_;
  std::vector<std::array<GruWeights<T, B>, Dirs>> layers_;
};

}  // namespace gru_detail

/// Unidirectional GRU, one layer or GruOptions::num_layers stacked. In and Hidden are static; batch
/// and time are dynamic. Parameters, torch's: weight_ih_l0 (3H, In), weight_hh_l0 (3H, H),
/// bias_ih_l0 (3H), bias_hh_l0 (3H), then the same with _l1 ... for the layers above (weight_ih_lk
/// (3H, H)), gate rows stacked r, z, n, all drawn from U(-1/sqrt(H), 1/sqrt(H)); GruOptions::bias =
/// false leaves the biases out. The initial state is zero unless h0 is passed.
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class GRU : public gru_detail::GruStack<In, Hidden, 1, T, B> {
 public:
  GRU(Module* parent, std::string name, GruOptions opt = {}) : gru_detail::GruStack<In, Hidden, 1, T, B>(parent, std::move(name), opt, "nn::GRU") {}
};

/// Bidirectional GRU, one layer or GruOptions::num_layers stacked (layer k > 0 reads the layer
/// below's 2*Hidden outputs): out (B, T, 2*Hidden), the last layer's, holds the forward direction in
/// columns [0, Hidden) and the reverse one, which starts at each sample's own last real token, in
/// [Hidden, 2*Hidden). Parameters as GRU, each layer's followed by the same four with "_reverse".
/// With two or more threads the two directions run concurrently.
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class BiGRU : public gru_detail::GruStack<In, Hidden, 2, T, B> {
 public:
  BiGRU(Module* parent, std::string name, GruOptions opt = {})
      : gru_detail::GruStack<In, Hidden, 2, T, B>(parent, std::move(name), opt, "nn::BiGRU") {}
};

template <class T>
using GruInputTables = RnnInputTables<T>;

/// The input-projection tables of an Embedding followed by a GRU or BiGRU (see RnnInputTables), for
/// embedded_gru: each of the first layer's directions' E W_ih^T (V, 3H).
template <std::size_t In, class T, class Gru>
GruInputTables<T> gru_input_tables(const Embedding<In, T, cpu>& embedding, const Gru& gru) {
  return lstm_detail::input_tables(embedding, std::span<const GruWeights<T, cpu>>(gru.layers()[0]),
                                   [](const auto& e, const auto& w_ih) { return gru_input_table<T>(e, w_ih); });
}

/// gru(ctx, embedding(ctx, ids), lengths) in inference, from the tables: the same out and h_n up to
/// rounding, from the zero state (the layers above the first run as they are). ids (B, T); lengths
/// (B), each in [1, T]. Throws ArgumentError when the tables are stale or belong to another GRU.
template <class Gru, class T, std::integral I, class SI>
typename Gru::Output embedded_gru(NoGrad& ctx, const Gru& gru, const GruInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                  std::span<const int> lengths) {
  const auto layers = gru.layers();
  const std::span<const GruWeights<T, cpu>> w(layers[0]);
  lstm_detail::check_tables_current(tables, w, "nn::embedded_gru", "nn::gru_input_tables", "GRU");
  GruResult<T, cpu> r = gru_from_table<T>(ctx, std::span<const Tensor<T, AnyShape, cpu>>(tables.dirs), ids, lengths, w);
  if (layers.size() > 1) {
    const GruResult<T, cpu> u = gru_detail::run_layers<Gru::directions>(ctx, r.out, lengths, layers.subspan(1), {}, 0.0);
    r = {u.out, concat(ctx, std::vector<Var<T, AnyShape, cpu>>{r.h_n, u.h_n}, 0)};
  }
  return {r.out, r.h_n};
}
template <class Gru, class T, std::integral I, class SI>
typename Gru::Output embedded_gru(NoGrad& ctx, const Gru& gru, const GruInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                  const Lengths& lengths) {
  return embedded_gru(ctx, gru, tables, ids, lengths.values());
}

}  // namespace attn::nn
