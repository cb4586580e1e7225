// SPDX-License-Identifier: MIT
// nn::LayerNorm<Dim>: normalisation over the last axis with learned scale and shift (PyTorch's
// names "weight" and "bias", initialised to ones and zeros; without the bias, torch's
// LayerNorm(bias=False), as the encoder's norms with bias = false; without either,
// LayerNorm(elementwise_affine=False)); nn::RMSNorm<Dim>: torch's RMSNorm, a scale ("weight",
// ones) and no centring or shift.
//   attn::nn::LayerNorm<128> norm{this, "norm"};   auto y = norm(ctx, x);   // (..., 128)
//   attn::nn::LayerNorm<attn::dyn> norm{this, "norm", width};                  // a width chosen at run time
//   attn::nn::RMSNorm<128> rms{this, "rms", 1e-6};                              // eps omitted: the type's epsilon
#pragma once
#include <limits>
#include <optional>

#include "functional.hpp"
#include "init.hpp"
#include "module.hpp"

namespace attn::nn {

template <std::size_t Dim, class T = float, class B = cpu>
class LayerNorm : public Module {
 public:
  static_assert(Dim > 0, "nn::LayerNorm: Dim must be a positive extent (or attn::dyn)");
  /// elementwise_affine = false: no parameters at all (torch ignores bias then, as here).
  LayerNorm(Module* parent, std::string name, double eps = 1e-5, bool bias = true, bool elementwise_affine = true)
    requires(Dim != dyn)
      : LayerNorm(parent, std::move(name), Dim, eps, bias, elementwise_affine, 0) {}
  /// Dim = dyn: the normalised width (torch's normalized_shape) given here.
  LayerNorm(Module* parent, std::string name, std::size_t normalized_size, double eps = 1e-5, bool bias = true, bool elementwise_affine = true)
    requires(Dim == dyn)
      : LayerNorm(parent, std::move(name), normalized_size, eps, bias, elementwise_affine, 0) {}
  void reset_parameters(Rng&) override {
    if (weight.defined()) init::constant(weight, T(1));
    if (bias.defined()) init::constant(bias, T(0));
  }
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x) const {
    if constexpr (!std::is_same_v<S, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<S, 0>, Dim), "nn::LayerNorm: the input's last extent differs from Dim");
    if (x.rank() == 0 || x.dims().back() != dim_)
      throw ShapeError("nn::LayerNorm '" + this->name() + "': input shape " + x.dims().str() + " does not end in " + std::to_string(dim_));
    return layer_norm(ctx, x, weight, bias, eps_);
  }
  /// The normalised width.
  std::size_t normalized_size() const noexcept { return dim_; }
  Var<T, Shape<Dim>, B> weight, bias;  // undefined when constructed without them

 private:
  LayerNorm(Module* parent, std::string name, std::size_t dim, double eps, bool bias, bool elementwise_affine, int)
      : Module(parent, std::move(name)), dim_(dim), eps_(eps) {
    if (dim == 0) throw ArgumentError("nn::LayerNorm '" + this->name() + "': the normalised width must be positive");
    if (!(eps >= 0 && eps <= 1e30))  // torch accepts 0 too; negative or NaN eps gives NaN rows
      throw ArgumentError("nn::LayerNorm '" + this->name() + "': eps must be a finite value >= 0, got " + std::to_string(eps));
    if (elementwise_affine) weight = register_parameter<T, Shape<Dim>, B>("weight", {dim});
    if (elementwise_affine && bias) this->bias = register_parameter<T, Shape<Dim>, B>("bias", {dim});
    if (init_on_construction()) {
      Rng rng(0);
      reset_parameters(rng);
    }
  }

  std::size_t dim_;
  double eps_;
};

/// RMS normalisation over the last axis, torch.nn.RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight,
/// "weight" (Dim) initialised to ones. eps = std::nullopt is torch's eps=None: the element type's
/// epsilon (std::numeric_limits<T>::epsilon(), torch.finfo(dtype).eps). elementwise_affine = false:
/// no parameters.
template <std::size_t Dim, class T = float, class B = cpu>
class RMSNorm : public Module {
 public:
  static_assert(Dim > 0, "nn::RMSNorm: Dim must be a positive extent (or attn::dyn)");
  RMSNorm(Module* parent, std::string name, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
    requires(Dim != dyn)
      : RMSNorm(parent, std::move(name), Dim, eps, elementwise_affine, 0) {}
  /// Dim = dyn: the normalised width (torch's normalized_shape) given here.
  RMSNorm(Module* parent, std::string name, std::size_t normalized_size, std::optional<double> eps = std::nullopt,
          bool elementwise_affine = true)
    requires(Dim == dyn)
      : RMSNorm(parent, std::move(name), normalized_size, eps, elementwise_affine, 0) {}
  void reset_parameters(Rng&) override {
    if (weight.defined()) init::constant(weight, T(1));
  }
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x) const {
    if constexpr (!std::is_same_v<S, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<S, 0>, Dim), "nn::RMSNorm: the input's last extent differs from Dim");
    if (x.rank() == 0 || x.dims().back() != dim_)
      throw ShapeError("nn::RMSNorm '" + this->name() + "': input shape " + x.dims().str() + " does not end in " + std::to_string(dim_));
    return rms_norm(ctx, x, weight, eps_);
  }
  /// The normalised width.
  std::size_t normalized_size() const noexcept { return dim_; }
  /// The eps in use: the one given, or the element type's epsilon.
  double eps() const noexcept { return eps_; }
  Var<T, Shape<Dim>, B> weight;  // undefined without elementwise_affine

 private:
  RMSNorm(Module* parent, std::string name, std::size_t dim, std::optional<double> eps, bool elementwise_affine, int)
      : Module(parent, std::move(name)), dim_(dim), eps_(eps.value_or(double(std::numeric_limits<T>::epsilon()))) {
    if (dim == 0) throw ArgumentError("nn::RMSNorm '" + this->name() + "': the normalised width must be positive");
    if (!(eps_ >= 0 && eps_ <= 1e30))
      throw ArgumentError("nn::RMSNorm '" + this->name() + "': eps must be a finite value >= 0, got " + std::to_string(eps_));
    if (elementwise_affine) weight = register_parameter<T, Shape<Dim>, B>("weight", {dim});
    if (init_on_construction()) {
      Rng rng(0);
      reset_parameters(rng);
    }
  }

  std::size_t dim_;
  double eps_;
};

/// nn::Dropout: a module wrapper of nn::dropout that follows the module's train/eval mode.
class Dropout : public Module {
 public:
  Dropout(Module* parent, std::string name, double p) : Module(parent, std::move(name)), p_(p) {
    if (!(p >= 0 && p <= 1)) throw ArgumentError("nn::Dropout '" + this->name() + "': p must be in [0, 1]");
  }
  template <Context C, class T, class S, class B>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x) const {
    return dropout(ctx, x, p_, training());
  }
  double p() const noexcept { return p_; }

 private:
  double p_;
};

}  // namespace attn::nn
