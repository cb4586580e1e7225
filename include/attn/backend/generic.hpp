// SPDX-License-Identifier: MIT
// Kernels that any backend gets from its Backend operations alone (core/backend_concept.hpp), for
// the backends that do not overload them: the CPU overloads in backend/cpu/ are more specialised
// and win for attn::cpu.
//   attn::kernels::gemm_rows(B{}, Trans::yes, m, n, k, x, w, k, 0.f, y);   // y (m, n) = x (m, k) w^T
#pragma once
#include <cstddef>

#include "../core/backend_concept.hpp"

namespace attn::kernels {

/// C (m, n) = A (m, k) op(Bm) + beta C (A and C contiguous, Bm's rows ldb apart): one B::gemm. With
/// `bias` (n), C's rows start as bias (one B::copy per row: callers with many rows broadcast the
/// bias with their backend's kernels::copy_rows and pass beta = 1 instead) and beta is ignored.
template <Backend B, class T>
void gemm_rows(B, Trans tb, std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, int ldb, T beta, T* C,
               const T* bias) {
  if (bias)
    for (std::size_t r = 0; r < m; ++r) B::template copy<T>(C + r * n, bias, n);
  B::template gemm<T>(Trans::no, tb, int(m), int(n), int(k), T(1), A, int(k), Bm, ldb, bias ? T(1) : beta, C, int(n));
}

/// C (m, n) += A^T Bm with A (k, m), Bm (k, n): one B::gemm.
template <Backend B, class T>
void gemm_tn_accumulate(B, std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, T* C) {
  B::template gemm<T>(Trans::yes, Trans::no, int(m), int(n), int(k), T(1), A, int(m), Bm, int(n), T(1), C, int(n));
}

}  // namespace attn::kernels
