// SPDX-License-Identifier: MIT
// nn::LSTMCell<In, Hidden> and nn::GRUCell<In, Hidden>: one time step of an LSTM or a GRU over a
// batch, torch.nn.LSTMCell / torch.nn.GRUCell with their parameter names (weight_ih, weight_hh,
// bias_ih, bias_hh), for loops that feed each step's output back in (a decoder with attention over
// an encoder's states, a sampler). They run the fused ops of autograd/lstm.hpp and autograd/gru.hpp
// on one step, so their kernels, precision modes and backward are the layers'.
//   attn::nn::LSTMCell<64, 128> cell{this, "cell"};
//   auto s = cell(ctx, x_t);                  // zero state; s.h, s.c (B, 128)
//   s = cell(ctx, x_next, s);                 // the next step from s
#pragma once
#include <cmath>
#include <span>
#include <string>

#include "../autograd/gru.hpp"
#include "../autograd/lstm.hpp"
#include "../autograd/shape_ops.hpp"
#include "init.hpp"
#include "lstm.hpp"
#include "module.hpp"

namespace attn::nn {

/// Options of nn::LSTMCell and nn::GRUCell: bias = false is torch's bias=False (no bias_ih /
/// bias_hh parameters; the members hold constant zeros that get no gradient).
struct RnnCellOptions {
  bool bias = true;
};

/// An LSTM cell's state (torch's (h, c)): each (B, Hidden), either undefined for zero.
template <class T, std::size_t Hidden, class B = cpu>
struct LstmCellState {
  Var<T, Shape<dyn, Hidden>, B> h;
  Var<T, Shape<dyn, Hidden>, B> c;
};

namespace cell_detail {

template <std::size_t In, class SX>
void check_input(const Dims& x, const std::string& who) {
  if constexpr (!std::is_same_v<SX, AnyShape>) {
    static_assert(SX::rank == 2, "nn::LSTMCell / nn::GRUCell: the input must be (batch, In)");
    static_assert(shapes::may_equal(shapes::back<SX, 0>, In), "nn::LSTMCell / nn::GRUCell: the input's last extent differs from In");
  }
  if (x.n != 2 || x.v[1] != In || x.v[0] == 0)
    throw ShapeError(who + ": input shape " + x.str() + " is not (batch, " + std::to_string(In) + ") with batch >= 1");
}

template <class T, class S, class B>
void check_state(const Var<T, S, B>& v, std::size_t batch, std::size_t hidden, const std::string& who, const char* what) {
  if (v.defined() && !(v.dims() == Dims{batch, hidden}))
    shape_mismatch(who.c_str(), std::string(what) + " must be (batch, hidden)", v.dims(), Dims{batch, hidden});
}

/// The parameters of a cell with G gates, torch's: weight_ih (G·H, In), weight_hh (G·H, H), bias_ih,
/// bias_hh (G·H) (constant zeros, no parameters, with bias = false), all drawn from
/// U(-1/sqrt(H), 1/sqrt(H)).
template <std::size_t G, std::size_t In, std::size_t Hidden, class T, class B>
class CellBase : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::LSTMCell / nn::GRUCell: In and Hidden must be static, positive extents");

  CellBase(Module* parent, std::string name, RnnCellOptions opt, const char* kind) : Module(parent, std::move(name)), kind_(kind), opt_(opt) {
    weight_ih = register_parameter<T, Shape<G * Hidden, In>, B>("weight_ih", {G * Hidden, In}, true);
    weight_hh = register_parameter<T, Shape<G * Hidden, Hidden>, B>("weight_hh", {G * Hidden, Hidden}, true);
    bias_ih = bias_param("bias_ih");
    bias_hh = bias_param("bias_hh");
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }
  void reset_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt(double(Hidden));
    init::uniform(weight_ih, rng, a);
    init::uniform(weight_hh, rng, a);
    if (opt_.bias) {
      init::uniform(bias_ih, rng, a);
      init::uniform(bias_hh, rng, a);
    }
  }
  const RnnCellOptions& options() const noexcept { return opt_; }

  Var<T, Shape<G * Hidden, In>, B> weight_ih;
  Var<T, Shape<G * Hidden, Hidden>, B> weight_hh;
  /// Constant zeros (no parameters) with bias = false.
  Var<T, Shape<G * Hidden>, B> bias_ih, bias_hh;

 protected:
  /// The layer's name for messages: "nn::LSTMCell 'cell'".
  std::string who() const { return std::string(kind_) + " '" + this->name() + "'"; }
  /// Checks x (B, In) and returns B.
  template <class SX>
  std::size_t batch_of(const Var<T, SX, B>& x) const {
    check_input<In, SX>(x.dims(), who());
    return x.size(0);
  }

 private:
  Var<T, Shape<G * Hidden>, B> bias_param(const char* name) {
    return lstm_detail::bias_or_zero<T, B, Shape<G * Hidden>>(opt_.bias, [&] { return register_parameter<T, Shape<G * Hidden>, B>(name, {G * Hidden}); },
                                                              G * Hidden);
  }
  const char* kind_;
  RnnCellOptions opt_;
};

}  // namespace cell_detail

/// One LSTM step, torch.nn.LSTMCell(In, Hidden): x (B, In) and the state (h, c) (B, Hidden) each,
/// zero when undefined, to the next state. Parameters weight_ih (4H, In), weight_hh (4H, H),
/// bias_ih, bias_hh (4H), gates i, f, g, o, drawn from U(-1/sqrt(H), 1/sqrt(H)).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class LSTMCell : public cell_detail::CellBase<4, In, Hidden, T, B> {
 public:
  using State = LstmCellState<T, Hidden, B>;

  LSTMCell(Module* parent, std::string name, RnnCellOptions opt = {})
      : cell_detail::CellBase<4, In, Hidden, T, B>(parent, std::move(name), opt, "nn::LSTMCell") {}

  /// x (B, In), state {h, c} (B, Hidden) (either undefined: zero) -> the state after this step.
  template <Context C, class SX>
  State operator()(C& ctx, const Var<T, SX, B>& x, const State& state = {}) const {
    const std::size_t b = this->batch_of(x);
    cell_detail::check_state(state.h, b, Hidden, this->who(), "h");
    cell_detail::check_state(state.c, b, Hidden, this->who(), "c");
    LstmState<T, B> s;
    if (state.h.defined()) s.h0 = reshape(ctx, state.h, {1, b, Hidden});
    if (state.c.defined()) s.c0 = reshape(ctx, state.c, {1, b, Hidden});
    const PoolVector<int> ones(b, 1);
    const auto r = attn::lstm(ctx, reshape(ctx, x, {b, 1, In}), std::span<const int>(ones),
                              {this->weight_ih, this->weight_hh, this->bias_ih, this->bias_hh}, s);
    return {reshape<Shape<dyn, Hidden>>(ctx, r.h_n, {b, Hidden}), reshape<Shape<dyn, Hidden>>(ctx, r.c_n, {b, Hidden})};
  }
};

/// One GRU step, torch.nn.GRUCell(In, Hidden): x (B, In) and h (B, Hidden), zero when undefined, to
/// the next h. Parameters weight_ih (3H, In), weight_hh (3H, H), bias_ih, bias_hh (3H), gates r, z,
/// n, drawn from U(-1/sqrt(H), 1/sqrt(H)).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class GRUCell : public cell_detail::CellBase<3, In, Hidden, T, B> {
 public:
  using State = Var<T, Shape<dyn, Hidden>, B>;

  GRUCell(Module* parent, std::string name, RnnCellOptions opt = {})
      : cell_detail::CellBase<3, In, Hidden, T, B>(parent, std::move(name), opt, "nn::GRUCell") {}

  /// x (B, In), h (B, Hidden) (undefined: zero) -> h after this step (B, Hidden).
  template <Context C, class SX>
  State operator()(C& ctx, const Var<T, SX, B>& x, const State& h = {}) const {
    const std::size_t b = this->batch_of(x);
    cell_detail::check_state(h, b, Hidden, this->who(), "h");
    Var<T, AnyShape, B> h0;
    if (h.defined()) h0 = reshape(ctx, h, {1, b, Hidden});
    const PoolVector<int> ones(b, 1);
    const auto r = attn::gru(ctx, reshape(ctx, x, {b, 1, In}), std::span<const int>(ones),
                             {this->weight_ih, this->weight_hh, this->bias_ih, this->bias_hh}, h0);
    return reshape<Shape<dyn, Hidden>>(ctx, r.h_n, {b, Hidden});
  }
};

}  // namespace attn::nn
