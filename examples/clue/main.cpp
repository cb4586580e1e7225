// SPDX-License-Identifier: MIT
// CLUE text classification (TNEWS's 15 news categories, IFLYTEK's 119 app categories: labels.json's
// classes) with a character BiLSTM (--rnn gru: a BiGRU) and multi-head self-attention: trains one head count (--heads;
// 0: the model without attention) or all of them and the ablation (--sweep), reports accuracy,
// macro-F1, per-class scores and the confusion matrix, writes checkpoints, metrics.jsonl and a
// report.html; `predict` classifies titles and shows the characters attended to most; --bench
// measures inference throughput at batch 64 and single-title latency.
//   clue --data /tmp/tnews_public --heads 4 --out runs/clue
//   clue predict --model runs/clue/h4 "国产两轮电动车怎么样，有什么惊喜？"
//   clue --bench --model runs/clue/h4 --data /tmp/tnews_public
//   clue --data /tmp/iflytek_public --max-len 256 --out runs/iflytek   # iflytek_predict.json
#include <attn/attn.hpp>
#include <attn/backend/cpu/ceiling.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "../common/device.hpp"
#include "../common/dump.hpp"
#include "../common/json_files.hpp"
#include "../common/report.hpp"
#include "run.hpp"
#include "serve.hpp"

namespace clue {

inline std::string sweep_table(const std::vector<RunResult>& runs) {
  const bool dev = !runs.empty() && runs[0].dev_acc >= 0;
  std::string t = fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>14} {:>11}\n", "heads", "valid acc", "macro-F1", "dev acc",
                              "dev F1", "train time", "infer samp/s", "parameters");
  for (auto& r : runs)
    t += fmt::format("{:>6} {:>9.2f}% {:>9.2f}% {:>10} {:>10} {:>10.0f}s {:>14.0f} {:>11}\n", r.heads ? std::to_string(r.heads) : "none",
                     100 * r.valid_acc, 100 * r.valid_f1,
                     dev ? fmt::format("{:.2f}%", 100 * r.dev_acc) : "-", dev ? fmt::format("{:.2f}%", 100 * r.dev_f1) : "-",
                     r.train_seconds, r.speed.samples_per_s, r.params);
  return t;
}

inline void write_report(const Options& o, const Prepared& p, const std::vector<RunResult>& runs) {
  const std::string rnn = o.rnn == "gru" ? "BiGRU" : "BiLSTM";
  examples::HtmlReport rep("attn: CLUE text classification with a " + rnn + " and single- and multi-head self-attention");
  rep.paragraph(fmt::format("Data: {} (validation: fixed-seed {:.0f}% stratified split of train.json, seed {}{}). Training seed {}. "
                            "Characters as tokens{}; vocabulary {}. Model: Embedding({}, {}) -> {}<{}, {}> -> Attention<H, {}>{} "
                            "-> masked mean -> Linear({}, {}).",
                            o.data.dir, 100 * o.data.valid_fraction, o.data.seed, p.dev.size() ? "; dev.json evaluated" : "", o.train.seed,
                            o.data.keywords ? ", keywords appended" : "", p.vocab.size(), p.vocab.size(), kEmbed, rnn, kEmbed, kHidden, kDim,
                            o.residual ? " + residual LayerNorm" : "", kDim, p.labels.size()));
  rep.heading("Accuracy, macro-F1 and speed by head count");
  rep.preformatted(sweep_table(runs) + (runs.empty() ? "" : "inference: batch 64 on the validation titles\n"));
  if (std::any_of(runs.begin(), runs.end(), [](auto& r) { return r.heads == 0; }))
    rep.paragraph("Heads \"none\" is the ablation: the same model without its attention (the " + rnn +
                  "'s output, through the same LayerNorm unless --no-residual, mean-pooled), trained the same way.");
  std::vector<examples::Series> loss, acc;
  for (auto& r : runs) {
    const std::string h = r.heads ? fmt::format("h{}", r.heads) : std::string("no attention");
    examples::Series tl{"train " + h, {}, {}}, vl{"valid " + h, {}, {}}, va{"acc " + h, {}, {}}, vf{"F1 " + h, {}, {}};
    for (auto& e : r.history) {
      const double x = double(e.epoch);
      tl.x.push_back(x), tl.y.push_back(e.train_loss), vl.x.push_back(x), vl.y.push_back(e.valid_loss);
      va.x.push_back(x), va.y.push_back(100 * e.valid_acc), vf.x.push_back(x), vf.y.push_back(100 * e.valid_f1);
    }
    loss.push_back(tl), loss.push_back(vl), acc.push_back(va), acc.push_back(vf);
  }
  rep.heading("Loss and accuracy curves");
  // The training curve is the objective (label smoothing, class weights, adversarial term), the
  // validation curve plain cross-entropy.
  rep.raw(examples::svg_line_chart("loss: training objective (train) and validation cross-entropy (valid)", "epoch", loss) +
          examples::svg_line_chart("validation accuracy and macro-F1 (%)", "epoch", acc));
  const auto names = class_names(p.labels);
  for (auto& r : runs) {
    rep.heading(fmt::format("{}: validation per class", heads_label(r.heads)));
    rep.preformatted(r.valid_report);
    // Row-normalised: every cell is a fraction of its true class, drawn on the scale [0, 1].
    rep.raw("<div>" + examples::svg_color_legend(1.0, "fraction of the true class") + "</div>" +
            examples::svg_heatmap("confusion matrix, row-normalised (rows: true, columns: predicted)", names, names,
                                  r.confusion_rows, 1.0));
    rep.preformatted(r.valid_confusion);
    if (!r.dev_report.empty()) {
      rep.heading(fmt::format("{}: dev.json per class", heads_label(r.heads)));
      rep.preformatted(r.dev_report);
    }
    if (r.heads == 0) continue;  // the ablation has no attention to draw
    rep.heading(fmt::format("{}: attention heatmaps", heads_label(r.heads)));
    rep.raw(r.heatmaps);
  }
  rep.write((fs::path(o.train.out) / "report.html").string());
  fmt::print("\nreport: {}\n", (fs::path(o.train.out) / "report.html").string());
}

}  // namespace clue

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // results line by line, also into a pipe or a log file
  using namespace clue;
  std::optional<examples::Parallel> par;  // data-parallel under mpirun (built with MPI)
  try {
    par.emplace(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clue: error: %s\n", e.what());
    return 1;
  }
  Command cmd;
  if (auto exit_code = parse_command_line(argc, argv, cmd)) return *exit_code;
  cmd.options.train.processes = std::size_t(par->world());
  Options& o = cmd.options;
  o.data.seed = o.train.split();
  try {
    attn::cpu::set_threads(int(o.threads));
    const std::string& device = cmd.predict ? cmd.prediction.device : o.device;
    examples::require_device(device);  // before any data is read
    const bool cuda = device == "cuda";
    if (cuda && !cmd.predict && par->world() > 1)
      throw attn::ArgumentError("--device cuda: the example programs train on one GPU; under mpirun they train data-parallel on the "
                                "CPU (drop --device cuda, or run one process)");
    if (cuda && (cmd.predict ? cmd.prediction.precision : o.train.precision) != "fp32")
      throw attn::ArgumentError("--precision: with --device cuda the model computes in FP32 (bf16 and int8 are the CPU's)");
    if (cmd.predict) {
      PredictOptions& pr = cmd.prediction;
      if (!pr.dump.empty()) examples::check_dump_target(pr.dump);  // before the model is read
      if (pr.texts.empty()) pr.texts.push_back(kExampleTitle);
      const attn::PrecisionScope precision(attn::parse_precision(pr.precision, "--precision"));
      auto tr = load_trained(pr.model_dir);  // its heads are one the program offers (trained_config)
#if defined(ATTN_EXAMPLES_CUDA)
      if (cuda) return predict_cuda(pr.model_dir, tr, pr.texts, pr.keywords, pr.top, pr.dump);
#endif
      return predict(pr.model_dir, tr, pr.texts, pr.keywords, pr.top, pr.dump);
    }
    std::size_t heads = o.heads;
    if (o.bench && !o.model_dir.empty()) heads = load_trained(o.model_dir).heads;
    if (!o.sweep) dispatch_heads(heads, "--heads", []<std::size_t>() {});  // validate before loading data
    if (!o.ablation && !o.sweep) throw attn::ArgumentError("--no-ablation: only with --sweep (a single run trains --heads)");
    if (!o.explain.empty() && heads == 0 && !o.sweep)
      throw attn::ArgumentError("--explain: the model of --heads 0 has no attention to draw");
    if (o.train.precision == "int8" && !o.bench)
      throw attn::ArgumentError("--precision int8 is for inference (--bench, predict --precision int8); training takes fp32 or bf16");
    // Training and evaluation run their linear and LSTM products in --precision (this thread's scope).
    const attn::PrecisionScope precision(attn::parse_precision(o.train.precision, "--precision"));
    if (cuda)
      fmt::print("attn CLUE example: the model on cuda (FP32); data preparation on {} CPU thread(s)\n", attn::cpu::threads());
    else
      fmt::print("attn CLUE example: {} thread(s), {} kernels, GEMM {}, {} products{}\n", attn::cpu::threads(),
                 attn::isa_name(attn::cpu::isa()), attn::cpu_gemm_description(), attn::precision_route(attn::precision()),
                 par->world() > 1 ? fmt::format(" x {} processes (global batch {})", par->world(), o.train.batch * std::size_t(par->world())) : "");
    if (attn::cpu::threads() > 1 && !std::getenv("OMP_WAIT_POLICY"))
      fmt::print("hint: on a machine shared with other jobs, OMP_WAIT_POLICY=PASSIVE keeps idle threads from spinning\n");
    if (o.bench) {
#if defined(ATTN_EXAMPLES_CUDA)
      if (cuda) {
        run_bench_cuda(heads, o);
        return 0;
      }
#endif
      run_bench(heads, o);
      return 0;
    }
    // Everything is checked before anything is written: the run directories (options against
    // config.json, state.json, vocab.txt), the data, then the checkpoints a resumed run continues.
    // A sweep trains every offered head count, the ablation (0) last.
    std::vector<std::size_t> head_counts{heads};
    if (o.sweep) {
      head_counts.clear();
      for (std::size_t h : kOfferedHeads)
        if (h != 0) head_counts.push_back(h);
      if (o.ablation) head_counts.push_back(0);
    }
    std::vector<examples::RunPlan> plans;
    for (std::size_t h : head_counts) {
      plans.push_back(examples::inspect_run_dir(run_dir(o, h), o.train, run_options(o, h), par->main()));
      if (plans.back().resume) (void)resumed(plans.back(), h);
    }
    auto p = prepare(o.data, examples::resumed_vocab(plans));
    for (std::size_t k = 0; k < head_counts.size(); ++k) {
      if (!plans[k].resume) continue;
      const auto tr = resumed(plans[k], head_counts[k]);
      if (tr.labels.names != p.labels.names)
        throw attn::ArgumentError(fmt::format("{}: its labels differ from those of {}", (plans[k].dir / "config.json").string(),
                                              (fs::path(o.data.dir) / "labels.json").string()));
      auto model = attn::nn::skip_init<TnewsClassifier<>>(tr.cfg, head_counts[k]);
      examples::check_resume(model, head_counts[k], plans[k], o.train, p.train.size(), par->world());
    }
    par->barrier();  // no process is still reading when the directories change
    std::vector<RunResult> runs;
    for (std::size_t k = 0; k < head_counts.size(); ++k) {
#if defined(ATTN_EXAMPLES_CUDA)
      if (cuda) {
        runs.push_back(train_heads_cuda(head_counts[k], o, p, *par, plans[k]));
        continue;
      }
#endif
      runs.push_back(train_heads(head_counts[k], o, p, *par, plans[k]));
    }
    if (o.sweep) fmt::print("\n{}", sweep_table(runs));
    if (!par->main()) return 0;
    fs::create_directories(o.train.out);
    json sj = json::array();
    for (auto& r : runs)
      sj.push_back({{"heads", r.heads}, {"valid_accuracy", r.valid_acc}, {"valid_macro_f1", r.valid_f1},
                    {"valid_accuracy_int8", r.valid_acc_int8 < 0 ? json(nullptr) : json(r.valid_acc_int8)},
                    {"valid_macro_f1_int8", r.valid_f1_int8 < 0 ? json(nullptr) : json(r.valid_f1_int8)},
                    {"dev_accuracy", r.dev_acc < 0 ? json(nullptr) : json(r.dev_acc)},
                    {"dev_macro_f1", r.dev_f1 < 0 ? json(nullptr) : json(r.dev_f1)}, {"train_seconds", r.train_seconds},
                    {"inference_samples_per_s", r.speed.samples_per_s}, {"parameters", r.params}});
    data::write_file_atomic(fs::path(o.train.out) / "summary.json", sj.dump(2) + "\n");
    write_report(o, p, runs);
    // The last attention model (a sweep trains the ablation last).
    const auto last_it = std::find_if(runs.rbegin(), runs.rend(), [](auto& r) { return r.heads > 0; });
    const auto& last = last_it == runs.rend() ? runs.back() : *last_it;
    if (!last.history.empty())
      fmt::print("RESULT {}\n", json{{"heads", last.heads}, {"valid_accuracy", last.valid_acc}, {"valid_macro_f1", last.valid_f1},
                                   {"train_seconds", last.train_seconds}, {"first_train_loss", last.history.front().train_loss},
                                   {"last_train_loss", last.history.back().train_loss}}
                                  .dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clue: error: %s\n", e.what());
    return par->fail(1, e.what());  // a data-parallel job ends on every process
  }
  return 0;
}
