/// \file
/// \brief `mixprec::bfloat16`: Google Brain's 16-bit float, the top half of an IEEE float32.
#pragma once

#include "mixprec/formats/basic_float.hpp"

namespace mixprec {

/// bfloat16: 1 sign, 8 exponent, 7 mantissa bits; bias 127; IEEE Inf and NaN.
/// Same range as float (max 3.3895e38), 8 significant bits (eps 2^-7).
///
///     | S | EEEEEEEE | MMMMMMM |     bits 15 | 14-7 | 6-0
struct bfloat16 : basic_float<bfloat16, formats::bfloat16> {
  using basic_float::basic_float;
};

}  // namespace mixprec
