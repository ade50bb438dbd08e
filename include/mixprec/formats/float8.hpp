/// \file
/// \brief The float8 family, named as in ml_dtypes, LLVM/MLIR and PyTorch.
///
/// Suffixes (LLVM/MLIR, ml_dtypes): `F` = finite (no infinities), `N` = special NaN encoding,
/// `UZ` = unsigned zero (no -0; the pattern 1.000... is the only NaN), `U` = unsigned (no sign bit).
/// A bare "e4m3" names two different formats in the field (OCP's, here `float8_e4m3fn`, max 448; and
/// the IEEE-like `float8_e4m3`, max 240), so every name here carries its suffix.
#pragma once

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// OCP FP8 E4M3 (the inference/forward format): Exponent 4, Mantissa 3, bias 7.
/// No Inf; NaN is S.1111.111. Max 448 = 1.75 * 2^8, smallest subnormal 2^-9.
///
///     | S | EEEE | MMM |
struct float8_e4m3fn : basic_float<float8_e4m3fn, formats::e4m3fn> {
  using basic_float::basic_float;
};

/// OCP FP8 E5M2 (the gradient format): Exponent 5, Mantissa 2, bias 15; IEEE Inf and NaN.
/// Max 57344 = 1.75 * 2^15, smallest subnormal 2^-16.
///
///     | S | EEEEE | MM |
struct float8_e5m2 : basic_float<float8_e5m2, formats::e5m2> {
  using basic_float::basic_float;
};

/// Graphcore/AMD FP8 E4M3 FNUZ: Exponent 4, Mantissa 3, bias 8. No Inf, no -0; NaN is 1.0000.000.
/// Max 240 = 1.875 * 2^7.
struct float8_e4m3fnuz : basic_float<float8_e4m3fnuz, formats::e4m3fnuz> {
  using basic_float::basic_float;
};

/// Graphcore/AMD FP8 E5M2 FNUZ: Exponent 5, Mantissa 2, bias 16. No Inf, no -0; NaN is 1.00000.00.
/// Max 57344 = 1.75 * 2^15.
struct float8_e5m2fnuz : basic_float<float8_e5m2fnuz, formats::e5m2fnuz> {
  using basic_float::basic_float;
};

/// E4M3 with bias 11 (TPU): Exponent 4, Mantissa 3, bias 11. No Inf, no -0; NaN is 1.0000.000.
/// Max 30 = 1.875 * 2^4.
struct float8_e4m3b11fnuz : basic_float<float8_e4m3b11fnuz, formats::e4m3b11fnuz> {
  using basic_float::basic_float;
};

/// IEEE-like E3M4: Exponent 3, Mantissa 4, bias 3; IEEE Inf and NaN. Max 15.5 = 1.9375 * 2^3.
struct float8_e3m4 : basic_float<float8_e3m4, formats::e3m4> {
  using basic_float::basic_float;
};

/// IEEE-like E4M3: Exponent 4, Mantissa 3, bias 7; IEEE Inf and NaN. Max 240 = 1.875 * 2^7.
struct float8_e4m3 : basic_float<float8_e4m3, formats::e4m3> {
  using basic_float::basic_float;
};

/// OCP MX scale E8M0: unsigned, Exponent 8, Mantissa 0, bias 127: the powers of two 2^-127 .. 2^127.
/// No zero, no negative numbers, no Inf; NaN is 0xFF. Zero and negative inputs convert to NaN
/// (saturate_cast: to 2^-127); positive values below 2^-127 round up to 2^-127.
///
///     | EEEEEEEE |     value = 2^(E - 127)
struct float8_e8m0fnu : basic_float<float8_e8m0fnu, formats::e8m0fnu> {
  using basic_float::basic_float;
};

}  // namespace mixprec
