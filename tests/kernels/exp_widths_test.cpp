// Tests that the exp of the softmax rows (kernels/detail/exp.hpp) gives the same bits at 16 lanes
// (simd_avx512) as at 8 (simd_avx2, itself tested against std::exp in exp_test.cpp), lane for
// lane, over a sweep of every float bit pattern class: normal, subnormal, zero, Inf, NaN.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/detail/exp.hpp"

namespace exp_widths_test {

#if MIXPREC_X86_DISPATCH
namespace {

MIXPREC_TARGET_AVX512 void exp16_of(const float* x, float* y) {
  _mm512_storeu_ps(y, mixprec::detail::simd_avx512::exp(_mm512_loadu_ps(x)));
}

MIXPREC_TARGET_AVX512 void exp16_shifted_of(const float* x, float* y) {
  _mm512_storeu_ps(y, mixprec::detail::simd_avx512::exp_shifted(_mm512_loadu_ps(x)));
}

MIXPREC_TARGET_AVX512 void exp16_nonpositive_of(const float* x, float* y) {
  _mm512_storeu_ps(y, mixprec::detail::simd_avx512::exp_nonpositive(_mm512_loadu_ps(x)));
}

MIXPREC_TARGET_AVX2 void exp8_twice(const float* x, float* y) {
  _mm256_storeu_ps(y, mixprec::detail::simd_avx2::exp(_mm256_loadu_ps(x)));
  _mm256_storeu_ps(y + 8, mixprec::detail::simd_avx2::exp(_mm256_loadu_ps(x + 8)));
}

MIXPREC_TARGET_AVX2 void exp8_nonpositive_twice(const float* x, float* y) {
  _mm256_storeu_ps(y, mixprec::detail::simd_avx2::exp_nonpositive(_mm256_loadu_ps(x)));
  _mm256_storeu_ps(y + 8, mixprec::detail::simd_avx2::exp_nonpositive(_mm256_loadu_ps(x + 8)));
}

/// Patterns in [first, last] every `stride`-th (and `last` itself) through both functions, 16 at a
/// time; the number of lanes whose bits differ, and the first such x.
std::uint64_t mismatches(std::uint64_t first, std::uint64_t last, std::uint64_t stride,
                         void (*wide)(const float*, float*), void (*narrow)(const float*, float*), float& where) {
  std::uint64_t count = 0;
  float x[16];
  float a[16];
  float b[16];
  for (std::uint64_t u = first; u <= last; u += 16 * stride) {
    for (std::uint64_t i = 0; i < 16; ++i) {
      x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(u + i * stride <= last ? u + i * stride : last));
    }
    wide(x, a);
    narrow(x, b);
    for (int i = 0; i < 16; ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
        if (count == 0) where = x[i];
        ++count;
      }
    }
  }
  return count;
}

}  // namespace

TEST_CASE("exp at 16 lanes gives the 8 lanes' bits for every class of float: both signs, subnormals, Inf and NaN",
          "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512) {
    WARN("this CPU has no AVX-512: exp at 16 lanes is never called here and was not compared");
    return;
  }
  float where = 0.0F;
  // Every 251st pattern of the 2^32 (about 17 million: each exponent and both signs many times over),
  // then the special values and the bounds of the domain.
  const std::uint64_t sweep = mismatches(0, 0xFFFFFFFFULL, 251, exp16_of, exp8_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(sweep == 0);
  // Every float where the scaling rounds or saturates (16 lanes scale with VSCALEFPS, 8 with two
  // products): the results that are subnormal, the underflow bound, and the overflow bound.
  const auto bits = [](float f) { return static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(f)); };
  const std::uint64_t subnormal_results = mismatches(bits(-87.0F), bits(-105.0F), 1, exp16_of, exp8_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(subnormal_results == 0);
  const std::uint64_t overflow_edge = mismatches(bits(88.0F), bits(89.0F), 1, exp16_of, exp8_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(overflow_edge == 0);
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float special[16] = {-inf,
                             inf,
                             std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::quiet_NaN(),
                             0.0F,
                             -0.0F,
                             std::numeric_limits<float>::denorm_min(),
                             mixprec::detail::exp_constants::underflow_below,
                             std::nextafter(mixprec::detail::exp_constants::underflow_below, -inf),
                             mixprec::detail::exp_constants::overflow_above,
                             std::nextafter(mixprec::detail::exp_constants::overflow_above, inf),
                             88.0F,
                             -87.4F,
                             -103.9F,
                             std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::lowest()};
  float a[16];
  float b[16];
  exp16_of(special, a);
  exp8_twice(special, b);
  CHECK(std::memcmp(a, b, sizeof a) == 0);
  CHECK(a[0] == 0.0F);
  CHECK(a[1] == inf);
  CHECK(a[4] == 1.0F);
}

TEST_CASE("exp_shifted at 16 lanes gives exp's bits at 8 for every x <= 0 and -Inf", "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512) {
    WARN("this CPU has no AVX-512: exp_shifted at 16 lanes is never called here and was not compared");
    return;
  }
  float where = 0.0F;
  const auto bits = [](float f) { return static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(f)); };
  // -0 to -Inf, every 127th pattern; then every pattern whose result is subnormal or underflows.
  const std::uint64_t sweep =
      mismatches(bits(-0.0F), bits(-std::numeric_limits<float>::infinity()), 127, exp16_shifted_of, exp8_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(sweep == 0);
  const std::uint64_t subnormal_results =
      mismatches(bits(-87.0F), bits(-105.0F), 1, exp16_shifted_of, exp8_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(subnormal_results == 0);
  float x[16] = {};  // +0
  float a[16];
  exp16_shifted_of(x, a);
  CHECK(a[0] == 1.0F);
}

TEST_CASE("exp_nonpositive at 16 lanes gives its 8 lanes' bits for every x <= 0, -Inf and NaN", "[kernels][exp]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512) {
    WARN("this CPU has no AVX-512: exp_nonpositive at 16 lanes is never called here and was not compared");
    return;
  }
  float where = 0.0F;
  // The negative patterns (every 127th: -0 to -Inf, then the negative NaNs), and +0 with the NaNs of
  // positive sign (the online softmax's +Inf - +Inf).
  const std::uint64_t sweep =
      mismatches(0x80000000ULL, 0xFFFFFFFFULL, 127, exp16_nonpositive_of, exp8_nonpositive_twice, where) +
      mismatches(0x7F800001ULL, 0x7FFFFFFFULL, 4099, exp16_nonpositive_of, exp8_nonpositive_twice, where);
  INFO("first mismatch at x = " << where);
  CHECK(sweep == 0);
  float x[16] = {};  // +0
  float a[16];
  float b[16];
  exp16_nonpositive_of(x, a);
  exp8_nonpositive_twice(x, b);
  CHECK(std::memcmp(a, b, sizeof a) == 0);
  CHECK(a[0] == 1.0F);
}
#endif

}  // namespace exp_widths_test
