// SPDX-License-Identifier: MIT
// Command-line parsing for the example programs' options.cpp files: the training loop's flags, and
// CLI11's parse wrapped so that main() gets an exit code instead of a return from within a macro.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "options.hpp"

namespace examples {

/// --device (device.hpp: require_device checks it can run here).
inline void add_device_option(CLI::App& app, std::string& device) {
  app.add_option("--device", device, "where the model runs: cpu, or cuda (a build with the CUDA backend, on a machine with a GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

namespace cli_detail {
inline std::string show(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}
}  // namespace cli_detail

/// A real-number option: finite (NaN and infinities are refused, unlike CLI::Range) and in
/// [lo, hi], or (lo, hi] when open_low.
inline CLI::Validator real(double lo, double hi, bool open_low = false) {
  const std::string range = (open_low ? "(" : "[") + cli_detail::show(lo) + ", " + cli_detail::show(hi) + "]";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const char* b = s.c_str();
        char* end = nullptr;
        const double v = std::strtod(b, &end);
        if (s.empty() || end == b || *end != '\0') return "'" + s + "' is not a number (allowed: " + range + ")";
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number (allowed: " + range + ")";
        if (v < lo || v > hi || (open_low && v == lo)) return "'" + s + "' is outside " + range;
        return {};
      },
      "REAL in " + range, "real");
}

/// A whole-number option in [lo, hi], written in decimal digits: a sign (so -1 never wraps to
/// 2^64-1), a fraction, a value above 2^64-1 or a leading zero (CLI11 would read "010" as octal 8)
/// is refused.
inline CLI::Validator count(std::uint64_t lo, std::uint64_t hi = std::numeric_limits<std::uint64_t>::max()) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ptr != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range) ||
            s.find_first_not_of("0123456789") != std::string::npos)
          return "'" + s + "' is not a whole number in " + range;
        if (s.size() > 1 && s[0] == '0') return "'" + s + "' has a leading zero (write the number without it)";
        if (ec == std::errc::result_out_of_range || v < lo || v > hi) return "'" + s + "' is outside " + range;
        return {};
      },
      "UINT in " + range, "count");
}

/// Refuses one value of a count option (e.g. --max-vocab 1: 0 means no limit, else >= 2).
inline CLI::Validator except(std::uint64_t bad, const std::string& why) {
  return CLI::Validator(
      [=](std::string& s) -> std::string { return s == std::to_string(bad) ? "'" + s + "': " + why : std::string(); }, "", "except");
}

/// --threads: 0 (ATTN_NUM_THREADS, OMP_NUM_THREADS or all cores) or 1..4096, like ATTN_NUM_THREADS.
inline constexpr std::uint64_t kMaxThreads = 4096;

/// Registers --out, --epochs, --batch, --lr, --weight-decay, --warmup, --ema, --ema-every, --patience,
/// --clip, --on-nonfinite, --precision, --seed, --resume, --overwrite and --stop-after, each with its range.
inline void add_training_flags(CLI::App& app, TrainOptions& t) {
  app.add_option("--out", t.out, "output directory (one sub-directory per head count)");
  app.add_option("--epochs", t.epochs, "maximum epochs")->check(count(1, kMaxTrainEpochs));
  app.add_option("--batch", t.batch, "batch size (per process under mpirun)")->check(count(1, kMaxBatch));
  app.add_option("--lr", t.lr, "peak learning rate (AdamW)")->check(real(0, 1e30, true));
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay")->check(real(0, 100));
  app.add_option("--warmup", t.warmup, "fraction of steps for linear warm-up (then cosine decay)")->check(real(0, 1));
  app.add_option("--ema", t.ema,
                 "keep a moving average of the weights with this decay per step (e.g. 0.999; 0: none): validation, the choice of the "
                 "best epoch and the saved model use the average")
      ->check(real(0, 0.9999999));
  app.add_option("--ema-every", t.ema_every, "fold the weights into the --ema average every N steps (decay^N), for large embedding tables")
      ->check(count(1, 1u << 20));
  app.add_option("--patience", t.patience, "stop after this many epochs without validation improvement")->check(count(1, kMaxTrainEpochs));
  app.add_option("--clip", t.clip, "gradient-norm clipping threshold (0: off)")->check(real(0, 1e30));
  app.add_option("--on-nonfinite", t.on_non_finite, "on a NaN/infinite loss or gradient: stop (naming the parameter) or skip the step and count it")
      ->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--precision", t.precision,
                 "bf16: the products of the linear layers, the LSTM and the attention take bfloat16 operands with float sums, in training and "
                 "evaluation (weights, gradients, optimizer, softmax and norms stay float); int8: dynamic quantization, "
                 "for inference only (predict, and clue's --bench)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
  app.add_option("--seed", t.seed, "seed of the initialisation, the data order, dropout and (without --split-seed) the validation split")
      ->check(count(0));
  app.add_option("--split-seed", t.split_seed,
                 "seed of the validation split alone (default: --seed): runs of several --seed values then share one validation split")
      ->check(count(0));
  auto* resume = app.add_flag("--resume", t.resume, "continue an interrupted run from its last completed epoch (same options)");
  app.add_flag("--overwrite", t.overwrite, "replace the run a run directory already holds")->excludes(resume);
  app.add_option("--stop-after", t.stop_after, "end this run after N epochs, keeping the state for --resume (0: no limit)")
      ->check(count(0, kMaxTrainEpochs));
}

/// Parses argv: nothing when the program should run, else the code to exit with (0 after --help,
/// non-zero after an error, which CLI11 has printed).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

/// With subcommand `sub` chosen, refuses every top-level option that was given and is not in
/// `shared` (those the subcommand reads too, as --threads): a value written before the word goes
/// to the top level's copy, which the subcommand never reads (`imdb --device cuda predict ...`
/// would run on the CPU), so it is an error naming the option.
inline std::optional<int> refuse_top_level_options(CLI::App& app, const CLI::App& sub, std::initializer_list<std::string_view> shared) {
  if (!sub) return std::nullopt;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0) continue;
    const std::string name = opt->get_name();
    if (std::find(shared.begin(), shared.end(), name) != shared.end()) continue;
    const std::string s = sub.get_name();
    return app.exit(CLI::ValidationError(name, "is an option of training, not read by '" + s + "'; give " + s + "'s own options after the word " + s +
                                                   " (see " + s + " --help)"));
  }
  return std::nullopt;
}

}  // namespace examples
