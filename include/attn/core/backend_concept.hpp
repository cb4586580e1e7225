// SPDX-License-Identifier: MIT
// The Backend concept: where tensor memory lives and how GEMMs run on it. Core states the contract;
// backend/ implements it (attn::cpu in backend/cpu.hpp, attn::cuda in backend/cuda.hpp).
//   template <attn::Backend B> void f() { float* p = B::template allocate<float>(16); ... }
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>

namespace attn {

/// Which side of a GEMM operand is transposed.
enum class Trans : bool { no = false, yes = true };

/// Contract of a backend B (all members static; no state but what the backend owns itself):
/// - `B::name`: a short name ("cpu", "cuda").
/// - `B::host_accessible`: true when host code may dereference B's pointers.
/// - `allocate<T>(n)` / `deallocate<T>(p, n)`: uninitialised storage for n elements.
/// - `copy`, `to_host`, `from_host`: element copies within B and across the host boundary.
/// - `fill<T>(p, n, v)`.
/// - `gemm<T>` (row-major, C = alpha op(A) op(B) + beta C) and `gemm_strided_batched<T>`.
template <class B>
concept Backend = requires(float* f, const float* cf, double* d, const double* cd, std::size_t n, int i, long long s) {
  { B::name } -> std::convertible_to<const char*>;
  { B::host_accessible } -> std::convertible_to<bool>;
  { B::template allocate<float>(n) } -> std::same_as<float*>;
  { B::template deallocate<float>(f, n) };
  { B::template copy<float>(f, cf, n) };
  { B::template to_host<float>(f, cf, n) };
  { B::template from_host<float>(f, cf, n) };
  { B::template fill<float>(f, n, 1.0f) };
  { B::template gemm<float>(Trans::no, Trans::yes, i, i, i, 1.0f, cf, i, cf, i, 0.0f, f, i) };
  { B::template gemm<double>(Trans::no, Trans::yes, i, i, i, 1.0, cd, i, cd, i, 0.0, d, i) };
  { B::template gemm_strided_batched<float>(Trans::no, Trans::no, i, i, i, 1.0f, cf, i, s, cf, i, s, 0.0f, f, i, s, i) };
};

/// The CPU backend (Eigen GEMM, OpenMP loops). Defined in attn/backend/cpu.hpp.
struct cpu;
/// The CUDA backend (cuBLAS GEMM, CUDA kernels). Defined in attn/backend/cuda.hpp, compiled by nvcc.
struct cuda;

}  // namespace attn
