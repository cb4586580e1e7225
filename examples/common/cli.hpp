// SPDX-License-Identifier: MIT
// Command-line parsing for the example programs' options.cpp files: the training loop's flags, and
// CLI11's parse wrapped so that main() gets an exit code instead of a return from within a macro.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>

#include "options.hpp"

namespace examples {

/// Registers --out, --epochs, --batch, --lr, --weight-decay, --warmup, --patience, --clip,
/// --on-nonfinite, --seed, --resume and --stop-after.
inline void add_training_flags(CLI::App& app, TrainOptions& t) {
  app.add_option("--out", t.out, "output directory (one sub-directory per head count)");
  app.add_option("--epochs", t.epochs, "maximum epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch", t.batch, "batch size (per process under mpirun)")->check(CLI::PositiveNumber);
  app.add_option("--lr", t.lr, "peak learning rate (AdamW)")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", t.warmup, "fraction of steps for linear warm-up (then cosine decay)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--patience", t.patience, "stop after this many epochs without validation improvement")->check(CLI::PositiveNumber);
  app.add_option("--clip", t.clip, "gradient-norm clipping threshold (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--on-nonfinite", t.on_non_finite, "on a NaN/infinite loss or gradient: stop (naming the parameter) or skip the step and count it")
      ->check(CLI::IsMember({"stop", "skip"}));
  app.add_option("--seed", t.seed, "seed of the split, the initialisation, the data order and dropout");
  app.add_flag("--resume", t.resume, "continue an interrupted run from its last completed epoch");
  app.add_option("--stop-after", t.stop_after, "end this run after N epochs, keeping the state for --resume (0: no limit)");
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

}  // namespace examples
