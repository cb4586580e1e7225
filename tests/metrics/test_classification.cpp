// SPDX-License-Identifier: MIT
// Accuracy, confusion matrix, per-class precision/recall/F1 and macro-F1 against hand-computed values.
#include <catch2/catch.hpp>

#include <attn/metrics/classification.hpp>

#include <string>
#include <vector>

using namespace attn::metrics;
using Catch::Contains;
using L = std::vector<int>;

namespace {
// truth 0 0 0 1 1 2 2 2 2 0
// pred  0 0 1 1 0 2 2 1 2 0
// rows = truth:  [3 1 0]  [1 1 0]  [0 1 3]
ConfusionMatrix example() {
  ConfusionMatrix cm(3);
  cm.add(L{0, 0, 0, 1, 1, 2, 2, 2, 2, 0}, L{0, 0, 1, 1, 0, 2, 2, 1, 2, 0});
  return cm;
}
}  // namespace

TEST_CASE("metrics: confusion matrix counts and accuracy") {
  const ConfusionMatrix cm = example();
  CHECK(cm.count(0, 0) == 3);
  CHECK(cm.count(0, 1) == 1);
  CHECK(cm.count(1, 0) == 1);
  CHECK(cm.count(2, 1) == 1);
  CHECK(cm.count(2, 0) == 0);
  CHECK(cm.total() == 10);
  CHECK(cm.support(2) == 4);
  CHECK(cm.predicted(1) == 3);
  CHECK(cm.accuracy() == Approx(0.7));
  CHECK(accuracy(L{0, 0, 0, 1, 1, 2, 2, 2, 2, 0}, L{0, 0, 1, 1, 0, 2, 2, 1, 2, 0}) == Approx(0.7));
}

TEST_CASE("metrics: per-class precision, recall, F1 and macro-F1 by hand") {
  const ConfusionMatrix cm = example();
  // class 0: TP 3, predicted 4, support 4 -> P 3/4, R 3/4, F1 3/4
  CHECK(cm.scores(0).precision == Approx(0.75));
  CHECK(cm.scores(0).recall == Approx(0.75));
  CHECK(cm.scores(0).f1 == Approx(0.75));
  // class 1: TP 1, predicted 3, support 2 -> P 1/3, R 1/2, F1 2/5
  CHECK(cm.scores(1).precision == Approx(1.0 / 3));
  CHECK(cm.scores(1).recall == Approx(0.5));
  CHECK(cm.scores(1).f1 == Approx(0.4));
  // class 2: TP 3, predicted 3, support 4 -> P 1, R 3/4, F1 6/7
  CHECK(cm.scores(2).precision == Approx(1.0));
  CHECK(cm.scores(2).recall == Approx(0.75));
  CHECK(cm.scores(2).f1 == Approx(6.0 / 7));
  CHECK(cm.scores(2).support == 4);
  CHECK(cm.macro_f1() == Approx((0.75 + 0.4 + 6.0 / 7) / 3));  // 0.669047...
}

TEST_CASE("metrics: macro-F1 with a class that is never predicted (sklearn zero_division=0)") {
  // truth 0 1 2 2, pred 0 1 1 1: class 2 is never predicted -> P = 0 (0/0), R = 0, F1 = 0.
  // F1: class 0 = 1, class 1 = 2*1/(1+3) = 0.5, class 2 = 0 -> macro 0.5 (= sklearn f1_score average="macro").
  const L truth{0, 1, 2, 2}, pred{0, 1, 1, 1};
  ConfusionMatrix cm(3);
  cm.add(truth, pred);
  CHECK(cm.scores(2).precision == 0.0);
  CHECK(cm.scores(2).recall == 0.0);
  CHECK(cm.scores(2).f1 == 0.0);
  CHECK(cm.macro_f1() == Approx(0.5));
  // A 4th class absent from truth and predictions is left out of the mean, as sklearn does.
  CHECK(macro_f1(truth, pred, 4) == Approx(0.5));
  // A class predicted but never true does count (F1 0).
  CHECK(macro_f1(L{0, 0}, L{0, 1}, 2) == Approx((2.0 / 3 + 0.0) / 2));
}

TEST_CASE("metrics: empty inputs and bad arguments") {
  ConfusionMatrix cm(2);
  CHECK(cm.accuracy() == 0.0);
  CHECK(cm.macro_f1() == 0.0);
  CHECK(accuracy(L{}, L{}) == 0.0);
  CHECK_THROWS_WITH(cm.add(2, 0), Contains("true class 2 outside [0, 2)"));
  CHECK_THROWS_WITH(cm.add(0, -1), Contains("predicted class -1"));
  CHECK_THROWS_AS(cm.add(L{0, 1}, L{0}), attn::ArgumentError);
  CHECK_THROWS_AS(accuracy(L{0, 1}, L{0}), attn::ArgumentError);
  CHECK_THROWS_AS(ConfusionMatrix(0), attn::ArgumentError);
  CHECK_THROWS_WITH(ConfusionMatrix(std::size_t{1} << 32), Contains("num_classes must be in [1, 2^31]"));  // C * C would wrap
  CHECK_THROWS_WITH(cm.count(0, 2), Contains("class (0, 2) outside [0, 2)"));  // not count(1, 0)
  CHECK_THROWS_AS(cm.count(2, 0), attn::ArgumentError);
  ConfusionMatrix other(3);
  CHECK_THROWS_AS(cm.merge(other), attn::ArgumentError);
}

TEST_CASE("metrics: merge adds counts") {
  ConfusionMatrix a = example(), b = example();
  a.merge(b);
  CHECK(a.total() == 20);
  CHECK(a.count(0, 0) == 6);
  CHECK(a.macro_f1() == Approx(example().macro_f1()));
  a.clear();
  CHECK(a.total() == 0);
}

TEST_CASE("metrics: report and confusion matrix tables") {
  const ConfusionMatrix cm = example();
  const std::vector<std::string> names{"story", "culture", "sports"};
  const std::string r = format_report(cm, names);
  CHECK_THAT(r, Contains("precision") && Contains("f1-score") && Contains("support"));
  CHECK_THAT(r, Contains("     culture    0.3333    0.5000    0.4000         2\n"));
  CHECK_THAT(r, Contains("\n    accuracy                        0.7000        10\n"));
  CHECK_THAT(r, Contains("\n   macro avg    0.6944    0.6667    0.6690        10\n"));
  // weighted: P = .4*.75 + .2/3 + .4*1 = .7667, R = .7, F1 = .4*.75 + .2*.4 + .4*6/7 = .7229
  CHECK_THAT(r, Contains("\nweighted avg    0.7667    0.7000    0.7229        10\n"));
  const std::string m = format_confusion_matrix(cm, names);
  CHECK(m ==
        "true\\pred   story culture  sports\n"
        "story           3       1       0\n"
        "culture         1       1       0\n"
        "sports          0       1       3\n");
  CHECK_THAT(format_report(cm), Contains("\n           2    1.0000    0.7500    0.8571         4\n"));  // numeric names by default
}
