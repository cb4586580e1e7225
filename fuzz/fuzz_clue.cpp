// SPDX-License-Identifier: MIT
// libFuzzer target: CLUE JSON-lines files (read_clue with every option, and read_clue_labels).
// The first input byte picks the reader and options, the rest is the file. Contract checked:
// a result whose counts add up, with valid UTF-8 text and labels in range, or a FormatError
// naming the file and a line of it. Anything else is a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include <attn/data/clue.hpp>

#include "fuzz_common.hpp"

namespace {

using namespace attn::data;

const ClueLabels& tnews_labels() {
  static const ClueLabels labels = [] {
    ClueLabels l;
    l.add("100", "news_story");
    l.add("101", "news_culture");
    l.add("102", "news_entertainment");
    l.add("0", "app");
    return l;
  }();
  return labels;
}

void check_dataset(const ClueDataset& d, const ClueOptions& o, std::uint64_t lines) {
  const auto& st = d.stats;
  fuzz::require(st.lines <= lines, "more lines counted than the file has");
  fuzz::require(d.examples.size() + st.skipped + st.empty_lines == st.lines,
                "every line is an example, a skipped line or a blank line");
  fuzz::require(o.bad_lines == BadLines::skip || st.skipped == 0, "lines skipped in fail mode");
  fuzz::require(st.skipped_messages.size() == std::min<std::size_t>(st.skipped, 10), "skipped messages miscounted");
  std::size_t unlabeled = 0, empty = 0;
  std::uint64_t prev = 0;
  for (const auto& ex : d.examples) {
    fuzz::require(ex.line > prev && ex.line <= st.lines, "example line numbers must increase within the file");
    prev = ex.line;
    fuzz::require(ex.label >= -1 && ex.label < static_cast<int>(tnews_labels().size()), "label index out of range");
    fuzz::require(o.labeled == false || ex.label >= 0, "labeled split returned an example without a label");
    fuzz::require(is_valid_utf8(ex.sentence) && is_valid_utf8(ex.keywords), "text is not valid UTF-8");
    unlabeled += ex.label < 0 ? 1 : 0;
    empty += ex.sentence.empty() ? 1 : 0;
  }
  fuzz::require(unlabeled == st.unlabeled && empty == st.empty_sentences, "stats disagree with the examples");
}

void check_labels(const ClueLabels& l) {
  fuzz::require(l.size() >= 1 && l.descriptions.size() == l.size(), "labels file result has no classes");
  for (std::size_t i = 0; i < l.size(); ++i) {
    fuzz::require(l.index(l.names[i]) == static_cast<int>(i), "label index does not round-trip");
    fuzz::require(is_valid_utf8(l.names[i]) && is_valid_utf8(l.descriptions[i]), "label text is not valid UTF-8");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  const std::filesystem::path path = fuzz::scratch_dir() / "input.json";
  fuzz::write_file(path, text);
  const std::uint64_t lines = fuzz::line_count(text);
  try {
    if (mode & 4) {
      check_labels(read_clue_labels(path));
    } else {
      ClueOptions o;
      o.labeled = (mode & 1) != 0;
      o.bad_lines = (mode & 2) ? BadLines::skip : BadLines::fail;
      check_dataset(read_clue(path, tnews_labels(), o), o, lines);
    }
  } catch (const attn::FormatError& e) {
    fuzz::check_format_error(e, path.string(), attn::FormatError::Kind::line, lines + 1);
  }
  return 0;
}
