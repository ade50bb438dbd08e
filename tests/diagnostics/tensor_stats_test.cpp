// Tests of mixprec/diagnostics/tensor_stats.hpp: statistics of small arrays computed by hand in the
// comments, NaN/Inf counting on bit patterns taken from the format specs (bfloat16 = the top half of
// IEEE binary32; float16 = IEEE binary16; OCP FP8 E4M3/E5M2), and headroom to each format's max
// (the max values as the format specs and ml_dtypes' finfo tables give them).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/tensor_stats.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::float16;
using mixprec::diagnostics::compute_stats;
using mixprec::diagnostics::format_max;
using mixprec::diagnostics::headroom_bits;
using mixprec::diagnostics::tensor_stats;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();

// Largest finite values, from the format specs: float16 (IEEE binary16) max = (2 - 2^-10) * 2^15 =
// 65504 = 2^16 (1 - 2^-11); bfloat16 max = 0x7F7F = (2 - 2^-7) * 2^127 = 2^128 (1 - 2^-8).
// Their log2, written from those factorisations (log2(1 - t) = log1p(-t) / ln 2).
const double log2_float16_max = 16.0 + std::log1p(-0x1p-11) / std::log(2.0);
const double log2_bfloat16_max = 128.0 + std::log1p(-0x1p-8) / std::log(2.0);

template <class T>
std::vector<T> from_bits(std::initializer_list<std::uint32_t> patterns) {
  std::vector<T> v;
  for (std::uint32_t p : patterns) v.push_back(T::from_bits(static_cast<typename T::storage_type>(p)));
  return v;
}
}  // namespace

TEST_CASE("tensor_stats of a small float array matches hand-computed counts, absmax and RMS", "[diagnostics]") {
  // {3, -4, 0, 12}: absmax 12; sum of squares 9 + 16 + 0 + 144 = 169; RMS = sqrt(169 / 4) = 13/2 = 6.5.
  const std::vector<float> v{3.0f, -4.0f, 0.0f, 12.0f};
  const tensor_stats s = compute_stats(v);
  CHECK(s.count() == 4);
  CHECK(s.nan_count() == 0);
  CHECK(s.inf_count() == 0);
  CHECK(s.finite_count() == 4);
  CHECK(s.all_finite());
  CHECK(s.absmax() == 12.0);
  CHECK(s.rms() == 6.5);  // every step is exact: scaled squares are dyadic with few bits

  // {-0.5}: absmax 0.5, RMS 0.5.
  const tensor_stats one = compute_stats(std::array<double, 1>{-0.5});
  CHECK(one.absmax() == 0.5);
  CHECK(one.rms() == 0.5);
}

TEST_CASE("tensor_stats of an empty or all-zero tensor has absmax 0, RMS 0 and infinite headroom", "[diagnostics]") {
  const tensor_stats empty = compute_stats(std::vector<float>{});
  CHECK(empty.count() == 0);
  CHECK(empty.absmax() == 0.0);
  CHECK(empty.rms() == 0.0);
  CHECK(empty.all_finite());
  CHECK(headroom_bits<float16>(empty) == inf);

  const tensor_stats zeros = compute_stats(std::vector<float16>(5, float16(0.0f)));
  CHECK(zeros.count() == 5);
  CHECK(zeros.finite_count() == 5);
  CHECK(zeros.absmax() == 0.0);
  CHECK(zeros.rms() == 0.0);
  CHECK(headroom_bits<float16>(zeros) == inf);
}

TEST_CASE("tensor_stats counts NaN and Inf in bfloat16 data given as bit patterns", "[diagnostics]") {
  // bfloat16 = sign | 8-bit exponent | 7-bit mantissa (the top half of binary32):
  //   0x3F80 = 1.0, 0xC040 = -(1 + 64/128) * 2 = -3.0, 0x0000 = +0, 0x8000 = -0, 0x0001 = 2^-133,
  //   0x7F80 = +Inf, 0xFF80 = -Inf, 0x7FC0 = quiet NaN, 0x7F81 = signalling NaN, 0xFFC1 = negative NaN.
  const auto v = from_bits<bfloat16>({0x3F80, 0xC040, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x0000, 0x8000, 0x0001});
  const tensor_stats s = compute_stats(v);
  CHECK(s.count() == 10);
  CHECK(s.nan_count() == 3);
  CHECK(s.inf_count() == 2);
  CHECK(s.finite_count() == 5);
  CHECK_FALSE(s.all_finite());
  CHECK(s.absmax() == inf);  // an Inf is an overflow: absmax says so
  // RMS over the 5 finite elements: sqrt((1 + 9 + 0 + 0 + 2^-266) / 5) = sqrt(2) to double precision.
  CHECK_THAT(s.rms(), WithinRel(std::sqrt(2.0), 1e-15));
  CHECK(headroom_bits<bfloat16>(s) == -inf);

  // Only NaNs: absmax 0 (NaNs are never compared), RMS 0, all counted.
  const tensor_stats nans = compute_stats(from_bits<bfloat16>({0x7FC0, 0xFFC0}));
  CHECK(nans.nan_count() == 2);
  CHECK(nans.finite_count() == 0);
  CHECK(nans.absmax() == 0.0);
  CHECK(nans.rms() == 0.0);
}

TEST_CASE("tensor_stats counts NaN and Inf in float16 and float8 data given as bit patterns", "[diagnostics]") {
  // float16 = sign | 5-bit exponent (bias 15) | 10-bit mantissa: 0x3C00 = 1, 0xC800 = -2^3 = -8,
  // 0x7BFF = 65504 (max), 0x7C00 = +Inf, 0xFC00 = -Inf, 0x7E00 = quiet NaN, 0xFC01 = negative sNaN.
  const auto h = from_bits<float16>({0x3C00, 0x7C00, 0xFC00, 0x7E00, 0xFC01, 0x7BFF, 0xC800});
  const tensor_stats s = compute_stats(h);
  CHECK(s.count() == 7);
  CHECK(s.nan_count() == 2);
  CHECK(s.inf_count() == 2);
  CHECK(s.finite_count() == 3);
  CHECK(s.absmax() == inf);
  const double rms_ref = std::sqrt((1.0 + 65504.0 * 65504.0 + 64.0) / 3.0);
  CHECK_THAT(s.rms(), WithinRel(rms_ref, 1e-15));

  // OCP FP8 E4M3 (e4m3fn): no Inf; S.1111.111 is NaN; 0x7E = 1.75 * 2^8 = 448 (max); 0xB8 = -1.
  const auto e4m3 = from_bits<mixprec::float8_e4m3fn>({0x7F, 0xFF, 0x7E, 0xB8});
  const tensor_stats s8 = compute_stats(e4m3);
  CHECK(s8.nan_count() == 2);
  CHECK(s8.inf_count() == 0);
  CHECK(s8.absmax() == 448.0);
  CHECK(headroom_bits<mixprec::float8_e4m3fn>(s8) == 0.0);

  // OCP FP8 E5M2: IEEE-like; 0x7C = +Inf, 0xFC = -Inf, 0x7D/0x7E/0x7F NaN; 0x3C = 1.
  const auto e5m2 = from_bits<mixprec::float8_e5m2>({0x7C, 0xFC, 0x7D, 0x7E, 0x7F, 0x3C});
  const tensor_stats s5 = compute_stats(e5m2);
  CHECK(s5.inf_count() == 2);
  CHECK(s5.nan_count() == 3);
  CHECK(s5.finite_count() == 1);
  CHECK(s5.rms() == 1.0);
}

TEST_CASE("tensor_stats RMS neither overflows nor underflows at the ends of double's range", "[diagnostics]") {
  // Summing x^2 naively overflows for 1e300 (1e600 > max double) and underflows for 1e-300.
  const tensor_stats big = compute_stats(std::vector<double>{1e300, -1e300});
  CHECK(big.rms() == 1e300);  // sqrt(2 f^2 / 2) = |f| exactly (sqrt(x * x) == |x| in IEEE arithmetic)
  const tensor_stats small = compute_stats(std::vector<double>{1e-300, -1e-300, 1e-300});
  CHECK_THAT(small.rms(), WithinRel(1e-300, 1e-15));
  // {2^600, 2^-600}: sqrt((2^1200 + 2^-1200) / 2) = 2^600 / sqrt(2) to double precision.
  const tensor_stats wide = compute_stats(std::vector<double>{0x1p600, 0x1p-600});
  CHECK_THAT(wide.rms(), WithinRel(std::ldexp(1.0, 600) / std::sqrt(2.0), 1e-15));
  const double max = std::numeric_limits<double>::max();
  const tensor_stats top = compute_stats(std::vector<double>{max, -max});
  CHECK(top.rms() == max);
  CHECK(top.absmax() == max);
}

TEST_CASE("tensor_stats accumulates several tensors as their concatenation", "[diagnostics]") {
  // {3, -4} then {0, 12}: the statistics of {3, -4, 0, 12} (absmax 12, RMS 6.5), whether added one
  // after the other or merged from two separate statistics.
  tensor_stats added;
  added.add(std::vector<float>{3.0f, -4.0f});
  added.add(std::vector<float>{0.0f, 12.0f});
  CHECK(added.count() == 4);
  CHECK(added.absmax() == 12.0);
  CHECK(added.rms() == 6.5);

  tensor_stats merged = compute_stats(std::vector<float>{0.0f, 12.0f});
  merged.merge(compute_stats(std::vector<float>{3.0f, -4.0f}));
  merged.merge(tensor_stats{});
  CHECK(merged.count() == 4);
  CHECK(merged.absmax() == 12.0);
  CHECK(merged.rms() == 6.5);

  tensor_stats from_empty;
  from_empty.merge(compute_stats(std::vector<double>{1e300, std::numeric_limits<double>::quiet_NaN()}));
  from_empty.merge(compute_stats(std::vector<double>{1e-300, -std::numeric_limits<double>::infinity()}));
  CHECK(from_empty.count() == 4);
  CHECK(from_empty.nan_count() == 1);
  CHECK(from_empty.inf_count() == 1);
  CHECK(from_empty.absmax() == inf);
  // sqrt((1e600 + 1e-600) / 2) = 1e300 / sqrt(2).
  CHECK_THAT(from_empty.rms(), WithinRel(1e300 / std::sqrt(2.0), 1e-15));
}

TEST_CASE("tensor_stats RMS of random data matches a float64 reference loop", "[diagnostics]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.5f, 3.0f);
  for (const float scale : {1.0f, 1e-20f, 1e20f}) {
    CAPTURE(scale);
    std::vector<float> v(1000);
    for (float& x : v) x = normal(rng) * scale;
    double sum_squares = 0.0;
    double absmax = 0.0;
    for (float x : v) {
      sum_squares += static_cast<double>(x) * static_cast<double>(x);
      absmax = std::max(absmax, std::fabs(static_cast<double>(x)));
    }
    const tensor_stats s = compute_stats(v);
    CHECK(s.absmax() == absmax);
    // Both sums round n times in double: relative difference below 2 n 2^-53 ~ 2e-13.
    CHECK_THAT(s.rms(), WithinRel(std::sqrt(sum_squares / 1000.0), 1e-12));
  }
}

TEST_CASE("headroom_bits to float16's max 65504 is log2(65504 / absmax)", "[diagnostics]") {
  auto stats_of = [](std::vector<float> v) { return compute_stats(v); };
  // absmax 1: 16 + log2(1 - 2^-11) = 15.999295 bits.
  CHECK_THAT(headroom_bits<float16>(stats_of({1.0f, -0.25f})), WithinAbs(log2_float16_max, 1e-12));
  CHECK_THAT(headroom_bits<float16>(stats_of({1.0f})), WithinAbs(15.99929539, 1e-8));
  // absmax 2^-8 (a float16 value): 8 more bits.
  CHECK_THAT(headroom_bits<float16>(stats_of({0x1p-8f})), WithinAbs(log2_float16_max + 8.0, 1e-12));
  // absmax = max: exactly 0.
  CHECK(headroom_bits<float16>(stats_of({-65504.0f})) == 0.0);
  // absmax 2^17 (a float32 tensor measured against float16): negative, -1 + log2(1 - 2^-11).
  CHECK_THAT(headroom_bits<float16>(stats_of({0x1p17f})), WithinAbs(log2_float16_max - 17.0, 1e-12));
  // The run-time form agrees, and float16 data is measured against its own max.
  const auto h = compute_stats(std::vector<float16>{float16(1024.0f), float16(-2048.0f)});
  CHECK_THAT(headroom_bits(h, mixprec::dtype::float16), WithinAbs(log2_float16_max - 11.0, 1e-12));
}

TEST_CASE("headroom_bits to bfloat16's max keeps float32's range", "[diagnostics]") {
  const auto one = compute_stats(std::vector<bfloat16>{bfloat16(1.0f)});
  // 128 + log2(1 - 2^-8) = 127.99435 bits.
  CHECK_THAT(headroom_bits<bfloat16>(one), WithinAbs(log2_bfloat16_max, 1e-12));
  CHECK_THAT(headroom_bits<bfloat16>(one), WithinAbs(127.99435344, 1e-8));
  CHECK_THAT(headroom_bits(one, mixprec::dtype::bfloat16), WithinAbs(log2_bfloat16_max, 1e-12));
  // 2^100 has 28 bits less.
  const auto big = compute_stats(std::vector<bfloat16>{bfloat16(0x1p100f)});
  CHECK_THAT(headroom_bits<bfloat16>(big), WithinAbs(log2_bfloat16_max - 100.0, 1e-12));
}

TEST_CASE("format_max gives every floating dtype's largest finite value and rejects the others", "[diagnostics]") {
  using mixprec::dtype;
  // The published maxima (IEEE 754; OCP FP8 and MX specs; ml_dtypes' finfo tables).
  CHECK(format_max(dtype::float16) == 65504.0);
  CHECK(format_max(dtype::bfloat16) == 0x1p128 * (1.0 - 0x1p-8));
  CHECK(format_max(dtype::float32) == 0x1p128 * (1.0 - 0x1p-24));
  CHECK(format_max(dtype::float64) == std::numeric_limits<double>::max());
  CHECK(format_max(dtype::float8_e4m3fn) == 448.0);
  CHECK(format_max(dtype::float8_e5m2) == 57344.0);
  CHECK(format_max(dtype::float8_e4m3fnuz) == 240.0);
  CHECK(format_max(dtype::float8_e5m2fnuz) == 57344.0);
  CHECK(format_max(dtype::float8_e4m3b11fnuz) == 30.0);
  CHECK(format_max(dtype::float8_e3m4) == 15.5);
  CHECK(format_max(dtype::float8_e4m3) == 240.0);
  CHECK(format_max(dtype::float8_e8m0fnu) == 0x1p127);
  CHECK(format_max(dtype::float6_e2m3fn) == 7.5);
  CHECK(format_max(dtype::float6_e3m2fn) == 28.0);
  CHECK(format_max(dtype::float4_e2m1fn) == 6.0);
  for (const dtype d : {dtype::int8, dtype::bool_, dtype::complex64, dtype::weak_float, dtype::uint4}) {
    CAPTURE(mixprec::name(d));
    CHECK_THROWS_AS(format_max(d), std::invalid_argument);
  }
  CHECK_THROWS_WITH(format_max(dtype::int8), Contains("int8") && Contains("not a real floating dtype"));
  CHECK_THROWS_WITH(headroom_bits(tensor_stats{}, dtype::complex64), Contains("complex64"));
}

TEST_CASE("headroom_bits rejects a negative or NaN absmax and a bad format max", "[diagnostics]") {
  CHECK(headroom_bits(0.0, 65504.0) == inf);
  CHECK(headroom_bits(inf, 65504.0) == -inf);
  CHECK_THROWS_WITH(headroom_bits(-1.0, 65504.0), Contains("absmax"));
  CHECK_THROWS_WITH(headroom_bits(std::numeric_limits<double>::quiet_NaN(), 65504.0), Contains("absmax"));
  CHECK_THROWS_WITH(headroom_bits(1.0, 0.0), Contains("format's max"));
  CHECK_THROWS_WITH(headroom_bits(1.0, inf), Contains("format's max"));
  // A tiny absmax does not overflow the ratio: log2(max double) - log2(2^-1074) = 1024 + 1074 (about).
  CHECK_THAT(headroom_bits(0x1p-1074, std::numeric_limits<double>::max()), WithinAbs(2098.0, 1e-9));
}
