// The layers' forward_into calls (issue 9: a caller's output and workspace, no allocation in the steady
// state): for dense, feed_forward, attention decoding with a cache, the fused rms_norm and the embedding's
// lookup and attend, under several policies:
//  - the same bits as the value-returning call (the reference here is that call, whose numerics the
//    other nn tests check against float64 references);
//  - no heap allocation from the second call on (a replacement operator new counts every thread's
//    allocations, over-aligned ones included);
//  - a caller's output of the wrong shape is a std::invalid_argument naming the shapes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include <catch2/catch.hpp>
#include <mixprec/arrays/xtensor.hpp>
#include <mixprec/core.hpp>
#include <mixprec/nn/attention.hpp>
#include <mixprec/nn/dense.hpp>
#include <mixprec/nn/embedding.hpp>
#include <mixprec/nn/feed_forward.hpp>
#include <mixprec/nn/rms_norm.hpp>
#include <mixprec/nn/workspace.hpp>

#include "support/allocation_counter.hpp"

namespace forward_into_test {

namespace {

namespace nn = mixprec::nn;
using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;

using policies = std::tuple<policy<float, float, float>, policy<float, bfloat16, float>, policy<float, float16, float>,
                            policy<bfloat16, bfloat16, bfloat16>, policy<double, double, double>>;

template <class T, std::size_t N>
xt::xtensor<T, N> random_tensor(const std::array<std::size_t, N>& shape, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  auto t = xt::xtensor<T, N>::from_shape(shape);
  for (auto& v : t) v = static_cast<T>(normal(rng));
  return t;
}

// Same shape and the same bytes: equal bits, NaNs included.
template <class A, class B>
bool same_bits(const A& a, const B& b) {
  static_assert(std::is_same_v<typename A::value_type, typename B::value_type>);
  return std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()) &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(typename A::value_type)) == 0;
}

// Allocations made by `f()`.
template <class F>
std::size_t allocations_of(F&& f) {
  const mixprec_test::allocation_counter counter;
  f();
  return counter.count();
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("dense, feed_forward and rms_norm forward_into: same bits, no allocation after the first call",
                        "[nn][forward_into]", policies) {
  using P = TestType;
  using T = float;
  using O = nn::output_t<P, T>;
  std::mt19937 rng(11);
  const auto x = random_tensor<T, 2>({3, 48}, rng);
  nn::workspace ws;

  SECTION("dense") {
    const nn::dense<P> layer(48, 80, rng, nn::use_bias::yes);
    const auto expected = layer(x);
    auto out = xt::xtensor<O, 2>::from_shape({3, 80});
    layer.forward_into(out, x, ws);
    CHECK(same_bits(out, expected));
    out.fill(O(-1));
    CHECK(allocations_of([&] { layer.forward_into(out, x, ws); }) == 0);
    CHECK(same_bits(out, expected));
    out.fill(O(-1));
    CHECK(allocations_of([&] { layer.forward_into(out, x); }) == 0);
    CHECK(same_bits(out, expected));
    auto wrong = xt::xtensor<O, 2>::from_shape({3, 79});
    CHECK_THROWS_MATCHES(layer.forward_into(wrong, x, ws), std::invalid_argument,
                         Catch::Matchers::Message("dense::forward_into: out has shape [3, 79] but x has shape [3, 48]; "
                                                  "make out with x's shape and 80 elements on its last axis (it is "
                                                  "written, not resized)"));
  }
  SECTION("feed_forward, gated and plain") {
    for (const auto activation : {nn::ffn_activation::swiglu, nn::ffn_activation::gelu_tanh}) {
      const auto layer = nn::feed_forward<P>::init(activation, 48, 96, rng, nn::use_bias::yes);
      const auto expected = layer(x);
      auto out = xt::xtensor<O, 2>::from_shape({3, 48});
      layer.forward_into(out, x, ws);
      CHECK(same_bits(out, expected));
      std::fill(out.begin(), out.end(), O(0));
      CHECK(allocations_of([&] { layer.forward_into(out, x, ws); }) == 0);
      CHECK(same_bits(out, expected));
    }
    const auto layer = nn::feed_forward<P>::init(nn::ffn_activation::silu, 48, 96, rng);
    auto wrong = xt::xtensor<O, 2>::from_shape({2, 48});
    CHECK_THROWS_AS(layer.forward_into(wrong, x, ws), std::invalid_argument);
  }
  SECTION("fused rms_norm, the stream updated in place") {
    using R = nn::residual_t<P, T>;
    const auto layer = nn::rms_norm<P>::from_scale(random_tensor<float, 1>({48}, rng));
    const auto residual = random_tensor<R, 2>({3, 48}, rng);
    const auto expected = layer(x, residual);
    auto out = xt::xtensor<O, 2>::from_shape({3, 48});
    auto stream = residual;
    layer.forward_into(out, stream, x, stream, ws);
    CHECK(same_bits(out, expected.x));
    CHECK(same_bits(stream, expected.residual));
    stream = residual;
    out.fill(O(-1));
    CHECK(allocations_of([&] { layer.forward_into(out, stream, x, stream, ws); }) == 0);
    CHECK(same_bits(out, expected.x));
    CHECK(same_bits(stream, expected.residual));
    const auto first = layer(x, nn::no_residual);
    CHECK(allocations_of([&] { layer.forward_into(out, stream, x, nn::no_residual, ws); }) == 0);
    CHECK(same_bits(out, first.x));
    CHECK(same_bits(stream, first.residual));
  }
}

TEMPLATE_LIST_TEST_CASE("attention forward_into decodes with a cache: same bits, no allocation after the first token",
                        "[nn][forward_into]", policies) {
  using P = TestType;
  using T = float;
  using O = nn::output_t<P, T>;
  std::mt19937 rng(12);
  // Grouped-query attention with RoPE; key_block 4 so that the decode crosses several key tiles.
  const nn::attention_config config{.d_model = 32,
                                    .n_heads = 4,
                                    .n_kv_heads = 2,
                                    .head_dim = 8,
                                    .causal = true,
                                    .rotary = nn::rotary_config{},
                                    .key_block = 4};
  const auto projection = [&](std::size_t in, std::size_t out) {
    return nn::dense<P>(in, out, rng, nn::use_bias::yes);
  };
  const nn::attention<P> layer(config, projection(32, 32), projection(32, 16), projection(32, 16), projection(32, 32));
  auto by_value = layer.template make_cache<T>(1, 16);
  auto into = layer.template make_cache<T>(1, 16);
  nn::workspace ws;
  auto out = xt::xtensor<O, 2>::from_shape({1, 32});
  for (int step = 0; step < 12; ++step) {
    const auto x = random_tensor<T, 2>({1, 32}, rng);
    const auto expected = layer(x, by_value);
    const std::size_t count = allocations_of([&] { layer.forward_into(out, x, into, ws); });
    INFO("step " << step);
    CHECK(same_bits(out, expected));
    if (step > 0) CHECK(count == 0);
  }
  CHECK(into.size() == 12);
  // Prefill of several tokens at once, and self-attention without a cache: the same bits as well.
  const auto x = random_tensor<T, 2>({3, 32}, rng);
  auto out3 = xt::xtensor<O, 2>::from_shape({3, 32});
  layer.forward_into(out3, x, into, ws);
  CHECK(same_bits(out3, layer(x, by_value)));
  layer.forward_into(out3, x, ws);
  CHECK(same_bits(out3, layer(x)));
  auto wrong = xt::xtensor<O, 2>::from_shape({1, 32});
  CHECK_THROWS_AS(layer.forward_into(wrong, x, ws), std::invalid_argument);
  CHECK_THROWS_WITH(
      layer.forward_into(wrong, x, ws),
      Catch::Matchers::Contains("attention::forward_into: out has shape [1, 32] but x has shape [3, 32]"));
}

TEMPLATE_LIST_TEST_CASE("embedding forward_into and attend_into: same bits, no allocation", "[nn][forward_into]",
                        policies) {
  using P = TestType;
  using O = nn::output_t<P, typename P::param_type>;
  std::mt19937 rng(13);
  const auto layer = nn::embedding<P>::normal(40, 24, rng);
  const xt::xtensor<std::int32_t, 1> ids = {3, 0, 39};
  auto rows = xt::xtensor<O, 2>::from_shape({3, 24});
  layer.forward_into(rows, ids);
  CHECK(same_bits(rows, layer(ids)));
  rows.fill(O(-1));
  CHECK(allocations_of([&] { layer.forward_into(rows, ids); }) == 0);
  CHECK(same_bits(rows, layer(ids)));

  const auto h = random_tensor<float, 2>({2, 24}, rng);
  using L = nn::output_t<P, float>;
  auto logits = xt::xtensor<L, 2>::from_shape({2, 40});
  layer.attend_into(logits, h);
  CHECK(same_bits(logits, layer.attend(h)));
  logits.fill(L(-1));
  CHECK(allocations_of([&] { layer.attend_into(logits, h); }) == 0);
  CHECK(same_bits(logits, layer.attend(h)));
  auto logits_f32 = xt::xtensor<float, 2>::from_shape({2, 40});
  layer.attend_into(logits_f32, h);
  CHECK(same_bits(logits_f32, layer.template attend_logits<float>(h)));

  const xt::xtensor<std::int32_t, 1> bad = {40};
  auto one = xt::xtensor<O, 2>::from_shape({1, 24});
  CHECK_THROWS_AS(layer.forward_into(one, bad), std::out_of_range);
  CHECK_THROWS_MATCHES(layer.forward_into(rows, bad), std::invalid_argument,
                       Catch::Matchers::Message("embedding::forward_into: out has shape [3, 24] but ids have shape "
                                                "[1]; make out with ids' shape and 24 (features) appended (it is "
                                                "written, not resized)"));
  auto wrong_logits = xt::xtensor<L, 2>::from_shape({2, 39});
  CHECK_THROWS_AS(layer.attend_into(wrong_logits, h), std::invalid_argument);
}

TEMPLATE_LIST_TEST_CASE("attention forward_into with padding keys in the cache and a cache shorter than a key tile",
                        "[nn][forward_into]", policies) {
  using P = TestType;
  using T = float;
  using O = nn::output_t<P, T>;
  std::mt19937 rng(14);
  // key_block 64 > the cache's 10 positions: one short tile. The prefill marks two tokens as padding,
  // whose keys and values must contribute nothing (C = A copies the value tile to zero their rows).
  const nn::attention_config config{.d_model = 16, .n_heads = 2, .n_kv_heads = 2, .head_dim = 8, .key_block = 64};
  const auto projection = [&] { return nn::dense<P>(16, 16, rng, nn::use_bias::no); };
  const nn::attention<P> layer(config, projection(), projection(), projection(), projection());
  auto by_value = layer.template make_cache<T>(1, 10);
  auto into = layer.template make_cache<T>(1, 10);
  const auto prefill = random_tensor<T, 2>({4, 16}, rng);
  const xt::xtensor<bool, 1> mask = {true, false, true, false};
  (void)layer(prefill, by_value, mask);
  (void)layer(prefill, into, mask);
  nn::workspace ws;
  auto out = xt::xtensor<O, 2>::from_shape({1, 16});
  for (int step = 0; step < 6; ++step) {
    const auto x = random_tensor<T, 2>({1, 16}, rng);
    const auto expected = layer(x, by_value);
    out.fill(O(-1));
    layer.forward_into(out, x, into, ws);
    INFO("step " << step);
    CHECK(same_bits(out, expected));
  }
  CHECK(into.size() == 10);
}

}  // namespace forward_into_test
