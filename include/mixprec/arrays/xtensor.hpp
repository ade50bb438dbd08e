/// \file
/// \brief The xtensor adapter: xtensor containers (`xt::xarray`, `xt::xtensor`, `xt::xtensor_fixed`)
/// and adaptors (`xt::adapt`) as tree nodes, so that `cast_floating`, `cast_to_compute`, loss scaling and `all_finite`
/// work on them. One of the two headers allowed to include xtensor (the other adapter is `mixprec/arrays/eigen.hpp`).
///
/// Casting gives an evaluated container of the new element type with the same shape, layout and
/// strides (`xt::xarray<float>` -> `xt::xarray<bfloat16>`), never a lazy `auto` expression that could
/// outlive its operands (xtensor's pitfall docs). Lazy expressions (`a + b`, views) are not trees:
/// evaluate them into a container first (`xt::xarray<float> c = a + b;`). The result uses xtensor's
/// default data container and allocator for the new element type.
///
/// **Example**:
///
///     xt::xtensor<float, 2> x = {{1.0f, 2.0f}, {3.0f, 4.0f}};
///     xt::xtensor<mixprec::bfloat16, 2> h = mixprec::cast_floating<mixprec::bfloat16>(x);
#pragma once

#if __has_include(<xtensor/containers/xarray.hpp>)  // xtensor >= 0.26
#include <xtensor/containers/xarray.hpp>
#include <xtensor/containers/xfixed.hpp>
#include <xtensor/containers/xtensor.hpp>
#else  // xtensor <= 0.25 (Debian bookworm: 0.24.3)
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/tree.hpp"

namespace mixprec {

namespace detail {
/// The tree protocol for an xtensor container of scalars: children are the elements in storage
/// order; `map` builds `Out` (the same kind of container of the transformed type) with the same shape
/// and strides, so storage orders match.
template <class Element>
struct xtensor_tree_traits_base {
  static_assert(tree_leaf<Element>,
                "mixprec trees: an xtensor container is a tree node only when its elements are scalar leaves "
                "(arithmetic, std::complex, mixprec small floats).");
  using element_type = Element;

  template <class Container, class F>
  static void for_each(Container& c, F&& f) {
    for (auto& x : c.storage()) f(x);
  }

  template <class Out, class Container, class F>
  static void fill(Out& out, const Container& in, F&& f) {
    auto dst = out.storage().begin();
    for (const auto& x : in.storage()) *dst++ = f(x);
  }

  template <class Out, class Container>
  static void resize_like(Out& out, const Container& in) {
    if constexpr (Out::static_layout == xt::layout_type::dynamic) {
      auto strides = xtl::make_sequence<typename Out::strides_type>(in.strides().size());
      std::copy(in.strides().cbegin(), in.strides().cend(), strides.begin());
      out.resize(in.shape(), strides);
    } else {
      out.resize(in.shape());
    }
  }

  template <class F>
  using mapped_t = std::remove_cvref_t<decltype(std::declval<F&>()(std::declval<const Element&>()))>;
};
}  // namespace detail

namespace detail {
/// An xtensor tree node whose `map` builds `Out::type<U>` (an owning container of the mapped element
/// type) with the shape and strides of the node: containers and adaptors alike.
template <class Element, class Out>
struct xtensor_node_traits : xtensor_tree_traits_base<Element> {
  using base = xtensor_tree_traits_base<Element>;
  template <class Container, class F>
  static auto map(const Container& a, F&& f) {
    typename Out::template type<typename base::template mapped_t<F>> out;
    base::resize_like(out, a);
    base::fill(out, a, f);
    return out;
  }
};
template <xt::layout_type L>
struct owning_xarray {
  template <class U>
  using type = xt::xarray<U, L>;
};
template <std::size_t N, xt::layout_type L>
struct owning_xtensor {
  template <class U>
  using type = xt::xtensor<U, N, L>;
};
/// The element type of an xtensor data container (or a reference to one), without const.
template <class EC>
using storage_element_t = std::remove_cv_t<typename std::remove_reference_t<EC>::value_type>;
}  // namespace detail

/// `xt::xarray_container` (`xt::xarray<T, L>`) of scalar leaves: a range node over its elements.
/// Casting gives `xt::xarray<U, L>` of the same shape.
template <class EC, xt::layout_type L, class SC>
struct tree_traits<xt::xarray_container<EC, L, SC, xt::xtensor_expression_tag>>
    : detail::xtensor_node_traits<detail::storage_element_t<EC>, detail::owning_xarray<L>> {};

/// `xt::xtensor_container` (`xt::xtensor<T, N, L>`) of scalar leaves: a range node over its elements.
/// Casting gives `xt::xtensor<U, N, L>` of the same shape.
template <class EC, std::size_t N, xt::layout_type L>
struct tree_traits<xt::xtensor_container<EC, N, L, xt::xtensor_expression_tag>>
    : detail::xtensor_node_traits<detail::storage_element_t<EC>, detail::owning_xtensor<N, L>> {};

/// `xt::xfixed_container` (`xt::xtensor_fixed<T, xt::xshape<...>, L>`) of scalar leaves: a range node
/// over its elements. Casting gives `xt::xtensor_fixed<U, same shape, L>`.
template <class ET, class S, xt::layout_type L, bool Sharable>
struct tree_traits<xt::xfixed_container<ET, S, L, Sharable, xt::xtensor_expression_tag>>
    : detail::xtensor_tree_traits_base<ET> {
  using base = detail::xtensor_tree_traits_base<ET>;
  template <class F>
  static auto map(const xt::xfixed_container<ET, S, L, Sharable, xt::xtensor_expression_tag>& a, F&& f) {
    xt::xtensor_fixed<typename base::template mapped_t<F>, S, L, Sharable> out;
    base::fill(out, a, f);
    return out;
  }
};

/// `xt::xtensor_adaptor` (`xt::adapt` over a pointer or a container, static rank) of scalar leaves: a
/// range node over the adapted elements, so in-place operations (`unscale_in_place`, an optimiser's
/// update through `tree_for_each`) write through to the caller's buffer. Casting gives an owning
/// `xt::xtensor<U, N, L>` of the same shape.
template <class EC, std::size_t N, xt::layout_type L>
struct tree_traits<xt::xtensor_adaptor<EC, N, L, xt::xtensor_expression_tag>>
    : detail::xtensor_node_traits<detail::storage_element_t<EC>, detail::owning_xtensor<N, L>> {};

/// `xt::xarray_adaptor` (`xt::adapt` with a run-time rank) of scalar leaves: as `xt::xtensor_adaptor`;
/// casting gives an owning `xt::xarray<U, L>`.
template <class EC, xt::layout_type L, class SC>
struct tree_traits<xt::xarray_adaptor<EC, L, SC, xt::xtensor_expression_tag>>
    : detail::xtensor_node_traits<detail::storage_element_t<EC>, detail::owning_xarray<L>> {};

}  // namespace mixprec
