// SPDX-License-Identifier: MIT
// Training and evaluating one head count of the CLUE model on a backend (train_variant<B>),
// instantiated for the CPU by train.cpp and for CUDA by cuda.cu (train_heads, train_heads_cuda in run.hpp).
#pragma once
#include "run.hpp"

#include <attn/attn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "../common/adversarial.hpp"
#include "../common/device.hpp"
#include "../common/report.hpp"
#include "bench.hpp"

namespace clue {

struct EvalResult {
  double loss = 0;
  attn::metrics::ConfusionMatrix cm;  // the model's classes
  std::vector<int> predictions;
};

/// Evaluates in length-sorted batches; labels < 0 (unlabelled) count in neither loss nor metrics.
template <class Model>
EvalResult evaluate(const Model& model, const Encoded& e, std::size_t batch = 128) {
  EvalResult r{.cm = attn::metrics::ConfusionMatrix(model.cfg.classes), .predictions = {}};
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
    auto hb = make_batch(seqs, lab);
    for (std::size_t k = 0; k < seqs.size(); ++k) hb.labels(k) = lab[k] < 0 ? -100 : lab[k];  // -100: ignored
    const auto b = to_backend<examples::model_backend_t<Model>>(hb);
    auto logits = model.forward(ctx, b);
    const std::size_t n = std::size_t(std::count_if(lab.begin(), lab.end(), [](int y) { return y >= 0; }));
    if (n) loss += double(examples::to_host(attn::cross_entropy(ctx, logits, b.labels).value())[0]) * double(n);
    labelled += n;
    auto pred = attn::argmax_rows(examples::to_host(logits.value()));
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
  for (std::size_t c = 0; c < labels.size(); ++c) {
    const auto s = ev.cm.scores(c);
    classes.push_back({{"label", labels.names[c]}, {"label_desc", labels.descriptions[c]}, {"precision", s.precision},
                       {"recall", s.recall}, {"f1", s.f1}, {"support", s.support}});
    json row = json::array();
    for (std::size_t p = 0; p < labels.size(); ++p) row.push_back(ev.cm.count(c, p));
    cm.push_back(row);
  }
  return {{"examples", ev.cm.total()}, {"loss", ev.loss}, {"accuracy", ev.cm.accuracy()}, {"macro_f1", ev.cm.macro_f1()},
          {"classes", classes}, {"confusion", cm}};
}

/// Attention of a model for one title: per head, a (T x T) heatmap, and the prediction.
template <class Model>
std::string heatmaps_html(const Model& model, const Prepared& p, const std::string& text, const std::string& keywords, bool use_keywords) {
  const std::size_t H = model.heads();
  const data::ChineseCharTokenizer tok;
  auto toks = tokens_of(tok, text, keywords, use_keywords);
  auto ids = encode(p.vocab, toks, model.cfg.max_len);
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < ids.size(); ++i) shown.push_back(i < toks.size() ? toks[i] : "<unk>");
  attn::NoGrad ctx;
  using B = examples::model_backend_t<Model>;
  attn::Tensor<float, attn::AnyShape, B> wd;
  const auto b = to_backend<B>(make_batch({&ids}, {}));
  const auto pr = examples::to_host(attn::softmax(ctx, model.forward(ctx, b, &wd)).value());
  const auto w = examples::to_host(wd);
  const std::size_t c = attn::argmax_rows(pr)[0];
  const std::string shown_text = text + (use_keywords && !keywords.empty() ? " (keywords: " + keywords + ")" : "");
  std::string html = fmt::format("<p><b>{}</b> &rarr; {} with probability {:.3f}</p><div>", examples::html_escape(shown_text),
                                 examples::html_escape(class_names(p.labels)[c]), pr(0, c));
  // At most the first 32 characters are drawn, which keeps a sweep's report a few MB.
  const std::size_t t = std::min<std::size_t>(ids.size(), 32), full = ids.size();
  shown.resize(t);
  if (t < full) html += fmt::format("<p>(the first {} of {} characters)</p>", t, full);
  return html + examples::head_heatmaps(w, shown, H) + "</div>";
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

/// The training loss of batch b: cross-entropy with label smoothing and the class weights (none:
/// empty); with --adversarial eps, the mean of that loss on the clean embeddings and on embeddings
/// moved by eps along its gradient (examples::adversarial_loss).
template <class Model, class B>
attn::Var<float, attn::AnyShape, B> training_loss(attn::Tape& tape, const Model& model, const BatchOn<B>& b, const Options& o,
                                                  const std::vector<double>& weights) {
  using V = attn::Var<float, attn::AnyShape, B>;
  const attn::CrossEntropyOptions ce{.label_smoothing = o.label_smoothing, .weight = weights};
  auto objective = [&](attn::Tape& t, const V* delta, float scale) {
    V loss = attn::cross_entropy(t, model.forward(t, b, nullptr, delta), b.labels, ce).erased();
    return scale == 1.0f ? loss : attn::scale(t, loss, scale).erased();
  };
  if (!(o.adversarial > 0)) return objective(tape, nullptr, 1.0f);
  return examples::adversarial_loss<B>(tape, attn::Dims{b.size(), b.ids.size(1), kEmbed}, o.adversarial, objective);
}

template <class B>
RunResult train_variant(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  const fs::path& dir = plan.dir;
  // A resumed run's configuration is the directory's (its options equal ours: inspect_run_dir).
  const ModelConfig cfg = plan.resume ? resumed(plan, heads).cfg
                                      : ModelConfig{.vocab = p.vocab.size(), .max_len = o.data.max_len, .dropout = o.dropout,
                                                    .attn_dropout = o.attn_dropout, .residual = o.residual, .classes = p.labels.size(),
                                                    .rnn = o.rnn};
  if (cfg.classes != p.labels.size())
    throw attn::FormatError((fs::path(o.data.dir) / "labels.json").string(), 1,
                            fmt::format("{} classes, but the run's model has {}", p.labels.size(), cfg.classes));
  auto model = attn::nn::skip_init<TnewsClassifier<B>>(cfg, heads);  // drawn by init next
  model.init(o.train.seed);
  RunResult res;
  res.heads = heads;
  res.params = model.parameter_count();
  // --class-weights balanced: n / (C n_c) over the training split's labels (C classes); sqrt: its square root;
  // none: unweighted. The header gives the range of the classes present.
  const std::vector<double> weights =
      o.class_weights == "none" ? std::vector<double>{}
                                : data::class_weights(p.train.labels, cfg.classes, o.class_weights == "sqrt" ? 0.5 : 1.0);
  std::string weight_range;
  if (!weights.empty()) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (double w : weights)
      if (w > 0) lo = std::min(lo, w), hi = std::max(hi, w);
    weight_range = hi > 0 ? fmt::format("; class weights {} {:.3f} to {:.3f}", o.class_weights, lo, hi) : "";
  }
  const std::string training_extras =
      (o.adversarial > 0 ? fmt::format("; adversarial training eps {}", o.adversarial) : "") + weight_range;
  if (heads)
    fmt::print("\n== {} ({}<{}, {}> -> Attention<{}, {}>{}), {} parameters, on {}\n", heads_label(heads), cfg.rnn_label(), kEmbed, kHidden,
               heads, kDim, training_extras, res.params, B::name);
  else
    fmt::print("\n== no attention, the ablation ({}<{}, {}> -> {}mean pooling{}), {} parameters, on {}\n", cfg.rnn_label(), kEmbed,
               kHidden, cfg.residual ? "LayerNorm -> " : "", training_extras, res.params, B::name);

  json labels = json::array();
  for (std::size_t c = 0; c < p.labels.size(); ++c) labels.push_back({{"label", p.labels.names[c]}, {"label_desc", p.labels.descriptions[c]}});
  json config = {{"model", cfg.to_json()}, {"heads", heads}, {"embed", kEmbed}, {"hidden", kHidden}, {"labels", labels},
                 {"keywords", o.data.keywords}, {"seed", o.train.seed}, {"batch", o.train.batch}, {"lr", o.train.lr},
                 {"weight_decay", o.train.weight_decay}, {"label_smoothing", o.label_smoothing}, {"min_freq", o.data.min_freq},
                 {"valid_fraction", o.data.valid_fraction}, {"data", o.data.dir}, {"options", run_options(o, heads)}};
  if (par.main()) examples::write_run_start(plan, p.vocab, config);  // every check has passed: the first write
  par.barrier();  // the other processes read the checkpoints begin_writing() committed

  std::vector<std::size_t> lengths;
  for (auto& x : p.train.ids) lengths.push_back(x.size());
  const auto log = examples::train(
      model, o.train, plan, heads, par, lengths,
      [&](const std::vector<std::size_t>& idx) {
        std::vector<const std::vector<std::int32_t>*> seqs;
        std::vector<int> lab;
        for (auto i : idx) {
          seqs.push_back(&p.train.ids[i]);
          lab.push_back(p.train.labels[i]);
        }
        return to_backend<B>(make_batch(seqs, lab));
      },
      [&](attn::Tape& tape, const BatchOn<B>& b) { return training_loss(tape, model, b, o, weights); },
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
  if constexpr (B::host_accessible) model.fold_embedding();  // inference from here on: the embedding folded into the recurrent layer
  const auto names = class_names(p.labels);
  auto ev = evaluate(model, p.valid);
  res.valid_acc = ev.cm.accuracy();
  res.valid_f1 = ev.cm.macro_f1();
  res.valid_report = attn::metrics::format_report(ev.cm, names);
  res.valid_confusion = attn::metrics::format_confusion_matrix(ev.cm, p.labels.names);
  for (std::size_t t = 0; t < cfg.classes; ++t)
    for (std::size_t c = 0; c < cfg.classes; ++c)
      res.confusion_rows.push_back(ev.cm.support(t) ? float(ev.cm.count(t, c)) / float(ev.cm.support(t)) : 0.0f);
  json evj = {{"valid", eval_json(ev, p.labels)}};
  fmt::print("\nvalidation ({} titles): accuracy {:.2f}%, macro-F1 {:.2f}%\n{}\nconfusion matrix (rows: true label, columns: predicted)\n{}",
             p.valid.size(), 100 * res.valid_acc, 100 * res.valid_f1, res.valid_report, res.valid_confusion);
  if constexpr (B::host_accessible) {  // the same model served with dynamic int8 quantization (predict and --bench --precision int8)
    const auto q = attn::nn::quantize_dynamic(model);
    const attn::PrecisionScope int8(attn::Precision::int8);
    const auto e8 = evaluate(model, p.valid);
    res.valid_acc_int8 = e8.cm.accuracy();
    res.valid_f1_int8 = e8.cm.macro_f1();
    evj["valid_int8"] = eval_json(e8, p.labels);
    fmt::print("\nint8 inference (nn::quantize_dynamic, {} weights): validation accuracy {:.2f}% ({:+.2f} points), macro-F1 {:.2f}% ({:+.2f})\n",
               q.weights, 100 * res.valid_acc_int8, 100 * (res.valid_acc_int8 - res.valid_acc), 100 * res.valid_f1_int8,
               100 * (res.valid_f1_int8 - res.valid_f1));
  }
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
    const fs::path out = dir / predictions_file(o.data.dir);
    write_test_predictions(out, p, evaluate(model, p.test));
    fmt::print("test.json predictions: {}\n", out.string());
  }
  data::write_file_atomic(dir / "eval.json", evj.dump(2) + "\n");
  res.speed = bench_inference(model, p.valid.ids, 64, std::min(o.bench_seconds, 3.0), 0);
  fmt::print("inference: {}\n", res.speed.str());
  // Heatmaps: the example title, the first validation title, then --explain.
  if (heads == 0) return res;  // no attention to draw
  const bool kw = o.data.keywords;
  res.heatmaps += heatmaps_html(model, p, kExampleTitle, "", kw);
  if (p.valid.size()) res.heatmaps += heatmaps_html(model, p, p.valid.text[0], p.valid.keywords[0], kw);
  for (auto& t : o.explain) res.heatmaps += heatmaps_html(model, p, t, "", kw);
  return res;
}

}  // namespace clue
