/// \file
/// \brief Nearest-rank quantiles with exact integer ranks: `quantile_level`, `nearest_rank`,
/// `quantile_nearest_rank`. Core header: no Eigen, no xtensor.
///
/// Definition (the nearest-rank method; Hyndman & Fan 1996, definition 1; NumPy's
/// `numpy.quantile(..., method="inverted_cdf")`): for n values sorted ascending, x_(1) <= ... <= x_(n),
/// the p-quantile (0 < p <= 1) is x_(k) with k = ceil(p n). It is always one of the values (no
/// interpolation), so "p99.9 = 3e-3" means at least 99.9% of the values are <= 3e-3.
///
/// The level p is a fraction of two integers and k is computed in integers: in double, 0.07 * 100 is
/// 7.000000000000001, whose ceiling (8) would be the wrong rank.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::diagnostics {

/// A quantile level p = numerator / denominator, with 0 < p <= 1 (checked where it is used).
///
/// **Example**: `quantile_level{999, 1000}` is p99.9.
struct quantile_level {
  std::uint32_t numerator = 1;
  std::uint32_t denominator = 2;

  /// p as a double (for display; ranks are computed from the integers).
  [[nodiscard]] constexpr double value() const noexcept {
    return static_cast<double>(numerator) / static_cast<double>(denominator);
  }
  friend constexpr bool operator==(const quantile_level&, const quantile_level&) noexcept = default;
};

/// The levels a parity report shows: p50, p99, p99.9, p99.99 of |a - b|.
inline constexpr std::array<quantile_level, 4> parity_quantile_levels{{{1, 2}, {99, 100}, {999, 1000}, {9999, 10000}}};

namespace detail {
inline void check_level(quantile_level p, const char* who) {
  if (p.denominator == 0 || p.numerator == 0 || p.numerator > p.denominator) {
    throw std::invalid_argument(std::string(who) + ": the quantile level " + std::to_string(p.numerator) + "/" +
                                std::to_string(p.denominator) +
                                " is not in (0, 1]; write p99.9 as quantile_level{999, 1000}.");
  }
}
}  // namespace detail

/// The 1-based nearest rank k = ceil(p n) of the p-quantile among n values (so 1 <= k <= n), computed
/// exactly in integers. Throws `std::invalid_argument` for n == 0 or a level outside (0, 1].
///
/// **Example**: `nearest_rank(100, {99, 100})` is 99; `nearest_rank(10, {99, 100})` is ceil(9.9) = 10.
[[nodiscard]] inline std::size_t nearest_rank(std::size_t n, quantile_level p) {
  detail::check_level(p, "nearest_rank");
  if (n == 0) throw std::invalid_argument("nearest_rank: a quantile of no values is undefined (n == 0).");
  // p n = num * (n / den) + num * (n % den) / den; num * (n % den) < den^2 <= 2^64 does not overflow.
  const std::uint64_t num = p.numerator;
  const std::uint64_t den = p.denominator;
  const std::uint64_t q = n / den;
  const std::uint64_t r = n % den;
  const std::uint64_t rest = num * r;
  return static_cast<std::size_t>(num * q + rest / den + (rest % den != 0 ? 1 : 0));
}

/// The p-quantile of `values` by the nearest-rank method (see the file comment): the k-th smallest
/// value, k = `nearest_rank(values.size(), p)`. `values` need not be sorted (a copy is partially
/// sorted; the input is untouched). Throws `std::invalid_argument` for an empty span, a level outside
/// (0, 1], or a NaN among the values (NaN has no rank), naming the index of the NaN.
///
/// **Example**: the p50 of {0.5, 0.1, 0.4, 0.2} is 0.2 (k = ceil(0.5 * 4) = 2), its p99 is 0.5 (k = 4).
[[nodiscard]] inline double quantile_nearest_rank(std::span<const double> values, quantile_level p) {
  detail::check_level(p, "quantile_nearest_rank");
  if (values.empty()) {
    throw std::invalid_argument("quantile_nearest_rank: a quantile of no values is undefined (empty span).");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      throw std::invalid_argument("quantile_nearest_rank: values[" + std::to_string(i) +
                                  "] is NaN, which has no rank; remove or replace NaNs first.");
    }
  }
  std::vector<double> copy(values.begin(), values.end());
  const auto k = static_cast<std::ptrdiff_t>(nearest_rank(copy.size(), p)) - 1;
  std::nth_element(copy.begin(), copy.begin() + k, copy.end());
  return copy[static_cast<std::size_t>(k)];
}

/// The label of a level as a percentile: "p50", "p99", "p99.9", "p99.99" (100 p with up to six
/// significant digits).
[[nodiscard]] inline std::string to_string(quantile_level p) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "p%g", 100.0 * p.value());
  return buffer;
}

}  // namespace mixprec::diagnostics
