// SPDX-License-Identifier: MIT
// Learning-rate schedules: linear warm-up followed by cosine or linear decay to a floor.
//   attn::optim::WarmupSchedule sched{.base_lr = 1e-3, .warmup = 100, .total = 5000};
//   opt.set_lr(sched(step));
#pragma once
#include <algorithm>
#include <cmath>
#include <numbers>

namespace attn::optim {

struct WarmupSchedule {
  enum class Decay { cosine, linear, constant };
  double base_lr = 1e-3;
  long long warmup = 0;     // steps of linear warm-up from 0 to base_lr
  long long total = 1;      // steps in all; decay runs from warmup to total (total <= warmup: base_lr at warmup, min_lr after)
  double min_lr = 0;        // the floor reached at `total`
  Decay decay = Decay::cosine;

  /// The learning rate for 0-based step `step` (a negative step is step 0).
  double operator()(long long step) const {
    step = std::max<long long>(step, 0);
    if (warmup > 0 && step < warmup) return base_lr * double(step + 1) / double(warmup);
    if (decay == Decay::constant) return base_lr;
    const double span = double(std::max<long long>(1, total - warmup));
    const double t = std::clamp(double(step - warmup) / span, 0.0, 1.0);
    const double f = decay == Decay::cosine ? 0.5 * (1 + std::cos(std::numbers::pi * t)) : 1 - t;
    return min_lr + (base_lr - min_lr) * f;
  }
};

}  // namespace attn::optim
