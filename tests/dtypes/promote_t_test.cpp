// Tests of the type-level side of mixprec/dtypes/promotion.hpp: promote_t, promote_with_t, promotable,
// weak<T> and dtype_of<weak<T>>.
//
// Expected types come from JAX's promotion table (docs/type_promotion.rst; x64-off cells from
// tests/dtypes_test.py testObservedPromotionTable) read through the C++ <-> dtype map of
// dtype.hpp, and, for weak results, from JAX's materialisation of weak types (jax/_src/dtypes.py
// `result_type`: a weak result becomes the default int/float/complex dtype, int64/float64/
// complex128 with x64 on, int32/float32/complex64 with x64 off).

#include <complex>
#include <cstdint>
#include <type_traits>

#include <catch2/catch.hpp>

#include "mixprec/dtypes/promotion.hpp"

namespace promote_t_test {

using mixprec::bfloat16;
using mixprec::dtype;
using mixprec::float16;
using mixprec::promote_t;
using mixprec::promote_with_t;
using mixprec::promotion_mode;
using mixprec::promotion_options;
using mixprec::weak;

namespace {
constexpr promotion_options x64_off{.mode = promotion_mode::standard, .x64 = false};
constexpr promotion_options strict{.mode = promotion_mode::strict, .x64 = true};
}  // namespace

TEST_CASE("promote_t gives the C++ type of JAX's promotion of strong types", "[promotion][promote_t]") {
  // Docs table cells, as C++ types.
  STATIC_REQUIRE(std::is_same_v<promote_t<bfloat16, float16>, float>);                           // bf x f2 = f4
  STATIC_REQUIRE(std::is_same_v<promote_t<std::int8_t, std::uint8_t>, std::int16_t>);            // i1 x u1 = i2
  STATIC_REQUIRE(std::is_same_v<promote_t<std::uint32_t, std::int32_t>, std::int64_t>);          // u4 x i4 = i8
  STATIC_REQUIRE(std::is_same_v<promote_t<std::int64_t, bfloat16>, bfloat16>);                   // i8 x bf = bf
  STATIC_REQUIRE(std::is_same_v<promote_t<bfloat16, double>, double>);                           // bf x f8 = f8
  STATIC_REQUIRE(std::is_same_v<promote_t<std::complex<float>, double>, std::complex<double>>);  // c8 x f8 = c16
  STATIC_REQUIRE(std::is_same_v<promote_t<bool, std::uint16_t>, std::uint16_t>);                 // b1 x u2 = u2
  STATIC_REQUIRE(std::is_same_v<promote_t<float16, std::int32_t, bool>, float16>);               // f2 x i4 x b1 = f2
  // One type: itself, spelled as dtype.hpp's canonical C++ type for its dtype.
  STATIC_REQUIRE(std::is_same_v<promote_t<float>, float>);
  STATIC_REQUIRE(std::is_same_v<promote_t<const double>, double>);
  // Small floats take in the integers (the lattice puts them under f*).
  STATIC_REQUIRE(std::is_same_v<promote_t<mixprec::float8_e4m3fn, std::int32_t>, mixprec::float8_e4m3fn>);
  STATIC_REQUIRE(std::is_same_v<promote_t<mixprec::int4, bool>, mixprec::int4>);
}

TEST_CASE("weak<T> marks a C++ scalar weakly typed", "[promotion][weak]") {
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<int>> == dtype::weak_int);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<std::uint8_t>> == dtype::weak_int);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<mixprec::int4>> == dtype::weak_int);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<float>> == dtype::weak_float);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<double>> == dtype::weak_float);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<bfloat16>> == dtype::weak_float);
  STATIC_REQUIRE(mixprec::dtype_of_v<weak<std::complex<float>>> == dtype::weak_complex);
  // weak<bool> and weak<weak<T>> have no dtype (their class bodies static_assert if instantiated).
  STATIC_REQUIRE_FALSE(mixprec::has_dtype<weak<bool>>);
  STATIC_REQUIRE_FALSE(mixprec::has_dtype<weak<weak<int>>>);

  // CTAD and the stored value.
  constexpr auto half = weak{0.5};
  STATIC_REQUIRE(std::is_same_v<decltype(half), const weak<double>>);
  STATIC_REQUIRE(half.value == 0.5);
  CHECK(weak{3}.value == 3);
  CHECK(weak<float>{} == weak<float>{0.0F});
}

TEST_CASE("a weak scalar adapts to the strong type it meets, a plain one does not", "[promotion][weak][promote_t]") {
  // bf16 array + 1.0 (weak) is bfloat16; bf16 array + jnp.float64 scalar (strong) is float64.
  STATIC_REQUIRE(std::is_same_v<promote_t<bfloat16, weak<double>>, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<promote_t<bfloat16, double>, double>);
  // i* x u1 = u1, f* x f2 = f2, c* x f4 = c8, f* x i4 = f* (weak stays weak: see below).
  STATIC_REQUIRE(std::is_same_v<promote_t<std::uint8_t, weak<int>>, std::uint8_t>);
  STATIC_REQUIRE(std::is_same_v<promote_t<float16, weak<float>>, float16>);
  STATIC_REQUIRE(std::is_same_v<promote_t<float, weak<std::complex<double>>>, std::complex<float>>);
  STATIC_REQUIRE(std::is_same_v<promote_t<mixprec::float8_e5m2, weak<double>>, mixprec::float8_e5m2>);
}

TEST_CASE("an all-weak promotion stays weak and is spelled with JAX's default dtype", "[promotion][weak][promote_t]") {
  // i* x f* = f* (docs table); JAX materialises f* as float64 with x64 on, float32 with it off.
  STATIC_REQUIRE(std::is_same_v<promote_t<weak<int>, weak<double>>, weak<double>>);
  STATIC_REQUIRE(std::is_same_v<promote_t<weak<int>, weak<float>>, weak<double>>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, weak<int>, weak<double>>, weak<float>>);
  STATIC_REQUIRE(std::is_same_v<promote_t<weak<std::int8_t>>, weak<std::int64_t>>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, weak<std::int8_t>>, weak<std::int32_t>>);
  STATIC_REQUIRE(std::is_same_v<promote_t<weak<float>, weak<std::complex<float>>>, weak<std::complex<double>>>);
  // b1 x i* = i* (docs table): bool does not make a weak int strong.
  STATIC_REQUIRE(std::is_same_v<promote_t<bool, weak<int>>, weak<std::int64_t>>);
  // u8 x i8 = f* (docs table): uint64 and int64 meet at the weak float.
  STATIC_REQUIRE(std::is_same_v<promote_t<std::uint64_t, std::int64_t>, weak<double>>);
  // A weak result keeps adapting: (i* v f*) v bf = bf.
  STATIC_REQUIRE(std::is_same_v<promote_t<promote_t<weak<int>, weak<float>>, bfloat16>, bfloat16>);
}

TEST_CASE("promote_with_t follows the x64 and strict options", "[promotion][promote_t][x64][strict]") {
  // x64 off: 64-bit inputs count as 32-bit, and u4 x i4 = i4 (JAX test x32 table).
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, double, int>, float>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, std::uint32_t, std::int32_t>, std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, std::uint64_t, std::int64_t>, std::int32_t>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<x64_off, std::complex<double>>, std::complex<float>>);
  // Strict: equal types and weak scalars only.
  STATIC_REQUIRE(std::is_same_v<promote_with_t<strict, float, float>, float>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<strict, bfloat16, weak<double>>, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<promote_with_t<strict, std::int16_t, weak<int>>, std::int16_t>);
}

TEST_CASE("promotable tells whether promote_t compiles", "[promotion][promote_t]") {
  STATIC_REQUIRE(mixprec::promotable<float, bfloat16>);
  STATIC_REQUIRE(mixprec::promotable<weak<int>>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::float8_e4m3fn, bfloat16>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::float8_e4m3fn, mixprec::float8_e5m2>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::float6_e2m3fn, float>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::float4_e2m1fn, weak<std::complex<float>>>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::int4, std::int8_t>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<mixprec::uint2, weak<float>>);
  STATIC_REQUIRE_FALSE(mixprec::promotable<char, int>);  // char has no dtype
  STATIC_REQUIRE(mixprec::promotable_with<x64_off, double, std::int64_t>);
  STATIC_REQUIRE_FALSE(mixprec::promotable_with<strict, float, double>);
  STATIC_REQUIRE_FALSE(mixprec::promotable_with<strict, bool, weak<int>>);
  STATIC_REQUIRE(mixprec::promotable_with<strict, float, weak<int>>);
}

}  // namespace promote_t_test
