// SPDX-License-Identifier: MIT
// The CPU attention kernels (autograd/attention.hpp) behind plain functions, compiled by g++ in
// attention_reference.cpp, for test_attention_kernels.cu to compare the CUDA kernels with.
//   attn_test::cpu_mha(c, data, /*flash=*/true, out, stats_or_weights, dqkv);
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <attn/backend/attention_problem.hpp>

namespace attn_test {

/// One attention problem: qkv (B, T, 3D), D = heads * head_dim.
struct MhaCase {
  std::size_t batch = 1, time = 1, heads = 1, head_dim = 1;
  double dropout = 0;
  std::uint64_t seed = 0;
  bool key_mask = false;   // (B, T) padding mask, with a fully padded sample when batch > 1
  bool attn_mask = false;  // (T, T) causal mask (-inf above the diagonal)
  attn::AttentionPattern pattern = {};  // sparse pattern (window, causal, global tokens), MhaProblem::pattern
};

/// The inputs of a case: qkv, the masks (empty when off) and the upstream gradient dout (B, T, D).
template <class T>
struct MhaData {
  std::vector<T> qkv, key_mask, attn_mask, dout;
};

/// Deterministic random inputs of case c.
template <class T>
MhaData<T> make_mha_data(const MhaCase& c);

/// The CPU kernels: flash (saved = lse (B, H, T)) or naive (saved = weights (B, H, T, T)) forward,
/// then backward from data.dout into dqkv (zeros first).
template <class T>
void cpu_mha(const MhaCase& c, const MhaData<T>& data, bool flash, std::vector<T>& out, std::vector<T>& saved, std::vector<T>& dqkv);

}  // namespace attn_test
