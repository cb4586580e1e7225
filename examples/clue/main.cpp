// CLUE TNEWS news-title classification (15 classes) with a character BiLSTM and multi-head
// self-attention: trains one head count (--heads) or all of them (--sweep), reports accuracy,
// macro-F1, per-class scores and the confusion matrix, writes checkpoints, metrics.jsonl and a
// report.html; `predict` classifies titles and shows the characters attended to most; --bench
// measures inference throughput at batch 64 and single-title latency.
//   clue --data /tmp/tnews_public --heads 4 --out runs/clue
//   clue predict --model runs/clue/h4 "国产两轮电动车怎么样，有什么惊喜？"
//   clue --bench --model runs/clue/h4 --data /tmp/tnews_public
#include <attn/attn.hpp>
#include <attn/backend/cpu_ceiling.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../common/json_files.hpp"
#include "../common/parallel.hpp"
#include "../common/progress.hpp"
#include "../common/report.hpp"
#include "../common/training.hpp"
#include "bench.hpp"
#include "data.hpp"
#include "model.hpp"

using nlohmann::json;

namespace clue {

inline constexpr const char* kExampleTitle = "凌云研发的国产两轮电动车怎么样，有什么惊喜？";

struct Options {
  DataOptions data{.dir = "examples/clue/sample/tnews_public"};
  examples::TrainOptions train{.out = "runs/clue", .epochs = 5, .batch = 64, .patience = 3, .warmup = 0.05};
  std::size_t heads = nn::recommended_heads(kDim);
  bool sweep = false;
  std::size_t threads = 0;
  double dropout = 0.2, attn_dropout = 0.1, label_smoothing = 0.1;
  bool residual = true;
  bool bench = false;
  double bench_seconds = 10;
  std::size_t bench_latency = 1000;
  std::string model_dir;  // --bench with a trained model
  bool fold = true;       // --bench: nn::embedded_lstm (--no-fold: the two layers in turn)
  std::vector<std::string> explain;
};

/// Class names for tables: label_desc ("news_tech"), or the label when there is none.
inline std::vector<std::string> class_names(const data::ClueLabels& l) {
  std::vector<std::string> n;
  for (std::size_t c = 0; c < l.size(); ++c) n.push_back(l.descriptions[c].empty() ? l.names[c] : l.descriptions[c]);
  return n;
}

struct EvalResult {
  double loss = 0;
  attn::metrics::ConfusionMatrix cm{kClasses};
  std::vector<int> predictions;
};

/// Evaluates in length-sorted batches; labels < 0 (unlabelled) count in neither loss nor metrics.
template <class Model>
EvalResult evaluate(const Model& model, const Encoded& e, std::size_t batch = 128) {
  EvalResult r;
  attn::NoGrad ctx;
  std::vector<std::size_t> order(e.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return e.ids[a].size() < e.ids[b].size(); });
  r.predictions.assign(e.size(), 0);
  double loss = 0;
  std::size_t labelled = 0;
  for (std::size_t s = 0; s < order.size(); s += batch) {
    std::vector<const std::vector<std::int32_t>*> seqs;
    std::vector<int> lab;
    for (std::size_t k = s; k < std::min(order.size(), s + batch); ++k) {
      seqs.push_back(&e.ids[order[k]]);
      lab.push_back(e.labels[order[k]]);
    }
    auto b = make_batch(seqs, lab);
    auto logits = model.forward(ctx, b);
    for (std::size_t k = 0; k < seqs.size(); ++k) b.labels(k) = lab[k] < 0 ? -100 : lab[k];  // -100: ignored
    const std::size_t n = std::size_t(std::count_if(lab.begin(), lab.end(), [](int y) { return y >= 0; }));
    if (n) loss += double(attn::cross_entropy(ctx, logits, b.labels).value()[0]) * double(n);
    labelled += n;
    auto pred = attn::argmax_rows(logits.value());
    for (std::size_t k = 0; k < seqs.size(); ++k) {
      const std::size_t i = order[s + k];
      r.predictions[i] = int(pred[k]);
      if (lab[k] >= 0) r.cm.add(lab[k], int(pred[k]));
    }
  }
  r.loss = labelled ? loss / double(labelled) : 0;
  return r;
}

/// Accuracy, macro-F1, per-class scores and the confusion matrix as JSON.
inline json eval_json(const EvalResult& ev, const data::ClueLabels& labels) {
  json classes = json::array(), cm = json::array();
  for (std::size_t c = 0; c < kClasses; ++c) {
    const auto s = ev.cm.scores(c);
    classes.push_back({{"label", labels.names[c]}, {"label_desc", labels.descriptions[c]}, {"precision", s.precision},
                       {"recall", s.recall}, {"f1", s.f1}, {"support", s.support}});
    json row = json::array();
    for (std::size_t p = 0; p < kClasses; ++p) row.push_back(ev.cm.count(c, p));
    cm.push_back(row);
  }
  return {{"examples", ev.cm.total()}, {"loss", ev.loss}, {"accuracy", ev.cm.accuracy()}, {"macro_f1", ev.cm.macro_f1()},
          {"classes", classes}, {"confusion", cm}};
}

struct RunResult {
  std::size_t heads = 0, params = 0;
  double valid_acc = 0, valid_f1 = 0, dev_acc = -1, dev_f1 = -1, train_seconds = 0;
  BenchResult speed;
  std::vector<examples::EpochRecord> history;
  std::string valid_report, valid_confusion, dev_report, heatmaps;
  std::vector<float> confusion_rows;  // row-normalised validation confusion matrix, (C, C)
};

/// Attention of a model for one title: per head, a (T x T) heatmap, and the prediction.
template <class Model>
std::string heatmaps_html(const Model& model, const Prepared& p, const std::string& text, const std::string& keywords, bool use_keywords) {
  constexpr std::size_t H = std::remove_cvref_t<decltype(model.attention)>::heads;
  const data::ChineseCharTokenizer tok;
  auto toks = tokens_of(tok, text, keywords, use_keywords);
  auto ids = encode(p.vocab, toks, model.cfg.max_len);
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < ids.size(); ++i) shown.push_back(i < toks.size() ? toks[i] : "<unk>");
  attn::NoGrad ctx;
  attn::Tensor<float> w;
  auto b = make_batch({&ids}, {});
  auto pr = attn::softmax(ctx, model.forward(ctx, b, &w)).value();
  const std::size_t c = attn::argmax_rows(pr)[0];
  const std::string shown_text = text + (use_keywords && !keywords.empty() ? " (keywords: " + keywords + ")" : "");
  std::string html = fmt::format("<p><b>{}</b> &rarr; {} with probability {:.3f}</p><div>", examples::html_escape(shown_text),
                                 examples::html_escape(class_names(p.labels)[c]), pr(0, c));
  // At most the first 32 characters are drawn, which keeps a sweep's report a few MB.
  const std::size_t t = std::min<std::size_t>(ids.size(), 32), full = ids.size();
  shown.resize(t);
  if (t < full) html += fmt::format("<p>(the first {} of {} characters)</p>", t, full);
  for (std::size_t h = 0; h < H; ++h) {
    std::vector<float> m(t * t);
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < t; ++j) m[i * t + j] = w(std::size_t(0), h, i, j);
    html += examples::svg_heatmap(fmt::format("head {} of {}", h + 1, H), shown, shown, m);
  }
  return html + "</div>";
}

/// CLUE's submission format: one {"id", "label", "label_desc"} line per test title.
inline void write_test_predictions(const fs::path& path, const Prepared& p, const EvalResult& ev) {
  std::string out;
  for (std::size_t i = 0; i < p.test.size(); ++i) {
    const auto c = std::size_t(ev.predictions[i]);
    out += json{{"id", p.test.example_ids[i]}, {"label", p.labels.names[c]}, {"label_desc", p.labels.descriptions[c]}}.dump() + "\n";
  }
  data::write_file_atomic(path, out);
}

template <std::size_t Heads>
RunResult train_variant(const Options& o, const Prepared& p, examples::Parallel& par) {
  const fs::path dir = fs::path(o.train.out) / fmt::format("h{}", Heads);
  fs::create_directories(dir);
  ModelConfig cfg{.vocab = p.vocab.size(), .max_len = o.data.max_len, .dropout = o.dropout, .attn_dropout = o.attn_dropout,
                  .residual = o.residual};
  TnewsClassifier<Heads> model(cfg);
  model.init(o.train.seed);
  RunResult res;
  res.heads = Heads;
  res.params = model.parameter_count();
  fmt::print("\n== {} head{} (BiLSTM<{}, {}> -> Attention<{}, {}>), {} parameters\n", Heads, Heads > 1 ? "s" : "", kEmbed, kHidden, Heads,
             kDim, res.params);

  json labels = json::array();
  for (std::size_t c = 0; c < p.labels.size(); ++c) labels.push_back({{"label", p.labels.names[c]}, {"label_desc", p.labels.descriptions[c]}});
  json config = {{"model", cfg.to_json()}, {"heads", Heads}, {"embed", kEmbed}, {"hidden", kHidden}, {"labels", labels},
                 {"keywords", o.data.keywords}, {"seed", o.train.seed}, {"epochs", o.train.epochs}, {"batch", o.train.batch}, {"lr", o.train.lr},
                 {"weight_decay", o.train.weight_decay}, {"label_smoothing", o.label_smoothing}, {"min_freq", o.data.min_freq},
                 {"valid_fraction", o.data.valid_fraction}, {"data", o.data.dir}};
  if (par.main()) {
    p.vocab.save(dir / "vocab.txt");
    data::write_file_atomic(dir / "config.json", config.dump(2) + "\n");
  }

  std::vector<std::size_t> lengths;
  for (auto& x : p.train.ids) lengths.push_back(x.size());
  const auto log = examples::train(
      model, o.train, dir, Heads, par, lengths,
      [&](const std::vector<std::size_t>& idx) {
        std::vector<const std::vector<std::int32_t>*> seqs;
        std::vector<int> lab;
        for (auto i : idx) {
          seqs.push_back(&p.train.ids[i]);
          lab.push_back(p.train.labels[i]);
        }
        return make_batch(seqs, lab);
      },
      [&](attn::Tape& tape, const Batch& b) {
        return attn::cross_entropy(tape, model.forward(tape, b), b.labels, {.label_smoothing = o.label_smoothing});
      },
      [&] {
        const auto ev = evaluate(model, p.valid);
        return examples::Validation{ev.loss, ev.cm.accuracy(), ev.cm.macro_f1()};
      });
  res.history = log.history;
  res.train_seconds = log.train_seconds;
  if (!par.main()) return res;  // the final evaluation and the report are rank 0's

  // Final numbers come from the best checkpoint.
  attn::io::load(model, dir / "model.safetensors");
  model.eval();
  model.fold_embedding();  // inference from here on: the embedding folded into the BiLSTM
  const auto names = class_names(p.labels);
  auto ev = evaluate(model, p.valid);
  res.valid_acc = ev.cm.accuracy();
  res.valid_f1 = ev.cm.macro_f1();
  res.valid_report = attn::metrics::format_report(ev.cm, names);
  res.valid_confusion = attn::metrics::format_confusion_matrix(ev.cm, p.labels.names);
  for (std::size_t t = 0; t < kClasses; ++t)
    for (std::size_t c = 0; c < kClasses; ++c)
      res.confusion_rows.push_back(ev.cm.support(t) ? float(ev.cm.count(t, c)) / float(ev.cm.support(t)) : 0.0f);
  json evj = {{"valid", eval_json(ev, p.labels)}};
  fmt::print("\nvalidation ({} titles): accuracy {:.2f}%, macro-F1 {:.2f}%\n{}\nconfusion matrix (rows: true label, columns: predicted)\n{}",
             p.valid.size(), 100 * res.valid_acc, 100 * res.valid_f1, res.valid_report, res.valid_confusion);
  if (p.dev.size()) {
    auto dv = evaluate(model, p.dev);
    res.dev_acc = dv.cm.accuracy();
    res.dev_f1 = dv.cm.macro_f1();
    res.dev_report = attn::metrics::format_report(dv.cm, names);
    evj["dev"] = eval_json(dv, p.labels);
    fmt::print("\ndev.json ({} titles): accuracy {:.2f}%, macro-F1 {:.2f}%\n{}", p.dev.size(), 100 * res.dev_acc, 100 * res.dev_f1,
               res.dev_report);
  }
  if (p.test.size()) {
    write_test_predictions(dir / "tnews_predict.json", p, evaluate(model, p.test));
    fmt::print("test.json predictions: {}\n", (dir / "tnews_predict.json").string());
  }
  data::write_file_atomic(dir / "eval.json", evj.dump(2) + "\n");
  res.speed = bench_inference(model, p.valid.ids, 64, std::min(o.bench_seconds, 3.0), 0);
  fmt::print("inference: {}\n", res.speed.str());
  // Heatmaps: the example title, the first validation title, then --explain.
  const bool kw = o.data.keywords;
  res.heatmaps += heatmaps_html(model, p, kExampleTitle, "", kw);
  if (p.valid.size()) res.heatmaps += heatmaps_html(model, p, p.valid.text[0], p.valid.keywords[0], kw);
  for (auto& t : o.explain) res.heatmaps += heatmaps_html(model, p, t, "", kw);
  return res;
}

inline std::string sweep_table(const std::vector<RunResult>& runs) {
  const bool dev = !runs.empty() && runs[0].dev_acc >= 0;
  std::string t = fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>14} {:>11}\n", "heads", "valid acc", "macro-F1", "dev acc",
                              "dev F1", "train time", "infer samp/s", "parameters");
  for (auto& r : runs)
    t += fmt::format("{:>6} {:>9.2f}% {:>9.2f}% {:>10} {:>10} {:>10.0f}s {:>14.0f} {:>11}\n", r.heads, 100 * r.valid_acc, 100 * r.valid_f1,
                     dev ? fmt::format("{:.2f}%", 100 * r.dev_acc) : "-", dev ? fmt::format("{:.2f}%", 100 * r.dev_f1) : "-",
                     r.train_seconds, r.speed.samples_per_s, r.params);
  return t;
}

inline void write_report(const Options& o, const Prepared& p, const std::vector<RunResult>& runs) {
  examples::HtmlReport rep("attn: CLUE TNEWS news titles with a BiLSTM and single- and multi-head self-attention");
  rep.paragraph(fmt::format("Data: {} (validation: fixed-seed {:.0f}% stratified split of train.json, seed {}{}). "
                            "Characters as tokens{}; vocabulary {}. Model: Embedding({}, {}) -> BiLSTM<{}, {}> -> Attention<H, {}>{} "
                            "-> masked mean -> Linear({}, {}).",
                            o.data.dir, 100 * o.data.valid_fraction, o.train.seed, p.dev.size() ? "; dev.json evaluated" : "",
                            o.data.keywords ? ", keywords appended" : "", p.vocab.size(), p.vocab.size(), kEmbed, kEmbed, kHidden, kDim,
                            o.residual ? " + residual LayerNorm" : "", kDim, kClasses));
  rep.heading("Accuracy, macro-F1 and speed by head count");
  rep.preformatted(sweep_table(runs) + (runs.empty() ? "" : "inference: batch 64 on the validation titles\n"));
  std::vector<examples::Series> loss, acc;
  for (auto& r : runs) {
    examples::Series tl{fmt::format("train h{}", r.heads), {}, {}}, vl{fmt::format("valid h{}", r.heads), {}, {}},
        va{fmt::format("acc h{}", r.heads), {}, {}}, vf{fmt::format("F1 h{}", r.heads), {}, {}};
    for (auto& e : r.history) {
      const double x = double(e.epoch);
      tl.x.push_back(x), tl.y.push_back(e.train_loss), vl.x.push_back(x), vl.y.push_back(e.valid_loss);
      va.x.push_back(x), va.y.push_back(100 * e.valid_acc), vf.x.push_back(x), vf.y.push_back(100 * e.valid_f1);
    }
    loss.push_back(tl), loss.push_back(vl), acc.push_back(va), acc.push_back(vf);
  }
  rep.heading("Loss and accuracy curves");
  rep.raw(examples::svg_line_chart("cross-entropy loss", "epoch", loss) +
          examples::svg_line_chart("validation accuracy and macro-F1 (%)", "epoch", acc));
  const auto names = class_names(p.labels);
  for (auto& r : runs) {
    rep.heading(fmt::format("{} head{}: validation per class", r.heads, r.heads > 1 ? "s" : ""));
    rep.preformatted(r.valid_report);
    rep.raw(examples::svg_heatmap("confusion matrix, row-normalised (rows: true, columns: predicted)", names, names, r.confusion_rows));
    rep.preformatted(r.valid_confusion);
    if (!r.dev_report.empty()) {
      rep.heading(fmt::format("{} head{}: dev.json per class", r.heads, r.heads > 1 ? "s" : ""));
      rep.preformatted(r.dev_report);
    }
    rep.heading(fmt::format("{} head{}: attention heatmaps", r.heads, r.heads > 1 ? "s" : ""));
    rep.raw(r.heatmaps);
  }
  rep.write((fs::path(o.train.out) / "report.html").string());
  fmt::print("\nreport: {}\n", (fs::path(o.train.out) / "report.html").string());
}

/// A trained run directory: its config, vocabulary and label names.
struct Trained {
  json config;
  ModelConfig cfg;
  data::Vocab vocab;
  data::ClueLabels labels;
  std::size_t heads = 0;
};

inline Trained load_trained(const fs::path& dir) {
  Trained t;
  const auto cpath = (dir / "config.json").string();
  try {
    t.config = json::parse(data::read_file(dir / "config.json", 1 << 20));
    t.cfg = ModelConfig::from_json(t.config.at("model"));
    t.heads = t.config.at("heads").get<std::size_t>();
    for (auto& l : t.config.at("labels")) t.labels.add(l.at("label").get<std::string>(), l.at("label_desc").get<std::string>());
  } catch (const json::exception& e) {
    throw attn::FormatError(cpath, 1, std::string("not a clue run configuration: ") + e.what());
  }
  if (t.labels.size() != kClasses) throw attn::FormatError(cpath, 1, fmt::format("{} labels, expected {}", t.labels.size(), kClasses));
  t.vocab = data::Vocab::load(dir / "vocab.txt");
  if (t.vocab.size() != t.cfg.vocab) throw attn::FormatError((dir / "vocab.txt").string(), 1, "vocabulary size differs from config.json");
  return t;
}

template <std::size_t Heads>
int predict(const fs::path& dir, const Trained& tr, const std::vector<std::string>& texts, const std::string& keywords, std::size_t top) {
  TnewsClassifier<Heads> model(tr.cfg);
  attn::io::load(model, dir / "model.safetensors");
  model.eval();
  model.fold_embedding();  // inference from here on: the embedding folded into the BiLSTM
  const bool use_kw = tr.config.value("keywords", false);
  const data::ChineseCharTokenizer tok;
  const auto names = class_names(tr.labels);
  for (auto& text : texts) {
    data::TokenizeStats ts;
    const auto toks = tokens_of(tok, text, keywords, use_kw, &ts);
    if (ts.invalid) std::fprintf(stderr, "clue: note: %zu invalid UTF-8 sequence(s) replaced by U+FFFD\n", ts.invalid);
    const auto ids = encode(tr.vocab, toks, tr.cfg.max_len);
    attn::NoGrad ctx;
    attn::Tensor<float> w;
    auto b = make_batch({&ids}, {});
    auto pr = attn::softmax(ctx, model.forward(ctx, b, &w)).value();
    const std::size_t c = attn::argmax_rows(pr)[0];
    // The weight each character receives, averaged over heads and queries: with mean pooling this
    // is how much of the pooled vector comes from it.
    const std::size_t t = ids.size();
    std::vector<std::pair<float, std::size_t>> recv(t);
    for (std::size_t j = 0; j < t; ++j) {
      float s = 0;
      for (std::size_t h = 0; h < Heads; ++h)
        for (std::size_t i = 0; i < t; ++i) s += w(std::size_t(0), h, i, j);
      recv[j] = {s / float(Heads * t), j};
    }
    std::stable_sort(recv.begin(), recv.end(), [](auto& a, auto& b) { return a.first > b.first; });
    fmt::print("{}\t{}\t{:.4f}\t", names[c], tr.labels.names[c], pr(0, c));
    for (std::size_t k = 0; k < std::min(top, t); ++k) {
      const std::size_t j = recv[k].second;
      fmt::print("{}{}({:.3f})", k ? " " : "", j < toks.size() ? toks[j] : "<unk>", recv[k].first);
    }
    fmt::print("\n");
  }
  return 0;
}

template <std::size_t Heads>
void run_bench(const Options& o) {
  std::optional<Trained> tr;
  if (!o.model_dir.empty()) tr = load_trained(o.model_dir);
  DataOptions d = o.data;
  if (tr) {  // the model's own preprocessing and validation split
    d.keywords = tr->config.value("keywords", false);
    d.max_len = tr->cfg.max_len;
    d.seed = tr->config.value("seed", d.seed);
    d.valid_fraction = tr->config.value("valid_fraction", d.valid_fraction);
  }
  auto p = prepare(d, tr ? &tr->vocab : nullptr);
  ModelConfig cfg = tr ? tr->cfg
                       : ModelConfig{.vocab = p.vocab.size(), .max_len = o.data.max_len, .dropout = o.dropout, .attn_dropout = o.attn_dropout,
                                     .residual = o.residual};
  TnewsClassifier<Heads> model(cfg);
  if (tr) attn::io::load(model, fs::path(o.model_dir) / "model.safetensors");
  else model.init(o.train.seed);
  model.eval();
  if (o.fold) model.fold_embedding();  // the embedding folded into the BiLSTM's input projections
  fmt::print("bench: {} head{}, {}{} ({} thread(s)); inputs: the validation titles\n", Heads, Heads > 1 ? "s" : "",
             tr ? "trained model " + o.model_dir : std::string("untrained model"), o.fold ? "" : ", embedding not folded",
             attn::cpu::threads());
  auto r = bench_inference(model, p.valid.ids, 64, o.bench_seconds, o.bench_latency, true, attn::cpu_gemm_ceiling_gflops(2048, 5, 3.0));
  fmt::print("{}\n", r.str());
  fmt::print("BENCH {}\n", json{{"heads", Heads}, {"threads", attn::cpu::threads()}, {"titles", r.titles}, {"mean_len", r.mean_len},
                                {"batch64_samples_per_s", r.samples_per_s}, {"batch64_best_samples_per_s", r.best_samples_per_s},
                                {"batch64_padding", r.padding}, {"batch64_sorted_samples_per_s", r.sorted_samples_per_s},
                                {"batch64_sorted_padding", r.sorted_padding}, {"batch1_median_ms", r.b1_median_ms},
                                {"batch1_p99_ms", r.b1_p99_ms}, {"mflop_per_title", r.mflop_per_title},
                                {"ceiling_gflops", r.ceiling_gflops}, {"bound_samples_per_s", r.bound_samples_per_s},
                                {"keywords", d.keywords}, {"folded", o.fold}}
                                   .dump());
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
  Options o;
  CLI::App app{"CLUE TNEWS news-title classification with a BiLSTM and single- or multi-head self-attention (attn)"};
  app.set_help_all_flag("--help-all");
  app.add_option("--data", o.data.dir, "tnews_public directory: labels.json, train.json (dev.json, test.json when present)");
  app.add_option("--heads", o.heads, "attention heads, one of 1, 2, 4, 8 (default: nn::recommended_heads(256))");
  app.add_flag("--sweep", o.sweep, "train every head count 1, 2, 4, 8 and print the ablation table");
  examples::add_training_flags(app, o.train);
  app.add_option("--dropout", o.dropout, "dropout on embeddings, the attention output and the pooled features")->check(CLI::Range(0.0, 0.95));
  app.add_option("--attn-dropout", o.attn_dropout, "dropout on the attention weights")->check(CLI::Range(0.0, 0.95));
  app.add_option("--label-smoothing", o.label_smoothing, "label smoothing of the training loss")->check(CLI::Range(0.0, 1.0));
  app.add_flag("!--no-residual", o.residual, "pool the attention output itself (the plain R2 model), no residual + LayerNorm");
  app.add_option("--max-len", o.data.max_len, "characters kept per title (keywords included)")->check(CLI::PositiveNumber);
  app.add_option("--min-freq", o.data.min_freq, "minimum character count for the vocabulary");
  app.add_option("--max-vocab", o.data.max_vocab, "maximum vocabulary size, <pad> and <unk> included (0: no limit)");
  app.add_flag("--keywords", o.data.keywords, "append each title's keywords after a <sep> token");
  app.add_flag("--skip-bad-lines", o.data.skip_bad_lines, "skip and count malformed JSON lines instead of stopping at the first");
  app.add_option("--valid-fraction", o.data.valid_fraction, "fraction of train.json held out for validation (fixed seed)")
      ->check(CLI::Range(0.01, 0.9));
  app.add_option("--threads", o.threads, "threads (0: ATTN_NUM_THREADS, OMP_NUM_THREADS or all cores)");
  app.add_option("--explain", o.explain, "extra title(s) whose attention heatmaps go into the report");
  app.add_option("--limit", o.data.limit, "use only the first N lines of train.json (quick runs)");
  app.add_flag("--bench", o.bench, "measure inference: samples/s at batch 64 and batch-1 latency on the validation titles");
  app.add_option("--model", o.model_dir, "with --bench: a trained run directory, e.g. runs/clue/h4 (default: an untrained model)");
  app.add_option("--bench-seconds", o.bench_seconds, "with --bench: seconds of batch-64 passes")->check(CLI::PositiveNumber);
  app.add_option("--bench-latency", o.bench_latency, "with --bench: titles timed one at a time (0: skip)");
  app.add_flag("!--no-fold", o.fold, "with --bench: run the embedding and the BiLSTM's input projection as two layers, not folded into one table");
  std::string pred_dir, keywords;
  std::vector<std::string> texts;
  std::size_t top = 5;
  auto* pred = app.add_subcommand("predict", "classify titles with a trained model");
  pred->add_option("--model", pred_dir, "a run directory, e.g. runs/clue/h4")->required();
  pred->add_option("--keywords", keywords, "comma-separated keywords (used when the model was trained with --keywords)");
  pred->add_option("--top", top, "characters shown, by attention received");
  pred->add_option("text", texts, "titles to classify (default: an example title)");
  CLI11_PARSE(app, argc, argv);
  o.data.seed = o.train.seed;
  try {
    attn::cpu::set_threads(int(o.threads));
    if (*pred) {
      if (texts.empty()) texts.push_back(kExampleTitle);
      auto tr = load_trained(pred_dir);
      return attn::dispatch<1, 2, 4, 8>(tr.heads, "config.json heads",
                                        [&]<std::size_t H>() { return predict<H>(pred_dir, tr, texts, keywords, top); });
    }
    std::size_t heads = o.heads;
    if (o.bench && !o.model_dir.empty()) heads = load_trained(o.model_dir).heads;
    if (!o.sweep) attn::dispatch<1, 2, 4, 8>(heads, "--heads", []<std::size_t>() {});  // validate before loading data
    fmt::print("attn CLUE TNEWS example: {} thread(s){}\n", attn::cpu::threads(),
               par->world() > 1 ? fmt::format(" x {} processes (global batch {})", par->world(), o.train.batch * std::size_t(par->world())) : "");
    if (attn::cpu::threads() > 1 && !std::getenv("OMP_WAIT_POLICY"))
      fmt::print("hint: on a machine shared with other jobs, OMP_WAIT_POLICY=PASSIVE keeps idle threads from spinning\n");
    if (o.bench) {
      attn::dispatch<1, 2, 4, 8>(heads, "--heads", [&]<std::size_t H>() { run_bench<H>(o); });
      return 0;
    }
    auto p = prepare(o.data);
    std::vector<RunResult> runs;
    if (o.sweep) {
      runs.push_back(train_variant<1>(o, p, *par));
      runs.push_back(train_variant<2>(o, p, *par));
      runs.push_back(train_variant<4>(o, p, *par));
      runs.push_back(train_variant<8>(o, p, *par));
      fmt::print("\n{}", sweep_table(runs));
    } else {
      attn::dispatch<1, 2, 4, 8>(heads, "--heads", [&]<std::size_t H>() { runs.push_back(train_variant<H>(o, p, *par)); });
    }
    if (!par->main()) return 0;
    fs::create_directories(o.train.out);
    json sj = json::array();
    for (auto& r : runs)
      sj.push_back({{"heads", r.heads}, {"valid_accuracy", r.valid_acc}, {"valid_macro_f1", r.valid_f1},
                    {"dev_accuracy", r.dev_acc < 0 ? json(nullptr) : json(r.dev_acc)},
                    {"dev_macro_f1", r.dev_f1 < 0 ? json(nullptr) : json(r.dev_f1)}, {"train_seconds", r.train_seconds},
                    {"inference_samples_per_s", r.speed.samples_per_s}, {"parameters", r.params}});
    data::write_file_atomic(fs::path(o.train.out) / "summary.json", sj.dump(2) + "\n");
    write_report(o, p, runs);
    const auto& last = runs.back();
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
