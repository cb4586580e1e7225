// SPDX-License-Identifier: MIT
// The example programs' run directory (examples/common/run_dir.hpp, json_files.hpp): range-checked
// JSON fields, state.json, the checks of inspect_run_dir, metrics.jsonl cut back to the committed
// epochs, stale temporaries, the committed model.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "../../examples/common/dump.hpp"
#include "../../examples/common/run_dir.hpp"
#include "../temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using Catch::Contains;

namespace {
void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
std::string read(const fs::path& p) { return attn::data::read_file(p, 1 << 20); }
json good_state() {
  return json::parse(R"({"epochs_done": 2, "step": 10, "stale": 1, "skipped_steps": 0, "best_valid": 0.75,
    "history": [{"epoch": 1, "train_loss": 0.7, "valid_loss": 0.6, "valid_accuracy": 0.75, "valid_macro_f1": null, "seconds": 1.5},
                {"epoch": 2, "train_loss": null, "valid_loss": 0.65, "valid_accuracy": 0.5, "valid_macro_f1": 0.4, "seconds": 1.0}]})");
}
}  // namespace

TEST_CASE("run_dir: JSON fields are range-checked without wrapping or undefined casts") {
  const json j = json::parse(R"({"neg": -8, "big": 1e30, "frac": 3.5, "str": "8", "ok": 8, "huge": 18446744073709551615, "nan": null})");
  CHECK(examples::json_count(j, "ok", 1, 16) == 8);
  CHECK_THROWS_WITH(examples::json_count(j, "neg", 1, 16), Contains("-8 is outside [1, 16]"));
  CHECK_THROWS_WITH(examples::json_count(j, "big", 1, 16), Contains("expected an integer in [1, 16], found 1e+30"));
  CHECK_THROWS_WITH(examples::json_count(j, "frac", 1, 16), Contains("expected an integer"));
  CHECK_THROWS_WITH(examples::json_count(j, "str", 1, 16), Contains("found \"8\""));
  CHECK_THROWS_WITH(examples::json_count(j, "huge", 1, 16), Contains("18446744073709551615 is outside"));
  CHECK_THROWS_WITH(examples::json_count(j, "missing", 1, 16), Contains("missing"));
  CHECK_THROWS_WITH(examples::json_real(j, "nan", 0, 1), Contains("expected a number"));
  CHECK(std::isnan(examples::json_real_or_nan(j, "nan", 0, 1)));
  try {
    examples::json_count(j, "neg", 1, 16, "model.");
    FAIL("no throw");
  } catch (const examples::FieldError& e) {
    CHECK(e.field == "model.neg");
  }
}

TEST_CASE("run_dir: state.json fields are range-checked, naming the file and the field") {
  TempDir tmp;
  const auto& dir = tmp.path();
  write(dir / "state.json", good_state().dump());
  const auto s = examples::read_state(dir / "state.json");
  CHECK(s.epochs_done == 2);
  CHECK(s.step == 10);
  CHECK(s.history.size() == 2);
  CHECK(std::isnan(s.history[1].train_loss));
  const std::vector<std::pair<std::string, json>> bad = {
      {"epochs_done", -1}, {"epochs_done", 1e30}, {"epochs_done", 0}, {"step", 9223372036854775807LL}, {"step", -1},
      {"skipped_steps", -3}, {"skipped_steps", 11}, {"best_valid", 2.0}, {"best_valid", nullptr}, {"stale", 1000000000},
      {"stale", 3}, {"history", json::array()}};
  for (auto& [field, value] : bad) {
    auto st = good_state();
    st[field] = value;
    write(dir / "state.json", st.dump());
    CHECK_THROWS_AS(examples::read_state(dir / "state.json"), attn::FormatError);
    CHECK_THROWS_WITH(examples::read_state(dir / "state.json"), Contains("state.json: field " + field + ": "));
  }
  auto st = good_state();
  st["history"][1]["epoch"] = 1;  // a duplicated epoch
  write(dir / "state.json", st.dump());
  CHECK_THROWS_WITH(examples::read_state(dir / "state.json"), Contains("field history[1].epoch: 1 is outside [2, 2]"));
  write(dir / "state.json", good_state().dump().substr(0, 40));
  CHECK_THROWS_WITH(examples::read_state(dir / "state.json"), Contains("state.json: byte offset "));
}

TEST_CASE("run_dir: inspect_run_dir refuses a run without --resume or --overwrite, and other options on --resume") {
  TempDir tmp;
  const auto dir = tmp.path() / "h2";
  fs::create_directories(dir);
  examples::TrainOptions t;
  const json options = {{"--limit", 200}, {"--max-len", 64}};
  CHECK_FALSE(examples::inspect_run_dir(dir, t, options).replace);  // nothing there yet
  fs::create_directories(dir);
  write(dir / "metrics.jsonl", "");
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("already holds a run (metrics.jsonl)") && Contains("--overwrite"));
  t.overwrite = true;
  CHECK(examples::inspect_run_dir(dir, t, options).replace);
  t.overwrite = false;
  t.resume = true;
  CHECK_FALSE(examples::inspect_run_dir(dir, t, options).resume);  // no epoch committed: afresh
  write(dir / "model.safetensors", "x");
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("no state.json"));
  fs::remove(dir / "model.safetensors");
  write(dir / "state.json", good_state().dump());
  write(dir / "config.json", json{{"options", {{"--limit", 200}, {"--max-len", 32}}}}.dump());
  CHECK_THROWS_AS(examples::inspect_run_dir(dir, t, options), attn::ArgumentError);
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("--max-len: 64 differs from the run's 32"));
  write(dir / "config.json", json{{"model", 1}}.dump());
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("config.json: field options: missing"));
  write(dir / "config.json", json{{"options", options}}.dump());
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("last.safetensors: missing"));
}

TEST_CASE("run_dir: --split-seed is the split's seed, bound to the run, and runs recorded without it had --seed's split") {
  examples::TrainOptions t;
  t.seed = 7;
  CHECK(t.split() == 7);
  CHECK(examples::train_run_options(t).at("--split-seed") == 7);
  t.split_seed = 42;
  CHECK(t.split() == 42);
  CHECK(examples::train_run_options(t).at("--seed") == 7);
  CHECK(examples::train_run_options(t).at("--split-seed") == 42);

  const fs::path cfg = "run/config.json";
  const auto config = [](json options) { return json{{"options", std::move(options)}}; };
  // Recorded by a program that had no --split-seed: its split was --seed's.
  examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--split-seed", 42}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 7}}), json{{"--seed", 7}, {"--split-seed", 42}}, cfg),
                    Contains("--split-seed: 42 differs from the run's 7"));
  // Recorded with it: the recorded value decides, whatever --seed is.
  examples::check_same_options(config({{"--seed", 7}, {"--split-seed", 42}}), json{{"--seed", 7}, {"--split-seed", 42}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 42}, {"--split-seed", 7}}), json{{"--seed", 42}, {"--split-seed", 42}}, cfg),
                    Contains("--split-seed: 42 differs from the run's 7"));
  // Other options have no such fallback.
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 42}}), json{{"--batch", 32}}, cfg), Contains("options.--batch: missing"));
}

TEST_CASE("run_dir: a run recorded before --adversarial, --attn-entropy-target or --class-weights existed trained without them") {
  const fs::path cfg = "run/config.json";
  const auto config = [](json options) { return json{{"options", std::move(options)}}; };
  examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--adversarial", 0.0}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--adversarial", 0.3}}, cfg),
                    Contains("--adversarial: 0.3 differs from the run's 0.0"));
  // Recorded: the recorded value decides.
  examples::check_same_options(config({{"--adversarial", 0.3}}), json{{"--adversarial", 0.3}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--adversarial", 0.3}}), json{{"--adversarial", 0.0}}, cfg),
                    Contains("--adversarial: 0.0 differs from the run's 0.3"));
  // --attn-entropy-target likewise: a run before it had no hinge.
  examples::check_same_options(config({{"--attn-entropy", 0.03}}), json{{"--attn-entropy", 0.03}, {"--attn-entropy-target", 0.0}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--attn-entropy", 0.03}}), json{{"--attn-entropy", 0.03}, {"--attn-entropy-target", 0.5}}, cfg),
                    Contains("--attn-entropy-target: 0.5 differs from the run's 0.0"));
  // --class-weights likewise: a run before it was unweighted.
  examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--class-weights", "none"}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--class-weights", "balanced"}}, cfg),
                    Contains("--class-weights: \"balanced\" differs from the run's \"none\""));
  // --activation likewise: a run before it used gelu.
  examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--activation", "gelu"}}, cfg);
  CHECK_THROWS_WITH(examples::check_same_options(config({{"--seed", 42}}), json{{"--seed", 42}, {"--activation", "silu"}}, cfg),
                    Contains("--activation: \"silu\" differs from the run's \"gelu\""));
}

TEST_CASE("run_dir: metrics.jsonl is cut back to the committed epochs") {
  TempDir tmp;
  const auto& dir = tmp.path();
  const std::string l1 = R"({"epoch":1,"x":1})", l2 = R"({"epoch":2,"x":2})";
  write(dir / "m.jsonl", l1 + "\n" + l2 + "\n" + l2 + "\n" + R"({"epoch":3,)");
  examples::truncate_metrics(dir / "m.jsonl", 2);
  CHECK(read(dir / "m.jsonl") == l1 + "\n" + l2 + "\n");
  examples::truncate_metrics(dir / "m.jsonl", 5);  // fewer lines than epochs: kept as they are
  CHECK(read(dir / "m.jsonl") == l1 + "\n" + l2 + "\n");
  write(dir / "m.jsonl", l2 + "\n" + l1 + "\n");
  examples::truncate_metrics(dir / "m.jsonl", 2);
  CHECK(read(dir / "m.jsonl").empty());
}

TEST_CASE("run_dir: stale temporaries of ended processes are removed, others kept") {
  TempDir tmp;
  const auto& dir = tmp.path();
  const std::string mine = ".state.json.tmp-" + std::to_string(::getpid()) + "-3";
  write(dir / ".model.safetensors.pending.tmp-2147483646-17", "x");
  write(dir / mine, "x");
  write(dir / ".notes.tmp", "x");
  write(dir / "vocab.txt", "x");
  examples::remove_stale_temporaries(dir);
  CHECK_FALSE(fs::exists(dir / ".model.safetensors.pending.tmp-2147483646-17"));
  CHECK(fs::exists(dir / mine));
  CHECK(fs::exists(dir / ".notes.tmp"));
  CHECK(fs::exists(dir / "vocab.txt"));
}

TEST_CASE("run_dir: the committed model is model.safetensors.pending only when state.json names its epoch") {
  TempDir tmp;
  const auto& dir = tmp.path();
  attn::io::TensorMap m;
  m.emplace("w", attn::io::TensorRecord::from_values(attn::io::DType::F32, {1}, std::vector<float>{1.0f}));
  attn::io::write_safetensors(examples::pending_path(dir / "model.safetensors"), m, {{"epoch", "2"}});
  CHECK(examples::committed_model(dir) == dir / "model.safetensors");  // no state.json
  write(dir / "state.json", good_state().dump());                         // epochs_done 2
  CHECK(examples::committed_model(dir) == examples::pending_path(dir / "model.safetensors"));
  auto st = good_state();
  st["epochs_done"] = 1;
  st["history"].erase(1);
  st["stale"] = 0;
  write(dir / "state.json", st.dump());
  CHECK(examples::committed_model(dir) == dir / "model.safetensors");
}

TEST_CASE("run_dir: check_ema_steps refuses an average not taken along the optimizer's steps") {
  using Catch::Matchers::Contains;
  const std::filesystem::path ema = "run/ema.safetensors", opt = "run/optimizer.safetensors";
  CHECK_NOTHROW(examples::check_ema_steps(24, 24, ema, opt));
  CHECK_NOTHROW(examples::check_ema_steps(0, 0, ema, opt));
  CHECK_THROWS_AS(examples::check_ema_steps(26, 24, ema, opt), attn::FormatError);
  CHECK_THROWS_WITH(examples::check_ema_steps(26, 24, ema, opt),
                    Contains("run/ema.safetensors") && Contains("'ema_steps' 26 differs from the optimizer's step 24") &&
                        Contains("run/optimizer.safetensors"));
}

namespace {
void write_checkpoint(const fs::path& p, attn::io::MetadataMap meta) {
  attn::io::TensorMap m;
  m.emplace("w", attn::io::TensorRecord::from_values(attn::io::DType::F32, {1}, std::vector<float>{1.0f}));
  attn::io::write_safetensors(p, m, meta);
}
}  // namespace

TEST_CASE("run_dir: --resume needs the best epoch's model.safetensors and every checkpoint's epoch") {
  TempDir tmp;
  const auto& dir = tmp.path();
  examples::TrainOptions t;
  t.resume = true;
  const json options = {{"--limit", 200}};
  write(dir / "config.json", json{{"options", options}}.dump());
  write(dir / "state.json", good_state().dump());  // 2 epochs done, the best (0.75) the first
  attn::data::Vocab().save(dir / "vocab.txt");
  write_checkpoint(dir / "last.safetensors", {{"epoch", "2"}, {"heads", "2"}});
  write_checkpoint(dir / "optimizer.safetensors", {{"epoch", "2"}});
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("model.safetensors: missing"));
  write_checkpoint(dir / "model.safetensors", {{"epoch", "2"}, {"heads", "2"}});
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options),
                    Contains("model.safetensors") && Contains("holds epoch 2, but state.json's history has the best validation accuracy at epoch 1"));
  write_checkpoint(dir / "model.safetensors", {{"heads", "2"}});
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("model.safetensors") && Contains("records no epoch"));
  write_checkpoint(dir / "model.safetensors", {{"epoch", "1"}, {"heads", "2"}});
  const auto plan = examples::inspect_run_dir(dir, t, options);
  CHECK(plan.resume);
  CHECK(plan.state.model == dir / "model.safetensors");
  CHECK(plan.state.last == dir / "last.safetensors");
  // A best model written in the last committed epoch and not yet renamed is the committed one.
  auto st = good_state();
  st["history"][1]["valid_accuracy"] = 0.8;
  st["best_valid"] = 0.8;
  write(dir / "state.json", st.dump());
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("holds epoch 1, but state.json's history has the best validation accuracy at epoch 2"));
  write_checkpoint(examples::pending_path(dir / "model.safetensors"), {{"epoch", "2"}, {"heads", "2"}});
  CHECK(examples::inspect_run_dir(dir, t, options).state.model == examples::pending_path(dir / "model.safetensors"));
  // An optimizer file without its epoch is not taken on trust.
  write_checkpoint(dir / "optimizer.safetensors", {});
  CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options), Contains("optimizer.safetensors") && Contains("records no epoch"));
}

TEST_CASE("run_dir: a checkpoint of another head count is refused by its metadata") {
  TempDir tmp;
  const auto p = tmp.path() / "model.safetensors";
  write_checkpoint(p, {{"epoch", "1"}, {"heads", "8"}});
  CHECK_NOTHROW(examples::check_checkpoint_heads(p, 8));
  CHECK_THROWS_AS(examples::check_checkpoint_heads(p, 4), attn::FormatError);
  CHECK_THROWS_WITH(examples::check_checkpoint_heads(p, 4), Contains("model.safetensors") && Contains("metadata 'heads' is 8, but the run directory is that of 4 heads"));
  write_checkpoint(p, {{"epoch", "1"}});  // not recorded (weights written by other tools): not checked
  CHECK_NOTHROW(examples::check_checkpoint_heads(p, 4));
}

TEST_CASE("run_dir: the number of data-parallel processes is bound to the run") {
  examples::TrainOptions t;
  CHECK(examples::train_run_options(t).at("processes") == 1);
  t.processes = 2;
  const auto two = examples::train_run_options(t);
  const fs::path cfg = "run/config.json";
  examples::check_same_options(json{{"options", two}}, two, cfg);
  t.processes = 1;
  const auto one = examples::train_run_options(t);
  CHECK_THROWS_AS(examples::check_same_options(json{{"options", two}}, one, cfg), attn::ArgumentError);
  CHECK_THROWS_WITH(examples::check_same_options(json{{"options", two}}, one, cfg),
                    Contains("trained by 2 data-parallel processes, this is 1") && Contains("mpirun -n 2"));
  CHECK_THROWS_WITH(examples::check_same_options(json{{"options", one}}, two, cfg), Contains("trained by 1 data-parallel processes, this is 2"));
  // A run recorded before the count was: not checked (its step count still is, by check_resume).
  auto old = two;
  old.erase("processes");
  examples::check_same_options(json{{"options", old}}, one, cfg);
}

TEST_CASE("run_dir: the writer locks the run directory, and a second writer stops before it writes") {
  TempDir tmp;
  const auto dir = tmp.path() / "h4";
  examples::TrainOptions t;
  const json options = {{"--limit", 200}};
  {
    const auto fresh = examples::inspect_run_dir(dir, t, options, true);  // not there yet: locked once created
    CHECK_FALSE(fresh.lock->held());
    examples::begin_writing(fresh);
    CHECK(fresh.lock->held());
    CHECK_THROWS_WITH(examples::inspect_run_dir(dir, t, options, true), Contains("another process is using this run directory"));
    // A reader (another rank of a data-parallel job) takes no lock.
    CHECK_FALSE(examples::inspect_run_dir(dir, t, options).lock->held());
  }
  const auto again = examples::inspect_run_dir(dir, t, options, true);  // released with the first plan
  CHECK(again.lock->held());
  // Two plans racing for a directory neither found: the second to create it stops.
  const auto a = examples::inspect_run_dir(tmp.path() / "h8", t, options, true);
  const auto b = examples::inspect_run_dir(tmp.path() / "h8", t, options, true);
  examples::begin_writing(a);
  CHECK_THROWS_WITH(examples::begin_writing(b), Contains("another process is using this run directory"));
  // A directory found absent, in which another program then wrote a run and ended (releasing the
  // lock) before this one got to it: refused, the other run untouched.
  const auto late = examples::inspect_run_dir(tmp.path() / "h16", t, options, true);
  {
    const auto other = examples::inspect_run_dir(tmp.path() / "h16", t, options, true);
    examples::begin_writing(other);
    write(tmp.path() / "h16" / "config.json", "{}");
  }
  CHECK_THROWS_WITH(examples::begin_writing(late), Contains("another program wrote a run into this directory (config.json)"));
  CHECK(read(tmp.path() / "h16" / "config.json") == "{}");
  // With --overwrite too: the plan was made for an empty directory, so nothing of it was meant to go.
  t.overwrite = true;
  const auto late_over = examples::inspect_run_dir(tmp.path() / "h32", t, options, true);
  fs::create_directories(tmp.path() / "h32");
  write(tmp.path() / "h32" / "state.json", "{}");
  CHECK_THROWS_AS(examples::begin_writing(late_over), attn::ArgumentError);
  CHECK(fs::exists(tmp.path() / "h32" / "state.json"));
}

TEST_CASE("run_dir: the writer checks that it can write the run directory before anything is written") {
  TempDir tmp;
  examples::TrainOptions t;
  const json options = {{"--limit", 200}};
  write(tmp.path() / "file", "x");
  CHECK_THROWS_WITH(examples::inspect_run_dir(tmp.path() / "file" / "h4", t, options, true), Contains("exists and is not a directory"));
  if (::geteuid() == 0) return;  // root writes anywhere
  fs::create_directories(tmp.path() / "ro");
  fs::permissions(tmp.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  CHECK_THROWS_WITH(examples::inspect_run_dir(tmp.path() / "ro" / "out" / "h4", t, options, true), Contains("cannot write the run directory into it"));
  fs::permissions(tmp.path() / "ro", fs::perms::owner_all);
}

TEST_CASE("run_dir: predict --dump replaces only an earlier dump, and checks its directory first") {
  TempDir tmp;
  const auto model = tmp.path() / "model.safetensors";
  write_checkpoint(model, {{"epoch", "1"}, {"heads", "2"}});
  const std::string before = read(model);
  CHECK_THROWS_AS(examples::check_dump_target(model), attn::ArgumentError);
  CHECK_THROWS_WITH(examples::check_dump_target(model), Contains("not an earlier predict --dump output; it is kept"));
  CHECK(read(model) == before);
  write(tmp.path() / "notes.txt", "hello");
  CHECK_THROWS_WITH(examples::check_dump_target(tmp.path() / "notes.txt"), Contains("not an earlier predict --dump output"));
  CHECK_THROWS_WITH(examples::check_dump_target(tmp.path()), Contains("exists and is not a file"));
  CHECK_THROWS_WITH(examples::check_dump_target(tmp.path() / "missing" / "d.safetensors"), Contains("missing") && Contains("no such directory"));
  const auto dump = tmp.path() / "d.safetensors";
  CHECK_NOTHROW(examples::check_dump_target(dump));  // new
  attn::io::TensorMap m;
  m.emplace("logits", attn::io::TensorRecord::from_values(attn::io::DType::F32, {1}, std::vector<float>{0.5f}));
  examples::write_dump(dump, m, "imdb");
  CHECK_NOTHROW(examples::check_dump_target(dump));  // an earlier dump
}

TEST_CASE("run_dir: state.json's epochs, the --epochs it was written under, is optional and range-checked") {
  TempDir tmp;
  const auto p = tmp.path() / "state.json";
  auto st = good_state();
  write(p, st.dump());
  CHECK(examples::read_state(p).planned_epochs == 0);  // a run recorded before it
  st["epochs"] = 5;
  write(p, st.dump());
  CHECK(examples::read_state(p).planned_epochs == 5);
  st["epochs"] = 0;
  write(p, st.dump());
  CHECK_THROWS_WITH(examples::read_state(p), Contains("state.json") && Contains("field epochs: 0 is outside"));
}

TEST_CASE("run_dir: resumed directories of a sweep with different vocabularies name the first resumed one") {
  using attn::data::Vocab;
  const std::vector<std::string> a{"good"}, b{"bad"};
  std::vector<examples::RunPlan> plans(3);
  plans[0].dir = "runs/h1";  // a new run: no vocabulary of its own
  plans[1].dir = "runs/h2";
  plans[1].resume = true;
  plans[1].vocab = Vocab::from_tokens(a);
  plans[2].dir = "runs/h4";
  plans[2].resume = true;
  plans[2].vocab = Vocab::from_tokens(a);
  CHECK(examples::resumed_vocab(plans) == &*plans[1].vocab);
  plans[2].vocab = Vocab::from_tokens(b);
  CHECK_THROWS_WITH(examples::resumed_vocab(plans), Contains("runs/h4/vocab.txt: its vocabulary differs from that of runs/h2/vocab.txt"));
  plans[1].resume = plans[2].resume = false;
  CHECK(examples::resumed_vocab(plans) == nullptr);
}
