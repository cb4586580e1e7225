// SPDX-License-Identifier: MIT
// Embedding lookup on Vars: rows of a (V, D) table gathered by integer ids. Backward scatter-adds
// into only the rows that were used, and never into the padding row.
//   auto x = attn::embedding(tape, table, ids, /*padding_idx=*/0);   // (V, D), (B, T) -> (B, T, D)
#pragma once
#include <concepts>

#include "elementwise.hpp"

namespace attn {

/// table[ids]: ids of any integer type and shape (...); result (..., D). padding_idx < 0: none.
template <Context C, class T, class SW, class B, std::integral I, class SI>
auto embedding(C& ctx, const Var<T, SW, B>& table, const Tensor<I, SI, B>& ids, long long padding_idx = -1) {
  using R = shapes::append_t<SI, shapes::back_or_dyn<SW, 0>()>;
  if (table.rank() != 2) throw ShapeError("embedding: table must be (rows, dim), got " + table.dims().str());
  const std::size_t rows = table.size(0), dim = table.size(1);
  Dims od = ids.dims();
  od.push_back(dim);
  Tensor<T, AnyShape, B> out(od);
  kernels::gather_rows(B{}, table.raw().data(), rows, dim, ids.data(), ids.numel(), out.data());
  Tape* tape = detail::tape_of(ctx);
  const bool rg = detail::needs_grad(tape, table);
  auto o = detail::make_out<R>(tape, std::move(out), rg);
  if (rg) {
    tape->push(o.data(), {table.data().get()}, [td = table.data(), od_ = o.data(), ids = ids.erased(), dim, padding_idx] {
      if (od_->grad.empty() || !td->requires_grad) return;
      const std::size_t n = ids.numel();
      const T* src = od_->grad.data();
      td->scatter_into_rows(ids.data(), n, padding_idx,
                            [&](T* dst, const auto* idx, long long skip) { kernels::scatter_add_rows(B{}, dst, dim, idx, n, src, skip); });
    });
  }
  return o;
}

}  // namespace attn
