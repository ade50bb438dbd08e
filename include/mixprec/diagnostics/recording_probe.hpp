/// \file
/// \brief `diagnostics::recording_probe`: the probe that accumulates per-site statistics over every
/// call (e.g. over decoding steps), in the order sites were first seen, and optionally keeps the
/// values themselves (`capture::values`) for a parity comparison (diagnostics/parity.hpp). Also its
/// printable statistics table. Core header: no Eigen, no xtensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/diagnostics/detail/text_table.hpp"
#include "mixprec/diagnostics/probe.hpp"
#include "mixprec/diagnostics/tensor_stats.hpp"
#include "mixprec/dtypes/dtype.hpp"

namespace mixprec::diagnostics {

/// What a `recording_probe` keeps of each tensor it observes.
enum class capture : std::uint8_t {
  statistics,  ///< statistics only (`tensor_stats`): constant memory per site
  values,      ///< statistics and every element, as double (8 bytes per element and call)
};

/// What a `recording_probe` knows about one site, accumulated over every call at that site.
struct site_record {
  /// The site's name, as passed to `observe`.
  std::string name;
  /// The element type of the tensors observed at the site (the same at every call).
  dtype element_type = dtype::float32;
  /// Number of `observe` calls at the site.
  std::size_t calls = 0;
  /// Statistics of all elements of all calls (counts add, absmax is the max, RMS over all finite
  /// elements).
  tensor_stats stats;
  /// With `capture::values`: every element of every call, in call order, converted exactly to double
  /// (so `values.size() == stats.count()`); empty with `capture::statistics`.
  std::vector<double> values;

  /// Headroom, in bits, of the site's absmax to the max of its own element type
  /// (`headroom_bits(stats, element_type)`): +inf for all-zero tensors, -inf once an element is Inf.
  [[nodiscard]] double headroom_bits() const { return diagnostics::headroom_bits(stats, element_type); }
};

/// The probe that records: per site, a `site_record` accumulated over every call, sites kept in the
/// order they were first observed (a model's execution order). Not thread-safe: one probe per
/// thread, or serialise the calls.
///
/// **Example**:
///
///     mixprec::diagnostics::recording_probe probe(mixprec::diagnostics::capture::values);
///     for (int step = 0; step < 8; ++step) model.decode_step(token, probe);   // calls probe.observe(...)
///     std::cout << probe;                                      // the statistics table
///     probe.at("layers.0.ffn.out").stats.absmax();             // max over the 8 steps
class recording_probe {
 public:
  /// True: models run the code they only run for an enabled probe.
  static constexpr bool enabled = true;

  /// An empty recording that keeps statistics only, or statistics and values.
  explicit recording_probe(capture mode = capture::statistics) noexcept : mode_(mode) {}

  /// Records the tensor `values` (a `tensor_range` of a `floating_element` type) produced at `site`.
  /// A site seen for the first time is appended to `sites()`; a site seen before accumulates.
  ///
  /// Throws `std::invalid_argument` when `site` is empty, or when the element type differs from
  /// the one observed earlier at the same site (both dtypes in the message): a site's headroom is
  /// measured against its element type, which must therefore be one.
  template <tensor_range R>
  void observe(std::string_view site, const R& values) {
    using T = tensor_element_t<R>;
    static_assert(floating_element<T>,
                  "mixprec diagnostics read float, double and the mixprec small floats (bfloat16, float16, "
                  "float8/6/4): cast other element types (integers, long double, complex parts) to one of them first.");
    if constexpr (floating_element<T>) {  // only the static_assert's sentence for other types
      if (site.empty()) {
        throw std::invalid_argument(
            "recording_probe::observe: the site name is empty; name every site "
            "(e.g. \"layers.0.attention.out\").");
      }
      const std::span<const T> elements(std::ranges::data(values), std::ranges::size(values));
      site_record& record = record_for(site, dtype_of_v<T>);
      if (mode_ == capture::values) {
        record.values.reserve(record.values.size() + elements.size());
        for (const T& v : elements) record.values.push_back(static_cast<double>(v));
      }
      record.stats.add(elements);
      ++record.calls;
    }
  }

  /// Every site observed, in the order of first observation.
  [[nodiscard]] const std::vector<site_record>& sites() const noexcept { return sites_; }

  /// The record of `site`, or nullptr if it was never observed.
  [[nodiscard]] const site_record* find(std::string_view site) const noexcept {
    const auto it = index_.find(site);
    return it == index_.end() ? nullptr : &sites_[it->second];
  }

  /// The record of `site`. Throws `std::out_of_range` naming the site (and the observed ones) if it
  /// was never observed.
  [[nodiscard]] const site_record& at(std::string_view site) const {
    if (const site_record* r = find(site)) return *r;
    std::string known;
    for (const auto& r : sites_) known += (known.empty() ? "" : ", ") + r.name;
    throw std::out_of_range("recording_probe::at: no site named '" + std::string(site) +
                            "' was observed (observed: " + (known.empty() ? "none" : known) + ").");
  }

  /// What the probe keeps (statistics, or statistics and values).
  [[nodiscard]] capture mode() const noexcept { return mode_; }
  /// Number of distinct sites observed.
  [[nodiscard]] std::size_t size() const noexcept { return sites_.size(); }
  /// True before the first `observe`.
  [[nodiscard]] bool empty() const noexcept { return sites_.empty(); }
  /// Forgets every site (the capture mode stays).
  void clear() noexcept {
    sites_.clear();
    index_.clear();
  }

 private:
  site_record& record_for(std::string_view site, dtype element_type) {
    if (const auto it = index_.find(site); it != index_.end()) {
      site_record& record = sites_[it->second];
      if (record.element_type != element_type) {
        throw std::invalid_argument("recording_probe::observe: site '" + record.name + "' was observed as " +
                                    std::string(name(record.element_type)) + " and is now observed as " +
                                    std::string(name(element_type)) +
                                    "; a site must keep one element type (give the tensors different site names).");
      }
      return record;
    }
    site_record record;
    record.name = std::string(site);
    record.element_type = element_type;
    sites_.push_back(std::move(record));
    try {
      index_.emplace(std::string(site), sites_.size() - 1);
    } catch (...) {
      sites_.pop_back();
      throw;
    }
    return sites_.back();
  }

  capture mode_;
  std::vector<site_record> sites_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

namespace detail {
[[nodiscard]] inline std::string statistics_table(const recording_probe& probe, std::optional<dtype> headroom_format) {
  const std::string headroom_header =
      headroom_format ? "headroom to " + std::string(name(*headroom_format)) + " (bits)" : "headroom (bits)";
  const std::vector<table_column> columns{
      {"site", alignment::left},
      {"dtype", alignment::left},
      {"calls"},
      {"elements"},
      {"absmax"},
      {"rms"},
      {"nan"},
      {"inf"},
      {headroom_header},
  };
  std::vector<std::vector<std::string>> rows;
  rows.reserve(probe.size());
  for (const site_record& r : probe.sites()) {
    const double headroom = headroom_format ? headroom_bits(r.stats, *headroom_format) : r.headroom_bits();
    rows.push_back({r.name, std::string(name(r.element_type)), std::to_string(r.calls), std::to_string(r.stats.count()),
                    format_scientific(r.stats.absmax()), format_scientific(r.stats.rms()),
                    std::to_string(r.stats.nan_count()), std::to_string(r.stats.inf_count()), format_fixed2(headroom)});
  }
  return render_table(columns, rows);
}
}  // namespace detail

/// The statistics table of a recording: one row per site in order of first observation, with its
/// dtype, number of calls, elements, absmax and rms (4 significant digits), NaN and Inf counts, and
/// headroom in bits (2 decimals) to the max of the site's own dtype. Columns are aligned with spaces.
///
/// **Example** (a float16 site, 2 calls of 4 elements):
///
///     site       dtype    calls  elements     absmax        rms  nan  inf  headroom (bits)
///     ---------  -------  -----  --------  ---------  ---------  ---  ---  ---------------
///     embedding  float16      2         8  1.200e+01  6.500e+00    0    0            12.41
[[nodiscard]] inline std::string to_string(const recording_probe& probe) {
  return detail::statistics_table(probe, std::nullopt);
}

/// The statistics table with the headroom of every site measured against the max of `headroom_format`
/// instead of the site's dtype: e.g. the float16 headroom of a float32 reference run. Throws
/// `std::invalid_argument` if `headroom_format` is not a real floating dtype.
[[nodiscard]] inline std::string to_string(const recording_probe& probe, dtype headroom_format) {
  static_cast<void>(format_max(headroom_format));  // validates before any row is formatted
  return detail::statistics_table(probe, headroom_format);
}

/// Writes `to_string(probe)`.
inline std::ostream& operator<<(std::ostream& os, const recording_probe& probe) { return os << to_string(probe); }

}  // namespace mixprec::diagnostics
