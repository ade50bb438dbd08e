// backward_into writes a layer's input cotangent dx into the caller's own buffer (issue 37): an
// xt::xtensor, an xt::adapt over a std::vector, an Eigen::Map and an Eigen::Ref with RowMajor storage,
// for dense, feed_forward (plain and gated), layer_norm, rms_norm, attention and transformer_block under
// c=bf16, each with the bits of the value-returning backward (dx and every gradient); a buffer of the
// wrong shape is refused with a message before any gradient is touched. The compile-time refusal of a dx
// of another element type is in tests/compile_fail.
#include <array>
#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xadapt.hpp>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/transformer_block.hpp"
#include "support/error_message.hpp"

namespace backward_into_test {

namespace nn = mixprec::nn;
using test_support::says;
using P = mixprec::mixed_bfloat16;
using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

constexpr std::size_t rows = 6;  // batch 2 × sequence 3

xt::xtensor<float, 3> random_x(std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  xt::xtensor<float, 3> x({2, 3, cols});
  for (auto& v : x) v = u(rng);
  return x;
}

template <class A>
std::vector<float> bits_of(const A& a) {
  return std::vector<float>(a.data(), a.data() + a.size());
}

/// Every gradient of `g`, in walk order.
template <class G>
std::vector<std::vector<float>> gradients_of(const G& g) {
  std::vector<std::vector<float>> out;
  g.for_each([&](std::string_view, const auto& t) { out.push_back(bits_of(t)); });
  return out;
}

/// True when `a` and `b` hold the same bits (so -0 and +0, and NaN payloads, are told apart).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Runs `layer` forward on x [2, 3, in], then backward with a random dy [2, 3, out] into every kind of
/// buffer; each must hold the value-returning backward's dx, with the same gradients. Then a dx of the
/// wrong shape: the message, and no gradient touched.
template <class Layer>
void check_layer(const Layer& layer, std::size_t in, std::size_t out, const char* name) {
  INFO(name);
  const auto x = random_x(in, 11);
  const auto dy = random_x(out, 12);
  typename Layer::template saved<float> ctx;
  (void)layer.forward(x, ctx);
  auto g_expected = layer.zero_gradients();
  const auto dx_expected = layer.backward(ctx, dy, g_expected);
  const auto expected = bits_of(dx_expected);

  const auto run_into = [&](auto& dx) {
    auto g = layer.zero_gradients();
    layer.backward_into(dx, ctx, dy, g);
    CHECK(gradients_of(g) == gradients_of(g_expected));
  };
  xt::xtensor<float, 3> owned = xt::xtensor<float, 3>::from_shape({2, 3, in});
  run_into(owned);
  CHECK(same_bits(bits_of(owned), expected));

  std::vector<float> a(rows * in, -7.0f);
  auto adapted = xt::adapt(a.data(), a.size(), xt::no_ownership(), std::array<std::size_t, 3>{2, 3, in});
  run_into(adapted);
  CHECK(same_bits(a, expected));

  // Eigen: dx as [rows, in] matrices, the cotangent dy flattened the same way.
  std::vector<float> m(rows * in, -7.0f);
  Eigen::Map<row_major> mapped(m.data(), static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(in));
  const auto dy2 = xt::xtensor<float, 2>(xt::reshape_view(dy, {rows, out}));
  auto g_map = layer.zero_gradients();
  layer.backward_into(mapped, ctx, dy2, g_map);
  CHECK(same_bits(m, expected));
  CHECK(gradients_of(g_map) == gradients_of(g_expected));

  row_major owner(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(in));
  Eigen::Ref<row_major> ref(owner);
  auto g_ref = layer.zero_gradients();
  layer.backward_into(ref, ctx, dy2, g_ref);
  CHECK(same_bits(std::vector<float>(owner.data(), owner.data() + owner.size()), expected));

  xt::xtensor<float, 3> wrong = xt::xtensor<float, 3>::from_shape({2, 3, in + 1});
  auto untouched = layer.zero_gradients();
  CHECK_THROWS_MATCHES(layer.backward_into(wrong, ctx, dy, untouched), std::invalid_argument,
                       says({"::backward_into: dx has shape", "but dy has shape", "make dx with dy's shape and"}));
  CHECK(gradients_of(untouched) == gradients_of(layer.zero_gradients()));
}

}  // namespace

TEST_CASE("backward_into writes dx into xt::xtensor, xt::adapt, Eigen::Map and Eigen::Ref", "[nn][backward_into]") {
  std::mt19937 rng(5);
  check_layer(nn::dense<P>(8, 6, rng, nn::use_bias::yes), 8, 6, "dense");
  check_layer(nn::feed_forward<P>::init(nn::ffn_activation::gelu, 8, 16, rng), 8, 8, "feed_forward");
  check_layer(nn::feed_forward<P>::init(nn::ffn_activation::swiglu, 8, 12, rng), 8, 8, "feed_forward swiglu");
  nn::layer_norm<P> ln(8, {.use_scale = true, .use_bias = true});
  check_layer(ln, 8, 8, "layer_norm");
  check_layer(nn::rms_norm<P>(8), 8, 8, "rms_norm");
  const nn::attention_config causal{.d_model = 8, .n_heads = 2, .causal = true};
  check_layer(nn::attention<P>::lecun_normal(causal, rng), 8, 8, "attention");
  nn::transformer_block<P> block({.attention = causal});
  block.for_each_parameter([&](std::string_view, auto& p) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (auto& v : p) v = u(rng);
  });
  check_layer(block, 8, 8, "transformer_block");
}

TEST_CASE("rms_norm::backward_into refuses a fused context", "[nn][backward_into][errors]") {
  const nn::rms_norm<P> norm(8);
  const auto x = random_x(8, 21);
  typename nn::rms_norm<P>::saved<float> ctx;
  (void)norm.forward(x, nn::no_residual, ctx);
  auto g = norm.zero_gradients();
  xt::xtensor<float, 3> dx = xt::xtensor<float, 3>::from_shape({2, 3, 8});
  CHECK_THROWS_MATCHES(norm.backward_into(dx, ctx, x, g), std::invalid_argument,
                       says({"rms_norm::backward_into: the context was saved by the fused form"}));
}

}  // namespace backward_into_test
