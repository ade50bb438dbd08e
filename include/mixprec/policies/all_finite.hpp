/// \file
/// \brief `all_finite(tree)`: whether every floating-point and complex element of a tree is finite
/// (jmp's `all_finite`, the check that decides whether a loss-scaled training step is applied).
#pragma once

#include <cmath>
#include <type_traits>

#include "mixprec/arrays/tree.hpp"

namespace mixprec {

namespace detail {
/// Whether one leaf is finite: floats by value, complex numbers by both parts; integers, bools and
/// intn are always finite.
template <class L>
[[nodiscard]] constexpr bool leaf_is_finite(const L& x) noexcept {
  if constexpr (std::is_floating_point_v<L>) {
    return std::isfinite(x);
  } else if constexpr (small_float<L>) {
    return isfinite(x);  // the small float's hidden friend, found by ADL
  } else if constexpr (complex_leaf<L>) {
    return std::isfinite(x.real()) && std::isfinite(x.imag());
  } else {
    return true;
  }
}
}  // namespace detail

/// True when no floating-point or complex element of `tree` is NaN or +-Inf; integer, bool and intn
/// leaves are ignored. A tree without any leaf (an empty vector, `std::tuple<>`) is finite, as in jmp
/// (`all_finite(None)` and `all_finite({})` are True). `tree` is any mixprec tree: an nn layer's `gradients`, a
/// tuple of several layers' gradients, a `std::vector<std::span<T>>` of gradient tensors. Every element is inspected
/// (no early exit), so the cost does not depend on where a NaN is.
///
/// Typical use, after unscaling gradients (jmp README): skip the update and shrink the loss scale when
/// this returns false.
///
/// **Example**:
///
///     std::vector<mixprec::bfloat16> g{mixprec::bfloat16(1.0f), mixprec::bfloat16(INFINITY)};
///     mixprec::all_finite(std::tuple{g, 3});   // false
///     mixprec::all_finite(std::tuple{1.0f, 3}); // true
template <class Tree>
[[nodiscard]] constexpr bool all_finite(const Tree& tree) {
  bool finite = true;
  tree_for_each([&finite](const auto& leaf) { finite = detail::leaf_is_finite(leaf) && finite; }, tree);
  return finite;
}

}  // namespace mixprec
