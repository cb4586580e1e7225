// SPDX-License-Identifier: MIT
// The description of one multi-head self-attention problem that every backend's attention kernels
// take (backend/cpu/attention.hpp, backend/cuda/attention.cuh), its sparse (local + global)
// pattern, and what a call allocated.
//   attn::kernels::MhaProblem<float> p{.batch = b, .time = t, .heads = h, .head_dim = hd, .qkv = qkv};
//   p.pattern = {.window = 64, .causal = false, .global = 1};   // Longformer-style, token 0 global
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "../core/host_device.hpp"

namespace attn {

/// What one self_attention call allocated (host bytes), for tests and memory budgeting. Filled in
/// by forward and, if recorded, by backward; the object must outlive the backward pass.
struct AttentionStats {
  std::size_t saved_bytes = 0;    // kept for backward besides the output: logsumexp (B,H,T) or weights (B,H,T,T)
  std::size_t largest_bytes = 0;  // the largest single buffer the op allocated, forward or backward
  std::size_t total_bytes = 0;    // every buffer the op allocated, summed (scratch counted per thread)
  std::size_t tiles = 0;          // CPU flash: (query tile, key tile) score tiles computed, forward and backward
  void note(std::size_t bytes) { largest_bytes = std::max(largest_bytes, bytes), total_bytes += bytes; }
};

/// A sparse attention pattern (Longformer, Beltagy et al. 2020; BigBird, Zaheer et al. 2020):
/// which keys j each query i may see, on top of key padding and any additive attn_mask.
///   window w > 0: |i - j| <= w, i.e. w keys on each side of the query and the query itself
///                 (2w + 1 keys; Longformer's "window" of 2w + 1). 0: no window, every key.
///   causal:       j <= i. With a window: j in [i - w, i], a decoder's local window of w + 1 keys.
///   global g:     the leading positions 0..g-1 are global: a global query sees every key and every
///                 query sees the global keys, whatever the window. Causality still holds for them
///                 (a causal global query i sees keys 0..i; global key j is seen by queries i >= j).
///   chosen global positions (MhaProblem::global_mask, per sample, as Longformer's
///                 global_attention_mask) behave as the leading ones: visible(i, j, gi, gj) with gi,
///                 gj whether i and j are marked there.
/// visible(i, j) is the definition; the range functions below restate it as intervals, which the
/// tiled kernels use to skip tiles without reading them. For each query i the visible keys are
/// [0, global_keys_end(i)) union [key_begin(i), key_end(i)); for each key j the queries that see it
/// are [global_queries_begin(j), g) union [query_begin(j), query_end(j)) (n = time, ends exclusive).
/// The range functions know only the leading global tokens; the kernels add the chosen ones.
struct AttentionPattern {
  std::size_t window = 0;  // one-sided: keys within w positions of the query; 0: none
  bool causal = false;
  std::size_t global = 0;  // positions [0, global) are global tokens

  /// The pattern of the options' window (empty or >= 1: keys within that many positions), causal
  /// flag and number of leading global tokens.
  static AttentionPattern of(const std::optional<std::int64_t>& window, bool causal, std::size_t global_tokens) {
    return {.window = window ? static_cast<std::size_t>(*window) : 0, .causal = causal, .global = global_tokens};
  }

  /// Whether the pattern hides anything (global tokens alone do not).
  ATTN_HD bool active() const { return window != 0 || causal; }

  ATTN_HD bool visible(std::size_t i, std::size_t j, bool i_global = false, bool j_global = false) const {
    if (causal && j > i) return false;
    if (window == 0 || i < global || j < global || i_global || j_global) return true;
    return (i > j ? i - j : j - i) <= window;
  }

  // Query i's window part [key_begin, key_end); a global query's is every key (up to i if causal).
  ATTN_HD std::size_t key_begin(std::size_t i) const { return window == 0 || i < global || i < window ? 0 : i - window; }
  ATTN_HD std::size_t key_end(std::size_t i, std::size_t n) const {
    if (causal) return i + 1 < n ? i + 1 : n;
    return window == 0 || i < global || n - i <= window ? n : i + window + 1;
  }
  /// The global keys query i sees: [0, global_keys_end(i)).
  ATTN_HD std::size_t global_keys_end(std::size_t i, std::size_t n) const {
    std::size_t e = global < n ? global : n;
    if (causal && i + 1 < e) e = i + 1;
    return e;
  }
  // Key j's window part [query_begin, query_end); a global key is seen by every query (from j if causal).
  ATTN_HD std::size_t query_begin(std::size_t j) const {
    if (causal) return j;
    return window == 0 || j < global || j < window ? 0 : j - window;
  }
  ATTN_HD std::size_t query_end(std::size_t j, std::size_t n) const {
    return window == 0 || j < global || n - j <= window ? n : j + window + 1;
  }
  /// The global queries that see key j: [global_queries_begin(j), min(global, n)), empty if begin >= end.
  ATTN_HD std::size_t global_queries_begin(std::size_t j) const { return causal ? j : 0; }
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
  const T* global_mask = nullptr;  // (B, T) or nullptr: != 0 marks a global token of the pattern
  T scale = 1;                   // 1 / sqrt(head_dim)
  double dropout = 0;
  std::uint64_t seed = 0;        // of the dropout mask, a pure function of (seed, b, h, i, j)
  bool skip_padded_queries = false;  // flash: rows from key_end(b) on are zero (lse +inf) and get no gradient
  AttentionPattern pattern = {};     // sparse pattern; the default hides nothing
  bool bf16 = false;                 // CPU flash kernels, float, at avx512_bf16: tile products on bfloat16 operands
  bool clear_grad = false;           // CPU flash backward: dqkv is uninitialised, each (b, h) writes every row of its slices
  /// CPU flash kernels, dense pattern only: (B, H, T, T) where forward stores the scaled, masked
  /// scores of every tile it computes and backward reads them instead of recomputing Q K^T (the
  /// same values, bit for bit). Null: backward recomputes them (the O(T) memory of flash).
  T* scores = nullptr;
  std::size_t dim() const { return heads * head_dim; }
  std::size_t ld() const { return 3 * dim(); }
};

}  // namespace kernels

namespace kernels::mha {

// The tiles a tiled kernel visits under an AttentionPattern (both backends' flash kernels): the
// range functions above, rounded out to whole tiles.
/// Tiles [first[0], last[0]) and then [first[1], last[1]) of one side (disjoint, ascending; the
/// second run empty unless the first is not): the tiles a tile of the other side reaches through
/// the pattern. Those outside are fully hidden and never read.
///   for (std::size_t kb = runs.begin(); kb < runs.end(); kb = runs.next(kb)) ...
struct TileRuns {
  std::size_t first[2] = {0, 0}, last[2] = {0, 0};
  ATTN_HD std::size_t begin() const { return first[0]; }
  ATTN_HD std::size_t end() const { return first[1] < last[1] ? last[1] : last[0]; }
  ATTN_HD std::size_t next(std::size_t t) const { return t + 1 == last[0] && first[1] < last[1] ? first[1] : t + 1; }
};

/// The tile runs covering the element ranges [a0, a1) and [b0, b1) (either may be empty), merged
/// when they touch.
ATTN_HD inline TileRuns tile_runs(std::size_t a0, std::size_t a1, std::size_t b0, std::size_t b1, std::size_t tile) {
  TileRuns t;
  std::size_t r0[2] = {a0 / tile, (a1 + tile - 1) / tile}, r1[2] = {b0 / tile, (b1 + tile - 1) / tile};
  if (a0 >= a1) r0[0] = r0[1] = 0;
  if (b0 >= b1) r1[0] = r1[1] = 0;
  if (r0[0] == r0[1] || (r1[0] < r1[1] && r1[0] < r0[0])) {  // an empty run goes last, else the lower first
    const std::size_t s0 = r0[0], s1 = r0[1];
    r0[0] = r1[0], r0[1] = r1[1], r1[0] = s0, r1[1] = s1;
  }
  if (r1[0] < r1[1] && r1[0] <= r0[1]) {  // overlapping or adjacent: one run
    r0[1] = r0[1] > r1[1] ? r0[1] : r1[1];
    r1[0] = r1[1] = 0;
  }
  t.first[0] = r0[0], t.last[0] = r0[1], t.first[1] = r1[0], t.last[1] = r1[1];
  return t;
}

/// The key tiles (width bk) that query rows [i0, i1) see: the global keys, and the union of the
/// rows' windows (contiguous: each row's window holds the row's own position). key_begin is
/// non-decreasing in i, and key_end is too except that global rows come first with key_end = n.
ATTN_HD inline TileRuns key_tiles(const AttentionPattern& pat, std::size_t n, std::size_t i0, std::size_t i1, std::size_t bk) {
  return tile_runs(0, pat.global_keys_end(i1 - 1, n), pat.key_begin(i0), (pat.key_end(i0, n) > pat.key_end(i1 - 1, n) ? pat.key_end(i0, n) : pat.key_end(i1 - 1, n)), bk);
}

/// The query tiles (height bq) that see keys [j0, j1): the global queries that see any of them,
/// and the union of the keys' query windows (the same monotonicity, transposed).
ATTN_HD inline TileRuns query_tiles(const AttentionPattern& pat, std::size_t n, std::size_t j0, std::size_t j1, std::size_t bq) {
  return tile_runs(pat.global_queries_begin(j0), pat.global < n ? pat.global : n, pat.query_begin(j0),
                   pat.query_end(j0, n) > pat.query_end(j1 - 1, n) ? pat.query_end(j0, n) : pat.query_end(j1 - 1, n), bq);
}

}  // namespace kernels::mha

}  // namespace attn
