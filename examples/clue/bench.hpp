// SPDX-License-Identifier: MIT
// Inference speed of a trained (or freshly initialised) CLUE classifier on real title lengths:
// throughput at batch 64 (consecutive titles padded to the longest in their batch, as the R4
// reference case does; and again with the titles sorted by length first, as an offline job
// would batch them) and single-title latency (median and p99). Times cover batch assembly and
// the forward pass, from encoded ids to logits (on a device backend: the copy of the batch to the
// device and of the logits back). With attn's FP32 GEMM rate given (cpu::gemm, 2048^3), it also
// reports the bound that rate puts on the batch-64 throughput: the passes' FLOPs at that rate.
#pragma once
#include <algorithm>
#include <chrono>
#include <numeric>
#include <span>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "model.hpp"

namespace clue {

struct BenchResult {
  std::size_t titles = 0;          // distinct titles timed
  double mean_len = 0;             // their mean length in tokens
  std::size_t batch = 64;
  double samples_per_s = 0;        // median over the timed passes
  double best_samples_per_s = 0;   // best pass
  std::size_t passes = 0;
  double sorted_samples_per_s = 0;  // the same titles batched in length order (median)
  double padding = 0, sorted_padding = 0;  // padded positions / real tokens - 1
  double b1_median_ms = 0, b1_p99_ms = 0;  // batch-1 latency
  std::size_t b1_samples = 0;
  double mflop_per_title = 0;   // the batch-64 passes' arithmetic, per title
  double ceiling_gflops = 0;    // the FP32 GEMM ceiling given (0: none)
  double bound_samples_per_s = 0;  // titles/s if every FLOP ran at that ceiling


  std::string str() const {
    std::string s = fmt::format("{} titles, mean length {:.1f}: batch {} {:.0f} samples/s (median of {} passes; best {:.0f}; {:.0f}% padding)",
                                titles, mean_len, batch, samples_per_s, passes, best_samples_per_s, 100 * padding);
    if (sorted_samples_per_s > 0)
      s += fmt::format("; length-sorted batches {:.0f} samples/s ({:.0f}% padding)", sorted_samples_per_s, 100 * sorted_padding);
    if (b1_samples) s += fmt::format("; batch 1 latency median {:.3f} ms, p99 {:.3f} ms ({} titles)", b1_median_ms, b1_p99_ms, b1_samples);
    if (bound_samples_per_s > 0)
      s += fmt::format("\nFP32 bound: {:.2f} MFLOP per title at attn's FP32 GEMM rate of {:.1f} GFLOP/s is {:.0f} samples/s; the batch-{} "
                       "median runs at {:.0f}% of it",
                       mflop_per_title, ceiling_gflops, bound_samples_per_s, batch, 100 * samples_per_s / bound_samples_per_s);
    return s;
  }
};

namespace bench_detail {
using clock = std::chrono::steady_clock;
inline double since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t k = std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5));
  return v[k];
}
}  // namespace bench_detail

/// FLOPs of one inference forward over a batch of titles with these lengths (a multiply-add counts
/// 2): the recurrent layer's recurrence (`gates` 4: the BiLSTM; 3: the BiGRU) and, unless the
/// embedding is folded into it, its input projections; the attention's four projections on the real
/// tokens and its scores and weighted sums within each title (when the model has attention); the
/// head's `classes` outputs. LayerNorm, pooling and the softmax are left out (a few percent at most).
inline double forward_flops(std::span<const std::size_t> lengths, bool folded, bool attention = true, std::size_t classes = kTnewsClasses,
                            std::size_t gates = 4) {
  constexpr double h = kHidden, e = kEmbed, d = kDim;
  double tokens = 0, pairs = 0;
  for (auto l : lengths) tokens += double(l), pairs += double(l) * double(l);
  const double lstm = 2 * tokens * 2 * gates * h * (h + (folded ? 0 : e));
  const double projections = attention ? tokens * 2 * d * 4 * d : 0;
  const double core = attention ? pairs * 4 * d : 0;
  return lstm + projections + core + double(lengths.size()) * 2 * d * double(classes);
}

/// Times inference over `seqs` (the validation titles): passes of batch-`batch` forwards for about
/// `seconds` (at least 3 passes), with `sorted` the same in length order for half as long, then
/// `b1_samples` single-title forwards (0: skip latency). ceiling_gflops > 0 (the machine's FP32
/// GEMM rate, attn::cpu_gemm_ceiling_gflops()) adds the bound it puts on the batch throughput.
template <class Model>
BenchResult bench_inference(const Model& model, const std::vector<std::vector<std::int32_t>>& seqs, std::size_t batch, double seconds,
                            std::size_t b1_samples, bool sorted = false, double ceiling_gflops = 0) {
  using namespace bench_detail;
  BenchResult r;
  r.titles = seqs.size();
  r.batch = batch;
  if (seqs.empty()) return r;
  std::size_t tokens = 0;
  std::vector<std::size_t> lengths;
  for (auto& s : seqs) tokens += s.size(), lengths.push_back(s.size());
  r.mean_len = double(tokens) / double(seqs.size());
  r.mflop_per_title = forward_flops(lengths, model.folded.has_value(), model.heads() > 0, model.cfg.classes, model.cfg.rnn_gates()) / double(seqs.size()) / 1e6;
  if (ceiling_gflops > 0) {
    r.ceiling_gflops = ceiling_gflops;
    r.bound_samples_per_s = ceiling_gflops * 1e3 / r.mflop_per_title;
  }
  attn::NoGrad ctx;
  float sink = 0;  // keeps the results observable
  using B = typename Model::backend;
  auto run = [&](const std::vector<const std::vector<std::int32_t>*>& g) {
    const auto b = to_backend<B>(make_batch(g, {}));
    auto logits = model.forward(ctx, b);
    if constexpr (B::host_accessible) {
      sink += logits.value().data()[0];
    } else {
      sink += logits.value().to_vector()[0];  // waits for the device: a pass is timed to its end
    }
  };
  // Batches of `batch` titles taken in `order`; returns (median, best) samples/s and the padding.
  auto timed = [&](const std::vector<std::size_t>& order, double secs) {
    std::vector<std::vector<const std::vector<std::int32_t>*>> groups;
    std::size_t padded = 0;
    for (std::size_t s = 0; s < order.size(); s += batch) {
      auto& g = groups.emplace_back();
      std::size_t longest = 0;
      for (std::size_t k = s; k < std::min(order.size(), s + batch); ++k) {
        g.push_back(&seqs[order[k]]);
        longest = std::max(longest, seqs[order[k]].size());
      }
      padded += longest * g.size();
    }
    for (std::size_t k = 0; k < std::min<std::size_t>(groups.size(), 4); ++k) run(groups[k]);  // warm-up
    std::vector<double> rates;
    const auto start = clock::now();
    while (rates.size() < 3 || since(start) < secs) {
      const auto t = clock::now();
      for (auto& g : groups) run(g);
      rates.push_back(double(seqs.size()) / since(t));
      if (rates.size() >= 1000) break;
    }
    return std::tuple{percentile(rates, 0.5), *std::max_element(rates.begin(), rates.end()), rates.size(),
                      double(padded) / double(tokens) - 1};
  };
  std::vector<std::size_t> order(seqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::tie(r.samples_per_s, r.best_samples_per_s, r.passes, r.padding) = timed(order, seconds);
  if (sorted) {
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return seqs[a].size() < seqs[b].size(); });
    double best = 0;
    std::size_t passes = 0;
    std::tie(r.sorted_samples_per_s, best, passes, r.sorted_padding) = timed(order, seconds / 2);
  }
  if (b1_samples) {
    std::vector<double> ms;
    const std::size_t n = std::min(b1_samples, seqs.size());
    for (std::size_t k = 0; k < std::min<std::size_t>(n, 20); ++k) run({&seqs[k]});  // warm-up
    for (std::size_t k = 0; k < n; ++k) {
      const auto t = clock::now();
      run({&seqs[k]});
      ms.push_back(1e3 * since(t));
    }
    r.b1_samples = n;
    r.b1_median_ms = percentile(ms, 0.5);
    r.b1_p99_ms = percentile(ms, 0.99);
  }
  if (sink == 12345.678f) fmt::print(" ");
  return r;
}

}  // namespace clue
