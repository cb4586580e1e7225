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

/// Scales all gradients so that their joint L2 norm is at most max_norm (PyTorch's
/// clip_grad_norm_, with its 1e-6 guard). Returns the norm before clipping; a max_norm of 0 or
/// less only measures it. A NaN or infinite norm leaves the gradients as they are.
template <class T, class B>
double clip_grad_norm(const std::vector<Var<T, AnyShape, B>>& params, double max_norm) {
  static_assert(B::host_accessible, "clip_grad_norm: this backend provides its own kernel");
  double total = 0;
  for (auto& p : params) {
    const auto& d = *p.data();
    const T* q = d.grad.data();
    d.for_each_grad_span([&](std::size_t off, std::size_t count) {
      const long long n = static_cast<long long>(count);
      double part = 0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(+ : part) if (n > (1 << 16))
#endif
      for (long long i = 0; i < n; ++i) part += double(q[off + i]) * double(q[off + i]);
      total += part;
    });
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (max_norm > 0 && coef < 1) {
    for (auto& p : params) {
      auto& d = *p.data();
      T* q = d.grad.data();
      d.for_each_grad_span([&](std::size_t off, std::size_t count) {
        for (std::size_t i = 0; i < count; ++i) q[off + i] *= T(coef);
      });
    }
  }
  return total;
}

/// True when every gradient element is finite; otherwise names the first parameter that is not.
template <class T, class B>
bool grads_finite(const NamedParams<T, B>& p, std::string* first_bad = nullptr) {
  for (std::size_t k = 0; k < p.vars.size(); ++k) {
    const auto& d = *p.vars[k].data();
    const T* q = d.grad.data();
    bool ok = true;
    d.for_each_grad_span([&](std::size_t off, std::size_t count) {
      for (std::size_t i = 0; i < count && ok; ++i) ok = std::isfinite(double(q[off + i]));
    });
    if (!ok) {
      if (first_bad) *first_bad = p.names[k];
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

/// Adam / AdamW, bit-for-bit PyTorch's (non-fused, non-amsgrad) update order. Parameters with
/// row-sparse gradients (nn::Embedding with .sparse = true) get torch.optim.SparseAdam's lazy
/// update instead: only the rows looked up in the step move, without weight decay.
template <class T = float, class B = cpu>
class Adam {
 public:
  Adam(const nn::Module& model, AdamOptions opt = {}) : Adam(NamedParams<T, B>::of(model), opt) {}
  Adam(NamedParams<T, B> params, AdamOptions opt) : p_(std::move(params)), opt_(opt) {
    for (auto& v : p_.vars) {
      m_.push_back(Tensor<T, AnyShape, B>::zeros(v.dims()));
      v_.push_back(Tensor<T, AnyShape, B>::zeros(v.dims()));
    }
  }

  void step() {
    ++t_;
    const double bc1 = 1 - std::pow(opt_.beta1, double(t_));
    const double bc2 = 1 - std::pow(opt_.beta2, double(t_));
    const T lr = T(opt_.lr), b2 = T(opt_.beta2), wd = T(opt_.weight_decay);
    const T step_size = T(opt_.lr / bc1);
    const T bc2_sqrt = T(std::sqrt(bc2));
    const T eps = T(opt_.eps);
    // 1 - beta in double, then rounded once: what PyTorch passes to its kernels.
    const T omb1 = T(1 - opt_.beta1), omb2 = T(1 - opt_.beta2);
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      auto& d = *p_.vars[k].data();
      if (d.grad.empty()) continue;
      T* p = d.value.data();
      d.mark_value_written();
      const T* g = d.grad.data();
      T* m = m_[k].data();
      T* v = v_[k].data();
      if (d.grad_is_row_sparse()) {
        // torch.optim.SparseAdam: only the looked-up rows move (their moments too); no weight
        // decay; eps is added to sqrt(v) before the bias correction is folded into the step.
        const T sparse_step = T(opt_.lr * std::sqrt(bc2) / bc1);
        const std::size_t dim = d.value.dims()[1];
        const auto& rows = d.grad_rows;
        const long long nr = static_cast<long long>(rows.size());
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (nr * static_cast<long long>(dim) > (1 << 15))
#endif
        for (long long r = 0; r < nr; ++r) {
          const std::size_t base = rows[std::size_t(r)] * dim;
          for (std::size_t j = base; j < base + dim; ++j) {
            const T gi = g[j];
            m[j] += (gi - m[j]) * omb1;
            v[j] += (gi * gi - v[j]) * omb2;
            p[j] -= sparse_step * (m[j] / (std::sqrt(v[j]) + eps));
          }
        }
        continue;
      }
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
  void set_steps(long long t) { t_ = t; }
  const Tensor<T, AnyShape, B>& exp_avg(std::size_t k) const { return m_[k]; }
  const Tensor<T, AnyShape, B>& exp_avg_sq(std::size_t k) const { return v_[k]; }

 private:
  NamedParams<T, B> p_;
  AdamOptions opt_;
  std::vector<Tensor<T, AnyShape, B>> m_, v_;
  long long t_ = 0;
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
  Sgd(NamedParams<T, B> params, SgdOptions opt) : p_(std::move(params)), opt_(opt), buf_(p_.vars.size()) {}

  void step() {
    const T lr = T(opt_.lr), mu = T(opt_.momentum), damp = T(opt_.dampening), wd = T(opt_.weight_decay);
    for (std::size_t k = 0; k < p_.vars.size(); ++k) {
      auto& d = *p_.vars[k].data();
      if (d.grad.empty()) continue;
      T* p = d.value.data();
      d.mark_value_written();
      const T* g = d.grad.data();
      const std::size_t n = d.value.numel();
      const bool first = buf_[k].empty();
      if (mu != T(0) && first) buf_[k] = Tensor<T, AnyShape, B>(d.value.dims());
      T* b = mu != T(0) ? buf_[k].data() : nullptr;
      for (std::size_t i = 0; i < n; ++i) {
        T gi = g[i] + wd * p[i];
        if (b) {
          b[i] = first ? gi : mu * b[i] + (T(1) - damp) * gi;
          gi = opt_.nesterov ? gi + mu * b[i] : b[i];
        }
        p[i] -= lr * gi;
      }
    }
  }
  void zero_grad() {
    for (auto& v : p_.vars) v.data()->zero_grad();
  }
  void set_lr(double lr) { opt_.lr = lr; }
  const std::vector<Var<T, AnyShape, B>>& params() const { return p_.vars; }
  const Tensor<T, AnyShape, B>& momentum_buffer(std::size_t k) const { return buf_[k]; }

 private:
  NamedParams<T, B> p_;
  SgdOptions opt_;
  std::vector<Tensor<T, AnyShape, B>> buf_;
};

}  // namespace attn::optim
