// SPDX-License-Identifier: MIT
// Shape ops on Vars: reshape (no copy), permute/transpose, slice and concat along an axis.
//   auto h = attn::permute<0, 2, 1, 3>(tape, attn::reshape<Shape<dyn, dyn, 8, 16>>(tape, x, {b, t, 8, 16}));
#pragma once
#include <array>
#include <vector>

#include "elementwise.hpp"

namespace attn {

namespace detail {

/// A view of contiguous tensor t with axes reordered: result axis i is t's axis perm[i].
template <class T, class B>
TensorView<const T, AnyShape, B> permuted_view(const Tensor<T, AnyShape, B>& t, const std::size_t* perm) {
  Dims d = Dims::of_rank(t.rank()), s = Dims::of_rank(t.rank());
  const Dims cs = contiguous_strides(t.dims());
  for (std::size_t i = 0; i < t.rank(); ++i) {
    d.v[i] = t.dims().v[perm[i]];
    s.v[i] = cs.v[perm[i]];
  }
  return {t.data(), d, s};
}

template <class T, class B>
void check_perm(const char* op, const Dims& d, const std::size_t* perm, std::size_t n) {
  if (n != d.n) throw ShapeError(std::string(op) + ": permutation of " + std::to_string(n) + " axes for shape " + d.str());
  bool seen[max_rank] = {};
  for (std::size_t i = 0; i < n; ++i) {
    if (perm[i] >= n || seen[perm[i]]) throw ShapeError(std::string(op) + ": invalid permutation for shape " + d.str());
    seen[perm[i]] = true;
  }
}

template <class S, class T, class S0, class B>
Var<T, S, B> permute_impl(Tape* tape, const Var<T, S0, B>& x, std::array<std::size_t, max_rank> perm, std::size_t n) {
  check_perm<T, B>("permute", x.dims(), perm.data(), n);
  auto src = permuted_view(x.raw(), perm.data());
  Tensor<T, AnyShape, B> out(src.dims());
  expr::assign(out.view(), expr::as_expr(src));
  const bool rg = needs_grad(tape, x);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data(), perm, n] {
      if (od->grad.empty() || !xd->requires_grad) return;
      std::array<std::size_t, max_rank> inv{};
      for (std::size_t i = 0; i < n; ++i) inv[perm[i]] = i;
      auto& gx = xd->grad_ref();
      auto gv = permuted_view(od->grad, inv.data());
      expr::assign(gx.view(), gx + gv);
    });
  }
  return o;
}

}  // namespace detail

/// Same elements, new extents (no copy of the value). S2 gives the static result shape.
template <class S2 = AnyShape, Context C, class T, class S, class B>
Var<T, S2, B> reshape(C& ctx, const Var<T, S, B>& x, const Dims& d) {
  if (d.numel() != x.numel()) shape_mismatch("reshape", "element count differs", x.dims(), d);
  check_dims<S2>("reshape", d);
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<S2>(tape, x.raw().reshape(d), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od = o.data()] {
      if (od->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      auto g = od->grad.reshape(gx.dims());
      gx += g;
    });
  }
  return o;
}

/// Reorders axes at compile time: result axis i is x's axis P[i].
template <std::size_t... P, Context C, class T, class S, class B>
auto permute(C& ctx, const Var<T, S, B>& x) {
  using R = shapes::permute_t<S, P...>;
  if constexpr (!std::is_same_v<S, AnyShape>) static_assert(sizeof...(P) == S::rank, "permute: one index per axis");
  return detail::permute_impl<R>(detail::tape_of(ctx), x, std::array<std::size_t, max_rank>{P...}, sizeof...(P));
}

/// Reorders axes chosen at run time.
template <Context C, class T, class S, class B>
Var<T, AnyShape, B> permute(C& ctx, const Var<T, S, B>& x, std::initializer_list<std::size_t> perm) {
  std::array<std::size_t, max_rank> p{};
  std::size_t i = 0;
  for (auto a : perm) {
    if (i == max_rank) throw ShapeError("permute: too many axes");
    p[i++] = a;
  }
  return detail::permute_impl<AnyShape>(detail::tape_of(ctx), x, p, i);
}

/// Swaps axes A0 and A1 (copies into contiguous memory).
template <std::size_t A0, std::size_t A1, Context C, class T, class S, class B>
auto transpose(C& ctx, const Var<T, S, B>& x) {
  std::array<std::size_t, max_rank> p{};
  for (std::size_t i = 0; i < max_rank; ++i) p[i] = i;
  std::swap(p[A0], p[A1]);
  if constexpr (std::is_same_v<S, AnyShape>) {
    return detail::permute_impl<AnyShape>(detail::tape_of(ctx), x, p, x.rank());
  } else {
    static_assert(A0 < S::rank && A1 < S::rank, "transpose: axis out of range");
    using R = shapes::replace_t<shapes::replace_t<S, A0, S::extents[A1]>, A1, S::extents[A0]>;
    return detail::permute_impl<R>(detail::tape_of(ctx), x, p, S::rank);
  }
}

/// Elements [start, start + len) along axis; the result's extent there is dynamic.
template <Context C, class T, class S, class B>
Var<T, AnyShape, B> slice(C& ctx, const Var<T, S, B>& x, std::size_t axis, std::size_t start, std::size_t len) {
  const Dims& d = x.dims();
  if (axis >= d.n || start > d.v[axis] || len > d.v[axis] - start)  // no start + len: it could wrap
    throw ShapeError("slice: [" + std::to_string(start) + ", " + std::to_string(start + len) + ") on axis " + std::to_string(axis) +
                     " is outside shape " + d.str());
  Dims od = d;
  od.v[axis] = len;
  const Dims cs = contiguous_strides(d);
  TensorView<const T, AnyShape, B> src(x.raw().data() + start * cs.v[axis], od, cs);
  Tensor<T, AnyShape, B> out(od);
  expr::assign(out.view(), expr::as_expr(src));
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, x);
  auto o = detail::make_out<AnyShape>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get()}, [xd = x.data(), od_ = o.data(), axis, start] {
      if (od_->grad.empty() || !xd->requires_grad) return;
      auto& gx = xd->grad_ref();
      const Dims cs = contiguous_strides(gx.dims());
      TensorView<T, AnyShape, B> dst(gx.data() + start * cs.v[axis], od_->grad.dims(), cs);
      expr::assign(dst, expr::as_expr(dst) + od_->grad);
    });
  }
  return o;
}

/// Joins Vars along axis (all other extents equal).
template <Context C, class T, class S, class B>
Var<T, AnyShape, B> concat(C& ctx, const std::vector<Var<T, S, B>>& xs, std::size_t axis) {
  if (xs.empty()) throw ShapeError("concat: no inputs");
  Dims od = xs[0].dims();
  if (axis >= od.n) throw ShapeError("concat: axis " + std::to_string(axis) + " out of range for shape " + od.str());
  od.v[axis] = 0;
  for (const auto& x : xs) {
    Dims a = x.dims(), b = xs[0].dims();
    a.v[axis] = b.v[axis] = 0;
    if (!(a == b)) shape_mismatch("concat", "extents differ off the concat axis", x.dims(), xs[0].dims());
    od.v[axis] += x.dims().v[axis];
  }
  Tensor<T, AnyShape, B> out(od);
  const Dims cs = contiguous_strides(od);
  std::size_t off = 0;
  std::vector<std::size_t> starts;
  for (const auto& x : xs) {
    TensorView<T, AnyShape, B> dst(out.data() + off * cs.v[axis], x.dims(), cs);
    expr::assign(dst, expr::as_expr(x.raw()));
    starts.push_back(off);
    off += x.dims().v[axis];
  }
  Tape* tape = detail::tape_of(ctx);
  bool rg = false;
  for (const auto& x : xs) rg = rg || detail::needs_grad(tape, x);
  auto o = detail::make_out<AnyShape>(tape, std::move(out), rg);
  if (rg) {
    std::vector<std::shared_ptr<VarData<T, B>>> ins;
    std::vector<const void*> inputs;
    for (const auto& x : xs) {
      ins.push_back(x.data());
      inputs.push_back(x.data().get());
    }
    tape->push(o.data(), inputs, [ins, starts, od_ = o.data(), axis] {
      if (od_->grad.empty()) return;
      const Dims cs = contiguous_strides(od_->grad.dims());
      for (std::size_t i = 0; i < ins.size(); ++i) {
        if (!ins[i]->requires_grad) continue;
        auto& gx = ins[i]->grad_ref();
        TensorView<const T, AnyShape, B> src(od_->grad.data() + starts[i] * cs.v[axis], gx.dims(), cs);
        expr::assign(gx.view(), gx + src);
      }
    });
  }
  return o;
}

}  // namespace attn
