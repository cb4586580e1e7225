// SPDX-License-Identifier: MIT
// attn::cpu::gemm behind plain functions, compiled by g++ in cpu_reference.cpp, so that the CUDA
// tests compare against the CPU backend without compiling Eigen under nvcc.
//   attn_test::cpu_gemm(Trans::no, Trans::yes, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
#pragma once
#include <attn/core/backend_concept.hpp>

namespace attn_test {

void cpu_gemm(attn::Trans ta, attn::Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc);
void cpu_gemm(attn::Trans ta, attn::Trans tb, int m, int n, int k, double alpha, const double* A, int lda,
              const double* B, int ldb, double beta, double* C, int ldc);
void cpu_gemm_strided_batched(attn::Trans ta, attn::Trans tb, int m, int n, int k, float alpha, const float* A, int lda,
                              long long sa, const float* B, int ldb, long long sb, float beta, float* C, int ldc,
                              long long sc, int batch);
void cpu_gemm_strided_batched(attn::Trans ta, attn::Trans tb, int m, int n, int k, double alpha, const double* A,
                              int lda, long long sa, const double* B, int ldb, long long sb, double beta, double* C,
                              int ldc, long long sc, int batch);

}  // namespace attn_test
