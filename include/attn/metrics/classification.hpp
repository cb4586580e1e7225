// SPDX-License-Identifier: MIT
// Classification metrics from a confusion matrix: accuracy, per-class precision/recall/F1,
// macro-F1 (scikit-learn conventions), and text tables for logs.
//   attn::metrics::ConfusionMatrix cm(2); cm.add(truth, pred);  double f1 = cm.macro_f1();
//   std::cout << attn::metrics::format_report(cm, {"neg", "pos"});
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "text.hpp"

namespace attn::metrics {

/// Scores of one class. Undefined ratios (0/0) are 0, as scikit-learn's zero_division=0.
struct ClassScores {
  double precision = 0;
  double recall = 0;
  double f1 = 0;
  std::uint64_t support = 0;  ///< examples whose true class is this one
};

/// counts(t, p): examples of true class t predicted as p, for C classes.
class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(std::size_t num_classes) : classes_(checked_classes(num_classes)), counts_(num_classes * num_classes, 0) {}

  /// Records one prediction; ArgumentError when a class is outside [0, C).
  void add(int truth, int pred) {
    check(truth, "true");
    check(pred, "predicted");
    ++counts_[static_cast<std::size_t>(truth) * classes_ + static_cast<std::size_t>(pred)];
  }
  void add(std::span<const int> truth, std::span<const int> pred) {
    if (truth.size() != pred.size())
      throw ArgumentError(text::cat("ConfusionMatrix::add: ", std::to_string(truth.size()), " true labels but ", std::to_string(pred.size()), " predictions"));
    for (std::size_t i = 0; i < truth.size(); ++i) add(truth[i], pred[i]);
  }
  /// Adds another matrix of the same size (e.g. from another thread or worker).
  void merge(const ConfusionMatrix& other) {
    if (other.classes_ != classes_)
      throw ArgumentError(text::cat("ConfusionMatrix::merge: ", std::to_string(classes_), " classes vs ", std::to_string(other.classes_)));
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  }
  void clear() { std::fill(counts_.begin(), counts_.end(), 0); }

  std::size_t num_classes() const noexcept { return classes_; }
  /// ArgumentError when a class is outside [0, C).
  std::uint64_t count(std::size_t truth, std::size_t pred) const {
    if (truth >= classes_ || pred >= classes_)
      throw ArgumentError(text::cat("ConfusionMatrix::count: class (", std::to_string(truth), ", ", std::to_string(pred), ") outside [0, ",
                                    std::to_string(classes_), ")"));
    return counts_[truth * classes_ + pred];
  }
  std::uint64_t total() const noexcept {
    std::uint64_t n = 0;
    for (auto c : counts_) n += c;
    return n;
  }
  std::uint64_t correct() const noexcept {
    std::uint64_t n = 0;
    for (std::size_t c = 0; c < classes_; ++c) n += counts_[c * classes_ + c];
    return n;
  }
  /// Row sum: how many examples truly are class c.
  std::uint64_t support(std::size_t c) const {
    std::uint64_t n = 0;
    for (std::size_t p = 0; p < classes_; ++p) n += count(c, p);
    return n;
  }
  /// Column sum: how many examples were predicted as class c.
  std::uint64_t predicted(std::size_t c) const {
    std::uint64_t n = 0;
    for (std::size_t t = 0; t < classes_; ++t) n += count(t, c);
    return n;
  }

  /// correct / total; 0 for an empty matrix.
  double accuracy() const noexcept { return ratio(correct(), total()); }

  /// precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2 TP / (2 TP + FP + FN); each
  /// 0 when its denominator is 0.
  ClassScores scores(std::size_t c) const {
    const std::uint64_t tp = count(c, c);
    const std::uint64_t sup = support(c);
    const std::uint64_t pred = predicted(c);
    return {ratio(tp, pred), ratio(tp, sup), ratio(2 * tp, sup + pred), sup};
  }

  /// Unweighted mean F1 over the classes that occur in the truth or the predictions (the
  /// scikit-learn f1_score(average="macro") default). A class that occurs but is never
  /// predicted counts with F1 = 0; a class absent from both is left out. 0 when empty.
  double macro_f1() const {
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t c = 0; c < classes_; ++c) {
      if (support(c) == 0 && predicted(c) == 0) continue;
      sum += scores(c).f1;
      ++n;
    }
    return n == 0 ? 0.0 : sum / static_cast<double>(n);
  }

 private:
  /// Classes are int labels: at most 2^31 of them (so that C * C cannot overflow either).
  static std::size_t checked_classes(std::size_t n) {
    if (n == 0 || n > std::size_t{1} << 31)
      throw ArgumentError(text::cat("ConfusionMatrix: num_classes must be in [1, 2^31], got ", std::to_string(n)));
    return n;
  }
  static double ratio(std::uint64_t a, std::uint64_t b) noexcept {
    return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
  }
  void check(int c, const char* what) const {
    if (c < 0 || static_cast<std::size_t>(c) >= classes_) [[unlikely]]
      out_of_range(c, what);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void out_of_range(int c, const char* what) const {
    throw ArgumentError(text::cat("ConfusionMatrix::add: ", what, " class ", std::to_string(c), " outside [0, ", std::to_string(classes_), ")"));
  }

  std::size_t classes_;
  std::vector<std::uint64_t> counts_;  // (C, C) row-major, row = true class
};

/// Fraction of positions where truth == pred (0 when empty).
inline double accuracy(std::span<const int> truth, std::span<const int> pred) {
  if (truth.size() != pred.size())
    throw ArgumentError(text::cat("accuracy: ", std::to_string(truth.size()), " true labels but ", std::to_string(pred.size()), " predictions"));
  std::size_t ok = 0;
  for (std::size_t i = 0; i < truth.size(); ++i) ok += truth[i] == pred[i] ? 1 : 0;
  return truth.empty() ? 0.0 : static_cast<double>(ok) / static_cast<double>(truth.size());
}

/// Macro-F1 of predictions over classes 0..num_classes-1 (see ConfusionMatrix::macro_f1).
inline double macro_f1(std::span<const int> truth, std::span<const int> pred, std::size_t num_classes) {
  ConfusionMatrix cm(num_classes);
  cm.add(truth, pred);
  return cm.macro_f1();
}

namespace detail {
inline std::string class_name(std::span<const std::string> names, std::size_t c) {
  return c < names.size() ? names[c] : std::to_string(c);
}
}  // namespace detail

/// A scikit-learn style report: per-class precision, recall, F1 and support, then accuracy,
/// macro and weighted averages. `names` (optional) labels the classes; `digits` decimals.
inline std::string format_report(const ConfusionMatrix& cm, std::span<const std::string> names = {}, int digits = 4) {
  const std::size_t c = cm.num_classes();
  std::size_t w = std::string_view("weighted avg").size();
  for (std::size_t i = 0; i < c; ++i) w = std::max(w, text::width(detail::class_name(names, i)));
  const std::size_t cw = std::size_t(std::max(digits + 3, 9));  // column width
  using text::right, text::fixed;
  // One row: a name, three scores (or blanks) and a count.
  auto row = [&](std::string_view name, const std::string& p, const std::string& r, const std::string& f, std::uint64_t n) {
    return text::cat(right(name, w), " ", right(p, cw), " ", right(r, cw), " ", right(f, cw), " ", right(std::to_string(n), cw), "\n");
  };
  std::string out = text::cat(right("", w), " ", right("precision", cw), " ", right("recall", cw), " ", right("f1-score", cw), " ",
                              right("support", cw), "\n\n");
  double mp = 0, mr = 0, mf = 0, wp = 0, wr = 0, wf = 0;
  std::size_t present = 0;
  const std::uint64_t total = cm.total();
  for (std::size_t i = 0; i < c; ++i) {
    const ClassScores s = cm.scores(i);
    out += row(detail::class_name(names, i), fixed(s.precision, digits), fixed(s.recall, digits), fixed(s.f1, digits), s.support);
    if (s.support > 0 || cm.predicted(i) > 0) {
      mp += s.precision, mr += s.recall, mf += s.f1;
      ++present;
    }
    const double share = total ? static_cast<double>(s.support) / static_cast<double>(total) : 0.0;
    wp += share * s.precision, wr += share * s.recall, wf += share * s.f1;
  }
  const double k = present ? 1.0 / static_cast<double>(present) : 0.0;
  out += "\n";
  out += row("accuracy", "", "", fixed(cm.accuracy(), digits), total);
  out += row("macro avg", fixed(mp * k, digits), fixed(mr * k, digits), fixed(mf * k, digits), total);
  out += row("weighted avg", fixed(wp, digits), fixed(wr, digits), fixed(wf, digits), total);
  return out;
}

/// The confusion matrix as a table: rows are true classes, columns predicted classes.
inline std::string format_confusion_matrix(const ConfusionMatrix& cm, std::span<const std::string> names = {}) {
  const std::size_t c = cm.num_classes();
  std::size_t w = std::string_view("true\\pred").size();
  std::size_t cw = 1;
  for (std::size_t i = 0; i < c; ++i) {
    w = std::max(w, text::width(detail::class_name(names, i)));
    cw = std::max(cw, text::width(detail::class_name(names, i)));
    for (std::size_t j = 0; j < c; ++j) cw = std::max(cw, std::to_string(cm.count(i, j)).size());
  }
  std::string out = text::left("true\\pred", w);
  for (std::size_t j = 0; j < c; ++j) out += text::cat(" ", text::right(detail::class_name(names, j), cw));
  out += '\n';
  for (std::size_t i = 0; i < c; ++i) {
    out += text::left(detail::class_name(names, i), w);
    for (std::size_t j = 0; j < c; ++j) out += text::cat(" ", text::right(std::to_string(cm.count(i, j)), cw));
    out += '\n';
  }
  return out;
}

}  // namespace attn::metrics
