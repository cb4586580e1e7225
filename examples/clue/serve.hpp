// SPDX-License-Identifier: MIT
// Serving a trained CLUE model on a backend: `clue predict` (predict<B>) and `clue --bench`
// (run_bench<B>), instantiated for the CPU by main.cpp and for CUDA by cuda.cu. The embedding
// fold and int8 quantization are the CPU's: on CUDA the model runs as trained, in FP32.
#pragma once
#include <attn/attn.hpp>
#include <attn/backend/cpu/ceiling.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "../common/device.hpp"
#include "../common/dump.hpp"
#include "../common/json_files.hpp"
#include "../common/run_dir.hpp"
#include "bench.hpp"
#include "run.hpp"

namespace clue {

template <class B = attn::cpu>
int predict(const fs::path& dir, const Trained& tr, const std::vector<std::string>& texts, const std::string& keywords, std::size_t top,
            const std::string& dump) {
  const std::size_t heads = tr.heads;
  auto model = attn::nn::skip_init<TnewsClassifier<B>>(tr.cfg, heads);  // its weights are read next
  examples::load_committed_model(model, dir, heads);
  model.eval();
  if constexpr (B::host_accessible) model.fold_embedding();  // inference from here on: the embedding folded into the recurrent layer
  const bool use_kw = tr.config.value("keywords", false);
  if (!use_kw && !keywords.empty())
    fmt::print(stderr, "note: --keywords ignored: {} was trained without --keywords (titles alone)\n", dir.string());
  const data::ChineseCharTokenizer tok;
  const auto names = class_names(tr.labels);
  for (auto& text : texts) {
    data::TokenizeStats ts;
    const auto toks = tokens_of(tok, text, keywords, use_kw, &ts);
    if (ts.invalid) std::fprintf(stderr, "clue: note: %zu invalid UTF-8 sequence(s) replaced by U+FFFD\n", ts.invalid);
    const auto ids = encode(tr.vocab, toks, tr.cfg.max_len);
    attn::NoGrad ctx;
    attn::Tensor<float, attn::AnyShape, B> wd;
    const auto b = to_backend<B>(make_batch({&ids}, {}));
    const auto pr = examples::to_host(attn::softmax(ctx, model.forward(ctx, b, &wd)).value());
    const std::size_t c = attn::argmax_rows(pr)[0];
    fmt::print("{}\t{}\t{:.4f}\t", names[c], tr.labels.names[c], pr(0, c));
    if (heads == 0) {  // the ablation: no attention weights to rank the characters by
      fmt::print("(no attention)\n");
      continue;
    }
    const auto w = examples::to_host(wd);
    // The weight each character receives, averaged over heads and queries: with mean pooling this
    // is how much of the pooled vector comes from it.
    const std::size_t t = ids.size();
    std::vector<std::pair<float, std::size_t>> recv(t);
    for (std::size_t j = 0; j < t; ++j) {
      float s = 0;
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < t; ++i) s += w(std::size_t(0), h, i, j);
      recv[j] = {s / float(heads * t), j};
    }
    std::stable_sort(recv.begin(), recv.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (std::size_t k = 0; k < std::min(top, t); ++k) {
      const std::size_t j = recv[k].second;
      fmt::print("{}{}({:.3f})", k ? " " : "", j < toks.size() ? toks[j] : "<unk>", recv[k].first);
    }
    fmt::print("\n");
  }
  if (!dump.empty()) {  // all titles as one padded batch, as the model sees them, and its logits
    std::vector<std::vector<std::int32_t>> all;
    for (auto& text : texts) all.push_back(encode(tr.vocab, tokens_of(tok, text, keywords, use_kw, nullptr), tr.cfg.max_len));
    std::vector<const std::vector<std::int32_t>*> ptrs;
    for (auto& ids : all) ptrs.push_back(&ids);
    attn::NoGrad ctx;
    const auto b = make_batch(ptrs, {});
    const auto logits = examples::to_host(model.forward(ctx, to_backend<B>(b)).value());
    using attn::io::DType;
    examples::write_dump(dump,
                         {{"ids", examples::dump_record(b.ids, DType::I32)},
                          {"mask", examples::dump_lengths_mask(b.lengths.values(), b.ids.size(1))},
                          {"logits", examples::dump_record(logits, DType::F32)}},
                         "clue");
    fmt::print("dump: {} ({} titles)\n", dump, texts.size());
  }
  return 0;
}

template <class B = attn::cpu>
void run_bench(std::size_t heads, const Options& o) {
  std::optional<Trained> tr;
  if (!o.model_dir.empty()) tr = load_trained(o.model_dir);
  DataOptions d = o.data;
  if (tr) {  // the model's own data, preprocessing and validation split
    if (!o.data_given && tr->data_dir) d.dir = *tr->data_dir;
    d.keywords = tr->config.value("keywords", false);
    d.max_len = tr->cfg.max_len;
    d.seed = tr->split_seed.value_or(tr->config.value("seed", d.seed));
    d.valid_fraction = tr->config.value("valid_fraction", d.valid_fraction);
    d.limit = tr->limit.value_or(d.limit);
    d.skip_bad_lines = tr->skip_bad_lines.value_or(d.skip_bad_lines);
  }
  auto p = prepare(d, tr ? &tr->vocab : nullptr);
  ModelConfig cfg = tr ? tr->cfg
                       : ModelConfig{.vocab = p.vocab.size(), .max_len = o.data.max_len, .dropout = o.dropout, .attn_dropout = o.attn_dropout,
                                     .residual = o.residual, .classes = p.labels.size(), .rnn = o.rnn};
  auto model = attn::nn::skip_init<TnewsClassifier<B>>(cfg, heads);  // loaded or drawn next
  if (tr) examples::load_committed_model(model, o.model_dir, heads);
  else model.init(o.train.seed);
  model.eval();
  std::string quantized;
  double ceiling = 0;  // the CPU's FP32 GEMM rate: the bound of a CPU run
  if constexpr (B::host_accessible) {
    if (attn::precision() == attn::Precision::int8) {  // quantized once, before the timed passes
      const auto q = attn::nn::quantize_dynamic(model);
      quantized = fmt::format(", {} weights in int8 ({:.0f} KB, {:.0f} KB in float)", q.weights, double(q.int8_bytes) / 1024,
                              double(q.float_bytes) / 1024);
    }
    if (o.fold) model.fold_embedding();  // the embedding folded into the recurrent layer's input projections, in this precision
    ceiling = attn::cpu_gemm_ceiling_gflops(2048, 5, 3.0);
  }
  const bool folded = model.folded.has_value();
  fmt::print("bench: {}, {}{}, {} products{} ({}); inputs: the validation titles\n", heads_label(heads),
             tr ? "trained model " + o.model_dir : std::string("untrained model"), folded ? "" : ", embedding not folded",
             B::host_accessible ? attn::precision_route(attn::precision()) : std::string("FP32"), quantized,
             B::host_accessible ? fmt::format("{} thread(s)", attn::cpu::threads()) : std::string("on ") + B::name);
  auto r = bench_inference(model, p.valid.ids, 64, o.bench_seconds, o.bench_latency, true, ceiling);
  fmt::print("{}\n", r.str());
  fmt::print("BENCH {}\n", json{{"heads", heads}, {"threads", attn::cpu::threads()}, {"titles", r.titles}, {"mean_len", r.mean_len},
                                {"batch64_samples_per_s", r.samples_per_s}, {"batch64_best_samples_per_s", r.best_samples_per_s},
                                {"batch64_padding", r.padding}, {"batch64_sorted_samples_per_s", r.sorted_samples_per_s},
                                {"batch64_sorted_padding", r.sorted_padding}, {"batch1_median_ms", r.b1_median_ms},
                                {"batch1_p99_ms", r.b1_p99_ms}, {"mflop_per_title", r.mflop_per_title},
                                {"ceiling_gflops", r.ceiling_gflops}, {"bound_samples_per_s", r.bound_samples_per_s},
                                {"keywords", d.keywords}, {"folded", folded}, {"rnn", model.cfg.rnn}, {"device", B::name},
                                {"precision", B::host_accessible ? attn::precision_name(attn::precision()) : "fp32"}}
                                   .dump());
}

}  // namespace clue
