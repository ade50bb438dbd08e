/// \file
/// \brief The Eigen adapter: mixprec small floats as Eigen scalars (`Eigen::NumTraits`), and Eigen
/// dense containers (`Eigen::Matrix`, `Eigen::Array`) and contiguous maps of them (`Eigen::Map`) as
/// tree nodes, so that `cast_floating`,
/// `cast_to_compute`, loss scaling and `all_finite` work on them. One of the two headers allowed to
/// include Eigen (the other adapter is `mixprec/arrays/xtensor.hpp`).
///
/// **Example**:
///
///     Eigen::MatrixXf w = Eigen::MatrixXf::Ones(2, 3);
///     using MatrixXbf = Eigen::Matrix<mixprec::bfloat16, Eigen::Dynamic, Eigen::Dynamic>;
///     MatrixXbf h = mixprec::cast_floating<mixprec::bfloat16>(w);
///     // h is evaluated (owns its data), 2 x 3, every coefficient bfloat16(1.0f) = 0x3F80.
///
/// What works on `Eigen::Matrix<bfloat16, ...>` (and every small float): construction, coefficient
/// access, `+ - *` (coefficient-wise and matrix products), scalar multiples, `sum()`, `cwiseAbs()`,
/// comparisons, `isApprox`, `allFinite`, printing. Arithmetic runs in float and rounds back per
/// operation, as the type's own operators do (a matrix product of bfloat16 therefore accumulates in
/// bfloat16; for float32 accumulation cast to float first). Functions that need `sqrt`, `exp` and
/// friends of the small float (`norm()`, `normalized()`, `array().exp()`) are not available: the small
/// floats do not define them.
///
/// Mixed scalar types are not enabled: `Matrix<bfloat16> + Matrix<float>` does not compile (there is
/// deliberately no blanket `Eigen::ScalarBinaryOpTraits`); cast one side first.
#pragma once

// GCC 12 reports false -W(maybe-)uninitialized warnings inside its own avx512fintrin.h (the
// _mm512_undefined_* idiom) when Eigen's AVX-512 GEMM kernels are inlined (-mavx512f / -march=native
// builds). The diagnostic state of a header's lines is the one in force where it is first included,
// so silencing them around this, the only include of Eigen, covers every user.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <concepts>
#include <limits>
#include <type_traits>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/numeric_limits.hpp"

/// Eigen's description of a mixprec small float, following Eigen's "Using custom scalar types" page
/// (specialise `Eigen::NumTraits`; the operators `+ - * /` come with the type). Values come from
/// `std::numeric_limits` (derived from the format), as Eigen's own `half` and `bfloat16` do.
namespace Eigen {
template <class T>
requires mixprec::small_float<T> && std::same_as<T, std::remove_cv_t<T>>
struct NumTraits<T> : GenericNumTraits<T> {
  using Real = T;
  using NonInteger = T;
  using Literal = T;
  using Nested = T;
  enum {
    IsInteger = 0,
    IsSigned = T::format.is_signed ? 1 : 0,
    IsComplex = 0,
    // A pattern of bits, trivially copyable; Eigen's own half and bfloat16 say false too.
    RequireInitialization = 0,
    ReadCost = 1,
    // Each operation decodes to float, computes, and rounds back.
    AddCost = 3,
    MulCost = 3
  };
  /// Smallest value (`-max()`, or 2^-127 for the unsigned float8_e8m0fnu).
  static constexpr T lowest() noexcept { return std::numeric_limits<T>::lowest(); }
  /// Tolerance of Eigen's fuzzy comparisons (`isApprox`): 8 epsilon. Eigen's own values are of that
  /// order: half 1e-2 (about 10 epsilon), bfloat16 5e-2 (about 6 epsilon).
  static constexpr T dummy_precision() noexcept {
    return T(8.0f * static_cast<float>(std::numeric_limits<T>::epsilon()));
  }
};
}  // namespace Eigen

namespace mixprec {

namespace detail {
/// The Eigen plain object like `Plain` (Matrix or Array, same sizes and options) of scalar type U.
template <class Plain, class U>
struct eigen_rebind;
template <class Scalar, int Rows, int Cols, int Options, int MaxRows, int MaxCols, class U>
struct eigen_rebind<Eigen::Matrix<Scalar, Rows, Cols, Options, MaxRows, MaxCols>, U> {
  using type = Eigen::Matrix<U, Rows, Cols, Options, MaxRows, MaxCols>;
};
template <class Scalar, int Rows, int Cols, int Options, int MaxRows, int MaxCols, class U>
struct eigen_rebind<Eigen::Array<Scalar, Rows, Cols, Options, MaxRows, MaxCols>, U> {
  using type = Eigen::Array<U, Rows, Cols, Options, MaxRows, MaxCols>;
};

/// A Matrix or Array type (`const` allowed), the kinds of object an Eigen tree node holds or maps.
template <class Plain>
concept eigen_plain = requires {
  typename eigen_rebind<std::remove_const_t<Plain>, float>::type;
};

/// The tree protocol for an Eigen object whose coefficients are contiguous in the storage order of the
/// plain type `Plain` (the object itself, or a `Map` of it with the default stride): children are the
/// coefficients in storage order; `map` builds a `Plain` (same kind, sizes and options) of the
/// transformed scalar type.
template <class Plain>
struct eigen_tree_traits {
  using element_type = std::remove_const_t<typename Plain::Scalar>;
  static_assert(tree_leaf<element_type>,
                "mixprec trees: an Eigen matrix, array or map is a tree node only when its coefficients are scalar "
                "leaves (arithmetic, std::complex, mixprec small floats).");

  template <class Object, class F>
  static void for_each(Object& m, F&& f) {
    const Eigen::Index n = m.size();
    auto* data = m.data();
    for (Eigen::Index i = 0; i < n; ++i) f(data[i]);
  }

  template <class Object, class F>
  static auto map(const Object& m, F&& f) {
    using U = std::remove_cvref_t<decltype(f(std::declval<const element_type&>()))>;
    typename eigen_rebind<std::remove_const_t<Plain>, U>::type out;
    out.resize(m.rows(), m.cols());  // never the (rows, cols) constructor: for fixed 2-vectors it sets coefficients
    const Eigen::Index n = m.size();
    const element_type* in = m.data();
    U* dst = out.data();
    for (Eigen::Index i = 0; i < n; ++i) dst[i] = f(in[i]);
    return out;
  }
};
}  // namespace detail

/// `Eigen::Matrix` of scalar leaves: a range node over its coefficients (storage order). Casting gives
/// an evaluated `Eigen::Matrix` of the new scalar type with the same sizes and options.
template <class Scalar, int Rows, int Cols, int Options, int MaxRows, int MaxCols>
struct tree_traits<Eigen::Matrix<Scalar, Rows, Cols, Options, MaxRows, MaxCols>>
    : detail::eigen_tree_traits<Eigen::Matrix<Scalar, Rows, Cols, Options, MaxRows, MaxCols>> {};

/// `Eigen::Array` of scalar leaves: as `Eigen::Matrix`.
template <class Scalar, int Rows, int Cols, int Options, int MaxRows, int MaxCols>
struct tree_traits<Eigen::Array<Scalar, Rows, Cols, Options, MaxRows, MaxCols>>
    : detail::eigen_tree_traits<Eigen::Array<Scalar, Rows, Cols, Options, MaxRows, MaxCols>> {};

/// `Eigen::Map` of a Matrix or Array (`const` or not) with the default, contiguous stride, of scalar
/// leaves: a range node over the mapped coefficients (storage order), so in-place operations write
/// through to the caller's buffer (a `Map<const ...>` is read-only). Casting gives an owning Matrix or
/// Array of the new scalar type with the same sizes and options. Maps with explicit strides are not
/// trees (copy them into a plain object first).
template <class Plain, int MapOptions>
requires detail::eigen_plain<Plain>
struct tree_traits<Eigen::Map<Plain, MapOptions, Eigen::Stride<0, 0>>> : detail::eigen_tree_traits<Plain> {
};

}  // namespace mixprec
