// Tests of nn/from_scope.hpp: layers instantiated with `from_scope<Ps...>` take their policy from the
// policy_scope live at construction (Haliax's run-time policies), with a per-layer override of the compute
// role by name. Every result is compared bit for bit with the compile-time layer of the policy the scope
// names, built from the same random stream (that layer is tested against float64 references in its own
// test file); from several threads at once.

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/core.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "support/error_message.hpp"

namespace from_scope_test {

namespace {

using mixprec::dtype;
using mixprec::from_scope;
using mixprec::full_precision;
using mixprec::half_bfloat16;
using mixprec::mixed_bfloat16;
using mixprec::mixed_float16;
using mixprec::policy_scope;
using mixprec::runtime_policy;
namespace nn = mixprec::nn;
using test_support::says;

/// The policies the tests' program supports.
using scoped = from_scope<full_precision, mixed_bfloat16, mixed_float16, half_bfloat16>;

/// The bit pattern of each element widened exactly to double (so a bfloat16 output and the same values in
/// a float container compare equal; -0 != +0 and NaN payloads are kept).
template <class A>
std::vector<std::uint64_t> bits(const A& a) {
  std::vector<std::uint64_t> out;
  for (const auto& v : a) {
    const auto d = static_cast<double>(v);
    std::uint64_t b = 0;
    std::memcpy(&b, &d, sizeof d);
    out.push_back(b);
  }
  return out;
}

using layer_bits = std::vector<std::vector<std::uint64_t>>;

/// The index of the first layer output that differs between `a` and `b` (in the order of `outputs_of`),
/// or -1 when all agree.
int first_difference(const layer_bits& a, const layer_bits& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int>(i);
  }
  return -1;
}

xt::xtensor<float, 2> input(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0F, 2.0F);
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, cols});
  for (auto& v : x) v = u(rng);
  return x;
}

xt::xtensor<float, 1> vector_input(std::size_t n, unsigned seed) {
  const auto x = input(1, n, seed);
  xt::xtensor<float, 1> v = xt::xtensor<float, 1>::from_shape({n});
  std::copy(x.begin(), x.end(), v.begin());
  return v;
}

nn::attention_config attention_shape() {
  nn::attention_config c;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.causal = true;
  return c;
}

/// Builds one layer of each kind — dense, layer_norm, rms_norm, attention (causal, grouped-query),
/// feed_forward (SwiGLU) and embedding — each from the same random stream, through `build(tag, make)`:
/// `make` is a generic factory of the compile-time layer type, `tag` names the layer template.
template <template <class> class Layer>
struct layer_tag {};

/// The outputs of the six layers as bit patterns, the layers built by `build` (typed or from the scope).
template <class Build>
layer_bits outputs_of(Build&& build) {
  const auto x = input(7, 16, 11);
  const auto residual = input(7, 16, 12);
  std::mt19937 rng(5);
  layer_bits out;
  const auto dense = build(layer_tag<nn::dense>{}, [&]<class L>(std::type_identity<L>) { return L(16, 24, rng); });
  out.push_back(bits(dense(x)));
  const auto ln = build(layer_tag<nn::layer_norm>{}, [&]<class L>(std::type_identity<L>) {
    return L::from_params(vector_input(16, 13), vector_input(16, 14));
  });
  out.push_back(bits(ln(x)));
  const auto rms = build(layer_tag<nn::rms_norm>{},
                         [&]<class L>(std::type_identity<L>) { return L::from_scale(vector_input(16, 15)); });
  out.push_back(bits(rms(x)));
  const auto fused = rms(x, residual);
  out.push_back(bits(fused.x));
  out.push_back(bits(fused.residual));
  const auto attention = build(layer_tag<nn::attention>{},
                               [&]<class L>(std::type_identity<L>) { return L::lecun_normal(attention_shape(), rng); });
  out.push_back(bits(attention(x)));
  const auto ffn = build(layer_tag<nn::feed_forward>{}, [&]<class L>(std::type_identity<L>) {
    return L::init(nn::ffn_activation::swiglu, 16, 32, rng);
  });
  out.push_back(bits(ffn(x)));
  const auto embedding = build(layer_tag<nn::embedding>{},
                               [&]<class L>(std::type_identity<L>) { return L::from_table(input(10, 16, 16)); });
  const xt::xtensor<std::int32_t, 1> ids = {3, 0, 9, 3};
  out.push_back(bits(embedding(ids)));
  return out;
}

/// The six layers of policy `P`, compile-time.
template <class P>
layer_bits typed_outputs() {
  return outputs_of([]<template <class> class Layer, class F>(layer_tag<Layer>, F&& make) {
    return make(std::type_identity<Layer<P>>{});
  });
}

/// The six layers built with `from_scope` in the current scope.
layer_bits scoped_outputs() {
  return outputs_of([]<template <class> class Layer, class F>(layer_tag<Layer>, F&& make) {
    return Layer<scoped>(nn::from_factory, std::forward<F>(make));
  });
}

template <class P>
std::string name() {
  return mixprec::to_string(mixprec::to_runtime_policy<P>());
}

}  // namespace

TEST_CASE("from_scope layers take the policy of the scope live at construction", "[from_scope]") {
  const auto check = [&]<class P>() {
    INFO("policy " << name<P>());
    const policy_scope scope(P{});
    const nn::dense<scoped> layer(16, 24);
    CHECK(layer.policy() == mixprec::to_runtime_policy<P>());
    CHECK(layer.get_if<P>() != nullptr);
    CHECK(first_difference(scoped_outputs(), typed_outputs<P>()) == -1);
  };
  check.operator()<full_precision>();
  check.operator()<mixed_bfloat16>();
  check.operator()<mixed_float16>();
  check.operator()<half_bfloat16>();
  // The four policies give four different results (so the comparisons above can tell them apart).
  CHECK(first_difference(typed_outputs<mixed_bfloat16>(), typed_outputs<full_precision>()) == 0);
  CHECK(first_difference(typed_outputs<mixed_float16>(), typed_outputs<mixed_bfloat16>()) == 0);
  CHECK(first_difference(typed_outputs<half_bfloat16>(), typed_outputs<mixed_bfloat16>()) == 0);
}

TEST_CASE("from_scope layers: no scope is float32, and the policy stays the one of construction", "[from_scope]") {
  CHECK(mixprec::policy_scope_depth() == 0);
  CHECK(first_difference(scoped_outputs(), typed_outputs<full_precision>()) == -1);
  std::mt19937 rng(1);
  std::optional<nn::dense<scoped>> layer;
  {
    const policy_scope scope("p=f32,c=bf16,o=f32");
    layer.emplace(16, 24, rng);
  }
  rng.seed(1);
  const nn::dense<mixed_bfloat16> typed(16, 24, rng);
  const auto x = input(5, 16, 3);
  CHECK(layer->policy() == mixprec::to_runtime_policy<mixed_bfloat16>());
  CHECK(bits((*layer)(x)) == bits(typed(x)));
  const policy_scope other("p=f32,c=f16,o=f32");  // a later scope does not change a built layer
  CHECK(bits((*layer)(x)) == bits(typed(x)));
  const nn::dense<scoped> copy = *layer;  // copies keep their policy
  CHECK(copy.policy() == layer->policy());
  CHECK(bits(copy(x)) == bits(typed(x)));
}

TEST_CASE("compute_dtype overrides one layer's compute role by role name or dtype", "[from_scope]") {
  const auto x = input(5, 16, 3);
  const auto policy_of = [](auto&&... args) {
    std::mt19937 rng(1);
    return nn::dense<scoped>(std::forward<decltype(args)>(args)..., 16, 24, rng).policy();
  };
  {
    const policy_scope scope("p=f32,c=bf16,o=f32");
    // "param" computes in the param dtype: float32 (Haliax's compute_dtype="param" for a sensitive layer).
    CHECK(policy_of(nn::compute_dtype("param")) == mixprec::to_runtime_policy<full_precision>());
    CHECK(policy_of(nn::compute_dtype("parameter")) == mixprec::to_runtime_policy<full_precision>());
    CHECK(policy_of(nn::compute_dtype("output")) == mixprec::to_runtime_policy<full_precision>());
    CHECK(policy_of(nn::compute_dtype("compute")) == mixprec::to_runtime_policy<mixed_bfloat16>());
    CHECK(policy_of(nn::compute_dtype("f16")) == mixprec::to_runtime_policy<mixed_float16>());
    CHECK(policy_of(nn::compute_dtype(dtype::float32)) == mixprec::to_runtime_policy<full_precision>());
    CHECK(policy_of() == mixprec::to_runtime_policy<mixed_bfloat16>());
    // The overridden layer gives the bits of the compile-time layer of the resolved policy.
    std::mt19937 a(2);
    std::mt19937 b(2);
    const nn::dense<scoped> overridden(nn::compute_dtype("param"), 16, 24, a);
    const nn::dense<full_precision> typed(16, 24, b);
    CHECK(bits(overridden(x)) == bits(typed(x)));
  }
  {
    const policy_scope scope("bf16");
    // The role resolves against the scope: param is bfloat16 here, so the override changes nothing.
    CHECK(policy_of(nn::compute_dtype("param")) == mixprec::to_runtime_policy<half_bfloat16>());
    const nn::layer_norm<scoped> ln(nn::compute_dtype("compute"), std::size_t{16});
    CHECK(ln.policy() == mixprec::to_runtime_policy<half_bfloat16>());
  }
  {
    // The override with a factory: under p=f32,c=f16,o=f32, "param" builds the float32 layer.
    const policy_scope scope("p=f32,c=f16,o=f32");
    std::mt19937 a(4);
    std::mt19937 b(4);
    const nn::dense<scoped> built(nn::compute_dtype("param"), nn::from_factory,
                                  [&]<class L>(std::type_identity<L>) { return L::lecun_normal(16, 24, a); });
    const auto typed = nn::dense<full_precision>::lecun_normal(16, 24, b);
    CHECK(built.policy() == mixprec::to_runtime_policy<full_precision>());
    CHECK(bits(built(x)) == bits(typed(x)));
  }
}

TEST_CASE("from_scope layers reject a policy they do not list, and bad overrides, with clear errors",
          "[from_scope][errors]") {
  std::mt19937 rng(1);
  {
    const policy_scope scope("f16");
    CHECK_THROWS_MATCHES(nn::dense<scoped>(16, 24, rng), mixprec::policy_error,
                         says({"mixprec::nn::dense<from_scope<...>>", "the policy p=f16,c=f16,o=f16",
                               "is not one of the 4 listed policies", "p=f32,c=bf16,o=f32",
                               "add its compile-time policy to from_scope<...>'s list"}));
  }
  {
    const policy_scope scope("p=f32,c=bf16,o=f32");
    // Overriding compute to f64 makes p=f32,c=f64,o=f32, which the list lacks.
    CHECK_THROWS_MATCHES(nn::rms_norm<scoped>(nn::compute_dtype("f64"), std::size_t{16}), mixprec::policy_error,
                         says({"mixprec::nn::rms_norm<from_scope<...>>", "p=f32,c=f64,o=f32",
                               "the scope's, p=f32,c=bf16,o=f32, with the compute override"}));
    CHECK_THROWS_MATCHES(nn::compute_dtype("int8"), mixprec::policy_error,
                         says({"'int8' names neither a role nor a dtype a policy holds"}));
    CHECK_THROWS_MATCHES(nn::compute_dtype("float8_e4m3fn"), mixprec::policy_error, says({"float8_e4m3fn"}));
    CHECK_THROWS_AS(nn::compute_dtype(dtype::float8_e5m2), mixprec::policy_error);
  }
  // Errors of the layer's own constructor pass through unchanged.
  CHECK_THROWS_AS(nn::layer_norm<scoped>(std::size_t{16}, nn::layer_norm_options{.epsilon = -1.0}),
                  std::invalid_argument);
}

TEST_CASE("from_scope: parameters by name, and training through visit", "[from_scope]") {
  const policy_scope scope("bf16");
  std::mt19937 a(3);
  std::mt19937 b(3);
  nn::dense<scoped> layer(16, 8, a);
  nn::dense<half_bfloat16> typed(16, 8, b);
  std::vector<std::string> names;
  std::vector<std::string> typed_names;
  layer.for_each_parameter([&](std::string_view n, auto& t) {
    names.emplace_back(n);
    CHECK(std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, mixprec::bfloat16>);
  });
  typed.for_each_parameter([&](std::string_view n, auto&) { typed_names.emplace_back(n); });
  CHECK(names == typed_names);
  CHECK_FALSE(names.empty());

  // A training step inside visit: forward with a saved context, backward, the float32 gradients.
  const auto x = input(4, 16, 4);
  const auto dy = input(4, 8, 5);
  const auto step = [&](auto& l) {
    typename std::remove_cvref_t<decltype(l)>::template saved<float> ctx;
    const auto y = l.forward(x, ctx);
    auto grads = l.zero_gradients();
    const auto dx = l.backward(ctx, dy, grads);
    return layer_bits{bits(y), bits(dx), bits(grads.kernel)};
  };
  CHECK(layer.visit(step) == step(typed));
}

TEST_CASE("from_scope: listed policies with different output dtypes return the promoted type exactly", "[from_scope]") {
  // o=bf16 and o=f32 listed: the result is float32 (JAX: promote_types(bf16, f32)), and under the o=bf16
  // policy each value is the bfloat16 one, widened exactly.
  using two = from_scope<full_precision, half_bfloat16>;
  const auto x = input(3, 16, 6);
  const policy_scope scope("bf16");
  std::mt19937 a(7);
  std::mt19937 b(7);
  const nn::dense<two> layer(16, 8, a);
  const nn::dense<half_bfloat16> typed(16, 8, b);
  const auto y = layer(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<float, 2>>);
  const auto want = typed(x);
  REQUIRE(y.shape() == want.shape());
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.flat(i) == static_cast<float>(want.flat(i)));
}

TEST_CASE("from_scope layers on several threads, each with its own scope", "[from_scope][threads]") {
  // Four threads open different scopes at the same time (a barrier lines them up), build the six layers
  // from their scope and compare with the compile-time layers; a fifth layer is built on the main thread
  // inside a scope and used from a thread with none.
  const std::vector<std::string> policies = {"f32", "p=f32,c=bf16,o=f32", "p=f32,c=f16,o=f32", "bf16"};
  const std::vector<layer_bits> want = {typed_outputs<full_precision>(), typed_outputs<mixed_bfloat16>(),
                                        typed_outputs<mixed_float16>(), typed_outputs<half_bfloat16>()};
  std::atomic<int> mismatches{0};
  std::barrier sync(static_cast<std::ptrdiff_t>(policies.size()));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    threads.emplace_back([&, i] {
      const policy_scope scope(policies[i]);
      sync.arrive_and_wait();
      for (int repeat = 0; repeat < 3; ++repeat) {
        if (first_difference(scoped_outputs(), want[i]) != -1) ++mismatches;
      }
    });
  }
  const policy_scope main_scope("p=f32,c=f16,o=f32");  // invisible to the threads
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);

  std::mt19937 a(9);
  std::mt19937 b(9);
  const nn::dense<scoped> built_here(16, 24, a);  // p=f32,c=f16,o=f32, from main_scope
  const nn::dense<mixed_float16> typed(16, 24, b);
  const auto x = input(5, 16, 8);
  std::vector<std::uint64_t> there;
  std::thread([&] { there = bits(built_here(x)); }).join();
  CHECK(there == bits(typed(x)));
}

}  // namespace from_scope_test
