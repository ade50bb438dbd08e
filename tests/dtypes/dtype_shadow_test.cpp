// The core headers compile under -Wshadow as errors, included as ordinary (not system) headers: the
// dtype enumerators int2, int4, uint2 and uint4 do not shadow the types mixprec::int2, ... for GCC
// (issue 13). The pragma below makes every -Wshadow warning in what follows an error, whatever
// flags the test is built with.
#include <catch2/catch.hpp>

#include <string_view>
#include <type_traits>

#if defined(__GNUC__)
#pragma GCC diagnostic error "-Wshadow"
#endif

#include "mixprec/core.hpp"

TEST_CASE("the dtype enumerators int2, int4, uint2, uint4 live beside the types of the same name", "[dtype][shadow]") {
  STATIC_REQUIRE(mixprec::dtype_of_v<mixprec::int2> == mixprec::dtype::int2);
  STATIC_REQUIRE(mixprec::dtype_of_v<mixprec::int4> == mixprec::dtype::int4);
  STATIC_REQUIRE(mixprec::dtype_of_v<mixprec::uint2> == mixprec::dtype::uint2);
  STATIC_REQUIRE(mixprec::dtype_of_v<mixprec::uint4> == mixprec::dtype::uint4);
  STATIC_REQUIRE(std::is_same_v<mixprec::type_of_t<mixprec::dtype::int4>, mixprec::int4>);
  STATIC_REQUIRE(std::is_same_v<mixprec::type_of_t<mixprec::dtype::uint2>, mixprec::uint2>);
}

TEST_CASE("functions of dtype are found by argument-dependent lookup", "[dtype][shadow]") {
  // Unqualified calls from outside namespace mixprec.
  const mixprec::dtype d = mixprec::dtype::int4;
  CHECK(name(d) == std::string_view("int4"));
  CHECK(is_signed_integer(d));
  // JAX: int8 and int16 promote to int16.
  CHECK(promote_types(mixprec::dtype::int8, mixprec::dtype::int16) == mixprec::dtype::int16);
}
