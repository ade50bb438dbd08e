/// \file
/// \brief `saturate_cast<T>(x)`: narrowing with finite overflow clamped to +-max.
#pragma once

#include <concepts>

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/detail/float_codec.hpp"

namespace mixprec {

/// Converts `x` (float, double, an integer, `__int128` included, or another small float) to the small float `To`,
/// rounding to nearest even once, with `overflow_mode::saturate` ("satfinite", as CUDA's cvt.rn.satfinite and CUTLASS's
/// round_to_nearest_satfinite):
///  - a finite value beyond +-max becomes +-max (also when rounding would carry it past max);
///  - +-Inf becomes +-max (ml_dtypes' saturating conversion keeps Inf; we clamp, as "satfinite" does);
///  - NaN stays NaN (float6/float4 have no NaN: the same pattern as `To(x)`, see float6.hpp);
///  - for float8_e8m0fnu, zero and negative inputs become its smallest value 2^-127.
///
/// **Example**:
///
///     saturate_cast<float8_e4m3fn>(1000.0f);   // 448
///     float8_e4m3fn(1000.0f);                  // NaN
///     saturate_cast<float8_e5m2>(-INFINITY);   // -57344
template <small_float To, class From>
requires std::same_as<From, float> || std::same_as<From, double> || detail::integer<From> || small_float<From>
[[nodiscard]] constexpr To saturate_cast(From x) noexcept {
  using storage = typename To::storage_type;
  if constexpr (detail::integer<From>) {
    return To::from_bits(static_cast<storage>(detail::encode_integer<To::format>(x, overflow_mode::saturate)));
  } else if constexpr (small_float<From>) {
    return To::from_bits(
        static_cast<storage>(detail::encode<To::format>(static_cast<float>(x), overflow_mode::saturate)));
  } else {
    return To::from_bits(static_cast<storage>(detail::encode<To::format>(x, overflow_mode::saturate)));
  }
}

}  // namespace mixprec
