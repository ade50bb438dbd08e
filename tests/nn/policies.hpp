// Test support for the layer tests: the policies of docs/layers.md and unit roundoffs.
#pragma once

#include <cmath>
#include <limits>
#include <tuple>

#include "mixprec/core.hpp"
#include "mixprec/policies/policy.hpp"

namespace layer_tests {

using p_f32 = mixprec::policy<float>;                                          // f32 everywhere
using p_c_bf16 = mixprec::policy<float, mixprec::bfloat16, float>;             // p=f32, c=bf16, o=f32
using p_c_f16 = mixprec::policy<float, mixprec::float16, float>;               // p=f32, c=f16, o=f32
using p_bf16 = mixprec::policy<mixprec::bfloat16>;                             // bf16 everywhere
using p_f64 = mixprec::policy<double>;                                         // f64 everywhere
using p_promote = mixprec::policy<float, mixprec::promote, mixprec::promote>;  // Flax dtype=None, params f32
using all_policies = std::tuple<p_f32, p_c_bf16, p_c_f16, p_bf16, p_f64, p_promote>;

/// The unit roundoff u = 2^-p of a type with p significand bits (float: 2^-24, bfloat16: 2^-8).
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

/// The unit roundoff of rounding a `From` value to `To`: 0 when `To` holds every `From` value.
template <class To, class From>
double rounding_to() {
  return std::numeric_limits<To>::digits >= std::numeric_limits<From>::digits ? 0.0 : unit_roundoff<To>();
}

}  // namespace layer_tests
