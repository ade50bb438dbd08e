/// \file
/// \brief How a layer picks its compute, output and statistics types from a policy and its inputs.
///
/// Rules (jmp policies, Flax FLIP 1777 for `promote`):
///  - compute type: `P::compute_type`, or with `promote` the JAX promotion (`promote_t`) of the input
///    element type and `P::param_type` — bf16 input + float32 params -> float32; float64 input is never
///    truncated.
///  - a complex input is never made real: with a real compute type C the layer computes in
///    `std::complex<C>` (complex64 input + float32 compute -> complex64); when C has no complex
///    counterpart (bfloat16, float16) the layer does not compile.
///  - output type: `P::output_type`, or with `promote` the compute type (complex as above).
///  - statistics of norms: at least float32: `promote_t<float, compute>` (float64 under float64).
#pragma once

#include <complex>
#include <type_traits>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/dtypes/promotion.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec::nn {

namespace detail {
using internal::is_complex_v;  // kernels/rounding.hpp

/// `Target` adjusted so that a complex `Input` stays complex.
template <class Target, class Input>
struct keep_complex {
  using type = Target;
};
template <class Target, class T>
requires(!is_complex_v<Target>) struct keep_complex<Target, std::complex<T>> {
  static_assert(std::is_same_v<Target, float> || std::is_same_v<Target, double>,
                "a complex input would be made real: this policy computes in a type with no complex "
                "counterpart (bfloat16, float16). Use a float32 or float64 compute type, or "
                "mixprec::promote, for complex inputs.");
  using type = std::complex<Target>;
};

template <class Role, class Input, class Param>
struct resolve_role {
  using type = typename keep_complex<Role, Input>::type;
};
template <class Input, class Param>
struct resolve_role<promote, Input, Param> {
  using type = promote_t<Input, Param>;
};
}  // namespace detail

/// The type a layer with policy `P` computes in for inputs of element type `Input`.
template <class P, class Input>
using compute_t = typename detail::resolve_role<typename P::compute_type, Input, typename P::param_type>::type;

namespace detail {
// Lazy on purpose: only the chosen branch is instantiated (keep_complex<promote, complex> must not be).
template <class P, class Input, bool = std::is_same_v<typename P::output_type, promote>>
struct output_role {
  using type = compute_t<P, Input>;  // promote: the output is the compute type (complex kept)
};
template <class P, class Input>
struct output_role<P, Input, false> {
  using type = typename keep_complex<typename P::output_type, Input>::type;
};
}  // namespace detail

/// The type a layer with policy `P` returns for inputs of element type `Input`.
template <class P, class Input>
using output_t = typename detail::output_role<P, Input>::type;

/// The type normalisation statistics (mean, variance, mean square) are computed in: at least float32.
template <class Compute>
using statistics_t = promote_t<float, Compute>;

/// The element type of a layer's parameter gradients (and of the optimiser's master weights): the
/// accumulator of the param type, float32 for float32/bfloat16/float16 parameters, float64 for
/// float64 (docs/training.md, "Backward passes"; PyTorch AMP's f32 `.grad`). Backward
/// passes add (`+=`) into gradients of this type, never rounding them to a 16-bit type.
template <class P>
using grad_t = accumulator_t<typename P::param_type>;

}  // namespace mixprec::nn
