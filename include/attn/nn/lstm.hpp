// SPDX-License-Identifier: MIT
// nn::LSTM<In, Hidden> and nn::BiLSTM<In, Hidden>: single-layer LSTMs over ragged batches, matching
// torch.nn.LSTM(In, Hidden, batch_first=True[, bidirectional=True]) on a packed sequence, with its names.
//   attn::nn::BiLSTM<128, 128> rnn{this, "lstm"};   auto [y, h_n, c_n] = rnn(ctx, x, lengths);   // y (B, T, 256)
#pragma once
#include <cmath>
#include <concepts>
#include <span>
#include <vector>

#include "../autograd/lstm.hpp"
#include "../core/mask.hpp"
#include "embedding.hpp"
#include "init.hpp"
#include "module.hpp"

namespace attn::nn {

/// The result of an LSTM layer: out (B, T, Dirs*Hidden), zero at padded steps; h_n and c_n
/// (Dirs, B, Hidden), each sample's final state per direction, in the batch's own order.
template <class T, std::size_t Dirs, std::size_t Hidden, class B = cpu>
struct LstmOutput {
  Var<T, Shape<dyn, dyn, Dirs * Hidden>, B> out;
  Var<T, Shape<Dirs, dyn, Hidden>, B> h_n;
  Var<T, Shape<Dirs, dyn, Hidden>, B> c_n;
};

namespace lstm_detail {

template <std::size_t In, class SX>
void check_input(const Dims& x) {
  if constexpr (!std::is_same_v<SX, AnyShape>) {
    static_assert(SX::rank == 3, "nn::LSTM: the input must be (batch, time, In)");
    static_assert(shapes::may_equal(shapes::back<SX, 0>, In), "nn::LSTM: the input's last extent differs from In");
  }
  if (x.n != 3 || x.v[2] != In)
    throw ShapeError("nn::LSTM: input shape " + x.str() + " is not (batch, time, " + std::to_string(In) + ")");
}

}  // namespace lstm_detail

/// One-layer unidirectional LSTM. In and Hidden are static; batch and time are dynamic.
/// Parameters: weight_ih_l0 (4H, In), weight_hh_l0 (4H, H), bias_ih_l0 (4H), bias_hh_l0 (4H),
/// gate rows stacked i, f, g, o, all drawn from U(-1/sqrt(H), 1/sqrt(H)) (PyTorch's default).
/// The initial state is zero unless one is passed (attn::LstmState{h0, c0}).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class LSTM : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::LSTM: In and Hidden must be static, positive extents");
  static constexpr std::size_t directions = 1;
  using Output = LstmOutput<T, 1, Hidden, B>;

  LSTM(Module* parent, std::string name) : Module(parent, std::move(name)) {
    weight_ih_l0 = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0", {4 * Hidden, In}, true);
    weight_hh_l0 = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0", {4 * Hidden, Hidden}, true);
    bias_ih_l0 = register_parameter<T, Shape<4 * Hidden>, B>("bias_ih_l0", {4 * Hidden});
    bias_hh_l0 = register_parameter<T, Shape<4 * Hidden>, B>("bias_hh_l0", {4 * Hidden});
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  void reset_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt(double(Hidden));
    init::uniform(weight_ih_l0, rng, a);
    init::uniform(weight_hh_l0, rng, a);
    init::uniform(bias_ih_l0, rng, a);
    init::uniform(bias_hh_l0, rng, a);
  }

  /// x (B, T, In), lengths (B) each in [1, T] in any order -> out (B, T, Hidden), h_n, c_n (1, B, Hidden).
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths) const {
    return (*this)(ctx, x, lengths, LstmState<T, B>{});
  }
  /// From an initial state, as torch's lstm(x, (h_0, c_0)): state.h0, state.c0 (1, B, Hidden), in the
  /// batch's order; either may be undefined (zero). E.g. a decoder started from an encoder's h_n, c_n.
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const LstmState<T, B>& state) const {
    lstm_detail::check_input<In, SX>(x.dims());
    auto r = attn::lstm(ctx, x, lengths, {weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0}, state);
    return {r.out, r.h_n, r.c_n};
  }
  /// The same with lengths as an integer tensor (B), e.g. int64.
  template <Context C, class SX, std::integral I, class SL, class LB>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const Tensor<I, SL, LB>& lengths) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_detail::lengths_from_tensor(lengths, x.size(1), "nn::LSTM", "the time extent of x");
    return (*this)(ctx, x, std::span<const int>(l));
  }
  /// The same with the batch described as for nn::Attention: attn::Lengths, or a KeepMask or
  /// PaddingMask whose real tokens come first in each sample.
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::LSTM");
    return (*this)(ctx, x, std::span<const int>(l));
  }
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask, const LstmState<T, B>& state) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::LSTM");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }

  /// The parameters of each direction, for the attn::lstm functions.
  std::vector<LstmWeights<T, B>> weights() const { return {{weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0}}; }

  Var<T, Shape<4 * Hidden, In>, B> weight_ih_l0;
  Var<T, Shape<4 * Hidden, Hidden>, B> weight_hh_l0;
  Var<T, Shape<4 * Hidden>, B> bias_ih_l0, bias_hh_l0;
};

/// One-layer bidirectional LSTM: out (B, T, 2*Hidden) holds the forward direction in columns
/// [0, Hidden) and the reverse one, which starts at each sample's own last real token, in
/// [Hidden, 2*Hidden). Parameters as LSTM, then the same four with the suffix "_reverse".
/// With two or more threads the two directions run concurrently.
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class BiLSTM : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::BiLSTM: In and Hidden must be static, positive extents");
  static constexpr std::size_t directions = 2;
  using Output = LstmOutput<T, 2, Hidden, B>;

  BiLSTM(Module* parent, std::string name) : Module(parent, std::move(name)) {
    weight_ih_l0 = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0", {4 * Hidden, In}, true);
    weight_hh_l0 = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0", {4 * Hidden, Hidden}, true);
    bias_ih_l0 = register_parameter<T, Shape<4 * Hidden>, B>("bias_ih_l0", {4 * Hidden});
    bias_hh_l0 = register_parameter<T, Shape<4 * Hidden>, B>("bias_hh_l0", {4 * Hidden});
    weight_ih_l0_reverse = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih_l0_reverse", {4 * Hidden, In}, true);
    weight_hh_l0_reverse = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh_l0_reverse", {4 * Hidden, Hidden}, true);
    bias_ih_l0_reverse = register_parameter<T, Shape<4 * Hidden>, B>("bias_ih_l0_reverse", {4 * Hidden});
    bias_hh_l0_reverse = register_parameter<T, Shape<4 * Hidden>, B>("bias_hh_l0_reverse", {4 * Hidden});
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
    init::uniform(bias_ih_l0, rng, a);
    init::uniform(bias_hh_l0, rng, a);
    init::uniform(weight_ih_l0_reverse, rng, a);
    init::uniform(weight_hh_l0_reverse, rng, a);
    init::uniform(bias_ih_l0_reverse, rng, a);
    init::uniform(bias_hh_l0_reverse, rng, a);
  }

  /// x (B, T, In), lengths (B) each in [1, T] in any order -> out (B, T, 2*Hidden), h_n, c_n (2, B, Hidden).
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths) const {
    return (*this)(ctx, x, lengths, LstmState<T, B>{});
  }
  /// From an initial state: state.h0, state.c0 (2, B, Hidden), the forward direction's first (torch's
  /// layout); either may be undefined (zero).
  template <Context C, class SX>
  Output operator()(C& ctx, const Var<T, SX, B>& x, std::span<const int> lengths, const LstmState<T, B>& state) const {
    lstm_detail::check_input<In, SX>(x.dims());
    auto r = attn::bilstm(ctx, x, lengths, {weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0},
                          {weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse, bias_hh_l0_reverse}, state);
    return {r.out, r.h_n, r.c_n};
  }
  /// The same with lengths as an integer tensor (B), e.g. int64.
  template <Context C, class SX, std::integral I, class SL, class LB>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const Tensor<I, SL, LB>& lengths) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_detail::lengths_from_tensor(lengths, x.size(1), "nn::LSTM", "the time extent of x");
    return (*this)(ctx, x, std::span<const int>(l));
  }
  /// The same with the batch described as for nn::Attention: attn::Lengths, or a KeepMask or
  /// PaddingMask whose real tokens come first in each sample.
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::BiLSTM");
    return (*this)(ctx, x, std::span<const int>(l));
  }
  template <Context C, class SX, TokenMask M>
  Output operator()(C& ctx, const Var<T, SX, B>& x, const M& mask, const LstmState<T, B>& state) const {
    lstm_detail::check_input<In, SX>(x.dims());
    const PoolVector<int> l = mask_lengths(mask, x.size(0), x.size(1), "nn::BiLSTM");
    return (*this)(ctx, x, std::span<const int>(l), state);
  }

  /// The parameters of each direction (forward, reverse), for the attn::lstm functions.
  std::vector<LstmWeights<T, B>> weights() const {
    return {{weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0},
            {weight_ih_l0_reverse, weight_hh_l0_reverse, bias_ih_l0_reverse, bias_hh_l0_reverse}};
  }

  Var<T, Shape<4 * Hidden, In>, B> weight_ih_l0, weight_ih_l0_reverse;
  Var<T, Shape<4 * Hidden, Hidden>, B> weight_hh_l0, weight_hh_l0_reverse;
  Var<T, Shape<4 * Hidden>, B> bias_ih_l0, bias_hh_l0, bias_ih_l0_reverse, bias_hh_l0_reverse;
};

/// Inference for an Embedding followed by an LSTM or BiLSTM: each direction's input projection of
/// every embedding row, E W_ih^T (V, 4H), computed once, so that the pair runs as a row gather and
/// the recurrence (attn::lstm_from_table) with no input GEMM. The tables are copies: they remember
/// which weights they were computed from and how often those had been written (VarData::
/// value_writes), and embedded_lstm throws ArgumentError for tables of another LSTM or once an
/// optimizer step, a load or an initialiser has changed the embedding or a weight_ih since.
///   const auto tables = nn::lstm_input_tables(embed, lstm);              // after training or loading
///   auto [y, h_n, c_n] = nn::embedded_lstm(no_grad, lstm, tables, ids, lengths);
template <class T>
struct LstmInputTables {
  std::vector<Tensor<T, AnyShape, cpu>> dirs;  // (V, 4H) per direction
  Precision precision = Precision::fp32;        // the products' precision when they were built
  /// The weights the tables were computed from, with their write counts then: the embedding's
  /// table first, then each direction's weight_ih.
  struct Source {
    std::shared_ptr<const VarData<T, cpu>> var;
    std::uint64_t writes = 0;
  };
  std::vector<Source> sources;
};

namespace lstm_detail {
template <class T>
void check_tables_current(const LstmInputTables<T>& tables, std::span<const LstmWeights<T, cpu>> w) {
  if (tables.sources.size() != w.size() + 1)
    throw ArgumentError("nn::embedded_lstm: the input tables do not record their weights (build them with nn::lstm_input_tables)");
  for (std::size_t d = 0; d < w.size(); ++d)
    if (tables.sources[d + 1].var != w[d].w_ih.data())
      throw ArgumentError("nn::embedded_lstm: the input tables were built from another LSTM's weights (direction " + std::to_string(d) + ")");
  for (std::size_t k = 0; k < tables.sources.size(); ++k)
    if (tables.sources[k].var->value_writes != tables.sources[k].writes)
      throw ArgumentError("nn::embedded_lstm: the input tables are stale: " +
                       (k == 0 ? std::string("the embedding table") : "weight_ih of direction " + std::to_string(k - 1)) +
                       " has changed since nn::lstm_input_tables (build the tables again)");
}
}  // namespace lstm_detail

template <std::size_t In, class T, class Lstm>
LstmInputTables<T> lstm_input_tables(const Embedding<In, T, cpu>& embedding, const Lstm& lstm) {
  LstmInputTables<T> t;
  t.precision = ::attn::detail::lstm_precision<T, cpu>();
  t.sources.push_back({embedding.weight.data(), embedding.weight.data()->value_writes});
  for (const auto& w : lstm.weights()) {
    t.dirs.push_back(lstm_input_table<T>(embedding.weight.erased(), w.w_ih));
    t.sources.push_back({w.w_ih.data(), w.w_ih.data()->value_writes});
  }
  return t;
}

/// lstm(ctx, embedding(ctx, ids), lengths) in inference, from the tables: the same out, h_n and c_n
/// up to rounding. ids (B, T); lengths (B), each in [1, T]. Throws ArgumentError when the tables are
/// stale or belong to another LSTM (see LstmInputTables).
template <class Lstm, class T, std::integral I, class SI>
typename Lstm::Output embedded_lstm(NoGrad& ctx, const Lstm& lstm, const LstmInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                    std::span<const int> lengths) {
  const auto w = lstm.weights();
  lstm_detail::check_tables_current(tables, std::span<const LstmWeights<T, cpu>>(w));
  if (tables.precision != ::attn::detail::lstm_precision<T, cpu>())
    throw ArgumentError(std::string("nn::embedded_lstm: the input tables were built under Precision::") + precision_name(tables.precision) +
                        ", this call runs under " + precision_name(::attn::detail::lstm_precision<T, cpu>()) +
                        " (build them again under this precision)");
  auto r = lstm_from_table<T>(ctx, std::span<const Tensor<T, AnyShape, cpu>>(tables.dirs), ids, lengths,
                              std::span<const LstmWeights<T, cpu>>(w));
  return {r.out, r.h_n, r.c_n};
}
template <class Lstm, class T, std::integral I, class SI>
typename Lstm::Output embedded_lstm(NoGrad& ctx, const Lstm& lstm, const LstmInputTables<T>& tables, const Tensor<I, SI, cpu>& ids,
                                    const Lengths& lengths) {
  return embedded_lstm(ctx, lstm, tables, ids, lengths.values());
}

}  // namespace attn::nn
