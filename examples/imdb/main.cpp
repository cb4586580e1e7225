// SPDX-License-Identifier: MIT
// IMDb sentiment with single- and multi-head self-attention: trains one head count (--heads) or
// all of them (--sweep), the same model without attention (the ablation) and, when asked, an
// ensemble with NB-LR; reports validation accuracy overall and by review length against the NB-LR
// baseline, the attention's entropy per head, writes checkpoints, metrics.jsonl and a report.html
// with loss curves and per-head attention heatmaps; `predict` classifies text with a trained model
// and shows the words it attended to most.
//   imdb --data examples/imdb/sample/aclImdb --heads 8 --out runs/imdb
//   imdb predict --model runs/imdb/h8 "The movie was not good, but the acting was brilliant."
#include <attn/attn.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "../common/device.hpp"
#include "../common/dump.hpp"
#include "../common/json_files.hpp"
#include "../common/report.hpp"
#include "../common/run_dir.hpp"
#include "run.hpp"
#include "serve.hpp"

namespace imdb {

inline NbLrConfig nblr_config(const Options& o) {
  NbLrConfig c;
  c.buckets = o.nblr_buckets, c.order = o.nblr_order, c.c = o.nblr_c, c.folds = o.nblr_folds;
  return c;
}

/// Fits NB-LR on the training portion and scores every review (the training reviews by
/// cross-fitting); prints NB-LR's own validation accuracy.
inline void fit_nblr_scores(const Options& o, Prepared& p) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto c = nblr_config(o);
  auto grams = [&](const std::vector<std::vector<std::int32_t>>& xs) {
    std::vector<std::vector<std::int32_t>> g(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) g[i] = distinct_ngrams(xs[i], c);
    return g;
  };
  auto scores = [](const NbLr& m, const std::vector<std::vector<std::int32_t>>& g) {
    std::vector<float> z(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) z[i] = m.logit(g[i]);
    return z;
  };
  {
    const auto tg = grams(p.train);
    p.train_nb = cross_fit_nblr(tg, p.train_y, c, o.train.seed);
    p.nblr_scale = platt_scale(p.train_nb, p.train_y);
    std::vector<std::size_t> all(tg.size());
    std::iota(all.begin(), all.end(), 0);
    p.nblr = fit_nblr(tg, p.train_y, all, c);
  }
  p.valid_nb = scores(p.nblr, grams(p.valid));
  if (!p.test.empty()) p.test_nb = scores(p.nblr, grams(p.test));
  std::size_t ok = 0;
  for (std::size_t i = 0; i < p.valid.size(); ++i) ok += (p.valid_nb[i] > 0) == (p.valid_y[i] == 1);
  p.nblr_valid_acc = p.valid.empty() ? 0.0 : double(ok) / double(p.valid.size());
  if (!p.test.empty()) {
    std::size_t tok = 0;
    for (std::size_t i = 0; i < p.test.size(); ++i) tok += (p.test_nb[i] > 0) == (p.test_y[i] == 1);
    p.nblr_test_acc = double(tok) / double(p.test.size());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("NB-LR baseline ({}-grams, {} buckets, C {}): {:.2f}% validation accuracy; {}-fold scores for training, calibrated "
             "as {:.3f} * score {:+.3f}; {:.1f}s\n",
             c.order, c.buckets, c.c, 100 * p.nblr_valid_acc, c.folds, p.nblr_scale.a, p.nblr_scale.b, secs);
}

/// --limit N: keeps N of the reviews. The reader returns the negative reviews, then the positive
/// ones: the N kept are spread evenly over both (review floor(i * size / N) for i < N), so that the
/// classes keep their proportions.
inline void limit_reviews(std::vector<data::Review>& reviews, std::size_t limit) {
  const std::size_t found = reviews.size();
  if (!limit || found <= limit) return;
  std::vector<data::Review> kept;
  kept.reserve(limit);
  const std::size_t q = found / limit, r = found % limit;  // i * r < limit² < found²: no overflow
  for (std::size_t i = 0; i < limit; ++i) kept.push_back(std::move(reviews[i * q + i * r / limit]));
  reviews = std::move(kept);
}

/// Reads and encodes the reviews; the vocabulary is built from the training portion unless
/// `fixed` is given (a resumed run's own). An empty training or validation portion is an error; one
/// holding a single class gets a warning. With --pretrain-epochs and new_runs (a run that starts
/// afresh), the skip-gram tables are pretrained here, once for every run.
inline Prepared prepare(const Options& o, const data::Vocab* fixed = nullptr, bool new_runs = true) {
  const data::EnglishTokenizer tok;
  auto t0 = std::chrono::steady_clock::now();
  examples::require_directory(o.data, "aclImdb root directory (holding train/pos and train/neg)");
  auto train_split = data::read_imdb(o.data, "train");
  auto& reviews = train_split.reviews;
  const std::size_t found = reviews.size();
  limit_reviews(reviews, o.limit);
  const std::string train_dir = (fs::path(o.data) / "train").string();
  const auto too_few = [&](const std::string& why) {
    return attn::ArgumentError(fmt::format("{}: {} review{} found{}: {}", train_dir, found, found == 1 ? "" : "s",
                                           o.limit ? fmt::format(", {} used (--limit {})", reviews.size(), o.limit) : "", why));
  };
  if (reviews.size() < 2) throw too_few("training needs a training and a validation portion, at least 2 reviews");
  std::vector<int> labels;
  for (auto& r : reviews) labels.push_back(r.label);
  auto split = data::stratified_split(labels, o.valid_fraction, o.train.split());
  if (split.train.empty() || split.valid.empty())
    throw too_few(fmt::format("--valid-fraction {} leaves the {} portion empty", o.valid_fraction, split.train.empty() ? "training" : "validation"));
  std::vector<std::vector<std::string>> toks(reviews.size());
  for (std::size_t i = 0; i < reviews.size(); ++i) toks[i] = tok(reviews[i].text);
  Prepared p;
  if (fixed) {
    p.vocab = *fixed;
  } else {
    data::TokenCounts counts;
    for (auto i : split.train) counts.add(toks[i]);
    p.vocab = data::Vocab::build(counts, {.min_freq = o.min_freq, .max_size = o.max_vocab});
  }
  for (auto i : split.train) {
    p.train.push_back(encode(p.vocab, toks[i]));
    p.train_y.push_back(labels[i]);
  }
  for (auto i : split.valid) {
    p.valid.push_back(encode(p.vocab, toks[i]));
    p.valid_y.push_back(labels[i]);
    p.valid_words.push_back(word_count(toks[i]));
  }
  std::error_code ec;
  const fs::path test_dir = fs::path(o.data) / "test";
  data::ImdbStats test_stats;
  if (fs::exists(fs::symlink_status(test_dir, ec))) {  // the standard test split, when the user has it
    if (!fs::is_directory(test_dir, ec)) throw attn::IoError(test_dir.string(), "exists but is not a directory (the aclImdb test split)");
    auto test = data::read_imdb(o.data, "test");
    test_stats = test.stats;
    limit_reviews(test.reviews, o.limit);  // a quick run scores a test portion of the same size
    for (auto& r : test.reviews) {
      auto t = tok(r.text);
      p.test.push_back(encode(p.vocab, t));
      p.test_y.push_back(r.label);
      p.test_words.push_back(word_count(t));
    }
  }
  std::size_t train_tokens = 0;
  for (auto& x : p.train) train_tokens += x.size();
  p.ngram_buckets = o.ngram_buckets ? *o.ngram_buckets : auto_ngram_buckets(train_tokens);
  examples::warn_one_class(p.train_y, {"negative", "positive"}, "training");
  examples::warn_one_class(p.valid_y, {"negative", "positive"}, "validation");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto positive = [](const std::vector<int>& y) { return std::count(y.begin(), y.end(), 1); };
  fmt::print("data: {} train ({} positive) / {} validation reviews (fixed-seed {:.0f}% split of {}/train, seed {}){}; vocabulary {} (min freq {}); "
             "n-gram buckets {}; {:.1f}s\n",
             p.train.size(), positive(p.train_y), p.valid.size(), 100 * o.valid_fraction, o.data, o.train.split(),
             p.test.empty() ? "" : fmt::format(", {} test reviews", p.test.size()), p.vocab.size(), o.min_freq, p.ngram_buckets, secs);
  if (train_split.stats.invalid_utf8) fmt::print("data: {} invalid UTF-8 sequences replaced\n", train_split.stats.invalid_utf8);
  if (train_split.stats.skipped)
    fmt::print("data: {} entr{} of {}/{{pos,neg}} not *.txt review files, skipped\n", train_split.stats.skipped,
               train_split.stats.skipped == 1 ? "y" : "ies", train_dir);
  if (test_stats.invalid_utf8) fmt::print("data: {} invalid UTF-8 sequences replaced in {}\n", test_stats.invalid_utf8, test_dir.string());
  if (test_stats.skipped)
    fmt::print("data: {} entr{} of {}/{{pos,neg}} not *.txt review files, skipped\n", test_stats.skipped, test_stats.skipped == 1 ? "y" : "ies",
               test_dir.string());
  if (o.nblr_buckets) fit_nblr_scores(o, p);
  if (o.pretrain.epochs && new_runs) {  // resumed runs continue from their checkpoints
    auto opt = o.pretrain;
    opt.seed = o.train.seed;
    p.pretrained = pretrain_skipgram(p.train, p.vocab.size(), kDim, p.ngram_buckets, o.ngram_order, opt, [](std::size_t e, double loss) {
      fmt::print("pretraining: skip-gram epoch {}, loss {:.4f} per context word\n", e, loss);
    });
    fmt::print("pretraining: word and n-gram embeddings from {} skip-gram epoch{} over the training reviews; {:.1f}s\n", o.pretrain.epochs,
               o.pretrain.epochs == 1 ? "" : "s", p.pretrained.seconds);
  }
  return p;
}



/// The runs of each model (RunSpec::model_name), in the order of --seeds; without --seeds, one
/// group per run.
inline std::vector<std::vector<const RunResult*>> seed_groups(const std::vector<RunResult>& runs) {
  std::vector<std::vector<const RunResult*>> groups;
  for (auto& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g[0]->spec.model_name() == r.spec.model_name(); });
    if (it == groups.end() || !r.spec.seed) groups.push_back({&r});
    else it->push_back(&r);
  }
  return groups;
}

/// The results table: one row per run, and NB-LR alone (the baseline) when it was fitted.
inline std::string results_table(const Prepared& p, const std::vector<RunResult>& runs) {
  std::string t = fmt::format("{:<24} {:>10} {:>10} {:>11} {:>12}\n", "model", "valid acc", "test acc", "train time", "parameters");
  for (auto& r : runs)
    t += fmt::format("{:<24} {:>9.2f}% {:>10} {:>10.0f}s {:>12}\n", r.spec.label(), 100 * r.best_valid,
                     r.test_acc < 0 ? "-" : fmt::format("{:.2f}%", 100 * r.test_acc), r.train_seconds, r.params);
  for (auto& g : seed_groups(runs)) {  // --seeds: each model's mean over its seeds
    if (g.size() < 2) continue;
    double valid = 0, test = 0, secs = 0;
    bool tested = true;
    for (auto* r : g) valid += r->best_valid / double(g.size()), secs += r->train_seconds / double(g.size()), tested &= r->test_acc >= 0;
    for (auto* r : g) test += r->test_acc / double(g.size());
    t += fmt::format("{:<24} {:>9.2f}% {:>10} {:>10.0f}s {:>12}\n", fmt::format("{}: mean of {}", g[0]->spec.model_label(), g.size()),
                     100 * valid, tested ? fmt::format("{:.2f}%", 100 * test) : "-", secs, g[0]->params);
  }
  if (p.nblr_valid_acc >= 0)
    t += fmt::format("{:<24} {:>9.2f}% {:>10} {:>11} {:>12}\n", "NB-LR alone (baseline)", 100 * p.nblr_valid_acc,
                     p.nblr_test_acc < 0 ? "-" : fmt::format("{:.2f}%", 100 * p.nblr_test_acc), "-", "-");
  return t;
}

/// Under --seeds: each model's validation accuracy seed by seed, and the differences that tell the
/// head count's effect from the noise of one initialisation: every head count against the fewest
/// heads, and every attention model against the ablation, seed by seed. Empty without --seeds.
inline std::string seeds_table(const std::vector<RunResult>& runs) {
  const auto groups = seed_groups(runs);
  if (groups.empty() || groups[0].size() < 2) return {};
  const auto pct = [](double v) { return fmt::format("{:.2f}", 100 * v); };
  std::string t;
  std::vector<std::string> seeds;
  for (auto* r : groups[0]) seeds.push_back(std::to_string(*r->spec.seed));
  t += fmt::format("validation accuracy by seed ({}), on one validation split:\n", fmt::join(seeds, " / "));
  for (auto& g : groups) {
    std::vector<std::string> v;
    double mean = 0, lo = 1, hi = 0;
    for (auto* r : g) v.push_back(pct(r->best_valid)), mean += r->best_valid / double(g.size()), lo = std::min(lo, r->best_valid), hi = std::max(hi, r->best_valid);
    t += fmt::format("  {:<16} {}%  mean {:.2f}%, spread {:.2f} points\n", g[0]->spec.model_label(), fmt::join(v, " / "), 100 * mean, 100 * (hi - lo));
  }
  const auto diff = [&](const std::vector<const RunResult*>& a, const std::vector<const RunResult*>& b) {
    std::vector<std::string> d;
    double mean = 0;
    std::size_t ahead = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double x = a[i]->best_valid - b[i]->best_valid;
      d.push_back(fmt::format("{:+.2f}", 100 * x));
      mean += x / double(a.size());
      ahead += x > 0;
    }
    t += fmt::format("  {} - {}: {} points (mean {:+.2f}; ahead on {} of {} seeds)\n", a[0]->spec.model_label(), b[0]->spec.model_label(),
                     fmt::join(d, " / "), 100 * mean, ahead, a.size());
  };
  const std::vector<const RunResult*>* fewest = nullptr;
  const std::vector<const RunResult*>* ablation = nullptr;
  for (auto& g : groups) {
    if (g[0]->spec.variant == Variant::attention && (!fewest || g[0]->heads < (*fewest)[0]->heads)) fewest = &g;
    if (g[0]->spec.variant == Variant::ablation) ablation = &g;
  }
  for (auto& g : groups)
    if (g[0]->spec.variant == Variant::attention && fewest && &g != fewest) diff(g, *fewest);
  for (auto& g : groups)
    if (g[0]->spec.variant != Variant::ablation && ablation) diff(g, *ablation);
  return t;
}

/// Validation (or, with test, aclImdb/test) accuracy by review length, one column per run.
inline std::string buckets_table(const std::vector<RunResult>& runs, bool test = false) {
  if (runs.empty() || runs[0].bucket_labels.empty() || (test && runs[0].test_bucket_counts.empty())) return {};
  const auto& counts = test ? runs[0].test_bucket_counts : runs[0].bucket_counts;
  std::string bt = fmt::format("{:>10}", "words");
  for (auto& r : runs) bt += fmt::format(" {:>12}", r.spec.name());
  bt += fmt::format(" {:>8}\n", "reviews");
  for (std::size_t k = 0; k < runs[0].bucket_labels.size(); ++k) {
    bt += fmt::format("{:>10}", runs[0].bucket_labels[k]);
    for (auto& r : runs)
      bt += counts[k] ? fmt::format(" {:>11.2f}%", 100 * (test ? r.test_bucket_acc[k] : r.bucket_acc[k])) : fmt::format(" {:>12}", "-");
    bt += fmt::format(" {:>8}\n", counts[k]);
  }
  return bt;
}

/// Attention entropy per head on validation (fraction of uniform), one row per run and layer.
inline std::string entropy_table(const std::vector<RunResult>& runs) {
  std::string t;
  for (auto& r : runs)
    for (std::size_t l = 0; l < r.entropy.per_head.size(); ++l) {
      const auto& e = r.entropy.per_head[l];
      double mean = 0;
      for (double v : e) mean += v / double(e.size());
      t += fmt::format("{:<24} {:>5} {:>6.3f} ", r.spec.label(), l + 1, mean);
      for (double v : e) t += fmt::format(" {:.2f}", v);
      t += "\n";
    }
  for (auto& r : runs) {
    if (r.entropy.cls.empty()) continue;
    double mean = 0;
    for (double v : r.entropy.cls) mean += v / double(r.entropy.cls.size());
    t += fmt::format("{:<24} {:>5} {:>6.3f} ", r.spec.label(), "[CLS]", mean);
    for (double v : r.entropy.cls) t += fmt::format(" {:.2f}", v);
    t += "\n";
  }
  return t.empty() ? t : fmt::format("{:<24} {:>5} {:>6}  per head\n", "model", "layer", "mean") + t;
}

/// Whether a run reads a [CLS] row (its [CLS] entropy was measured): the entropy tables' note.
inline bool reads_cls_row(const std::vector<RunResult>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const RunResult& r) { return !r.entropy.cls.empty(); });
}

inline void write_report(const Options& o, const Prepared& p, const std::vector<RunResult>& runs) {
  examples::HtmlReport rep("attn: IMDb sentiment with single- and multi-head self-attention");
  rep.paragraph(fmt::format("Data: {} (validation: fixed-seed {:.0f}% split of train, seed {}{}). Training seed{} {}. Model width {}, {} encoder layer{}{}, "
                            "max length {} ({}), n-gram embeddings {}.",
                            o.data, 100 * o.valid_fraction, o.train.split(), p.test.empty() ? "" : "; test: the data's test split", o.seeds.size() > 1 ? "s" : "",
                            o.seeds.empty() ? std::to_string(o.train.seed) : fmt::format("{}", fmt::join(o.seeds, ", ")), kDim,
                            o.layers, o.layers > 1 ? "s" : "", o.window ? fmt::format(", attention window {}", o.window) : "", o.max_len,
                            o.truncate, p.ngram_buckets ? fmt::format("up to {}-grams in {} buckets", o.ngram_order, p.ngram_buckets) : "off"));
  rep.paragraph("Rows: the attention model for each head count; \"no attention\" is the ablation (the same inputs, mean+max pooled "
                "without attention); \"+ NB-LR\" is an explicit ensemble with the NB-LR log-odds; NB-LR alone is the linear baseline.");
  rep.heading("Accuracy");
  rep.preformatted(results_table(p, runs));
  if (const auto st = seeds_table(runs); !st.empty()) rep.preformatted(st);
  std::vector<examples::Series> loss, acc;
  for (auto& r : runs) {
    examples::Series tl{"train " + r.spec.name(), {}, {}}, vl{"valid " + r.spec.name(), {}, {}}, va{r.spec.name(), {}, {}};
    for (auto& e : r.history) {
      tl.x.push_back(double(e.epoch)), tl.y.push_back(e.train_loss);
      vl.x.push_back(double(e.epoch)), vl.y.push_back(e.valid_loss);
      va.x.push_back(double(e.epoch)), va.y.push_back(100 * e.valid_acc);
    }
    loss.push_back(tl), loss.push_back(vl), acc.push_back(va);
  }
  rep.heading("Loss and accuracy curves");
  // The training curve is the objective (label smoothing, adversarial and entropy terms included),
  // the validation curve plain cross-entropy: the two are not on one scale.
  rep.raw(examples::svg_line_chart("loss: training objective (train) and validation cross-entropy (valid)", "epoch", loss) +
          examples::svg_line_chart("validation accuracy (%)", "epoch", acc));
  if (const auto bt = buckets_table(runs); !bt.empty()) {
    rep.heading("Validation accuracy by review length (words)");
    rep.preformatted(bt);
  }
  if (const auto bt = buckets_table(runs, true); !bt.empty()) {
    rep.heading("Test accuracy by review length (words; aclImdb/test)");
    rep.preformatted(bt);
  }
  if (const auto et = entropy_table(runs); !et.empty()) {
    rep.heading("Attention entropy on validation (fraction of the uniform distribution's; 1.0 = attends to everything alike)");
    if (reads_cls_row(runs))
      rep.paragraph("A layer's line averages every row of it; the classifier reads only the [CLS] row of the last layer (the [CLS] line), "
                    "and training never computes that layer's other rows.");
    rep.preformatted(et);
  }
  for (auto& r : runs) {
    if (r.html_heatmaps.empty()) continue;
    rep.heading("Attention heatmaps, " + r.spec.label());
    rep.raw(r.html_heatmaps);
  }
  rep.write((fs::path(o.train.out) / "report.html").string());
  fmt::print("\nreport: {}\n", (fs::path(o.train.out) / "report.html").string());
}

inline void print_summary(const Prepared& p, const std::vector<RunResult>& runs) {
  fmt::print("\n{}", results_table(p, runs));
  if (const auto st = seeds_table(runs); !st.empty()) fmt::print("\n{}", st);
  if (runs.size() > 1) {
    if (const auto bt = buckets_table(runs); !bt.empty()) fmt::print("\nvalidation accuracy by review length\n{}", bt);
    if (const auto bt = buckets_table(runs, true); !bt.empty()) fmt::print("\ntest accuracy by review length\n{}", bt);
  }
  if (const auto et = entropy_table(runs); !et.empty()) {
    fmt::print("\nattention entropy on validation (fraction of uniform{})\n{}",
               reads_cls_row(runs) ? "; a layer's line averages every row, the classifier reads only the [CLS] row of the last layer" : "", et);
  }
}

}  // namespace imdb

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // results line by line, also into a pipe or a log file
  using namespace imdb;
  std::optional<examples::Parallel> par;  // data-parallel under mpirun (built with MPI)
  try {
    par.emplace(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imdb: error: %s\n", e.what());
    return 1;
  }
  Command cmd;
  if (auto exit_code = parse_command_line(argc, argv, cmd)) return *exit_code;
  cmd.options.train.processes = std::size_t(par->world());
  const Options& o = cmd.options;
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
      if (pr.texts.empty()) pr.texts.push_back(kArticleSentence);
      const attn::PrecisionScope precision(attn::parse_precision(pr.precision, "--precision"));
      const auto heads = examples::with_json_file(fs::path(pr.model_dir) / "config.json",
                                                  [](const json& j) { return examples::json_count(j, "heads", 1, 16); });
      const std::string heads_field = (fs::path(pr.model_dir) / "config.json").string() + ": field heads";
      attn::dispatch<1, 2, 4, 8, 16>(heads, heads_field.c_str(), []<std::size_t>() {});
#if defined(ATTN_EXAMPLES_CUDA)
      if (cuda) return predict_cuda(heads, pr.model_dir, pr.texts, pr.dump);
#endif
      return predict(heads, pr.model_dir, pr.texts, pr.dump);
    }
    if (!o.sweep) attn::dispatch<1, 2, 4, 8, 16>(o.heads, "--heads", []<std::size_t>() {});  // validate before loading data
    if (o.window && o.layers == 1 && o.pool == "cls")
      throw attn::ArgumentError(fmt::format("--window {}: with one layer and --pool cls the classifier reads only the [CLS] row, which sees every "
                                            "token whatever the window; give --layers 2 or more, or --pool mean+max",
                                            o.window));
    if (o.train.precision == "int8")
      throw attn::ArgumentError("--precision int8 is for inference (predict --precision int8); training takes fp32 or bf16");
    // Training and evaluation run their linear and LSTM products in --precision (this thread's scope).
    const attn::PrecisionScope precision(attn::parse_precision(o.train.precision, "--precision"));
    if (cuda)
      fmt::print("attn IMDb example: the model on cuda (FP32); data preparation on {} CPU thread(s)\n", attn::cpu::threads());
    else
      fmt::print("attn IMDb example: {} thread(s), {} kernels, GEMM {}, {} products{}\n", attn::cpu::threads(),
                 attn::isa_name(attn::cpu::isa()), attn::cpu_gemm_description(), attn::precision_route(attn::precision()),
                 par->world() > 1 ? fmt::format(" x {} processes (global batch {})", par->world(), o.train.batch * std::size_t(par->world())) : "");
    // Everything is checked before anything is written: the run directories (options against
    // config.json, state.json, vocab.txt), the data, then the checkpoints a resumed run continues.
    const auto head_counts = o.sweep ? std::vector<std::size_t>{1, 2, 4, 8, 16} : std::vector<std::size_t>{o.heads};
    std::vector<RunSpec> models;
    for (std::size_t h : head_counts) models.push_back({Variant::attention, h});
    if (o.ablation) models.push_back({Variant::ablation, 1});
    if (o.ensemble == "nblr")
      for (std::size_t h : head_counts) models.push_back({Variant::ensemble, h});
    std::vector<RunSpec> specs;  // under --seeds, every model once per seed (runs/imdb/h8-s7, ...)
    for (const auto& m : models) {
      if (o.seeds.empty()) specs.push_back(m);
      for (auto seed : o.seeds) specs.push_back({m.variant, m.heads, seed});
    }
    std::vector<examples::RunPlan> plans;
    for (const auto& r : specs) {
      const Options os = run_options_of(o, r);
      plans.push_back(examples::inspect_run_dir(run_dir(o, r), os.train, run_options(os, r), par->main()));
      if (plans.back().resume) (void)resumed_config(plans.back(), r.heads);
    }
    auto p = prepare(o, examples::resumed_vocab(plans), std::any_of(plans.begin(), plans.end(), [](const auto& pl) { return !pl.resume; }));
    for (std::size_t k = 0; k < specs.size(); ++k)
      if (plans[k].resume) {
        auto model = attn::nn::skip_init<ImdbClassifier<>>(resumed_config(plans[k], specs[k].heads), specs[k].heads);
        examples::check_resume(model, specs[k].heads, plans[k], run_options_of(o, specs[k]).train, p.train.size(), par->world());
      }
    par->barrier();  // no process is still reading when the directories change
    std::vector<RunResult> runs;
    for (std::size_t k = 0; k < specs.size(); ++k) {
#if defined(ATTN_EXAMPLES_CUDA)
      if (cuda) {
        runs.push_back(train_run_cuda(specs[k], run_options_of(o, specs[k]), p, *par, plans[k]));
        continue;
      }
#endif
      runs.push_back(train_run(specs[k], run_options_of(o, specs[k]), p, *par, plans[k]));
    }
    if (!par->main()) return 0;
    print_summary(p, runs);
    fs::create_directories(o.train.out);
    const auto measured = [](double v) { return v < 0 ? json(nullptr) : json(v); };  // -1: not measured (no test split, ...)
    json sj = json::array();
    for (auto& r : runs)
      sj.push_back({{"run", r.spec.name()}, {"model", r.spec.model_label()}, {"seed", run_options_of(o, r.spec).train.seed}, {"heads", r.heads}, {"valid_accuracy", r.best_valid},
                    {"valid_accuracy_int8", measured(r.valid_int8)}, {"test_accuracy", measured(r.test_acc)}, {"train_seconds", r.train_seconds}, {"parameters", r.params},
                    {"length_buckets", r.bucket_labels}, {"bucket_accuracy", r.bucket_acc},
                    {"test_bucket_accuracy", r.test_bucket_counts.empty() ? json(nullptr) : json(r.test_bucket_acc)},
                    {"attention_entropy", r.entropy.per_head},
                    {"cls_entropy", r.entropy.cls.empty() ? json(nullptr) : json(r.entropy.cls)}});
    if (p.nblr_valid_acc >= 0)
      sj.push_back({{"run", "nblr"}, {"model", "NB-LR alone (baseline)"}, {"valid_accuracy", p.nblr_valid_acc},
                    {"test_accuracy", measured(p.nblr_test_acc)}});
    data::write_file_atomic(fs::path(o.train.out) / "summary.json", sj.dump(2) + "\n");
    write_report(o, p, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imdb: error: %s\n", e.what());
    return par->fail(1, e.what());  // a data-parallel job ends on every process
  }
  return 0;
}
