/// \file
/// \brief Private: the aligned plain-text tables of the diagnostics reports, and number formatting
/// that does not depend on a stream's flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace mixprec::diagnostics::detail {

enum class alignment : bool { left, right };

struct table_column {
  std::string header;
  alignment align = alignment::right;
};

/// The table: a header row, a rule of dashes under each header, then the rows. Columns are separated
/// by two spaces and are as wide as their widest cell (bytes: site names are expected to be ASCII);
/// text is left-aligned, numbers right-aligned. Every line ends with '\n', without trailing spaces.
[[nodiscard]] inline std::string render_table(const std::vector<table_column>& columns,
                                              const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) width[c] = columns[c].header.size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < columns.size() && c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  const auto emit = [&](const auto& cell_of) {
    std::string line;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const std::string cell = cell_of(c);
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      line += columns[c].align == alignment::left ? cell + pad : pad + cell;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line;
    out += '\n';
  };
  emit([&](std::size_t c) { return columns[c].header; });
  emit([&](std::size_t c) { return std::string(width[c], '-'); });
  for (const auto& row : rows) {
    emit([&](std::size_t c) { return c < row.size() ? row[c] : std::string(); });
  }
  return out;
}

/// printf-style formatting of one double; "inf", "-inf", "nan" for the non-finite values.
[[nodiscard]] inline std::string format_double(const char* format, double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, x);
  return buffer;
}

/// Scientific notation with 4 significant digits: "1.250e-03".
[[nodiscard]] inline std::string format_scientific(double x) { return format_double("%.3e", x); }

/// Fixed notation with 2 decimals: "15.99".
[[nodiscard]] inline std::string format_fixed2(double x) { return format_double("%.2f", x); }

}  // namespace mixprec::diagnostics::detail
