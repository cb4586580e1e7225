// SPDX-License-Identifier: MIT
// dist::DistributedSampler: each rank's shard of a dataset's indices per epoch, PyTorch's rule (same
// shuffle everywhere, padded to a multiple of the world size, rank r takes every world-th index). No MPI.
//   attn::dist::DistributedSampler s(n, comm.size(), comm.rank(), {.seed = 1});  s.set_epoch(e);  auto idx = s.indices();
#pragma once
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"

namespace attn::dist {

struct SamplerOptions {
  /// Shuffle with seed + epoch (every rank must pass the same seed); false keeps dataset order.
  bool shuffle = true;
  std::uint64_t seed = 0;
  /// true: drop the tail that does not divide evenly; false: repeat indices from the start
  /// until every rank has the same count (some samples then appear twice in an epoch).
  bool drop_last = false;
};

/// Per epoch, every rank gets size() indices, disjoint across ranks except for the padding of
/// !drop_last. Position i of rank r's list is position i * world + r of the (shuffled, padded)
/// epoch order, so rank r's k-th local batch of b samples and the other ranks' k-th batches
/// together are exactly the k-th global batch of world * b samples a single process would take
/// from the same order: N ranks on batches of b see what one process sees on batches of N b.
class DistributedSampler {
 public:
  DistributedSampler(std::size_t dataset_size, int world_size, int rank, SamplerOptions opt = {})
      : n_(dataset_size), world_(world_size), rank_(rank), opt_(opt) {
    if (world_size < 1) throw ArgumentError("dist::DistributedSampler: world size must be at least 1, got " + std::to_string(world_size));
    if (rank < 0 || rank >= world_size)
      throw ArgumentError("dist::DistributedSampler: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
    const std::size_t w = static_cast<std::size_t>(world_);
    per_rank_ = opt_.drop_last ? n_ / w : (n_ + w - 1) / w;
  }

  /// Selects the epoch's shuffle; call at the start of every epoch, with the same value on all ranks.
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }
  std::uint64_t epoch() const noexcept { return epoch_; }
  /// Indices per rank per epoch.
  std::size_t size() const noexcept { return per_rank_; }
  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_; }

  /// The whole epoch order shared by all ranks: shuffled, then padded or truncated to
  /// size() * world_size() entries.
  std::vector<std::size_t> epoch_order() const {
    std::vector<std::size_t> order(n_);
    std::iota(order.begin(), order.end(), std::size_t(0));
    if (opt_.shuffle) {
      Rng rng(opt_.seed + epoch_);
      rng.shuffle(std::span<std::size_t>(order));
    }
    const std::size_t total = per_rank_ * static_cast<std::size_t>(world_);
    if (order.size() > total) order.resize(total);
    for (std::size_t i = 0; order.size() < total; ++i) {  // n_ > 0 whenever total > n_
      const std::size_t again = order[i];
      order.push_back(again);
    }
    return order;
  }

  /// This rank's indices for the current epoch, in the order to visit them.
  std::vector<std::size_t> indices() const {
    const auto order = epoch_order();
    std::vector<std::size_t> mine;
    mine.reserve(per_rank_);
    for (std::size_t i = static_cast<std::size_t>(rank_); i < order.size(); i += static_cast<std::size_t>(world_)) mine.push_back(order[i]);
    return mine;
  }

 private:
  std::size_t n_;
  int world_;
  int rank_;
  SamplerOptions opt_;
  std::size_t per_rank_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace attn::dist
