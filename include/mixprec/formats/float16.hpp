/// \file
/// \brief `mixprec::float16`: IEEE 754 binary16 ("half").
#pragma once

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// float16 (IEEE 754 binary16): 1 sign, 5 exponent, 10 mantissa bits; bias 15; IEEE Inf and NaN.
/// Max 65504, smallest normal 2^-14, smallest subnormal 2^-24.
///
///     | S | EEEEE | MMMMMMMMMM |     bits 15 | 14-10 | 9-0
struct float16 : basic_float<float16, formats::float16> {
  using basic_float::basic_float;
};

}  // namespace mixprec
