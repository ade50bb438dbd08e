/// \file
/// \brief Mixed-precision policies as in DeepMind's jmp: `policy<Param, Compute, Output>`.
#pragma once

#include <cstdint>
#include <type_traits>

namespace mixprec {

/// The three roles a dtype plays in a policy (jmp's param_dtype / compute_dtype / output_dtype).
enum class semantic_dtype : std::uint8_t { param, compute, output };

/// A compile-time `semantic_dtype`, for overloads whose result type depends on the role.
template <semantic_dtype S>
using semantic_constant = std::integral_constant<semantic_dtype, S>;

/// Tag for `Compute` or `Output`: Flax's `dtype=None`, "promote the inputs and parameters to their
/// common type" (Flax FLIP 1777) instead of casting to a fixed dtype.
struct promote {};

/// Which element types parameters are stored in, computed in and returned in (jmp's Policy).
/// Compute defaults to Param and Output to Compute, as in jmp's `Policy(param, compute, output)`.
template <class Param, class Compute = Param, class Output = Compute>
struct policy {
  using param_type = Param;      ///< storage type of weights
  using compute_type = Compute;  ///< type activations and weights are cast to before a kernel (or `promote`)
  using output_type = Output;    ///< type returned to the caller (or `promote`)
};

}  // namespace mixprec
