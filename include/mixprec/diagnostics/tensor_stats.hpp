/// \file
/// \brief `diagnostics::tensor_stats`: the activation statistics a probe keeps per site (element,
/// NaN and Inf counts, absmax, RMS), and `headroom_bits`: how many binades lie between a tensor's
/// absmax and the largest finite value of a format. Core header: no Eigen, no xtensor.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/nn/probe.hpp"

namespace mixprec::diagnostics {

/// Statistics of the elements of one tensor, or of several tensors accumulated (`add`, `merge`):
///
/// - `count()`: every element; `nan_count()`, `inf_count()`: NaNs and +-Infs among them;
///   `finite_count()` = count - nan - inf.
/// - `absmax()`: the largest |x| over the non-NaN elements: +inf as soon as one element is +-Inf,
///   0 for an empty tensor or one holding only NaNs. NaNs are counted, never compared.
/// - `rms()`: sqrt(sum x^2 / finite_count) over the finite elements (0 when there are none), so a
///   few overflowed elements do not hide the scale of the rest (their number is in `inf_count`).
///
/// Accumulating several tensors gives the statistics of their concatenation: counts add, absmax is
/// the max, RMS is over all finite elements of all tensors (not a mean of RMS values).
///
/// **Accuracy**: elements are read as double (exact for every `floating_element`). The sum of squares
/// is kept as `ssq * 2^(2 e)` with `e` the binary exponent of the largest finite |x| seen, so it
/// neither overflows (double data up to the largest double) nor underflows (tiny tensors); scaling by
/// powers of two is exact. The only rounding is the double summation: relative error of `rms()` below
/// about (n/2) * 2^-53 for n finite elements.
///
/// **Example**:
///
///     mixprec::diagnostics::tensor_stats s;
///     s.add(v);     // std::vector<float> v = {3, -4, 0, 12}
///     s.absmax();   // 12
///     s.rms();      // sqrt((9 + 16 + 0 + 144) / 4) = 6.5
class tensor_stats {
 public:
  /// Empty statistics: every count 0, absmax 0, rms 0.
  constexpr tensor_stats() noexcept = default;

  /// Adds the elements of `values`, a `tensor_range` of a `floating_element` type.
  template <tensor_range R>
  void add(const R& values) noexcept {
    using T = tensor_element_t<R>;
    static_assert(floating_element<T>,
                  "mixprec diagnostics read float, double and the mixprec small floats (bfloat16, float16, "
                  "float8/6/4): cast other element types (integers, long double, complex parts) to one of them first.");
    if constexpr (floating_element<T>) {  // only the static_assert's sentence for other types
      const std::span<const T> elements(std::ranges::data(values), std::ranges::size(values));
      count_ += elements.size();
      for (const T& v : elements) {
        const double x = static_cast<double>(v);
        if (std::isnan(x)) {
          ++nan_;
        } else if (std::isinf(x)) {
          ++inf_;
          absmax_ = std::numeric_limits<double>::infinity();
        } else {
          add_finite_magnitude(std::fabs(x));
        }
      }
    }
  }

  /// Adds the statistics of another set of elements (as if its elements had been `add`ed here).
  void merge(const tensor_stats& other) noexcept {
    count_ += other.count_;
    nan_ += other.nan_;
    inf_ += other.inf_;
    finite_ += other.finite_;
    absmax_ = std::max(absmax_, other.absmax_);
    if (other.ssq_ == 0.0) return;
    if (ssq_ == 0.0) {
      ssq_ = other.ssq_;
      ssq_exponent_ = other.ssq_exponent_;
      return;
    }
    const int e = std::max(ssq_exponent_, other.ssq_exponent_);
    ssq_ = std::ldexp(ssq_, 2 * (ssq_exponent_ - e)) + std::ldexp(other.ssq_, 2 * (other.ssq_exponent_ - e));
    ssq_exponent_ = e;
  }

  /// Number of elements added (NaNs and Infs included).
  [[nodiscard]] constexpr std::size_t count() const noexcept { return count_; }
  /// Number of NaN elements.
  [[nodiscard]] constexpr std::size_t nan_count() const noexcept { return nan_; }
  /// Number of +-Inf elements.
  [[nodiscard]] constexpr std::size_t inf_count() const noexcept { return inf_; }
  /// Number of finite elements: count() - nan_count() - inf_count().
  [[nodiscard]] constexpr std::size_t finite_count() const noexcept { return finite_; }
  /// True when no element is NaN or +-Inf (also for no elements at all).
  [[nodiscard]] constexpr bool all_finite() const noexcept { return nan_ == 0 && inf_ == 0; }
  /// Largest |x| over the non-NaN elements; +inf if an element is +-Inf; 0 if there is none.
  [[nodiscard]] constexpr double absmax() const noexcept { return absmax_; }
  /// Root mean square of the finite elements, sqrt(sum x^2 / finite_count()); 0 if there is none.
  [[nodiscard]] double rms() const noexcept {
    if (finite_ == 0 || ssq_ == 0.0) return 0.0;
    // ssq_ / finite_ <= 1 (every scaled square is < 1), so neither step overflows.
    return std::ldexp(std::sqrt(ssq_ / static_cast<double>(finite_)), ssq_exponent_);
  }

 private:
  void add_finite_magnitude(double m) noexcept {
    ++finite_;
    absmax_ = std::max(absmax_, m);
    if (m == 0.0) return;
    int e = 0;
    static_cast<void>(std::frexp(m, &e));  // m = f * 2^e with f in [0.5, 1)
    if (ssq_ == 0.0) {
      ssq_exponent_ = e;
    } else if (e > ssq_exponent_) {
      ssq_ = std::ldexp(ssq_, 2 * (ssq_exponent_ - e));
      ssq_exponent_ = e;
    }
    const double s = std::ldexp(m, -ssq_exponent_);  // in (0, 1), exact unless far below the max
    ssq_ += s * s;
  }

  std::size_t count_ = 0;
  std::size_t nan_ = 0;
  std::size_t inf_ = 0;
  std::size_t finite_ = 0;
  double absmax_ = 0.0;
  double ssq_ = 0.0;      // sum of (|x| * 2^-ssq_exponent_)^2 over finite x
  int ssq_exponent_ = 0;  // every finite |x| < 2^ssq_exponent_
};

/// The statistics of one tensor (a `tensor_range` of a `floating_element` type).
template <tensor_range R>
[[nodiscard]] tensor_stats compute_stats(const R& values) noexcept {
  tensor_stats s;
  s.add(values);
  return s;
}

/// Headroom, in bits (binades), between a magnitude `absmax` and a format's largest finite value
/// `format_max`: log2(format_max / absmax), computed as log2(format_max) - log2(absmax) so that it
/// does not overflow for tiny absmax.
///
/// - positive: absmax may still grow by 2^headroom before it overflows the format;
/// - 0: absmax is the format's max; negative: absmax exceeds the format's max (possible when a
///   float32 reference tensor is measured against float16's max);
/// - +inf for absmax == 0 (an all-zero or empty tensor never overflows);
/// - -inf for absmax == +inf (the tensor already overflowed).
///
/// Throws `std::invalid_argument` when absmax is negative or NaN, or `format_max` is not a positive
/// finite number.
///
/// **Example**: float16's max is 65504 = 2^16 (1 - 2^-11), so `headroom_bits(1.0, 65504.0)` is
/// 16 + log2(1 - 2^-11) = 15.9993 bits.
[[nodiscard]] inline double headroom_bits(double absmax, double format_max) {
  if (!(format_max > 0.0) || std::isinf(format_max)) {
    throw std::invalid_argument("headroom_bits: the format's max must be a positive finite number, got " +
                                std::to_string(format_max) + ".");
  }
  if (!(absmax >= 0.0)) {
    throw std::invalid_argument("headroom_bits: absmax must be a magnitude (>= 0, not NaN), got " +
                                std::to_string(absmax) + ".");
  }
  if (absmax == 0.0) return std::numeric_limits<double>::infinity();
  if (std::isinf(absmax)) return -std::numeric_limits<double>::infinity();
  return std::log2(format_max) - std::log2(absmax);
}

/// Headroom of `stats.absmax()` to the largest finite value of `Format` (`finfo<Format>::max`): 16
/// bits above 1.0 for float16 (max 65504), 128 for bfloat16 (max 2^128 (1 - 2^-8)).
template <class Format>
requires floating_element<Format>
[[nodiscard]] double headroom_bits(const tensor_stats& stats) {
  return headroom_bits(stats.absmax(), static_cast<double>(finfo<Format>::max));
}

namespace detail {
template <dtype D>
[[nodiscard]] constexpr double format_max_or_zero() noexcept {
  if constexpr (is_floating(D) && !is_weak(D)) {
    return static_cast<double>(finfo<type_of_t<D>>::max);
  } else {
    return 0.0;
  }
}
template <std::size_t... I>
[[nodiscard]] constexpr std::array<double, dtype_count> make_format_max_table(std::index_sequence<I...>) noexcept {
  return {format_max_or_zero<static_cast<dtype>(I)>()...};
}
/// finfo<type_of_t<d>>::max for every real floating dtype; 0 for the others.
inline constexpr std::array<double, dtype_count> format_max_table =
    make_format_max_table(std::make_index_sequence<dtype_count>{});
}  // namespace detail

/// The largest finite value of a real floating dtype, as a double (`finfo<type_of_t<d>>::max`):
/// 65504 for float16, 448 for float8_e4m3fn. Throws `std::invalid_argument` for integer, bool,
/// complex and weak dtypes, and for a value that is no enumerator.
[[nodiscard]] inline double format_max(dtype d) {
  const auto index = static_cast<std::size_t>(d);
  const double m = index < dtype_count ? detail::format_max_table[index] : 0.0;
  if (m == 0.0) {
    throw std::invalid_argument("format_max: " + std::string(name(d)) +
                                " is not a real floating dtype; headroom is defined for float32, float64 and the "
                                "small floats (bfloat16, float16, float8/6/4).");
  }
  return m;
}

/// Headroom of `stats.absmax()` to the largest finite value of the dtype `format` (run-time form of
/// `headroom_bits<Format>(stats)`). Throws `std::invalid_argument` for a dtype that is not real
/// floating (see `format_max`).
[[nodiscard]] inline double headroom_bits(const tensor_stats& stats, dtype format) {
  return headroom_bits(stats.absmax(), format_max(format));
}

}  // namespace mixprec::diagnostics
