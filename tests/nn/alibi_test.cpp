// Tests of nn/alibi.hpp (Press, Smith and Lewis 2022, "Train Short, Test Long: Attention with Linear
// Biases") against:
// - the paper's reference code, `get_slopes` in github.com/ofirpress/attention_with_linear_biases,
//   fairseq/models/transformer.py, re-typed here in double as the Python computes it
//   (start = 2 ** (-2 ** -(log2(n) - 3)), slopes start * ratio ** i with ratio = start; for n not a
//   power of two, the slopes of the closest power of two below, then get_slopes(2 * that)[0::2]);
// - slopes written out by hand: 2^(-8 i / n) for n a power of two (8 heads: 1/2, 1/4, ..., 1/256);
// - the bias −slope · |d| of every key at distance d, worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/nn/alibi.hpp"

namespace alibi_test {

namespace nn = mixprec::nn;
using Catch::Matchers::WithinRel;

namespace {

// The reference code's get_slopes_power_of_2(n): Python floats are doubles, `**` is C's pow.
std::vector<double> press_slopes_power_of_2(std::size_t n) {
  const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3.0)));
  const double ratio = start;
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(start * std::pow(ratio, static_cast<double>(i)));
  return out;
}

// The reference code's get_slopes(n).
std::vector<double> press_slopes(std::size_t n) {
  const double log2n = std::log2(static_cast<double>(n));
  if (log2n == std::floor(log2n)) return press_slopes_power_of_2(n);  // math.log2(n).is_integer()
  const auto closest_power_of_2 = static_cast<std::size_t>(std::pow(2.0, std::floor(log2n)));
  std::vector<double> out = press_slopes_power_of_2(closest_power_of_2);
  const std::vector<double> doubled = press_slopes(2 * closest_power_of_2);
  // get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2]
  for (std::size_t i = 0; i < doubled.size() && out.size() < n; i += 2) out.push_back(doubled[i]);
  return out;
}

template <class A>
A bias_at(const std::vector<A>& rows, std::size_t keys, std::size_t head, std::ptrdiff_t d) {
  const std::size_t width = 2 * keys - 1;
  return rows[head * width + static_cast<std::size_t>(d + static_cast<std::ptrdiff_t>(keys) - 1)];
}

}  // namespace

TEST_CASE("ALiBi slopes of 8 heads are 1/2, 1/4, ..., 1/256 exactly", "[nn][alibi]") {
  // The paper (section 3) gives 8 heads the geometric sequence 1/2^1, 1/2^2, ..., 1/2^8: powers of two,
  // exact in double.
  const std::vector<double> slopes = nn::alibi_slopes(8);
  REQUIRE(slopes.size() == 8);
  const double expected[] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625};
  for (std::size_t h = 0; h < 8; ++h) {
    CAPTURE(h);
    CHECK(slopes[h] == expected[h]);
  }
}

TEST_CASE("ALiBi slopes of 1, 6, 12 and 16 heads written out", "[nn][alibi]") {
  // 1 head: 2^(-8 / 1) = 1/256.
  const std::vector<double> one = nn::alibi_slopes(1);
  REQUIRE(one.size() == 1);
  CHECK(one[0] == 0.00390625);

  // 6 heads: the 4 slopes of 4 heads, 2^-2, 2^-4, 2^-6, 2^-8, then every other slope of 8 heads
  // (1st and 3rd): 2^-1, 2^-3.
  const std::vector<double> six = nn::alibi_slopes(6);
  REQUIRE(six.size() == 6);
  const double expected_six[] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  for (std::size_t h = 0; h < 6; ++h) {
    CAPTURE(h);
    CHECK(six[h] == expected_six[h]);
  }

  // 12 heads: the 8 slopes of 8 heads, 2^-1 ... 2^-8, then the 1st, 3rd, 5th, 7th of 16 heads
  // (2^(-8 i / 16) = 2^(-i / 2)): 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  // 2^-0.5 = 0.70710678118654752440 (1 / sqrt 2), and each next one half of it.
  const std::vector<double> twelve = nn::alibi_slopes(12);
  REQUIRE(twelve.size() == 12);
  for (std::size_t h = 0; h < 8; ++h) {
    CAPTURE(h);
    CHECK(twelve[h] == std::ldexp(1.0, -static_cast<int>(h + 1)));
  }
  CHECK_THAT(twelve[8], WithinRel(0.70710678118654752440, 2e-16));
  CHECK_THAT(twelve[9], WithinRel(0.35355339059327376220, 2e-16));
  CHECK_THAT(twelve[10], WithinRel(0.17677669529663688110, 2e-16));
  CHECK_THAT(twelve[11], WithinRel(0.08838834764831844055, 2e-16));

  // 16 heads: 2^(-i / 2), i = 1 ... 16: the even ones powers of two (exact), the odd ones 2^-k / sqrt 2.
  const std::vector<double> sixteen = nn::alibi_slopes(16);
  REQUIRE(sixteen.size() == 16);
  for (std::size_t h = 0; h < 16; ++h) {
    CAPTURE(h);
    const int i = static_cast<int>(h) + 1;
    if (i % 2 == 0) {
      CHECK(sixteen[h] == std::ldexp(1.0, -i / 2));
    } else {
      CHECK_THAT(sixteen[h], WithinRel(std::ldexp(0.70710678118654752440, -(i - 1) / 2), 2e-16));
    }
  }
}

TEST_CASE("ALiBi slopes match the paper's reference get_slopes for 8, 12 and 16 heads", "[nn][alibi]") {
  for (const std::size_t n_heads : {std::size_t{8}, std::size_t{12}, std::size_t{16}}) {
    const std::vector<double> expected = press_slopes(n_heads);
    const std::vector<double> slopes = nn::alibi_slopes(n_heads);
    REQUIRE(expected.size() == n_heads);
    REQUIRE(slopes.size() == n_heads);
    for (std::size_t h = 0; h < n_heads; ++h) {
      CAPTURE(n_heads, h, expected[h], slopes[h]);
      // 1e-15 relative, except for the last head of 16, where the reference itself is further off: its
      // start * ratio ** i carries the rounding of start = 2^(-1/2) (relative δ ≈ 6.8e-17) i + 1 = 16
      // times, and Python's slope is 0x1.0000000000005p-8, 1.11e-15 above the exact 2^-8 that the
      // library returns (both checked bit for bit in the next test).
      const double tolerance = n_heads == 16 && h == 15 ? 1.2e-15 : 1e-15;
      CHECK_THAT(slopes[h], WithinRel(expected[h], tolerance));
    }
  }
  // And for every head count up to 64, power of two or not.
  for (std::size_t n_heads = 1; n_heads <= 64; ++n_heads) {
    const std::vector<double> expected = press_slopes(n_heads);
    const std::vector<double> slopes = nn::alibi_slopes(n_heads);
    REQUIRE(slopes.size() == n_heads);
    for (std::size_t h = 0; h < n_heads; ++h) {
      CAPTURE(n_heads, h);
      CHECK_THAT(slopes[h], WithinRel(expected[h], 1e-14));
    }
  }
}

TEST_CASE("the re-typed reference get_slopes gives Python's values, 16 heads bit for bit", "[nn][alibi]") {
  // Python 3 (CPython, glibc pow): [x.hex() for x in get_slopes(16)] from the reference code.
  const double python16[] = {0x1.6a09e667f3bcdp-1, 0x1.0000000000001p-1, 0x1.6a09e667f3bcep-2, 0x1.0000000000001p-2,
                             0x1.6a09e667f3bcep-3, 0x1.0000000000002p-3, 0x1.6a09e667f3bd0p-4, 0x1.0000000000003p-4,
                             0x1.6a09e667f3bd0p-5, 0x1.0000000000003p-5, 0x1.6a09e667f3bd1p-6, 0x1.0000000000003p-6,
                             0x1.6a09e667f3bd3p-7, 0x1.0000000000004p-7, 0x1.6a09e667f3bd3p-8, 0x1.0000000000005p-8};
  const std::vector<double> reference = press_slopes(16);
  REQUIRE(reference.size() == 16);
  for (std::size_t h = 0; h < 16; ++h) {
    CAPTURE(h);
    CHECK(reference[h] == python16[h]);
  }
  // The library's slope of head 16 is the exact 2^-8, 5 units in the last place below the reference's.
  CHECK(nn::alibi_slopes(16)[15] == 0x1p-8);
}

TEST_CASE("ALiBi slopes of 0 heads throw std::invalid_argument", "[nn][alibi]") {
  CHECK_THROWS_AS(nn::alibi_slopes(0), std::invalid_argument);
}

TEMPLATE_TEST_CASE("ALiBi bias rows are -slope * |d| over the 2 keys - 1 distances", "[nn][alibi]", float, double) {
  using A = TestType;
  const std::vector<double> slopes = nn::alibi_slopes(8);  // 1/2, 1/4, ..., 1/256
  const std::size_t keys = 5;
  const std::vector<A> rows = nn::alibi_bias<A>(std::span<const double>(slopes), keys);
  REQUIRE(rows.size() == 8 * (2 * keys - 1));  // [heads, 2 keys - 1] = [8, 9]

  // Head 0 (slope 1/2): d = -4 ... 4 -> -2, -1.5, -1, -0.5, 0, -0.5, -1, -1.5, -2 (exact in float).
  const A head0[] = {-2, -1.5, -1, -0.5, 0, -0.5, -1, -1.5, -2};
  for (std::size_t i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(rows[i] == head0[i]);
  }
  // Head 2 (slope 1/8), d = -3: -3/8; head 7 (slope 1/256), d = 4: -4/256 = -1/64.
  CHECK(bias_at(rows, keys, 2, -3) == A(-0.375));
  CHECK(bias_at(rows, keys, 7, 4) == A(-0.015625));
  CHECK(bias_at(rows, keys, 7, -1) == A(-0.00390625));

  for (std::size_t h = 0; h < 8; ++h) {
    CAPTURE(h);
    CHECK(bias_at(rows, keys, h, 0) == A(0));  // no bias for the query's own key
    for (std::ptrdiff_t d = 1; d < static_cast<std::ptrdiff_t>(keys); ++d) {
      CAPTURE(d);
      CHECK(bias_at(rows, keys, h, d) == bias_at(rows, keys, h, -d));  // symmetric
      CHECK(bias_at(rows, keys, h, d) == A(-slopes[h] * static_cast<double>(d)));
      CHECK(bias_at(rows, keys, h, d) < bias_at(rows, keys, h, d - 1));  // farther keys, lower scores
    }
  }
}

TEMPLATE_TEST_CASE("ALiBi bias of non-power-of-two slopes rounds -slope * |d| once to the opmath type", "[nn][alibi]",
                   float, double) {
  using A = TestType;
  const std::vector<double> slopes = nn::alibi_slopes(12);
  const std::size_t keys = 300;
  const std::vector<A> rows = nn::alibi_bias<A>(std::span<const double>(slopes), keys);
  REQUIRE(rows.size() == 12 * (2 * keys - 1));
  for (std::size_t h = 0; h < 12; ++h) {
    for (const std::ptrdiff_t d : {-299, -150, -7, -1, 0, 1, 2, 99, 299}) {
      CAPTURE(h, d);
      const double exact = -slopes[h] * static_cast<double>(d < 0 ? -d : d);
      CHECK(bias_at(rows, keys, h, d) == static_cast<A>(exact));
      CHECK(bias_at(rows, keys, h, d) == bias_at(rows, keys, h, -d));
    }
  }
  // Head 8 (slope 2^-0.5), d = ±299: -299 / sqrt 2 = -211.424927574777709796.
  CHECK_THAT(static_cast<double>(bias_at(rows, keys, 8, 299)),
             WithinRel(-211.424927574777709796, static_cast<double>(std::numeric_limits<A>::epsilon())));
}

TEST_CASE("ALiBi bias of a single key is one zero per head", "[nn][alibi]") {
  const std::vector<double> slopes = nn::alibi_slopes(4);
  const std::vector<float> rows = nn::alibi_bias<float>(std::span<const double>(slopes), 1);
  REQUIRE(rows.size() == 4);
  for (const float v : rows) CHECK(v == 0.0f);
}

TEST_CASE("ALiBi bias of no slopes or no keys throws std::invalid_argument", "[nn][alibi]") {
  const std::vector<double> slopes = nn::alibi_slopes(4);
  const std::vector<double> none;
  CHECK_THROWS_AS(nn::alibi_bias<float>(std::span<const double>(none), 4), std::invalid_argument);
  CHECK_THROWS_AS(nn::alibi_bias<double>(std::span<const double>(none), 4), std::invalid_argument);
  CHECK_THROWS_AS(nn::alibi_bias<float>(std::span<const double>(slopes), 0), std::invalid_argument);
  CHECK_THROWS_AS(nn::alibi_bias<double>(std::span<const double>(slopes), 0), std::invalid_argument);
  CHECK_NOTHROW(nn::alibi_bias<double>(std::span<const double>(slopes), 1));
}

}  // namespace alibi_test
