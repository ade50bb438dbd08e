// Tests of mixprec/formats/bfloat16.hpp: bfloat16 is the top 16 bits of an IEEE binary32 (sign, 8
// exponent bits with bias 127, 7 mantissa bits), rounded to nearest even. Expected values are
// written by hand from that definition (the bit arithmetic is in the comments), checked against
// tests/types/reference_format.hpp on random inputs, and cross-checked against Eigen 3.4's
// Eigen::bfloat16 (a real, independent implementation: float_to_bfloat16_rtne) on float inputs.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace bfloat16_test {

namespace {

using mixprec::bfloat16;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::show;

constexpr float inf = std::numeric_limits<float>::infinity();

float from_float_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

const mixprec_test::reference& ref() { return mixprec_test::reference_of<bfloat16>(); }

}  // namespace

TEST_CASE("bfloat16 spec values", "[bfloat16]") {
  CHECK(bfloat16(1.0F).bits() == 0x3F80);   // 0.01111111.0000000: 2^(127 - 127)
  CHECK(bfloat16(-2.0F).bits() == 0xC000);  // 1.10000000.0000000: -2^(128 - 127)
  // pi = 1.5707963 * 2^1: mantissa 0.5707963 * 128 = 73.06 -> 73 = 0x49; exponent 128 -> 0x4049.
  CHECK(bfloat16(3.14159265F).bits() == 0x4049);
  CHECK(bfloat16(3.14159265358979).bits() == 0x4049);
  CHECK(static_cast<double>(bfloat16::from_bits(0x4049)) == 3.140625);  // (1 + 73/128) * 2
  // max = 0.11111110.1111111 = (1 + 127/128) * 2^(254 - 127) = 0x1.FEp127
  CHECK(static_cast<double>(bfloat16::from_bits(0x7F7F)) == 0x1.FEp127);
  CHECK(static_cast<double>(bfloat16::from_bits(0x0080)) == 0x1p-126);        // min normal
  CHECK(static_cast<double>(bfloat16::from_bits(0x007F)) == 127 * 0x1p-133);  // max subnormal
  CHECK(static_cast<double>(bfloat16::from_bits(0x0001)) == 0x1p-133);        // 1/128 * 2^-126: min subnormal
  CHECK(static_cast<float>(bfloat16::from_bits(0x7F80)) == inf);
  CHECK(static_cast<float>(bfloat16::from_bits(0xFF80)) == -inf);
  CHECK(bfloat16(std::numeric_limits<float>::quiet_NaN()).bits() == 0x7FC0);
  CHECK(bfloat16(-std::numeric_limits<float>::quiet_NaN()).bits() == 0xFFC0);
  CHECK(bfloat16(0.0F).bits() == 0x0000);
  CHECK(bfloat16(-0.0F).bits() == 0x8000);
}

TEST_CASE("bfloat16 from float keeps the top half, rounded to nearest even (guard/sticky table)", "[bfloat16]") {
  // L = bit 16 (last kept), R = bit 15 (first dropped), S = bits 14..0 (sticky).
  struct row {
    std::uint32_t f;
    std::uint16_t bf;
  };
  const row rows[] = {
      {0x3F800000, 0x3F80},  // exact
      {0x3F807FFF, 0x3F80},  // R=0: down
      {0x3F808000, 0x3F80},  // L=0, R=1, S=0: tie, stays even
      {0x3F808001, 0x3F81},  // L=0, R=1, S=1: above half, up
      {0x3F818000, 0x3F82},  // L=1, R=1, S=0: tie, up to even
      {0x3F817FFF, 0x3F81},  // L=1, R=0: down
      {0x3FFF8000, 0x4000},  // tie at the top of a binade: carries into the exponent (2.0)
      {0x7F7F7FFF, 0x7F7F},  // just below the overflow midpoint: max
      {0x7F7F8000, 0x7F80},  // max + half ulp: tie, the even neighbour is Inf
      {0x7F7FFFFF, 0x7F80},  // float max: Inf
      {0x00008000, 0x0000},  // float subnormal 2^-134 = half of bf16's 2^-133: tie to +0
      {0x00008001, 0x0001},  // just above half: the smallest subnormal
      {0x00018000, 0x0002},  // 1.5 * 2^-133: tie, up to even
      {0x80008000, 0x8000},  // -2^-134: ties to -0
      {0x007F8000, 0x0080},  // largest subnormal + half: tie, carries to the min normal
      {0x00000001, 0x0000},  // float denorm_min: +0
      {0x7F800000, 0x7F80},  // +Inf
      {0xFF800000, 0xFF80},  // -Inf
      {0x7FC00000, 0x7FC0},  // quiet NaN
      {0x7F800001, 0x7FC0},  // signalling NaN -> canonical quiet NaN
      {0x7FFFFFFF, 0x7FC0},  // NaN with every payload bit -> canonical quiet NaN
      {0xFFC12345, 0xFFC0},  // negative NaN keeps its sign
  };
  for (const row& r : rows) {
    INFO("float bits " << hex(r.f));
    CHECK(bfloat16(from_float_bits(r.f)).bits() == r.bf);
    CHECK(bfloat16(static_cast<double>(from_float_bits(r.f))).bits() == r.bf);
  }
  // Eigen's test: bfloat16(3.40e38f) "Becomes infinity" (3.40e38 > max + half ulp = 0x1.FFp127).
  CHECK(bfloat16(3.40e38F).bits() == 0x7F80);
}

TEST_CASE("bfloat16 from double rounds once: no double rounding through float", "[bfloat16]") {
  // 1 + 2^-8 is the midpoint of 1.0 (0x3F80) and 1 + 2^-7 (0x3F81). A double above it by 2^-30 is,
  // in float, exactly the midpoint (2^-30 < half a float ulp at 1, 2^-24) and would tie down.
  const double above = 1.0 + 0x1p-8 + 0x1p-30;
  REQUIRE(static_cast<double>(static_cast<float>(above)) == 1.0 + 0x1p-8);
  CHECK(bfloat16(static_cast<float>(above)).bits() == 0x3F80);  // the float input is the tie itself
  CHECK(bfloat16(above).bits() == 0x3F81);                      // the double is above the midpoint
  CHECK(bfloat16(1.0 + 0x1p-8 - 0x1p-30).bits() == 0x3F80);
  CHECK(bfloat16(-above).bits() == 0xBF81);
  // The same at the overflow boundary: max + half ulp = 2^128 - 2^119 ties to Inf; a double just
  // below it must give max, although float would round it up onto the midpoint.
  const double below_overflow = 0x1.FFp127 - 0x1p90;
  REQUIRE(static_cast<double>(static_cast<float>(below_overflow)) == 0x1.FFp127);
  CHECK(bfloat16(below_overflow).bits() == 0x7F7F);
  // And in the subnormal range: half of 2^-133 plus a double-only bit rounds up to 2^-133.
  CHECK(bfloat16(0x1p-134 + 0x1p-170).bits() == 0x0001);
  CHECK(bfloat16(0x1p-134).bits() == 0x0000);
}

TEST_CASE("bfloat16 from 64-bit integers rounds the exact integer", "[bfloat16][integer]") {
  // 2^63 - 1 rounds to 2^63 = 0.10111110.0000000 (exponent 63 + 127 = 190 = 0xBE) -> 0x5F00.
  CHECK(bfloat16(std::numeric_limits<std::int64_t>::max()).bits() == 0x5F00);
  CHECK(bfloat16(std::numeric_limits<std::int64_t>::min()).bits() == 0xDF00);  // -2^63 exactly
  // 2^64 - 1 rounds to 2^64 (exponent 191 = 0xBF -> 0x5F80): far below bfloat16's max, no overflow.
  CHECK(bfloat16(std::numeric_limits<std::uint64_t>::max()).bits() == 0x5F80);
  // At 2^62 bfloat16's ulp is 2^55, so 2^62 + 2^54 is a midpoint (tie to even: 2^62 = 0x5E80) and
  // 2^62 + 2^54 + 1 is above it (0x5E81). Converting that integer to double first (ulp 2^10 there)
  // would give exactly the midpoint and tie the wrong way.
  const std::int64_t mid = (std::int64_t{1} << 62) + (std::int64_t{1} << 54);
  REQUIRE(static_cast<double>(mid + 1) == static_cast<double>(mid));
  CHECK(bfloat16(mid).bits() == 0x5E80);
  CHECK(bfloat16(mid + 1).bits() == 0x5E81);
  CHECK(bfloat16(mid - 1).bits() == 0x5E80);
  CHECK(bfloat16(-(mid + 1)).bits() == 0xDE81);
  CHECK(bfloat16(static_cast<std::uint64_t>(mid + 1)).bits() == 0x5E81);
  // 257 = 256 + 1: between 256 (0x4380) and 258 (0x4381), the midpoint is 257: tie to even 256.
  CHECK(bfloat16(257).bits() == 0x4380);
  CHECK(bfloat16(259).bits() == 0x4382);  // midpoint of 258 (0x4381) and 260 (0x4382): even 260
}

TEST_CASE("bfloat16 conversions of random floats and doubles match the reference and Eigen::bfloat16",
          "[bfloat16][conversion][random]") {
  std::mt19937_64 rng(0xBF16BF16ULL);
  mismatches bad;
  for (int n = 0; n < 150000; ++n) {
    const float xf = mixprec_test::random_float(rng, -136, 129);
    const double xd = mixprec_test::random_double(rng, -136, 129);
    const auto gf = bfloat16(xf).bits();
    const auto gd = bfloat16(xd).bits();
    const auto ef = ref().round(xf);
    if (gf != ef) bad.add("float " + show(xf) + ": expected " + hex(ef) + ", got " + hex(gf));
    if (gd != ref().round(xd))
      bad.add("double " + show(xd) + ": expected " + hex(ref().round(xd)) + ", got " + hex(gd));
    // Eigen::bfloat16(float) is round-to-nearest-even too; NaN compared by NaN-ness only.
    const auto eigen = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(xf));
    const bool eigen_agrees = std::isnan(xf) ? ref().is_nan(eigen) : eigen == ef;
    if (!eigen_agrees)
      bad.add("REFERENCE vs Eigen, float " + show(xf) + ": reference " + hex(ef) + ", Eigen " + hex(eigen));
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}

TEST_CASE("bfloat16 + - * / of random pairs are correctly rounded", "[bfloat16][arithmetic][random]") {
  std::mt19937_64 rng(0xA417ULL);
  mismatches bad;
  auto random_bits = [&] { return static_cast<std::uint32_t>(rng() & 0xFFFFU); };
  for (int n = 0; n < 40000; ++n) {
    std::uint32_t pa = random_bits();
    std::uint32_t pb = random_bits();
    if (n % 4 == 1) pb = (pa & 0x8000U) | ((pa + (rng() % 64U) * 128U) & 0x7FFFU);  // close exponents
    if (n % 4 == 2) {
      // quotients and products in the subnormal range
      pa = static_cast<std::uint32_t>((rng() % 0x0900U) | (rng() & 0x8000U));
      pb = static_cast<std::uint32_t>(0x3F00U + (rng() % 0x0A00U));
    }
    const auto x = bfloat16::from_bits(static_cast<std::uint16_t>(pa));
    const auto y = bfloat16::from_bits(static_cast<std::uint16_t>(pb));
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

}  // namespace bfloat16_test
