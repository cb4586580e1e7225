// SPDX-License-Identifier: MIT
// Broadcast reduction of the CPU backend: kernels::sum_to(cpu, ...), the gradient of every broadcast
// operand and the sum/mean ops. Overloaded on the backend tag, as cuda/reduce.cuh.
//   attn::kernels::sum_to(attn::cpu{}, g, Dims{b, t, d}, db, Dims{d}, /*accumulate=*/true);   // (B,T,D) -> (D)
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "../../core/instantiate.hpp"
#include "../../core/shape.hpp"
#include "../../core/tensor.hpp"
#include "../cpu.hpp"

namespace attn::kernels {

/// dst (dst_dims) (+)= src (src_dims) summed over the axes where dst is broadcast (extent 1 or absent).
/// A sum to one value (sum, mean) is accumulated in double: a float running total stops growing at
/// 2^24 (a sum of 2^25 ones gave 16,777,216).
template <class T>
void sum_to(cpu, const T* src, const Dims& src_dims, T* dst, const Dims& dst_dims, bool accumulate) {
  const std::size_t r = src_dims.n;
  if (dst_dims.numel() == 1) {  // every extent of dst is 1: the whole of src into one value
    using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
    Acc total = 0;
    const std::size_t n = src_dims.numel();
    for (std::size_t i = 0; i < n; ++i) total += Acc(src[i]);
    dst[0] = T((accumulate ? Acc(dst[0]) : Acc(0)) + total);
    return;
  }
  Dims ds = Dims::of_rank(r);  // dst strides aligned to src axes, 0 where broadcast
  {
    Dims cs = contiguous_strides(dst_dims);
    for (std::size_t i = 0; i < r; ++i) {
      if (i + dst_dims.n < r) continue;
      std::size_t k = i + dst_dims.n - r;
      if (dst_dims.v[k] == src_dims.v[i]) ds.v[i] = cs.v[k];
      else if (dst_dims.v[k] != 1) shape_mismatch("sum_to", "cannot reduce", src_dims, dst_dims);
    }
  }
  if (!accumulate) cpu::fill(dst, dst_dims.numel(), T(0));
  const std::size_t inner = r ? src_dims.v[r - 1] : 1;
  const std::size_t outer = inner ? src_dims.numel() / inner : 0;
  const std::size_t is = r ? ds.v[r - 1] : 0;
  // Every row into the same dst row (a bias gradient: (..., n) -> (n)): the rows split over the
  // threads, each summing into its own buffer, added in thread order.
  bool rows_to_one = is == 1 && r > 1;
  for (std::size_t a = 0; a + 1 < r; ++a) rows_to_one = rows_to_one && ds.v[a] == 0;
  const int nt = rows_to_one && outer * inner >= (std::size_t(1) << 17) ? int(std::min<std::size_t>(cpu::threads(), outer / 64)) : 1;
  if (nt > 1) {
    Tensor<T, AnyShape, cpu> part(Dims{std::size_t(nt) * inner});  // from the host pool
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int c = 0; c < nt; ++c) {
      T* acc = part.data() + std::size_t(c) * inner;
      std::fill_n(acc, inner, T(0));
      for (std::size_t o = outer * std::size_t(c) / std::size_t(nt); o < outer * std::size_t(c + 1) / std::size_t(nt); ++o) {
        const T* row = src + o * inner;
        for (std::size_t j = 0; j < inner; ++j) acc[j] += row[j];
      }
    }
    for (int c = 0; c < nt; ++c)
      for (std::size_t j = 0; j < inner; ++j) dst[j] += part.data()[std::size_t(c) * inner + j];
    return;
  }
  std::size_t idx[max_rank] = {};
  for (std::size_t o = 0; o < outer; ++o) {
    std::size_t off = 0;
    for (std::size_t a = 0; a + 1 < r; ++a) off += idx[a] * ds.v[a];
    const T* s = src + o * inner;
    T* d = dst + off;
    if (is == 1) {
      for (std::size_t j = 0; j < inner; ++j) d[j] += s[j];
    } else if (is == 0) {
      T acc = 0;
      for (std::size_t j = 0; j < inner; ++j) acc += s[j];
      d[0] += acc;
    } else {
      for (std::size_t j = 0; j < inner; ++j) d[j * is] += s[j];
    }
    for (std::size_t a = r - 1; a-- > 0;) {  // odometer over the outer axes
      if (++idx[a] < src_dims.v[a]) break;
      idx[a] = 0;
    }
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_REDUCE(X, T)                                                                                \
  X template void kernels::sum_to<T>(cpu, const T*, const Dims&, T*, const Dims&, bool);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_REDUCE)
}  // namespace attn
