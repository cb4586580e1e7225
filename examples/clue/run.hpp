// SPDX-License-Identifier: MIT
// What the CLUE program's translation units share: the result of training one head count, and
// train_heads(), defined in train.cpp (training, evaluation, the heatmaps) so that main.cpp (the
// command, the sweep, the report, predict and --bench) compiles separately.
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "../common/parallel.hpp"
#include "../common/training.hpp"
#include "bench.hpp"
#include "data.hpp"
#include "model.hpp"
#include "options.hpp"

using nlohmann::json;

namespace clue {

static_assert(kDefaultHeads == nn::recommended_heads(kDim), "the --heads default is nn::recommended_heads of the attention width");

/// Class names for tables: label_desc ("news_tech"), or the label when there is none.
inline std::vector<std::string> class_names(const data::ClueLabels& l) {
  std::vector<std::string> n;
  for (std::size_t c = 0; c < l.size(); ++c) n.push_back(l.descriptions[c].empty() ? l.names[c] : l.descriptions[c]);
  return n;
}

struct RunResult {
  std::size_t heads = 0, params = 0;
  double valid_acc = 0, valid_f1 = 0, dev_acc = -1, dev_f1 = -1, train_seconds = 0;
  BenchResult speed;
  std::vector<examples::EpochRecord> history;
  std::string valid_report, valid_confusion, dev_report, heatmaps;
  std::vector<float> confusion_rows;  // row-normalised validation confusion matrix, (C, C)
};

/// Trains the model with `heads` heads (1, 2, 4 or 8; else ArgumentError) on p under o, in
/// o.train.out/h<heads>, and evaluates its best epoch (on rank 0; other ranks return the history).
RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par);

}  // namespace clue
