// Tests of kernels/reductions.hpp against references computed here in double or long double.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/kernels/reductions.hpp"

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

TEST_CASE("statistics of an empty range throw std::invalid_argument", "[kernels][reductions]") {
  using Catch::Matchers::Contains;
  const std::vector<float> empty;
  CHECK_THROWS_WITH(kernels::mean(empty), Contains("mean") && Contains("empty"));
  CHECK_THROWS_AS(kernels::mean_variance(empty), std::invalid_argument);
  CHECK_THROWS_AS(kernels::mean_square(std::span<const float>(empty)), std::invalid_argument);
}
