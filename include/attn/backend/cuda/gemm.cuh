// SPDX-License-Identifier: MIT
// Row-major GEMM on cuBLAS for attn::cuda, with the same contract as attn::cpu::gemm.
// cuBLAS is column-major; a row-major (r, c) matrix with row stride ld is, read column-major, its
// (c, r) transpose with leading dimension ld. So C = op(A) op(B) is computed as
// C^T(n,m) = op(B)^T(n,k) op(A)^T(k,m): operands swapped, each keeping its own transpose flag.
//   attn::cuda_detail::gemm<float>(Trans::no, Trans::yes, m, n, k, 1.f, a, k, b, k, 0.f, c, n);
#pragma once
#include <string>
#include <type_traits>

#include "../../core/backend_concept.hpp"
#include "fill.cuh"
#include "runtime.cuh"

namespace attn::cuda_detail {

/// The column-major cuBLAS call that computes a row-major GEMM. "first"/"second" are cuBLAS's A and
/// B, which are our B and A.
struct ColMajorGemm {
  cublasOperation_t op_first, op_second;  // transpose flags of our B and our A
  int m, n, k;                            // cuBLAS's m, n, k: our n, m, k
  int ld_first, ld_second, ldc;           // our ldb, lda, ldc
};

inline cublasOperation_t to_cublas(Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

/// Maps a row-major GEMM (m, n, k > 0) onto cuBLAS and checks the row strides first, so that a
/// bad stride is an ArgumentError naming it instead of CUBLAS_STATUS_INVALID_VALUE.
inline ColMajorGemm col_major_gemm(const char* op, Trans ta, Trans tb, int m, int n, int k, int lda, int ldb, int ldc) {
  auto need = [op](const char* ld_name, int ld, int row_length, const char* what) {
    if (ld < row_length) {
      throw ArgumentError(std::string(op) + ": " + ld_name + " = " + std::to_string(ld) + " is less than the row length " +
                          std::to_string(row_length) + " of " + what);
    }
  };
  // Stored shapes: A is (m,k), or (k,m) when transposed; B is (k,n), or (n,k); C is (m,n).
  need("lda", lda, ta == Trans::no ? k : m, ta == Trans::no ? "A (m,k)" : "A (k,m) (transposed)");
  need("ldb", ldb, tb == Trans::no ? n : k, tb == Trans::no ? "B (k,n)" : "B (n,k) (transposed)");
  need("ldc", ldc, n, "C (m,n)");
  return {to_cublas(tb), to_cublas(ta), n, m, k, ldb, lda, ldc};
}

template <class T>
constexpr bool gemm_type = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// Row-major C(m,n) = alpha op(A)(m,k) op(B)(k,n) + beta C on the current device's attn stream;
/// lda/ldb/ldc are row strides. Arguments are checked before the device is touched.
template <class T>
void gemm(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc) {
  static_assert(gemm_type<T>, "attn::cuda::gemm: T must be float or double");
  constexpr const char* op = std::is_same_v<T, float> ? "cuda::gemm<float>" : "cuda::gemm<double>";
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // Nothing to multiply; cuBLAS would reject the strides of the empty operands.
    if (ldc < n) throw ArgumentError(std::string(op) + ": ldc = " + std::to_string(ldc) + " is less than n = " + std::to_string(n));
    scale_matrices(current_device(), C, m, n, ldc, 0, 1, beta);
    return;
  }
  const ColMajorGemm g = col_major_gemm(op, ta, tb, m, n, k, lda, ldb, ldc);
  cublasHandle_t h = blas_handle();
  if constexpr (std::is_same_v<T, float>) {
    check(cublas().sgemm(h, g.op_first, g.op_second, g.m, g.n, g.k, &alpha, B, g.ld_first, A, g.ld_second, &beta, C, g.ldc),
          "cuda::gemm<float>: cublasSgemm");
  } else {
    check(cublas().dgemm(h, g.op_first, g.op_second, g.m, g.n, g.k, &alpha, B, g.ld_first, A, g.ld_second, &beta, C, g.ldc),
          "cuda::gemm<double>: cublasDgemm");
  }
}

/// `batch` row-major GEMMs whose A, B, C start sa, sb, sc elements apart.
template <class T>
void gemm_strided_batched(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda,
                          long long sa, const T* B, int ldb, long long sb, T beta, T* C, int ldc, long long sc,
                          int batch) {
  static_assert(gemm_type<T>, "attn::cuda::gemm_strided_batched: T must be float or double");
  constexpr const char* op =
      std::is_same_v<T, float> ? "cuda::gemm_strided_batched<float>" : "cuda::gemm_strided_batched<double>";
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (k <= 0) {
    if (ldc < n) throw ArgumentError(std::string(op) + ": ldc = " + std::to_string(ldc) + " is less than n = " + std::to_string(n));
    scale_matrices(current_device(), C, m, n, ldc, sc, batch, beta);
    return;
  }
  const ColMajorGemm g = col_major_gemm(op, ta, tb, m, n, k, lda, ldb, ldc);
  cublasHandle_t h = blas_handle();
  if constexpr (std::is_same_v<T, float>) {
    check(cublas().sgemm_strided_batched(h, g.op_first, g.op_second, g.m, g.n, g.k, &alpha, B, g.ld_first, sb, A, g.ld_second,
                                    sa, &beta, C, g.ldc, sc, batch),
          "cuda::gemm_strided_batched<float>: cublasSgemmStridedBatched");
  } else {
    check(cublas().dgemm_strided_batched(h, g.op_first, g.op_second, g.m, g.n, g.k, &alpha, B, g.ld_first, sb, A, g.ld_second,
                                    sa, &beta, C, g.ldc, sc, batch),
          "cuda::gemm_strided_batched<double>: cublasDgemmStridedBatched");
  }
}

}  // namespace attn::cuda_detail
