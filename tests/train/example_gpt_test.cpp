// Tests of the mixprec-train GPT (examples/train/gpt.hpp) as a whole: the model's backward pass (every
// layer's VJP chained, residual cotangents routed by hand, the tied embedding) against float64 central
// differences of the model's loss, the parameter and gradient trees' names, and that splitting a batch
// between workers (or micro-batches) and adding the gradients gives the whole batch's gradients.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "../../examples/train/gpt.hpp"
#include "support/gradcheck.hpp"

namespace example_gpt_test {

namespace {

using train_example::gpt;
using train_example::gpt_config;
using P64 = mixprec::policy<double>;

const gpt_config tiny{
    .vocab = 5, .block = 4, .n_layer = 2, .n_head = 2, .n_embd = 8, .ln_epsilon = 1e-5, .init_std = 0.3};

xt::xtensor<std::int32_t, 2> ids_of(const std::vector<std::int32_t>& v, std::size_t rows, std::size_t cols) {
  xt::xtensor<std::int32_t, 2> t = xt::xtensor<std::int32_t, 2>::from_shape({rows, cols});
  for (std::size_t i = 0; i < v.size(); ++i) t.data()[i] = v[i];
  return t;
}

/// d(mean cross-entropy)/d(parameters) of the model by its backward pass.
template <class P>
typename gpt<P>::gradients analytic_gradients(const gpt<P>& model, const xt::xtensor<std::int32_t, 2>& x,
                                              const xt::xtensor<std::int32_t, 2>& y, double seed) {
  using V = typename gpt<P>::value_type;
  typename gpt<P>::saved ctx;
  auto logits = model.forward(x, ctx);
  xt::xtensor<V, 3> dlogits = xt::xtensor<V, 3>::from_shape(logits.shape());
  (void)mixprec::nn::softmax_cross_entropy(logits, std::span<const std::int32_t>(y.data(), y.size()), dlogits, seed);
  auto g = model.zero_gradients();
  model.backward(ctx, dlogits, g);
  return g;
}

}  // namespace

TEST_CASE("the GPT's backward pass matches float64 central differences of its loss for every parameter",
          "[train][example][gpt]") {
  std::mt19937_64 rng(7);
  auto model = make_gpt<P64>(tiny, rng);
  const auto x = ids_of({0, 3, 1, 4, 2, 2, 0, 1}, 2, 4);
  const auto y = ids_of({3, 1, 4, 2, 2, 0, 1, 3}, 2, 4);
  auto g = analytic_gradients(model, x, y, 1.0 / 8.0);
  std::vector<std::span<const double>> grads;
  g.for_each([&](const std::string&, auto& t) { grads.emplace_back(t.data(), t.size()); });
  std::size_t i = 0;
  std::size_t checked = 0;
  model.for_each_parameter([&](const std::string& name, auto& p) {
    auto loss = [&] { return model.loss(x, y); };
    gradcheck::require_close(name, grads[i++], gradcheck::numeric_gradient(p.data(), p.size(), loss));
    checked += p.size();
  });
  CHECK(checked == mixprec::nn::parameter_count(model));
  CHECK(i == grads.size());
}

TEST_CASE("the GPT's parameters and gradients walk the same dotted names", "[train][example][gpt]") {
  std::mt19937_64 rng(1);
  auto model = make_gpt<mixprec::mixed_bfloat16>(tiny, rng);
  std::vector<std::string> params, grads;
  model.for_each_parameter([&](const std::string& name, auto&) { params.push_back(name); });
  auto g = model.zero_gradients();
  g.for_each([&](const std::string& name, auto& t) {
    grads.push_back(name);
    static_assert(std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, float>,
                  "parameter gradients are float32");
  });
  CHECK(params == grads);
  REQUIRE(params.size() == 2 + 2 * (1 + 4 + 1 + 2) + 1);
  CHECK(params.front() == "wte.embedding");
  CHECK(params[2] == "layers.0.ln_1.scale");
  CHECK(params[3] == "layers.0.attn.wq.kernel");
  CHECK(params[9] == "layers.0.mlp.w2.kernel");
  CHECK(params.back() == "ln_f.scale");
}

TEST_CASE("gradients of two halves of a batch add up to the whole batch's (data parallel, accumulation)",
          "[train][example][gpt]") {
  std::mt19937_64 rng(3);
  auto model = make_gpt<mixprec::full_precision>(tiny, rng);
  const auto x = ids_of({0, 3, 1, 4, 2, 2, 0, 1, 4, 4, 3, 0, 1, 2, 3, 4}, 4, 4);
  const auto y = ids_of({3, 1, 4, 2, 2, 0, 1, 3, 4, 3, 0, 1, 2, 3, 4, 0}, 4, 4);
  auto whole = analytic_gradients(model, x, y, 1.0 / 16.0);
  auto top = analytic_gradients(model, ids_of({0, 3, 1, 4, 2, 2, 0, 1}, 2, 4), ids_of({3, 1, 4, 2, 2, 0, 1, 3}, 2, 4),
                                1.0 / 16.0);
  auto bottom = analytic_gradients(model, ids_of({4, 4, 3, 0, 1, 2, 3, 4}, 2, 4),
                                   ids_of({4, 3, 0, 1, 2, 3, 4, 0}, 2, 4), 1.0 / 16.0);
  std::vector<std::span<const float>> a, b, c;
  whole.for_each([&](const std::string&, auto& t) { a.emplace_back(t.data(), t.size()); });
  top.for_each([&](const std::string&, auto& t) { b.emplace_back(t.data(), t.size()); });
  bottom.for_each([&](const std::string&, auto& t) { c.emplace_back(t.data(), t.size()); });
  for (std::size_t k = 0; k < a.size(); ++k) {
    double num = 0, den = 0;
    for (std::size_t e = 0; e < a[k].size(); ++e) {
      const double d = static_cast<double>(a[k][e]) - (static_cast<double>(b[k][e]) + static_cast<double>(c[k][e]));
      num += d * d;
      den += static_cast<double>(a[k][e]) * static_cast<double>(a[k][e]);
    }
    // Float32 sums in another order: a relative difference of a few float32 roundings.
    CHECK(std::sqrt(num / den) <= 1e-5);
  }
}

}  // namespace example_gpt_test
