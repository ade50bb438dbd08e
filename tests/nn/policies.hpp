// Test support for the layer tests: the policies of docs/layers.md and unit roundoffs.
#pragma once

#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>

#include "mixprec/core.hpp"
#include "mixprec/policies/policy.hpp"

namespace layer_tests {

using p_f32 = mixprec::policy<float>;                                               // f32 everywhere
using p_c_bf16 = mixprec::policy<float, mixprec::bfloat16, float>;                  // p=f32, c=bf16, o=f32
using p_c_f16 = mixprec::policy<float, mixprec::float16, float>;                    // p=f32, c=f16, o=f32
using p_bf16 = mixprec::policy<mixprec::bfloat16>;                                  // bf16 everywhere
using p_f64 = mixprec::policy<double>;                                              // f64 everywhere
using p_promote = mixprec::policy<float, mixprec::promote, mixprec::promote>;       // Flax dtype=None, params f32
using p_f16 = mixprec::policy<mixprec::float16>;                                    // f16 everywhere
using p_bf16_o_f32 = mixprec::policy<mixprec::bfloat16, mixprec::bfloat16, float>;  // output wider than compute
using p_bf16_c_f32 = mixprec::policy<mixprec::bfloat16, float, float>;              // params narrower than compute
using all_policies = std::tuple<p_f32, p_c_bf16, p_c_f16, p_bf16, p_f64, p_promote, p_f16, p_bf16_o_f32, p_bf16_c_f32>;
/// The policies with a 16-bit compute type (float32 accumulation), for the same-roundings references
/// (same_roundings.hpp), whose planted bugs only differ from the layer when C is narrower than float32.
using compute16_policies = std::tuple<p_c_bf16, p_c_f16, p_bf16, p_f16, p_bf16_o_f32>;

/// The (policy, input element type) pairs the layer tests run besides float inputs, which run under every
/// policy: those where the input makes a case of its own, a rounding the policy applies to it (float16 to
/// bfloat16, bfloat16 to float16, double straight to bfloat16, float16 or float) or a compute type it
/// picks (promote: float32 for the 16-bit inputs, float64 for double). Each pair instantiates the
/// layer's path for that input once more, which is most of a test file's compile time.
template <class P, class T>
inline constexpr bool input_case =
    std::is_same_v<T, float> ||
    (std::is_same_v<T, mixprec::bfloat16> && (std::is_same_v<P, p_promote> || std::is_same_v<P, p_c_f16>)) ||
    (std::is_same_v<T, mixprec::float16> && (std::is_same_v<P, p_promote> || std::is_same_v<P, p_c_bf16>)) ||
    (std::is_same_v<T, double> && (std::is_same_v<P, p_promote> || std::is_same_v<P, p_c_bf16> ||
                                   std::is_same_v<P, p_f16> || std::is_same_v<P, p_f32>));

/// Calls `f.template operator()<T>()` for each T in turn: one test body for several input element types,
/// e.g. `for_each_type<float, bfloat16, float16, double>([&]<class T>() { ... });`.
template <class... T, class F>
void for_each_type(F&& f) {
  (f.template operator()<T>(), ...);
}

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
