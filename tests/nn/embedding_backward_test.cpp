// Tests of nn::embedding's training interface (nn/embedding.hpp): the lookup's scatter-add and the tied
// classifier's VJP against float64 central finite differences, both adding into one gradient (weight
// tying), attend_forward against attend_logits, low precision against float64, names and errors.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/embedding.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace embedding_backward_test {

namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

TEST_CASE("embedding lookup backward adds each cotangent row to its id's row, repeated ids summed",
          "[nn][embedding][backward]") {
  auto layer = nn::embedding<p_f64>::from_table(tensor_from<double, 2>(gradcheck::uniform(5 * 3, 90), {5, 3}));
  xt::xtensor<std::int32_t, 2> ids = {{1, 4, 1}, {0, 1, 3}};
  nn::embedding<p_f64>::saved ctx;
  auto y = layer.forward(ids, ctx);
  REQUIRE(bool(y == layer(ids)));
  const auto w = gradcheck::uniform(y.size(), 91);
  auto g = layer.zero_gradients();
  layer.backward(ctx, tensor_from<double, 3>(w, {2, 3, 3}), g);
  auto loss = [&] { return gradcheck::weighted_sum(layer(ids), w); };
  gradcheck::require_close("dtable", flat_values(g.embedding),
                           gradcheck::numeric_gradient(layer.table().data(), layer.table().size(), loss));
  CHECK(g.embedding(2, 0) == 0.0);  // id 2 never looked up
}

TEST_CASE("the tied classifier's backward and the lookup add into the same table gradient",
          "[nn][embedding][backward]") {
  auto layer = nn::embedding<p_f64>::from_table(tensor_from<double, 2>(gradcheck::uniform(6 * 4, 92), {6, 4}));
  xt::xtensor<std::int32_t, 1> ids = {2, 5, 2};
  const auto w = gradcheck::uniform(3 * 6, 93);
  // logits = lookup(ids) · tableᵀ: the table is used twice (nanoGPT's wte = lm_head).
  nn::embedding<p_f64>::saved lctx;
  nn::embedding<p_f64>::attend_saved<double> actx;
  auto h = layer.forward(ids, lctx);
  auto logits = layer.attend_forward<double>(h, actx);
  REQUIRE(bool(logits == layer.attend_logits<double>(h)));
  REQUIRE(bool(logits == layer.attend(h)));
  auto g = layer.zero_gradients();
  auto dh = layer.attend_backward(actx, tensor_from<double, 2>(w, {3, 6}), g);
  layer.backward(lctx, dh, g);
  auto loss = [&] { return gradcheck::weighted_sum(layer.attend(layer(ids)), w); };
  gradcheck::require_close("dtable (both uses)", flat_values(g.embedding),
                           gradcheck::numeric_gradient(layer.table().data(), layer.table().size(), loss));
  // dh alone, against differences in h.
  auto hh = h;
  auto loss_h = [&] { return gradcheck::weighted_sum(layer.attend(hh), w); };
  gradcheck::require_close("dh", flat_values(dh), gradcheck::numeric_gradient(hh.data(), hh.size(), loss_h));
}

TEMPLATE_TEST_CASE("attend backward under a low-precision policy matches the float64 VJP", "[nn][embedding][backward]",
                   layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t vocab = 24, f = 16, rows = 10;
  const auto tv = gradcheck::rounded_to<C>(gradcheck::uniform(vocab * f, 94));
  const auto hv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * f, 95));
  const auto dv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * vocab, 96));
  auto low = nn::embedding<P>::from_table(tensor_from<float, 2>(tv, {vocab, f}));
  typename nn::embedding<P>::template attend_saved<float> ctx;
  (void)low.template attend_forward<float>(tensor_from<float, 2>(hv, {rows, f}), ctx);
  auto g = low.zero_gradients();
  auto dh = low.attend_backward(ctx, tensor_from<float, 2>(dv, {rows, vocab}), g);
  auto ref = nn::embedding<p_f64>::from_table(tensor_from<double, 2>(tv, {vocab, f}));
  nn::embedding<p_f64>::attend_saved<double> rctx;
  (void)ref.template attend_forward<double>(tensor_from<double, 2>(hv, {rows, f}), rctx);
  auto rg = ref.zero_gradients();
  auto rdh = ref.attend_backward(rctx, tensor_from<double, 2>(dv, {rows, vocab}), rg);
  // Exact C operands, products exact in float32, k-term float32 sums (+ dh's rounding to float):
  // |err| <= (k + 1) u_f32 k for values in [-1, 1].
  const double u32 = layer_tests::unit_roundoff<float>();
  for (std::size_t i = 0; i < dh.size(); ++i)
    CHECK(std::abs(dh.data()[i] - rdh.data()[i]) <= (vocab + 1) * u32 * vocab);
  for (std::size_t i = 0; i < g.embedding.size(); ++i) {
    CHECK(std::abs(g.embedding.data()[i] - rg.embedding.data()[i]) <= (rows + 1) * u32 * rows);
  }
}

TEST_CASE("embedding backward names and errors", "[nn][embedding][backward]") {
  nn::embedding<p_f64> layer(4, 3);
  std::vector<std::string> names;
  layer.for_each_parameter([&](std::string_view n, auto&) { names.emplace_back(n); });
  auto g = layer.zero_gradients();
  g.for_each([&](std::string_view n, auto&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"embedding", "embedding"});
  xt::xtensor<std::int32_t, 1> ids = {0, 3};
  nn::embedding<p_f64>::saved ctx;
  (void)layer.forward(ids, ctx);
  xt::xtensor<double, 2> rows3 = xt::zeros<double>({3, 3});
  CHECK_THROWS_WITH(layer.backward(ctx, rows3, g), Catch::Contains("3 rows") && Catch::Contains("had 2"));
  xt::xtensor<double, 2> feats = xt::zeros<double>({2, 2});
  CHECK_THROWS_WITH(layer.backward(ctx, feats, g), Catch::Contains("expects 3"));
  nn::embedding<p_f64>::attend_saved<double> actx;
  (void)layer.attend_forward<double>(xt::xtensor<double, 2>(xt::zeros<double>({2, 3})), actx);
  xt::xtensor<double, 2> wrong_vocab = xt::zeros<double>({2, 5});
  CHECK_THROWS_WITH(layer.attend_backward(actx, wrong_vocab, g), Catch::Contains("expects 4"));
  auto other = nn::embedding<p_f64>(5, 3).zero_gradients();
  xt::xtensor<double, 2> dy = xt::zeros<double>({2, 3});
  CHECK_THROWS_WITH(layer.backward(ctx, dy, other), Catch::Contains("grads.embedding has shape [5, 3]"));
}

}  // namespace embedding_backward_test
