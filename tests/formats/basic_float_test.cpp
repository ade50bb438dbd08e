// Tests of mixprec/formats/basic_float.hpp over every small float type: conversions to and from
// float/double/integers/other small floats, arithmetic, comparisons, classification, abs, negation
// and operator<<. Every expected value comes from tests/types/reference_format.hpp, a model written
// from the format specifications (IEEE 754-2019, OCP OFP8 1.0, OCP MX 1.0, ml_dtypes' published
// encodings), never from mixprec's own codec.
#include <catch2/catch.hpp>

#include "../support/mxcsr_scope.hpp"

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace basic_float_test {

namespace {

using mixprec_test::all_small_floats;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::reference_of;
using mixprec_test::show;

template <class T>
T pattern(std::uint32_t p) {
  return T::from_bits(static_cast<typename T::storage_type>(p));
}

// Patterns to visit for pairwise tests: all of them for formats of at most 8 bits, a fixed random
// sample (plus the special patterns) for the 16-bit formats.
template <class T>
std::vector<std::uint32_t> sample_patterns(std::size_t wide_count) {
  const auto& f = reference_of<T>().spec();
  std::vector<std::uint32_t> out;
  if (f.bits() <= 8) {
    for (std::uint32_t p = 0; p < f.patterns(); ++p) out.push_back(p);
    return out;
  }
  const std::uint32_t sign = f.sign_bit();
  const std::uint32_t inf = f.all_ones_exponent() << f.mantissa_bits;
  for (std::uint32_t p : {0U, 1U, 2U, inf - 1U, inf, inf + 1U, inf | (1U << (f.mantissa_bits - 1)),
                          1U << f.mantissa_bits, (1U << f.mantissa_bits) - 1U}) {
    out.push_back(p);
    out.push_back(p | sign);
  }
  std::mt19937_64 rng(20240611);
  while (out.size() < wide_count) out.push_back(static_cast<std::uint32_t>(rng() % f.patterns()));
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Decoding (small float -> float, double)

TEMPLATE_LIST_TEST_CASE("every bit pattern converts to float and double exactly, as the format's formula gives",
                        "[basic_float][conversion]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  mismatches bad;
  for (std::uint32_t p = 0; p < f.patterns(); ++p) {
    const TestType x = pattern<TestType>(p);
    const double expected = ref.decode(p);
    const float as_float = x;  // implicit: exact
    const auto as_double = static_cast<double>(x);
    if (std::isnan(expected)) {
      // A quiet NaN with the pattern's sign (IEEE 754-2019 §6.2.1: quiet bit = first trailing
      // significand bit). IEEE formats keep their payload in the top trailing significand bits.
      bool ok = std::isnan(as_float) && std::isnan(as_double) && std::signbit(as_float) == ref.sign_of(p) &&
                std::signbit(as_double) == ref.sign_of(p) && (mixprec_test::float_bits(as_float) & 0x00400000U) != 0 &&
                (mixprec_test::double_bits(as_double) & 0x0008000000000000ULL) != 0;
      if (f.kind == mixprec_test::specials::ieee) {
        const std::uint32_t payload = f.mantissa_field(p) << (23 - f.mantissa_bits);
        ok = ok && (mixprec_test::float_bits(as_float) & 0x007FFFFFU) == (payload | 0x00400000U);
        const std::uint64_t payload64 = static_cast<std::uint64_t>(f.mantissa_field(p)) << (52 - f.mantissa_bits);
        ok =
            ok && (mixprec_test::double_bits(as_double) & 0x000FFFFFFFFFFFFFULL) == (payload64 | 0x0008000000000000ULL);
      }
      if (!ok) bad.add(hex(p) + ": expected a quiet NaN, got float " + hex(mixprec_test::float_bits(as_float)));
    } else if (!(as_float == static_cast<float>(expected) && as_double == expected &&
                 std::signbit(as_float) == std::signbit(expected) &&
                 std::signbit(as_double) == std::signbit(expected))) {
      bad.add(hex(p) + ": expected " + show(expected) + ", got float " + show(as_float) + ", double " +
              show(as_double));
    }
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("every bit pattern survives from_bits -> float/double -> T (NaN: the canonical quiet NaN)",
                        "[basic_float][conversion]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  mismatches bad;
  for (std::uint32_t p = 0; p < f.patterns(); ++p) {
    const TestType x = pattern<TestType>(p);
    // A NaN comes back as the canonical quiet NaN of its sign (fnuz and e8m0 have exactly one NaN,
    // float8_e4m3fn one per sign, IEEE formats drop the payload).
    const std::uint32_t expected = ref.is_nan(p) ? ref.nan_bits(ref.sign_of(p)) : p;
    const auto via_float = TestType(static_cast<float>(x)).bits();
    const auto via_double = TestType(static_cast<double>(x)).bits();
    if (via_float != expected || via_double != expected) {
      bad.add(hex(p) + ": expected " + hex(expected) + ", via float " + hex(via_float) + ", via double " +
              hex(via_double));
    }
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("a default-constructed value is the pattern 0 (+0, or 2^-127 for e8m0, which has no zero)",
                        "[basic_float]", all_small_floats) {
  const TestType x{};
  CHECK(x.bits() == 0);
  const auto& ref = reference_of<TestType>();
  CHECK(static_cast<double>(x) == ref.decode(0));
  CHECK(static_cast<double>(x) == (ref.spec().kind == mixprec_test::specials::e8m0 ? 0x1p-127 : 0.0));
}

// ------------------------------------------------------------------------------------------------
// Encoding (float, double -> small float)

TEMPLATE_LIST_TEST_CASE(
    "float and double inputs round to nearest, ties to even: every value, every midpoint, one ulp either side",
    "[basic_float][conversion][rounding]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  const auto& values = ref.positives();  // every finite value > 0, ascending
  mismatches bad;
  std::size_t self_checks = 0;
  // Checks T(x) for x given as float and as double against `expected` (a pattern of the format).
  auto expect = [&](double x, std::uint32_t expected, const char* what) {
    const auto got_double = TestType(x).bits();
    if (got_double != expected)
      bad.add(std::string(what) + " (double) " + show(x) + ": expected " + hex(expected) + ", got " + hex(got_double));
    const auto xf = static_cast<float>(x);
    if (static_cast<double>(xf) == x) {
      const auto got_float = TestType(xf).bits();
      if (got_float != expected)
        bad.add(std::string(what) + " (float) " + show(x) + ": expected " + hex(expected) + ", got " + hex(got_float));
    }
    // The reference's own search must agree with the construction (a self-check of the model, on a
    // stride of the cases to keep the test fast).
    if (++self_checks % 5 == 0 && ref.round(x) != expected)
      bad.add(std::string("REFERENCE ") + what + " " + show(x) + ": construction says " + hex(expected) +
              ", search says " + hex(ref.round(x)));
  };
  const std::uint32_t sign = f.sign_bit();
  const bool signed_format = f.is_signed();
  const bool fnuz = f.kind == mixprec_test::specials::fnuz;
  // Mirror a positive expectation to the negative side: sign bit set; zero stays +0 in fnuz.
  auto negated = [&](std::uint32_t p, bool is_zero) { return (is_zero && fnuz) ? 0U : (p | sign); };

  // 1. Every finite value converts to itself, for both signs.
  for (const auto& v : values) {
    expect(v.value, v.bits, "value");
    if (signed_format) expect(-v.value, v.bits | sign, "negative value");
  }
  // 2. Between neighbours lo < hi (including 0 and the smallest value, and max and the overflow
  // step max + ulp(max)): the midpoint goes to the even pattern, one ulp of double or float below
  // it to lo, one ulp above to hi.
  struct neighbour {
    double value;
    std::uint32_t bits;  // pattern for expectations
    bool is_zero;
    std::uint32_t parity_bits;  // pattern whose parity decides ties
  };
  std::vector<neighbour> chain;
  if (f.kind != mixprec_test::specials::e8m0) chain.push_back({0.0, 0U, true, 0U});
  for (const auto& v : values) chain.push_back({v.value, v.bits, false, v.bits});
  const double max = ref.max();
  const double beyond = max + std::ldexp(1.0, std::ilogb(max) - f.mantissa_bits);  // max + ulp(max)
  chain.push_back(
      {beyond, ref.overflow_bits(false, mixprec_test::overflow::to_inf_or_nan), false, ref.max_bits() + 1U});
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
    const neighbour& lo = chain[i];
    const neighbour& hi = chain[i + 1];
    const double mid = (lo.value + hi.value) / 2;  // exact: both have few significant bits
    const neighbour& even = (lo.parity_bits & 1U) == 0 ? lo : hi;
    expect(mid, even.bits, "midpoint");
    expect(mixprec_test::double_down(mid), lo.bits, "midpoint - 1 double ulp");
    expect(mixprec_test::double_up(mid), hi.bits, "midpoint + 1 double ulp");
    const auto midf = static_cast<float>(mid);
    expect(mixprec_test::float_down(midf), lo.bits, "midpoint - 1 float ulp");
    expect(mixprec_test::float_up(midf), hi.bits, "midpoint + 1 float ulp");
    if (signed_format) {
      // Overflow keeps the sign: the negative overflow pattern is the format's -Inf / NaN / -max.
      auto neg = [&](const neighbour& n) {
        if (n.value == beyond) return ref.overflow_bits(true, mixprec_test::overflow::to_inf_or_nan);
        return negated(n.bits, n.is_zero);
      };
      expect(-mid, neg(even), "negative midpoint");
      expect(-mixprec_test::double_down(mid), neg(lo), "negative midpoint - 1 double ulp");
      expect(-mixprec_test::double_up(mid), neg(hi), "negative midpoint + 1 double ulp");
    }
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("zeros, infinities, NaN, huge and tiny inputs convert as the format's specification says",
                        "[basic_float][conversion][special]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
  INFO(f.name);
  SECTION("+0 and -0: -0 keeps its sign; fnuz has no -0 (+0); e8m0 has no zero (NaN)") {
    CHECK(TestType(0.0F).bits() == ref.zero_bits(false, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(-0.0F).bits() == ref.zero_bits(true, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(0.0).bits() == ref.zero_bits(false, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(-0.0).bits() == ref.zero_bits(true, mixprec_test::overflow::to_inf_or_nan));
  }
  SECTION("+-Inf: Inf where the format has it, else NaN; MX formats (no NaN either) give +-max") {
    CHECK(TestType(inf).bits() == ref.infinity_bits(false, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(-inf).bits() == ref.infinity_bits(true, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(static_cast<double>(inf)).bits() == ref.infinity_bits(false, mixprec_test::overflow::to_inf_or_nan));
    CHECK(TestType(-static_cast<double>(inf)).bits() == ref.infinity_bits(true, mixprec_test::overflow::to_inf_or_nan));
  }
  SECTION("NaN of either sign and any payload gives the canonical quiet NaN of that sign") {
    for (std::uint32_t fbits : {0x7FC00000U, 0x7F800001U, 0x7FFFFFFFU, 0x7FA12345U}) {
      const float pos = std::bit_cast<float>(fbits);
      const float neg = std::bit_cast<float>(fbits | 0x80000000U);
      CHECK(TestType(pos).bits() == ref.nan_bits(false));
      CHECK(TestType(neg).bits() == ref.nan_bits(true));
      CHECK(TestType(static_cast<double>(pos)).bits() == ref.nan_bits(false));
      CHECK(TestType(static_cast<double>(neg)).bits() == ref.nan_bits(true));
    }
    CHECK(TestType(std::bit_cast<double>(0x7FF0000000000001ULL)).bits() == ref.nan_bits(false));  // double sNaN
    CHECK(TestType(-static_cast<double>(qnan)).bits() == ref.nan_bits(true));
  }
  SECTION("huge finite inputs overflow; tiny ones underflow to zero (e8m0: to its smallest value 2^-127)") {
    for (double huge :
         {0x1p20, 0x1p64, 0x1p127, 0x1.fffffep127, 0x1p128, 0x1p1000, std::numeric_limits<double>::max()}) {
      if (huge <= ref.max()) continue;
      CHECK(TestType(huge).bits() == ref.overflow_bits(false, mixprec_test::overflow::to_inf_or_nan));
      CHECK(TestType(-huge).bits() == ref.round(-huge));
      if (static_cast<double>(static_cast<float>(huge)) == huge) {
        CHECK(TestType(static_cast<float>(huge)).bits() ==
              ref.overflow_bits(false, mixprec_test::overflow::to_inf_or_nan));
      }
    }
    CHECK(TestType(std::numeric_limits<float>::max()).bits() == ref.round(std::numeric_limits<float>::max()));
    CHECK(TestType(std::numeric_limits<float>::lowest()).bits() == ref.round(std::numeric_limits<float>::lowest()));
    for (double tiny : {std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::min(), 0x1p-200,
                        static_cast<double>(std::numeric_limits<float>::denorm_min()),
                        static_cast<double>(std::numeric_limits<float>::min())}) {
      if (tiny >= ref.positives().front().value / 2) continue;  // below half the smallest value
      CHECK(TestType(tiny).bits() == 0x00U);              // +0; for e8m0 (no zero) its smallest value 2^-127 = 0x00
      CHECK(TestType(-tiny).bits() == ref.round(-tiny));  // -0 (+0 in fnuz; NaN in e8m0)
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Integers

TEMPLATE_LIST_TEST_CASE("integers of every width round once, exactly, even beyond 2^53",
                        "[basic_float][conversion][integer]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  INFO(ref.spec().name);
  mismatches bad;
  auto check = [&](auto i) {
    const auto got = TestType(i).bits();
    const auto expected = ref.round_integer(i);
    if (got != expected) bad.add(std::to_string(i) + ": expected " + hex(expected) + ", got " + hex(got));
  };
  for (std::int64_t i = -4100; i <= 4100; ++i) check(i);
  for (std::int64_t i = 4101; i <= 140000; i += 13) {
    check(i);
    check(-i);
  }
  for (int i = -200; i <= 200; ++i) {
    check(static_cast<std::int8_t>(i));
    check(static_cast<std::uint8_t>(i));
    check(static_cast<short>(i * 150));
    check(static_cast<unsigned short>(i * 150));
  }
  check(true);
  check(false);
  check(std::numeric_limits<std::int64_t>::max());
  check(std::numeric_limits<std::int64_t>::min());
  check(std::numeric_limits<std::uint64_t>::max());
  check(std::numeric_limits<std::int32_t>::max());
  check(std::numeric_limits<std::int32_t>::min());
  check(std::numeric_limits<std::uint32_t>::max());
  std::mt19937_64 rng(7);
  for (int n = 0; n < 20000; ++n) {
    const int width = 1 + static_cast<int>(rng() % 64);
    const std::uint64_t u = rng() >> (64 - width);
    check(u);
    check(static_cast<std::int64_t>(u));
    check(-static_cast<std::int64_t>(u >> 1));
    check(static_cast<std::int32_t>(u));
  }
  // Integers just beyond each midpoint of the format, where converting to double or float first
  // would land exactly on the midpoint and then tie the wrong way.
  for (const auto& v : ref.positives()) {
    if (v.value < 0x1p54 || v.value > 0x1p62) continue;
    const auto base = static_cast<std::uint64_t>(v.value);
    const auto ulp = static_cast<std::uint64_t>(std::ldexp(1.0, std::ilogb(v.value) - ref.spec().mantissa_bits));
    check(base + ulp / 2 + 1);
    check(base + ulp / 2);
    check(base + ulp / 2 - 1);
    check(-static_cast<std::int64_t>(base + ulp / 2 + 1));
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}

// ------------------------------------------------------------------------------------------------
// Classification, abs, negation

TEMPLATE_LIST_TEST_CASE("isnan, isinf, isfinite and signbit agree with the format's encoding for every pattern",
                        "[basic_float][classification]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  mismatches bad;
  for (std::uint32_t p = 0; p < ref.spec().patterns(); ++p) {
    const TestType x = pattern<TestType>(p);
    const bool nan = ref.is_nan(p);
    const bool inf = ref.is_inf(p);
    if (isnan(x) != nan || isinf(x) != inf || isfinite(x) != (!nan && !inf) || signbit(x) != ref.sign_of(p)) {
      bad.add(hex(p) + ": isnan " + std::to_string(isnan(x)) + " isinf " + std::to_string(isinf(x)) + " isfinite " +
              std::to_string(isfinite(x)) + " signbit " + std::to_string(signbit(x)));
    }
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("abs clears the sign bit of every pattern, NaN included (IEEE 754-2019 5.5.1, std::fabs)",
                        "[basic_float][abs]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  mismatches bad;
  for (std::uint32_t p = 0; p < f.patterns(); ++p) {
    // fnuz: the NaN 1.0000.000 has no sign-cleared twin (0.0000.000 is zero): it stays NaN.
    const std::uint32_t expected = (f.kind == mixprec_test::specials::fnuz && ref.is_nan(p)) ? p : (p & ~f.sign_bit());
    const auto got = abs(pattern<TestType>(p)).bits();
    if (got != expected) bad.add(hex(p) + ": expected " + hex(expected) + ", got " + hex(got));
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("negation flips the sign bit, fnuz zero and NaN stay, e8m0 has no negative numbers (NaN)",
                        "[basic_float][negation]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  mismatches bad;
  for (std::uint32_t p = 0; p < f.patterns(); ++p) {
    std::uint32_t expected = p ^ f.sign_bit();
    if (f.kind == mixprec_test::specials::fnuz && (p & ~f.sign_bit()) == 0) expected = p;  // +0 and the NaN
    if (f.kind == mixprec_test::specials::e8m0) expected = ref.nan_bits(false);            // ml_dtypes: -x is 0xFF
    const TestType x = pattern<TestType>(p);
    const auto got = (-x).bits();
    const auto plus = (+x).bits();
    if (got != expected || plus != p)
      bad.add(hex(p) + ": -x expected " + hex(expected) + ", got " + hex(got) + "; +x " + hex(plus));
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

// ------------------------------------------------------------------------------------------------
// Comparisons

TEMPLATE_LIST_TEST_CASE("comparisons follow the decoded values: NaN is unordered and +0 == -0",
                        "[basic_float][comparison]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto patterns = sample_patterns<TestType>(250);
  mismatches bad;
  for (std::uint32_t pa : patterns) {
    const double a = ref.decode(pa);
    const TestType x = pattern<TestType>(pa);
    for (std::uint32_t pb : patterns) {
      const double b = ref.decode(pb);
      const TestType y = pattern<TestType>(pb);
      const auto order = x <=> y;
      const std::partial_ordering expected_order = std::isnan(a) || std::isnan(b) ? std::partial_ordering::unordered
                                                   : a < b                        ? std::partial_ordering::less
                                                   : a > b                        ? std::partial_ordering::greater
                                                                                  : std::partial_ordering::equivalent;
      if ((x == y) != (a == b) || (x != y) != (a != b) || (x < y) != (a < b) || (x <= y) != (a <= b) ||
          (x > y) != (a > b) || (x >= y) != (a >= b) || order != expected_order) {
        bad.add(hex(pa) + " vs " + hex(pb) + " (" + show(a) + " vs " + show(b) + ")");
      }
    }
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

// ------------------------------------------------------------------------------------------------
// Arithmetic

namespace {

// The correctly rounded result of the exact operation (IEEE semantics for Inf/NaN/zero operands),
// independent of how the header computes it: + and - exactly (TwoSum), * exactly (two significands
// of at most 11 bits: the double product is exact), / decided by exact residuals a - m*b.
template <class T>
std::uint32_t exact_op(char op, double a, double b) {
  const auto& ref = reference_of<T>();
  if (!std::isfinite(a) || !std::isfinite(b)) {
    switch (op) {
      case '+': return ref.round(a + b);
      case '-': return ref.round(a - b);
      case '*': return ref.round(a * b);
      default: return ref.round(a / b);
    }
  }
  switch (op) {
    case '+': return ref.round_sum(a, b);
    case '-': return ref.round_sum(a, -b);
    case '*': return ref.round(a * b);
    default: return ref.round_quotient(a, b);
  }
}

template <class T>
void check_arithmetic(const std::vector<std::uint32_t>& patterns) {
  const auto& ref = reference_of<T>();
  mismatches bad;
  for (std::uint32_t pa : patterns) {
    const T x = pattern<T>(pa);
    const double a = ref.decode(pa);
    for (std::uint32_t pb : patterns) {
      const T y = pattern<T>(pb);
      const double b = ref.decode(pb);
      const T results[4] = {x + y, x - y, x * y, x / y};
      const char ops[4] = {'+', '-', '*', '/'};
      for (int k = 0; k < 4; ++k) {
        const std::uint32_t expected = exact_op<T>(ops[k], a, b);
        const std::uint32_t got = results[k].bits();
        // A NaN result is compared by isnan where NaN's sign is the platform's choice (float's
        // default NaN); a format without NaN compares its pattern, derived from the same float NaN.
        const bool same = ref.is_nan(expected) ? ref.is_nan(got) : got == expected;
        if (!same) {
          bad.add(hex(pa) + " " + ops[k] + " " + hex(pb) + " (" + show(a) + " " + ops[k] + " " + show(b) +
                  "): expected " + hex(expected) + ", got " + hex(got));
        }
      }
    }
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("+ - * / give the correctly rounded result of the exact operation", "[basic_float][arithmetic]",
                        all_small_floats) {
  // 4- and 6-bit formats: every pair; 8-bit formats: every pair of a 64-pattern stride set here (the
  // exhaustive 65,536 pairs are in float8_test.cpp); 16-bit formats: 120 x 120 sampled pairs (the
  // random tests of bfloat16_test.cpp and float16_test.cpp add more).
  const auto& f = reference_of<TestType>().spec();
  std::vector<std::uint32_t> patterns;
  if (f.bits() < 8) {
    patterns = sample_patterns<TestType>(0);
  } else if (f.bits() == 8) {
    for (std::uint32_t p = 0; p < 256; p += 3) patterns.push_back(p);
    for (std::uint32_t p : {0x00U, 0x7FU, 0x80U, 0xFFU, 0x7EU, 0xFEU, 0x7CU, 0xFCU, 0x7BU, 0xFBU})
      patterns.push_back(p);
  } else {
    patterns = sample_patterns<TestType>(120);
  }
  check_arithmetic<TestType>(patterns);
}

TEMPLATE_LIST_TEST_CASE("compound assignment gives the same result as the binary operator", "[basic_float][arithmetic]",
                        all_small_floats) {
  std::vector<std::uint32_t> patterns;
  for (std::uint32_t p : sample_patterns<TestType>(40)) {
    if (patterns.size() < 40 || p % 7 == 0) patterns.push_back(p);
  }
  mismatches bad;
  for (std::uint32_t pa : patterns) {
    for (std::uint32_t pb : patterns) {
      const TestType x = pattern<TestType>(pa);
      const TestType y = pattern<TestType>(pb);
      // Same bits, or both NaN: which input's NaN payload (and sign) a NaN result carries is not
      // specified by IEEE 754 (6.2.3), and GCC -O3 commutes the operands of + and * in one of the two
      // spellings (seen: float16 0x7C01 + 0xFC01 gave different NaN payloads).
      const auto same = [](TestType a, TestType b) {
        return a.bits() == b.bits() || (std::isnan(static_cast<float>(a)) && std::isnan(static_cast<float>(b)));
      };
      TestType c = x;
      c += y;
      const bool add_ok = same(c, x + y);
      c = x;
      c -= y;
      const bool sub_ok = same(c, x - y);
      c = x;
      c *= y;
      const bool mul_ok = same(c, x * y);
      c = x;
      c /= y;
      const bool div_ok = same(c, x / y);
      if (!(add_ok && sub_ok && mul_ok && div_ok)) bad.add(hex(pa) + " op= " + hex(pb));
    }
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}

TEST_CASE("mixed expressions with float are float expressions", "[basic_float][arithmetic]") {
  const mixprec::bfloat16 x(1.5F);
  STATIC_REQUIRE(std::is_same_v<decltype(x + 1.0F), float>);
  STATIC_REQUIRE(std::is_same_v<decltype(x * 2.0), double>);
  STATIC_REQUIRE(std::is_same_v<decltype(x + x), mixprec::bfloat16>);
  // 1.5 + 2^-10 is not a bfloat16 value but is a float value: the float expression keeps it.
  CHECK(x + 0x1p-10F == 1.5F + 0x1p-10F);
  CHECK(static_cast<float>(x + mixprec::bfloat16(0x1p-10F)) == 1.5F);  // bfloat16 sum rounds back
}

// ------------------------------------------------------------------------------------------------
// Conversions between small float types

namespace {
template <class To, class From>
void check_cross_conversion(mismatches& bad) {
  const auto& from = reference_of<From>();
  const auto& to = reference_of<To>();
  const auto patterns = sample_patterns<From>(3000);
  for (std::uint32_t p : patterns) {
    const double v = from.decode(p);
    const std::uint32_t expected = to.round(v);  // NaN: canonical NaN with the decoded sign
    const auto got = To(pattern<From>(p)).bits();
    if (got != expected) {
      bad.add(std::string(from.spec().name) + " " + hex(p) + " (" + show(v) + ") -> " + to.spec().name + ": expected " +
              hex(expected) + ", got " + hex(got));
    }
  }
}
template <class To, class From>
void check_cross_conversion_unless_same(mismatches& bad) {
  if constexpr (!std::is_same_v<To, From>) check_cross_conversion<To, From>(bad);  // same: the copy constructor
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("converting a small float to another small float rounds its exact value once",
                        "[basic_float][conversion]", all_small_floats) {
  mismatches bad;
  std::apply([&](auto... to) { (check_cross_conversion_unless_same<decltype(to), TestType>(bad), ...); },
             mixprec_test::all_small_floats{});
  INFO(reference_of<TestType>().spec().name << " -> every type: " << bad.report());
  CHECK(bad.count() == 0);
}

// ------------------------------------------------------------------------------------------------
// Streams

TEMPLATE_LIST_TEST_CASE("operator<< prints the float value with the stream's flags", "[basic_float][ostream]",
                        all_small_floats) {
  const auto& ref = reference_of<TestType>();
  for (std::uint32_t p : sample_patterns<TestType>(50)) {
    const auto v = static_cast<float>(ref.decode(p));
    std::ostringstream got;
    std::ostringstream expected;
    got << pattern<TestType>(p) << ' ' << std::setprecision(3) << std::scientific << pattern<TestType>(p);
    expected << v << ' ' << std::setprecision(3) << std::scientific << v;
    INFO(ref.spec().name << " " << hex(p));
    CHECK(got.str() == expected.str());
  }
}

TEST_CASE("operator<< prints the published example values", "[basic_float][ostream]") {
  std::ostringstream os;
  os << mixprec::bfloat16(1.0F) << ' ' << mixprec::float8_e4m3fn(448.0F) << ' ' << mixprec::float4_e2m1fn(-6.0F) << ' '
     << mixprec::float16(0.5F);
  CHECK(os.str() == "1 448 -6 0.5");
}

TEST_CASE("from_bits ignores bits above the format's width", "[basic_float][float6][float4]") {
  // float6/float4 live in the low bits of a byte; 0xC1 = 0b11'000001 keeps only 0b000001 (0.125 in e2m3fn:
  // subnormal 1 * 2^(1 - 1 - 3)).
  CHECK(mixprec::float6_e2m3fn::from_bits(0xC1).bits() == 0x01);
  CHECK(static_cast<float>(mixprec::float6_e2m3fn::from_bits(0xC1)) == 0.125f);
  // 0xF9 = 0b1111'1001 keeps 0b1001 = -0.5 in e2m1fn (sign 1, subnormal 1 * 2^(1 - 1 - 1)).
  CHECK(static_cast<float>(mixprec::float4_e2m1fn::from_bits(0xF9)) == -0.5f);
}

// ------------------------------------------------------------------------------------------------
// 128-bit integers (GCC and Clang's __int128, an integral type under -std=gnu++20, an extension
// under -std=c++20): rounded once from the full 128-bit value. Expected patterns by hand.

#if defined(__SIZEOF_INT128__)
namespace {
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;
constexpr u128 pow2_128(int k) { return u128{1} << k; }
}  // namespace

TEST_CASE("128-bit integers round once from their full value", "[basic_float][conversion][integer][int128]") {
  using mixprec::bfloat16;
  using mixprec::float16;
  using mixprec::float8_e4m3fn;
  // 2^70: bfloat16 exponent field 70 + 127 = 197 = 0xC5, pattern 0xC5 << 7 = 0x6280.
  CHECK(bfloat16(pow2_128(70)).bits() == 0x6280);
  CHECK(bfloat16(static_cast<i128>(pow2_128(70))).bits() == 0x6280);
  CHECK(bfloat16(-static_cast<i128>(pow2_128(70))).bits() == 0xE280);
  // 2^100 + 2^92 is the midpoint of 2^100 (0x7180: field 227 = 0xE3) and 2^100 + 2^93 (0x7181):
  // the tie goes to the even pattern 0x7180; one more unit (far below any 64-bit window) rounds up.
  CHECK(bfloat16(pow2_128(100) + pow2_128(92)).bits() == 0x7180);
  CHECK(bfloat16(pow2_128(100) + pow2_128(92) + 1).bits() == 0x7181);
  CHECK(bfloat16(pow2_128(100) + pow2_128(92) - 1).bits() == 0x7180);
  CHECK(bfloat16(-static_cast<i128>(pow2_128(100) + pow2_128(92) + 1)).bits() == 0xF181);
  // The most negative __int128 is -2^127: field 254 = 0xFE, sign set: 0xFF00.
  CHECK(bfloat16(static_cast<i128>(pow2_128(127))).bits() == 0xFF00);
  // 2^128 - 1 is above bfloat16's max (2^128 - 2^120) plus half an ulp (2^119): +Inf 0x7F80;
  // saturate_cast clamps to max 0x7F7F.
  CHECK(bfloat16(~u128{0}).bits() == 0x7F80);
  CHECK(mixprec::saturate_cast<bfloat16>(~u128{0}).bits() == 0x7F7F);
  CHECK(mixprec::saturate_cast<bfloat16>(pow2_128(100) + pow2_128(92) + 1).bits() == 0x7181);
  // float16 overflows to Inf (0x7C00 / 0xFC00), float8_e4m3fn to NaN (0x7F / 0xFF).
  CHECK(float16(pow2_128(70)).bits() == 0x7C00);
  CHECK(float16(-static_cast<i128>(pow2_128(70))).bits() == 0xFC00);
  CHECK(float8_e4m3fn(pow2_128(70)).bits() == 0x7F);
  // Small values as for the 64-bit types: 3 = 1.1b x 2^1: 0x4040; -3: 0xC040; 0: +0.
  CHECK(bfloat16(i128{3}).bits() == 0x4040);
  CHECK(bfloat16(i128{-3}).bits() == 0xC040);
  CHECK(bfloat16(i128{0}).bits() == 0x0000);
  CHECK(float16(u128{2049}).bits() == 0x6800);  // 2049 ties between 2048 and 2050: even 2048 = 0x6800
}

TEMPLATE_LIST_TEST_CASE("128-bit integers that fit in 64 bits round as the 64-bit integer does",
                        "[basic_float][conversion][integer][int128]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  INFO(ref.spec().name);
  mismatches bad;
  std::mt19937_64 rng(128);
  for (int n = 0; n < 4000; ++n) {
    const int width = 1 + static_cast<int>(rng() % 64);
    const std::uint64_t u = rng() >> (64 - width);
    const auto s = -static_cast<std::int64_t>(u >> 1);
    if (TestType(static_cast<u128>(u)).bits() != ref.round_integer(u)) bad.add("u128 " + std::to_string(u));
    if (TestType(static_cast<i128>(s)).bits() != ref.round_integer(s)) bad.add("i128 " + std::to_string(s));
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}
#endif

// ------------------------------------------------------------------------------------------------
// long double: from_long_double<T>(x, mode) rounds once from the full value. The reference rounds
// through exact comparisons of x with the format's values and midpoints (doubles, exact in long double).

TEMPLATE_LIST_TEST_CASE("from_long_double rounds once from the full long double value",
                        "[basic_float][conversion][long-double]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  INFO(ref.spec().name);
  using mixprec_test::overflow;
  const auto expected = [&](long double x, overflow mode) {
    if (std::isnan(x)) return ref.nan_bits(std::signbit(x));
    if (std::isinf(x)) return ref.infinity_bits(std::signbit(x), mode);
    if (x == 0) return ref.zero_bits(std::signbit(x), mode);
    return ref.round_real([x](double m) { return (x > m) - (x < m); }, mode);
  };
  mismatches bad;
  const auto check = [&](long double x) {
    for (const overflow mode : {overflow::to_inf_or_nan, overflow::saturate}) {
      const auto mixprec_mode =
          mode == overflow::saturate ? mixprec::overflow_mode::saturate : mixprec::overflow_mode::to_inf_or_nan;
      const auto got = mixprec::from_long_double<TestType>(x, mixprec_mode).bits();
      const auto want = expected(x, mode);
      if (got != want) bad.add(show(static_cast<double>(x)) + ": expected " + hex(want) + ", got " + hex(got));
    }
  };
  // Every value and midpoint of the format, and their neighbours 2^-60 (relative) away: beyond
  // double's precision where long double has more, so a rounding through double would tie.
  constexpr long double nudge = std::numeric_limits<long double>::digits > 60 ? 0x1p-60L : 0x1p-40L;
  const auto& v = ref.positives();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const long double a = v[i].value;
    const long double mid = i + 1 < v.size() ? (a + static_cast<long double>(v[i + 1].value)) / 2 : a * 1.5L;
    for (const long double x : {a, mid, mid * (1 + nudge), mid * (1 - nudge), a * (1 + nudge), a * (1 - nudge)}) {
      check(x);
      check(-x);
    }
  }
  for (const long double x :
       {0.0L, -0.0L, std::numeric_limits<long double>::infinity(), -std::numeric_limits<long double>::infinity(),
        std::numeric_limits<long double>::quiet_NaN(), std::numeric_limits<long double>::max(),
        std::numeric_limits<long double>::denorm_min(), std::numeric_limits<long double>::min(), 1e300L, 1e-300L}) {
    check(x);
    check(-x);
  }
  // Random significands over the format's range.
  std::mt19937_64 rng(80);
  for (int n = 0; n < 20000; ++n) {
    const long double m = std::ldexp(static_cast<long double>(rng() | (std::uint64_t{1} << 63)), -64);  // [0.5, 1)
    check(std::ldexp(m, static_cast<int>(rng() % 300) - 160));
  }
  INFO(bad.report());
  CHECK(bad.count() == 0);
}

TEST_CASE("from_long_double: spec values, saturation, and a value that double would round twice",
          "[basic_float][conversion][long-double]") {
  using mixprec::bfloat16;
  using mixprec::float8_e4m3fn;
  using mixprec::from_long_double;
  CHECK(from_long_double<bfloat16>(1.0L).bits() == 0x3F80);
  CHECK(from_long_double<float8_e4m3fn>(448.0L).bits() == 0x7E);   // max = 1.75 x 2^8: 0.1111.110
  CHECK(from_long_double<float8_e4m3fn>(1000.0L).bits() == 0x7F);  // overflow: NaN (no Inf)
  CHECK(from_long_double<float8_e4m3fn>(1000.0L, mixprec::overflow_mode::saturate).bits() == 0x7E);
  if constexpr (std::numeric_limits<long double>::digits > 60) {
    // 1 + 2^-8 + 2^-60: above the bfloat16 midpoint 1 + 2^-8, so 1 + 2^-7 (0x3F81); through double
    // the 2^-60 is lost and the tie goes to the even 1 (0x3F80).
    CHECK(from_long_double<bfloat16>(1.0L + 0x1p-8L + 0x1p-60L).bits() == 0x3F81);
    CHECK(bfloat16(static_cast<double>(1.0L + 0x1p-8L + 0x1p-60L)).bits() == 0x3F80);
  }
}

// ------------------------------------------------------------------------------------------------
// The floating-point environment: flush-to-zero and denormals-are-zero (MXCSR FTZ bit 15, DAZ bit
// 6) must not change a conversion. bfloat16's subnormals and float8_e8m0fnu's 2^-127 are float
// subnormals, so a conversion through float arithmetic would flush them.

#if defined(__x86_64__) || defined(__i386__)
namespace {
using test_support::mxcsr_scope;
/// FTZ, DAZ, rounding toward zero, all exceptions masked.
unsigned ftz_daz_csr() { return (_mm_getcsr() & ~0x6000U) | 0x8000U | 0x0040U | 0x6000U | 0x1F80U; }
}  // namespace

TEMPLATE_LIST_TEST_CASE("every bit pattern converts to float and double exactly under FTZ and DAZ",
                        "[basic_float][conversion][fenv]", all_small_floats) {
  const auto& ref = reference_of<TestType>();
  const auto& f = ref.spec();
  std::vector<float> as_float(f.patterns());
  std::vector<double> as_double(f.patterns());
  {
    const mxcsr_scope scope(ftz_daz_csr());
    for (std::uint32_t p = 0; p < f.patterns(); ++p) {
      const TestType x = pattern<TestType>(p);
      as_float[p] = x;
      as_double[p] = static_cast<double>(x);
    }
  }
  mismatches bad;
  for (std::uint32_t p = 0; p < f.patterns(); ++p) {
    const double expected = ref.decode(p);
    if (std::isnan(expected)) {
      if (!std::isnan(as_float[p]) || !std::isnan(as_double[p])) bad.add(hex(p) + ": expected NaN");
    } else if (mixprec_test::double_bits(as_double[p]) != mixprec_test::double_bits(expected) ||
               mixprec_test::float_bits(as_float[p]) != mixprec_test::float_bits(static_cast<float>(expected))) {
      bad.add(hex(p) + ": expected " + show(expected) + ", got float " + show(as_float[p]) + ", double " +
              show(as_double[p]));
    }
  }
  INFO(f.name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEST_CASE("bfloat16 subnormals encode, compare and add exactly under FTZ and DAZ", "[basic_float][fenv][bfloat16]") {
  using mixprec::bfloat16;
  // Pattern 0x0001 is 2^-133 (2^-126 * 2^-7); 0x0002 is 2^-132; 0x8001 is -2^-133.
  bool less = false, equal_zero = true;
  std::uint16_t from_float = 0, from_double = 0, sum = 0, negated = 0, product = 0;
  {
    const mxcsr_scope scope(ftz_daz_csr());
    const bfloat16 tiny = bfloat16::from_bits(0x0001);
    less = bfloat16(0.0f) < tiny;
    equal_zero = tiny == bfloat16(0.0f);
    from_float = bfloat16(0x1p-133f).bits();
    from_double = bfloat16(0x1p-133).bits();
    sum = (tiny + tiny).bits();
    negated = (bfloat16(0.0f) - tiny).bits();
    product = (tiny * bfloat16(2.0f)).bits();
  }
  CHECK(less);
  CHECK_FALSE(equal_zero);
  CHECK(from_float == 0x0001);
  CHECK(from_double == 0x0001);
  CHECK(sum == 0x0002);
  CHECK(negated == 0x8001);
  CHECK(product == 0x0002);
}
#endif

}  // namespace basic_float_test
