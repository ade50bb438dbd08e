/// \file
/// \brief Trees of numbers (JAX's "pytrees"): scalar leaves inside nested containers, the
/// `tree_traits` customization point, and the generic walks `tree_map` (over one tree, or over
/// several trees of the same structure, as `tree_map(f, params, grads)`) and `tree_for_each` that
/// casting (`cast.hpp`), loss scaling (`loss_scale.hpp`) and `all_finite` are built on.
///
/// **What is a tree** (`docs/casting.md` has the full story):
///  - a *leaf*: one scalar, `tree_leaf<T>`: an arithmetic type (bool, integers, float, double, long
///    double), `std::complex<R>`, a mixprec small float (bfloat16, float16, float8/6/4) or a mixprec
///    sub-byte integer (int4, uint4, int2, uint2);
///  - a *node*: a type with a `mixprec::tree_traits` specialisation. Built in here: `std::tuple`,
///    `std::pair`, `std::array`, `std::vector`, `std::map` (keys are structure, values are subtrees),
///    `std::optional` (zero or one child), `std::span` (a view: walked in place, mapped into a
///    `std::vector`) and structs with a static member `tree_children` (below), nested arbitrarily.
///    `mixprec/arrays/eigen.hpp` adds `Eigen::Matrix`, `Eigen::Array` and contiguous `Eigen::Map`s of them;
///    `mixprec/arrays/xtensor.hpp` adds `xt::xarray`, `xt::xtensor`, `xt::xtensor_fixed` and `xt::adapt`'s adaptors.
///    Mapping a map or an adaptor gives an owning container; walking one in place writes through to the mapped buffer.
///    Your own struct opts in the same way.
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
/// the same shape whose children are `f(child)`, with `f` called on the children in the order of
/// `for_each`; evaluated, never a lazy view). See the std::vector specialisation below.
///
/// **Opting in a struct without a specialisation**: give it a static member function
/// `tree_children(self)` returning `std::tie` of its children (one function serves const and non-const
/// nodes). It is then a product node whose `rebuild` gives the struct back when every child keeps its
/// type (the struct must be default constructible), and a `std::tuple` of the children otherwise (a
/// cast to another leaf type loses the struct, not the structure). Every nn layer's `gradients` opts in
/// so:
///
///     struct gradients {
///       xt::xtensor<float, 2> kernel;
///       std::optional<xt::xtensor<float, 1>> bias;
///       static auto tree_children(auto& self) noexcept { return std::tie(self.kernel, self.bias); }
///     };
///
/// A type is either a leaf, or a product node, or a range node. `tree_map` on anything else stops
/// with a static_assert that says how to opt in.
#pragma once

#include <algorithm>
#include <array>
#include <complex>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
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
  static_assert(
      tree<T>,
      "mixprec trees: this type is neither a scalar leaf nor a tree node. Leaves are arithmetic types, "
      "std::complex, mixprec small floats and intn; nodes are std::tuple, std::pair, std::array, "
      "std::vector, std::map, std::optional, std::span, types with a mixprec::tree_traits specialisation and "
      "structs with a static member tree_children(self) returning std::tie of their children. Eigen matrices, arrays "
      "and contiguous maps of them are nodes once mixprec/arrays/eigen.hpp is included; xtensor containers "
      "and xt::adapt adaptors once mixprec/arrays/xtensor.hpp is. Views, lazy expressions and maps with "
      "explicit strides are not: evaluate them into a container first. For your own struct specialise "
      "mixprec::tree_traits (see mixprec/arrays/tree.hpp).");
  static constexpr bool value = tree<T>;
};

/// `tree_traits<T>::rebuild(children...)`, called from a braced list so that the children are made in order.
template <class T, class... Us>
struct rebuild_in_order {
  decltype(tree_traits<T>::rebuild(std::declval<Us>()...)) value;
  constexpr rebuild_in_order(Us&&... children) : value(tree_traits<T>::rebuild(std::move(children)...)) {}
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
          // A braced list runs its elements left to right (a plain argument list would not), and passing
          // them straight to rebuild, with no tuple between, spares GCC 12 at -O1 a false
          // "may be used uninitialized" on a moved std::optional.
          return detail::rebuild_in_order<T, decltype(mixprec::tree_map(f, child))...>{mixprec::tree_map(f, child)...}
              .value;
        },
        tree_traits<T>::children(tree));
  } else if constexpr (tree_range_node<T>) {
    return tree_traits<T>::map(tree, [&f](const auto& child) { return mixprec::tree_map(f, child); });
  } else {
    return tree;  // not a tree: tree_check has reported it; returning something avoids a cascade of errors
  }
}

// ---------------------------------------------------------------------------------------------
// tree_map over several trees of the same structure
// ---------------------------------------------------------------------------------------------

namespace detail {
/// Number of children of a product node type.
template <class T>
inline constexpr std::size_t tree_product_arity =
    std::tuple_size_v<decltype(tree_traits<T>::children(std::declval<const T&>()))>;

template <class T1, class... Ts>
consteval bool tree_same_kind() {
  if constexpr (tree_leaf<T1>) {
    return (tree_leaf<Ts> && ...);
  } else if constexpr (tree_product_node<T1>) {
    if constexpr ((tree_product_node<Ts> && ...)) {
      return ((tree_product_arity<Ts> == tree_product_arity<T1>)&&...);
    } else {
      return false;
    }
  } else {
    return (tree_range_node<Ts> && ...);
  }
}

/// Instantiated by the several-tree `tree_map` at every place of the trees: the types there must be
/// of the same kind (all leaves, all product nodes with as many children, or all range nodes).
template <class T1, class... Ts>
struct tree_zip_check {
  static constexpr bool all_trees = (tree_check<T1>::value && ... && tree_check<Ts>::value);
  static_assert(!all_trees || tree_same_kind<T1, Ts...>(),
                "mixprec::tree_map over several trees: the trees differ in structure. At one place the first tree has "
                "a scalar leaf and another a node (or the reverse), or a struct/tuple/pair with a different number "
                "of children. Every tree must have the structure of the first (JAX: tree_map(f, tree, *rest)).");
  static constexpr bool value = all_trees && tree_same_kind<T1, Ts...>();
};

/// The children of the range node `node`, in `for_each` order: leaves are copied (a container may
/// hand out a temporary, as std::vector<bool> does), subtrees are referred to.
template <class T, bool Leaves = tree_leaf<std::remove_cvref_t<typename tree_traits<T>::element_type>>>
struct tree_children_store;
template <class T>
struct tree_children_store<T, true> {
  std::vector<std::remove_cvref_t<typename tree_traits<T>::element_type>> children;
  explicit tree_children_store(const T& node) {
    tree_traits<T>::for_each(node, [this](const auto& child) { children.push_back(child); });
  }
  [[nodiscard]] auto at(std::size_t i) const { return children[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return children.size(); }
};
template <class T>
struct tree_children_store<T, false> {
  std::vector<const std::remove_cvref_t<typename tree_traits<T>::element_type>*> children;
  explicit tree_children_store(const T& node) {
    tree_traits<T>::for_each(node, [this](const auto& child) { children.push_back(&child); });
  }
  [[nodiscard]] const auto& at(std::size_t i) const { return *children[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return children.size(); }
};

template <class T>
concept tree_has_shape = requires(const T& t) {
  std::size(t.shape());
  std::begin(t.shape());
};
template <class T>
concept tree_has_rows_cols = requires(const T& t) {
  t.rows();
  t.cols();
};
template <class T>
concept tree_has_keys = requires(const T& t) {
  typename T::key_type;
  t.key_comp();
};

template <class Shape>
std::string tree_shape_string(const Shape& shape) {
  std::string text = "[";
  for (const auto& extent : shape) {
    if (text.size() > 1) text += ", ";
    text += std::to_string(extent);
  }
  return text + "]";
}

/// Where the several-tree `tree_map` found two range nodes that do not correspond.
struct tree_mismatch {
  std::size_t tree;    ///< 1-based position of the tree that differs from the first
  std::string path;    ///< "[1][0]": child indices from the root, in tree order
  std::string reason;  ///< what differs
};

/// Empty when the range nodes `a` (of the first tree) and `b` correspond: same number of children
/// and, where the containers report it, the same shape (`shape()`, as xtensor), rows and columns (as
/// Eigen) or keys (as std::map).
template <class A, class B>
std::string tree_range_difference(const A& a, const B& b, std::size_t count_a, std::size_t count_b) {
  if (count_a != count_b) {
    return "has " + std::to_string(count_b) + " children where the first tree has " + std::to_string(count_a);
  }
  if constexpr (tree_has_shape<A> && tree_has_shape<B>) {
    const auto& sa = a.shape();
    const auto& sb = b.shape();
    if (!std::equal(std::begin(sa), std::end(sa), std::begin(sb), std::end(sb),
                    [](const auto& x, const auto& y) { return std::cmp_equal(x, y); })) {
      return "has shape " + tree_shape_string(sb) + " where the first tree has shape " + tree_shape_string(sa);
    }
  } else if constexpr (tree_has_rows_cols<A> && tree_has_rows_cols<B>) {
    if (!std::cmp_equal(a.rows(), b.rows()) || !std::cmp_equal(a.cols(), b.cols())) {
      return "is " + std::to_string(b.rows()) + " x " + std::to_string(b.cols()) + " where the first tree is " +
             std::to_string(a.rows()) + " x " + std::to_string(a.cols());
    }
  } else if constexpr (tree_has_keys<A> && tree_has_keys<B>) {
    if constexpr (requires(const A& x, const B& y) { x.begin()->first == y.begin()->first; }) {
      auto ib = b.begin();
      for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
        if (!(ia->first == ib->first)) return "has other keys than the first tree (the keys of a map are structure)";
      }
    }
  }
  return {};
}

/// The first place where `ts...` differ in structure from `t1`, or nothing.
template <class T1, class... Ts>
std::optional<tree_mismatch> tree_find_mismatch(const T1& t1, const Ts&... ts) {
  if constexpr (!tree_zip_check<T1, Ts...>::value || tree_leaf<T1>) {
    return std::nullopt;
  } else if constexpr (tree_product_node<T1>) {
    const auto c1 = tree_traits<T1>::children(t1);
    const auto cs = std::make_tuple(tree_traits<Ts>::children(ts)...);
    std::optional<tree_mismatch> found;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      const auto check = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        found = std::apply(
            [&](const auto&... ck) {
              return tree_find_mismatch(std::as_const(std::get<J>(c1)), std::as_const(std::get<J>(ck))...);
            },
            cs);
        if (found) found->path.insert(0, "[" + std::to_string(J) + "]");
        return found.has_value();
      };
      (check(std::integral_constant<std::size_t, I>{}) || ...);
    }
    (std::make_index_sequence<tree_product_arity<T1>>{});
    return found;
  } else {
    const tree_children_store<T1> first(t1);
    const auto stores = std::make_tuple(tree_children_store<Ts>(ts)...);
    std::optional<tree_mismatch> found;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      const auto check = [&](std::size_t k, const auto& node, const auto& store) {
        std::string reason = tree_range_difference(t1, node, first.size(), store.size());
        if (!reason.empty()) found = tree_mismatch{k + 2, "", std::move(reason)};
        return found.has_value();
      };
      (check(K, ts, std::get<K>(stores)) || ...);
    }
    (std::index_sequence_for<Ts...>{});
    using E1 = std::remove_cvref_t<typename tree_traits<T1>::element_type>;
    if constexpr (tree_leaf<E1>) {
      [[maybe_unused]] constexpr bool same =
          tree_zip_check<E1, std::remove_cvref_t<typename tree_traits<Ts>::element_type>...>::value;
    } else {
      for (std::size_t i = 0; !found && i < first.size(); ++i) {
        found = std::apply([&](const auto&... s) { return tree_find_mismatch(first.at(i), s.at(i)...); }, stores);
        if (found) found->path.insert(0, "[" + std::to_string(i) + "]");
      }
    }
    return found;
  }
}

/// `tree_map(f, t1, ts...)` once the structures are known to agree.
template <class F, class T1, class... Ts>
auto tree_map_zip(F& f, const T1& t1, const Ts&... ts) {
  if constexpr (!tree_zip_check<T1, Ts...>::value) {
    return t1;  // tree_zip_check has reported it; returning something avoids a cascade of errors
  } else if constexpr (tree_leaf<T1>) {
    return f(t1, ts...);
  } else if constexpr (tree_product_node<T1>) {
    const auto c1 = tree_traits<T1>::children(t1);
    const auto cs = std::make_tuple(tree_traits<Ts>::children(ts)...);
    const auto map_child = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      return std::apply(
          [&](const auto&... ck) {
            return detail::tree_map_zip(f, std::as_const(std::get<J>(c1)), std::as_const(std::get<J>(ck))...);
          },
          cs);
    };
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      // A braced list runs its elements left to right; a plain argument list would not.
      std::tuple<decltype(map_child(std::integral_constant<std::size_t, I>{}))...> mapped{
          map_child(std::integral_constant<std::size_t, I>{})...};
      return std::apply([](auto&&... c) { return tree_traits<T1>::rebuild(std::move(c)...); }, std::move(mapped));
    }
    (std::make_index_sequence<tree_product_arity<T1>>{});
  } else {
    const auto stores = std::make_tuple(tree_children_store<Ts>(ts)...);
    std::size_t i = 0;
    return tree_traits<T1>::map(t1, [&](const auto& child) {
      auto mapped = std::apply([&](const auto&... s) { return detail::tree_map_zip(f, child, s.at(i)...); }, stores);
      ++i;
      return mapped;
    });
  }
}
}  // namespace detail

/// `tree_map` over several trees of the same structure (JAX's `jax.tree_util.tree_map(f, tree,
/// *rest)`): calls `f(leaf, leaf_of_rest...)` on the leaves at the same place of every tree and
/// returns a tree of the first tree's structure (its node types rebuilt, as the one-tree `tree_map`
/// does) whose leaves are the results. The leaf types may differ between the trees (float parameters,
/// bfloat16 gradients); the structure may not. Leaves are visited depth first, children left to right.
///
/// Same structure means: at every place, all trees have a scalar leaf, or all have a struct/tuple/pair
/// with as many children, or all have a container with as many children and, where the container
/// reports it, the same shape (`shape()`, as xtensor), the same rows and columns (as Eigen) or the same
/// keys (as std::map). Unlike JAX, the other trees may not have the first as a mere prefix.
///
/// Errors: a leaf against a node, or a struct with another number of children, does not compile
/// (static_assert). Containers that differ in size, shape or keys throw std::invalid_argument naming
/// the tree (2 for the second), the path of child indices from the root and what differs; `f` is not
/// called then.
///
/// **Example** (an SGD step):
///
///     std::tuple<std::vector<float>, float> params{{1.0f, 2.0f}, 0.5f}, grads{{0.5f, -1.0f}, 1.0f};
///     auto updated = mixprec::tree_map([](float p, float g) { return p - 0.1f * g; }, params, grads);
///     // {{0.95f, 2.1f}, 0.4f}
template <class F, class Tree, class... Rest>
requires(sizeof...(Rest) > 0) [[nodiscard]] auto tree_map(F&& f, const Tree& tree, const Rest&... rest) {
  using T = std::remove_cv_t<Tree>;
  if (auto mismatch = detail::tree_find_mismatch(tree, rest...)) {
    throw std::invalid_argument("mixprec::tree_map: the trees differ in structure: at root" + mismatch->path +
                                ", tree " + std::to_string(mismatch->tree) + " " + mismatch->reason +
                                ". Every tree must have the structure of the first.");
  }
  return detail::tree_map_zip(f, static_cast<const T&>(tree), rest...);
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

// ---------------------------------------------------------------------------------------------
// std::optional, std::span, structs with tree_children
// ---------------------------------------------------------------------------------------------

/// `std::optional<T>`: a range node of zero children (empty) or one (the value); `map` gives
/// `std::optional<U>`, empty when the input is. Over several trees, an empty and an engaged optional at
/// the same place differ in structure ("has 0 children where the first tree has 1").
template <class T>
struct tree_traits<std::optional<T>> {
  using element_type = T;
  template <class Optional, class F>
  static constexpr void for_each(Optional& o, F&& f) {
    if (o) f(*o);
  }
  template <class F>
  static constexpr auto map(const std::optional<T>& o, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const T&>()))>;
    return o ? std::optional<U>(f(*o)) : std::optional<U>();
  }
};

/// `std::span<T, E>`: a range node over the viewed elements. Walking it (`tree_for_each`,
/// `unscale_in_place`, `tree_zero`) writes through to the viewed buffer, so a
/// `std::vector<std::span<float>>` of a model's gradient tensors is a tree; a `std::span<const T>`
/// has const leaves. `map` gives an owning `std::vector<U>`.
template <class T, std::size_t E>
struct tree_traits<std::span<T, E>> {
  using element_type = T;
  template <class Span, class F>
  static constexpr void for_each(Span& s, F&& f) {
    for (auto& x : s) f(x);
  }
  template <class F>
  static constexpr auto map(const std::span<T, E>& s, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const T&>()))>;
    std::vector<U> out;
    out.reserve(s.size());
    for (const auto& x : s) out.push_back(f(x));
    return out;
  }
};

namespace detail {
/// A struct that lists its children itself: `T::tree_children(node)` on a const and a non-const node.
template <class T>
concept tree_member_children = std::is_class_v<T> && requires(T& t, const T& c) {
  T::tree_children(t);
  T::tree_children(c);
};
}  // namespace detail

/// Structs with a static member `tree_children(self)` (see the file comment): product nodes with no
/// specialisation of their own. `rebuild` gives the struct when the children keep their types, and a
/// `std::tuple` of the children otherwise.
template <class T>
requires detail::tree_member_children<T>
struct tree_traits<T> {
  static constexpr auto children(auto& node) noexcept { return T::tree_children(node); }
  template <class... Us>
  static constexpr auto rebuild(Us... children) {
    using own = decltype(T::tree_children(std::declval<T&>()));
    if constexpr (std::is_same_v<std::tuple<Us&...>, own> && std::is_default_constructible_v<T>) {
      T out{};
      std::apply([&children...](auto&... slot) { ((slot = std::move(children)), ...); }, T::tree_children(out));
      return out;
    } else {
      return std::tuple<Us...>(std::move(children)...);
    }
  }
};

/// Sets every leaf of `tree` to zero (`L{}`: +0 for floats, 0 for integers) where it is, walking as
/// `tree_for_each` does: containers keep their shape and buffers, nothing is allocated. PyTorch's
/// `optimizer.zero_grad(set_to_none=False)`. A tree with a const leaf (a `std::span<const float>`) does
/// not compile.
template <class Tree>
constexpr void tree_zero(Tree& tree) {
  static_assert(!std::is_const_v<Tree>, "mixprec::tree_zero changes the tree where it is: pass a non-const tree");
  tree_for_each(
      [](auto& leaf) {
        static_assert(!std::is_const_v<std::remove_reference_t<decltype(leaf)>>,
                      "mixprec::tree_zero: the tree has a const leaf (a std::span<const T>?), which cannot be zeroed");
        if constexpr (!std::is_const_v<std::remove_reference_t<decltype(leaf)>>)
          leaf = std::remove_cvref_t<decltype(leaf)>{};
      },
      tree);
}

}  // namespace mixprec
