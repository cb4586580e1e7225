// SPDX-License-Identifier: MIT
// What the reduced-precision GEMMs (gemm_bf16.hpp, gemm_int8.hpp) share: per-thread scratch, the
// one-line notice of a route below the instructions, and the column masks of a 32-column panel.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../core/pool.hpp"

namespace attn::kernels::packed_detail {

/// Per-thread scratch of at least n elements, kept between calls.
template <class T>
T* scratch(std::vector<T, attn::detail::PoolAllocator<T>>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// Prints "attn: <what>" to stderr the first time it is called with this flag (once per process).
inline void notice_once(std::atomic<bool>& said, const char* what) {
  if (!said.exchange(true, std::memory_order_relaxed)) std::fprintf(stderr, "attn: %s\n", what);
}

/// The masks of a 32-column panel's two 16-lane halves with `cols` (1..32) columns in use.
struct PanelMasks {
  std::uint16_t lo, hi;
};
inline PanelMasks panel_masks(int cols) {
  return {std::uint16_t(cols >= 16 ? 0xffffu : (1u << cols) - 1u),
          std::uint16_t(cols >= 32 ? 0xffffu : cols > 16 ? (1u << (cols - 16)) - 1u : 0u)};
}

}  // namespace attn::kernels::packed_detail
