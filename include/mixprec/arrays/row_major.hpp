/// \file
/// \brief `as_row_major(x)`: the elements of any xtensor expression or Eigen matrix as one contiguous,
/// row-major block (`row_major_view`), without a copy when they already are one. What the layers
/// (`nn/`) compute on, so that they take `xt::adapt` over a caller's buffer, contiguous `xt::view`s,
/// `xt::xtensor_fixed`, `Eigen::Map` and `Eigen::Matrix` as well as `xt::xtensor`/`xt::xarray`.
///
/// Accepted, and when the elements are read in place:
///
/// | source | shape | in place when |
/// |---|---|---|
/// | an xtensor container, `xt::adapt`, `xt::view`, `xt::strided_view`, `xt::xtensor_fixed` | its own | its strides are
/// row-major ones (extent-1 axes ignored): always for row-major containers and adaptors, at run time for views | |
/// another xtensor expression (`a + b`, a broadcast, a non-contiguous view) | its own | never: evaluated once into a
/// row-major copy | | an `Eigen::Matrix`, `Eigen::Map`, `Eigen::Ref`, block, or expression | `[rows, cols]` | direct
/// access with row-major strides: `RowMajor` storage, or a single column or row; a column-major matrix is copied
/// (transposed into row order) |
///
/// Anything else (a `std::vector`, a raw pointer) stops at a static_assert that says what to pass.
///
/// **Example**:
///
///     std::vector<float> buffer(6 * 8);
///     auto x = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{6, 8});
///     auto v = mixprec::as_row_major(x);   // row_major_view<float, 2>: v.data() == buffer.data()
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/xtensor.hpp"

namespace mixprec {

/// The rank of a `row_major_view` whose number of axes is known only at run time (from an
/// `xt::xarray` or another dynamically shaped expression).
inline constexpr std::size_t dynamic_rank = std::numeric_limits<std::size_t>::max();

/// The elements of an array as one contiguous row-major block of `T` (the last axis varies fastest),
/// with its shape: a look at the source's own buffer when that is already laid out so, otherwise an
/// owned copy (see `owns_copy`). `Rank` axes, or `dynamic_rank`. Made by `as_row_major`; valid while
/// the source's buffer is (a copy is valid as long as the view). Move-only: a copy of a view that
/// owns its elements would have to copy them.
template <class T, std::size_t Rank = dynamic_rank>
class row_major_view {
 public:
  using value_type = T;
  /// `std::array<std::size_t, Rank>`, or xtensor's dynamic shape (as `xt::xarray`'s) for `dynamic_rank`.
  using shape_type =
      std::conditional_t<Rank == dynamic_rank, xt::dynamic_shape<std::size_t>, std::array<std::size_t, Rank>>;
  static constexpr std::size_t rank = Rank;

  /// A view of `shape` elements at `data` (not owned).
  row_major_view(const T* data, shape_type shape) : data_(data), shape_(std::move(shape)), size_(product(shape_)) {}
  /// A view owning `copy`, which holds the product of `shape` elements.
  row_major_view(std::unique_ptr<T[]> copy, shape_type shape)  // NOLINT(*-avoid-c-arrays): an owned buffer
      : copy_(std::move(copy)), data_(copy_.get()), shape_(std::move(shape)), size_(product(shape_)) {}

  row_major_view(row_major_view&&) noexcept = default;
  row_major_view& operator=(row_major_view&&) noexcept = default;
  row_major_view(const row_major_view&) = delete;
  row_major_view& operator=(const row_major_view&) = delete;
  ~row_major_view() = default;

  /// The first element; the others follow in row-major order.
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// Number of elements (the product of the extents).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Extents, outermost first.
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  /// Number of axes.
  [[nodiscard]] std::size_t dimension() const noexcept { return shape_.size(); }
  /// True when the source was not contiguous row-major and the view holds a copy of its elements.
  [[nodiscard]] bool owns_copy() const noexcept { return copy_ != nullptr; }

  /// The number of elements of `shape` (the product of its extents; 1 for no axis).
  [[nodiscard]] static std::size_t product(const shape_type& shape) noexcept {
    std::size_t n = 1;
    for (const std::size_t d : shape) n *= d;
    return n;
  }

 private:
  std::unique_ptr<T[]> copy_;  // NOLINT(*-avoid-c-arrays): an owned buffer of size_ elements, or null
  const T* data_;
  shape_type shape_;
  std::size_t size_;
};

namespace detail {
template <class X>
inline constexpr bool is_eigen_dense_v = std::is_base_of_v<Eigen::DenseBase<X>, X>;

template <class X>
inline constexpr bool is_xexpression_v = xt::is_xexpression<X>::value;

/// The number of axes of an xtensor expression's shape type, or `dynamic_rank`.
template <class X>
inline constexpr std::size_t xexpression_rank =
    xt::static_dimension<typename X::shape_type>::value < 0
        ? dynamic_rank
        : static_cast<std::size_t>(xt::static_dimension<typename X::shape_type>::value);

/// True when element i of a row-major walk over `shape` is at `i` in a buffer with `strides`
/// (in elements). Axes of extent 1 may have any stride (xtensor gives them 0).
template <class Shape, class Strides>
[[nodiscard]] bool row_major_strides(const Shape& shape, const Strides& strides) {
  std::ptrdiff_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && static_cast<std::ptrdiff_t>(strides[i]) != expected) return false;
    expected *= static_cast<std::ptrdiff_t>(shape[i]);
  }
  return true;
}

template <class T, std::size_t Rank, class Shape>
[[nodiscard]] typename row_major_view<T, Rank>::shape_type to_view_shape(const Shape& shape) {
  typename row_major_view<T, Rank>::shape_type out{};
  if constexpr (Rank == dynamic_rank) out.resize(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) out[i] = static_cast<std::size_t>(shape[i]);
  return out;
}

template <class X>
[[nodiscard]] auto xexpression_as_row_major(const X& x) {
  using T = std::remove_cv_t<typename X::value_type>;
  constexpr std::size_t rank = xexpression_rank<X>;
  auto shape = to_view_shape<T, rank>(x.shape());
  if constexpr (xt::has_data_interface<X>::value && xt::has_strides<X>::value) {
    if (row_major_strides(x.shape(), x.strides())) {
      const T* first = x.data() + x.data_offset();
      return row_major_view<T, rank>(first, std::move(shape));
    }
  }
  std::unique_ptr<T[]> copy(new T[x.size()]);  // NOLINT(*-avoid-c-arrays)
  std::size_t i = 0;
  for (auto it = x.template begin<xt::layout_type::row_major>(); it != x.template end<xt::layout_type::row_major>();
       ++it) {
    copy[i++] = *it;
  }
  return row_major_view<T, rank>(std::move(copy), std::move(shape));
}

/// True when the coefficients of the direct-access Eigen object `x` lie row after row, contiguously,
/// at `x.data()`: coefficient (i, j) is at data + i * row_step + j * col_step, and the steps are
/// (cols, 1) (any step along an extent of 1).
template <class X>
[[nodiscard]] bool eigen_rows_contiguous(const X& x) {
  const auto rows = static_cast<std::size_t>(x.rows());
  const auto cols = static_cast<std::size_t>(x.cols());
  const auto row_step = static_cast<std::size_t>(X::IsRowMajor ? x.outerStride() : x.innerStride());
  const auto col_step = static_cast<std::size_t>(X::IsRowMajor ? x.innerStride() : x.outerStride());
  return (cols <= 1 || col_step == 1) && (rows <= 1 || row_step == cols);
}

template <class X>
[[nodiscard]] auto eigen_as_row_major(const X& x) {
  using T = std::remove_cv_t<typename X::Scalar>;
  const auto rows = static_cast<std::size_t>(x.rows());
  const auto cols = static_cast<std::size_t>(x.cols());
  std::array<std::size_t, 2> shape{rows, cols};
  if constexpr ((X::Flags & Eigen::DirectAccessBit) != 0) {
    if (eigen_rows_contiguous(x)) return row_major_view<T, 2>(x.data(), shape);
  }
  std::unique_ptr<T[]> copy(new T[rows * cols]);  // NOLINT(*-avoid-c-arrays)
  const auto& evaluated = x.eval();               // a plain object, or x itself when it has direct access
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      copy[i * cols + j] = evaluated.coeff(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j));
    }
  }
  return row_major_view<T, 2>(std::move(copy), shape);
}

template <class...>
inline constexpr bool always_false_v = false;
}  // namespace detail

/// A caller's array seen as one writable, contiguous, row-major block of `T` with its shape: what the
/// layers' `forward_into` write into when the output is not an `xt::xtensor`/`xt::xarray` (an
/// `xt::adapt` over the caller's buffer, an `Eigen::Map`, an `Eigen::Ref`). Never owns: it is a look
/// at the caller's buffer, valid while that is. Made by `as_row_major_output`.
template <class T, std::size_t Rank = dynamic_rank>
class row_major_span {
 public:
  using value_type = T;
  /// As `row_major_view`'s.
  using shape_type = typename row_major_view<T, Rank>::shape_type;
  static constexpr std::size_t rank = Rank;

  /// The product of `shape` elements at `data`.
  row_major_span(T* data, shape_type shape)
      : data_(data), shape_(std::move(shape)), size_(row_major_view<T, Rank>::product(shape_)) {}

  /// The first element; the others follow in row-major order.
  [[nodiscard]] T* data() const noexcept { return data_; }
  /// Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Extents, outermost first.
  [[nodiscard]] const shape_type& shape() const noexcept { return shape_; }
  /// Number of axes.
  [[nodiscard]] std::size_t dimension() const noexcept { return shape_.size(); }

 private:
  T* data_;
  shape_type shape_;
  std::size_t size_;
};

namespace detail {
/// An xtensor container or adaptor with a writable buffer (not a lazy expression, not const).
template <class Y>
concept writable_xtensor = is_xexpression_v<Y> && xt::has_data_interface<Y>::value && xt::has_strides<Y>::value &&
    requires(Y& y) {
  {y.data()};
} && !std::is_const_v<std::remove_pointer_t<decltype(std::declval<Y&>().data())>>;

/// An Eigen object with a writable buffer whose rows are contiguous: RowMajor storage, or a vector
/// (one column or one row) at compile time.
template <class Y>
concept writable_row_major_eigen = is_eigen_dense_v<Y> &&
                                       (static_cast<unsigned>(Y::Flags) & Eigen::DirectAccessBit) != 0 &&
                                   (static_cast<unsigned>(Y::Flags) & Eigen::LvalueBit) != 0 &&
                                   (static_cast<bool>(Y::IsRowMajor) || static_cast<int>(Y::ColsAtCompileTime) == 1 ||
                                    static_cast<int>(Y::RowsAtCompileTime) == 1);
}  // namespace detail

/// The buffer of the caller's array `y` as a `row_major_span<T, Rank>` to write into, in place: an
/// `xt::xtensor`, `xt::xarray` or `xt::adapt` (its own rank; the strides must be row-major ones), or an
/// `Eigen::Matrix`, `Eigen::Map` or `Eigen::Ref` with `Eigen::RowMajor` storage (or a vector), shape
/// `[rows, cols]`.
/// \throws std::invalid_argument when y's strides skip elements or are not row-major ones (a strided
///         or transposed view, an Eigen block of a wider matrix).
/// Errors: any other type (a lazy expression, a column-major Eigen matrix, a const adaptor, a
/// std::vector) does not compile (static_assert saying what to pass).
template <class Y>
[[nodiscard]] auto as_row_major_output(Y& y) {
  if constexpr (detail::writable_xtensor<Y>) {
    using T = typename Y::value_type;
    constexpr std::size_t rank = detail::xexpression_rank<Y>;
    if (!detail::row_major_strides(y.shape(), y.strides())) {
      throw std::invalid_argument(
          "mixprec: the output array is not contiguous row-major (a strided or transposed view?); write into "
          "an xt::xtensor, or an xt::adapt over a row-major buffer");
    }
    return row_major_span<T, rank>(y.data() + y.data_offset(), detail::to_view_shape<T, rank>(y.shape()));
  } else if constexpr (detail::writable_row_major_eigen<Y>) {
    using T = typename Y::Scalar;
    if (!detail::eigen_rows_contiguous(y)) {
      throw std::invalid_argument(
          "mixprec: the output Eigen object is not contiguous (a block of a wider matrix, or an inner stride); "
          "write into a whole RowMajor matrix, or an Eigen::Map over a contiguous buffer");
    }
    return row_major_span<T, 2>(y.data(), {static_cast<std::size_t>(y.rows()), static_cast<std::size_t>(y.cols())});
  } else {
    static_assert(detail::always_false_v<Y>,
                  "mixprec writes outputs in place into xt::xtensor, xt::xarray, an xt::adapt over your (non-const) "
                  "row-major buffer, or an Eigen::Matrix, Eigen::Map or Eigen::Ref with Eigen::RowMajor storage (or a "
                  "vector); a column-major Eigen matrix, a const adaptor or a lazy expression cannot be written.");
    return row_major_span<float, 1>(nullptr, {0});
  }
}

/// What `as_row_major` accepts: an xtensor expression (containers, adaptors, views, lazy
/// expressions) or an Eigen dense object (`Matrix`, `Array`, `Map`, `Ref`, blocks, expressions).
template <class X>
concept row_major_source =
    detail::is_xexpression_v<std::remove_cvref_t<X>> || detail::is_eigen_dense_v<std::remove_cvref_t<X>>;

/// The elements of `x` as one contiguous row-major block (table in the file comment): a
/// `row_major_view<T, Rank>` over x's own buffer when its strides are row-major ones, otherwise over
/// a copy made here. T is x's element type without cv; Rank is x's static number of axes
/// (`dynamic_rank` for `xt::xarray`-like shapes; 2 for Eigen, `[rows, cols]`).
/// Errors: a type that is neither an xtensor expression nor an Eigen dense object does not compile
/// (static_assert saying what to pass instead).
template <class X>
[[nodiscard]] auto as_row_major(const X& x) {
  if constexpr (detail::is_xexpression_v<X>) {
    return detail::xexpression_as_row_major(x);
  } else if constexpr (detail::is_eigen_dense_v<X>) {
    return detail::eigen_as_row_major(x);
  } else {
    static_assert(
        detail::always_false_v<X>,
        "mixprec takes arrays as xtensor expressions (xt::xtensor, xt::xarray, xt::adapt over a pointer "
        "or a std::vector, xt::view, xt::xtensor_fixed) or Eigen matrices (Eigen::Matrix, Eigen::Map, "
        "Eigen::Ref). Wrap a buffer with xt::adapt(ptr, size, xt::no_ownership(), shape), or map it with "
        "Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(ptr, rows, cols).");
    return row_major_view<float, 1>(static_cast<const float*>(nullptr), {0});
  }
}

}  // namespace mixprec
