// Tests of mixprec/scaled/scaled_tensor.hpp: quantise, dequantise, requantise and with_scale, against
// the reference model of the formats written from their specifications (tests/formats/reference_format.hpp,
// which reads nothing of mixprec's format code) and hand-computed cases.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "../formats/reference_format.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/scaled/scaled_tensor.hpp"

namespace scaled_tensor_test {

using namespace mixprec;
using mixprec_test::overflow;
using mixprec_test::reference_of;

namespace {

// The value of a data element, decoded by the reference model from its bit pattern.
template <class F>
double decoded(F x) {
  if constexpr (std::is_same_v<F, std::int8_t>) {
    return static_cast<double>(x);
  } else {
    return reference_of<F>().decode(x.bits());
  }
}

// Every finite value of F, decoded by the reference model (zeros, subnormals, normals, both signs).
template <class F>
std::vector<double> every_finite_value() {
  std::vector<double> values;
  const auto& ref = reference_of<F>();
  for (const auto& e : ref.positives()) {
    values.push_back(e.value);
    values.push_back(-e.value);
  }
  values.push_back(0.0);
  return values;
}

// Every finite value of F times 2^k, quantised by the worst case: the max is M 2^k, so the step is
// exactly 2^k and each data element must be the value itself, bit for bit, and dequantise exact.
template <class F>
void check_exact_round_trip(int k) {
  const std::vector<double> values = every_finite_value<F>();
  xt::xarray<double> x = xt::xarray<double>::from_shape({values.size()});
  for (std::size_t i = 0; i < values.size(); ++i) x(i) = std::ldexp(values[i], k);
  for (const bool power_of_two : {false, true}) {
    const scaled_tensor<F> t = quantise<F>(x, {.rule = scale_rule::worst_case, .power_of_two = power_of_two});
    REQUIRE(t.step() == std::ldexp(1.0, k));
    REQUIRE(t.clipped() == 0);
    const xt::xarray<double> back = dequantise<double>(t);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      mismatches += decoded(t.data()(i)) == values[i] && back(i) == x(i) ? 0U : 1U;
    }
    CAPTURE(k, power_of_two);
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("quantise: the file comment's example, data = value * 448 / scale for float8_e4m3fn", "[scaled]") {
  const xt::xarray<float> x = {0.5f, -2.0f, 1.0f};
  const auto t = quantise<float8_e4m3fn>(x);
  CHECK(t.scale() == 2.0);
  CHECK(t.expected_scale() == Approx(std::sqrt((0.25 + 4.0 + 1.0) / 3.0)).epsilon(1e-15));
  CHECK(t.rule() == scale_rule::hybrid);
  CHECK(t.step() == 2.0 / 448.0);
  REQUIRE(t.shape() == std::vector<std::size_t>{3});
  CHECK(decoded(t.data()(0)) == 112.0);
  CHECK(decoded(t.data()(1)) == -448.0);
  CHECK(decoded(t.data()(2)) == 224.0);
  const xt::xarray<float> back = dequantise(t);
  CHECK(back(0) == 0.5f);
  CHECK(back(1) == -2.0f);
  CHECK(back(2) == 1.0f);
}

TEST_CASE("quantise: every finite value of each format round-trips exactly at its own scale", "[scaled]") {
  for (const int k : {-20, 0, 7}) {
    check_exact_round_trip<float8_e4m3fn>(k);
    check_exact_round_trip<float8_e5m2>(k);
    check_exact_round_trip<float16>(k);  // all 63,490 finite float16 values (both zeros count once)
  }
  check_exact_round_trip<bfloat16>(-200);  // bfloat16's max 2^128-ish times 2^-200 stays a normal double
}

TEST_CASE("quantise: int8 data are symmetric and every integer round-trips", "[scaled]") {
  xt::xarray<double> x = xt::xarray<double>::from_shape({255});
  for (int i = -127; i <= 127; ++i) x(static_cast<std::size_t>(i + 127)) = std::ldexp(i, -3);
  const auto t = quantise<std::int8_t>(x, {.rule = scale_rule::worst_case});
  CHECK(t.step() == 0.125);
  for (int i = -127; i <= 127; ++i) REQUIRE(t.data()(static_cast<std::size_t>(i + 127)) == i);
  // Ties go to even: 0.5 and 1.5 and 2.5 steps.
  const xt::xarray<double> ties = {0.5, 1.5, 2.5, -2.5, 127.0};
  const auto q = quantise<std::int8_t>(ties, {.rule = scale_rule::worst_case});
  CHECK(q.data()(0) == 0);
  CHECK(q.data()(1) == 2);
  CHECK(q.data()(2) == 2);
  CHECK(q.data()(3) == -2);
  CHECK(q.data()(4) == 127);
}

TEST_CASE("quantise: random values round to nearest even in the format, as the reference model says", "[scaled]") {
  std::mt19937_64 rng(20261125);
  std::normal_distribution<double> normal(0.0, 3.0);
  xt::xarray<double> x = xt::xarray<double>::from_shape({4096});
  for (auto& v : x) v = normal(rng) * std::exp(normal(rng));  // heavy tails: subnormal data too
  for (const auto rule : {scale_rule::worst_case, scale_rule::average_case}) {
    const auto t = quantise<float8_e4m3fn>(x, {.rule = rule});
    const auto& ref = reference_of<float8_e4m3fn>();
    std::size_t mismatches = 0;
    std::size_t clipped = 0;
    // Saturating: beyond the bound (worst case: never) or beyond 448 RMS (average case: U = 1).
    const double limit = rule == scale_rule::worst_case ? t.scale() : 448.0 * t.expected_scale();
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double scaled = x(i) / t.step();  // the step is scale / U; dividing by it is the quantisation
      clipped += std::fabs(x(i)) > limit ? 1U : 0U;
      mismatches += ref.round(scaled, overflow::saturate) == t.data()(i).bits() ? 0U : 1U;
    }
    CAPTURE(to_string(rule));
    CHECK(mismatches == 0);
    CHECK(t.clipped() == clipped);
    if (rule == scale_rule::worst_case) CHECK(clipped == 0);
  }
}

TEST_CASE("quantise: the average-case rule stores value / RMS for floats and value * 127/4 / RMS for int8",
          "[scaled]") {
  const xt::xarray<double> x = {3.0, -4.0, 0.0, 0.0};  // RMS = sqrt(25 / 4) = 2.5
  const auto f = quantise<float8_e4m3fn>(x, {.rule = scale_rule::average_case});
  CHECK(f.expected_scale() == 2.5);
  CHECK(f.step() == 2.5);
  CHECK(decoded(f.data()(0)) == 1.25);    // 3 / 2.5, exact in e4m3fn
  CHECK(decoded(f.data()(1)) == -1.625);  // 4 / 2.5 = 1.6: nearest on e4m3fn's grid of 1/8 in [1, 2)
  const auto i = quantise<std::int8_t>(x, {.rule = scale_rule::average_case});
  CHECK(i.step() == 2.5 / (127.0 / 4.0));
  CHECK(i.data()(0) == 38);   // 3 * 31.75 / 2.5 = 38.1
  CHECK(i.data()(1) == -51);  // -4 * 31.75 / 2.5 = -50.8
}

TEST_CASE("quantise: a power-of-two step is rounded up, so quantising is an exact shift and nothing clips",
          "[scaled]") {
  const xt::xarray<double> x = {3.0, -1.0, 0.25};
  const auto t = quantise<float8_e4m3fn>(x, {.rule = scale_rule::worst_case, .power_of_two = true});
  // 3 / 448 = 0.0067 lies in [2^-8, 2^-7): rounded up to 2^-7.
  CHECK(t.step() == std::ldexp(1.0, -7));
  CHECK(t.scale() == 3.0);               // the estimate stays the measured one; only the step is rounded
  CHECK(decoded(t.data()(0)) == 384.0);  // 3 * 128, exact
  CHECK(decoded(t.data()(1)) == -128.0);
  CHECK(decoded(t.data()(2)) == 32.0);
  CHECK(t.clipped() == 0);
  const xt::xarray<double> back = dequantise<double>(t);
  CHECK(static_cast<bool>(back == x));
  // A step that already is a power of two stays: 448 * 2^-3 / 448.
  const xt::xarray<double> y = {448.0 / 8.0};
  CHECK(quantise<float8_e4m3fn>(y, {.rule = scale_rule::worst_case, .power_of_two = true}).step() == 0.125);
}

TEST_CASE("quantise: an all-zero or empty tensor gets the smallest normal float as its scales, never 0", "[scaled]") {
  const xt::xarray<float> zeros = xt::zeros<float>({2, 3});
  const auto t = quantise<float8_e4m3fn>(zeros);
  CHECK(t.scale() == static_cast<double>(std::numeric_limits<float>::min()));
  CHECK(t.expected_scale() == t.scale());
  CHECK(std::isfinite(t.step()));
  CHECK(t.step() > 0.0);
  for (const auto v : dequantise(t)) CHECK(v == 0.0f);
  const xt::xarray<float> empty = xt::xarray<float>::from_shape({0});
  const auto e = quantise<float8_e5m2>(empty);
  CHECK(e.size() == 0);
  CHECK(e.scale() == static_cast<double>(std::numeric_limits<float>::min()));
}

TEST_CASE("quantise: NaN or Inf is a clear error naming the index", "[scaled]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const xt::xarray<float> with_nan = {1.0f, nan, 2.0f};
  const xt::xarray<float> with_inf = {1.0f, 2.0f, -inf};
  CHECK_THROWS_AS(quantise<float8_e4m3fn>(with_nan), std::domain_error);
  CHECK_THROWS_WITH(quantise<float8_e4m3fn>(with_nan), Catch::Matchers::Contains("index 1 is nan"));
  CHECK_THROWS_WITH(quantise<std::int8_t>(with_inf), Catch::Matchers::Contains("index 2 is -inf"));
}

TEST_CASE("with_scale: a kept promise is exact, a broken one is counted or thrown, never trusted", "[scaled]") {
  const xt::xarray<float> x = {0.5f, -3.0f, 1.0f, 2.5f};
  // Promise |x| <= 4: kept. Step 4 / 448.
  const auto kept = with_scale<float8_e4m3fn>({4.0, 1.0}, x);
  CHECK(kept.clipped() == 0);
  CHECK(kept.scale() == 4.0);
  CHECK(kept.expected_scale() == 1.0);
  CHECK(kept.step() == 4.0 / 448.0);
  // Promise |x| <= 2: -3 and 2.5 break it and saturate to -+2.
  const auto broken = with_scale<float8_e4m3fn>({2.0, 1.0}, x);
  CHECK(broken.clipped() == 2);
  const xt::xarray<float> back = dequantise(broken);
  CHECK(back(1) == -2.0f);
  CHECK(back(3) == 2.0f);
  CHECK_THROWS_AS(with_scale<float8_e4m3fn>({2.0, 1.0}, x, {}, on_broken_promise::throw_error), std::range_error);
  CHECK_THROWS_WITH(with_scale<float8_e4m3fn>({2.0, 1.0}, x, {}, on_broken_promise::throw_error),
                    Catch::Matchers::Contains("2 of 4 values"));
  CHECK_NOTHROW(with_scale<float8_e4m3fn>({4.0, 1.0}, x, {}, on_broken_promise::throw_error));
  // Bad promises.
  CHECK_THROWS_AS(with_scale<float8_e4m3fn>({0.0, 1.0}, x), std::invalid_argument);
  CHECK_THROWS_AS(with_scale<float8_e4m3fn>({-1.0, 1.0}, x), std::invalid_argument);
  CHECK_THROWS_AS(with_scale<float8_e4m3fn>({std::numeric_limits<double>::quiet_NaN(), 1.0}, x), std::invalid_argument);
  // On a scaled tensor: the data are rewritten in the promised step; the rule is kept.
  const auto t = quantise<float8_e4m3fn>(x, {.rule = scale_rule::worst_case});
  const auto promised = with_scale({6.0, 2.0}, t);  // twice the measured 3: the data halve
  CHECK(promised.scale() == 6.0);
  CHECK(promised.rule() == scale_rule::worst_case);
  CHECK(static_cast<bool>(dequantise(promised) == dequantise(t)));  // halving the data of e4m3fn values is exact here
  CHECK(with_scale({1.0, 1.0}, t).clipped() == 2);                  // -3 and 2.5
}

TEST_CASE("requantise: stale scales are measured again and the values kept", "[scaled]") {
  // Data whose true max is 8 and RMS 4 carried under the estimate (64, 2): the proposal's A.
  xt::xarray<double> x = xt::zeros<double>({8});
  x(0) = 8.0;
  x(1) = -8.0;  // RMS = sqrt(128 / 8) = 4
  const auto stale = with_scale<float8_e4m3fn>({64.0, 2.0}, x, {.rule = scale_rule::hybrid});
  CHECK(needs_requantise<float8_e4m3fn>(stale.estimate()) == false);  // 32 alone is fine
  const auto fresh = requantise(stale);
  CHECK(fresh.estimate() == scale_estimate{8.0, 4.0});
  CHECK(fresh.step() == 8.0 / 448.0);
  CHECK(static_cast<bool>(dequantise<double>(fresh) == x));
  CHECK(fresh.rule() == scale_rule::hybrid);
}

TEST_CASE("scaled_tensor: the constructor checks its scales", "[scaled]") {
  xt::xarray<float8_e4m3fn> data = xt::xarray<float8_e4m3fn>::from_shape({2});
  CHECK_THROWS_AS(scaled_tensor<float8_e4m3fn>(data, {0.0, 1.0}, {}), std::invalid_argument);
  CHECK_THROWS_AS(scaled_tensor<float8_e4m3fn>(data, {1.0, std::numeric_limits<double>::infinity()}, {}),
                  std::invalid_argument);
  const scaled_tensor<float8_e4m3fn> t(data, {448.0, 100.0}, {.rule = scale_rule::worst_case});
  CHECK(t.step() == 1.0);
}

TEST_CASE("quantise: a value at the bound is never counted as clipped, whatever the rounding of the step", "[scaled]") {
  // 1.1f / fl(1.1f / 448) = 448.00000000000006: the value at the bound lands an ulp past M.
  const xt::xarray<float> x = {1.1f};
  CHECK(quantise<float8_e4m3fn>(x).clipped() == 0);
  CHECK_NOTHROW(with_scale<float8_e4m3fn>({double(1.1f), double(1.1f)}, x, {}, on_broken_promise::throw_error));
  // Many maxima, three formats: a worst-case quantisation never clips.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
  std::size_t clipped = 0;
  for (int i = 0; i < 2000; ++i) {
    const xt::xarray<float> one = {uniform(rng), 0.25f};
    clipped += quantise<float8_e4m3fn>(one).clipped() + quantise<float8_e5m2>(one).clipped() +
               quantise<std::int8_t>(one).clipped() + quantise<float16>(one, {.power_of_two = true}).clipped();
  }
  CHECK(clipped == 0);
}

TEST_CASE("quantise: scales too small for the format, int8's -128 and column-major inputs are clear errors",
          "[scaled]") {
  // A worst-case float8_e4m3fn step is scale / 448: below 448 * DBL_MIN it is not a normal double.
  const xt::xarray<double> tiny = {1e-306};
  CHECK_THROWS_WITH(quantise<float8_e4m3fn>(tiny), Catch::Matchers::Contains("the smallest this format"));
  CHECK_THROWS_AS(with_scale<float8_e4m3fn>({1e-322, 1e-322}, xt::xarray<double>{0.0}), std::domain_error);
  CHECK_NOTHROW(quantise<float8_e4m3fn>(xt::xarray<double>{1e-300}));
  // int8 data are symmetric.
  xt::xarray<std::int8_t> data = {std::int8_t{5}, std::int8_t{-128}};
  CHECK_THROWS_WITH(scaled_tensor<std::int8_t>(data, {1.0, 1.0}, {}), Catch::Matchers::Contains("-128"));
  // Column-major storage would be read transposed.
  xt::xarray<float, xt::layout_type::column_major> cm = {{1.0f, 2.0f}, {3.0f, 4.0f}};
  CHECK_THROWS_WITH(quantise<float8_e4m3fn>(cm), Catch::Matchers::Contains("not row-major"));
}

TEST_CASE("quantise: the RMS of very large and very small doubles is measured without overflow", "[scaled]") {
  const xt::xarray<double> big = {3e200, -4e200};
  const auto b = quantise<float16>(big, {.rule = scale_rule::worst_case});
  CHECK(b.scale() == 4e200);
  CHECK(b.expected_scale() == Approx(std::sqrt(12.5) * 1e200).epsilon(1e-14));
  const xt::xarray<double> small = {3e-200, -4e-200};
  const auto s = quantise<float16>(small, {.rule = scale_rule::worst_case});
  CHECK(s.expected_scale() == Approx(std::sqrt(12.5) * 1e-200).epsilon(1e-14));
}

}  // namespace scaled_tensor_test
