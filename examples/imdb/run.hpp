// SPDX-License-Identifier: MIT
// What the IMDb program's translation units share: the prepared data, the runs of a session (the
// attention model per head count, the ablation, the ensemble), the result of one, and train_run(),
// defined in train.cpp (training, evaluation, attention entropy, the heatmaps) so that main.cpp
// (data preparation, the sweep, the report and predict) compiles separately.
#pragma once
#include <attn/attn.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
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
  std::size_t ngram_buckets = 0;  // --ngram-buckets, or its default for this training portion
  double nblr_valid_acc = -1, nblr_test_acc = -1;  // NB-LR alone, the baseline (-1: not measured)
  Pretrained pretrained;  // --pretrain-epochs: the initial word and n-gram tables of every new run
};

/// Words of a review: tokens that begin with a letter or a digit (punctuation, symbols and emoji
/// are not words), as the length buckets count them.
inline std::size_t word_count(const std::vector<std::string>& toks) {
  return static_cast<std::size_t>(std::count_if(toks.begin(), toks.end(), [](const std::string& t) { return data::is_word_token(t); }));
}

/// The whole review as ids (make_batch picks what the attention and the bag see).
inline std::vector<std::int32_t> encode(const data::Vocab& v, const std::vector<std::string>& toks) {
  auto ids = v.encode(toks);
  if (ids.empty()) ids.push_back(1);  // an empty review becomes one UNK
  return ids;
}

/// What a run trains: the attention model, the ablation (the same inputs mean+max pooled without
/// attention) or the explicit ensemble of the attention model and NB-LR.
enum class Variant { attention, ablation, ensemble };

struct RunSpec {
  Variant variant = Variant::attention;
  std::size_t heads = 8;  // 1 for the ablation (it has no attention)
  std::optional<std::uint64_t> seed{};  // --seeds: this run's training seed (none: --seed)

  /// The run's model without its seed: h8, ablation, h8+nblr.
  std::string model_name() const {
    return variant == Variant::ablation ? "ablation" : fmt::format("h{}{}", heads, variant == Variant::ensemble ? "+nblr" : "");
  }
  /// The run directory's name below --out: the model's name, and "-s<seed>" under --seeds.
  std::string name() const { return model_name() + (seed ? fmt::format("-s{}", *seed) : ""); }
  /// The row label of the tables, without the seed.
  std::string model_label() const {
    if (variant == Variant::ablation) return "no attention";
    return fmt::format("{} head{}{}", heads, heads > 1 ? "s" : "", variant == Variant::ensemble ? " + NB-LR" : "");
  }
  std::string label() const { return model_label() + (seed ? fmt::format(", seed {}", *seed) : ""); }
};

/// The options of run r: o with the run's own training seed (--seeds), the split's seed pinned.
inline Options run_options_of(const Options& o, const RunSpec& r) {
  Options os = o;
  if (r.seed) {
    os.train.split_seed = o.train.split();
    os.train.seed = *r.seed;
  }
  return os;
}

/// The model configuration of a new run. The ablation has no encoder, so none of the encoder's
/// settings (layers, pooling through a [CLS] token, norm placement, window, checkpointing) apply to it.
inline ModelConfig model_config(const Options& o, const RunSpec& r, const Prepared& p) {
  const bool attention = r.variant != Variant::ablation;
  return ModelConfig{.vocab = p.vocab.size(),
                     .max_len = o.max_len,
                     .truncate = parse_truncate(o.truncate),
                     .layers = attention ? o.layers : 0,
                     .pool = attention ? parse_pool(o.pool) : Pool::mean_max,
                     .norm_first = attention && o.norm_first,
                     .activation = nn::activation_from_name(o.activation),
                     .gated = attention && o.gated,
                     .norm = attention && o.norm == "rms" ? nn::NormKind::rms : nn::NormKind::layer,
                     .window = attention ? o.window : 0,
                     .ngram_buckets = p.ngram_buckets,
                     .ngram_order = o.ngram_order,
                     .nblr_buckets = r.variant == Variant::ensemble ? o.nblr_buckets : 0,
                     .nblr_order = o.nblr_order,
                     .dropout = o.dropout,
                     .attn_dropout = o.attn_dropout,
                     .ngram_dropout = o.ngram_dropout,
                     .checkpoint = attention && o.checkpoint};
}

/// Mean entropy of the attention rows on the validation reviews, per layer and head, as a fraction
/// of the entropy of the uniform distribution over the keys each row can see (1.0: a head that
/// attends to every visible token alike).
struct AttentionEntropy {
  std::vector<std::vector<double>> per_head;  // [layer][head]
  std::vector<double> cls;                    // the last layer's [CLS] row, per head (Pool::cls)
  std::size_t reviews = 0, skipped = 0;       // reviews measured; reviews too long to measure densely
};

struct RunResult {
  RunSpec spec;
  std::size_t heads = 0, params = 0;
  double best_valid = 0, test_acc = -1, train_seconds = 0;  // test_acc -1: no test split
  double valid_int8 = -1;  // validation accuracy of the best model under dynamic int8 quantization (-1: not measured)
  std::vector<examples::EpochRecord> history;
  std::vector<double> bucket_acc;
  std::vector<std::string> bucket_labels;
  std::vector<std::size_t> bucket_counts;
  std::vector<double> test_bucket_acc;  // the same buckets on the test split (aclImdb/test), when present
  std::vector<std::size_t> test_bucket_counts;
  std::string html_heatmaps;
  AttentionEntropy entropy;
};

/// The run directory of a run.
inline fs::path run_dir(const Options& o, const RunSpec& r) { return fs::path(o.train.out) / r.name(); }

/// The options a run directory is bound to (config.json "options"): everything that shapes the
/// model, its data or its training, by option name. --resume refuses a different value.
inline json run_options(const Options& o, const RunSpec& r) {
  json options = {{"--data", examples::data_path_key(o.data)},
          {"--limit", o.limit},
          {"run", r.name()},
          {"--dropout", o.dropout},
          {"--max-len", o.max_len},
          {"--truncate", o.truncate},
          {"--min-freq", o.min_freq},
          {"--max-vocab", o.max_vocab},
          {"--ngram-buckets", o.ngram_buckets ? json(*o.ngram_buckets) : json("auto")},
          {"--ngram-order", o.ngram_order},
          {"--ngram-dropout", o.ngram_dropout},
          {"--label-smoothing", o.label_smoothing},
          {"--adversarial", o.adversarial},
          {"--pretrain-epochs", o.pretrain.epochs},
          {"--valid-fraction", o.valid_fraction}};
  if (r.variant != Variant::ablation)  // the ablation has no attention
    options.update(json{{"--heads", r.heads}, {"--layers", o.layers}, {"--pool", o.pool}, {"--post-norm", !o.norm_first},
                        {"--activation", o.activation}, {"--gated", o.gated}, {"--norm", o.norm},
                        {"--window", o.window}, {"--checkpoint", o.checkpoint},
                        {"--attn-dropout", o.attn_dropout}, {"--attn-entropy", o.attn_entropy},
                        {"--attn-entropy-target", o.attn_entropy_target}});
  if (r.variant == Variant::ensemble)  // NB-LR shapes the ensemble only
    options.update(json{{"--nblr-buckets", o.nblr_buckets}, {"--nblr-order", o.nblr_order}, {"--nblr-c", o.nblr_c}, {"--nblr-folds", o.nblr_folds}});
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

/// Trains the run r (its head count 1, 2, 4, 8 or 16; else ArgumentError) on p under o, in
/// plan.dir (inspected and checked: see main), and evaluates its best epoch (on rank 0; other
/// ranks return the history).
RunResult train_run(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan);

#if defined(ATTN_EXAMPLES_CUDA)
/// train_run and predict with the model on attn::cuda (cuda.cu, compiled by nvcc).
RunResult train_run_cuda(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan);
int predict_cuda(std::size_t heads, const fs::path& dir, const std::vector<std::string>& texts, const std::string& dump);
#endif

}  // namespace imdb
