// SPDX-License-Identifier: MIT
// Fixed-seed train/validation splits of example indices, optionally stratified by label, so
// that a run's validation set is the same on every machine and every rerun; and the class weights
// that balance a split's labels.
//   auto s = attn::data::stratified_split(labels, 0.2, 42);  // s.train, s.valid: sorted indices
//   auto w = attn::data::balanced_class_weights(labels, 15);  // cross_entropy's .weight
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/rng.hpp"

namespace attn::data {

/// Disjoint index sets covering 0..n-1, each sorted ascending.
struct Split {
  std::vector<std::size_t> train;
  std::vector<std::size_t> valid;
};

namespace detail {
inline void check_fraction(double f, const char* who) {
  if (!(f >= 0.0 && f <= 1.0))
    throw ArgumentError(std::string(who) + ": valid_fraction must be in [0, 1], got " + std::to_string(f));
}
/// Shuffles `idx` with `rng`, moves the first `k` to valid and the rest to train.
inline void take_valid(std::vector<std::size_t>& idx, std::size_t k, Rng& rng, Split& out) {
  rng.shuffle(std::span<std::size_t>(idx));
  out.valid.insert(out.valid.end(), idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k));
  out.train.insert(out.train.end(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end());
}
}  // namespace detail

/// Random split of n examples: round(n * valid_fraction) of them go to valid.
inline Split random_split(std::size_t n, double valid_fraction, std::uint64_t seed) {
  detail::check_fraction(valid_fraction, "random_split");
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  Rng rng(seed);
  Split s;
  detail::take_valid(idx, static_cast<std::size_t>(std::llround(static_cast<double>(n) * valid_fraction)), rng, s);
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.valid.begin(), s.valid.end());
  return s;
}

/// Split that keeps each label's share in valid: the valid size is round(n * valid_fraction)
/// as in random_split, distributed over labels by largest remainder of n_c * valid_fraction
/// (ties to the smaller label), then drawn at random within each label. Labels must be >= 0.
inline Split stratified_split(std::span<const int> labels, double valid_fraction, std::uint64_t seed) {
  detail::check_fraction(valid_fraction, "stratified_split");
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0)
      throw ArgumentError("stratified_split: label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                          " is negative");
  // The labels present, ascending: any values (INT_MAX too), one group each.
  std::vector<int> present(labels.begin(), labels.end());
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());
  const std::size_t classes = present.size();
  std::vector<std::vector<std::size_t>> by_class(classes);
  for (std::size_t i = 0; i < labels.size(); ++i)
    by_class[static_cast<std::size_t>(std::lower_bound(present.begin(), present.end(), labels[i]) - present.begin())].push_back(i);

  const std::size_t total = static_cast<std::size_t>(std::llround(static_cast<double>(labels.size()) * valid_fraction));
  std::vector<std::size_t> take(classes);
  std::vector<double> remainder(classes);
  std::size_t given = 0;
  for (std::size_t c = 0; c < classes; ++c) {
    const double exact = static_cast<double>(by_class[c].size()) * valid_fraction;
    take[c] = static_cast<std::size_t>(std::floor(exact));
    remainder[c] = exact - static_cast<double>(take[c]);
    given += take[c];
  }
  std::vector<std::size_t> order(classes);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t k = 0; given < total && k < classes; ++k) {
    const std::size_t c = order[k];
    if (take[c] < by_class[c].size()) {
      ++take[c];
      ++given;
    }
  }

  Rng rng(seed);
  Split s;
  for (std::size_t c = 0; c < classes; ++c) detail::take_valid(by_class[c], take[c], rng, s);
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.valid.begin(), s.valid.end());
  return s;
}

/// Class weights (n / (classes * n_c))^exponent for labels in [0, classes). With exponent 1 these
/// are scikit-learn's class_weight="balanced" (the weighted count of every class present is
/// n / classes); 0.5 weighs by the inverse square root of the frequency, a softer correction of the
/// imbalance; 0 gives 1 to every class present. A class without labels gets 0. Labels below 0
/// (unknown) are not counted; one at or above `classes`, or an exponent outside [0, 1], is an
/// ArgumentError.
inline std::vector<double> class_weights(std::span<const int> labels, std::size_t classes, double exponent) {
  if (!(exponent >= 0.0 && exponent <= 1.0))
    throw ArgumentError("class_weights: the exponent " + std::to_string(exponent) + " is outside [0, 1]");
  std::vector<double> counts(classes, 0.0), w(classes, 0.0);
  double n = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    if (std::size_t(labels[i]) >= classes)
      throw ArgumentError("class_weights: label " + std::to_string(labels[i]) + " at " + std::to_string(i) + " is outside [0, " +
                          std::to_string(classes) + ")");
    counts[std::size_t(labels[i])] += 1;
    n += 1;
  }
  for (std::size_t c = 0; c < classes; ++c)
    if (counts[c] > 0) w[c] = std::pow(n / (double(classes) * counts[c]), exponent);
  return w;
}

/// class_weights with exponent 1: n / (classes * n_c), scikit-learn's class_weight="balanced".
inline std::vector<double> balanced_class_weights(std::span<const int> labels, std::size_t classes) {
  return class_weights(labels, classes, 1.0);
}

}  // namespace attn::data
