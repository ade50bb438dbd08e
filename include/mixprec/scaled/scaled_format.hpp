/// \file
/// \brief The element formats a scaled tensor may hold (`scaled_format`), how a format's largest value
/// enters quantisation (`quantisation_unit`), the format's range (`format_range`) and the hybrid rule's
/// test `needs_requantise<Format>(scale_estimate)`.
///
/// **How the format's largest value enters.** A scaled tensor stores `data` with
///
///     value = data * scale_q / U            data = round_to_Format(value * U / scale_q)
///
/// where `scale_q` is the scale it is quantised by (`scale` for the worst-case and hybrid rules,
/// `expected_scale` for the average-case rule) and `U = quantisation_unit<Format>(rule)`:
///  - a worst-case scale bounds |value|, so `value / scale` lies in [-1, 1] (the proposal's data range)
///    and U is the format's largest finite value M: the data fill [-M, M], the whole format, as the
///    proposal asks ("the quantisation scale should use dtype.max"). For float8_e4m3fn M = 448.
///  - an average-case scale is an RMS, so `value / scale` has RMS 1 and no bound. For floating-point
///    formats U = 1: 1 sits in the middle of the format's binades (the proposal's #1), leaving the
///    range above it as headroom (448x for e4m3fn, 57344x for e5m2). For integers, which have no
///    headroom of their own, U = INT_MAX / 4: four RMS of headroom (the proposal's `X.data * X.scale *
///    4 / INT_MAX`).
/// So a worst-case tensor's represented value is `data * scale / M`: the proposal's `data * scale`
/// with its [-1, 1] data stretched over the format's range. NVIDIA TransformerEngine stores `q = x *
/// scale_TE` with `scale_TE = M / amax`: its scale is the inverse of ours, times M.
///
/// **Integers.** `std::int8_t` data are symmetric, [-127, 127] (so negation is exact and M = 127);
/// the value -128 is never produced.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/numeric_limits.hpp"
#include "mixprec/formats/saturate_cast.hpp"
#include "mixprec/scaled/scale_estimate.hpp"

namespace mixprec {

/// The element formats of a scaled tensor: the signed small floats of mixprec (float8 variants,
/// float16, bfloat16, float6, float4) and `std::int8_t`. Unsigned formats such as
/// `float8_e8m0fnu` (a format for scales, with no zero) are not element formats.
template <class F>
concept scaled_format = (small_float<F> && std::numeric_limits<F>::is_signed) || std::same_as<F, std::int8_t>;

/// M, the largest finite value of `Format` (448 for float8_e4m3fn, 57344 for float8_e5m2, 127 for
/// int8: symmetric, see the file comment).
template <scaled_format Format>
[[nodiscard]] constexpr double format_max() noexcept {
  if constexpr (std::same_as<Format, std::int8_t>) {
    return static_cast<double>(std::numeric_limits<std::int8_t>::max());
  } else {
    return static_cast<double>(static_cast<float>(finfo<Format>::max));
  }
}

/// The smallest integer that int8 data treat as "normal": 2^3, the first integer from which on every
/// value keeps 4 significant bits, the precision of float8_e4m3fn's normals. Integers have no normal
/// range of their own (a value v has relative precision 1/v); without this threshold the hybrid rule
/// would accept an int8 result whose typical value is 1 unit.
inline constexpr double int8_smallest_normal = 8.0;

/// The range of `Format` that the hybrid rule compares `scale / expected_scale` with: the largest
/// finite value over the smallest normal one (28672 for float8_e4m3fn: 448 / 2^-6); for int8,
/// 127 / `int8_smallest_normal` = 15.875.
template <scaled_format Format>
[[nodiscard]] constexpr double format_range() noexcept {
  if constexpr (std::same_as<Format, std::int8_t>) {
    return format_max<Format>() / int8_smallest_normal;
  } else {
    return format_max<Format>() / static_cast<double>(static_cast<float>(finfo<Format>::smallest_normal));
  }
}

/// U, the data value that stands for the quantisation scale (file comment): M for the worst-case
/// and hybrid rules; for the average-case rule 1 (floating point) or INT_MAX / 4 (int8).
template <scaled_format Format>
[[nodiscard]] constexpr double quantisation_unit(scale_rule rule) noexcept {
  if (rule != scale_rule::average_case) return format_max<Format>();
  if constexpr (std::same_as<Format, std::int8_t>) {
    return format_max<Format>() / 4.0;
  } else {
    return 1.0;
  }
}

/// The hybrid rule's test: true when `s.scale / s.expected_scale` exceeds `format_range<Format>()`,
/// i.e. when a tensor quantised by its worst-case scale would hold its typical (RMS-sized) values
/// below the format's smallest normal and lose precision to underflow. The proposal's example:
/// {4194304, 128} has ratio 32768 > 28672, so for float8_e4m3fn it needs requantising.
template <scaled_format Format>
[[nodiscard]] constexpr bool needs_requantise(const scale_estimate& s) noexcept {
  return s.scale > format_range<Format>() * s.expected_scale;
}

namespace detail {

/// `v` rounded to `Format` (to nearest, ties to even) with finite overflow saturated to +-M; `v` is
/// finite. int8 rounds with std::nearbyint (the default rounding mode is to nearest even).
template <scaled_format Format>
[[nodiscard]] inline Format to_scaled_format(double v) noexcept {
  if constexpr (std::same_as<Format, std::int8_t>) {
    constexpr double m = format_max<Format>();
    return static_cast<std::int8_t>(std::nearbyint(std::fmin(std::fmax(v, -m), m)));
  } else {
    return saturate_cast<Format>(v);
  }
}

/// The value of a data element, exactly (every element format converts exactly to float).
template <scaled_format Format>
[[nodiscard]] constexpr float element_value(Format x) noexcept {
  return static_cast<float>(x);
}

/// Whether every value of `From` converts exactly to `To` (significant digits and exponent range
/// both fit), derived from their numeric_limits.
template <class From, class To>
inline constexpr bool converts_exactly = [] {
  using lf = std::numeric_limits<From>;
  using lt = std::numeric_limits<To>;
  if constexpr (std::integral<From>) {
    return lf::digits <= lt::digits;
  } else {
    return lf::digits <= lt::digits && lf::max_exponent <= lt::max_exponent &&
           lf::min_exponent - lf::digits >= lt::min_exponent - lt::digits;
  }
}();

/// The compute type of the matrix products of two scaled tensors: the narrowest type into which both
/// element formats convert exactly (bfloat16 for every float8 format and int8, else float16, else
/// float), so that each product of two data elements is exact in its float32 accumulator — provided the
/// sums fit in float32. Data reach +-M, so a sum of K products reaches K M_A M_B: when M_A M_B exceeds
/// 2^64 (bfloat16 data, whose M is about 2^128) float32 would overflow for any K, and the products run
/// in double instead (exact products, double sums).
template <class A, class B>
using exact_compute_t = std::conditional_t<
    (format_max<A>() * format_max<B>() > 0x1p64), double,
    std::conditional_t<
        converts_exactly<A, bfloat16> && converts_exactly<B, bfloat16>, bfloat16,
        std::conditional_t<converts_exactly<A, float16> && converts_exactly<B, float16>, float16, float>>>;

}  // namespace detail

}  // namespace mixprec
