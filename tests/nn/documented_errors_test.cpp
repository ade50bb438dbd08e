// The error audit of the layers (issue 12, "Every public entry point documents what it throws; a test
// covers each documented error"): one test case per header of include/mixprec/nn/, one section per
// documented error. Each section triggers the error and checks the exception's type and a distinctive
// part of its message (the layer, the parameter, the values). Where an empty shape is valid rather than
// an error (zero features), a section says so and checks what it gives. The last test case checks the
// precision claim of rotary.hpp (position 100000) against a long double reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/dot_product.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/group_norm.hpp"
#include "mixprec/nn/kv_cache.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/rotary.hpp"
#include "mixprec/nn/weight_cache.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"
#include "support/error_message.hpp"

namespace documented_errors_test {

namespace nn = mixprec::nn;
using layer_tests::p_f32;

namespace {

using test_support::says;

constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
constexpr double pinf = std::numeric_limits<double>::infinity();

template <class T, std::size_t N>
xt::xtensor<T, N> random_tensor(const std::array<std::size_t, N>& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto t = xt::xtensor<T, N>::from_shape(shape);
  for (auto& v : t) v = static_cast<T>(normal(rng));
  return t;
}

/// A plain float32 product to inject into a dense layer (nn/dot_product.hpp), counting its calls.
class counting_dot : public nn::dot_product {
 public:
  void forward(std::span<const float> x, std::span<const float> kernel, std::span<float> y, nn::dot_shape s) override {
    ++calls;
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t o = 0; o < s.out; ++o) {
        float acc = 0;
        for (std::size_t i = 0; i < s.in; ++i) acc += x[r * s.in + i] * kernel[i * s.out + o];
        y[r * s.out + o] = acc;
      }
    }
  }
  void backward(std::span<const float> x, std::span<const float> dy, std::span<const float> kernel, std::span<float> dx,
                std::span<float> dkernel, nn::dot_shape s) override {
    ++calls;
    std::fill(dx.begin(), dx.end(), 0.0f);
    std::fill(dkernel.begin(), dkernel.end(), 0.0f);
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t o = 0; o < s.out; ++o) {
        for (std::size_t i = 0; i < s.in; ++i) {
          dx[r * s.in + i] += dy[r * s.out + o] * kernel[i * s.out + o];
          dkernel[i * s.out + o] += x[r * s.in + i] * dy[r * s.out + o];
        }
      }
    }
  }
  int calls = 0;
};

}  // namespace

TEST_CASE("dense.hpp: every documented error is thrown, with the shapes in the message", "[nn][errors][dense]") {
  nn::dense<p_f32> layer(random_tensor<float, 2>({3, 4}, 1), xt::xtensor<float, 1>(xt::zeros<float>({4})));
  const auto x = random_tensor<float, 2>({2, 3}, 2);
  SECTION("constructor: a bias without `out` elements") {
    CHECK_THROWS_MATCHES(nn::dense<p_f32>(layer.kernel(), xt::xtensor<float, 1>(xt::zeros<float>({5}))),
                         std::invalid_argument, says({"dense: bias has shape [5]", "the kernel [3, 4] needs [4]"}));
  }
  SECTION("from_weights: a bias without `out` elements") {
    const auto w = random_tensor<double, 2>({4, 3}, 3);  // [out, in]
    const xt::xtensor<double, 1> b = xt::zeros<double>({3});
    CHECK_THROWS_MATCHES(nn::dense<p_f32>::from_weights(w, b, nn::weight_layout::out_in), std::invalid_argument,
                         says({"bias has shape [3]", "needs [4]"}));
    CHECK_NOTHROW(
        nn::dense<p_f32>::from_weights(w, xt::xtensor<double, 1>(xt::zeros<double>({4})), nn::weight_layout::out_in));
  }
  SECTION("operator(): the last axis is not `in`, or x is a scalar") {
    CHECK_THROWS_MATCHES(layer(random_tensor<float, 3>({2, 5, 7}, 4)), std::invalid_argument,
                         says({"dense: input has 7 features (shape [2, 5, 7])", "expects 3", "[3, 4] = [in, out]"}));
    CHECK_THROWS_MATCHES(layer(xt::xarray<float>(1.0f)), std::invalid_argument,
                         says({"dense: input is a scalar (shape [])", "[..., 3]"}));
  }
  SECTION("forward: as operator()") {
    nn::dense<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(layer.forward(random_tensor<float, 2>({2, 4}, 5), ctx), std::invalid_argument,
                         says({"dense: input has 4 features", "expects 3"}));
  }
  SECTION("backward: dy's last axis, its rows, the gradients' shapes, a context of another layer") {
    nn::dense<p_f32>::saved<float> ctx;
    const auto y = layer.forward(x, ctx);
    auto grads = layer.zero_gradients();
    CHECK_THROWS_MATCHES(layer.backward(ctx, random_tensor<float, 2>({2, 5}, 6), grads), std::invalid_argument,
                         says({"dense::backward: input has 5 features", "expects 4"}));
    CHECK_THROWS_MATCHES(layer.backward(ctx, random_tensor<float, 2>({3, 4}, 6), grads), std::invalid_argument,
                         says({"dense::backward: the cotangent has 3 rows but the saved forward had 2"}));
    auto wrong_kernel = grads;
    wrong_kernel.kernel = xt::zeros<float>({4, 3});
    CHECK_THROWS_MATCHES(layer.backward(ctx, y, wrong_kernel), std::invalid_argument,
                         says({"dense::backward: grads.kernel has shape [4, 3]", "parameter has shape [3, 4]"}));
    auto no_bias = grads;
    no_bias.bias.reset();
    CHECK_THROWS_MATCHES(layer.backward(ctx, y, no_bias), std::invalid_argument,
                         says({"dense::backward: grads.bias does not match the layer's bias"}));
    nn::dense<p_f32> wider(5, 4);  // another layer: 5 inputs
    auto wider_grads = wider.zero_gradients();
    CHECK_THROWS_MATCHES(
        wider.backward(ctx, y, wider_grads), std::invalid_argument,
        says({"dense::backward: the saved context holds 6 input values for 2 rows", "the layer has 5 inputs"}));
    CHECK(static_cast<bool>(grads.kernel == xt::zeros<float>({3, 4})));  // nothing was added
  }
  SECTION("backward_accumulate: sizes that do not match the saved forward") {
    nn::dense<p_f32>::saved<float> ctx;
    (void)layer.forward(x, ctx);
    auto grads = layer.zero_gradients();
    std::vector<float> dy(8), dx(6), short_dx(5);
    CHECK_NOTHROW(layer.backward_accumulate(ctx, std::span<const float>(dy), grads, std::span<float>(dx)));
    CHECK_THROWS_MATCHES(layer.backward_accumulate(ctx, std::span<const float>(dy), grads, std::span<float>(short_dx)),
                         std::invalid_argument,
                         says({"dense::backward_accumulate: dy has 8 and dx 5 elements", "need 8 and 6"}));
  }
  SECTION("project: x or y not rows x in and rows x out, with and without an injected product") {
    std::vector<float> x5(5), y8(8);
    CHECK_THROWS_MATCHES(layer.project<float>(std::span<const float>(x5), 2, std::span<float>(y8)),
                         std::invalid_argument, says({"kernels::matmul: a has 5"}));
    auto dot = std::make_shared<counting_dot>();
    layer.set_dot(dot);
    CHECK_THROWS_MATCHES(layer.project<float>(std::span<const float>(x5), 2, std::span<float>(y8)),
                         std::invalid_argument, says({"dense: x has 5 and y 8 elements", "need 6 and 8"}));
    CHECK(dot->calls == 0);  // checked before the product is called (dot_product.hpp's contract)
  }
  SECTION("set_dot: a complex input with an injected product") {
    layer.set_dot(std::make_shared<counting_dot>());
    const auto xc = xt::xtensor<std::complex<float>, 2>::from_shape({2, 3});
    CHECK_THROWS_MATCHES(layer(xc), std::invalid_argument,
                         says({"dense: an injected dot_product works on real values", "set_dot(nullptr)"}));
  }
  SECTION("zero in or out features: an empty shape, not an error") {
    nn::dense<p_f32> no_inputs(0, 3);  // y = bias: an empty sum
    no_inputs.bias()->fill(2.0f);
    nn::dense<p_f32>::saved<float> ctx;
    const auto y = no_inputs.forward(xt::xtensor<float, 2>::from_shape({2, 0}), ctx);
    CHECK(static_cast<bool>(y == xt::xtensor<float, 2>{{2, 2, 2}, {2, 2, 2}}));
    auto grads = no_inputs.zero_gradients();
    const auto dx = no_inputs.backward(ctx, xt::xtensor<float, 2>(xt::ones<float>({2, 3})), grads);
    CHECK(dx.shape()[0] == 2);
    CHECK(dx.size() == 0);
    CHECK(static_cast<bool>(*grads.bias == xt::xtensor<float, 1>{2, 2, 2}));
    nn::dense<p_f32> no_outputs(3, 0);
    CHECK(no_outputs(x).size() == 0);
  }
}

TEST_CASE("embedding.hpp: every documented error is thrown, naming the id, its index and the vocabulary",
          "[nn][errors][embedding]") {
  const auto table = random_tensor<float, 2>({10, 4}, 11);
  const auto emb = nn::embedding<p_f32>::from_table(table);
  SECTION("operator(): an id below 0 or at least vocab, for every container and id type") {
    CHECK_THROWS_MATCHES(emb(xt::xtensor<std::int32_t, 2>{{1, 2, 3}, {4, 5, -1}}), std::out_of_range,
                         says({"embedding: id -1 at index [1, 2]", "vocabulary of 10 ids (valid ids are 0 to 9)"}));
    CHECK_THROWS_MATCHES(emb(xt::xarray<std::uint64_t>{0, 10}), std::out_of_range,
                         says({"embedding: id 10 at index [1]"}));
    std::vector<std::int64_t> buffer{3, 99};
    CHECK_THROWS_MATCHES(
        emb(xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 1>{2})),
        std::out_of_range, says({"id 99 at index [1]"}));
    CHECK_THROWS_MATCHES(emb(xt::xtensor<mixprec::int4, 1>{mixprec::int4(-3)}), std::out_of_range,
                         says({"id -3 at index [0]"}));
    const nn::embedding<p_f32> empty(0, 4);
    CHECK_THROWS_MATCHES(empty(xt::xtensor<int, 1>{0}), std::out_of_range,
                         says({"vocabulary of 0 ids (valid ids are 0 to none)"}));
  }
  SECTION("forward: as operator()") {
    nn::embedding<p_f32>::saved ctx;
    CHECK_THROWS_MATCHES(emb.forward(xt::xtensor<int, 1>{12}, ctx), std::out_of_range, says({"id 12"}));
  }
  SECTION("backward: dy's features and rows, the gradient's shape, ids of another layer's context") {
    nn::embedding<p_f32>::saved ctx;
    const auto h = emb.forward(xt::xtensor<int, 1>{1, 9, 1}, ctx);
    auto grads = emb.zero_gradients();
    CHECK_THROWS_MATCHES(emb.backward(ctx, random_tensor<float, 2>({3, 5}, 12), grads), std::invalid_argument,
                         says({"embedding::backward: input has 5 features", "expects 4"}));
    CHECK_THROWS_MATCHES(emb.backward(ctx, random_tensor<float, 2>({2, 4}, 12), grads), std::invalid_argument,
                         says({"embedding::backward: the cotangent has 2 rows but the saved forward had 3"}));
    nn::embedding<p_f32>::gradients wrong{xt::zeros<float>({10, 3})};
    CHECK_THROWS_MATCHES(emb.backward(ctx, h, wrong), std::invalid_argument,
                         says({"embedding::backward: grads.embedding has shape [10, 3]", "[10, 4]"}));
    const nn::embedding<p_f32> smaller(5, 4);  // id 9 is not one of its rows
    auto smaller_grads = smaller.zero_gradients();
    CHECK_THROWS_MATCHES(smaller.backward(ctx, h, smaller_grads), std::invalid_argument,
                         says({"embedding::backward: the saved context holds id 9", "vocabulary has 5 ids"}));
  }
  SECTION("attend, attend_logits, attend_forward: the last axis of x is not features") {
    const auto x = random_tensor<float, 2>({2, 3}, 13);
    CHECK_THROWS_MATCHES(emb.attend(x), std::invalid_argument,
                         says({"embedding::attend: input has 3 features (shape [2, 3])", "expects 4",
                               "table shape [10, 4] = [vocab, features]"}));
    CHECK_THROWS_MATCHES(emb.attend_logits<float>(x), std::invalid_argument, says({"embedding::attend", "expects 4"}));
    nn::embedding<p_f32>::attend_saved<float> ctx;
    CHECK_THROWS_MATCHES(emb.attend_forward<float>(x, ctx), std::invalid_argument,
                         says({"embedding::attend", "expects 4"}));
  }
  SECTION("attend_backward: dlogits' last axis is not vocab, its rows, the gradient's shape") {
    nn::embedding<p_f32>::attend_saved<float> ctx;
    (void)emb.attend_forward<float>(random_tensor<float, 2>({2, 4}, 14), ctx);
    auto grads = emb.zero_gradients();
    CHECK_THROWS_MATCHES(emb.attend_backward(ctx, random_tensor<float, 2>({2, 9}, 15), grads), std::invalid_argument,
                         says({"embedding::attend_backward: input has 9 features", "expects 10 (vocab)"}));
    CHECK_THROWS_MATCHES(emb.attend_backward(ctx, random_tensor<float, 2>({4, 10}, 15), grads), std::invalid_argument,
                         says({"embedding::attend_backward: the cotangent has 4 rows but the saved forward had 2"}));
    nn::embedding<p_f32>::gradients wrong{xt::zeros<float>({4, 10})};
    CHECK_THROWS_MATCHES(emb.attend_backward(ctx, random_tensor<float, 2>({2, 10}, 15), wrong), std::invalid_argument,
                         says({"embedding::attend_backward: grads.embedding has shape [4, 10]"}));
  }
}

TEST_CASE("layer_norm.hpp: every documented error is thrown, naming the layer, the parameter and the value",
          "[nn][errors][layer_norm]") {
  const nn::layer_norm<p_f32> ln(4);
  const auto x = random_tensor<float, 2>({3, 4}, 21);
  SECTION("constructors: epsilon negative or not finite") {
    CHECK_THROWS_MATCHES(nn::layer_norm<p_f32>(4, {.epsilon = -0.5}), std::invalid_argument,
                         says({"layer_norm: epsilon is -0.5 but must be finite and >= 0"}));
    CHECK_THROWS_MATCHES(nn::layer_norm<p_f32>(4, {.epsilon = qnan}), std::invalid_argument,
                         says({"layer_norm: epsilon is nan"}));
    CHECK_THROWS_MATCHES(nn::layer_norm<p_f32>(4, std::nullopt, std::nullopt, pinf), std::invalid_argument,
                         says({"layer_norm: epsilon is inf"}));
    CHECK_THROWS_MATCHES(
        nn::layer_norm<p_f32>::from_params(xt::xtensor<double, 1>{1, 1}, xt::xtensor<double, 1>{0, 0}, -pinf),
        std::invalid_argument, says({"layer_norm: epsilon is -inf"}));
  }
  SECTION("constructors: a scale or bias without `features` elements") {
    const nn::layer_norm<p_f32>::vector_type three = xt::ones<float>({3});
    CHECK_THROWS_MATCHES(nn::layer_norm<p_f32>(4, three, std::nullopt), std::invalid_argument,
                         says({"layer_norm: scale has shape [3] but the layer normalises 4 features"}));
    CHECK_THROWS_MATCHES(nn::layer_norm<p_f32>(4, std::nullopt, three), std::invalid_argument,
                         says({"layer_norm: bias has shape [3]", "expects [4]"}));
    CHECK_THROWS_MATCHES(
        nn::layer_norm<p_f32>::from_params(xt::xtensor<double, 1>{1, 1, 1, 1}, xt::xtensor<double, 1>{0, 0, 0}),
        std::invalid_argument, says({"layer_norm: bias has shape [3]", "4 features"}));
  }
  SECTION("operator(), forward: the last axis is not features") {
    CHECK_THROWS_MATCHES(
        ln(random_tensor<float, 3>({2, 3, 5}, 22)), std::invalid_argument,
        says({"layer_norm: input has 5 features (shape [2, 3, 5])", "expects 4", "scale and bias shape [4]"}));
    nn::layer_norm<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(ln.forward(random_tensor<float, 2>({2, 3}, 22), ctx), std::invalid_argument,
                         says({"layer_norm: input has 3 features"}));
  }
  SECTION("forward_into: x's last axis, out's shape") {
    auto out = xt::xtensor<float, 2>::from_shape({3, 4});
    CHECK_THROWS_MATCHES(ln.forward_into(out, random_tensor<float, 2>({3, 5}, 23)), std::invalid_argument,
                         says({"layer_norm: input has 5 features"}));
    auto short_out = xt::xtensor<float, 2>::from_shape({2, 4});
    CHECK_THROWS_MATCHES(ln.forward_into(short_out, x), std::invalid_argument,
                         says({"layer_norm::forward_into: out has shape [2, 4] but x has shape [3, 4]"}));
  }
  SECTION("backward: dy's features and rows, the gradients, a context of another layer") {
    nn::layer_norm<p_f32>::saved<float> ctx;
    const auto y = ln.forward(x, ctx);
    auto grads = ln.zero_gradients();
    CHECK_THROWS_MATCHES(ln.backward(ctx, random_tensor<float, 2>({3, 3}, 24), grads), std::invalid_argument,
                         says({"layer_norm::backward: input has 3 features", "expects 4"}));
    CHECK_THROWS_MATCHES(ln.backward(ctx, random_tensor<float, 2>({4, 4}, 24), grads), std::invalid_argument,
                         says({"layer_norm::backward: the cotangent has 4 rows but the saved forward had 3"}));
    auto no_scale = grads;
    no_scale.scale.reset();
    CHECK_THROWS_MATCHES(ln.backward(ctx, y, no_scale), std::invalid_argument,
                         says({"layer_norm::backward: the gradients do not match the layer's scale and bias"}));
    const nn::layer_norm<p_f32> wider(6);
    auto wider_grads = wider.zero_gradients();
    CHECK_THROWS_MATCHES(
        wider.backward(ctx, random_tensor<float, 2>({3, 6}, 25), wider_grads), std::invalid_argument,
        says({"layer_norm::backward: the saved context holds 12 normalised values for 3 rows", "6 features"}));
  }
  SECTION("zero features: an empty shape, not an error, forward and backward") {
    const nn::layer_norm<p_f32> none(0);
    nn::layer_norm<p_f32>::saved<float> ctx;
    const auto empty = xt::xtensor<float, 2>::from_shape({2, 0});
    const auto y = none.forward(empty, ctx);
    CHECK(y.shape() == empty.shape());
    auto grads = none.zero_gradients();
    const auto dx = none.backward(ctx, empty, grads);  // used to throw "the cotangent has 2 rows but ... had 0"
    CHECK(dx.shape() == empty.shape());
    CHECK(grads.scale->size() == 0);
  }
}

TEST_CASE("batch_norm.hpp: every documented error is thrown, naming the sizes, and a failed backward adds nothing",
          "[nn][errors][batch_norm]") {
  nn::batch_norm<p_f32> bn(4);
  const auto x = random_tensor<float, 2>({3, 4}, 31);
  SECTION("constructors: zero features, momentum, epsilon, cumulative_average under flax") {
    CHECK_THROWS_MATCHES(nn::batch_norm<p_f32>(0), std::invalid_argument, says({"batch_norm: features is 0"}));
    CHECK_THROWS_MATCHES(nn::batch_norm<p_f32>(4, {.momentum = -0.1}), std::invalid_argument,
                         says({"batch_norm: momentum is -0.1 but must be in [0, 1]"}));
    CHECK_THROWS_MATCHES(nn::batch_norm<p_f32>(4, {.epsilon = qnan}), std::invalid_argument,
                         says({"batch_norm: epsilon is nan"}));
    CHECK_THROWS_MATCHES(nn::batch_norm<p_f32>(4, {.cumulative_average = true}), std::invalid_argument,
                         says({"batch_norm: cumulative_average is PyTorch's momentum=None"}));
    CHECK_THROWS_MATCHES(nn::batch_sync(0), std::invalid_argument,
                         says({"batch_sync: a group needs at least 1 worker"}));
  }
  SECTION("operator(), forward, forward_into: rank, features, out's shape, rows in train mode, const train") {
    CHECK_THROWS_MATCHES(bn(random_tensor<float, 1>({4}, 32), nn::mode::eval), std::invalid_argument,
                         says({"batch_norm: input has shape [4] (rank 1) but batch normalisation needs rank >= 2"}));
    CHECK_THROWS_MATCHES(bn(random_tensor<float, 2>({3, 5}, 32), nn::mode::train), std::invalid_argument,
                         says({"batch_norm: input has 5 features (shape [3, 5])", "expects 4"}));
    auto short_out = xt::xtensor<float, 2>::from_shape({2, 4});
    CHECK_THROWS_MATCHES(bn.forward_into(short_out, x, nn::mode::train), std::invalid_argument,
                         says({"batch_norm::forward_into: out has shape [2, 4] but x has shape [3, 4]"}));
    CHECK_THROWS_MATCHES(bn(xt::xtensor<float, 2>::from_shape({0, 4}), nn::mode::train), std::invalid_argument,
                         says({"batch_norm: mode::train needs at least 1 row", "got 0 (input shape [0, 4])"}));
    nn::batch_norm<p_f32> torch_like(4, {.convention = nn::batch_norm_convention::pytorch});
    CHECK_THROWS_MATCHES(torch_like(random_tensor<float, 2>({1, 4}, 33), nn::mode::train), std::invalid_argument,
                         says({"at least 2 rows", "got 1", "Expected more than 1 value per channel"}));
    CHECK_THROWS_MATCHES(std::as_const(bn)(x, nn::mode::train), std::invalid_argument,
                         says({"batch_norm: mode::train updates the running statistics"}));
    CHECK(bn.batches_tracked() == 0);  // none of these updated the running statistics
  }
  SECTION("backward: dy's shape, the gradients, a context of another layer; nothing added") {
    nn::batch_norm<p_f32>::saved<float> ctx;
    const auto y = bn.forward(x, ctx, nn::mode::train);
    auto grads = bn.zero_gradients();
    CHECK_THROWS_MATCHES(bn.backward(ctx, random_tensor<float, 2>({3, 3}, 34), grads), std::invalid_argument,
                         says({"batch_norm::backward: input has 3 features", "expects 4"}));
    CHECK_THROWS_MATCHES(bn.backward(ctx, random_tensor<float, 2>({4, 4}, 34), grads), std::invalid_argument,
                         says({"batch_norm::backward: the cotangent has 4 rows but the saved forward had 3"}));
    auto no_bias = grads;
    no_bias.bias.reset();
    CHECK_THROWS_MATCHES(bn.backward(ctx, y, no_bias), std::invalid_argument,
                         says({"batch_norm::backward: the gradients do not match the layer's scale and bias"}));
    nn::batch_norm<p_f32> wider(6);
    auto wider_grads = wider.zero_gradients();
    CHECK_THROWS_MATCHES(wider.backward(ctx, random_tensor<float, 2>({2, 6}, 35), wider_grads), std::invalid_argument,
                         says({"batch_norm::backward: the saved context holds 4 standard deviations", "6 features"}));
    CHECK(xt::all(xt::equal(*grads.scale, 0.0f)));
    CHECK(xt::all(xt::equal(*wider_grads.bias, 0.0f)));
  }
  SECTION("batch_sync: a worker index outside the group") {
    nn::batch_sync one(1);
    CHECK_THROWS_MATCHES(bn(x, nn::mode::train, {&one, 1}), std::invalid_argument,
                         says({"batch_sync: worker index 1 but the group has 1 workers"}));
  }
}

TEST_CASE("group_norm.hpp: every documented error is thrown, naming the sizes", "[nn][errors][group_norm]") {
  const nn::group_norm<p_f32> gn(6, 3);
  SECTION("constructor: features, groups, epsilon") {
    CHECK_THROWS_MATCHES(nn::group_norm<p_f32>(0, 1), std::invalid_argument, says({"group_norm: features is 0"}));
    CHECK_THROWS_MATCHES(nn::group_norm<p_f32>(6, 4), std::invalid_argument,
                         says({"group_norm: 6 features do not split into 4 groups of equal size (6 % 4 = 2)"}));
    CHECK_THROWS_MATCHES(nn::group_norm<p_f32>(6, 0), std::invalid_argument,
                         says({"group_norm: 6 features do not split into 0 groups", "(0 groups)"}));
    CHECK_THROWS_MATCHES(nn::group_norm<p_f32>(6, 3, {.epsilon = -1.0}), std::invalid_argument,
                         says({"group_norm: epsilon is -1"}));
  }
  SECTION("operator(), forward: rank and features") {
    CHECK_THROWS_MATCHES(gn(random_tensor<float, 1>({6}, 36)), std::invalid_argument,
                         says({"group_norm: input has shape [6] (rank 1) but group normalisation needs rank >= 2"}));
    CHECK_THROWS_MATCHES(gn(random_tensor<float, 3>({2, 2, 4}, 36)), std::invalid_argument,
                         says({"group_norm: input has 4 features (shape [2, 2, 4])", "expects 6", "3 groups"}));
  }
  SECTION("backward: dy's shape, the gradients, a context of another input") {
    nn::group_norm<p_f32>::saved<float> ctx;
    const auto y = gn.forward(random_tensor<float, 3>({2, 2, 6}, 37), ctx);
    auto grads = gn.zero_gradients();
    CHECK_THROWS_MATCHES(gn.backward(ctx, random_tensor<float, 3>({2, 3, 6}, 38), grads), std::invalid_argument,
                         says({"group_norm::backward: the cotangent has 6 rows but the saved forward had 4"}));
    CHECK_THROWS_MATCHES(
        gn.backward(ctx, random_tensor<float, 3>({4, 1, 6}, 38), grads), std::invalid_argument,
        says({"group_norm::backward: the saved context holds 6 group statistics but dy has 4 samples"}));
    auto no_scale = grads;
    no_scale.scale.reset();
    CHECK_THROWS_MATCHES(gn.backward(ctx, y, no_scale), std::invalid_argument,
                         says({"group_norm::backward: the gradients do not match the layer's scale and bias"}));
  }
}

TEST_CASE("rms_norm.hpp: every documented error is thrown, naming the layer, the option and the value",
          "[nn][errors][rms_norm]") {
  const nn::rms_norm<p_f32> norm(4);
  const auto x = random_tensor<float, 2>({3, 4}, 31);
  SECTION("constructors: epsilon negative or not finite, a residual scale not finite and > 0") {
    CHECK_THROWS_MATCHES(nn::rms_norm<p_f32>(4, {.epsilon = -1e-6}), std::invalid_argument,
                         says({"rms_norm: epsilon is -1e-06 but must be finite and >= 0"}));
    CHECK_THROWS_MATCHES(nn::rms_norm<p_f32>(4, {.epsilon = pinf}), std::invalid_argument,
                         says({"rms_norm: epsilon is inf"}));
    for (double scale : {qnan, -pinf, pinf, 0.0, -0.25}) {
      INFO("residual_scale " << scale);
      CHECK_THROWS_MATCHES(
          nn::rms_norm<p_f32>(4, {.residual_scale = scale}), std::invalid_argument,
          says({"rms_norm: residual_scale is " + nn::detail::number_string(scale), "must be finite and > 0"}));
    }
    CHECK_THROWS_MATCHES(nn::rms_norm<p_f32>::from_scale(xt::xtensor<double, 1>{1, 2}, {.epsilon = qnan}),
                         std::invalid_argument, says({"rms_norm: epsilon is nan"}));
  }
  SECTION("operator() and forward, plain and fused: the last axis is not features") {
    CHECK_THROWS_MATCHES(norm(random_tensor<float, 2>({3, 5}, 32)), std::invalid_argument,
                         says({"rms_norm: input has 5 features (shape [3, 5])", "expects 4", "scale shape [4]"}));
    CHECK_THROWS_MATCHES(norm(random_tensor<float, 2>({3, 5}, 32), nn::no_residual), std::invalid_argument,
                         says({"rms_norm: input has 5 features"}));
    const xt::xtensor<float, 2> r5 = xt::zeros<float>({3, 5});
    CHECK_THROWS_MATCHES(norm(random_tensor<float, 2>({3, 5}, 32), r5), std::invalid_argument,
                         says({"rms_norm: input has 5 features"}));
    nn::rms_norm<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(norm.forward(random_tensor<float, 2>({3, 2}, 32), ctx), std::invalid_argument,
                         says({"rms_norm: input has 2 features"}));
    CHECK_THROWS_MATCHES(norm.forward(random_tensor<float, 2>({3, 2}, 32), nn::no_residual, ctx), std::invalid_argument,
                         says({"rms_norm: input has 2 features"}));
  }
  SECTION("fused form: x and the residual of different shapes") {
    const xt::xtensor<float, 2> residual = xt::zeros<float>({2, 4});
    CHECK_THROWS_MATCHES(norm(x, residual), std::invalid_argument,
                         says({"rms_norm: x has shape [3, 4] but the residual has shape [2, 4]"}));
    nn::rms_norm<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(norm.forward(x, residual, ctx), std::invalid_argument,
                         says({"the residual has shape [2, 4]"}));
  }
  SECTION("forward_into, plain and fused: out's or new_residual's shape is not x's") {
    auto out = xt::xtensor<float, 2>::from_shape({3, 4});
    auto bad = xt::xtensor<float, 2>::from_shape({3, 3});
    CHECK_THROWS_MATCHES(norm.forward_into(bad, x), std::invalid_argument,
                         says({"rms_norm::forward_into: out has shape [3, 3] but x has shape [3, 4]"}));
    const xt::xtensor<float, 2> residual = xt::zeros<float>({3, 4});
    CHECK_THROWS_MATCHES(norm.forward_into(out, bad, x, residual), std::invalid_argument,
                         says({"rms_norm::forward_into: new_residual has shape [3, 3]"}));
    CHECK_THROWS_MATCHES(norm.forward_into(bad, out, x, nn::no_residual), std::invalid_argument,
                         says({"rms_norm::forward_into: out has shape [3, 3]"}));
    CHECK_THROWS_MATCHES(norm.forward_into(out, out, x, xt::xtensor<float, 2>(xt::zeros<float>({3, 5}))),
                         std::invalid_argument, says({"the residual has shape [3, 5]"}));
  }
  SECTION("backward (plain): dy's features and rows, a fused context, the gradients, another layer's context") {
    nn::rms_norm<p_f32>::saved<float> ctx;
    const auto y = norm.forward(x, ctx);
    auto grads = norm.zero_gradients();
    CHECK_THROWS_MATCHES(norm.backward(ctx, random_tensor<float, 2>({3, 2}, 33), grads), std::invalid_argument,
                         says({"rms_norm::backward: input has 2 features", "expects 4"}));
    CHECK_THROWS_MATCHES(norm.backward(ctx, random_tensor<float, 2>({1, 4}, 33), grads), std::invalid_argument,
                         says({"rms_norm::backward: the cotangent has 1 rows but the saved forward had 3"}));
    // A rank-0 dy (used to index its shape at -1 and crash before the check).
    CHECK_THROWS_MATCHES(norm.backward(ctx, xt::xtensor<float, 0>(), grads), std::invalid_argument,
                         says({"rms_norm::backward: input is a scalar (shape [])"}));
    nn::rms_norm<p_f32>::gradients none;
    CHECK_THROWS_MATCHES(norm.backward(ctx, y, none), std::invalid_argument,
                         says({"rms_norm::backward: the gradients do not match the layer's scale"}));
    nn::rms_norm<p_f32>::saved<float> fused_ctx;
    (void)norm.forward(x, nn::no_residual, fused_ctx);
    CHECK_THROWS_MATCHES(norm.backward(fused_ctx, y, grads), std::invalid_argument,
                         says({"rms_norm::backward: the context was saved by the fused form"}));
    const nn::rms_norm<p_f32> wider(8);
    auto wider_grads = wider.zero_gradients();
    CHECK_THROWS_MATCHES(
        wider.backward(ctx, random_tensor<float, 2>({3, 8}, 34), wider_grads), std::invalid_argument,
        says({"rms_norm::backward: the saved context holds 12 normalised values for 3 rows", "8 features"}));
  }
  SECTION("backward (fused) and backward_fused: a plain context, dnew_residual's size, dnormed's shape") {
    nn::rms_norm<p_f32>::saved<float> fused_ctx, plain_ctx;
    const auto [h, r] = norm.forward(x, nn::no_residual, fused_ctx);
    (void)norm.forward(x, plain_ctx);
    auto grads = norm.zero_gradients();
    CHECK_THROWS_MATCHES(norm.backward(plain_ctx, h, r, grads), std::invalid_argument,
                         says({"rms_norm::backward: the context was saved by the plain form"}));
    CHECK_THROWS_MATCHES(norm.backward_fused(plain_ctx, h, grads), std::invalid_argument,
                         says({"the context was saved by the plain form"}));
    CHECK_THROWS_MATCHES(norm.backward(fused_ctx, h, xt::xtensor<float, 2>(xt::zeros<float>({2, 4})), grads),
                         std::invalid_argument,
                         says({"rms_norm::backward: dnew_residual has shape [2, 4] but dnormed has shape [3, 4]"}));
    CHECK_THROWS_MATCHES(norm.backward_fused(fused_ctx, random_tensor<float, 2>({3, 5}, 35), grads),
                         std::invalid_argument, says({"rms_norm::backward: input has 5 features"}));
    CHECK_THROWS_MATCHES(norm.backward_fused(fused_ctx, xt::xtensor<float, 0>(), grads), std::invalid_argument,
                         says({"input is a scalar (shape [])"}));
  }
  SECTION("zero features: an empty shape, not an error, in every form") {
    const nn::rms_norm<p_f32> none(0);
    const auto empty = xt::xtensor<float, 2>::from_shape({2, 0});
    nn::rms_norm<p_f32>::saved<float> ctx, fused_ctx;
    const auto y = none.forward(empty, ctx);
    CHECK(y.shape() == empty.shape());
    auto grads = none.zero_gradients();
    CHECK(none.backward(ctx, empty, grads).shape() == empty.shape());  // used to throw "2 rows ... had 0"
    const auto [h, r] = none.forward(empty, nn::no_residual, fused_ctx);
    CHECK(h.shape() == empty.shape());
    CHECK(r.shape() == empty.shape());
    CHECK(none.backward(fused_ctx, empty, r, grads).shape() == empty.shape());
    CHECK(none.backward_fused(fused_ctx, empty, grads).shape() == empty.shape());
  }
}

TEST_CASE("feed_forward.hpp: every documented error is thrown, and a failed backward adds nothing",
          "[nn][errors][feed_forward]") {
  std::mt19937 rng(41);
  const auto ffn = nn::feed_forward<p_f32>::init(nn::ffn_activation::swiglu, 4, 6, rng, nn::use_bias::yes);
  const auto x = random_tensor<float, 2>({3, 4}, 42);
  SECTION("constructor: projections that do not chain, w3 missing, superfluous or of another shape") {
    const nn::dense<p_f32> w1(4, 6), w2(6, 4), w2_bad(5, 4), w3_bad(4, 5);
    CHECK_THROWS_MATCHES(
        nn::feed_forward<p_f32>(nn::ffn_activation::relu, w1, w2_bad), std::invalid_argument,
        says({"feed_forward: w1 has 6 outputs (kernel [4, 6]) but w2 takes 5 inputs (kernel [5, 4])"}));
    CHECK_THROWS_MATCHES(nn::feed_forward<p_f32>(nn::ffn_activation::geglu, w1, w2), std::invalid_argument,
                         says({"feed_forward: geglu is gated and needs w3", "[4, 6]"}));
    CHECK_THROWS_MATCHES(nn::feed_forward<p_f32>(nn::ffn_activation::gelu, w1, w2, w1), std::invalid_argument,
                         says({"feed_forward: gelu is not gated"}));
    CHECK_THROWS_MATCHES(nn::feed_forward<p_f32>(nn::ffn_activation::swiglu, w1, w2, w3_bad), std::invalid_argument,
                         says({"feed_forward: w3 has kernel [4, 5] but w1 has kernel [4, 6]"}));
  }
  SECTION("operator(), forward: the last axis is not in") {
    CHECK_THROWS_MATCHES(ffn(random_tensor<float, 2>({3, 5}, 43)), std::invalid_argument,
                         says({"feed_forward: input has 5 features", "expects 4", "w1 kernel shape [4, 6]"}));
    nn::feed_forward<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(ffn.forward(random_tensor<float, 2>({3, 5}, 43), ctx), std::invalid_argument,
                         says({"feed_forward: input has 5 features"}));
  }
  SECTION("the probed call: as operator(), and what the probe throws") {
    mixprec::diagnostics::recording_probe probe;
    CHECK_THROWS_MATCHES(ffn(random_tensor<float, 2>({3, 5}, 43), probe, "ffn"), std::invalid_argument,
                         says({"feed_forward: input has 5 features"}));
    probe.observe("ffn.hidden", std::vector<double>{1.0});  // the site's dtype is now float64
    CHECK_THROWS_MATCHES(ffn(x, probe, "ffn"), std::invalid_argument,
                         says({"site 'ffn.hidden' was observed as float64 and is now observed as float32"}));
  }
  SECTION("backward: dy's features and rows, a context of another layer, the gradients; nothing is added") {
    nn::feed_forward<p_f32>::saved<float> ctx;
    const auto y = ffn.forward(x, ctx);
    auto grads = ffn.zero_gradients();
    CHECK_THROWS_MATCHES(ffn.backward(ctx, random_tensor<float, 2>({3, 6}, 44), grads), std::invalid_argument,
                         says({"feed_forward::backward: input has 6 features", "w2 kernel shape [6, 4]"}));
    CHECK_THROWS_MATCHES(ffn.backward(ctx, random_tensor<float, 2>({2, 4}, 44), grads), std::invalid_argument,
                         says({"feed_forward::backward: the cotangent has 2 rows but the saved forward had 3"}));
    std::mt19937 rng2(45);
    const auto other = nn::feed_forward<p_f32>::init(nn::ffn_activation::swiglu, 4, 8, rng2, nn::use_bias::yes);
    auto other_grads = other.zero_gradients();
    CHECK_THROWS_MATCHES(other.backward(ctx, y, other_grads), std::invalid_argument,
                         says({"feed_forward::backward: the saved context does not fit this layer",
                               "8 hidden features, activation swiglu"}));
    auto bad_w1 = ffn.zero_gradients();
    bad_w1.w1.kernel = xt::zeros<float>({6, 4});
    CHECK_THROWS_MATCHES(ffn.backward(ctx, y, bad_w1), std::invalid_argument,
                         says({"feed_forward::backward: grads.w1.kernel has shape [6, 4]"}));
    auto bad_bias = ffn.zero_gradients();
    bad_bias.w2.bias.reset();
    CHECK_THROWS_MATCHES(ffn.backward(ctx, y, bad_bias), std::invalid_argument,
                         says({"feed_forward::backward: grads.w2.bias does not match w2's bias"}));
    auto no_w3 = ffn.zero_gradients();
    no_w3.w3.reset();
    CHECK_THROWS_MATCHES(ffn.backward(ctx, y, no_w3), std::invalid_argument,
                         says({"grads.w3 is missing but the layer (swiglu) has a w3"}));
    // "Nothing is added to grads when it throws": w2's gradient (the first computed) is still zero.
    CHECK(static_cast<bool>(no_w3.w2.kernel == xt::zeros<float>({6, 4})));
    CHECK(static_cast<bool>(bad_bias.w1.kernel == xt::zeros<float>({4, 6})));
  }
}

TEST_CASE("attention.hpp: every documented error is thrown, naming both sides", "[nn][errors][attention]") {
  const nn::attention_config cfg{.d_model = 8, .n_heads = 2, .n_kv_heads = 1, .query_block = 2, .key_block = 2};
  std::mt19937 rng(51);
  const auto attn = nn::attention<p_f32>::lecun_normal(cfg, rng);
  const auto x = random_tensor<float, 3>({2, 3, 8}, 52);
  using config = nn::attention_config;
  SECTION("attention_config: every invalid setting, from every constructor") {
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 8}), std::invalid_argument,
                         says({"attention_config: n_heads is 0"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 8, .n_heads = 2, .n_kv_heads = 4}),
                         std::invalid_argument, says({"n_heads = 2 is not a multiple of n_kv_heads = 4"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 9, .n_heads = 2}), std::invalid_argument,
                         says({"head_dim is 0 (= d_model / n_heads) but d_model = 9", "n_heads = 2"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 0, .n_heads = 2, .head_dim = 4}), std::invalid_argument,
                         says({"attention_config: d_model is 0"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 8, .n_heads = 2, .query_block = 0}),
                         std::invalid_argument, says({"query_block = 0 and key_block = 128 must both be positive"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 8, .n_heads = 2, .key_block = 0}),
                         std::invalid_argument, says({"query_block = 64 and key_block = 0 must both be positive"}));
    for (double scale : {qnan, pinf, -pinf}) {
      INFO("scale " << scale);
      CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 8, .n_heads = 2, .scale = scale}),
                           std::invalid_argument, says({"attention_config: scale is not finite"}));
    }
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(config{.d_model = 6, .n_heads = 2, .rotary = nn::rotary_config{}}),
                         std::invalid_argument, says({"head_dim = 3 is odd but rotary embeddings rotate pairs"}));
    CHECK_THROWS_MATCHES(
        nn::attention<p_f32>(config{.d_model = 8, .n_heads = 2, .rotary = nn::rotary_config{.theta = 1.0}}),
        std::invalid_argument, says({"rotary_embedding: theta is 1.000000 but must be a finite number > 1"}));
    std::mt19937 rng2(53);
    CHECK_THROWS_MATCHES(nn::attention<p_f32>::lecun_normal(config{.d_model = 8, .n_heads = 2, .query_block = 0}, rng2),
                         std::invalid_argument, says({"query_block = 0"}));
    const auto w = xt::xtensor<float, 2>::from_shape({8, 8});
    CHECK_THROWS_MATCHES(nn::attention<p_f32>::from_weights(config{.d_model = 8, .n_heads = 2, .key_block = 0}, w, w, w,
                                                            w, nn::weight_layout::in_out),
                         std::invalid_argument, says({"key_block = 0"}));
    const nn::kv_cache<float> cache(1, 1, 4, 1);
    nn::attention_workspace<float> ws;
    CHECK_THROWS_MATCHES(
        nn::scaled_dot_product_attention<float>(std::span<const float>(), cache, 0,
                                                config{.d_model = 8, .n_heads = 2, .n_kv_heads = 1, .scale = qnan},
                                                std::span<float>(), ws),
        std::invalid_argument, says({"scale is not finite"}));
  }
  SECTION("constructors: projections whose kernels do not match the config") {
    const auto w88 = xt::xtensor<float, 2>::from_shape({8, 8});
    const auto w84 = xt::xtensor<float, 2>::from_shape({8, 4});
    CHECK_NOTHROW(nn::attention<p_f32>::from_weights(cfg, w88, w84, w84, w88, nn::weight_layout::in_out));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>::from_weights(cfg, w88, w88, w84, w88, nn::weight_layout::in_out),
                         std::invalid_argument,
                         says({"attention: wk has kernel shape [8, 8] ([in, out]) but the config needs "
                               "[d_model, n_kv_heads * head_dim] = [8, 4]"}));
    CHECK_THROWS_MATCHES(nn::attention<p_f32>(cfg, nn::dense<p_f32>(8, 8), nn::dense<p_f32>(8, 4),
                                              nn::dense<p_f32>(8, 4), nn::dense<p_f32>(8, 4)),
                         std::invalid_argument, says({"attention: wo has kernel shape [8, 4]", "= [8, 8]"}));
  }
  SECTION("operator(): a rank other than 2 or 3, a wrong feature count, a mask of the wrong shape") {
    CHECK_THROWS_MATCHES(attn(xt::xarray<float>::from_shape({8})), std::invalid_argument,
                         says({"attention: input has shape [8] but the layer takes [seq, d_model] or [batch, seq, "
                               "d_model] with d_model = 8"}));
    CHECK_THROWS_MATCHES(attn(xt::xarray<float>::from_shape({1, 1, 2, 8})), std::invalid_argument,
                         says({"input has shape [1, 1, 2, 8]"}));
    CHECK_THROWS_MATCHES(attn(random_tensor<float, 3>({2, 3, 7}, 54)), std::invalid_argument,
                         says({"attention: input has 7 features (shape [2, 3, 7])", "expects 8"}));
    const xt::xtensor<bool, 2> mask = xt::ones<bool>({2, 4});
    CHECK_THROWS_MATCHES(
        attn(x, mask), std::invalid_argument,
        says({"attention: the key padding mask has shape [2, 4] but the input [2, 3, 8] needs [2, 3]"}));
    const xt::xtensor<bool, 1> flat_mask = xt::ones<bool>({3});
    CHECK_THROWS_MATCHES(attn(x, flat_mask), std::invalid_argument, says({"mask has shape [3]", "needs [2, 3]"}));
    nn::attention<p_f32>::saved<float> ctx;
    CHECK_THROWS_MATCHES(attn.forward(x, mask, ctx), std::invalid_argument, says({"mask has shape [2, 4]"}));
  }
  SECTION("the probed call: as operator(), and what the probe throws") {
    mixprec::diagnostics::recording_probe probe;
    CHECK_THROWS_MATCHES(attn(random_tensor<float, 3>({2, 3, 7}, 54), nn::no_key_mask, probe, "attn"),
                         std::invalid_argument, says({"attention: input has 7 features"}));
    probe.observe("attn.context", std::vector<double>{1.0});
    CHECK_THROWS_MATCHES(attn(x, nn::no_key_mask, probe, "attn"), std::invalid_argument,
                         says({"site 'attn.context' was observed as float64 and is now observed as float32"}));
  }
  SECTION("with a cache: another batch size or head shape, a full cache (left unchanged), a huge cache") {
    auto wrong_batch = attn.make_cache<float>(3, 8);
    CHECK_THROWS_MATCHES(attn(x, wrong_batch), std::invalid_argument,
                         says({"attention: the kv_cache has batch 3", "has batch 2"}));
    nn::kv_cache<float> wrong_heads(2, 2, 4, 8);
    CHECK_THROWS_MATCHES(attn(x, wrong_heads), std::invalid_argument,
                         says({"2 kv heads of dimension 4", "the layer 1 kv heads of dimension 4"}));
    auto cache = attn.make_cache<float>(2, 5);
    (void)attn(x, cache);
    const xt::xtensor<bool, 2> mask = xt::ones<bool>({2, 3});
    CHECK_THROWS_MATCHES(attn(x, cache, mask), std::invalid_argument,
                         says({"has 3 tokens but the kv_cache holds 3 of its 5 positions", "clear()"}));
    CHECK(cache.size() == 3);
    CHECK_THROWS_MATCHES(attn(x, cache, xt::xtensor<bool, 2>(xt::ones<bool>({2, 2}))), std::invalid_argument,
                         says({"mask has shape [2, 2]"}));
    constexpr std::size_t huge = std::numeric_limits<std::size_t>::max() / 4;
    CHECK_THROWS_MATCHES((void)attn.make_cache<float>(huge, huge), std::invalid_argument,
                         says({"kv_cache:", "is too large to allocate"}));
  }
  SECTION("backward: dy's features and rows, a context of another layer, the gradients") {
    nn::attention<p_f32>::saved<float> ctx;
    const auto y = attn.forward(x, ctx);
    auto grads = attn.zero_gradients();
    CHECK_THROWS_MATCHES(attn.backward(ctx, random_tensor<float, 3>({2, 3, 4}, 55), grads), std::invalid_argument,
                         says({"attention::backward: input has 4 features", "expects 8 (d_model)"}));
    CHECK_THROWS_MATCHES(attn.backward(ctx, random_tensor<float, 3>({2, 2, 8}, 55), grads), std::invalid_argument,
                         says({"attention::backward: the cotangent has 4 rows but the saved forward had 6"}));
    std::mt19937 rng2(56);
    const auto more_kv = nn::attention<p_f32>::lecun_normal(
        config{.d_model = 8, .n_heads = 2, .n_kv_heads = 2, .query_block = 2, .key_block = 2}, rng2);
    auto more_kv_grads = more_kv.zero_gradients();
    CHECK_THROWS_MATCHES(
        more_kv.backward(ctx, y, more_kv_grads), std::invalid_argument,
        says({"attention::backward: the saved context does not fit this layer", "2 kv heads of dimension 4"}));
    auto bad = attn.zero_gradients();
    bad.wq.kernel = xt::zeros<float>({4, 8});
    CHECK_THROWS_MATCHES(attn.backward(ctx, y, bad), std::invalid_argument,
                         says({"grads.kernel has shape [4, 8] but the parameter has shape [8, 8]"}));
  }
  SECTION("scaled_dot_product_attention: sizes, the cache's heads, more queries than cached positions") {
    nn::kv_cache<float> cache(1, 1, 4, 4);
    std::vector<float> kv(3 * 4, 0.5f);
    cache.append(std::span<const float>(kv), std::span<const float>(kv), 3);
    nn::attention_workspace<float> ws;
    const config c{.d_model = 8, .n_heads = 2, .n_kv_heads = 1};
    std::vector<float> q(2 * 2 * 4), out(q.size()), short_q(5);
    CHECK_NOTHROW(
        nn::scaled_dot_product_attention<float>(std::span<const float>(q), cache, 2, c, std::span<float>(out), ws));
    CHECK_THROWS_MATCHES(nn::scaled_dot_product_attention<float>(std::span<const float>(short_q), cache, 2, c,
                                                                 std::span<float>(out), ws),
                         std::invalid_argument, says({"queries have 5 and out 16 elements", "[1, 2, 2, 4] needs 16"}));
    CHECK_THROWS_MATCHES(nn::scaled_dot_product_attention<float>(std::span<const float>(q), cache, 2,
                                                                 config{.d_model = 8, .n_heads = 2, .n_kv_heads = 2},
                                                                 std::span<float>(out), ws),
                         std::invalid_argument,
                         says({"the cache has 1 kv heads of dimension 4 but the config 2 of dimension 4"}));
    // More queries than cached positions: refused under a causal mask; without one it is cross-attention.
    std::vector<float> q4(4 * 2 * 4), out4(q4.size());
    const config causal{.d_model = 8, .n_heads = 2, .n_kv_heads = 1, .causal = true};
    CHECK_THROWS_MATCHES(nn::scaled_dot_product_attention<float>(std::span<const float>(q4), cache, 4, causal,
                                                                 std::span<float>(out4), ws),
                         std::invalid_argument, says({"4 queries but the cache holds only 3 positions"}));
    CHECK_NOTHROW(
        nn::scaled_dot_product_attention<float>(std::span<const float>(q4), cache, 4, c, std::span<float>(out4), ws));
  }
  SECTION("a score bias that does not fit the call, and a d_bias not shaped as it") {
    using bias = mixprec::kernels::score_bias<float>;
    const std::vector<float> rows(2 * 4);  // [heads, 2 keys - 1] needs 2 x 5 for 3 keys
    CHECK_THROWS_MATCHES(attn(x, nn::no_key_mask, bias::relative(rows, 2)), std::invalid_argument,
                         says({"the score bias has 8 elements but [heads, 2 keys - 1] = [2, 5] needs 10"}));
    const std::vector<float> dense(3 * 2 * 3 * 3);
    CHECK_THROWS_MATCHES(attn(x, nn::no_key_mask, bias::dense(dense, 3, 2)), std::invalid_argument,
                         says({"holds 3 batch rows and 2 heads but the call has 2 and 2"}));
    const std::vector<float> good(2 * 5);
    nn::attention<p_f32>::saved<float> ctx;
    (void)attn.forward(x, nn::no_key_mask, bias::relative(good, 2), ctx);
    auto grads = attn.zero_gradients();
    std::vector<float> d_bias(9);
    CHECK_THROWS_MATCHES(attn.backward(ctx, x, grads, std::span<float>(d_bias)), std::invalid_argument,
                         says({"d_bias (shaped as the forward's bias) has 9 elements", "needs 10"}));
  }
  SECTION("cross-attention: the config, the context, its mask and the cache") {
    const auto context = random_tensor<float, 3>({2, 5, 8}, 53);
    const auto causal_attn =
        nn::attention<p_f32>::lecun_normal(config{.d_model = 8, .n_heads = 2, .causal = true}, rng);
    CHECK_THROWS_MATCHES(causal_attn.cross(x, context, nn::no_key_mask), std::invalid_argument,
                         says({"attention::cross: the layer's config is causal", "causal = false and no rotary"}));
    const auto other_batch = random_tensor<float, 3>({1, 5, 8}, 54);
    CHECK_THROWS_MATCHES(attn.cross(x, other_batch, nn::no_key_mask), std::invalid_argument,
                         says({"x has shape [2, 3, 8] and the context [1, 5, 8]", "the same rank and batch"}));
    const auto narrow = random_tensor<float, 3>({2, 5, 4}, 55);
    CHECK_THROWS_AS(attn.cross(x, narrow, nn::no_key_mask), std::invalid_argument);
    const auto empty = random_tensor<float, 3>({2, 0, 8}, 56);
    CHECK_THROWS_MATCHES(attn.cross(x, empty, nn::no_key_mask), std::invalid_argument, says({"has no positions"}));
    const xt::xtensor<bool, 2> mask = xt::ones<bool>({2, 4});
    CHECK_THROWS_MATCHES(attn.cross(x, context, mask), std::invalid_argument,
                         says({"the context mask has shape [2, 4] but the context [2, 5, 8] needs [2, 5]"}));
    auto small = attn.make_cache<float>(2, 4);
    CHECK_THROWS_MATCHES(attn.fill_context(context, nn::no_key_mask, small), std::invalid_argument,
                         says({"attention::fill_context: the kv_cache has batch 2", "make_cache<In>(2, 5)"}));
    auto unfilled = attn.make_cache<float>(2, 5);
    CHECK_THROWS_MATCHES(attn.cross(x, unfilled), std::invalid_argument, says({"fill it with fill_context"}));
    nn::attention<p_f32>::saved<float> self;
    (void)attn.forward(x, self);
    auto grads = attn.zero_gradients();
    CHECK_THROWS_MATCHES(attn.cross_backward(self, x, grads), std::invalid_argument,
                         says({"saved by a self-attention forward"}));
    nn::attention<p_f32>::saved<float> cross;
    (void)attn.cross_forward(x, context, nn::no_key_mask, cross);
    CHECK_THROWS_MATCHES(attn.backward(cross, x, grads), std::invalid_argument,
                         says({"saved by cross_forward (5 context keys)", "pass it to cross_backward()"}));
  }
}

TEST_CASE("rotary.hpp: every documented error is thrown", "[nn][errors][rotary]") {
  SECTION("constructor: head_dim 0 or odd") {
    CHECK_THROWS_MATCHES(nn::rotary_embedding(0), std::invalid_argument, says({"rotary_embedding: head_dim is 0"}));
    CHECK_THROWS_MATCHES(nn::rotary_embedding(5), std::invalid_argument,
                         says({"rotary_embedding: head_dim is 5", "even, positive head dimension"}));
  }
  SECTION("constructor: theta not finite and > 1") {
    for (double theta : {1.0, 0.5, -10.0, qnan, pinf}) {
      INFO("theta " << theta);
      CHECK_THROWS_MATCHES(nn::rotary_embedding(4, {.theta = theta}), std::invalid_argument,
                           says({"rotary_embedding: theta is", "must be a finite number > 1"}));
    }
  }
  SECTION("apply, apply_inverse: a size that is not a whole number of heads") {
    const nn::rotary_embedding rope(4);
    std::vector<float> v(6);
    CHECK_THROWS_MATCHES(rope.apply(std::span<float>(v), 3), std::invalid_argument,
                         says({"rotary_embedding::apply: the vector has 6 elements", "dimension 4"}));
    std::vector<mixprec::bfloat16> b(7);
    CHECK_THROWS_MATCHES(rope.apply_inverse(std::span<mixprec::bfloat16>(b), 3), std::invalid_argument,
                         says({"the vector has 7 elements"}));
  }
}

TEST_CASE("kv_cache.hpp: every documented error is thrown, and a refused append appends nothing",
          "[nn][errors][kv_cache]") {
  SECTION("constructor: no heads, head dimension 0, a size that overflows") {
    CHECK_THROWS_MATCHES(nn::kv_cache<float>(1, 0, 4, 8), std::invalid_argument,
                         says({"kv_cache: n_kv_heads is 0 and head_dim is 4"}));
    CHECK_THROWS_MATCHES(nn::kv_cache<double>(1, 2, 0, 8), std::invalid_argument, says({"head_dim is 0"}));
    constexpr std::size_t big = std::size_t{1} << 24;
    CHECK_THROWS_MATCHES(nn::kv_cache<mixprec::bfloat16>(big, big, big, 2), std::invalid_argument,
                         says({"kv_cache: [batch 16777216, n_kv_heads 16777216, capacity 2, head_dim 16777216]",
                               "too large to allocate"}));
  }
  SECTION("keys, values, is_valid, validity: out of range") {
    nn::kv_cache<float> cache(2, 2, 4, 8);
    std::vector<float> kv(2 * 3 * 2 * 4);
    cache.append(std::span<const float>(kv), std::span<const float>(kv), 3);
    CHECK_THROWS_MATCHES((void)cache.keys(2, 0), std::out_of_range,
                         says({"kv_cache::keys: (batch row 2, head 0) is outside [2, 2)"}));
    CHECK_THROWS_MATCHES((void)cache.values(0, 2), std::out_of_range,
                         says({"kv_cache::values: (batch row 0, head 2)"}));
    CHECK_THROWS_MATCHES((void)cache.is_valid(0, 3), std::out_of_range,
                         says({"kv_cache::is_valid: (batch row 0, position 3) is outside [2, 3)"}));
    CHECK_THROWS_MATCHES((void)cache.validity(2), std::out_of_range,
                         says({"kv_cache::validity: batch row 2 is outside [0, 2)"}));
  }
  SECTION("append: sizes, the mask's size, no room (then nothing is appended)") {
    nn::kv_cache<float> cache(2, 1, 4, 4);
    std::vector<float> kv3(2 * 3 * 4), kv2(2 * 2 * 4), odd(7);
    CHECK_THROWS_MATCHES(cache.append(std::span<const float>(odd), std::span<const float>(kv3), 3),
                         std::invalid_argument,
                         says({"kv_cache::append: keys have 7 and values 24 elements",
                               "[batch 2, seq 3, n_kv_heads 1, head_dim 4] needs 24"}));
    const bool flags[5] = {true, true, true, true, true};
    CHECK_THROWS_MATCHES(
        cache.append(std::span<const float>(kv3), std::span<const float>(kv3), 3, std::span<const bool>(flags, 5)),
        std::invalid_argument, says({"the validity mask has 5 elements but [batch 2, seq 3] needs 6"}));
    cache.append(std::span<const float>(kv3), std::span<const float>(kv3), 3);
    CHECK_THROWS_MATCHES(cache.append(std::span<const float>(kv2), std::span<const float>(kv2), 2),
                         std::invalid_argument,
                         says({"kv_cache::append: cannot append 2 positions to a cache holding 3 of its 4"}));
    CHECK(cache.size() == 3);
  }
}

TEST_CASE("cross_entropy.hpp: every documented error is thrown, naming the row", "[nn][errors][cross_entropy]") {
  const std::vector<float> logits(2 * 3, 0.5f);
  std::vector<float> dlogits(logits.size());
  const std::vector<std::int32_t> targets{0, 2};
  auto ce = [&](const std::vector<float>& z, std::size_t vocab, const std::vector<std::int32_t>& t,
                std::vector<float>& dz) {
    return nn::softmax_cross_entropy<float>(std::span<const float>(z), vocab, std::span<const std::int32_t>(t),
                                            std::span<float>(dz), 0.5);
  };
  auto loss = [&](std::size_t vocab, const std::vector<std::int32_t>& t) {
    return nn::cross_entropy_loss<float>(std::span<const float>(logits), vocab, std::span<const std::int32_t>(t));
  };
  SECTION("vocab 0") {
    std::vector<float> none;
    CHECK_THROWS_MATCHES(ce(none, 0, {}, none), std::invalid_argument, says({"softmax_cross_entropy: vocab is 0"}));
    CHECK_THROWS_MATCHES(loss(0, targets), std::invalid_argument, says({"vocab is 0"}));
  }
  SECTION("logits that do not make rows x vocab, a dlogits buffer of another size") {
    CHECK_THROWS_MATCHES(ce(logits, 4, targets, dlogits), std::invalid_argument,
                         says({"softmax_cross_entropy: 6 logits do not make 2 rows of 4 classes"}));
    CHECK_THROWS_MATCHES(loss(3, {0}), std::invalid_argument, says({"6 logits do not make 1 rows of 3 classes"}));
    std::vector<float> short_dz(5);
    CHECK_THROWS_MATCHES(ce(logits, 3, targets, short_dz), std::invalid_argument,
                         says({"softmax_cross_entropy: dlogits has 5 elements but the logits have 6"}));
  }
  SECTION("a target outside [0, vocab) that is not ignore_index") {
    for (std::int32_t bad : {-1, 3, -99, -101}) {
      INFO("target " << bad);
      CHECK_THROWS_MATCHES(ce(logits, 3, {0, bad}, dlogits), std::invalid_argument,
                           says({"softmax_cross_entropy: target " + std::to_string(bad) + " of row 1",
                                 "vocabulary of 3 (0 to 2) nor ignore_index (-100)"}));
      CHECK_THROWS_MATCHES(loss(3, {bad, 0}), std::invalid_argument, says({"of row 0"}));
    }
    CHECK_NOTHROW(ce(logits, 3, {nn::ignore_index, 2}, dlogits));
  }
}

TEST_CASE("dot_product.hpp and weight_cache.hpp document no errors: their calls cannot throw",
          "[nn][errors][dot_product][weight_cache]") {
  STATIC_REQUIRE(noexcept(nn::set_weight_cache(true)));
  STATIC_REQUIRE(noexcept(nn::weight_cache_enabled()));
  STATIC_REQUIRE(noexcept(std::declval<nn::dot_product&>().parameters_changed()));
  const bool before = nn::set_weight_cache(false);
  CHECK_FALSE(nn::weight_cache_enabled());
  CHECK_FALSE(nn::set_weight_cache(before));
  CHECK(nn::weight_cache_enabled() == before);
  // The products receive only arrays of the sizes `dot_shape` says (the layer checks before calling):
  // dense's size errors above are thrown before the injected product is called.
}

TEST_CASE("rotary.hpp's precision claim: at positions 65535 and 100000, cos and sin within 2e-11 of long double",
          "[nn][rotary][precision]") {
  // The file comment of rotary.hpp says the angle p theta^(-2i/d) and its cosine and sine are computed
  // in double, within 2e-11 of exact at position 100000, and within 2^-25 + 2e-11 once rounded to
  // float32. Rotating the unit pair (1, 0) gives (cos, sin) exactly, so the rotated values are the
  // cosine and sine the layer uses; the reference computes them in long double (64-bit significand:
  // its own error at these angles is about 1e-14).
  for (const double theta : {10000.0, 500000.0}) {
    for (const std::size_t d : {8u, 64u, 128u}) {
      for (const std::size_t position : {65535u, 100000u}) {
        for (const auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
          const nn::rotary_embedding rope(d, {.layout = layout, .theta = theta});
          std::vector<double> unit(d, 0.0);
          std::vector<float> unit_f(d, 0.0f);
          for (std::size_t i = 0; i < d / 2; ++i) {
            unit[rope.first_of_pair(i)] = 1.0;
            unit_f[rope.first_of_pair(i)] = 1.0f;
          }
          rope.apply(std::span<double>(unit), position);
          rope.apply(std::span<float>(unit_f), position);
          double worst = 0.0, worst_f = 0.0;
          for (std::size_t i = 0; i < d / 2; ++i) {
            const long double angle = static_cast<long double>(position) *
                                      std::pow(static_cast<long double>(theta),
                                               -2.0L * static_cast<long double>(i) / static_cast<long double>(d));
            const long double c = std::cos(angle), s = std::sin(angle);
            const std::size_t a = rope.first_of_pair(i), b = rope.second_of_pair(i);
            worst = std::max(
                {worst, static_cast<double>(std::fabs(unit[a] - c)), static_cast<double>(std::fabs(unit[b] - s))});
            worst_f = std::max({worst_f, static_cast<double>(std::fabs(unit_f[a] - c)),
                                static_cast<double>(std::fabs(unit_f[b] - s))});
          }
          INFO("theta " << theta << ", head_dim " << d << ", position " << position << ": worst " << worst
                        << ", float32 " << worst_f);
          CHECK(worst <= 2e-11);
          CHECK(worst_f <= std::ldexp(1.0, -25) + 2e-11);
        }
      }
    }
  }
}

}  // namespace documented_errors_test
