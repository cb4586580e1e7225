// SPDX-License-Identifier: MIT
// An exponential moving average of a model's parameters, as timm's ModelEmaV2 computes it: after
// optimizer steps, avg = d avg + (1 - d) param, starting from the weights the Ema is made from
// (torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn applies the same rule but starts
// from the first step's weights). The averaged weights are what one evaluates and ships; the
// optimizer keeps stepping the live ones.
//   attn::optim::Ema<float> ema(model, {.decay = 0.999});
//   ... opt.step(); ema.update();
//   ema.swap();  evaluate, io::save(model, ...);  ema.swap();   // back to the live weights
#pragma once
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "optimizer.hpp"

namespace attn::optim {

struct EmaOptions {
  /// Weight of the running average per step, in [0, 1): 0.999 averages over roughly the last
  /// 1 / (1 - d) = 1,000 steps.
  double decay = 0.999;
  /// Fold the parameters in every N steps, with decay^N, the same horizon: for models whose large
  /// embedding tables make a pass over every parameter cost more than the step itself.
  long long every = 1;
  /// Early folds use min(decay^N, (1 + u) / (10 + u)) at fold u (TensorFlow's num_updates rule), so
  /// the average is not held back by the initial weights for the first thousand steps.
  bool warmup = true;
};

/// The average lives in tensors beside the parameters, initialised to the parameters' values when
/// the Ema is made (make it after loading or initialising the weights). swap() exchanges the two:
/// while swapped, the model holds the average, and update() refuses to run.
template <class T = float, class B = cpu>
class Ema {
 public:
  Ema(const nn::Module& model, EmaOptions opt = {}) : Ema(NamedParams<T, B>::of(model), opt) {}
  Ema(NamedParams<T, B> params, EmaOptions opt) : p_(std::move(params)), opt_(opt) {
    if (!(opt_.decay >= 0 && opt_.decay < 1)) throw std::invalid_argument("optim::Ema: decay must be in [0, 1), is " + std::to_string(opt_.decay));
    if (opt_.every < 1) throw std::invalid_argument("optim::Ema: every must be at least 1, is " + std::to_string(opt_.every));
    for (auto& v : p_.vars) {
      Tensor<T, AnyShape, B> a(v.dims());
      B::template copy<T>(a.data(), v.data()->value.data(), a.numel());
      avg_.push_back(std::move(a));
    }
  }

  /// The decay of fold u (0-based).
  double decay_at(long long u) const {
    const double d = std::pow(opt_.decay, double(opt_.every));
    return opt_.warmup ? std::min(d, (1.0 + double(u)) / (10.0 + double(u))) : d;
  }

  /// Call after each optimizer step: every `every`-th call folds the parameters into the average.
  void update() {
    if (swapped_) throw std::logic_error("optim::Ema::update: the model holds the average (swap() back first)");
    if (++steps_ % opt_.every != 0) return;
    // 1 - decay in double, then rounded once (as torch's lerp weight and Adam's 1 - beta): in float,
    // 1 - float(0.99999) is 0.14% off.
    const double dd = decay_at(updates_++);
    const T d = T(dd), e = T(1 - dd);
    for (std::size_t k = 0; k < p_.vars.size(); ++k)
      kernels::ema_update(B{}, avg_[k].numel(), avg_[k].data(), p_.vars[k].data()->value.data(), d, e);
  }

  /// Exchanges the parameters' values with the average (no copy of either is made).
  void swap() {
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      auto& d = *p_.vars[k].data();
      kernels::swap_values(B{}, avg_[k].numel(), avg_[k].data(), d.value.data());
      d.mark_value_written();
    }
    swapped_ = !swapped_;
  }
  bool swapped() const { return swapped_; }

  long long steps() const { return steps_; }      // update() calls
  long long updates() const { return updates_; }  // folds
  const EmaOptions& options() const { return opt_; }
  const NamedParams<T, B>& named_params() const { return p_; }
  /// What the model does not hold now: the average, or (while swapped) the live weights.
  const Tensor<T, AnyShape, B>& other(std::size_t k) const { return avg_[k]; }

  /// Named state for checkpoints: "<param>" holding what the model does not (the average unless
  /// swapped), as torch's AveragedModel keeps the average under the module's own names.
  std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> state() const {
    std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> s;
    for (std::size_t k = 0; k < p_.vars.size(); ++k) s.push_back({p_.names[k], avg_[k]});
    return s;
  }
  /// Restores the counters of a checkpoint (the tensors come through state()'s shared storage).
  void set_counts(long long steps, long long updates) {
    if (steps < 0 || updates < 0 || updates > steps / opt_.every)
      throw std::invalid_argument("optim::Ema: " + std::to_string(updates) + " folds cannot come from " + std::to_string(steps) +
                                  " steps at every = " + std::to_string(opt_.every));
    steps_ = steps, updates_ = updates;
  }

 private:
  NamedParams<T, B> p_;
  EmaOptions opt_;
  std::vector<Tensor<T, AnyShape, B>> avg_;
  long long steps_ = 0, updates_ = 0;
  bool swapped_ = false;
};

}  // namespace attn::optim
