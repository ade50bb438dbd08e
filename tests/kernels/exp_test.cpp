// Tests of the vectorised exp of the softmax rows (kernels/detail/exp.hpp), at 8 lanes, against std::exp in
// double, over a sweep of float bit patterns across the whole domain, and its special values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/detail/exp.hpp"

namespace exp_test {

#if MIXPREC_X86_DISPATCH
namespace {

MIXPREC_TARGET_AVX2 void exp_of(const float* x, float* y) {
  _mm256_storeu_ps(y, mixprec::detail::simd_avx2::exp(_mm256_loadu_ps(x)));
}

MIXPREC_TARGET_AVX2 void exp_shifted_of(const float* x, float* y) {
  _mm256_storeu_ps(y, mixprec::detail::simd_avx2::exp_shifted(_mm256_loadu_ps(x)));
}

MIXPREC_TARGET_AVX2 void exp_nonpositive_of(const float* x, float* y) {
  _mm256_storeu_ps(y, mixprec::detail::simd_avx2::exp_nonpositive(_mm256_loadu_ps(x)));
}

/// |got - ref| in units of float's last place at ref (subnormal spacing below the normal range).
double ulps(float got, double ref) {
  if (ref == 0.0) return got == 0.0F ? 0.0 : std::numeric_limits<double>::infinity();
  int e = 0;
  static_cast<void>(std::frexp(ref, &e));
  const double ulp =
      std::ldexp(1.0, std::max(e - std::numeric_limits<float>::digits,
                               std::numeric_limits<float>::min_exponent - std::numeric_limits<float>::digits));
  return std::abs(static_cast<double>(got) - ref) / ulp;
}

/// The largest error over every `stride`-th float pattern in [first, last] (patterns of one sign).
double worst_over(std::uint32_t first, std::uint32_t last, std::uint32_t stride, float& where,
                  void (*exp_fn)(const float*, float*) = exp_of) {
  double worst = 0.0;
  float x[8];
  float y[8];
  for (std::uint64_t u = first; u <= last; u += 8ULL * stride) {
    for (std::uint32_t i = 0; i < 8; ++i) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(std::min<std::uint64_t>(u + i * stride, last)));
    }
    exp_fn(x, y);
    for (int i = 0; i < 8; ++i) {
      const double e = ulps(y[i], std::exp(static_cast<double>(x[i])));
      if (e > worst) {
        worst = e;
        where = x[i];
      }
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("exp at 8 lanes is within 1 ulp of exp over the whole float domain, subnormal results included",
          "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx2) {
    WARN("SKIPPED: this CPU has no AVX2 + FMA");
    return;
  }
  float where = 0.0F;
  // Negative x down to -104 (results down to the smallest subnormal), then positive x up to the
  // overflow threshold: about 2^22 patterns, every 512th.
  const double negative =
      worst_over(std::bit_cast<std::uint32_t>(-0.0F), std::bit_cast<std::uint32_t>(-104.0F), 512, where);
  INFO("worst error for x <= 0: " << negative << " ulp at x = " << where);
  REQUIRE(negative <= 1.0);
  const double positive = worst_over(0U, std::bit_cast<std::uint32_t>(88.72F), 512, where);
  INFO("worst error for x >= 0: " << positive << " ulp at x = " << where);
  REQUIRE(positive <= 1.0);
}

TEST_CASE("exp at 8 lanes gives 0 for -Inf and below the subnormal range, Inf above float's range, NaN for NaN",
          "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx2) {
    WARN("SKIPPED: this CPU has no AVX2 + FMA");
    return;
  }
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float x[8] = {-inf, -104.0F, -1000.0F, 0.0F, 89.0F, inf, std::numeric_limits<float>::quiet_NaN(), -103.9F};
  float y[8];
  exp_of(x, y);
  CHECK(y[0] == 0.0F);
  CHECK(y[1] == 0.0F);
  CHECK(y[2] == 0.0F);
  CHECK(y[3] == 1.0F);
  CHECK(y[4] == inf);
  CHECK(y[5] == inf);
  CHECK(std::isnan(y[6]));
  // exp(-103.9) = 8.6e-46 is subnormal: rounds to 1 × 2^-149, as std::exp rounds it.
  CHECK(y[7] == std::exp(-103.9F));
  CHECK(y[7] == std::numeric_limits<float>::denorm_min());
}

TEST_CASE("exp_shifted, the softmax rows' exp, gives exp's bits for every x <= 0 and -Inf", "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx2) {
    WARN("SKIPPED: this CPU has no AVX2 + FMA");
    return;
  }
  // -0 to -Inf, every 61st pattern, and every pattern whose result is subnormal or underflows.
  const auto bits = [](float f) { return static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(f)); };
  std::uint64_t differ = 0;
  float where = 0.0F;
  const auto compare = [&](std::uint64_t first, std::uint64_t last, std::uint64_t stride) {
    float x[8];
    float a[8];
    float b[8];
    for (std::uint64_t u = first; u <= last; u += 8 * stride) {
      for (std::uint64_t i = 0; i < 8; ++i) {
        x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(std::min(u + i * stride, last)));
      }
      exp_shifted_of(x, a);
      exp_of(x, b);
      for (int i = 0; i < 8; ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) where = x[i];
      }
    }
  };
  compare(bits(-0.0F), bits(-std::numeric_limits<float>::infinity()), 61);
  compare(bits(-87.0F), bits(-105.0F), 1);
  INFO("first difference at x = " << where);
  CHECK(differ == 0);
}

TEST_CASE("exp_nonpositive, the online softmax's exp, is within 1 ulp of exp for normal results, else 0",
          "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx2) {
    WARN("SKIPPED: this CPU has no AVX2 + FMA");
    return;
  }
  // Every 64th pattern from -0 down to ln(2^-126), where exp(x) stops being a normal float.
  const float lowest_normal = mixprec::detail::exp_constants::normal_below;
  REQUIRE(std::exp(static_cast<double>(lowest_normal)) >= std::numeric_limits<float>::min() * 0.99);
  float where = 0.0F;
  const double worst = worst_over(std::bit_cast<std::uint32_t>(-0.0F), std::bit_cast<std::uint32_t>(lowest_normal), 64,
                                  where, exp_nonpositive_of);
  INFO("worst error: " << worst << " ulp at x = " << where);
  REQUIRE(worst <= 1.0);
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float x[8] = {-inf,
                      -87.5F,
                      -1000.0F,
                      0.0F,
                      std::numeric_limits<float>::quiet_NaN(),
                      -1.0F,
                      std::nextafter(lowest_normal, -inf),
                      -50.0F};
  float y[8];
  exp_nonpositive_of(x, y);
  CHECK(y[0] == 0.0F);  // a masked score: exactly no weight
  CHECK(y[1] == 0.0F);  // exp(-87.5) = 1.0e-38 is subnormal: flushed
  CHECK(y[2] == 0.0F);
  CHECK(y[3] == 1.0F);
  CHECK(std::isnan(y[4]));  // the online softmax's +Inf - +Inf must stay NaN
  CHECK(std::abs(static_cast<double>(y[5]) - std::exp(-1.0)) <= 1.2e-7 * std::exp(-1.0));
  CHECK(y[6] == 0.0F);
  float y8[8];
  exp_of(x, y8);
  CHECK(y[7] == y8[7]);  // the same reduction and polynomial as exp
}
#endif

}  // namespace exp_test
