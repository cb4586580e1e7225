// SPDX-License-Identifier: MIT
// The description of one multi-head self-attention problem that every backend's attention kernels
// take (backend/cpu/attention.hpp, backend/cuda/attention.cuh), and what a call allocated.
//   attn::kernels::MhaProblem<float> p{.batch = b, .time = t, .heads = h, .head_dim = hd, .qkv = qkv};
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace attn {

/// What one self_attention call allocated (host bytes), for tests and memory budgeting. Filled in
/// by forward and, if recorded, by backward; the object must outlive the backward pass.
struct AttentionStats {
  std::size_t saved_bytes = 0;    // kept for backward besides the output: logsumexp (B,H,T) or weights (B,H,T,T)
  std::size_t largest_bytes = 0;  // the largest single buffer the op allocated, forward or backward
  std::size_t total_bytes = 0;    // every buffer the op allocated, summed (scratch counted per thread)
  void note(std::size_t bytes) { largest_bytes = std::max(largest_bytes, bytes), total_bytes += bytes; }
};

namespace kernels {

/// One self-attention problem. qkv is (B, T, 3, H, hd) row-major: token t's row holds Q, K and V,
/// each D = H*hd wide, head h at columns h*hd.. of each. Output (B, T, H, hd) = (B, T, D).
template <class T>
struct MhaProblem {
  std::size_t batch = 0, time = 0, heads = 0, head_dim = 0;
  const T* qkv = nullptr;
  const T* key_mask = nullptr;   // (B, T) or nullptr
  const T* attn_mask = nullptr;  // (T, T) or nullptr
  T scale = 1;                   // 1 / sqrt(head_dim)
  double dropout = 0;
  std::uint64_t seed = 0;        // of the dropout mask, a pure function of (seed, b, h, i, j)
  bool skip_padded_queries = false;  // flash: rows from key_end(b) on are zero (lse +inf) and get no gradient
  std::size_t dim() const { return heads * head_dim; }
  std::size_t ld() const { return 3 * dim(); }
};

}  // namespace kernels

}  // namespace attn
