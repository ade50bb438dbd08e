// Tests of mixprec/formats/numeric_limits.hpp: every member of std::numeric_limits for every small
// float, pinned to values derived by hand from the format (the arithmetic is in the comments) and to
// the values ml_dtypes publishes (ml_dtypes/tests/float8_test.cc "NumericLimits" tests,
// ml_dtypes/tests/mxfloat_test.cc, ml_dtypes/include/float8.h for the NaN patterns) or, for
// bfloat16/float16, Eigen 3.4's numeric_limits<Eigen::bfloat16/half> (which ml_dtypes uses).
//
// Conventions (C++ [numeric.limits.members]): digits = significand bits including the implicit one;
// digits10 = floor((digits - 1) * log10 2); max_digits10 = ceil(1 + digits * log10 2);
// min_exponent = one more than the exponent e of min() = 2^e  (values are 0.1b * 2^exponent);
// max_exponent = one more than the exponent of max(); min_exponent10 = ceil(log10(min()));
// max_exponent10 = floor(log10(max())); round_error() = 0.5 for round-to-nearest.
//
// Deliberate differences from ml_dtypes, as documented in docs/formats.md:
//  - is_iec559 is false for every small float (ml_dtypes says true for float8_e3m4/e4m3/e5m2).
//  - round_error() is 0.5 for every format (ml_dtypes' mxfloat.h returns 0.25 for float6_e2m3fn and
//    1.0 for float6_e3m2fn and float4_e2m1fn, which is not the C++ meaning).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace numeric_limits_test {

namespace {

struct limits_row {
  bool is_signed;
  bool has_infinity;
  bool has_quiet_NaN;
  bool has_signaling_NaN;
  std::float_denorm_style has_denorm;
  int digits, digits10, max_digits10;
  int min_exponent, min_exponent10, max_exponent, max_exponent10;
  // Bit patterns of the value members.
  std::uint32_t min, max, lowest, epsilon, round_error, infinity, quiet_NaN, denorm_min;
  // The values they must decode to (NaN where a member is a NaN).
  double min_v, max_v, lowest_v, epsilon_v, denorm_min_v;
};

template <class T>
void check_limits(const limits_row& e) {
  using L = std::numeric_limits<T>;
  INFO(mixprec_test::spec_of<T>().name);
  // Members every small float shares.
  STATIC_REQUIRE(L::is_specialized);
  STATIC_REQUIRE_FALSE(L::is_integer);
  STATIC_REQUIRE_FALSE(L::is_exact);
  STATIC_REQUIRE_FALSE(L::has_denorm_loss);
  STATIC_REQUIRE(L::round_style == std::round_to_nearest);
  STATIC_REQUIRE_FALSE(L::is_iec559);  // docs/formats.md
  STATIC_REQUIRE(L::is_bounded);
  STATIC_REQUIRE_FALSE(L::is_modulo);
  STATIC_REQUIRE(L::radix == 2);
  STATIC_REQUIRE_FALSE(L::traps);            // ml_dtypes: numeric_limits<float>::traps (false here)
  STATIC_REQUIRE_FALSE(L::tinyness_before);  // ml_dtypes: numeric_limits<float>::tinyness_before
  CHECK(L::is_signed == e.is_signed);
  CHECK(L::has_infinity == e.has_infinity);
  CHECK(L::has_quiet_NaN == e.has_quiet_NaN);
  CHECK(L::has_signaling_NaN == e.has_signaling_NaN);
  CHECK(L::has_denorm == e.has_denorm);
  CHECK(L::digits == e.digits);
  CHECK(L::digits10 == e.digits10);
  CHECK(L::max_digits10 == e.max_digits10);
  CHECK(L::min_exponent == e.min_exponent);
  CHECK(L::min_exponent10 == e.min_exponent10);
  CHECK(L::max_exponent == e.max_exponent);
  CHECK(L::max_exponent10 == e.max_exponent10);
  CHECK(L::min().bits() == e.min);
  CHECK(L::max().bits() == e.max);
  CHECK(L::lowest().bits() == e.lowest);
  CHECK(L::epsilon().bits() == e.epsilon);
  CHECK(L::round_error().bits() == e.round_error);
  CHECK(L::infinity().bits() == e.infinity);
  CHECK(L::quiet_NaN().bits() == e.quiet_NaN);
  CHECK(L::denorm_min().bits() == e.denorm_min);
  CHECK(static_cast<double>(L::min()) == e.min_v);
  CHECK(static_cast<double>(L::max()) == e.max_v);
  CHECK(static_cast<double>(L::lowest()) == e.lowest_v);
  CHECK(static_cast<double>(L::epsilon()) == e.epsilon_v);
  CHECK(static_cast<double>(L::round_error()) == 0.5);
  CHECK(static_cast<double>(L::denorm_min()) == e.denorm_min_v);
  // The C++ meanings, checked through the reference model of the format:
  const auto& ref = mixprec_test::reference_of<T>();
  CHECK(static_cast<double>(L::max()) == ref.max());                             // largest finite
  CHECK(static_cast<double>(L::denorm_min()) == ref.positives().front().value);  // smallest > 0
  CHECK(std::ldexp(1.0, L::max_exponent - 1) <= ref.max());                      // 2^(max_exponent-1) finite
  CHECK(std::ldexp(1.0, L::max_exponent) > ref.max());
  CHECK(static_cast<double>(L::min()) == std::ldexp(1.0, L::min_exponent - 1));  // min() = 2^(min_exponent-1)
  // signaling_NaN(): a NaN with the quiet bit clear where the format has one (IEEE 754-2019 6.2.1),
  // else the format's NaN (ml_dtypes), else quiet_NaN() (the MX formats have no NaN at all).
  const auto snan = L::signaling_NaN().bits();
  if (e.has_signaling_NaN) {
    const auto& f = ref.spec();
    CHECK(ref.is_nan(snan));
    CHECK((snan & (1U << (f.mantissa_bits - 1))) == 0);
  } else {
    CHECK(snan == e.quiet_NaN);
  }
  if (e.has_quiet_NaN) CHECK(ref.is_nan(e.quiet_NaN));
}

constexpr auto present = std::denorm_present;
constexpr auto absent = std::denorm_absent;

}  // namespace

TEST_CASE("numeric_limits<bfloat16>: every member", "[numeric_limits][bfloat16]") {
  // E8 M7 bias 127. digits 8; digits10 floor(7 * 0.30103) = 2; max_digits10 ceil(1 + 8 * 0.30103) = 4
  // (Eigen: 2, 4). min = 2^(1 - 127) = 2^-126 -> min_exponent -125; max = (2 - 2^-7) * 2^127 ->
  // max_exponent 128; min_exponent10 ceil(-37.9) = -37; max_exponent10 floor(38.53) = 38 (float's).
  check_limits<mixprec::bfloat16>({true,     true,       true,        true,   present, 8, 2, 4, -125, -37, 128, 38,
                                   0x0080,  // min: 0.00000001.0000000
                                   0x7F7F,  // max: 0.11111110.1111111
                                   0xFF7F,  // lowest
                                   0x3C00,  // epsilon 2^-7: exponent 127 - 7 = 120 = 0x78 -> 0x78 << 7
                                   0x3F00,  // round_error 0.5: exponent 126 = 0x7E -> 0x7E << 7
                                   0x7F80,  // infinity
                                   0x7FC0,  // quiet_NaN: exponent all ones, first mantissa bit set
                                   0x0001,  // denorm_min 2^-133
                                   0x1p-126, 0x1.FEp127, -0x1.FEp127, 0x1p-7, 0x1p-133});
}

TEST_CASE("numeric_limits<float16>: every member", "[numeric_limits][float16]") {
  // IEEE binary16, E5 M10 bias 15: digits 11; digits10 floor(10 * 0.30103) = 3; max_digits10
  // ceil(1 + 11 * 0.30103) = 5; min 2^-14 -> min_exponent -13, min_exponent10 ceil(-4.2) = -4;
  // max 65504 -> max_exponent 16, max_exponent10 floor(4.82) = 4 (Eigen::half: the same).
  check_limits<mixprec::float16>({true,    true,    true,     true,    present, 11, 3, 5, -13, -4, 16, 4,
                                  0x0400,  // min: 0.00001.0000000000
                                  0x7BFF,  // max: 0.11110.1111111111 = 65504
                                  0xFBFF,
                                  0x1400,  // epsilon 2^-10: exponent 15 - 10 = 5 -> 5 << 10
                                  0x3800,  // 0.5: exponent 14 -> 14 << 10
                                  0x7C00,  0x7E00,
                                  0x0001,  // 2^-24
                                  0x1p-14, 65504.0, -65504.0, 0x1p-10, 0x1p-24});
}

TEST_CASE("numeric_limits<float8_e4m3fn>: every member (ml_dtypes Float8E4m3fnTest.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-6, max 448, lowest -448, epsilon 0.125, round_error 0.5, infinity is NaN,
  // denorm_min 2^-9, digits 4, digits10 0, max_digits10 3, min_exponent -5, min_exponent10 -1,
  // max_exponent 9, max_exponent10 2, has_infinity false, has_quiet_NaN true, has_signaling_NaN false.
  check_limits<mixprec::float8_e4m3fn>({true,   false, true,   false, present, 4, 0, 3, -5, -1, 9, 2,
                                        0x08,  // 0.0001.000: 2^(1 - 7)
                                        0x7E,  // 0.1111.110: (1 + 6/8) * 2^8 = 448
                                        0xFE,
                                        0x20,  // 2^-3: exponent 7 - 3 = 4 -> 0.0100.000
                                        0x30,  // 0.5: exponent 6 -> 0.0110.000
                                        0x7F,  // no Inf: the NaN (ml_dtypes)
                                        0x7F,  // NaN 0.1111.111
                                        0x01,  // 2^-9
                                        0x1p-6, 448.0, -448.0, 0.125, 0x1p-9});
}

TEST_CASE("numeric_limits<float8_e5m2>: every member (ml_dtypes Float8E5m2Test.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-14, max 57344, epsilon 0.25, denorm_min 2^-16, digits 3, digits10 0,
  // max_digits10 2, min_exponent -13, min_exponent10 -4, max_exponent 16, max_exponent10 4.
  check_limits<mixprec::float8_e5m2>({true, true,    true,    true,     present, 3,      0, 2, -13, -4, 16, 4,
                                      0x04,  // 0.00001.00
                                      0x7B,  // 0.11110.11: 1.75 * 2^15 = 57344
                                      0xFB,
                                      0x34,  // 2^-2: exponent 13 -> 0.01101.00
                                      0x38,  // 0.5: exponent 14 -> 0.01110.00
                                      0x7C,  // Inf 0.11111.00
                                      0x7E,  // quiet NaN 0.11111.10 (ml_dtypes float8.h)
                                      0x01, 0x1p-14, 57344.0, -57344.0, 0.25,    0x1p-16});
}

TEST_CASE("numeric_limits<float8_e4m3fnuz>: every member (ml_dtypes Float8E4m3fnuzTest.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-7, max 240, epsilon 0.125, denorm_min 2^-10, digits 4, digits10 0,
  // max_digits10 3, min_exponent -6, min_exponent10 -2, max_exponent 8, max_exponent10 2.
  check_limits<mixprec::float8_e4m3fnuz>({true, false, true,   false, present, 4,     0,      3, -6, -2, 8, 2,
                                          0x08,  // 2^(1 - 8)
                                          0x7F,  // 0.1111.111: 1.875 * 2^7 = 240
                                          0xFF,
                                          0x28,  // 2^-3: exponent 8 - 3 = 5 -> 0.0101.000
                                          0x38,  // 0.5: exponent 7
                                          0x80,  // no Inf: the NaN 1.0000.000
                                          0x80, 0x01,  0x1p-7, 240.0, -240.0,  0.125, 0x1p-10});
}

TEST_CASE("numeric_limits<float8_e5m2fnuz>: every member (ml_dtypes Float8E5m2fnuzTest.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-15, max 57344, epsilon 0.25, denorm_min 2^-17, digits 3, digits10 0,
  // max_digits10 2, min_exponent -14, min_exponent10 -4, max_exponent 16, max_exponent10 4.
  check_limits<mixprec::float8_e5m2fnuz>({true, false, true, false,   present, 3,        0,    2,      -14, -4, 16, 4,
                                          0x04,  // 2^(1 - 16)
                                          0x7F,  // 0.11111.11: 1.75 * 2^15
                                          0xFF,
                                          0x38,  // 2^-2: exponent 16 - 2 = 14 -> 0.01110.00
                                          0x3C,  // 0.5: exponent 15
                                          0x80, 0x80,  0x01, 0x1p-15, 57344.0, -57344.0, 0.25, 0x1p-17});
}

TEST_CASE("numeric_limits<float8_e4m3b11fnuz>: every member (ml_dtypes Float8E4m3b11fnuzTest.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-10, max 30, epsilon 0.125, denorm_min 2^-13, digits 4, digits10 0,
  // max_digits10 3, min_exponent -9, min_exponent10 -3, max_exponent 5, max_exponent10 1.
  check_limits<mixprec::float8_e4m3b11fnuz>({true, false, true, false,   present, 4,     0,     3,      -9, -3, 5, 1,
                                             0x08,  // 2^(1 - 11)
                                             0x7F,  // 1.875 * 2^(15 - 11) = 30
                                             0xFF,
                                             0x40,  // 2^-3: exponent 11 - 3 = 8 -> 0.1000.000
                                             0x50,  // 0.5: exponent 10
                                             0x80, 0x80,  0x01, 0x1p-10, 30.0,    -30.0, 0.125, 0x1p-13});
}

TEST_CASE("numeric_limits<float8_e3m4>: every member (ml_dtypes Float8E3m4Test.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 0.25, max 15.5, epsilon 0.0625, denorm_min 2^-6, digits 5, digits10 1,
  // max_digits10 3, min_exponent -1, min_exponent10 0, max_exponent 4, max_exponent10 1.
  check_limits<mixprec::float8_e3m4>({true, true, true, true,  present, 5,     1, 3, -1, 0, 4, 1,
                                      0x10,  // 0.001.0000: 2^(1 - 3)
                                      0x6F,  // 0.110.1111: (1 + 15/16) * 2^3 = 15.5
                                      0xEF,
                                      0x04,  // 2^-4 is subnormal here: 4/16 * 2^-2 -> 0.000.0100 (as in ml_dtypes)
                                      0x20,  // 0.5: exponent 2 -> 0.010.0000
                                      0x70,  // Inf 0.111.0000
                                      0x78,  // quiet NaN 0.111.1000
                                      0x01, 0.25, 15.5, -15.5, 0.0625,  0x1p-6});
}

TEST_CASE("numeric_limits<float8_e4m3>: every member (ml_dtypes Float8E4m3Test.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: min 2^-6, max 240, epsilon 0.125, denorm_min 2^-9, digits 4, digits10 0,
  // max_digits10 3, min_exponent -5, min_exponent10 -1, max_exponent 8, max_exponent10 2.
  check_limits<mixprec::float8_e4m3>({true, true,   true,  true,   present, 4,     0, 3, -5, -1, 8, 2,
                                      0x08,  // 2^(1 - 7)
                                      0x77,  // 0.1110.111: 1.875 * 2^7 = 240
                                      0xF7,
                                      0x20,  // 2^-3
                                      0x30,  // 0.5
                                      0x78,  // Inf 0.1111.000
                                      0x7C,  // quiet NaN 0.1111.100
                                      0x01, 0x1p-6, 240.0, -240.0, 0.125,   0x1p-9});
}

TEST_CASE("numeric_limits<float8_e8m0fnu>: every member (ml_dtypes Float8E8m0fnuTest.NumericLimits)",
          "[numeric_limits][float8]") {
  // ml_dtypes: not signed; min 2^-127, max 2^127, lowest 2^-127, epsilon 1.0, round_error 0.5,
  // infinity is NaN, digits 1, digits10 0, max_digits10 2, min_exponent -126, min_exponent10 -38,
  // max_exponent 128, max_exponent10 38, has_infinity false, has_quiet_NaN true,
  // has_signaling_NaN false; no subnormals (denorm_absent, denorm_min = min).
  check_limits<mixprec::float8_e8m0fnu>({false,    false,   true,     false, absent,  1, 0, 2, -126, -38, 128, 38,
                                         0x00,  // 2^(0 - 127): no zero, E = 0 is the smallest value
                                         0xFE,  // 2^(254 - 127)
                                         0x00,  // unsigned: lowest is the smallest value
                                         0x7F,  // epsilon 2^0 = 1: the gap between 1 and 2
                                         0x7E,  // 0.5 = 2^(126 - 127)
                                         0xFF,     0xFF,
                                         0x00,  // denorm_min = min
                                         0x1p-127, 0x1p127, 0x1p-127, 1.0,   0x1p-127});
}

TEST_CASE("numeric_limits<float6_e2m3fn>: every member (ml_dtypes FloatMXe2m3Test.NumericLimits)",
          "[numeric_limits][float6]") {
  // ml_dtypes: min 1.0, max 7.5, lowest -7.5, epsilon 0.125, denorm_min 0.125, digits 4, digits10 0,
  // max_digits10 3, min_exponent 1, min_exponent10 0, max_exponent 3, max_exponent10 0, no Inf, no NaN.
  // infinity() is max() and quiet_NaN() is 1.00.000 (ml_dtypes mxfloat.h).
  check_limits<mixprec::float6_e2m3fn>({true, false, false, false, present, 4,    0,     3,    1, 0, 3, 0,
                                        0x08,  // 0.01.000: 2^(1 - 1) = 1
                                        0x1F,  // 0.11.111: 1.875 * 2^2 = 7.5
                                        0x3F,
                                        0x01,  // 2^-3 = 1/8 is the subnormal 0.00.001
                                        0x04,  // 0.5 = 4/8: 0.00.100
                                        0x1F, 0x20,  0x01,  1.0,   7.5,     -7.5, 0.125, 0.125});
}

TEST_CASE("numeric_limits<float6_e3m2fn>: every member (ml_dtypes FloatMXe3m2Test.NumericLimits)",
          "[numeric_limits][float6]") {
  // ml_dtypes: min 0.25, max 28, epsilon 0.25, denorm_min 0.0625, digits 3, digits10 0,
  // max_digits10 2, min_exponent -1, min_exponent10 0, max_exponent 5, max_exponent10 1.
  check_limits<mixprec::float6_e3m2fn>({true, false, false, false, present, 3,     0,    2,     -1, 0, 5, 1,
                                        0x04,  // 0.001.00: 2^(1 - 3)
                                        0x1F,  // 0.111.11: 1.75 * 2^4 = 28
                                        0x3F,
                                        0x04,  // 2^-2 = min normal
                                        0x08,  // 0.5: exponent 2 -> 0.010.00
                                        0x1F, 0x20,  0x01,  0.25,  28.0,    -28.0, 0.25, 0.0625});
}

TEST_CASE("numeric_limits<float4_e2m1fn>: every member (ml_dtypes Float4e2m1Test.NumericLimits)",
          "[numeric_limits][float4]") {
  // ml_dtypes: min 1.0, max 6.0, epsilon 0.5, denorm_min 0.5, digits 2, digits10 0, max_digits10 2,
  // min_exponent 1, min_exponent10 0, max_exponent 3, max_exponent10 0.
  check_limits<mixprec::float4_e2m1fn>({true, false, false, false, present, 2,    0,   2,  1, 0, 3, 0,
                                        0x2,  // 0.01.0: 1
                                        0x7,  // 0.11.1: 1.5 * 4 = 6
                                        0xF,
                                        0x1,  // 2^-1 = 0.5: the subnormal 0.00.1
                                        0x1,  // 0.5
                                        0x7,  0x8,   0x1,   1.0,   6.0,     -6.0, 0.5, 0.5});
}

TEST_CASE("numeric_limits of const and volatile small floats equal the unqualified ones", "[numeric_limits]") {
  STATIC_REQUIRE(std::numeric_limits<const mixprec::bfloat16>::digits == 8);
  CHECK(std::numeric_limits<const mixprec::float8_e4m3fn>::max().bits() == 0x7E);
  CHECK(std::numeric_limits<volatile mixprec::float16>::max().bits() == 0x7BFF);
}

}  // namespace numeric_limits_test
