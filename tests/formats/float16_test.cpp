// Tests of mixprec/formats/float16.hpp: IEEE 754-2019 binary16 (1 sign, 5 exponent bits with bias 15,
// 10 trailing significand bits). Expected values are written by hand from the standard's formula
// (arithmetic in the comments), checked against tests/types/reference_format.hpp on random inputs,
// and cross-checked against Eigen 3.4's Eigen::half (float_to_half_rtne) on float inputs.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace float16_test {

namespace {

using mixprec::float16;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::show;

constexpr float inf = std::numeric_limits<float>::infinity();

const mixprec_test::reference& ref() { return mixprec_test::reference_of<float16>(); }

double value(std::uint16_t p) { return static_cast<double>(float16::from_bits(p)); }

}  // namespace

TEST_CASE("float16 decodes the binary16 landmarks", "[float16]") {
  CHECK(value(0x3C00) == 1.0);             // 0.01111.0000000000: 2^(15 - 15)
  CHECK(value(0x3C01) == 1.0 + 0x1p-10);   // next after 1: 1 + 2^-10
  CHECK(value(0x3BFF) == 1.0 - 0x1p-11);   // previous before 1: (1 + 1023/1024) * 2^-1
  CHECK(value(0xC000) == -2.0);            // 1.10000.0000000000
  CHECK(value(0x7BFF) == 65504.0);         // 0.11110.1111111111: (1 + 1023/1024) * 2^15, max
  CHECK(value(0x0400) == 0x1p-14);         // 0.00001.0000000000: min normal
  CHECK(value(0x03FF) == 1023 * 0x1p-24);  // max subnormal: 1023/1024 * 2^-14
  CHECK(value(0x0001) == 0x1p-24);         // min subnormal: 1/1024 * 2^-14
  CHECK(value(0x3555) == 0x1.554p-2);      // 0.01101.0101010101 = 0.333251953125 (nearest to 1/3)
  CHECK(value(0x7C00) == inf);
  CHECK(value(0xFC00) == -inf);
  CHECK(std::isnan(value(0x7E00)));
  CHECK(std::signbit(value(0x8000)));
}

TEST_CASE("float16 rounds to nearest even, overflows to Inf from 65520 and underflows below 2^-25", "[float16]") {
  CHECK(float16(65504.0F).bits() == 0x7BFF);
  // 65520 = 65504 + 16 is the midpoint of max (odd mantissa 0x3FF) and 65536 (the even step, Inf).
  CHECK(float16(65520.0F).bits() == 0x7C00);
  CHECK(float16(65519.0F).bits() == 0x7BFF);
  CHECK(float16(std::nextafter(65520.0, 0.0)).bits() == 0x7BFF);
  CHECK(float16(-65520.0F).bits() == 0xFC00);
  CHECK(float16(1e10F).bits() == 0x7C00);
  CHECK(float16(0x1p-24F).bits() == 0x0001);
  CHECK(float16(0x1p-25F).bits() == 0x0000);   // half of 2^-24: tie to +0
  CHECK(float16(-0x1p-25F).bits() == 0x8000);  // -0
  CHECK(float16(std::nextafter(0x1p-25F, 1.0F)).bits() == 0x0001);
  CHECK(float16(0x1.8p-24F).bits() == 0x0002);  // 1.5 * 2^-24: tie to the even 0x0002
  CHECK(float16(1.0F / 3.0F).bits() == 0x3555);
  CHECK(float16(1.0 / 3.0).bits() == 0x3555);
  CHECK(float16(inf).bits() == 0x7C00);
  CHECK(float16(-inf).bits() == 0xFC00);
  CHECK(float16(std::numeric_limits<float>::quiet_NaN()).bits() == 0x7E00);
  CHECK(float16(-std::numeric_limits<double>::quiet_NaN()).bits() == 0xFE00);
}

TEST_CASE("float16 from double rounds once: no double rounding through float", "[float16]") {
  // 1 + 2^-11 is the midpoint of 1.0 (0x3C00) and 1 + 2^-10 (0x3C01); 2^-40 more is lost in float.
  const double above = 1.0 + 0x1p-11 + 0x1p-40;
  REQUIRE(static_cast<double>(static_cast<float>(above)) == 1.0 + 0x1p-11);
  CHECK(float16(static_cast<float>(above)).bits() == 0x3C00);
  CHECK(float16(above).bits() == 0x3C01);
  CHECK(float16(-above).bits() == 0xBC01);
  // At the overflow boundary: 65520 - 2^-20 is 65520 in float (ulp 2^-8 there), but below it.
  CHECK(float16(65520.0 - 0x1p-20).bits() == 0x7BFF);
  // In the subnormal range: 2^-25 + 2^-60 is 2^-25 in float but above the tie.
  CHECK(float16(0x1p-25 + 0x1p-60).bits() == 0x0001);
}

TEST_CASE("float16 from integers rounds the exact integer", "[float16][integer]") {
  CHECK(float16(2048).bits() == 0x6800);  // 2^11: 0.11010.0000000000
  CHECK(float16(2049).bits() == 0x6800);  // midpoint of 2048 and 2050: even 2048
  CHECK(float16(2051).bits() == 0x6802);  // midpoint of 2050 (0x6801) and 2052 (0x6802): even 2052
  CHECK(float16(65504).bits() == 0x7BFF);
  CHECK(float16(65519).bits() == 0x7BFF);
  CHECK(float16(65520).bits() == 0x7C00);
  CHECK(float16(-65520).bits() == 0xFC00);
  CHECK(float16(std::numeric_limits<std::int64_t>::max()).bits() == 0x7C00);
  CHECK(float16(std::numeric_limits<std::int64_t>::min()).bits() == 0xFC00);
  CHECK(float16(std::numeric_limits<std::uint64_t>::max()).bits() == 0x7C00);
  CHECK(float16(0).bits() == 0x0000);
  CHECK(float16(std::uint8_t{255}).bits() == 0x5BF8);  // 255 = 1.9921875 * 2^7: 0.10110.1111111000
}

TEST_CASE("float16 conversions of random floats and doubles match the reference and Eigen::half",
          "[float16][conversion][random]") {
  std::mt19937_64 rng(0xF16F16ULL);
  mismatches bad;
  for (int n = 0; n < 150000; ++n) {
    const float xf = mixprec_test::random_float(rng, -27, 17);
    const double xd = mixprec_test::random_double(rng, -27, 17);
    const auto gf = float16(xf).bits();
    const auto gd = float16(xd).bits();
    const auto ef = ref().round(xf);
    if (gf != ef) bad.add("float " + show(xf) + ": expected " + hex(ef) + ", got " + hex(gf));
    if (gd != ref().round(xd))
      bad.add("double " + show(xd) + ": expected " + hex(ref().round(xd)) + ", got " + hex(gd));
    const auto eigen = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(xf));
    const bool eigen_agrees = std::isnan(xf) ? ref().is_nan(eigen) : eigen == ef;
    if (!eigen_agrees)
      bad.add("REFERENCE vs Eigen, float " + show(xf) + ": reference " + hex(ef) + ", Eigen " + hex(eigen));
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}

TEST_CASE("float16 + - * / of random pairs are correctly rounded", "[float16][arithmetic][random]") {
  std::mt19937_64 rng(0xF16A417ULL);
  mismatches bad;
  for (int n = 0; n < 40000; ++n) {
    const auto pa = static_cast<std::uint32_t>(rng() & 0xFFFFU);
    auto pb = static_cast<std::uint32_t>(rng() & 0xFFFFU);
    if (n % 2 == 1) pb = (pb & 0x8000U) | ((pa + (rng() % 32U) * 1024U) & 0x7FFFU);  // close exponents
    const auto x = float16::from_bits(static_cast<std::uint16_t>(pa));
    const auto y = float16::from_bits(static_cast<std::uint16_t>(pb));
    const double a = ref().decode(pa);
    const double b = ref().decode(pb);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    const std::uint32_t expected[4] = {ref().round_sum(a, b), ref().round_sum(a, -b), ref().round(a * b),
                                       b == 0 ? ref().round(a / b) : ref().round_quotient(a, b)};
    const std::uint32_t got[4] = {(x + y).bits(), (x - y).bits(), (x * y).bits(), (x / y).bits()};
    for (int k = 0; k < 4; ++k) {
      const bool same = ref().is_nan(expected[k]) ? ref().is_nan(got[k]) : got[k] == expected[k];
      if (!same)
        bad.add(hex(pa) + " op" + std::to_string(k) + " " + hex(pb) + ": expected " + hex(expected[k]) + ", got " +
                hex(got[k]));
    }
  }
  INFO("op0..3 = + - * /: " << bad.report());
  CHECK(bad.count() == 0);
}

}  // namespace float16_test
