// SPDX-License-Identifier: MIT
// The run directory of the example programs (<--out>/h<heads>) and the rules that keep it intact:
//   config.json            the model's configuration and the run's options ("options")
//   vocab.txt              the vocabulary
//   state.json             the commit point: epochs done, step, history (see training.hpp)
//   model.safetensors      the best epoch's weights
//   last.safetensors, optimizer.safetensors   the last committed epoch's weights and optimizer
//                          (last.safetensors is a hard link to model.safetensors when the last
//                          epoch is the best and there is no --ema: one copy on disk)
//   ema.safetensors        with --ema: the last committed epoch's moving average of the weights
//   metrics.jsonl          one line per committed epoch
//   eval.json, tnews_predict.json   (CLUE) the best model's evaluation and test predictions
//                                   (iflytek_predict.json for IFLYTEK)
//   <file>.pending         an epoch's checkpoint written but not yet committed (see commit_epoch)
// A run first inspects every directory it will use (inspect_run_dir: options against config.json,
// state.json, vocab.txt; nothing is written), then the program reads its data and checks the
// checkpoints it will resume from; only then does begin_writing() touch the directory.
#pragma once
#include <attn/attn.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

#include "json_files.hpp"
#include "options.hpp"

namespace examples {

namespace run_detail {
namespace fs = std::filesystem;
using nlohmann::json;

/// The files that make a directory hold a run.
inline constexpr const char* kRunFiles[] = {"config.json",      "vocab.txt",             "state.json",      "model.safetensors",
                                            "last.safetensors", "optimizer.safetensors", "ema.safetensors", "metrics.jsonl",
                                            "eval.json",        "tnews_predict.json",    "iflytek_predict.json"};
/// The checkpoints written at the end of an epoch, committed by state.json (ema.safetensors only
/// with --ema).
inline constexpr const char* kCheckpoints[] = {"model.safetensors", "last.safetensors", "optimizer.safetensors", "ema.safetensors"};

inline bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}
}  // namespace run_detail

/// An epoch's checkpoint before state.json commits it.
inline std::filesystem::path pending_path(const std::filesystem::path& p) { return p.string() + ".pending"; }

/// One epoch as metrics.jsonl and state.json record it.
struct EpochRecord {
  std::size_t epoch = 0;
  double train_loss = 0;  // NaN when every step of the epoch was skipped
  double valid_loss = 0, valid_acc = 0;
  double valid_f1 = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
};

/// state.json, checked: where a resumed run continues.
struct ResumeState {
  std::size_t epochs_done = 0, stale = 0, skipped_steps = 0;
  std::size_t planned_epochs = 0;  // the --epochs the state was written under (0: not recorded)
  long long step = 0;
  double best_valid = 0;
  std::vector<EpochRecord> history;
  std::filesystem::path last, optimizer;  // the committed checkpoints (a .pending file when not yet renamed)
  std::filesystem::path model;            // the committed best epoch's weights (model.safetensors or its .pending file)
  std::filesystem::path ema;              // with --ema, the committed average; empty without
};

/// The largest step count a run may have (state.json).
inline constexpr std::uint64_t kMaxSteps = std::uint64_t(1) << 53;

/// Reads and range-checks state.json; FormatError "state.json: field NAME: ..." otherwise.
inline ResumeState read_state(const std::filesystem::path& path) {
  return with_json_file(path, [&](const nlohmann::json& st) {
    ResumeState s;
    s.epochs_done = std::size_t(json_count(st, "epochs_done", 1, kMaxTrainEpochs));
    if (st.contains("epochs")) s.planned_epochs = std::size_t(json_count(st, "epochs", 1, kMaxTrainEpochs));
    s.step = static_cast<long long>(json_count(st, "step", 0, kMaxSteps));
    s.stale = std::size_t(json_count(st, "stale", 0, s.epochs_done));
    s.skipped_steps = std::size_t(json_count(st, "skipped_steps", 0, std::uint64_t(s.step)));
    s.best_valid = json_real(st, "best_valid", 0.0, 1.0);
    const auto h = st.find("history");
    if (h == st.end() || !h->is_array()) throw FieldError("history", "missing or not an array");
    if (h->size() != s.epochs_done)
      throw FieldError("history", fmt::format("{} records for {} epochs done", h->size(), s.epochs_done));
    for (std::size_t i = 0; i < h->size(); ++i) {
      const auto& e = (*h)[i];
      const std::string f = fmt::format("history[{}].", i);
      EpochRecord r;
      r.epoch = std::size_t(json_count(e, "epoch", i + 1, i + 1, f));
      constexpr double big = std::numeric_limits<double>::max();
      r.train_loss = json_real_or_nan(e, "train_loss", 0.0, big, f);
      r.valid_loss = json_real_or_nan(e, "valid_loss", 0.0, big, f);
      r.valid_acc = json_real(e, "valid_accuracy", 0.0, 1.0, f);
      r.valid_f1 = json_real_or_nan(e, "valid_macro_f1", 0.0, 1.0, f);
      r.seconds = json_real(e, "seconds", 0.0, 1e12, f);
      s.history.push_back(r);
    }
    return s;
  });
}

/// The epoch a checkpoint's metadata names (nullopt: none recorded).
inline std::optional<std::size_t> checkpoint_epoch(const std::filesystem::path& p) {
  const attn::io::SafetensorsReader reader(p);  // the header only, not the tensors
  const auto& meta = reader.metadata();
  const auto it = meta.find("epoch");
  if (it == meta.end()) return std::nullopt;
  std::size_t e = 0;
  auto [ptr, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), e);
  if (ec != std::errc() || ptr != it->second.data() + it->second.size()) return std::nullopt;
  return e;
}

/// The epoch whose weights model.safetensors holds: the first of the best validation accuracy
/// (training replaces the best model only on a strictly better epoch).
inline std::size_t best_epoch(const ResumeState& s) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < s.history.size(); ++i)
    if (s.history[i].valid_acc > s.history[best].valid_acc) best = i;
  return best + 1;
}

/// Checks that a weights checkpoint was written for `heads` heads (its metadata's "heads", where
/// recorded): the attention's weights have the same shapes for every head count, so a file of
/// another head count would load without complaint. Reads the header only.
inline void check_checkpoint_heads(const std::filesystem::path& p, std::size_t heads) {
  const attn::io::SafetensorsReader reader(p);
  const auto& meta = reader.metadata();
  const auto it = meta.find("heads");
  if (it != meta.end() && it->second != std::to_string(heads))
    throw attn::FormatError::at_offset(p.string(), 0,
                                       fmt::format("metadata 'heads' is {}, but the run directory is that of {} heads (the weights of "
                                                   "another run)",
                                                   it->second, heads));
}

/// The best model of a run directory as committed by state.json: model.safetensors, or its
/// .pending file when a run ended between committing an epoch and renaming the file. Reads only.
inline std::filesystem::path committed_model(const std::filesystem::path& dir) {
  const auto final_path = dir / "model.safetensors", pending = pending_path(final_path);
  if (!run_detail::present(pending) || !run_detail::present(dir / "state.json")) return final_path;
  try {
    if (checkpoint_epoch(pending) == read_state(dir / "state.json").epochs_done) return pending;
  } catch (const std::exception&) {
    // not committed: the previous model.safetensors is the run's
  }
  return final_path;
}

/// Loads the committed best model of run directory `dir` (committed_model) into `model`, a model
/// of `heads` heads, after checking that the file is one of that head count.
template <class Model>
void load_committed_model(Model& model, const std::filesystem::path& dir, std::size_t heads) {
  const auto p = committed_model(dir);
  check_checkpoint_heads(p, heads);
  attn::io::load(model, p);
}

/// An exclusive advisory lock (flock) on a run directory, held by the process that writes it until
/// that process ends: a second program given the same directory stops, before it writes anything,
/// instead of mixing its files with the first one's. On a file system without flock the directory
/// stays unlocked.
class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  /// Locks the existing directory `dir` (once; later calls do nothing). ArgumentError when another
  /// process holds it.
  void acquire(const std::filesystem::path& dir) {
    if (fd_ >= 0) return;
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw attn::IoError(dir.string(), fmt::format("cannot open the directory: {}", std::strerror(errno)));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK)
        throw attn::ArgumentError(fmt::format("{}: another process is using this run directory (it holds the directory's lock); "
                                              "wait until it ends, or give another --out",
                                              dir.string()));
      return;  // no locks on this file system
    }
    fd_ = fd;
  }
  bool held() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

namespace run_detail {
/// The run files (and committed-but-unrenamed checkpoints) `dir` holds.
inline std::vector<std::string> run_files_in(const std::filesystem::path& dir) {
  std::vector<std::string> held;
  for (auto* f : kRunFiles)
    if (present(dir / f)) held.push_back(f);
  for (auto* f : kCheckpoints)
    if (present(pending_path(dir / f))) held.push_back(pending_path(f).string());
  return held;
}
}  // namespace run_detail

/// What a run will do with its directory, decided before anything is written.
struct RunPlan {
  std::filesystem::path dir;
  bool resume = false;  // continue after state.epochs_done
  bool replace = false;  // the directory holds run files that begin_writing() removes first
  nlohmann::json config;  // resume: the directory's config.json
  ResumeState state;      // resume: its state.json
  std::optional<attn::data::Vocab> vocab;  // resume: its vocab.txt
  std::shared_ptr<RunDirLock> lock = std::make_shared<RunDirLock>();  // the writer's, from inspection (or the directory's creation) on
};

/// Checks that this process can create or write the run directory `dir`: IoError naming the
/// directory (or the ancestor it would be created in) otherwise.
inline void check_writable_dir(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(dir).lexically_normal();
  while (true) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) throw attn::IoError(p.string(), "exists and is not a directory");
      if (::access(p.c_str(), W_OK | X_OK) != 0)
        throw attn::IoError(p.string(), fmt::format("cannot write the run directory{}: {}", p == fs::absolute(dir).lexically_normal() ? "" : " into it",
                                                    std::strerror(errno)));
      return;
    }
    if (!p.has_relative_path()) return;  // the root
    p = p.parent_path();
  }
}

/// A resumed run's moving average (ema.safetensors, `ema_steps` updates) must have been taken
/// along the optimizer's steps (optimizer.safetensors, `optimizer_steps`): the average folds once
/// per step taken, so the two counts of one epoch's files are equal. FormatError otherwise.
inline void check_ema_steps(long long ema_steps, long long optimizer_steps, const std::filesystem::path& ema,
                            const std::filesystem::path& optimizer) {
  if (ema_steps != optimizer_steps)
    throw attn::FormatError::at_offset(ema.string(), 0,
                                       fmt::format("metadata 'ema_steps' {} differs from the optimizer's step {} in {} (not the "
                                                   "same run's or epoch's files)",
                                                   ema_steps, optimizer_steps, optimizer.string()));
}

/// Checks that `options` (option name -> value, as config.json records them under "options")
/// equal the recorded ones; ArgumentError naming the first option that differs. An option that
/// runs did not record before it existed is compared with the one whose value it took then:
/// "--split-seed" with "--seed"; one that did not exist then matches its default, which is how
/// those runs trained ("--adversarial" 0, "--class-weights" "none", "--activation" "gelu").
inline void check_same_options(const nlohmann::json& config, const nlohmann::json& options, const std::filesystem::path& path) {
  const auto rec = config.find("options");
  if (rec == config.end() || !rec->is_object())
    throw attn::FormatError::in_field(path.string(), "options",
                                      "missing: the run's options are not recorded, so --resume cannot check them");
  static constexpr std::pair<const char*, const char*> kLaterOptions[] = {{"--split-seed", "--seed"}};
  // Options added later, with the default that every run recorded before them trained with.
  static const std::pair<const char*, nlohmann::json> kLaterDefaults[] = {
      {"--adversarial", 0.0}, {"--attn-entropy-target", 0.0}, {"--class-weights", "none"}, {"--activation", "gelu"}, {"--rnn", "lstm"},
      {"--gated", false}, {"--norm", "layer"}};
  for (auto& [name, value] : options.items()) {
    auto it = rec->find(name);
    if (name == "processes") {  // recorded later, with no value known for the runs before: unchecked for those
      if (it != rec->end() && *it != value)
        throw attn::ArgumentError(fmt::format("the run ({}) was trained by {} data-parallel processes, this is {}: --batch is per process, "
                                              "so the steps and the learning-rate schedule would change; resume it with mpirun -n {}",
                                              path.string(), it->dump(), value.dump(), it->dump()));
      continue;
    }
    for (auto [later, earlier] : kLaterOptions)
      if (it == rec->end() && name == later) it = rec->find(earlier);
    const nlohmann::json* recorded = it == rec->end() ? nullptr : &*it;
    for (const auto& [later, def] : kLaterDefaults)
      if (!recorded && name == later) recorded = &def;
    if (!recorded) throw attn::FormatError::in_field(path.string(), "options." + name, "missing");
    if (*recorded != value)
      throw attn::ArgumentError(fmt::format(
          "{}: {} differs from the run's {} ({}); --resume continues a run with its own options (only --epochs, --stop-after, "
          "--threads, --patience and --on-nonfinite may change): give the same value, or a new --out",
          name, value.dump(), recorded->dump(), path.string()));
  }
}

/// Inspects `dir` for a run with training options t and run options `options` (see
/// check_same_options). Reads only. The `writer`, the process that will write the directory,
/// also checks that it can and takes the directory's lock (RunDirLock) when it exists. Throws,
/// naming the file or option, when:
///  - the writer cannot write the directory, or another process holds its lock;
///  - without --resume, the directory already holds a run and --overwrite is not given;
///  - with --resume, config.json, state.json or vocab.txt is missing, malformed or out of range,
///    or an option differs from config.json's; last.safetensors or optimizer.safetensors (and with
///    --ema, ema.safetensors) is missing or belongs to another epoch than the last committed one,
///    or model.safetensors to another than the best one.
/// With --resume and no state.json (a run interrupted before its first epoch ended) the run starts
/// afresh, unless checkpoints are there.
inline RunPlan inspect_run_dir(const std::filesystem::path& dir, const TrainOptions& t, const nlohmann::json& options,
                               bool writer = false) {
  namespace fs = std::filesystem;
  using run_detail::present;
  RunPlan plan;
  plan.dir = dir;
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) throw attn::IoError(dir.string(), "exists and is not a directory");
  if (writer) {
    check_writable_dir(dir);
    if (fs::exists(st)) plan.lock->acquire(dir);  // before reading: no other writer changes it from here on
  }
  const std::vector<std::string> held = run_detail::run_files_in(dir);
  plan.replace = !held.empty();
  if (!t.resume) {
    if (!held.empty() && !t.overwrite)
      throw attn::ArgumentError(fmt::format("{}: already holds a run ({}); continue it with --resume, or replace it with --overwrite",
                                            dir.string(), fmt::join(held, ", ")));
    return plan;
  }
  if (!present(dir / "state.json")) {
    for (auto* f : run_detail::kCheckpoints)
      if (present(dir / f))
        throw attn::ArgumentError(fmt::format("{}: holds {} but no state.json, so there is no epoch to resume from; "
                                              "replace the run with --overwrite (without --resume)",
                                              dir.string(), f));
    return plan;  // interrupted before its first epoch was committed: start afresh
  }
  plan.resume = true;
  plan.config = read_json(dir / "config.json");
  check_same_options(plan.config, options, dir / "config.json");
  plan.state = read_state(dir / "state.json");
  // The committed checkpoints: a .pending one of the committed epoch has not been renamed yet.
  // Each names its epoch: the last committed one, and for model.safetensors the best one.
  const std::size_t done = plan.state.epochs_done, best = best_epoch(plan.state);
  struct Wanted {
    const char* name;
    fs::path* out;
    std::size_t epoch;
  };
  std::vector<Wanted> wanted{{"last.safetensors", &plan.state.last, done},
                             {"optimizer.safetensors", &plan.state.optimizer, done},
                             {"model.safetensors", &plan.state.model, best}};
  if (t.ema > 0) wanted.push_back({"ema.safetensors", &plan.state.ema, done});
  for (const auto& w : wanted) {
    const fs::path final_path = dir / w.name, pending = pending_path(final_path);
    fs::path path = final_path;
    if (present(pending) && checkpoint_epoch(pending) == done) {
      path = pending;
    } else if (!present(final_path)) {
      throw attn::IoError(final_path.string(), "missing: state.json records an epoch to resume from");
    }
    const auto e = checkpoint_epoch(path);
    if (!e) throw attn::FormatError::at_offset(path.string(), 0, "its metadata records no epoch: not a checkpoint of a run");
    if (*e != w.epoch)
      throw attn::FormatError::at_offset(
          path.string(), 0,
          w.out != &plan.state.model ? fmt::format("holds epoch {}, state.json says {} epochs are done", *e, done)
                          : fmt::format("holds epoch {}, but state.json's history has the best validation accuracy at epoch {}", *e, w.epoch));
    *w.out = path;
  }
  plan.vocab = attn::data::Vocab::load(dir / "vocab.txt");
  return plan;
}

/// Removes this directory's temporaries (".<file>.tmp-PID-N") left by a process that no longer runs.
inline void remove_stale_temporaries(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  static const std::regex temp_name(R"(^\..+\.tmp-([0-9]+)-[0-9]+$)");
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, temp_name)) continue;
    const long long pid = std::stoll(m[1].str().substr(0, 18));
    if (pid == ::getpid()) continue;
    if (pid > 0 && pid < (1LL << 31) && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)) continue;  // its writer may still run
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

/// Keeps the first `epochs` complete lines of metrics.jsonl (epochs 1, 2, ...): lines an
/// interrupted run appended after its last commit go.
inline void truncate_metrics(const std::filesystem::path& path, std::size_t epochs) {
  if (!run_detail::present(path)) return;
  const std::string text = attn::data::read_file(path, std::uintmax_t(1) << 30);
  std::string kept;
  std::size_t n = 0, pos = 0;
  while (n < epochs && pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // a line cut short
    const std::string line = text.substr(pos, nl - pos);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("epoch") || j["epoch"] != n + 1) break;
    kept += line + "\n";
    ++n;
    pos = nl + 1;
  }
  if (kept != text) attn::data::write_file_atomic(path, kept);
}

/// Renames the epoch's .pending checkpoints onto their names (after state.json committed them).
inline void commit_pending(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  for (auto* f : run_detail::kCheckpoints) {
    const fs::path p = pending_path(dir / f);
    if (!run_detail::present(p)) continue;
    fs::rename(p, dir / f);
    attn::fault_point();
  }
}

/// Makes `to` a second name (a hard link) of the checkpoint `from`, replacing a leftover `to`.
/// False where the file system cannot link (the caller then writes a copy). Safe because a
/// checkpoint is never modified in place: every write replaces its name with a new file.
inline bool link_checkpoint(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::remove(to, ec);
  if (ec) return false;
  std::filesystem::create_hard_link(from, to, ec);
  if (ec) return false;
  attn::fault_point();
  return true;
}

/// The first write to a run directory, after every check has passed: creates it, removes stale
/// temporaries; resumed: finishes the last commit (renames the committed .pending checkpoints,
/// drops others) and cuts metrics.jsonl back to state.json's epochs; otherwise removes the files
/// of the run it replaces (--overwrite, or a run interrupted before its first epoch).
inline void begin_writing(const RunPlan& plan) {
  namespace fs = std::filesystem;
  fs::create_directories(plan.dir);
  plan.lock->acquire(plan.dir);  // a directory created now: locked before the first file
  if (!plan.resume && !plan.replace) {
    // Empty or absent when inspected, so not locked then: another program may have written a run
    // into it since (and ended, releasing the lock). That run is not this one's to replace.
    if (const auto held = run_detail::run_files_in(plan.dir); !held.empty())
      throw attn::ArgumentError(fmt::format("{}: another program wrote a run into this directory ({}) after this one checked it; "
                                            "nothing of it was changed: give another --out, or replace it with --overwrite",
                                            plan.dir.string(), fmt::join(held, ", ")));
  }
  remove_stale_temporaries(plan.dir);
  if (plan.resume) {
    for (auto* f : run_detail::kCheckpoints) {
      const fs::path p = pending_path(plan.dir / f);
      if (!run_detail::present(p)) continue;
      if (checkpoint_epoch(p) == plan.state.epochs_done) {
        fs::rename(p, plan.dir / f);
      } else {
        fs::remove(p);
      }
      attn::fault_point();
    }
    truncate_metrics(plan.dir / "metrics.jsonl", plan.state.epochs_done);
    return;
  }
  if (!plan.replace) return;
  for (auto* f : run_detail::kCheckpoints) fs::remove(pending_path(plan.dir / f));
  // state.json first: from then on the directory holds no run that could be resumed.
  fs::remove(plan.dir / "state.json");
  for (auto* f : run_detail::kRunFiles) fs::remove(plan.dir / f);
  attn::fault_point();
}

/// begin_writing(), then, for a run that starts afresh, its vocabulary and config.json: everything a
/// program writes before its first epoch.
inline void write_run_start(const RunPlan& plan, const attn::data::Vocab& vocab, const nlohmann::json& config) {
  begin_writing(plan);
  if (plan.resume) return;
  vocab.save(plan.dir / "vocab.txt");
  attn::data::write_file_atomic(plan.dir / "config.json", config.dump(2) + "\n");
}

/// The training loop's options that bind a run directory (config.json "options", beside each
/// program's own): --resume refuses a different value.
inline nlohmann::json train_run_options(const TrainOptions& t) {
  return {{"--seed", t.seed},       {"--split-seed", t.split()}, {"--batch", t.batch}, {"--lr", t.lr},  {"--weight-decay", t.weight_decay},
          {"--warmup", t.warmup}, {"--clip", t.clip},   {"--ema", t.ema}, {"--ema-every", t.ema_every},
          {"--precision", t.precision}, {"processes", t.processes}};
}

/// Checks that every resumed directory of a sweep has the same vocabulary and returns it (nullptr:
/// no directory is resumed).
inline const attn::data::Vocab* resumed_vocab(const std::vector<RunPlan>& plans) {
  const RunPlan* first = nullptr;  // the first resumed directory
  for (auto& p : plans) {
    if (!p.resume) continue;
    if (first && !(*first->vocab == *p.vocab))
      throw attn::ArgumentError(fmt::format("{}: its vocabulary differs from that of {}; resume these head counts one at a time (--heads)",
                                            (p.dir / "vocab.txt").string(), (first->dir / "vocab.txt").string()));
    if (!first) first = &p;
  }
  return first ? &*first->vocab : nullptr;
}

/// A split's class counts: a warning naming the class when there is only one.
inline void warn_one_class(const std::vector<int>& labels, const std::vector<std::string>& names, const std::string& split) {
  if (labels.empty()) return;
  for (int y : labels)
    if (y != labels.front()) return;
  const auto c = std::size_t(labels.front());
  fmt::print(stderr, "warning: the {} split holds only class '{}' ({} example{}): accuracy on it says nothing about telling classes apart\n",
             split, c < names.size() ? names[c] : std::to_string(c), labels.size(), labels.size() > 1 ? "s" : "");
}

/// The data directory a run reads (--data), as config.json records it: absolute, normalised.
inline std::string data_path_key(const std::string& data) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(data, ec);
  if (ec) p = std::filesystem::absolute(data, ec).lexically_normal();
  return p.string();
}

/// A data root that must be a directory: IoError saying what it is instead.
inline void require_directory(const std::filesystem::path& p, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (fs::is_directory(st)) return;
  if (!fs::exists(st)) throw attn::IoError(p.string(), what + " not found");
  const char* kind = fs::is_fifo(st)        ? "a pipe (FIFO)"
                     : fs::is_character_file(st) ? "a character device"
                     : fs::is_block_file(st)     ? "a block device"
                     : fs::is_socket(st)         ? "a socket"
                     : fs::is_regular_file(st)   ? "a file"
                                                 : "not a directory";
  throw attn::IoError(p.string(), fmt::format("is {}, expected the {}", kind, what));
}

}  // namespace examples
