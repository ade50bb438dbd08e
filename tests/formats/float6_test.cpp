// Tests of mixprec/formats/float6.hpp: the OCP Microscaling (MX) v1.0 FP6 element types E2M3 (bias 1)
// and E3M2 (bias 3), which have no Inf and no NaN. Every value is written out from the formula
// (the arithmetic is in the comments); ranges agree with ml_dtypes' mxfloat.h / mxfloat_test.cc and
// graphcore-research/gfloat's published value statistics (ocp_e2m3: smallest 0.125, smallest normal
// 1, max 7.5; ocp_e3m2: smallest 0.0625, smallest normal 0.25, max 28).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace float6_test {

namespace {

using mixprec::float6_e2m3fn;
using mixprec::float6_e3m2fn;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::show;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("float6_e2m3fn has the 32 magnitudes of OCP MX FP6 E2M3", "[float6][e2m3fn]") {
  // E = 0: subnormal m/8 * 2^(1 - 1) = m/8 -> 0, 0.125, ..., 0.875
  // E = 1..3: (1 + m/8) * 2^(E - 1)  -> 1 .. 1.875, 2 .. 3.75, 4 .. 7.5
  for (std::uint8_t p = 0; p < 32; ++p) {
    const int e = p >> 3;
    const int m = p & 7;
    const double expected = e == 0 ? m / 8.0 : (1.0 + m / 8.0) * std::ldexp(1.0, e - 1);
    INFO(hex(p));
    CHECK(static_cast<double>(float6_e2m3fn::from_bits(p)) == expected);
    CHECK(static_cast<double>(float6_e2m3fn::from_bits(static_cast<std::uint8_t>(p | 0x20))) == -expected);
  }
  CHECK(static_cast<double>(float6_e2m3fn::from_bits(0x1F)) == 7.5);        // 0.11.111: 1.875 * 2^2, max
  CHECK(static_cast<double>(float6_e2m3fn::from_bits(0x08)) == 1.0);        // 0.01.000: min normal
  CHECK(static_cast<double>(float6_e2m3fn::from_bits(0x01)) == 0.125);      // 0.00.001: min subnormal
  CHECK(std::signbit(static_cast<float>(float6_e2m3fn::from_bits(0x20))));  // -0
}

TEST_CASE("float6_e3m2fn has the 32 magnitudes of OCP MX FP6 E3M2", "[float6][e3m2fn]") {
  // E = 0: m/4 * 2^(1 - 3) -> 0, 0.0625, 0.125, 0.1875; E = 1..7: (1 + m/4) * 2^(E - 3) -> 0.25 .. 28
  for (std::uint8_t p = 0; p < 32; ++p) {
    const int e = p >> 2;
    const int m = p & 3;
    const double expected = e == 0 ? m / 4.0 * 0.25 : (1.0 + m / 4.0) * std::ldexp(1.0, e - 3);
    INFO(hex(p));
    CHECK(static_cast<double>(float6_e3m2fn::from_bits(p)) == expected);
    CHECK(static_cast<double>(float6_e3m2fn::from_bits(static_cast<std::uint8_t>(p | 0x20))) == -expected);
  }
  CHECK(static_cast<double>(float6_e3m2fn::from_bits(0x1F)) == 28.0);    // 0.111.11: 1.75 * 2^4, max
  CHECK(static_cast<double>(float6_e3m2fn::from_bits(0x04)) == 0.25);    // 0.001.00: min normal
  CHECK(static_cast<double>(float6_e3m2fn::from_bits(0x01)) == 0.0625);  // 0.000.01: min subnormal
}

TEST_CASE("float6 formats saturate overflow and infinities to +-max (no Inf, no NaN)", "[float6]") {
  // ml_dtypes FloatMXTest.NoInfinity: T(INFINITY) == max(), T(-INFINITY) == lowest().
  CHECK(float6_e2m3fn(inf).bits() == 0x1F);
  CHECK(float6_e2m3fn(-inf).bits() == 0x3F);
  CHECK(float6_e3m2fn(inf).bits() == 0x1F);
  CHECK(float6_e3m2fn(-inf).bits() == 0x3F);
  CHECK(float6_e2m3fn(7.75F).bits() == 0x1F);  // the overflow midpoint (7.5 vs 8) still gives max
  CHECK(float6_e2m3fn(1000.0F).bits() == 0x1F);
  CHECK(float6_e2m3fn(-1000.0).bits() == 0x3F);
  CHECK(float6_e3m2fn(30.0F).bits() == 0x1F);  // 28 vs 32
  CHECK(float6_e3m2fn(1e30F).bits() == 0x1F);
  CHECK(float6_e2m3fn(1000).bits() == 0x1F);  // integers too
  CHECK(float6_e3m2fn(-1000).bits() == 0x3F);
}

TEST_CASE("float6 NaN inputs take ml_dtypes' pattern: +NaN -> 1.00.000 (-0), -NaN -> +0", "[float6]") {
  // ml_dtypes mxfloat.h: quiet_NaN() = 0b1'00'000 ("conversion from NaNs is implementation-defined by
  // the MX specification"); a NaN with the sign bit set converts to -quiet_NaN() = +0.
  CHECK(float6_e2m3fn(qnan).bits() == 0x20);
  CHECK(float6_e2m3fn(-qnan).bits() == 0x00);
  CHECK(float6_e3m2fn(qnan).bits() == 0x20);
  CHECK(float6_e3m2fn(static_cast<double>(-qnan)).bits() == 0x00);
  CHECK_FALSE(isnan(float6_e2m3fn(qnan)));  // no NaN exists
  CHECK(isfinite(float6_e2m3fn(qnan)));
}

TEST_CASE("float6 rounding examples: ties go to the even pattern", "[float6]") {
  CHECK(float6_e2m3fn(0.0625F).bits() == 0x00);  // half of 0.125: tie, even 0
  CHECK(float6_e2m3fn(0.1875F).bits() == 0x02);  // 0.125 (0x01) vs 0.25 (0x02): even 0x02
  CHECK(float6_e2m3fn(0.9375F).bits() == 0x08);  // 0.875 (0x07) vs 1.0 (0x08): even 1.0
  CHECK(float6_e2m3fn(1.0625F).bits() == 0x08);  // 1.0 (0x08) vs 1.125 (0x09): even 1.0
  CHECK(float6_e2m3fn(5.0F).bits() == 0x1A);     // exact: (1 + 2/8) * 4
  CHECK(float6_e2m3fn(5.25F).bits() == 0x1A);    // 5 (0x1A) vs 5.5 (0x1B): even 5
  CHECK(float6_e2m3fn(-0.0F).bits() == 0x20);
  CHECK(float6_e3m2fn(0.03125F).bits() == 0x00);  // half of 0.0625: tie, even 0
  CHECK(float6_e3m2fn(26.0F).bits() == 0x1E);     // 24 (0x1E) vs 28 (0x1F): even 24
  CHECK(float6_e3m2fn(26.01F).bits() == 0x1F);
  // ml_dtypes INT_VALUES: these integers round-trip exactly.
  for (int v : {0, 1, 2, 3, 4, 5, 6, 7}) CHECK(static_cast<double>(float6_e2m3fn(v)) == v);
  for (int v : {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28})
    CHECK(static_cast<double>(float6_e3m2fn(v)) == v);
}

TEST_CASE("float6 negation flips the sign bit and signbit reads it (ml_dtypes Negate, Signbit)", "[float6]") {
  for (std::uint8_t p = 0; p < 32; ++p) {
    const auto pos = float6_e2m3fn::from_bits(p);
    const auto neg = float6_e2m3fn::from_bits(static_cast<std::uint8_t>(p | 0x20));
    CHECK((-pos).bits() == neg.bits());
    CHECK((-neg).bits() == pos.bits());
    CHECK_FALSE(signbit(pos));
    CHECK(signbit(neg));
  }
}

TEMPLATE_TEST_CASE("random float and double inputs convert to float6 as the reference rounds them",
                   "[float6][conversion][random]", float6_e2m3fn, float6_e3m2fn) {
  const auto& ref = mixprec_test::reference_of<TestType>();
  std::mt19937_64 rng(0xF6F6ULL);
  mismatches bad;
  for (int n = 0; n < 25000; ++n) {
    const float xf = mixprec_test::random_float(rng, -8, 6);
    const double xd = mixprec_test::random_double(rng, -8, 6);
    if (TestType(xf).bits() != ref.round(xf))
      bad.add("float " + show(xf) + ": expected " + hex(ref.round(xf)) + ", got " + hex(TestType(xf).bits()));
    if (TestType(xd).bits() != ref.round(xd))
      bad.add("double " + show(xd) + ": expected " + hex(ref.round(xd)) + ", got " + hex(TestType(xd).bits()));
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

}  // namespace float6_test
