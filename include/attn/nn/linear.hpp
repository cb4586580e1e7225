// SPDX-License-Identifier: MIT
// nn::Linear<In, Out>: y = x W^T + b over the last axis, PyTorch's layout (weight (Out, In), bias (Out)),
// the parameters of the op attn::linear (autograd/linear.hpp). Either width may be attn::dyn, given
// at construction (a vocabulary's size, a feed-forward width read from a configuration).
//   attn::nn::Linear<128, 2> head{this, "head"};   auto logits = head(ctx, pooled);   // (B, 128) -> (B, 2)
//   attn::nn::Linear<512, attn::dyn> lm_head{this, "lm_head", vocab.size()};            // (B, T, 512) -> (B, T, vocab)
//   attn::nn::Linear<attn::dyn, attn::dyn> proj{this, "proj", in, out, {.bias = false}};
#pragma once
#include <string>

#include "../autograd/linear.hpp"
#include "init.hpp"
#include "module.hpp"

namespace attn::nn {

struct LinearOptions {
  bool bias = true;
  /// Xavier uniform weights and zero bias instead of PyTorch's default uniform.
  bool xavier = false;
};

template <std::size_t In, std::size_t Out, class T = float, class B = cpu>
class Linear : public Module {
 public:
  static_assert(In > 0 && Out > 0, "nn::Linear: In and Out must be positive extents (or attn::dyn)");

  /// Both widths static.
  Linear(Module* parent, std::string name, LinearOptions opt = {})
    requires(In != dyn && Out != dyn)
      : Linear(parent, std::move(name), In, Out, opt, 0) {}
  /// A static In, Out chosen at run time (out_features > 0).
  Linear(Module* parent, std::string name, std::size_t out_features, LinearOptions opt = {})
    requires(In != dyn && Out == dyn)
      : Linear(parent, std::move(name), In, out_features, opt, 0) {}
  /// Both widths given; each static one must equal its template argument.
  Linear(Module* parent, std::string name, std::size_t in_features, std::size_t out_features, LinearOptions opt = {})
    requires(In == dyn || Out == dyn)
      : Linear(parent, std::move(name), in_features, out_features, opt, 0) {}

  void reset_parameters(Rng& rng) override {
    if (opt_.xavier) {
      init::xavier_uniform(weight, rng);
      if (opt_.bias) init::constant(bias, T(0));
    } else {
      init::torch_linear_default(weight, rng, in_);
      if (opt_.bias) init::torch_linear_default(bias, rng, in_);
    }
  }

  /// x (..., In) -> (..., Out).
  template <Context C, class S>
  auto operator()(C& ctx, const Var<T, S, B>& x) const {
    if constexpr (!std::is_same_v<S, AnyShape>) {
      static_assert(shapes::may_equal(shapes::back<S, 0>, In), "nn::Linear: the input's last extent differs from In");
    }
    if (x.rank() == 0 || x.dims().back() != in_)
      throw ShapeError("nn::Linear '" + this->name() + "': input shape " + x.dims().str() + " does not end in " + std::to_string(in_));
    return linear(ctx, x, weight, bias);
  }

  std::size_t in_features() const noexcept { return in_; }
  std::size_t out_features() const noexcept { return out_; }

  Var<T, Shape<Out, In>, B> weight;
  Var<T, Shape<Out>, B> bias;

 private:
  Linear(Module* parent, std::string name, std::size_t in, std::size_t out, LinearOptions opt, int)
      : Module(parent, std::move(name)), in_(in), out_(out), opt_(opt) {
    const std::string who = "nn::Linear '" + this->name() + "'";
    if (in == 0 || out == 0)
      throw ArgumentError(who + ": in_features and out_features must be positive, got " + std::to_string(in) + " and " + std::to_string(out));
    if (In != dyn && in != In) throw ArgumentError(who + ": in_features " + std::to_string(in) + " differs from the static In " + std::to_string(In));
    if (Out != dyn && out != Out)
      throw ArgumentError(who + ": out_features " + std::to_string(out) + " differs from the static Out " + std::to_string(Out));
    weight = register_parameter<T, Shape<Out, In>, B>("weight", {out, in}, true);
    if (opt_.bias) bias = register_parameter<T, Shape<Out>, B>("bias", {out});
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  std::size_t in_, out_;
  LinearOptions opt_;
};

}  // namespace attn::nn
