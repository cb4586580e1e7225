// SPDX-License-Identifier: MIT
// What the CLUE program's translation units share: the result of training one head count, and
// train_heads(), defined in train.cpp (training, evaluation, the heatmaps) so that main.cpp (the
// command, the sweep, the report, predict and --bench) compiles separately.
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/json_files.hpp"
#include "../common/parallel.hpp"
#include "../common/run_dir.hpp"
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
  double valid_acc_int8 = -1, valid_f1_int8 = -1;  // the best model under dynamic int8 quantization
  BenchResult speed;
  std::vector<examples::EpochRecord> history;
  std::string valid_report, valid_confusion, dev_report, heatmaps;
  std::vector<float> confusion_rows;  // row-normalised validation confusion matrix, (C, C)
};

/// A trained run directory: its config, vocabulary and label names.
struct Trained {
  json config;
  ModelConfig cfg;
  data::Vocab vocab;
  data::ClueLabels labels;
  std::size_t heads = 0;
  /// The data options of its training ("options"), for --bench --model's validation split; empty
  /// where a run recorded before them lacks one (the split seed is then "seed").
  std::optional<std::uint64_t> split_seed, limit;
  std::optional<bool> skip_bad_lines;
  std::optional<std::string> data_dir;  // its --data (absolute), where --bench reads without one
};

/// A run directory's config.json (already parsed), checked: every field in range, as many distinct
/// labels as the model has classes.
inline Trained trained_config(const fs::path& dir, json config) {
  Trained t;
  t.config = std::move(config);
  examples::with_json(dir / "config.json", t.config, [&](const json& j) {
    if (!j.contains("model")) throw examples::FieldError("model", "missing");
    t.cfg = ModelConfig::from_json(j.at("model"));
    t.heads = examples::json_count(j, "heads", 0, 8);
    if (!offered_heads(t.heads)) throw examples::FieldError("heads", fmt::format("{} is not one of {}", t.heads, offered_heads_list()));
    const auto ls = j.find("labels");
    if (ls == j.end() || !ls->is_array()) throw examples::FieldError("labels", "missing or not an array");
    for (std::size_t i = 0; i < ls->size(); ++i) {
      const std::string f = fmt::format("labels[{}].", i);
      const auto name = examples::json_string((*ls)[i], "label", f);
      if (!t.labels.add(name, examples::json_string((*ls)[i], "label_desc", f)))
        throw examples::FieldError(f + "label", "duplicate label '" + name + "'");
    }
    if (t.labels.size() != t.cfg.classes)
      throw examples::FieldError("labels", fmt::format("{} labels, but the model has {} classes", t.labels.size(), t.cfg.classes));
    // Read by --bench --model (the model's own preprocessing and split).
    if (j.contains("keywords")) (void)examples::json_bool(j, "keywords");
    if (j.contains("seed")) (void)examples::json_count(j, "seed", 0, std::numeric_limits<std::uint64_t>::max());
    if (j.contains("valid_fraction")) (void)examples::json_real(j, "valid_fraction", 0.01, 0.9);
    if (const auto op = j.find("options"); op != j.end() && op->is_object()) {
      constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
      if (op->contains("--split-seed")) t.split_seed = examples::json_count(*op, "--split-seed", 0, kMax, "options.");
      if (op->contains("--limit")) t.limit = examples::json_count(*op, "--limit", 0, kMax, "options.");
      if (op->contains("--skip-bad-lines")) t.skip_bad_lines = examples::json_bool(*op, "--skip-bad-lines", "options.");
      if (op->contains("--data")) t.data_dir = examples::json_string(*op, "--data", "options.");
    }
  });
  return t;
}

/// trained_config, then the vocabulary, which must have the configured size.
inline Trained trained_from(const fs::path& dir, json config, data::Vocab vocab) {
  Trained t = trained_config(dir, std::move(config));
  t.vocab = std::move(vocab);
  if (t.vocab.size() != t.cfg.vocab) throw attn::FormatError((dir / "vocab.txt").string(), 1, "vocabulary size differs from config.json");
  return t;
}

/// Reads a trained run directory (predict, --bench --model); the configuration is checked before
/// the vocabulary is read.
inline Trained load_trained(const fs::path& dir) {
  Trained t = trained_config(dir, examples::read_json(dir / "config.json", 1 << 20));
  return trained_from(dir, std::move(t.config), data::Vocab::load(dir / "vocab.txt"));
}

/// The run directory of a head count: <out>/h<heads>, or <out>/ablation for the model without attention.
inline fs::path run_dir(const Options& o, std::size_t heads) {
  return fs::path(o.train.out) / (heads ? fmt::format("h{}", heads) : std::string("ablation"));
}

/// "1 head", "8 heads", "no attention".
inline std::string heads_label(std::size_t heads) {
  return heads ? fmt::format("{} head{}", heads, heads > 1 ? "s" : "") : std::string("no attention");
}

/// The options a run directory is bound to (config.json "options"): everything that shapes the
/// model, its data or its training, by option name. --resume refuses a different value.
inline json run_options(const Options& o, std::size_t heads) {
  json options = {{"--data", examples::data_path_key(o.data.dir)},
          {"--limit", o.data.limit},
          {"--heads", heads},
          {"--dropout", o.dropout},
          {"--attn-dropout", o.attn_dropout},
          {"--label-smoothing", o.label_smoothing},
          {"--adversarial", o.adversarial},
          {"--class-weights", o.class_weights},
          {"--no-residual", !o.residual},
          {"--rnn", o.rnn},
          {"--max-len", o.data.max_len},
          {"--min-freq", o.data.min_freq},
          {"--max-vocab", o.data.max_vocab},
          {"--keywords", o.data.keywords},
          {"--skip-bad-lines", o.data.skip_bad_lines},
          {"--valid-fraction", o.data.valid_fraction}};
  options.update(examples::train_run_options(o.train));
  return options;
}

/// The checked configuration of a resumed run directory (plan.resume) of `heads` heads.
inline Trained resumed(const examples::RunPlan& plan, std::size_t heads) {
  auto t = trained_from(plan.dir, plan.config, *plan.vocab);
  if (t.heads != heads)
    throw attn::FormatError::in_field((plan.dir / "config.json").string(), "heads",
                                      fmt::format("{}, but the directory is that of {} heads", t.heads, heads));
  return t;
}

/// Trains the model with `heads` heads (1, 2, 4 or 8, or 0: no attention; else ArgumentError) on p under o, in
/// plan.dir (inspected and checked: see main), and evaluates its best epoch (on rank 0; other
/// ranks return the history).
RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan);

#if defined(ATTN_EXAMPLES_CUDA)
/// train_heads, predict and --bench with the model on attn::cuda (cuda.cu, compiled by nvcc).
RunResult train_heads_cuda(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan);
int predict_cuda(const fs::path& dir, const Trained& tr, const std::vector<std::string>& texts, const std::string& keywords, std::size_t top,
                 const std::string& dump);
void run_bench_cuda(std::size_t heads, const Options& o);
#endif

}  // namespace clue
