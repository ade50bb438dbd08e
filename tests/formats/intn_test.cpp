// Tests of mixprec/formats/intn.hpp: int4, uint4, int2, uint2 keep the low bits of any integer (two's
// complement modulo 2^bits, as ml_dtypes' intN does: ml_dtypes/include/intn.h masks the low N bits
// and sign-extends), convert to int, and do arithmetic in int. Expected values are computed here with
// plain modular arithmetic, independently of the header.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>

#include "mixprec/formats/intn.hpp"

namespace intn_test {

namespace {

// v mod 2^bits, as the representative in [lo, lo + 2^bits): [-2^(bits-1), 2^(bits-1)) or [0, 2^bits).
long long wrap_reference(long long v, int bits, bool is_signed) {
  const long long m = 1LL << bits;
  long long r = v % m;
  if (r < 0) r += m;                    // now in [0, m)
  if (is_signed && r >= m / 2) r -= m;  // two's complement range
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("intn wraps every integer modulo 2^bits", "[intn]", mixprec::int4, mixprec::uint4, mixprec::int2,
                   mixprec::uint2) {
  constexpr int bits = TestType::bits;
  constexpr bool is_signed = TestType::is_signed;
  for (long long v = -300; v <= 300; ++v) {
    INFO(v);
    CHECK(static_cast<int>(TestType(v)) == wrap_reference(v, bits, is_signed));
    CHECK(static_cast<int>(TestType(static_cast<int>(v))) == wrap_reference(v, bits, is_signed));
    CHECK(static_cast<int>(TestType(static_cast<std::int8_t>(v))) ==
          wrap_reference(static_cast<std::int8_t>(v), bits, is_signed));
  }
  // The extremes of 64-bit types: only the low bits count.
  CHECK(static_cast<int>(TestType(std::numeric_limits<std::int64_t>::max())) ==
        wrap_reference(static_cast<long long>((1ULL << bits) - 1), bits, is_signed));  // low bits all ones
  CHECK(static_cast<int>(TestType(std::numeric_limits<std::int64_t>::min())) == 0);    // low bits all zero
  CHECK(static_cast<int>(TestType(std::numeric_limits<std::uint64_t>::max())) ==
        wrap_reference(static_cast<long long>((1ULL << bits) - 1), bits, is_signed));
  std::mt19937_64 rng(4);
  for (int n = 0; n < 2000; ++n) {
    const auto u = rng();
    CHECK(static_cast<int>(TestType(u)) == wrap_reference(static_cast<long long>(u & 0xFF), bits, is_signed));
  }
}

TEST_CASE("intn examples from the header and from ml_dtypes", "[intn]") {
  using mixprec::int2;
  using mixprec::int4;
  using mixprec::uint2;
  using mixprec::uint4;
  CHECK(int4(7) == 7);
  CHECK(int4(8) == -8);
  CHECK(int4(-9) == 7);
  CHECK(int4(15) == -1);
  CHECK(uint4(17) == 1);
  CHECK(uint4(-1) == 15);
  CHECK(int2(2) == -2);
  CHECK(int2(-3) == 1);
  CHECK(uint2(4) == 0);
  CHECK(uint2(7) == 3);
  CHECK(int(int4(-3)) * 2 == -6);
}

TEMPLATE_TEST_CASE("intn in_range is true exactly on [min_value, max_value]", "[intn]", mixprec::int4, mixprec::uint4,
                   mixprec::int2, mixprec::uint2) {
  constexpr int bits = TestType::bits;
  constexpr long long lo = TestType::is_signed ? -(1LL << (bits - 1)) : 0;
  constexpr long long hi = TestType::is_signed ? (1LL << (bits - 1)) - 1 : (1LL << bits) - 1;
  STATIC_REQUIRE(TestType::min_value == lo);
  STATIC_REQUIRE(TestType::max_value == hi);
  for (long long v = -40; v <= 40; ++v) {
    INFO(v);
    CHECK(TestType::in_range(v) == (v >= lo && v <= hi));
    // Values in range survive the round trip unchanged.
    if (v >= lo && v <= hi) CHECK(static_cast<long long>(TestType(v)) == v);
  }
  CHECK_FALSE(TestType::in_range(std::numeric_limits<std::uint64_t>::max()));
  CHECK_FALSE(TestType::in_range(std::numeric_limits<std::int64_t>::min()));
  CHECK(TestType::in_range(std::uint64_t{0}));
  CHECK(TestType::in_range(static_cast<unsigned char>(hi)));
  CHECK_FALSE(TestType::in_range(static_cast<unsigned>(hi + 1)));
}

TEMPLATE_TEST_CASE("intn bit patterns: from_bits ignores the high bits and bits_pattern gives the low bits", "[intn]",
                   mixprec::int4, mixprec::uint4, mixprec::int2, mixprec::uint2) {
  constexpr int bits = TestType::bits;
  for (unsigned p = 0; p < 256; ++p) {
    const auto x = TestType::from_bits(static_cast<std::uint8_t>(p));
    INFO(p);
    CHECK(static_cast<int>(x) == wrap_reference(p & ((1U << bits) - 1U), bits, TestType::is_signed));
    CHECK(x.bits_pattern() == (p & ((1U << bits) - 1U)));
  }
}

TEMPLATE_TEST_CASE("intn arithmetic and comparisons happen in int", "[intn]", mixprec::int4, mixprec::uint4,
                   mixprec::int2, mixprec::uint2) {
  const int lo = TestType::min_value;
  const int hi = TestType::max_value;
  for (int a = lo; a <= hi; ++a) {
    for (int b = lo; b <= hi; ++b) {
      const TestType x(a);
      const TestType y(b);
      STATIC_REQUIRE(std::is_same_v<decltype(x + y), int>);
      CHECK(x + y == a + b);  // no wrapping: the result is an int
      CHECK(x - y == a - b);
      CHECK(x * y == a * b);
      if (b != 0) CHECK(x / y == a / b);
      CHECK((x < y) == (a < b));
      CHECK((x == y) == (a == b));
      // Storing back wraps, like int8_t.
      CHECK(static_cast<int>(TestType(x + y)) == wrap_reference(a + b, TestType::bits, TestType::is_signed));
    }
  }
}

TEMPLATE_TEST_CASE("intn prints as a number", "[intn]", mixprec::int4, mixprec::uint4, mixprec::int2, mixprec::uint2) {
  std::ostringstream os;
  os << TestType(TestType::min_value) << ' ' << TestType(TestType::max_value);
  std::ostringstream expected;
  expected << TestType::min_value << ' ' << TestType::max_value;
  CHECK(os.str() == expected.str());
}

TEST_CASE("numeric_limits of int4, uint4, int2, uint2", "[intn][numeric_limits]") {
  // ml_dtypes intn.h intN_numeric_limits_base: digits = N - 1 (signed) or N; digits10 =
  // floor(digits * log10 2) = (digits * 3) / 10 for these sizes; min = lowest; is_integer, is_exact,
  // is_bounded; no Inf/NaN/denormals; round_toward_zero; radix 2.
  using L4 = std::numeric_limits<mixprec::int4>;
  using U4 = std::numeric_limits<mixprec::uint4>;
  using L2 = std::numeric_limits<mixprec::int2>;
  using U2 = std::numeric_limits<mixprec::uint2>;
  STATIC_REQUIRE(L4::digits == 3);
  STATIC_REQUIRE(U4::digits == 4);
  STATIC_REQUIRE(L2::digits == 1);
  STATIC_REQUIRE(U2::digits == 2);
  CHECK(L4::digits10 == 0);  // floor(3 * 0.301) = 0: not every 1-digit decimal (8, 9) fits in [-8, 7]
  CHECK(U4::digits10 == 1);  // floor(4 * 0.301) = 1: every 1-digit decimal 0..9 fits in [0, 15]
  CHECK(L2::digits10 == 0);
  CHECK(U2::digits10 == 0);
  CHECK(int(L4::min()) == -8);
  CHECK(int(L4::lowest()) == -8);
  CHECK(int(L4::max()) == 7);
  CHECK(int(U4::min()) == 0);
  CHECK(int(U4::max()) == 15);
  CHECK(int(L2::min()) == -2);
  CHECK(int(L2::max()) == 1);
  CHECK(int(U2::max()) == 3);
  STATIC_REQUIRE(L4::is_specialized && L4::is_integer && L4::is_exact && L4::is_bounded);
  STATIC_REQUIRE(L4::is_signed && !U4::is_signed && L2::is_signed && !U2::is_signed);
  STATIC_REQUIRE(!L4::has_infinity && !L4::has_quiet_NaN && !L4::has_signaling_NaN);
  STATIC_REQUIRE(L4::has_denorm == std::denorm_absent);
  STATIC_REQUIRE(L4::round_style == std::round_toward_zero);
  STATIC_REQUIRE(L4::radix == 2);
  STATIC_REQUIRE(!L4::is_iec559);
  // Arithmetic happens in int after the implicit conversion, "exactly as C++ does for int8_t"
  // (intn.hpp): division by zero traps as it does for int8_t (and ml_dtypes sets traps = true).
  CHECK(L4::traps == std::numeric_limits<std::int8_t>::traps);
  CHECK(U4::traps == std::numeric_limits<std::uint8_t>::traps);
}

}  // namespace intn_test
