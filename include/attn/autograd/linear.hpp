// SPDX-License-Identifier: MIT
// The affine map on Vars, y = x W^T + b over the last axis (PyTorch's layout: W (Out, In), b (Out)),
// as one op: the bias is the GEMM's initial C, and backward is dx += dy W, dW += dy^T x,
// db += column sums of dy. nn::Linear and nn::Attention's projections both run it. With a row map
// only the listed rows of x are computed, gathered into one packed GEMM (nn::PaddedRows::zero). Under
// a PrecisionScope of Precision::bf16 (core/precision.hpp) the CPU op's three products take bfloat16
// operands with float sums (kernels::gemm_bf16): the weight is packed to bf16, x and dy are
// rounded as they are packed; the bias, the output and every gradient stay float. Under
// Precision::int8 (inference only) the product takes the weight quantized to int8 per output
// channel and x quantized per row (kernels::gemm_int8). Without a gradient to record, the weight's
// int8 or bf16 pack is kept with it and reused until its value changes (autograd/packed_weights.hpp).
//   auto y = attn::linear(ctx, x, w, b);                      // (..., In) x (Out, In)^T + (Out) -> (..., Out)
//   attn::real_rows(mask, rows);  auto y = attn::linear(ctx, x, w, b, {.map = &rows});
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/instantiate.hpp"
#include "../core/precision.hpp"
#include "elementwise.hpp"
#include "packed_weights.hpp"

namespace attn {

/// Which rows of x a linear op computes.
template <class B = cpu>
struct LinearRows {
  /// Ascending flat indices into x's rows (x seen as (rows, In)); null: every row. Only these rows
  /// are computed; every other row of y is zero and passes no gradient.
  const Tensor<std::int64_t, AnyShape, B>* map = nullptr;
  /// Whether the rows outside the map are written as zeros; false leaves them unwritten, for a
  /// reader that never reads them.
  bool fill_rest = true;
};

/// The real-token rows of a (B, T) mask (nonzero entries) as flat row indices b*T + t, ascending,
/// in the mask's backend: the map of LinearRows. Returns false, and leaves rows untouched, when
/// every row is real. *prefix tells whether each sample's real tokens come first (a lengths mask:
/// padding only at the end).
template <class T, class SM, class B>
bool real_rows(const Tensor<T, SM, B>& mask, Tensor<std::int64_t, AnyShape, B>& rows, bool* prefix = nullptr) {
  const std::size_t n = mask.numel(), t = mask.rank() == 2 ? mask.dims().v[1] : n;
  std::vector<T> host;
  const T* m = mask.data();
  if constexpr (!B::host_accessible) {
    host = mask.to_vector();
    m = host.data();
  }
  std::size_t count = 0;
  bool pre = true;
  for (std::size_t i = 0; i < n; ++i) {
    count += m[i] != T(0);
    pre = pre && (i % t == 0 || m[i] == T(0) || m[i - 1] != T(0));
  }
  if (prefix) *prefix = pre;
  if (count == n) return false;
  Tensor<std::int64_t, AnyShape, cpu> r(Dims{count});
  std::int64_t* idx = r.data();
  for (std::size_t i = 0, k = 0; i < n; ++i)
    if (m[i] != T(0)) idx[k++] = static_cast<std::int64_t>(i);
  if constexpr (std::is_same_v<B, cpu>) {
    rows = std::move(r);
  } else {
    rows = Tensor<std::int64_t, AnyShape, B>(Dims{count});
    B::template from_host<std::int64_t>(rows.data(), idx, count);
  }
  return true;
}

namespace detail {

template <class S, class SW>
struct linear_shape {
  static_assert(SW::rank == 2, "linear: the weight must be a matrix (Out, In)");
  static_assert(S::rank >= 1, "linear: the input needs an axis of In features");
  static_assert(shapes::may_equal(shapes::back<S, 0>, shapes::back<SW, 0>),
                "linear: the input's last extent differs from the weight's In");
  using type = shapes::replace_back_t<S, shapes::back<SW, 1>>;
};
template <class SW>
struct linear_shape<AnyShape, SW> { using type = AnyShape; };
template <class S>
  requires(!std::is_same_v<S, AnyShape>)
struct linear_shape<S, AnyShape> { using type = AnyShape; };

/// The op behind attn::linear, on shape-erased Vars (instantiated once per element type and backend;
/// the CPU ones in attn::compiled under ATTN_SEPARATE_COMPILATION).
template <class T, class B>
Var<T, AnyShape, B> linear_impl(Tape* tape, const Var<T, AnyShape, B>& x, const Var<T, AnyShape, B>& w,
                                const Var<T, AnyShape, B>& bias, const LinearRows<B>& sel) {
  using Ten = Tensor<T, AnyShape, B>;
  using Map = Tensor<std::int64_t, AnyShape, B>;
  if (w.rank() != 2 || x.rank() == 0 || x.dims().back() != w.size(1))
    shape_mismatch("linear", "expected x (..., In) and weight (Out, In)", x.dims(), w.dims());
  if (bias.defined() && !(bias.dims() == Dims{w.size(0)}))
    shape_mismatch("linear", "expected bias (Out) of weight (Out, In)", bias.dims(), w.dims());
  const std::size_t in = w.size(1), out_w = w.size(0), all_rows = x.numel() / in;
  const Map map = sel.map ? *sel.map : Map{};
  const std::int64_t* idx = sel.map ? map.data() : nullptr;
  const std::size_t rows = sel.map ? map.numel() : all_rows;
  Dims od = x.dims();
  od.v[od.n - 1] = out_w;
  Ten y(od);
  if (idx && sel.fill_rest) {
    if constexpr (B::host_accessible) {  // zero the rows outside the map (the map is ascending)
      std::size_t next = 0;
      for (std::size_t k = 0; k <= rows; ++k) {
        const std::size_t end = k < rows ? static_cast<std::size_t>(idx[k]) : all_rows;
        if (end > next) B::template fill<T>(y.data() + next * out_w, (end - next) * out_w, T(0));
        next = end + 1;
      }
    } else {  // the map is in device memory: zero everything, the map's rows are written below
      B::template fill<T>(y.data(), y.numel(), T(0));
    }
  }
  // The packed rows of x and y (the tensors themselves without a row map).
  Ten xp, yp;
  const T* X = x.raw().data();
  T* Y = y.data();
  if (idx) {
    xp = Ten({rows, in});
    yp = Ten({rows, out_w});
    kernels::copy_rows(B{}, rows, in, X, in, idx, xp.data(), in, nullptr, false);
    X = xp.data();
    Y = yp.data();
  }
  const bool has_bias = bias.defined();
  constexpr bool can_bf16 = std::is_same_v<T, float> && std::is_same_v<B, cpu>;
  const bool rg = needs_grad(tape, x, w, bias);
  // Not constants in any instantiation (precision() is read first): the backward captures bf16, and
  // Clang warns of a capture of a constant.
  const Precision asked = precision();
  const Precision prec = asked != Precision::fp32 && can_bf16 ? asked : Precision::fp32;
  const bool bf16 = prec == Precision::bf16;
  if (prec == Precision::int8 && rg)
    throw ArgumentError("linear: Precision::int8 is for inference (dynamic quantization); this call would record a gradient "
                        "(run it under attn::NoGrad, or train in fp32 or bf16)");
  if (prec != Precision::fp32) {
    if constexpr (can_bf16) {
      if (has_bias) kernels::copy_rows(B{}, rows, out_w, bias.raw().data(), 0, nullptr, Y, out_w, nullptr, false);
      const float beta = has_bias ? 1.f : 0.f;
      if (prec == Precision::int8) {  // the weight's int8 pack, kept with it while it is unchanged
        const auto pw = detail::int8_weight(*w.data());
        kernels::gemm_int8(int(rows), int(out_w), int(in), X, int(in), *pw, beta, Y, int(out_w));
      } else if (!rg) {  // inference: the bf16 pack kept with the weight
        const auto pw = detail::bf16_weight(*w.data());
        kernels::gemm_bf16(Trans::no, int(rows), int(out_w), int(in), 1.f, X, int(in), *pw, beta, Y, int(out_w));
      } else {  // training: the weight changes every step, packed per call
        kernels::PackedBf16 pw;
        pw.pack(Trans::yes, int(in), int(out_w), w.raw().data(), int(in));
        kernels::gemm_bf16(Trans::no, int(rows), int(out_w), int(in), 1.f, X, int(in), pw, beta, Y, int(out_w));
      }
    }
  } else if constexpr (B::host_accessible) {  // each thread adds the bias to its rows after its GEMM
    kernels::gemm_rows(B{}, Trans::yes, rows, out_w, in, X, w.raw().data(), int(in), T(0), Y, has_bias ? bias.raw().data() : nullptr);
  } else {
    if (has_bias) kernels::copy_rows(B{}, rows, out_w, bias.raw().data(), 0, nullptr, Y, out_w, nullptr, false);
    kernels::gemm_rows(B{}, Trans::yes, rows, out_w, in, X, w.raw().data(), int(in), has_bias ? T(1) : T(0), Y,
                       static_cast<const T*>(nullptr));
  }
  if (idx) kernels::copy_rows(B{}, rows, out_w, Y, out_w, nullptr, y.data(), out_w, idx, false);
  xp = {};
  yp = {};
  auto o = make_out<AnyShape>(tape, std::move(y), rg);
  if (rg) {
    tape->push(o.data(), {x.data().get(), w.data().get(), has_bias ? bias.data().get() : nullptr},
               [xd = x.data(), wd = w.data(), bd = has_bias ? bias.data() : nullptr, od = o.data(), rows, in, out_w, map, bf16] {
      if (od->grad.empty()) return;
      const std::int64_t* idx = map.empty() ? nullptr : map.data();
      const T* g = od->grad.data();
      const T* X = xd->value.data();
      Ten gp, xp, dxp;
      if (idx) {
        gp = Ten({rows, out_w});
        kernels::copy_rows(B{}, rows, out_w, g, out_w, idx, gp.data(), out_w, nullptr, false);
        g = gp.data();
      }
      if (bf16) {
        if constexpr (can_bf16) {  // dx (+)= dy W, dW += dy^T x, with bf16 operands
          if (xd->requires_grad) {
            kernels::PackedBf16 pw;
            pw.pack(Trans::no, int(out_w), int(in), wd->value.data(), int(in));
            if (idx) {
              T* dx = xd->grad_ref().data();
              dxp = Ten({rows, in});
              kernels::gemm_bf16(Trans::no, int(rows), int(in), int(out_w), 1.f, g, int(out_w), pw, 0.f, dxp.data(), int(in));
              kernels::copy_rows(B{}, rows, in, dxp.data(), in, nullptr, dx, in, idx, true);
              dxp = {};
            } else {
              bool overwrite = false;
              T* dx = xd->grad_to_write(overwrite).data();
              kernels::gemm_bf16(Trans::no, int(rows), int(in), int(out_w), 1.f, g, int(out_w), pw, overwrite ? 0.f : 1.f, dx, int(in));
            }
          }
          if (wd->requires_grad) {
            if (idx) {
              xp = Ten({rows, in});
              kernels::copy_rows(B{}, rows, in, X, in, idx, xp.data(), in, nullptr, false);
              X = xp.data();
            }
            kernels::PackedBf16 px;
            px.pack(Trans::no, int(rows), int(in), X, int(in));
            xp = {};
            kernels::gemm_bf16(Trans::yes, int(out_w), int(in), int(rows), 1.f, g, int(out_w), px, 1.f,
                               wd->grad_ref().data(), int(in));
          }
          if (bd && bd->requires_grad) kernels::sum_to(B{}, g, Dims{rows, out_w}, bd->grad_ref().data(), Dims{out_w}, true);
          return;
        }
      }
      if (xd->requires_grad) {
        if (idx) {
          T* dx = xd->grad_ref().data();
          dxp = Ten({rows, in});
          kernels::gemm_rows(B{}, Trans::no, rows, in, out_w, g, wd->value.data(), int(in), T(0), dxp.data(), static_cast<const T*>(nullptr));
          kernels::copy_rows(B{}, rows, in, dxp.data(), in, nullptr, dx, in, idx, true);
          dxp = {};
        } else {
          bool overwrite = false;
          T* dx = xd->grad_to_write(overwrite).data();
          kernels::gemm_rows(B{}, Trans::no, rows, in, out_w, g, wd->value.data(), int(in), overwrite ? T(0) : T(1), dx,
                             static_cast<const T*>(nullptr));
        }
      }
      if (wd->requires_grad) {
        if (idx) {
          xp = Ten({rows, in});
          kernels::copy_rows(B{}, rows, in, X, in, idx, xp.data(), in, nullptr, false);
          X = xp.data();
        }
        kernels::gemm_tn_accumulate(B{}, out_w, in, rows, g, X, wd->grad_ref().data());
      }
      if (bd && bd->requires_grad) kernels::sum_to(B{}, g, Dims{rows, out_w}, bd->grad_ref().data(), Dims{out_w}, true);
    });
  }
  return o;
}

}  // namespace detail

/// y = x W^T + b: x (..., In), w (Out, In), bias (Out) (undefined: none) -> (..., Out). With
/// rows.map, only the map's rows are computed (see LinearRows).
template <Context C, class T, class S, class SW, class SB, class B>
auto linear(C& ctx, const Var<T, S, B>& x, const Var<T, SW, B>& w, const Var<T, SB, B>& bias, const LinearRows<B>& rows = {}) {
  using SO = typename detail::linear_shape<S, SW>::type;
  return Var<T, SO, B>(detail::linear_impl<T, B>(detail::tape_of(ctx), x.erased(), w.erased(), bias.erased(), rows));
}

/// y = x W^T, without a bias.
template <Context C, class T, class S, class SW, class B>
auto linear(C& ctx, const Var<T, S, B>& x, const Var<T, SW, B>& w, const LinearRows<B>& rows = {}) {
  return linear(ctx, x, w, Var<T, AnyShape, B>(), rows);
}

#define ATTN_INSTANTIATE_CPU_LINEAR(X, T)                                                                                  \
  X template Var<T, AnyShape, cpu> detail::linear_impl<T, cpu>(Tape*, const Var<T, AnyShape, cpu>&,                       \
                                                               const Var<T, AnyShape, cpu>&, const Var<T, AnyShape, cpu>&, \
                                                               const LinearRows<cpu>&);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_LINEAR)

}  // namespace attn
