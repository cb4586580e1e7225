// SPDX-License-Identifier: MIT
// Turning id sequences into padded (B, T) batches with masks, and ordering examples into
// length-bucketed batches that are shuffled deterministically from a seed.
//   auto order = attn::data::bucketed_batches(lengths, {.batch_size = 32}, rng);
//   auto b = attn::data::pad_batch(seqs, order[0], {.max_len = 256});  // b.ids, b.mask: (B, T)
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"

namespace attn::data {

/// Which end of a too-long sequence survives truncation.
enum class Truncation {
  keep_head,  ///< keep the first max_len tokens (the usual choice for reviews and titles)
  keep_tail,  ///< keep the last max_len tokens
};

struct PadOptions {
  std::size_t max_len = 0;  ///< T: longer sequences are truncated; must be >= 1
  std::int32_t pad_id = 0;  ///< id written where mask == 0 (Vocab::pad_id)
  Truncation truncation = Truncation::keep_head;
  /// false: T = max_len always. true: T = min(max_len, longest sequence in the batch), at
  /// least 1, which with length-bucketed batches saves most of the padding work.
  bool trim_to_longest = false;
};

/// A padded batch. ids and mask are (B, T) row-major; lengths is (B), each in [0, T].
struct PaddedBatch {
  std::size_t batch = 0;             ///< B
  std::size_t time = 0;              ///< T
  std::vector<std::int32_t> ids;     ///< (B, T), pad_id after each sequence's length
  std::vector<std::uint8_t> mask;    ///< (B, T), 1 = real token, 0 = padding
  std::vector<std::int32_t> lengths; ///< (B), real tokens per row after truncation
  std::vector<std::size_t> indices;  ///< (B), which examples these rows are (when known)

  std::int32_t id(std::size_t b, std::size_t t) const { return ids[b * time + t]; }
  bool real(std::size_t b, std::size_t t) const { return mask[b * time + t] != 0; }
  /// The mask as floats (1.0 real, 0.0 padding), (B, T).
  std::vector<float> mask_float() const { return std::vector<float>(mask.begin(), mask.end()); }
};

namespace detail {
template <class Get>
PaddedBatch pad_rows(std::size_t rows, Get&& get, const PadOptions& o) {
  if (o.max_len == 0) throw ArgumentError("pad_batch: max_len must be >= 1");
  std::size_t t = o.max_len;
  if (o.trim_to_longest) {
    std::size_t longest = 1;
    for (std::size_t b = 0; b < rows; ++b) longest = std::max(longest, get(b).size());
    t = std::min(t, longest);
  }
  // Lengths are int32 (attn::Lengths), and the batch must be addressable.
  if (t > std::size_t(std::numeric_limits<std::int32_t>::max()) || (rows != 0 && t > std::numeric_limits<std::size_t>::max() / rows))
    throw ArgumentError("pad_batch: " + std::to_string(rows) + " rows of " + std::to_string(t) +
                        " positions do not fit (at most 2^31 - 1 positions a row)");
  PaddedBatch out;
  out.batch = rows;
  out.time = t;
  out.ids.assign(rows * t, o.pad_id);
  out.mask.assign(rows * t, 0);
  out.lengths.resize(rows);
  for (std::size_t b = 0; b < rows; ++b) {
    const std::span<const std::int32_t> s = get(b);
    const std::size_t n = std::min(s.size(), t);
    const std::size_t from = o.truncation == Truncation::keep_head ? 0 : s.size() - n;
    std::copy_n(s.begin() + static_cast<std::ptrdiff_t>(from), n, out.ids.begin() + static_cast<std::ptrdiff_t>(b * t));
    std::fill_n(out.mask.begin() + static_cast<std::ptrdiff_t>(b * t), n, std::uint8_t{1});
    out.lengths[b] = static_cast<std::int32_t>(n);
  }
  return out;
}
}  // namespace detail

/// Pads/truncates every sequence of `seqs` (B sequences) into one batch.
inline PaddedBatch pad_batch(std::span<const std::vector<std::int32_t>> seqs, const PadOptions& options) {
  return detail::pad_rows(
      seqs.size(), [&](std::size_t b) { return std::span<const std::int32_t>(seqs[b]); }, options);
}

/// Pads/truncates the sequences all[indices[0]], all[indices[1]], ... into one batch; the
/// batch remembers `indices` so labels can be gathered in the same order.
inline PaddedBatch pad_batch(std::span<const std::vector<std::int32_t>> all, std::span<const std::size_t> indices,
                             const PadOptions& options) {
  for (const std::size_t i : indices)
    if (i >= all.size())
      throw ArgumentError("pad_batch: index " + std::to_string(i) + " out of range for " + std::to_string(all.size()) +
                          " sequences");
  auto out = detail::pad_rows(
      indices.size(), [&](std::size_t b) { return std::span<const std::int32_t>(all[indices[b]]); }, options);
  out.indices.assign(indices.begin(), indices.end());
  return out;
}

struct BucketOptions {
  std::size_t batch_size = 32;
  /// Examples are sorted by length within chunks of batch_size * chunk_batches consecutive
  /// (shuffled) examples: larger chunks mean less padding, smaller chunks more randomness.
  std::size_t chunk_batches = 50;
  bool shuffle = true;     ///< false: keep example order, only sort within chunks (evaluation)
  bool drop_last = false;  ///< drop the final batch if it has fewer than batch_size examples
};

/// Length-bucketed batch order: example indices shuffled with `rng`, cut into chunks, each
/// chunk stably sorted by length and cut into batches, then the batch order shuffled. Every
/// index appears exactly once (unless drop_last drops the short batch). The same rng state
/// gives the same batches on every platform (attn::Rng is portable).
inline std::vector<std::vector<std::size_t>> bucketed_batches(std::span<const std::size_t> lengths,
                                                              const BucketOptions& options, Rng& rng) {
  if (options.batch_size == 0) throw ArgumentError("bucketed_batches: batch_size must be >= 1");
  if (options.chunk_batches == 0) throw ArgumentError("bucketed_batches: chunk_batches must be >= 1");
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (options.shuffle) rng.shuffle(std::span<std::size_t>(order));
  const std::size_t n = order.size();
  // batch_size * chunk_batches, saturated; every step below is cut at n without overflowing.
  const std::size_t chunk = options.chunk_batches > std::numeric_limits<std::size_t>::max() / options.batch_size
                                ? std::numeric_limits<std::size_t>::max()
                                : options.batch_size * options.chunk_batches;
  for (std::size_t lo = 0; lo < n;) {
    const std::size_t hi = lo + std::min(chunk, n - lo);
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(lo), order.begin() + static_cast<std::ptrdiff_t>(hi),
                     [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
    lo = hi;
  }
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t lo = 0, hi = 0; lo < n; lo = hi) {
    hi = lo + std::min(options.batch_size, n - lo);
    if (hi - lo < options.batch_size && options.drop_last) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(lo), order.begin() + static_cast<std::ptrdiff_t>(hi));
  }
  if (options.shuffle) rng.shuffle(std::span<std::vector<std::size_t>>(batches));
  return batches;
}

/// Consecutive batches 0..n-1 in order (the last one may be short).
inline std::vector<std::vector<std::size_t>> sequential_batches(std::size_t n, std::size_t batch_size) {
  if (batch_size == 0) throw ArgumentError("sequential_batches: batch_size must be >= 1");
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t lo = 0; lo < n; lo += batch_size) {
    auto& b = batches.emplace_back(std::min(n, lo + batch_size) - lo);
    std::iota(b.begin(), b.end(), lo);
  }
  return batches;
}

}  // namespace attn::data
