/// \file
/// \brief Private: what the layers need from xtensor containers — which containers they accept,
/// how to build an output of the same kind, shape strings for error messages, and parameter
/// conversion to the policy's param type.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/row_major.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::nn::detail {

/// Which containers the layers take: `xt::xtensor<T, N>` and `xt::xarray<T>` with the default
/// (row-major) layout and allocator. Their buffer is contiguous, rows of the last axis back to back.
template <class X>
struct array_traits {
  static constexpr bool supported = false;
};
template <class T, std::size_t N>
struct array_traits<xt::xtensor<T, N>> {
  static constexpr bool supported = true;
  using value_type = T;
  /// The same kind of container, element type U, rank N + Extra.
  template <class U, std::size_t Extra = 0>
  using rebind = xt::xtensor<U, N + Extra>;
  using shape_array = std::array<std::size_t, N>;
};
template <class T>
struct array_traits<xt::xarray<T>> {
  static constexpr bool supported = true;
  using value_type = T;
  template <class U, std::size_t Extra = 0>
  using rebind = xt::xarray<U>;
};

/// A `row_major_view` (what `as_array` makes of any other input) or a `row_major_span` (what `as_output`
/// makes of a caller's adaptor or Eigen map, written in place): outputs made like them are owning
/// `xt::xtensor<U, Rank>`, or `xt::xarray<U>` for a dynamic rank.
template <class T, std::size_t Rank>
struct row_major_array_traits {
  static constexpr bool supported = true;
  using value_type = T;
  template <class U, std::size_t Extra = 0>
  using rebind = std::conditional_t<Rank == dynamic_rank, xt::xarray<U>, xt::xtensor<U, Rank + Extra>>;
};
template <class T, std::size_t Rank>
struct array_traits<row_major_view<T, Rank>> : row_major_array_traits<T, Rank> {};
template <class T, std::size_t Rank>
struct array_traits<row_major_span<T, Rank>> : row_major_array_traits<T, Rank> {};

/// What the layers compute on: `xt::xtensor<T, N>` or `xt::xarray<T>` (row-major, default allocator),
/// a `row_major_view` or a `row_major_span`.
template <class X>
concept layer_array = array_traits<X>::supported;

/// What a layer's `forward_into` takes as its output: a `layer_array`, or anything
/// `as_row_major_output` writes into (`xt::adapt`, `Eigen::Map`, `Eigen::Ref`, RowMajor matrices). Other
/// arrays and ranges are accepted here too, so that `as_output` stops them with a sentence saying what
/// is accepted (a failed concept would only say "constraints not satisfied").
template <class Y>
concept layer_output = layer_array<Y> || row_major_source<Y> || std::ranges::range<Y>;

/// `y` itself for a `layer_array`, else `as_row_major_output(y)`: a `row_major_span` over y's buffer.
/// \throws std::invalid_argument when y's buffer is not contiguous row-major.
/// Errors: a type that cannot be written in place does not compile (as_row_major_output's static_assert).
template <class Y>
[[nodiscard]] decltype(auto) as_output(Y& y) {
  if constexpr (layer_array<Y>) {
    return (y);
  } else {
    return as_row_major_output(y);
  }
}

/// What the layers take as an input: a `layer_array`, or anything `as_row_major` reads
/// (`xt::adapt`, views, `xt::xtensor_fixed`, other xtensor expressions, Eigen matrices and maps).
/// Other ranges (`std::vector`, C arrays) are accepted here too, so that `as_array` stops them with a
/// sentence saying what to pass instead (a failed concept would only say "constraints not satisfied").
template <class X>
concept layer_input = layer_array<X> || row_major_source<X> || std::ranges::range<X>;

/// `x` itself for a `layer_array` (the output is the same kind of container), otherwise
/// `as_row_major(x)`: a view of x's buffer when it is contiguous row-major, else of a copy.
/// Errors: an input type that is neither does not compile (as_row_major's static_assert).
template <class X>
[[nodiscard]] decltype(auto) as_array(const X& x) {
  if constexpr (layer_array<X>) {
    return (x);
  } else {
    return as_row_major(x);
  }
}

/// The element type of a layer input: `value_t` of what `as_array` makes of it.
template <class X>
struct input_value {
  using type = void;
};
template <class X>
requires layer_array<X>
struct input_value<X> {
  using type = typename array_traits<X>::value_type;
};
template <class X>
requires(!layer_array<X> && row_major_source<X>) struct input_value<X> {
  using type = typename decltype(as_row_major(std::declval<const X&>()))::value_type;
};

/// The element type of a layer input (`void` for a type `as_array` refuses).
template <class X>
using value_t = typename input_value<X>::type;

template <class X, class U, std::size_t Extra = 0>
using rebind_t = typename array_traits<X>::template rebind<U, Extra>;

/// "[2, 3, 7]".
template <class Shape>
[[nodiscard]] std::string shape_string(const Shape& shape) {
  std::string s = "[";
  bool first = true;
  for (auto d : shape) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  s += "]";
  return s;
}

/// Product of every extent but the last: the number of rows a layer processes (1 for rank 1).
template <class X>
[[nodiscard]] std::size_t leading_size(const X& x) {
  const auto& shape = x.shape();
  std::size_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

/// Number of elements of the last axis of `x` (0 for a rank-0 container).
template <class X>
[[nodiscard]] std::size_t last_extent(const X& x) {
  const auto& shape = x.shape();
  return shape.size() == 0 ? 0 : shape[shape.size() - 1];
}

/// Throws unless `x` has rank >= 1 and its last axis has `expected` elements.
/// Message: "<layer>: input has 7 features (shape [2, 3, 7]) but the layer expects 8 (<what>)".
/// `what_in` is a string, or a callable returning one: it runs only when there is an error to report,
/// so a passing check builds no string (and allocates nothing).
template <class X, class What>
void check_features(const char* layer, const X& x, std::size_t expected, const What& what_in) {
  const auto what = [&]() -> std::string {
    if constexpr (std::is_invocable_v<const What&>) {
      return what_in();
    } else {
      return std::string(what_in);
    }
  };
  if (x.dimension() == 0) {
    throw std::invalid_argument(internal::concat(layer, ": input is a scalar (shape []) but the layer expects [..., ",
                                                 expected, "] (", what(), ")"));
  }
  const std::size_t got = last_extent(x);
  if (got != expected) {
    throw std::invalid_argument(internal::concat(layer, ": input has ", got, " features (shape ",
                                                 shape_string(x.shape()), ") but the layer expects ", expected, " (",
                                                 what(), ")"));
  }
}

/// \throws std::invalid_argument unless `out` (a caller's output array, named `what`) has x's shape.
template <class Out, class X>
void check_output_shape(const char* layer, const char* what, const Out& out, const X& x) {
  if (!std::equal(x.shape().begin(), x.shape().end(), out.shape().begin(), out.shape().end())) {
    throw std::invalid_argument(internal::concat(layer, ": ", what, " has shape ", shape_string(out.shape()),
                                                 " but x has shape ", shape_string(x.shape()),
                                                 "; make it with x's shape (it is written, not resized)"));
  }
}

/// \throws std::invalid_argument unless `out` (named `out_name`) has `in`'s shape (named `in_name`)
/// with `last` elements on its last axis.
template <class Out, class In>
void check_last_axis(const char* layer, const char* out_name, const Out& out, const char* in_name, const In& in,
                     std::size_t last) {
  const auto& is = in.shape();
  const auto& os = out.shape();
  const bool ok = is.size() == os.size() && is.size() > 0 && std::equal(is.begin(), is.end() - 1, os.begin()) &&
                  os[os.size() - 1] == last;
  if (!ok) {
    throw std::invalid_argument(internal::concat(layer, ": ", out_name, " has shape ", shape_string(os), " but ",
                                                 in_name, " has shape ", shape_string(is), "; make ", out_name,
                                                 " with ", in_name, "'s shape and ", last,
                                                 " elements on its last axis (it is written, not resized)"));
  }
}

/// \throws std::invalid_argument unless `out` (a caller's output array) has x's shape with `last`
/// elements on its last axis.
template <class Out, class X>
void check_output_features(const char* layer, const Out& out, const X& x, std::size_t last) {
  check_last_axis(layer, "out", out, "x", x, last);
}

/// \throws std::invalid_argument unless `dx` (a caller's array for a backward pass's input cotangent)
/// has dy's shape with `last` elements on its last axis.
template <class DX, class DY>
void check_dx_shape(const char* layer, const DX& dx, const DY& dy, std::size_t last) {
  check_last_axis(layer, "dx", dx, "dy", dy, last);
}

/// The frame every layer's `backward_into(dx_out, ctx, dy, grads)` shares: `dx_out` seen as the buffer
/// to write (a `static_assert` sentence unless its element type is T, the forward input's), dy as an
/// array; then `check(dy)` (the layer's backward checks), dx's shape against dy's with `in_features`
/// last, and `run(dy, dx)` — all checks before anything is written or added to the gradients.
template <class T, class DXOut, class DY, class Check, class Run>
void backward_into(const char* where, DXOut& dx_out, const DY& dy_in, std::size_t in_features, Check&& check,
                   Run&& run) {
  auto&& dx = as_output(dx_out);
  static_assert(std::is_same_v<value_t<std::remove_cvref_t<decltype(dx)>>, T>,
                "backward_into: dx's element type must be the forward input's (the T of the layer's saved<T>); "
                "make dx with that type, or use the value-returning backward.");
  const auto& dy = as_array(dy_in);
  check(dy);
  check_dx_shape(where, dx, dy, in_features);
  run(dy, dx);
}

/// An uninitialised container like `x` (same kind and rank) of element type U whose last axis has
/// `last` elements instead.
template <class U, layer_array X>
[[nodiscard]] rebind_t<X, U> make_like(const X& x, std::size_t last) {
  // X's own shape type (std::array for xtensor, svector for xarray) is the output's: no conversion
  // through another sequence type (which GCC 12 -O3 flags with a false -Wmaybe-uninitialized in xtl).
  auto shape = x.shape();
  shape[shape.size() - 1] = last;
  return rebind_t<X, U>::from_shape(shape);
}

/// An owning container of x's values, of x's kind (an `xt::xtensor`/`xt::xarray` for a view or span)
/// and element type: a copy the caller may overwrite.
template <layer_array X>
[[nodiscard]] rebind_t<X, typename array_traits<X>::value_type> owned_copy(const X& x) {
  if constexpr (std::is_same_v<X, rebind_t<X, typename array_traits<X>::value_type>>) {
    return x;
  } else {
    auto out = rebind_t<X, typename array_traits<X>::value_type>::from_shape(x.shape());
    std::copy(x.data(), x.data() + x.size(), out.data());
    return out;
  }
}

/// The buffer of a container as a span.
template <class X>
[[nodiscard]] auto flat(const X& x) {
  return std::span<const typename X::value_type>(x.data(), x.size());
}
template <class X>
[[nodiscard]] auto flat(X& x) {
  return std::span<typename X::value_type>(x.data(), x.size());
}

/// A parameter array converted element-wise to the param type `P` (rounding once; complex stays complex).
template <class P, class Src>
[[nodiscard]] auto to_param(const Src& src) {
  xt::xtensor<P, Src::rank> out = xt::xtensor<P, Src::rank>::from_shape(src.shape());
  const auto* in = src.data();
  P* dst = out.data();
  for (std::size_t i = 0; i < src.size(); ++i) dst[i] = internal::round_to<P>(in[i]);
  return out;
}

}  // namespace mixprec::nn::detail
