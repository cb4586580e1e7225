// SPDX-License-Identifier: MIT
// nn::LayerNorm<Dim>: normalisation over the last axis with learned scale and shift (PyTorch's
// names "weight" and "bias", initialised to ones and zeros; without the bias, torch's
// LayerNorm(bias=False), as the encoder's norms with bias = false; without either,
// LayerNorm(elementwise_affine=False)); nn::RMSNorm<Dim>: torch's RMSNorm, a scale ("weight",
// ones) and no centring or shift; nn::Norm<Dim>: either, chosen at run time (the transformer
// layers' norms).
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

/// The normalisation of the transformer layers and stacks: torch's LayerNorm, or RMSNorm (LLaMA's).
enum class NormKind { layer, rms };

/// "layer" or "rms"; a value outside the enum throws ArgumentError.
inline const char* norm_kind_name(NormKind k) {
  switch (k) {
    case NormKind::layer: return "layer";
    case NormKind::rms: return "rms";
  }
  throw ArgumentError("nn::NormKind: value " + std::to_string(static_cast<int>(k)) + " is none of layer, rms");
}

/// The norm of the transformer layers (norm1, norm2, ...) and of their stacks' final "norm": a
/// LayerNorm (NormKind::layer: "weight" and, unless bias = false, "bias") or an RMSNorm
/// (NormKind::rms: "weight" alone; bias does not apply) over Dim, chosen at construction, with the
/// names, initial values and results of nn::LayerNorm and nn::RMSNorm.
template <std::size_t Dim, class T = float, class B = cpu>
class Norm : public Module {
 public:
  static_assert(Dim > 0 && Dim != dyn, "nn::Norm: Dim must be a static, positive extent");

  Norm(Module* parent, std::string name, NormKind kind, double eps, bool bias = true) : Module(parent, std::move(name)), kind_(kind), eps_(eps) {
    norm_kind_name(kind);  // throws for a value outside the enum
    if (!(eps >= 0 && eps <= 1e30))
      throw ArgumentError("nn::Norm '" + this->name() + "': eps must be a finite value >= 0, got " + std::to_string(eps));
    weight = register_parameter<T, Shape<Dim>, B>("weight", {Dim});
    if (kind == NormKind::layer && bias) this->bias = register_parameter<T, Shape<Dim>, B>("bias", {Dim});
    if (init_on_construction()) {
      Rng rng(0);
      reset_parameters(rng);
    }
  }
  void reset_parameters(Rng&) override {
    init::constant(weight, T(1));
    if (bias.defined()) init::constant(bias, T(0));
  }
  template <Context C, class S>
  Var<T, S, B> operator()(C& ctx, const Var<T, S, B>& x) const {
    if constexpr (!std::is_same_v<S, AnyShape>)
      static_assert(shapes::may_equal(shapes::back<S, 0>, Dim), "nn::Norm: the input's last extent differs from Dim");
    if (x.rank() == 0 || x.dims().back() != Dim)
      throw ShapeError("nn::Norm '" + this->name() + "': input shape " + x.dims().str() + " does not end in " + std::to_string(Dim));
    return kind_ == NormKind::rms ? rms_norm(ctx, x, weight, eps_) : layer_norm(ctx, x, weight, bias, eps_);
  }
  NormKind kind() const noexcept { return kind_; }
  double eps() const noexcept { return eps_; }

  Var<T, Shape<Dim>, B> weight, bias;  // bias: undefined for an RMS norm or with bias = false

 private:
  NormKind kind_;
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
