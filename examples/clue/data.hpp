// SPDX-License-Identifier: MIT
// Data for the CLUE example, a single-text classification task in CLUE's layout (TNEWS's
// tnews_public, IFLYTEK's iflytek_public): reads {train,dev,test}.json and labels.json,
// carves a fixed-seed stratified validation split from train, tokenizes by character (keywords
// optionally appended after a <sep> token) and encodes everything with one vocabulary.
#pragma once
#include <attn/data.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/run_dir.hpp"
#include "model.hpp"
#include "options.hpp"

namespace clue {

namespace fs = std::filesystem;
namespace data = attn::data;

/// Separates a title from its keywords when --keywords is on. The tokenizer never produces it
/// ('<' is a token of its own), so it cannot collide with a character.
inline constexpr const char* kSepToken = "<sep>";

/// One split, encoded: ids (never empty), labels (-1 when unknown), the title and keywords, test ids.
struct Encoded {
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<int> labels;
  std::vector<std::string> text, keywords;
  std::vector<std::int64_t> example_ids;
  std::size_t size() const { return ids.size(); }
};

/// Everything a run needs, read once and shared by every head count of a sweep.
struct Prepared {
  data::ClueLabels labels;
  data::Vocab vocab;
  Encoded train, valid, dev, test;
};

/// The characters of a title, then (when keywords is on and there are any) <sep> and the
/// characters of the comma-separated keywords.
inline std::vector<std::string> tokens_of(const data::ChineseCharTokenizer& tok, const std::string& sentence,
                                          const std::string& keywords, bool use_keywords, data::TokenizeStats* stats = nullptr) {
  auto t = tok(sentence, stats);
  if (use_keywords && !keywords.empty()) {
    auto k = tok(keywords, stats);
    if (!k.empty()) {
      t.push_back(kSepToken);
      t.insert(t.end(), k.begin(), k.end());
    }
  }
  return t;
}

/// Ids of the first max_len tokens; an empty title becomes one <unk> (the LSTM needs length >= 1).
inline std::vector<std::int32_t> encode(const data::Vocab& v, const std::vector<std::string>& toks, std::size_t max_len) {
  auto ids = v.encode(toks);
  if (ids.empty()) ids.push_back(data::Vocab::unk_id);
  if (ids.size() > max_len) ids.resize(max_len);
  return ids;
}

inline data::ClueDataset read_split(const fs::path& path, const data::ClueLabels& labels, bool skip_bad, bool labeled) {
  auto ds = data::read_clue(path, labels, {.bad_lines = skip_bad ? data::BadLines::skip : data::BadLines::fail, .labeled = labeled});
  const auto& st = ds.stats;
  if (st.skipped) {
    fmt::print("data: {}: skipped {} malformed line{}\n", path.string(), st.skipped, st.skipped > 1 ? "s" : "");
    for (auto& m : st.skipped_messages) fmt::print("  {}\n", m);
    if (st.skipped > st.skipped_messages.size()) fmt::print("  ... and {} more\n", st.skipped - st.skipped_messages.size());
  }
  if (st.invalid_utf8) fmt::print("data: {}: {} invalid UTF-8 sequence(s) replaced by U+FFFD\n", path.string(), st.invalid_utf8);
  if (st.empty_sentences) fmt::print("data: {}: {} empty title(s), each encoded as one <unk>\n", path.string(), st.empty_sentences);
  return ds;
}

/// The name of test.json's predictions as CLUE's submissions have it: iflytek_predict.json for a
/// directory whose name starts with "iflytek" (iflytek_public), else tnews_predict.json.
inline std::string predictions_file(const fs::path& dir) {
  auto d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // "iflytek_public/"
  return d.filename().string().starts_with("iflytek") ? "iflytek_predict.json" : "tnews_predict.json";
}

/// Reads and encodes the data; the vocabulary is built from the training split unless `fixed` is given
/// (a trained model's own vocabulary).
inline Prepared prepare(const DataOptions& o, const data::Vocab* fixed = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir(o.dir);
  examples::require_directory(dir, "CLUE task directory (holding labels.json and train.json)");
  Prepared p;
  p.labels = data::read_clue_labels(dir / "labels.json");
  if (p.labels.size() < 2 || p.labels.size() > kMaxClasses)
    throw attn::FormatError((dir / "labels.json").string(), 1,
                            fmt::format("{} classes: a classifier needs 2 to {}", p.labels.size(), kMaxClasses));
  auto train = read_split(dir / "train.json", p.labels, o.skip_bad_lines, true);
  auto& ex = train.examples;
  if (o.limit && ex.size() > o.limit) ex.resize(o.limit);
  if (ex.size() < 2)
    throw attn::FormatError((dir / "train.json").string(), 1,
                            fmt::format("fewer than 2 labelled examples{}: training needs a training and a validation portion",
                                        o.limit ? fmt::format(" (--limit {})", o.limit) : ""));
  std::vector<int> labels;
  for (auto& e : ex) labels.push_back(e.label);
  auto split = data::stratified_split(labels, o.valid_fraction, o.seed);
  if (split.train.empty() || split.valid.empty())
    throw attn::ArgumentError(fmt::format("--valid-fraction {} leaves an empty training or validation split of {} titles", o.valid_fraction, ex.size()));

  const data::ChineseCharTokenizer tok;
  std::vector<std::vector<std::string>> toks(ex.size());
  for (std::size_t i = 0; i < ex.size(); ++i) toks[i] = tokens_of(tok, ex[i].sentence, ex[i].keywords, o.keywords);
  if (fixed) {
    p.vocab = *fixed;
  } else {
    data::TokenCounts counts;
    for (auto i : split.train) counts.add(toks[i]);
    p.vocab = data::Vocab::build(counts, {.min_freq = o.min_freq, .max_size = o.max_vocab});
  }

  auto add = [&](Encoded& e, const std::vector<std::string>& t, const data::ClueExample& x) {
    e.ids.push_back(encode(p.vocab, t, o.max_len));
    e.labels.push_back(x.label);
    e.text.push_back(x.sentence);
    e.keywords.push_back(x.keywords);
    e.example_ids.push_back(x.id);
  };
  for (auto i : split.train) add(p.train, toks[i], ex[i]);
  for (auto i : split.valid) add(p.valid, toks[i], ex[i]);
  for (auto [name, enc, labeled] : {std::tuple{"dev.json", &p.dev, true}, std::tuple{"test.json", &p.test, false}}) {
    std::error_code ec;
    // Optional: absent is fine; a directory, a FIFO or a device there is an error (read_file's).
    if (!fs::exists(fs::symlink_status(dir / name, ec))) continue;
    // test.json's predictions (predictions_file) are matched by "id", one per line: a line is
    // never skipped there, and one without an id is an error.
    auto ds = read_split(dir / name, p.labels, labeled && o.skip_bad_lines, labeled);
    std::unordered_map<std::int64_t, std::size_t> seen;  // test.json: id -> line
    for (auto& x : ds.examples) {
      if (!labeled && x.id < 0)
        throw attn::FormatError((dir / name).string(), x.line, "missing field 'id' (the predictions name each one by it)");
      if (!labeled)
        if (const auto [it, fresh] = seen.emplace(x.id, x.line); !fresh)
          throw attn::FormatError((dir / name).string(), x.line,
                                  fmt::format("id {} repeats that of line {} (the predictions name each one by it)", x.id, it->second));
      add(*enc, tokens_of(tok, x.sentence, x.keywords, o.keywords), x);
    }
  }
  std::vector<std::string> names;  // label_desc, or the label when there is none
  for (std::size_t c = 0; c < p.labels.size(); ++c) names.push_back(p.labels.descriptions[c].empty() ? p.labels.names[c] : p.labels.descriptions[c]);
  examples::warn_one_class(p.train.labels, names, "training");
  examples::warn_one_class(p.valid.labels, names, "validation");
  std::size_t unk = 0, total = 0;
  for (auto& s : p.valid.ids) {
    total += s.size();
    unk += std::size_t(std::count(s.begin(), s.end(), data::Vocab::unk_id));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("data: {} train / {} validation titles (fixed-seed {:.0f}% stratified split of {}/train.json, seed {}){}{}; "
             "vocabulary {} characters (min freq {}{}), {:.1f}% <unk> in validation; {:.1f}s\n",
             p.train.size(), p.valid.size(), 100 * o.valid_fraction, o.dir, o.seed,
             p.dev.size() ? fmt::format(", {} dev titles", p.dev.size()) : "",
             p.test.size() ? fmt::format(", {} test titles", p.test.size()) : "", p.vocab.size(), o.min_freq,
             o.keywords ? ", keywords appended" : "", total ? 100.0 * double(unk) / double(total) : 0.0, secs);
  return p;
}

}  // namespace clue
