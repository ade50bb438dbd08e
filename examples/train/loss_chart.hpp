/// \file
/// \brief The loss chart of mixprec-train: an SVG line chart (no external library) of the training and
/// validation loss against the iteration for every policy run — linear axes, one colour per policy (solid
/// line: train, dashed: validation), a legend, axis labels and a title. The colours, the XML escaping and
/// the number format are mixprec-llama's (../llama/svg_plot.hpp), whose chart (categorical x, log y) does not
/// fit loss curves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../llama/svg_plot.hpp"

namespace train_example {

/// One evaluation of a run: the iteration and the two loss estimates (nats per token). A non-finite loss
/// (a diverged run) breaks its line and is marked by a cross on the top edge.
struct loss_point {
  std::int64_t iter = 0;  ///< iteration the losses were measured before
  double train_loss = 0;  ///< training-split loss
  double val_loss = 0;    ///< validation-split loss
};

/// The curve of one policy's run: its name in the legend and its evaluations in increasing iteration order.
struct loss_curve {
  std::string policy;              ///< e.g. "p=f32,c=bf16,o=f32"
  std::vector<loss_point> points;  ///< at least one
};

namespace detail {

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` intervals over `span` > 0.
[[nodiscard]] inline double nice_step(double span, double target) {
  const double raw = span / target;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / decade;
  return decade * (r <= 1.0 ? 1.0 : r <= 2.0 ? 2.0 : r <= 5.0 ? 5.0 : 10.0);
}

/// A tick label: `v` with as many decimals as `step` needs (at most 6).
[[nodiscard]] inline std::string tick_label(double v, double step) {
  int decimals = 0;
  while (decimals < 6 && std::abs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) > 1e-6)
    ++decimals;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, std::abs(v) < step * 1e-9 ? 0.0 : v);
  return buffer;
}

}  // namespace detail

/// The chart as an SVG document: x = iteration from 0 to the largest iteration of any curve, y = loss over
/// the range of the finite losses (padded, with nice ticks), both linear; per curve a solid line with dots
/// for the training loss and a dashed line with squares for the validation loss in the curve's colour
/// (Okabe–Ito palette, cycled); a legend with one entry per policy and a key for the two line styles.
/// `subtitle` (e.g. the recipe) is printed under the title when non-empty.
/// \throws std::invalid_argument when `curves` is empty, a curve has no points, or its iterations are
///   negative or decreasing.
[[nodiscard]] inline std::string loss_chart_svg(const std::vector<loss_curve>& curves, std::string_view title,
                                                std::string_view subtitle = {}) {
  if (curves.empty()) throw std::invalid_argument("loss_chart_svg: no curves to plot");
  double x_max = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const loss_curve& c : curves) {
    if (c.points.empty()) throw std::invalid_argument("loss_chart_svg: the curve of '" + c.policy + "' has no points");
    std::int64_t previous = 0;
    for (const loss_point& p : c.points) {
      if (p.iter < previous) {
        throw std::invalid_argument("loss_chart_svg: the curve of '" + c.policy + "' has iteration " +
                                    std::to_string(p.iter) + " after " + std::to_string(previous) +
                                    ": give points in increasing iteration order, from 0");
      }
      previous = p.iter;
      x_max = std::max(x_max, static_cast<double>(p.iter));
      for (const double v : {p.train_loss, p.val_loss}) {
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
    }
  }
  if (!std::isfinite(lo)) lo = hi = 0;  // nothing finite: an empty frame around 0
  if (x_max <= 0) x_max = 1;
  // Nice y range: pad by 4 % and snap to the tick step.
  const double pad = std::max(0.04 * (hi - lo), 0.05);
  const double y_step = detail::nice_step((hi + pad) - (lo - pad), 6);
  const double y_lo = std::floor((lo - pad) / y_step) * y_step;
  const double y_hi = std::ceil((hi + pad) / y_step) * y_step;
  const double x_step = detail::nice_step(x_max, 8);
  const double x_hi = std::ceil(x_max / x_step) * x_step;

  using llama::svg::detail::escape;
  using llama::svg::detail::num;
  const double left = 80, right = 30, top = subtitle.empty() ? 56 : 74, plot_w = 760, plot_h = 420;
  const double legend_row = 22;
  const std::size_t per_row = 3;  // legend entries per row
  const double legend_rows = static_cast<double>((curves.size() + per_row - 1) / per_row) + 1;  // + style key
  const double plot_top = top + legend_rows * legend_row + 10;
  const double width = left + plot_w + right;
  const double height = plot_top + plot_h + 60;
  const auto x_of = [&](double iter) { return left + plot_w * iter / x_hi; };
  const auto y_of = [&](double loss) { return plot_top + plot_h * (y_hi - loss) / (y_hi - y_lo); };

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(width / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">" +
         escape(title) + "</text>\n";
  if (!subtitle.empty()) {
    svg += "<text x=\"" + num(width / 2) + "\" y=\"50\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\">" +
           escape(subtitle) + "</text>\n";
  }

  // Legend: policies (colour), then the line-style key.
  for (std::size_t k = 0; k < curves.size(); ++k) {
    const std::string colour(llama::svg::palette[k % llama::svg::palette.size()]);
    const double x = left + static_cast<double>(k % per_row) * (plot_w / static_cast<double>(per_row));
    const double y = top + static_cast<double>(k / per_row) * legend_row;
    svg += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 6) + "\" width=\"22\" height=\"12\" fill=\"" + colour + "\"/>";
    svg += "<text x=\"" + num(x + 30) + "\" y=\"" + num(y + 4) + "\" font-size=\"13\">" + escape(curves[k].policy) +
           "</text>\n";
  }
  {
    const double y = top + (legend_rows - 1) * legend_row;
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + 30) + "\" y2=\"" + num(y) +
           "\" stroke=\"#333\" stroke-width=\"2\"/>";
    svg += "<text x=\"" + num(left + 38) + "\" y=\"" + num(y + 4) + "\" font-size=\"13\">train loss</text>";
    svg += "<line x1=\"" + num(left + 150) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + 180) + "\" y2=\"" + num(y) +
           "\" stroke=\"#333\" stroke-width=\"2\" stroke-dasharray=\"7 4\"/>";
    svg += "<text x=\"" + num(left + 188) + "\" y=\"" + num(y + 4) + "\" font-size=\"13\">validation loss</text>\n";
  }

  // Frame, grid and ticks.
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(plot_top) + "\" width=\"" + num(plot_w) + "\" height=\"" +
         num(plot_h) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  const auto y_ticks = static_cast<long>(std::lround((y_hi - y_lo) / y_step));
  for (long i = 0; i <= y_ticks; ++i) {
    const double v = y_lo + static_cast<double>(i) * y_step;
    const double y = y_of(v);
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + plot_w) + "\" y2=\"" + num(y) +
           "\" stroke=\"#e4e4e4\"/>";
    svg += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\" font-size=\"12\">" +
           detail::tick_label(v, y_step) + "</text>\n";
  }
  const auto x_ticks = static_cast<long>(std::lround(x_hi / x_step));
  for (long i = 0; i <= x_ticks; ++i) {
    const double v = static_cast<double>(i) * x_step;
    const double x = x_of(v);
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(plot_top) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(plot_top + plot_h) + "\" stroke=\"#e4e4e4\"/>";
    svg += "<text x=\"" + num(x) + "\" y=\"" + num(plot_top + plot_h + 18) +
           "\" text-anchor=\"middle\" font-size=\"12\">" + detail::tick_label(v, x_step) + "</text>\n";
  }
  svg += "<text x=\"" + num(left + plot_w / 2) + "\" y=\"" + num(height - 14) +
         "\" text-anchor=\"middle\" font-size=\"13\">iteration</text>\n";
  const double y_mid = plot_top + plot_h / 2;
  svg += "<text x=\"22\" y=\"" + num(y_mid) + "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 22 " +
         num(y_mid) + ")\">loss (cross-entropy, nats per character)</text>\n";

  // Curves: a polyline per finite run of points, a marker per finite point, a cross for a non-finite one.
  for (std::size_t k = 0; k < curves.size(); ++k) {
    const std::string colour(llama::svg::palette[k % llama::svg::palette.size()]);
    for (const bool val : {false, true}) {
      const std::string dash = val ? " stroke-dasharray=\"7 4\"" : "";
      std::string points;
      std::size_t count = 0;
      const auto flush = [&] {
        if (count >= 2) {
          svg += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + colour +
                 "\" stroke-width=\"2\" stroke-linejoin=\"round\"" + dash + "/>\n";
        }
        points.clear();
        count = 0;
      };
      for (const loss_point& p : curves[k].points) {
        const double v = val ? p.val_loss : p.train_loss;
        const double x = x_of(static_cast<double>(p.iter));
        if (!std::isfinite(v)) {
          flush();
          svg += "<path d=\"M" + num(x - 5) + " " + num(plot_top - 5) + "L" + num(x + 5) + " " + num(plot_top + 5) +
                 "M" + num(x - 5) + " " + num(plot_top + 5) + "L" + num(x + 5) + " " + num(plot_top - 5) +
                 "\" stroke=\"" + colour + "\" stroke-width=\"2\"/>\n";
          continue;
        }
        points += num(x) + "," + num(y_of(v)) + " ";
        ++count;
      }
      flush();
      for (const loss_point& p : curves[k].points) {
        const double v = val ? p.val_loss : p.train_loss;
        if (!std::isfinite(v)) continue;
        const double x = x_of(static_cast<double>(p.iter)), y = y_of(v);
        if (val) {
          svg += "<rect x=\"" + num(x - 3) + "\" y=\"" + num(y - 3) +
                 "\" width=\"6\" height=\"6\" fill=\"white\" stroke=\"" + colour + "\" stroke-width=\"1.5\"/>";
        } else {
          svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3\" fill=\"" + colour + "\"/>";
        }
      }
      svg += "\n";
    }
  }
  svg += "</svg>\n";
  return svg;
}

/// Writes `loss_chart_svg(curves, title, subtitle)` to `file` (replacing it).
/// \throws std::invalid_argument as `loss_chart_svg`; std::runtime_error naming the file if it cannot be
///   written.
inline void write_loss_chart(const std::filesystem::path& file, const std::vector<loss_curve>& curves,
                             std::string_view title, std::string_view subtitle = {}) {
  const std::string svg = loss_chart_svg(curves, title, subtitle);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write the loss chart '" + file.string() + "'");
  out << svg;
  out.close();
  if (!out) throw std::runtime_error("error while writing the loss chart '" + file.string() + "'");
}

}  // namespace train_example
