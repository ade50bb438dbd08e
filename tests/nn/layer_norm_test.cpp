// Tests of nn::layer_norm<P> against float64 / long double references written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "mixprec/core.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

namespace layer_norm_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

struct row_stats {
  long double mean, sd;
};
/// Two-pass mean and population standard deviation in long double of values as given.
template <class It>
row_stats stats_of(It first, std::size_t n) {
  long double m = 0.0L;
  for (std::size_t i = 0; i < n; ++i) m += static_cast<long double>(static_cast<double>(first[i]));
  m /= static_cast<long double>(n);
  long double v = 0.0L;
  for (std::size_t i = 0; i < n; ++i) {
    const long double d = static_cast<long double>(static_cast<double>(first[i])) - m;
    v += d * d;
  }
  return {m, std::sqrt(v / static_cast<long double>(n))};
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("layer_norm matches a float64 reference within bounds derived from the formats",
                        "[nn][layer_norm]", all_policies) {
  using P = TestType;
  const std::size_t f = 48;
  std::mt19937 rng(21);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto scale = xt::xtensor<double, 1>::from_shape({f});
  auto bias = xt::xtensor<double, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) {
    scale(j) = 1.0 + 0.5 * normal(rng);
    bias(j) = 0.3 * normal(rng);
  }
  const auto ln = nn::layer_norm<P>::from_params(scale, bias, 1e-5);
  auto xd = xt::xtensor<double, 3>::from_shape({2, 2, f});
  for (auto& v : xd) v = 3.0 + 2.0 * normal(rng);
  // Inputs of float under every policy, and of bfloat16, float16 and double where they make a case of
  // their own (input_case, policies.hpp): the same values rounded to the input type.
  for_each_type<float, bfloat16, float16, double>([&]<class T>() {
    if constexpr (input_case<P, T>) {
      using O = nn::output_t<P, T>;
      const mixprec::dtype input = mixprec::dtype_of_v<T>;
      CAPTURE(input);
      auto x = xt::xtensor<T, 3>::from_shape({2, 2, f});
      for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(xd.data()[i]);
      const auto y = ln(x);
      STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<O, 3>>);

      // Per element, with xhat = (x - mean) / sqrt(var + eps) and A = max|x_row| / sd:
      //  - x rounded to C (u_in, when C is narrower than T): every x_i, the mean and the standard
      //    deviation move by at most u_in max|x|, so xhat moves by <= u_in A (2 + |xhat|);
      //  - statistics and normalisation in S: compensated sums, a square root, a division, 3 products:
      //    <= 8 u_S (2 + |xhat|) A covers them with margin;
      //  - scale and bias rounded to C (u_par when C is narrower than the param type): u_par (|s xhat| + |b|);
      //  - the output rounding: u_O |y|.
      // That bound is nn::error_bound's (nn/error_bound.hpp); the reference and A stay this file's own.
      const auto bound = nn::error_bound<T>(ln);
      for (std::size_t r = 0; r < 4; ++r) {
        const T* row = x.data() + r * f;
        const auto st = stats_of(row, f);
        const long double sd_eps = std::sqrt(st.sd * st.sd + 1e-5L);
        double max_abs = 0.0;
        for (std::size_t j = 0; j < f; ++j) max_abs = std::max(max_abs, std::abs(static_cast<double>(row[j])));
        const double a = max_abs / static_cast<double>(sd_eps);
        for (std::size_t j = 0; j < f; ++j) {
          const double s = static_cast<double>(ln.scale()->data()[j]);
          const double b = static_cast<double>(ln.bias()->data()[j]);
          const double xhat =
              static_cast<double>((static_cast<long double>(static_cast<double>(row[j])) - st.mean) / sd_eps);
          const double ref = xhat * s + b;
          const double tol = bound(a, xhat, s, b);
          const double got = static_cast<double>(y.data()[r * f + j]);
          INFO("row " << r << " feature " << j << ": got " << got << ", reference " << ref << ", tolerance " << tol);
          REQUIRE(std::abs(got - ref) <= tol);
        }
      }
    }
  });
}

TEMPLATE_TEST_CASE("layer_norm is accurate at a large common offset (values ~1e6, unit spread)", "[nn][layer_norm]",
                   float, double) {
  // float32 data 1e6 + N(0, 1): the spacing of float at 1e6 is 0.0625, so the rounded mean alone is off by
  // up to 0.03 (3% of a unit deviation); the layer subtracts the mean's rounding error too, and the
  // variance is two-pass. Bound: a few u_S of each normalised value (8 u_S (1 + |xhat|), no A factor:
  // the deviations x - mean are exact here), relative to the inputs as given (no rounding: C = T).
  using P = policy<TestType>;
  const std::size_t f = 256;
  std::mt19937 rng(4);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto x = xt::xtensor<TestType, 2>::from_shape({3, f});
  for (auto& v : x) v = static_cast<TestType>(1e6 + normal(rng));
  const nn::layer_norm<P> ln(f, {.epsilon = 1e-6, .use_scale = false, .use_bias = false});
  const auto y = ln(x);
  const double u_s = unit_roundoff<TestType>();
  for (std::size_t r = 0; r < 3; ++r) {
    const auto st = stats_of(x.data() + r * f, f);
    const long double sd_eps = std::sqrt(st.sd * st.sd + 1e-6L);
    for (std::size_t j = 0; j < f; ++j) {
      const double ref = static_cast<double>((static_cast<long double>(x(r, j)) - st.mean) / sd_eps);
      REQUIRE(std::abs(static_cast<double>(y(r, j)) - ref) <= 8 * u_s * (1 + std::abs(ref)));
    }
  }
}

TEST_CASE("layer_norm of complex input uses mean(|x - mean|^2) as the variance", "[nn][layer_norm]") {
  const std::size_t f = 20;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto x = xt::xtensor<std::complex<float>, 2>::from_shape({2, f});
  for (auto& v : x) v = {1.0f + normal(rng), -2.0f + 3.0f * normal(rng)};
  auto scale = xt::xtensor<float, 1>::from_shape({f});
  auto bias = xt::xtensor<float, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) {
    scale(j) = 0.5f + 0.1f * static_cast<float>(j);
    bias(j) = 0.25f * static_cast<float>(j) - 2.0f;
  }
  const auto ln = nn::layer_norm<p_f32>::from_params(scale, bias);
  const auto y = ln(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<std::complex<float>, 2>>);
  for (std::size_t r = 0; r < 2; ++r) {
    std::complex<double> mean = 0.0;
    for (std::size_t j = 0; j < f; ++j) mean += std::complex<double>(x(r, j).real(), x(r, j).imag());
    mean /= static_cast<double>(f);
    double var = 0.0;
    for (std::size_t j = 0; j < f; ++j) var += std::norm(std::complex<double>(x(r, j).real(), x(r, j).imag()) - mean);
    var /= static_cast<double>(f);
    for (std::size_t j = 0; j < f; ++j) {
      const std::complex<double> xhat =
          (std::complex<double>(x(r, j).real(), x(r, j).imag()) - mean) / std::sqrt(var + 1e-6);
      const std::complex<double> ref = xhat * static_cast<double>(scale(j)) + static_cast<double>(bias(j));
      const std::complex<double> got(y(r, j).real(), y(r, j).imag());
      // As in the real case with A = max|x| / sd ~ 3: 8 u (2 + |xhat|) A |s| + a rounding of |y|.
      CHECK(std::abs(got - ref) <= 8 * std::ldexp(1.0, -24) * (2 + std::abs(xhat)) * 3 * (std::abs(scale(j)) + 1) +
                                       std::ldexp(1.0, -24) * std::abs(ref));
    }
  }
}

TEST_CASE("layer_norm output dtypes follow the policy and Flax's promote rule", "[nn][layer_norm]") {
  const nn::layer_norm<p_promote> ln(4);
  STATIC_REQUIRE(std::is_same_v<decltype(ln(xt::xtensor<bfloat16, 2>{}))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(ln(xt::xtensor<double, 2>{}))::value_type, double>);
  STATIC_REQUIRE(std::is_same_v<decltype(ln(xt::xtensor<std::complex<float>, 2>{}))::value_type, std::complex<float>>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::layer_norm<p_bf16>(4)(xt::xtensor<float, 2>{}))::value_type, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::layer_norm<p_c_bf16>(4)(xt::xtensor<float, 2>{}))::value_type, float>);
  STATIC_REQUIRE(
      std::is_same_v<decltype(nn::layer_norm<policy<float, bfloat16>>(4)(xt::xtensor<float, 2>{}))::value_type,
                     bfloat16>);
  // The statistics type: float32 for 16-bit compute, float64 for float64 (layer_types.hpp's statistics_t).
  STATIC_REQUIRE(std::is_same_v<mixprec::accumulator_t<bfloat16>, nn::statistics_t<bfloat16>>);
  STATIC_REQUIRE(std::is_same_v<mixprec::accumulator_t<double>, nn::statistics_t<double>>);
  // bf16 input 1, 2, 3, 4 under promote: computed in float32, (x - 2.5) / sqrt(1.25 + 1e-6).
  xt::xtensor<bfloat16, 1> x = {bfloat16(1.0f), bfloat16(2.0f), bfloat16(3.0f), bfloat16(4.0f)};
  const auto y = ln(x);
  for (std::size_t j = 0; j < 4; ++j) {
    const double ref = (static_cast<double>(j + 1) - 2.5) / std::sqrt(1.25 + 1e-6);
    CHECK(std::abs(static_cast<double>(y(j)) - ref) <= 8 * std::ldexp(1.0, -24) * 2);
  }
}

TEST_CASE("layer_norm rejects mismatched shapes, naming both", "[nn][layer_norm]") {
  using Catch::Matchers::Contains;
  const nn::layer_norm<p_f32> ln(8);
  CHECK_THROWS_WITH(ln(xt::xtensor<float, 2>::from_shape({3, 7})),
                    Contains("layer_norm") && Contains("[3, 7]") && Contains("[8]") && Contains("expects 8"));
  xt::xtensor<float, 1> s = xt::ones<float>({8});
  xt::xtensor<float, 1> b = xt::zeros<float>({5});
  CHECK_THROWS_WITH(nn::layer_norm<p_f32>::from_params(s, b), Contains("bias has shape [5]") && Contains("[8]"));
  // No scale, no bias: plain normalisation; an input row of equal values gives zeros (var = 0 + eps).
  const nn::layer_norm<p_f32> plain(3, {.use_scale = false, .use_bias = false});
  CHECK_FALSE(plain.scale().has_value());
  const auto y = plain(xt::xtensor<float, 1>{2.0f, 2.0f, 2.0f});
  for (float v : y) CHECK(v == 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Hardening (issue 12): epsilon-sized, all-zero and huge rows for every policy; parameter validation.
// ---------------------------------------------------------------------------------------------

namespace {
/// `v` rounded to the type U, as a double.
template <class U>
double as(double v) {
  return static_cast<double>(static_cast<U>(v));
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("layer_norm normalises epsilon-sized, all-zero and huge rows for every policy",
                        "[nn][layer_norm]", all_policies) {
  // Rows (float input, rounded to C here as the layer does, so that u_in = 0): (0) variance about
  // epsilon on an offset of 0.5, where ignoring epsilon changes the output by up to sqrt(2); (1) all
  // zeros: y = bias (rounded to C, then to O) exactly; (2) 3e19 with alternating signs (deviations
  // squared are 9e38 > float max: the float32 variance overflowed and the row normalised to 0); (3)
  // values up to the largest finite value of C with alternating signs; (4) the same with equal signs
  // (the float32 sum for the mean overflows too). Reference and bound as in the test above, in long
  // double of the C-rounded row.
  using P = TestType;
  using T = float;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  const std::size_t f = 40;
  const double eps = 1e-5;
  std::mt19937 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto scale = xt::xtensor<double, 1>::from_shape({f});
  auto bias = xt::xtensor<double, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) {
    scale(j) = 1.0 + 0.5 * normal(rng);
    bias(j) = 0.3 * normal(rng);
  }
  const auto ln = nn::layer_norm<P>::from_params(scale, bias, eps);
  const double top = std::min(static_cast<double>(std::numeric_limits<float>::max()),
                              static_cast<double>(std::numeric_limits<C>::max()));
  const double big = std::isfinite(as<C>(3e19)) ? 3e19 : 0.5 * top;  // 3e19 is Inf in float16
  auto x = xt::xtensor<T, 2>::from_shape({5, f});
  for (std::size_t j = 0; j < f; ++j) {
    const double sign = j % 2 == 0 ? 1.0 : -1.0;
    const double ramp = 0.5 + 0.5 * static_cast<double>(j) / static_cast<double>(f - 1);  // (0.5 .. 1]
    x(0, j) = static_cast<T>(as<C>(0.5 + std::sqrt(eps) * normal(rng)));
    x(1, j) = 0.0f;
    x(2, j) = static_cast<T>(as<C>(sign * big * ramp));
    x(3, j) = static_cast<T>(as<C>(sign * top * ramp));
    x(4, j) = static_cast<T>(as<C>(top * ramp));
  }
  const auto y = ln(x);
  // The rows hold values of C: the bound for inputs of type C (no input rounding, u_in = 0).
  const auto bound = nn::error_bound<C>(ln);
  STATIC_REQUIRE(std::is_same_v<nn::output_t<P, C>, O>);
  for (std::size_t r = 0; r < 5; ++r) {
    const T* row = x.data() + r * f;
    const auto st = stats_of(row, f);
    const long double sd_eps = std::sqrt(st.sd * st.sd + static_cast<long double>(eps));
    double max_abs = 0.0;
    for (std::size_t j = 0; j < f; ++j) max_abs = std::max(max_abs, std::abs(static_cast<double>(row[j])));
    const double a = max_abs / static_cast<double>(sd_eps);
    for (std::size_t j = 0; j < f; ++j) {
      const double got = static_cast<double>(y(r, j));
      const double s = static_cast<double>(ln.scale()->data()[j]);
      const double b = static_cast<double>(ln.bias()->data()[j]);
      if (r == 1) {
        INFO("all-zero row, feature " << j << ": got " << got);
        REQUIRE(got == as<O>(as<C>(b)));
        continue;
      }
      const double xhat = static_cast<double>((static_cast<long double>(row[j]) - st.mean) / sd_eps);
      const double ref = xhat * s + b;
      const double tol = bound(a, xhat, s, b);
      INFO("row " << r << " feature " << j << ": got " << got << ", reference " << ref << ", tolerance " << tol);
      REQUIRE(std::abs(got - ref) <= tol);
    }
  }
}

TEST_CASE("layer_norm rejects a negative or non-finite epsilon, naming the layer, the parameter and the value",
          "[nn][layer_norm]") {
  using Catch::Matchers::Contains;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(nn::layer_norm<p_f32>(8, {.epsilon = -0.5}),
                    Contains("layer_norm") && Contains("epsilon") && Contains("-0.5"));
  CHECK_THROWS_WITH(nn::layer_norm<p_f32>(8, {.epsilon = nan}),
                    Contains("layer_norm") && Contains("epsilon") && Contains("nan"));
  CHECK_THROWS_WITH(nn::layer_norm<p_f32>(8, {.epsilon = inf}),
                    Contains("layer_norm") && Contains("epsilon") && Contains("inf"));
  CHECK_THROWS_WITH(nn::layer_norm<p_f32>(8, std::nullopt, std::nullopt, -1e-3),
                    Contains("layer_norm") && Contains("epsilon") && Contains("-0.001"));
  xt::xtensor<float, 1> s = xt::ones<float>({8});
  xt::xtensor<float, 1> b = xt::zeros<float>({8});
  CHECK_THROWS_AS(nn::layer_norm<p_f32>::from_params(s, b, -inf), std::invalid_argument);
  CHECK_NOTHROW(nn::layer_norm<p_f32>::from_params(s, b, 0.0));
}

}  // namespace layer_norm_test
