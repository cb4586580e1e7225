// SPDX-License-Identifier: MIT
// Numerical guard for training loops: detects a non-finite loss or gradient before the optimizer
// applies it, then either skips the step (and counts it) or stops with an error that names the
// step and the first parameter whose gradient is not finite.
//   attn::optim::NonFiniteGuard guard(attn::optim::OnNonFinite::skip);
//   tape.backward(loss);
//   const double norm = attn::optim::clip_grad_norm(opt.params(), 1.0);
//   if (guard.check(loss.value()[0], norm, opt.named_params(), step)) opt.step();
//   opt.zero_grad();
#pragma once
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "optimizer.hpp"

namespace attn::optim {

/// What a training loop does when the loss or a gradient is NaN or infinite.
enum class OnNonFinite {
  stop,  ///< throw NumericalError naming the step and the first affected parameter
  skip,  ///< leave the weights and the optimizer state untouched, count the step, go on
};

/// Parses "stop" or "skip" (command-line flags); anything else is an ArgumentError.
inline OnNonFinite parse_on_non_finite(std::string_view s) {
  if (s == "stop") return OnNonFinite::stop;
  if (s == "skip") return OnNonFinite::skip;
  throw ArgumentError("unknown non-finite policy '" + std::string(s) + "' (expected stop or skip)");
}

/// The first parameter (in registration order) whose gradient holds a NaN or an infinity.
template <class T, class B>
std::optional<std::string> first_non_finite_grad(const NamedParams<T, B>& p) {
  std::string name;
  if (grads_finite(p, &name)) return std::nullopt;
  return name;
}

class NonFiniteGuard {
 public:
  /// max_consecutive_skips: in skip mode, stop anyway at the max_consecutive_skips-th non-finite
  /// step in a row, after skipping the ones before it (a run that only produces NaNs is not going
  /// to recover); 0 means never.
  explicit NonFiniteGuard(OnNonFinite policy = OnNonFinite::stop, std::size_t max_consecutive_skips = 100)
      : policy_(policy), max_run_(max_consecutive_skips) {}

  /// Call after backward (and clipping). grad_norm is the norm clip_grad_norm returned, or any
  /// value that is finite exactly when every gradient is (NaN skips the fast path). Returns
  /// true when the step may be applied; false when it is to be skipped (skip mode). Throws
  /// NumericalError in stop mode.
  template <class T, class B>
  bool check(double loss, double grad_norm, const NamedParams<T, B>& params, long long step) {
    if (std::isfinite(loss) && std::isfinite(grad_norm)) {
      run_ = 0;
      return true;
    }
    const auto bad = first_non_finite_grad(params);
    if (std::isfinite(loss) && !bad) {  // the norm overflowed, every element is finite
      run_ = 0;
      return true;
    }
    std::string what = "non-finite ";
    what += std::isfinite(loss) ? "gradient" : "loss (" + std::to_string(loss) + ")";
    what += " at step " + std::to_string(step);
    what += bad ? "; first parameter with a non-finite gradient: '" + *bad + "'" : "; every gradient is finite";
    last_ = what;
    ++run_;
    if (policy_ == OnNonFinite::stop) throw NumericalError(what);
    if (max_run_ && run_ >= max_run_)
      throw NumericalError(what + " (" + std::to_string(run_) + " non-finite steps in a row; giving up)");
    ++skipped_;
    return false;
  }

  OnNonFinite policy() const noexcept { return policy_; }
  /// Steps skipped so far (skip mode).
  std::size_t skipped() const noexcept { return skipped_; }
  /// The description of the last non-finite step, empty if none.
  const std::string& last() const noexcept { return last_; }

 private:
  OnNonFinite policy_;
  std::size_t max_run_;
  std::size_t skipped_ = 0, run_ = 0;
  std::string last_;
};

}  // namespace attn::optim
