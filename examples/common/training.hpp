// SPDX-License-Identifier: MIT
// The training loop of the example programs: AdamW with linear warm-up and cosine decay, shuffled
// length-bucketed batches, gradient-norm clipping, the non-finite guard, data-parallel sharding
// (examples::Parallel), early stopping on validation accuracy, and a run directory (run_dir.hpp)
// that survives an interruption at any point:
//   model.safetensors      the best epoch's weights (by validation accuracy)
//   last.safetensors, optimizer.safetensors, state.json   the last epoch's weights, the optimizer
//                          and the loop's counters and history, for --resume
//   ema.safetensors        with --ema, the last epoch's moving average of the weights (optim::Ema);
//                          the average is what is validated and saved as model.safetensors
//   metrics.jsonl          one line per epoch
// An epoch ends with: its metrics.jsonl line appended; model.safetensors (when best),
// last.safetensors (a hard link to model's when that holds the same weights), optimizer.safetensors
// (and ema.safetensors) written as <name>.pending; state.json replaced (the commit point); the
// .pending files renamed. Killed anywhere in between, the directory holds the previous committed
// epoch (whose model.safetensors still loads) and --resume repeats the epoch exactly: it finishes
// or drops the .pending files and cuts metrics.jsonl back (begin_writing).
// A program supplies its batches, the loss of a batch and its validation figures:
//   examples::TrainOptions t;  examples::add_training_flags(app, t);  // in the program's options.cpp
//   auto plan = examples::inspect_run_dir(dir, t, options);  // before anything is written
//   ... examples::begin_writing(plan) ...
//   auto log = examples::train(model, t, plan, Heads, par, lengths,
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
#include <optional>
#include <string>
#include <vector>

#include "json_files.hpp"
#include "options.hpp"
#include "parallel.hpp"
#include "progress.hpp"
#include "run_dir.hpp"

namespace examples {

/// A validation pass: every process computes the same figures. macro_f1 NaN: not measured.
struct Validation {
  double loss = 0, accuracy = 0, macro_f1 = std::numeric_limits<double>::quiet_NaN();
};

struct TrainLog {
  std::vector<EpochRecord> history;  // all epochs, those of a resumed run's earlier sessions included
  double best_valid = 0;             // the best validation accuracy: the epoch in model.safetensors
  double train_seconds = 0;          // training passes only, over all sessions
};

namespace training_detail {
using nlohmann::json;
inline json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
inline json to_json(const EpochRecord& e) {
  return {{"epoch", e.epoch}, {"train_loss", number_or_null(e.train_loss)}, {"valid_loss", number_or_null(e.valid_loss)},
          {"valid_accuracy", e.valid_acc}, {"valid_macro_f1", number_or_null(e.valid_f1)}, {"seconds", e.seconds}};
}
inline std::size_t steps_per_epoch(const TrainOptions& t, std::size_t samples, int world) {
  const std::size_t global_batch = t.batch * std::size_t(world);  // --batch per process
  return (samples + global_batch - 1) / global_batch;
}
}  // namespace training_detail

/// The backend a model runs on: Model::backend, else attn::cpu.
template <class Model>
struct model_backend {
  using type = attn::cpu;
};
template <class Model>
  requires requires { typename Model::backend; }
struct model_backend<Model> {
  using type = typename Model::backend;
};
template <class Model>
using model_backend_t = typename model_backend<Model>::type;

/// Checks, before anything is written, that a resumed run's checkpoints fit `model` (a model of
/// the directory's config.json with `heads` heads; it is overwritten) and agree with state.json
/// and this data: the best epoch's weights and the last epoch's weights, optimizer and average.
template <class Model>
void check_resume(Model& model, std::size_t heads, const RunPlan& plan, const TrainOptions& t, std::size_t samples, int world) {
  using B = model_backend_t<Model>;
  if (!plan.resume) return;
  const std::size_t per_epoch = training_detail::steps_per_epoch(t, samples, world);
  if (std::uint64_t(plan.state.step) > std::uint64_t(plan.state.epochs_done) * per_epoch)
    throw attn::FormatError::in_field((plan.dir / "state.json").string(), "step",
                                      fmt::format("{} exceeds {} epochs of {} steps on this data", plan.state.step,
                                                  plan.state.epochs_done, per_epoch));
  check_checkpoint_heads(plan.state.model, heads);
  check_checkpoint_heads(plan.state.last, heads);
  std::error_code same_ec;  // last.safetensors is often a hard link to model.safetensors: read once
  if (!std::filesystem::equivalent(plan.state.model, plan.state.last, same_ec)) attn::io::load(model, plan.state.model);
  attn::io::load(model, plan.state.last);
  attn::optim::Adam<float, B> opt(model, {.lr = t.lr, .weight_decay = t.weight_decay, .decoupled = true});
  attn::io::load_optimizer(opt, plan.state.optimizer);
  // Every step either updates the weights or is skipped as non-finite (state.json counts both).
  const long long taken = plan.state.step - static_cast<long long>(plan.state.skipped_steps);
  if (opt.steps() != taken)
    throw attn::FormatError::at_offset(plan.state.optimizer.string(), 0,
                                       fmt::format("metadata 'step' {} differs from state.json's {} steps less {} skipped (not the "
                                                   "same run's or epoch's files)",
                                                   opt.steps(), plan.state.step, plan.state.skipped_steps));
  if (t.ema > 0) {
    attn::optim::Ema<float, B> ema(model, {.decay = t.ema, .every = t.ema_every});
    attn::io::load_ema(ema, plan.state.ema);
    check_ema_steps(ema.steps(), opt.steps(), plan.state.ema, plan.state.optimizer);
  }
}

/// Trains `model` for up to t.epochs (early stopping after t.patience epochs without a better
/// validation accuracy) and leaves the best epoch's weights in plan.dir/model.safetensors (`heads`
/// goes into its metadata). begin_writing(plan) must have run (on the main process). lengths[i] is training sample i's length (batches group similar lengths);
/// make_batch(idx) assembles samples idx, this process's share of a batch, and loss(tape, batch) is
/// their mean loss (the batch lives until the backward pass is done); validate() runs on every
/// process. With plan.resume, the run continues after its last committed epoch with the same
/// weights, optimizer state, step count and history.
template <class Model, class MakeBatch, class Loss, class Validate>
TrainLog train(Model& model, const TrainOptions& t, const RunPlan& plan, std::size_t heads, Parallel& par,
               const std::vector<std::size_t>& lengths, MakeBatch&& make_batch, Loss&& loss, Validate&& validate) {
  namespace fs = std::filesystem;
  using training_detail::json;
  using B = model_backend_t<Model>;
  const fs::path& dir = plan.dir;
  attn::optim::Adam<float, B> opt(model, {.lr = t.lr, .weight_decay = t.weight_decay, .decoupled = true});
  const std::size_t samples = lengths.size();
  const std::size_t global_batch = t.batch * std::size_t(par.world());  // --batch per process
  const std::size_t steps_per_epoch = training_detail::steps_per_epoch(t, samples, par.world());
  const auto total_steps = static_cast<long long>(steps_per_epoch * t.epochs);
  attn::optim::WarmupSchedule sched{
      .base_lr = t.lr, .warmup = (long long)(t.warmup * double(total_steps)), .total = total_steps, .min_lr = t.lr * 0.02};

  TrainLog log;
  std::size_t start_epoch = 0, stale = 0, skipped_before = 0;
  long long step = 0;
  if (plan.resume) {  // begin_writing() has renamed committed .pending checkpoints
    start_epoch = plan.state.epochs_done;
    step = plan.state.step;
    stale = plan.state.stale;
    skipped_before = plan.state.skipped_steps;
    log.best_valid = plan.state.best_valid;
    log.history = plan.state.history;
    attn::io::load(model, dir / "last.safetensors");
    attn::io::load_optimizer(opt, dir / "optimizer.safetensors");
    for (auto& e : log.history) log.train_seconds += e.seconds;
    fmt::print("resumed after epoch {} (best validation accuracy {:.2f}%)\n", start_epoch, 100 * log.best_valid);
    if (plan.state.planned_epochs && plan.state.planned_epochs != t.epochs)
      fmt::print("note: --epochs {} differs from the {} the run was started with: the learning-rate schedule runs over {} epochs from "
                 "here on, so the result matches an uninterrupted run of neither\n",
                 t.epochs, plan.state.planned_epochs, t.epochs);
  }
  bool have_best = start_epoch > 0;  // dir/model.safetensors belongs to this run

  par.attach(model);  // data-parallel: rank 0's weights everywhere, averaged gradients
  attn::optim::NonFiniteGuard guard(attn::optim::parse_on_non_finite(t.on_non_finite));
  // The moving average starts from the weights training starts (or resumes) from.
  std::optional<attn::optim::Ema<float, B>> ema;
  if (t.ema > 0) {
    ema.emplace(model, attn::optim::EmaOptions{.decay = t.ema, .every = t.ema_every});
    if (plan.resume) attn::io::load_ema(*ema, dir / "ema.safetensors");
  }
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
      // The global batch's loss, the same on every process (a wait for the device on a device backend).
      const double lv = par.global_loss(l.value().to_vector()[0], idx.size());
      if (guard.check(lv, norm, opt.named_params(), step)) {  // skips, or throws naming the parameter
        opt.set_lr(sched(step));
        opt.step();
        if (ema) ema->update();
        loss_sum += lv * double(global.size());
        counted += global.size();
      }
      par.zero_grad(opt);
      ++step;
      seen += global.size();
      bar.update(seen, counted ? loss_sum / double(counted) : 0.0);
    }
    const double train_loss = counted ? loss_sum / double(counted) : std::nan("");
    const double secs = bar.finish();
    model.eval();
    Validation v = validate();
    if (ema) {  // the live weights' figure for the log; the average's decides and is saved
      fmt::print("epoch {}: the live weights' validation accuracy {:.2f}% (loss {:.4f}); the moving average's follows\n", epoch + 1,
                 100 * v.accuracy, v.loss);
      ema->swap();
      v = validate();
    }
    log.train_seconds += secs;
    log.history.push_back({epoch + 1, train_loss, v.loss, v.accuracy, v.macro_f1, secs});
    fmt::print("epoch {}: train loss {:.4f}, validation loss {:.4f}, accuracy {:.2f}%{} ({:.0f}s, {:.0f} samples/s)\n", epoch + 1,
               train_loss, v.loss, 100 * v.accuracy, std::isnan(v.macro_f1) ? "" : fmt::format(", macro-F1 {:.2f}%", 100 * v.macro_f1),
               secs, double(seen) / secs);
    if (const auto exchange = par.take_exchange_summary(); !exchange.empty()) fmt::print("epoch {}: {}\n", epoch + 1, exchange);
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
    const std::string epoch_str = std::to_string(epoch + 1);
    const attn::io::MetadataMap weights_meta{{"heads", std::to_string(heads)}, {"epoch", epoch_str}};
    bool live_weights_saved = false;  // model.safetensors.pending holds this epoch's live weights
    if (v.accuracy > log.best_valid || !have_best) {
      log.best_valid = v.accuracy;
      stale = 0;
      have_best = true;
      if (par.main()) attn::io::save(model, pending_path(dir / "model.safetensors"), weights_meta);
      live_weights_saved = !ema;
    } else {
      ++stale;
    }
    if (ema) ema->swap();  // the live weights again
    if (!par.main()) continue;
    // Resumable state: the last weights, the optimizer, and the loop counters; state.json commits them.
    // When the best epoch is this one and the weights are the live ones, last.safetensors is the
    // same file as model.safetensors: a second name for it (a hard link) instead of a second copy.
    if (!(live_weights_saved && link_checkpoint(pending_path(dir / "model.safetensors"), pending_path(dir / "last.safetensors"))))
      attn::io::save(model, pending_path(dir / "last.safetensors"), weights_meta);
    attn::io::save_optimizer(opt, pending_path(dir / "optimizer.safetensors"), {{"epoch", epoch_str}});
    if (ema) attn::io::save_ema(*ema, pending_path(dir / "ema.safetensors"), {{"epoch", epoch_str}});
    json hist = json::array();
    for (auto& e : log.history) hist.push_back(training_detail::to_json(e));
    attn::data::write_file_atomic(dir / "state.json", json{{"epochs_done", epoch + 1}, {"epochs", t.epochs}, {"step", step}, {"stale", stale},
                                                           {"skipped_steps", skipped}, {"best_valid", log.best_valid}, {"history", hist}}
                                                          .dump() + "\n");
    commit_pending(dir);
  }
  if (stale >= t.patience) fmt::print("early stop: no validation improvement in {} epochs\n", t.patience);
  par.detach();
  return log;
}

}  // namespace examples
