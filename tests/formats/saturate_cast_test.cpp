// Tests of mixprec/formats/saturate_cast.hpp: narrowing with finite overflow and +-Inf clamped to
// +-max ("satfinite": NVIDIA PTX cvt.rn.satfinite, CUTLASS round_to_nearest_satfinite), NaN kept,
// and for float8_e8m0fnu zero and negative inputs clamped to its smallest value 2^-127
// (docs/formats.md; ml_dtypes Float8E8m0fnuTest.NegativeInput for finite negatives). Expected
// values come from tests/types/reference_format.hpp in its saturating mode, and from hand-written
// cases (some pinned by ml_dtypes' tests, as noted).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "mixprec/core.hpp"
#include "reference_format.hpp"

namespace saturate_cast_test {

namespace {

using mixprec::saturate_cast;
using mixprec_test::hex;
using mixprec_test::mismatches;
using mixprec_test::overflow;
using mixprec_test::reference_of;
using mixprec_test::show;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

template <class T>
T pattern(std::uint32_t p) {
  return T::from_bits(static_cast<typename T::storage_type>(p));
}

template <class To, class From>
void check_from_small_float(mismatches& bad) {
  const auto& from = reference_of<From>();
  const auto& to = reference_of<To>();
  const std::uint32_t step = from.spec().bits() > 8 ? 97 : 1;  // every pattern up to 8 bits, a stride of 16-bit ones
  for (std::uint32_t p = 0; p < from.spec().patterns(); p += step) {
    const std::uint32_t expected = to.round(from.decode(p), overflow::saturate);
    const auto got = saturate_cast<To>(pattern<From>(p)).bits();
    if (got != expected) {
      bad.add(std::string(from.spec().name) + " " + hex(p) + " -> " + to.spec().name + ": expected " + hex(expected) +
              ", got " + hex(got));
    }
  }
}

}  // namespace

TEST_CASE("saturate_cast clamps where T(x) overflows", "[saturate_cast]") {
  using namespace mixprec;
  CHECK(saturate_cast<float8_e4m3fn>(1000.0F).bits() == 0x7E);  // 448 (the header's example)
  CHECK(float8_e4m3fn(1000.0F).bits() == 0x7F);                 // NaN without saturation
  CHECK(saturate_cast<float8_e5m2>(-inf).bits() == 0xFB);       // -57344
  CHECK(saturate_cast<float8_e5m2>(inf).bits() == 0x7B);
  CHECK(saturate_cast<float8_e5m2>(61440.0F).bits() == 0x7B);  // would tie to Inf; clamped
  CHECK(saturate_cast<float8_e4m3fn>(464.0F).bits() == 0x7E);  // ties to 448 anyway
  CHECK(saturate_cast<float8_e4m3fn>(465.0F).bits() == 0x7E);
  CHECK(saturate_cast<float8_e4m3fn>(-inf).bits() == 0xFE);
  CHECK(saturate_cast<float8_e4m3fnuz>(248.0F).bits() == 0x7F);
  CHECK(saturate_cast<float8_e4m3fnuz>(-1e9).bits() == 0xFF);
  CHECK(saturate_cast<bfloat16>(1e39).bits() == 0x7F7F);
  CHECK(saturate_cast<bfloat16>(-inf).bits() == 0xFF7F);
  CHECK(saturate_cast<float16>(65520.0F).bits() == 0x7BFF);
  CHECK(saturate_cast<float16>(std::numeric_limits<std::int64_t>::max()).bits() == 0x7BFF);
  CHECK(saturate_cast<float16>(std::numeric_limits<std::int64_t>::min()).bits() == 0xFBFF);
  CHECK(saturate_cast<float4_e2m1fn>(100.0F).bits() == 0x7);
  CHECK(saturate_cast<float6_e3m2fn>(-inf).bits() == 0x3F);
  // Values in range are rounded exactly as T(x) does.
  CHECK(saturate_cast<float8_e4m3fn>(300.0F).bits() == 0x79);
  CHECK(saturate_cast<bfloat16>(3.14159265F).bits() == 0x4049);
}

TEST_CASE("saturate_cast keeps NaN and handles float8_e8m0fnu's missing zero and sign", "[saturate_cast]") {
  using namespace mixprec;
  CHECK(saturate_cast<float8_e4m3fn>(qnan).bits() == 0x7F);
  CHECK(saturate_cast<float8_e4m3fn>(-qnan).bits() == 0xFF);
  CHECK(saturate_cast<float8_e5m2>(qnan).bits() == 0x7E);
  CHECK(saturate_cast<float8_e4m3fnuz>(qnan).bits() == 0x80);
  CHECK(saturate_cast<bfloat16>(-qnan).bits() == 0xFFC0);
  CHECK(saturate_cast<float8_e8m0fnu>(qnan).bits() == 0xFF);
  // ml_dtypes NegativeInput (kSaturate=true): finite negatives and -0 give lowest() = 2^-127.
  for (float v : {std::numeric_limits<float>::lowest(), -1.0F, -0.5F, -std::numeric_limits<float>::min(),
                  -std::numeric_limits<float>::denorm_min(), -0.0F, 0.0F}) {
    INFO(v);
    CHECK(saturate_cast<float8_e8m0fnu>(v).bits() == 0x00);
  }
  CHECK(saturate_cast<float8_e8m0fnu>(-inf).bits() == 0x00);  // docs/formats.md: negative -> 2^-127
  CHECK(saturate_cast<float8_e8m0fnu>(inf).bits() == 0xFE);   // +Inf -> max 2^127
  CHECK(saturate_cast<float8_e8m0fnu>(0x1p200).bits() == 0xFE);
  CHECK(saturate_cast<float8_e8m0fnu>(0).bits() == 0x00);
  CHECK(saturate_cast<float8_e8m0fnu>(-5).bits() == 0x00);
}

TEST_CASE("saturate_cast between small floats (ml_dtypes' saturating float8 casts)", "[saturate_cast]") {
  using namespace mixprec;
  // ml_dtypes Float8E5m2_To_Float8E4m3fn: e5m2's max saturates to e4m3fn's max.
  CHECK(saturate_cast<float8_e4m3fn>(std::numeric_limits<float8_e5m2>::max()).bits() == 0x7E);
  // ml_dtypes Float8E5m2_To_Float8E4m3b11fnuz: ... and to e4m3b11fnuz's max 30.
  CHECK(saturate_cast<float8_e4m3b11fnuz>(std::numeric_limits<float8_e5m2>::max()).bits() == 0x7F);
  // ml_dtypes Float8E4m3b11fnuz_To_Float8E4m3fn: 30 fits, so it is kept.
  CHECK(static_cast<float>(saturate_cast<float8_e4m3fn>(std::numeric_limits<float8_e4m3b11fnuz>::max())) == 30.0F);
  // ml_dtypes Half_To_Float8E4m3fn: the half 0x1.dfcp+8 (479.75) saturates to e4m3fn's max.
  CHECK(saturate_cast<float8_e4m3fn>(float16(0x1.dfcp+8F)).bits() == 0x7E);
  // ml_dtypes Float8E5m2_To_Float8E4m3fn: e5m2 0x1F (2^-7 - 2^-10) rounds to e4m3fn 0x04.
  CHECK(saturate_cast<float8_e4m3fn>(float8_e5m2::from_bits(0x1F)).bits() == 0x04);
  CHECK(saturate_cast<float8_e4m3fn>(float8_e5m2::from_bits(0x7C)).bits() == 0x7E);  // e5m2 +Inf
  CHECK(saturate_cast<float8_e4m3fn>(float8_e5m2::from_bits(0x7E)).bits() == 0x7F);  // e5m2 NaN
}

TEMPLATE_LIST_TEST_CASE("saturate_cast from float, double and integers matches the saturating reference",
                        "[saturate_cast]", mixprec_test::all_small_floats) {
  const auto& ref = reference_of<TestType>();
  mismatches bad;
  auto check_real = [&](double x) {
    const auto expected = ref.round(x, overflow::saturate);
    const auto got = saturate_cast<TestType>(x).bits();
    if (got != expected) bad.add("double " + show(x) + ": expected " + hex(expected) + ", got " + hex(got));
    const auto xf = static_cast<float>(x);
    if (static_cast<double>(xf) == x || std::isnan(x)) {
      const auto got_f = saturate_cast<TestType>(xf).bits();
      const auto expected_f = ref.round(xf, overflow::saturate);
      if (got_f != expected_f) bad.add("float " + show(xf) + ": expected " + hex(expected_f) + ", got " + hex(got_f));
    }
  };
  // Every value and the midpoints around the top of the range, both signs, and the special inputs.
  const double max = ref.max();
  for (const auto& v : ref.positives()) {
    check_real(v.value);
    check_real(-v.value);
  }
  for (double x : {max, (max + (max + std::ldexp(1.0, std::ilogb(max) - ref.spec().mantissa_bits))) / 2, max * 1.5,
                   max * 2, max * 1e6, 0x1p1000, static_cast<double>(inf), static_cast<double>(qnan), 0.0, -0.0,
                   std::numeric_limits<double>::denorm_min(), 0x1p-300}) {
    check_real(x);
    check_real(-x);
    check_real(mixprec_test::double_down(x));
    check_real(mixprec_test::double_up(x));
  }
  std::mt19937_64 rng(0x5A7ULL);
  for (int n = 0; n < 5000; ++n)
    check_real(mixprec_test::random_double(rng, std::ilogb(max) - 12, std::ilogb(max) + 4));
  for (std::int64_t i :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, std::int64_t{1000000}, std::int64_t{-1000000},
        std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()}) {
    const auto got = saturate_cast<TestType>(i).bits();
    const auto expected = ref.round_integer(i, overflow::saturate);
    if (got != expected) bad.add("int64 " + std::to_string(i) + ": expected " + hex(expected) + ", got " + hex(got));
  }
  {
    const auto got = saturate_cast<TestType>(std::numeric_limits<std::uint64_t>::max()).bits();
    const auto expected = ref.round_integer(std::numeric_limits<std::uint64_t>::max(), overflow::saturate);
    if (got != expected) bad.add("uint64 max: expected " + hex(expected) + ", got " + hex(got));
  }
  INFO(ref.spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

TEMPLATE_LIST_TEST_CASE("saturate_cast from every other small float matches the saturating reference",
                        "[saturate_cast]", mixprec_test::all_small_floats) {
  mismatches bad;
  std::apply([&](auto... from) { (check_from_small_float<TestType, decltype(from)>(bad), ...); },
             mixprec_test::all_small_floats{});
  INFO("into " << reference_of<TestType>().spec().name << ": " << bad.report());
  CHECK(bad.count() == 0);
}

}  // namespace saturate_cast_test
