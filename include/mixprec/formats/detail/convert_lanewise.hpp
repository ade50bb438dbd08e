/// \file
/// \brief Private: float <-> small-float conversion written as straight-line 32-bit integer
/// operations on one "lane", so that the portable loop vectorises and the x86 intrinsics in
/// `convert_x86.hpp` can mirror it step by step. Users include `<mixprec/formats/convert.hpp>`.
///
/// The scalar codec (`float_codec.hpp`: `encode<F>`, `decode_to_float<F>`) is the definition; these
/// functions compute the same bits for every input (the tests check every 16-bit pattern and about a
/// million float inputs per format). Special values are not restated: their results are constants
/// obtained by calling the scalar codec at compile time.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "mixprec/formats/detail/float_codec.hpp"
#include "mixprec/formats/detail/isa.hpp"  // MIXPREC_DETAIL_CONVERT_ISA and the MIXPREC_DETAIL_CONVERT_* macros
#include "mixprec/formats/float_format.hpp"

namespace mixprec::detail {
inline namespace MIXPREC_DETAIL_CONVERT_ISA {

/// IEEE binary32 layout facts used by the lane-wise codec.
struct float_bits {
  static constexpr int mantissa_bits = ieee_layout<float>::mantissa_bits;                            // 23
  static constexpr int exponent_bias = ieee_layout<float>::exponent_bias;                            // 127
  static constexpr std::uint32_t sign = std::uint32_t{1} << 31;                                      // 0x80000000
  static constexpr std::uint32_t magnitude = sign - 1U;                                              // 0x7FFFFFFF
  static constexpr std::uint32_t mantissa = (std::uint32_t{1} << mantissa_bits) - 1U;                // 0x007FFFFF
  static constexpr std::uint32_t implicit_bit = std::uint32_t{1} << mantissa_bits;                   // 0x00800000
  static constexpr std::uint32_t infinity = ieee_layout<float>::exponent_all_ones << mantissa_bits;  // 0x7F800000
  static constexpr std::uint32_t quiet_nan = infinity | (implicit_bit >> 1);                         // 0x7FC00000
};

/// Whether the lane-wise codec below handles format `F`: every format of mixprec does. It needs
/// bias <= 127 (the format's normal numbers are float normals); subnormals that are float's own
/// (bias 127, bfloat16) or that every float subnormal rounds to zero in (bias + mantissa bits <= 126:
/// float16 and the 8/6/4-bit formats); and, for a format without zero, e8m0's shape (unsigned, no
/// mantissa, bias 127).
template <float_format F>
inline constexpr bool lanewise_supported =
    F.exponent_bias >= 1 && F.exponent_bias <= float_bits::exponent_bias&& F.mantissa_bits <= 10 &&
    F.exponent_bits <= 8 &&
    (F.has_zero ? (F.exponent_bias == float_bits::exponent_bias || F.exponent_bias + F.mantissa_bits <= 126)
                : (F.mantissa_bits == 0 && !F.is_signed && F.exponent_bias == float_bits::exponent_bias));

/// Constants of the lane-wise float -> `F` encoder in overflow mode `Mode`. Layout constants follow
/// from `F`; the results for special inputs come from the scalar codec itself.
template <float_format F, overflow_mode Mode>
struct encode_constants {
  static_assert(
      lanewise_supported<F>,
      "mixprec::convert supports formats with bias <= 127 whose subnormals are float's (bias 127) or need "
      "bias + mantissa bits <= 126, and, without zero, e8m0's shape; convert this format element by element.");
  static constexpr int M = F.mantissa_bits;
  static constexpr int B = F.exponent_bias;
  /// Float mantissa bits dropped by the encoding (bfloat16: 16, float16: 13, e4m3: 20).
  static constexpr int shift = float_bits::mantissa_bits - M;
  /// Subtracting this from |x|'s bits turns the float exponent into the format's biased exponent.
  static constexpr std::uint32_t rebias = static_cast<std::uint32_t>(float_bits::exponent_bias - B)
                                          << float_bits::mantissa_bits;
  /// Added before shifting: half an ulp minus one; the parity of the truncated encoding adds the last
  /// one (ties to the even encoding; for e8m0, which has no mantissa bits, that bit is the exponent's
  /// last bit, as in the scalar codec).
  static constexpr std::uint32_t round_bias = (std::uint32_t{1} << (shift - 1)) - 1U;
  /// |x|'s bits below this: the result is subnormal in F (biased exponent < 1), or, for a format
  /// without zero (e8m0), |x| is a float subnormal.
  static constexpr std::uint32_t subnormal_below =
      F.has_zero ? static_cast<std::uint32_t>(float_bits::exponent_bias + 1 - B) << float_bits::mantissa_bits
                 : float_bits::implicit_bit;
  /// Whether subnormal results are computed as |x| * 2^(B + M - 1) rounded to an integer: valid when
  /// every float subnormal rounds to 0 in F, i.e. 2^-126 <= 2^-(B + M), half F's smallest subnormal.
  /// (The other formats with a zero, bias 127, have float's subnormals and need no separate path.)
  static constexpr bool subnormal_by_scaling = F.has_zero && B + M <= 126;
  /// The float bits of 2^(B + M - 1).
  static constexpr std::uint32_t subnormal_scale = static_cast<std::uint32_t>(float_bits::exponent_bias + B + M - 1)
                                                   << float_bits::mantissa_bits;
  /// e8m0 only: float subnormals above 1.5 * 2^-127, the midpoint of its two smallest values 2^-127
  /// (pattern 0) and 2^-126 (pattern 1), encode as pattern 1, the others as pattern 0 (the tie goes
  /// to the even pattern 0).
  static constexpr std::uint32_t no_zero_midpoint =
      std::bit_cast<std::uint32_t>(std::numeric_limits<float>::min() * 0.75F);
  static constexpr std::uint32_t max_magnitude = F.max_finite_magnitude();
  /// The float bits of F's largest finite value: inputs above it may overflow.
  static constexpr std::uint32_t max_float_bits = (max_magnitude << shift) + rebias;
  static constexpr std::uint32_t sign = F.sign_mask();
  static constexpr std::uint32_t overflow_pos = encode<F>(std::numeric_limits<float>::max(), Mode);
  static constexpr std::uint32_t overflow_neg = encode<F>(-std::numeric_limits<float>::max(), Mode);
  static constexpr std::uint32_t negative_finite = encode<F>(-1.0F, Mode);  // used for unsigned F only
  static constexpr std::uint32_t zero_pos = encode_zero<F>(false, Mode);
  static constexpr std::uint32_t zero_neg = encode_zero<F>(true, Mode);
  static constexpr std::uint32_t inf_pos = encode_infinity<F>(false, Mode);
  static constexpr std::uint32_t inf_neg = encode_infinity<F>(true, Mode);
  static constexpr std::uint32_t nan_pos = encode_nan<F>(false);
  static constexpr std::uint32_t nan_neg = encode_nan<F>(true);
};

/// All ones when `condition` holds, else zero (a lane mask, so that selections stay branch-free).
[[nodiscard]] constexpr std::uint32_t lane_mask(bool condition) noexcept {
  return 0U - static_cast<std::uint32_t>(condition);
}

/// `mask ? if_set : if_clear` for a lane mask, in bit operations.
[[nodiscard]] constexpr std::uint32_t lane_select(std::uint32_t mask, std::uint32_t if_set,
                                                  std::uint32_t if_clear) noexcept {
  return if_clear ^ ((if_set ^ if_clear) & mask);
}

/// Encodes the float whose bits are `u` into format `F`: the same pattern as
/// `encode<F>(std::bit_cast<float>(u), Mode)`, in branch-free 32-bit integer operations (selections
/// are bit masks, so that compilers vectorise the loop around it).
///
///   normal result:     m = (|x| - rebias + round_bias + parity) >> shift   (carries ripple into the exponent;
///                      parity = the last kept bit: whether the truncated encoding is odd)
///   subnormal result:  m = rne(|x| * 2^(B + M - 1))   (F's subnormal unit is 2^(1 - B - M))
/// then overflow (m > max) and the special inputs (0, Inf, NaN) select the scalar codec's constants.
template <float_format F, overflow_mode Mode>
[[nodiscard]] constexpr std::uint32_t encode_lane(std::uint32_t u) noexcept {
  using C = encode_constants<F, Mode>;
  const std::uint32_t a = u & float_bits::magnitude;
  const std::uint32_t negative = lane_mask(u != a);
  const std::uint32_t rebiased = a - C::rebias;  // wraps for subnormal results; not used then
  const std::uint32_t parity = (rebiased >> C::shift) & 1U;
  std::uint32_t mag = (rebiased + C::round_bias + parity) >> C::shift;
  const std::uint32_t subnormal = lane_mask(a < C::subnormal_below);
  if constexpr (F.has_zero && C::B == float_bits::exponent_bias) {
    // bfloat16: its subnormals are float's, and the normal formula above already rounds them.
  } else if constexpr (F.has_zero && C::subnormal_by_scaling) {
    // y = |x| * 2^(B + M - 1) < 2^M is exact (a power-of-two scaling of a normal float that stays
    // normal), so is its truncation t and the remainder y - t (Sterbenz); rounding t to nearest even
    // then needs only comparisons. No step depends on the rounding mode, and FTZ/DAZ can only turn a
    // float-subnormal |x| into 0, which rounds to 0 anyway (it is below half of F's smallest
    // subnormal). Lanes that are not subnormal scale 0 instead, keeping the conversion in range.
    // (Floating-point here lets SSE2 vectorise the loop: it has no per-lane variable shift.)
    const float y = std::bit_cast<float>(a & subnormal) * std::bit_cast<float>(C::subnormal_scale);
    const auto t = static_cast<std::uint32_t>(static_cast<std::int32_t>(y));
    const float remainder = y - static_cast<float>(static_cast<std::int32_t>(t));
    const std::uint32_t up = lane_mask(remainder > 0.5F) | (lane_mask(remainder == 0.5F) & lane_mask((t & 1U) != 0U));
    mag = lane_select(subnormal, t + (up & 1U), mag);
  } else {  // no zero (e8m0): |x| below 2^-126 becomes 2^-127 or 2^-126
    mag = lane_select(subnormal, lane_mask(a > C::no_zero_midpoint) & 1U, mag);
  }
  std::uint32_t r = (negative & C::sign) | mag;
  r = lane_select(lane_mask(mag > C::max_magnitude), lane_select(negative, C::overflow_neg, C::overflow_pos), r);
  if constexpr (F.nan == nan_encoding::negative_zero) r &= ~lane_mask(mag == 0U);  // no -0
  if constexpr (!F.is_signed) r = lane_select(negative, C::negative_finite, r);
  r = lane_select(lane_mask(a == 0U), lane_select(negative, C::zero_neg, C::zero_pos), r);
  r = lane_select(lane_mask(a == float_bits::infinity), lane_select(negative, C::inf_neg, C::inf_pos), r);
  r = lane_select(lane_mask(a > float_bits::infinity), lane_select(negative, C::nan_neg, C::nan_pos), r);
  return r;
}

/// Constants of the lane-wise `F` -> float decoder.
template <float_format F>
struct decode_constants {
  static_assert(
      lanewise_supported<F>,
      "mixprec::convert supports formats with bias <= 127 whose subnormals are float's (bias 127) or need "
      "bias + mantissa bits <= 126, and, without zero, e8m0's shape; convert this format element by element.");
  static constexpr int M = F.mantissa_bits;
  static constexpr int B = F.exponent_bias;
  static constexpr int shift = float_bits::mantissa_bits - M;
  /// Added to (magnitude << shift) to turn F's biased exponent into float's.
  static constexpr std::uint32_t rebias = static_cast<std::uint32_t>(float_bits::exponent_bias - B)
                                          << float_bits::mantissa_bits;
  /// Moves F's sign bit to bit 31 (0 for unsigned formats).
  static constexpr int sign_shift = 31 - (F.exponent_bits + F.mantissa_bits);
  static constexpr std::uint32_t mantissa_mask = (std::uint32_t{1} << M) - 1U;
  static constexpr std::uint32_t max_exponent = (std::uint32_t{1} << F.exponent_bits) - 1U;
  /// A subnormal's value is mantissa * 2^(1 - B - M): added to the float bits of (float)mantissa,
  /// this moves the exponent field by 1 - B - M (wrapping arithmetic; the result stays normal).
  static constexpr std::uint32_t subnormal_rebias = static_cast<std::uint32_t>(1 - B - M) << float_bits::mantissa_bits;
  /// Subnormals need the detour through (float)mantissa unless F's subnormals are float subnormals
  /// with the same scale (bias 127: bfloat16), where (magnitude << shift) is already right.
  static constexpr bool subnormal_detour = F.has_zero && M > 0 && B != float_bits::exponent_bias;
  /// e8m0's pattern 0 is 2^-127, a float subnormal.
  static constexpr std::uint32_t no_zero_smallest =
      std::bit_cast<std::uint32_t>(std::numeric_limits<float>::min() * 0.5F);
};

/// Decodes the pattern `x` of format `F` to the bits of a float: the same bits as
/// `decode_to_float<F>(x)`, in branch-free 32-bit integer operations (and one exact int -> float
/// conversion for subnormals, which no rounding mode or FTZ/DAZ setting affects: it is exact and normal).
template <float_format F>
[[nodiscard]] constexpr std::uint32_t decode_lane(std::uint32_t x) noexcept {
  using C = decode_constants<F>;
  if constexpr (F == formats::bfloat16) {  // the top half of a float: only NaNs change, they get the quiet bit
    const std::uint32_t r = x << C::shift;
    return r | (lane_mask((r & float_bits::magnitude) > float_bits::infinity) & float_bits::quiet_nan);
  } else if constexpr (!F.has_zero) {  // e8m0: every pattern but NaN is 2^(x - 127)
    std::uint32_t r = x << float_bits::mantissa_bits;
    if (x == 0U) r = C::no_zero_smallest;
    if (F.is_nan_bits(x)) r = float_bits::quiet_nan;
    return r;
  } else {
    const std::uint32_t sign = (x & F.sign_mask()) << C::sign_shift;
    const std::uint32_t mag = x & F.magnitude_mask();
    const std::uint32_t exponent = mag >> C::M;
    const std::uint32_t mantissa = mag & C::mantissa_mask;
    std::uint32_t r = (mag << C::shift) + C::rebias;
    if constexpr (C::subnormal_detour) {
      const std::uint32_t sub =
          mantissa == 0U ? 0U
                         : std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(mantissa))) +
                               C::subnormal_rebias;
      r = exponent == 0U ? sub : r;
    }
    if constexpr (F.nan == nan_encoding::ieee) {
      const std::uint32_t special =
          mantissa == 0U ? float_bits::infinity : (float_bits::quiet_nan | (mantissa << C::shift));
      r = exponent == C::max_exponent ? special : r;
    } else if constexpr (F.nan == nan_encoding::all_ones) {
      r = mag == F.magnitude_mask() ? float_bits::quiet_nan : r;
    } else if constexpr (F.nan == nan_encoding::negative_zero) {
      r = x == F.sign_mask() ? float_bits::quiet_nan : r;
    }
    return sign | r;
  }
}

}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail
