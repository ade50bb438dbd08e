// Tests of mixprec/train/rounding.hpp (stochastic rounding to bfloat16 and float16, Kahan-compensated parameters)
// and of their use by the optimisers, against the rules of TRAINING.md §2 (llm.c's
// stochastic_rounding, optimi's kahan_sum): unbiasedness, NaN, no overflow below the bf16 maximum,
// independence of the order of calls, and 1000 tiny updates that move a bf16 1.0.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/rounding.hpp"
#include "mixprec/train/sgd.hpp"

namespace rounding_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::train::stochastic_round_bf16;
using mixprec::train::stochastic_round_f16;
using mixprec::train::stochastic_rounding_bits;
using mixprec::train::write_back;

namespace {
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
}  // namespace

TEST_CASE("stochastic rounding is exactly unbiased over all 2^16 random values", "[rounding]") {
  // x = 1 + 0x1234 / 2^16 ulps above the bf16 value 0x3F80 (1.0): over every r, the number of
  // round-ups is the discarded value 0x1234, so the mean is x exactly.
  for (const std::uint32_t u : {0x3F801234U, 0xBF80FFFFU, 0x00001234U, 0x007FFFFFU, 0x7F7EFFFFU, 0x3F800000U}) {
    INFO(std::hex << u);
    const float x = from_bits(u);
    const std::uint16_t down = static_cast<std::uint16_t>(u >> 16);
    std::uint32_t ups = 0;
    for (std::uint32_t r = 0; r < 65536; ++r) {
      const auto b = stochastic_round_bf16(x, static_cast<std::uint16_t>(r)).bits();
      REQUIRE((b == down || b == down + 1));
      ups += b == down + 1 ? 1 : 0;
    }
    CHECK(ups == (u & 0xFFFFU));
  }
}

TEST_CASE("the mean of many hashed stochastic roundings converges to x", "[rounding]") {
  // 1.00234 lies between the bf16 values 1 and 1.0078125 (ulp 2^-7); each rounding is one of the two
  // with P(up) = p = (x - 1) / ulp. The mean of N roundings has standard deviation ulp * sqrt(p(1-p)/N).
  const float x = 1.00234f;
  const double ulp = 1.0 / 128.0;
  const double p = (static_cast<double>(x) - 1.0) / ulp;
  const int n = 100000;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const auto r = stochastic_rounding_bits(42, 7, mixprec::train::tensor_id_of("w"), static_cast<std::uint64_t>(i));
    sum += static_cast<double>(static_cast<float>(stochastic_round_bf16(x, r)));
  }
  const double sigma = ulp * std::sqrt(p * (1 - p) / n);
  CHECK(std::abs(sum / n - static_cast<double>(x)) < 5 * sigma);
}

TEST_CASE("stochastic rounding: NaN stays NaN, no Inf from a finite value up to the bf16 maximum", "[rounding]") {
  for (const std::uint32_t u : {0x7F800001U, 0xFF800001U, 0x7FC00000U, 0x7F80FFFFU, 0xFFFFFFFFU}) {
    for (const std::uint16_t r : {std::uint16_t{0}, std::uint16_t{0x7FFF}, std::uint16_t{0xFFFF}}) {
      const bfloat16 b = stochastic_round_bf16(from_bits(u), r);
      CHECK(std::isnan(static_cast<float>(b)));
    }
  }
  const float bf16_max = from_bits(0x7F7F0000U);
  for (const float x : {bf16_max, -bf16_max, from_bits(0x7F7EFFFFU), from_bits(0xFF7EFFFFU), from_bits(0x7F7E8000U)}) {
    for (std::uint32_t r = 0; r < 65536; r += 7) {
      CHECK(std::isfinite(static_cast<float>(stochastic_round_bf16(x, static_cast<std::uint16_t>(r)))));
    }
  }
  // Above the bf16 maximum, the result is the round-to-nearest one (max, or Inf from max + half an ulp).
  for (const std::uint32_t u : {0x7F7F0001U, 0x7F7F7FFFU, 0x7F7F8000U, 0x7F7FFFFFU, 0xFF7F9000U}) {
    const float x = from_bits(u);
    CHECK(stochastic_round_bf16(x, 0).bits() == bfloat16(x).bits());
    CHECK(stochastic_round_bf16(x, 0xFFFF).bits() == bfloat16(x).bits());
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(stochastic_round_bf16(inf, 0).bits() == 0x7F80);
  CHECK(stochastic_round_bf16(-inf, 0xFFFF).bits() == 0xFF80);
  CHECK(stochastic_round_bf16(0.0f, 0).bits() == 0x0000);
  CHECK(stochastic_round_bf16(-0.0f, 0).bits() == 0x8000);
}

TEST_CASE("stochastic rounding to float16 rounds up with probability equal to the discarded fraction", "[rounding]") {
  // Reference, in double: the float16 neighbours of x are found by stepping float16 bit patterns (the
  // format, not the code under test, gives them), and the discarded fraction f = (|x| - lo) / (hi - lo).
  // Over every r, the number of round-ups must be f * 2^16 exactly for a normal result, and
  // ceil(f * 2^16) for a subnormal one (documented bias below 2^-16 of the spacing).
  const float f16_max = static_cast<float>(std::numeric_limits<float16>::max());
  for (const float x : {1.0f + 0x1.234p-11f, -1.0f - 0x1.ffcp-11f, 3.0e-5f, -1.0e-6f, 5.96e-8f, 1.0e-9f, 65500.0f,
                        -65503.0f, f16_max, 0.0f, 1.0f, 1234.567f, 6.1e-5f, 6.0e-5f}) {
    INFO("x = " << x);
    // lo: the largest-magnitude float16 not above |x| (the truncation); hi: the next pattern up.
    std::uint16_t lo_bits = 0;
    while (lo_bits < 0x7C00 &&
           static_cast<double>(static_cast<float>(float16::from_bits(static_cast<std::uint16_t>(lo_bits + 1)))) <=
               std::abs(static_cast<double>(x))) {
      ++lo_bits;
    }
    const double lo = static_cast<float>(float16::from_bits(lo_bits));
    const double hi = static_cast<float>(float16::from_bits(static_cast<std::uint16_t>(lo_bits + 1)));
    const double f = (std::abs(static_cast<double>(x)) - lo) / (hi - lo);
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    std::uint32_t ups = 0;
    for (std::uint32_t r = 0; r < 65536; ++r) {
      const std::uint16_t b = stochastic_round_f16(x, static_cast<std::uint16_t>(r)).bits();
      REQUIRE((b == (sign | lo_bits) || b == (sign | (lo_bits + 1))));
      ups += b == (sign | (lo_bits + 1)) ? 1 : 0;
    }
    CHECK(ups == static_cast<std::uint32_t>(std::ceil(f * 65536.0)));
    if (lo_bits >= 0x0400) CHECK(static_cast<double>(ups) == f * 65536.0);  // normal: exactly unbiased
  }
}

TEST_CASE("stochastic rounding to float16: NaN, Inf, beyond the maximum, zeros", "[rounding]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::uint16_t r : {std::uint16_t{0}, std::uint16_t{0xFFFF}}) {
    CHECK(std::isnan(static_cast<float>(stochastic_round_f16(std::numeric_limits<float>::quiet_NaN(), r))));
    CHECK(stochastic_round_f16(inf, r).bits() == 0x7C00);
    CHECK(stochastic_round_f16(-inf, r).bits() == 0xFC00);
    CHECK(stochastic_round_f16(0.0f, r).bits() == 0x0000);
    CHECK(stochastic_round_f16(-0.0f, r).bits() == 0x8000);
    // Above 65504: round to nearest even, as the conversion (65519 -> 65504, 65520 -> Inf).
    for (const float x : {65505.0f, 65519.0f, 65520.0f, -70000.0f})
      CHECK(stochastic_round_f16(x, r).bits() == float16(x).bits());
  }
}

TEST_CASE("Kahan addition keeps what rounding loses", "[rounding]") {
  // p = 1 (bf16 ulp 2^-7); u = 2^-9 four times: p + c reaches 1 + 2^-7 exactly.
  bfloat16 p(1.0f), c(0.0f);
  for (int i = 0; i < 4; ++i) mixprec::train::kahan_add(p, c, 1.0f / 512.0f);
  CHECK(static_cast<float>(p) == 1.0f + 1.0f / 128.0f);
  CHECK(static_cast<float>(c) == 0.0f);
  float16 q(1.0f), d(0.0f);
  for (int i = 0; i < 3; ++i) mixprec::train::kahan_add(q, d, 1.0f / 4096.0f);  // f16 ulp at 1: 2^-10
  CHECK(static_cast<float>(q) + static_cast<float>(d) == 1.0f + 3.0f / 4096.0f);
}

TEST_CASE("1000 updates of 1e-4 move a bf16 1.0 with Kahan or stochastic rounding, not with RNE", "[rounding]") {
  const auto run = [](mixprec::train::precision_options precision) {
    mixprec::train::sgd opt({.precision = precision});
    std::vector<bfloat16> p = {bfloat16(1.0f), bfloat16(1.0f), bfloat16(1.0f), bfloat16(1.0f)};
    const std::vector<float> g(p.size(), -1e-4f);
    for (int s = 0; s < 1000; ++s) {
      opt.begin_step(1.0);
      opt.update("p", std::span<bfloat16>(p), std::span<const float>(g), false);
    }
    double mean = 0;
    for (auto x : p) mean += static_cast<double>(static_cast<float>(x)) / static_cast<double>(p.size());
    return mean;
  };
  CHECK(run({false, write_back::nearest, 0}) == 1.0);
  CHECK(std::abs(run({false, write_back::kahan, 0}) - 1.1) < 1.0 / 128);
  CHECK(std::abs(run({false, write_back::stochastic, 3}) - 1.1) < 2.0 / 128);
  CHECK(std::abs(run({true, write_back::nearest, 0}) - 1.1) < 1.0 / 128);
}

TEST_CASE("1000 updates of 1e-4 move a float16 1.0 with stochastic rounding, not with RNE", "[rounding]") {
  // float16's spacing at 1 is 2^-10 (9.8e-4): an update of 1e-4 is below half of it, so round to nearest
  // even never moves the parameter, and stochastic rounding moves it by 1e-4 per step in expectation.
  const auto run = [](write_back rounding) {
    mixprec::train::sgd opt({.precision = {false, rounding, 11}});
    std::vector<float16> p(64, float16(1.0f));
    const std::vector<float> g(p.size(), -1e-4f);
    for (int s = 0; s < 1000; ++s) {
      opt.begin_step(1.0);
      opt.update("p", std::span<float16>(p), std::span<const float>(g), false);
    }
    double mean = 0;
    for (auto x : p) mean += static_cast<double>(static_cast<float>(x)) / static_cast<double>(p.size());
    return mean;
  };
  CHECK(run(write_back::nearest) == 1.0);
  // 64 parameters of 1000 steps: the mean's standard deviation is below 2^-10 / sqrt(64 * 1000) ~ 4e-6
  // per step and about 1e-4 after 1000 (a sum of 1000 roundings): 1.1 within 0.002 is > 10 sigma.
  CHECK(std::abs(run(write_back::stochastic) - 1.1) < 0.002);
}

TEST_CASE("stochastic rounding in the optimiser does not depend on the order of calls", "[rounding]") {
  const mixprec::train::adamw_options opts{.precision = {false, write_back::stochastic, 2024}};
  std::vector<bfloat16> a1, b1;
  std::vector<float> ga, gb;
  for (int i = 0; i < 64; ++i) {
    a1.push_back(bfloat16(0.01f * static_cast<float>(i)));
    b1.push_back(bfloat16(-0.02f * static_cast<float>(i)));
    ga.push_back(0.001f * static_cast<float>(i % 7) - 0.003f);
    gb.push_back(0.002f * static_cast<float>(i % 5) - 0.004f);
  }
  std::vector<bfloat16> a2 = a1, b2 = b1;
  mixprec::train::adamw x(opts), y(opts);
  for (int s = 0; s < 5; ++s) {
    x.begin_step(1e-2);
    x.update("a", std::span<bfloat16>(a1), std::span<const float>(ga), true);
    x.update("b", std::span<bfloat16>(b1), std::span<const float>(gb), true);
    y.begin_step(1e-2);
    y.update("b", std::span<bfloat16>(b2), std::span<const float>(gb), true);
    y.update("a", std::span<bfloat16>(a2), std::span<const float>(ga), true);
  }
  for (std::size_t i = 0; i < a1.size(); ++i) {
    CHECK(a1[i].bits() == a2[i].bits());
    CHECK(b1[i].bits() == b2[i].bits());
  }
  // A different seed gives different roundings somewhere.
  mixprec::train::adamw z({.precision = {false, write_back::stochastic, 2025}});
  std::vector<bfloat16> a3(a2.size(), bfloat16(0.0f));
  for (int i = 0; i < 64; ++i) a3[static_cast<std::size_t>(i)] = bfloat16(0.01f * static_cast<float>(i));
  for (int s = 0; s < 5; ++s) {
    z.begin_step(1e-2);
    z.update("a", std::span<bfloat16>(a3), std::span<const float>(ga), true);
  }
  bool differs = false;
  for (std::size_t i = 0; i < a1.size(); ++i) differs = differs || a1[i].bits() != a3[i].bits();
  CHECK(differs);
}

}  // namespace rounding_test
