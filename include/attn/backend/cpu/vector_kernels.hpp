// SPDX-License-Identifier: MIT
// The CPU kernels that the compiler vectorises (Adam's dense update, layer and RMS norm, the LSTM cell),
// compiled once per ISA level and chosen at run time by cpu::isa(), as the hand-written tile GEMM
// and exponential are: vector_kernels.inc holds their loops, included below in one namespace per
// level under that level's target (AVX-512 F/CD/BW/DQ/VL, AVX2 + FMA) and once more with the
// build's own flags (`generic`). A binary built without -march therefore still runs these loops in
// 16-float registers on an AVX-512 CPU. A build whose -march is above a level keeps its own
// instructions in that level's copy (a target adds to the command line, it cannot take away), so
// ATTN_ISA=avx2 on a -march=native AVX-512 build lowers the hand-written kernels only. GCC compiles
// the bodies without -ftrapping-math (attn reads no floating-point exception flags): with it, GCC
// keeps the clamps and selects of the activations as branches, and the loops scalar, below AVX-512.
//   attn::kernels::adam_update(attn::cpu{}, n, p, g, m, v, step);   // vec::AdamStep<float> step
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "../element_math.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace attn::kernels::vec {

/// The scalars of one Adam step (optim::Adam computes them in double and rounds each once).
template <class T>
struct AdamStep {
  T lr = 0, weight_decay = 0;
  T one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  T step_size = 0;  // lr / (1 - beta1^t)
  T bc2_sqrt = 1;   // sqrt(1 - beta2^t)
  T eps = 0;
  bool decoupled = false;  // AdamW: decay the weights; else add weight_decay p to the gradient
};

}  // namespace attn::kernels::vec

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define ATTN_VEC_LEVELS 1
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx2,fma")
#pragma GCC optimize("no-trapping-math")
#endif
#define ATTN_VEC_LEVEL avx512
#define ATTN_VEC_WIDTH 16
#include "vector_kernels.inc"
#undef ATTN_VEC_WIDTH
#undef ATTN_VEC_LEVEL
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("no-trapping-math")
#endif
#define ATTN_VEC_LEVEL avx2
#define ATTN_VEC_WIDTH 8
#include "vector_kernels.inc"
#undef ATTN_VEC_WIDTH
#undef ATTN_VEC_LEVEL
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
#define ATTN_VEC_LEVEL generic
#define ATTN_VEC_WIDTH 0
#include "vector_kernels.inc"
#undef ATTN_VEC_WIDTH
#undef ATTN_VEC_LEVEL
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC pop_options
#endif

// vec::call(fn, args...): fn of the level cpu::isa() names.
#if defined(ATTN_VEC_LEVELS)
#define ATTN_VEC_CALL(fn, ...)                                             \
  do {                                                                     \
    switch (cpu::isa()) {                                                  \
      case Isa::avx512_bf16:                                               \
      case Isa::avx512: vec::avx512::fn(__VA_ARGS__); break;               \
      case Isa::avx2: vec::avx2::fn(__VA_ARGS__); break;                   \
      case Isa::generic: vec::generic::fn(__VA_ARGS__); break;             \
    }                                                                      \
  } while (0)
#else
#define ATTN_VEC_CALL(fn, ...) vec::generic::fn(__VA_ARGS__)
#endif

namespace attn::kernels {

namespace vec {
/// Threads for `work` elements of a memory-bound loop over `items` independent items: one below
/// 2^15 elements, where starting a team costs more than it saves.
inline int threads_for(std::size_t items, std::size_t work) {
#if defined(_OPENMP)
  if (work <= (std::size_t(1) << 15)) return 1;
  return static_cast<int>(std::clamp<std::size_t>(items, 1, static_cast<std::size_t>(omp_get_max_threads())));
#else
  (void)items, (void)work;
  return 1;
#endif
}
}  // namespace vec

/// Adam's (or AdamW's) dense update of n elements of p with gradient g and moments m, v, in place:
/// the formula of vec::adam_dense, elementwise (no result depends on the vector width or thread count).
template <class T>
void adam_update(cpu, std::size_t n, T* p, const T* g, T* m, T* v, const vec::AdamStep<T>& s) {
  const auto prof = profile::Scope::of<T>("adam", n);
  const int nt = vec::threads_for(n / 4096 + 1, n);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (int c = 0; c < nt; ++c) {
    const std::size_t i0 = n * std::size_t(c) / std::size_t(nt) / 16 * 16;  // chunk starts on 64-byte multiples
    const std::size_t i1 = c + 1 == nt ? n : n * std::size_t(c + 1) / std::size_t(nt) / 16 * 16;
    ATTN_VEC_CALL(adam_dense<T>, i1 - i0, p + i0, g + i0, m + i0, v + i0, s);
  }
}

namespace vec {
/// The rows of a layer norm (center) or RMS norm forward, split over threads.
template <class T>
void norm_forward(const T* X, const T* G, const T* Bt, std::size_t rows, std::size_t d, double eps, T* y, T* xhat, T* rstd,
                  bool center) {
  const int nt = threads_for(rows, rows * d);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (int c = 0; c < nt; ++c)
    ATTN_VEC_CALL(layer_norm_forward_rows<T>, rows * std::size_t(c) / std::size_t(nt), rows * std::size_t(c + 1) / std::size_t(nt),
                  X, G, Bt, d, eps, y, xhat, rstd, center);
}

/// A norm's backward: dgamma (dg) and dbeta (db) as column sums, dx by rows split over threads. A
/// null output is skipped.
template <class T>
void norm_backward(const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx, T* dg, T* db,
                   bool center) {
  for (std::size_t r = 0; r < rows && (dg || db); ++r) {
    const T* __restrict g = gy + r * d;
    const T* __restrict h = H + r * d;
    if (dg)
      for (std::size_t j = 0; j < d; ++j) dg[j] += g[j] * h[j];
    if (db)
      for (std::size_t j = 0; j < d; ++j) db[j] += g[j];
  }
  if (!dx) return;
  const int nt = threads_for(rows, rows * d);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (int c = 0; c < nt; ++c)
    ATTN_VEC_CALL(layer_norm_dx_rows<T>, rows * std::size_t(c) / std::size_t(nt), rows * std::size_t(c + 1) / std::size_t(nt), gy,
                  H, Gm, rstd, d, dx, center);
}
}  // namespace vec

/// Layer norm over rows of X (rows, d): xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased
/// variance, accumulated in double), y = xhat * G + Bt with G, Bt (d). Writes y, xhat (rows, d), rstd (rows).
template <class T>
void layer_norm_forward(cpu, const T* X, const T* G, const T* Bt, std::size_t rows, std::size_t d, double eps, T* y, T* xhat,
                        T* rstd) {
  const auto prof = profile::Scope::of<T>("layer norm forward", rows, d);
  vec::norm_forward(X, G, Bt, rows, d, eps, y, xhat, rstd, true);
}

/// Backward of layer_norm_forward from the upstream gy (rows, d), the saved xhat and rstd and the
/// weight Gm (d): dgamma += sum_rows gy * xhat; dbeta += sum_rows gy;
/// dx += rstd * (gy*gamma - mean(gy*gamma) - xhat * mean(gy*gamma*xhat)). A null output is skipped.
template <class T>
void layer_norm_backward(cpu, const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx,
                         T* dg, T* db) {
  const auto prof = profile::Scope::of<T>("layer norm backward", rows, d);
  vec::norm_backward(gy, H, Gm, rstd, rows, d, dx, dg, db, true);
}

/// RMS norm over rows of X (rows, d), torch's rms_norm: xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) +
/// eps) (accumulated in double), y = xhat * G with G (d). Writes y, xhat (rows, d), rstd (rows).
template <class T>
void rms_norm_forward(cpu, const T* X, const T* G, std::size_t rows, std::size_t d, double eps, T* y, T* xhat, T* rstd) {
  const auto prof = profile::Scope::of<T>("rms norm forward", rows, d);
  vec::norm_forward(X, G, static_cast<const T*>(nullptr), rows, d, eps, y, xhat, rstd, false);
}

/// Backward of rms_norm_forward from the upstream gy (rows, d), the saved xhat and rstd and the weight
/// Gm (d): dgamma += sum_rows gy * xhat; dx += rstd * (gy*gamma - xhat * mean(gy*gamma*xhat)). A
/// null output is skipped.
template <class T>
void rms_norm_backward(cpu, const T* gy, const T* H, const T* Gm, const T* rstd, std::size_t rows, std::size_t d, T* dx, T* dg) {
  const auto prof = profile::Scope::of<T>("rms norm backward", rows, d);
  vec::norm_backward(gy, H, Gm, rstd, rows, d, dx, dg, static_cast<T*>(nullptr), false);
}

/// Fused LSTM cell over n rows. gates (n, 4H) holds W_ih x + W_hh h_prev on entry and the
/// activations sigmoid(i), sigmoid(f), tanh(g), sigmoid(o) on exit; bias (4H) = b_ih + b_hh.
/// c = f * c_prev + i * g (c_prev nullptr: the zero state), h = o * tanh(c). c, h: (n, H).
/// Float uses vectorisable sigmoid and tanh within a few ulp; double, std::exp and std::tanh.
template <class T>
void lstm_cell_forward(cpu, std::size_t n, std::size_t h, T* gates, const T* bias, const T* c_prev, T* c, T* hout) {
  const auto prof = profile::Scope::of<T>("lstm cell forward", n, h);
  ATTN_VEC_CALL(lstm_cell_forward_rows<T>, 0, n, h, gates, bias, c_prev, c, hout);
}

/// Backward of lstm_cell_forward over n rows, from the saved activations act (n, 4H) and cells
/// c (n, H), c_prev (n, H) or nullptr. dh (n, H) is dL/dh of this step; dc (n, H) carries dL/dc
/// from the next step in and dL/dc_prev out. Writes dL/d(pre-activation) to dgates (n, 4H): the
/// formulas of elem::lstm_cell_backward.
template <class T>
void lstm_cell_backward(cpu, std::size_t n, std::size_t h, const T* act, const T* c, const T* c_prev, const T* dh, T* dc,
                        T* dgates) {
  const auto prof = profile::Scope::of<T>("lstm cell backward", n, h);
  ATTN_VEC_CALL(lstm_cell_backward_rows<T>, 0, n, h, act, c, c_prev, dh, dc, dgates);
}

/// Fused GRU cell over n rows (torch.nn.GRU's gates r, z, n). gates (n, 4H) holds the input
/// projections W_ih x in its first 3H columns on entry (r, z, n; without bias) and the activations
/// r, z, n and hn = W_hn h_prev + b_hn on exit; gh (n, 3H) the recurrent products W_hh h_prev
/// (without bias), and h_prev (n, H) the previous state: both null for the zero state. b_ih, b_hh
/// (3H). r = sigmoid(.), z = sigmoid(.), n = tanh(x_n + b_in + r hn), h = (h_prev - n) z + n into
/// hout (n, H): the formulas of elem::gru_cell_unit.
template <class T>
void gru_cell_forward(cpu, std::size_t n, std::size_t h, T* gates, const T* gh, const T* b_ih, const T* b_hh, const T* h_prev, T* hout) {
  const auto prof = profile::Scope::of<T>("gru cell forward", n, h);
  ATTN_VEC_CALL(gru_cell_forward_rows<T>, 0, n, h, gates, gh, b_ih, b_hh, h_prev, hout);
}

/// Backward of gru_cell_forward over n rows, from the saved activations act (n, 4H), h_prev (n, H)
/// (null: the zero state) and dh (n, H), dL/dh of this step: dL/d(pre-activation) of the input side
/// into dgi (n, 3H) and of the recurrent side into dgh (n, 3H) (they differ in n only: dgh's is
/// scaled by r), and the direct part of dL/dh_prev, z dh, added to dh_prev (n, H) (unused when
/// h_prev is null): the formulas of elem::gru_cell_backward.
template <class T>
void gru_cell_backward(cpu, std::size_t n, std::size_t h, const T* act, const T* h_prev, const T* dh, T* dh_prev, T* dgi, T* dgh) {
  const auto prof = profile::Scope::of<T>("gru cell backward", n, h);
  ATTN_VEC_CALL(gru_cell_backward_rows<T>, 0, n, h, act, h_prev, dh, dh_prev, dgi, dgh);
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_VECTOR_KERNELS(X, T)                                                                          \
  X template void kernels::adam_update<T>(cpu, std::size_t, T*, const T*, T*, T*, const kernels::vec::AdamStep<T>&);        \
  X template void kernels::layer_norm_forward<T>(cpu, const T*, const T*, const T*, std::size_t, std::size_t, double, T*,   \
                                                 T*, T*);                                                                  \
  X template void kernels::layer_norm_backward<T>(cpu, const T*, const T*, const T*, const T*, std::size_t, std::size_t,    \
                                                  T*, T*, T*);                                                             \
  X template void kernels::rms_norm_forward<T>(cpu, const T*, const T*, std::size_t, std::size_t, double, T*, T*, T*);     \
  X template void kernels::rms_norm_backward<T>(cpu, const T*, const T*, const T*, const T*, std::size_t, std::size_t, T*,  \
                                                T*);                                                                       \
  X template void kernels::lstm_cell_forward<T>(cpu, std::size_t, std::size_t, T*, const T*, const T*, T*, T*);            \
  X template void kernels::lstm_cell_backward<T>(cpu, std::size_t, std::size_t, const T*, const T*, const T*, const T*, T*, \
                                                 T*);                                                                     \
  X template void kernels::gru_cell_forward<T>(cpu, std::size_t, std::size_t, T*, const T*, const T*, const T*, const T*, T*); \
  X template void kernels::gru_cell_backward<T>(cpu, std::size_t, std::size_t, const T*, const T*, const T*, T*, T*, T*);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_VECTOR_KERNELS)
}  // namespace attn
