// Tests of mixprec/policies/cast.hpp: cast_floating<To>, cast_floating(tree, role, policy), cast_to_param /
// cast_to_compute / cast_to_output, and Flax's promote. Expected bit patterns are worked out from the
// format definitions in the comments next to them (IEEE binary32 / binary16, bfloat16 = top half of
// binary32), never taken from the code under test.
#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/intn.hpp"
#include "mixprec/policies/cast.hpp"
#include "mixprec/policies/policy.hpp"
#include "support/layer_params.hpp"

namespace cast_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::promote;

namespace {

using mixprec_test::layer_params;

float float_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

}  // namespace

TEST_CASE("cast_floating to bfloat16 rounds float to nearest even, bit-exact", "[cast]") {
  struct row {
    std::uint32_t in;
    std::uint16_t out;
  };
  // bfloat16 keeps the top 16 bits of a float; the low 16 bits decide the rounding.
  const std::array<row, 9> table{{
      {0x3F800000, 0x3F80},  // 1.0: exact
      {0x40490FDB, 0x4049},  // 3.14159274f: low half 0x0FDB < 0x8000, round down
      {0x3F808000, 0x3F80},  // 1 + 2^-8: a tie, 0x3F80 is even, stay
      {0x3F818000, 0x3F82},  // 1 + 3 * 2^-8: a tie, 0x3F81 is odd, go up to the even 0x3F82
      {0x3F808001, 0x3F81},  // just above the tie: up
      {0x3DCCCCCD, 0x3DCD},  // 0.1f: low half 0xCCCD > 0x8000, up
      {0x80000000, 0x8000},  // -0.0 keeps its sign
      {0x7F800000, 0x7F80},  // +Inf
      {0x7F7FFFFF, 0x7F80},  // FLT_MAX: the round-up carries into the exponent: Inf
  }};
  for (const row& r : table) {
    CAPTURE(r.in);
    const bfloat16 b = mixprec::cast_floating<bfloat16>(float_from_bits(r.in));
    CHECK(b.bits() == r.out);
  }
  const bfloat16 nan = mixprec::cast_floating<bfloat16>(std::numeric_limits<float>::quiet_NaN());
  CHECK(isnan(nan));
}

TEST_CASE("cast_floating from double to bfloat16 rounds once, not through float", "[cast]") {
  // x = 1 + 2^-8 + 2^-30. To bfloat16 directly: above the midpoint 1 + 2^-8, so up to 1 + 2^-7 (0x3F81).
  // Through float first, 2^-30 is lost (float's ulp at 1 is 2^-23), leaving a tie that rounds to 0x3F80.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  CHECK(mixprec::cast_floating<bfloat16>(x).bits() == 0x3F81);
}

TEST_CASE("cast_floating from long double to small floats rounds once, not through double", "[cast][long-double]") {
  using mixprec::float8_e4m3fn;
  // Values every long double holds (it is at least double): exact, ties, extremes, specials.
  // 1 = 0x3F80; -2.5 = -1.01b x 2^1 = 0xC020; 2^-133 is bfloat16's smallest subnormal 0x0001;
  // 2^-134 is half of it, a tie that goes to the even +0; a little more rounds up to 0x0001;
  // -0 keeps its sign (0x8000); 1.9921875 x 2^127 = (2 - 2^-7) x 2^127 is bfloat16's max 0x7F7F.
  CHECK(mixprec::cast_floating<bfloat16>(1.0L).bits() == 0x3F80);
  CHECK(mixprec::cast_floating<bfloat16>(-2.5L).bits() == 0xC020);
  CHECK(mixprec::cast_floating<bfloat16>(0x1p-133L).bits() == 0x0001);
  CHECK(mixprec::cast_floating<bfloat16>(0x1p-134L).bits() == 0x0000);
  CHECK(mixprec::cast_floating<bfloat16>(0x1p-134L + 0x1p-160L).bits() == 0x0001);
  CHECK(mixprec::cast_floating<bfloat16>(-0.0L).bits() == 0x8000);
  CHECK(mixprec::cast_floating<bfloat16>(0x1p127L * 1.9921875L).bits() == 0x7F7F);
  CHECK(mixprec::cast_floating<bfloat16>(std::numeric_limits<long double>::infinity()).bits() == 0x7F80);
  CHECK(mixprec::cast_floating<bfloat16>(-std::numeric_limits<long double>::infinity()).bits() == 0xFF80);
  CHECK(isnan(mixprec::cast_floating<bfloat16>(std::numeric_limits<long double>::quiet_NaN())));
  CHECK(mixprec::cast_floating<float8_e4m3fn>(std::numeric_limits<long double>::infinity()).bits() == 0x7F);
  // A tree: the long double leaves change, the int stays.
  const auto t = mixprec::cast_floating<bfloat16>(std::tuple{std::vector<long double>{1.0L, -2.5L}, 7});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(t)>, std::tuple<std::vector<bfloat16>, int>>);
  CHECK(std::get<0>(t)[0].bits() == 0x3F80);
  CHECK(std::get<0>(t)[1].bits() == 0xC020);
  CHECK(std::get<1>(t) == 7);
  if constexpr (std::numeric_limits<long double>::digits > 53 &&
                std::numeric_limits<long double>::max_exponent > 1024) {
    // x = 1 + 2^-8 + 2^-60 (exact in a long double of more than 60 bits). To bfloat16 directly: above
    // the midpoint 1 + 2^-8, so up to 1 + 2^-7 (0x3F81). Through double, 2^-60 is lost (double's ulp
    // at 1 is 2^-52), leaving a tie that rounds to 0x3F80. Likewise float16 (ulp 2^-10, 0x3C01) and
    // float8_e4m3fn (ulp 2^-3: 1.001b x 2^0 = 0x39).
    CHECK(mixprec::cast_floating<bfloat16>(1.0L + 0x1p-8L + 0x1p-60L).bits() == 0x3F81);
    CHECK(mixprec::cast_floating<bfloat16>(-(1.0L + 0x1p-8L + 0x1p-60L)).bits() == 0xBF81);
    CHECK(mixprec::cast_floating<float16>(1.0L + 0x1p-11L + 0x1p-60L).bits() == 0x3C01);
    CHECK(mixprec::cast_floating<float8_e4m3fn>(1.0L + 0x1p-4L + 0x1p-60L).bits() == 0x39);
    // Beyond double's range: +-Inf for bfloat16 (NaN for e4m3fn, which has no Inf); below it: +-0.
    CHECK(mixprec::cast_floating<bfloat16>(0x1p2000L).bits() == 0x7F80);
    CHECK(mixprec::cast_floating<bfloat16>(-0x1p2000L).bits() == 0xFF80);
    CHECK(mixprec::cast_floating<float8_e4m3fn>(0x1p2000L).bits() == 0x7F);
    CHECK(mixprec::cast_floating<bfloat16>(0x1p-2000L).bits() == 0x0000);
    CHECK(mixprec::cast_floating<bfloat16>(-0x1p-2000L).bits() == 0x8000);
    // The smallest long double subnormal of the x87 format (2^-16445) also rounds to +0.
    CHECK(mixprec::cast_floating<bfloat16>(std::numeric_limits<long double>::denorm_min()).bits() == 0x0000);
  } else {
    WARN("long double is double here: the long-double-only values are not checked");
  }
}

TEST_CASE("cast_floating to float16 rounds and overflows as IEEE binary16", "[cast]") {
  CHECK(mixprec::cast_floating<float16>(1.0f).bits() == 0x3C00);      // exponent 15, mantissa 0
  CHECK(mixprec::cast_floating<float16>(65504.0f).bits() == 0x7BFF);  // largest finite
  CHECK(mixprec::cast_floating<float16>(65520.0f).bits() == 0x7C00);  // max + half ulp: a tie, even is Inf
  // 0.1 = 1.6 * 2^-4: exponent 11, mantissa round(0.6 * 1024) = 614 = 0x266.
  CHECK(mixprec::cast_floating<float16>(0.1f).bits() == 0x2E66);
}

TEST_CASE("cast_floating between small floats and to wider floats is exact where it can be", "[cast]") {
  // float16 65504 = 0x477FE000 as a float; to bfloat16 the low half 0xE000 rounds up: 0x4780 = 65536.
  CHECK(mixprec::cast_floating<bfloat16>(float16::from_bits(0x7BFF)).bits() == 0x4780);
  // float8_e4m3fn 448 = 1.75 * 2^8 (pattern 0x7E); in float16: exponent 8 + 15 = 23, mantissa 0.75 * 1024.
  CHECK(mixprec::cast_floating<float16>(mixprec::float8_e4m3fn::from_bits(0x7E)).bits() == 0x5F00);
  // bfloat16 0x3F81 = 1 + 2^-7 exactly.
  CHECK(mixprec::cast_floating<double>(bfloat16::from_bits(0x3F81)) == 1.0078125);
  CHECK(mixprec::cast_floating<long double>(bfloat16::from_bits(0x3F81)) == 1.0078125L);
  CHECK(mixprec::cast_floating<float>(0.1) == 0.1f);  // the compiler's own literal rounding is the reference
}

TEST_CASE("integer, bool and intn leaves are untouched in type and value", "[cast]") {
  const auto t = std::tuple{std::int8_t{-5},   std::numeric_limits<std::uint64_t>::max(), true,
                            mixprec::int4(-3), std::vector<std::int32_t>{1, 1 << 30},     2.5f};
  const auto r = mixprec::cast_floating<bfloat16>(t);
  using R = std::remove_cvref_t<decltype(r)>;
  STATIC_REQUIRE(
      std::is_same_v<R,
                     std::tuple<std::int8_t, std::uint64_t, bool, mixprec::int4, std::vector<std::int32_t>, bfloat16>>);
  CHECK(std::get<0>(r) == -5);
  CHECK(std::get<1>(r) == 18446744073709551615ULL);  // 2^64 - 1
  CHECK(std::get<2>(r) == true);
  CHECK(static_cast<int>(std::get<3>(r)) == -3);
  CHECK(std::get<4>(r) == std::vector<std::int32_t>{1, 1073741824});
  CHECK(std::get<5>(r).bits() == 0x4020);  // 2.5 = 1.25 * 2^1: exponent 128, mantissa 0b0100000
}

TEST_CASE("a tree with only integer leaves comes back unchanged", "[cast]") {
  const auto t = std::pair{std::vector<int>{1, 2}, std::uint8_t{200}};
  const auto r = mixprec::cast_floating<float16>(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::remove_cvref_t<decltype(t)>>);
  CHECK(r == t);
}

TEST_CASE("complex leaves follow a float or double target to its complex counterpart", "[cast]") {
  const std::complex<double> z(0.1, -2.25);
  const auto zf = mixprec::cast_floating<float>(z);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(zf)>, std::complex<float>>);
  CHECK(zf.real() == 0.1f);  // each part rounded once, as the literal 0.1f is
  CHECK(zf.imag() == -2.25f);

  const auto t = std::tuple{std::complex<float>(1.5f, 0.5f), 3.0f, 4};
  const auto td = mixprec::cast_floating<double>(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(td)>, std::tuple<std::complex<double>, double, int>>);
  CHECK(std::get<0>(td) == std::complex<double>(1.5, 0.5));
  CHECK(std::get<1>(td) == 3.0);
  CHECK(std::get<2>(td) == 4);
}

TEST_CASE("a user struct template is cast by changing its T", "[cast]") {
  const layer_params<float> p{1.0f, 3.14159274f, 7};
  const auto h = mixprec::cast_floating<bfloat16>(p);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, layer_params<bfloat16>>);
  CHECK(h.w.bits() == 0x3F80);
  CHECK(h.b.bits() == 0x4049);
  CHECK(h.step == 7);

  const layer_params<std::vector<double>> q{{1.0, -1.0}, {0.5}, 3};
  const auto qf = mixprec::cast_floating<float>(q);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(qf)>, layer_params<std::vector<float>>>);
  CHECK(qf.w == std::vector<float>{1.0f, -1.0f});
  CHECK(qf.b == std::vector<float>{0.5f});
  CHECK(qf.step == 3);
}

TEST_CASE("nested standard containers are cast leaf by leaf", "[cast]") {
  using nested = std::vector<std::pair<std::array<double, 2>, std::map<std::string, std::vector<float>>>>;
  const nested n{{{1.0, 2.0}, {{"a", {3.0f}}, {"b", {}}}}, {{-1.0, 0.5}, {}}};
  const auto r = mixprec::cast_floating<bfloat16>(n);
  using R = std::vector<std::pair<std::array<bfloat16, 2>, std::map<std::string, std::vector<bfloat16>>>>;
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, R>);
  REQUIRE(r.size() == 2);
  CHECK(r[0].first[0].bits() == 0x3F80);           // 1.0
  CHECK(r[0].first[1].bits() == 0x4000);           // 2.0
  CHECK(r[0].second.at("a")[0].bits() == 0x4040);  // 3.0 = 1.5 * 2^1
  CHECK(r[0].second.at("b").empty());
  CHECK(r[1].first[0].bits() == 0xBF80);  // -1.0
  CHECK(r[1].first[1].bits() == 0x3F00);  // 0.5
  CHECK(r[1].second.empty());
  STATIC_REQUIRE(std::is_same_v<mixprec::cast_floating_t<bfloat16, nested>, R>);
}

TEST_CASE("casting to the type a tree already has moves an rvalue instead of copying", "[cast]") {
  std::vector<float> v{1.0f, 2.0f, 3.0f};
  const float* data = v.data();
  auto r = mixprec::cast_floating<float>(std::move(v));
  STATIC_REQUIRE(std::is_same_v<decltype(r), std::vector<float>>);
  CHECK(r.data() == data);
  CHECK(r == std::vector<float>{1.0f, 2.0f, 3.0f});

  const std::vector<float> w{4.0f};
  const auto copy = mixprec::cast_floating<float>(w);
  CHECK(copy == w);
  CHECK(copy.data() != w.data());
}

TEST_CASE("cast_to_param, cast_to_compute and cast_to_output use the policy's roles", "[cast][policy]") {
  using P = mixprec::policy<float, bfloat16, float16>;
  const auto t = std::tuple{std::vector<double>{1.0, 0.1}, 5};
  const auto p = mixprec::cast_to_param<P>(t);
  const auto c = mixprec::cast_to_compute<P>(t);
  const auto o = mixprec::cast_to_output<P>(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(p)>, std::tuple<std::vector<float>, int>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(c)>, std::tuple<std::vector<bfloat16>, int>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(o)>, std::tuple<std::vector<float16>, int>>);
  CHECK(std::get<0>(p)[1] == 0.1f);
  CHECK(std::get<0>(c)[1].bits() == 0x3DCD);  // 0.1 (double) to bfloat16, rounded once: 0x3DCD
  CHECK(std::get<0>(o)[1].bits() == 0x2E66);  // 0.1 to float16 (see above)
  CHECK(std::get<1>(c) == 5);

  const auto via_role = mixprec::cast_floating(t, mixprec::semantic_constant<mixprec::semantic_dtype::compute>{}, P{});
  STATIC_REQUIRE(std::is_same_v<decltype(via_role), decltype(c)>);
  CHECK(std::get<0>(via_role)[0].bits() == std::get<0>(c)[0].bits());
  CHECK(std::get<0>(via_role)[1].bits() == std::get<0>(c)[1].bits());
}

TEST_CASE("promote casts the floating leaves to their common type (Flax dtype=None)", "[cast][promote]") {
  using P = mixprec::policy<float, promote, promote>;

  SECTION("bfloat16 input and float32 params compute in float32") {
    const auto x = std::vector<bfloat16>{bfloat16(1.5f), bfloat16(-2.0f)};
    const auto w = std::vector<float>{0.25f};
    const auto [xc, wc] = mixprec::cast_to_compute<P>(std::pair{x, w});
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(xc)>, std::vector<float>>);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(wc)>, std::vector<float>>);
    CHECK(xc == std::vector<float>{1.5f, -2.0f});
    CHECK(wc == std::vector<float>{0.25f});
  }
  SECTION("float64 input is never truncated") {
    const auto r = mixprec::cast_to_compute<P>(std::tuple{0.1, bfloat16(1.0f), 2.0f});
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::tuple<double, double, double>>);
    CHECK(std::get<0>(r) == 0.1);
    CHECK(std::get<1>(r) == 1.0);
  }
  SECTION("bfloat16 and float16 meet at float32 (JAX type promotion lattice)") {
    const auto r = mixprec::cast_to_output<P>(std::pair{bfloat16(1.0f), float16(2.0f)});
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::pair<float, float>>);
    CHECK(r == std::pair{1.0f, 2.0f});
  }
  SECTION("all-bfloat16 leaves stay bfloat16; integers take no part") {
    const auto r = mixprec::cast_floating<promote>(std::tuple{bfloat16(1.0f), std::int64_t{3}, true});
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::tuple<bfloat16, std::int64_t, bool>>);
    CHECK(std::get<1>(r) == 3);
  }
  SECTION("complex leaves keep their kind at the promoted precision") {
    // JAX: promote_types(complex64, float64) = complex128; the real leaf stays real (float64).
    const auto r = mixprec::cast_floating<promote>(std::pair{std::complex<float>(1.0f, 2.0f), 0.5});
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::pair<std::complex<double>, double>>);
    CHECK(r.first == std::complex<double>(1.0, 2.0));
  }
  SECTION("a tree with no floating leaf is returned unchanged") {
    const auto r = mixprec::cast_to_compute<P>(std::vector<int>{1, 2});
    CHECK(r == std::vector<int>{1, 2});
  }
  SECTION("a policy's param type takes part, as in resolve_t (FLIP 1777: inputs together with params)") {
    // P stores params in float32, so a bfloat16 input alone still computes in float32 ...
    const auto r = mixprec::cast_to_compute<P>(bfloat16(1.0f));
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, float>);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>,
                                  mixprec::resolve_t<mixprec::semantic_dtype::compute, P, bfloat16>>);
    // ... while the policy-free cast_floating<promote> looks at the leaves alone.
    const auto leaves_only = mixprec::cast_floating<promote>(bfloat16(1.0f));
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(leaves_only)>, bfloat16>);
    // Under bfloat16 params the same input stays bfloat16.
    const auto bf = mixprec::cast_to_compute<mixprec::policy<bfloat16, promote>>(bfloat16(1.0f));
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(bf)>, bfloat16>);
  }
}

TEST_CASE("cast_floating works in constant expressions", "[cast]") {
  STATIC_REQUIRE(mixprec::cast_floating<bfloat16>(1.0f).bits() == 0x3F80);
  constexpr auto arr = mixprec::cast_floating<float16>(std::array<double, 2>{1.0, -2.0});
  STATIC_REQUIRE(arr[0].bits() == 0x3C00);  // 1.0: exponent 15
  STATIC_REQUIRE(arr[1].bits() == 0xC000);  // -2.0: sign 1, exponent 16
  STATIC_REQUIRE(std::get<1>(mixprec::cast_floating<bfloat16>(std::pair{2.0f, 9})) == 9);
}

}  // namespace cast_test
