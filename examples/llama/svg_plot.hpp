/// \file
/// \brief A self-contained SVG line chart of per-site errors (no external library): one or more stacked
/// panels sharing the x axis (the model's probe sites in execution order), a log10 y axis, one coloured
/// line with markers per series, a legend, axis labels and a title.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace llama::svg {

/// One line of a panel: a name for the legend and one value per site (any non-negative double; 0 is drawn
/// as a hollow marker on the panel's floor, +inf or NaN as a cross at its top).
struct series {
  std::string name;            ///< legend text
  std::vector<double> values;  ///< one per site, in site order
};

/// One panel: its y-axis label and its series (the same names, in the same order, in every panel).
struct panel {
  std::string y_label;
  std::vector<series> lines;
};

/// Colour-blind-safe palette (Okabe & Ito 2008, "Color Universal Design"), cycled by series index.
inline constexpr std::array<std::string_view, 7> palette{"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                         "#E69F00", "#56B4E9", "#000000"};

namespace detail {

/// `text` with the five XML special characters escaped.
[[nodiscard]] inline std::string escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

/// A coordinate with one decimal (SVG user units).
[[nodiscard]] inline std::string num(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", v);
  return buffer;
}

}  // namespace detail

/// The chart as an SVG document. `sites` label the x axis (one tick each, text rotated); every series of
/// every panel must have `sites.size()` values. The y range of each panel covers the decades of its finite
/// positive values (at least one decade); exact zeros sit on a floor one decade below, labelled "0".
/// \throws std::invalid_argument when there are no sites or panels, or a series has the wrong length.
[[nodiscard]] inline std::string line_chart(std::string_view title, std::string_view subtitle,
                                            const std::vector<std::string>& sites, const std::vector<panel>& panels,
                                            std::string_view x_label) {
  if (sites.empty() || panels.empty()) throw std::invalid_argument("svg::line_chart: nothing to plot");
  for (const auto& p : panels) {
    for (const auto& s : p.lines) {
      if (s.values.size() != sites.size()) {
        throw std::invalid_argument("svg::line_chart: series '" + s.name + "' has " + std::to_string(s.values.size()) +
                                    " values for " + std::to_string(sites.size()) + " sites");
      }
    }
  }
  using detail::num;
  const double left = 90, right = 30, top = 78, panel_height = 260, panel_gap = 34, legend_height = 30;
  std::size_t longest = 0;
  for (const auto& s : sites) longest = std::max(longest, s.size());
  const double bottom = 60 + 6.2 * static_cast<double>(longest) * 0.71;  // rotated labels (-45 degrees)
  const double step = std::max(34.0, 700.0 / static_cast<double>(sites.size()));
  const double plot_width = step * static_cast<double>(sites.size());
  const double width = left + plot_width + right;
  const double n_panels = static_cast<double>(panels.size());
  const double height = top + legend_height + n_panels * panel_height + (n_panels - 1) * panel_gap + bottom;
  const auto x_of = [&](std::size_t i) { return left + step * (static_cast<double>(i) + 0.5); };

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(width / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">" +
         detail::escape(title) + "</text>\n";
  svg += "<text x=\"" + num(width / 2) + "\" y=\"50\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\">" +
         detail::escape(subtitle) + "</text>\n";

  // Legend (the series of the first panel), one row above the panels.
  {
    double x = left;
    const double y = top;
    for (std::size_t k = 0; k < panels.front().lines.size(); ++k) {
      const std::string colour(palette[k % palette.size()]);
      svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x + 26) + "\" y2=\"" + num(y) +
             "\" stroke=\"" + colour + "\" stroke-width=\"2.5\"/>";
      svg += "<circle cx=\"" + num(x + 13) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"" + colour + "\"/>";
      const std::string& name = panels.front().lines[k].name;
      svg += "<text x=\"" + num(x + 32) + "\" y=\"" + num(y + 4) + "\" font-size=\"13\">" + detail::escape(name) +
             "</text>\n";
      x += 32 + 7.6 * static_cast<double>(name.size()) + 26;
    }
  }

  for (std::size_t p = 0; p < panels.size(); ++p) {
    const panel& pan = panels[p];
    const double y0 = top + legend_height + static_cast<double>(p) * (panel_height + panel_gap);  // panel top
    // The y range: whole decades around the finite positive values.
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& s : pan.lines) {
      for (const double v : s.values) {
        if (v > 0 && std::isfinite(v)) {
          lo = std::min(lo, std::log10(v));
          hi = std::max(hi, std::log10(v));
        }
      }
    }
    if (!std::isfinite(lo)) lo = hi = 0;
    double d_lo = std::floor(lo), d_hi = std::ceil(hi);
    if (d_hi - d_lo < 1) d_hi = d_lo + 1;
    const double floor_decade = d_lo - 1;  // where zeros are drawn
    const auto y_of = [&](double log_value) { return y0 + panel_height * (d_hi - log_value) / (d_hi - floor_decade); };
    // Frame, grid, y ticks.
    svg += "<rect x=\"" + num(left) + "\" y=\"" + num(y0) + "\" width=\"" + num(plot_width) + "\" height=\"" +
           num(panel_height) + "\" fill=\"none\" stroke=\"#333\"/>\n";
    for (double d = floor_decade; d <= d_hi + 0.5; d += 1) {
      const double y = y_of(d);
      svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + plot_width) + "\" y2=\"" +
             num(y) + "\" stroke=\"" + (d == floor_decade ? "#999" : "#ddd") + "\"" +
             (d == floor_decade ? " stroke-dasharray=\"4 3\"" : "") + "/>";
      const std::string label = d == floor_decade ? "0" : "1e" + std::to_string(static_cast<int>(d));
      svg += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\" font-size=\"12\">" +
             label + "</text>\n";
    }
    for (std::size_t i = 0; i < sites.size(); ++i) {
      svg += "<line x1=\"" + num(x_of(i)) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x_of(i)) + "\" y2=\"" +
             num(y0 + panel_height) + "\" stroke=\"#f0f0f0\"/>";
    }
    svg += "\n";
    const double y_mid = y0 + panel_height / 2;
    svg += "<text x=\"22\" y=\"" + num(y_mid) +
           "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 22 " + num(y_mid) + ")\">" +
           detail::escape(pan.y_label) + "</text>\n";
    // Lines and markers.
    for (std::size_t k = 0; k < pan.lines.size(); ++k) {
      const std::string colour(palette[k % palette.size()]);
      const series& s = pan.lines[k];
      std::string points;
      for (std::size_t i = 0; i < s.values.size(); ++i) {
        const double v = s.values[i];
        const double y = !(v == v) || std::isinf(v) ? y0 : v > 0 ? y_of(std::log10(v)) : y_of(floor_decade);
        points += num(x_of(i)) + "," + num(y) + " ";
      }
      svg += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + colour +
             "\" stroke-width=\"2\" stroke-linejoin=\"round\" opacity=\"0.9\"/>\n";
      for (std::size_t i = 0; i < s.values.size(); ++i) {
        const double v = s.values[i];
        const double x = x_of(i);
        if (!(v == v) || std::isinf(v)) {  // non-finite: a cross on the top edge
          svg += "<path d=\"M" + num(x - 5) + " " + num(y0 - 5) + "L" + num(x + 5) + " " + num(y0 + 5) + "M" +
                 num(x - 5) + " " + num(y0 + 5) + "L" + num(x + 5) + " " + num(y0 - 5) + "\" stroke=\"" + colour +
                 "\" stroke-width=\"2\"/>";
        } else if (v > 0) {
          svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y_of(std::log10(v))) + "\" r=\"3.5\" fill=\"" + colour +
                 "\"/>";
        } else {  // exactly 0: hollow marker on the floor
          svg += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y_of(floor_decade)) +
                 "\" r=\"3.5\" fill=\"white\" stroke=\"" + colour + "\" stroke-width=\"1.5\"/>";
        }
      }
      svg += "\n";
    }
  }
  // Site labels under the last panel, and the x-axis label.
  const double axis_y = top + legend_height + n_panels * panel_height + (n_panels - 1) * panel_gap;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const double x = x_of(i), y = axis_y + 14;
    svg += "<text x=\"" + num(x) + "\" y=\"" + num(y) +
           "\" text-anchor=\"end\" font-size=\"11\" transform=\"rotate(-45 " + num(x) + " " + num(y) + ")\">" +
           detail::escape(sites[i]) + "</text>\n";
  }
  svg += "<text x=\"" + num(left + plot_width / 2) + "\" y=\"" + num(height - 12) +
         "\" text-anchor=\"middle\" font-size=\"13\">" + detail::escape(x_label) + "</text>\n";
  svg += "</svg>\n";
  return svg;
}

}  // namespace llama::svg
