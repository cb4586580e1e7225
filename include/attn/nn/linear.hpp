// SPDX-License-Identifier: MIT
// nn::Linear<In, Out>: y = x W^T + b over the last axis, PyTorch's layout (weight (Out, In), bias (Out)),
// the parameters of the op attn::linear (autograd/linear.hpp).
//   attn::nn::Linear<128, 2> head{this, "head"};   auto logits = head(ctx, pooled);   // (B, 128) -> (B, 2)
#pragma once
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
  static_assert(In > 0 && Out > 0 && In != dyn && Out != dyn, "nn::Linear: In and Out must be static, positive extents");

  Linear(Module* parent, std::string name, LinearOptions opt = {}) : Module(parent, std::move(name)), opt_(opt) {
    weight = register_parameter<T, Shape<Out, In>, B>("weight", {Out, In}, true);
    if (opt_.bias) bias = register_parameter<T, Shape<Out>, B>("bias", {Out});
    if (init_on_construction()) {
      Rng rng(name_seed(this->seed_name()));
      reset_parameters(rng);
    }
  }

  void reset_parameters(Rng& rng) override {
    if (opt_.xavier) {
      init::xavier_uniform(weight, rng);
      if (opt_.bias) init::constant(bias, T(0));
    } else {
      init::torch_linear_default(weight, rng, In);
      if (opt_.bias) init::torch_linear_default(bias, rng, In);
    }
  }

  /// x (..., In) -> (..., Out).
  template <Context C, class S>
  auto operator()(C& ctx, const Var<T, S, B>& x) const {
    if constexpr (!std::is_same_v<S, AnyShape>) {
      static_assert(shapes::may_equal(shapes::back<S, 0>, In), "nn::Linear: the input's last extent differs from In");
    }
    if (x.rank() == 0 || x.dims().back() != In)
      throw ShapeError("nn::Linear: input shape " + x.dims().str() + " does not end in " + std::to_string(In));
    return linear(ctx, x, weight, bias);
  }

  Var<T, Shape<Out, In>, B> weight;
  Var<T, Shape<Out>, B> bias;

 private:
  LinearOptions opt_;
};

}  // namespace attn::nn
