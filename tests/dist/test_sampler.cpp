// SPDX-License-Identifier: MIT
// dist::DistributedSampler: PyTorch's sharding rule; shards partition the epoch, and the ranks'
// k-th local batches together are a single process's k-th global batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include <attn/dist/sampler.hpp>

using attn::dist::DistributedSampler;
using attn::dist::SamplerOptions;

namespace {
std::vector<std::vector<std::size_t>> shards(std::size_t n, int world, SamplerOptions opt, std::uint64_t epoch = 0) {
  std::vector<std::vector<std::size_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, opt);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}
}  // namespace

TEST_CASE("sampler: without shuffle, rank r takes every world-th index from r (PyTorch's order)") {
  auto s = shards(10, 3, {.shuffle = false});
  CHECK(s[0] == std::vector<std::size_t>{0, 3, 6, 9});
  CHECK(s[1] == std::vector<std::size_t>{1, 4, 7, 0});  // padded with index 0 again
  CHECK(s[2] == std::vector<std::size_t>{2, 5, 8, 1});
  auto d = shards(10, 3, {.shuffle = false, .drop_last = true});
  CHECK(d[0] == std::vector<std::size_t>{0, 3, 6});
  CHECK(d[2] == std::vector<std::size_t>{2, 5, 8});
  CHECK(DistributedSampler(10, 3, 0, {.drop_last = true}).size() == 3);
  CHECK(DistributedSampler(10, 3, 0).size() == 4);
}

TEST_CASE("sampler: shuffled shards are disjoint, cover the dataset, and change with the epoch") {
  const std::size_t n = 103;
  for (int world : {1, 2, 4, 7}) {
    auto s = shards(n, world, {.seed = 11, .drop_last = true});
    std::set<std::size_t> all;
    for (auto& shard : s) {
      CHECK(shard.size() == n / std::size_t(world));
      all.insert(shard.begin(), shard.end());
    }
    CHECK(all.size() == n / std::size_t(world) * std::size_t(world));  // disjoint
    auto padded = shards(n, world, {.seed = 11});
    std::set<std::size_t> covered;
    for (auto& shard : padded) covered.insert(shard.begin(), shard.end());
    CHECK(covered.size() == n);  // every sample, some twice
  }
  CHECK(shards(n, 2, {.seed = 11}, 0) != shards(n, 2, {.seed = 11}, 1));
  CHECK(shards(n, 2, {.seed = 11}, 5) == shards(n, 2, {.seed = 11}, 5));
  CHECK(shards(n, 2, {.seed = 11}) != shards(n, 2, {.seed = 12}));
  auto unshuffled = shards(n, 1, {.shuffle = false})[0];
  auto shuffled = shards(n, 1, {.seed = 11})[0];
  CHECK(unshuffled != shuffled);
  std::sort(shuffled.begin(), shuffled.end());
  CHECK(unshuffled == shuffled);
}

TEST_CASE("sampler: the ranks' k-th local batches together are the single process's k-th batch") {
  const std::size_t n = 48, local = 4;
  for (int world : {2, 3, 4}) {
    const auto single = DistributedSampler(n, 1, 0, {.seed = 5}).indices();
    const auto s = shards(n, world, {.seed = 5});
    const std::size_t global = local * std::size_t(world);
    for (std::size_t k = 0; k < n / global; ++k) {
      std::multiset<std::size_t> a(single.begin() + k * global, single.begin() + (k + 1) * global), b;
      for (auto& shard : s) b.insert(shard.begin() + k * local, shard.begin() + (k + 1) * local);
      CHECK(a == b);
    }
  }
}

TEST_CASE("sampler: edge sizes and bad arguments") {
  CHECK(DistributedSampler(0, 2, 1).indices().empty());
  CHECK(DistributedSampler(1, 4, 3, {.drop_last = true}).indices().empty());
  CHECK(DistributedSampler(1, 4, 3, {.shuffle = false}).indices() == std::vector<std::size_t>{0});
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("world size must be at least 1"));
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2), Catch::Contains("rank 2 is outside [0, 2)"));
  CHECK_THROWS_AS(DistributedSampler(10, 2, -1), attn::ArgumentError);
}
