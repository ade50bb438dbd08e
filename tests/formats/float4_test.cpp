// Tests of mixprec/formats/float4.hpp: OCP Microscaling (MX) v1.0 FP4 E2M1 (bias 1, no Inf, no NaN),
// whose values are +-{0, 0.5, 1, 1.5, 2, 3, 4, 6} (OCP MX v1.0; ml_dtypes mxfloat.h / mxfloat_test.cc;
// gfloat's value statistics for ocp_e2m1: smallest 0.5, smallest normal 1, max 6).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace float4_test {

namespace {
using mixprec::float4_e2m1fn;
constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST_CASE("float4_e2m1fn patterns 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and 8..15 their negatives", "[float4]") {
  // S.EE.M: E = 0 subnormal M/2 * 2^(1-1); E >= 1: (1 + M/2) * 2^(E - 1).
  const double values[8] = {0.0,   // 0.00.0
                            0.5,   // 0.00.1: 1/2 * 2^0, min subnormal
                            1.0,   // 0.01.0: 2^0, min normal
                            1.5,   // 0.01.1
                            2.0,   // 0.10.0: 2^1
                            3.0,   // 0.10.1: 1.5 * 2
                            4.0,   // 0.11.0: 2^2
                            6.0};  // 0.11.1: 1.5 * 4, max
  for (std::uint8_t p = 0; p < 8; ++p) {
    CHECK(static_cast<double>(float4_e2m1fn::from_bits(p)) == values[p]);
    CHECK(static_cast<double>(float4_e2m1fn::from_bits(static_cast<std::uint8_t>(p | 8))) == -values[p]);
    CHECK(float4_e2m1fn(static_cast<float>(values[p])).bits() == p);
    CHECK(float4_e2m1fn(-values[p]).bits() == (p | 8));
  }
}

TEST_CASE("float4_e2m1fn rounds to nearest with ties to the even pattern", "[float4]") {
  CHECK(float4_e2m1fn(0.25F).bits() == 0x0);  // 0 (0x0) vs 0.5 (0x1): even 0
  CHECK(float4_e2m1fn(0.26F).bits() == 0x1);
  CHECK(float4_e2m1fn(0.75F).bits() == 0x2);  // 0.5 (0x1) vs 1 (0x2): even 1
  CHECK(float4_e2m1fn(1.25F).bits() == 0x2);  // 1 (0x2) vs 1.5 (0x3): even 1
  CHECK(float4_e2m1fn(1.75F).bits() == 0x4);  // 1.5 (0x3) vs 2 (0x4): even 2
  CHECK(float4_e2m1fn(2.5F).bits() == 0x4);   // 2 (0x4) vs 3 (0x5): even 2
  CHECK(float4_e2m1fn(3.5F).bits() == 0x6);   // 3 (0x5) vs 4 (0x6): even 4
  CHECK(float4_e2m1fn(5.0F).bits() == 0x6);   // 4 (0x6) vs 6 (0x7): even 4
  CHECK(float4_e2m1fn(5.01F).bits() == 0x7);
  CHECK(float4_e2m1fn(-5.0F).bits() == 0xE);
  CHECK(float4_e2m1fn(-0.25F).bits() == 0x8);  // -0
  CHECK(float4_e2m1fn(5).bits() == 0x6);       // integers round the same way
  CHECK(float4_e2m1fn(-3).bits() == 0xD);
  // ml_dtypes INT_VALUES for float4_e2m1fn: these round-trip.
  for (int v : {0, 1, 2, 3, 4, 6}) {
    CHECK(static_cast<double>(float4_e2m1fn(v)) == v);
    CHECK(static_cast<double>(float4_e2m1fn(-v)) == -v);
  }
}

TEST_CASE("float4_e2m1fn saturates overflow and infinities to +-6 and maps NaN as ml_dtypes does", "[float4]") {
  CHECK(float4_e2m1fn(7.0F).bits() == 0x7);  // overflow midpoint (6 vs 8): still 6
  CHECK(float4_e2m1fn(100.0F).bits() == 0x7);
  CHECK(float4_e2m1fn(-100.0).bits() == 0xF);
  CHECK(float4_e2m1fn(inf).bits() == 0x7);  // ml_dtypes FloatMXTest.NoInfinity
  CHECK(float4_e2m1fn(-inf).bits() == 0xF);
  CHECK(float4_e2m1fn(1000000).bits() == 0x7);
  CHECK(float4_e2m1fn(qnan).bits() == 0x8);   // quiet_NaN() = 0b1'00'0 (-0)
  CHECK(float4_e2m1fn(-qnan).bits() == 0x0);  // -quiet_NaN() = +0
  CHECK_FALSE(isnan(float4_e2m1fn(qnan)));
}

TEST_CASE("float4_e2m1fn arithmetic on the 16 x 16 patterns rounds the exact result", "[float4][arithmetic]") {
  // Hand-picked cases of the exhaustive check in basic_float_test.cpp.
  const auto x = [](double v) { return float4_e2m1fn(v); };
  CHECK((x(1.5) + x(1.5)).bits() == 0x5);   // 3
  CHECK((x(3) + x(0.5)).bits() == 0x6);     // 3.5: tie between 3 and 4 -> 4
  CHECK((x(4) + x(1)).bits() == 0x6);       // 5: tie between 4 and 6 -> 4
  CHECK((x(6) + x(6)).bits() == 0x7);       // 12 saturates to 6
  CHECK((x(1.5) * x(1.5)).bits() == 0x4);   // 2.25 -> 2
  CHECK((x(1) / x(3)).bits() == 0x1);       // 0.333 -> 0.5 (0.25 is the tie point)
  CHECK((x(0.5) * x(0.5)).bits() == 0x0);   // 0.25: tie between 0 and 0.5 -> 0
  CHECK((x(-0.5) * x(0.5)).bits() == 0x8);  // -0.25 -> -0
  CHECK((x(1) / x(0)).bits() == 0x7);       // +Inf saturates to 6
  CHECK((x(-1) / x(0)).bits() == 0xF);
}

}  // namespace float4_test
