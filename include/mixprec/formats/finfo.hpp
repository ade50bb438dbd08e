/// \file
/// \brief `finfo<T>`: NumPy's machine limits for floating types (`numpy.finfo`, `ml_dtypes.finfo`).
#pragma once

#include <bit>
#include <limits>
#include <type_traits>

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/numeric_limits.hpp"

namespace mixprec {

namespace detail {
/// 10^-k rounded once to double (10^k is exact in double for k <= 22), then to T; for long double,
/// rounded once to long double (10^k is exact there for k <= 27 with a 64-bit significand).
template <class T>
[[nodiscard]] constexpr T finfo_pow10(int k) noexcept {
  using wide = std::conditional_t<std::is_same_v<T, long double>, long double, double>;
  wide p = 1;
  for (int i = 0; i < k; ++i) p *= 10;
  return T(1 / p);
}
}  // namespace detail

/// Machine limits of a floating type with NumPy's meanings, for float, double, long double and every
/// small float.
/// All members derive from `std::numeric_limits<T>` (itself derived from the format description).
///
/// **Example** (NumPy's definitions; ml_dtypes.finfo reports precision 1 / resolution 0.1 for the
/// float8 types where NumPy's formula int(-log10(eps)) gives 0 / 1):
///
///     finfo<float8_e4m3fn>::max               // 448
///     finfo<float8_e4m3fn>::eps               // 0.125  (2^-3)
///     finfo<float8_e4m3fn>::smallest_subnormal// 2^-9
///     finfo<bfloat16>::resolution             // 0.01   (10^-precision, precision = 2)
template <class T>
requires small_float<T> || std::is_floating_point_v<T>
struct finfo {
 private:
  using limits = std::numeric_limits<T>;

 public:
  /// Size in bits (NumPy `bits`): 16 for bfloat16, 8 for float8, 6 for float6 (its own width); for
  /// float, double and long double the storage size, `sizeof(T) * 8`, as NumPy's itemsize * 8 (x87
  /// long double: 128 on x86-64, of which the format uses 80).
  static constexpr int bits = [] {
    if constexpr (small_float<T>)
      return T::format.bits();
    else
      return static_cast<int>(sizeof(T) * 8);
  }();
  /// Number of mantissa bits, without the implicit bit (NumPy `nmant`).
  static constexpr int nmant = limits::digits - 1;
  /// Number of exponent bits (NumPy `nexp`, also `iexp`). For the standard types, from the binary
  /// exponent range: max_exponent = 2^(nexp - 1) (float: 8, double: 11, x87 long double: 15).
  static constexpr int nexp = [] {
    if constexpr (small_float<T>)
      return T::format.exponent_bits;
    else
      return static_cast<int>(std::bit_width(static_cast<unsigned>(limits::max_exponent)));
  }();
  static constexpr int iexp = nexp;
  /// eps = 2^machep: the gap between 1 and the next larger value.
  static constexpr int machep = -nmant;
  /// The gap between 1 and the next smaller value: 2^-(nmant+1) where 1 is above the smallest normal,
  /// eps where 1 IS the smallest normal (float6_e2m3fn, float4_e2m1fn: the value below 1 is subnormal).
  static constexpr int negep = limits::min_exponent - 1 == 0 ? -nmant : -nmant - 1;
  /// Exponent of the smallest normal value, smallest_normal = 2^minexp.
  static constexpr int minexp = limits::min_exponent - 1;
  /// The smallest power of two that overflows (NumPy `maxexp`): max < 2^maxexp.
  static constexpr int maxexp = limits::max_exponent;
  /// Decimal digits of precision: floor(nmant * log10(2)) (NumPy `precision`).
  static constexpr int precision = detail::floor_log10_pow2(nmant);

  /// 2^-nmant.
  static constexpr T eps = limits::epsilon();
  /// 2^negep: the gap between 1 and the next smaller value.
  static constexpr T epsneg = T(detail::exact_pow2(negep));
  /// Largest finite value.
  static constexpr T max = limits::max();
  /// Most negative finite value, -max (NumPy's `min`; for unsigned formats the smallest value).
  static constexpr T min = limits::lowest();
  /// Smallest positive normal value (NumPy `smallest_normal`, alias `tiny`).
  static constexpr T smallest_normal = limits::min();
  static constexpr T tiny = smallest_normal;
  /// Smallest positive subnormal value (smallest_normal when the format has no subnormals).
  static constexpr T smallest_subnormal = limits::denorm_min();
  /// 10^-precision, rounded to T (NumPy `resolution`; through double for float and the small floats,
  /// once in long double for long double).
  static constexpr T resolution = detail::finfo_pow10<T>(precision);
};

}  // namespace mixprec
