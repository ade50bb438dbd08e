/// \file
/// \brief Mixed-precision policies as in DeepMind's jmp: `policy<Param, Compute, Output>`, the named
/// policies (`mixed_bfloat16`, ...), the `promote` tag (Flax's `dtype=None`) and `resolve`, which
/// answers "which dtype does this role use?".
///
/// The run-time form (`runtime_policy`, `parse_policy`, `visit`) is in `mixprec/policies/runtime_policy.hpp`;
/// the compile-time string form (`policy_from<"p=f32,c=bf16">`) is in `mixprec/policies/policy_string.hpp`.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/dtypes/promotion.hpp"

namespace mixprec {

/// The one exception type for problems with a policy, derived from std::invalid_argument (jmp raises
/// a plain `ValueError`). Thrown by `parse_policy` (as its subclass `policy_parse_error`, which adds
/// the position of the bad token), by `visit` for a run-time policy it cannot dispatch, by
/// `to_string` for a run-time policy holding a dtype that is not a real floating one, and by
/// `resolve` for a `promote` role given no input dtypes. `what()` says what is wrong and how to fix it.
class policy_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The three roles a dtype plays in a policy (jmp's param_dtype / compute_dtype / output_dtype).
enum class semantic_dtype : std::uint8_t { param, compute, output };

/// A compile-time `semantic_dtype`, for overloads whose result type depends on the role.
template <semantic_dtype S>
using semantic_constant = std::integral_constant<semantic_dtype, S>;

/// Tag for `Compute` or `Output`: Flax's `dtype=None`, "promote the inputs and parameters to their
/// common type" (Flax FLIP 1777) instead of casting to a fixed dtype. `resolve` turns it into
/// `result_type(param dtype, input dtypes...)` (JAX type promotion lattice). Not allowed as `Param`:
/// parameters are stored, so they need one fixed dtype.
struct promote {};

/// Why no policy holds a float8, float6 or float4 type, and what to write instead: the one text
/// behind the static_asserts of `policy` and `policy_from` and the run-time `policy_error`s of
/// `parse_policy`, `visit`, `to_string`, `policy_scope` and `dtype_ish` (docs/policies.md, "float8 and
/// smaller formats"). A macro because a static_assert message must be a string literal; at run time it is
/// `detail::small_float_policy_message`.
#define MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON                                                                  \
  "a policy converts without a scale, so 1000 becomes NaN in float8_e4m3fn and small values flush to zero. Keep " \
  "the policy at bfloat16 compute (policy<float, bfloat16, float>, \"p=f32,c=bf16,o=f32\") and use float8 "       \
  "explicitly: inject mixprec::scaled::float8_dot<> into a dense layer with set_dot (per-tensor scales; values "  \
  "beyond the range saturate and are counted), mixprec::scaled::float8_weight_dot for weight-only float8, or "    \
  "quantise data yourself with mixprec::quantise<Format> or mixprec::saturate_cast."

/// A C++ type that can be a policy's `Param`, `Compute` or `Output` type: a cv-unqualified real
/// floating type with a dtype of at least 16 bits — `float`, `double`, `bfloat16`, `float16`. The
/// float8, float6 and float4 types are not: a policy converts without a scale, so a float8 role would
/// turn 1000 into NaN (float8_e4m3fn) and flush small values to zero. float8 computation is explicit
/// and lives in `scaled/` (`scaled::float8_dot`, injected with `nn::dense::set_dot`). These are exactly
/// the four dtypes `parse_policy` accepts and `visit` dispatches.
template <class T>
concept policy_element = std::same_as<T, std::remove_cvref_t<T>> && has_dtype<T> && is_floating(dtype_of_v<T>) &&
                         !is_weak(dtype_of_v<T>) &&
                         !is_small_float(dtype_of_v<T>);

/// A type allowed as a policy's `Compute` or `Output`: a `policy_element` or the `promote` tag.
template <class T>
concept policy_compute_element = policy_element<T> || std::same_as<T, promote>;

namespace detail {
/// A float8, float6 or float4 type (cv-qualified too), which no policy holds.
template <class T>
concept small_float_element = has_dtype<T> && is_small_float(dtype_of_v<T>);

/// Checked in `policy`'s requires-clause: instantiating it runs the static_asserts, so a bad policy
/// fails where it is named, with one sentence saying how to fix it. Each role is checked for a
/// float8/float6/float4 type first; the general sentence of that role then stays silent, so the user
/// reads why, not "constraints not satisfied".
template <class Param, class Compute, class Output>
consteval bool check_policy_types() {
  static_assert(!std::same_as<Param, promote>,
                "mixprec::promote cannot be a policy's Param type: parameters are stored, so they need one fixed "
                "floating type. Write policy<float, promote> to store float32 and promote compute and output.");
  static_assert(
      !small_float_element<Param>,
      "A policy's Param type cannot be a float8, float6 or float4 type: " MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON);
  static_assert(
      !small_float_element<Compute>,
      "A policy's Compute type cannot be a float8, float6 or float4 type: " MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON);
  static_assert(
      !small_float_element<Output>,
      "A policy's Output type cannot be a float8, float6 or float4 type: " MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON);
  static_assert(std::same_as<Param, promote> || small_float_element<Param> || policy_element<Param>,
                "A policy's Param type must be a cv-unqualified floating type with a dtype: float, double, "
                "mixprec::bfloat16 or mixprec::float16.");
  static_assert(small_float_element<Compute> || policy_compute_element<Compute>,
                "A policy's Compute type must be a cv-unqualified floating type with a dtype (float, double, "
                "mixprec::bfloat16 or mixprec::float16) or mixprec::promote.");
  static_assert(small_float_element<Output> || policy_compute_element<Output>,
                "A policy's Output type must be a cv-unqualified floating type with a dtype (float, double, "
                "mixprec::bfloat16 or mixprec::float16) or mixprec::promote.");
  return true;
}
}  // namespace detail

/// Which element types parameters are stored in, computed in and returned in (jmp's `Policy`).
/// `Compute` defaults to `Param` and `Output` to `Compute`, as jmp's `get_policy` chains unspecified
/// roles. `Compute` and `Output` may be `promote` (Flax's `dtype=None`).
///
/// Errors: a `Param` that is `promote`, a role that is a float8, float6 or float4 type, or any role
/// that is not a floating type with a dtype, fails to compile with a static_assert saying which role is
/// wrong and what to write instead (see `policy_element`).
///
/// **Example**:
/// ```cpp
/// using P = mixprec::policy<float, mixprec::bfloat16>;   // p=f32, c=bf16, o=bf16
/// static_assert(std::is_same_v<P::output_type, mixprec::bfloat16>);
/// using Q = P::with_output<float>;                       // p=f32, c=bf16, o=f32 (mixed_bfloat16)
/// ```
template <class Param, class Compute = Param, class Output = Compute>
requires(detail::check_policy_types<Param, Compute, Output>()) struct policy {
  using param_type = Param;      ///< storage type of weights
  using compute_type = Compute;  ///< type activations and weights are cast to before a kernel (or `promote`)
  using output_type = Output;    ///< type returned to the caller (or `promote`)

  /// The same policy with another output type (jmp's `Policy.with_output_dtype`).
  template <class NewOutput>
  using with_output = policy<Param, Compute, NewOutput>;

  /// Policies carry no state: all policies of one type are equal.
  friend constexpr bool operator==(policy, policy) noexcept { return true; }
};

/// True for the specialisations of `policy`.
template <class T>
inline constexpr bool is_policy_v = false;
template <class Param, class Compute, class Output>
inline constexpr bool is_policy_v<policy<Param, Compute, Output>> = true;

/// A specialisation of `mixprec::policy` (cv and references ignored).
template <class T>
concept compile_time_policy = is_policy_v<std::remove_cvref_t<T>>;

/// True when the policy's compute or output type is `promote`.
template <compile_time_policy P>
inline constexpr bool uses_promote_v = std::same_as<typename std::remove_cvref_t<P>::compute_type, promote> ||
                                       std::same_as<typename std::remove_cvref_t<P>::output_type, promote>;

// ---------------------------------------------------------------------------------------------
// Named policies. jmp has no names, only strings; its string for each is given.
// ---------------------------------------------------------------------------------------------

/// Everything in float32. jmp: `get_policy("full")` / `"f32"` / `"float32"`.
using full_precision = policy<float>;
/// Parameters and outputs in float32, compute in bfloat16: the usual TPU training policy.
/// jmp: `get_policy("p=f32,c=bf16,o=f32")`.
using mixed_bfloat16 = policy<float, bfloat16, float>;
/// Parameters and outputs in float32, compute in float16: the usual GPU training policy; needs loss
/// scaling (float16's range ends at 65504). jmp: `get_policy("p=f32,c=f16,o=f32")`.
using mixed_float16 = policy<float, float16, float>;
/// Everything in bfloat16 ("pure bf16"). jmp: `get_policy("bf16")`, or `"half"` on TPU.
using half_bfloat16 = policy<bfloat16>;
/// Everything in float16. jmp: `get_policy("f16")`, or `"half"` off TPU.
using half_float16 = policy<float16>;
/// Everything in float64. jmp: `get_policy("f64")`.
using double_precision = policy<double>;
/// Parameters in float32; compute and output in the promoted type of the inputs and parameters
/// (Flax `param_dtype=float32, dtype=None`, FLIP 1777). No jmp string: jmp has no promote.
using promote_policy = policy<float, promote, promote>;

// ---------------------------------------------------------------------------------------------
// resolve: the dtype of a role
// ---------------------------------------------------------------------------------------------

namespace detail {
template <semantic_dtype S, class P>
struct role_type;
template <class P>
struct role_type<semantic_dtype::param, P> {
  using type = typename P::param_type;
};
template <class P>
struct role_type<semantic_dtype::compute, P> {
  using type = typename P::compute_type;
};
template <class P>
struct role_type<semantic_dtype::output, P> {
  using type = typename P::output_type;
};

/// `dtype_of_v<T>`, or nothing for `promote`.
template <class T>
constexpr std::optional<dtype> fixed_dtype() noexcept {
  if constexpr (std::same_as<T, promote>) {
    return std::nullopt;
  } else {
    return dtype_of_v<T>;
  }
}

/// The type `resolve_t` names, as a `std::type_identity` (so only the taken branch is instantiated).
template <semantic_dtype S, class P, class... Inputs>
consteval auto resolve_type() {
  using declared = typename role_type<S, P>::type;
  if constexpr (!std::same_as<declared, promote>) {
    return std::type_identity<declared>{};
  } else {
    static_assert(sizeof...(Inputs) > 0,
                  "This role of the policy is mixprec::promote, so its type depends on the inputs: name the input "
                  "types, as in resolve_t<semantic_dtype::compute, P, InputType...>.");
    static_assert((has_dtype<Inputs> && ...),
                  "Every input type given to resolve_t must be an element type with a dtype (see dtype_of_v).");
    if constexpr (sizeof...(Inputs) > 0 && (has_dtype<Inputs> && ...)) {
      return std::type_identity<promote_t<typename P::param_type, Inputs...>>{};
    } else {
      return std::type_identity<typename P::param_type>{};  // after the static_assert: no cascade of errors
    }
  }
}
}  // namespace detail

/// The element type of role `S` in policy `P`. A fixed role gives its declared type (the `Inputs` are
/// ignored); a `promote` role gives the JAX-promoted type of the parameters and the inputs,
/// `promote_t<Param, Inputs...>` (Flax FLIP 1777 promotes "the layer inputs together with the
/// parameters"); inputs may be `weak<T>` scalars. A `promote` role with no `Inputs` does not compile
/// (static_assert), nor do inputs that do not promote (e.g. a float8 type: `promote_t`'s message).
///
/// **Example**:
/// ```cpp
/// static_assert(std::is_same_v<resolve_t<semantic_dtype::compute, mixed_bfloat16>, bfloat16>);
/// static_assert(std::is_same_v<resolve_t<semantic_dtype::compute, promote_policy, double>, double>);
/// static_assert(std::is_same_v<resolve_t<semantic_dtype::output, promote_policy, bfloat16>, float>);
/// ```
template <semantic_dtype S, compile_time_policy P, class... Inputs>
using resolve_t = typename decltype(detail::resolve_type<S, std::remove_cvref_t<P>, Inputs...>())::type;

/// The dtype of `role` in the compile-time policy `P` when the layer sees inputs of dtypes
/// `inputs...`. A fixed role returns its dtype (the inputs are ignored). A `promote` role returns
/// `result_type(param dtype, inputs...)` (JAX type promotion lattice, standard mode, x64 on; Flax
/// FLIP 1777 promotes "the layer inputs together with the parameters"), so it may be wider than
/// every input: `resolve(semantic_dtype::compute, promote_policy{}, dtype::bfloat16) == dtype::float32`.
/// `resolve(role, policy)` with no inputs is the plain lookup for policies without `promote`:
/// `resolve(semantic_dtype::compute, mixed_bfloat16{}) == dtype::bfloat16`.
///
/// Errors: throws `policy_error` (a std::invalid_argument) when the role is `promote` and no input
/// dtype is given (there is nothing to promote), and `type_promotion_error` (also a std::invalid_argument) when the
/// dtypes do not promote (e.g. float32 and a float8 type). In a constant expression these are
/// compile errors.
template <compile_time_policy P, std::same_as<dtype>... Inputs>
[[nodiscard]] constexpr dtype resolve(semantic_dtype role, P, Inputs... inputs) {
  using Q = std::remove_cvref_t<P>;
  std::optional<dtype> declared;
  switch (role) {
    case semantic_dtype::param: declared = detail::fixed_dtype<typename Q::param_type>(); break;
    case semantic_dtype::compute: declared = detail::fixed_dtype<typename Q::compute_type>(); break;
    case semantic_dtype::output: declared = detail::fixed_dtype<typename Q::output_type>(); break;
  }
  if (declared) return *declared;
  if constexpr (sizeof...(Inputs) == 0) {
    throw policy_error(
        "mixprec::resolve: this role of the policy is mixprec::promote, so its dtype depends on the inputs; "
        "pass the input dtypes: resolve(role, policy, input_dtype...)");
  } else {
    return result_type(dtype_of_v<typename Q::param_type>, inputs...);
  }
}

}  // namespace mixprec
