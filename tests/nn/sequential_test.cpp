// Tests of nn::sequential (nn/sequential.hpp): forward and backward bit for bit the layers chained by
// hand under a bfloat16-compute policy, backward against float64 central differences (every parameter
// and dx), the walks' names (index and given), the gradients as a tree, the constructor's errors.
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/sequential.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"
#include "support/error_message.hpp"

namespace sequential_test {

namespace nn = mixprec::nn;
using gradcheck::tensor_from;
using test_support::says;

namespace {

/// dense [in -> 6], layer_norm [6], a GELU feed_forward [6 -> 8 -> 6], dense [6 -> 3], from `seed`.
template <class P>
auto make_model(std::size_t in, unsigned seed) {
  std::mt19937 rng(seed);
  auto first = nn::dense<P>(in, 6, rng);
  auto norm = nn::layer_norm<P>(6);
  auto ffn = nn::feed_forward<P>::init(nn::ffn_activation::gelu, 6, 8, rng, nn::use_bias::yes);
  auto last = nn::dense<P>(6, 3, rng);
  gradcheck::fill_parameters(norm, seed + 1, 0.5, 1.5);
  return nn::sequential{std::move(first), std::move(norm), std::move(ffn), std::move(last)};
}

/// The bits of a container's elements.
template <class A>
std::vector<float> values(const A& a) {
  std::vector<float> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = static_cast<float>(a.data()[i]);
  return out;
}

}  // namespace

TEST_CASE("sequential: forward and backward are the layers chained by hand, bit for bit", "[nn][sequential]") {
  using P = layer_tests::p_c_bf16;
  auto model = make_model<P>(5, 7);
  const auto x = tensor_from<float>(gradcheck::uniform(4 * 5, 11), std::array<std::size_t, 2>{4, 5});
  const auto dy = tensor_from<float>(gradcheck::uniform(4 * 3, 12), std::array<std::size_t, 2>{4, 3});

  decltype(model)::saved<float> ctx;
  const auto y = model.forward(x, ctx);
  auto grads = model.zero_gradients();
  const auto dx = model.backward(ctx, dy, grads);

  const auto& l0 = model.layer<0>();
  const auto& l1 = model.layer<1>();
  const auto& l2 = model.layer<2>();
  const auto& l3 = model.layer<3>();
  nn::dense<P>::saved<float> c0;
  nn::layer_norm<P>::saved<float> c1;
  nn::feed_forward<P>::saved<float> c2;
  nn::dense<P>::saved<float> c3;
  const auto h0 = l0.forward(x, c0);
  const auto h1 = l1.forward(h0, c1);
  const auto h2 = l2.forward(h1, c2);
  const auto y_hand = l3.forward(h2, c3);
  CHECK(values(y) == values(y_hand));
  CHECK(values(model(x)) == values(y_hand));

  auto g0 = l0.zero_gradients();
  auto g1 = l1.zero_gradients();
  auto g2 = l2.zero_gradients();
  auto g3 = l3.zero_gradients();
  const auto dx_hand = l0.backward(c0, l1.backward(c1, l2.backward(c2, l3.backward(c3, dy, g3), g2), g1), g0);
  CHECK(values(dx) == values(dx_hand));
  CHECK(values(std::get<0>(grads.layers).kernel) == values(g0.kernel));
  CHECK(values(*std::get<1>(grads.layers).scale) == values(*g1.scale));
  CHECK(values(std::get<2>(grads.layers).w1.kernel) == values(g2.w1.kernel));
  CHECK(values(*std::get<3>(grads.layers).bias) == values(*g3.bias));
}

TEST_CASE("sequential: backward matches float64 central differences", "[nn][sequential][gradcheck]") {
  using P = layer_tests::p_f64;
  auto model = make_model<P>(5, 3);
  auto x = tensor_from<double>(gradcheck::uniform(3 * 5, 21), std::array<std::size_t, 2>{3, 5});
  const auto w = gradcheck::uniform(3 * 3, 22);
  const auto dy = tensor_from<double>(w, std::array<std::size_t, 2>{3, 3});

  decltype(model)::saved<double> ctx;
  (void)model.forward(x, ctx);
  auto grads = model.zero_gradients();
  const auto dx = model.backward(ctx, dy, grads);

  auto loss = [&] {
    model.for_each_parameter([](std::string_view, auto&) {});  // drop any prepared weights
    return gradcheck::weighted_sum(model(x), w);
  };
  gradcheck::require_close("dx", gradcheck::flat_values(dx), gradcheck::numeric_gradient(x.data(), x.size(), loss));
  std::size_t checked = 0;
  nn::for_each_parameter(model, grads, [&](std::string_view name, auto& p, const auto& g) {
    gradcheck::require_close(std::string(name), gradcheck::flat_values(g),
                             gradcheck::numeric_gradient(p.data(), p.size(), loss));
    ++checked;
  });
  CHECK(checked == 2 + 2 + 4 + 2);  // dense, layer_norm, feed_forward with biases, dense
}

TEST_CASE("sequential: the walks name each tensor <layer>.<name>", "[nn][sequential]") {
  using P = layer_tests::p_f32;
  auto model = make_model<P>(5, 1);
  std::vector<std::string> params;
  model.for_each_parameter([&](const auto& name, const auto&) { params.emplace_back(name); });
  CHECK(params == std::vector<std::string>{"0.kernel", "0.bias", "1.scale", "1.bias", "2.w1.kernel", "2.w1.bias",
                                           "2.w2.kernel", "2.w2.bias", "3.kernel", "3.bias"});
  std::vector<std::string> grads;
  model.zero_gradients().for_each([&](const auto& name, const auto&) { grads.emplace_back(name); });
  CHECK(grads == params);

  std::mt19937 rng(0);
  nn::sequential named{std::array<std::string, 2>{"fc", "head"}, nn::dense<P>(4, 4, rng), nn::dense<P>(4, 2, rng)};
  std::vector<std::string> names;
  named.for_each_parameter([&](const auto& name, const auto&) { names.emplace_back(name); });
  CHECK(names == std::vector<std::string>{"fc.kernel", "fc.bias", "head.kernel", "head.bias"});
}

TEST_CASE("sequential: the gradients are a tree, zeroed in place", "[nn][sequential][tree]") {
  using P = layer_tests::p_f32;
  auto model = make_model<P>(5, 2);
  const auto x = tensor_from<float>(gradcheck::uniform(2 * 5, 31), std::array<std::size_t, 2>{2, 5});
  decltype(model)::saved<float> ctx;
  auto y = model.forward(x, ctx);
  auto grads = model.zero_gradients();
  (void)model.backward(ctx, y, grads);
  CHECK(mixprec::all_finite(grads));
  const float* kernel = std::get<0>(grads.layers).kernel.data();
  CHECK(kernel[0] != 0.0f);
  grads.zero();
  CHECK(std::get<0>(grads.layers).kernel.data() == kernel);  // same buffer
  bool all_zero = true;
  grads.for_each([&](std::string_view, const auto& g) {
    for (std::size_t i = 0; i < g.size(); ++i) all_zero = all_zero && g.data()[i] == 0.0f;
  });
  CHECK(all_zero);
  std::get<2>(grads.layers).w2.kernel(0, 0) = std::numeric_limits<float>::infinity();
  CHECK_FALSE(mixprec::all_finite(grads));
}

TEST_CASE("parameter_spans: a model's parameters as a tree", "[nn][sequential][tree]") {
  using P = layer_tests::p_f32;
  auto model = make_model<P>(5, 6);
  auto params = nn::parameter_spans(model);
  REQUIRE(params.size() == 10);
  CHECK(params[0].data() == model.layer<0>().kernel().data());
  CHECK(mixprec::all_finite(params));
  const auto halves = mixprec::tree_map([](float v) { return mixprec::bfloat16(v); }, params);
  static_assert(std::is_same_v<decltype(halves), const std::vector<std::vector<mixprec::bfloat16>>>);
  CHECK(float(halves[1][0]) == float(mixprec::bfloat16(model.layer<0>().bias()->data()[0])));
  params[0][0] = std::numeric_limits<float>::quiet_NaN();  // writes the parameter itself
  CHECK_FALSE(mixprec::all_finite(nn::parameter_spans(model)));
  CHECK(std::isnan(model.layer<0>().kernel()(0, 0)));
  CHECK_THROWS_MATCHES((nn::parameter_spans<decltype(model), double>(model)), std::invalid_argument,
                       says({"nn::parameter_spans: parameter \"0.kernel\" has another element type"}));
}

namespace {
/// A hand-written model whose walk repeats a name.
struct repeated_name {
  using policy_type = layer_tests::p_f32;
  xt::xtensor<float, 1> a = xt::zeros<float>({2}), b = xt::zeros<float>({2});
  template <class F>
  void for_each_parameter(F&& f) {
    f(std::string_view("w"), a);
    f(std::string_view("w"), b);
  }
};
}  // namespace

TEST_CASE("named_parameters and named_gradients: trees keyed by dotted name", "[nn][sequential][tree]") {
  using P = layer_tests::p_f32;
  auto model = make_model<P>(5, 6);
  auto grads = model.zero_gradients();
  float next = 0.25f;
  grads.for_each([&](std::string_view, auto& g) {
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = (next += 0.5f);
  });
  auto params = nn::named_parameters(model);
  const auto named = nn::named_gradients(grads);
  REQUIRE(params.size() == 10);
  CHECK(params.at("0.kernel").data() == model.layer<0>().kernel().data());
  std::vector<std::string> param_keys, grad_keys;
  for (const auto& [k, v] : params) param_keys.push_back(k);
  for (const auto& [k, v] : named) grad_keys.push_back(k);
  CHECK(param_keys == grad_keys);
  // Paired by name: an SGD step as a tree_map over the two maps, against the walk zipped by hand.
  const auto stepped = mixprec::tree_map([](float p, float g) { return p - 0.5f * g; }, params, named);
  static_assert(std::is_same_v<decltype(stepped), const std::map<std::string, std::vector<float>>>);
  std::size_t checked = 0;
  nn::for_each_parameter(model, grads, [&](std::string_view name, const auto& p, const auto& g) {
    const auto& s = stepped.at(std::string(name));
    REQUIRE(s.size() == p.size());
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(s[i] == p.data()[i] - 0.5f * g.data()[i]);
    ++checked;
  });
  CHECK(checked == 10);
  params.at("2.w1.kernel")[3] = std::numeric_limits<float>::infinity();  // writes the parameter itself
  CHECK_FALSE(mixprec::all_finite(nn::named_parameters(model)));
  CHECK_THROWS_MATCHES((nn::named_gradients<double>(grads)), std::invalid_argument,
                       says({"nn::named_gradients: gradient \"0.kernel\" has another element type"}));

  repeated_name bad;
  CHECK_THROWS_MATCHES(nn::named_parameters(bad), std::invalid_argument,
                       says({"nn::named_parameters: two parameters are named \"w\""}));
}

TEST_CASE("sequential: names that are empty, dotted or repeated are refused", "[nn][sequential][errors]") {
  using P = layer_tests::p_f32;
  std::mt19937 rng(0);
  using model = nn::sequential<nn::dense<P>, nn::dense<P>>;
  CHECK_THROWS_MATCHES(model(std::array<std::string, 2>{"a", "a"}, nn::dense<P>(2, 2, rng), nn::dense<P>(2, 2, rng)),
                       std::invalid_argument, says({"nn::sequential: layers 0 and 1 are both named \"a\""}));
  CHECK_THROWS_MATCHES(model(std::array<std::string, 2>{"a.b", "c"}, nn::dense<P>(2, 2, rng), nn::dense<P>(2, 2, rng)),
                       std::invalid_argument, says({"layer 0's name \"a.b\" must be non-empty and hold no '.'"}));
  CHECK_THROWS_MATCHES(model(std::array<std::string, 2>{"a", ""}, nn::dense<P>(2, 2, rng), nn::dense<P>(2, 2, rng)),
                       std::invalid_argument, says({"layer 1's name \"\""}));
}

TEST_CASE("sequential: a layer's shape error comes through forward", "[nn][sequential][errors]") {
  using P = layer_tests::p_f32;
  auto model = make_model<P>(5, 4);
  const auto x = tensor_from<float>(gradcheck::uniform(2 * 4, 41), std::array<std::size_t, 2>{2, 4});
  decltype(model)::saved<float> ctx;
  CHECK_THROWS_MATCHES((void)model.forward(x, ctx), std::invalid_argument, says({"dense"}));
}

}  // namespace sequential_test
