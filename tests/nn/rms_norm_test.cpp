// Tests of nn::rms_norm<P>, plain and fused with a float32 residual stream, against references
// written here (float64, and plain float additions for the residual stream).
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

/// y_j = x_j / sqrt(mean(x^2) + eps) * w_j in long double, for one row.
std::vector<double> reference_rms_norm(const std::vector<long double>& x, const std::vector<double>& w, double eps) {
  long double ms = 0.0L;
  for (long double v : x) ms += v * v;
  ms /= static_cast<long double>(x.size());
  const long double inv = 1.0L / std::sqrt(ms + static_cast<long double>(eps));
  std::vector<double> y(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) y[j] = static_cast<double>(x[j] * inv * static_cast<long double>(w[j]));
  return y;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("rms_norm matches x * rsqrt(mean(x^2) + eps) * w within bounds derived from the formats",
                        "[nn][rms_norm]", all_policies) {
  using P = TestType;
  using T = float;
  using Param = typename P::param_type;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  using S = mixprec::accumulator_t<C>;
  const std::size_t f = 64;
  std::mt19937 rng(31);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = xt::xtensor<double, 1>::from_shape({f});
  for (auto& v : w) v = 1.0 + 0.3 * normal(rng);
  const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = 1e-5});  // llama2.c's epsilon
  auto x = xt::xtensor<T, 3>::from_shape({2, 3, f});
  for (auto& v : x) v = static_cast<T>(0.5 + 4.0 * normal(rng));
  const auto y = norm(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<O, 3>>);
  // Relative error per element: x_j rounded to C (u_in) moves y_j by u_in and the root mean square by
  // at most u_in: 2 u_in; the scale rounded to C: u_par; in S a compensated mean square, a square
  // root, a division and two products: 8 u_S with margin; the output rounding: u_O.
  const double rel = 2 * rounding_to<C, T>() + rounding_to<C, Param>() + 8 * unit_roundoff<S>();
  const double u_o = rounding_to<O, S>();
  std::vector<double> wv(f);
  for (std::size_t j = 0; j < f; ++j) wv[j] = static_cast<double>(norm.scale()->data()[j]);
  for (std::size_t r = 0; r < 6; ++r) {
    std::vector<long double> row(f);
    for (std::size_t j = 0; j < f; ++j) row[j] = x.data()[r * f + j];
    const auto ref = reference_rms_norm(row, wv, 1e-5);
    for (std::size_t j = 0; j < f; ++j) {
      const double got = static_cast<double>(y.data()[r * f + j]);
      const double tol = (rel + u_o * (1 + rel)) * std::abs(ref[j]);
      INFO("row " << r << " feature " << j << ": got " << got << ", reference " << ref[j]);
      REQUIRE(std::abs(got - ref[j]) <= tol);
    }
  }
}

TEST_CASE("rms_norm's residual stream is float32 (float64 under float64) whatever the compute type", "[nn][rms_norm]") {
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<policy<float16>, float16>, float>);
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<p_c_bf16, float>, float>);
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<p_bf16, bfloat16>, float>);
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<p_f64, double>, double>);
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<p_promote, double>, double>);
  STATIC_REQUIRE(std::is_same_v<nn::residual_t<p_promote, bfloat16>, float>);
  using P = policy<float, float16, float16>;
  const nn::rms_norm<P> norm(4);
  const auto [h, r] = norm(xt::xtensor<float16, 2>::from_shape({1, 4}), nn::no_residual);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xtensor<float16, 2>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, xt::xtensor<float, 2>>);
}

TEMPLATE_TEST_CASE("fused rms_norm keeps a residual stream bit-identical to the float sums of the layer outputs",
                   "[nn][rms_norm]", float16, bfloat16, float, double) {
  // Layer outputs x_0 .. x_5 in TestType (what float16 / bfloat16 / float32 / float64 blocks return);
  // the stream (R = float32, float64 for float64) must be r_0 = R(x_0), r_k = r_{k-1} + R(x_k): plain
  // additions in R in this order, nothing rounded to the compute type. With a residual scale s (a power
  // of two here): r_k = (r_{k-1} + x_k) * s.
  using P = policy<float, TestType, TestType>;
  using R = nn::residual_t<P, TestType>;
  STATIC_REQUIRE(std::is_same_v<R, std::conditional_t<std::is_same_v<TestType, double>, double, float>>);
  const std::size_t rows = 3, f = 16;
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<xt::xtensor<TestType, 2>> outputs;
  for (int k = 0; k < 6; ++k) {
    auto x = xt::xtensor<TestType, 2>::from_shape({rows, f});
    for (auto& v : x) v = static_cast<TestType>(normal(rng) * static_cast<float>(k + 1));
    outputs.push_back(x);
  }
  for (std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.5}}) {
    CAPTURE(scale.has_value());
    const nn::rms_norm<P> norm(f, {.epsilon = 1e-6, .use_scale = true, .residual_scale = scale});
    std::vector<R> expected(rows * f);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      expected[i] = static_cast<R>(outputs[0].data()[i]);
      if (scale) expected[i] = expected[i] * R(0.5);
    }
    auto step = norm(outputs[0], nn::no_residual);
    for (std::size_t i = 0; i < expected.size(); ++i) REQUIRE(same_bits(step.residual.data()[i], expected[i]));
    for (std::size_t k = 1; k < outputs.size(); ++k) {
      for (std::size_t i = 0; i < expected.size(); ++i) {
        expected[i] = expected[i] + static_cast<R>(outputs[k].data()[i]);
        if (scale) expected[i] = expected[i] * R(0.5);
      }
      step = norm(outputs[k], step.residual);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("step " << k << " element " << i);
        REQUIRE(same_bits(step.residual.data()[i], expected[i]));
      }
    }
  }
}

TEST_CASE("fused rms_norm normalises the float32 sum itself, not a copy rounded to the compute type",
          "[nn][rms_norm]") {
  // p=f32, c=f16, o=f32: the normalised output is float32, so rounding the sum to float16 (u = 2^-11)
  // before normalising would show; the bound allows only float32 errors (8 u_f32 relative) and the scale
  // rounded to float16 (it is 1 and 0.75 here: exact).
  using P = policy<float, float16, float>;
  const std::size_t f = 32;
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto residual = xt::xtensor<float, 2>::from_shape({2, f});
  auto x = xt::xtensor<float, 2>::from_shape({2, f});
  for (auto& v : residual) v = 100.0f + normal(rng);  // sums with more digits than float16 keeps
  for (auto& v : x) v = normal(rng);
  auto w = xt::xtensor<float, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) w(j) = j % 2 == 0 ? 1.0f : 0.75f;
  const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = 1e-6, .residual_scale = 0.25});
  const auto [h, r] = norm(x, residual);
  std::vector<double> wv(w.begin(), w.end());
  for (std::size_t row = 0; row < 2; ++row) {
    std::vector<long double> s(f);
    for (std::size_t j = 0; j < f; ++j) s[j] = static_cast<long double>(residual(row, j) + x(row, j));  // float sum
    const auto ref = reference_rms_norm(s, wv, 1e-6);
    for (std::size_t j = 0; j < f; ++j) {
      CHECK(std::abs(static_cast<double>(h(row, j)) - ref[j]) <= 8 * std::ldexp(1.0, -24) * std::abs(ref[j]));
      // The stream carried forward is scaled after normalising: (residual + x) * 0.25, exactly.
      CHECK(r(row, j) == (residual(row, j) + x(row, j)) * 0.25f);
    }
  }
}

TEST_CASE("fused rms_norm keeps float16 models finite when the residual stream exceeds float16's range",
          "[nn][rms_norm]") {
  // Three float16 block outputs of 40000 each: their sum 120000 is above float16's max (65504) but the
  // stream is float32; the normalised activations (~1) are float16 values again.
  using P = policy<float16>;
  const nn::rms_norm<P> norm(2);
  xt::xtensor<float16, 1> x = {float16(40000.0f), float16(-40000.0f)};
  auto step = norm(x, nn::no_residual);
  step = norm(x, step.residual);
  step = norm(x, step.residual);
  CHECK(step.residual(0) == 120000.0f);
  CHECK(step.residual(1) == -120000.0f);
  CHECK(isfinite(step.x(0)));
  // rmsnorm([120000, -120000]) = [1, -1] to within the epsilon term (1e-6 / 1.44e10): exactly +-1 in float16.
  CHECK(static_cast<float>(step.x(0)) == 1.0f);
  CHECK(static_cast<float>(step.x(1)) == -1.0f);
}

TEST_CASE("rms_norm of complex input divides by the root mean square of |x|", "[nn][rms_norm]") {
  // x = [3 + 4i, 0 + 0i]: mean |x|^2 = 12.5, y = x / sqrt(12.5 + eps) * w; complex64 stays complex64.
  xt::xtensor<std::complex<float>, 1> x = {{3.0f, 4.0f}, {0.0f, 0.0f}};
  xt::xtensor<float, 1> w = {2.0f, 1.0f};
  const auto norm = nn::rms_norm<p_promote>::from_scale(w, {.epsilon = 1e-6});
  const auto y = norm(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<std::complex<float>, 1>>);
  const double inv = 1.0 / std::sqrt(12.5 + 1e-6);
  CHECK(std::abs(static_cast<double>(y(0).real()) - 3.0 * inv * 2.0) <= 8 * std::ldexp(1.0, -24) * 2.0);
  CHECK(std::abs(static_cast<double>(y(0).imag()) - 4.0 * inv * 2.0) <= 8 * std::ldexp(1.0, -24) * 2.0);
  CHECK(y(1) == std::complex<float>(0.0f, 0.0f));
}

TEST_CASE("rms_norm rejects mismatched shapes, naming both", "[nn][rms_norm]") {
  using Catch::Matchers::Contains;
  const nn::rms_norm<p_f32> norm(8);
  CHECK_THROWS_WITH(norm(xt::xtensor<float, 2>::from_shape({2, 6})),
                    Contains("rms_norm") && Contains("[2, 6]") && Contains("[8]"));
  const auto x = xt::xtensor<float, 2>::from_shape({2, 8});
  const auto r = xt::xtensor<float, 2>::from_shape({3, 8});
  CHECK_THROWS_WITH(norm(x, r), Contains("x has shape [2, 8]") && Contains("residual has shape [3, 8]"));
  CHECK_THROWS_AS(norm(xt::xtensor<float, 2>::from_shape({2, 7}), nn::no_residual), std::invalid_argument);
  // xt::xarray works for both forms.
  xt::xarray<float> xa = xt::xarray<float>::from_shape({2, 8});
  xa.fill(2.0f);
  const auto [h, res] = norm(xa, nn::no_residual);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(res)>, xt::xarray<float>>);
  CHECK(std::abs(h(1, 3) - 1.0f) <= 1e-6f);
}
