// SPDX-License-Identifier: MIT
// Padding/masking, length-bucketed batch order, and fixed-seed train/validation splits.
#include <catch2/catch.hpp>

#include <attn/data/batching.hpp>
#include <attn/data/split.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

using namespace attn::data;
using Ids = std::vector<std::int32_t>;
using Batches = std::vector<std::vector<std::size_t>>;

TEST_CASE("pad_batch: pads and truncates to max_len, mask and lengths match") {
  const std::vector<Ids> seqs{{5, 6, 7}, {8}, {}, {1, 2, 3, 4, 5, 6}};
  const PaddedBatch b = pad_batch(seqs, {.max_len = 4});
  CHECK(b.batch == 4);
  CHECK(b.time == 4);
  CHECK(b.ids == Ids{5, 6, 7, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4});
  CHECK(b.mask == std::vector<std::uint8_t>{1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(b.lengths == Ids{3, 1, 0, 4});
  CHECK(b.id(3, 2) == 3);
  CHECK_FALSE(b.real(1, 1));
  CHECK(b.mask_float() == std::vector<float>{1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
}

TEST_CASE("pad_batch: keep_tail, custom pad id and trimming to the longest sequence") {
  const std::vector<Ids> seqs{{1, 2, 3, 4, 5, 6}, {9}};
  const auto tail = pad_batch(seqs, {.max_len = 3, .pad_id = -1, .truncation = Truncation::keep_tail});
  CHECK(tail.ids == Ids{4, 5, 6, 9, -1, -1});
  const auto trimmed = pad_batch(seqs, {.max_len = 10, .trim_to_longest = true});
  CHECK(trimmed.time == 6);
  CHECK(trimmed.ids.size() == 12);
  const std::vector<Ids> empties{{}, {}};
  CHECK(pad_batch(empties, {.max_len = 10, .trim_to_longest = true}).time == 1);  // never a zero-width batch
}

TEST_CASE("pad_batch: gathers by index and rejects bad arguments") {
  const std::vector<Ids> all{{1}, {2, 2}, {3, 3, 3}};
  const std::vector<std::size_t> idx{2, 0};
  const auto b = pad_batch(all, idx, {.max_len = 2});
  CHECK(b.ids == Ids{3, 3, 1, 0});
  CHECK(b.indices == idx);
  const std::vector<std::size_t> bad{0, 3};
  CHECK_THROWS_WITH(pad_batch(all, bad, {.max_len = 2}), Catch::Contains("index 3 out of range"));
  CHECK_THROWS_AS(pad_batch(all, {.max_len = 0}), attn::ArgumentError);
  // A batch that cannot be addressed, or rows longer than int32 lengths: errors, not wrapped sizes.
  const std::vector<Ids> four{{1}, {1}, {1}, {1}};
  CHECK_THROWS_WITH(pad_batch(four, {.max_len = std::size_t{1} << 62, .trim_to_longest = false}), Catch::Contains("do not fit"));
  CHECK_THROWS_AS(pad_batch(four, {.max_len = std::size_t{1} << 31, .trim_to_longest = false}), attn::ArgumentError);
  CHECK(pad_batch(four, {.max_len = std::size_t{1} << 62, .trim_to_longest = true}).time == 1);  // trimmed to the longest
}

TEST_CASE("bucketed_batches: unshuffled order is sorted by length within a chunk") {
  const std::vector<std::size_t> lengths{5, 1, 4, 2, 3, 0, 7};
  attn::Rng rng(1);
  const auto b = bucketed_batches(lengths, {.batch_size = 2, .chunk_batches = 3, .shuffle = false}, rng);
  CHECK(b == Batches{{5, 1}, {3, 4}, {2, 0}, {6}});
  const auto d = bucketed_batches(lengths, {.batch_size = 2, .chunk_batches = 3, .shuffle = false, .drop_last = true}, rng);
  CHECK(d == Batches{{5, 1}, {3, 4}, {2, 0}});
  CHECK(sequential_batches(5, 2) == Batches{{0, 1}, {2, 3}, {4}});
  CHECK_THROWS_AS(bucketed_batches(lengths, {.batch_size = 0}, rng), attn::ArgumentError);
  // Sizes whose product or sums would wrap: one chunk, one batch.
  const std::size_t huge = std::size_t{1} << 32;
  CHECK(bucketed_batches(lengths, {.batch_size = huge, .chunk_batches = huge, .shuffle = false}, rng) == Batches{{5, 1, 3, 4, 2, 0, 6}});
  CHECK(bucketed_batches(lengths, {.batch_size = std::numeric_limits<std::size_t>::max(), .shuffle = false}, rng).size() == 1);
}

TEST_CASE("bucketed_batches: covers every index once, is seed-deterministic and cuts padding") {
  attn::Rng gen(3);
  std::vector<std::size_t> lengths(1000);
  for (auto& l : lengths) l = 1 + gen.below(400);
  const BucketOptions opt{.batch_size = 32, .chunk_batches = 8};
  attn::Rng r1(42), r2(42), r3(43);
  const auto a = bucketed_batches(lengths, opt, r1);
  CHECK(a == bucketed_batches(lengths, opt, r2));
  CHECK(a != bucketed_batches(lengths, opt, r3));

  std::vector<std::size_t> seen;
  for (const auto& b : a) seen.insert(seen.end(), b.begin(), b.end());
  std::sort(seen.begin(), seen.end());
  std::vector<std::size_t> all(lengths.size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  CHECK(seen == all);
  CHECK(a.size() == 32);  // ceil(1000 / 32)

  // Padding relative to unsorted random batches of the same size: bucketing must cut it a lot.
  const auto padding = [&](const Batches& bs) {
    std::size_t pad = 0;
    for (const auto& b : bs) {
      std::size_t mx = 0;
      for (auto i : b) mx = std::max(mx, lengths[i]);
      for (auto i : b) pad += mx - lengths[i];
    }
    return pad;
  };
  attn::Rng r4(42);
  std::vector<std::size_t> perm = all;
  r4.shuffle(std::span<std::size_t>(perm));
  Batches random;
  for (std::size_t lo = 0; lo < perm.size(); lo += 32)
    random.emplace_back(perm.begin() + lo, perm.begin() + std::min(perm.size(), lo + 32));
  CHECK(padding(a) * 5 < padding(random));

  // Batch order is shuffled: not simply ascending by first length.
  bool ascending = true;
  for (std::size_t i = 1; i < a.size(); ++i) ascending = ascending && lengths[a[i][0]] >= lengths[a[i - 1][0]];
  CHECK_FALSE(ascending);
}

TEST_CASE("balanced_class_weights: n / (classes n_c), 0 for an absent class, unknown labels skipped") {
  const std::vector<int> labels{0, 0, 0, 1, -1, 3, 0, 1};  // 7 known: 4, 2, 0, 1
  const auto w = attn::data::balanced_class_weights(labels, 4);
  REQUIRE(w.size() == 4);
  CHECK(w[0] == Approx(7.0 / 16));
  CHECK(w[1] == Approx(7.0 / 8));
  CHECK(w[2] == 0.0);
  CHECK(w[3] == Approx(7.0 / 4));
  double weighted = 0;  // every class present weighs n / classes in all
  for (int y : labels)
    if (y >= 0) weighted += w[std::size_t(y)];
  CHECK(weighted == Approx(7.0 * 3 / 4));
  const std::vector<int> bad{0, 4};
  CHECK_THROWS_WITH(attn::data::balanced_class_weights(bad, 4), Catch::Contains("label 4 at 1 is outside [0, 4)"));
}

TEST_CASE("class_weights: the balanced weights raised to the exponent") {
  const std::vector<int> labels{0, 0, 0, 1, -1, 3, 0, 1};  // 7 known: 4, 2, 0, 1
  const auto w = attn::data::class_weights(labels, 4, 0.5);
  REQUIRE(w.size() == 4);
  CHECK(w[0] == Approx(std::sqrt(7.0 / 16)));
  CHECK(w[1] == Approx(std::sqrt(7.0 / 8)));
  CHECK(w[2] == 0.0);  // absent: 0 whatever the exponent
  CHECK(w[3] == Approx(std::sqrt(7.0 / 4)));
  const auto flat = attn::data::class_weights(labels, 4, 0.0);
  CHECK(flat == std::vector<double>{1.0, 1.0, 0.0, 1.0});
  CHECK(attn::data::class_weights(labels, 4, 1.0) == attn::data::balanced_class_weights(labels, 4));
  CHECK_THROWS_WITH(attn::data::class_weights(labels, 4, 1.5), Catch::Contains("exponent 1.5"));
  CHECK_THROWS_WITH(attn::data::class_weights(labels, 4, -0.5), Catch::Contains("outside [0, 1]"));
  CHECK_THROWS_WITH(attn::data::class_weights(labels, 4, std::nan("")), Catch::Contains("outside [0, 1]"));
}

TEST_CASE("random_split: sizes, disjointness, determinism") {
  const Split s = random_split(100, 0.2, 42);
  CHECK(s.valid.size() == 20);
  CHECK(s.train.size() == 80);
  CHECK(std::is_sorted(s.valid.begin(), s.valid.end()));
  CHECK(std::is_sorted(s.train.begin(), s.train.end()));
  std::set<std::size_t> u(s.train.begin(), s.train.end());
  u.insert(s.valid.begin(), s.valid.end());
  CHECK(u.size() == 100);
  CHECK(*u.rbegin() == 99);
  CHECK(random_split(100, 0.2, 42).valid == s.valid);
  CHECK(random_split(100, 0.2, 43).valid != s.valid);
  // Portable: attn::Rng gives this split on every platform.
  CHECK(random_split(10, 0.3, 42).valid == std::vector<std::size_t>{3, 7, 8});
  CHECK(random_split(7, 0.0, 1).valid.empty());
  CHECK(random_split(7, 1.0, 1).train.empty());
  CHECK_THROWS_AS(random_split(7, 1.5, 1), attn::ArgumentError);
  CHECK_THROWS_AS(random_split(7, -0.1, 1), attn::ArgumentError);
  CHECK_THROWS_AS(random_split(7, std::numeric_limits<double>::quiet_NaN(), 1), attn::ArgumentError);
}

TEST_CASE("stratified_split: keeps label shares, remainders go to the largest fractions") {
  std::vector<int> labels(100, 0);
  std::fill(labels.begin() + 80, labels.end(), 1);
  const Split s = stratified_split(labels, 0.25, 7);
  REQUIRE(s.valid.size() == 25);
  const auto ones = std::count_if(s.valid.begin(), s.valid.end(), [&](std::size_t i) { return labels[i] == 1; });
  CHECK(ones == 5);
  CHECK(stratified_split(labels, 0.25, 7).valid == s.valid);

  // Three classes of 5 at 0.5: 7.5 -> 8 in valid, 2.5 each -> ties go to the smaller labels.
  const std::vector<int> three{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
  const Split t = stratified_split(three, 0.5, 1);
  std::vector<int> per(3, 0);
  for (auto i : t.valid) ++per[static_cast<std::size_t>(three[i])];
  CHECK(per == std::vector<int>{3, 3, 2});
  CHECK(t.train.size() + t.valid.size() == three.size());

  const std::vector<int> neg{0, -1};
  CHECK_THROWS_WITH(stratified_split(neg, 0.5, 1), Catch::Contains("index 1"));

  // Any label values: sparse and huge ones split as their ranks do.
  const std::vector<int> sparse{2000000000, 7, 2147483647, 7, 2000000000, 2147483647, 7, 2000000000};
  const std::vector<int> ranks{1, 0, 2, 0, 1, 2, 0, 1};
  const Split u = stratified_split(sparse, 0.5, 3);
  CHECK(u.valid == stratified_split(ranks, 0.5, 3).valid);
  CHECK(u.train.size() + u.valid.size() == sparse.size());
}
