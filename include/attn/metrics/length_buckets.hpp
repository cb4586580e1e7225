// SPDX-License-Identifier: MIT
// Accuracy broken down by input length, to see whether a model fails on long or short texts.
// Edges {50, 100, 200} make the buckets <50, 50-100, 100-200, >=200 (each [lo, hi)).
//   attn::metrics::LengthBucketAccuracy acc({50, 100, 200}); acc.add(len, truth == pred);
//   std::cout << acc.table();
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "text.hpp"

namespace attn::metrics {

class LengthBucketAccuracy {
 public:
  /// `edges` must be strictly increasing and positive; k edges make k + 1 buckets.
  explicit LengthBucketAccuracy(std::vector<std::size_t> edges)
      : edges_(std::move(edges)), total_(edges_.size() + 1, 0), correct_(edges_.size() + 1, 0) {
    for (std::size_t i = 0; i < edges_.size(); ++i) {
      if (edges_[i] == 0) throw ArgumentError("LengthBucketAccuracy: edges must be positive");
      if (i > 0 && edges_[i] <= edges_[i - 1])
        throw ArgumentError(text::cat("LengthBucketAccuracy: edges must increase strictly (", std::to_string(edges_[i]), " after ",
                                      std::to_string(edges_[i - 1]), ")"));
    }
  }

  std::size_t num_buckets() const noexcept { return total_.size(); }
  const std::vector<std::size_t>& edges() const noexcept { return edges_; }

  /// Bucket of a length: the number of edges <= length.
  std::size_t bucket(std::size_t length) const noexcept {
    std::size_t b = 0;
    while (b < edges_.size() && length >= edges_[b]) ++b;
    return b;
  }

  /// "<50", "50-100", ..., ">=200": lo-hi means lo <= length < hi.
  std::string label(std::size_t b) const {
    if (edges_.empty()) return "all";
    if (b == 0) return text::cat("<", std::to_string(edges_[0]));
    if (b == edges_.size()) return text::cat(">=", std::to_string(edges_.back()));
    return text::cat(std::to_string(edges_[b - 1]), "-", std::to_string(edges_[b]));
  }

  void add(std::size_t length, bool correct) {
    const std::size_t b = bucket(length);
    ++total_[b];
    correct_[b] += correct ? 1 : 0;
  }
  void add(std::size_t length, int truth, int pred) { add(length, truth == pred); }

  std::uint64_t count(std::size_t b) const { return total_.at(b); }
  std::uint64_t correct(std::size_t b) const { return correct_.at(b); }
  /// correct / count of bucket b; NaN for an empty bucket (undefined, never a fake 0%).
  double accuracy(std::size_t b) const {
    return count(b) == 0 ? std::numeric_limits<double>::quiet_NaN()
                         : static_cast<double>(correct(b)) / static_cast<double>(count(b));
  }

  /// One row per bucket: label, examples, accuracy ("-" when empty).
  std::string table(int digits = 4) const {
    std::size_t w = std::string_view("length").size();
    for (std::size_t b = 0; b < num_buckets(); ++b) w = std::max(w, label(b).size());
    std::string out = text::cat(text::left("length", w), " ", text::right("examples", 10), " ", text::right("accuracy", 10), "\n");
    for (std::size_t b = 0; b < num_buckets(); ++b) {
      const double a = accuracy(b);
      out += text::cat(text::left(label(b), w), " ", text::right(std::to_string(count(b)), 10), " ",
                       text::right(std::isnan(a) ? std::string("-") : text::fixed(a, digits), 10), "\n");
    }
    return out;
  }

 private:
  std::vector<std::size_t> edges_;
  std::vector<std::uint64_t> total_;
  std::vector<std::uint64_t> correct_;
};

}  // namespace attn::metrics
