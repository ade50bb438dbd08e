// Tests of mixprec/formats/float8.hpp: the spec values of each float8 format, written out by hand
// from the format definitions (the arithmetic is in the comments), every pair of patterns through
// + - * /, and random float/double inputs against tests/types/reference_format.hpp.
//
// Sources: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0 (E4M3 = float8_e4m3fn, E5M2);
// OCP Microscaling Formats (MX) v1.0 (E8M0); jax-ml/ml_dtypes ml_dtypes/include/float8.h (biases
// and encodings of the fnuz, e3m4 and e4m3 types) and ml_dtypes/tests/float8_test.cc (the values
// marked "ml_dtypes" below are pinned there); docs/formats.md of this project for the choices the
// specs leave open (e8m0 ties go to the even exponent field).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace float8_test {

namespace {

using mixprec::float8_e3m4;
using mixprec::float8_e4m3;
using mixprec::float8_e4m3b11fnuz;
using mixprec::float8_e4m3fn;
using mixprec::float8_e4m3fnuz;
using mixprec::float8_e5m2;
using mixprec::float8_e5m2fnuz;
using mixprec::float8_e8m0fnu;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::reference_of;
using mixprec_test::show;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

template <class T>
T bits(std::uint8_t p) {
  return T::from_bits(p);
}
template <class T>
double value_of(std::uint8_t p) {
  return static_cast<double>(T::from_bits(p));
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// float8_e4m3fn (OCP E4M3): bias 7, no Inf, NaN = S.1111.111

TEST_CASE("float8_e4m3fn encodes the OCP E4M3 values", "[float8][e4m3fn]") {
  CHECK(value_of<float8_e4m3fn>(0x38) == 1.0);             // 0.0111.000: 1.0 * 2^(7 - 7)
  CHECK(value_of<float8_e4m3fn>(0x7E) == 448.0);           // 0.1111.110: (1 + 6/8) * 2^(15 - 7) = 448, max
  CHECK(value_of<float8_e4m3fn>(0xFE) == -448.0);          // 1.1111.110: -448, lowest
  CHECK(value_of<float8_e4m3fn>(0x08) == 0x1p-6);          // 0.0001.000: 1.0 * 2^(1 - 7), min normal
  CHECK(value_of<float8_e4m3fn>(0x07) == 0.875 * 0x1p-6);  // 0.0000.111: 7/8 * 2^(1 - 7), max subnormal
  CHECK(value_of<float8_e4m3fn>(0x01) == 0x1p-9);          // 0.0000.001: 1/8 * 2^-6 = 2^-9, min subnormal
  CHECK(value_of<float8_e4m3fn>(0x77) == 240.0);           // 0.1110.111: (1 + 7/8) * 2^7 (not the max here)
  CHECK(std::isnan(value_of<float8_e4m3fn>(0x7F)));        // 0.1111.111: NaN
  CHECK(std::isnan(value_of<float8_e4m3fn>(0xFF)));        // 1.1111.111: NaN
  CHECK(value_of<float8_e4m3fn>(0x78) == 256.0);           // 0.1111.000: 1.0 * 2^8, a number (no Inf)
  CHECK(std::signbit(value_of<float8_e4m3fn>(0x80)));      // -0
  CHECK(value_of<float8_e4m3fn>(0x80) == 0.0);
}

TEST_CASE("float8_e4m3fn rounds to nearest even and overflows to NaN past 464", "[float8][e4m3fn]") {
  CHECK(float8_e4m3fn(448.0F).bits() == 0x7E);
  // 464 is the midpoint of 448 = 1.110b * 2^8 and 480 = 1.111b * 2^8 (480 would be the NaN slot):
  // the tie goes to the even mantissa 110, i.e. 448. Anything above overflows to NaN (no Inf).
  CHECK(float8_e4m3fn(464.0F).bits() == 0x7E);
  CHECK(float8_e4m3fn(464.0).bits() == 0x7E);
  CHECK(float8_e4m3fn(std::nextafter(464.0F, inf)).bits() == 0x7F);
  CHECK(float8_e4m3fn(std::nextafter(464.0, 1000.0)).bits() == 0x7F);
  CHECK(float8_e4m3fn(-464.0F).bits() == 0xFE);
  CHECK(float8_e4m3fn(-465.0F).bits() == 0xFF);  // negative overflow: the NaN with the sign bit
  CHECK(float8_e4m3fn(480.0F).bits() == 0x7F);
  CHECK(float8_e4m3fn(500.0F).bits() == 0x7F);  // docs/formats.md example
  CHECK(float8_e4m3fn(1e6F).bits() == 0x7F);
  CHECK(float8_e4m3fn(inf).bits() == 0x7F);  // Inf -> NaN (ml_dtypes: infinity() is the NaN)
  CHECK(float8_e4m3fn(-inf).bits() == 0xFF);
  CHECK(float8_e4m3fn(qnan).bits() == 0x7F);
  CHECK(float8_e4m3fn(-qnan).bits() == 0xFF);
  // 300 lies between 288 = 1.001b * 2^8 and 320 = 1.010b * 2^8; the midpoint is 304: 288 = 0.1111.001.
  CHECK(float8_e4m3fn(300.0F).bits() == 0x79);
  CHECK(float8_e4m3fn(304.0F).bits() == 0x7A);  // tie: 1.001 vs 1.010 -> even mantissa 010 (320)
  CHECK(float8_e4m3fn(-0.0F).bits() == 0x80);
  CHECK(float8_e4m3fn(0x1p-10F).bits() == 0x00);  // half of 2^-9: tie between 0 and 2^-9 -> 0 (even)
  CHECK(float8_e4m3fn(0x1.000002p-10F).bits() == 0x01);
  CHECK(float8_e4m3fn(3.0F * 0x1p-10F).bits() == 0x02);  // 1.5 * 2^-9: tie between 0x01 and 0x02 -> 0x02
}

TEST_CASE("float8_e4m3fn never rounds twice through float (ml_dtypes DoubleRound)", "[float8][e4m3fn]") {
  // 1 + 2^-4 is the midpoint of 1.0 (0x38) and 1.125 (0x39); a double above it by less than half a
  // float ulp becomes exactly the midpoint in float and would then tie down to 1.0.
  const double above = 1.0 + 0x1p-4 + 0x1p-40;
  REQUIRE(static_cast<double>(static_cast<float>(above)) == 1.0 + 0x1p-4);
  CHECK(float8_e4m3fn(above).bits() == 0x39);
  CHECK(float8_e4m3fn(1.0 + 0x1p-4 - 0x1p-40).bits() == 0x38);
  // ml_dtypes' DoubleRoundHelper<double, float>: 1 + 2^-digits(e4m3fn) + 2^-digits(float) -> 1 + eps.
  CHECK(float8_e4m3fn(1.0 + 0x1p-4 + 0x1p-24).bits() == 0x39);
}

TEST_CASE("float8 formats round just-below-subnormal inputs up, as ml_dtypes pins", "[float8]") {
  // ml_dtypes ConvertFromWithTruncation: nexttoward(subnormal i, 0) rounds back to i for i = 1..3.
  auto check = [](auto tag) {
    using T = decltype(tag);
    for (std::uint8_t i = 1; i < 4; ++i) {
      const float below = std::nextafter(static_cast<float>(T::from_bits(i)), 0.0F);
      CHECK(T(below).bits() == i);
    }
  };
  check(float8_e4m3fn{});
  check(float8_e5m2{});
  check(float8_e4m3fnuz{});
  check(float8_e5m2fnuz{});
  check(float8_e4m3b11fnuz{});
  check(float8_e3m4{});
  check(float8_e4m3{});
  // ml_dtypes SmallCastToDenormal: a value between subnormals that rounds up to the next one.
  CHECK(static_cast<float>(float8_e3m4(0x0.8Ap-2F)) == 0x0.9p-2F);
  CHECK(static_cast<float>(float8_e4m3(0x0.94p-6F)) == 0x0.Ap-6F);
  CHECK(static_cast<float>(float8_e5m2(0x0.A8p-14F)) == 0x0.Cp-14F);
  // ml_dtypes ConvertFromWithTruncation: 0x3FFFFFFF (just below 2) rounds to 2.
  const float less_than_two = std::bit_cast<float>(0x3FFFFFFFU);
  CHECK(static_cast<float>(float8_e4m3fn(less_than_two)) == 2.0F);
  CHECK(static_cast<float>(float8_e5m2(less_than_two)) == 2.0F);
  CHECK(static_cast<float>(float8_e8m0fnu(less_than_two)) == 2.0F);
}

// ------------------------------------------------------------------------------------------------
// float8_e5m2 (OCP E5M2): bias 15, IEEE Inf/NaN

TEST_CASE("float8_e5m2 encodes the OCP E5M2 values", "[float8][e5m2]") {
  CHECK(value_of<float8_e5m2>(0x3C) == 1.0);       // 0.01111.00: 2^(15 - 15)
  CHECK(value_of<float8_e5m2>(0x7B) == 57344.0);   // 0.11110.11: (1 + 3/4) * 2^(30 - 15) = 57344, max
  CHECK(std::isinf(value_of<float8_e5m2>(0x7C)));  // 0.11111.00: +Inf
  CHECK(value_of<float8_e5m2>(0xFC) == -inf);      // 1.11111.00: -Inf
  CHECK(std::isnan(value_of<float8_e5m2>(0x7D)));  // 0.11111.01: NaN (signalling)
  CHECK(std::isnan(value_of<float8_e5m2>(0x7E)));  // 0.11111.10: NaN (quiet)
  CHECK(std::isnan(value_of<float8_e5m2>(0x7F)));
  CHECK(value_of<float8_e5m2>(0x04) == 0x1p-14);         // 0.00001.00: 2^(1 - 15), min normal
  CHECK(value_of<float8_e5m2>(0x03) == 0.75 * 0x1p-14);  // 0.00000.11: 3/4 * 2^-14, max subnormal
  CHECK(value_of<float8_e5m2>(0x01) == 0x1p-16);         // 0.00000.01: 1/4 * 2^-14 = 2^-16, min subnormal
}

TEST_CASE("float8_e5m2 rounds to nearest even and overflows to Inf from 61440", "[float8][e5m2]") {
  CHECK(float8_e5m2(57344.0F).bits() == 0x7B);
  // 61440 is the midpoint of 57344 = 1.11b * 2^15 and 65536 = 1.00b * 2^16: the tie goes to the even
  // pattern 0x7C, which is Inf (IEEE 754 §7.4: overflow when the unbounded-exponent result > max).
  CHECK(float8_e5m2(61440.0F).bits() == 0x7C);
  CHECK(float8_e5m2(std::nextafter(61440.0F, 0.0F)).bits() == 0x7B);
  // 60000 < 61440: it rounds to max, not to Inf. (docs/formats.md says "float8_e5m2(60000.f) is +Inf":
  // that example is wrong by this rule; 60000 = 1.83 * 2^15 rounds to 1.75 * 2^15.)
  CHECK(float8_e5m2(60000.0F).bits() == 0x7B);
  CHECK(float8_e5m2(-61440.0F).bits() == 0xFC);
  CHECK(float8_e5m2(1e9F).bits() == 0x7C);
  CHECK(float8_e5m2(inf).bits() == 0x7C);
  CHECK(float8_e5m2(-inf).bits() == 0xFC);
  // NaN -> the quiet NaN 0.11111.10 with the sign (ml_dtypes Half_To_Float8E5m2: 0x7E / 0xFE).
  CHECK(float8_e5m2(qnan).bits() == 0x7E);
  CHECK(float8_e5m2(-qnan).bits() == 0xFE);
  CHECK(float8_e5m2(std::bit_cast<float>(0x7F800001U)).bits() == 0x7E);  // signalling float NaN
  CHECK(float8_e5m2(0x1p-17F).bits() == 0x00);                           // half of 2^-16 ties to 0
  CHECK(float8_e5m2(-0x1p-17F).bits() == 0x80);                          // -0
  CHECK(float8_e5m2(0x1.8p-16F).bits() == 0x02);                         // 1.5 * 2^-16 ties to the even 0x02
}

// ------------------------------------------------------------------------------------------------
// fnuz formats: no Inf, no -0, the one NaN is 1.000...0

TEST_CASE("float8_e4m3fnuz: bias 8, max 240, one NaN 0x80, no -0", "[float8][e4m3fnuz]") {
  CHECK(value_of<float8_e4m3fnuz>(0x40) == 1.0);       // 0.1000.000: 2^(8 - 8)
  CHECK(value_of<float8_e4m3fnuz>(0x7F) == 240.0);     // 0.1111.111: (1 + 7/8) * 2^(15 - 8) = 240, max
  CHECK(value_of<float8_e4m3fnuz>(0xFF) == -240.0);    // lowest
  CHECK(value_of<float8_e4m3fnuz>(0x08) == 0x1p-7);    // 0.0001.000: 2^(1 - 8), min normal
  CHECK(value_of<float8_e4m3fnuz>(0x01) == 0x1p-10);   // 1/8 * 2^-7, min subnormal
  CHECK(std::isnan(value_of<float8_e4m3fnuz>(0x80)));  // the only NaN
  CHECK(float8_e4m3fnuz(-0.0F).bits() == 0x00);        // no -0
  CHECK(float8_e4m3fnuz(-0x1p-12F).bits() == 0x00);    // rounds to zero: +0, never 0x80
  CHECK(float8_e4m3fnuz(inf).bits() == 0x80);
  CHECK(float8_e4m3fnuz(-inf).bits() == 0x80);
  CHECK(float8_e4m3fnuz(qnan).bits() == 0x80);
  CHECK(float8_e4m3fnuz(-qnan).bits() == 0x80);
  // 248 = midpoint of 240 = 1.111b * 2^7 and 256 = 1.000b * 2^8: the tie goes to the even 256, which
  // overflows: NaN. Just below stays 240.
  CHECK(float8_e4m3fnuz(248.0F).bits() == 0x80);
  CHECK(float8_e4m3fnuz(std::nextafter(248.0F, 0.0F)).bits() == 0x7F);
  CHECK(float8_e4m3fnuz(-std::nextafter(248.0F, 0.0F)).bits() == 0xFF);
}

TEST_CASE("float8_e5m2fnuz: bias 16, max 57344, one NaN 0x80, no -0", "[float8][e5m2fnuz]") {
  CHECK(value_of<float8_e5m2fnuz>(0x40) == 1.0);      // 0.10000.00: 2^(16 - 16)
  CHECK(value_of<float8_e5m2fnuz>(0x7F) == 57344.0);  // 0.11111.11: (1 + 3/4) * 2^(31 - 16), max
  CHECK(value_of<float8_e5m2fnuz>(0x04) == 0x1p-15);  // 2^(1 - 16), min normal
  CHECK(value_of<float8_e5m2fnuz>(0x01) == 0x1p-17);  // 1/4 * 2^-15, min subnormal
  CHECK(std::isnan(value_of<float8_e5m2fnuz>(0x80)));
  CHECK(float8_e5m2fnuz(-0.0F).bits() == 0x00);
  CHECK(float8_e5m2fnuz(61440.0F).bits() == 0x80);  // tie with 65536 (even) -> overflow -> NaN
  CHECK(float8_e5m2fnuz(std::nextafter(61440.0F, 0.0F)).bits() == 0x7F);
  CHECK(float8_e5m2fnuz(inf).bits() == 0x80);
}

TEST_CASE("float8_e4m3b11fnuz: bias 11, max 30, one NaN 0x80, no -0", "[float8][e4m3b11fnuz]") {
  CHECK(value_of<float8_e4m3b11fnuz>(0x58) == 1.0);      // 0.1011.000: 2^(11 - 11)
  CHECK(value_of<float8_e4m3b11fnuz>(0x7F) == 30.0);     // 0.1111.111: (1 + 7/8) * 2^(15 - 11) = 30, max
  CHECK(value_of<float8_e4m3b11fnuz>(0x08) == 0x1p-10);  // 2^(1 - 11), min normal
  CHECK(value_of<float8_e4m3b11fnuz>(0x01) == 0x1p-13);  // 1/8 * 2^-10, min subnormal
  CHECK(std::isnan(value_of<float8_e4m3b11fnuz>(0x80)));
  CHECK(float8_e4m3b11fnuz(31.0F).bits() == 0x80);  // midpoint of 30 and 32: tie to even 32 -> NaN
  CHECK(float8_e4m3b11fnuz(30.99F).bits() == 0x7F);
  CHECK(float8_e4m3b11fnuz(-0.0).bits() == 0x00);
}

// ------------------------------------------------------------------------------------------------
// IEEE-like e3m4 and e4m3

TEST_CASE("float8_e3m4: bias 3, IEEE Inf/NaN, max 15.5", "[float8][e3m4]") {
  CHECK(value_of<float8_e3m4>(0x30) == 1.0);     // 0.011.0000: 2^(3 - 3)
  CHECK(value_of<float8_e3m4>(0x6F) == 15.5);    // 0.110.1111: (1 + 15/16) * 2^(6 - 3) = 15.5, max
  CHECK(value_of<float8_e3m4>(0x10) == 0.25);    // 0.001.0000: 2^(1 - 3), min normal
  CHECK(value_of<float8_e3m4>(0x01) == 0x1p-6);  // 1/16 * 2^-2, min subnormal
  CHECK(value_of<float8_e3m4>(0x70) == inf);     // 0.111.0000: Inf
  CHECK(std::isnan(value_of<float8_e3m4>(0x78)));
  // ml_dtypes Half_To_Float8E3m4: Inf 0x70 / 0xF0, NaN 0x78 / 0xF8.
  CHECK(float8_e3m4(inf).bits() == 0x70);
  CHECK(float8_e3m4(-inf).bits() == 0xF0);
  CHECK(float8_e3m4(qnan).bits() == 0x78);
  CHECK(float8_e3m4(-qnan).bits() == 0xF8);
  CHECK(float8_e3m4(15.75F).bits() == 0x70);  // midpoint of 15.5 and 16: tie to even 16 = Inf
  CHECK(float8_e3m4(std::nextafter(15.75F, 0.0F)).bits() == 0x6F);
}

TEST_CASE("float8_e4m3: bias 7, IEEE Inf/NaN, max 240", "[float8][e4m3]") {
  CHECK(value_of<float8_e4m3>(0x38) == 1.0);    // 0.0111.000: 2^(7 - 7)
  CHECK(value_of<float8_e4m3>(0x77) == 240.0);  // 0.1110.111: (1 + 7/8) * 2^(14 - 7) = 240, max
  CHECK(value_of<float8_e4m3>(0x78) == inf);    // 0.1111.000: Inf
  CHECK(std::isnan(value_of<float8_e4m3>(0x79)));
  CHECK(value_of<float8_e4m3>(0x08) == 0x1p-6);  // min normal
  CHECK(value_of<float8_e4m3>(0x01) == 0x1p-9);  // min subnormal
  // ml_dtypes Half_To_Float8E4m3: Inf 0x78 / 0xF8, NaN 0x7C / 0xFC.
  CHECK(float8_e4m3(inf).bits() == 0x78);
  CHECK(float8_e4m3(-inf).bits() == 0xF8);
  CHECK(float8_e4m3(qnan).bits() == 0x7C);
  CHECK(float8_e4m3(-qnan).bits() == 0xFC);
  CHECK(float8_e4m3(248.0F).bits() == 0x78);  // midpoint of 240 and 256: tie to even 256 = Inf
  CHECK(float8_e4m3(247.0F).bits() == 0x77);
  CHECK(float8_e4m3(448.0F).bits() == 0x78);  // e4m3fn's max overflows here
}

// ------------------------------------------------------------------------------------------------
// float8_e8m0fnu (OCP MX E8M0): unsigned powers of two 2^-127 .. 2^127, NaN 0xFF

TEST_CASE("float8_e8m0fnu encodes the powers of two 2^-127 .. 2^127 and NaN", "[float8][e8m0fnu]") {
  CHECK(value_of<float8_e8m0fnu>(0x7F) == 1.0);       // 2^(127 - 127)
  CHECK(value_of<float8_e8m0fnu>(0x00) == 0x1p-127);  // 2^(0 - 127): no zero, E = 0 is a number
  CHECK(value_of<float8_e8m0fnu>(0xFE) == 0x1p127);   // 2^(254 - 127), max
  CHECK(std::isnan(value_of<float8_e8m0fnu>(0xFF)));
  for (int e = 0; e < 255; ++e) {
    CHECK(value_of<float8_e8m0fnu>(static_cast<std::uint8_t>(e)) == std::ldexp(1.0, e - 127));
  }
  // ml_dtypes custom_float_test FLOAT_VALUES / INT_VALUES for e8m0: these round-trip exactly.
  for (double v : {0.125, 1.0, 0.5, 2.0, 4.0, 0x1p127}) CHECK(static_cast<double>(float8_e8m0fnu(v)) == v);
  for (int v : {1, 2, 256}) CHECK(static_cast<double>(float8_e8m0fnu(v)) == v);
}

TEST_CASE("float8_e8m0fnu: zero and negative inputs are NaN, tiny ones round up to 2^-127", "[float8][e8m0fnu]") {
  // ml_dtypes Float8E8m0fnuTest.NegativeInput: every negative input (and -0) converts to NaN.
  for (float v : {-qnan, -inf, std::numeric_limits<float>::lowest(), -1.0F, -0.5F, -std::numeric_limits<float>::min(),
                  -std::numeric_limits<float>::denorm_min(), -0.0F, 0.0F}) {
    INFO(v);
    CHECK(float8_e8m0fnu(v).bits() == 0xFF);
  }
  CHECK(float8_e8m0fnu(0).bits() == 0xFF);
  CHECK(float8_e8m0fnu(-1).bits() == 0xFF);
  CHECK(float8_e8m0fnu(inf).bits() == 0xFF);  // no Inf: NaN
  CHECK(float8_e8m0fnu(qnan).bits() == 0xFF);
  CHECK(float8_e8m0fnu(0x1p-128).bits() == 0x00);  // below the smallest value: 2^-127
  CHECK(float8_e8m0fnu(std::numeric_limits<float>::denorm_min()).bits() == 0x00);
  CHECK(float8_e8m0fnu(std::numeric_limits<double>::denorm_min()).bits() == 0x00);
  CHECK(float8_e8m0fnu(0x1p128).bits() == 0xFF);  // above max: NaN
}

TEST_CASE("float8_e8m0fnu ties between two powers of two go to the even exponent field", "[float8][e8m0fnu]") {
  // docs/formats.md: "Ties between two powers of two (e.g. 3 between 2 and 4) go to the even exponent
  // field, like every other tie." 1.5 * 2^k is the midpoint of 2^k and 2^(k+1).
  CHECK(float8_e8m0fnu(1.5F).bits() == 0x80);  // between 0x7F (1) and 0x80 (2): even 0x80
  CHECK(float8_e8m0fnu(3.0F).bits() == 0x80);  // between 0x80 (2) and 0x81 (4): even 0x80
  CHECK(float8_e8m0fnu(6.0F).bits() == 0x82);  // between 0x81 (4) and 0x82 (8): even 0x82
  CHECK(float8_e8m0fnu(3).bits() == 0x80);
  CHECK(float8_e8m0fnu(0x1.8p-127).bits() == 0x00);  // between 0x00 and 0x01: even 0x00
  // The midpoint of max 2^127 (0xFE) and the next step 2^128 (0xFF, which is NaN) ties to 0xFE.
  CHECK(float8_e8m0fnu(0x1.8p127).bits() == 0xFE);
  CHECK(float8_e8m0fnu(0x1.800002p127F).bits() == 0xFF);
  // Off the midpoint, the nearest power of two wins.
  CHECK(float8_e8m0fnu(0x1.7fffffep1).bits() == 0x80);
  CHECK(float8_e8m0fnu(0x1.8000002p1).bits() == 0x81);
}

// ------------------------------------------------------------------------------------------------
// Every pair through + - * /, and random inputs, for every float8 type.

namespace {

template <class T>
std::uint32_t exact_result(char op, double a, double b) {
  const auto& ref = reference_of<T>();
  if (!std::isfinite(a) || !std::isfinite(b)) {
    return ref.round(op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b);
  }
  switch (op) {
    case '+': return ref.round_sum(a, b);
    case '-': return ref.round_sum(a, -b);
    case '*': return ref.round(a * b);  // exact: two significands of at most 4 bits
    default: return ref.round_quotient(a, b);
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("every pair of float8 patterns gives the correctly rounded + - * /", "[float8][arithmetic]",
                        mixprec_test::float8_types) {
  const auto& ref = reference_of<TestType>();
  mismatches bad;
  const char ops[4] = {'+', '-', '*', '/'};
  for (std::uint32_t pa = 0; pa < 256; ++pa) {
    const auto x = TestType::from_bits(static_cast<std::uint8_t>(pa));
    const double a = ref.decode(pa);
    for (std::uint32_t pb = 0; pb < 256; ++pb) {
      const auto y = TestType::from_bits(static_cast<std::uint8_t>(pb));
      const double b = ref.decode(pb);
      const std::uint32_t got[4] = {(x + y).bits(), (x - y).bits(), (x * y).bits(), (x / y).bits()};
      for (int k = 0; k < 4; ++k) {
        const std::uint32_t expected = exact_result<TestType>(ops[k], a, b);
        const bool same = ref.is_nan(expected) ? ref.is_nan(got[k]) : got[k] == expected;
        if (!same) {
          bad.add(hex(pa) + " " + ops[k] + " " + hex(pb) + " = " + show(a) + " " + ops[k] + " " + show(b) +
                  ": expected " + hex(expected) + ", got " + hex(got[k]));
        }
      }
    }
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("random float and double inputs convert to float8 as the reference rounds them",
                        "[float8][conversion][random]", mixprec_test::float8_types) {
  const auto& ref = reference_of<TestType>();
  std::mt19937_64 rng(0x8F8F8F8FULL);
  // Exponents around the format's range (every boundary is also covered exhaustively in
  // basic_float_test.cpp; these catch anything between).
  const int lo = std::ilogb(ref.positives().front().value) - 3;
  const int hi = std::ilogb(ref.max()) + 3;
  mismatches bad;
  for (int n = 0; n < 25000; ++n) {
    const float xf = mixprec_test::random_float(rng, lo, hi);
    const double xd = mixprec_test::random_double(rng, lo, hi);
    const auto gf = TestType(xf).bits();
    const auto gd = TestType(xd).bits();
    if (gf != ref.round(xf)) bad.add("float " + show(xf) + ": expected " + hex(ref.round(xf)) + ", got " + hex(gf));
    if (gd != ref.round(xd)) bad.add("double " + show(xd) + ": expected " + hex(ref.round(xd)) + ", got " + hex(gd));
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

}  // namespace float8_test
