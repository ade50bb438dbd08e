/// \file
/// \brief Private: the vectorised exp of the softmax rows, the online softmax and the activations
/// (`exp`, `exp_shifted`, `exp_nonpositive` in exp-inl.hpp), for every SIMD target, and its constants.
///
/// The classic range reduction (Cody & Waite 1980; Tang 1989): k = round(x / ln 2), r = x - k ln 2
/// in two FMA steps with ln 2 split into a float and the float of the remainder (so k · ln2_hi is
/// exact inside the FMA), |r| <= ln 2 / 2; exp(r) by its degree-7 Taylor polynomial (truncation
/// error r^8/8! < 2^-28 relative, below a quarter of float's unit roundoff), in Horner form with
/// FMAs; the result p · 2^k is rounded once (`mul_pow2`), so subnormal results are rounded as
/// `std::exp` rounds them.
///
/// Error: at most 2 units in the last place against the exact exp over every float in [-104, 88.7];
/// at most 1 over the 2^22 of them that tests/kernels/exp_test.cpp sweeps against `std::exp` in double
/// (the bound the softmax rows' error statements use); exp(-Inf) and every x below ln(2^-150) give
/// +0, +Inf above ln(max float), NaN propagates. Each lane is the same sequence of IEEE operations at
/// 8 and 16 lanes, so both targets give the same bits (the test compares them).
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <numbers>

#include "mixprec/kernels/detail/simd/ops.hpp"

namespace mixprec::detail::exp_constants {

/// ln 2 as a float, and the float of what that lost: ln2_hi + ln2_lo = ln 2 to about 2^-48.
inline constexpr float ln2_hi = std::numbers::ln2_v<float>;
inline constexpr float ln2_lo = static_cast<float>(std::numbers::ln2 - static_cast<double>(ln2_hi));

/// 1/k! as a float, the Taylor coefficients of exp.
constexpr float inverse_factorial(int k) {
  double f = 1.0;
  for (int i = 2; i <= k; ++i) f *= i;
  return static_cast<float>(1.0 / f);
}
/// The polynomial's coefficients, 1/k! for k = 0..7.
inline constexpr std::array<float, 8> taylor = [] {
  std::array<float, 8> c{};
  for (int k = 0; k < 8; ++k) c[static_cast<std::size_t>(k)] = inverse_factorial(k);
  return c;
}();

/// Below ln(2^-150) (about -103.97), exp(x) is at most half float's smallest subnormal and rounds to
/// +0; above 128 ln 2 (about 88.72), beyond ln(float max), it overflows. Between ln(float max) and
/// 128 ln 2 the scaling itself overflows to +Inf. Both bounds keep k in [-150, 128].
inline constexpr float underflow_below = static_cast<float>(
    (std::numeric_limits<float>::min_exponent - std::numeric_limits<float>::digits - 1) * std::numbers::ln2);
inline constexpr float overflow_above =
    static_cast<float>(std::numeric_limits<float>::max_exponent * std::numbers::ln2);
/// Below ln(2^-126) (about -87.34) exp(x) is not a normal float.
inline constexpr float normal_below =
    static_cast<float>((std::numeric_limits<float>::min_exponent - 1) * std::numbers::ln2);

}  // namespace mixprec::detail::exp_constants

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/exp-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
