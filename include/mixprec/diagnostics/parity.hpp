/// \file
/// \brief `diagnostics::compare_runs`: the parity of two recorded runs of the same model (e.g. a
/// bfloat16 policy against a float32 or float64 reference), site by site — max |a - b|, the same
/// relative to the reference's RMS and in units of the compute format's unit roundoff, nearest-rank
/// quantiles p50 / p99 / p99.9 / p99.99 of |a - b| — and the first site at
/// which run a went non-finite; `parity_report` prints as an aligned text table. Core header: no
/// Eigen, no xtensor.
///
/// **Definitions** (per element, a from the run under test, b from the reference run):
///
/// - |a - b|, the absolute difference, except that equal non-finite values agree (a NaN in both runs,
///   or infinities of the same sign, give 0, as in `numpy.testing.assert_allclose` with its default
///   `equal_nan=True`) and any other pair involving a NaN or an Inf gives +inf, so that a divergence
///   shows up in the max and the high quantiles instead of vanishing as a NaN.
/// - error relative to the reference's RMS (the number the report leads with): max |a - b| / rms(b),
///   rms(b) = sqrt(mean b^2) over the finite reference values of the site. One scale per site, so a
///   reference value that happens to be near zero cannot dominate it (an element-wise relative error
///   does exactly that). 0 when max |a - b| is 0; +inf when it is +inf or rms(b) is 0.
/// - the same in units of the compute format's unit roundoff u (`parity_options::unit_roundoff`, e.g.
///   `finfo<bfloat16>::eps / 2` = 2^-8): max |a - b| / (rms(b) u). A layer that rounds once to the
///   compute type scores about 1; an accumulation in that type scores about the reduction length.
/// - element-wise relative difference: |a - b| / max(|b|, tiny), relative to the REFERENCE b; `tiny`
///   (default: the smallest normal double, 2^-1022) only keeps a zero reference from dividing by zero,
///   so a non-zero a against b = 0 gives a huge (or infinite) relative difference, which is why the
///   table shows the RMS-relative error instead. 0 when |a - b| is 0, +inf when it is +inf.
/// - quantiles: nearest rank (diagnostics/quantile.hpp): the p-quantile of n differences is the
///   ceil(p n)-th smallest. A site without elements reports 0 for every difference.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/diagnostics/detail/text_table.hpp"
#include "mixprec/diagnostics/quantile.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/formats/finfo.hpp"

namespace mixprec::diagnostics {

/// Options of `compare_runs`.
struct parity_options {
  /// Name of the run under test, in messages and in the report ("bf16").
  std::string label_a = "a";
  /// Name of the reference run ("f32").
  std::string label_b = "reference";
  /// Floor of |b| in the relative difference |a - b| / max(|b|, tiny). Must be positive and finite.
  double tiny = finfo<double>::smallest_normal;
  /// Unit roundoff u of the compute format of run a (`finfo<bfloat16>::eps / 2` = 2^-8, float16 2^-11,
  /// float32 2^-24). When positive, each site also reports max |a - b| / (rms(b) u). 0: not reported.
  /// Must be finite and not negative.
  double unit_roundoff = 0.0;
};

/// The parity of one site.
struct site_parity {
  /// The site's name.
  std::string site;
  /// Number of elements compared (all calls at the site).
  std::size_t count = 0;
  /// max over the elements of |a - b| (see the file comment for non-finite values).
  double max_abs_diff = 0.0;
  /// max over the elements of |a - b| / max(|b|, tiny) (dominated by near-zero references: prefer
  /// `max_rms_rel_diff`).
  double max_rel_diff = 0.0;
  /// RMS of the finite reference values of the site (0 if there are none).
  double reference_rms = 0.0;
  /// max |a - b| / reference_rms (0 when max |a - b| is 0; +inf when reference_rms is 0 and it is not).
  double max_rms_rel_diff = 0.0;
  /// max_rms_rel_diff / unit_roundoff, when `parity_options::unit_roundoff` is positive; else 0.
  double max_diff_in_u = 0.0;
  /// Nearest-rank quantiles of |a - b| at `parity_quantile_levels` (p50, p99, p99.9, p99.99).
  std::array<double, parity_quantile_levels.size()> abs_diff_quantiles{};
  /// NaN + Inf elements in run a, and in the reference run.
  std::size_t nonfinite_a = 0;
  std::size_t nonfinite_b = 0;
};

/// The parity of two runs: one `site_parity` per site, in run a's order of first observation.
struct parity_report {
  /// `parity_options::label_a`, `label_b`.
  std::string label_a;
  std::string label_b;
  /// `parity_options::tiny`.
  double tiny = 0.0;
  /// `parity_options::unit_roundoff` (0: the table has no column in units of u).
  double unit_roundoff = 0.0;
  /// Per-site parity, in the order run a first observed the sites.
  std::vector<site_parity> sites;
  /// The first site (in run a's order) holding a NaN or an Inf in run a; empty if run a stayed finite.
  std::optional<std::string> first_nonfinite_site;

  /// `*first_nonfinite_site`, or "none".
  [[nodiscard]] std::string first_nonfinite_site_or_none() const { return first_nonfinite_site.value_or("none"); }
  /// The parity of `site`; throws `std::out_of_range` naming the site if the report has none.
  [[nodiscard]] const site_parity& at(std::string_view site) const {
    for (const auto& s : sites) {
      if (s.site == site) return s;
    }
    throw std::out_of_range("parity_report::at: no site named '" + std::string(site) + "' in the report.");
  }
};

namespace detail {
/// |a - b| with equal non-finite values agreeing and other non-finite pairs infinitely apart.
[[nodiscard]] inline double parity_difference(double a, double b) noexcept {
  if (a == b) return 0.0;  // also equal infinities, and +0 == -0
  if (std::isnan(a) && std::isnan(b)) return 0.0;
  if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
  return std::fabs(a - b);  // may round up to +inf above the largest double: still "infinitely apart"
}

/// sqrt(mean x^2) over the finite values of `x` (0 if there are none), scaled by the largest |x| so
/// that the squares cannot overflow or underflow (as LAPACK's nrm2).
[[nodiscard]] inline double finite_rms(const std::vector<double>& x) noexcept {
  double largest = 0.0;
  std::size_t n = 0;
  for (double v : x) {
    if (std::isfinite(v)) {
      largest = std::max(largest, std::fabs(v));
      ++n;
    }
  }
  if (n == 0 || largest == 0.0) return 0.0;
  double sum = 0.0;
  for (double v : x) {
    if (std::isfinite(v)) sum += (v / largest) * (v / largest);
  }
  return largest * std::sqrt(sum / static_cast<double>(n));
}

/// |a - b| / max(|b|, tiny) given d = parity_difference(a, b).
[[nodiscard]] inline double parity_relative(double d, double b, double tiny) noexcept {
  if (d == 0.0 || std::isinf(d)) return d;
  return d / std::max(std::fabs(b), tiny);
}

[[nodiscard]] inline std::string quoted_run(const std::string& label) { return "run '" + label + "'"; }

inline void check_captured(const site_record& r, const std::string& label) {
  if (r.values.size() != r.stats.count()) {
    throw std::invalid_argument("compare_runs: " + quoted_run(label) + " kept no values for site '" + r.name + "' (" +
                                std::to_string(r.stats.count()) + " elements observed, " +
                                std::to_string(r.values.size()) +
                                " kept); record both runs with recording_probe(capture::values).");
  }
}
}  // namespace detail

/// Compares run `a` against the `reference` run, site by site (see the file comment for every
/// definition). Both must have been recorded with `capture::values` and observe the same sites with
/// the same numbers of elements (their element types may differ: that is the point); sites are
/// matched by name, and reported in run a's order.
///
/// Throws `std::invalid_argument`, naming the site and both sizes, when a site is in one run only or
/// has different numbers of elements in the two runs; and when a run kept no values,
/// `options.tiny` is not positive and finite, or `options.unit_roundoff` is negative or not finite.
///
/// **Example**:
///
///     recording_probe bf16_run(capture::values), f32_run(capture::values);
///     model_bf16.forward(tokens, bf16_run);
///     model_f32.forward(tokens, f32_run);
///     std::cout << compare_runs(bf16_run, f32_run, {.label_a = "bf16", .label_b = "f32"});
[[nodiscard]] inline parity_report compare_runs(const recording_probe& a, const recording_probe& reference,
                                                const parity_options& options = {}) {
  if (!(options.tiny > 0.0) || std::isinf(options.tiny)) {
    throw std::invalid_argument("compare_runs: parity_options::tiny must be positive and finite, got " +
                                detail::format_scientific(options.tiny) + ".");
  }
  if (!(options.unit_roundoff >= 0.0) || std::isinf(options.unit_roundoff)) {
    throw std::invalid_argument("compare_runs: parity_options::unit_roundoff must be finite and not negative, got " +
                                detail::format_scientific(options.unit_roundoff) +
                                " (e.g. finfo<bfloat16>::eps / 2; 0 leaves the column out).");
  }
  const std::string run_a = detail::quoted_run(options.label_a);
  const std::string run_b = detail::quoted_run(options.label_b);
  // Every structural mismatch is reported before any arithmetic.
  const auto mismatch = [](const site_record& r, const std::string& run, const std::string& other,
                           const site_record* in_other) {
    std::ostringstream message;
    message << "compare_runs: site '" << r.name << "' has " << r.stats.count() << " elements in " << run;
    if (in_other == nullptr) {
      message << " but is absent (0 elements) from " << other << "; both runs must observe the same sites.";
    } else {
      message << " but " << in_other->stats.count() << " in " << other
              << "; both runs must observe tensors of the same sizes at each site.";
    }
    return std::invalid_argument(message.str());
  };
  for (const site_record& ra : a.sites()) {
    const site_record* rb = reference.find(ra.name);
    if (rb == nullptr || rb->stats.count() != ra.stats.count()) throw mismatch(ra, run_a, run_b, rb);
  }
  for (const site_record& rb : reference.sites()) {
    if (a.find(rb.name) == nullptr) throw mismatch(rb, run_b, run_a, nullptr);
  }
  for (const site_record& ra : a.sites()) {
    detail::check_captured(ra, options.label_a);
    detail::check_captured(reference.at(ra.name), options.label_b);
  }

  parity_report report;
  report.label_a = options.label_a;
  report.label_b = options.label_b;
  report.tiny = options.tiny;
  report.unit_roundoff = options.unit_roundoff;
  report.sites.reserve(a.size());
  std::vector<double> diffs;
  for (const site_record& ra : a.sites()) {
    const site_record& rb = reference.at(ra.name);
    site_parity p;
    p.site = ra.name;
    p.count = ra.stats.count();
    p.nonfinite_a = ra.stats.nan_count() + ra.stats.inf_count();
    p.nonfinite_b = rb.stats.nan_count() + rb.stats.inf_count();
    diffs.resize(p.count);
    for (std::size_t i = 0; i < p.count; ++i) {
      const double d = detail::parity_difference(ra.values[i], rb.values[i]);
      diffs[i] = d;
      p.max_abs_diff = std::max(p.max_abs_diff, d);
      p.max_rel_diff = std::max(p.max_rel_diff, detail::parity_relative(d, rb.values[i], options.tiny));
    }
    p.reference_rms = detail::finite_rms(rb.values);
    p.max_rms_rel_diff = p.max_abs_diff == 0.0   ? 0.0
                         : p.reference_rms > 0.0 ? p.max_abs_diff / p.reference_rms
                                                 : std::numeric_limits<double>::infinity();
    if (options.unit_roundoff > 0.0) p.max_diff_in_u = p.max_rms_rel_diff / options.unit_roundoff;
    if (p.count > 0) {
      std::sort(diffs.begin(), diffs.end());  // no NaN: parity_difference never returns one
      for (std::size_t q = 0; q < parity_quantile_levels.size(); ++q) {
        p.abs_diff_quantiles[q] = diffs[nearest_rank(p.count, parity_quantile_levels[q]) - 1];
      }
    }
    if (!report.first_nonfinite_site && p.nonfinite_a > 0) report.first_nonfinite_site = ra.name;
    report.sites.push_back(std::move(p));
  }
  return report;
}

/// The parity table: a title line naming both runs, one row per site (elements, max |a-b|, max |a-b|
/// relative to the reference's RMS, the same in units of u when `unit_roundoff` was given, p50 / p99 /
/// p99.9 / p99.99 of |a-b| with 4 significant digits, NaN+Inf counts in each run), and a last line
/// naming the first site where run a went non-finite ("none" if it stayed finite).
///
/// **Example** (a = {1, 2.5, -3, 4}, b = {1, 2, -3.5, 8}, rms(b) = sqrt(81.25 / 4) = 4.507, u = 2^-8):
///
///     parity of bf16 against f32 (|a-b| per element; max/rms = max|a-b| / rms of f32 at the site; u = 3.906e-03)
///     site       elements   max|a-b|    max/rms  max/(rms u)        p50  ...  nonfinite bf16  nonfinite f32
///     embedding         4  4.000e+00  8.875e-01    2.272e+02  5.000e-01  ...               0              0
///     first non-finite site in bf16: none
[[nodiscard]] inline std::string to_string(const parity_report& report) {
  const bool in_u = report.unit_roundoff > 0.0;
  std::vector<detail::table_column> columns{{"site", detail::alignment::left}, {"elements"}, {"max|a-b|"}, {"max/rms"}};
  if (in_u) columns.push_back({"max/(rms u)"});
  for (const quantile_level& level : parity_quantile_levels) columns.push_back({to_string(level)});
  columns.push_back({"nonfinite " + report.label_a});
  columns.push_back({"nonfinite " + report.label_b});
  std::vector<std::vector<std::string>> rows;
  rows.reserve(report.sites.size());
  for (const site_parity& p : report.sites) {
    std::vector<std::string> row{p.site, std::to_string(p.count), detail::format_scientific(p.max_abs_diff),
                                 detail::format_scientific(p.max_rms_rel_diff)};
    if (in_u) row.push_back(detail::format_scientific(p.max_diff_in_u));
    for (double q : p.abs_diff_quantiles) row.push_back(detail::format_scientific(q));
    row.push_back(std::to_string(p.nonfinite_a));
    row.push_back(std::to_string(p.nonfinite_b));
    rows.push_back(std::move(row));
  }
  std::string title = "parity of " + report.label_a + " against " + report.label_b +
                      " (|a-b| per element; max/rms = max|a-b| / rms of " + report.label_b + " at the site";
  if (in_u) title += "; u = " + detail::format_scientific(report.unit_roundoff);
  title += ")\n";
  return title + detail::render_table(columns, rows) + "first non-finite site in " + report.label_a + ": " +
         report.first_nonfinite_site_or_none() + "\n";
}

/// Writes `to_string(report)`.
inline std::ostream& operator<<(std::ostream& os, const parity_report& report) { return os << to_string(report); }

}  // namespace mixprec::diagnostics
