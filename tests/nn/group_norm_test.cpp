// Tests of nn::group_norm<P> (nn/group_norm.hpp) against float64 references written here: statistics per
// sample and group over the middle axes, every policy within nn::error_bound, complex inputs with
// |x - mean|^2, the VJP against central differences, errors naming the sizes, and the from_scope form.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/group_norm.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace group_norm_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

namespace {

/// Reference of x [samples, mid, f] in long double: (x - mean) / sqrt(var + eps) per (sample, group), and
/// A = max |x| / sqrt(var + eps) of the element's group.
struct reference {
  std::vector<double> xhat, ratio;
};
reference normalise_groups(const std::vector<double>& x, std::size_t samples, std::size_t mid, std::size_t f,
                           std::size_t groups, long double eps) {
  reference out{std::vector<double>(x.size()), std::vector<double>(x.size())};
  const std::size_t cg = f / groups;
  for (std::size_t n = 0; n < samples; ++n) {
    for (std::size_t g = 0; g < groups; ++g) {
      auto at = [&](std::size_t m, std::size_t c) { return (n * mid + m) * f + g * cg + c; };
      long double mean = 0, var = 0, max_abs = 0;
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) mean += x[at(m, c)];
      }
      mean /= static_cast<long double>(mid * cg);
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) {
          var += (x[at(m, c)] - mean) * (x[at(m, c)] - mean);
          max_abs = std::max(max_abs, std::abs(static_cast<long double>(x[at(m, c)])));
        }
      }
      const long double sd = std::sqrt(var / static_cast<long double>(mid * cg) + eps);
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) {
          out.xhat[at(m, c)] = static_cast<double>((x[at(m, c)] - mean) / sd);
          out.ratio[at(m, c)] = static_cast<double>(max_abs / sd);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("group_norm matches a float64 reference within nn::error_bound", "[nn][group_norm]",
                        layer_tests::all_policies) {
  using P = TestType;
  const std::size_t samples = 2, mid = 3, f = 8, groups = 4;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  nn::group_norm<P> gn(f, groups, {.epsilon = 1e-5});
  for (std::size_t j = 0; j < f; ++j) {
    gn.scale()->data()[j] = static_cast<typename P::param_type>(static_cast<float>(1.0 + 0.5 * normal(rng)));
    gn.bias()->data()[j] = static_cast<typename P::param_type>(static_cast<float>(0.3 * normal(rng)));
  }
  std::vector<double> v(samples * mid * f);
  for (auto& e : v) e = static_cast<double>(static_cast<float>(2.0 + 3.0 * normal(rng)));
  const auto x = tensor_from<float, 3>(v, {samples, mid, f});
  const auto y = gn(x);
  STATIC_REQUIRE(std::is_same_v<typename decltype(y)::value_type, nn::output_t<P, float>>);
  const auto ref = normalise_groups(v, samples, mid, f, groups, 1e-5L);
  const auto bound = nn::error_bound<float>(gn);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double s = static_cast<double>(gn.scale()->data()[i % f]);
    const double b = static_cast<double>(gn.bias()->data()[i % f]);
    const double want = ref.xhat[i] * s + b;
    const double got = static_cast<double>(y.data()[i]);
    INFO("element " << i << ": got " << got << ", reference " << want);
    REQUIRE(std::abs(got - want) <= bound(ref.ratio[i], ref.xhat[i], s, b));
  }
}

TEST_CASE("group_norm statistics are float32 for 16-bit compute and float64 for float64", "[nn][group_norm]") {
  STATIC_REQUIRE(std::is_same_v<nn::group_norm<layer_tests::p_bf16>::saved<bfloat16>::stat_type, float>);
  STATIC_REQUIRE(std::is_same_v<nn::group_norm<layer_tests::p_f16>::saved<float16>::stat_type, float>);
  STATIC_REQUIRE(std::is_same_v<nn::group_norm<layer_tests::p_promote>::saved<double>::stat_type, double>);
  // float16 values ~300 in one group of 256: x^2 alone overflows float16, the output stays finite.
  nn::group_norm<layer_tests::p_f16> gn(4, 1);
  std::vector<double> v(64 * 4);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 280.0 + static_cast<double>(i % 41);
  const auto y = gn(tensor_from<float16, 3>(v, {1, 64, 4}));
  const auto ref = normalise_groups(v, 1, 64, 4, 1, 1e-6L);
  for (std::size_t i = 0; i < v.size(); ++i) {
    REQUIRE(std::isfinite(static_cast<float>(y.data()[i])));
    CHECK(static_cast<double>(y.data()[i]) == Approx(ref.xhat[i]).margin(4e-3));
  }
}

TEST_CASE("group_norm of complex input uses mean(|x - mean|^2) as the variance", "[nn][group_norm]") {
  const std::size_t samples = 2, mid = 2, f = 4, groups = 2, cg = 2;
  nn::group_norm<layer_tests::p_f32> gn(f, groups);
  gn.scale()->data()[3] = 2.0f;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto x = xt::xtensor<std::complex<float>, 3>::from_shape({samples, mid, f});
  for (auto& e : x) e = {u(rng), u(rng)};
  const auto y = gn(x);
  STATIC_REQUIRE(std::is_same_v<typename decltype(y)::value_type, std::complex<float>>);
  for (std::size_t n = 0; n < samples; ++n) {
    for (std::size_t g = 0; g < groups; ++g) {
      std::complex<double> mean = 0;
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) mean += std::complex<double>(x(n, m, g * cg + c));
      }
      mean /= static_cast<double>(mid * cg);
      double var = 0;  // (x - mean) times its conjugate
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) {
          const std::complex<double> d = std::complex<double>(x(n, m, g * cg + c)) - mean;
          var += (d * std::conj(d)).real();
        }
      }
      var /= static_cast<double>(mid * cg);
      for (std::size_t m = 0; m < mid; ++m) {
        for (std::size_t c = 0; c < cg; ++c) {
          const std::size_t j = g * cg + c;
          const std::complex<double> want =
              (std::complex<double>(x(n, m, j)) - mean) / std::sqrt(var + 1e-6) * (j == 3 ? 2.0 : 1.0);
          const std::complex<double> got(y(n, m, j));
          CHECK(std::abs(got - want) <= 1e-5 * (1 + std::abs(want)));
        }
      }
    }
  }
}

TEST_CASE("group_norm rejects groups that do not divide the features, zero sizes and rank-1 inputs",
          "[nn][group_norm]") {
  CHECK_THROWS_WITH(nn::group_norm<p_f64>(10, 3),
                    Catch::Contains("10 features do not split into 3 groups") && Catch::Contains("10 % 3 = 1"));
  CHECK_THROWS_WITH(nn::group_norm<p_f64>(8, 0), Catch::Contains("into 0 groups"));
  CHECK_THROWS_WITH(nn::group_norm<p_f64>(0, 1), Catch::Contains("features is 0"));
  CHECK_THROWS_WITH(nn::group_norm<p_f64>(4, 2, {.epsilon = -1.0}), Catch::Contains("epsilon is -1"));
  nn::group_norm<p_f64> gn(4, 2);
  xt::xtensor<double, 1> rank1 = xt::zeros<double>({4});
  CHECK_THROWS_WITH(gn(rank1), Catch::Contains("shape [4] (rank 1)") && Catch::Contains("rank >= 2"));
  xt::xtensor<double, 2> wrong = xt::zeros<double>({2, 6});
  CHECK_THROWS_WITH(gn(wrong), Catch::Contains("6 features") && Catch::Contains("expects 4"));
  nn::group_norm<p_f64>::saved<double> ctx;
  xt::xtensor<double, 2> x = xt::ones<double>({2, 4});
  (void)gn.forward(x, ctx);
  auto g = gn.zero_gradients();
  xt::xtensor<double, 2> rows3 = xt::zeros<double>({3, 4});
  CHECK_THROWS_WITH(gn.backward(ctx, rows3, g), Catch::Contains("3 rows") && Catch::Contains("had 2"));
}

TEST_CASE("group_norm backward matches float64 central differences", "[nn][group_norm][backward]") {
  const std::size_t f = 6;
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    const bool scale = variant != 2, bias = variant == 0;
    nn::group_norm<p_f64> layer(f, 3, {.epsilon = 1e-4, .use_scale = scale, .use_bias = bias});
    gradcheck::fill_parameters(layer, 90 + static_cast<unsigned>(variant), 0.5, 1.5);
    auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 3 * f, 91, -2.0, 3.0), {2, 3, f});
    const auto w = gradcheck::uniform(x.size(), 92);
    nn::group_norm<p_f64>::saved<double> ctx;
    const auto y = layer.forward(x, ctx);
    REQUIRE(bool(y == layer(x)));
    auto g = layer.zero_gradients();
    const auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {2, 3, f}), g);
    auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
    gradcheck::require_norm_gradients(layer, x, dx, g, loss, scale, bias);
  }
}

TEMPLATE_TEST_CASE("group_norm backward under a low-precision policy matches the float64 VJP",
                   "[nn][group_norm][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t samples = 4, mid = 4, f = 16, groups = 4;
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(samples * mid * f, 93));
  const auto sv = gradcheck::rounded_to<C>(gradcheck::uniform(f, 94, 0.5, 1.5));
  const auto wv = gradcheck::uniform(samples * mid * f, 95);
  nn::group_norm<P> low(f, groups, {.epsilon = 1e-5});
  nn::group_norm<p_f64> ref(f, groups, {.epsilon = 1e-5});
  for (std::size_t j = 0; j < f; ++j) {
    low.scale()->data()[j] = static_cast<typename P::param_type>(static_cast<float>(sv[j]));
    ref.scale()->data()[j] = sv[j];
  }
  typename nn::group_norm<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 3>(xv, {samples, mid, f}), ctx);
  auto g = low.zero_gradients();
  const auto dx = low.backward(ctx, tensor_from<float, 3>(wv, {samples, mid, f}), g);
  nn::group_norm<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 3>(xv, {samples, mid, f}), rctx);
  auto rg = ref.zero_gradients();
  const auto rdx = ref.backward(rctx, tensor_from<double, 3>(wv, {samples, mid, f}), rg);
  const double u32 = layer_tests::unit_roundoff<float>();  // float32 arithmetic only: 64 u_f32, as layer_norm
  CHECK(gradcheck::relative_l2(std::span<const float>(dx.data(), dx.size()), flat_values(rdx)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.scale->data(), f), flat_values(*rg.scale)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.bias->data(), f), flat_values(*rg.bias)) <= 64 * u32);
}

TEST_CASE("group_norm walks its parameters and has a from_scope form", "[nn][group_norm]") {
  nn::group_norm<layer_tests::p_f32> gn(4, 2, {.use_bias = false});
  std::vector<std::string> names;
  gn.for_each_parameter([&](std::string_view n, auto&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"scale"});
  using scoped = mixprec::from_scope<layer_tests::p_f32, layer_tests::p_bf16>;
  const mixprec::policy_scope scope(layer_tests::p_bf16{});
  nn::group_norm<scoped> sgn(4, 2);
  xt::xtensor<float, 2> x = {{1.0f, 3.0f, -2.0f, 2.0f}};
  const auto y = sgn(x);  // groups {1, 3} and {-2, 2}: x̂ = -1, 1, -1, 1 (bfloat16 output)
  CHECK(static_cast<double>(y(0, 0)) == Approx(-1.0).epsilon(1e-2));
  CHECK(static_cast<double>(y(0, 3)) == Approx(1.0).epsilon(1e-2));
  CHECK(sgn.policy().compute == mixprec::dtype::bfloat16);
}

}  // namespace group_norm_test
