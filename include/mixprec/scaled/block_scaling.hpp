/// \file
/// \brief OCP Microscaling (MX) block scaling (OCP Microscaling Formats (MX) Specification v1.0):
/// `mx_quantise` cuts a float vector into blocks of `block_size` (32 in the spec) consecutive values,
/// gives each block one power-of-two scale X stored as `float8_e8m0fnu`, and stores each value as
/// x / X in a small element format; `mx_dequantise` gives back X * element. `docs/scaled.md` explains
/// when to use which scale rule.
///
/// **Example** (MXFP8 E4M3):
///
///     std::vector<float> x = ...;
///     auto q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(x);     // ocp rule, blocks of 32
///     std::vector<float> y = mixprec::mx_dequantise(q);             // y.size() == x.size()
///     q.clipped;                                                    // values clamped to +-448 * X
///
/// **Element formats**: the five MX floating-point element formats, `float8_e4m3fn` (MXFP8 E4M3,
/// max 448 = 1.75 * 2^8), `float8_e5m2` (MXFP8 E5M2, max 57344 = 1.75 * 2^15), `float6_e2m3fn` (MXFP6
/// E2M3, max 7.5 = 1.875 * 2^2), `float6_e3m2fn` (MXFP6 E3M2, max 28 = 1.75 * 2^4) and `float4_e2m1fn`
/// (MXFP4, max 6 = 1.5 * 2^2). Any other type is refused at compile time (static_assert).
///
/// **Arithmetic**: every step but one is exact (bit operations, and products of a float by a power of
/// two computed in double, where they never leave the normal range); the one rounding is the element
/// conversion, `saturate_cast` (round to nearest even, finite overflow clamped to +-max). So results do
/// not depend on the rounding mode, FTZ or DAZ: a float subnormal input is read from its bits, never
/// through a float operation.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/numeric_limits.hpp"
#include "mixprec/formats/saturate_cast.hpp"

namespace mixprec {

/// How `mx_quantise` picks a block's shared scale X = 2^k from the block's largest magnitude amax.
/// Either way, k is then clamped to the range of `float8_e8m0fnu`, [-127, 127].
enum class block_scale_rule {
  /// The OCP MX v1.0 rule (section 6.3): k = floor(log2(amax)) - emax_elem, where emax_elem is the
  /// exponent of the element format's largest normal (8 for e4m3fn, 15 for e5m2, 2 for e2m3fn, 4 for
  /// e3m2fn, 2 for e2m1fn). amax / X then lies in [2^emax_elem, 2^(emax_elem + 1)), which can exceed
  /// the element max (e4m3fn: 1.9 * 2^8 > 448 = 1.75 * 2^8): such values are clamped to +-max and
  /// counted in `mx_block_tensor::clipped`.
  ocp,
  /// The smallest k with amax / 2^k <= max_elem (the OCP exponent, plus one when amax / 2^k_ocp would
  /// exceed max_elem), so no value clips. Clipping removes the block's largest values, which carry
  /// most of a dot product or a norm; rounding the scale up instead costs at most one binade at the
  /// bottom (the smallest values of the block may fall one binade deeper into the element's
  /// subnormals, or to zero).
  no_clip,
};

namespace detail {
/// Whether `Elem` is one of the OCP MX floating-point element formats.
template <class Elem>
inline constexpr bool is_mx_element =
    std::is_same_v<Elem, float8_e4m3fn> || std::is_same_v<Elem, float8_e5m2> || std::is_same_v<Elem, float6_e2m3fn> ||
    std::is_same_v<Elem, float6_e3m2fn> || std::is_same_v<Elem, float4_e2m1fn>;

/// Exponent range of the e8m0 scale, from its limits: 2^-127 ..= 2^127.
inline constexpr int mx_min_scale_exponent = std::numeric_limits<float8_e8m0fnu>::min_exponent - 1;
inline constexpr int mx_max_scale_exponent = std::numeric_limits<float8_e8m0fnu>::max_exponent - 1;

// IEEE binary32 layout: 23 mantissa bits, bias 127, subnormals scaled by 2^-149.
inline constexpr std::uint32_t mx_float_magnitude_mask = 0x7FFFFFFFU;
inline constexpr std::uint32_t mx_float_exponent_mask = 0x7F800000U;
inline constexpr int mx_float_mantissa_bits = std::numeric_limits<float>::digits - 1;
inline constexpr int mx_float_bias = std::numeric_limits<float>::max_exponent - 1;
inline constexpr int mx_float_finest_exponent = std::numeric_limits<float>::min_exponent - 1 - mx_float_mantissa_bits;

/// 2^k as a double, exactly, for |k| < 1023 (built from its bits: no libm call, no rounding).
[[nodiscard]] constexpr double mx_pow2(int k) noexcept {
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

/// floor(log2(a)) for the magnitude bits of a positive finite float (normal or subnormal).
[[nodiscard]] constexpr int mx_floor_log2(std::uint32_t magnitude_bits) noexcept {
  const auto field = static_cast<int>(magnitude_bits >> mx_float_mantissa_bits);
  if (field != 0) return field - mx_float_bias;
  return static_cast<int>(std::bit_width(magnitude_bits)) - 1 + mx_float_finest_exponent;
}

/// x * 2^-k, exactly, as a double, read from the bits of the finite float `x` (so DAZ cannot flush a
/// subnormal x). For |k| <= 127 the product lies within 2^-276 .. 2^255: a normal double.
[[nodiscard]] inline double mx_scaled(float x, int k) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t magnitude = u & mx_float_magnitude_mask;
  const auto field = static_cast<int>(magnitude >> mx_float_mantissa_bits);
  const std::uint32_t mantissa = magnitude & ((std::uint32_t{1} << mx_float_mantissa_bits) - 1U);
  const std::uint32_t significand = field == 0 ? mantissa : (mantissa | (std::uint32_t{1} << mx_float_mantissa_bits));
  const int exponent = (field == 0 ? 1 : field) - mx_float_bias - mx_float_mantissa_bits;
  const double value = static_cast<double>(significand) * mx_pow2(exponent - k);  // exact: normal operands and result
  return magnitude == u ? value : -value;
}

/// The float holding the double `v`, which is NaN, +-Inf, or a multiple of 2^-149 with at most 24
/// significant bits (so exact in float below 2^128). Magnitudes >= 2^128 give +-Inf (the rounding of
/// such a value to float). Float subnormals are built from their bits, so FTZ cannot flush them.
[[nodiscard]] inline float mx_exact_to_float(double v) noexcept {
  const double magnitude = std::fabs(v);
  if (std::isnan(v)) return static_cast<float>(v);
  if (magnitude >= mx_pow2(std::numeric_limits<float>::max_exponent)) {
    return std::signbit(v) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  if (magnitude != 0.0 && magnitude < static_cast<double>(std::numeric_limits<float>::min())) {
    const std::uint32_t sign = std::signbit(v) ? 0x80000000U : 0U;
    return std::bit_cast<float>(sign | static_cast<std::uint32_t>(magnitude * mx_pow2(-mx_float_finest_exponent)));
  }
  return static_cast<float>(v);
}

[[noreturn]] inline void throw_mx_error(const char* function, const std::string& what) {
  throw std::invalid_argument(std::string("mixprec::") + function + ": " + what);
}
}  // namespace detail

/// A vector quantised to an OCP MX format: `elements[i]` is value i divided by its block's scale and
/// rounded to `Elem`; block b = values [b * block_size, min((b + 1) * block_size, size)) shares
/// `scales[b]`. So value i is X * elements[i] with X = scales[i / block_size] (`mx_dequantise`).
///
/// `Elem` must be one of the MX element formats (see the file comment); any other type fails to compile.
template <class Elem>
struct mx_block_tensor {
  static_assert(detail::is_mx_element<Elem>,
                "mx_block_tensor<Elem> and mx_quantise<Elem> take an OCP MX element format: use float8_e4m3fn, "
                "float8_e5m2, float6_e2m3fn, float6_e3m2fn or float4_e2m1fn as Elem.");

  /// One element per input value, in input order (a NaN-scaled block holds +0s).
  std::vector<Elem> elements;
  /// One shared scale per block, ceil(elements.size() / block_size) of them: 2^-127 ..= 2^127, or NaN
  /// (pattern 0xFF) for a block whose input held NaN or +-Inf.
  std::vector<float8_e8m0fnu> scales;
  /// Values per block (>= 1); the last block holds the remaining size % block_size values when that is
  /// not 0.
  std::size_t block_size = 32;
  /// How many values were beyond the element range, |x| / X > max_elem, and so were stored as +-max
  /// (with the `ocp` rule; never with `no_clip`, whose scale leaves every |x| / X <= max_elem).
  std::size_t clipped = 0;
};

/// Quantises `x` to the MX format with element type `Elem`: blocks of `block_size` consecutive values
/// (the last block is shorter when block_size does not divide x.size(); it is scaled on its own amax)
/// each get a shared scale X = 2^k chosen by `rule` from the block's amax = max |x_i| (see
/// `block_scale_rule`), and each value becomes `saturate_cast<Elem>(x_i / X)` (OCP MX v1.0 section 6.3:
/// round to nearest even, values beyond the element range clamped to +-max).
///
/// - k is clamped to the e8m0 range [-127, 127]. The lower clamp applies to blocks with amax below
///   2^(emax_elem - 127) (e4m3fn: 2^-119): their values come out smaller than the rule intends and lose
///   precision in the element's subnormals, but never clip. The upper clamp cannot be reached from float
///   inputs (every element max is >= 2 and every float is < 2^128); if it were, the values it pushes
///   beyond max_elem would be counted in `clipped`. (Microsoft's microxcaling reference clamps below at
///   -127 the same way.)
/// - A block whose amax is 0 gets X = 2^0 (e8m0 pattern 127, the neutral scale: any scale maps zeros to
///   zeros) and +-0 elements (the signs are kept).
/// - A block holding NaN or +-Inf gets the NaN scale (e8m0 pattern 0xFF) and +0 elements: the spec's NaN
///   scale makes every element of the block NaN, so `mx_dequantise` returns NaN for the whole block
///   (microxcaling also gives such blocks a NaN scale). Such a block adds nothing to `clipped`.
///
/// Shapes: x of any length (empty gives an empty tensor); result `elements.size() == x.size()`,
/// `scales.size() == ceil(x.size() / block_size)`.
/// Errors: std::invalid_argument when `block_size` is 0.
template <class Elem>
[[nodiscard]] mx_block_tensor<Elem> mx_quantise(std::span<const float> x, block_scale_rule rule = block_scale_rule::ocp,
                                                std::size_t block_size = 32) {
  if (block_size == 0) {
    detail::throw_mx_error("mx_quantise",
                           "block_size is 0: it must be at least 1 (the OCP MX formats use blocks of 32)");
  }
  // Exponent of the element's largest normal: max < 2^maxexp, so max = 1.m * 2^(maxexp - 1).
  constexpr int emax_elem = finfo<Elem>::maxexp - 1;
  const auto max_elem = static_cast<double>(std::numeric_limits<Elem>::max());
  constexpr int scale_bias = float8_e8m0fnu::format.exponent_bias;

  mx_block_tensor<Elem> out;
  out.block_size = block_size;
  out.elements.resize(x.size());  // +0 everywhere until written
  const std::size_t blocks = x.size() / block_size + (x.size() % block_size != 0 ? 1 : 0);
  out.scales.reserve(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block_size;  // < x.size(): no overflow, whatever block_size is
    const std::size_t end = begin + std::min(block_size, x.size() - begin);
    std::uint32_t amax_bits = 0;  // for non-negative floats, the order of the bits is the order of the values
    bool finite = true;
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(x[i]) & detail::mx_float_magnitude_mask;
      finite = finite && magnitude < detail::mx_float_exponent_mask;
      amax_bits = std::max(amax_bits, magnitude);
    }
    if (!finite) {
      out.scales.push_back(std::numeric_limits<float8_e8m0fnu>::quiet_NaN());
      continue;
    }
    int k = 0;
    if (amax_bits != 0) {
      k = detail::mx_floor_log2(amax_bits) - emax_elem;
      // amax / 2^k lies in [2^emax_elem, 2^(emax_elem + 1)); max_elem >= 2^emax_elem, so k + 1 always suffices.
      if (rule == block_scale_rule::no_clip && detail::mx_scaled(std::bit_cast<float>(amax_bits), k) > max_elem) ++k;
      k = std::clamp(k, detail::mx_min_scale_exponent, detail::mx_max_scale_exponent);
    }
    out.scales.push_back(float8_e8m0fnu::from_bits(static_cast<std::uint8_t>(k + scale_bias)));
    for (std::size_t i = begin; i < end; ++i) {
      const double scaled = detail::mx_scaled(x[i], k);
      if (std::fabs(scaled) > max_elem) ++out.clipped;
      out.elements[i] = saturate_cast<Elem>(scaled);
    }
  }
  return out;
}

/// Writes the values of `q` into `out`: out[i] = X_b * elements[i] with X_b = scales[i / block_size],
/// and NaN for every value of a block whose scale is NaN.
///
/// The product of a power of two X in [2^-127, 2^127] and an element is exact in float: every element
/// is a multiple of 2^-16 with at most 4 significant bits, so the product is a multiple of 2^-143 (float
/// subnormals included; they are written from their bits, so FTZ cannot flush them). It cannot
/// underflow. It can overflow only past float's max: a `no_clip` block whose amax is within a rounding
/// of FLT_MAX (e.g. FLT_MAX in e4m3fn: X = 2^120, element 256) gives +-Inf there, the rounding of the
/// exact value 2^128 to float. An element that is NaN (or +-Inf, e5m2) gives NaN (+-Inf).
///
/// Shapes: out.size() == q.elements.size().
/// Errors: std::invalid_argument when `out` has another size, when `q.block_size` is 0, or when
/// `q.scales.size()` is not ceil(q.elements.size() / q.block_size).
template <class Elem>
void mx_dequantise(const mx_block_tensor<Elem>& q, std::span<float> out) {
  const std::size_t n = q.elements.size();
  if (out.size() != n) {
    detail::throw_mx_error("mx_dequantise", "out has " + std::to_string(out.size()) + " values but the tensor has " +
                                                std::to_string(n) + ": pass an output span of the tensor's size");
  }
  if (q.block_size == 0) {
    detail::throw_mx_error("mx_dequantise", "the tensor's block_size is 0: it must be at least 1");
  }
  const std::size_t blocks = n / q.block_size + (n % q.block_size != 0 ? 1 : 0);
  if (q.scales.size() != blocks) {
    detail::throw_mx_error("mx_dequantise", "the tensor has " + std::to_string(q.scales.size()) + " scales but " +
                                                std::to_string(n) + " elements in blocks of " +
                                                std::to_string(q.block_size) + " need " + std::to_string(blocks));
  }
  constexpr int scale_bias = float8_e8m0fnu::format.exponent_bias;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * q.block_size;
    const std::size_t end = begin + std::min(q.block_size, n - begin);
    const float8_e8m0fnu scale = q.scales[b];
    if (isnan(scale)) {
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(begin), out.begin() + static_cast<std::ptrdiff_t>(end),
                std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const double scale_value = detail::mx_pow2(static_cast<int>(scale.bits()) - scale_bias);
    for (std::size_t i = begin; i < end; ++i) {
      // Exact in double: both factors are normal doubles and so is their product (>= 2^-16 * 2^-127).
      out[i] = detail::mx_exact_to_float(static_cast<double>(q.elements[i]) * scale_value);
    }
  }
}

/// The values of `q` as a new vector of q.elements.size() floats; see `mx_dequantise(q, out)`.
/// Errors: std::invalid_argument when `q.block_size` is 0 or `q.scales.size()` does not match.
template <class Elem>
[[nodiscard]] std::vector<float> mx_dequantise(const mx_block_tensor<Elem>& q) {
  std::vector<float> out(q.elements.size());
  mx_dequantise(q, std::span<float>(out));
  return out;
}

}  // namespace mixprec
