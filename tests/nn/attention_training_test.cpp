// Tests of nn::attention's training interface (nn/attention.hpp): backward(ctx, dy, grads) against
// float64 central finite differences (TRAINING.md §5) for causal multi-head and grouped-query attention,
// biases, padding masks with a fully masked query, both RoPE layouts and tiles smaller than the sequence;
// forward(x, ctx) against operator(); masked NaN values; low precision against float64; names, += and
// errors.
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/attention.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace attention_training_test {

namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

namespace {

/// A layer with random projections (and biases) in float64.
nn::attention<p_f64> random_layer(const nn::attention_config& cfg, unsigned seed, nn::use_bias bias) {
  nn::attention<p_f64> layer(cfg, bias);
  layer.for_each_parameter([&](std::string_view, auto& p) {
    const auto v = gradcheck::uniform(p.size(), seed++, -0.8, 0.8);
    for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = v[i];
  });
  return layer;
}

/// dx and every parameter gradient of Σ w ⊙ attn(x [, mask]) against central differences.
template <class Mask = std::nullptr_t>
void check_against_finite_differences(nn::attention<p_f64>& layer, xt::xtensor<double, 3>& x, const Mask* mask) {
  const auto w = gradcheck::uniform(x.size(), 99);
  auto run = [&] {
    if constexpr (std::is_same_v<Mask, std::nullptr_t>) {
      return layer(x);
    } else {
      return layer(x, *mask);
    }
  };
  nn::attention<p_f64>::saved<double> ctx;
  xt::xtensor<double, 3> y;
  if constexpr (std::is_same_v<Mask, std::nullptr_t>) {
    y = layer.forward(x, ctx);
  } else {
    y = layer.forward(x, *mask, ctx);
  }
  REQUIRE(bool(y == run()));  // forward gives operator()'s bits
  auto g = layer.zero_gradients();
  auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {x.shape()[0], x.shape()[1], x.shape()[2]}), g);
  auto loss = [&] { return gradcheck::weighted_sum(run(), w); };
  gradcheck::require_close("dx", flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
  std::vector<std::span<const double>> grads;
  g.for_each([&](std::string_view, auto& t) { grads.emplace_back(t.data(), t.size()); });
  std::size_t i = 0;
  layer.for_each_parameter([&](std::string_view name, auto& p) {
    gradcheck::require_close(std::string(name), grads[i++], gradcheck::numeric_gradient(p.data(), p.size(), loss));
  });
}

}  // namespace

TEST_CASE("attention backward: causal multi-head attention, tiles smaller than the sequence",
          "[nn][attention][backward]") {
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = true, .query_block = 2, .key_block = 2};
  auto layer = random_layer(cfg, 1, nn::use_bias::no);
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 5 * 8, 2), {2, 5, 8});
  check_against_finite_differences(layer, x, static_cast<const std::nullptr_t*>(nullptr));
}

TEST_CASE("attention backward: grouped-query attention with biases, not causal", "[nn][attention][backward]") {
  const nn::attention_config cfg{
      .d_model = 8, .n_heads = 4, .n_kv_heads = 2, .causal = false, .query_block = 3, .key_block = 2};
  auto layer = random_layer(cfg, 10, nn::use_bias::yes);
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 5 * 8, 3), {2, 5, 8});
  check_against_finite_differences(layer, x, static_cast<const std::nullptr_t*>(nullptr));
}

TEST_CASE("attention backward: RoPE in both layouts", "[nn][attention][backward]") {
  for (auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
    const nn::attention_config cfg{.d_model = 8,
                                   .n_heads = 2,
                                   .n_kv_heads = 1,
                                   .causal = true,
                                   .rotary = nn::rotary_config{.layout = layout},
                                   .key_block = 3};
    auto layer = random_layer(cfg, 20, nn::use_bias::no);
    auto x = tensor_from<double, 3>(gradcheck::uniform(1 * 6 * 8, 4), {1, 6, 8});
    check_against_finite_differences(layer, x, static_cast<const std::nullptr_t*>(nullptr));
  }
}

TEST_CASE("attention backward: padding mask with a fully masked query", "[nn][attention][backward]") {
  // Left padding under a causal mask: the first query of row 0 sees only padding, attends to nothing.
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = true, .query_block = 2, .key_block = 2};
  auto layer = random_layer(cfg, 30, nn::use_bias::yes);
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 5 * 8, 5), {2, 5, 8});
  xt::xtensor<bool, 2> mask = {{false, false, true, true, true}, {true, true, true, false, true}};
  check_against_finite_differences(layer, x, &mask);
}

TEST_CASE("attention backward: a masked key whose key and value are NaN or Inf changes no gradient",
          "[nn][attention][backward]") {
  // The saved keys and values of the padding token are poisoned after the forward: the backward must
  // give exactly the gradients of the clean context (P = 0 exactly there, and 0 × NaN never formed).
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = false, .key_block = 2};
  auto layer = random_layer(cfg, 40, nn::use_bias::no);
  xt::xtensor<bool, 2> mask = {{true, true, false, true}};
  auto x = tensor_from<double, 3>(gradcheck::uniform(4 * 8, 6), {1, 4, 8});
  auto dy = tensor_from<double, 3>(gradcheck::uniform(4 * 8, 7), {1, 4, 8});
  nn::attention<p_f64>::saved<double> ctx;
  (void)layer.forward(x, mask, ctx);
  auto g_ref = layer.zero_gradients();
  const auto dx_ref = layer.backward(ctx, dy, g_ref);
  for (double poison : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto bad = ctx;
    for (std::size_t e = 0; e < 8; ++e) {  // token 2: its kv row (one kv head of width 8 here: n_kv_heads = 2 × 4)
      bad.k[2 * 8 + e] = poison;
      bad.v[2 * 8 + e] = poison;
    }
    auto g = layer.zero_gradients();
    const auto dx = layer.backward(bad, dy, g);
    CHECK(bool(dx == dx_ref));
    std::vector<std::span<const double>> a, b;
    g.for_each([&](std::string_view, auto& t) { a.emplace_back(t.data(), t.size()); });
    g_ref.for_each([&](std::string_view, auto& t) { b.emplace_back(t.data(), t.size()); });
    for (std::size_t t = 0; t < a.size(); ++t) {
      for (std::size_t e = 0; e < a[t].size(); ++e) CHECK(a[t][e] == b[t][e]);
    }
  }
}

/// dx, every parameter gradient and d_bias of Σ w ⊙ attn(x, mask, bias) against central differences,
/// for a bias of `form` holding `bias_values`.
template <class Mask>
void check_biased_against_finite_differences(nn::attention<p_f64>& layer, xt::xtensor<double, 3>& x, const Mask& mask,
                                             mixprec::kernels::score_bias_layout layout,
                                             std::vector<double>& bias_values) {
  const auto w = gradcheck::uniform(x.size(), 98);
  const auto bias = [&] { return mixprec::kernels::score_bias<double>{layout, bias_values}; };
  auto run = [&] { return layer(x, mask, bias()); };
  nn::attention<p_f64>::saved<double> ctx;
  const xt::xtensor<double, 3> y = layer.forward(x, mask, bias(), ctx);
  REQUIRE(bool(y == run()));  // forward gives operator()'s bits
  auto g = layer.zero_gradients();
  std::vector<double> d_bias(bias_values.size(), 0.0);
  auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {x.shape()[0], x.shape()[1], x.shape()[2]}), g,
                           std::span<double>(d_bias));
  auto loss = [&] { return gradcheck::weighted_sum(run(), w); };
  gradcheck::require_close("dx", flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
  gradcheck::require_close("d_bias", std::span<const double>(d_bias),
                           gradcheck::numeric_gradient(bias_values.data(), bias_values.size(), loss));
  std::vector<std::span<const double>> grads;
  g.for_each([&](std::string_view, auto& t) { grads.emplace_back(t.data(), t.size()); });
  std::size_t i = 0;
  layer.for_each_parameter([&](std::string_view name, auto& p) {
    gradcheck::require_close(std::string(name), grads[i++], gradcheck::numeric_gradient(p.data(), p.size(), loss));
  });
}

TEST_CASE("attention backward: a relative score bias, causal and not, with its gradient", "[nn][attention][backward]") {
  using mixprec::kernels::score_bias_form;
  for (const bool causal : {true, false}) {
    INFO("causal " << causal);
    // T5's unscaled scores (scale 1), tiles smaller than the sequence, a padding key, and a bias per head
    // and one shared by the heads.
    const nn::attention_config cfg{
        .d_model = 8, .n_heads = 2, .causal = causal, .scale = 1.0, .query_block = 2, .key_block = 2};
    auto layer = random_layer(cfg, 80, nn::use_bias::no);
    auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 5 * 8, 81), {2, 5, 8});
    xt::xtensor<bool, 2> mask = {{true, true, true, true, true}, {true, false, true, true, true}};
    for (const std::size_t heads : {std::size_t{2}, std::size_t{1}}) {
      INFO("bias heads " << heads);
      auto values = gradcheck::uniform(heads * 9, 82, -2.0, 2.0);
      check_biased_against_finite_differences(layer, x, mask, {score_bias_form::relative, 1, heads, 0, 0}, values);
    }
  }
}

TEST_CASE("attention backward: dense score biases broadcast over batch rows and heads, with their gradients",
          "[nn][attention][backward]") {
  using mixprec::kernels::score_bias_form;
  const nn::attention_config cfg{
      .d_model = 8, .n_heads = 2, .n_kv_heads = 1, .causal = true, .query_block = 2, .key_block = 3};
  auto layer = random_layer(cfg, 90, nn::use_bias::yes);
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 4 * 8, 91), {2, 4, 8});
  for (const auto& [batch, heads] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
    INFO("bias [" << batch << ", " << heads << ", 4, 4]");
    auto values = gradcheck::uniform(batch * heads * 16, 92, -2.0, 2.0);
    check_biased_against_finite_differences(layer, x, nn::no_key_mask, {score_bias_form::dense, batch, heads, 0, 0},
                                            values);
  }
}

TEST_CASE("attention cross_backward: gradients to x, the context and every projection (finite differences)",
          "[nn][attention][backward][cross]") {
  // Queries from x (5 tokens), keys and values from a context of 3 and of 7 tokens with a padding
  // position; grouped-query heads and biases; tiles smaller than both lengths.
  const nn::attention_config cfg{
      .d_model = 8, .n_heads = 4, .n_kv_heads = 2, .causal = false, .query_block = 2, .key_block = 2};
  auto layer = random_layer(cfg, 100, nn::use_bias::yes);
  auto x = tensor_from<double, 3>(gradcheck::uniform(2 * 5 * 8, 101), {2, 5, 8});
  for (const std::size_t keys : {std::size_t{3}, std::size_t{7}}) {
    INFO("context keys " << keys);
    auto context = tensor_from<double, 3>(gradcheck::uniform(2 * keys * 8, 102), {2, keys, 8});
    xt::xtensor<bool, 2> mask = xt::ones<bool>({std::size_t{2}, keys});
    mask(1, 1) = false;
    const auto w = gradcheck::uniform(x.size(), 103);
    auto run = [&] { return layer.cross(x, context, mask); };
    nn::attention<p_f64>::saved<double> ctx;
    const xt::xtensor<double, 3> y = layer.cross_forward(x, context, mask, ctx);
    REQUIRE(bool(y == run()));
    auto g = layer.zero_gradients();
    const auto d = layer.cross_backward(ctx, tensor_from<double, 3>(w, {2, 5, 8}), g);
    REQUIRE(d.d_context.shape() == context.shape());
    auto loss = [&] { return gradcheck::weighted_sum(run(), w); };
    gradcheck::require_close("dx", flat_values(d.dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
    gradcheck::require_close("d_context", flat_values(d.d_context),
                             gradcheck::numeric_gradient(context.data(), context.size(), loss));
    // The padding position of the context gets exactly nothing.
    for (std::size_t e = 0; e < 8; ++e) CHECK(d.d_context(1, 1, e) == 0.0);
    std::vector<std::span<const double>> grads;
    g.for_each([&](std::string_view, auto& t) { grads.emplace_back(t.data(), t.size()); });
    std::size_t i = 0;
    layer.for_each_parameter([&](std::string_view name, auto& p) {
      gradcheck::require_close(std::string(name), grads[i++], gradcheck::numeric_gradient(p.data(), p.size(), loss));
    });
    // A cross context is refused by the self-attention backward, and the other way round.
    CHECK_THROWS_WITH(layer.backward(ctx, tensor_from<double, 3>(w, {2, 5, 8}), g), Catch::Contains("cross_backward"));
  }
  nn::attention<p_f64>::saved<double> self;
  (void)layer.forward(x, self);
  auto g = layer.zero_gradients();
  CHECK_THROWS_WITH(layer.cross_backward(self, x, g), Catch::Contains("self-attention forward"));
}

TEMPLATE_TEST_CASE("attention backward under a low-precision policy matches the float64 VJP",
                   "[nn][attention][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16) {
  using P = TestType;
  using C = typename P::compute_type;
  const nn::attention_config cfg{
      .d_model = 16, .n_heads = 4, .n_kv_heads = 2, .causal = true, .query_block = 4, .key_block = 4};
  nn::attention<P> low(cfg);
  nn::attention<p_f64> ref(cfg);
  unsigned seed = 50;
  std::vector<std::vector<double>> params;
  ref.for_each_parameter([&](std::string_view, auto& p) {
    params.push_back(gradcheck::rounded_to<C>(gradcheck::uniform(p.size(), seed++, -0.5, 0.5)));
    for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = params.back()[i];
  });
  std::size_t k = 0;
  low.for_each_parameter([&](std::string_view, auto& p) {
    for (std::size_t i = 0; i < p.size(); ++i) p.data()[i] = static_cast<float>(params[k][i]);
    ++k;
  });
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(2 * 8 * 16, 60));
  const auto wv = gradcheck::rounded_to<C>(gradcheck::uniform(2 * 8 * 16, 61));
  typename nn::attention<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 3>(xv, {2, 8, 16}), ctx);
  auto g = low.zero_gradients();
  auto dx = low.backward(ctx, tensor_from<float, 3>(wv, {2, 8, 16}), g);
  nn::attention<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 3>(xv, {2, 8, 16}), rctx);
  auto rg = ref.zero_gradients();
  auto rdx = ref.backward(rctx, tensor_from<double, 3>(wv, {2, 8, 16}), rg);
  // Chained roundings to C: q, k, v (one each), the attended heads O, dO = dy·woᵀ, dq/dk/dv before the
  // projections' GEMMs: about six roundings of u_C on every path, each amplified by at most the softmax's
  // sensitivity (O(1) for these O(1) scores). Bound: 16 u_C in relative L2.
  const double bound = 16 * layer_tests::unit_roundoff<C>();
  CHECK(gradcheck::relative_l2(std::span<const float>(dx.data(), dx.size()), flat_values(rdx)) <= bound);
  std::vector<std::span<const float>> lows;
  g.for_each([&](std::string_view, auto& t) { lows.emplace_back(t.data(), t.size()); });
  std::size_t i = 0;
  rg.for_each([&](std::string_view name, auto& t) {
    INFO(name);
    CHECK(gradcheck::relative_l2(lows[i++], std::span<const double>(t.data(), t.size())) <= bound);
  });
}

TEST_CASE("attention backward adds, walks names in order and rejects what does not fit", "[nn][attention][backward]") {
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .causal = true};
  auto layer = random_layer(cfg, 70, nn::use_bias::yes);
  auto x = tensor_from<double, 3>(gradcheck::uniform(3 * 8, 71), {1, 3, 8});
  auto dy = tensor_from<double, 3>(gradcheck::uniform(3 * 8, 72), {1, 3, 8});
  nn::attention<p_f64>::saved<double> ctx;
  (void)layer.forward(x, ctx);
  auto once = layer.zero_gradients();
  (void)layer.backward(ctx, dy, once);
  auto twice = layer.zero_gradients();
  (void)layer.backward(ctx, dy, twice);
  (void)layer.backward(ctx, dy, twice);
  CHECK(twice.wq.kernel(1, 1) == Approx(2 * once.wq.kernel(1, 1)).epsilon(1e-14));
  CHECK(twice.wo.kernel(2, 3) == Approx(2 * once.wo.kernel(2, 3)).epsilon(1e-14));
  std::vector<std::string> params, grads;
  layer.for_each_parameter([&](std::string_view n, auto&) { params.emplace_back(n); });
  once.for_each([&](std::string_view n, auto&) { grads.emplace_back(n); });
  CHECK(params == std::vector<std::string>{"wq.kernel", "wq.bias", "wk.kernel", "wk.bias", "wv.kernel", "wv.bias",
                                           "wo.kernel", "wo.bias"});
  CHECK(grads == params);
  auto wrong_rows = tensor_from<double, 3>(gradcheck::uniform(4 * 8, 73), {1, 4, 8});
  CHECK_THROWS_WITH(layer.backward(ctx, wrong_rows, once), Catch::Contains("4 rows") && Catch::Contains("had 3"));
  auto wrong_features = tensor_from<double, 3>(gradcheck::uniform(3 * 4, 74), {1, 3, 4});
  CHECK_THROWS_WITH(layer.backward(ctx, wrong_features, once), Catch::Contains("expects 8"));
  auto no_bias = nn::attention<p_f64>(cfg, nn::use_bias::no).zero_gradients();
  CHECK_THROWS_WITH(layer.backward(ctx, dy, no_bias), Catch::Contains("grads.bias"));
}

}  // namespace attention_training_test
