/// \file
/// \brief Sub-byte integer storage types `int4`, `uint4`, `int2`, `uint2` (ml_dtypes' intN).
///
/// They exist so that the dtype lattice and policies can name them. Each holds its value in the low
/// bits of one byte; arithmetic happens in `int` after the implicit (lossless) conversion, exactly as
/// C++ does for int8_t.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <ostream>
#include <type_traits>
#include <utility>

namespace mixprec {

/// A `Bits`-wide two's-complement (signed `Underlying`) or unsigned integer stored in one byte.
///
/// Construction from a wider integer keeps the low `Bits` bits (wraps modulo 2^Bits, sign-extending
/// for signed types), as ml_dtypes' intN does; use `in_range(v)` first where wrapping is not wanted.
///
/// **Example**:
///
///     int4(7) == 7;  int4(8) == -8;  uint4(17) == 1;  int(int4(-3)) * 2 == -6
template <int Bits, class Underlying>
requires(Bits > 0 && Bits < 8 &&
         (std::same_as<Underlying, std::int8_t> || std::same_as<Underlying, std::uint8_t>)) class intn {
 public:
  static constexpr int bits = Bits;
  static constexpr bool is_signed = std::is_signed_v<Underlying>;
  /// Smallest and largest value: [-2^(Bits-1), 2^(Bits-1) - 1] or [0, 2^Bits - 1].
  static constexpr int min_value = is_signed ? -(1 << (Bits - 1)) : 0;
  static constexpr int max_value = is_signed ? (1 << (Bits - 1)) - 1 : (1 << Bits) - 1;

  constexpr intn() noexcept = default;
  /// Keeps the low `Bits` bits of `v` (wraps modulo 2^Bits).
  template <std::integral Int>
  constexpr explicit intn(Int v) noexcept : value_(wrap(static_cast<long long>(v))) {}

  /// Whether `v` is representable without wrapping.
  template <std::integral Int>
  [[nodiscard]] static constexpr bool in_range(Int v) noexcept {
    return std::cmp_greater_equal(v, min_value) && std::cmp_less_equal(v, max_value);
  }
  /// Builds a value from its raw low-bit pattern (bits above `Bits` ignored).
  [[nodiscard]] static constexpr intn from_bits(std::uint8_t pattern) noexcept { return intn(pattern); }
  /// The raw pattern in the low `Bits` bits.
  [[nodiscard]] constexpr std::uint8_t bits_pattern() const noexcept {
    return static_cast<std::uint8_t>(static_cast<unsigned>(value_) & ((1U << Bits) - 1U));
  }
  /// Lossless conversion to int (implicit), so arithmetic and comparisons behave as for int8_t.
  [[nodiscard]] constexpr operator int() const noexcept { return value_; }  // NOLINT(google-explicit-constructor)

  friend std::ostream& operator<<(std::ostream& os, intn x) { return os << static_cast<int>(x); }

 private:
  static constexpr Underlying wrap(long long v) noexcept {
    const auto low = static_cast<unsigned long long>(v) & ((1ULL << Bits) - 1ULL);
    if constexpr (is_signed) {
      const long long s =
          (low & (1ULL << (Bits - 1))) != 0 ? static_cast<long long>(low) - (1LL << Bits) : static_cast<long long>(low);
      return static_cast<Underlying>(s);
    } else {
      return static_cast<Underlying>(low);
    }
  }
  Underlying value_{};
};

/// 4-bit signed integer, [-8, 7].
using int4 = intn<4, std::int8_t>;
/// 4-bit unsigned integer, [0, 15].
using uint4 = intn<4, std::uint8_t>;
/// 2-bit signed integer, [-2, 1].
using int2 = intn<2, std::int8_t>;
/// 2-bit unsigned integer, [0, 3].
using uint2 = intn<2, std::uint8_t>;

}  // namespace mixprec

/// std::numeric_limits of int4, uint4, int2, uint2.
template <int Bits, class Underlying>
class std::numeric_limits<mixprec::intn<Bits, Underlying>> {
  using T = mixprec::intn<Bits, Underlying>;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = T::is_signed;
  static constexpr bool is_integer = true;
  static constexpr bool is_exact = true;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = false;
  static constexpr bool has_signaling_NaN = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_toward_zero;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = Bits - (T::is_signed ? 1 : 0);
  static constexpr int digits10 = digits * 30103 / 100000;  // floor(digits * log10 2): 1 for uint4, else 0
  static constexpr int max_digits10 = 0;
  static constexpr int radix = 2;
  static constexpr int min_exponent = 0;
  static constexpr int min_exponent10 = 0;
  static constexpr int max_exponent = 0;
  static constexpr int max_exponent10 = 0;
  static constexpr bool traps = std::numeric_limits<int>::traps;  // arithmetic happens in int
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T(T::min_value); }
  static constexpr T lowest() noexcept { return T(T::min_value); }
  static constexpr T max() noexcept { return T(T::max_value); }
  static constexpr T epsilon() noexcept { return T(0); }
  static constexpr T round_error() noexcept { return T(0); }
  static constexpr T infinity() noexcept { return T(0); }
  static constexpr T quiet_NaN() noexcept { return T(0); }
  static constexpr T signaling_NaN() noexcept { return T(0); }
  static constexpr T denorm_min() noexcept { return T(0); }
};
