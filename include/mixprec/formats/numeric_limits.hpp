/// \file
/// \brief `std::numeric_limits` for every `small_float`, derived from its `float_format`.
///
/// Nothing here is typed per format. For a format with E exponent bits, M mantissa bits, bias b:
///   digits       = M + 1                           (float16: 11, bfloat16: 8, e4m3fn: 4)
///   min()        = 2^(1 - b), pattern 0.00..01.00..0 (e8m0fnu, which has no zero: 2^-b, pattern 0)
///   max()        = the largest finite pattern of the encoding (see float_format::max_finite_magnitude)
///   epsilon()    = 2^-M, round_error() = 0.5, denorm_min() = 2^(1 - b - M) (min() if no subnormals)
///   min_exponent = 1 - b + 1 ; max_exponent = (exponent of max()) + 1   (the C++ convention: 2^(e-1))
/// Members meaningless for a format follow ml_dtypes: infinity() of a format without Inf is its NaN
/// (float6/float4, which have no NaN either: max()), and quiet_NaN() of float6/float4 is 1.00..0 (-0).
#pragma once

#include <cstdint>
#include <limits>

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/detail/float_codec.hpp"

namespace mixprec::detail {

/// floor(d * log10(2)) and friends for small non-negative d, with log10(2) ~ 30103 / 100000
/// (exact enough for |d| < 1000, far beyond any format here).
[[nodiscard]] constexpr int floor_log10_pow2(int d) noexcept {
  const long v = static_cast<long>(d) * 30103L;
  return static_cast<int>(v >= 0 ? v / 100000L : -((-v + 99999L) / 100000L));
}

/// Largest k with 10^k <= x, for a positive finite x.
[[nodiscard]] constexpr int floor_log10(double x) noexcept {
  int k = 0;
  double p = 1.0;
  if (x >= 1.0) {
    while (p * 10.0 <= x) {
      p *= 10.0;
      ++k;
    }
  } else {
    while (p > x) {
      p /= 10.0;
      --k;
    }
  }
  return k;
}

/// Smallest k with 10^k >= x, for a positive finite x.
[[nodiscard]] constexpr int ceil_log10(double x) noexcept {
  const int k = floor_log10(x);
  double p = 1.0;
  for (int i = 0; i < (k < 0 ? -k : k); ++i) p = k < 0 ? p / 10.0 : p * 10.0;
  return p == x ? k : k + 1;
}

template <float_format F>
struct small_float_limits_values {
  static constexpr std::uint32_t max_bits = F.max_finite_magnitude();
  static constexpr std::uint32_t min_bits = F.has_zero ? (std::uint32_t{1} << F.mantissa_bits) : 0U;
  static constexpr int max_unbiased_exponent = static_cast<int>(max_bits >> F.mantissa_bits) - F.exponent_bias;
  static constexpr int min_unbiased_exponent = F.min_normal_biased_exponent() - F.exponent_bias;
};

}  // namespace mixprec::detail

/// std::numeric_limits of a mixprec small float, derived from its format (see the file comment).
template <mixprec::small_float T>
class std::numeric_limits<T> {
  static constexpr mixprec::float_format F = T::format;
  using values = mixprec::detail::small_float_limits_values<F>;
  using storage = typename T::storage_type;
  static constexpr T pattern(std::uint32_t bits) noexcept { return T::from_bits(static_cast<storage>(bits)); }
  static constexpr T value(double x) noexcept {
    return pattern(mixprec::detail::encode<F>(x, mixprec::overflow_mode::to_inf_or_nan));
  }

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = F.is_signed;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = F.has_infinity();
  static constexpr bool has_quiet_NaN = F.has_nan();
  static constexpr bool has_signaling_NaN = F.nan == mixprec::nan_encoding::ieee && F.mantissa_bits >= 2;
  static constexpr std::float_denorm_style has_denorm = F.has_subnormals() ? std::denorm_present : std::denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  /// Conversions and arithmetic are IEEE-conformant for + - * / and rounding, but none of these
  /// formats claims full IEC 559 conformance here (ml_dtypes says true for e3m4, e4m3 and e5m2;
  /// we make no claim beyond the operations we test).
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = F.mantissa_bits + 1;
  static constexpr int digits10 = mixprec::detail::floor_log10_pow2(digits - 1);
  static constexpr int max_digits10 = -mixprec::detail::floor_log10_pow2(-digits) + 1;  // ceil(digits*log10 2) + 1
  static constexpr int radix = 2;
  static constexpr int min_exponent = values::min_unbiased_exponent + 1;
  static constexpr int max_exponent = values::max_unbiased_exponent + 1;
  static constexpr int min_exponent10 =
      mixprec::detail::ceil_log10(mixprec::detail::decode_to_double<F>(values::min_bits));
  static constexpr int max_exponent10 =
      mixprec::detail::floor_log10(mixprec::detail::decode_to_double<F>(values::max_bits));
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  /// Smallest positive normal value.
  static constexpr T min() noexcept { return pattern(values::min_bits); }
  /// Largest finite value.
  static constexpr T max() noexcept { return pattern(values::max_bits); }
  /// Most negative finite value (-max(); for unsigned formats the smallest value).
  static constexpr T lowest() noexcept {
    if constexpr (F.is_signed)
      return pattern(F.sign_mask() | values::max_bits);
    else
      return pattern(F.has_zero ? 0U : values::min_bits);
  }
  /// 2^-M: the gap between 1 and the next value.
  static constexpr T epsilon() noexcept { return value(mixprec::detail::exact_pow2(-F.mantissa_bits)); }
  /// 0.5: the largest rounding error in ULPs of round-to-nearest.
  static constexpr T round_error() noexcept { return value(0.5); }
  /// +Inf, or (no Inf) the value ml_dtypes returns: the NaN, or max() for formats without NaN.
  static constexpr T infinity() noexcept {
    if constexpr (F.has_infinity())
      return pattern(F.exponent_mask());
    else if constexpr (F.has_nan())
      return pattern(F.quiet_nan_bits());
    else
      return max();
  }
  /// The canonical quiet NaN (float6/float4: ml_dtypes' placeholder 1.00..0, which is -0).
  static constexpr T quiet_NaN() noexcept { return pattern(F.quiet_nan_bits()); }
  /// A signalling NaN (exponent all ones, mantissa 0..01) where one exists, else quiet_NaN().
  static constexpr T signaling_NaN() noexcept {
    if constexpr (has_signaling_NaN)
      return pattern(F.exponent_mask() | 1U);
    else
      return quiet_NaN();
  }
  /// Smallest positive subnormal (min() where the format has none).
  static constexpr T denorm_min() noexcept {
    if constexpr (F.has_subnormals())
      return pattern(1U);
    else
      return min();
  }
};
