// Tests of nn::rms_norm's training interface (nn/rms_norm.hpp): the plain and fused forms' VJPs against
// float64 central finite differences (TRAINING.md §5), the residual scale, the huge-row rescaling, the
// low-precision policies against the float64 VJP, += semantics, names and errors.
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/rms_norm.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace rms_norm_backward_test {

namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

TEST_CASE("rms_norm plain backward matches float64 central differences", "[nn][rms_norm][backward]") {
  const std::size_t f = 6;
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 3 * f, 21), {2, 3, f});
  auto scale = tensor_from<double, 1>(gradcheck::uniform(f, 22, 0.5, 1.5), {f});
  const auto w = gradcheck::uniform(x.size(), 23);
  for (double eps : {1e-6, 0.1}) {
    auto layer = nn::rms_norm<p_f64>::from_scale(scale, {.epsilon = eps});
    nn::rms_norm<p_f64>::saved<double> ctx;
    auto y = layer.forward(x, ctx);
    REQUIRE(bool(y == layer(x)));
    auto g = layer.zero_gradients();
    auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {2, 3, f}), g);
    auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
    gradcheck::require_close("dx", flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
    gradcheck::require_close("dscale", flat_values(*g.scale),
                             gradcheck::numeric_gradient(layer.scale()->data(), f, loss));
  }
}

TEST_CASE("rms_norm fused backward gives the stream's cotangent, with and without a residual scale",
          "[nn][rms_norm][backward]") {
  const std::size_t f = 5;
  auto x = tensor_from<double, 2>(gradcheck::uniform(4 * f, 31), {4, f});
  auto res = tensor_from<double, 2>(gradcheck::uniform(4 * f, 32), {4, f});
  auto scale = tensor_from<double, 1>(gradcheck::uniform(f, 33, 0.5, 1.5), {f});
  const auto w1 = gradcheck::uniform(x.size(), 34);
  const auto w2 = gradcheck::uniform(x.size(), 35);
  for (std::optional<double> c : {std::optional<double>{}, std::optional<double>{0.5}}) {
    auto layer = nn::rms_norm<p_f64>::from_scale(scale, {.epsilon = 1e-5, .residual_scale = c});
    nn::rms_norm<p_f64>::saved<double> ctx;
    auto out = layer.forward(x, res, ctx);
    auto ref = layer(x, res);
    REQUIRE(bool(out.x == ref.x));
    REQUIRE(bool(out.residual == ref.residual));
    auto g = layer.zero_gradients();
    auto ds = layer.backward(ctx, tensor_from<double, 2>(w1, {4, f}), tensor_from<double, 2>(w2, {4, f}), g);
    static_assert(std::is_same_v<decltype(ds), xt::xtensor<double, 2>>);
    auto loss = [&] {
      auto o = layer(x, res);
      return gradcheck::weighted_sum(o.x, w1) + gradcheck::weighted_sum(o.residual, w2);
    };
    // ds is both dx and dresidual: the stream s = residual + x.
    gradcheck::require_close("dx", flat_values(ds), gradcheck::numeric_gradient(x.data(), x.size(), loss));
    gradcheck::require_close("dresidual", flat_values(ds), gradcheck::numeric_gradient(res.data(), res.size(), loss));
    gradcheck::require_close("dscale", flat_values(*g.scale),
                             gradcheck::numeric_gradient(layer.scale()->data(), f, loss));

    // The last norm of a network: the new residual is unused (cotangent zero).
    auto g0 = layer.zero_gradients();
    auto ds0 = layer.backward_fused(ctx, tensor_from<double, 2>(w1, {4, f}), g0);
    auto loss0 = [&] { return gradcheck::weighted_sum(layer(x, res).x, w1); };
    gradcheck::require_close("dx without residual cotangent", flat_values(ds0),
                             gradcheck::numeric_gradient(x.data(), x.size(), loss0));
  }
}

TEST_CASE("rms_norm fused backward from no_residual", "[nn][rms_norm][backward]") {
  const std::size_t f = 4;
  auto x = tensor_from<double, 2>(gradcheck::uniform(3 * f, 41), {3, f});
  nn::rms_norm<p_f64> layer(f, {.epsilon = 1e-6, .use_scale = false});
  const auto w1 = gradcheck::uniform(x.size(), 42);
  const auto w2 = gradcheck::uniform(x.size(), 43);
  nn::rms_norm<p_f64>::saved<double> ctx;
  (void)layer.forward(x, nn::no_residual, ctx);
  auto g = layer.zero_gradients();
  REQUIRE_FALSE(g.scale.has_value());
  auto dx = layer.backward(ctx, tensor_from<double, 2>(w1, {3, f}), tensor_from<double, 2>(w2, {3, f}), g);
  auto loss = [&] {
    auto o = layer(x, nn::no_residual);
    return gradcheck::weighted_sum(o.x, w1) + gradcheck::weighted_sum(o.residual, w2);
  };
  gradcheck::require_close("dx", flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
}

TEST_CASE("rms_norm backward of a row of 3e19 in float32 is finite and matches the float64 VJP",
          "[nn][rms_norm][backward]") {
  // The float32 sum of squares of such a row overflows; the forward rescales it by a power of two.
  const std::size_t f = 4;
  const std::vector<double> xv = {3e19, -1e19, 2e19, 0.5e19};
  const std::vector<double> dyv = {0.3, -0.2, 0.1, 0.7};
  nn::rms_norm<layer_tests::p_f32> low(f);
  nn::rms_norm<layer_tests::p_f32>::saved<float> ctx;
  (void)low.forward(tensor_from<float, 2>(xv, {1, f}), ctx);
  auto g = low.zero_gradients();
  auto dx = low.backward(ctx, tensor_from<float, 2>(dyv, {1, f}), g);
  nn::rms_norm<p_f64> ref(f);
  nn::rms_norm<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 2>(xv, {1, f}), rctx);
  auto rg = ref.zero_gradients();
  auto rdx = ref.backward(rctx, tensor_from<double, 2>(dyv, {1, f}), rg);
  for (std::size_t j = 0; j < f; ++j) {
    REQUIRE(std::isfinite(dx(0, j)));
    CHECK(std::abs(dx(0, j) - rdx(0, j)) <= 1e-5 * std::abs(rdx(0, 0)) + 1e-6 * std::abs(rdx(0, j)));
    CHECK(std::abs((*g.scale)(j) - (*rg.scale)(j)) <= 1e-5);
  }
}

TEMPLATE_TEST_CASE("rms_norm backward under a low-precision policy matches the float64 VJP", "[nn][rms_norm][backward]",
                   layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t rows = 8, f = 32;
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * f, 51));
  const auto sv = gradcheck::rounded_to<C>(gradcheck::uniform(f, 52, 0.5, 1.5));
  const auto wv = gradcheck::uniform(rows * f, 53);
  auto low = nn::rms_norm<P>::from_scale(tensor_from<float, 1>(sv, {f}));
  typename nn::rms_norm<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 2>(xv, {rows, f}), ctx);
  auto g = low.zero_gradients();
  auto dx = low.backward(ctx, tensor_from<float, 2>(wv, {rows, f}), g);
  auto ref = nn::rms_norm<p_f64>::from_scale(tensor_from<double, 1>(sv, {f}));
  nn::rms_norm<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 2>(xv, {rows, f}), rctx);
  auto rg = ref.zero_gradients();
  auto rdx = ref.backward(rctx, tensor_from<double, 2>(wv, {rows, f}), rg);
  // Inputs and scale are exact in C, so only float32 arithmetic differs (the statistics, x̂, the f-term
  // sums) plus dx's rounding to float: a few dozen float32 roundings per element, so 64 u_f32 relative.
  const double u32 = layer_tests::unit_roundoff<float>();
  CHECK(gradcheck::relative_l2(std::span<const float>(dx.data(), dx.size()), flat_values(rdx)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.scale->data(), f), flat_values(*rg.scale)) <= 64 * u32);
}

TEST_CASE("rms_norm backward adds, walks the scale by name and rejects what does not fit", "[nn][rms_norm][backward]") {
  nn::rms_norm<p_f64> layer(3);
  auto x = tensor_from<double, 2>(gradcheck::uniform(6, 61), {2, 3});
  auto dy = tensor_from<double, 2>(gradcheck::uniform(6, 62), {2, 3});
  nn::rms_norm<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto once = layer.zero_gradients();
  (void)layer.backward(ctx, dy, once);
  auto twice = layer.zero_gradients();
  (void)layer.backward(ctx, dy, twice);
  (void)layer.backward(ctx, dy, twice);
  for (std::size_t j = 0; j < 3; ++j) CHECK((*twice.scale)(j) == Approx(2 * (*once.scale)(j)).epsilon(1e-14));
  std::vector<std::string> names;
  layer.for_each_parameter([&](std::string_view n, auto&) { names.emplace_back(n); });
  once.for_each([&](std::string_view n, auto&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"scale", "scale"});
  xt::xtensor<double, 2> rows3 = xt::zeros<double>({3, 3});
  CHECK_THROWS_WITH(layer.backward(ctx, rows3, once), Catch::Contains("3 rows") && Catch::Contains("had 2"));
  xt::xtensor<double, 2> feats = xt::zeros<double>({2, 4});
  CHECK_THROWS_WITH(layer.backward(ctx, feats, once), Catch::Contains("expects 3"));
  CHECK_THROWS_WITH(layer.backward_fused(ctx, dy, once), Catch::Contains("plain form"));
  auto no_scale = nn::rms_norm<p_f64>(3, {.use_scale = false}).zero_gradients();
  CHECK_THROWS_WITH(layer.backward(ctx, dy, no_scale), Catch::Contains("zero_gradients"));
}

}  // namespace rms_norm_backward_test
