// SPDX-License-Identifier: MIT
// Optimizers with PyTorch's update rules: Adam, AdamW (decoupled weight decay) and SGD with
// momentum; gradient-norm clipping. Each keeps named state for checkpoints.
//   attn::optim::Adam<float> opt(model, {.lr = 1e-3, .weight_decay = 0.01, .decoupled = true});
//   ...; tape.backward(loss); attn::optim::clip_grad_norm(opt.params(), 1.0); opt.step(); opt.zero_grad();
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <cstdint>
#include <vector>

#include "../backend/kernels.hpp"

#include "../nn/module.hpp"

namespace attn::optim {

/// The parameters of a module with their names, typed.
template <class T, class B>
struct NamedParams {
  std::vector<std::string> names;
  std::vector<Var<T, AnyShape, B>> vars;
  static NamedParams of(const nn::Module& m) {
    NamedParams p;
    for (auto& [n, slot] : m.named_parameters()) p.names.push_back(n);
    p.vars = m.parameters<T, B>();
    return p;
  }
};

namespace detail {
/// Calls f(pointer, count) over the spans of a parameter's gradient that the optimizers read. On
/// the host: the rows of a row-sparse gradient, else the whole buffer. On a device: the whole
/// buffer in one span (outside its recorded rows a row-sparse gradient is zero), one kernel instead
/// of one per row.
template <class D, class F>
void for_each_grad_block(D& d, F&& f) {
  if constexpr (std::remove_const_t<D>::backend_type::host_accessible) {
    d.for_each_grad_span(f);
  } else if (!d.grad.empty()) {
    f(d.grad.data(), d.grad.numel());
  }
}
/// Per parameter, its gradient's write count (VarData::grad_writes) at the optimizer's last step,
/// to tell a gradient written since from a kept buffer that nothing reached.
class GradWritesSeen {
 public:
  template <class Vars>
  explicit GradWritesSeen(const Vars& vars) {
    for (const auto& v : vars) seen_.push_back(v.data()->grad_writes);
  }
  /// Whether parameter k's gradient was written since the last call for k (or construction).
  bool written_since_last(std::size_t k, std::uint64_t grad_writes) {
    const bool written = grad_writes != seen_[k];
    seen_[k] = grad_writes;
    return written;
  }

 private:
  std::vector<std::uint64_t> seen_;
};

}  // namespace detail

/// Scales all gradients so that their joint L2 norm is at most max_norm (PyTorch's
/// clip_grad_norm_, with its 1e-6 guard). Returns the norm before clipping; a max_norm of 0 or
/// less only measures it. A NaN or infinite norm leaves the gradients as they are. On a device
/// backend it waits for the device once (the norm comes back to the host).
template <class T, class B>
double clip_grad_norm(const std::vector<Var<T, AnyShape, B>>& params, double max_norm) {
  double total = 0;
  if constexpr (B::host_accessible) {
    for (auto& p : params) {
      const auto& d = *p.data();
      detail::for_each_grad_block(d, [&](const T* q, std::size_t count) { total += kernels::sum_squares(B{}, q, count); });
    }
  } else {  // every parameter's sum into one device accumulator: one wait for the device
    std::vector<kernels::GradSpan<T>> spans;
    for (auto& p : params) {
      const auto& d = *p.data();
      detail::for_each_grad_block(d, [&](const T* q, std::size_t count) { spans.push_back({q, count}); });
    }
    total = kernels::sum_squares(B{}, spans.data(), spans.size());
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (max_norm > 0 && std::isfinite(total) && coef < 1) {
    for (auto& p : params) {
      auto& d = *p.data();
      detail::for_each_grad_block(d, [&](T* q, std::size_t count) { kernels::scale(B{}, q, count, T(coef)); });
    }
  }
  return total;
}

/// True when every gradient element is finite; otherwise names the first parameter that is not.
template <class T, class B>
bool grads_finite(const NamedParams<T, B>& p, std::string* first_bad = nullptr) {
  if constexpr (B::host_accessible) {
    for (std::size_t k = 0; k < p.vars.size(); ++k) {
      const auto& d = *p.vars[k].data();
      bool ok = true;
      detail::for_each_grad_block(d, [&](const T* q, std::size_t count) { ok = ok && kernels::all_finite(B{}, q, count); });
      if (!ok) {
        if (first_bad) *first_bad = p.names[k];
        return false;
      }
    }
  } else {  // one flag per parameter, read back at once: one wait for the device
    std::vector<kernels::GradSpan<T>> spans;
    std::vector<std::size_t> owner;  // the parameter of each span
    for (std::size_t k = 0; k < p.vars.size(); ++k) {
      const auto& d = *p.vars[k].data();
      detail::for_each_grad_block(d, [&](const T* q, std::size_t count) {
        spans.push_back({q, count});
        owner.push_back(k);
      });
    }
    const std::size_t bad = kernels::first_non_finite(B{}, spans.data(), spans.size());
    if (bad < spans.size()) {
      if (first_bad) *first_bad = p.names[owner[bad]];
      return false;
    }
  }
  return true;
}

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  /// false: Adam (L2 penalty added to the gradient); true: AdamW (decoupled decay).
  bool decoupled = false;
};

/// Adam / AdamW in PyTorch's (non-fused, non-amsgrad) update order. Parameters with row-sparse
/// gradients (nn::Embedding with .sparse = true) get torch.optim.SparseAdam's lazy update instead:
/// only the rows looked up in the step move, without weight decay. As in torch, each parameter
/// counts its own steps (those in which it had a gradient) for its bias correction; steps()
/// counts the calls of step().
template <class T = float, class B = cpu>
class Adam {
 public:
  Adam(const nn::Module& model, AdamOptions opt = {}) : Adam(NamedParams<T, B>::of(model), opt) {}
  Adam(NamedParams<T, B> params, AdamOptions opt) : p_(std::move(params)), opt_(opt) {
    check_options(opt_);
    for (auto& v : p_.vars) {
      m_.push_back(Tensor<T, AnyShape, B>::zeros(v.dims()));
      v_.push_back(Tensor<T, AnyShape, B>::zeros(v.dims()));
    }
    pt_.assign(p_.vars.size(), 0);
  }

  /// torch.optim.Adam's checks: lr, eps and weight_decay >= 0 (and finite), betas in [0, 1).
  static void check_options(const AdamOptions& o) {
    auto bad = [](const char* what, double v, const char* rule) {
      throw ArgumentError(std::string("optim::Adam: ") + what + " " + std::to_string(v) + " " + rule);
    };
    if (!(o.lr >= 0) || !std::isfinite(o.lr)) bad("lr", o.lr, "must be finite and >= 0");
    if (!(o.eps >= 0) || !std::isfinite(o.eps)) bad("eps", o.eps, "must be finite and >= 0");
    if (!(o.beta1 >= 0 && o.beta1 < 1)) bad("beta1", o.beta1, "must be in [0, 1)");
    if (!(o.beta2 >= 0 && o.beta2 < 1)) bad("beta2", o.beta2, "must be in [0, 1)");
    if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) bad("weight_decay", o.weight_decay, "must be finite and >= 0");
  }

  void step() {
    ++t_;
    const T lr = T(opt_.lr), b2 = T(opt_.beta2), wd = T(opt_.weight_decay);
    const T eps = T(opt_.eps);
    // 1 - beta in double, then rounded once: what PyTorch passes to its kernels.
    const T omb1 = T(1 - opt_.beta1), omb2 = T(1 - opt_.beta2);
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      auto& d = *p_.vars[k].data();
      if (!d.has_grad()) continue;
      // A row-sparse table's kept whole-table buffer (a device backend, DataParallel) that nothing
      // wrote since the last step is no gradient, as in torch (grad None): its count stays. A lookup
      // of padding rows only is one (torch's empty sparse gradient), and counts.
      const bool written = writes_seen_.written_since_last(k, d.grad_writes);
      if (d.grad_is_row_sparse() && !d.grad_compact && d.grad_rows.empty() && !written) continue;
      const long long n = ++pt_[k];  // this parameter's steps, for its bias correction
      const double bc1 = 1 - std::pow(opt_.beta1, double(n));
      const double bc2 = 1 - std::pow(opt_.beta2, double(n));
      const T step_size = T(opt_.lr / bc1);
      const T bc2_sqrt = T(std::sqrt(bc2));
      T* p = d.value.data();
      d.mark_value_written();
      T* m = m_[k].data();
      T* v = v_[k].data();
      if (d.grad_is_row_sparse()) {
        // torch.optim.SparseAdam: only the looked-up rows move (their moments too); no weight
        // decay; eps is added to sqrt(v) before the bias correction is folded into the step.
        kernels::vec::SparseAdamStep<T> s;
        s.one_minus_beta1 = omb1, s.one_minus_beta2 = omb2, s.step_size = T(opt_.lr * std::sqrt(bc2) / bc1), s.eps = eps;
        kernels::sparse_adam_rows(B{}, d.grad_rows.data(), d.grad_rows.size(), d.value.dims()[1], p, d.grad_row_values(), d.grad_compact, m,
                                  v, s);
        continue;
      }
      const T* g = d.grad.data();
      // The backend's kernel (backend/cpu/vector_kernels.hpp): the scalar formula, elementwise, so
      // the result does not depend on the vector width:
      //   gi = g (+ wd p); m += (gi - m)(1 - b1); v = v b2 + (1 - b2) gi gi; p -= lr/bc1 m / (sqrt(v)/sqrt(bc2) + eps)
      kernels::vec::AdamStep<T> s;
      s.lr = lr, s.weight_decay = wd, s.one_minus_beta1 = omb1, s.beta2 = b2, s.one_minus_beta2 = omb2;
      s.step_size = step_size, s.bc2_sqrt = bc2_sqrt, s.eps = eps, s.decoupled = opt_.decoupled;
      kernels::adam_update(B{}, d.value.numel(), p, g, m, v, s);
    }
  }
  void zero_grad() {
    for (auto& v : p_.vars) v.data()->zero_grad();
  }
  void set_lr(double lr) { opt_.lr = lr; }
  double lr() const { return opt_.lr; }
  long long steps() const { return t_; }
  const NamedParams<T, B>& named_params() const { return p_; }
  const std::vector<Var<T, AnyShape, B>>& params() const { return p_.vars; }

  /// Named state for checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq" (PyTorch's names).
  std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> state() const {
    std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> s;
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      s.push_back({p_.names[k] + ".exp_avg", m_[k]});
      s.push_back({p_.names[k] + ".exp_avg_sq", v_[k]});
    }
    return s;
  }
  /// Sets the count of step() calls, and every parameter's own count to it (a checkpoint that
  /// records no per-parameter counts: every parameter had a gradient at every step).
  void set_steps(long long t) {
    t_ = t;
    pt_.assign(p_.vars.size(), t);
  }
  /// The steps in which parameter k had a gradient (its bias correction's count).
  long long param_steps(std::size_t k) const { return pt_.at(k); }
  const std::vector<long long>& param_steps() const { return pt_; }
  /// Sets each parameter's own count (one per parameter, each in [0, steps()]).
  void set_param_steps(std::vector<long long> counts) {
    if (counts.size() != pt_.size())
      throw ArgumentError("optim::Adam::set_param_steps: " + std::to_string(counts.size()) + " counts for " + std::to_string(pt_.size()) +
                          " parameters");
    for (auto c : counts)
      if (c < 0 || c > t_) throw ArgumentError("optim::Adam::set_param_steps: a count " + std::to_string(c) + " outside [0, steps()]");
    pt_ = std::move(counts);
  }
  const Tensor<T, AnyShape, B>& exp_avg(std::size_t k) const { return m_[k]; }
  const Tensor<T, AnyShape, B>& exp_avg_sq(std::size_t k) const { return v_[k]; }

 private:
  NamedParams<T, B> p_;
  AdamOptions opt_;
  std::vector<Tensor<T, AnyShape, B>> m_, v_;
  long long t_ = 0;
  std::vector<long long> pt_;  // per parameter: the steps in which it had a gradient
  detail::GradWritesSeen writes_seen_{p_.vars};
};

struct SgdOptions {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

/// SGD with momentum, PyTorch's rule (the first step's buffer is the gradient itself).
template <class T = float, class B = cpu>
class Sgd {
 public:
  Sgd(const nn::Module& model, SgdOptions opt = {}) : Sgd(NamedParams<T, B>::of(model), opt) {}
  Sgd(NamedParams<T, B> params, SgdOptions opt) : p_(std::move(params)), opt_(opt), buf_(p_.vars.size()) {
    auto bad = [](const std::string& why) { throw ArgumentError("optim::Sgd: " + why); };
    if (!(opt.lr >= 0) || !std::isfinite(opt.lr)) bad("lr " + std::to_string(opt.lr) + " must be finite and >= 0");
    if (!(opt.momentum >= 0) || !std::isfinite(opt.momentum)) bad("momentum " + std::to_string(opt.momentum) + " must be finite and >= 0");
    if (!std::isfinite(opt.dampening)) bad("dampening must be finite");
    if (!(opt.weight_decay >= 0) || !std::isfinite(opt.weight_decay)) bad("weight_decay must be finite and >= 0");
    if (opt.nesterov && (opt.momentum <= 0 || opt.dampening != 0)) bad("Nesterov momentum requires a momentum and zero dampening");
  }

  void step() {
    const T lr = T(opt_.lr), mu = T(opt_.momentum), damp = T(opt_.dampening), wd = T(opt_.weight_decay);
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      auto& d = *p_.vars[k].data();
      // A row-sparse table that no lookup reached this step has no gradient, as in torch (a kept
      // whole-table buffer that nothing wrote since the last step is not one): momentum and decay
      // leave it alone. A lookup of padding rows only is one (torch's empty sparse gradient).
      const bool written = writes_seen_.written_since_last(k, d.grad_writes);
      if (d.grad_is_row_sparse() && d.grad_rows.empty() && !written) continue;
      d.materialize_grad(/*keep=*/true);  // SGD updates the whole table, as torch.optim.SGD on a dense gradient
      if (d.grad.empty()) continue;
      T* p = d.value.data();
      d.mark_value_written();
      const T* g = d.grad.data();
      const std::size_t n = d.value.numel();
      const bool first = buf_[k].empty();
      if (mu != T(0) && first) buf_[k] = Tensor<T, AnyShape, B>(d.value.dims());
      kernels::vec::SgdStep<T> s;
      s.lr = lr, s.momentum = mu, s.dampening = damp, s.weight_decay = wd, s.nesterov = opt_.nesterov, s.first = first;
      kernels::sgd_update(B{}, n, p, g, mu != T(0) ? buf_[k].data() : nullptr, s);
    }
  }
  void zero_grad() {
    for (auto& v : p_.vars) v.data()->zero_grad();
  }
  void set_lr(double lr) { opt_.lr = lr; }
  double lr() const { return opt_.lr; }
  const SgdOptions& options() const { return opt_; }
  const NamedParams<T, B>& named_params() const { return p_; }
  const std::vector<Var<T, AnyShape, B>>& params() const { return p_.vars; }
  const Tensor<T, AnyShape, B>& momentum_buffer(std::size_t k) const { return buf_[k]; }

  /// Named state for checkpoints: "<param>.momentum_buffer" (PyTorch's name) of every parameter
  /// that has one (momentum on, and a step with its gradient taken).
  std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> state() const {
    std::vector<std::pair<std::string, Tensor<T, AnyShape, B>>> s;
    for (std::size_t k = 0; k < p_.vars.size(); ++k)
      if (!buf_[k].empty()) s.push_back({p_.names[k] + ".momentum_buffer", buf_[k]});
    return s;
  }
  /// Sets parameter k's momentum buffer (its parameter's shape), or with an empty tensor removes it
  /// (the next step then starts it from the gradient, as torch's first step does).
  void set_momentum_buffer(std::size_t k, Tensor<T, AnyShape, B> t) {
    if (k >= buf_.size()) throw ArgumentError("optim::Sgd::set_momentum_buffer: parameter " + std::to_string(k) + " of " + std::to_string(buf_.size()));
    if (!t.empty() && (opt_.momentum == 0 || !(t.dims() == p_.vars[k].dims())))
      throw ArgumentError("optim::Sgd::set_momentum_buffer: '" + p_.names[k] + "' takes " +
                          (opt_.momentum == 0 ? std::string("no buffer (momentum 0)") : "a buffer of " + p_.vars[k].dims().str()) +
                          ", given " + t.dims().str());
    buf_[k] = std::move(t);
  }

 private:
  NamedParams<T, B> p_;
  SgdOptions opt_;
  std::vector<Tensor<T, AnyShape, B>> buf_;
  detail::GradWritesSeen writes_seen_{p_.vars};
};

}  // namespace attn::optim
