// SPDX-License-Identifier: MIT
// Row-major GEMM of the CPU backend: products of m n k >= 64^3 go, in float, to oneDNN's dnnl_sgemm
// when attn was configured with it (cpu/dnnl.hpp), else (and in double) to BLIS or OpenBLAS when
// attn was configured with one (cpu/blas.hpp); the rest (and all without either) to Eigen's product. The
// linear op's GEMMs (kernels::gemm_rows, kernels::gemm_tn_accumulate) split their rows over the
// threads, one serial GEMM each.
//   attn::cpu::gemm<float>(Trans::no, Trans::yes, m, n, k, 1.f, a, k, b, k, 0.f, c, n);   // C (m,n) = A (m,k) B^T
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "../../core/eigen.hpp"
#include "../../core/instantiate.hpp"
#include "../../core/tensor.hpp"
#include "../cpu.hpp"
#include "blas.hpp"
#include "dnnl.hpp"

namespace attn {

namespace detail {
/// The op name in attn::profile of cpu::gemm, or of cpu::gemm_strided_batched (each product inside
/// it an inner gemm): its transpositions.
constexpr const char* gemm_profile_name(Trans ta, Trans tb, bool batched = false) {
  constexpr const char* names[2][4] = {{"gemm NN", "gemm NT", "gemm TN", "gemm TT"},
                                       {"gemm NN, batched", "gemm NT, batched", "gemm TN, batched", "gemm TT, batched"}};
  return names[batched][2 * (ta == Trans::yes) + (tb == Trans::yes)];
}
}  // namespace detail

// Defined outside the class, not inline: under ATTN_SEPARATE_COMPILATION the float and double
// instantiations are declared extern below and compiled once, in attn::compiled.
template <class T>
void cpu::gemm(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb, T beta, T* C,
               int ldc) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MapC = Eigen::Map<Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  using MapA = Eigen::Map<const Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  if (m <= 0 || n <= 0) return;
  auto prof = profile::Scope::of<T>(detail::gemm_profile_name(ta, tb), m, n, k);
  if (k > 0) prof.set_flops(2.0 * m * n * k);
  MapC c(C, m, n, Eigen::OuterStride<>(ldc));
  if (k <= 0) {
    if (beta == T(0)) c.setZero();
    else c *= beta;
    return;
  }
#if defined(ATTN_GEMM_DNNL)
  if constexpr (std::is_same_v<T, float>)
    if (static_cast<long long>(m) * n * k >= detail::kDnnlMinVolume)
      return detail::dnnl_gemm(ta == Trans::yes, tb == Trans::yes, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
#if defined(ATTN_HAVE_BLAS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    if (static_cast<long long>(m) * n * k >= detail::kBlasMinVolume)
      return detail::blas_gemm<T>(ta == Trans::yes, tb == Trans::yes, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  // op(A) is (m,k): stored (m,k) when not transposed, (k,m) when transposed.
  MapA a(A, ta == Trans::no ? m : k, ta == Trans::no ? k : m, Eigen::OuterStride<>(lda));
  MapA b(B, tb == Trans::no ? k : n, tb == Trans::no ? n : k, Eigen::OuterStride<>(ldb));
  if (beta == T(0)) {
    c.setZero();
  } else if (beta != T(1)) {
    c *= beta;
  }
  if (ta == Trans::no && tb == Trans::no) c.noalias() += alpha * a * b;
  else if (ta == Trans::no) c.noalias() += alpha * a * b.transpose();
  else if (tb == Trans::no) c.noalias() += alpha * a.transpose() * b;
  else c.noalias() += alpha * a.transpose() * b.transpose();
}

template <class T>
void cpu::gemm_strided_batched(Trans ta, Trans tb, int m, int n, int k, T alpha, const T* A, int lda, long long sa,
                               const T* B, int ldb, long long sb, T beta, T* C, int ldc, long long sc, int batch) {
  const double flops = 2.0 * m * n * k;
  // Its products are inner calls whether or not they run in parallel.
  auto prof = profile::Scope::of<T>(detail::gemm_profile_name(ta, tb, true), batch, m, n, k);
  if (m > 0 && n > 0 && k > 0 && batch > 0) prof.set_flops(flops * batch);
  if (batch > 1 && flops < 4.0e6) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (batch * flops > 2.0e5)
#endif
    for (int i = 0; i < batch; ++i) gemm(ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
  } else {
    for (int i = 0; i < batch; ++i) gemm(ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
  }
}

namespace kernels {

/// C (m, n) = A (m, k) op(Bm) + beta C (A and C contiguous, Bm's rows ldb apart), the rows of A and C
/// split over the threads, one serial GEMM each: no synchronisation inside a GEMM, which a loaded
/// machine punishes. With `bias` (n), C = A op(Bm) + bias instead (beta is then ignored): each
/// thread adds the bias to its rows after its GEMM. Writing the bias into C first and adding the
/// product to it (beta = 1, as torch's addmm does) made R1's and R2's training steps 1-6% slower
/// on a Zen 5 (AVX-512) and 1-2% slower at ATTN_ISA=avx2: oneDNN reads C back in that case.
template <class T>
void gemm_rows(cpu, Trans tb, std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, int ldb, T beta, T* C,
               const T* bias) {
  const int nt = double(m) * n * k > 1e6 ? int(std::min<std::size_t>(cpu::threads(), m / 16)) : 1;
  auto prof = profile::Scope::of<T>(tb == Trans::yes ? "gemm NT, rows split" : "gemm NN, rows split", m, n, k);
  prof.set_flops(2.0 * double(m) * double(n) * double(k));
  const auto rows = [&](std::size_t r0, std::size_t r1) {
    cpu::gemm<T>(Trans::no, tb, int(r1 - r0), int(n), int(k), T(1), A + r0 * k, int(k), Bm, ldb, bias ? T(0) : beta, C + r0 * n,
                 int(n));
    if (bias)
      for (std::size_t r = r0; r < r1; ++r) {
        T* c = C + r * n;
        for (std::size_t j = 0; j < n; ++j) c[j] += bias[j];
      }
  };
  if (nt <= 1) return rows(0, m);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
  for (int c = 0; c < nt; ++c) rows(m * c / nt, m * (c + 1) / nt);
}

/// C (m, n) += A^T Bm with A (k, m), Bm (k, n) (a weight gradient: k = batch rows), the k rows split
/// over the threads, each summing into its own (m, n) buffer; thread 0 adds into C directly.
template <class T>
void gemm_tn_accumulate(cpu, std::size_t m, std::size_t n, std::size_t k, const T* A, const T* Bm, T* C) {
  const int nt = double(m) * n * k > 1e6 ? int(std::min<std::size_t>(cpu::threads(), k / 64)) : 1;
  auto prof = profile::Scope::of<T>("gemm TN +=, k split", m, n, k);
  prof.set_flops(2.0 * double(m) * double(n) * double(k));
  if (nt <= 1) {
    cpu::gemm<T>(Trans::yes, Trans::no, int(m), int(n), int(k), T(1), A, int(m), Bm, int(n), T(1), C, int(n));
    return;
  }
  Tensor<T, AnyShape, cpu> part(Dims{std::size_t(nt - 1) * m * n});  // from the host pool
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
  for (int c = 0; c < nt; ++c) {
    const std::size_t r0 = k * c / nt, r1 = k * (c + 1) / nt;
    T* dst = c == 0 ? C : part.data() + std::size_t(c - 1) * m * n;
    cpu::gemm<T>(Trans::yes, Trans::no, int(m), int(n), int(r1 - r0), T(1), A + r0 * m, int(m), Bm + r0 * n, int(n),
                 c == 0 ? T(1) : T(0), dst, int(n));
  }
  for (int c = 1; c < nt; ++c) {
    const T* src = part.data() + std::size_t(c - 1) * m * n;
    for (std::size_t i = 0; i < m * n; ++i) C[i] += src[i];
  }
}

}  // namespace kernels

#define ATTN_INSTANTIATE_CPU_GEMM(X, T)                                                                                     \
  X template void cpu::gemm<T>(Trans, Trans, int, int, int, T, const T*, int, const T*, int, T, T*, int);                  \
  X template void cpu::gemm_strided_batched<T>(Trans, Trans, int, int, int, T, const T*, int, long long, const T*, int,      \
                                               long long, T, T*, int, long long, int);                                     \
  X template void kernels::gemm_rows<T>(cpu, Trans, std::size_t, std::size_t, std::size_t, const T*, const T*, int, T, T*,  \
                                        const T*);                                                                         \
  X template void kernels::gemm_tn_accumulate<T>(cpu, std::size_t, std::size_t, std::size_t, const T*, const T*, T*);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_GEMM)

}  // namespace attn
