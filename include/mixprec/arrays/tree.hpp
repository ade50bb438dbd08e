/// \file
/// \brief Trees of numbers (JAX's "pytrees"): scalar leaves inside nested containers, the
/// `tree_traits` customization point, and the generic walks `tree_map` and `tree_for_each` that
/// casting (`cast.hpp`), loss scaling (`loss_scale.hpp`) and `all_finite` are built on.
///
/// **What is a tree** (`docs/casting.md` has the full story):
///  - a *leaf*: one scalar, `tree_leaf<T>`: an arithmetic type (bool, integers, float, double, long
///    double), `std::complex<R>`, a mixprec small float (bfloat16, float16, float8/6/4) or a mixprec
///    sub-byte integer (int4, uint4, int2, uint2);
///  - a *node*: a type with a `mixprec::tree_traits` specialisation. Built in here: `std::tuple`,
///    `std::pair`, `std::array`, `std::vector`, `std::map` (keys are structure, values are subtrees),
///    nested arbitrarily. `mixprec/arrays/eigen.hpp` adds `Eigen::Matrix` and `Eigen::Array`;
///    `mixprec/arrays/xtensor.hpp` adds `xt::xarray` and `xt::xtensor`. Your own struct opts in the same way.
///
/// **Opting in a struct** ("product" node: a fixed list of children of possibly different types).
/// Specialise `tree_traits` with `children` (a tuple of references to the children, for const and
/// non-const nodes alike) and `rebuild` (the node made from transformed children, same order):
///
///     template <class T>
///     struct layer_params { T w; T b; int step; };
///
///     template <class T>
///     struct mixprec::tree_traits<layer_params<T>> {
///       static auto children(auto& p) noexcept { return std::tie(p.w, p.b, p.step); }
///       template <class U>
///       static layer_params<U> rebuild(U w, U b, int step) { return {std::move(w), std::move(b), step}; }
///     };
///
///     auto half = mixprec::cast_floating<mixprec::bfloat16>(layer_params<float>{1.0f, 0.5f, 7});
///     // half is layer_params<bfloat16>{1.0, 0.5, 7}: T changed, step untouched.
///
/// **Opting in a container** ("range" node: any number of children of one type, e.g. a tensor).
/// Specialise `tree_traits` with `element_type`, `for_each(node, f)` (calls `f(child)` on every child,
/// in storage order; `node` is the container or a const one) and `map(node, f)` (a new container of
/// the same shape whose children are `f(child)`; evaluated, never a lazy view). See the std::vector
/// specialisation below.
///
/// A type is either a leaf, or a product node, or a range node. `tree_map` on anything else stops
/// with a static_assert that says how to opt in.
#pragma once

#include <array>
#include <complex>
#include <cstddef>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/intn.hpp"

namespace mixprec {

/// The tree customization point. The primary template is empty: a type with no specialisation is
/// not a tree node. Specialise it (in namespace mixprec, or with a qualified name) for your struct
/// or container; the two shapes a specialisation can take are described in the file comment
/// (`children` + `rebuild` for structs, `element_type` + `for_each` + `map` for containers).
template <class T>
struct tree_traits {};

namespace detail {
template <class T>
inline constexpr bool tree_is_std_complex = false;
template <class R>
inline constexpr bool tree_is_std_complex<std::complex<R>> = true;

template <class T>
inline constexpr bool tree_is_intn = false;
template <int Bits, class Underlying>
inline constexpr bool tree_is_intn<intn<Bits, Underlying>> = true;

/// An always-false value that depends on `T`, for static_asserts in discarded branches.
template <class...>
inline constexpr bool tree_dependent_false = false;
}  // namespace detail

/// A scalar leaf of a tree (cv-qualifiers ignored): arithmetic types, `std::complex<R>`, mixprec
/// small floats and mixprec sub-byte integers.
template <class T>
concept tree_leaf = std::is_arithmetic_v<std::remove_cv_t<T>> || small_float<std::remove_cv_t<T>> ||
    detail::tree_is_std_complex<std::remove_cv_t<T>> || detail::tree_is_intn<std::remove_cv_t<T>>;

/// A floating-point leaf: float, double, long double or a mixprec small float. These are the leaves
/// `cast_floating` casts (jmp casts leaves whose dtype is `jnp.floating`).
template <class T>
concept floating_leaf = std::is_floating_point_v<std::remove_cv_t<T>> || small_float<std::remove_cv_t<T>>;

/// A complex leaf: `std::complex<R>`.
template <class T>
concept complex_leaf = detail::tree_is_std_complex<std::remove_cv_t<T>>;

/// A node whose `tree_traits` has `children` and `rebuild` (a struct, tuple or pair).
template <class T>
concept tree_product_node = requires(const std::remove_cvref_t<T>& node) {
  tree_traits<std::remove_cvref_t<T>>::children(node);
};

/// A node whose `tree_traits` has `element_type`, `for_each` and `map` (a container or tensor).
template <class T>
concept tree_range_node = requires {
  typename tree_traits<std::remove_cvref_t<T>>::element_type;
};

/// A tree: a leaf or a node. Checks the top level only; children are checked as `tree_map` reaches
/// them.
template <class T>
concept tree = tree_leaf<std::remove_cvref_t<T>> || tree_product_node<T> || tree_range_node<T>;

namespace detail {
/// Instantiated by every tree walk on every type it meets, so that a non-tree is reported at once, with
/// this sentence, before anything else fails.
template <class T>
struct tree_check {
  static_assert(tree<T>,
                "mixprec trees: this type is neither a scalar leaf nor a tree node. Leaves are arithmetic types, "
                "std::complex, mixprec small floats and intn; nodes are std::tuple, std::pair, std::array, "
                "std::vector, std::map and types with a mixprec::tree_traits specialisation. For an Eigen or "
                "xtensor container include mixprec/arrays/eigen.hpp or mixprec/arrays/xtensor.hpp (and evaluate lazy "
                "expressions into a container first); for your own struct specialise mixprec::tree_traits "
                "(see mixprec/arrays/tree.hpp).");
  static constexpr bool value = tree<T>;
};
}  // namespace detail

/// Applies `f` to every scalar leaf of `tree` and returns a tree of the same structure whose leaves
/// are the results (a leaf's type may change: `tree_map` of a cast turns `std::vector<float>` into
/// `std::vector<bfloat16>`). Containers in the result are evaluated (own their data).
///
/// `f` is called as `f(const Leaf&)` once per leaf, depth first, children left to right (containers
/// in storage order). `f` must return the same type for every leaf of one type (it is a C++ function,
/// so it does). JAX: `jax.tree_util.tree_map(f, tree)`.
///
/// **Example**:
///
///     auto t = std::tuple{std::vector<float>{1, 2}, 3};
///     auto d = mixprec::tree_map([](auto x) { return x * 2; }, t);   // {{2.f, 4.f}, 6}
template <class F, class Tree>
[[nodiscard]] constexpr auto tree_map(F&& f, const Tree& tree) {
  using T = std::remove_cv_t<Tree>;
  [[maybe_unused]] constexpr bool is_tree = detail::tree_check<T>::value;
  if constexpr (tree_leaf<T>) {
    return f(tree);
  } else if constexpr (tree_product_node<T>) {
    return std::apply(
        [&f](const auto&... child) {
          // A braced list runs its elements left to right; a plain argument list would not.
          std::tuple<decltype(mixprec::tree_map(f, child))...> mapped{mixprec::tree_map(f, child)...};
          return std::apply([](auto&&... c) { return tree_traits<T>::rebuild(std::move(c)...); }, std::move(mapped));
        },
        tree_traits<T>::children(tree));
  } else if constexpr (tree_range_node<T>) {
    return tree_traits<T>::map(tree, [&f](const auto& child) { return mixprec::tree_map(f, child); });
  } else {
    return tree;  // not a tree: tree_check has reported it; returning something avoids a cascade of errors
  }
}

/// Calls `f(leaf)` on every scalar leaf of `tree`, depth first, children left to right (containers in
/// storage order). A non-const `tree` passes its leaves as `Leaf&`, so `f` may change them in place; a
/// const one passes `const Leaf&`. Returns nothing: collect results in state captured by `f`.
/// JAX: `for leaf in jax.tree_util.tree_leaves(tree): f(leaf)`.
///
/// **Example**:
///
///     double sum = 0;
///     mixprec::tree_for_each([&](const auto& x) { sum += static_cast<double>(x); }, std::pair{1.5f, 2});
///     // sum == 3.5
template <class F, class Tree>
constexpr void tree_for_each(F&& f, Tree&& tree) {
  using T = std::remove_cvref_t<Tree>;
  [[maybe_unused]] constexpr bool is_tree = detail::tree_check<T>::value;
  if constexpr (tree_leaf<T>) {
    f(tree);
  } else if constexpr (tree_product_node<T>) {
    std::apply([&f](auto&... child) { (mixprec::tree_for_each(f, child), ...); }, tree_traits<T>::children(tree));
  } else if constexpr (tree_range_node<T>) {
    tree_traits<T>::for_each(tree, [&f](auto& child) { mixprec::tree_for_each(f, child); });
  }
}

/// The type `tree_map(f, tree)` returns for a callable of type `F` and a tree of type `Tree`.
template <class F, class Tree>
using tree_map_t = decltype(mixprec::tree_map(std::declval<F&>(), std::declval<const Tree&>()));

// ---------------------------------------------------------------------------------------------
// Type-level walk: the leaf types of a tree type (for Flax's promote, which needs them at compile time)
// ---------------------------------------------------------------------------------------------

/// A list of types.
template <class... Ts>
struct type_list {};

namespace detail {
template <class... Lists>
struct tree_concat;
template <>
struct tree_concat<> {
  using type = type_list<>;
};
template <class... As>
struct tree_concat<type_list<As...>> {
  using type = type_list<As...>;
};
template <class... As, class... Bs, class... Rest>
struct tree_concat<type_list<As...>, type_list<Bs...>, Rest...> {
  using type = typename tree_concat<type_list<As..., Bs...>, Rest...>::type;
};

template <class T>
struct tree_leaf_types_impl;

template <class Tuple>
struct tree_children_leaf_types;
template <class... Children>
struct tree_children_leaf_types<std::tuple<Children...>> {
  using type = typename tree_concat<typename tree_leaf_types_impl<std::remove_cvref_t<Children>>::type...>::type;
};

template <class T>
struct tree_leaf_types_impl {
  static constexpr auto pick() {
    [[maybe_unused]] constexpr bool is_tree = tree_check<T>::value;
    if constexpr (tree_leaf<T>) {
      return std::type_identity<type_list<T>>{};
    } else if constexpr (tree_product_node<T>) {
      using children = decltype(tree_traits<T>::children(std::declval<const T&>()));
      return std::type_identity<typename tree_children_leaf_types<children>::type>{};
    } else if constexpr (tree_range_node<T>) {
      using element = std::remove_cvref_t<typename tree_traits<T>::element_type>;
      return std::type_identity<typename tree_leaf_types_impl<element>::type>{};
    } else {
      return std::type_identity<type_list<>>{};
    }
  }
  using type = typename decltype(pick())::type;
};
}  // namespace detail

/// The leaf types of the tree type `Tree`, in tree order, repeats kept, as a `type_list`:
/// `tree_leaf_types_t<std::tuple<float, std::vector<int>>>` is `type_list<float, int>`. Works on the
/// type alone (an empty vector still contributes its element type).
template <class Tree>
using tree_leaf_types_t = typename detail::tree_leaf_types_impl<std::remove_cv_t<Tree>>::type;

// ---------------------------------------------------------------------------------------------
// Standard containers
// ---------------------------------------------------------------------------------------------

/// `std::tuple<Ts...>`: a product node; every element is a child. `rebuild` makes a tuple of the
/// transformed children's types.
template <class... Ts>
struct tree_traits<std::tuple<Ts...>> {
  static constexpr auto children(auto& t) noexcept {
    return std::apply([](auto&... e) noexcept { return std::tie(e...); }, t);
  }
  template <class... Us>
  static constexpr std::tuple<Us...> rebuild(Us... children) {
    return std::tuple<Us...>(std::move(children)...);
  }
};

/// `std::pair<A, B>`: a product node with children `first` and `second`.
template <class A, class B>
struct tree_traits<std::pair<A, B>> {
  static constexpr auto children(auto& p) noexcept { return std::tie(p.first, p.second); }
  template <class U, class V>
  static constexpr std::pair<U, V> rebuild(U first, V second) {
    return std::pair<U, V>(std::move(first), std::move(second));
  }
};

/// `std::array<T, N>`: a range node of N children; `map` gives `std::array<U, N>` (U must be default
/// constructible, as every leaf type and standard container is).
template <class T, std::size_t N>
struct tree_traits<std::array<T, N>> {
  using element_type = T;
  template <class Array, class F>
  static constexpr void for_each(Array& a, F&& f) {
    for (auto& x : a) f(x);
  }
  template <class F>
  static constexpr auto map(const std::array<T, N>& a, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const T&>()))>;
    std::array<U, N> out{};
    for (std::size_t i = 0; i < N; ++i) out[i] = f(a[i]);
    return out;
  }
};

/// `std::vector<T, A>`: a range node; `map` gives a vector of the transformed type with the allocator
/// rebound (`std::allocator_traits<A>::rebind_alloc<U>`, built from the original allocator).
template <class T, class A>
struct tree_traits<std::vector<T, A>> {
  using element_type = T;
  template <class Vector, class F>
  static constexpr void for_each(Vector& v, F&& f) {
    for (auto& x : v) f(x);
  }
  template <class F>
  static constexpr auto map(const std::vector<T, A>& v, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const T&>()))>;
    using UA = typename std::allocator_traits<A>::template rebind_alloc<U>;
    std::vector<U, UA> out{UA(v.get_allocator())};
    out.reserve(v.size());
    for (const auto& x : v) out.push_back(f(x));
    return out;
  }
};

/// `std::vector<bool, A>` stores bits, not bools, so `f` always receives a `const bool&` copy of each
/// element: a mutating `f` does not compile instead of silently changing a copy.
template <class A>
struct tree_traits<std::vector<bool, A>> {
  using element_type = bool;
  template <class Vector, class F>
  static constexpr void for_each(Vector& v, F&& f) {
    for (const bool x : v) {
      const bool copy = x;
      f(copy);
    }
  }
  template <class F>
  static constexpr auto map(const std::vector<bool, A>& v, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const bool&>()))>;
    using UA = typename std::allocator_traits<A>::template rebind_alloc<U>;
    std::vector<U, UA> out{UA(v.get_allocator())};
    out.reserve(v.size());
    for (const bool x : v) {
      const bool copy = x;
      out.push_back(f(copy));
    }
    return out;
  }
};

/// `std::map<K, V, C, A>`: a range node whose children are the values (keys are structure, as the keys
/// of a Python dict in a JAX pytree); visited in key order. `map` keeps the keys and comparator.
template <class K, class V, class C, class A>
struct tree_traits<std::map<K, V, C, A>> {
  using element_type = V;
  template <class Map, class F>
  static void for_each(Map& m, F&& f) {
    for (auto& kv : m) f(kv.second);
  }
  template <class F>
  static auto map(const std::map<K, V, C, A>& m, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const V&>()))>;
    using UA = typename std::allocator_traits<A>::template rebind_alloc<std::pair<const K, U>>;
    std::map<K, U, C, UA> out(m.key_comp(), UA(m.get_allocator()));
    for (const auto& kv : m) out.emplace_hint(out.end(), kv.first, f(kv.second));
    return out;
  }
};

}  // namespace mixprec
