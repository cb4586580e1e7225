// SPDX-License-Identifier: MIT
// A self-contained HTML report: line charts (loss, accuracy) and attention heatmaps as inline SVG,
// no scripts or external files. Written atomically.
#pragma once
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <attn/backend/cpu.hpp>  // attn::Tensor<float> on the CPU
#include <attn/data/file_io.hpp>
#include <fmt/format.h>

namespace examples {

inline std::string html_escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Series {
  std::string name;
  std::vector<double> x, y;
};

/// A line chart of several series sharing axes. Seven colours, then the same colours dashed (four
/// line styles: 28 series apart); the chart grows to hold its legend.
inline std::string svg_line_chart(const std::string& title, const std::string& xlabel, const std::vector<Series>& series) {
  const double W = 560, L = 56, R = 150, T = 30, Bm = 40;
  const double H = std::max(300.0, T + 16.0 * double(series.size()) + 20);
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (auto& s : series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - Bm); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='11'>", W, H);
  s += fmt::format("<text x='{}' y='18' font-size='13' font-weight='bold'>{}</text>", L, html_escape(title));
  s += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>", L, T, W - L - R, H - T - Bm);
  for (int k = 0; k <= 4; ++k) {
    const double yv = y0 + (y1 - y0) * k / 4, xv = x0 + (x1 - x0) * k / 4;
    s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{:.3g}</text>", L - 4, py(yv) + 4, yv);
    s += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#eee'/>", L, W - R, py(yv), py(yv));
    s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{:.3g}</text>", px(xv), H - Bm + 14, xv);
  }
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>", (L + W - R) / 2, H - 8, html_escape(xlabel));
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& sr = series[k];
    const char* c = colors[k % 7];
    static const char* dashes[] = {"", " stroke-dasharray='6,3'", " stroke-dasharray='2,2'", " stroke-dasharray='8,3,2,3'"};
    const char* dash = dashes[(k / 7) % 4];
    std::string pts;
    for (std::size_t i = 0; i < sr.x.size(); ++i)
      if (std::isfinite(sr.y[i])) pts += fmt::format("{:.1f},{:.1f} ", px(sr.x[i]), py(sr.y[i]));
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.6'{} points='{}'/>", c, dash, pts);
    s += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='{}' stroke-width='3'{}/>", W - R + 10, W - R + 26, T + 10 + 16 * k,
                     T + 10 + 16 * k, c, dash);
    s += fmt::format("<text x='{}' y='{}'>{}</text>", W - R + 30, T + 14 + 16 * k, html_escape(sr.name));
  }
  return s + "</svg>";
}

/// The colour of a weight x on the scale [0, vmax]: white at 0 to blue at vmax, values outside the scale
/// clamped to it; a weight that is not finite (a diverged model) is grey.
inline std::string heat_color(double x, double vmax) {
  if (!std::isfinite(x)) return "rgb(160,160,160)";
  const double v = vmax > 0 ? std::clamp(x / vmax, 0.0, 1.0) : (x > 0 ? 1.0 : 0.0);
  const int c = int(255 - 215 * v);
  return fmt::format("rgb({},{},255)", c, c);
}

/// A horizontal colour bar of the heatmap scale [0, vmax], titled with label, with ticks at 0, vmax / 2 and vmax.
inline std::string svg_color_legend(double vmax, const std::string& label = "attention weight") {
  const double L = 14, T = 20, bw = 200, bh = 12, W = L + bw + 40, H = T + bh + 18;
  constexpr int steps = 50;
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='10'>", W, H);
  s += fmt::format("<text x='{}' y='13' font-size='11'>{}</text>", L, html_escape(label));
  // The bar is drawn as narrow steps (each a little wider than its share, so no seams show between them).
  for (int k = 0; k < steps; ++k)
    s += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'/>", L + bw * k / steps, T, bw / steps + 0.6, bh,
                     heat_color((k + 0.5) / steps * vmax, vmax));
  s += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>", L, T, bw, bh);
  for (int k = 0; k <= 2; ++k) {
    const double x = L + bw * k / 2;
    s += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#888'/>", x, x, T + bh, T + bh + 3);
    const std::string tick = k == 0 ? std::string("0") : fmt::format("{:.3g}", vmax * k / 2);
    s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>", x, T + bh + 13, tick);
  }
  return s + "</svg>";
}

/// A row of bars under a heatmap (svg_heatmap): for every column, the mean of its weights over the
/// rows, or with `row` the weight in that row alone; titled with `label`.
struct HeatmapBars {
  std::string label;
  std::optional<std::size_t> row;
};

/// A heatmap of w (rows x cols, row-major) with token labels, coloured on the scale [0, vmax] (see heat_color);
/// hovering a cell shows its value. Under the map, one row of vertical bars for each entry of `bars`, titled
/// with its label: one bar under each column, scaled to the row's largest value (written at the left),
/// hovering a bar shows its column and value; a value that is not finite is drawn as a grey bar of full
/// height. A bars entry whose row is past the last row is an std::out_of_range.
inline std::string svg_heatmap(const std::string& title, const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                               const std::vector<float>& w, double vmax, const std::vector<HeatmapBars>& bars = {}) {
  for (const auto& b : bars)
    if (b.row && *b.row >= rows.size()) throw std::out_of_range("svg_heatmap: the bars' row is past the last row");
  const double cell = 22, L = 90, T = 90, gap = 8, label_h = 14, bar_h = 44, block = gap + label_h + bar_h;
  const double map_w = cell * double(cols.size()), map_bottom = T + cell * double(rows.size());
  const double W = std::max(L + map_w + 10, bars.empty() ? 0.0 : 300.0), H = map_bottom + block * double(bars.size()) + 10;
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='10'>", W, H);
  s += fmt::format("<text x='4' y='14' font-size='12' font-weight='bold'>{}</text>", html_escape(title));
  for (std::size_t j = 0; j < cols.size(); ++j)
    s += fmt::format("<text transform='translate({},{}) rotate(-60)'>{}</text>", L + cell * double(j) + cell / 2, T - 4, html_escape(cols[j]));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{}</text>", L - 4, T + cell * double(i) + cell * 0.7, html_escape(rows[i]));
    for (std::size_t j = 0; j < cols.size(); ++j) {
      const float x = w[i * cols.size() + j];
      s += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='{}'><title>{:.3f}</title></rect>", L + cell * double(j),
                       T + cell * double(i), cell - 1, cell - 1, heat_color(x, vmax), x);
    }
  }
  for (std::size_t k = 0; k < bars.size(); ++k) {
    const double bars_top = map_bottom + block * double(k) + gap + label_h, base = bars_top + bar_h;
    // Column means over the rows (or the one row's weights), and their scale: 0 at the baseline, the
    // largest finite value at the top.
    const auto& b = bars[k];
    std::vector<double> v(cols.size(), 0.0);
    const std::size_t first = b.row ? *b.row : 0, last = b.row ? *b.row + 1 : rows.size();
    for (std::size_t i = first; i < last; ++i)
      for (std::size_t j = 0; j < cols.size(); ++j) v[j] += w[i * cols.size() + j];
    double bmax = 0;
    for (double& m : v) {
      if (last > first) m /= double(last - first);
      if (std::isfinite(m)) bmax = std::max(bmax, m);
    }
    s += fmt::format("<text x='4' y='{}'>{}</text>", bars_top - 4, html_escape(b.label));
    s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{:.3g}</text>", L - 4, bars_top + 8, bmax);
    s += fmt::format("<text x='{}' y='{}' text-anchor='end'>0</text>", L - 4, base);
    s += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#eee'/>", L, L + map_w, bars_top, bars_top);
    for (std::size_t j = 0; j < cols.size(); ++j) {
      const double m = v[j], x = L + cell * double(j);
      const double h = !std::isfinite(m) ? bar_h : bmax > 0 ? std::clamp(m / bmax, 0.0, 1.0) * bar_h : 0.0;
      // An invisible rect over the whole bar height keeps short bars easy to hover.
      s += fmt::format("<g><title>{}: {:.3g}</title><rect x='{}' y='{}' width='{}' height='{}' fill='#fff' fill-opacity='0'/>",
                       html_escape(cols[j]), m, x, bars_top, cell - 1, bar_h);
      s += fmt::format("<rect x='{}' y='{:.2f}' width='{}' height='{:.2f}' fill='{}'/></g>", x, base - h, cell - 1, h,
                       std::isfinite(m) ? "rgb(70,90,210)" : "rgb(160,160,160)");
    }
    s += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='#888'/>", L, L + map_w, base, base);
  }
  return s + "</svg>";
}

/// The first sample's attention weights w (batch, heads, T, T) over its first labels.size() tokens: a colour
/// legend, then one heatmap per head (rows: the attending tokens, columns: the attended ones) with, under each
/// column, a bar of the mean attention that token receives; with read_row (a [CLS] token's row: the one a
/// classifier reads), first a row of bars of that row's weight on each token. All heads share one colour
/// scale, from 0 to the largest finite weight shown.
inline std::string head_heatmaps(const attn::Tensor<float>& w, const std::vector<std::string>& labels, std::size_t heads,
                                 std::optional<std::size_t> read_row = {}) {
  const std::size_t t = labels.size();
  std::vector<std::vector<float>> maps(heads, std::vector<float>(t * t));
  double vmax = 0;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < t; ++j) {
        const float x = w(std::size_t(0), h, i, j);
        maps[h][i * t + j] = x;
        if (std::isfinite(x)) vmax = std::max(vmax, double(x));
      }
  if (!(vmax > 0)) vmax = 1;  // no positive finite weight: every scale draws the cells alike
  std::string html = "<div>" + svg_color_legend(vmax, "attention weight") + "</div>";
  std::vector<HeatmapBars> bars;
  if (read_row) bars.push_back({fmt::format("weight of the {} row (what the classifier reads)", labels.at(*read_row)), read_row});
  bars.push_back({read_row ? "mean attention received per token (every row)" : "mean attention received per token", std::nullopt});
  for (std::size_t h = 0; h < heads; ++h)
    html += svg_heatmap(fmt::format("head {} of {}", h + 1, heads), labels, labels, maps[h], vmax, bars);
  return html;
}

/// Collects sections and writes one HTML file atomically.
class HtmlReport {
 public:
  explicit HtmlReport(std::string title) : title_(std::move(title)) {}
  void heading(const std::string& h) { body_ += "<h2>" + html_escape(h) + "</h2>\n"; }
  void paragraph(const std::string& p) { body_ += "<p>" + html_escape(p) + "</p>\n"; }
  void preformatted(const std::string& p) { body_ += "<pre>" + html_escape(p) + "</pre>\n"; }
  void raw(const std::string& html) { body_ += html + "\n"; }
  void write(const std::string& path) const {
    std::string doc = "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + html_escape(title_) +
                      "</title><style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}svg{margin:6px}"
                      "pre{background:#f6f6f6;padding:8px}</style></head><body><h1>" +
                      html_escape(title_) + "</h1>\n" + body_ + "</body></html>\n";
    attn::data::write_file_atomic(path, doc);
  }

 private:
  std::string title_, body_;
};

}  // namespace examples
