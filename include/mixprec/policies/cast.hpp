/// \file
/// \brief Casting the floating-point leaves of a tree: `cast_floating<To>(tree)` (jmp's
/// `cast_to_full` / `cast_to_half` with the target named), `cast_floating(tree, role, policy)`, and
/// `cast_to_param<P>`, `cast_to_compute<P>`, `cast_to_output<P>` (jmp's `Policy.cast_to_*`), with
/// Flax's `promote` (`dtype=None`). `docs/casting.md` has the rules and examples.
///
/// **Rules** (jmp `_cast_floating_to`, extended to complex leaves and small floats):
///  - floating leaves (float, double, long double, bfloat16, float16, float8/6/4) become `To`;
///    narrowing rounds to nearest, ties to even, once (the small floats' explicit constructors; a
///    long double leaf is rounded from its full value, never through double);
///  - integer, bool and intn leaves are untouched: same type, same value;
///  - a complex leaf is never made real: with `To` = float (double, long double) it becomes
///    `std::complex<float>` (double, long double); a `To` with no complex counterpart (bfloat16,
///    float16, float8/6/4) does not compile (static_assert saying what to do). jmp leaves complex
///    leaves alone (they are not `jnp.floating`); mixprec casts them with their real counterpart.
///  - `To` = `promote` (Flax `dtype=None`): the tree's floating and complex leaves are cast to their
///    common type: R = `promote_t` of the leaves' real types (complex<float> counts as float); floating
///    leaves become R, complex leaves `std::complex<R>`. That is JAX's promotion of the leaf types,
///    with each leaf keeping its kind. A tree with no floating or complex leaf is returned unchanged.
///  - the structure is kept; containers in the result are evaluated. When no leaf changes type the
///    tree is returned as is (copied, or moved when passed an rvalue).
#pragma once

#include <complex>
#include <concepts>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/dtypes/promotion.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec {

/// A type floating leaves can be cast to: a cv-unqualified real floating type (float, double,
/// long double, or a mixprec small float).
template <class T>
concept cast_target = floating_leaf<T> && std::same_as<T, std::remove_cv_t<T>>;

namespace detail {
/// `From` (a floating leaf type) converted to `To` (a `cast_target`), rounding once. A long double
/// goes to a small float through `from_long_double` (the small floats' constructors refuse long
/// double, and rounding it to double first would round twice); that path is not constexpr.
template <class To, class From>
[[nodiscard]] constexpr To convert_floating(const From& x) {
  if constexpr (std::same_as<To, From>) {
    return x;
  } else if constexpr (std::same_as<From, long double> && small_float<To>) {
    return from_long_double<To>(x);
  } else if constexpr (small_float<From> && std::is_floating_point_v<To>) {
    return static_cast<To>(static_cast<float>(x));  // exact: float holds every small float value
  } else {
    return static_cast<To>(x);  // std -> std, or the small float's explicit rounding constructor
  }
}

/// The leaf function of `cast_floating<To>`: floating leaves to `To`, complex leaves to
/// `std::complex<To>`, everything else untouched.
template <class To>
struct cast_leaf_fn {
  template <class L>
  constexpr auto operator()(const L& x) const {
    if constexpr (floating_leaf<L>) {
      return convert_floating<To>(x);
    } else if constexpr (complex_leaf<L>) {
      if constexpr (std::is_floating_point_v<To>) {
        return std::complex<To>(static_cast<To>(x.real()), static_cast<To>(x.imag()));
      } else {
        static_assert(tree_dependent_false<L, To>,
                      "mixprec::cast_floating: a std::complex leaf cannot be cast to this target type: the target "
                      "(bfloat16, float16 or a float8/float6/float4 type) has no complex counterpart, and mixprec "
                      "never drops an imaginary part silently. Cast to float or double instead (complex leaves then "
                      "become std::complex<float> or std::complex<double>), or turn the complex leaf into real "
                      "values yourself first (std::real, std::abs).");
        return x;
      }
    } else {
      return x;
    }
  }
};

/// The real types of the floating and complex leaves of a type_list of leaves.
template <class List>
struct inexact_real_types;
template <>
struct inexact_real_types<type_list<>> {
  using type = type_list<>;
};
template <class L, class... Ls>
struct inexact_real_types<type_list<L, Ls...>> {
  using rest = typename inexact_real_types<type_list<Ls...>>::type;
  static constexpr auto pick() {
    if constexpr (floating_leaf<L>) {
      return std::type_identity<typename tree_concat<type_list<std::remove_cv_t<L>>, rest>::type>{};
    } else if constexpr (complex_leaf<L>) {
      return std::type_identity<typename tree_concat<type_list<typename L::value_type>, rest>::type>{};
    } else {
      return std::type_identity<rest>{};
    }
  }
  using type = typename decltype(pick())::type;
};

template <class List>
struct promote_list;
template <>
struct promote_list<type_list<>> {
  using type = void;  // nothing to cast
};
template <class... Ts>
struct promote_list<type_list<Ts...>> {
  using type = promote_t<Ts...>;
};

template <class List, class... Extra>
struct append_types;
template <class... Ts, class... Extra>
struct append_types<type_list<Ts...>, Extra...> {
  using type = type_list<Ts..., Extra...>;
};

/// The floating type the leaves of `Tree` are cast to for target `To`; `void` when there is nothing
/// to cast (`promote` on a tree without floating or complex leaves). `Extra` are types that take part
/// in the promotion without being leaves (a policy's `param_type`, FLIP 1777).
template <class To, class Tree, class... Extra>
struct resolve_cast_target {
  using type = To;
};
template <class Tree, class... Extra>
struct resolve_cast_target<promote, Tree, Extra...> {
  using type = typename promote_list<
      typename append_types<typename inexact_real_types<tree_leaf_types_t<Tree>>::type, Extra...>::type>::type;
};

template <class To>
constexpr void check_cast_target() {
  static_assert(cast_target<To> || std::same_as<To, promote>,
                "mixprec::cast_floating: the target must be a real floating type (float, double, long double, "
                "mixprec::bfloat16, mixprec::float16, a float8/float6/float4 type) or mixprec::promote. Integer "
                "and bool leaves are never cast, and complex leaves follow a float or double target to "
                "std::complex<float> or std::complex<double>.");
}

template <class To, class... Extra, class Tree>
[[nodiscard]] constexpr auto cast_floating_impl(Tree&& tree) {
  using T = std::remove_cvref_t<Tree>;
  check_cast_target<To>();
  using target = typename resolve_cast_target<To, T, Extra...>::type;
  // Nothing to cast (no target), or no leaf changes type, so none changes value: the tree as it is.
  constexpr bool unchanged = [] {
    if constexpr (std::is_void_v<target>) {
      return true;
    } else {
      return std::same_as<tree_map_t<cast_leaf_fn<target>, T>, T>;
    }
  }();
  if constexpr (unchanged) {
    return T(std::forward<Tree>(tree));
  } else {
    return tree_map(cast_leaf_fn<target>{}, std::as_const(tree));
  }
}

/// A policy-like type: has `param_type`, `compute_type` and `output_type`.
template <class P>
concept has_role_types = requires {
  typename std::remove_cvref_t<P>::param_type;
  typename std::remove_cvref_t<P>::compute_type;
  typename std::remove_cvref_t<P>::output_type;
};

template <semantic_dtype S, class P>
using role_type_t = std::conditional_t<
    S == semantic_dtype::param, typename P::param_type,
    std::conditional_t<S == semantic_dtype::compute, typename P::compute_type, typename P::output_type>>;
}  // namespace detail

/// Casts the floating-point leaves of `tree` to `To` and keeps everything else (see the file comment
/// for the rules: integers and bools untouched, complex leaves to `std::complex<To>`, `To` =
/// `promote` for the tree's common type). jmp: `cast_to_full(tree)` is `cast_floating<float>(tree)`,
/// `cast_to_half(tree)` is `cast_floating<bfloat16>` (TPU) or `cast_floating<float16>` (GPU).
///
/// Errors (compile time): a `To` that is not a real floating type or `promote`; a complex leaf with a
/// `To` that has no complex counterpart; with `promote`, leaf types that do not promote (e.g. two
/// float8 types, JAX type promotion lattice).
///
/// **Example**:
///
///     auto t = std::tuple{std::vector<float>{1.0f, 3.14159274f}, std::int32_t{7}};
///     auto h = mixprec::cast_floating<mixprec::bfloat16>(t);
///     // std::tuple<std::vector<bfloat16>, std::int32_t>: bits {0x3F80, 0x4049}, 7
template <class To, class Tree>
[[nodiscard]] constexpr auto cast_floating(Tree&& tree) {
  return detail::cast_floating_impl<To>(std::forward<Tree>(tree));
}

/// The type `cast_floating<To>` returns for a tree of type `Tree`.
template <class To, class Tree>
using cast_floating_t = decltype(mixprec::cast_floating<To>(std::declval<const std::remove_cvref_t<Tree>&>()));

/// Casts the floating-point leaves of `tree` to the type policy `P` gives role `S` (jmp's
/// `_cast_floating_to(tree, policy.<role>_dtype)`); a `promote` role casts the leaves to the common
/// type of the leaves and `P::param_type` (Flax FLIP 1777: "the inputs together with the parameters",
/// the same rule as `resolve_t`).
/// The role is a compile-time constant because it decides the result type.
///
/// **Example**:
///
///     auto c = mixprec::cast_floating(params, mixprec::semantic_constant<mixprec::semantic_dtype::compute>{},
///                                     mixprec::mixed_bfloat16{});   // float leaves -> bfloat16
template <semantic_dtype S, class P, class Tree>
requires detail::has_role_types<P>
[[nodiscard]] constexpr auto cast_floating(Tree&& tree, semantic_constant<S> /*role*/, P /*policy*/) {
  return detail::cast_floating_impl<detail::role_type_t<S, std::remove_cvref_t<P>>,
                                    typename std::remove_cvref_t<P>::param_type>(std::forward<Tree>(tree));
}

/// Casts the floating-point leaves of `tree` to `P::param_type` (jmp `Policy.cast_to_param`).
template <class P, class Tree>
requires detail::has_role_types<P>
[[nodiscard]] constexpr auto cast_to_param(Tree&& tree) {
  return detail::cast_floating_impl<typename P::param_type>(std::forward<Tree>(tree));
}

/// Casts the floating-point leaves of `tree` to `P::compute_type` (jmp `Policy.cast_to_compute`).
/// With `promote` (Flax `dtype=None`) the leaves go to the common type of the leaves and
/// `P::param_type` (FLIP 1777; the same rule as `resolve_t`): bfloat16 inputs under
/// `policy<float, promote>` become float, as they would beside float32 parameters.
///
/// **Example**:
///
///     using P = mixprec::policy<float, mixprec::promote>;
///     auto [x, w] = mixprec::cast_to_compute<P>(std::pair{x_bf16, w_f32});   // both float
template <class P, class Tree>
requires detail::has_role_types<P>
[[nodiscard]] constexpr auto cast_to_compute(Tree&& tree) {
  return detail::cast_floating_impl<typename P::compute_type, typename P::param_type>(std::forward<Tree>(tree));
}

/// Casts the floating-point leaves of `tree` to `P::output_type` (jmp `Policy.cast_to_output`).
/// With `promote`, to the common type of the tree's leaves and `P::param_type`.
template <class P, class Tree>
requires detail::has_role_types<P>
[[nodiscard]] constexpr auto cast_to_output(Tree&& tree) {
  return detail::cast_floating_impl<typename P::output_type, typename P::param_type>(std::forward<Tree>(tree));
}

}  // namespace mixprec
