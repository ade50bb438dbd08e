/// \file
/// \brief Private: encoding a real number into a `float_format` with one correct rounding, and
/// decoding a pattern back to float/double exactly. Users include `<mixprec/formats/basic_float.hpp>`.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mixprec/formats/detail/isa.hpp"
#include "mixprec/formats/float_format.hpp"

namespace mixprec::detail {

#if defined(__SIZEOF_INT128__)
// GCC and Clang's 128-bit integers. `__extension__` keeps -Wpedantic quiet under -std=c++20, where
// they are an extension (std::integral is false); under -std=gnu++20 std::integral is true.
__extension__ typedef __int128 int128_t;            // NOLINT(modernize-use-using): __extension__ takes no alias
__extension__ typedef unsigned __int128 uint128_t;  // NOLINT(modernize-use-using)
#endif

/// The integer types the formats convert from: the standard integer types and bool (`std::integral`),
/// and, where the compiler has them, the 128-bit integers in every language mode.
template <class T>
concept integer = std::integral<T>
#if defined(__SIZEOF_INT128__)
    || std::same_as<T, int128_t> || std::same_as<T, uint128_t>
#endif
    ;

// The functions below are compiled into the caller's instruction sets: they live in the per-ISA
// inline namespace (isa.hpp), like the rest of the bulk conversion that calls them.
inline namespace MIXPREC_DETAIL_CONVERT_ISA {

/// A finite, non-zero real number `(-1)^negative * significand * 2^exponent`, significand != 0.
/// float, double and every integer type unpack into this exactly, so one rounding routine serves all.
struct unpacked_real {
  bool negative;
  std::uint64_t significand;
  int exponent;
};

/// Rounds `sig / 2^shift` to the nearest integer; a tie goes to the neighbour whose *encoding* is
/// even (IEEE 754 roundTiesToEven). `truncated_encoding_is_odd` tells whether the encoding of the
/// truncated quotient is odd: that is the quotient's last bit when the format has mantissa bits,
/// and the exponent field's last bit when it has none (float8_e8m0fnu, where every significand is 1).
/// Requires 0 < shift <= 63.
[[nodiscard]] constexpr std::uint64_t round_shift_nearest_even(std::uint64_t sig, int shift,
                                                               bool truncated_encoding_is_odd) noexcept {
  const std::uint64_t q = sig >> shift;
  const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1U);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  return (rem > half || (rem == half && truncated_encoding_is_odd)) ? q + 1U : q;
}

/// Encodes the finite non-zero real `x` into format `F`, rounding to nearest even once.
/// Returns the full bit pattern (sign included).
///
/// Bit arithmetic, with M = F.mantissa_bits and value = sig * 2^exp, msb = floor(log2(sig)):
///   unbiased exponent  e  = msb + exp            (value in [2^e, 2^(e+1)))
///   biased exponent    be = e + bias
///   normal    (be >= min_normal): keep M+1 bits, q = rne(sig / 2^(msb-M)) in [2^M, 2^(M+1)]
///             magnitude = (be << M) + (q - 2^M)      (q == 2^(M+1) carries into the exponent)
///   subnormal (be <  1):           q = rne(sig / 2^(msb-M+1-be)) in [0, 2^M]; magnitude = q
///             (q == 2^M is exactly the smallest normal: the carry lands in the exponent field)
///   no zero   (e8m0, be < 0):      the nearest representable value is the smallest, pattern 0.
///   ties go to the even encoding; for e8m0 (M = 0) that is the even exponent field: 3 -> 2, 6 -> 8
///   (ml_dtypes rounds every e8m0 tie up: 3 -> 4).
template <float_format F>
[[nodiscard]] constexpr std::uint32_t encode_finite(unpacked_real x, overflow_mode mode) noexcept {
  constexpr int M = F.mantissa_bits;
  const int msb = 63 - std::countl_zero(x.significand);
  const std::int64_t biased = static_cast<std::int64_t>(msb) + x.exponent + F.exponent_bias;

  std::uint64_t magnitude = 0;
  if (biased >= F.min_normal_biased_exponent()) {
    const int shift = msb - M;
    const bool odd = M > 0 ? ((x.significand >> (shift > 0 ? shift : 0)) & 1U) != 0 : (biased & 1) != 0;
    const std::uint64_t q = shift > 0 ? round_shift_nearest_even(x.significand, shift, odd) : x.significand << -shift;
    // Guard the shift below against absurd exponents (e.g. 2^1000 into float4): anything with a
    // biased exponent beyond 2^16 overflows every format we have.
    magnitude =
        biased > 0xFFFF ? ~std::uint64_t{0} : (static_cast<std::uint64_t>(biased) << M) + (q - (std::uint64_t{1} << M));
  } else if (F.has_zero) {
    // q = rne(sig / 2^shift), the encoding being q itself (its parity breaks ties).
    const std::int64_t shift = msb - M + (1 - biased);
    if (shift > msb + 1) {
      magnitude = 0;  // sig < 2^(msb+1) <= 2^(shift-1): below half the smallest subnormal
    } else if (shift == 64) {
      // msb == 63 (a 64-bit significand: long double, 128-bit integers): q = 0 and the remainder is
      // sig itself; above half (2^63) rounds up to the smallest subnormal, the tie to the even 0.
      magnitude = x.significand > (std::uint64_t{1} << 63) ? 1U : 0U;
    } else if (shift <= 0) {
      magnitude = x.significand << -shift;  // exact (only for a bias <= 0 and a small integer)
    } else {
      const bool odd = ((x.significand >> shift) & 1U) != 0;
      magnitude = round_shift_nearest_even(x.significand, static_cast<int>(shift), odd);
    }
  } else {
    magnitude = 0;  // below the smallest value of a format without zero: round up to it
  }

  const std::uint32_t sign = (x.negative && F.is_signed) ? F.sign_mask() : 0U;
  if (x.negative && !F.is_signed) {
    // No negative numbers: NaN, or the lowest value (the smallest power of two) when saturating.
    return mode == overflow_mode::saturate ? 0U : F.quiet_nan_bits();
  }
  if (magnitude > F.max_finite_magnitude()) {
    if (mode == overflow_mode::saturate || !F.has_nan()) return sign | F.max_finite_magnitude();
    if (F.has_infinity()) return sign | F.exponent_mask();
    return F.nan == nan_encoding::all_ones ? (sign | F.quiet_nan_bits()) : F.quiet_nan_bits();
  }
  if (magnitude == 0 && F.nan == nan_encoding::negative_zero) return 0U;  // fnuz has no -0
  return sign | static_cast<std::uint32_t>(magnitude);
}

/// Encodes +-0 into format `F`: +-0 where it exists; fnuz has only +0; a format without zero (e8m0)
/// gives NaN, or its smallest value when saturating (as ml_dtypes does).
template <float_format F>
[[nodiscard]] constexpr std::uint32_t encode_zero(bool negative, overflow_mode mode) noexcept {
  if (!F.has_zero) return mode == overflow_mode::saturate ? 0U : F.quiet_nan_bits();
  if (F.nan == nan_encoding::negative_zero || !F.is_signed) return 0U;
  return negative ? F.sign_mask() : 0U;
}

/// Encodes +-Inf: Inf where the format has it; otherwise NaN (to_inf_or_nan) or +-max (saturate).
/// Formats without NaN either (float6/float4) saturate, as ml_dtypes does.
template <float_format F>
[[nodiscard]] constexpr std::uint32_t encode_infinity(bool negative, overflow_mode mode) noexcept {
  if (negative && !F.is_signed) return mode == overflow_mode::saturate ? 0U : F.quiet_nan_bits();
  const std::uint32_t sign = negative ? F.sign_mask() : 0U;
  if (mode == overflow_mode::saturate || !F.has_nan()) return sign | F.max_finite_magnitude();
  if (F.has_infinity()) return sign | F.exponent_mask();
  return F.nan == nan_encoding::all_ones ? (sign | F.quiet_nan_bits()) : F.quiet_nan_bits();
}

/// Encodes NaN: the canonical quiet NaN, keeping the sign where the format has signed NaNs.
/// Formats without NaN (float6/float4) take ml_dtypes' pattern: quiet_NaN() is 0b1'00..0 (-0),
/// and a NaN whose sign bit is set flips it to +0. (The OCP MX spec leaves this to the implementation.)
template <float_format F>
[[nodiscard]] constexpr std::uint32_t encode_nan(bool negative) noexcept {
  switch (F.nan) {
    case nan_encoding::ieee:
    case nan_encoding::all_ones: return (negative ? F.sign_mask() : 0U) | F.quiet_nan_bits();
    case nan_encoding::negative_zero: return F.quiet_nan_bits();
    case nan_encoding::none: break;
  }
  return negative ? 0U : F.quiet_nan_bits();
}

/// IEEE binary interchange layout of float or double, for unpacking.
template <class Real>
struct ieee_layout;
template <>
struct ieee_layout<float> {
  using bits_type = std::uint32_t;
  static constexpr int mantissa_bits = 23;
  static constexpr int exponent_bias = 127;
  static constexpr bits_type exponent_all_ones = 0xFFU;
};
template <>
struct ieee_layout<double> {
  using bits_type = std::uint64_t;
  static constexpr int mantissa_bits = 52;
  static constexpr int exponent_bias = 1023;
  static constexpr bits_type exponent_all_ones = 0x7FFU;
};

/// Encodes a float or double into format `F` with one rounding (no double rounding through float).
template <float_format F, class Real>
requires std::is_same_v<Real, float> || std::is_same_v<Real, double>
[[nodiscard]] constexpr std::uint32_t encode(Real value, overflow_mode mode) noexcept {
  using L = ieee_layout<Real>;
  using bits_type = typename L::bits_type;
  constexpr int total_bits = static_cast<int>(sizeof(bits_type)) * 8;
  const auto bits = std::bit_cast<bits_type>(value);
  const bool negative = (bits >> (total_bits - 1)) != 0;
  const bits_type exponent_field = (bits >> L::mantissa_bits) & L::exponent_all_ones;
  const bits_type mantissa = bits & ((bits_type{1} << L::mantissa_bits) - 1U);
  if (exponent_field == L::exponent_all_ones) {
    return mantissa != 0 ? encode_nan<F>(negative) : encode_infinity<F>(negative, mode);
  }
  if (exponent_field == 0 && mantissa == 0) return encode_zero<F>(negative, mode);
  // Subnormal sources have exponent field 0 and no implicit bit; both cases scale by 2^(1-bias-M).
  const std::uint64_t significand = exponent_field == 0 ? mantissa : (mantissa | (bits_type{1} << L::mantissa_bits));
  const int exponent =
      (exponent_field == 0 ? 1 : static_cast<int>(exponent_field)) - L::exponent_bias - L::mantissa_bits;
  return encode_finite<F>({negative, significand, exponent}, mode);
}

/// Encodes an integer into format `F` with one rounding, exactly for every value of every `integer`
/// type. A 128-bit value wider than 64 bits keeps its top 64 bits and ORs the rest into the lowest
/// one (a sticky bit): that bit lies far below the rounding position (bit 63 - M, M <= 10), so the
/// single rounding of `encode_finite` sees the same side of every midpoint as the full value does.
template <float_format F, integer Int>
[[nodiscard]] constexpr std::uint32_t encode_integer(Int value, overflow_mode mode) noexcept {
  if (value == 0) return encode_zero<F>(false, mode);
  if constexpr (sizeof(Int) <= sizeof(std::uint64_t)) {
    bool negative = false;
    std::uint64_t magnitude = 0;
    if constexpr (std::is_signed_v<Int>) {
      negative = value < 0;
      // Two's complement magnitude without overflow for the most negative value.
      magnitude = negative ? std::uint64_t{0} - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
    } else {
      magnitude = static_cast<std::uint64_t>(value);
    }
    return encode_finite<F>({negative, magnitude, 0}, mode);
  } else {
#if defined(__SIZEOF_INT128__)
    static_assert(std::same_as<Int, int128_t> || std::same_as<Int, uint128_t>, "integers wider than 64 bits are 128");
    // (std::is_signed_v is false for __int128 under -std=c++20, so test the type itself.)
    bool negative = false;
    if constexpr (std::same_as<Int, int128_t>) negative = value < 0;
    const uint128_t magnitude = negative ? uint128_t{0} - static_cast<uint128_t>(value) : static_cast<uint128_t>(value);
    const auto high = static_cast<std::uint64_t>(magnitude >> 64);
    if (high == 0) return encode_finite<F>({negative, static_cast<std::uint64_t>(magnitude), 0}, mode);
    const int dropped = 64 - std::countl_zero(high);  // 1..64: the top bit lands on bit 63
    const bool sticky = (magnitude & ((uint128_t{1} << dropped) - 1U)) != 0;
    const auto significand = static_cast<std::uint64_t>(magnitude >> dropped) | (sticky ? 1U : 0U);
    return encode_finite<F>({negative, significand, dropped}, mode);
#else
    static_assert(sizeof(Int) <= sizeof(std::uint64_t), "integers wider than 64 bits need __int128");
    return 0;
#endif
  }
}

/// Encodes a long double into format `F` with one rounding (never through double), for any
/// long double whose values fit a 64-bit significand and an int exponent after frexp (x87 80-bit,
/// IEEE binary64 and binary128: a wider significand keeps its first 64 bits and a sticky bit, as
/// `encode_integer` does). Every step is exact (frexp, ldexp, the truncation of a value in
/// [2^63, 2^64) to an integer), so neither the rounding mode nor FTZ/DAZ changes the result.
/// Not constexpr: frexp is not (C++20).
template <float_format F>
[[nodiscard]] inline std::uint32_t encode_long_double(long double value, overflow_mode mode) noexcept {
  const bool negative = std::signbit(value);
  if (std::isnan(value)) return encode_nan<F>(negative);
  if (std::isinf(value)) return encode_infinity<F>(negative, mode);
  if (value == 0) return encode_zero<F>(negative, mode);
  int exponent = 0;
  const long double scaled = std::ldexp(std::frexp(std::fabs(value), &exponent), 64);  // in [2^63, 2^64)
  const auto high = static_cast<std::uint64_t>(scaled);                                // its integer part
  const bool sticky = scaled != static_cast<long double>(high);
  return encode_finite<F>({negative, high | (sticky ? 1U : 0U), exponent - 64}, mode);
}

/// Exact power of two 2^k as a double, for |k| < 1022.
[[nodiscard]] constexpr double exact_pow2(int k) noexcept {
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

/// float -> double, exactly, in every floating-point environment. A float subnormal is widened as
/// mantissa * 2^-149: an exact int -> double conversion and an exact product of normal doubles, where
/// `static_cast<double>` would read it as 0 under DAZ (MXCSR bit 6: CVTSS2SD flushes subnormal inputs).
[[nodiscard]] constexpr double widen_to_double(float x) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t mantissa = u & 0x007FFFFFU;
  if ((u & 0x7F800000U) != 0U || mantissa == 0U) return static_cast<double>(x);  // normal, zero, Inf, NaN
  const double magnitude = static_cast<double>(mantissa) * exact_pow2(-149);
  return (u >> 31) != 0U ? -magnitude : magnitude;
}

/// Decodes a pattern of format `F` to double, exactly. NaN patterns give a quiet NaN whose sign is
/// the pattern's sign bit; ieee-format NaN payloads are kept in the top mantissa bits.
template <float_format F>
[[nodiscard]] constexpr double decode_to_double(std::uint32_t bits) noexcept {
  constexpr int M = F.mantissa_bits;
  const bool negative = (bits & F.sign_mask()) != 0;
  const std::uint64_t sign64 = negative ? (std::uint64_t{1} << 63) : 0U;
  if (F.is_nan_bits(bits)) {
    const std::uint64_t payload =
        F.nan == nan_encoding::ieee ? static_cast<std::uint64_t>(bits & ((1U << M) - 1U)) << (52 - M) : 0U;
    return std::bit_cast<double>(sign64 | 0x7FF8000000000000ULL | payload);
  }
  if (F.is_inf_bits(bits)) return std::bit_cast<double>(sign64 | 0x7FF0000000000000ULL);
  const std::uint32_t mag = bits & F.magnitude_mask();
  const int exponent_field = static_cast<int>(mag >> M);
  const std::uint32_t mantissa = mag & ((1U << M) - 1U);
  double magnitude = 0.0;
  if (exponent_field == 0 && F.has_zero) {
    magnitude = static_cast<double>(mantissa) * exact_pow2(1 - F.exponent_bias - M);
  } else {
    magnitude = static_cast<double>(mantissa + (1U << M)) * exact_pow2(exponent_field - F.exponent_bias - M);
  }
  return negative ? -magnitude : magnitude;
}

/// Decodes a pattern of format `F` to float, exactly (every format `basic_float` accepts fits in
/// float). ieee-format NaNs keep their payload and get the quiet bit, as F16C's vcvtph2ps does.
/// Values below 2^-126 (float subnormals) are built from their bits, so FTZ (MXCSR bit 15, which
/// flushes a subnormal result of CVTSD2SS) cannot turn them into 0.
template <float_format F>
[[nodiscard]] constexpr float decode_to_float(std::uint32_t bits) noexcept {
  const std::uint32_t sign32 = (bits & F.sign_mask()) != 0 ? 0x80000000U : 0U;
  if (F.is_nan_bits(bits)) {
    constexpr int M = F.mantissa_bits;
    const std::uint32_t payload = F.nan == nan_encoding::ieee ? (bits & ((1U << M) - 1U)) << (23 - M) : 0U;
    return std::bit_cast<float>(sign32 | 0x7FC00000U | payload);
  }
  const double value = decode_to_double<F>(bits);
  const double magnitude = value < 0 ? -value : value;
  if (magnitude != 0 && magnitude < exact_pow2(-126)) {
    // A multiple of 2^-149 below 2^-126: its float bits are the multiple itself (exact scaling).
    return std::bit_cast<float>(sign32 | static_cast<std::uint32_t>(magnitude * exact_pow2(149)));
  }
  return static_cast<float>(value);
}

}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail
