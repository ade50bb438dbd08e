/// \file
/// \brief `mixprec::dtype`: every element type by its NumPy/JAX name, and the maps between dtype
/// values and C++ types (`dtype_of_v<T>`, `type_of_t<d>`).
#pragma once

#include <array>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/intn.hpp"

namespace mixprec {

// The enumeration is declared in an inline namespace, which code never names (it writes
// `mixprec::dtype`), so that GCC's -Wshadow does not report the enumerators int2, int4, uint2 and
// uint4 as shadowing the types mixprec::int2, ...: GCC compares a new name with the declarations of
// the namespace it is declared in, and those types are declared in mixprec, not here. Argument-
// dependent lookup still finds mixprec's functions (`name(d)`, `operator<<`): the namespace enclosing
// an inline namespace is associated too ([basic.lookup.argdep]). Diagnostics spell the type
// `mixprec::dtype_enum::dtype`.
inline namespace dtype_enum {

/// Every element type mixprec knows, named as NumPy/JAX name it. The last three are JAX's weakly
/// typed scalars (written `i*`, `f*`, `c*` in JAX's type promotion docs): the type of a Python (here:
/// a C++ literal marked weak) scalar that adapts to the array it meets. `std::cout << d` and
/// `std::format("{}", d)` print `name(d)`.
enum class dtype : std::uint8_t {
  bool_,
  int2,
  int4,
  int8,
  int16,
  int32,
  int64,
  uint2,
  uint4,
  uint8,
  uint16,
  uint32,
  uint64,
  bfloat16,
  float16,
  float32,
  float64,
  complex64,
  complex128,
  float8_e4m3fn,
  float8_e5m2,
  float8_e4m3fnuz,
  float8_e5m2fnuz,
  float8_e4m3b11fnuz,
  float8_e3m4,
  float8_e4m3,
  float8_e8m0fnu,
  float6_e2m3fn,
  float6_e3m2fn,
  float4_e2m1fn,
  weak_int,
  weak_float,
  weak_complex,
};

}  // namespace dtype_enum

/// Number of enumerators of `dtype` (derived from the last one).
inline constexpr std::size_t dtype_count = static_cast<std::size_t>(dtype::weak_complex) + 1;

/// Every dtype, in declaration order (for exhaustive loops in code and tests).
inline constexpr auto all_dtypes = [] {
  std::array<dtype, dtype_count> all{};
  for (std::size_t i = 0; i < dtype_count; ++i) all[i] = static_cast<dtype>(i);
  return all;
}();

namespace detail {
/// NumPy/JAX names, indexed by the enumerator's value.
inline constexpr std::array<std::string_view, dtype_count> dtype_names{
    "bool",
    "int2",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint2",
    "uint4",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "int*",
    "float*",
    "complex*",
};
/// Bit-size short forms accepted by parse_dtype (as in jmp and JAX's docs).
inline constexpr std::array<std::pair<std::string_view, dtype>, 15> dtype_short_names{{
    {"b1", dtype::bool_},
    {"i8", dtype::int8},
    {"i16", dtype::int16},
    {"i32", dtype::int32},
    {"i64", dtype::int64},
    {"u8", dtype::uint8},
    {"u16", dtype::uint16},
    {"u32", dtype::uint32},
    {"u64", dtype::uint64},
    {"bf16", dtype::bfloat16},
    {"f16", dtype::float16},
    {"f32", dtype::float32},
    {"f64", dtype::float64},
    {"c64", dtype::complex64},
    {"c128", dtype::complex128},
}};
}  // namespace detail

/// The NumPy/JAX name of `d`: "bool", "int8", "bfloat16", "float8_e4m3fn", "complex64"; the weak
/// types are "int*", "float*", "complex*" as in JAX's promotion table. A value that is no enumerator
/// (e.g. `static_cast<dtype>(250)`) gives "(not a dtype)" (it used to read out of bounds).
[[nodiscard]] constexpr std::string_view name(dtype d) noexcept {
  const auto index = static_cast<std::size_t>(d);
  return index < detail::dtype_names.size() ? detail::dtype_names[index] : std::string_view("(not a dtype)");
}

/// Parses a dtype name: every `name(d)` (including "int*", "float*", "complex*") and the short forms
/// `b1 i8 i16 i32 i64 u8 u16 u32 u64 bf16 f16 f32 f64 c64 c128`. Exact and case-sensitive, like
/// `numpy.dtype`; returns std::nullopt for anything else.
[[nodiscard]] constexpr std::optional<dtype> parse_dtype(std::string_view text) noexcept {
  for (dtype d : all_dtypes) {
    if (name(d) == text) return d;
  }
  for (const auto& [short_name, d] : detail::dtype_short_names) {
    if (short_name == text) return d;
  }
  return std::nullopt;
}

/// Writes `name(d)` ("bfloat16", "float8_e4m3fn", "float*"); a value that is no enumerator (a cast
/// integer) is written "dtype(<number>)".
///
/// **Example**: `std::cout << mixprec::dtype::bfloat16` prints `bfloat16`.
inline std::ostream& operator<<(std::ostream& os, dtype d) {
  const auto index = static_cast<std::size_t>(d);
  if (index < dtype_count) return os << name(d);
  return os << "dtype(" << index << ')';
}

// ---------------------------------------------------------------------------------------------
// C++ type <-> dtype
// ---------------------------------------------------------------------------------------------

/// Maps a C++ element type to its dtype. Specialise it (with `static constexpr dtype value`) to
/// give your own type a dtype. Unspecialised types have no `value`, so `dtype_of_v<T>` does not compile.
template <class T>
struct dtype_of {};

namespace detail {
template <dtype D>
struct dtype_constant {
  static constexpr dtype value = D;
};
template <std::size_t Size, bool Signed>
constexpr dtype integer_dtype() {
  if constexpr (Size == 1)
    return Signed ? dtype::int8 : dtype::uint8;
  else if constexpr (Size == 2)
    return Signed ? dtype::int16 : dtype::uint16;
  else if constexpr (Size == 4)
    return Signed ? dtype::int32 : dtype::uint32;
  else {
    static_assert(Size == 8, "mixprec dtypes name integers of 1, 2, 4 and 8 bytes only.");
    return Signed ? dtype::int64 : dtype::uint64;
  }
}
/// The standard signed and unsigned integer types (not bool, not the character types), at most 64
/// bits wide: the extended `__int128` (an integral type under -std=gnu++20) has no dtype, as NumPy
/// and JAX have none.
template <class T>
concept standard_integer =
    std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char> && !std::same_as<T, wchar_t> &&
    !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t> && sizeof(T) <= 8;
}  // namespace detail

template <>
struct dtype_of<bool> : detail::dtype_constant<dtype::bool_> {};
template <detail::standard_integer T>
struct dtype_of<T> : detail::dtype_constant<detail::integer_dtype<sizeof(T), std::is_signed_v<T>>()> {};
template <>
struct dtype_of<float> : detail::dtype_constant<dtype::float32> {};
template <>
struct dtype_of<double> : detail::dtype_constant<dtype::float64> {};
template <>
struct dtype_of<std::complex<float>> : detail::dtype_constant<dtype::complex64> {};
template <>
struct dtype_of<std::complex<double>> : detail::dtype_constant<dtype::complex128> {};
template <>
struct dtype_of<int2> : detail::dtype_constant<dtype::int2> {};
template <>
struct dtype_of<int4> : detail::dtype_constant<dtype::int4> {};
template <>
struct dtype_of<uint2> : detail::dtype_constant<dtype::uint2> {};
template <>
struct dtype_of<uint4> : detail::dtype_constant<dtype::uint4> {};
template <>
struct dtype_of<bfloat16> : detail::dtype_constant<dtype::bfloat16> {};
template <>
struct dtype_of<float16> : detail::dtype_constant<dtype::float16> {};
template <>
struct dtype_of<float8_e4m3fn> : detail::dtype_constant<dtype::float8_e4m3fn> {};
template <>
struct dtype_of<float8_e5m2> : detail::dtype_constant<dtype::float8_e5m2> {};
template <>
struct dtype_of<float8_e4m3fnuz> : detail::dtype_constant<dtype::float8_e4m3fnuz> {};
template <>
struct dtype_of<float8_e5m2fnuz> : detail::dtype_constant<dtype::float8_e5m2fnuz> {};
template <>
struct dtype_of<float8_e4m3b11fnuz> : detail::dtype_constant<dtype::float8_e4m3b11fnuz> {};
template <>
struct dtype_of<float8_e3m4> : detail::dtype_constant<dtype::float8_e3m4> {};
template <>
struct dtype_of<float8_e4m3> : detail::dtype_constant<dtype::float8_e4m3> {};
template <>
struct dtype_of<float8_e8m0fnu> : detail::dtype_constant<dtype::float8_e8m0fnu> {};
template <>
struct dtype_of<float6_e2m3fn> : detail::dtype_constant<dtype::float6_e2m3fn> {};
template <>
struct dtype_of<float6_e3m2fn> : detail::dtype_constant<dtype::float6_e3m2fn> {};
template <>
struct dtype_of<float4_e2m1fn> : detail::dtype_constant<dtype::float4_e2m1fn> {};

/// True for C++ types that have a dtype.
template <class T>
concept has_dtype = requires {
  { dtype_of<std::remove_cv_t<T>>::value } -> std::convertible_to<dtype>;
};

/// The dtype of the C++ element type `T`: `dtype_of_v<float> == dtype::float32`,
/// `dtype_of_v<std::int8_t> == dtype::int8`, `dtype_of_v<bfloat16> == dtype::bfloat16`.
template <class T>
requires has_dtype<T>
inline constexpr dtype dtype_of_v = dtype_of<std::remove_cv_t<T>>::value;

namespace detail {
template <dtype D>
struct type_of_impl;
// clang-format off
template <> struct type_of_impl<dtype::bool_> { using type = bool; };
template <> struct type_of_impl<dtype::int2> { using type = mixprec::int2; };
template <> struct type_of_impl<dtype::int4> { using type = mixprec::int4; };
template <> struct type_of_impl<dtype::int8> { using type = std::int8_t; };
template <> struct type_of_impl<dtype::int16> { using type = std::int16_t; };
template <> struct type_of_impl<dtype::int32> { using type = std::int32_t; };
template <> struct type_of_impl<dtype::int64> { using type = std::int64_t; };
template <> struct type_of_impl<dtype::uint2> { using type = mixprec::uint2; };
template <> struct type_of_impl<dtype::uint4> { using type = mixprec::uint4; };
template <> struct type_of_impl<dtype::uint8> { using type = std::uint8_t; };
template <> struct type_of_impl<dtype::uint16> { using type = std::uint16_t; };
template <> struct type_of_impl<dtype::uint32> { using type = std::uint32_t; };
template <> struct type_of_impl<dtype::uint64> { using type = std::uint64_t; };
template <> struct type_of_impl<dtype::bfloat16> { using type = mixprec::bfloat16; };
template <> struct type_of_impl<dtype::float16> { using type = mixprec::float16; };
template <> struct type_of_impl<dtype::float32> { using type = float; };
template <> struct type_of_impl<dtype::float64> { using type = double; };
template <> struct type_of_impl<dtype::complex64> { using type = std::complex<float>; };
template <> struct type_of_impl<dtype::complex128> { using type = std::complex<double>; };
template <> struct type_of_impl<dtype::float8_e4m3fn> { using type = mixprec::float8_e4m3fn; };
template <> struct type_of_impl<dtype::float8_e5m2> { using type = mixprec::float8_e5m2; };
template <> struct type_of_impl<dtype::float8_e4m3fnuz> { using type = mixprec::float8_e4m3fnuz; };
template <> struct type_of_impl<dtype::float8_e5m2fnuz> { using type = mixprec::float8_e5m2fnuz; };
template <> struct type_of_impl<dtype::float8_e4m3b11fnuz> { using type = mixprec::float8_e4m3b11fnuz; };
template <> struct type_of_impl<dtype::float8_e3m4> { using type = mixprec::float8_e3m4; };
template <> struct type_of_impl<dtype::float8_e4m3> { using type = mixprec::float8_e4m3; };
template <> struct type_of_impl<dtype::float8_e8m0fnu> { using type = mixprec::float8_e8m0fnu; };
template <> struct type_of_impl<dtype::float6_e2m3fn> { using type = mixprec::float6_e2m3fn; };
template <> struct type_of_impl<dtype::float6_e3m2fn> { using type = mixprec::float6_e3m2fn; };
template <> struct type_of_impl<dtype::float4_e2m1fn> { using type = mixprec::float4_e2m1fn; };
// clang-format on
template <dtype D>
inline constexpr bool is_weak_dtype = D == dtype::weak_int || D == dtype::weak_float || D == dtype::weak_complex;
}  // namespace detail

/// The C++ element type of the dtype `D` (`type_of_t<dtype::float32>` is float). The weak dtypes
/// have no element type of their own: they are a property of a scalar, not a storage format.
template <dtype D>
requires(!detail::is_weak_dtype<D>) using type_of_t = typename detail::type_of_impl<D>::type;

// ---------------------------------------------------------------------------------------------
// Classification (NumPy's kinds)
// ---------------------------------------------------------------------------------------------

/// True for the weakly typed scalar dtypes int*, float*, complex*.
[[nodiscard]] constexpr bool is_weak(dtype d) noexcept {
  return d == dtype::weak_int || d == dtype::weak_float || d == dtype::weak_complex;
}
/// True for bool.
[[nodiscard]] constexpr bool is_bool(dtype d) noexcept { return d == dtype::bool_; }
/// True for signed integers (int2 ... int64; not weak_int).
[[nodiscard]] constexpr bool is_signed_integer(dtype d) noexcept { return d >= dtype::int2 && d <= dtype::int64; }
/// True for unsigned integers (uint2 ... uint64).
[[nodiscard]] constexpr bool is_unsigned_integer(dtype d) noexcept { return d >= dtype::uint2 && d <= dtype::uint64; }
/// True for every integer dtype, including weak_int.
[[nodiscard]] constexpr bool is_integer(dtype d) noexcept {
  return is_signed_integer(d) || is_unsigned_integer(d) || d == dtype::weak_int;
}
/// True for the real floating dtypes, small floats and weak_float included (NumPy's `floating`).
[[nodiscard]] constexpr bool is_floating(dtype d) noexcept {
  return (d >= dtype::bfloat16 && d <= dtype::float64) || (d >= dtype::float8_e4m3fn && d <= dtype::float4_e2m1fn) ||
         d == dtype::weak_float;
}
/// True for complex64, complex128 and weak_complex.
[[nodiscard]] constexpr bool is_complex(dtype d) noexcept {
  return d == dtype::complex64 || d == dtype::complex128 || d == dtype::weak_complex;
}
/// True for the sub-16-bit floats (float8, float6, float4): JAX gives them no implicit promotion.
[[nodiscard]] constexpr bool is_small_float(dtype d) noexcept {
  return d >= dtype::float8_e4m3fn && d <= dtype::float4_e2m1fn;
}

}  // namespace mixprec

#if defined(__cpp_lib_format)
/// `std::format("{}", d)` writes `name(d)`, with the format spec of a string (`"{:>10}"`); a value
/// that is no enumerator is written "dtype(<number>)", as `operator<<` does. Only where the standard
/// library has `<format>` (`__cpp_lib_format`; not GCC 12's libstdc++).
template <>
struct std::formatter<mixprec::dtype, char> : std::formatter<std::string_view, char> {
  /// Formats the dtype's name.
  template <class FormatContext>
  auto format(mixprec::dtype d, FormatContext& ctx) const {
    const auto index = static_cast<std::size_t>(d);
    if (index < mixprec::dtype_count) return std::formatter<std::string_view, char>::format(mixprec::name(d), ctx);
    const std::string text = "dtype(" + std::to_string(index) + ")";
    return std::formatter<std::string_view, char>::format(text, ctx);
  }
};
#endif
