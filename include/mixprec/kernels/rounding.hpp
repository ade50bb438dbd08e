/// \file
/// \brief Internal API (namespace `mixprec::internal`, docs/kernels.md, "Internal API"): the element
/// conversions the kernels and the layers share — "round once to the compute type, then widen exactly
/// to its accumulator" — one element at a time or in bulk, and exact scaling by powers of two. Light:
/// no Eigen, no xtensor.
#pragma once

#include <bit>
#include <cmath>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/formats/numeric_limits.hpp"  // std::numeric_limits of the small floats

namespace mixprec::internal {

template <class T>
inline constexpr bool is_complex_v = false;
template <class T>
inline constexpr bool is_complex_v<std::complex<T>> = true;

/// The real type underneath `T` (`T` itself when it is real).
template <class T>
struct real_of {
  using type = T;
};
template <class T>
struct real_of<std::complex<T>> {
  using type = T;
};
template <class T>
using real_of_t = typename real_of<T>::type;

/// Element types the kernels accept as operands: float, double, the small floats, std::complex of
/// float/double, and the standard integers (ids, quantised values), which convert like `T(int)`.
template <class T>
concept kernel_scalar = std::same_as<T, float> || std::same_as<T, double> || small_float<T> ||
    std::same_as<T, std::complex<float>> || std::same_as<T, std::complex<double>> ||
    (std::integral<T> && !std::same_as<T, bool>);

/// `x` rounded to bfloat16 (nearest, ties to even) and returned as float, by integer arithmetic on
/// the bits: the same value as `static_cast<float>(bfloat16(x))` for every float (tests check it), in
/// one pass that compilers vectorise.
///
///     float    | S | EEEEEEEE | MMMMMMM | mmmmmmmm mmmmmmmm |   bits 31 | 30-23 | 22-16 | 15-0
///     bfloat16 = the top 16 bits. Adding 0x7FFF + (bit 16) to the pattern carries into bit 16 exactly
///     when the low half is above 0x8000, or equal to it with bit 16 odd (ties to even); a carry out of
///     the mantissa increments the exponent, and from the largest finite value gives Inf. NaN is
///     handled first (the carry could turn it into Inf): bfloat16's quiet NaN, sign kept.
[[nodiscard]] constexpr float round_through_bfloat16(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (u + 0x7FFFU + ((u >> 16) & 1U)) & 0xFFFF0000U;
  const std::uint32_t nan = (u & 0x80000000U) | 0x7FC00000U;
  return std::bit_cast<float>((u & 0x7FFFFFFFU) > 0x7F800000U ? nan : rounded);
}

/// `x` rounded once to the compute type `C`.
template <class C, class S>
[[nodiscard]] constexpr C round_to(const S& x) noexcept {
  if constexpr (std::same_as<C, S>) {
    return x;
  } else if constexpr (is_complex_v<C>) {
    using R = typename C::value_type;
    if constexpr (is_complex_v<S>) {
      return C(static_cast<R>(x.real()), static_cast<R>(x.imag()));
    } else {
      return C(static_cast<R>(x), R{0});
    }
  } else {
    static_assert(!is_complex_v<S>,
                  "a complex operand would be made real: compute in std::complex<float> or std::complex<double> "
                  "(nn::compute_t does so for complex inputs).");
    if constexpr (small_float<C> && small_float<S>) {
      return C(static_cast<float>(x));
    } else if constexpr (std::same_as<C, bfloat16> && std::same_as<S, float>) {
      // The bit trick above, which the generic codec's constructor would reach in ~10x the time: the
      // same bits for every float (tests sweep every bfloat16 pattern with every kind of low half).
      return bfloat16::from_bits(
          static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(round_through_bfloat16(x)) >> 16));
    } else {
      return static_cast<C>(x);
    }
  }
}

/// `x` widened exactly to the accumulator of its own type.
template <class C>
[[nodiscard]] constexpr accumulator_t<C> widen(const C& x) noexcept {
  return static_cast<accumulator_t<C>>(x);
}

/// `x` rounded once to `C`, then widened exactly to `accumulator_t<C>`: the value a `C` operand has
/// inside a kernel that accumulates in `accumulator_t<C>`.
template <class C, class S>
[[nodiscard]] inline accumulator_t<C> round_widen(const S& x) noexcept {
  if constexpr (std::same_as<S, accumulator_t<C>> && std::same_as<C, accumulator_t<C>>) {
    return x;  // float -> float, double -> double, complex -> same complex
  } else {
    return widen(round_to<C>(x));
  }
}

/// Whether every finite value of the small float S is a value of the small float C (no more significant
/// bits, an exponent range inside C's, subnormals included): then rounding S to C is the identity, as
/// for float8 / float6 / float4 data in a bfloat16 product.
template <class S, class C>
inline constexpr bool values_exact_in =
    small_float<S>&& small_float<C>&& std::numeric_limits<S>::digits <=
    std::numeric_limits<C>::digits&& std::numeric_limits<S>::max_exponent <=
    std::numeric_limits<C>::max_exponent&& std::numeric_limits<S>::min_exponent - std::numeric_limits<S>::digits >=
    std::numeric_limits<C>::min_exponent - std::numeric_limits<C>::digits;

/// `round_widen` of `count` values into `dst`, using the bulk conversion of `mixprec::convert`
/// (vectorised where the compiler targets F16C / AVX-512, or chosen at run time) for the small-float
/// cases. Small floats whose values C holds exactly are decoded straight to float (a 256-entry table
/// for 8-bit formats): the same values, NaN aside (any NaN stays a NaN).
template <class C, class S>
void round_widen_n(const S* src, std::size_t count, accumulator_t<C>* dst) {
  if constexpr (values_exact_in<S, C> && !std::same_as<S, C>) {
    mixprec::convert(std::span<const S>(src, count), std::span<float>(dst, count));
  } else if constexpr (std::same_as<C, bfloat16> && std::same_as<S, float>) {
    for (std::size_t i = 0; i < count; ++i) dst[i] = round_through_bfloat16(src[i]);  // one vectorisable pass
  } else if constexpr (small_float<C> && (std::same_as<S, float> || std::same_as<S, double>)) {
    constexpr std::size_t block = 512;
    C rounded[block];
    for (std::size_t i = 0; i < count; i += block) {
      const std::size_t m = count - i < block ? count - i : block;
      mixprec::convert(std::span<const S>(src + i, m), std::span<C>(rounded, m));
      mixprec::convert(std::span<const C>(rounded, m), std::span<float>(dst + i, m));
    }
  } else if constexpr (small_float<C> && std::same_as<S, C>) {
    mixprec::convert(std::span<const C>(src, count), std::span<float>(dst, count));
  } else {
    for (std::size_t i = 0; i < count; ++i) dst[i] = round_widen<C>(src[i]);
  }
}

/// `round_to<C>` of `count` values into `dst` (the bulk conversion of `mixprec::convert` for float/double
/// to small floats; a copy when S is C).
template <class C, class S>
void round_n(const S* src, std::size_t count, C* dst) {
  if constexpr (small_float<C> && (std::same_as<S, float> || std::same_as<S, double>)) {
    mixprec::convert(std::span<const S>(src, count), std::span<C>(dst, count));
  } else {
    for (std::size_t i = 0; i < count; ++i) dst[i] = round_to<C>(src[i]);
  }
}

/// A short name of T for profile regions (`internal::profile_scope`): "f32", "f64", a small float's
/// "e<exponent bits>m<mantissa bits>" from its format (bfloat16 "e8m7", float16 "e5m10"), "c64"/"c128".
template <class T>
[[nodiscard]] std::string short_type_name() {
  if constexpr (std::same_as<T, float>) {
    return "f32";
  } else if constexpr (std::same_as<T, double>) {
    return "f64";
  } else if constexpr (small_float<T>) {
    return internal::concat("e", T::format.exponent_bits, "m", T::format.mantissa_bits);
  } else if constexpr (is_complex_v<T>) {
    return internal::concat("c", 8 * sizeof(T));
  } else {
    return "other";
  }
}

/// `x` (an accumulator value) rounded once to the output type `O`.
template <class O, class A>
[[nodiscard]] constexpr O round_out(const A& x) noexcept {
  return round_to<O>(x);
}

/// x * 2^k (each part of a complex number), exact unless the result overflows or is subnormal.
template <class A>
[[nodiscard]] A scale_pow2(const A& x, int k) noexcept {
  if constexpr (is_complex_v<A>) {
    return A(std::ldexp(x.real(), k), std::ldexp(x.imag(), k));
  } else {
    return std::ldexp(x, k);
  }
}

}  // namespace mixprec::internal
