// Tests of nn::rms_norm<P>, plain and fused with a float32 residual stream, against references
// written here (float64, and plain float additions for the residual stream).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

namespace rms_norm_test {

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
  const std::size_t f = 64;
  std::mt19937 rng(31);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = xt::xtensor<double, 1>::from_shape({f});
  for (auto& v : w) v = 1.0 + 0.3 * normal(rng);
  const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = 1e-5});  // llama2.c's epsilon
  std::vector<double> wv(f);
  for (std::size_t j = 0; j < f; ++j) wv[j] = static_cast<double>(norm.scale()->data()[j]);
  auto xd = xt::xtensor<double, 3>::from_shape({2, 3, f});
  for (auto& v : xd) v = 0.5 + 4.0 * normal(rng);
  // Inputs of float under every policy, and of bfloat16, float16 and double where they make a case of
  // their own (input_case, policies.hpp): the same values rounded to the input type.
  for_each_type<float, bfloat16, float16, double>([&]<class T>() {
    if constexpr (input_case<P, T>) {
      using O = nn::output_t<P, T>;
      const mixprec::dtype input = mixprec::dtype_of_v<T>;
      CAPTURE(input);
      auto x = xt::xtensor<T, 3>::from_shape({2, 3, f});
      for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(xd.data()[i]);
      const auto y = norm(x);
      STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<O, 3>>);
      // Relative error per element: x_j rounded to C (u_in) moves y_j by u_in and the root mean square
      // by at most u_in: 2 u_in; the scale as the product sees it (as stored, rounded to S: the default
      // norm_scale_precision::opmath): u_par; in S a compensated mean square, a square root, a division
      // and two products: 8 u_S with margin; the output rounding: u_O. That bound is nn::error_bound's
      // (nn/error_bound.hpp); the reference stays this file's own.
      const auto bound = nn::error_bound<T>(norm);
      for (std::size_t r = 0; r < 6; ++r) {
        std::vector<long double> row(f);
        for (std::size_t j = 0; j < f; ++j) row[j] = static_cast<double>(x.data()[r * f + j]);
        const auto ref = reference_rms_norm(row, wv, 1e-5);
        for (std::size_t j = 0; j < f; ++j) {
          const double got = static_cast<double>(y.data()[r * f + j]);
          const double tol = bound(std::abs(ref[j]));
          INFO("row " << r << " feature " << j << ": got " << got << ", reference " << ref[j]);
          REQUIRE(std::abs(got - ref[j]) <= tol);
        }
      }
    }
  });
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

// ---------------------------------------------------------------------------------------------
// Hardening (issue 12): parameter validation, the scale applied in float32, residual-scale invariance,
// epsilon-sized and all-zero rows, and rows whose sum of squares overflows float32.
// ---------------------------------------------------------------------------------------------

namespace {
/// `v` rounded to the type U, as a double (the roundings the layer applies, done here independently).
template <class U>
double as(double v) {
  return static_cast<double>(static_cast<U>(v));
}

/// y_j = x_j / sqrt(mean(x^2) + eps) * w_j in long double for one row of doubles (no rounding).
std::vector<double> reference_row(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  std::vector<long double> xl(x.begin(), x.end());
  return reference_rms_norm(xl, w, eps);
}

/// The largest finite value of C that the float input can carry (float max, or C's own max if smaller).
template <class C>
double largest_input() {
  return std::min(static_cast<double>(std::numeric_limits<float>::max()),
                  static_cast<double>(std::numeric_limits<C>::max()));
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("rms_norm normalises epsilon-sized, all-zero, huge and tiny rows for every policy",
                        "[nn][rms_norm]", all_policies) {
  // Rows (float input, rounded to C by the test as the layer does, so that only the statistics
  // type's errors remain): (0) mean square about epsilon, where ignoring epsilon or adding it
  // elsewhere changes the output by up to sqrt(2); (1) all zeros: y = 0 exactly; (2) 3e19 (squares
  // 9e38 > float max: the plain float32 sum of squares overflows and the row normalised to 0); (3)
  // values up to the largest finite value of C; (4) the same with equal signs; with epsilon 0, (5)
  // values ~1e-30 whose squares underflow float32. The reference is float64 (long double) of the
  // C-rounded row and the scale as stored (applied in S, the default); the bound is 8 u_S relative
  // for the statistics, the normalisation and the product, plus the output rounding u_O.
  using P = TestType;
  using T = float;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  const std::size_t f = 48;
  const double eps = 1e-5;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = xt::xtensor<double, 1>::from_shape({f});
  for (auto& v : w) v = 1.0 + 0.25 * normal(rng);
  const double big = std::isfinite(as<C>(3e19)) ? 3e19 : 0.5 * largest_input<C>();  // 3e19 is Inf in float16
  const double top = largest_input<C>();
  const double tiny =
      std::numeric_limits<C>::min() < 1e-30 ? 1e-30 : 16 * static_cast<double>(std::numeric_limits<C>::min());
  std::vector<std::vector<double>> rows(6, std::vector<double>(f));
  for (std::size_t j = 0; j < f; ++j) {
    const double sign = j % 2 == 0 ? 1.0 : -1.0;
    const double ramp = 0.5 + 0.5 * static_cast<double>(j) / static_cast<double>(f - 1);  // (0.5 .. 1]
    rows[0][j] = std::sqrt(eps) * normal(rng);
    rows[1][j] = 0.0;
    rows[2][j] = sign * big * ramp;
    rows[3][j] = sign * top * ramp;
    rows[4][j] = top * ramp;
    rows[5][j] = sign * tiny * ramp;
  }
  for (auto& row : rows) {
    for (auto& v : row) v = as<C>(as<T>(v));  // what the layer computes with
  }
  STATIC_REQUIRE(std::is_same_v<nn::output_t<P, C>, O>);
  for (double e : {eps, 0.0}) {
    const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = e});
    // The rows hold values of C: the bound for inputs of type C (no input rounding): 8 u_S + u_O.
    const auto bound = nn::error_bound<C>(norm);
    std::vector<double> wv(f);
    for (std::size_t j = 0; j < f; ++j) wv[j] = static_cast<double>(norm.scale()->data()[j]);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (e == 0.0 && r <= 1) continue;  // epsilon 0: the epsilon row is ordinary, zeros are 0/0
      if (e != 0.0 && r == 5) continue;  // epsilon dominates: tiny / sqrt(eps), an ordinary row
      auto x = xt::xtensor<T, 2>::from_shape({1, f});
      for (std::size_t j = 0; j < f; ++j) x(0, j) = static_cast<T>(rows[r][j]);
      const auto y = norm(x);
      const auto ref = reference_row(rows[r], wv, e);
      for (std::size_t j = 0; j < f; ++j) {
        const double got = static_cast<double>(y(0, j));
        INFO("epsilon " << e << ", row " << r << ", feature " << j << ": got " << got << ", reference " << ref[j]);
        if (r == 1) {
          REQUIRE(got == 0.0);
        } else {
          REQUIRE(std::abs(got - ref[j]) <= bound(std::abs(ref[j])));
        }
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("rms_norm applies its scale as stored, in the statistics type, by default", "[nn][rms_norm]",
                        all_policies) {
  // NovelAI's float16 T5 (RMSNormCast: torch.nn.RMSNorm on x.float() with a float32 weight) and
  // llama2.c (weight[j] * (ss * x[j]) in float) multiply by the weight in float32, never rounded to
  // the half compute type. Scales 1 + j 2^-12 are float32 values that bfloat16 (8 bits) and float16
  // (11 bits) cannot hold: rounding them to C would move y by up to 2^-9 relative, far above the bound
  // 8 u_S + u_O of a reference that uses them as stored.
  using P = TestType;
  using T = float;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  using S = mixprec::accumulator_t<C>;
  const std::size_t f = 32;
  auto w = xt::xtensor<double, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) w(j) = 1.0 + std::ldexp(static_cast<double>(j), -12);
  const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = 1e-6});
  auto x = xt::xtensor<T, 2>::from_shape({2, f});
  std::mt19937 rng(8);
  std::normal_distribution<double> normal(0.0, 2.0);
  for (auto& v : x) v = static_cast<T>(as<C>(normal(rng)));  // exact in C: no input rounding
  const auto y = norm(x);
  // x holds values of C: the bound for inputs of type C, 8 u_S + (scale rounded to S) + u_O.
  const auto bound = nn::error_bound<C>(norm);
  STATIC_REQUIRE(std::is_same_v<nn::output_t<P, C>, O>);
  std::vector<double> wv(f);
  for (std::size_t j = 0; j < f; ++j) wv[j] = as<S>(static_cast<double>(norm.scale()->data()[j]));
  for (std::size_t r = 0; r < 2; ++r) {
    std::vector<double> row(f);
    for (std::size_t j = 0; j < f; ++j) row[j] = static_cast<double>(x(r, j));
    const auto ref = reference_row(row, wv, 1e-6);
    for (std::size_t j = 0; j < f; ++j) {
      INFO("row " << r << " feature " << j << ": got " << static_cast<double>(y(r, j)) << ", reference " << ref[j]);
      REQUIRE(std::abs(static_cast<double>(y(r, j)) - ref[j]) <= bound(std::abs(ref[j])));
    }
  }
}

TEMPLATE_TEST_CASE(
    "a residual stream scaled by a power of two s, with epsilon s^2 epsilon, normalises bit for bit "
    "as the unscaled one",
    "[nn][rms_norm]", float, double) {
  // RMSNorm(s x; s^2 eps) = s x / sqrt(s^2 mean(x^2) + s^2 eps) = RMSNorm(x; eps) exactly; with a power of
  // two s every scaling in the layer is exact, so the outputs must be identical (the norm rescales
  // rows whose squares would overflow or underflow by powers of two too, so this holds for s = 2^+-60).
  // NovelAI's recipe multiplies epsilon by s (linear): on rows whose mean square is about epsilon
  // that changes the output, which this test also shows.
  using P = policy<TestType, TestType, TestType>;
  using R = nn::residual_t<P, TestType>;
  const std::size_t rows = 3, f = 16;
  const double eps = 1e-4;
  std::mt19937 rng(19);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = xt::xtensor<double, 1>::from_shape({f});
  for (auto& v : w) v = 1.0 + 0.2 * normal(rng);
  auto x = xt::xtensor<TestType, 2>::from_shape({rows, f});
  auto r0 = xt::xtensor<R, 2>::from_shape({rows, f});
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double level = i < f ? 1e-2 : 1.0;  // row 0: mean square ~ epsilon
    x.data()[i] = static_cast<TestType>(level * normal(rng));
    r0.data()[i] = static_cast<R>(level * normal(rng));
  }
  const auto base = nn::rms_norm<P>::from_scale(w, {.epsilon = eps})(x, r0);
  for (int e : {-60, -3, -1, 2, 60}) {
    const double s = std::ldexp(1.0, e);
    CAPTURE(e);
    auto xs = x;
    auto rs = r0;
    for (auto& v : xs) v = static_cast<TestType>(static_cast<double>(v) * s);
    for (auto& v : rs) v = static_cast<R>(static_cast<double>(v) * s);
    const auto scaled = nn::rms_norm<P>::from_scale(w, {.epsilon = eps * s * s})(xs, rs);
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("element " << i << ": scaled " << scaled.x.data()[i] << ", unscaled " << base.x.data()[i]);
      REQUIRE(same_bits(scaled.x.data()[i], base.x.data()[i]));
      REQUIRE(same_bits(scaled.residual.data()[i], static_cast<R>(static_cast<double>(base.residual.data()[i]) * s)));
    }
    if (e == -3) {  // linear scaling of epsilon is not equivalent on the epsilon-sized row
      const auto linear = nn::rms_norm<P>::from_scale(w, {.epsilon = eps * s})(xs, rs);
      double worst = 0.0;
      for (std::size_t j = 0; j < f; ++j) {
        worst = std::max(worst, std::abs(static_cast<double>(linear.x(0, j)) / static_cast<double>(base.x(0, j)) - 1));
      }
      CHECK(worst > 0.1);
    }
  }
}

TEST_CASE("rms_norm rejects a negative or non-finite epsilon and a NaN, infinite or non-positive residual scale",
          "[nn][rms_norm]") {
  using Catch::Matchers::Contains;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.epsilon = -0.5}),
                    Contains("rms_norm") && Contains("epsilon") && Contains("-0.5"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.epsilon = nan}),
                    Contains("rms_norm") && Contains("epsilon") && Contains("nan"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.epsilon = inf}),
                    Contains("rms_norm") && Contains("epsilon") && Contains("inf"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.residual_scale = nan}),
                    Contains("rms_norm") && Contains("residual_scale") && Contains("nan"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.residual_scale = -inf}),
                    Contains("rms_norm") && Contains("residual_scale") && Contains("-inf"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.residual_scale = 0.0}),
                    Contains("rms_norm") && Contains("residual_scale") && Contains("0"));
  CHECK_THROWS_WITH(nn::rms_norm<p_f32>(8, {.residual_scale = -0.25}),
                    Contains("rms_norm") && Contains("residual_scale") && Contains("-0.25"));
  xt::xtensor<float, 1> w = xt::ones<float>({8});
  CHECK_THROWS_AS(nn::rms_norm<p_f32>::from_scale(w, {.epsilon = -1e-6}), std::invalid_argument);
  // Accepted: epsilon 0 and a positive residual scale.
  CHECK_NOTHROW(nn::rms_norm<p_f32>(8, {.epsilon = 0.0, .residual_scale = 0.5}));
}

TEST_CASE("rms_norm's scale_precision: opmath multiplies by the stored scale, compute by the scale rounded to C",
          "[nn][rms_norm]") {
  // p=f32, c=bf16 / c=f16, o=f32, and the fused form: two float64 references applying the same
  // roundings as each option (x exact in C; scale as stored, or rounded to C), bound 8 u_f32 relative.
  // The scales 1 + j 2^-12 differ from their bfloat16 / float16 roundings by up to 2^-9 / 2^-12
  // relative, so each reference rejects the other option.
  const std::size_t f = 24;
  auto w = xt::xtensor<float, 1>::from_shape({f});
  for (std::size_t j = 0; j < f; ++j) w(j) = 1.0f + std::ldexp(static_cast<float>(j), -12);
  auto check = [&](auto policy_tag, auto compute_tag) {
    using P = decltype(policy_tag);
    using C = decltype(compute_tag);
    std::mt19937 rng(3);
    std::normal_distribution<double> normal(0.0, 1.5);
    auto x = xt::xtensor<float, 2>::from_shape({2, f});
    for (auto& v : x) v = static_cast<float>(as<C>(normal(rng)));
    for (auto precision : {nn::norm_scale_precision::opmath, nn::norm_scale_precision::compute}) {
      const bool rounded = precision == nn::norm_scale_precision::compute;
      const auto norm = nn::rms_norm<P>::from_scale(w, {.epsilon = 1e-6, .scale_precision = precision});
      CHECK(norm.scale_precision() == precision);
      std::vector<double> wv(f);
      for (std::size_t j = 0; j < f; ++j) wv[j] = rounded ? as<C>(w(j)) : static_cast<double>(w(j));
      const auto y = norm(x);
      const auto fused = norm(x, nn::no_residual);
      for (std::size_t r = 0; r < 2; ++r) {
        std::vector<double> row(f);
        for (std::size_t j = 0; j < f; ++j) row[j] = static_cast<double>(x(r, j));
        const auto ref = reference_row(row, wv, 1e-6);
        for (std::size_t j = 0; j < f; ++j) {
          INFO("compute rounding " << rounded << ", row " << r << ", feature " << j << ": got " << y(r, j)
                                   << ", reference " << ref[j]);
          REQUIRE(std::abs(static_cast<double>(y(r, j)) - ref[j]) <= 8 * std::ldexp(1.0, -24) * std::abs(ref[j]));
          REQUIRE(std::abs(static_cast<double>(fused.x(r, j)) - ref[j]) <= 8 * std::ldexp(1.0, -24) * std::abs(ref[j]));
        }
      }
    }
  };
  check(p_c_bf16{}, bfloat16{});
  check(p_c_f16{}, float16{});
  STATIC_REQUIRE(nn::rms_norm_options{}.scale_precision == nn::norm_scale_precision::opmath);
}

}  // namespace rms_norm_test
