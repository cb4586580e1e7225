// SPDX-License-Identifier: MIT
// Row gather, scatter-add and indexed row copies of the CPU backend: the embedding lookup and its
// gradient, and the LSTM's packing of ragged batches. Twin of cuda/embedding.cuh.
//   attn::kernels::gather_rows(attn::cpu{}, table, rows, dim, ids, n, out);   // out (n, dim)
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "../../core/instantiate.hpp"
#include "../cpu.hpp"
#include "vector_kernels.hpp"

namespace attn::kernels {

/// out[i, :] = table[ids[i], :] for i < n; ids are checked against rows (all of them, before any
/// row is written). The rows are split over the threads.
template <class T, class I>
void gather_rows(cpu, const T* table, std::size_t rows, std::size_t dim, const I* ids, std::size_t n, T* out) {
  const auto prof = profile::Scope::of<T>("embedding gather", n, dim);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= rows)
      throw ShapeError("embedding: id " + std::to_string(static_cast<long long>(id)) + " at position " + std::to_string(i) +
                       " is outside the table of " + std::to_string(rows) + " rows");
  }
  const long long len = static_cast<long long>(n);
  const int nt = vec::threads_for(n, n * dim);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (long long i = 0; i < len; ++i)
    std::copy_n(table + static_cast<std::size_t>(ids[i]) * dim, dim, out + static_cast<std::size_t>(i) * dim);
}

/// table_grad[ids[i], :] += g[i, :], skipping ids equal to skip (the padding index, or -1 for none).
/// Each thread owns the table rows id % threads == its number and adds into them in the order of i,
/// so the sums are the same, bit for bit, whatever the thread count.
template <class T, class I>
void scatter_add_rows(cpu, T* table_grad, std::size_t dim, const I* ids, std::size_t n, const T* g, long long skip) {
  const auto prof = profile::Scope::of<T>("embedding grad", n, dim);
  const int nt = vec::threads_for(n, n * dim);
#if defined(_OPENMP)
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
#if defined(_OPENMP)
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num()), nth = static_cast<std::size_t>(omp_get_num_threads());
#else
    const std::size_t t = 0, nth = 1;
#endif
    for (std::size_t i = 0; i < n; ++i) {
      if (static_cast<long long>(ids[i]) == skip || static_cast<std::size_t>(ids[i]) % nth != t) continue;
      T* dst = table_grad + static_cast<std::size_t>(ids[i]) * dim;
      const T* src = g + i * dim;
      for (std::size_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
  }
}

/// Row copies through index maps: dst row dst_rows[i] = (or +=) src row src_rows[i], w elements
/// each, for i < n; a null map is the identity. Rows are src_ld / dst_ld elements apart. The dst
/// rows must be distinct (the LSTM's packing and unpacking of ragged batches). src_ld 0 copies the one
/// source row to every dst row (a bias into each row of a linear op's output).
template <class T>
void copy_rows(cpu, std::size_t n, std::size_t w, const T* src, std::size_t src_ld, const std::int64_t* src_rows, T* dst,
               std::size_t dst_ld, const std::int64_t* dst_rows, bool accumulate) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* from = src + (src_rows ? static_cast<std::size_t>(src_rows[i]) : i) * src_ld;
    T* to = dst + (dst_rows ? static_cast<std::size_t>(dst_rows[i]) : i) * dst_ld;
    if (accumulate)
      for (std::size_t k = 0; k < w; ++k) to[k] += from[k];
    else
      std::copy_n(from, w, to);
  }
}

}  // namespace attn::kernels

namespace attn {
#define ATTN_INSTANTIATE_CPU_EMBEDDING(X, T)                                                                             \
  X template void kernels::gather_rows<T, int>(cpu, const T*, std::size_t, std::size_t, const int*, std::size_t, T*);    \
  X template void kernels::gather_rows<T, std::int64_t>(cpu, const T*, std::size_t, std::size_t, const std::int64_t*,    \
      std::size_t, T*);                                                                                                  \
  X template void kernels::scatter_add_rows<T, int>(cpu, T*, std::size_t, const int*, std::size_t, const T*, long long); \
  X template void kernels::scatter_add_rows<T, std::int64_t>(cpu, T*, std::size_t, const std::int64_t*, std::size_t,     \
      const T*, long long);                                                                                              \
  X template void kernels::copy_rows<T>(cpu, std::size_t, std::size_t, const T*, std::size_t, const std::int64_t*, T*,   \
      std::size_t, const std::int64_t*, bool);
ATTN_EXTERN_TEMPLATES(ATTN_INSTANTIATE_CPU_EMBEDDING)
}  // namespace attn
