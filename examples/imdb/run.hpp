// SPDX-License-Identifier: MIT
// What the IMDb program's translation units share: the prepared data, the result of training one
// head count, and train_heads(), defined in train.cpp (training, evaluation, the heatmaps) so that
// main.cpp (data preparation, the sweep, the report and predict) compiles separately.
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/parallel.hpp"
#include "../common/training.hpp"
#include "model.hpp"
#include "options.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
namespace data = attn::data;

namespace imdb {

/// Reviews encoded once and shared by every head count of a sweep.
struct Prepared {
  data::Vocab vocab;
  std::vector<std::vector<std::int32_t>> train, valid, test;
  std::vector<int> train_y, valid_y, test_y;
  std::vector<std::size_t> valid_words, test_words;
  // NB-LR: the fit on the whole training portion, and the log-odds of every review (training
  // reviews: cross-fitted). Empty without NB-LR.
  NbLr nblr;
  PlattScale nblr_scale;  // calibration of the cross-fitted scores (the head's starting point)
  std::vector<float> train_nb, valid_nb, test_nb;
  double nblr_valid_acc = -1;  // NB-LR's own validation accuracy
};

/// Words of a review: tokens holding a letter or digit (punctuation is not a word).
inline std::size_t word_count(const std::vector<std::string>& toks) {
  std::size_t n = 0;
  for (auto& t : toks)
    for (unsigned char c : t)
      if (std::isalnum(c) || c >= 0x80) {
        ++n;
        break;
      }
  return n;
}

/// The whole review as ids (make_batch picks what the attention and the bag see).
inline std::vector<std::int32_t> encode(const data::Vocab& v, const std::vector<std::string>& toks) {
  auto ids = v.encode(toks);
  if (ids.empty()) ids.push_back(1);  // an empty review becomes one UNK
  return ids;
}

struct RunResult {
  std::size_t heads = 0, params = 0;
  double best_valid = 0, test_acc = -1, train_seconds = 0;
  std::vector<examples::EpochRecord> history;
  std::vector<double> bucket_acc;
  std::vector<std::string> bucket_labels;
  std::vector<std::size_t> bucket_counts;
  std::string html_heatmaps;
};

/// Trains the model with `heads` heads (1, 2, 4, 8 or 16; else ArgumentError) on p under o, in
/// o.train.out/h<heads>, and evaluates its best epoch (on rank 0; other ranks return the history).
RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par);

}  // namespace imdb
