// Tests of mixprec/diagnostics/quantile.hpp: nearest-rank quantiles (rank k = ceil(p n), Hyndman &
// Fan definition 1, numpy.quantile(method="inverted_cdf")) on small arrays whose ranks are computed by
// hand in the comments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "mixprec/diagnostics/quantile.hpp"

using Catch::Matchers::Contains;
using mixprec::diagnostics::nearest_rank;
using mixprec::diagnostics::parity_quantile_levels;
using mixprec::diagnostics::quantile_level;
using mixprec::diagnostics::quantile_nearest_rank;

namespace {
/// 1, 2, ..., n in a shuffled order (so that a quantile must sort to find its rank).
std::vector<double> shuffled_one_to(std::size_t n) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 1.0);
  std::mt19937 rng(static_cast<unsigned>(n));
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}
}  // namespace

TEST_CASE("nearest_rank is ceil(p n), computed exactly in integers", "[diagnostics][quantile]") {
  CHECK(nearest_rank(4, {1, 2}) == 2);       // 0.5 * 4 = 2
  CHECK(nearest_rank(5, {1, 2}) == 3);       // ceil(2.5)
  CHECK(nearest_rank(1, {1, 2}) == 1);       // ceil(0.5)
  CHECK(nearest_rank(10, {99, 100}) == 10);  // ceil(9.9)
  CHECK(nearest_rank(1000, {999, 1000}) == 999);
  CHECK(nearest_rank(1000, {9999, 10000}) == 1000);  // ceil(999.9)
  CHECK(nearest_rank(10000, {9999, 10000}) == 9999);
  CHECK(nearest_rank(10001, {1, 2}) == 5001);  // ceil(5000.5)
  CHECK(nearest_rank(7, {1, 1}) == 7);         // p = 1: the max
  CHECK(nearest_rank(100, {99, 100}) == 99);
  // 0.07 * 100 in double is 7.000000000000001, whose ceiling is the wrong rank (8); the exact rank is 7.
  REQUIRE(std::ceil(0.07 * 100.0) == 8.0);
  CHECK(nearest_rank(100, {7, 100}) == 7);
  // Large n: (2^40 + 1) * 9999 = 1099511627777 * 10^4 - 1099511627777 = 10994016766142223, divided by
  // 10^4: 1099401676614.2223, so the rank is 1099401676615.
  CHECK(nearest_rank((std::size_t{1} << 40) + 1, {9999, 10000}) == 1099401676615ULL);
}

TEST_CASE("nearest_rank rejects n = 0 and levels outside 0 < p <= 1", "[diagnostics][quantile]") {
  CHECK_THROWS_WITH(nearest_rank(0, {1, 2}), Contains("n == 0"));
  CHECK_THROWS_WITH(nearest_rank(5, {0, 2}), Contains("0/2") && Contains("(0, 1]"));
  CHECK_THROWS_WITH(nearest_rank(5, {3, 2}), Contains("3/2"));
  CHECK_THROWS_WITH(nearest_rank(5, {1, 0}), Contains("1/0"));
}

TEST_CASE("quantile_nearest_rank picks the ceil(p n)-th smallest value of a small array", "[diagnostics][quantile]") {
  // {0.5, 0.1, 0.4, 0.2} sorted: 0.1, 0.2, 0.4, 0.5.
  const std::vector<double> v{0.5, 0.1, 0.4, 0.2};
  CHECK(quantile_nearest_rank(v, {1, 4}) == 0.1);     // k = 1
  CHECK(quantile_nearest_rank(v, {1, 2}) == 0.2);     // k = 2 (numpy inverted_cdf: 0.2; linear: 0.3)
  CHECK(quantile_nearest_rank(v, {3, 4}) == 0.4);     // k = 3
  CHECK(quantile_nearest_rank(v, {99, 100}) == 0.5);  // k = ceil(3.96) = 4
  CHECK(quantile_nearest_rank(v, {1, 1}) == 0.5);
  CHECK(v == std::vector<double>{0.5, 0.1, 0.4, 0.2});  // the input is untouched

  // 1..10 shuffled: p10 -> k = 1; p11 -> k = ceil(1.1) = 2; p50 -> 5; p99 -> ceil(9.9) = 10.
  const auto ten = shuffled_one_to(10);
  CHECK(quantile_nearest_rank(ten, {1, 10}) == 1.0);
  CHECK(quantile_nearest_rank(ten, {11, 100}) == 2.0);
  CHECK(quantile_nearest_rank(ten, {1, 2}) == 5.0);
  CHECK(quantile_nearest_rank(ten, {99, 100}) == 10.0);

  // Ties: {2, 2, 1, 2}: sorted 1, 2, 2, 2; p25 -> 1, p26 -> k = ceil(1.04) = 2 -> 2.
  const std::vector<double> ties{2.0, 2.0, 1.0, 2.0};
  CHECK(quantile_nearest_rank(ties, {1, 4}) == 1.0);
  CHECK(quantile_nearest_rank(ties, {26, 100}) == 2.0);
}

TEST_CASE("quantile_nearest_rank at the parity levels p50 p99 p99.9 p99.99", "[diagnostics][quantile]") {
  // 1..100: p50 -> 50, p99 -> 99 (not 100: the rank is exact), p99.9 -> ceil(99.9) = 100, p99.99 -> 100.
  const auto hundred = shuffled_one_to(100);
  CHECK(quantile_nearest_rank(hundred, parity_quantile_levels[0]) == 50.0);
  CHECK(quantile_nearest_rank(hundred, parity_quantile_levels[1]) == 99.0);
  CHECK(quantile_nearest_rank(hundred, parity_quantile_levels[2]) == 100.0);
  CHECK(quantile_nearest_rank(hundred, parity_quantile_levels[3]) == 100.0);
  // 1..1000: p99.9 -> 999, p99.99 -> ceil(999.9) = 1000.
  const auto thousand = shuffled_one_to(1000);
  CHECK(quantile_nearest_rank(thousand, parity_quantile_levels[1]) == 990.0);
  CHECK(quantile_nearest_rank(thousand, parity_quantile_levels[2]) == 999.0);
  CHECK(quantile_nearest_rank(thousand, parity_quantile_levels[3]) == 1000.0);
  // 1..10000: p99.99 -> 9999.
  const auto ten_thousand = shuffled_one_to(10000);
  CHECK(quantile_nearest_rank(ten_thousand, parity_quantile_levels[0]) == 5000.0);
  CHECK(quantile_nearest_rank(ten_thousand, parity_quantile_levels[3]) == 9999.0);
}

TEST_CASE("quantile_nearest_rank rejects empty input and NaN values", "[diagnostics][quantile]") {
  CHECK_THROWS_WITH(quantile_nearest_rank(std::vector<double>{}, {1, 2}), Contains("empty"));
  const std::vector<double> with_nan{1.0, 2.0, std::numeric_limits<double>::quiet_NaN()};
  CHECK_THROWS_WITH(quantile_nearest_rank(with_nan, {1, 2}), Contains("values[2]") && Contains("NaN"));
  CHECK_THROWS_AS(quantile_nearest_rank(std::vector<double>{1.0}, {2, 1}), std::invalid_argument);
  // Infinities have a rank.
  const std::vector<double> with_inf{std::numeric_limits<double>::infinity(), 1.0};
  CHECK(quantile_nearest_rank(with_inf, {1, 2}) == 1.0);
  CHECK(quantile_nearest_rank(with_inf, {1, 1}) == std::numeric_limits<double>::infinity());
}

TEST_CASE("quantile levels print as percentiles", "[diagnostics][quantile]") {
  using mixprec::diagnostics::to_string;
  CHECK(to_string(parity_quantile_levels[0]) == "p50");
  CHECK(to_string(parity_quantile_levels[1]) == "p99");
  CHECK(to_string(parity_quantile_levels[2]) == "p99.9");
  CHECK(to_string(parity_quantile_levels[3]) == "p99.99");
  CHECK(to_string(quantile_level{1, 4}) == "p25");
  CHECK(quantile_level{999, 1000}.value() == 0.999);
}
