// Tests of mixprec/scaled/ops.hpp: each op's scales by hand, the proposal's worked example through a real
// matrix product (the hybrid rule requantises A), the rules' predictions on Gaussian data, and the results
// against float64 references written here (the products summed in double from the dequantised inputs).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/scaled/ops.hpp"

namespace ops_test {

using namespace mixprec;
using Catch::Matchers::Contains;

namespace {

xt::xarray<double> gaussian(std::vector<std::size_t> shape, std::uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  xt::xarray<double> x = xt::xarray<double>::from_shape(shape);
  for (auto& v : x) v = normal(rng);
  return x;
}

// The float64 product of row-major a [m, k] and b [k, n].
std::vector<double> reference_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::vector<double> y(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < n; ++j) y[i * n + j] += a(i, p) * b(p, j);
  return y;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (const double x : v) m = std::max(m, std::fabs(x));
  return m;
}

double rms(const std::vector<double>& v) {
  double s = 0.0;
  for (const double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// ||y - ref|| / ||ref|| (Frobenius).
template <class F>
double relative_error(const scaled_tensor<F>& y, const std::vector<double>& ref) {
  double err = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    err += (y.value(i) - ref[i]) * (y.value(i) - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(err / norm);
}

template <class F>
xt::xarray<double> values(const scaled_tensor<F>& t) {
  return dequantise<double>(t);
}

}  // namespace

TEST_CASE("scaled ops: add, sub, mul, scalar and sum propagate the rules' scales", "[scaled]") {
  const xt::xarray<double> x = {1.0, -2.0, 0.5, 0.0};    // max 2, RMS sqrt(5.25 / 4)
  const xt::xarray<double> y = {0.25, 0.25, -1.0, 3.0};  // max 3, RMS sqrt(10.125 / 4)
  const auto a = quantise<float8_e4m3fn>(x, {.rule = scale_rule::worst_case});
  const auto b = quantise<float8_e4m3fn>(y, {.rule = scale_rule::worst_case});
  const double ea = std::sqrt(5.25 / 4.0), eb = std::sqrt(10.125 / 4.0);
  CHECK(scaled::add(a, b).scale() == 5.0);
  CHECK(scaled::add(a, b).expected_scale() == Approx(std::sqrt(ea * ea + eb * eb)).epsilon(1e-15));
  CHECK(scaled::sub(a, b).scale() == 5.0);
  CHECK(scaled::mul(a, b).scale() == 6.0);
  CHECK(scaled::mul(a, b).expected_scale() == Approx(ea * eb).epsilon(1e-15));
  CHECK(scaled::mul(a, -4.0).scale() == 8.0);
  CHECK(scaled::sum(a).scale() == 8.0);  // 4 elements of scale 2
  CHECK(scaled::sum(a).expected_scale() == Approx(2.0 * ea).epsilon(1e-15));
  // The values, from a float64 reference of the (exactly quantised: every input is an e4m3fn value at
  // these steps) operands, rounded once to e4m3fn at the result's step.
  const xt::xarray<double> s = values(scaled::add(a, b));
  CHECK(s(0) == Approx(1.25).margin(5.0 / 448.0 * 4));  // 1.25 * 448 / 5 = 112: exact
  CHECK(s(0) == 1.25);
  CHECK(s(3) == Approx(3.0).epsilon(1.0 / 16));
  CHECK(values(scaled::mul(a, b))(2) == Approx(-36.0 * 6.0 / 448.0).epsilon(1e-15));  // -37.3 rounds to -36
  CHECK(values(scaled::sum(a))() == Approx(-0.5).epsilon(1.0 / 16));
  CHECK(static_cast<bool>(values(scaled::sub(a, a)) == xt::zeros<double>({4})));
}

TEST_CASE("scaled ops: a scalar multiple changes the step only, and keeps a power-of-two step one", "[scaled]") {
  const xt::xarray<double> x = {1.0, -2.0, 0.5};
  const auto a = quantise<float8_e4m3fn>(x, {.rule = scale_rule::worst_case});
  const auto b = scaled::mul(a, -3.0);
  CHECK(b.step() == Approx(3.0 * a.step()).epsilon(1e-15));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(static_cast<float>(b.data()(i)) == -static_cast<float>(a.data()(i)));
  const auto p = quantise<float8_e4m3fn>(x, {.rule = scale_rule::worst_case, .power_of_two = true});
  const auto p3 = scaled::mul(p, 3.0);  // not a power of two: the data are rewritten
  int exponent = 0;
  CHECK(std::frexp(p3.step(), &exponent) == 0.5);
  CHECK(values(p3)(1) == -6.0);
  const auto zero = scaled::mul(a, 0.0);
  CHECK(zero.scale() == zero_tensor_scale);
  CHECK(static_cast<bool>(values(zero) == xt::zeros<double>({3})));
  CHECK_THROWS_WITH(scaled::mul(a, std::numeric_limits<double>::infinity()), Contains("must be finite"));
}

TEST_CASE("scaled ops: the proposal's worked example through a matrix product, K = 4096", "[scaled]") {
  // A [2, 4096] carries the stale estimate (64, 2) but its values have max 8 and RMS 4 (a quarter of
  // them +-8); B [4096, 2] carries (16, 1) and holds +-1 with max 1.
  const std::size_t k = 4096;
  xt::xarray<double> x = xt::zeros<double>({std::size_t{2}, k});
  xt::xarray<double> w = xt::xarray<double>::from_shape({k, std::size_t{2}});
  for (std::size_t p = 0; p < k; ++p) {
    x(0, p) = p % 4 == 0 ? 8.0 : 0.0;
    x(1, p) = p % 4 == 1 ? -8.0 : 0.0;
    w(p, 0) = p % 2 == 0 ? 1.0 : -1.0;
    w(p, 1) = 1.0;
  }
  const auto a = with_scale<float8_e4m3fn>({64.0, 2.0}, x, {.rule = scale_rule::hybrid});
  const auto b = with_scale<float8_e4m3fn>({16.0, 1.0}, w, {.rule = scale_rule::hybrid});
  // Hybrid: (4194304, 128) would exceed e4m3fn's range 28672, so A, the worse offender (ratio 32 > 16),
  // is requantised to (8, 4): the result's estimate is (524288, 256).
  const auto y = scaled::matmul(a, b);
  CHECK(y.estimate() == scale_estimate{524288.0, 256.0});
  // Worst case: no requantisation.
  const auto yw = scaled::matmul(a, b, scale_rule::worst_case);
  CHECK(yw.estimate() == scale_estimate{4194304.0, 128.0});
  CHECK(yw.rule() == scale_rule::worst_case);
  // The values: row 0 = 8 * (1024 ones at even p: +1) = 8192 in column 0 and 8192 in column 1;
  // row 1 = -8 * (1024 odd p: -1) = 8192 and -8192.
  const xt::xarray<double> expected = {{8192.0, 8192.0}, {8192.0, -8192.0}};
  CHECK(static_cast<bool>(values(y) == expected));
  // The worst-case result holds 8192 at step 4194304 / 448: 0.875 data units, representable exactly.
  CHECK(static_cast<bool>(values(yw) == expected));
}

TEST_CASE("scaled ops: the hybrid rule requantises an operand whose own ratio exceeds its format", "[scaled]") {
  const xt::xarray<double> x = {1.0, -1.0, 0.5, 0.25};
  // A bound 40000 times too large (ratio 40000 > 28672): the values sit in e4m3fn's subnormals,
  // 1 -> 448 / 40000 = 0.0112 = 5.7 * 2^-9, stored as 6 * 2^-9.
  const auto stale = with_scale<float8_e4m3fn>({40000.0, 1.0}, x);
  CHECK(stale.value(0) == Approx(6.0 * 40000.0 / 448.0 / 512.0).epsilon(1e-12));
  const auto fresh = quantise<float8_e4m3fn>(x);
  const auto s = scaled::add(stale, fresh);
  // Requantised first: its bound becomes its measured max (6/5.73 of 1), so the sum's bound is about 2.
  CHECK(s.scale() == Approx(1.0 + 6.0 * 40000.0 / 448.0 / 512.0).epsilon(1e-12));
  // Under the worst-case rule the stale bound propagates.
  const auto w = scaled::add(stale, fresh, scale_rule::worst_case);
  CHECK(w.scale() == 40001.0);
}

TEST_CASE(
    "scaled ops: when every operand is requantised and the prediction still outgrows the format, the "
    "hybrid result is measured",
    "[scaled]") {
  // int8's range is 127 / 8: a worst-case matmul with K = 64 of Gaussian operands (max / RMS about 3
  // each) predicts a bound about 9 * 64 for an RMS of 8, a ratio near 70.
  const auto xg = gaussian({8, 64}, 3), xw = gaussian({64, 16}, 4);
  const std::vector<double> ref = reference_matmul(xg, xw);
  const auto a = quantise<std::int8_t>(xg), b = quantise<std::int8_t>(xw);
  const auto y = scaled::matmul(a, b);
  std::vector<double> exact = reference_matmul(values(a), values(b));
  CHECK(y.scale() == Approx(max_abs(exact)).epsilon(1e-6));  // measured (float32 sums), not predicted
  CHECK(relative_error(y, ref) < 0.03);
  const auto w = scaled::matmul(a, b, scale_rule::worst_case);
  CHECK(w.scale() == Approx(a.scale() * b.scale() * 64.0).epsilon(1e-15));
  CHECK(relative_error(w, ref) > 0.1);  // the worst case's price in int8
}

TEST_CASE("scaled ops: on Gaussian data the average case predicts the RMS and the worst case bounds the max",
          "[scaled]") {
  SECTION("add") {
    const auto xa = gaussian({65536}, 1), xb = gaussian({65536}, 2, 3.0);
    const auto a = quantise<float8_e4m3fn>(xa), b = quantise<float8_e4m3fn>(xb);
    const auto s = scaled::add(a, b);
    std::vector<double> exact(xa.size());
    for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = a.value(i) + b.value(i);
    CHECK(s.expected_scale() == Approx(rms(exact)).epsilon(0.03));
    CHECK(s.scale() >= max_abs(exact));
  }
  SECTION("matmul, K = 64 ... 4096") {
    for (const std::size_t k : {64, 256, 1024, 4096}) {
      const auto xa = gaussian({64, k}, 10 + k), xb = gaussian({k, 64}, 20 + k, 0.1);
      const auto a = quantise<float8_e4m3fn>(xa), b = quantise<float8_e4m3fn>(xb);
      const auto y = scaled::matmul(a, b);
      const std::vector<double> exact = reference_matmul(values(a), values(b));
      CAPTURE(k);
      CHECK(y.expected_scale() == Approx(rms(exact)).epsilon(0.05));
      CHECK(y.scale() >= max_abs(exact));
      CHECK(y.clipped() == 0);
    }
  }
}

TEST_CASE("scaled ops: float8 matmul against float64, each rule, with and without stale scales", "[scaled]") {
  const std::size_t k = 1024;
  const auto xa = gaussian({32, k}, 7), xb = gaussian({k, 48}, 8);
  const std::vector<double> ref = reference_matmul(xa, xb);
  // Fresh operands: each rule gives about e4m3fn's relative precision (3 mantissa bits: 2^-4 for one
  // rounding of the inputs and one of the result, RMS well below).
  for (const auto rule : {scale_rule::worst_case, scale_rule::average_case, scale_rule::hybrid}) {
    const auto a = quantise<float8_e4m3fn>(xa, {.rule = rule});
    const auto b = quantise<float8_e4m3fn>(xb, {.rule = rule});
    const auto y = scaled::matmul(a, b);
    CAPTURE(to_string(rule));
    CHECK(relative_error(y, ref) < 0.08);
  }
  // Stale operands (estimates 4096x too pessimistic, as after a chain of worst-case ops): the
  // worst-case result falls into e4m3fn's subnormals and loses its precision; the hybrid rule
  // requantises and keeps it.
  const auto a = quantise<float8_e4m3fn>(xa, {.rule = scale_rule::hybrid});
  const auto b = quantise<float8_e4m3fn>(xb, {.rule = scale_rule::hybrid});
  const auto stale_a = with_scale({a.scale() * 4096.0, a.expected_scale()}, a);
  const auto stale_b = with_scale({b.scale() * 4096.0, b.expected_scale()}, b);
  const double worst = relative_error(scaled::matmul(stale_a, stale_b, scale_rule::worst_case), ref);
  const double hybrid = relative_error(scaled::matmul(stale_a, stale_b), ref);
  CAPTURE(worst, hybrid);
  CHECK(worst > 0.5);
  CHECK(hybrid < 0.08);
}

TEST_CASE("scaled ops: mixed formats name their result, int8 and float16 products", "[scaled]") {
  const auto xg = gaussian({8, 64}, 3), xw = gaussian({64, 16}, 4);
  const std::vector<double> ref = reference_matmul(xg, xw);
  const auto g = quantise<float8_e5m2>(xg);
  const auto w = quantise<float8_e4m3fn>(xw);
  const scaled_tensor<float8_e5m2> y = scaled::matmul<float8_e5m2>(g, w);
  CHECK(relative_error(y, ref) < 0.15);  // e5m2: 2 mantissa bits
  const auto yh = scaled::matmul(quantise<float16>(xg), quantise<float16>(xw));
  CHECK(relative_error(yh, ref) < 2e-3);
  // dot: a 1-d product against a float64 sum.
  const auto u = gaussian({256}, 5), v = gaussian({256}, 6);
  const auto qu = quantise<float16>(u), qv = quantise<float16>(v);
  double d = 0.0;
  for (std::size_t i = 0; i < 256; ++i) d += qu.value(i) * qv.value(i);
  const auto dot = scaled::dot(qu, qv);
  CHECK(dot.shape().empty());
  CHECK(dot.value(0) == Approx(d).epsilon(1e-3));
}

TEST_CASE("scaled ops: div, sqrt, pow, exp and log run in float32 and requantise", "[scaled]") {
  const xt::xarray<double> x = {1.0, 4.0, 0.25, 2.0};
  const auto a = quantise<float16>(x, {.rule = scale_rule::worst_case});
  const auto r = scaled::sqrt(a);
  CHECK(r.scale() == 2.0);  // measured, not propagated
  CHECK(r.value(1) == 2.0);
  CHECK(r.value(2) == 0.5);
  CHECK(scaled::pow(a, 2.0f).value(1) == 16.0);
  CHECK(scaled::exp(a).value(0) == Approx(std::exp(1.0)).epsilon(1e-3));
  CHECK(scaled::log(a).value(1) == Approx(std::log(4.0)).epsilon(1e-3));
  CHECK(scaled::div(a, a).scale() == 1.0);
  CHECK(scaled::div(a, a).value(3) == 1.0);
  CHECK(scaled::div(a, a).rule() == scale_rule::worst_case);
  const xt::xarray<double> with_zero = {1.0, 0.0, -1.0, 2.0};
  const auto z = quantise<float16>(with_zero, {.rule = scale_rule::worst_case});
  CHECK_THROWS_WITH(scaled::div(a, z), Contains("scaled::div: the value at index 1 is inf"));
  CHECK_THROWS_WITH(scaled::log(z), Contains("scaled::log: the value at index 1 is -inf"));
  CHECK_THROWS_WITH(scaled::sqrt(z), Contains("scaled::sqrt: the value at index 2 is"));
}

TEST_CASE("scaled ops: shape and rule mismatches are clear errors", "[scaled]") {
  const auto a = quantise<float8_e4m3fn>(gaussian({2, 3}, 1));
  const auto b = quantise<float8_e4m3fn>(gaussian({3, 2}, 2));
  CHECK_THROWS_WITH(scaled::add(a, b), Contains("scaled::add: the shapes differ, [2, 3] and [3, 2]"));
  CHECK_THROWS_WITH(scaled::matmul(a, a), Contains("needs A [m, k] and B [k, n], got A [2, 3] and B [2, 3]"));
  CHECK_THROWS_WITH(scaled::dot(a, a), Contains("scaled::dot: needs two 1-d tensors"));
  const auto w = quantise<float8_e4m3fn>(gaussian({2, 3}, 3), {.rule = scale_rule::worst_case});
  CHECK_THROWS_WITH(scaled::add(a, w), Contains("different rules (hybrid and worst_case)"));
  CHECK_NOTHROW(scaled::add(a, w, scale_rule::average_case));
  CHECK(scaled::add(a, w, scale_rule::average_case).rule() == scale_rule::average_case);
}

TEST_CASE("scaled ops: bfloat16 products run in double (their data reach 3.4e38)", "[scaled]") {
  // Worst-case bfloat16 data are +-M: one product M * M overflows float32, and M^2 - M^2 would be NaN.
  xt::xarray<double> x = xt::xarray<double>::from_shape({1, 2}), w = xt::xarray<double>::from_shape({2, 1});
  x(0, 0) = 1.0;
  x(0, 1) = -1.0;
  w.fill(1.0);
  const auto y = scaled::matmul(quantise<bfloat16>(x), quantise<bfloat16>(w));
  CHECK(y.value(0) == 0.0);
  CHECK(y.clipped() == 0);
  const auto xa = gaussian({16, 64}, 31), xb = gaussian({64, 8}, 32);
  const auto yb = scaled::matmul(quantise<bfloat16>(xa), quantise<bfloat16>(xb));
  CHECK(relative_error(yb, reference_matmul(xa, xb)) < 0.01);
  const auto d =
      scaled::dot(quantise<bfloat16>(xt::xarray<double>{2.0, 3.0}), quantise<bfloat16>(xt::xarray<double>{-1.0, 1.0}));
  CHECK(d.value(0) == 1.0);
}

TEST_CASE("scaled ops: empty products and sums are zeros, tiny predicted scales are measured", "[scaled]") {
  const auto a = quantise<float8_e4m3fn>(xt::xarray<double>::from_shape({2, 0}));
  const auto b = quantise<float8_e4m3fn>(xt::xarray<double>::from_shape({0, 3}));
  const auto y = scaled::matmul(a, b);
  REQUIRE(y.shape() == std::vector<std::size_t>{2, 3});
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.value(i) == 0.0);
  CHECK(y.scale() == zero_tensor_scale);
  const auto e = quantise<float8_e4m3fn>(xt::xarray<double>::from_shape({0}));
  CHECK(scaled::dot(e, e).value(0) == 0.0);
  CHECK(scaled::sum(e).value(0) == 0.0);
  // Products of all-zero tensors: the predicted scale (2^-126)^k underflows; the result is measured.
  auto z = quantise<float8_e4m3fn>(xt::xarray<double>{0.0, 0.0});
  for (int i = 0; i < 12; ++i) z = scaled::mul(z, z);
  CHECK(z.scale() == zero_tensor_scale);
  CHECK(z.value(1) == 0.0);
}

TEST_CASE("scaled ops: a scalar multiple by a power of two is exact, div follows the operands' rule", "[scaled]") {
  const auto a = quantise<float8_e4m3fn>(gaussian({64}, 40), {.rule = scale_rule::worst_case});
  const auto b = scaled::mul(a, -0.25);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(b.value(i) == -0.25 * a.value(i));
  const auto w = quantise<float8_e4m3fn>(gaussian({64}, 41), {.rule = scale_rule::hybrid});
  CHECK_THROWS_WITH(scaled::div(a, w), Contains("different rules"));
  CHECK(scaled::div(a, w, scale_rule::average_case).rule() == scale_rule::average_case);
}

}  // namespace ops_test
