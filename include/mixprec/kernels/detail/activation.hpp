/// \file
/// \brief Private: the vectorised sigmoid, SiLU, tanh-GELU and erf-GELU and their derivatives
/// (optionally times a gate: SwiGLU's and GEGLU's products, and the backward's) on float32 values,
/// one body (activation-inl.hpp) compiled for every SIMD target (`simd_avx2::activation::row<K>`, 8
/// lanes; `simd_avx512::activation::row<K>`, 16), chosen by activation_rows.hpp.
///
/// The logistic kinds: each lane evaluates the scalar formula of kernels/activations.hpp operation for
/// operation, with exp.hpp's `exp` for `std::exp`: the activations as `x / (1 + e^-z)`, z = x (SiLU;
/// sigmoid with 1 for the numerator) or 2 sqrt(2/pi) (x + 0.044715 x^3) (tanh-GELU, the cube and the
/// sums in the scalar code's order), the derivatives from e = e^-|z| without cancellation. Every other
/// operation is one IEEE operation rounded alike, so a result differs from the scalar one only through
/// exp's error (at most 2 ulp against the exact exp, where glibc's expf is within 1), which the error
/// statements of activations.hpp already allow for. Infinities and NaN follow the formulas as the
/// scalar code does (exp gives +Inf above its overflow bound, +0 below its underflow bound and keeps NaN).
///
/// erf-GELU and its derivative have no vectorised `std::erfc` to follow: `gelu_erf_parts` evaluates
/// erfc(-x / sqrt 2) from its own approximation (erfc_fit.hpp) and e^(-x^2 / 2) with x^2 split exactly
/// by an FMA, so neither carries the rounding of -x / sqrt 2 into the exponent, as the scalar form
/// does (its error grows as x^2 there; this one stays within 15 units of 2^-24 over the whole range,
/// tests/kernels/activations_test.cpp).
///
/// Every operation is element-wise, so both targets give the same bits (the test compares the levels).
#pragma once

#include <cstddef>

#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/detail/erfc_fit.hpp"
#include "mixprec/kernels/detail/exp.hpp"

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/activation-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
