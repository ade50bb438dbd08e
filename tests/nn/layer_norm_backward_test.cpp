// Tests of nn::layer_norm's training interface (nn/layer_norm.hpp): backward against float64 central
// finite differences (TRAINING.md §5) with and without scale and bias, forward(x, ctx) against operator(),
// low precision against float64, += semantics, names and errors.
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/layer_norm.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace layer_norm_backward_test {

namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

TEST_CASE("layer_norm backward matches float64 central differences", "[nn][layer_norm][backward]") {
  const std::size_t f = 7;
  for (int variant = 0; variant < 3; ++variant) {
    const bool scale = variant != 2, bias = variant == 0;
    nn::layer_norm<p_f64> layer(f, {.epsilon = 1e-5, .use_scale = scale, .use_bias = bias});
    gradcheck::fill_parameters(layer, 80 + static_cast<unsigned>(variant), 0.5, 1.5);
    auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 3 * f, 81, -2.0, 3.0), {2, 3, f});
    const auto w = gradcheck::uniform(x.size(), 82);
    nn::layer_norm<p_f64>::saved<double> ctx;
    auto y = layer.forward(x, ctx);
    REQUIRE(bool(y == layer(x)));
    auto g = layer.zero_gradients();
    CHECK(g.scale.has_value() == scale);
    CHECK(g.bias.has_value() == bias);
    auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {2, 3, f}), g);
    auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
    gradcheck::require_norm_gradients(layer, x, dx, g, loss, scale, bias);
  }
}

TEST_CASE("layer_norm backward on rank-2 xarray input and rows offset far from zero", "[nn][layer_norm][backward]") {
  const std::size_t f = 5;
  nn::layer_norm<p_f64> layer(f, {.epsilon = 1e-6, .use_scale = true, .use_bias = true});
  auto v = gradcheck::uniform(4 * f, 83);
  for (auto& e : v) e += 1e3;  // mean 1000, spread 1: the backward uses the saved x̂, not x − mean again
  xt::xarray<double> x = tensor_from<double, 2>(v, {4, f});
  const auto w = gradcheck::uniform(x.size(), 84);
  nn::layer_norm<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto g = layer.zero_gradients();
  xt::xarray<double> dy = tensor_from<double, 2>(w, {4, f});
  xt::xarray<double> dx = layer.backward(ctx, dy, g);
  auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
  gradcheck::require_close("dx", flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss, 1e-4));
}

TEMPLATE_TEST_CASE("layer_norm backward under a low-precision policy matches the float64 VJP",
                   "[nn][layer_norm][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t rows = 8, f = 32;
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * f, 85));
  const auto sv = gradcheck::rounded_to<C>(gradcheck::uniform(f, 86, 0.5, 1.5));
  const auto wv = gradcheck::uniform(rows * f, 87);
  auto low = nn::layer_norm<P>::from_params(tensor_from<float, 1>(sv, {f}), tensor_from<float, 1>(sv, {f}), 1e-5);
  typename nn::layer_norm<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 2>(xv, {rows, f}), ctx);
  auto g = low.zero_gradients();
  auto dx = low.backward(ctx, tensor_from<float, 2>(wv, {rows, f}), g);
  auto ref = nn::layer_norm<p_f64>::from_params(tensor_from<double, 1>(sv, {f}), tensor_from<double, 1>(sv, {f}), 1e-5);
  nn::layer_norm<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 2>(xv, {rows, f}), rctx);
  auto rg = ref.zero_gradients();
  auto rdx = ref.backward(rctx, tensor_from<double, 2>(wv, {rows, f}), rg);
  // Inputs and parameters are exact in C; only float32 arithmetic differs (mean, variance, x̂, the f-term
  // sums of the backward, dx's rounding to float): a few dozen float32 roundings, 64 u_f32 relative.
  const double u32 = layer_tests::unit_roundoff<float>();
  CHECK(gradcheck::relative_l2(std::span<const float>(dx.data(), dx.size()), flat_values(rdx)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.scale->data(), f), flat_values(*rg.scale)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.bias->data(), f), flat_values(*rg.bias)) <= 64 * u32);
}

TEST_CASE("layer_norm backward adds, walks names and rejects what does not fit", "[nn][layer_norm][backward]") {
  nn::layer_norm<p_f64> layer(3);
  auto x = tensor_from<double, 2>(gradcheck::uniform(6, 88), {2, 3});
  auto dy = tensor_from<double, 2>(gradcheck::uniform(6, 89), {2, 3});
  nn::layer_norm<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto once = layer.zero_gradients();
  (void)layer.backward(ctx, dy, once);
  auto twice = layer.zero_gradients();
  (void)layer.backward(ctx, dy, twice);
  (void)layer.backward(ctx, dy, twice);
  for (std::size_t j = 0; j < 3; ++j) {
    CHECK((*twice.scale)(j) == Approx(2 * (*once.scale)(j)).epsilon(1e-14));
    CHECK((*twice.bias)(j) == Approx(2 * (*once.bias)(j)).epsilon(1e-14));
  }
  std::vector<std::string> params, grads;
  layer.for_each_parameter([&](std::string_view n, auto&) { params.emplace_back(n); });
  once.for_each([&](std::string_view n, auto&) { grads.emplace_back(n); });
  CHECK(params == std::vector<std::string>{"scale", "bias"});
  CHECK(grads == params);
  xt::xtensor<double, 2> rows3 = xt::zeros<double>({3, 3});
  CHECK_THROWS_WITH(layer.backward(ctx, rows3, once), Catch::Contains("3 rows") && Catch::Contains("had 2"));
  xt::xtensor<double, 2> feats = xt::zeros<double>({2, 4});
  CHECK_THROWS_WITH(layer.backward(ctx, feats, once), Catch::Contains("expects 3"));
  auto other = nn::layer_norm<p_f64>(3, {.use_bias = false}).zero_gradients();
  CHECK_THROWS_WITH(layer.backward(ctx, dy, other), Catch::Contains("zero_gradients"));
}

}  // namespace layer_norm_backward_test
