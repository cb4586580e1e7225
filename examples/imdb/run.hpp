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

#include <fmt/format.h>

#include "../common/parallel.hpp"
#include "../common/run_dir.hpp"
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

/// The run directory of a head count.
inline fs::path run_dir(const Options& o, std::size_t heads) { return fs::path(o.train.out) / fmt::format("h{}", heads); }

/// The options a run directory is bound to (config.json "options"): everything that shapes the
/// model, its data or its training, by option name. --resume refuses a different value.
inline json run_options(const Options& o, std::size_t heads) {
  json options = {{"--data", examples::data_path_key(o.data)},
          {"--limit", o.limit},
          {"--heads", heads},
          {"--dropout", o.dropout},
          {"--attn-dropout", o.attn_dropout},
          {"--max-len", o.max_len},
          {"--truncate", o.truncate},
          {"--bag-max-len", o.bag_max_len},
          {"--min-freq", o.min_freq},
          {"--max-vocab", o.max_vocab},
          {"--ngram-buckets", o.ngram_buckets},
          {"--nblr-buckets", o.nblr_buckets},
          {"--nblr-order", o.nblr_order},
          {"--nblr-c", o.nblr_c},
          {"--nblr-folds", o.nblr_folds},
          {"--no-ffn", !o.ffn},
          {"--valid-fraction", o.valid_fraction}};
  options.update(examples::train_run_options(o.train));
  return options;
}

/// The model configuration of a resumed run directory (plan.resume), checked: config.json's
/// fields in range, its head count `heads`, vocab.txt of its vocabulary size.
inline ModelConfig resumed_config(const examples::RunPlan& plan, std::size_t heads) {
  const auto cfg = examples::with_json(plan.dir / "config.json", plan.config, [&](const json& j) {
    const auto h = examples::json_count(j, "heads", 1, 16);
    if (h != heads) throw examples::FieldError("heads", fmt::format("{}, but the directory is that of {} heads", h, heads));
    if (!j.contains("model")) throw examples::FieldError("model", "missing");
    return ModelConfig::from_json(j.at("model"));
  });
  if (plan.vocab->size() != cfg.vocab)
    throw attn::FormatError((plan.dir / "vocab.txt").string(), 1, "vocabulary size differs from config.json");
  return cfg;
}

/// Trains the model with `heads` heads (1, 2, 4, 8 or 16; else ArgumentError) on p under o, in
/// plan.dir (inspected and checked: see main), and evaluates its best epoch (on rank 0; other
/// ranks return the history).
RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan);

}  // namespace imdb
