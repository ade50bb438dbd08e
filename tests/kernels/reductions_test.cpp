// Tests of kernels/reductions.hpp against references computed here in double or long double.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/reductions.hpp"

namespace reductions_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace kernels = mixprec::kernels;

namespace {
double pow2(int e) { return std::ldexp(1.0, e); }
}  // namespace

TEST_CASE("sum of bfloat16 values accumulates in float32", "[kernels][reductions]") {
  // In bfloat16, 256 + 1 rounds back to 256 (spacing 2 at 256): a bfloat16 accumulator stops there.
  const std::vector<bfloat16> ones(4096, bfloat16(1.0f));
  STATIC_REQUIRE(std::is_same_v<decltype(kernels::sum(ones)), float>);
  CHECK(kernels::sum(ones) == 4096.0f);
  CHECK(kernels::mean(ones) == 1.0f);
  const std::vector<float16> halves(3000, float16(0.5f));
  CHECK(kernels::sum(halves) == 1500.0f);
  CHECK(kernels::sum(std::vector<float>{}) == 0.0f);
}

TEST_CASE("sum is compensated: small terms are not lost beside a large one", "[kernels][reductions]") {
  // 1 + 10000 x 2^-30: a plain float loop returns exactly 1 (each 2^-30 is below half an ulp of 1,
  // 2^-24); the true sum 1 + 10000 * 2^-30 = 1.0000093132... is a float to within an ulp.
  std::vector<float> x{1.0f};
  x.insert(x.end(), 10000, static_cast<float>(pow2(-30)));
  float plain = 0.0f;
  for (float v : x) plain += v;
  REQUIRE(plain == 1.0f);  // the test is sensitive: the naive sum loses every small term
  const double exact = 1.0 + 10000.0 * pow2(-30);
  CHECK(std::abs(static_cast<double>(kernels::sum(x)) - exact) <= pow2(-24) * exact);
}

TEST_CASE("sum of random floats is within 2 ulps of a double reference", "[kernels][reductions]") {
  // Neumaier: |s - S| <= 2u|S| + O(n u^2) sum|x| (Higham, Accuracy and Stability, section 4.3).
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(10.0f, 3.0f);
  std::vector<float> x(20000);
  for (auto& v : x) v = normal(rng);
  double ref = 0.0;
  double abs_sum = 0.0;
  for (float v : x) {
    ref += v;
    abs_sum += std::abs(v);
  }
  const double u = pow2(-24);
  CHECK(std::abs(static_cast<double>(kernels::sum(x)) - ref) <= 2 * u * std::abs(ref) + 20000.0 * u * u * abs_sum);
}

TEST_CASE("sum propagates Inf and NaN", "[kernels][reductions]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(kernels::sum(std::vector<float>{1.0f, inf, 2.0f}) == inf);
  CHECK(std::isnan(kernels::sum(std::vector<float>{1.0f, inf, -inf})));
  CHECK(std::isnan(kernels::sum(std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN()})));
}

TEST_CASE("mean_variance is accurate at a large common offset (float32, values ~1e6, unit spread)",
          "[kernels][reductions]") {
  // Data 1e6 + N(0, 1) stored as float32 (spacing 0.0625 there). The reference is the two-pass formula
  // in long double over the same float values. The corrected two-pass algorithm keeps the variance to a
  // few float ulps (relative 1e-5 allows ~170 u, a generous margin for n = 4096); the textbook
  // E[x^2] - E[x]^2 in float cannot (checked below, so that the test can tell the two apart).
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> x(4096);
  for (auto& v : x) v = static_cast<float>(1e6 + normal(rng));
  long double mean_ref = 0.0L;
  for (float v : x) mean_ref += v;
  mean_ref /= static_cast<long double>(x.size());
  long double var_ref = 0.0L;
  for (float v : x) var_ref += (v - mean_ref) * (v - mean_ref);
  var_ref /= static_cast<long double>(x.size());
  REQUIRE(var_ref > 0.9L);
  REQUIRE(var_ref < 1.1L);

  const auto mv = kernels::mean_variance(x);
  STATIC_REQUIRE(std::is_same_v<decltype(mv.mean), float>);
  CHECK(std::abs(static_cast<long double>(mv.mean) - mean_ref) <= 0.5L * 0.0625L);  // within half an ulp at 1e6
  // mean + mean_correction carries the digits the float mean cannot: a few u of the unit spread.
  CHECK(std::abs(static_cast<long double>(mv.mean) + static_cast<long double>(mv.mean_correction) - mean_ref) <= 1e-6L);
  CHECK(std::abs(static_cast<long double>(mv.variance) - var_ref) <= 1e-5L * var_ref);

  float s = 0.0f, s2 = 0.0f;
  for (float v : x) {
    s += v;
    s2 += v * v;
  }
  const float n = static_cast<float>(x.size());
  const float naive = s2 / n - (s / n) * (s / n);
  CHECK(std::abs(static_cast<long double>(naive) - var_ref) > 0.1L * var_ref);
}

TEST_CASE("mean_variance in double is accurate at offset 1e12 with unit spread", "[kernels][reductions]") {
  std::mt19937 rng(12);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> x(1000);
  for (auto& v : x) v = 1e12 + normal(rng);
  long double mean_ref = 0.0L;
  for (double v : x) mean_ref += v;
  mean_ref /= static_cast<long double>(x.size());
  long double var_ref = 0.0L;
  for (double v : x) var_ref += (v - mean_ref) * (v - mean_ref);
  var_ref /= static_cast<long double>(x.size());
  const auto mv = kernels::mean_variance(x);
  CHECK(std::abs(static_cast<long double>(mv.variance) - var_ref) <= 1e-9L * var_ref);
}

TEST_CASE("mean_variance of bfloat16 data accumulates in float32", "[kernels][reductions]") {
  // 1000 values 100 +- 0.5 (both bfloat16 values): mean 100, variance 0.25 exactly.
  std::vector<bfloat16> x;
  for (int i = 0; i < 500; ++i) {
    x.push_back(bfloat16(99.5f));
    x.push_back(bfloat16(100.5f));
  }
  const auto mv = kernels::mean_variance(x);
  STATIC_REQUIRE(std::is_same_v<decltype(mv.variance), float>);
  CHECK(mv.mean == 100.0f);
  CHECK(mv.variance == 0.25f);
  CHECK(kernels::mean_variance(std::vector<float>{3.0f}).variance == 0.0f);
}

TEST_CASE("mean_variance of complex data has a complex mean and a real variance mean(|x - mean|^2)",
          "[kernels][reductions]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::complex<float>> x(777);
  for (auto& v : x) v = {3.0f + normal(rng), -1.0f + normal(rng)};
  std::complex<double> mean_ref = 0.0;
  for (auto v : x) mean_ref += std::complex<double>(v.real(), v.imag());
  mean_ref /= static_cast<double>(x.size());
  double var_ref = 0.0;
  for (auto v : x) var_ref += std::norm(std::complex<double>(v.real(), v.imag()) - mean_ref);
  var_ref /= static_cast<double>(x.size());
  const auto mv = kernels::mean_variance(x);
  STATIC_REQUIRE(std::is_same_v<decltype(mv.mean), std::complex<float>>);
  STATIC_REQUIRE(std::is_same_v<decltype(mv.variance), float>);
  // Compensated sums: a few float ulps of the magnitudes involved (|mean| ~ 3, variance ~ 8).
  CHECK(std::abs(std::complex<double>(mv.mean.real(), mv.mean.imag()) - mean_ref) <= 8 * pow2(-24) * 4.0);
  CHECK(std::abs(static_cast<double>(mv.variance) - var_ref) <= 8 * pow2(-24) * var_ref);
}

TEST_CASE("mean_square is the mean of |x|^2 in float32 for half inputs", "[kernels][reductions]") {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 30.0f);
  std::vector<float16> x(2048);
  for (auto& v : x) v = float16(normal(rng));
  double ref = 0.0;
  for (auto v : x) ref += static_cast<double>(v) * static_cast<double>(v);
  ref /= static_cast<double>(x.size());
  // Each square is exact in float (2 x 11 bits); the compensated sum and the division: <= 3u.
  STATIC_REQUIRE(std::is_same_v<decltype(kernels::mean_square(x)), float>);
  CHECK(std::abs(static_cast<double>(kernels::mean_square(x)) - ref) <= 3 * pow2(-24) * ref);
  // float16's max is 65504: squares of values ~300 overflow a float16 accumulator, not a float one.
  CHECK(kernels::mean_square(std::vector<float16>(10, float16(300.0f))) == 90000.0f);
  const std::vector<std::complex<double>> z{{3.0, 4.0}, {0.0, 1.0}};
  CHECK(kernels::mean_square(z) == 13.0);
}

TEST_CASE("absmax is the largest magnitude, exact, and NaN when any element is NaN", "[kernels][reductions]") {
  CHECK(kernels::absmax(std::vector<float>{1.0f, -7.5f, 3.0f}) == 7.5f);
  CHECK(kernels::absmax(std::vector<bfloat16>{bfloat16(-300.0f), bfloat16(2.0f)}) == 300.0f);
  CHECK(kernels::absmax(std::vector<float>{}) == 0.0f);
  CHECK(kernels::absmax(std::vector<float>{1.0f, -std::numeric_limits<float>::infinity()}) ==
        std::numeric_limits<float>::infinity());
  CHECK(std::isnan(kernels::absmax(std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f})));
  CHECK(kernels::absmax(std::vector<std::complex<float>>{{3.0f, 4.0f}, {1.0f, 0.0f}}) == 5.0f);
}

TEST_CASE("absmax of floats: the AVX2 patterns path and the portable loop agree with a plain maximum",
          "[kernels][reductions]") {
  // Every length 0..70 (the 16-lane loop, its 8-lane tail and the scalar rest), the largest magnitude
  // placed at every position, with -0, subnormals, huge values, Inf and NaN planted; the reference is
  // an ordinary loop over std::fabs written here.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto reference = [](const std::vector<float>& v) {
    float m = 0.0f;
    for (const float x : v) {
      if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
      m = std::max(m, std::fabs(x));
    }
    return m;
  };
  const auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; };
  for (const mixprec::isa level : {mixprec::isa::portable, mixprec::active_isa()}) {
    const mixprec::isa_limit_scope limit(level);
    for (std::size_t n = 0; n <= 70; ++n) {
      for (std::size_t at = 0; at < std::max<std::size_t>(n, 1); ++at) {
        std::vector<float> v(n);
        for (auto& x : v) x = normal(rng);
        if (n == 0) {
          CHECK(kernels::absmax(v) == 0.0f);
          continue;
        }
        v[at] = -1e30f;  // the largest, negative
        REQUIRE(same(kernels::absmax(v), reference(v)));
        v[at] = -0.0f;
        v[(at + 1) % n] = 1e-40f;  // a subnormal
        REQUIRE(same(kernels::absmax(v), reference(v)));
        v[at] = -std::numeric_limits<float>::infinity();
        REQUIRE(kernels::absmax(v) == std::numeric_limits<float>::infinity());
        v[(at + n / 2) % n] = -std::numeric_limits<float>::quiet_NaN();
        REQUIRE(std::isnan(kernels::absmax(v)));
      }
    }
    CHECK(kernels::absmax(std::vector<float>{-0.0f, 1e-45f}) == 1e-45f);
  }
}

TEST_CASE("statistics of an empty range throw std::invalid_argument", "[kernels][reductions]") {
  using Catch::Matchers::Contains;
  const std::vector<float> empty;
  CHECK_THROWS_WITH(kernels::mean(empty), Contains("mean") && Contains("empty"));
  CHECK_THROWS_AS(kernels::mean_variance(empty), std::invalid_argument);
  CHECK_THROWS_AS(kernels::mean_square(std::span<const float>(empty)), std::invalid_argument);
}

TEST_CASE("rescaling_exponent is 0 for ordinary data and the exponent of max|x| outside the safe range",
          "[kernels][reductions]") {
  // float, 48 values: safe range [2^-50, 2^60) (hi = (128 - bit_width(48)) / 2 - 1 = 60,
  // lo = (-125 - 1 + 24) / 2 + 1 = -50); outside, max|x| = m 2^e with m in [0.5, 1) gives e.
  std::vector<float> x(48, 1.0f);
  CHECK(kernels::rescaling_exponent(x) == 0);
  x[7] = -static_cast<float>(pow2(59) * 1.5);  // 1.5 2^59 < 2^60: still ordinary
  CHECK(kernels::rescaling_exponent(x) == 0);
  x[7] = 3e19f;  // 3e19 = 0.813 2^65
  CHECK(kernels::rescaling_exponent(x) == 65);
  x[7] = std::numeric_limits<float>::max();  // (1 - 2^-24) 2^128
  CHECK(kernels::rescaling_exponent(x) == 128);
  std::vector<float> tiny(48, static_cast<float>(pow2(-51)));  // 0.5 2^-50: e = -50, e - 1 = -51 < lo
  CHECK(kernels::rescaling_exponent(tiny) == -50);
  tiny[0] = static_cast<float>(pow2(-50));  // 0.5 2^-49: ordinary
  CHECK(kernels::rescaling_exponent(tiny) == 0);
  CHECK(kernels::rescaling_exponent(std::vector<float>(5, 0.0f)) == 0);
  CHECK(kernels::rescaling_exponent(std::vector<float>{3e38f, std::numeric_limits<float>::infinity()}) == 0);
  CHECK(kernels::rescaling_exponent(std::vector<float>{3e38f, std::numeric_limits<float>::quiet_NaN()}) == 0);
  CHECK(kernels::rescaling_exponent(std::vector<double>{1e300, -1e300}) == 997);  // 1e300 = 0.75 2^997
}

TEST_CASE("scaled_mean_square cannot overflow or underflow and equals mean_square on ordinary data",
          "[kernels][reductions]") {
  // Ordinary data: exponent 0 and value == mean_square, bit for bit.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(100);
  for (auto& v : x) v = normal(rng);
  const auto plain = kernels::scaled_mean_square(x);
  CHECK(plain.exponent == 0);
  CHECK(plain.value == kernels::mean_square(x));
  // A row of 3e19: the float32 squares (9e38) overflow and mean_square is Inf; scaled, mean(x^2) =
  // value 4^65 = (3e19)^2 to within a few float ulps.
  const std::vector<float> big(64, 3e19f);
  REQUIRE(std::isinf(kernels::mean_square(big)));
  const auto b = kernels::scaled_mean_square(big);
  CHECK(b.exponent == 65);
  const double exact = static_cast<double>(3e19f) * static_cast<double>(3e19f);
  CHECK(std::abs(std::ldexp(static_cast<double>(b.value), 130) - exact) <= 4 * pow2(-24) * exact);
  // Values near float's max with both signs and a ramp, against a long double reference.
  std::vector<float> top(33);
  long double ms = 0.0L;
  for (std::size_t j = 0; j < top.size(); ++j) {
    top[j] = (j % 2 == 0 ? 1.0f : -1.0f) * std::numeric_limits<float>::max() * (0.5f + 0.015f * static_cast<float>(j));
    ms += static_cast<long double>(top[j]) * top[j];
  }
  ms /= 33.0L;
  const auto t = kernels::scaled_mean_square(top);
  CHECK(t.exponent == 128);
  const double got = static_cast<double>(std::ldexp(static_cast<long double>(t.value), 256));
  CHECK(std::abs(got - static_cast<double>(ms)) <= 4 * pow2(-24) * static_cast<double>(ms));
  // 1e-30: squares 1e-60 underflow float32 to 0; scaled, the mean square is 1e-60 to a few ulps.
  const std::vector<float> small(10, 1e-30f);
  CHECK(kernels::mean_square(small) == 0.0f);
  const auto s = kernels::scaled_mean_square(small);
  const double small_exact = static_cast<double>(1e-30f) * static_cast<double>(1e-30f);
  CHECK(std::abs(std::ldexp(static_cast<double>(s.value), 2 * s.exponent) - small_exact) <=
        4 * pow2(-24) * small_exact);
  // bfloat16 data accumulate in float32; complex: |x|^2 of both parts.
  const std::vector<bfloat16> bf(8, bfloat16(3e19f));
  CHECK(kernels::scaled_mean_square(bf).exponent == 65);
  const std::vector<std::complex<float>> cx{{3e19f, 4e19f}, {0.0f, 0.0f}};  // |x|^2 = 2.5e39, mean 1.25e39
  const auto c = kernels::scaled_mean_square(cx);
  CHECK(std::abs(std::ldexp(static_cast<double>(c.value), 2 * c.exponent) / 1.25e39 - 1) <= 8 * pow2(-24));
  CHECK_THROWS_AS(kernels::scaled_mean_square(std::vector<float>{}), std::invalid_argument);
}

}  // namespace reductions_test
