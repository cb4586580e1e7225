// SPDX-License-Identifier: MIT
// Training and evaluating one run of the IMDb program on a backend (train_variant<B>), instantiated
// for the CPU by train.cpp and for CUDA by cuda.cu (train_run, train_run_cuda in run.hpp).
#pragma once
#include "run.hpp"

#include <attn/attn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "../common/device.hpp"
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
    const auto b = to_backend<typename Model::backend>(make_batch(seqs, lab, z, model.cfg));
    auto logits = model.forward(ctx, b);
    loss += double(examples::to_host(attn::cross_entropy(ctx, logits, b.labels).value())[0]) * double(seqs.size());
    auto pred = attn::argmax_rows(examples::to_host(logits.value()));
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

/// The last encoder layer's attention weights for one text: per head, a (T x T) heatmap.
template <class Model>
std::string heatmaps_html(const Model& model, const data::Vocab& vocab, const std::string& text) {
  const std::size_t H = model.heads();
  const data::EnglishTokenizer tok;
  auto toks = tok(text);
  auto ids = encode(vocab, toks);
  std::vector<std::string> shown;
  if (model.cfg.offset()) shown.push_back("[CLS]");
  for (auto i : kept_positions(ids.size(), model.cfg.max_len, model.cfg.truncate)) shown.push_back(i < toks.size() ? toks[i] : "?");
  attn::NoGrad ctx;
  using B = typename Model::backend;
  std::vector<attn::Tensor<float, attn::AnyShape, B>> w;
  const auto b = to_backend<B>(make_batch({&ids}, {0}, {model.nb_logit(ids)}, model.cfg));
  auto logits = model.forward(ctx, b, &w);
  const auto pr = examples::to_host(attn::softmax(ctx, logits).value());
  std::string html = fmt::format("<p><b>{}</b> &rarr; positive with probability {:.3f}", examples::html_escape(text), pr(0, 1));
  if (w.empty()) return html + "</p>";
  if (w.size() > 1) html += fmt::format(" (layer {} of {})", w.size(), w.size());
  // At most the first 64 positions are drawn (64 x 64 cells a head): a long --explain text keeps
  // the report a few MB. The bars are over the rows drawn.
  constexpr std::size_t kShown = 64;
  if (shown.size() > kShown) {
    html += fmt::format(" (the first {} of {} positions drawn)", kShown, shown.size());
    shown.resize(kShown);
  }
  if (!model.cfg.offset()) return html + "</p><div>" + examples::head_heatmaps(examples::to_host(w.back()), shown, H) + "</div>";
  // A [CLS] model reads the [CLS] row of its last layer alone: the first bars show that row; the
  // other rows of that layer, which training never computes, are drawn for comparison only.
  html += "</p><p>The classifier reads the [CLS] row (the first) of this layer: the first bars under each map show its weights, "
          "the second the mean attention each token receives over every row. The other rows of this layer are not used by the model "
          "(training never computes them).";
  return html + "</p><div>" + examples::head_heatmaps(examples::to_host(w.back()), shown, H, 0) + "</div>";
}

/// Mean entropy of every layer's and head's attention rows over the reviews xs, as a fraction of
/// the uniform distribution's over the keys a row can see (its window within the review). Rows that
/// see one key only carry no information and are left out. The weights are formed densely, so
/// reviews are taken in batches of at most kCells weights per layer, and a review longer than that
/// allows is skipped (counted).
template <class Model>
AttentionEntropy attention_entropy(const Model& model, const std::vector<std::vector<std::int32_t>>& xs) {
  const std::size_t H = model.heads();
  constexpr std::size_t kCells = std::size_t(1) << 24;
  AttentionEntropy e;
  const std::size_t layers = model.cfg.layers;
  if (!layers) return e;
  std::vector<std::vector<double>> sum(layers, std::vector<double>(H, 0.0));
  std::vector<std::size_t> rows(layers, 0);
  std::vector<double> cls(H, 0.0);
  std::vector<std::size_t> order(xs.size());
  std::iota(order.begin(), order.end(), 0);
  const std::size_t off = model.cfg.offset();  // a [CLS] token: global
  const auto len = [&](std::size_t i) { return off + std::min(xs[i].size(), model.cfg.max_len); };
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return len(a) < len(b); });
  // The keys each row sees: its window, and the [CLS] token (global: it sees and is seen by all).
  const attn::AttentionPattern pattern{.window = model.cfg.window, .global = off};
  attn::NoGrad ctx;
  for (std::size_t s = 0; s < order.size();) {
    const std::size_t t0 = len(order[s]);
    if (H * t0 * t0 > kCells) {  // sorted by length: every remaining review is as long
      e.skipped = order.size() - s;
      break;
    }
    std::vector<const std::vector<std::int32_t>*> seqs;
    std::size_t k = s;
    for (; k < order.size() && (k - s + 1) * H * len(order[k]) * len(order[k]) <= kCells; ++k) seqs.push_back(&xs[order[k]]);
    s = k;
    const auto b = to_backend<typename Model::backend>(make_batch(seqs, {}, {}, model.cfg));
    std::vector<attn::Tensor<float, attn::AnyShape, typename Model::backend>> weights;
    (void)model.forward(ctx, b, &weights);
    const std::size_t t = b.ids.size(1);
    for (std::size_t l = 0; l < layers; ++l) {
      const auto wh = examples::to_host(weights[l]);
      const float* wl = wh.data();
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        const std::size_t n = len(order[s - seqs.size() + i]);
        for (std::size_t q = 0; q < n; ++q) {
          // Row q sees the global keys [0, g) and its window [lo, hi), less what they share.
          const std::size_t lo = pattern.key_begin(q), hi = pattern.key_end(q, n);
          const std::size_t g = std::min(pattern.global_keys_end(q, n), lo);
          const std::size_t seen = g + (hi - lo);
          if (seen == 1) continue;
          ++rows[l];
          const auto plogp = [](float v) { return v > 0 ? double(v) * std::log(double(v)) : 0.0; };
          for (std::size_t h = 0; h < H; ++h) {
            const float* row = wl + ((i * H + h) * t + q) * t;
            double ent = 0;
            for (std::size_t j = 0; j < g; ++j) ent -= plogp(row[j]);
            for (std::size_t j = lo; j < hi; ++j) ent -= plogp(row[j]);
            sum[l][h] += ent / std::log(double(seen));
            if (off && q == 0 && l + 1 == layers) cls[h] += ent / std::log(double(seen));
          }
        }
      }
      e.reviews += l == 0 ? seqs.size() : 0;
    }
  }
  e.per_head = sum;
  if (off && rows[layers - 1])
    for (auto& v : cls) e.cls.push_back(v / double(e.reviews));
  for (std::size_t l = 0; l < layers; ++l)
    for (auto& v : e.per_head[l]) v = rows[l] ? v / double(rows[l]) : std::nan("");
  return e;
}

/// The training loss of batch b: cross-entropy with label smoothing, plus the [CLS] entropy
/// penalty (--attn-entropy, hinged at --attn-entropy-target). With --adversarial eps (Miyato et
/// al., 2017), the mean of that loss on the clean inputs and on inputs moved by eps along its
/// gradient, normalised per review over all its positions: the clean pass runs on its own tape and
/// leaves its gradients in the parameters, and the adversarial pass is on `tape`, whose value
/// includes the clean loss as a constant.
template <class Model, class B>
attn::Var<float, attn::AnyShape, B> training_loss(attn::Tape& tape, const Model& model, const BatchOn<B>& b, const Options& o) {
  using V = attn::Var<float, attn::AnyShape, B>;
  const bool penalty = o.attn_entropy > 0 && model.cfg.layers && model.cfg.pool == Pool::cls;
  auto objective = [&](attn::Tape& t, const V* delta, float scale) {
    V entropy;
    V loss = attn::cross_entropy(t, model.forward(t, b, nullptr, penalty ? &entropy : nullptr, delta), b.labels,
                                 {.label_smoothing = o.label_smoothing}).erased();
    if (penalty) loss = attn::add(t, loss, attn::scale(t, entropy_penalty(t, entropy, o.attn_entropy_target), float(o.attn_entropy))).erased();
    return scale == 1.0f ? loss : attn::scale(t, loss, scale).erased();
  };
  if (!(o.adversarial > 0)) return objective(tape, nullptr, 1.0f);
  return examples::adversarial_loss<B>(tape, attn::Dims{b.size(), b.ids.size(1), kDim}, o.adversarial, objective);
}

template <class B>
RunResult train_variant(const RunSpec& r, const Options& o, const Prepared& p, examples::Parallel& par, const examples::RunPlan& plan) {
  const fs::path& dir = plan.dir;
  const std::size_t heads = r.heads;
  // A resumed run's configuration is the directory's (its options equal ours: inspect_run_dir).
  const ModelConfig cfg = plan.resume ? resumed_config(plan, heads) : model_config(o, r, p);
  auto model = attn::nn::skip_init<ImdbClassifier<B>>(cfg, heads);  // drawn by init next
  model.init(o.train.seed);
  if (cfg.ensemble()) model.set_nblr(p.nblr, p.nblr_scale);  // fitted on the training portion only
  if (!plan.resume && !p.pretrained.empty()) model.set_pretrained(p.pretrained);
  RunResult res;
  res.spec = r;
  res.heads = heads;
  res.params = model.parameter_count();
  const std::string adversarial = o.adversarial > 0 ? fmt::format(", adversarial training eps {}", o.adversarial) : "";
  if (r.variant == Variant::ablation)
    fmt::print("\n== ablation: no attention, the inputs mean+max pooled{}; {} parameters, on {}\n", adversarial, res.params, B::name);
  else
    fmt::print("\n== {} ({} x TransformerEncoderLayer<{}, {}>{}{}{}{}), {} parameters, on {}\n", r.label(), cfg.layers, heads, kDim,
               cfg.window ? fmt::format(", window {}", cfg.window) : "", cfg.checkpoint ? ", checkpointed" : "",
               o.attn_entropy > 0 ? fmt::format(", [CLS] entropy penalty {}{}", o.attn_entropy,
                                                o.attn_entropy_target > 0 ? fmt::format(" above {}", o.attn_entropy_target) : "")
                                : "", adversarial, res.params, B::name);

  json config = {{"model", cfg.to_json()}, {"heads", heads}, {"dim", kDim}, {"seed", o.train.seed},
                 {"batch", o.train.batch}, {"lr", o.train.lr}, {"weight_decay", o.train.weight_decay}, {"run", r.name()},
                 {"options", run_options(o, r)}};
  if (cfg.ensemble()) config.update(json{{"nblr_c", o.nblr_c}, {"nblr_folds", o.nblr_folds}});
  if (par.main()) examples::write_run_start(plan, p.vocab, config);  // every check has passed: the first write
  par.barrier();  // the other processes read the checkpoints begin_writing() committed

  std::vector<std::size_t> lengths;
  for (auto& x : p.train) lengths.push_back(x.size());
  // The NB-LR log-odds a split's batches carry: the ensemble's input, nothing for the other runs.
  const std::vector<float> no_nb;
  const auto nb_of = [&](const std::vector<float>& split) -> const std::vector<float>& { return cfg.ensemble() ? split : no_nb; };
  const auto log = examples::train(
      model, o.train, plan, heads, par, lengths,
      [&](const std::vector<std::size_t>& idx) {
        std::vector<const std::vector<std::int32_t>*> seqs;
        std::vector<int> lab;
        std::vector<float> z;
        for (auto i : idx) {
          seqs.push_back(&p.train[i]);
          lab.push_back(p.train_y[i]);
          if (cfg.ensemble()) z.push_back(p.train_nb[i]);
        }
        return to_backend<B>(make_batch(seqs, lab, z, cfg));
      },
      [&](attn::Tape& tape, const BatchOn<B>& b) { return training_loss(tape, model, b, o); },
      [&] {
        const auto ev = evaluate(model, p.valid, p.valid_y, nb_of(p.valid_nb), p.valid_words, 64);
        return examples::Validation{.loss = ev.loss, .accuracy = ev.accuracy};
      });
  res.history = log.history;
  res.train_seconds = log.train_seconds;
  res.best_valid = log.best_valid;
  if (!par.main()) return res;  // the final evaluation and the report are rank 0's

  // Final numbers come from the best checkpoint.
  attn::io::load(model, dir / "model.safetensors");
  model.eval();
  auto ev = evaluate(model, p.valid, p.valid_y, nb_of(p.valid_nb), p.valid_words, 64);
  for (std::size_t k = 0; k < ev.buckets.num_buckets(); ++k) {
    res.bucket_labels.push_back(ev.buckets.label(k));
    res.bucket_acc.push_back(ev.buckets.accuracy(k));
    res.bucket_counts.push_back(ev.buckets.count(k));
  }
  fmt::print("best validation accuracy {:.2f}%\n{}", 100 * ev.accuracy, ev.buckets.table());
  if constexpr (B::host_accessible) {  // the same model served with dynamic int8 quantization (predict --precision int8)
    const auto q = attn::nn::quantize_dynamic(model);
    const attn::PrecisionScope int8(attn::Precision::int8);
    const auto e8 = evaluate(model, p.valid, p.valid_y, nb_of(p.valid_nb), p.valid_words, 64);
    res.valid_int8 = e8.accuracy;
    fmt::print("int8 inference (nn::quantize_dynamic, {} weights): validation accuracy {:.2f}% ({:+.2f} points)\n", q.weights,
               100 * e8.accuracy, 100 * (e8.accuracy - ev.accuracy));
  }
  if (!p.test.empty()) {
    auto te = evaluate(model, p.test, p.test_y, nb_of(p.test_nb), p.test_words, 64);
    res.test_acc = te.accuracy;
    for (std::size_t k = 0; k < te.buckets.num_buckets(); ++k) {
      res.test_bucket_acc.push_back(te.buckets.accuracy(k));
      res.test_bucket_counts.push_back(te.buckets.count(k));
    }
    fmt::print("test accuracy {:.2f}% ({} reviews)\n{}", 100 * te.accuracy, p.test.size(), te.buckets.table());
  }
  if (cfg.layers) {
    res.entropy = attention_entropy(model, p.valid);
    for (std::size_t l = 0; l < cfg.layers; ++l) {
      fmt::print("attention entropy on validation{} (fraction of uniform):", cfg.layers > 1 ? fmt::format(", layer {}", l + 1) : "");
      for (std::size_t h = 0; h < heads; ++h) fmt::print(" {:.2f}", res.entropy.per_head[l][h]);
      fmt::print("{}\n", l + 1 == cfg.layers && !res.entropy.cls.empty() ? " (every row; the model reads only the [CLS] row of this layer)" : "");
    }
    if (!res.entropy.cls.empty()) {
      fmt::print("attention entropy of the [CLS] row (the classifier's input), last layer:");
      for (double v : res.entropy.cls) fmt::print(" {:.2f}", v);
      fmt::print("\n");
    }
    if (res.entropy.skipped) fmt::print("(entropy: {} validation reviews too long to form dense weights were left out)\n", res.entropy.skipped);
    std::vector<std::string> texts{kArticleSentence};
    texts.insert(texts.end(), o.explain.begin(), o.explain.end());
    for (auto& t : texts) res.html_heatmaps += heatmaps_html(model, p.vocab, t);
  }
  return res;
}

}  // namespace imdb
