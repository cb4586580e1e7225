// SPDX-License-Identifier: MIT
// nn::detail::LayerStack<Layer, Dim, T, B>: what TransformerEncoder and TransformerDecoder share:
// num_layers copies of one layer type under "layers.0" ... "layers.<N-1>", all starting from
// layers.0's initial values (torch's stacks deep-copy one layer), and an optional final norm
// "norm" after them (the layers' kind: LayerNorm or RMSNorm).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "layer_norm.hpp"
#include "module.hpp"

namespace attn::nn::detail {

template <class LayerT, std::size_t Dim, class T, class B>
class LayerStack : public Module {
 public:
  using Layer = LayerT;

  std::size_t size() const noexcept { return layers_.size(); }
  const Layer& layer(std::size_t i) const { return *layers_.at(i); }
  Layer& layer(std::size_t i) { return *layers_.at(i); }
  /// The final norm, or null without one.
  const Norm<Dim, T, B>* norm() const noexcept { return norm_.get(); }

  Module layers;  // the parent of "0", "1", ...

 protected:
  /// who names the stack in errors ("nn::TransformerEncoder"); layer_opt is every layer's options.
  template <class LayerOptions>
  LayerStack(Module* parent, std::string name, const char* who, std::size_t num_layers, const LayerOptions& layer_opt, bool final_norm)
      : Module(parent, std::move(name)), layers(this, "layers") {
    if (num_layers == 0) throw ArgumentError(std::string(who) + " '" + this->name() + "': num_layers must be at least 1");
    layers_.reserve(num_layers);
    for (std::size_t i = 0; i != num_layers; ++i) layers_.push_back(std::make_unique<Layer>(&layers, std::to_string(i), layer_opt));
    if (init_on_construction()) {  // every layer starts as layers.0, as torch's deep copies do
      const auto first = layers_[0]->named_parameters();
      std::vector<T> host;
      for (std::size_t i = 1; i < layers_.size(); ++i) {
        const auto other = layers_[i]->named_parameters();
        for (std::size_t k = 0; k < first.size(); ++k) {
          host.resize(first[k].second->numel());
          first[k].second->copy_to_host(host.data());
          other[k].second->copy_from_host(host.data());
        }
      }
    }
    if (final_norm) norm_ = std::make_unique<Norm<Dim, T, B>>(this, "norm", layer_opt.norm, layer_opt.layer_norm_eps, layer_opt.bias);
  }

  /// The final norm applied to h, or h without one.
  template <class C, class V>
  V finish(C& ctx, const V& h) const {
    return norm_ ? V((*norm_)(ctx, h)) : h;
  }

  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<Norm<Dim, T, B>> norm_;
};

}  // namespace attn::nn::detail
