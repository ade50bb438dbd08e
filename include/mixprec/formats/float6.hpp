/// \file
/// \brief OCP Microscaling (MX) 6-bit element formats. These are the raw element types, not the
/// composite MXFP6 block format (which pairs 32 elements with a float8_e8m0fnu scale).
///
/// Neither has Inf or NaN: finite overflow and +-Inf saturate to +-max (as ml_dtypes does), and NaN,
/// which the MX spec leaves to the implementation, becomes ml_dtypes' quiet_NaN() pattern 1.00.000 (-0).
/// Stored in the low 6 bits of a uint8_t.
#pragma once

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// MX FP6 E2M3: Exponent 2, Mantissa 3, bias 1. Max 7.5 = 1.875 * 2^2, smallest subnormal 0.125.
///
///     | S | EE | MMM |
struct float6_e2m3fn : basic_float<float6_e2m3fn, formats::e2m3fn> {
  using basic_float::basic_float;
};

/// MX FP6 E3M2: Exponent 3, Mantissa 2, bias 3. Max 28 = 1.75 * 2^4, smallest subnormal 0.0625.
///
///     | S | EEE | MM |
struct float6_e3m2fn : basic_float<float6_e3m2fn, formats::e3m2fn> {
  using basic_float::basic_float;
};

}  // namespace mixprec
