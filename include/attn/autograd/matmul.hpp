// SPDX-License-Identifier: MIT
// Matrix products on Vars: (..., M, K) x (K, N) and batched (..., M, K) x (..., K, N), with the
// right operand optionally transposed (matmul_nt: a @ b^T). One GEMM per batch, none per row.
//   auto y = attn::matmul_nt(tape, x, w);     // (B, T, In) x (Out, In)^T -> (B, T, Out)
#pragma once
#include "elementwise.hpp"

#include <limits>

namespace attn {

namespace detail {

template <class SA, class SB, bool TransB>
struct matmul_shape {
  static constexpr std::size_t ka = shapes::back<SA, 0>;
  static constexpr std::size_t kb = TransB ? shapes::back<SB, 0> : shapes::back<SB, 1>;
  static constexpr std::size_t n = TransB ? shapes::back<SB, 1> : shapes::back<SB, 0>;
  static_assert(SA::rank >= 2 && SB::rank >= 2, "matmul: both operands need rank >= 2");
  static_assert(SB::rank == 2 || SB::rank == SA::rank, "matmul: rhs must be a matrix or have the lhs's batch axes");
  static_assert(shapes::may_equal(ka, kb),
                "matmul: static extents differ on the contracted axis (last axis of lhs vs the K axis of rhs)");
  using type = shapes::replace_back_t<SA, n>;
};
template <class SB, bool TransB>
struct matmul_shape<AnyShape, SB, TransB> { using type = AnyShape; };
template <class SA, bool TransB>
  requires(!std::is_same_v<SA, AnyShape>)
struct matmul_shape<SA, AnyShape, TransB> { using type = AnyShape; };

template <class T, class B>
struct MatmulGeometry {
  std::size_t batch, m, k, n;
  bool rhs_batched;
};

template <class T, class B>
MatmulGeometry<T, B> matmul_geometry(const char* op, const Dims& a, const Dims& b, bool trans_b) {
  if (a.n < 2 || b.n < 2) shape_mismatch(op, "operands need rank >= 2", a, b);
  MatmulGeometry<T, B> g{};
  g.m = a.back(1);
  g.k = a.back(0);
  const std::size_t kb = trans_b ? b.back(0) : b.back(1);
  g.n = trans_b ? b.back(1) : b.back(0);
  if (kb != g.k) shape_mismatch(op, "contracted extents differ", a, b);
  g.batch = 1;
  for (std::size_t i = 0; i + 2 < a.n; ++i) g.batch *= a.v[i];
  g.rhs_batched = b.n > 2;
  if (g.rhs_batched) {
    if (b.n != a.n) shape_mismatch(op, "batched operands differ in rank", a, b);
    for (std::size_t i = 0; i + 2 < a.n; ++i)
      if (a.v[i] != b.v[i]) shape_mismatch(op, "batch axes differ", a, b);
  }
  // The GEMMs take int extents (the batch folded into M when B is shared).
  constexpr std::size_t kMax = std::size_t(std::numeric_limits<int>::max());
  if (g.m > kMax || g.n > kMax || g.k > kMax || g.batch > kMax || (!g.rhs_batched && g.m != 0 && g.batch > kMax / g.m))
    shape_mismatch(op, "an extent (or batch x rows) above 2^31 - 1, the GEMM's int", a, b);
  return g;
}

template <class S, class T, class SA, class SB, class B>
Var<T, S, B> matmul_impl(Tape* tape, const Var<T, SA, B>& a, const Var<T, SB, B>& b, bool tb) {
  const char* op = tb ? "matmul_nt" : "matmul";
  const auto g = matmul_geometry<T, B>(op, a.dims(), b.dims(), tb);
  Dims od = a.dims();
  od.v[od.n - 1] = g.n;
  Tensor<T, AnyShape, B> out(od);
  const int m = int(g.m), n = int(g.n), k = int(g.k);
  const int ldb = tb ? k : n;
  const Trans TB = tb ? Trans::yes : Trans::no;
  if (!g.rhs_batched) {
    // Fold the batch into M: one GEMM (batch*M, K) x op(B).
    B::template gemm<T>(Trans::no, TB, int(g.batch) * m, n, k, T(1), a.raw().data(), k, b.raw().data(), ldb, T(0), out.data(), n);
  } else {
    B::template gemm_strided_batched<T>(Trans::no, TB, m, n, k, T(1), a.raw().data(), k, (long long)m * k, b.raw().data(), ldb,
                                        (long long)k * n, T(0), out.data(), n, (long long)m * n, int(g.batch));
  }
  const bool rg = needs_grad(tape, a, b);
  auto o = make_out<S>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {a.data().get(), b.data().get()}, [ad = a.data(), bd = b.data(), od = o.data(), g, tb] {
      if (od->grad.empty()) return;
      const int m = int(g.m), n = int(g.n), k = int(g.k);
      const int ldb = tb ? k : n;
      const T* G = od->grad.data();
      const T* A = ad->value.data();
      const T* Bm = bd->value.data();
      if (ad->requires_grad) {
        // dA = dC op(B)^T: (M,N) x (N,K)
        T* dA = ad->grad_ref().data();
        const Trans t = tb ? Trans::no : Trans::yes;
        if (!g.rhs_batched)
          B::template gemm<T>(Trans::no, t, int(g.batch) * m, k, n, T(1), G, n, Bm, ldb, T(1), dA, k);
        else
          B::template gemm_strided_batched<T>(Trans::no, t, m, k, n, T(1), G, n, (long long)m * n, Bm, ldb, (long long)k * n,
                                              T(1), dA, k, (long long)m * k, int(g.batch));
      }
      if (bd->requires_grad) {
        T* dB = bd->grad_ref().data();
        if (!tb) {
          // dB (K,N) = A^T dC
          if (!g.rhs_batched)
            B::template gemm<T>(Trans::yes, Trans::no, k, n, int(g.batch) * m, T(1), A, k, G, n, T(1), dB, n);
          else
            B::template gemm_strided_batched<T>(Trans::yes, Trans::no, k, n, m, T(1), A, k, (long long)m * k, G, n,
                                                (long long)m * n, T(1), dB, n, (long long)k * n, int(g.batch));
        } else {
          // dB (N,K) = dC^T A
          if (!g.rhs_batched)
            B::template gemm<T>(Trans::yes, Trans::no, n, k, int(g.batch) * m, T(1), G, n, A, k, T(1), dB, k);
          else
            B::template gemm_strided_batched<T>(Trans::yes, Trans::no, n, k, m, T(1), G, n, (long long)m * n, A, k,
                                                (long long)m * k, T(1), dB, k, (long long)k * n, int(g.batch));
        }
      }
    });
  }
  return o;
}

}  // namespace detail

/// a @ b: (..., M, K) x (K, N) -> (..., M, N), or batched (..., M, K) x (..., K, N).
template <Context C, class T, class SA, class SB, class B>
auto matmul(C& ctx, const Var<T, SA, B>& a, const Var<T, SB, B>& b) {
  using S = typename detail::matmul_shape<SA, SB, false>::type;
  return detail::matmul_impl<S>(detail::tape_of(ctx), a, b, false);
}

/// a @ b^T: (..., M, K) x (N, K)^T -> (..., M, N), or batched (..., M, K) x (..., N, K)^T.
template <Context C, class T, class SA, class SB, class B>
auto matmul_nt(C& ctx, const Var<T, SA, B>& a, const Var<T, SB, B>& b) {
  using S = typename detail::matmul_shape<SA, SB, true>::type;
  return detail::matmul_impl<S>(detail::tape_of(ctx), a, b, true);
}

}  // namespace attn
