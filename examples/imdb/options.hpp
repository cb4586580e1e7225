// SPDX-License-Identifier: MIT
// The IMDb program's options and its command line (parsed in options.cpp, the one translation unit
// of the program that compiles CLI11).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../common/options.hpp"
#include "pretrain.hpp"

namespace imdb {

/// Limits of the count options (also checked when config.json is read).
inline constexpr std::size_t kMaxLen = 8192;                        // --max-len, --window
inline constexpr std::size_t kMaxBagLen = std::size_t(1) << 20;     // tokens of a review NB-LR reads
inline constexpr std::size_t kMaxLayers = 64;                       // --layers
inline constexpr std::size_t kMaxNgramOrder = 4;                    // --ngram-order
inline constexpr std::size_t kMaxVocab = (std::size_t(1) << 31) - 1;  // --max-vocab (ids are int32)
inline constexpr std::size_t kMaxCount = std::size_t(1) << 32;      // --min-freq
inline constexpr std::size_t kMaxNgramBuckets = std::size_t(1) << 24;
inline constexpr std::size_t kMaxNblrBuckets = (std::size_t(1) << 30) - 1;  // NB-LR's weights are indexed below 2^30

/// The default number of n-gram buckets: one per 4 tokens of the training portion, as a power of
/// two, at least 1,024 and at most 2^21 (a 1 GiB table at width 128, as fastText's 2 million).
inline std::size_t auto_ngram_buckets(std::size_t training_tokens) {
  std::size_t b = 1024;
  while (b < training_tokens / 4 && b < (std::size_t(1) << 21)) b *= 2;
  return b;
}

inline constexpr const char* kArticleSentence = "The movie was not good, but the acting was brilliant.";

struct Options {
  std::string device = "cpu";  // --device: cpu or cuda
  std::string data = "examples/imdb/sample/aclImdb";
  examples::TrainOptions train{.out = "runs/imdb", .epochs = 2, .batch = 32, .patience = 2, .warmup = 0.06};
  std::size_t heads = 8;
  bool sweep = false;
  // --seeds: train every run once per seed (its initialisation, data order and dropout), all on
  // the one validation split of --split-seed (default --seed); empty: once, with --seed.
  std::vector<std::uint64_t> seeds;
  bool ablation = true;         // also train the model without attention (mean+max of its inputs)
  std::string ensemble = "none";  // "nblr": also train the attention model + NB-LR ensemble
  std::size_t max_len = 4096, min_freq = 2, max_vocab = 30000, threads = 0;
  std::size_t layers = 1, window = 0;
  std::string pool = "cls";
  bool norm_first = true;
  std::string activation = "gelu";
  bool gated = false;          // --gated: a GLU feed-forward (SwiGLU with --activation silu)
  std::string norm = "layer";  // --norm: the encoder's norms, layer or rms
  bool checkpoint = false;
  // Hash buckets of the n-gram embeddings; empty: auto_ngram_buckets() of the training portion.
  std::optional<std::size_t> ngram_buckets;
  std::size_t ngram_order = 3;
  PretrainOptions pretrain;  // skip-gram pretraining of the input tables (epochs 0: none)
  // NB-LR: the baseline row (0 buckets: none) and the ensemble's score.
  std::size_t nblr_buckets = std::size_t(1) << 22, nblr_order = 3, nblr_folds = 5;
  double nblr_c = 1.0;
  double dropout = 0.3, attn_dropout = 0.1, ngram_dropout = 0.0;
  double label_smoothing = 0.2;  // of the training loss (validation and test losses are plain)
  // Training loss + attn_entropy x the [CLS] rows' mean attention entropy (a fraction of uniform),
  // counting only each row's part above attn_entropy_target (a hinge); both 0 without --pool cls.
  double attn_entropy = 0.03, attn_entropy_target = 0.5;
  double adversarial = 0.3;      // adversarial training: eps of the perturbation of each review's inputs (0: none)
  double valid_fraction = 0.1;
  std::string truncate = "head+tail";
  std::vector<std::string> explain;
  std::size_t limit = 0;  // use only the first N training reviews (smoke tests)
};

/// `imdb predict`: texts to classify with a trained run directory.
struct PredictOptions {
  std::string device = "cpu";
  std::string model_dir;
  std::vector<std::string> texts;
  std::string dump;  // --dump: the batch of all texts and its logits, as safetensors
  std::string precision = "fp32";  // of the linear products (attn::PrecisionScope)
};

/// What the command line asks for: training (options) or `predict` (prediction).
struct Command {
  Options options;
  bool predict = false;
  PredictOptions prediction;
};

/// Parses argv into cmd: nothing when the program should go on, else the code to exit with (0 after
/// --help; non-zero after a bad option, which has been printed).
std::optional<int> parse_command_line(int argc, char** argv, Command& cmd);

}  // namespace imdb
