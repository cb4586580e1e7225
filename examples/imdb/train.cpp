// SPDX-License-Identifier: MIT
// Training and evaluating one head count of the IMDb model (train_heads, declared in run.hpp).
#include "run.hpp"

#include <attn/attn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "../common/report.hpp"

namespace imdb {

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
  return html + examples::head_heatmaps(w, shown, H) + "</div>";
}

template <std::size_t Heads>
RunResult train_variant(const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  const fs::path& dir = plan.dir;
  // A resumed run's configuration is the directory's (its options equal ours: inspect_run_dir).
  const ModelConfig cfg =
      plan.resume ? resumed_config(plan, Heads)
                  : ModelConfig{.vocab = p.vocab.size(), .max_len = o.max_len, .truncate = parse_truncate(o.truncate),
                                .bag_max_len = o.bag_max_len, .ngram_buckets = o.ngram_buckets, .nblr_buckets = o.nblr_buckets,
                                .nblr_order = o.nblr_order, .dropout = o.dropout, .attn_dropout = o.attn_dropout, .ffn = o.ffn};
  ImdbClassifier<Heads> model(cfg);
  model.init(o.train.seed);
  if (cfg.nblr_buckets) model.set_nblr(p.nblr, p.nblr_scale);  // fitted on the training portion only
  RunResult res;
  res.heads = Heads;
  res.params = model.parameter_count();
  fmt::print("\n== {} head{} (Attention<{}, {}>), {} parameters\n", Heads, Heads > 1 ? "s" : "", Heads, kDim, res.params);

  json config = {{"model", cfg.to_json()}, {"heads", Heads}, {"dim", kDim}, {"seed", o.train.seed},
                 {"batch", o.train.batch}, {"lr", o.train.lr}, {"weight_decay", o.train.weight_decay}, {"nblr_c", o.nblr_c},
                 {"nblr_folds", o.nblr_folds}, {"options", run_options(o, Heads)}};
  if (par.main()) examples::write_run_start(plan, p.vocab, config);  // every check has passed: the first write
  par.barrier();  // the other processes read the checkpoints begin_writing() committed

  std::vector<std::size_t> lengths;
  for (auto& x : p.train) lengths.push_back(x.size());
  const auto log = examples::train(
      model, o.train, plan, Heads, par, lengths,
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

RunResult train_heads(std::size_t heads, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  return attn::dispatch<1, 2, 4, 8, 16>(heads, "--heads", [&]<std::size_t H>() { return train_variant<H>(o, p, par, plan); });
}

}  // namespace imdb
