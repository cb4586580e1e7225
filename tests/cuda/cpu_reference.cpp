// SPDX-License-Identifier: MIT
// The CPU backend's GEMMs for the CUDA tests (see cpu_reference.hpp).
#include "cpu_reference.hpp"

#include <attn/backend/cpu.hpp>

namespace attn_test {

void cpu_gemm(attn::Trans ta, attn::Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
  attn::cpu::gemm<float>(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
void cpu_gemm(attn::Trans ta, attn::Trans tb, int m, int n, int k, double alpha, const double* A, int lda,
              const double* B, int ldb, double beta, double* C, int ldc) {
  attn::cpu::gemm<double>(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
void cpu_gemm_strided_batched(attn::Trans ta, attn::Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
                              long long sa, const float* B, int ldb, long long sb, float beta, float* C, int ldc,
                              long long sc, int batch) {
  attn::cpu::gemm_strided_batched<float>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
void cpu_gemm_strided_batched(attn::Trans ta, attn::Trans tb, int m, int n, int k, double alpha, const double* A,
                              int lda, long long sa, const double* B, int ldb, long long sb, double beta, double* C,
                              int ldc, long long sc, int batch) {
  attn::cpu::gemm_strided_batched<double>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

}  // namespace attn_test
