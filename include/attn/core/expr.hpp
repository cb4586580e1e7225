// SPDX-License-Identifier: MIT
// Lazy element-wise expressions over tensors, views and scalars, with numpy broadcasting.
// Nothing is computed until the expression is assigned; then one pass writes the destination
// (a host loop on the CPU, one kernel on a device backend: B::assign).
//   out = a * b + attn::exp(c) * 0.5f;    // one loop, no temporaries; a, b, c broadcast to out
#pragma once
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "host_device.hpp"
#include "tensor.hpp"

namespace attn {

namespace expr {

/// Element-wise functors, shared by the CPU loops and the CUDA kernels.
struct Add { template <class T> ATTN_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> ATTN_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> ATTN_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> ATTN_HD T operator()(T a, T b) const { return a / b; } };
struct Max { template <class T> ATTN_HD T operator()(T a, T b) const { return a > b ? a : b; } };
struct Min { template <class T> ATTN_HD T operator()(T a, T b) const { return a < b ? a : b; } };
struct Neg { template <class T> ATTN_HD T operator()(T a) const { return -a; } };
struct Exp { template <class T> ATTN_HD T operator()(T a) const { using std::exp; return exp(a); } };
struct Log { template <class T> ATTN_HD T operator()(T a) const { using std::log; return log(a); } };
struct Sqrt { template <class T> ATTN_HD T operator()(T a) const { using std::sqrt; return sqrt(a); } };
struct Abs { template <class T> ATTN_HD T operator()(T a) const { return a < T(0) ? -a : a; } };
struct Tanh { template <class T> ATTN_HD T operator()(T a) const { using std::tanh; return tanh(a); } };
struct Sigmoid {
  template <class T> ATTN_HD T operator()(T a) const {
    using std::exp;
    // Two branches keep exp() from overflowing for large |a|.
    if (a >= T(0)) return T(1) / (T(1) + exp(-a));
    T e = exp(a);
    return e / (T(1) + e);
  }
};
struct Relu { template <class T> ATTN_HD T operator()(T a) const { return a > T(0) ? a : T(0); } };
/// GELU, exact (erf) form, as torch.nn.functional.gelu's default.
struct Gelu {
  template <class T> ATTN_HD T operator()(T a) const {
    using std::erf;
    return T(0.5) * a * (T(1) + erf(a * T(0.70710678118654752440)));
  }
};

/// GELU, tanh form (torch's gelu(approximate="tanh")): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <class T> ATTN_HD T operator()(T a) const {
    using std::tanh;
    return T(0.5) * a * (T(1) + tanh(T(0.79788456080286535588) * (a + T(0.044715) * a * a * a)));
  }
};
/// SiLU (swish): x sigmoid(x).
struct Silu { template <class T> ATTN_HD T operator()(T a) const { return a * Sigmoid{}(a); } };
/// softplus(x) = log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's form).
struct Softplus {
  double beta = 1, threshold = 20;
  template <class T> ATTN_HD T operator()(T a) const {
    using std::exp;
    using std::log1p;
    const T bx = T(beta) * a;
    return bx > T(threshold) ? a : log1p(exp(bx)) / T(beta);
  }
};
/// Mish: x tanh(softplus(x)).
struct Mish {
  template <class T> ATTN_HD T operator()(T a) const {
    using std::tanh;
    return a * tanh(Softplus{}(a));
  }
};
/// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), finite for every x.
struct LogSigmoid {
  template <class T> ATTN_HD T operator()(T a) const {
    using std::exp;
    using std::log1p;
    return (a < T(0) ? a : T(0)) - log1p(exp(a < T(0) ? a : -a));
  }
};
/// x where x > 0, else negative_slope x.
struct LeakyRelu {
  double negative_slope = 0.01;
  template <class T> ATTN_HD T operator()(T a) const { return a > T(0) ? a : T(negative_slope) * a; }
};
/// x where x > 0, else alpha (exp(x) - 1); scale times that (SELU: scale and alpha fixed).
struct Elu {
  double alpha = 1, scale = 1;
  template <class T> ATTN_HD T operator()(T a) const {
    using std::expm1;
    return T(scale) * (a > T(0) ? a : T(alpha) * expm1(a));
  }
};
/// x clamped to [min_val, max_val].
struct Hardtanh {
  double min_val = -1, max_val = 1;
  template <class T> ATTN_HD T operator()(T a) const { return a < T(min_val) ? T(min_val) : a > T(max_val) ? T(max_val) : a; }
};
/// SELU's constants (Klambauer et al.), as torch's.
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;

/// Marker base; every expression node has `is_expression`, `value_type`, `shape_type`,
/// `backend_type` (where its tensors live; void for scalars), `dims()` (its broadcast extents)
/// and `bind(out_dims)` returning an evaluator with `row(idx)`. Evaluators and their rows are
/// plain structs of pointers, strides and functors, callable on the host and on a CUDA device.
struct Node {
  using is_expression = void;
};

/// An assignment's destination, for the aliasing check: its first element, its extents and strides,
/// the element size, and the bytes [lo, hi) its elements span.
struct Written {
  const void* p;
  const Dims* d;
  const Dims* st;
  std::size_t elem;
  const char* lo;
  const char* hi;
};

/// The bytes [lo, hi) that a strided view of extents d spans (lo == hi when it is empty).
inline std::pair<const char*, const char*> span_of(const void* p, const Dims& d, const Dims& st, std::size_t elem) {
  const char* lo = static_cast<const char*>(p);
  if (d.numel() == 0) return {lo, lo};
  std::size_t last = 0;
  for (std::size_t a = 0; a < d.n; ++a) last += (d.v[a] - 1) * st.v[a];
  return {lo, lo + (last + 1) * elem};
}

/// Whether evaluating e element by element into w could read an element after writing it: e reads
/// memory that w covers other than each output element's own (a transposed, shifted or broadcast
/// view of the destination). Nodes of other kinds (a user's own) are taken as reading nothing of it.
template <class E>
bool reads_written(const E& e, const Written& w) {
  if constexpr (requires { e.reads_written(w); }) return e.reads_written(w);
  else return false;
}

/// The backend of an expression with operands on backends L and R (void: a scalar, any backend).
template <class L, class R>
struct common_backend {
  static_assert(std::is_void_v<L> || std::is_void_v<R> || std::is_same_v<L, R>,
                "attn element-wise op: the operands live on different backends");
  using type = std::conditional_t<std::is_void_v<L>, R, L>;
};

/// A leaf: a strided view of backend B's memory, read with broadcasting.
template <class T, class S, class B = cpu>
struct Leaf : Node {
  using value_type = std::remove_const_t<T>;
  using shape_type = S;
  using backend_type = B;
  const value_type* p;
  Dims d, st;
  Dims dims() const { return d; }
  struct Row {
    const value_type* p;
    std::size_t s;
    ATTN_HD value_type operator[](std::size_t j) const { return p[j * s]; }
  };
  struct Bound {
    const value_type* p;
    Dims st;  // aligned to the output rank; 0 on broadcast axes
    std::size_t r;
    ATTN_HD Row row(const std::size_t* idx) const {
      std::size_t off = 0;
      for (std::size_t a = 0; a + 1 < r; ++a) off += idx[a] * st.v[a];
      return {p + off, r ? st.v[r - 1] : 0};
    }
  };
  Bound bind(const Dims& out) const {
    Bound b{p, Dims::of_rank(out.n), out.n};
    // An operand of higher rank: its extra leading axes must be 1 (they would be read at index 0).
    for (std::size_t k = 0; k + out.n < d.n; ++k)
      if (d.v[k] != 1) shape_mismatch("element-wise expression", "operand has more axes than the destination", d, out);
    for (std::size_t i = 0; i < out.n; ++i) {
      if (i + d.n < out.n) continue;  // absent leading axis: broadcast
      std::size_t k = i + d.n - out.n;
      if (d.v[k] == out.v[i]) b.st.v[i] = st.v[k];
      else if (d.v[k] == 1) b.st.v[i] = 0;
      else shape_mismatch("element-wise expression", "operand cannot broadcast to the destination", d, out);
    }
    return b;
  }
  /// Reads only the output element itself wherever it overlaps w: the same first element and, on
  /// every axis the output runs along, the destination's stride.
  bool reads_written(const Written& w) const {
    const auto [lo, hi] = span_of(p, d, st, sizeof(value_type));
    if (lo == hi || w.lo == w.hi || hi <= w.lo || w.hi <= lo) return false;
    if (static_cast<const void*>(p) != w.p || sizeof(value_type) != w.elem) return true;
    const Bound b = bind(*w.d);
    for (std::size_t i = 0; i < w.d->n; ++i)
      if (w.d->v[i] > 1 && b.st.v[i] != w.st->v[i]) return true;
    return false;
  }
};

template <class T>
struct Scalar : Node {
  using value_type = T;
  using shape_type = Shape<>;
  using backend_type = void;
  T v;
  Dims dims() const { return Dims{}; }
  struct Row {
    T v;
    ATTN_HD T operator[](std::size_t) const { return v; }
  };
  struct Bound {
    T v;
    ATTN_HD Row row(const std::size_t*) const { return {v}; }
  };
  Bound bind(const Dims&) const { return {v}; }
};

template <class Op, class E>
struct Unary : Node {
  using value_type = typename E::value_type;
  using shape_type = typename E::shape_type;
  using backend_type = typename E::backend_type;
  E e;
  Op op;
  Dims dims() const { return e.dims(); }
  template <class R>
  struct Row {
    R r;
    Op op;
    ATTN_HD value_type operator[](std::size_t j) const { return op(r[j]); }
  };
  template <class BE>
  struct Bound {
    BE e;
    Op op;
    ATTN_HD auto row(const std::size_t* idx) const { return Row<decltype(e.row(idx))>{e.row(idx), op}; }
  };
  auto bind(const Dims& out) const { return Bound<decltype(e.bind(out))>{e.bind(out), op}; }
  bool reads_written(const Written& w) const { return expr::reads_written(e, w); }
};

template <class SL, class SR>
struct broadcast_shape {
  using type = shapes::broadcast_t<SL, SR>;
};
template <class S>
struct broadcast_shape<S, AnyShape> { using type = AnyShape; };
template <class S>
struct broadcast_shape<AnyShape, S> { using type = AnyShape; };
template <>
struct broadcast_shape<AnyShape, AnyShape> { using type = AnyShape; };

template <class Op, class L, class R>
struct Binary : Node {
  using value_type = typename L::value_type;
  static_assert(std::is_same_v<value_type, typename R::value_type>, "attn element-wise op: operands have different element types");
  using shape_type = typename broadcast_shape<typename L::shape_type, typename R::shape_type>::type;
  using backend_type = typename common_backend<typename L::backend_type, typename R::backend_type>::type;
  L l;
  R r;
  Op op;
  Dims dims() const { return broadcast_dims("element-wise expression", l.dims(), r.dims()); }
  template <class RL, class RR>
  struct Row {
    RL a;
    RR b;
    Op op;
    ATTN_HD value_type operator[](std::size_t j) const { return op(a[j], b[j]); }
  };
  template <class BL, class BR>
  struct Bound {
    BL a;
    BR b;
    Op op;
    ATTN_HD auto row(const std::size_t* idx) const { return Row<decltype(a.row(idx)), decltype(b.row(idx))>{a.row(idx), b.row(idx), op}; }
  };
  auto bind(const Dims& out) const { return Bound<decltype(l.bind(out)), decltype(r.bind(out))>{l.bind(out), r.bind(out), op}; }
  bool reads_written(const Written& w) const { return expr::reads_written(l, w) || expr::reads_written(r, w); }
};

template <class X>
concept Expression = requires { typename std::remove_cvref_t<X>::is_expression; };
template <class X>
concept Operand = Expression<X> || is_tensor<std::remove_cvref_t<X>>::value || is_tensor_view<std::remove_cvref_t<X>>::value;

/// Turns a tensor or view into a leaf; passes expressions through.
template <class X>
auto as_expr(const X& x) {
  if constexpr (Expression<X>) {
    return x;
  } else if constexpr (is_tensor<X>::value) {
    return Leaf<const typename X::value_type, typename X::shape_type, typename X::backend>{
        {}, x.data(), x.dims(), contiguous_strides(x.dims())};
  } else {
    return Leaf<const typename X::value_type, typename X::shape_type, typename X::backend>{{}, x.data(), x.dims(), x.strides()};
  }
}

/// The backend an expression is evaluated on: its tensors' backend, or cpu for scalars only.
template <class E>
using backend_of = std::conditional_t<std::is_void_v<typename E::backend_type>, cpu, typename E::backend_type>;

template <class X>
using value_of = typename decltype(as_expr(std::declval<const X&>()))::value_type;

/// The host loop of assign: base (d, strides st) = bound, row by row.
template <class T, class Bound>
void assign_host(T* base, const Dims& d, const Dims& st, const Bound& bound) {
  const std::size_t r = d.n;
  const std::size_t inner = r ? d.v[r - 1] : 1;
  const std::size_t outer = inner ? d.numel() / inner : 0;
  const std::size_t ds = r ? st.v[r - 1] : 1;
  auto body = [&](std::size_t o) {
    std::size_t idx[max_rank] = {};
    std::size_t rem = o, off = 0;
    for (std::size_t a = r - 1; a-- > 0;) {
      idx[a] = rem % d.v[a];
      rem /= d.v[a];
      off += idx[a] * st.v[a];
    }
    auto row = bound.row(idx);
    T* out = base + off;
    if (ds == 1) {
      for (std::size_t j = 0; j < inner; ++j) out[j] = row[j];
    } else {
      for (std::size_t j = 0; j < inner; ++j) out[j * ds] = row[j];
    }
  };
  if (r == 0) {
    std::size_t idx[max_rank] = {};
    *base = bound.row(idx)[0];
    return;
  }
  const long long n_outer = static_cast<long long>(outer);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (outer * inner > (1u << 15) && n_outer > 1)
#endif
  for (long long o = 0; o < n_outer; ++o) body(static_cast<std::size_t>(o));
}

/// Evaluates e into the strided destination dst in one pass: threaded when large on the CPU;
/// a backend whose memory the host cannot read evaluates the bound expression itself
/// (B::assign(out, dims, strides, bound), one kernel). Where e reads the destination other than
/// element by element (`a = a.transpose(0, 1) * 2`, `a -= a's first row`), e is evaluated into a
/// new tensor first and then copied, as if every operand were read before anything was written.
template <class T, class S, class B, class E>
void assign(TensorView<T, S, B> dst, const E& e) {
  static_assert(std::is_void_v<typename E::backend_type> || std::is_same_v<typename E::backend_type, B>,
                "attn element-wise assignment: the expression's tensors live on another backend than the destination");
  const Dims& d = dst.dims();
  auto bound = e.bind(d);
  const auto run = [&d](T* out, const Dims& st, const auto& b) {
    if constexpr (!B::host_accessible) {
      B::assign(out, d, st, b);
    } else {
      assign_host(out, d, st, b);
    }
  };
  const auto [lo, hi] = span_of(dst.data(), d, dst.strides(), sizeof(T));
  if (expr::reads_written(e, Written{dst.data(), &d, &dst.strides(), sizeof(T), lo, hi})) {
    Tensor<std::remove_const_t<T>, AnyShape, B> tmp(d);
    run(tmp.data(), contiguous_strides(d), bound);
    const Leaf<const std::remove_const_t<T>, AnyShape, B> copy{{}, tmp.data(), d, contiguous_strides(d)};
    run(dst.data(), dst.strides(), copy.bind(d));
    return;
  }
  run(dst.data(), dst.strides(), bound);
}

}  // namespace expr

// ---- Operators. Each returns an unevaluated node.
#define ATTN_BINARY_OP(sym, Op)                                                                                  \
  template <class L, class R>                                                                                    \
    requires(expr::Operand<L> && expr::Operand<R>)                                                               \
  auto operator sym(const L& l, const R& r) {                                                                    \
    using EL = decltype(expr::as_expr(l));                                                                       \
    using ER = decltype(expr::as_expr(r));                                                                       \
    return expr::Binary<expr::Op, EL, ER>{{}, expr::as_expr(l), expr::as_expr(r), {}};                           \
  }                                                                                                              \
  template <class L, class V>                                                                                    \
    requires(expr::Operand<L> && std::is_arithmetic_v<V>)                                                        \
  auto operator sym(const L& l, V v) {                                                                           \
    using EL = decltype(expr::as_expr(l));                                                                       \
    using T = typename EL::value_type;                                                                           \
    return expr::Binary<expr::Op, EL, expr::Scalar<T>>{{}, expr::as_expr(l), expr::Scalar<T>{{}, T(v)}, {}};      \
  }                                                                                                              \
  template <class V, class R>                                                                                    \
    requires(std::is_arithmetic_v<V> && expr::Operand<R>)                                                        \
  auto operator sym(V v, const R& r) {                                                                           \
    using ER = decltype(expr::as_expr(r));                                                                       \
    using T = typename ER::value_type;                                                                           \
    return expr::Binary<expr::Op, expr::Scalar<T>, ER>{{}, expr::Scalar<T>{{}, T(v)}, expr::as_expr(r), {}};      \
  }
ATTN_BINARY_OP(+, Add)
ATTN_BINARY_OP(-, Sub)
ATTN_BINARY_OP(*, Mul)
ATTN_BINARY_OP(/, Div)
#undef ATTN_BINARY_OP

#define ATTN_UNARY_FN(name, Op)                                      \
  template <class X>                                                 \
    requires expr::Operand<X>                                        \
  auto name(const X& x) {                                            \
    using E = decltype(expr::as_expr(x));                            \
    return expr::Unary<expr::Op, E>{{}, expr::as_expr(x), {}};       \
  }
ATTN_UNARY_FN(operator-, Neg)
ATTN_UNARY_FN(exp, Exp)
ATTN_UNARY_FN(log, Log)
ATTN_UNARY_FN(sqrt, Sqrt)
ATTN_UNARY_FN(abs, Abs)
ATTN_UNARY_FN(tanh, Tanh)
ATTN_UNARY_FN(sigmoid, Sigmoid)
ATTN_UNARY_FN(relu, Relu)
ATTN_UNARY_FN(gelu, Gelu)
ATTN_UNARY_FN(gelu_tanh, GeluTanh)
ATTN_UNARY_FN(silu, Silu)
ATTN_UNARY_FN(mish, Mish)
ATTN_UNARY_FN(log_sigmoid, LogSigmoid)
#undef ATTN_UNARY_FN

template <class L, class R>
  requires(expr::Operand<L> && expr::Operand<R>)
auto maximum(const L& l, const R& r) {
  return expr::Binary<expr::Max, decltype(expr::as_expr(l)), decltype(expr::as_expr(r))>{{}, expr::as_expr(l), expr::as_expr(r), {}};
}
template <class L, class R>
  requires(expr::Operand<L> && expr::Operand<R>)
auto minimum(const L& l, const R& r) {
  return expr::Binary<expr::Min, decltype(expr::as_expr(l)), decltype(expr::as_expr(r))>{{}, expr::as_expr(l), expr::as_expr(r), {}};
}

/// A lazy node applying a user functor: binary (`apply<Op>(l, r)`) or unary (`apply<Op>(x)`).
template <class Op, class L, class R>
  requires(expr::Operand<L> && expr::Operand<R>)
auto apply(const L& l, const R& r, Op op = {}) {
  return expr::Binary<Op, decltype(expr::as_expr(l)), decltype(expr::as_expr(r))>{{}, expr::as_expr(l), expr::as_expr(r), op};
}
template <class Op, class X>
  requires expr::Operand<X>
auto apply(const X& x, Op op = {}) {
  return expr::Unary<Op, decltype(expr::as_expr(x))>{{}, expr::as_expr(x), op};
}

/// Evaluates an expression into a new tensor of its broadcast extents, on its tensors' backend.
template <class E>
  requires expr::Expression<E>
auto eval(const E& e) {
  using T = typename E::value_type;
  using S = typename E::shape_type;
  return Tensor<T, S, expr::backend_of<E>>(e);
}

template <class T, class S, class B>
template <class E>
  requires requires(const E& e) { e.bind(Dims{}); typename E::is_expression; }
Tensor<T, S, B>::Tensor(const E& e) : Tensor(e.dims()) {
  static_assert(std::is_same_v<typename E::value_type, T>, "Tensor from expression: element types differ");
  expr::assign(view(), e);
}

template <class T, class S, class B>
template <class E>
  requires requires(const E& e) { e.bind(Dims{}); typename E::is_expression; }
Tensor<T, S, B>& Tensor<T, S, B>::operator=(const E& e) {
  static_assert(std::is_same_v<typename E::value_type, T>, "Tensor assignment: element types differ");
  if constexpr (is_shape<S>::value && is_shape<typename E::shape_type>::value) {
    // Static extents of the expression must equal those of the destination (or be 1 / dyn).
    static_assert(E::shape_type::rank <= S::rank, "Tensor assignment: expression has higher rank than the destination");
  }
  if (empty()) {
    *this = Tensor(e.dims());
  }
  expr::assign(view(), e);
  return *this;
}

/// In-place compound assignment: dst op= expr, one pass.
#define ATTN_COMPOUND(sym, Op)                                                                 \
  template <class T, class S, class B, class R>                                                \
    requires(expr::Operand<R> || std::is_arithmetic_v<R>)                                      \
  Tensor<T, S, B>& operator sym(Tensor<T, S, B>& dst, const R& r) {                            \
    if (dst.empty() && dst.dims().numel() != 0) throw ShapeError("compound assignment " #sym " into an unallocated tensor"); \
    auto v = dst.view();                                                                       \
    if constexpr (std::is_arithmetic_v<R>) {                                                   \
      expr::assign(v, expr::Binary<expr::Op, decltype(expr::as_expr(dst)), expr::Scalar<T>>{   \
                          {}, expr::as_expr(dst), expr::Scalar<T>{{}, T(r)}, {}});             \
    } else {                                                                                   \
      expr::assign(v, expr::Binary<expr::Op, decltype(expr::as_expr(dst)), decltype(expr::as_expr(r))>{ \
                          {}, expr::as_expr(dst), expr::as_expr(r), {}});                      \
    }                                                                                          \
    return dst;                                                                                \
  }
ATTN_COMPOUND(+=, Add)
ATTN_COMPOUND(-=, Sub)
ATTN_COMPOUND(*=, Mul)
ATTN_COMPOUND(/=, Div)
#undef ATTN_COMPOUND

}  // namespace attn
