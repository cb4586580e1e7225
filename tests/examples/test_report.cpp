// SPDX-License-Identifier: MIT
// The examples' HTML report pieces (examples/common/report.hpp): the bars under an attention
// heatmap show the mean attention each token receives, and one row's weights (a [CLS] row).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../../examples/common/report.hpp"

namespace {

using Catch::Matchers::Contains;

TEST_CASE("report svg_line_chart: a legend of 24 series fits the chart, and series past 7 differ in line style") {
  std::vector<examples::Series> series;
  for (int k = 0; k < 24; ++k) series.push_back({"run " + std::to_string(k), {1, 2}, {1.0 * k, 2.0 * k}});
  const std::string svg = examples::svg_line_chart("loss", "epoch", series);
  const auto attr = [&](const std::string& name, std::size_t from) {
    const auto at = svg.find(name + "='", from);
    REQUIRE(at != std::string::npos);
    return std::stod(svg.substr(at + name.size() + 2));
  };
  const double height = attr("height", 0);
  const auto last = svg.find(">run 23<");
  REQUIRE(last != std::string::npos);
  const double last_y = attr("y", svg.rfind("<text", last));
  CHECK(last_y + 4 <= height);
  // Series 0 and 7 share a colour: the second is dashed.
  CHECK(svg.find("stroke-dasharray='6,3' points=") != std::string::npos);
  CHECK(examples::svg_line_chart("loss", "epoch", {series[0]}).find("height='300'") != std::string::npos);
}

TEST_CASE("report svg_heatmap: bars of the column means, of one row, or both") {
  const std::vector<std::string> labels{"a", "b"};
  const std::vector<float> w{0.9f, 0.1f, 0.5f, 0.5f};  // rows a, b
  const auto means = examples::svg_heatmap("m", labels, labels, w, 1.0, {{"mean received", std::nullopt}});
  CHECK_THAT(means, Contains("mean received"));
  CHECK_THAT(means, Contains("<title>a: 0.7</title>"));
  CHECK_THAT(means, Contains("<title>b: 0.3</title>"));
  const auto row0 = examples::svg_heatmap("m", labels, labels, w, 1.0, {{"row a", 0}});
  CHECK_THAT(row0, Contains("<title>a: 0.9</title>"));
  CHECK_THAT(row0, Contains("<title>b: 0.1</title>"));
  CHECK_THAT(row0, !Contains("<title>a: 0.7</title>"));
  const auto row1 = examples::svg_heatmap("m", labels, labels, w, 1.0, {{"row b", 1}});
  CHECK_THAT(row1, Contains("<title>a: 0.5</title>"));
  const auto both = examples::svg_heatmap("m", labels, labels, w, 1.0, {{"row a", 0}, {"mean received", std::nullopt}});
  CHECK_THAT(both, Contains("<title>a: 0.9</title>"));
  CHECK_THAT(both, Contains("<title>a: 0.7</title>"));
  CHECK_THROWS_AS(examples::svg_heatmap("m", labels, labels, w, 1.0, {{"row c", 2}}), std::out_of_range);
  // Without bars there are none.
  CHECK_THAT(examples::svg_heatmap("m", labels, labels, w, 1.0), !Contains("<title>a: "));
}

TEST_CASE("report head_heatmaps: a [CLS] model's bars are its [CLS] row's weights and the mean received, in every head") {
  // One sample, two heads, three tokens; head 1's [CLS] row sits on "good".
  const std::vector<float> v{0.2f, 0.3f, 0.5f, 0.3f, 0.4f, 0.3f, 0.1f, 0.1f, 0.8f,   // head 0
                             0.0f, 1.0f, 0.0f, 0.5f, 0.25f, 0.25f, 0.4f, 0.2f, 0.4f};  // head 1
  const auto w = attn::Tensor<float>::from(attn::Dims{1, 2, 3, 3}, std::span<const float>(v));
  const std::vector<std::string> labels{"[CLS]", "good", "film"};
  const auto cls = examples::head_heatmaps(w, labels, 2, 0);
  CHECK_THAT(cls, Contains("weight of the [CLS] row (what the classifier reads)"));
  CHECK_THAT(cls, Contains("<title>film: 0.5</title>"));  // head 0's [CLS] row
  CHECK_THAT(cls, Contains("<title>good: 1</title>"));    // head 1's
  CHECK_THAT(cls, Contains("mean attention received per token (every row)"));
  CHECK_THAT(cls, Contains("<title>good: 0.483</title>"));  // and head 1's mean received
  const auto mean = examples::head_heatmaps(w, labels, 2);
  CHECK_THAT(mean, Contains("mean attention received per token"));
  CHECK_THAT(mean, Contains("<title>good: 0.483</title>"));  // head 1: (1 + 0.25 + 0.2) / 3
}

}  // namespace
