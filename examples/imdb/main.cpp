// IMDb sentiment with single- and multi-head self-attention: trains one head count (--heads) or
// all of them (--sweep), reports validation accuracy overall and by review length, writes
// checkpoints, metrics.jsonl and a report.html with loss curves and per-head attention heatmaps;
// `predict` classifies text with a trained model and shows the words it attended to most.
//   imdb --data examples/imdb/sample/aclImdb --heads 8 --out runs/imdb
//   imdb predict --model runs/imdb/h8 "The movie was not good, but the acting was brilliant."
#include <attn/attn.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "../common/json_files.hpp"
#include "../common/parallel.hpp"
#include "../common/progress.hpp"
#include "../common/report.hpp"
#include "../common/training.hpp"
#include "model.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
namespace data = attn::data;

namespace imdb {

inline constexpr const char* kArticleSentence = "The movie was not good, but the acting was brilliant.";

struct Options {
  std::string data = "examples/imdb/sample/aclImdb";
  examples::TrainOptions train{.out = "runs/imdb", .epochs = 2, .batch = 32, .patience = 2, .warmup = 0.06};
  std::size_t heads = 8;
  bool sweep = false;
  std::size_t max_len = 256, min_freq = 2, max_vocab = 30000, threads = 0;
  std::size_t ngram_buckets = 0;  // the n-gram bag: off (the NB-LR score carries the n-grams)
  std::size_t nblr_buckets = std::size_t(1) << 22, nblr_order = 3, nblr_folds = 5;
  double nblr_c = 1.0;
  double dropout = 0.3, attn_dropout = 0.1;
  double valid_fraction = 0.1;
  bool ffn = true;
  std::string truncate = "head+tail";
  std::size_t bag_max_len = 2048;
  std::vector<std::string> explain;
  std::size_t limit = 0;  // use only the first N training reviews (smoke tests)
};

/// Reviews encoded once and shared by every head count of a sweep.
struct Prepared {
  data::Vocab vocab;
  std::vector<std::vector<std::int32_t>> train, valid, test;
  std::vector<int> train_y, valid_y, test_y;
  std::vector<std::size_t> valid_words, test_words;
  // NB-LR: the fit on the whole training portion, and the log-odds of every review (training
  // reviews: cross-fitted). Empty without NB-LR.
  NbLr nblr;
  PlattScale nblr_scale;  // calibration of the cross-fitted scores (the head's starting point)
  std::vector<float> train_nb, valid_nb, test_nb;
  double nblr_valid_acc = -1;  // NB-LR's own validation accuracy
};

/// Words of a review: tokens holding a letter or digit (punctuation is not a word).
inline std::size_t word_count(const std::vector<std::string>& toks) {
  std::size_t n = 0;
  for (auto& t : toks)
    for (unsigned char c : t)
      if (std::isalnum(c) || c >= 0x80) {
        ++n;
        break;
      }
  return n;
}

/// The whole review as ids (make_batch picks what the attention and the bag see).
inline std::vector<std::int32_t> encode(const data::Vocab& v, const std::vector<std::string>& toks) {
  auto ids = v.encode(toks);
  if (ids.empty()) ids.push_back(1);  // an empty review becomes one UNK
  return ids;
}

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
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("NB-LR ({}-grams, {} buckets, C {}): {:.2f}% validation accuracy on its own; {}-fold scores for training, calibrated "
             "as {:.3f} * score {:+.3f}; {:.1f}s\n",
             c.order, c.buckets, c.c, 100 * p.nblr_valid_acc, c.folds, p.nblr_scale.a, p.nblr_scale.b, secs);
}

inline Prepared prepare(const Options& o) {
  const data::EnglishTokenizer tok;
  auto t0 = std::chrono::steady_clock::now();
  auto train_split = data::read_imdb(o.data, "train");
  auto& reviews = train_split.reviews;
  if (o.limit && reviews.size() > o.limit) {
    // Keep both classes: take every k-th review.
    std::vector<data::Review> kept;
    const std::size_t step = reviews.size() / o.limit;
    for (std::size_t i = 0; i < reviews.size() && kept.size() < o.limit; i += std::max<std::size_t>(step, 1)) kept.push_back(reviews[i]);
    reviews = std::move(kept);
  }
  std::vector<int> labels;
  for (auto& r : reviews) labels.push_back(r.label);
  auto split = data::stratified_split(labels, o.valid_fraction, o.train.seed);
  std::vector<std::vector<std::string>> toks(reviews.size());
  for (std::size_t i = 0; i < reviews.size(); ++i) toks[i] = tok(reviews[i].text);
  data::TokenCounts counts;
  for (auto i : split.train) counts.add(toks[i]);
  Prepared p;
  p.vocab = data::Vocab::build(counts, {.min_freq = o.min_freq, .max_size = o.max_vocab});
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
  if (fs::is_directory(fs::path(o.data) / "test", ec)) {
    auto test = data::read_imdb(o.data, "test");
    for (auto& r : test.reviews) {
      auto t = tok(r.text);
      p.test.push_back(encode(p.vocab, t));
      p.test_y.push_back(r.label);
      p.test_words.push_back(word_count(t));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("data: {} train / {} validation reviews (fixed-seed {:.0f}% split of {}/train){}; vocabulary {} (min freq {}); {:.1f}s\n",
             p.train.size(), p.valid.size(), 100 * o.valid_fraction, o.data,
             p.test.empty() ? "" : fmt::format(", {} test reviews", p.test.size()), p.vocab.size(), o.min_freq, secs);
  if (train_split.stats.invalid_utf8) fmt::print("data: {} invalid UTF-8 sequences replaced\n", train_split.stats.invalid_utf8);
  if (o.nblr_buckets) fit_nblr_scores(o, p);
  return p;
}

struct EvalResult {
  double loss = 0, accuracy = 0;
  attn::metrics::LengthBucketAccuracy buckets{{50, 100, 200}};
  std::vector<int> predictions;
};

template <class Model>
EvalResult evaluate(const Model& model, const std::vector<std::vector<std::int32_t>>& xs, const std::vector<int>& ys,
                    const std::vector<float>& nb, const std::vector<std::size_t>& words, std::size_t batch) {
  EvalResult r;
  attn::NoGrad ctx;
  std::vector<std::size_t> lengths;
  for (auto& x : xs) lengths.push_back(x.size());
  std::vector<std::size_t> order(xs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return lengths[a] < lengths[b]; });
  r.predictions.assign(xs.size(), 0);
  double loss = 0;
  std::size_t correct = 0;
  for (std::size_t s = 0; s < order.size(); s += batch) {
    std::vector<const std::vector<std::int32_t>*> seqs;
    std::vector<int> lab;
    std::vector<float> z;
    for (std::size_t k = s; k < std::min(order.size(), s + batch); ++k) {
      seqs.push_back(&xs[order[k]]);
      lab.push_back(ys[order[k]]);
      if (!nb.empty()) z.push_back(nb[order[k]]);
    }
    auto b = make_batch(seqs, lab, z, model.cfg);
    auto logits = model.forward(ctx, b);
    loss += double(attn::cross_entropy(ctx, logits, b.labels).value()[0]) * double(seqs.size());
    auto pred = attn::argmax_rows(logits.value());
    for (std::size_t k = 0; k < seqs.size(); ++k) {
      const std::size_t i = order[s + k];
      r.predictions[i] = int(pred[k]);
      const bool ok = int(pred[k]) == ys[i];
      correct += ok;
      if (!words.empty()) r.buckets.add(words[i], ok);
    }
  }
  r.loss = xs.empty() ? 0 : loss / double(xs.size());
  r.accuracy = xs.empty() ? 0 : double(correct) / double(xs.size());
  return r;
}

struct RunResult {
  std::size_t heads = 0, params = 0;
  double best_valid = 0, test_acc = -1, train_seconds = 0;
  std::vector<examples::EpochRecord> history;
  std::vector<double> bucket_acc;
  std::vector<std::string> bucket_labels;
  std::vector<std::size_t> bucket_counts;
  std::string html_heatmaps;
};

/// Attention weights of a model for one text: per head, a (T x T) heatmap.
template <class Model>
std::string heatmaps_html(const Model& model, const data::Vocab& vocab, const std::string& text) {
  constexpr std::size_t H = std::remove_cvref_t<decltype(model.attention)>::heads;
  const data::EnglishTokenizer tok;
  auto toks = tok(text);
  auto ids = encode(vocab, toks);
  std::vector<std::string> shown;
  for (auto i : kept_positions(ids.size(), model.cfg.max_len, model.cfg.truncate)) shown.push_back(i < toks.size() ? toks[i] : "?");
  attn::NoGrad ctx;
  attn::Tensor<float> w;
  auto b = make_batch({&ids}, {0}, {model.nb_logit(ids)}, model.cfg);
  auto logits = model.forward(ctx, b, &w);
  auto pr = attn::softmax(ctx, logits).value();
  std::string html = fmt::format("<p><b>{}</b> &rarr; positive with probability {:.3f}</p><div>", examples::html_escape(text), pr(0, 1));
  const std::size_t t = shown.size();
  for (std::size_t h = 0; h < H; ++h) {
    std::vector<float> m(t * t);
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < t; ++j) m[i * t + j] = w(std::size_t(0), h, i, j);
    html += examples::svg_heatmap(fmt::format("head {} of {}", h + 1, H), shown, shown, m);
  }
  return html + "</div>";
}

template <std::size_t Heads>
RunResult train_variant(const Options& o, const Prepared& p, examples::Parallel& par) {
  const fs::path dir = fs::path(o.train.out) / fmt::format("h{}", Heads);
  fs::create_directories(dir);
  ModelConfig cfg{.vocab = p.vocab.size(), .max_len = o.max_len, .truncate = parse_truncate(o.truncate), .bag_max_len = o.bag_max_len,
                  .ngram_buckets = o.ngram_buckets, .nblr_buckets = o.nblr_buckets, .nblr_order = o.nblr_order, .dropout = o.dropout,
                  .attn_dropout = o.attn_dropout, .ffn = o.ffn};
  ImdbClassifier<Heads> model(cfg);
  model.init(o.train.seed);
  if (cfg.nblr_buckets) model.set_nblr(p.nblr, p.nblr_scale);  // fitted on the training portion only
  RunResult res;
  res.heads = Heads;
  res.params = model.parameter_count();
  fmt::print("\n== {} head{} (Attention<{}, {}>), {} parameters\n", Heads, Heads > 1 ? "s" : "", Heads, kDim, res.params);

  json config = {{"model", cfg.to_json()}, {"heads", Heads}, {"dim", kDim}, {"seed", o.train.seed}, {"epochs", o.train.epochs},
                 {"batch", o.train.batch}, {"lr", o.train.lr}, {"weight_decay", o.train.weight_decay}, {"nblr_c", o.nblr_c}, {"nblr_folds", o.nblr_folds}};
  if (par.main()) {
    p.vocab.save(dir / "vocab.txt");
    data::write_file_atomic(dir / "config.json", config.dump(2) + "\n");
  }

  std::vector<std::size_t> lengths;
  for (auto& x : p.train) lengths.push_back(x.size());
  const auto log = examples::train(
      model, o.train, dir, Heads, par, lengths,
      [&](const std::vector<std::size_t>& idx) {
        std::vector<const std::vector<std::int32_t>*> seqs;
        std::vector<int> lab;
        std::vector<float> z;
        for (auto i : idx) {
          seqs.push_back(&p.train[i]);
          lab.push_back(p.train_y[i]);
          if (!p.train_nb.empty()) z.push_back(p.train_nb[i]);
        }
        return make_batch(seqs, lab, z, cfg);
      },
      [&](attn::Tape& tape, const Batch& b) { return attn::cross_entropy(tape, model.forward(tape, b), b.labels); },
      [&] {
        const auto ev = evaluate(model, p.valid, p.valid_y, p.valid_nb, p.valid_words, 64);
        return examples::Validation{.loss = ev.loss, .accuracy = ev.accuracy};
      });
  res.history = log.history;
  res.train_seconds = log.train_seconds;
  res.best_valid = log.best_valid;
  if (!par.main()) return res;  // the final evaluation and the report are rank 0's

  // Final numbers come from the best checkpoint.
  attn::io::load(model, dir / "model.safetensors");
  model.eval();
  auto ev = evaluate(model, p.valid, p.valid_y, p.valid_nb, p.valid_words, 64);
  for (std::size_t k = 0; k < ev.buckets.num_buckets(); ++k) {
    res.bucket_labels.push_back(ev.buckets.label(k));
    res.bucket_acc.push_back(ev.buckets.accuracy(k));
    res.bucket_counts.push_back(ev.buckets.count(k));
  }
  fmt::print("best validation accuracy {:.2f}%\n{}", 100 * ev.accuracy, ev.buckets.table());
  if (!p.test.empty()) {
    auto te = evaluate(model, p.test, p.test_y, p.test_nb, p.test_words, 64);
    res.test_acc = te.accuracy;
    fmt::print("test accuracy {:.2f}% ({} reviews)\n", 100 * te.accuracy, p.test.size());
  }
  std::vector<std::string> texts{kArticleSentence};
  texts.insert(texts.end(), o.explain.begin(), o.explain.end());
  for (auto& t : texts) res.html_heatmaps += heatmaps_html(model, p.vocab, t);
  return res;
}

inline void write_report(const Options& o, const Prepared& p, const std::vector<RunResult>& runs) {
  examples::HtmlReport rep("attn: IMDb sentiment with single- and multi-head self-attention");
  rep.paragraph(fmt::format("Data: {} (validation: fixed-seed {:.0f}% split of train, seed {}). Model width {}, max length {}.", o.data,
                            100 * o.valid_fraction, o.train.seed, kDim, o.max_len));
  if (p.nblr_valid_acc >= 0)
    rep.paragraph(fmt::format("The NB-LR score ({}-grams, {} buckets, C {}) alone: {:.2f}% validation accuracy.", o.nblr_order, o.nblr_buckets,
                              o.nblr_c, 100 * p.nblr_valid_acc));
  std::string table = fmt::format("{:>6} {:>10} {:>10} {:>12} {:>12}\n", "heads", "valid acc", "test acc", "train time", "parameters");
  for (auto& r : runs)
    table += fmt::format("{:>6} {:>9.2f}% {:>10} {:>11.0f}s {:>12}\n", r.heads, 100 * r.best_valid,
                         r.test_acc < 0 ? "-" : fmt::format("{:.2f}%", 100 * r.test_acc), r.train_seconds, r.params);
  rep.heading("Accuracy by head count");
  rep.preformatted(table);
  std::vector<examples::Series> loss, acc;
  for (auto& r : runs) {
    examples::Series tl{fmt::format("train h{}", r.heads), {}, {}}, vl{fmt::format("valid h{}", r.heads), {}, {}},
        va{fmt::format("h{}", r.heads), {}, {}};
    for (auto& e : r.history) {
      tl.x.push_back(double(e.epoch)), tl.y.push_back(e.train_loss);
      vl.x.push_back(double(e.epoch)), vl.y.push_back(e.valid_loss);
      va.x.push_back(double(e.epoch)), va.y.push_back(100 * e.valid_acc);
    }
    loss.push_back(tl), loss.push_back(vl), acc.push_back(va);
  }
  rep.heading("Loss and accuracy curves");
  rep.raw(examples::svg_line_chart("cross-entropy loss", "epoch", loss) + examples::svg_line_chart("validation accuracy (%)", "epoch", acc));
  if (!runs.empty() && !runs[0].bucket_labels.empty()) {
    std::string bt = fmt::format("{:>10}", "length");
    for (auto& r : runs) bt += fmt::format(" {:>8}", fmt::format("h{}", r.heads));
    bt += fmt::format(" {:>8}\n", "reviews");
    for (std::size_t k = 0; k < runs[0].bucket_labels.size(); ++k) {
      bt += fmt::format("{:>10}", runs[0].bucket_labels[k]);
      for (auto& r : runs) bt += fmt::format(" {:>7.2f}%", 100 * r.bucket_acc[k]);
      bt += fmt::format(" {:>8}\n", runs[0].bucket_counts[k]);
    }
    rep.heading("Validation accuracy by review length (words)");
    rep.preformatted(bt);
  }
  for (auto& r : runs) {
    rep.heading(fmt::format("Attention heatmaps, {} head{}", r.heads, r.heads > 1 ? "s" : ""));
    rep.raw(r.html_heatmaps);
  }
  rep.write((fs::path(o.train.out) / "report.html").string());
  fmt::print("\nreport: {}\n", (fs::path(o.train.out) / "report.html").string());
}

inline void print_sweep(const std::vector<RunResult>& runs) {
  fmt::print("\n{:>6} {:>10} {:>10} {:>12} {:>12}\n", "heads", "valid acc", "test acc", "train time", "parameters");
  for (auto& r : runs)
    fmt::print("{:>6} {:>9.2f}% {:>10} {:>11.0f}s {:>12}\n", r.heads, 100 * r.best_valid,
               r.test_acc < 0 ? "-" : fmt::format("{:.2f}%", 100 * r.test_acc), r.train_seconds, r.params);
  if (runs.size() > 1 && !runs[0].bucket_labels.empty()) {
    fmt::print("\nvalidation accuracy by review length (words): single-head vs multi-head\n{:>10}", "length");
    for (auto& r : runs) fmt::print(" {:>8}", fmt::format("h{}", r.heads));
    fmt::print("\n");
    for (std::size_t k = 0; k < runs[0].bucket_labels.size(); ++k) {
      fmt::print("{:>10}", runs[0].bucket_labels[k]);
      for (auto& r : runs) fmt::print(" {:>7.2f}%", 100 * r.bucket_acc[k]);
      fmt::print("\n");
    }
  }
}

template <std::size_t Heads>
int predict(const fs::path& dir, const std::vector<std::string>& texts) {
  const auto cfg = examples::with_json_file(dir / "config.json", [&](const json& j) { return ModelConfig::from_json(j.at("model")); });
  auto vocab = data::Vocab::load(dir / "vocab.txt");
  if (vocab.size() != cfg.vocab) throw attn::FormatError((dir / "vocab.txt").string(), 1, "vocabulary size differs from config.json");
  ImdbClassifier<Heads> model(cfg);
  attn::io::load(model, dir / "model.safetensors");
  model.eval();
  const data::EnglishTokenizer tok;
  for (auto& text : texts) {
    auto toks = tok(text);
    auto ids = encode(vocab, toks);
    const auto kept = kept_positions(ids.size(), cfg.max_len, cfg.truncate);
    attn::NoGrad ctx;
    attn::Tensor<float> w;
    auto b = make_batch({&ids}, {0}, {model.nb_logit(ids)}, cfg);
    auto pr = attn::softmax(ctx, model.forward(ctx, b, &w)).value();
    const std::size_t t = kept.size();
    std::vector<std::pair<float, std::size_t>> recv(t);
    for (std::size_t j = 0; j < t; ++j) {
      float s = 0;
      for (std::size_t h = 0; h < Heads; ++h)
        for (std::size_t i = 0; i < t; ++i) s += w(std::size_t(0), h, i, j);
      recv[j] = {s / float(Heads * t), j};
    }
    std::sort(recv.begin(), recv.end(), std::greater<>());
    const bool pos = pr(0, 1) >= 0.5f;
    fmt::print("{}\t{:.4f}\t", pos ? "positive" : "negative", pos ? pr(0, 1) : pr(0, 0));
    for (std::size_t k = 0; k < std::min<std::size_t>(5, t); ++k) {
      const std::size_t j = recv[k].second;
      const std::size_t src = kept[j];
      fmt::print("{}{}({:.3f})", k ? " " : "", src < toks.size() ? toks[src] : "?", recv[k].first);
    }
    fmt::print("\n");
  }
  return 0;
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
  Options o;
  CLI::App app{"IMDb sentiment classification with single- and multi-head self-attention (attn)"};
  app.set_help_all_flag("--help-all");
  app.add_option("--data", o.data, "aclImdb root holding train/{pos,neg} (and optionally test/)");
  app.add_option("--heads", o.heads, "attention heads, one of 1, 2, 4, 8, 16")->check(CLI::PositiveNumber);
  app.add_flag("--sweep", o.sweep, "train every head count 1, 2, 4, 8, 16 and print the comparison tables");
  examples::add_training_flags(app, o.train);
  app.add_option("--dropout", o.dropout, "dropout on embeddings, residuals and the pooled features")->check(CLI::Range(0.0, 0.95));
  app.add_option("--attn-dropout", o.attn_dropout, "dropout on the attention weights")->check(CLI::Range(0.0, 0.95));
  app.add_option("--max-len", o.max_len, "tokens kept per review")->check(CLI::PositiveNumber);
  app.add_option("--truncate", o.truncate, "tokens of a longer review the attention sees: head, tail or head+tail (half of each)")
      ->check(CLI::IsMember({"head", "tail", "head+tail"}));
  app.add_option("--bag-max-len", o.bag_max_len, "tokens of a review the n-gram bag sees")->check(CLI::PositiveNumber);
  app.add_option("--min-freq", o.min_freq, "minimum token count for the vocabulary");
  app.add_option("--max-vocab", o.max_vocab, "maximum vocabulary size (PAD and UNK included)");
  app.add_option("--ngram-buckets", o.ngram_buckets, "hash buckets of the unigram+bigram bag feature (0: off)");
  app.add_option("--nblr-buckets", o.nblr_buckets, "hash buckets of the NB-LR score's n-grams (0: no NB-LR)")
      ->check(CLI::Range(std::size_t(0), std::size_t(1) << 30));
  app.add_option("--nblr-order", o.nblr_order, "longest n-gram of the NB-LR score")->check(CLI::Range(1, 5));
  app.add_option("--nblr-c", o.nblr_c, "NB-LR's inverse L2 regularisation strength (LIBLINEAR's C)")->check(CLI::PositiveNumber);
  app.add_option("--nblr-folds", o.nblr_folds, "cross-fitting folds of the training reviews' NB-LR scores")->check(CLI::Range(2, 20));
  app.add_flag("!--no-ffn", o.ffn, "no feed-forward block after the attention");
  app.add_option("--valid-fraction", o.valid_fraction, "fraction of train held out for validation (fixed seed)")->check(CLI::Range(0.01, 0.9));
  app.add_option("--threads", o.threads, "threads (0: ATTN_NUM_THREADS, OMP_NUM_THREADS or all cores)");
  app.add_option("--explain", o.explain, "extra text(s) whose attention heatmaps go into the report");
  app.add_option("--limit", o.limit, "use only N training reviews (quick runs)");
  std::string model_dir;
  std::vector<std::string> texts;
  auto* pred = app.add_subcommand("predict", "classify text with a trained model");
  pred->add_option("--model", model_dir, "a run directory, e.g. runs/imdb/h8")->required();
  pred->add_option("text", texts, "text to classify (default: the article's sentence)");
  CLI11_PARSE(app, argc, argv);
  try {
    attn::cpu::set_threads(int(o.threads));
    if (*pred) {
      if (texts.empty()) texts.push_back(kArticleSentence);
      const auto heads = examples::with_json_file(fs::path(model_dir) / "config.json",
                                                  [](const json& j) { return j.at("heads").get<std::size_t>(); });
      return attn::dispatch<1, 2, 4, 8, 16>(heads, "config.json heads", [&]<std::size_t H>() { return predict<H>(model_dir, texts); });
    }
    if (!o.sweep) attn::dispatch<1, 2, 4, 8, 16>(o.heads, "--heads", []<std::size_t>() {});  // validate before loading data
    fmt::print("attn IMDb example: {} thread(s){}\n", attn::cpu::threads(),
               par->world() > 1 ? fmt::format(" x {} processes (global batch {})", par->world(), o.train.batch * std::size_t(par->world())) : "");
    auto p = prepare(o);
    std::vector<RunResult> runs;
    if (o.sweep) {
      runs.push_back(train_variant<1>(o, p, *par));
      runs.push_back(train_variant<2>(o, p, *par));
      runs.push_back(train_variant<4>(o, p, *par));
      runs.push_back(train_variant<8>(o, p, *par));
      runs.push_back(train_variant<16>(o, p, *par));
      print_sweep(runs);
    } else {
      attn::dispatch<1, 2, 4, 8, 16>(o.heads, "--heads", [&]<std::size_t H>() { runs.push_back(train_variant<H>(o, p, *par)); });
    }
    if (!par->main()) return 0;
    fs::create_directories(o.train.out);
    json sj = json::array();
    for (auto& r : runs)
      sj.push_back({{"heads", r.heads}, {"valid_accuracy", r.best_valid},
                    {"nblr_valid_accuracy", p.nblr_valid_acc < 0 ? json(nullptr) : json(p.nblr_valid_acc)},
                    {"test_accuracy", r.test_acc}, {"train_seconds", r.train_seconds},
                    {"parameters", r.params}, {"length_buckets", r.bucket_labels}, {"bucket_accuracy", r.bucket_acc}});
    data::write_file_atomic(fs::path(o.train.out) / "summary.json", sj.dump(2) + "\n");
    write_report(o, p, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imdb: error: %s\n", e.what());
    return par->fail(1, e.what());  // a data-parallel job ends on every process
  }
  return 0;
}
