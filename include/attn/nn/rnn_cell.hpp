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

/// torch's init of a cell: every parameter from U(-1/sqrt(H), 1/sqrt(H)), the biases only when present.
template <class WI, class WH, class BI, class BH>
void reset(Rng& rng, std::size_t hidden, bool bias, WI& w_ih, WH& w_hh, BI& b_ih, BH& b_hh) {
  const double a = 1.0 / std::sqrt(double(hidden));
  init::uniform(w_ih, rng, a);
  init::uniform(w_hh, rng, a);
  if (bias) {
    init::uniform(b_ih, rng, a);
    init::uniform(b_hh, rng, a);
  }
}

}  // namespace cell_detail

/// One LSTM step, torch.nn.LSTMCell(In, Hidden): x (B, In) and the state (h, c) (B, Hidden) each,
/// zero when undefined, to the next state. Parameters weight_ih (4H, In), weight_hh (4H, H),
/// bias_ih, bias_hh (4H), gates i, f, g, o, drawn from U(-1/sqrt(H), 1/sqrt(H)).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class LSTMCell : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::LSTMCell: In and Hidden must be static, positive extents");
  using State = LstmCellState<T, Hidden, B>;

  LSTMCell(Module* parent, std::string name, RnnCellOptions opt = {}) : Module(parent, std::move(name)), opt_(opt) {
    weight_ih = register_parameter<T, Shape<4 * Hidden, In>, B>("weight_ih", {4 * Hidden, In}, true);
    weight_hh = register_parameter<T, Shape<4 * Hidden, Hidden>, B>("weight_hh", {4 * Hidden, Hidden}, true);
    bias_ih = bias_param("bias_ih");
    bias_hh = bias_param("bias_hh");
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }
  void reset_parameters(Rng& rng) override { cell_detail::reset(rng, Hidden, opt_.bias, weight_ih, weight_hh, bias_ih, bias_hh); }

  /// x (B, In), state {h, c} (B, Hidden) (either undefined: zero) -> the state after this step.
  template <Context C, class SX>
  State operator()(C& ctx, const Var<T, SX, B>& x, const State& state = {}) const {
    const std::string who = "nn::LSTMCell '" + this->name() + "'";
    cell_detail::check_input<In, SX>(x.dims(), who);
    const std::size_t b = x.size(0);
    cell_detail::check_state(state.h, b, Hidden, who, "h");
    cell_detail::check_state(state.c, b, Hidden, who, "c");
    LstmState<T, B> s;
    if (state.h.defined()) s.h0 = reshape(ctx, state.h, {1, b, Hidden});
    if (state.c.defined()) s.c0 = reshape(ctx, state.c, {1, b, Hidden});
    const PoolVector<int> ones(b, 1);
    const auto r = attn::lstm(ctx, reshape(ctx, x, {b, 1, In}), std::span<const int>(ones),
                              {weight_ih, weight_hh, bias_ih, bias_hh}, s);
    return {reshape<Shape<dyn, Hidden>>(ctx, r.h_n, {b, Hidden}), reshape<Shape<dyn, Hidden>>(ctx, r.c_n, {b, Hidden})};
  }

  const RnnCellOptions& options() const noexcept { return opt_; }

  Var<T, Shape<4 * Hidden, In>, B> weight_ih;
  Var<T, Shape<4 * Hidden, Hidden>, B> weight_hh;
  /// Constant zeros (no parameters) with bias = false.
  Var<T, Shape<4 * Hidden>, B> bias_ih, bias_hh;

 private:
  Var<T, Shape<4 * Hidden>, B> bias_param(const char* name) {
    return lstm_detail::bias_or_zero<T, B, Shape<4 * Hidden>>(opt_.bias, [&] { return register_parameter<T, Shape<4 * Hidden>, B>(name, {4 * Hidden}); },
                                                          4 * Hidden);
  }
  RnnCellOptions opt_;
};

/// One GRU step, torch.nn.GRUCell(In, Hidden): x (B, In) and h (B, Hidden), zero when undefined, to
/// the next h. Parameters weight_ih (3H, In), weight_hh (3H, H), bias_ih, bias_hh (3H), gates r, z,
/// n, drawn from U(-1/sqrt(H), 1/sqrt(H)).
template <std::size_t In, std::size_t Hidden, class T = float, class B = cpu>
class GRUCell : public Module {
 public:
  static_assert(In > 0 && Hidden > 0 && In != dyn && Hidden != dyn, "nn::GRUCell: In and Hidden must be static, positive extents");
  using State = Var<T, Shape<dyn, Hidden>, B>;

  GRUCell(Module* parent, std::string name, RnnCellOptions opt = {}) : Module(parent, std::move(name)), opt_(opt) {
    weight_ih = register_parameter<T, Shape<3 * Hidden, In>, B>("weight_ih", {3 * Hidden, In}, true);
    weight_hh = register_parameter<T, Shape<3 * Hidden, Hidden>, B>("weight_hh", {3 * Hidden, Hidden}, true);
    bias_ih = bias_param("bias_ih");
    bias_hh = bias_param("bias_hh");
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }
  void reset_parameters(Rng& rng) override { cell_detail::reset(rng, Hidden, opt_.bias, weight_ih, weight_hh, bias_ih, bias_hh); }

  /// x (B, In), h (B, Hidden) (undefined: zero) -> h after this step (B, Hidden).
  template <Context C, class SX>
  State operator()(C& ctx, const Var<T, SX, B>& x, const State& h = {}) const {
    const std::string who = "nn::GRUCell '" + this->name() + "'";
    cell_detail::check_input<In, SX>(x.dims(), who);
    const std::size_t b = x.size(0);
    cell_detail::check_state(h, b, Hidden, who, "h");
    Var<T, AnyShape, B> h0;
    if (h.defined()) h0 = reshape(ctx, h, {1, b, Hidden});
    const PoolVector<int> ones(b, 1);
    const auto r = attn::gru(ctx, reshape(ctx, x, {b, 1, In}), std::span<const int>(ones),
                             {weight_ih, weight_hh, bias_ih, bias_hh}, h0);
    return reshape<Shape<dyn, Hidden>>(ctx, r.h_n, {b, Hidden});
  }

  const RnnCellOptions& options() const noexcept { return opt_; }

  Var<T, Shape<3 * Hidden, In>, B> weight_ih;
  Var<T, Shape<3 * Hidden, Hidden>, B> weight_hh;
  /// Constant zeros (no parameters) with bias = false.
  Var<T, Shape<3 * Hidden>, B> bias_ih, bias_hh;

 private:
  Var<T, Shape<3 * Hidden>, B> bias_param(const char* name) {
    return lstm_detail::bias_or_zero<T, B, Shape<3 * Hidden>>(opt_.bias, [&] { return register_parameter<T, Shape<3 * Hidden>, B>(name, {3 * Hidden}); },
                                                          3 * Hidden);
  }
  RnnCellOptions opt_;
};

}  // namespace attn::nn
