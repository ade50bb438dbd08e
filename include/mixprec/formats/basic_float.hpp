/// \file
/// \brief `basic_float<Derived, Format>`: the one template behind every small float type.
///
/// A named type derives from it (CRTP) so that diagnostics say `float8_e4m3fn`, not the descriptor:
///
///     struct float8_e4m3fn : basic_float<float8_e4m3fn, formats::e4m3fn> { using basic_float::basic_float; };
///
/// **Conversions** (the rules of `docs/formats.md`):
///  - `T(x)` from float, double or any integer (`__int128` included) rounds to nearest, ties to even,
///    *once* (a double is never rounded to float first). Finite overflow becomes +-Inf where the format has Inf, NaN
///    where it has only NaN, and +-max where it has neither (float6/float4): ml_dtypes' default. `saturate_cast<T>(x)`
///    (formats/saturate_cast.hpp) clamps instead.
///  - `T(other_small_float)` goes through float, which holds every value of every format exactly, so
///    it also rounds once.
///  - Conversion to float is implicit and exact; to double explicit and exact. Every NaN decodes to a
///    quiet NaN with the same sign (ieee formats keep their payload bits).
///  - Conversions and comparisons do not depend on the floating-point environment: the rounding
///    mode, FTZ and DAZ (MXCSR bits 15 and 6) change no result. Arithmetic does not depend on FTZ/DAZ.
///
/// **Arithmetic** is computed in float (double for bfloat16 and float8_e8m0fnu, see `opmath_type`)
/// and rounded back once. float carries 24 significand bits, at least 2p + 2 for every format here
/// (p <= 11), so + - * / are correctly rounded despite the two roundings.
/// Comparisons compare the values (in `opmath_type`): NaN is unordered and +0 == -0.
///
/// **Formats** must fit in float: at most 16 bits, 8 exponent bits and 10 mantissa bits, and a bias
/// that keeps every value a multiple of 2^-149 below 2^128 (static_asserts say which rule failed).
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <concepts>
#include <cstdint>
#include <ostream>
#include <type_traits>
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/formats/detail/float_codec.hpp"
#include "mixprec/formats/float_format.hpp"

namespace mixprec {

template <class Derived, float_format Format>
class basic_float;

namespace detail {
/// The exact float value of every pattern of an 8-bit-or-smaller format, computed at compile time.
template <float_format F>
inline constexpr auto decode_table = [] {
  std::array<float, std::size_t{1} << F.bits()> table{};
  for (std::uint32_t bits = 0; bits < table.size(); ++bits) table[bits] = decode_to_float<F>(bits);
  return table;
}();

template <class D, float_format F>
void is_basic_float_impl(const basic_float<D, F>&);

/// Whether float computes + - * / of F's values in its normal range, so that the results are
/// correctly rounded (float's 24 bits >= 2p + 2 for p <= 11) and no step meets a float subnormal
/// (which FTZ/DAZ would flush): every exact sum and product, and every quotient, lies in
/// [2^-126, 2^128). With finest = F.finest_exponent() and top = F.overflow_exponent(): products need
/// 2 finest >= -126 and 2 top <= 128; quotients finest - top >= -126 and top - finest <= 128.
template <float_format F>
inline constexpr bool float_opmath_suffices =
    2 * F.finest_exponent() >= -126 && 2 * F.overflow_exponent() <= 128 &&
    F.finest_exponent() - F.overflow_exponent() >= -126 && F.overflow_exponent() - F.finest_exponent() <= 128;
}  // namespace detail

/// True for every type built on `basic_float` (bfloat16, float16, float8/6/4 types).
template <class T>
concept small_float = requires(const T& x) {
  detail::is_basic_float_impl(x);
};

/// The generic binary floating-point number of format `Format`, stored in the smallest unsigned
/// integer that holds `Format.bits()` bits. See the file comment for the conversion rules.
///
/// **Example**:
///
///     float8_e4m3fn x(300.0f);   // x == 288: nearest of {256, 288, 320}, ties to even
///     x.bits();                  // 0x79 = 0b0'1111'001
///     float8_e4m3fn(500.0f);     // NaN: above 448 + 16, and e4m3fn has no Inf
template <class Derived, float_format Format>
class basic_float {
 public:
  /// The format this type encodes.
  static constexpr float_format format = Format;
  /// Unsigned integer holding the raw pattern (uint8_t up to 8 bits, else uint16_t).
  using storage_type = storage_for_bits_t<Format.bits()>;

  static_assert(Format.bits() <= 16 && Format.exponent_bits <= 8 && Format.mantissa_bits <= 10,
                "basic_float holds formats of at most 16 bits that fit in float exactly.");
  static_assert(Format.exponent_bits >= 1 && Format.mantissa_bits >= 0,
                "basic_float needs at least one exponent bit and a non-negative number of mantissa bits.");
  // Every value must be a float: a multiple of 2^-149 (float's smallest subnormal) below 2^128.
  static_assert(Format.finest_exponent() >= -149 && Format.overflow_exponent() <= 128,
                "basic_float: the exponent bias puts values of this format outside float's range: its smallest "
                "spacing 2^(min normal biased exponent - bias - mantissa bits) must be at least 2^-149 and its "
                "largest value below 2^128 (largest biased exponent - bias <= 127); choose a bias in that range.");

  /// Zero (the pattern 0; for float8_e8m0fnu, which has no zero, that is 2^-127).
  constexpr basic_float() noexcept = default;

  /// Rounds `x` to nearest even; overflow as `overflow_mode::to_inf_or_nan`.
  template <class Real>
  requires std::same_as<Real, float> || std::same_as<Real, double>
  constexpr explicit basic_float(Real x) noexcept
      : bits_(static_cast<storage_type>(detail::encode<Format>(x, overflow_mode::to_inf_or_nan))) {}

  /// Rounds the integer `i` to nearest even, once, from its exact value; overflow as above.
  /// Integers are the standard ones and bool, and GCC/Clang's `__int128` / `unsigned __int128`
  /// (under -std=c++20 too, where `std::integral` excludes them): exact for every 128-bit value.
  template <detail::integer Int>
  constexpr explicit basic_float(Int i) noexcept
      : bits_(static_cast<storage_type>(detail::encode_integer<Format>(i, overflow_mode::to_inf_or_nan))) {}

  /// Converts from another small float through float (exact), so it rounds once.
  template <class OtherDerived, float_format OtherFormat>
  requires(!std::same_as<OtherDerived, Derived>) constexpr explicit basic_float(
      const basic_float<OtherDerived, OtherFormat>& other) noexcept
      : basic_float(static_cast<float>(other)) {}

  /// long double is refused, so that `T(x)` never hides a choice: convert it to double yourself (and
  /// decide whether that rounding is acceptable), or call `from_long_double<T>(x)`, which rounds once.
  template <class Real>
  requires std::same_as<Real, long double>
  constexpr explicit basic_float(Real) noexcept {
    static_assert(!std::same_as<Real, long double>,
                  "mixprec formats convert from float or double: cast the long double to double first, or call "
                  "mixprec::from_long_double<T>(x) to round it once.");
  }

  /// Builds a value from its raw bit pattern. Bits above `Format.bits()` (float6/float4 live in the
  /// low bits of a byte) are ignored.
  [[nodiscard]] static constexpr Derived from_bits(storage_type bits) noexcept {
    Derived d;
    constexpr auto mask = static_cast<storage_type>((std::uint32_t{1} << Format.bits()) - 1U);
    static_cast<basic_float&>(d).bits_ = static_cast<storage_type>(bits & mask);
    return d;
  }
  /// The raw bit pattern.
  [[nodiscard]] constexpr storage_type bits() const noexcept { return bits_; }

  /// Exact conversion to float (implicit: it loses nothing).
  [[nodiscard]] constexpr operator float() const noexcept {  // NOLINT(google-explicit-constructor)
    if constexpr (Format.bits() <= 8) {
      return detail::decode_table<Format>[bits_];
    } else if constexpr (Format == formats::bfloat16) {
      // bfloat16 is the top half of a float; only a signalling NaN needs its quiet bit set.
      std::uint32_t u = static_cast<std::uint32_t>(bits_) << 16;
      if ((u & 0x7FFFFFFFU) > 0x7F800000U) u |= 0x00400000U;
      return std::bit_cast<float>(u);
    } else {
      return detail::decode_to_float<Format>(bits_);
    }
  }
  /// Exact conversion to double, in every floating-point environment (bfloat16 subnormals and
  /// e8m0's 2^-127 are float subnormals, which a plain float -> double conversion flushes under DAZ).
  [[nodiscard]] constexpr explicit operator double() const noexcept {
    return detail::widen_to_double(static_cast<float>(*this));
  }

  /// The type + - * / and comparisons compute in: float, whose 24 bits are >= 2p + 2 for every
  /// format, when every exact sum, product and quotient lies in float's normal range
  /// (`detail::float_opmath_suffices`: float16, the float8 types but e8m0, float6, float4); double
  /// otherwise (bfloat16 and float8_e8m0fnu, whose products and quotients leave float's range: 2^-254
  /// from two e8m0 values; bf16 products in float's subnormal range would be rounded twice).
  /// So no operand or result is ever a subnormal of the type computed in: FTZ/DAZ change nothing.
  using opmath_type = std::conditional_t<detail::float_opmath_suffices<Format>, float, double>;

  // Arithmetic: in opmath_type, rounded back once: correctly rounded (p' >= 2p + 2, no over/underflow).
  [[nodiscard]] friend constexpr Derived operator+(Derived a, Derived b) noexcept {
    return Derived(static_cast<opmath_type>(a) + static_cast<opmath_type>(b));
  }
  [[nodiscard]] friend constexpr Derived operator-(Derived a, Derived b) noexcept {
    return Derived(static_cast<opmath_type>(a) - static_cast<opmath_type>(b));
  }
  [[nodiscard]] friend constexpr Derived operator*(Derived a, Derived b) noexcept {
    return Derived(static_cast<opmath_type>(a) * static_cast<opmath_type>(b));
  }
  [[nodiscard]] friend constexpr Derived operator/(Derived a, Derived b) noexcept {
    return Derived(static_cast<opmath_type>(a) / static_cast<opmath_type>(b));
  }
  /// Negation flips the sign bit (exact); fnuz zero and NaN stay as they are (no -0 exists);
  /// negating a non-zero value of an unsigned format gives NaN.
  [[nodiscard]] friend constexpr Derived operator-(Derived a) noexcept {
    if constexpr (!Format.is_signed) {
      return Derived(-static_cast<float>(a));
    } else if constexpr (Format.nan == nan_encoding::negative_zero) {
      return (a.bits_ & Format.magnitude_mask()) == 0
                 ? a
                 : from_bits(static_cast<storage_type>(a.bits_ ^ Format.sign_mask()));
    } else {
      return from_bits(static_cast<storage_type>(a.bits_ ^ Format.sign_mask()));
    }
  }
  [[nodiscard]] friend constexpr Derived operator+(Derived a) noexcept { return a; }
  friend constexpr Derived& operator+=(Derived& a, Derived b) noexcept { return a = a + b; }
  friend constexpr Derived& operator-=(Derived& a, Derived b) noexcept { return a = a - b; }
  friend constexpr Derived& operator*=(Derived& a, Derived b) noexcept { return a = a * b; }
  friend constexpr Derived& operator/=(Derived& a, Derived b) noexcept { return a = a / b; }

  // Comparisons on values, in opmath_type (where no value is subnormal, so DAZ cannot make a
  // bfloat16 subnormal equal to 0): NaN is unordered, +0 == -0.
  [[nodiscard]] friend constexpr bool operator==(Derived a, Derived b) noexcept {
    return static_cast<opmath_type>(a) == static_cast<opmath_type>(b);
  }
  [[nodiscard]] friend constexpr std::partial_ordering operator<=>(Derived a, Derived b) noexcept {
    return static_cast<opmath_type>(a) <=> static_cast<opmath_type>(b);
  }

  /// True for the format's NaN patterns (never for float6/float4, which have none).
  [[nodiscard]] friend constexpr bool isnan(Derived a) noexcept { return Format.is_nan_bits(a.bits_); }
  /// True for +-Inf (only ieee formats have them).
  [[nodiscard]] friend constexpr bool isinf(Derived a) noexcept { return Format.is_inf_bits(a.bits_); }
  /// True unless NaN or +-Inf.
  [[nodiscard]] friend constexpr bool isfinite(Derived a) noexcept {
    return !Format.is_nan_bits(a.bits_) && !Format.is_inf_bits(a.bits_);
  }
  /// True when the sign bit is set (false for every pattern of an unsigned format).
  [[nodiscard]] friend constexpr bool signbit(Derived a) noexcept { return (a.bits_ & Format.sign_mask()) != 0; }
  /// Absolute value: clears the sign bit, NaNs included (IEEE 754 §5.5.1, like std::fabs); the fnuz
  /// NaN 1.0000.000 is the only pattern kept as it is (clearing its sign would make it zero).
  [[nodiscard]] friend constexpr Derived abs(Derived a) noexcept {
    if (Format.nan == nan_encoding::negative_zero && Format.is_nan_bits(a.bits_)) return a;
    return from_bits(static_cast<storage_type>(a.bits_ & Format.magnitude_mask()));
  }

  /// Prints the float value (`std::ostream << float`, so the stream's format flags apply).
  friend std::ostream& operator<<(std::ostream& os, Derived a) { return os << static_cast<float>(a); }

 private:
  storage_type bits_{};
};

/// Rounds the long double `x` to the small float `To` once, to nearest even, from its full value
/// (never through double, which would round twice: 1 + 2^-8 + 2^-60 is bfloat16 1 + 2^-7, but
/// through double it becomes the tie 1 + 2^-8 and then 1). Overflow as `To(x)` with
/// `overflow_mode::to_inf_or_nan`, or clamped to +-max with `overflow_mode::saturate` (as
/// `saturate_cast`). Independent of the floating-point environment. Not constexpr (it uses frexp).
/// `To(x)` itself refuses long double; this is the explicit spelling.
template <small_float To>
[[nodiscard]] To from_long_double(long double x, overflow_mode mode = overflow_mode::to_inf_or_nan) noexcept {
  return To::from_bits(static_cast<typename To::storage_type>(detail::encode_long_double<To::format>(x, mode)));
}

}  // namespace mixprec

#if defined(__cpp_lib_format)
/// `std::format` support for every small float type (bfloat16, float16, float8/6/4): formats the
/// float value with the format spec of `float` (`"{}"`, `"{:.3f}"`, `"{:>8g}"`), as `operator<<` prints
/// it. Only where the standard library has `<format>` (`__cpp_lib_format`; not GCC 12's libstdc++).
template <class T, class CharT>
requires mixprec::small_float<T>
struct std::formatter<T, CharT> : std::formatter<float, CharT> {
  /// Formats `static_cast<float>(x)` (exact: float holds every value of every small format).
  template <class FormatContext>
  auto format(T x, FormatContext& ctx) const {
    return std::formatter<float, CharT>::format(static_cast<float>(x), ctx);
  }
};
#endif

// std::numeric_limits of every small float comes with the type: a file that names float16 can never
// see the primary template (digits 0, max() 0) in its place. numeric_limits.hpp includes this header
// first, so #pragma once makes the cycle harmless.
#include "mixprec/formats/numeric_limits.hpp"  // IWYU pragma: export
