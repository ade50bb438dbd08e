/// \file
/// \brief JAX type promotion: `promote_types`, `result_type`, `promote_t<Ts...>`, weakly typed
/// scalars (`weak<T>`) and `type_promotion_error`.
///
/// The lattice itself (a table of immediate successors, as JAX writes it) and its constexpr closure
/// are in `mixprec/dtypes/detail/lattice.hpp`. Results equal what `jax.numpy` binary operations promote to
/// (JAX `jax/_src/dtypes.py`: `_type_promotion_lattice`, `_least_upper_bound`, `lattice_result_type`),
/// in each of JAX's modes: x64 on or off, `jax_numpy_dtype_promotion` standard or strict.
/// docs/promotion.md has the diagram, the full published table and the differences from `jnp`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "mixprec/dtypes/detail/lattice.hpp"
#include "mixprec/dtypes/dtype.hpp"

namespace mixprec {

/// Which JAX promotion lattice to use (JAX's `jax_numpy_dtype_promotion` option).
enum class promotion_mode : std::uint8_t {
  standard,  ///< 'standard', JAX's default: the lattice in docs/promotion.md
  strict,    ///< 'strict': two different strong dtypes never promote; weak scalars still adapt
};

/// Options of the promotion functions.
///
/// - `mode`: `standard` or `strict` (JAX `jax_numpy_dtype_promotion`).
/// - `x64`: JAX's `jax_enable_x64`. When false, 64-bit inputs are first canonicalised to their
///   32-bit counterparts (int64 -> int32, uint64 -> uint32, float64 -> float32, complex128 ->
///   complex64, JAX `canonicalize_dtype`), and uint32 x int32 gives int32 instead of int64 (JAX's
///   x32 lattice). Note that mixprec defaults to x64 = true (C++ `double` is a first-class type),
///   whereas JAX's default is x64 off.
///
/// A structural type, so it can be a template argument (`promote_with_t<promotion_options{...}, ...>`).
struct promotion_options {
  promotion_mode mode = promotion_mode::standard;
  bool x64 = true;

  friend constexpr bool operator==(const promotion_options&, const promotion_options&) = default;
};

/// Thrown when dtypes have no common type on the promotion lattice (JAX `TypePromotionError`):
/// any small float (float8/float6/float4) or sub-byte integer (int2/int4/uint2/uint4) meeting a
/// type it cannot widen to, or two different strong dtypes in `promotion_mode::strict`. The message
/// names the dtypes, the reason and the fix, e.g. "cannot promote float8_e4m3fn and bfloat16:
/// float8 types do not promote implicitly; cast one explicitly, e.g. to float32".
class type_promotion_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

/// JAX `_dtype_to_32bit_dtype`: the dtype x64=False canonicalises `d` to (`d` itself if not 64-bit).
[[nodiscard]] constexpr dtype to_32bit(dtype d) noexcept {
  switch (d) {
    case dtype::int64: return dtype::int32;
    case dtype::uint64: return dtype::uint32;
    case dtype::float64: return dtype::float32;
    case dtype::complex128: return dtype::complex64;
    default: return d;
  }
}

/// JAX `canonicalize_dtype` for a given x64 setting.
[[nodiscard]] constexpr dtype canonicalize(dtype d, bool x64) noexcept { return x64 ? d : to_32bit(d); }

/// The pairwise joins of the lattice JAX's `_least_upper_bound` picks for these options.
[[nodiscard]] constexpr const join_table& joins_for(promotion_options opts) noexcept {
  if (opts.mode == promotion_mode::strict) return strict_joins;
  return opts.x64 ? standard_x64_joins : standard_x32_joins;
}

/// Why promotion failed, in the order JAX tests the reasons (`_least_upper_bound`).
enum class promotion_failure : std::uint8_t {
  none,           ///< promotion succeeded
  no_inputs,      ///< result_type of nothing
  invalid_dtype,  ///< a value outside the `dtype` enumeration (e.g. static_cast<dtype>(200))
  strict,         ///< promotion_mode::strict and no common type
  float8,         ///< a float8 type is involved
  float6,         ///< a float6 type is involved
  float4,         ///< a float4 type is involved
  intn,           ///< int2 / int4 / uint2 / uint4 is involved
  no_path,        ///< no common upper bound for another reason (unreachable with JAX's lattices)
  ill_formed,     ///< no unique least upper bound (unreachable: lattice.hpp checks well-formedness)
};

struct promotion_outcome {
  dtype value = dtype::bool_;  ///< the promoted dtype when failure == none
  promotion_failure failure = promotion_failure::none;
};

[[nodiscard]] constexpr bool is_float8(dtype d) noexcept { return name(d).starts_with("float8_"); }
[[nodiscard]] constexpr bool is_float6(dtype d) noexcept { return name(d).starts_with("float6_"); }
[[nodiscard]] constexpr bool is_float4(dtype d) noexcept { return name(d).starts_with("float4_"); }
/// JAX's `_intn_dtypes` (the sub-byte integers).
[[nodiscard]] constexpr bool is_intn(dtype d) noexcept {
  return d == dtype::int2 || d == dtype::int4 || d == dtype::uint2 || d == dtype::uint4;
}

/// Whether `d` is one of the enumerators of `dtype` (a value cast from an integer may be none).
[[nodiscard]] constexpr bool is_valid_dtype(dtype d) noexcept { return static_cast<std::size_t>(d) < dtype_count; }

/// The JAX promotion of a set of dtypes, without throwing: canonicalise every input (x64 off),
/// join them on the lattice the options select, canonicalise the result (JAX
/// `lattice_result_type`: `dtype(result_type)`). The join is a fold of the pairwise joins, which
/// equals JAX's join of the whole set because the lattices are well formed (lattice.hpp): if a
/// partial join has no upper bound with the next dtype, the whole set has none.
[[nodiscard]] constexpr promotion_outcome promote_all(std::span<const dtype> dtypes, promotion_options opts) noexcept {
  if (dtypes.empty()) return {dtype::bool_, promotion_failure::no_inputs};
  for (dtype d : dtypes) {
    // Checked first: the lattice tables and the names are indexed by the enumerator's value.
    if (!is_valid_dtype(d)) return {dtype::bool_, promotion_failure::invalid_dtype};
  }
  const join_table& joins = joins_for(opts);
  lub_result acc{canonicalize(dtypes.front(), opts.x64), lub_status::ok};
  for (dtype d : dtypes.subspan(1)) {
    acc = joins(acc.value, canonicalize(d, opts.x64));
    if (acc.status != lub_status::ok) break;
  }
  if (acc.status == lub_status::ok) return {canonicalize(acc.value, opts.x64), promotion_failure::none};
  if (acc.status == lub_status::not_unique) return {dtype::bool_, promotion_failure::ill_formed};
  auto any = [&](bool (*pred)(dtype) noexcept) {
    for (dtype d : dtypes) {
      if (pred(d)) return true;
    }
    return false;
  };
  promotion_failure why = promotion_failure::no_path;
  if (opts.mode == promotion_mode::strict)
    why = promotion_failure::strict;
  else if (any(is_float8))
    why = promotion_failure::float8;
  else if (any(is_float6))
    why = promotion_failure::float6;
  else if (any(is_float4))
    why = promotion_failure::float4;
  else if (any(is_intn))
    why = promotion_failure::intn;
  return {dtype::bool_, why};
}

/// The message of the std::invalid_argument for a `dtype` value outside the enumeration.
inline std::string invalid_dtype_message(std::span<const dtype> dtypes) {
  for (dtype d : dtypes) {
    if (!is_valid_dtype(d)) {
      return "mixprec::promote_types / result_type: the value " + std::to_string(static_cast<unsigned>(d)) +
             " is not a mixprec::dtype (the enumerators are 0 to " + std::to_string(dtype_count - 1) +
             "); pass a dtype enumerator, or parse a name with mixprec::parse_dtype";
    }
  }
  return "mixprec::promote_types / result_type: invalid dtype";
}

/// "a and b", "a, b and c": the dtypes as a message lists them.
inline std::string dtype_list(std::span<const dtype> dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) out += i + 1 == dtypes.size() ? " and " : ", ";
    out += name(dtypes[i]);
  }
  return out;
}

/// The message of the type_promotion_error for `dtypes` failing with `why`.
inline std::string promotion_error_message(std::span<const dtype> dtypes, promotion_failure why) {
  if (why == promotion_failure::no_inputs) {
    return "mixprec::result_type needs at least one dtype: there is nothing to promote";
  }
  std::string reason;
  switch (why) {
    case promotion_failure::strict:
      reason =
          "promotion_mode::strict (JAX jax_numpy_dtype_promotion='strict') allows no implicit promotion "
          "between them; cast one explicitly to the dtype you want, or use promotion_mode::standard";
      break;
    case promotion_failure::float8:
      reason = "float8 types do not promote implicitly; cast one explicitly, e.g. to float32";
      break;
    case promotion_failure::float6:
      reason = "float6 types do not promote implicitly; cast one explicitly, e.g. to float32";
      break;
    case promotion_failure::float4:
      reason = "float4 types do not promote implicitly; cast one explicitly, e.g. to float32";
      break;
    case promotion_failure::intn:
      reason = "int2, int4, uint2 and uint4 do not promote implicitly; cast one explicitly, e.g. to int32";
      break;
    case promotion_failure::ill_formed:
      reason = "the promotion lattice has no unique least upper bound for them (a mixprec bug: please report it)";
      break;
    default:
      reason = "the promotion lattice gives them no common type; cast one explicitly to the dtype you want";
      break;
  }
  return "cannot promote " + dtype_list(dtypes) + ": " + reason;
}

}  // namespace detail

/// The dtype JAX promotes all of `dtypes` to: their join on the JAX type promotion lattice, as a
/// `jax.numpy` operation on arrays (and weak scalars) of these dtypes computes it (JAX
/// `lattice_result_type`). Weak results stay weak: `result_type({weak_int, weak_float})` is
/// `weak_float` (JAX's `f*`); JAX would materialise it as float64 (x64) or float32.
///
/// With `opts.x64 == false`, 64-bit inputs count as their 32-bit counterparts (see
/// `promotion_options`). The join is associative and commutative, so the order of `dtypes` does not
/// matter.
///
/// Errors: throws `type_promotion_error` (a `std::invalid_argument`) when `dtypes` is empty or has no
/// common type; the message names the dtypes, the reason and the fix. Throws a plain
/// `std::invalid_argument` (not a `type_promotion_error`) when a value is not a `dtype` enumerator
/// (e.g. `static_cast<dtype>(200)`); the message gives the value. In a constant expression these are
/// compile errors.
///
/// **Example**:
///
///     std::vector<dtype> ins{dtype::int8, dtype::bfloat16, dtype::weak_float};
///     result_type(ins) == dtype::bfloat16
[[nodiscard]] constexpr dtype result_type(std::span<const dtype> dtypes, promotion_options opts = {}) {
  const detail::promotion_outcome outcome = detail::promote_all(dtypes, opts);
  if (outcome.failure == detail::promotion_failure::invalid_dtype) {
    throw std::invalid_argument(detail::invalid_dtype_message(dtypes));
  }
  if (outcome.failure != detail::promotion_failure::none) {
    // No common type: a run-time error, and a compile error in a constant expression.
    throw type_promotion_error(detail::promotion_error_message(dtypes, outcome.failure));
  }
  return outcome.value;
}

/// `result_type` of one or more dtypes with the default options (standard mode, x64 on).
///
/// **Example**:
///
///     static_assert(result_type(dtype::uint8, dtype::int8) == dtype::int16);
///     static_assert(result_type(dtype::int32, dtype::weak_float, dtype::float16) == dtype::float16);
template <std::same_as<dtype>... Rest>
[[nodiscard]] constexpr dtype result_type(dtype first, Rest... rest) {
  const std::array<dtype, 1 + sizeof...(Rest)> dtypes{first, rest...};
  return result_type(std::span<const dtype>(dtypes));
}

/// `result_type` of one or more dtypes with explicit options.
///
/// **Example**:
///
///     static_assert(result_type({.x64 = false}, dtype::uint32, dtype::int32) == dtype::int32);
///     static_assert(result_type({.mode = promotion_mode::strict}, dtype::int8, dtype::weak_int) == dtype::int8);
template <std::same_as<dtype>... Rest>
[[nodiscard]] constexpr dtype result_type(promotion_options opts, dtype first, Rest... rest) {
  const std::array<dtype, 1 + sizeof...(Rest)> dtypes{first, rest...};
  return result_type(std::span<const dtype>(dtypes), opts);
}

/// The dtype a binary operation on `a` and `b` computes in: their join on the JAX type promotion
/// lattice (`jnp.promote_types` with weak types, as a `jax.numpy` binary operation applies it).
/// Commutative; `promote_types(a, a) == a` (after x64=false canonicalisation).
///
/// Errors: throws `type_promotion_error` when `a` and `b` have no common type, e.g. a float8 type
/// with bfloat16, int4 with int8, or two different strong dtypes in strict mode; throws
/// `std::invalid_argument` when `a` or `b` is not a `dtype` enumerator (`static_cast<dtype>(200)`).
/// In a constant expression these are compile errors.
///
/// **Example**:
///
///     static_assert(promote_types(dtype::bfloat16, dtype::float16) == dtype::float32);
///     static_assert(promote_types(dtype::int8, dtype::uint8) == dtype::int16);
///     static_assert(promote_types(dtype::float16, dtype::weak_float) == dtype::float16);  // weak adapts
///     static_assert(promote_types(dtype::uint64, dtype::int64) == dtype::weak_float);    // JAX's f*
///     promote_types(dtype::float8_e4m3fn, dtype::bfloat16);  // throws type_promotion_error
[[nodiscard]] constexpr dtype promote_types(dtype a, dtype b, promotion_options opts = {}) {
  const std::array<dtype, 2> dtypes{a, b};
  return result_type(std::span<const dtype>(dtypes), opts);
}

/// True when `promote_types(a, b, opts)` returns rather than throws (false for a value that is not a
/// `dtype` enumerator).
[[nodiscard]] constexpr bool can_promote(dtype a, dtype b, promotion_options opts = {}) noexcept {
  const std::array<dtype, 2> dtypes{a, b};
  return detail::promote_all(dtypes, opts).failure == detail::promotion_failure::none;
}

// With x64 off, JAX's x32 lattice never forms a 64-bit dtype from (canonicalised) inputs, so the
// final canonicalisation in promote_all never changes a result (JAX's comment on the uint32 patch).
static_assert(
    [] {
      for (dtype a : all_dtypes) {
        for (dtype b : all_dtypes) {
          const detail::lub_result r = detail::standard_x32_joins(detail::to_32bit(a), detail::to_32bit(b));
          if (r.status == detail::lub_status::ok && detail::to_32bit(r.value) != r.value) return false;
        }
      }
      return true;
    }(),
    "the x32 lattice must not form a 64-bit dtype from 32-bit inputs.");

// ---------------------------------------------------------------------------------------------
// Weakly typed C++ scalars
// ---------------------------------------------------------------------------------------------

namespace detail {
/// The weak dtype of JAX's `_jax_type(dtype, weak_type=True)`: int*, float* or complex*.
[[nodiscard]] constexpr dtype weak_kind(dtype d) noexcept {
  if (is_complex(d)) return dtype::weak_complex;
  if (is_floating(d)) return dtype::weak_float;
  return dtype::weak_int;
}

/// The dtype JAX materialises a weak dtype as: Python's int/float/complex dtype (int64, float64,
/// complex128), canonicalised for x64 (JAX `result_type` with `default_types`).
[[nodiscard]] constexpr dtype default_dtype(dtype weak, bool x64) noexcept {
  switch (weak) {
    case dtype::weak_int: return canonicalize(dtype::int64, x64);
    case dtype::weak_float: return canonicalize(dtype::float64, x64);
    case dtype::weak_complex: return canonicalize(dtype::complex128, x64);
    default: return canonicalize(weak, x64);
  }
}

/// Element types `weak<T>` accepts: cv-unqualified, with a non-bool, non-weak dtype.
template <class T>
concept weakable =
    std::same_as<T, std::remove_cvref_t<T>> && has_dtype<T> && !is_bool(dtype_of_v<T>) && !is_weak(dtype_of_v<T>);

template <class T>
consteval bool check_weak_element() {
  static_assert(std::same_as<T, std::remove_cvref_t<T>>,
                "mixprec::weak<T> needs a cv-unqualified, non-reference T: write weak<int>, not weak<const int&>.");
  static_assert(!std::same_as<std::remove_cvref_t<T>, bool>,
                "bool is never weakly typed in JAX (a Python bool is a strong bool_): use plain bool instead of "
                "mixprec::weak<bool>.");
  static_assert(std::same_as<std::remove_cvref_t<T>, bool> || has_dtype<T>,
                "mixprec::weak<T> needs an element type with a dtype: a standard integer type, float, double, "
                "std::complex<float>, std::complex<double> or a mixprec number type (bfloat16, float8_e4m3fn, ...).");
  if constexpr (has_dtype<T>) {
    static_assert(!is_weak(dtype_of_v<T>), "T is already weakly typed: write weak<T>, not weak<weak<T>>.");
  }
  return true;
}
}  // namespace detail

/// A C++ scalar marked **weakly typed**, like a Python scalar in JAX (`2 * x` keeps x's dtype).
///
/// A plain C++ value is strong: `promote_t<bfloat16, double>` is double, like `bf16_array +
/// jnp.float64(1)` in JAX (x64 on). Wrapped, it adapts to what it meets:
/// `promote_t<bfloat16, weak<double>>` is bfloat16, like `bf16_array + 1.0`. Its dtype is the weak
/// dtype of T's kind (`dtype_of_v<weak<T>>` is `weak_int`, `weak_float` or `weak_complex`); the
/// width of T does not matter, as in JAX, where every weak value promotes as Python int, float or
/// complex.
///
/// `T` is any element type with a non-bool dtype: a standard integer type, float, double,
/// std::complex<float/double>, or a mixprec number type (`weak<bfloat16>` is weak_float). bool is
/// never weak (JAX has no weak bool).
///
/// **Example**:
///
///     auto half = mixprec::weak{0.5};                 // weak<double>
///     static_assert(std::is_same_v<promote_t<bfloat16, decltype(half)>, bfloat16>);
///     static_assert(std::is_same_v<promote_t<bfloat16, double>, double>);
template <class T>
struct weak {
  static_assert(detail::check_weak_element<T>());

  using value_type = T;  ///< the C++ type of the stored value
  T value{};             ///< the scalar

  constexpr weak() = default;
  /// Wraps `v`.
  constexpr explicit weak(T v) noexcept(std::is_nothrow_copy_constructible_v<T>) : value(v) {}

  friend constexpr bool operator==(const weak&, const weak&) = default;
};
template <class T>
weak(T) -> weak<T>;

/// `dtype_of_v<weak<T>>` is the weak dtype of T's kind: weak_int, weak_float or weak_complex.
template <class T>
requires detail::weakable<T>
struct dtype_of<weak<T>> : detail::dtype_constant<detail::weak_kind(dtype_of_v<T>)> {
};

// ---------------------------------------------------------------------------------------------
// Type-level promotion
// ---------------------------------------------------------------------------------------------

namespace detail {
/// The C++ type of a promoted dtype: `type_of_t<D>` for a strong dtype; for a weak result (every
/// input weak), `weak<type_of_t<the dtype JAX materialises it as>>`, e.g. weak<double> for
/// weak_float with x64 on, weak<float> with x64 off.
template <dtype D, bool X64>
consteval auto materialize() {
  if constexpr (is_weak_dtype<D>) {
    return std::type_identity<weak<type_of_t<default_dtype(D, X64)>>>{};
  } else {
    return std::type_identity<type_of_t<D>>{};
  }
}

template <promotion_options Opts, class... Ts>
consteval auto promote_type() {
  static_assert(sizeof...(Ts) > 0, "mixprec::promote_t needs at least one type: write promote_t<A, B, ...>.");
  static_assert((has_dtype<Ts> && ...),
                "Every type given to mixprec::promote_t must have a dtype: use a standard integer type, float, "
                "double, std::complex<float/double>, a mixprec number type or mixprec::weak<T>; for your own "
                "element type, specialise mixprec::dtype_of.");
  if constexpr (sizeof...(Ts) > 0 && (has_dtype<Ts> && ...)) {
    constexpr promotion_outcome outcome = promote_all(std::array<dtype, sizeof...(Ts)>{dtype_of_v<Ts>...}, Opts);
    constexpr promotion_failure why = outcome.failure;
    static_assert(why != promotion_failure::strict,
                  "In promotion_mode::strict these types do not promote implicitly (JAX "
                  "jax_numpy_dtype_promotion='strict'): cast the operands to one type explicitly, wrap a C++ "
                  "scalar as mixprec::weak<T>, or use promotion_mode::standard.");
    static_assert(why != promotion_failure::float8,
                  "float8 types do not promote implicitly (JAX type promotion lattice): cast one operand "
                  "explicitly, e.g. static_cast<float>(x), before combining them.");
    static_assert(why != promotion_failure::float6,
                  "float6 types do not promote implicitly (JAX type promotion lattice): cast one operand "
                  "explicitly, e.g. static_cast<float>(x), before combining them.");
    static_assert(why != promotion_failure::float4,
                  "float4 types do not promote implicitly (JAX type promotion lattice): cast one operand "
                  "explicitly, e.g. static_cast<float>(x), before combining them.");
    static_assert(why != promotion_failure::intn,
                  "int2, int4, uint2 and uint4 do not promote implicitly (JAX type promotion lattice): cast one "
                  "operand explicitly, e.g. static_cast<std::int32_t>(x), before combining them.");
    static_assert(why == promotion_failure::none || why == promotion_failure::strict ||
                      why == promotion_failure::float8 || why == promotion_failure::float6 ||
                      why == promotion_failure::float4 || why == promotion_failure::intn,
                  "These types have no common type on the JAX type promotion lattice: cast one operand "
                  "explicitly before combining them.");
    if constexpr (why == promotion_failure::none) {
      return materialize<outcome.value, Opts.x64>();
    } else {
      return std::type_identity<void>{};  // after a failed static_assert: no cascade of errors
    }
  } else {
    return std::type_identity<void>{};
  }
}
}  // namespace detail

/// `promote_t` with explicit options: the C++ type of `result_type(opts, dtype_of_v<Ts>...)`.
///
/// **Example**:
///
///     static_assert(std::is_same_v<promote_with_t<promotion_options{.x64 = false}, double, int>, float>);
template <promotion_options Opts, class... Ts>
using promote_with_t = typename decltype(detail::promote_type<Opts, std::remove_cvref_t<Ts>...>())::type;

/// The C++ type JAX type promotion gives the element types `Ts...` (standard mode, x64 on): the
/// type of `result_type(dtype_of_v<Ts>...)`. Plain C++ types are strong (a `double` is a float64
/// array, not a Python float); wrap a scalar as `weak<T>` to make it weakly typed.
///
/// When every input is weak, the result is weak too and is spelled `weak<U>`, where U is the type
/// JAX would materialise it as: `promote_t<weak<int>, weak<float>>` is `weak<double>` (int64,
/// float64, complex128 with x64 on; int32, float32, complex64 with x64 off). It stays weak, so
/// `promote_t<promote_t<weak<int>, weak<float>>, bfloat16>` is bfloat16.
///
/// Errors: types with no common type (e.g. a float8 type and bfloat16), a type without a dtype, or
/// an empty list fail to compile with a static_assert that says how to fix it.
///
/// **Example**:
///
///     static_assert(std::is_same_v<promote_t<bfloat16, float16>, float>);
///     static_assert(std::is_same_v<promote_t<std::int8_t, std::uint8_t>, std::int16_t>);
///     static_assert(std::is_same_v<promote_t<bfloat16, weak<double>>, bfloat16>);
template <class... Ts>
using promote_t = promote_with_t<promotion_options{}, Ts...>;

/// True when `promote_with_t<Opts, Ts...>` compiles: at least one type, every type has a dtype, and
/// the dtypes have a common type under `Opts`.
template <promotion_options Opts, class... Ts>
concept promotable_with =
    sizeof...(Ts) > 0 && (has_dtype<std::remove_cvref_t<Ts>> && ...) &&
    (detail::promote_all(std::array<dtype, sizeof...(Ts)>{dtype_of_v<std::remove_cvref_t<Ts>>...}, Opts).failure ==
     detail::promotion_failure::none);

/// True when `promote_t<Ts...>` compiles (standard mode, x64 on).
template <class... Ts>
concept promotable = promotable_with<promotion_options{}, Ts...>;

}  // namespace mixprec
