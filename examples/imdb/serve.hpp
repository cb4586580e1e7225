// SPDX-License-Identifier: MIT
// `imdb predict` with the model on a backend (predict<B>), instantiated for the CPU by main.cpp
// and for CUDA by cuda.cu.
#pragma once
#include <attn/attn.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../common/device.hpp"
#include "../common/dump.hpp"
#include "../common/json_files.hpp"
#include "../common/run_dir.hpp"
#include "run.hpp"

namespace imdb {

template <class B = attn::cpu>
int predict(std::size_t heads, const fs::path& dir, const std::vector<std::string>& texts, const std::string& dump) {
  const auto cfg = examples::with_json_file(dir / "config.json", [&](const json& j) { return ModelConfig::from_json(j.at("model")); });
  auto vocab = data::Vocab::load(dir / "vocab.txt");
  if (vocab.size() != cfg.vocab) throw attn::FormatError((dir / "vocab.txt").string(), 1, "vocabulary size differs from config.json");
  auto model = attn::nn::skip_init<ImdbClassifier<B>>(cfg, heads);  // its weights are read next
  examples::load_committed_model(model, dir, heads);
  model.eval();
  const data::EnglishTokenizer tok;
  for (auto& text : texts) {
    auto toks = tok(text);
    auto ids = encode(vocab, toks);
    const auto kept = kept_positions(ids.size(), cfg.max_len, cfg.truncate);
    attn::NoGrad ctx;
    std::vector<attn::Tensor<float, attn::AnyShape, B>> weights;
    const auto b = to_backend<B>(make_batch({&ids}, {0}, {model.nb_logit(ids)}, cfg));
    const auto pr = examples::to_host(attn::softmax(ctx, model.forward(ctx, b, &weights)).value());
    const bool pos = pr(0, 1) >= 0.5f;
    fmt::print("{}\t{:.4f}", pos ? "positive" : "negative", pos ? pr(0, 1) : pr(0, 0));
    if (!weights.empty()) {
      // The tokens the last layer's heads attend to most, on average: over every row, or the
      // [CLS] row alone (what the classifier sees).
      const auto w = examples::to_host(weights.back());
      const std::size_t t = kept.size(), off = cfg.offset();
      std::vector<std::pair<float, std::size_t>> recv(t);
      for (std::size_t j = 0; j < t; ++j) {
        float s = 0;
        for (std::size_t h = 0; h < heads; ++h)
          for (std::size_t i = 0; i < (off ? 1 : t); ++i) s += w(std::size_t(0), h, i, off + j);
        recv[j] = {s / float(heads * (off ? 1 : t)), j};
      }
      std::sort(recv.begin(), recv.end(), std::greater<>());
      fmt::print("\t");
      for (std::size_t k = 0; k < std::min<std::size_t>(5, t); ++k) {
        const std::size_t src = kept[recv[k].second];
        fmt::print("{}{}({:.3f})", k ? " " : "", src < toks.size() ? toks[src] : "?", recv[k].first);
      }
    }
    fmt::print("\n");
  }
  if (!dump.empty()) {  // all texts as one padded batch, as the model sees them, and its logits
    std::vector<std::vector<std::int32_t>> all;
    for (auto& text : texts) all.push_back(encode(vocab, tok(text)));
    std::vector<const std::vector<std::int32_t>*> ptrs;
    std::vector<float> nb;
    for (auto& ids : all) ptrs.push_back(&ids), nb.push_back(model.nb_logit(ids));
    attn::NoGrad ctx;
    const auto b = make_batch(ptrs, {}, nb, cfg);
    const auto logits = examples::to_host(model.forward(ctx, to_backend<B>(b)).value());
    using attn::io::DType;
    attn::io::TensorMap records{{"ids", examples::dump_record(b.ids, DType::I32)},
                                {"pos", examples::dump_record(b.pos, DType::I32)},
                                {"cls", examples::dump_record(b.cls, DType::I32)},
                                {"mask", examples::dump_record(b.mask.tensor(), DType::F32)},
                                {"nb", examples::dump_record(b.nb, DType::F32)},
                                {"logits", examples::dump_record(logits, DType::F32)}};
    for (std::size_t k = 0; k < b.grams.size(); ++k) records.emplace(fmt::format("grams{}", k + 2), examples::dump_record(b.grams[k], DType::I32));
    examples::write_dump(dump, records, "imdb");
    fmt::print("dump: {} ({} texts)\n", dump, texts.size());
  }
  return 0;
}

}  // namespace imdb
