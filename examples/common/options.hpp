// SPDX-License-Identifier: MIT
// The training loop's options (examples::TrainOptions), shared by the example programs. This header
// does not include CLI11: each program parses its command line in its own options.cpp (see
// common/cli.hpp), so that its main translation unit does not compile CLI11's parser as well.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace examples {

/// Limits of the training loop's count options (--epochs, --patience, --stop-after; --batch).
inline constexpr std::size_t kMaxTrainEpochs = 100000;
inline constexpr std::size_t kMaxBatch = 65536;

/// What the loop needs to know; each program sets its own defaults before registering the flags.
struct TrainOptions {
  std::string out;             // the run directories go below it
  std::uint64_t seed = 42;     // the data order and dropout (the programs also seed their initialisation with it)
  std::optional<std::uint64_t> split_seed{};  // the validation split's seed; none: `seed`
  std::size_t epochs = 5, batch = 64, patience = 3;
  double lr = 2e-3, weight_decay = 0.01, warmup = 0.05, clip = 1.0;
  double ema = 0;              // decay of the weights' moving average (0: none); see optim::Ema
  long long ema_every = 1;     // fold the weights into the average every N steps
  bool resume = false;
  bool overwrite = false;      // replace the run a directory already holds
  std::size_t stop_after = 0;  // end this run after N epochs (continue with --resume)
  std::string on_non_finite = "stop";
  std::string precision = "fp32";  // of the linear and LSTM products, training and evaluation: fp32 or bf16 (attn::PrecisionScope)
  std::size_t processes = 1;       // data-parallel processes (mpirun -n), set by the program: --batch is per process

  /// The seed the programs carve their validation split with: --split-seed, else --seed. Runs of
  /// several --seed values and one --split-seed differ only in their initialisation, data order and
  /// dropout, so that their spread is the training's noise alone, on the same validation reviews.
  std::uint64_t split() const noexcept { return split_seed.value_or(seed); }
};

}  // namespace examples
