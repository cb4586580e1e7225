// SPDX-License-Identifier: MIT
// nn::LSTM<In, Hidden> and nn::BiLSTM<In, Hidden>: single-layer LSTMs over ragged batches, matching
// torch.nn.LSTM(In, Hidden, batch_first=True[, bidirectional=True]) on a packed sequence, with its names.
//   attn::nn::BiLSTM<128, 128> rnn{this, "lstm"};   auto [y, h_n, c_n] = rnn(ctx, x, lengths);   // y (B, T, 256)
#pragma once
#include <array>
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "../autograd/dropout.hpp"
#include "../autograd/lstm.hpp"
#include "../autograd/shape_ops.hpp"
#include "../core/mask.hpp"
#include "embedding.hpp"
#include "init.hpp"
#include "module.hpp"

namespace attn::nn {

/// The result of an LSTM layer: out (B, T, Dirs*Hidden), the last layer's, zero at padded steps;
/// h_n and c_n (layers*Dirs, B, Hidden), each sample's final state per layer and direction (layer
/// 0's directions first, as torch's), in the batch's own order.
template <class T, std::size_t Dirs, std::size_t Hidden, class B = cpu>
struct LstmOutput {
  Var<T, Shape<dyn, dyn, Dirs * Hidden>, B> out;
  Var<T, Shape<dyn, dyn, Hidden>, B> h_n;
  Var<T, Shape<dyn, dyn, Hidden>, B> c_n;
};

/// Options of nn::LSTM and nn::BiLSTM, torch.nn.LSTM's num_layers and dropout.
struct LstmOptions {
  std::size_t num_layers = 1;  // stacked layers: layer k > 0 reads layer k-1's output (Dirs*Hidden wide)
  double dropout = 0;          // in training mode, on each layer's output but the last's
  /// false: torch's LSTM(bias=False), no bias_ih / bias_hh parameters in any layer (the bias members
  /// then hold constant zeros, which are no parameters and get no gradient).
  bool bias = true;
};

namespace lstm_detail {

/// A registered bias parameter, or with bias = false a constant zero (4H) that is no parameter.
template <class T, class B, class S, class Reg>
Var<T, S, B> bias_or_zero(bool bias, Reg&& reg, std::size_t n) {
  if (bias) return reg();
  return Var<T, S, B>(Tensor<T, AnyShape, B>::zeros(Dims{n}), false);
}

template <std::size_t In, class SX>
void check_input(const Dims& x) {
  if constexpr (!std::is_same_v<SX, AnyShape>) {
    static_assert(SX::rank == 3, "nn::LSTM: the input must be (batch, time, In)");
    static_assert(shapes::may_equal(shapes::back<SX, 0>, In), "nn::LSTM: the input's last extent differs from In");
  }
  if (x.n != 3 || x.v[2] != In)
    throw ShapeError("nn::LSTM: input shape " + x.str() + " is not (batch, time, " + std::to_string(In) + ")");
}

inline const LstmOptions& checked(const LstmOptions& o, const std::string& who) {
  if (o.num_layers < 1 || o.num_layers > 1024)
    throw ArgumentError(who + ": num_layers must be in [1, 1024], got " + std::to_string(o.num_layers));
  if (!(o.dropout >= 0 && o.dropout < 1)) throw ArgumentError(who + ": dropout must be in [0, 1), got " + std::to_string(o.dropout));
  return o;
}

/// A stacked LSTM's initial state must be (layers * Dirs, B, Hidden); layer k's part is rows
/// [k Dirs, (k + 1) Dirs).
template <class T, class B>
void check_state(const LstmState<T, B>& s, std::size_t rows, std::size_t batch, std::size_t hidden, const std::string& who) {
  const Dims want{rows, batch, hidden};
  if (s.h0.defined() && !(s.h0.dims() == want)) shape_mismatch(who.c_str(), "h0 must be (num_layers * directions, batch, hidden)", s.h0.dims(), want);
  if (s.c0.defined() && !(s.c0.dims() == want)) shape_mismatch(who.c_str(), "c0 must be (num_layers * directions, batch, hidden)", s.c0.dims(), want);
}
template <Context C, class T, class B>
LstmState<T, B> layer_state(C& ctx, const LstmState<T, B>& s, std::size_t layer, std::size_t dirs) {
  LstmState<T, B> out;
  if (s.h0.defined()) out.h0 = slice(ctx, s.h0, 0, layer * dirs, dirs);
  if (s.c0.defined()) out.c0 = slice(ctx, s.c0, 0, layer * dirs, dirs);
  return out;
}

/// Layers 1.. of a stacked LSTM on top of r, layer 0's result: each reads the output of the layer
/// below (after dropout p, in training), from its part of `state`; h_n and c_n of all layers
/// joined along axis 0.
template <std::size_t Dirs, Context C, class T, class B>
LstmResult<T, B> stack_layers(C& ctx, LstmResult<T, B> r, std::span<const int> lengths, std::span<const std::array<LstmWeights<T, B>, Dirs>> upper,
                              const LstmState<T, B>& state, double p) {
  if (upper.empty()) return r;
  std::vector<Var<T, AnyShape, B>> hs{r.h_n}, cs{r.c_n};
  Var<T, AnyShape, B> x = r.out;
  for (std::size_t k = 0; k < upper.size(); ++k) {
    if (p > 0) x = attn::dropout(ctx, x, p, true);
    const LstmState<T, B> s = layer_state(ctx, state, k + 1, Dirs);
    LstmResult<T, B> q;
    if constexpr (Dirs == 1) q = attn::lstm(ctx, x, lengths, upper[k][0], s);
    else q = attn::bilstm(ctx, x, lengths, upper[k][0], upper[k][1], s);
    x = q.out;
    hs.push_back(q.h_n);
    cs.push_back(q.c_n);
  }
  return {x, concat(ctx, hs, 0), concat(ctx, cs, 0)};
}

}  // namespace lstm_detail

/// Unidirectional LSTM, one layer or LstmOptions::num_layers stacked. In and Hidden are static;
/// batch and time are dynamic. Parameters: weight_ih_l0 (4H, In), weight_hh_l0 (4H, H), bias_ih_l0
/// (4H), bias_hh_l0 (4H), then the same with _l1 ... for the layers above (weight_ih_lk (4H, H)),
/// gate rows stacked i, f, g, o, all drawn from U(-1/sqrt(H), 1/sqrt(H)) (PyTorch's default);
/// LstmOptions::bias = false leaves the biases out (torch's bias=False).
/// The initial state is zero unless one is passed (attn::LstmState{h0, c0}).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class LSTM : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::LSTM: In and Hidden must be static, positive extents");
  static constexpr std::size_t directions = 1;
  using Output = LstmOutput<T, 1, Hidden, B>;

  LSTM(Module* parent, std::string name, LstmOptions opt = {})
      : Module(parent, std::move(name)), opt_(lstm_detail::checked(opt, "nn::LSTM '" + this->name() + "'")) {
    weight_ih_l0 = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0", {4 * Hidden, In}, true);
    weight_hh_l0 = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0", {4 * Hidden, Hidden}, true);
    bias_ih_l0 = bias_param("bias_ih_l0");
    bias_hh_l0 = bias_param("bias_hh_l0");
    add_upper_layers();
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  void reset_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt(double(Hidden));
    init::uniform(weight_ih_l0, rng, a);
    init::uniform(weight_hh_l0, rng, a);
    if (opt_.bias) {
      init::uniform(bias_ih_l0, rng, a);
      init::uniform(bias_hh_l0, rng, a);
    }
    for (auto& layer : upper_)
      for (auto& w : layer)
        for (auto* v : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh})
          if (opt_.bias || (v != &w.b_ih && v != &w.b_hh)) init::uniform(*v, rng, a);
  }

  /// x (B, T, In), lengths (B) each in [1, T] in any order -> out (B, T, Hidden), h_n, c_n
  /// (num_layers, B, Hidden). The initial state, as torch's lstm(x, (h_0, c_0)): state.h0, state.c0
  /// (num_layers, B, Hidden), in the batch's order; either may be undefined (zero), and so are both
  /// when no state is passed. E.g. a decoder started from an encoder's h_n, c_n.
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    lstm_detail::check_state(state, opt_.num_layers, x.size(0), Hidden, "nn::LSTM");
    const LstmState<T, B> s0 = upper_.empty() ? state : lstm_detail::layer_state(ctx, state, 0, 1);
    auto r = attn::lstm(ctx, x, lengths, {weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0}, s0);
    r = lstm_detail::stack_layers<1>(ctx, std::move(r), lengths, std::span<const std::array<LstmWeights<T, B>, 1>>(upper_), state,
                                     this->training() ? opt_.dropout : 0.0);
    return {r.out, r.h_n, r.c_n};
  }
  /// The same with lengths as an integer tensor (B), e.g. int64.
  template <Context C, class SX, std::integral I, class SL, class LB>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const Tensor<I, SL, LB>& lengths, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_detail::lengths_from_tensor(lengths, x.size(1), "nn::LSTM", "the time extent of x");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }
  /// The same with the batch described as for nn::Attention: attn::Lengths, or a KeepMask or
  /// PaddingMask whose real tokens come first in each sample.
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::LSTM");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }

  /// The parameters of layer 0's direction, for the attn::lstm functions.
  std::vector<LstmWeights<T, B>> weights() const { return {{weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0}}; }
  /// The layers above layer 0 (num_layers - 1 of them).
  std::span<const std::array<LstmWeights<T, B>, 1>> upper_layers() const { return upper_; }
  const LstmOptions& options() const noexcept { return opt_; }

  Var<T, Shape<4 * Hidden, In>, B> weight_ih_l0;
  Var<T, Shape<4 * Hidden, Hidden>, B> weight_hh_l0;
  Var<T, Shape<4 * Hidden>, B> bias_ih_l0, bias_hh_l0;

 private:
  /// A bias parameter, or (bias = false) a constant zero that is none.
  template <class S = Shape<4 * Hidden>>
  Var<T, S, B> bias_param(const std::string& name) {
    return lstm_detail::bias_or_zero<T, B, S>(opt_.bias, [&] { return register_parameter<T, S, B>(name, {4 * Hidden}); }, 4 * Hidden);
  }
  void add_upper_layers() {
    for (std::size_t k = 1; k < opt_.num_layers; ++k) {
      const std::string l = "_l" + std::to_string(k);
      upper_.push_back({LstmWeights<T, B>{register_parameter<T, AnyShape, B>("weight_ih" + l, {4 * Hidden, Hidden}, true),
                                          register_parameter<T, AnyShape, B>("weight_hh" + l, {4 * Hidden, Hidden}, true),
                                          bias_param<AnyShape>("bias_ih" + l), bias_param<AnyShape>("bias_hh" + l)}});
    }
  }
  LstmOptions opt_;
  std::vector<std::array<LstmWeights<T, B>, 1>> upper_;
};

/// Bidirectional LSTM, one layer or LstmOptions::num_layers stacked (layer k > 0 reads the layer
/// below's 2*Hidden outputs: weight_ih_lk and weight_ih_lk_reverse (4H, 2H)): out (B, T, 2*Hidden), the
/// last layer's, holds the forward direction in columns
/// [0, Hidden) and the reverse one, which starts at each sample's own last real token, in
/// [Hidden, 2*Hidden). Parameters as LSTM, then the same four with the suffix "_reverse".
/// With two or more threads the two directions run concurrently.
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class BiLSTM : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::BiLSTM: In and Hidden must be static, positive extents");
  static constexpr std::size_t directions = 2;
  using Output = LstmOutput<T, 2, Hidden, B>;

  BiLSTM(Module* parent, std::string name, LstmOptions opt = {})
      : Module(parent, std::move(name)), opt_(lstm_detail::checked(opt, "nn::BiLSTM '" + this->name() + "'")) {
    weight_ih_l0 = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0", {4 * Hidden, In}, true);
    weight_hh_l0 = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0", {4 * Hidden, Hidden}, true);
    bias_ih_l0 = bias_param("bias_ih_l0");
    bias_hh_l0 = bias_param("bias_hh_l0");
    weight_ih_l0_reverse = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0_reverse", {4 * Hidden, In}, true);
    weight_hh_l0_reverse = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0_reverse", {4 * Hidden, Hidden}, true);
    bias_ih_l0_reverse = bias_param("bias_ih_l0_reverse");
    bias_hh_l0_reverse = bias_param("bias_hh_l0_reverse");
    add_upper_layers();
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  void reset_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt(double(Hidden));
    // Registration order, as torch draws them.
    init::uniform(weight_ih_l0, rng, a);
    init::uniform(weight_hh_l0, rng, a);
    if (opt_.bias)
      for (auto* v : {&bias_ih_l0, &bias_hh_l0}) init::uniform(*v, rng, a);
    init::uniform(weight_ih_l0_reverse, rng, a);
    init::uniform(weight_hh_l0_reverse, rng, a);
    if (opt_.bias)
      for (auto* v : {&bias_ih_l0_reverse, &bias_hh_l0_reverse}) init::uniform(*v, rng, a);
    for (auto& layer : upper_)
      for (auto& w : layer)
        for (auto* v : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh})
          if (opt_.bias || (v != &w.b_ih && v != &w.b_hh)) init::uniform(*v, rng, a);
  }

  /// x (B, T, In), lengths (B) each in [1, T] in any order -> out (B, T, 2*Hidden), h_n, c_n
  /// (2 num_layers, B, Hidden). The initial state: state.h0, state.c0 (2 num_layers, B, Hidden), each
  /// layer's forward direction first (torch's layout); either may be undefined (zero), and so are
  /// both when no state is passed.
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    lstm_detail::check_state(state, 2 * opt_.num_layers, x.size(0), Hidden, "nn::BiLSTM");
    const LstmState<T, B> s0 = upper_.empty() ? state : lstm_detail::layer_state(ctx, state, 0, 2);
    auto r = attn::bilstm(ctx, x, lengths, {weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0},
                          {weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse, bias_hh_l0_reverse}, s0);
    r = lstm_detail::stack_layers<2>(ctx, std::move(r), lengths, std::span<const std::array<LstmWeights<T, B>, 2>>(upper_), state,
                                     this->training() ? opt_.dropout : 0.0);
    return {r.out, r.h_n, r.c_n};
  }
  /// The same with lengths as an integer tensor (B), e.g. int64.
  template <Context C, class SX, std::integral I, class SL, class LB>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const Tensor<I, SL, LB>& lengths, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_detail::lengths_from_tensor(lengths, x.size(1), "nn::BiLSTM", "the time extent of x");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }
  /// The same with the batch described as for nn::Attention: attn::Lengths, or a KeepMask or
  /// PaddingMask whose real tokens come first in each sample.
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask, const LstmState<T, B>& state = {}) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::BiLSTM");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }

  /// The parameters of layer 0's directions (forward, reverse), for the attn::lstm functions.
  std::vector<LstmWeights<T, B>> weights() const {
    return {{weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0},
            {weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse, bias_hh_l0_reverse}};
  }
  /// The layers above layer 0 (num_layers - 1 of them), forward and reverse direction each.
  std::span<const std::array<LstmWeights<T, B>, 2>> upper_layers() const { return upper_; }
  const LstmOptions& options() const noexcept { return opt_; }

  Var<T, Shape<4 * Hidden, In>, B> weight_ih_l0, weight_ih_l0_reverse;
  Var<T, Shape<4 * Hidden, Hidden>, B> weight_hh_l0, weight_hh_l0_reverse;
  Var<T, Shape<4 * Hidden>, B> bias_ih_l0, bias_hh_l0, bias_ih_l0_reverse, bias_hh_l0_reverse;

 private:
  /// A bias parameter, or (bias = false) a constant zero that is none.
  template <class S = Shape<4 * Hidden>>
  Var<T, S, B> bias_param(const std::string& name) {
    return lstm_detail::bias_or_zero<T, B, S>(opt_.bias, [&] { return register_parameter<T, S, B>(name, {4 * Hidden}); }, 4 * Hidden);
  }
  void add_upper_layers() {
    for (std::size_t k = 1; k < opt_.num_layers; ++k) {
      std::array<LstmWeights<T, B>, 2> layer;
      for (int d = 0; d < 2; ++d) {
        const std::string l = "_l" + std::to_string(k) + (d ? "_reverse" : "");
        layer[std::size_t(d)] = {register_parameter<T, AnyShape, B>("weight_ih" + l, {4 * Hidden, 2 * Hidden}, true),
                                 register_parameter<T, AnyShape, B>("weight_hh" + l, {4 * Hidden, Hidden}, true),
                                 bias_param<AnyShape>("bias_ih" + l), bias_param<AnyShape>("bias_hh" + l)};
      }
      upper_.push_back(layer);
    }
  }
  LstmOptions opt_;
  std::vector<std::array<LstmWeights<T, B>, 2>> upper_;
};

/// Inference for an Embedding followed by a recurrent layer (nn::LSTM, nn::BiLSTM, nn::GRU,
/// nn::BiGRU): each direction's input projection of every embedding row, E W_ih^T (V, G·H),
/// computed once, so that the pair runs as a row gather and the recurrence (attn::lstm_from_table,
/// attn::gru_from_table) with no input GEMM. The tables are copies: they remember which weights they
/// were computed from and how often those had been written (VarData::value_writes), and
/// embedded_lstm / embedded_gru throw ArgumentError for tables of another layer or once an optimizer
/// step, a load or an initialiser has changed the embedding or a weight_ih since.
///   const auto tables = nn::lstm_input_tables(embed, lstm);              // after training or loading
///   auto [y, h_n, c_n] = nn::embedded_lstm(no_grad, lstm, tables, ids, lengths);
template <class T>
struct RnnInputTables {
  std::vector<Tensor<T, AnyShape, cpu>> dirs;  // (V, G·H) per direction of the first layer
  Precision precision = Precision::fp32;        // the products' precision when they were built
  /// The weights the tables were computed from, with their write counts then: the embedding's
  /// table first, then each direction's weight_ih.
  struct Source {
    std::shared_ptr<const VarData<T, cpu>> var;
    std::uint64_t writes = 0;
  };
  std::vector<Source> sources;
};
template <class T>
using LstmInputTables = RnnInputTables<T>;

namespace lstm_detail {
/// The tables of `embedding` and the first layer's directions w, built by table(E, w_ih).
template <class T, std::size_t In, class W, class Table>
RnnInputTables<T> input_tables(const Embedding<In, T, cpu>& embedding, std::span<const W> w, Table&& table) {
  RnnInputTables<T> t;
  t.precision = ::attn::detail::lstm_precision<T, cpu>();
  t.sources.push_back({embedding.weight.data(), embedding.weight.data()->value_writes});
  for (const auto& wd : w) {
    t.dirs.push_back(table(embedding.weight.erased(), wd.w_ih));
    t.sources.push_back({wd.w_ih.data(), wd.w_ih.data()->value_writes});
  }
  return t;
}

/// Throws unless the tables were built (by `builder`) from the directions w, under this precision,
/// and neither the embedding nor a weight_ih has changed since. who: "nn::embedded_lstm" ...; kind:
/// "LSTM" or "GRU".
template <class T, class W>
void check_tables_current(const RnnInputTables<T>& tables, std::span<const W> w, const char* who, const char* builder, const char* kind) {
  const std::string op = who;
  if (tables.sources.size() != w.size() + 1)
    throw ArgumentError(op + ": the input tables do not record their weights (build them with " + builder + ")");
  for (std::size_t d = 0; d < w.size(); ++d)
    if (tables.sources[d + 1].var != w[d].w_ih.data())
      throw ArgumentError(op + ": the input tables were built from another " + kind + "'s weights (direction " + std::to_string(d) + ")");
  for (std::size_t k = 0; k < tables.sources.size(); ++k)
    if (tables.sources[k].var->value_writes != tables.sources[k].writes)
      throw ArgumentError(op + ": the input tables are stale: " +
                          (k == 0 ? std::string("the embedding table") : "weight_ih of direction " + std::to_string(k - 1)) +
                          " has changed since " + builder + " (build the tables again)");
  if (tables.precision != ::attn::detail::lstm_precision<T, cpu>())
    throw ArgumentError(op + ": the input tables were built under Precision::" + precision_name(tables.precision) + ", this call runs under " +
                        precision_name(::attn::detail::lstm_precision<T, cpu>()) + " (build them again under this precision)");
}
}  // namespace lstm_detail

template <std::size_t In, class T, class Lstm>
LstmInputTables<T> lstm_input_tables(const Embedding<In, T, cpu>& embedding, const Lstm& lstm) {
  const auto w = lstm.weights();
  return lstm_detail::input_tables(embedding, std::span<const LstmWeights<T, cpu>>(w), [](const auto& e, const auto& w_ih) {
    return lstm_input_table<T>(e, w_ih);
  });
}

/// lstm(ctx, embedding(ctx, ids), lengths) in inference, from the tables: the same out, h_n and c_n
/// up to rounding. ids (B, T); lengths (B), each in [1, T]. Throws ArgumentError when the tables are
/// stale or belong to another LSTM (see RnnInputTables).
template <class Lstm, class T, std::integral I, class SI>
typename Lstm::Output embedded_lstm(NoGrad& ctx, const Lstm& lstm, const LstmInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                    std::span<const int> lengths) {
  const auto w = lstm.weights();
  lstm_detail::check_tables_current(tables, std::span<const LstmWeights<T, cpu>>(w), "nn::embedded_lstm", "nn::lstm_input_tables", "LSTM");
  auto r = lstm_from_table<T>(ctx, std::span<const Tensor<T, AnyShape, cpu>>(tables.dirs), ids, lengths,
                              std::span<const LstmWeights<T, cpu>>(w));
  r = lstm_detail::stack_layers<Lstm::directions>(ctx, std::move(r), lengths, lstm.upper_layers(), {}, 0.0);  // layers 1.., computed
  return {r.out, r.h_n, r.c_n};
}
template <class Lstm, class T, std::integral I, class SI>
typename Lstm::Output embedded_lstm(NoGrad& ctx, const Lstm& lstm, const LstmInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                    const Lengths& lengths) {
  return embedded_lstm(ctx, lstm, tables, ids, lengths.values());
}

}  // namespace attn::nn
