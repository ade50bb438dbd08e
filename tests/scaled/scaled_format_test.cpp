// Tests of mixprec/scaled/scaled_format.hpp: each format's largest value and range against the values
// published in the format specifications (OCP 8-bit Floating Point Specification rev. 1.0, IEEE 754
// binary16), and the hybrid rule's test on the proposal's worked example.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/scaled/scaled_format.hpp"

namespace scaled_format_test {

using namespace mixprec;

static_assert(scaled_format<float8_e4m3fn> && scaled_format<float8_e5m2> && scaled_format<float16> &&
              scaled_format<bfloat16> && scaled_format<float4_e2m1fn> && scaled_format<std::int8_t>);
static_assert(!scaled_format<float8_e8m0fnu> && !scaled_format<float> && !scaled_format<std::uint8_t>);

TEST_CASE("format_max and format_range against the specifications", "[scaled]") {
  // OCP FP8: E4M3 max 448, min normal 2^-6; E5M2 max 57344, min normal 2^-14. binary16: 65504, 2^-14.
  CHECK(format_max<float8_e4m3fn>() == 448.0);
  CHECK(format_range<float8_e4m3fn>() == 448.0 * 64.0);  // 28672
  CHECK(format_max<float8_e5m2>() == 57344.0);
  CHECK(format_range<float8_e5m2>() == 57344.0 * std::ldexp(1.0, 14));
  CHECK(format_max<float16>() == 65504.0);
  CHECK(format_range<float16>() == 65504.0 * std::ldexp(1.0, 14));
  // bfloat16: (2 - 2^-7) 2^127 over 2^-126.
  CHECK(format_max<bfloat16>() == (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127));
  // OCP MX FP4 E2M1: max 6, min normal 1.
  CHECK(format_range<float4_e2m1fn>() == 6.0);
  // int8, symmetric: 127, over 8 (the integers with e4m3fn's 4 significant bits).
  CHECK(format_max<std::int8_t>() == 127.0);
  CHECK(format_range<std::int8_t>() == 127.0 / 8.0);
}

TEST_CASE("quantisation_unit: M for a worst-case scale, 1 or INT_MAX/4 for an average-case one", "[scaled]") {
  CHECK(quantisation_unit<float8_e4m3fn>(scale_rule::worst_case) == 448.0);
  CHECK(quantisation_unit<float8_e4m3fn>(scale_rule::hybrid) == 448.0);
  CHECK(quantisation_unit<float8_e4m3fn>(scale_rule::average_case) == 1.0);
  CHECK(quantisation_unit<std::int8_t>(scale_rule::worst_case) == 127.0);
  CHECK(quantisation_unit<std::int8_t>(scale_rule::average_case) == 127.0 / 4.0);
}

TEST_CASE("needs_requantise: the proposal's example exceeds e4m3fn's range, the requantised one does not", "[scaled]") {
  // 4194304 / 128 = 32768 > 28672; 524288 / 256 = 2048.
  CHECK(needs_requantise<float8_e4m3fn>({4194304, 128}));
  CHECK_FALSE(needs_requantise<float8_e4m3fn>({524288, 256}));
  // The boundary: a ratio equal to the range is still representable.
  CHECK_FALSE(needs_requantise<float8_e4m3fn>({28672, 1}));
  CHECK(needs_requantise<float8_e4m3fn>({28672.001, 1}));
  // e5m2 has far more range; int8 far less ("requantisation would happen much more frequently in
  // integer formats").
  CHECK_FALSE(needs_requantise<float8_e5m2>({4194304, 128}));
  CHECK(needs_requantise<std::int8_t>({16, 1}));
  CHECK_FALSE(needs_requantise<std::int8_t>({15.875, 1}));
}

TEST_CASE("exact_compute_t: float8 and int8 multiply as bfloat16, float16 as float16, bfloat16 data in double",
          "[scaled]") {
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<float8_e4m3fn, float8_e5m2>, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<std::int8_t, float8_e4m3fn>, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<float16, float8_e4m3fn>, float16>);
  // bfloat16 data reach 3.4e38: one product of two overflows float32, so they multiply in double.
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<float16, bfloat16>, double>);
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<bfloat16, bfloat16>, double>);
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<bfloat16, float8_e4m3fn>, double>);
  STATIC_REQUIRE(std::is_same_v<detail::exact_compute_t<float16, float16>, float16>);
}

}  // namespace scaled_format_test
