// SPDX-License-Identifier: MIT
// The CLUE program's options and its command line (parsed in options.cpp, the one translation
// unit of the program that compiles CLI11).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../common/options.hpp"
#include "attn/core/dispatch.hpp"

namespace clue {

/// The --heads default: nn::recommended_heads(kDim) (main.cpp checks that they agree).
inline constexpr std::size_t kDefaultHeads = 4;

/// The head counts the program offers: 1, 2, 4 or 8 attention heads, and 0, the ablation (the same
/// model without its attention). --sweep trains them all; every other list derives from this one.
inline constexpr std::array<std::size_t, 5> kOfferedHeads = {0, 1, 2, 4, 8};

constexpr bool offered_heads(std::size_t heads) noexcept { return std::ranges::find(kOfferedHeads, heads) != kOfferedHeads.end(); }

/// "0, 1, 2, 4, 8", for messages.
inline std::string offered_heads_list() {
  std::string s;
  for (auto h : kOfferedHeads) s += (s.empty() ? "" : ", ") + std::to_string(h);
  return s;
}

/// Calls f.template operator()<H>() for the offered head count H equal to `heads` and returns its
/// result; an ArgumentError naming `what` and the offered counts for any other value.
template <class F>
decltype(auto) dispatch_heads(std::size_t heads, const char* what, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    return attn::dispatch<kOfferedHeads[I]...>(heads, what, std::forward<F>(f));
  }(std::make_index_sequence<kOfferedHeads.size()>{});
}

/// The recurrent layers the program offers (--rnn): nn::BiLSTM and nn::BiGRU.
inline bool offered_rnn(const std::string& rnn) { return rnn == "lstm" || rnn == "gru"; }

/// Limits of the count options (also checked when config.json is read).
inline constexpr std::size_t kMaxLen = 8192;                          // --max-len
inline constexpr std::size_t kMaxVocab = (std::size_t(1) << 31) - 1;  // --max-vocab (ids are int32)
inline constexpr std::size_t kMaxCount = std::size_t(1) << 32;        // --min-freq

inline constexpr const char* kExampleTitle = "凌云研发的国产两轮电动车怎么样，有什么惊喜？";

struct DataOptions {
  std::string dir;
  bool keywords = false;
  bool skip_bad_lines = false;
  double valid_fraction = 0.1;
  std::uint64_t seed = 42;
  std::size_t min_freq = 2, max_vocab = 0, max_len = 128;
  std::size_t limit = 0;  // use only the first N training lines (quick runs)
};

struct Options {
  std::string device = "cpu";  // --device: cpu or cuda
  DataOptions data{.dir = "examples/clue/sample/tnews_public"};
  examples::TrainOptions train{.out = "runs/clue", .epochs = 5, .batch = 64, .patience = 3, .warmup = 0.05};
  std::size_t heads = kDefaultHeads;
  std::string rnn = "lstm";  // --rnn: lstm or gru
  bool sweep = false;
  bool ablation = true;  // --sweep: also the model without attention (--no-ablation: not)
  std::size_t threads = 0;
  double dropout = 0.2, attn_dropout = 0.1, label_smoothing = 0.1;
  double adversarial = 0;  // adversarial training: eps of the perturbation of each title's embeddings (0: none)
  std::string class_weights = "none";  // "balanced": the training loss weights each class by n / (C n_c); "sqrt": by its root
  bool residual = true;
  bool bench = false;
  double bench_seconds = 10;
  std::size_t bench_latency = 1000;
  std::string model_dir;  // --bench with a trained model
  bool data_given = false;  // --data was on the command line (else --bench --model reads the model's own)
  bool fold = true;       // --bench: nn::embedded_lstm / embedded_gru (--no-fold: the two layers in turn)
  std::vector<std::string> explain;
};

/// `clue predict`: titles to classify with a trained run directory.
struct PredictOptions {
  std::string device = "cpu";
  std::string model_dir, keywords;
  std::vector<std::string> texts;
  std::size_t top = 5;
  std::string dump;  // --dump: the batch of all titles and its logits, as safetensors
  std::string precision = "fp32";  // of the linear and LSTM products (attn::PrecisionScope)
};

/// What the command line asks for: training or --bench (options), or `predict` (prediction).
struct Command {
  Options options;
  bool predict = false;
  PredictOptions prediction;
};

/// Parses argv into cmd: nothing when the program should go on, else the code to exit with (0 after
/// --help; non-zero after a bad option, which has been printed).
std::optional<int> parse_command_line(int argc, char** argv, Command& cmd);

}  // namespace clue
