/// \file
/// \brief `float_format`: the one value that describes a binary floating-point format.
///
/// Every small float in mixprec (`bfloat16`, `float16`, the float8 family, float6, float4) is an
/// instance of `basic_float<Derived, Format>` whose `Format` is a `float_format`. Everything that can
/// be said about a format (its largest finite value, its NaN and Inf encodings, `numeric_limits`,
/// `finfo`) is derived here from the six fields, never typed by hand.
///
///     signed:    | S | E ... E | M ... M |      value = (-1)^S * 1.M * 2^(E - bias)   (normal)
///                                                 value = (-1)^S * 0.M * 2^(1 - bias)   (E == 0, subnormal)
///     unsigned:  | E ... E | M ... M |           (float8_e8m0fnu: every E is a normal power of two)
#pragma once

#include <cstdint>
#include <type_traits>

namespace mixprec {

/// How a format spends its special encodings. Names follow LLVM/MLIR and ml_dtypes' suffixes:
/// `F` = finite (no infinities), `N` = special NaN encoding, `UZ` = unsigned zero (no -0).
enum class nan_encoding : std::uint8_t {
  ieee,           ///< IEEE 754: all-ones exponent holds +-Inf (zero mantissa) and NaNs (bfloat16, float16, e5m2).
  all_ones,       ///< "fn": no Inf; the all-ones magnitude S.1111.111 is NaN (float8_e4m3fn, float8_e8m0fnu).
  negative_zero,  ///< "fnuz": no Inf, no -0; the pattern 1.0000.000 is the only NaN (float8_e4m3fnuz).
  none,           ///< no Inf, no NaN at all (OCP MX float6/float4: every pattern is a number).
};

/// What a narrowing conversion does with a finite value above the format's largest finite value.
enum class overflow_mode : std::uint8_t {
  /// ml_dtypes' default: +-Inf where the format has Inf, NaN where it has only NaN, and +-max where
  /// it has neither (float6/float4). ±Inf and NaN inputs map to the format's Inf/NaN the same way.
  to_inf_or_nan,
  /// Clamp to +-max ("satfinite" in CUDA PTX and CUTLASS): finite overflow and ±Inf become +-max;
  /// NaN stays NaN (where the format has one).
  saturate,
};

/// The parameters of a binary floating-point format. A structural type, so it can be a template
/// argument: `basic_float<float8_e4m3fn, formats::e4m3fn>`.
struct float_format {
  int exponent_bits;      ///< width of the exponent field
  int mantissa_bits;      ///< width of the trailing significand field (without the implicit bit)
  int exponent_bias;      ///< value = 2^(E - exponent_bias) * 1.M for a normal number
  nan_encoding nan;       ///< where Inf and NaN live
  bool is_signed = true;  ///< false for float8_e8m0fnu: no sign bit at all
  bool has_zero = true;   ///< false for float8_e8m0fnu: E == 0 is the normal number 2^-bias

  /// Total number of bits in the encoding (sign + exponent + mantissa).
  [[nodiscard]] constexpr int bits() const noexcept { return (is_signed ? 1 : 0) + exponent_bits + mantissa_bits; }
  /// Mask of the magnitude bits (exponent and mantissa), e.g. 0b0'1111'111 for e4m3.
  [[nodiscard]] constexpr std::uint32_t magnitude_mask() const noexcept {
    return (std::uint32_t{1} << (exponent_bits + mantissa_bits)) - 1U;
  }
  /// The sign bit, or 0 for unsigned formats.
  [[nodiscard]] constexpr std::uint32_t sign_mask() const noexcept {
    return is_signed ? std::uint32_t{1} << (exponent_bits + mantissa_bits) : 0U;
  }
  /// The exponent field with all bits set, shifted into place (the Inf pattern of IEEE formats).
  [[nodiscard]] constexpr std::uint32_t exponent_mask() const noexcept {
    return ((std::uint32_t{1} << exponent_bits) - 1U) << mantissa_bits;
  }
  /// Smallest biased exponent of a normal number: 1, or 0 when the format has no zero (e8m0).
  [[nodiscard]] constexpr int min_normal_biased_exponent() const noexcept { return has_zero ? 1 : 0; }
  /// Magnitude pattern of the largest finite value.
  ///  - ieee:          exponent all-ones is reserved: 0.11110.11 (e5m2: 57344)
  ///  - all_ones:      only the all-ones magnitude is NaN: 0.1111.110 (e4m3fn: 448), 1111'1110 (e8m0: 2^127)
  ///  - negative_zero / none: every magnitude is a number: 0.1111.111 (e4m3fnuz: 240, e2m1fn: 6)
  [[nodiscard]] constexpr std::uint32_t max_finite_magnitude() const noexcept {
    switch (nan) {
      case nan_encoding::ieee:
        return exponent_mask() - (std::uint32_t{1} << mantissa_bits) + ((std::uint32_t{1} << mantissa_bits) - 1U);
      case nan_encoding::all_ones: return magnitude_mask() - 1U;
      case nan_encoding::negative_zero:
      case nan_encoding::none: break;
    }
    return magnitude_mask();
  }
  /// The exponent of the format's finest spacing: every finite value is a multiple of
  /// 2^finest_exponent() (its smallest subnormal, or its smallest value's ulp without subnormals):
  /// min_normal_biased_exponent - bias - mantissa_bits. bfloat16: -133, float16: -24, e8m0: -127.
  [[nodiscard]] constexpr int finest_exponent() const noexcept {
    return min_normal_biased_exponent() - exponent_bias - mantissa_bits;
  }
  /// The smallest k with every finite value below 2^k: (biased exponent of the largest finite
  /// value) - bias + 1. bfloat16: 128, float16: 16, e4m3fn: 9 (448 < 512), e8m0: 128 (2^127).
  [[nodiscard]] constexpr int overflow_exponent() const noexcept {
    return static_cast<int>(max_finite_magnitude() >> mantissa_bits) - exponent_bias + 1;
  }
  /// Whether the format encodes +-Inf.
  [[nodiscard]] constexpr bool has_infinity() const noexcept { return nan == nan_encoding::ieee; }
  /// Whether the format encodes NaN.
  [[nodiscard]] constexpr bool has_nan() const noexcept { return nan != nan_encoding::none; }
  /// Whether the format has subnormal numbers (E == 0 with a non-zero mantissa).
  [[nodiscard]] constexpr bool has_subnormals() const noexcept { return has_zero && mantissa_bits > 0; }
  /// The canonical quiet NaN pattern (positive where the format has signed NaNs).
  ///  - ieee: exponent all-ones, first mantissa bit set (IEEE 754-2019 6.2.1)
  ///  - all_ones: the all-ones magnitude; negative_zero: the sign bit alone
  ///  - none: no NaN exists; ml_dtypes' quiet_NaN() is the sign bit alone (i.e. -0), kept for parity
  [[nodiscard]] constexpr std::uint32_t quiet_nan_bits() const noexcept {
    switch (nan) {
      case nan_encoding::ieee:
        return exponent_mask() | (mantissa_bits > 0 ? std::uint32_t{1} << (mantissa_bits - 1) : 0U);
      case nan_encoding::all_ones: return magnitude_mask();
      case nan_encoding::negative_zero:
      case nan_encoding::none: break;
    }
    return sign_mask();
  }
  /// Whether a bit pattern (of this format) is a NaN.
  [[nodiscard]] constexpr bool is_nan_bits(std::uint32_t bits) const noexcept {
    const std::uint32_t mag = bits & magnitude_mask();
    switch (nan) {
      case nan_encoding::ieee: return mag > exponent_mask();
      case nan_encoding::all_ones: return mag == magnitude_mask();
      case nan_encoding::negative_zero: return bits == sign_mask();
      case nan_encoding::none: break;
    }
    return false;
  }
  /// Whether a bit pattern (of this format) is +-Inf.
  [[nodiscard]] constexpr bool is_inf_bits(std::uint32_t bits) const noexcept {
    return nan == nan_encoding::ieee && (bits & magnitude_mask()) == exponent_mask();
  }

  friend constexpr bool operator==(const float_format&, const float_format&) = default;
};

/// The unsigned integer that stores a format of `Bits` bits: uint8_t up to 8 bits, else uint16_t.
template <int Bits>
using storage_for_bits_t = std::conditional_t<(Bits <= 8), std::uint8_t, std::uint16_t>;

/// Format descriptions of every named type. Biases, Inf and NaN encodings are those of the
/// ml_dtypes type of the same name (and of the OCP 8-bit FP and MX specifications).
namespace formats {
// clang-format off
/// bfloat16: Exponent 8, Mantissa 7, bias 127, IEEE Inf/NaN (Google Brain float).
inline constexpr float_format bfloat16{.exponent_bits = 8, .mantissa_bits = 7, .exponent_bias = 127, .nan = nan_encoding::ieee};
/// float16: IEEE 754 binary16: Exponent 5, Mantissa 10, bias 15.
inline constexpr float_format float16{.exponent_bits = 5, .mantissa_bits = 10, .exponent_bias = 15, .nan = nan_encoding::ieee};
/// float8_e4m3fn: OCP FP8 E4M3: Exponent 4, Mantissa 3, bias 7, no Inf, NaN = S.1111.111.
inline constexpr float_format e4m3fn{.exponent_bits = 4, .mantissa_bits = 3, .exponent_bias = 7, .nan = nan_encoding::all_ones};
/// float8_e5m2: OCP FP8 E5M2: Exponent 5, Mantissa 2, bias 15, IEEE Inf/NaN.
inline constexpr float_format e5m2{.exponent_bits = 5, .mantissa_bits = 2, .exponent_bias = 15, .nan = nan_encoding::ieee};
/// float8_e4m3fnuz: Exponent 4, Mantissa 3, bias 8, no Inf, no -0, NaN = 1.0000.000 (Graphcore/AMD).
inline constexpr float_format e4m3fnuz{.exponent_bits = 4, .mantissa_bits = 3, .exponent_bias = 8, .nan = nan_encoding::negative_zero};
/// float8_e5m2fnuz: Exponent 5, Mantissa 2, bias 16, no Inf, no -0, NaN = 1.00000.00.
inline constexpr float_format e5m2fnuz{.exponent_bits = 5, .mantissa_bits = 2, .exponent_bias = 16, .nan = nan_encoding::negative_zero};
/// float8_e4m3b11fnuz: Exponent 4, Mantissa 3, bias 11, no Inf, no -0, NaN = 1.0000.000.
inline constexpr float_format e4m3b11fnuz{.exponent_bits = 4, .mantissa_bits = 3, .exponent_bias = 11, .nan = nan_encoding::negative_zero};
/// float8_e3m4: Exponent 3, Mantissa 4, bias 3, IEEE Inf/NaN.
inline constexpr float_format e3m4{.exponent_bits = 3, .mantissa_bits = 4, .exponent_bias = 3, .nan = nan_encoding::ieee};
/// float8_e4m3: Exponent 4, Mantissa 3, bias 7, IEEE Inf/NaN (max 240).
inline constexpr float_format e4m3{.exponent_bits = 4, .mantissa_bits = 3, .exponent_bias = 7, .nan = nan_encoding::ieee};
/// float8_e8m0fnu: OCP MX scale: unsigned, Exponent 8, Mantissa 0, bias 127, no zero, NaN = 0xFF.
inline constexpr float_format e8m0fnu{.exponent_bits = 8, .mantissa_bits = 0, .exponent_bias = 127, .nan = nan_encoding::all_ones, .is_signed = false, .has_zero = false};
/// float6_e2m3fn: OCP MX FP6 E2M3: Exponent 2, Mantissa 3, bias 1, no Inf, no NaN.
inline constexpr float_format e2m3fn{.exponent_bits = 2, .mantissa_bits = 3, .exponent_bias = 1, .nan = nan_encoding::none};
/// float6_e3m2fn: OCP MX FP6 E3M2: Exponent 3, Mantissa 2, bias 3, no Inf, no NaN.
inline constexpr float_format e3m2fn{.exponent_bits = 3, .mantissa_bits = 2, .exponent_bias = 3, .nan = nan_encoding::none};
/// float4_e2m1fn: OCP MX FP4 E2M1: Exponent 2, Mantissa 1, bias 1, no Inf, no NaN.
inline constexpr float_format e2m1fn{.exponent_bits = 2, .mantissa_bits = 1, .exponent_bias = 1, .nan = nan_encoding::none};
// clang-format on
}  // namespace formats

}  // namespace mixprec
