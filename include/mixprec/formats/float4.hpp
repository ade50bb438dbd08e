/// \file
/// \brief OCP Microscaling (MX) 4-bit element format E2M1 (the element type of MXFP4 and NVFP4).
#pragma once

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// MX FP4 E2M1: Exponent 2, Mantissa 1, bias 1. The values are +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
/// No Inf, no NaN: finite overflow and +-Inf saturate to +-6 (as ml_dtypes does); NaN becomes the
/// pattern 1.00.0 (-0), ml_dtypes' quiet_NaN(). Stored in the low 4 bits of a uint8_t.
///
///     | S | EE | M |
struct float4_e2m1fn : basic_float<float4_e2m1fn, formats::e2m1fn> {
  using basic_float::basic_float;
};

}  // namespace mixprec
