// Tests of nn::dense's training interface (nn/dense.hpp): forward(x, ctx), backward(ctx, dy, grads),
// for_each_parameter and gradients, against float64 central finite differences (TRAINING.md §5) and,
// for low-precision policies, against the float64 VJP within bounds derived from the formats.
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/dense.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace dense_backward_test {

namespace nn = mixprec::nn;
using gradcheck::tensor_from;
using layer_tests::p_f64;

TEST_CASE("dense backward matches float64 central differences for x, kernel and bias", "[nn][dense][backward]") {
  const std::size_t in = 4, out = 5;
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 3 * in, 1), {2, 3, in});
  auto k = tensor_from<double, 2>(gradcheck::uniform(in * out, 2), {in, out});
  auto b = tensor_from<double, 1>(gradcheck::uniform(out, 3), {out});
  const auto w = gradcheck::uniform(2 * 3 * out, 4);
  nn::dense<p_f64> layer(k, b);

  nn::dense<p_f64>::saved<double> ctx;
  auto y = layer.forward(x, ctx);
  REQUIRE(bool(y == layer(x)));
  auto grads = layer.zero_gradients();
  auto dy = tensor_from<double, 3>(w, {2, 3, out});
  auto dx = layer.backward(ctx, dy, grads);
  static_assert(std::is_same_v<decltype(dx), xt::xtensor<double, 3>>);
  REQUIRE(dx.shape() == x.shape());

  auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
  gradcheck::require_close("dx", std::span<const double>(dx.data(), dx.size()),
                           gradcheck::numeric_gradient(x.data(), x.size(), loss));
  gradcheck::require_close("dkernel", std::span<const double>(grads.kernel.data(), grads.kernel.size()),
                           gradcheck::numeric_gradient(layer.kernel().data(), layer.kernel().size(), loss));
  gradcheck::require_close("dbias", std::span<const double>(grads.bias->data(), grads.bias->size()),
                           gradcheck::numeric_gradient(layer.bias()->data(), layer.bias()->size(), loss));
}

TEST_CASE("dense backward without bias, rank-2 and xarray inputs", "[nn][dense][backward]") {
  const std::size_t in = 3, out = 2;
  auto k = tensor_from<double, 2>(gradcheck::uniform(in * out, 5), {in, out});
  nn::dense<p_f64> layer(k);
  xt::xarray<double> x = tensor_from<double, 2>(gradcheck::uniform(4 * in, 6), {4, in});
  const auto w = gradcheck::uniform(4 * out, 7);
  nn::dense<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto grads = layer.zero_gradients();
  REQUIRE_FALSE(grads.bias.has_value());
  xt::xarray<double> dy = tensor_from<double, 2>(w, {4, out});
  xt::xarray<double> dx = layer.backward(ctx, dy, grads);
  auto loss = [&] { return gradcheck::weighted_sum(layer(x), w); };
  gradcheck::require_close("dx", std::span<const double>(dx.data(), dx.size()),
                           gradcheck::numeric_gradient(x.data(), x.size(), loss));
  gradcheck::require_close("dkernel", std::span<const double>(grads.kernel.data(), grads.kernel.size()),
                           gradcheck::numeric_gradient(layer.kernel().data(), layer.kernel().size(), loss));
}

TEST_CASE("dense backward adds into the gradients: two passes give twice the gradients", "[nn][dense][backward]") {
  auto k = tensor_from<double, 2>(gradcheck::uniform(6, 8), {3, 2});
  auto b = tensor_from<double, 1>(gradcheck::uniform(2, 9), {2});
  nn::dense<p_f64> layer(k, b);
  auto x = tensor_from<double, 2>(gradcheck::uniform(12, 10), {4, 3});
  auto dy = tensor_from<double, 2>(gradcheck::uniform(8, 11), {4, 2});
  nn::dense<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto once = layer.zero_gradients();
  (void)layer.backward(ctx, dy, once);
  auto twice = layer.zero_gradients();
  (void)layer.backward(ctx, dy, twice);
  (void)layer.backward(ctx, dy, twice);
  // The second pass adds its sums to the first's (not 2 × one sum): equal up to double rounding.
  for (std::size_t i = 0; i < once.kernel.size(); ++i) {
    CHECK(twice.kernel.data()[i] == Approx(2 * once.kernel.data()[i]).epsilon(1e-14));
  }
  for (std::size_t i = 0; i < once.bias->size(); ++i) {
    CHECK(twice.bias->data()[i] == Approx(2 * once.bias->data()[i]).epsilon(1e-14));
  }
}

TEMPLATE_TEST_CASE("dense backward under a low-precision policy matches the float64 VJP within the format's bound",
                   "[nn][dense][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t rows = 16, in = 48, out = 40;
  // Inputs, parameters and cotangent already representable in C: only the internal roundings differ.
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * in, 12));
  const auto kv = gradcheck::rounded_to<C>(gradcheck::uniform(in * out, 13));
  const auto bv = gradcheck::rounded_to<C>(gradcheck::uniform(out, 14));
  const auto wv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * out, 15));

  nn::dense<P> low(tensor_from<typename P::param_type, 2>(kv, {in, out}),
                   tensor_from<typename P::param_type, 1>(bv, {out}));
  typename nn::dense<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 2>(xv, {rows, in}), ctx);
  auto g = low.zero_gradients();
  static_assert(std::is_same_v<typename decltype(g.kernel)::value_type, float>, "parameter gradients are float32");
  auto dx = low.backward(ctx, tensor_from<float, 2>(wv, {rows, out}), g);
  static_assert(std::is_same_v<decltype(dx), xt::xtensor<float, 2>>, "dx is in the input's type");

  nn::dense<p_f64> ref(tensor_from<double, 2>(kv, {in, out}), tensor_from<double, 1>(bv, {out}));
  nn::dense<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 2>(xv, {rows, in}), rctx);
  auto rg = ref.zero_gradients();
  auto rdx = ref.backward(rctx, tensor_from<double, 2>(wv, {rows, out}), rg);

  // Each element is a dot product of exact C values summed in float32, then (dx) rounded to float:
  // |err| <= (k u_f32 + u_f32) Σ|a_i b_i| <= (k + 1) u_f32 k max|a| max|b|, all |values| <= 1.
  const double u32 = layer_tests::unit_roundoff<float>();
  for (std::size_t i = 0; i < dx.size(); ++i) {
    CHECK(std::abs(dx.data()[i] - rdx.data()[i]) <= (out + 1) * u32 * out);
  }
  for (std::size_t i = 0; i < g.kernel.size(); ++i) {
    CHECK(std::abs(g.kernel.data()[i] - rg.kernel.data()[i]) <= (rows + 1) * u32 * rows);
  }
  for (std::size_t i = 0; i < g.bias->size(); ++i) {
    CHECK(std::abs(g.bias->data()[i] - rg.bias->data()[i]) <= (rows + 1) * u32 * rows);
  }
}

TEST_CASE("dense backward rounds the saved input and the cotangent to the compute type", "[nn][dense][backward]") {
  using P = layer_tests::p_c_bf16;
  // x = 1 + 2^-12 is not a bfloat16: the kernel gradient sees bfloat16(x) = 1.
  xt::xtensor<float, 2> k = {{1.0F}};
  nn::dense<P> layer(k);
  nn::dense<P>::saved<float> ctx;
  xt::xtensor<float, 2> x = {{1.0F + 0x1p-12F}};
  (void)layer.forward(x, ctx);
  auto g = layer.zero_gradients();
  xt::xtensor<float, 2> dy = {{1.0F + 0x1p-12F}};
  auto dx = layer.backward(ctx, dy, g);
  CHECK(g.kernel(0, 0) == 1.0F);
  CHECK(dx(0, 0) == 1.0F);
}

TEST_CASE("dense parameters and gradients are walked by the same names", "[nn][dense][backward]") {
  nn::dense<layer_tests::p_f32> layer(3, 2, nn::use_bias::yes);
  std::vector<std::string> params, grads;
  layer.for_each_parameter([&](std::string_view name, auto& p) {
    params.emplace_back(name);
    p.fill(0.5F);  // writable
  });
  auto g = layer.zero_gradients();
  g.for_each([&](std::string_view name, auto&) { grads.emplace_back(name); });
  CHECK(params == std::vector<std::string>{"kernel", "bias"});
  CHECK(grads == params);
  CHECK(layer.kernel()(1, 1) == 0.5F);
  CHECK((*layer.bias())(1) == 0.5F);
}

TEST_CASE("dense backward rejects a cotangent or gradients that do not fit", "[nn][dense][backward]") {
  nn::dense<layer_tests::p_f32> layer(3, 2, nn::use_bias::yes);
  nn::dense<layer_tests::p_f32>::saved<float> ctx;
  xt::xtensor<float, 2> x = xt::zeros<float>({4, 3});
  (void)layer.forward(x, ctx);
  auto g = layer.zero_gradients();
  xt::xtensor<float, 2> wrong_features = xt::zeros<float>({4, 3});
  CHECK_THROWS_WITH(layer.backward(ctx, wrong_features, g), Catch::Contains("expects 2"));
  xt::xtensor<float, 2> wrong_rows = xt::zeros<float>({5, 2});
  CHECK_THROWS_WITH(layer.backward(ctx, wrong_rows, g), Catch::Contains("5 rows") && Catch::Contains("had 4"));
  nn::dense<layer_tests::p_f32> other(3, 2, nn::use_bias::no);
  auto no_bias = other.zero_gradients();
  xt::xtensor<float, 2> dy = xt::zeros<float>({4, 2});
  CHECK_THROWS_WITH(layer.backward(ctx, dy, no_bias), Catch::Contains("grads.bias"));
  nn::dense<layer_tests::p_f32> wider(3, 2, nn::use_bias::yes);
  auto g2 = nn::dense<layer_tests::p_f32>(4, 2, nn::use_bias::yes).zero_gradients();
  CHECK_THROWS_WITH(wider.backward(ctx, dy, g2), Catch::Contains("grads.kernel has shape [4, 2]"));
}

}  // namespace dense_backward_test
