// SPDX-License-Identifier: MIT
// Element-wise ops on Vars with numpy broadcasting: add, sub, mul, div (also with scalars and as
// operators), neg, exp, log, sqrt, abs, tanh, sigmoid, log_sigmoid, and torch's activations relu,
// relu6, leaky_relu, elu, selu, gelu (erf and tanh forms), silu, mish, softplus, hardtanh. A broadcast operand's gradient is summed
// back over its broadcast axes.
//   auto y = attn::tanh(tape, x * w + b);      // (B, D) * (D) + (D)
#pragma once
#include <cmath>
#include <string>

#include "../backend/kernels.hpp"
#include "../core/error.hpp"
#include "var.hpp"

namespace attn {

namespace grad_fn {
// d/dx of each unary op, written in terms of what the forward saved (x or y) and the upstream g.
struct ExpGrad { template <class T> ATTN_HD T operator()(T y, T g) const { return g * y; } };
struct LogGrad { template <class T> ATTN_HD T operator()(T x, T g) const { return g / x; } };
struct TanhGrad { template <class T> ATTN_HD T operator()(T y, T g) const { return g * (T(1) - y * y); } };
struct SigmoidGrad { template <class T> ATTN_HD T operator()(T y, T g) const { return g * y * (T(1) - y); } };
struct ReluGrad { template <class T> ATTN_HD T operator()(T x, T g) const { return x > T(0) ? g : T(0); } };
/// gelu'(x) = Phi(x) + x phi(x) for the exact (erf) GELU.
struct GeluGrad {
  template <class T> ATTN_HD T operator()(T x, T g) const {
    using std::erf;
    using std::exp;
    const T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
/// gelu_tanh'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)).
struct GeluTanhGrad {
  template <class T> ATTN_HD T operator()(T x, T g) const {
    using std::tanh;
    const T k = T(0.79788456080286535588), c = T(0.044715);
    const T t = tanh(k * (x + c * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
  }
};
/// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
struct SiluGrad {
  template <class T> ATTN_HD T operator()(T x, T g) const {
    const T sg = expr::Sigmoid{}(x);
    return g * sg * (T(1) + x * (T(1) - sg));
  }
};
/// softplus'(x) = sigmoid(beta x), and 1 where beta x > threshold.
struct SoftplusGrad {
  double beta = 1, threshold = 20;
  template <class T> ATTN_HD T operator()(T x, T g) const {
    const T bx = T(beta) * x;
    return bx > T(threshold) ? g : g * expr::Sigmoid{}(bx);
  }
};
/// mish'(x) = tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x), sp = softplus(x).
struct MishGrad {
  template <class T> ATTN_HD T operator()(T x, T g) const {
    using std::tanh;
    const T t = tanh(expr::Softplus{}(x));
    return g * (t + x * (T(1) - t * t) * expr::Sigmoid{}(x));
  }
};
/// log_sigmoid'(x) = sigmoid(-x).
struct LogSigmoidGrad { template <class T> ATTN_HD T operator()(T x, T g) const { return g * expr::Sigmoid{}(-x); } };
struct LeakyReluGrad {
  double negative_slope = 0.01;
  template <class T> ATTN_HD T operator()(T x, T g) const { return x > T(0) ? g : T(negative_slope) * g; }
};
/// elu'(x) = scale where x > 0, else scale alpha exp(x).
struct EluGrad {
  double alpha = 1, scale = 1;
  template <class T> ATTN_HD T operator()(T x, T g) const {
    using std::exp;
    return g * T(scale) * (x > T(0) ? T(1) : T(alpha) * exp(x));
  }
};
/// 1 strictly inside (min_val, max_val), 0 outside and at the ends (as torch's).
struct HardtanhGrad {
  double min_val = -1, max_val = 1;
  template <class T> ATTN_HD T operator()(T x, T g) const { return x > T(min_val) && x < T(max_val) ? g : T(0); }
};
/// sqrt'(x) = 0.5 / sqrt(x), from the output.
struct SqrtGrad { template <class T> ATTN_HD T operator()(T y, T g) const { return g * T(0.5) / y; } };
/// abs'(x) = sign(x), 0 at 0 (as torch's).
struct AbsGrad { template <class T> ATTN_HD T operator()(T x, T g) const { return x > T(0) ? g : x < T(0) ? -g : T(0); } };
}  // namespace grad_fn

namespace detail {

/// v.grad += g, where g is an expression over out_dims; sums over v's broadcast axes if needed.
template <class T, class B, class E>
void accumulate(VarData<T, B>& v, const E& g, const Dims& out_dims) {
  if (!v.requires_grad) return;
  auto& gr = v.grad_ref();
  if (gr.dims() == out_dims) {
    gr += g;
    return;
  }
  Tensor<T, AnyShape, B> tmp(out_dims);
  tmp = g;
  kernels::sum_to(B{}, tmp.data(), out_dims, gr.data(), gr.dims(), true);
}

/// Whether a step may compute x's gradient in the buffer of its output's gradient: x has none yet,
/// and that buffer (released once the step has run) is x's shape and shared with nothing. Saves
/// an allocation per step and keeps one gradient alive instead of two (the feed-forward block's
/// activation: two (B, T, 4 D) buffers at its step).
template <class T, class B>
bool can_take_grad(const VarData<T, B>& x, const VarData<T, B>& out) {
  return x.requires_grad && !x.has_grad() && &x != &out && out.grad.storage().use_count() == 1 && out.grad.dims() == x.value.dims();
}
/// Moves out's gradient to x (can_take_grad(x, out)), as grad_ref() would hand it out.
template <class T, class B>
Tensor<T, AnyShape, B>& take_grad(VarData<T, B>& x, VarData<T, B>& out) {
  x.grad = std::move(out.grad);
  out.grad = {};
  x.grad_dense = true;
  ++x.grad_writes;
  return x.grad;
}

template <class Op, class T, class SA, class SB, class B>
auto binary(Tape* tape, const Var<T, SA, B>& a, const Var<T, SB, B>& b) {
  using S = typename expr::broadcast_shape<SA, SB>::type;
  Tensor<T, AnyShape, B> out = apply<Op>(a.raw(), b.raw());
  const bool rg = needs_grad(tape, a, b);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {a.data().get(), b.data().get()}, [ad = a.data(), bd = b.data(), od = o.data()] {
      if (od->grad.empty()) return;
      const auto& g = od->grad;
      const Dims& d = g.dims();
      if constexpr (std::is_same_v<Op, expr::Add>) {
        if (ad != bd && can_take_grad(*ad, *od)) {  // a residual's skip path takes the buffer itself
          accumulate(*bd, g * T(1), d);
          take_grad(*ad, *od);
          return;
        }
        accumulate(*ad, g * T(1), d);
        accumulate(*bd, g * T(1), d);
      } else if constexpr (std::is_same_v<Op, expr::Sub>) {
        accumulate(*ad, g * T(1), d);
        accumulate(*bd, -g, d);
      } else if constexpr (std::is_same_v<Op, expr::Mul>) {
        accumulate(*ad, g * bd->value, d);
        accumulate(*bd, g * ad->value, d);
      } else {
        static_assert(std::is_same_v<Op, expr::Div>);
        accumulate(*ad, g / bd->value, d);
        accumulate(*bd, -g * ad->value / (bd->value * bd->value), d);
      }
    });
  }
  return o;
}

/// y = f(x) with backward dx += Grad(saved, g), saved = y when UsesOutput, else x.
template <class Op, class Grad, bool UsesOutput, class T, class S, class B>
Var<T, S, B> unary(Tape* tape, const Var<T, S, B>& x, Op op = {}, Grad grad = {}) {
  Tensor<T, AnyShape, B> out = apply<Op>(x.raw(), op);
  const bool rg = needs_grad(tape, x);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), grad] {
      if (od->grad.empty()) return;
      const auto& saved = UsesOutput ? od->value : xd->value;
      if (can_take_grad(*xd, *od)) {
        auto& g = take_grad(*xd, *od);  // dx = Grad(saved, g), element by element in g's buffer
        g = apply<Grad>(saved, g, grad);
        return;
      }
      accumulate(*xd, apply<Grad>(saved, od->grad, grad), od->grad.dims());
    });
  }
  return o;
}

/// y = x * s + c (scalars), the building block of scalar arithmetic.
template <class T, class S, class B>
Var<T, S, B> affine_scalar(Tape* tape, const Var<T, S, B>& x, T s, T c) {
  Tensor<T, AnyShape, B> out = x.raw() * s + c;
  const bool rg = needs_grad(tape, x);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), s] {
      if (od->grad.empty()) return;
      accumulate(*xd, od->grad * s, od->grad.dims());
    });
  }
  return o;
}

}  // namespace detail

#define ATTN_VAR_BINARY(fn, Op, sym)                                                              \
  template <Context C, class T, class SA, class SB, class B>                                      \
  auto fn(C& ctx, const Var<T, SA, B>& a, const Var<T, SB, B>& b) {                               \
    return detail::binary<expr::Op>(detail::tape_of(ctx), a, b);                                  \
  }                                                                                               \
  /** Operator form: records on the operands' tape (see Var::tape). */                            \
  template <class T, class SA, class SB, class B>                                                 \
  auto operator sym(const Var<T, SA, B>& a, const Var<T, SB, B>& b) {                             \
    return detail::binary<expr::Op>(detail::common_tape(a, b), a, b);                             \
  }
ATTN_VAR_BINARY(add, Add, +)
ATTN_VAR_BINARY(sub, Sub, -)
ATTN_VAR_BINARY(mul, Mul, *)
ATTN_VAR_BINARY(div, Div, /)
#undef ATTN_VAR_BINARY

/// x * s
template <Context C, class T, class S, class B>
Var<T, S, B> scale(C& ctx, const Var<T, S, B>& x, T s) { return detail::affine_scalar(detail::tape_of(ctx), x, s, T(0)); }
template <class T, class S, class B, class V>
  requires std::is_arithmetic_v<V>
Var<T, S, B> operator*(const Var<T, S, B>& x, V s) { return detail::affine_scalar(x.tape(), x, T(s), T(0)); }
template <class T, class S, class B, class V>
  requires std::is_arithmetic_v<V>
Var<T, S, B> operator*(V s, const Var<T, S, B>& x) { return detail::affine_scalar(x.tape(), x, T(s), T(0)); }
template <class T, class S, class B, class V>
  requires std::is_arithmetic_v<V>
Var<T, S, B> operator/(const Var<T, S, B>& x, V s) { return detail::affine_scalar(x.tape(), x, T(1) / T(s), T(0)); }
template <class T, class S, class B, class V>
  requires std::is_arithmetic_v<V>
Var<T, S, B> operator+(const Var<T, S, B>& x, V c) { return detail::affine_scalar(x.tape(), x, T(1), T(c)); }
template <class T, class S, class B, class V>
  requires std::is_arithmetic_v<V>
Var<T, S, B> operator-(const Var<T, S, B>& x, V c) { return detail::affine_scalar(x.tape(), x, T(1), -T(c)); }
template <class T, class S, class B>
Var<T, S, B> operator-(const Var<T, S, B>& x) { return detail::affine_scalar(x.tape(), x, T(-1), T(0)); }
template <Context C, class T, class S, class B>
Var<T, S, B> neg(C& ctx, const Var<T, S, B>& x) { return detail::affine_scalar(detail::tape_of(ctx), x, T(-1), T(0)); }

#define ATTN_VAR_UNARY(fn, Op, Grad, uses_out)                                                    \
  template <Context C, class T, class S, class B>                                                 \
  Var<T, S, B> fn(C& ctx, const Var<T, S, B>& x) {                                                \
    return detail::unary<expr::Op, grad_fn::Grad, uses_out>(detail::tape_of(ctx), x);             \
  }
ATTN_VAR_UNARY(exp, Exp, ExpGrad, true)
ATTN_VAR_UNARY(log, Log, LogGrad, false)
ATTN_VAR_UNARY(tanh, Tanh, TanhGrad, true)
ATTN_VAR_UNARY(sigmoid, Sigmoid, SigmoidGrad, true)
ATTN_VAR_UNARY(relu, Relu, ReluGrad, false)
ATTN_VAR_UNARY(gelu, Gelu, GeluGrad, false)
ATTN_VAR_UNARY(gelu_tanh, GeluTanh, GeluTanhGrad, false)  // torch's gelu(approximate="tanh")
ATTN_VAR_UNARY(silu, Silu, SiluGrad, false)
ATTN_VAR_UNARY(mish, Mish, MishGrad, false)
ATTN_VAR_UNARY(log_sigmoid, LogSigmoid, LogSigmoidGrad, false)
ATTN_VAR_UNARY(sqrt, Sqrt, SqrtGrad, true)
ATTN_VAR_UNARY(abs, Abs, AbsGrad, false)
#undef ATTN_VAR_UNARY

/// torch's leaky_relu: x where x > 0, else negative_slope x.
template <Context C, class T, class S, class B>
Var<T, S, B> leaky_relu(C& ctx, const Var<T, S, B>& x, double negative_slope = 0.01) {
  return detail::unary<expr::LeakyRelu, grad_fn::LeakyReluGrad, false>(detail::tape_of(ctx), x, {negative_slope}, {negative_slope});
}
/// torch's elu: x where x > 0, else alpha (exp(x) - 1).
template <Context C, class T, class S, class B>
Var<T, S, B> elu(C& ctx, const Var<T, S, B>& x, double alpha = 1.0) {
  return detail::unary<expr::Elu, grad_fn::EluGrad, false>(detail::tape_of(ctx), x, {alpha, 1.0}, {alpha, 1.0});
}
/// torch's selu: scale * elu(x, alpha) with the fixed SELU constants.
template <Context C, class T, class S, class B>
Var<T, S, B> selu(C& ctx, const Var<T, S, B>& x) {
  return detail::unary<expr::Elu, grad_fn::EluGrad, false>(detail::tape_of(ctx), x, {expr::kSeluAlpha, expr::kSeluScale},
                                                           {expr::kSeluAlpha, expr::kSeluScale});
}
/// torch's softplus: log(1 + exp(beta x)) / beta, linear where beta x > threshold. beta > 0.
template <Context C, class T, class S, class B>
Var<T, S, B> softplus(C& ctx, const Var<T, S, B>& x, double beta = 1.0, double threshold = 20.0) {
  if (!(beta > 0)) throw ArgumentError("attn::softplus: beta must be positive, got " + std::to_string(beta));
  return detail::unary<expr::Softplus, grad_fn::SoftplusGrad, false>(detail::tape_of(ctx), x, {beta, threshold}, {beta, threshold});
}
/// torch's hardtanh: x clamped to [min_val, max_val]; relu6 is hardtanh(x, 0, 6).
template <Context C, class T, class S, class B>
Var<T, S, B> hardtanh(C& ctx, const Var<T, S, B>& x, double min_val = -1.0, double max_val = 1.0) {
  if (!(min_val < max_val))
    throw ArgumentError("attn::hardtanh: min_val must be below max_val, got " + std::to_string(min_val) + " and " + std::to_string(max_val));
  return detail::unary<expr::Hardtanh, grad_fn::HardtanhGrad, false>(detail::tape_of(ctx), x, {min_val, max_val}, {min_val, max_val});
}
template <Context C, class T, class S, class B>
Var<T, S, B> relu6(C& ctx, const Var<T, S, B>& x) {
  return hardtanh(ctx, x, 0.0, 6.0);
}

}  // namespace attn
