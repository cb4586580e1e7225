// SPDX-License-Identifier: MIT
// The training loop of the example programs: AdamW with linear warm-up and cosine decay, shuffled
// length-bucketed batches, gradient-norm clipping, the non-finite guard, data-parallel sharding
// (examples::Parallel), early stopping on validation accuracy, and a run directory that survives
// an interruption:
//   model.safetensors      the best epoch's weights (by validation accuracy)
//   last.safetensors, optimizer.safetensors, state.json   the last epoch's weights, the optimizer
//                          and the loop's counters and history, for --resume
//   metrics.jsonl          one line per epoch
// A program supplies its batches, the loss of a batch and its validation figures:
//   examples::TrainOptions t;  examples::add_training_flags(app, t);  // in the program's options.cpp
//   auto log = examples::train(model, t, dir, Heads, par, lengths,
//       [&](const std::vector<std::size_t>& idx) { return the batch of training samples idx; },
//       [&](attn::Tape& tape, const Batch& b) { return the mean loss of b; },
//       [&] { return examples::Validation{loss, accuracy, macro_f1}; });
#pragma once
#include <attn/attn.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "json_files.hpp"
#include "options.hpp"
#include "parallel.hpp"
#include "progress.hpp"

namespace examples {

/// A validation pass: every process computes the same figures. macro_f1 NaN: not measured.
struct Validation {
  double loss = 0, accuracy = 0, macro_f1 = std::numeric_limits<double>::quiet_NaN();
};

struct EpochRecord {
  std::size_t epoch = 0;
  double train_loss = 0;  // NaN when every step of the epoch was skipped
  double valid_loss = 0, valid_acc = 0;
  double valid_f1 = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
};

struct TrainLog {
  std::vector<EpochRecord> history;  // all epochs, those of a resumed run's earlier sessions included
  double best_valid = 0;             // the best validation accuracy: the epoch in model.safetensors
  double train_seconds = 0;          // training passes only, over all sessions
};

namespace training_detail {
using nlohmann::json;
inline json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
inline double number_or_nan(const json& v) { return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN(); }
inline json to_json(const EpochRecord& e) {
  return {{"epoch", e.epoch}, {"train_loss", number_or_null(e.train_loss)}, {"valid_loss", e.valid_loss},
          {"valid_accuracy", e.valid_acc}, {"valid_macro_f1", number_or_null(e.valid_f1)}, {"seconds", e.seconds}};
}
inline EpochRecord record_from_json(const json& j) {
  return {j.at("epoch").get<std::size_t>(), number_or_nan(j.at("train_loss")), j.at("valid_loss").get<double>(),
          j.at("valid_accuracy").get<double>(), number_or_nan(j.at("valid_macro_f1")), j.at("seconds").get<double>()};
}
}  // namespace training_detail

/// Trains `model` for up to t.epochs (early stopping after t.patience epochs without a better
/// validation accuracy) and leaves the best epoch's weights in dir/model.safetensors (`heads` goes
/// into its metadata). lengths[i] is training sample i's length (batches group similar lengths);
/// make_batch(idx) assembles samples idx, this process's share of a batch, and loss(tape, batch) is
/// their mean loss (the batch lives until the backward pass is done); validate() runs on every
/// process. With t.resume and a dir/state.json, the run continues after its last epoch
/// with the same weights, optimizer state, step count and history.
template <class Model, class MakeBatch, class Loss, class Validate>
TrainLog train(Model& model, const TrainOptions& t, const std::filesystem::path& dir, std::size_t heads, Parallel& par,
               const std::vector<std::size_t>& lengths, MakeBatch&& make_batch, Loss&& loss, Validate&& validate) {
  namespace fs = std::filesystem;
  using training_detail::json;
  attn::optim::Adam<float> opt(model, {.lr = t.lr, .weight_decay = t.weight_decay, .decoupled = true});
  const std::size_t samples = lengths.size();
  const std::size_t global_batch = t.batch * std::size_t(par.world());  // --batch per process
  const std::size_t steps_per_epoch = (samples + global_batch - 1) / global_batch;
  const auto total_steps = static_cast<long long>(steps_per_epoch * t.epochs);
  attn::optim::WarmupSchedule sched{
      .base_lr = t.lr, .warmup = (long long)(t.warmup * double(total_steps)), .total = total_steps, .min_lr = t.lr * 0.02};

  TrainLog log;
  std::size_t start_epoch = 0, stale = 0, skipped_before = 0;
  long long step = 0;
  if (t.resume && fs::exists(dir / "state.json")) {
    with_json_file(dir / "state.json", [&](const json& st) {
      start_epoch = st.at("epochs_done").get<std::size_t>();
      step = st.at("step").get<long long>();
      stale = st.at("stale").get<std::size_t>();
      skipped_before = st.at("skipped_steps").get<std::size_t>();
      log.best_valid = st.at("best_valid").get<double>();
      for (auto& e : st.at("history")) log.history.push_back(training_detail::record_from_json(e));
    });
    attn::io::load(model, dir / "last.safetensors");
    attn::io::load_optimizer(opt, dir / "optimizer.safetensors");
    for (auto& e : log.history) log.train_seconds += e.seconds;
    fmt::print("resumed after epoch {} (best validation accuracy {:.2f}%)\n", start_epoch, 100 * log.best_valid);
  } else {
    std::error_code ec;
    fs::remove(dir / "metrics.jsonl", ec);
  }
  bool have_best = start_epoch > 0;  // dir/model.safetensors belongs to this run

  par.attach(model);  // data-parallel: rank 0's weights everywhere, averaged gradients
  attn::optim::NonFiniteGuard guard(attn::optim::parse_on_non_finite(t.on_non_finite));
  for (std::size_t epoch = start_epoch; epoch < t.epochs && stale < t.patience; ++epoch) {
    if (t.stop_after && epoch == start_epoch + t.stop_after) {
      fmt::print("stopping after {} epoch(s) as asked; continue with --resume\n", t.stop_after);
      break;
    }
    model.train();
    attn::Rng order_rng(t.seed * 1000003ULL + epoch);
    const auto batches = attn::data::bucketed_batches(lengths, {.batch_size = global_batch, .shuffle = true}, order_rng);
    Progress bar(fmt::format("epoch {}/{}", epoch + 1, t.epochs), samples);
    double loss_sum = 0;
    std::size_t seen = 0, counted = 0;
    for (auto& global : batches) {
      if (par.skip_batch(global.size())) continue;  // fewer samples than processes
      const auto idx = par.shard(global);
      const auto batch = make_batch(idx);
      // Dropout stream per (seed, step, process).
      attn::Tape tape(t.seed * 7919ULL + std::uint64_t(step) + std::uint64_t(par.rank()) * 0x9E3779B97F4A7C15ULL);
      auto l = loss(tape, batch);
      par.backward(tape, l);  // and, data-parallel, the mean gradient of all processes
      const double norm = attn::optim::clip_grad_norm(opt.params(), t.clip);
      const double lv = l.value()[0];
      if (guard.check(lv, norm, opt.named_params(), step)) {  // skips, or throws naming the parameter
        opt.set_lr(sched(step));
        opt.step();
        loss_sum += lv * double(idx.size());
        counted += idx.size();
      }
      par.zero_grad(opt);
      ++step;
      seen += global.size();
      bar.update(seen, counted ? loss_sum / double(counted) : 0.0);
    }
    const double train_loss = counted ? loss_sum / double(counted) : std::nan("");
    const double secs = bar.finish();
    model.eval();
    const Validation v = validate();
    log.train_seconds += secs;
    log.history.push_back({epoch + 1, train_loss, v.loss, v.accuracy, v.macro_f1, secs});
    fmt::print("epoch {}: train loss {:.4f}, validation loss {:.4f}, accuracy {:.2f}%{} ({:.0f}s, {:.0f} samples/s)\n", epoch + 1,
               train_loss, v.loss, 100 * v.accuracy, std::isnan(v.macro_f1) ? "" : fmt::format(", macro-F1 {:.2f}%", 100 * v.macro_f1),
               secs, double(seen) / secs);
    const std::size_t skipped = skipped_before + guard.skipped();
    if (guard.skipped()) fmt::print("non-finite steps skipped so far: {} (last: {})\n", skipped, guard.last());
    if (par.main()) {
      json line = training_detail::to_json(log.history.back());
      line["step"] = step;
      line["lr"] = sched(step - 1);
      line["skipped_steps"] = skipped;
      append_line(dir / "metrics.jsonl", line.dump());
    }
    // Every process evaluates the same validation set, so all take the same early-stopping path.
    if (v.accuracy > log.best_valid || !have_best) {
      log.best_valid = v.accuracy;
      stale = 0;
      have_best = true;
      if (par.main())
        attn::io::save(model, dir / "model.safetensors", {{"heads", std::to_string(heads)}, {"epoch", std::to_string(epoch + 1)}});
    } else {
      ++stale;
    }
    if (!par.main()) continue;
    // Resumable state: the last weights, the optimizer, and the loop counters.
    attn::io::save(model, dir / "last.safetensors");
    attn::io::save_optimizer(opt, dir / "optimizer.safetensors");
    json hist = json::array();
    for (auto& e : log.history) hist.push_back(training_detail::to_json(e));
    attn::data::write_file_atomic(dir / "state.json", json{{"epochs_done", epoch + 1}, {"step", step}, {"stale", stale},
                                                           {"skipped_steps", skipped}, {"best_valid", log.best_valid}, {"history", hist}}
                                                          .dump() + "\n");
  }
  if (stale >= t.patience) fmt::print("early stop: no validation improvement in {} epochs\n", t.patience);
  par.detach();
  return log;
}

}  // namespace examples
