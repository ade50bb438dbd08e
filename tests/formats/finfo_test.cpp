// Tests of mixprec/formats/finfo.hpp against the values NumPy and ml_dtypes publish:
//  - float, double: NumPy's printed finfo (precision 6 / 15, resolution 1e-06 / 1e-15, machep -23 /
//    -52, negep -24 / -53, minexp -126 / -1022, maxexp 128 / 1024, nexp 8 / 11; numpy.finfo docs).
//  - float16: NumPy's finfo(float16) (precision 3, resolution float16(1e-3), tiny 2^-14, iexp 5,
//    maxexp 16, minexp -14, machep -10, negep -11, max 65504, nmant 10; as hard-coded by NumPy's
//    float16 author in mwiebe/numpy_half __init__.py).
//  - every ml_dtypes type: the values ml_dtypes/_finfo.py constructs (bits, eps, epsneg, machep,
//    negep, max, min, nexp, nmant, maxexp, minexp, precision, resolution, tiny, smallest_subnormal).
// and against NumPy's definitions, checked on the reference model of each format:
//  eps = next value after 1 minus 1; epsneg = 1 minus the value before 1; max = largest finite value;
//  smallest_normal = 2^minexp; 2^(maxexp-1) is finite and 2^maxexp is not; resolution = 10^-precision.
//  - long double: std::numeric_limits and, where it is the x87 80-bit format, that format's fields.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace finfo_test {

namespace {

struct finfo_row {
  int bits;
  double eps, epsneg;
  int machep, negep;
  double max, min;
  int nexp, nmant, maxexp, minexp, precision;
  double resolution;  // as a double; compared after rounding to T, as NumPy/ml_dtypes store T(value)
  double tiny, smallest_subnormal;
};

template <class T>
double as_double(T x) {
  return static_cast<double>(x);
}

template <class T>
void check_finfo(const finfo_row& e) {
  using F = mixprec::finfo<T>;
  CHECK(F::bits == e.bits);
  CHECK(as_double(F::eps) == e.eps);
  CHECK(as_double(F::epsneg) == e.epsneg);
  CHECK(F::machep == e.machep);
  CHECK(F::negep == e.negep);
  CHECK(as_double(F::max) == e.max);
  CHECK(as_double(F::min) == e.min);
  CHECK(F::nexp == e.nexp);
  CHECK(F::iexp == e.nexp);
  CHECK(F::nmant == e.nmant);
  CHECK(F::maxexp == e.maxexp);
  CHECK(F::minexp == e.minexp);
  CHECK(F::precision == e.precision);
  CHECK(as_double(F::resolution) == as_double(T(e.resolution)));
  CHECK(as_double(F::tiny) == e.tiny);
  CHECK(as_double(F::smallest_normal) == e.tiny);
  CHECK(as_double(F::smallest_subnormal) == e.smallest_subnormal);
  STATIC_REQUIRE(std::is_same_v<std::remove_cv_t<decltype(F::eps)>, T>);
}

// NumPy's definitions, checked on the reference model of a small float (independent of finfo.hpp).
template <class T>
void check_finfo_definitions() {
  using F = mixprec::finfo<T>;
  const auto& ref = mixprec_test::reference_of<T>();
  INFO(ref.spec().name);
  const auto& v = ref.positives();
  double below_one = 0;
  double above_one = 0;
  for (const auto& x : v) {
    if (x.value < 1.0) below_one = x.value;
    if (x.value > 1.0 && above_one == 0) above_one = x.value;
  }
  CHECK(as_double(F::eps) == above_one - 1.0);     // "1.0 + eps != 1.0", the smallest such
  CHECK(as_double(F::epsneg) == 1.0 - below_one);  // "1.0 - epsneg != 1.0", the smallest such
  CHECK(as_double(F::eps) == std::ldexp(1.0, F::machep));
  CHECK(as_double(F::epsneg) == std::ldexp(1.0, F::negep));
  CHECK(as_double(F::max) == ref.max());
  CHECK(as_double(F::smallest_subnormal) == v.front().value);
  CHECK(as_double(F::smallest_normal) == std::ldexp(1.0, F::minexp));
  CHECK(std::ldexp(1.0, F::maxexp - 1) <= ref.max());
  CHECK(std::ldexp(1.0, F::maxexp) > ref.max());
  const int sign_bits = ref.spec().is_signed() ? 1 : 0;
  CHECK(F::nmant + F::nexp + sign_bits == F::bits);  // ml_dtypes finfo_test.py identity
}

}  // namespace

TEST_CASE("finfo<float> and finfo<double> match numpy.finfo", "[finfo]") {
  check_finfo<float>(
      {32, 0x1p-23, 0x1p-24, -23, -24, 0x1.fffffep127, -0x1.fffffep127, 8, 23, 128, -126, 6, 1e-6, 0x1p-126, 0x1p-149});
  check_finfo<double>({64, 0x1p-52, 0x1p-53, -52, -53, std::numeric_limits<double>::max(),
                       -std::numeric_limits<double>::max(), 11, 52, 1024, -1022, 15, 1e-15, 0x1p-1022, 0x1p-1074});
}

TEST_CASE("finfo<float16> matches numpy.finfo(float16)", "[finfo][float16]") {
  check_finfo<mixprec::float16>(
      {16, 0x1p-10, 0x1p-11, -10, -11, 65504.0, -65504.0, 5, 10, 16, -14, 3, 1e-3, 0x1p-14, 0x1p-24});
  check_finfo_definitions<mixprec::float16>();
}

TEST_CASE("finfo<bfloat16> matches ml_dtypes.finfo(bfloat16)", "[finfo][bfloat16]") {
  check_finfo<mixprec::bfloat16>(
      {16, 0x1p-7, 0x1p-8, -7, -8, 0x1.FEp127, -0x1.FEp127, 8, 7, 128, -126, 2, 0.01, 0x1p-126, 0x1p-133});
  check_finfo_definitions<mixprec::bfloat16>();
}

TEST_CASE("finfo of the float8 types matches ml_dtypes.finfo except precision/resolution", "[finfo][float8]") {
  // ml_dtypes/_finfo.py sets precision 1 and resolution T(0.1) for every float8 type by hand; mixprec
  // keeps NumPy's definition precision = int(-log10(eps)) (docs/formats.md): eps = 2^-3 gives
  // int(0.903) = 0 and resolution 10^0 = 1; eps = 2^-2 gives 0 and 1; e3m4's eps = 2^-4 gives
  // int(1.204) = 1 and 0.1 (agreeing with ml_dtypes); e8m0's eps = 1 gives 0 and 1.
  SECTION("float8_e4m3fn") {
    check_finfo<mixprec::float8_e4m3fn>(
        {8, 0x1p-3, 0x1p-4, -3, -4, 448.0, -448.0, 4, 3, 9, -6, 0, 1.0, 0x1p-6, 0x1p-9});
  }
  SECTION("float8_e5m2") {
    check_finfo<mixprec::float8_e5m2>(
        {8, 0x1p-2, 0x1p-3, -2, -3, 57344.0, -57344.0, 5, 2, 16, -14, 0, 1.0, 0x1p-14, 0x1p-16});
  }
  SECTION("float8_e4m3fnuz") {
    check_finfo<mixprec::float8_e4m3fnuz>(
        {8, 0x1p-3, 0x1p-4, -3, -4, 240.0, -240.0, 4, 3, 8, -7, 0, 1.0, 0x1p-7, 0x1p-10});
  }
  SECTION("float8_e5m2fnuz") {
    check_finfo<mixprec::float8_e5m2fnuz>(
        {8, 0x1p-2, 0x1p-3, -2, -3, 57344.0, -57344.0, 5, 2, 16, -15, 0, 1.0, 0x1p-15, 0x1p-17});
  }
  SECTION("float8_e4m3b11fnuz") {
    check_finfo<mixprec::float8_e4m3b11fnuz>(
        {8, 0x1p-3, 0x1p-4, -3, -4, 30.0, -30.0, 4, 3, 5, -10, 0, 1.0, 0x1p-10, 0x1p-13});
  }
  SECTION("float8_e3m4") {
    check_finfo<mixprec::float8_e3m4>({8, 0x1p-4, 0x1p-5, -4, -5, 15.5, -15.5, 3, 4, 4, -2, 1, 0.1, 0.25, 0x1p-6});
  }
  SECTION("float8_e4m3") {
    check_finfo<mixprec::float8_e4m3>({8, 0x1p-3, 0x1p-4, -3, -4, 240.0, -240.0, 4, 3, 8, -6, 0, 1.0, 0x1p-6, 0x1p-9});
  }
  SECTION("float8_e8m0fnu") {
    // No sign, no zero: min is the smallest value (ml_dtypes: "e8m0 has no zero, so min is tiny").
    check_finfo<mixprec::float8_e8m0fnu>(
        {8, 1.0, 0.5, 0, -1, 0x1p127, 0x1p-127, 8, 0, 128, -127, 0, 1.0, 0x1p-127, 0x1p-127});
  }
}

TEST_CASE("finfo of the float6 and float4 types matches ml_dtypes.finfo", "[finfo][float6][float4]") {
  SECTION("float6_e2m3fn") {
    // The value below 1 is 0.875 (the subnormal 7/8): epsneg = 0.125 = eps, negep = -3.
    check_finfo<mixprec::float6_e2m3fn>({6, 0.125, 0.125, -3, -3, 7.5, -7.5, 2, 3, 3, 0, 0, 1.0, 1.0, 0.125});
  }
  SECTION("float6_e3m2fn") {
    check_finfo<mixprec::float6_e3m2fn>({6, 0.25, 0.125, -2, -3, 28.0, -28.0, 3, 2, 5, -2, 0, 1.0, 0.25, 0.0625});
  }
  SECTION("float4_e2m1fn") {
    // The value below 1 is 0.5 (the only subnormal): epsneg = 0.5 = eps, negep = -1.
    check_finfo<mixprec::float4_e2m1fn>({4, 0.5, 0.5, -1, -1, 6.0, -6.0, 2, 1, 3, 0, 0, 1.0, 1.0, 0.5});
  }
}

TEMPLATE_LIST_TEST_CASE("finfo follows NumPy's definitions on every small float", "[finfo]",
                        mixprec_test::all_small_floats) {
  check_finfo_definitions<TestType>();
}

TEST_CASE("finfo<long double> matches the x87 80-bit format and std::numeric_limits", "[finfo][long-double]") {
  using F = mixprec::finfo<long double>;
  using L = std::numeric_limits<long double>;
  // Fields that hold for every long double: NumPy's definitions in terms of numeric_limits.
  CHECK(F::nmant == L::digits - 1);
  CHECK(F::machep == -(L::digits - 1));
  CHECK(F::minexp == L::min_exponent - 1);
  CHECK(F::maxexp == L::max_exponent);
  CHECK(F::bits == static_cast<int>(sizeof(long double) * 8));  // NumPy: itemsize * 8
  CHECK(F::eps == L::epsilon());
  CHECK(F::max == L::max());
  CHECK(F::min == -L::max());
  CHECK(F::smallest_normal == L::min());
  CHECK(F::smallest_subnormal == L::denorm_min());
  if (L::digits != 64 || L::max_exponent != 16384) {
    WARN("long double is not the x87 80-bit format here (digits " << L::digits << "): x87 values not checked");
    return;
  }
  // x87 extended precision (Intel SDM vol. 1, 4.2.2): 1 sign bit, 15 exponent bits (bias 16383), a
  // 64-bit significand whose integer bit is explicit; 80 bits stored in 16 bytes on x86-64 (12 on
  // i386). numpy.finfo(np.longdouble) on x86-64 Linux: bits 128, nexp 15, nmant 63, machep -63,
  // negep -64, minexp -16382, maxexp 16384, precision 18, resolution 1e-18.
  CHECK(F::nexp == 15);
  CHECK(F::iexp == 15);
  CHECK(F::nmant == 63);
  CHECK(F::machep == -63);
  CHECK(F::negep == -64);
  CHECK(F::minexp == -16382);
  CHECK(F::maxexp == 16384);
  CHECK(F::precision == 18);
  CHECK(F::eps == 0x1p-63L);
  CHECK(F::epsneg == 0x1p-64L);
  CHECK(F::max == 0x1.fffffffffffffffep16383L);
  CHECK(F::smallest_normal == 0x1p-16382L);
  CHECK(F::tiny == 0x1p-16382L);
  CHECK(F::smallest_subnormal == 0x1p-16445L);  // 2^(-16382 - 63)
  // 10^-18 rounded once to long double (the literal), not rounded to double first.
  CHECK(F::resolution == 1e-18L);
  CHECK(F::resolution != static_cast<long double>(1e-18));
  // Sign, exponent and the 64-bit significand (explicit integer bit) make the 80 bits.
  CHECK(1 + F::nexp + F::nmant + 1 == 80);
}

}  // namespace finfo_test
