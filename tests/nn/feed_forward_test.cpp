// Tests of nn::feed_forward<P> against float64 references written here with plain loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;
using nn::ffn_activation;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

// The activations, from their definitions, in double.
double ref_act(ffn_activation a, double x) {
  switch (a) {
    case ffn_activation::relu: return x > 0 ? x : 0.0;
    case ffn_activation::gelu:
    case ffn_activation::geglu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    case ffn_activation::silu:
    case ffn_activation::swiglu: return x / (1.0 + std::exp(-x));
  }
  return 0.0;
}

const ffn_activation all_activations[] = {ffn_activation::relu,      ffn_activation::gelu,   ffn_activation::gelu_tanh,
                                          ffn_activation::silu,      ffn_activation::swiglu, ffn_activation::geglu,
                                          ffn_activation::geglu_tanh};

/// kernel(i, o) as a double.
template <class P>
double w(const nn::dense<P>& d, std::size_t i, std::size_t o) {
  return static_cast<double>(d.kernel()(i, o));
}
template <class P>
double b(const nn::dense<P>& d, std::size_t o) {
  return d.bias() ? static_cast<double>(d.bias()->data()[o]) : 0.0;
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("feed_forward matches a float64 reference for every activation within derived bounds",
                        "[nn][feed_forward]", all_policies) {
  using P = TestType;
  using T = float;
  using O = nn::output_t<P, T>;
  const std::size_t in = 12, hidden = 20, rows = 4;
  for (ffn_activation act : all_activations) {
    CAPTURE(nn::activation_name(act));
    std::mt19937 rng(static_cast<unsigned>(act) + 100);
    const auto ffn = nn::feed_forward<P>::init(act, in, hidden, rng, nn::use_bias::yes);
    auto x = xt::xtensor<T, 2>::from_shape({rows, in});
    std::normal_distribution<float> normal(0.0f, 1.5f);
    for (auto& v : x) v = normal(rng);
    const auto y = ffn(x);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<O, 2>>);
    REQUIRE(y.shape()[1] == in);
    // The bound, propagated through the block by nn::error_bound (nn/error_bound.hpp) from this file's
    // float64 reference values:
    //  h = x.w + b: (2 u_C + u_C^2) S + (K + 2) u_acc (1 + u_C)^2 S (as in dense_test.cpp);
    //  act(h): Lipschitz constant 1.13 (max |gelu'| = 1.129; silu' < 1.1) times e_h, plus the opmath
    //  error, <= 32 u_acc (|h| + 1) (activations_test.cpp bounds);
    //  gated a = act(h1) h3: dact |h3| + |act| e3 + dact e3 + u_acc |a|;
    //  y = a.w2 + b2, with a rounded to C (u_C (|a| + da)), w2 and b2 rounded to C, the accumulation
    //  bound, and the output rounding.
    const auto bound = nn::error_bound<T>(ffn);
    for (std::size_t r = 0; r < rows; ++r) {
      // Hidden layer: value a_k and a bound da_k on |computed a_k - a_k| before its rounding to C.
      std::vector<double> a(hidden), da(hidden);
      for (std::size_t k = 0; k < hidden; ++k) {
        auto project = [&](const nn::dense<P>& d, double& err) {
          double h = b(d, k), s = std::abs(b(d, k));
          for (std::size_t i = 0; i < in; ++i) {
            h += static_cast<double>(x(r, i)) * w(d, i, k);
            s += std::abs(static_cast<double>(x(r, i)) * w(d, i, k));
          }
          err = bound.projection.accumulated(s);
          return h;
        };
        double e1 = 0.0;
        const double h1 = project(ffn.w1(), e1);
        const double act_v = ref_act(act, h1);
        const double dact = bound.activation(std::abs(h1), e1);
        if (nn::is_gated(act)) {
          double e3 = 0.0;
          const double h3 = project(*ffn.w3(), e3);
          a[k] = act_v * h3;
          da[k] = bound.gate(act_v, dact, h3, e3);
        } else {
          a[k] = act_v;
          da[k] = dact;
        }
      }
      for (std::size_t o = 0; o < in; ++o) {
        double ref = b(ffn.w2(), o);
        auto sum = bound.output(b(ffn.w2(), o));
        for (std::size_t k = 0; k < hidden; ++k) {
          ref += a[k] * w(ffn.w2(), k, o);
          sum.add(a[k], da[k], w(ffn.w2(), k, o));
        }
        const double tol = sum(std::abs(ref));
        const double got = static_cast<double>(y(r, o));
        INFO("row " << r << " out " << o << ": got " << got << ", reference " << ref << ", tolerance " << tol);
        REQUIRE(std::abs(got - ref) <= tol);
      }
    }
  }
}

TEST_CASE("feed_forward output dtypes follow the policy and Flax's promote rule", "[nn][feed_forward]") {
  std::mt19937 rng(1);
  const auto ffn = nn::feed_forward<p_promote>::init(ffn_activation::swiglu, 4, 8, rng);
  STATIC_REQUIRE(std::is_same_v<decltype(ffn(xt::xtensor<bfloat16, 2>{}))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(ffn(xt::xtensor<double, 3>{}))::value_type, double>);
  const auto bf = nn::feed_forward<policy<float, bfloat16>>::init(ffn_activation::geglu, 4, 8, rng);
  STATIC_REQUIRE(std::is_same_v<decltype(bf(xt::xtensor<float, 1>{}))::value_type, bfloat16>);
  const auto xa = xt::xarray<float>::from_shape({2, 1, 4});
  const auto ya = bf(xa);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(ya)>, xt::xarray<bfloat16>>);
  CHECK(ya.dimension() == 3);
}

TEST_CASE("feed_forward processes many rows in chunks without changing the result", "[nn][feed_forward]") {
  // 4099 rows of hidden width 64: the hidden scratch (kernels::matmul_block_elements = 2^18 elements)
  // holds 4096 rows, so the last 3 rows form a second chunk. Small integer data keep every sum exact in float: the
  // expected output is computed exactly here. x in {-2..2}, w1 in {-1, 0, 1}, w2 in {-1, 0, 1}: relu(x w1) w2.
  const std::size_t rows = 4099, hidden = 64;
  REQUIRE(mixprec::kernels::matmul_block_elements / hidden == 4096);
  auto w1 = xt::xtensor<float, 2>::from_shape({1, hidden});
  auto w2 = xt::xtensor<float, 2>::from_shape({hidden, 1});
  for (std::size_t k = 0; k < hidden; ++k) {
    w1(0, k) = static_cast<float>(static_cast<int>(k % 3) - 1);
    w2(k, 0) = static_cast<float>(static_cast<int>((k / 3) % 3) - 1);
  }
  const nn::feed_forward<p_c_bf16> ffn(ffn_activation::relu,
                                       nn::dense<p_c_bf16>::from_weights(w1, nn::weight_layout::in_out),
                                       nn::dense<p_c_bf16>::from_weights(w2, nn::weight_layout::in_out));
  auto x = xt::xtensor<float, 2>::from_shape({rows, 1});
  for (std::size_t r = 0; r < rows; ++r) x(r, 0) = static_cast<float>(static_cast<int>(r % 5) - 2);
  const auto y = ffn(x);
  for (std::size_t r = 0; r < rows; ++r) {
    double ref = 0.0;
    for (std::size_t k = 0; k < hidden; ++k) ref += std::max(0.0, static_cast<double>(x(r, 0)) * w1(0, k)) * w2(k, 0);
    REQUIRE(static_cast<double>(y(r, 0)) == ref);
  }

  SECTION("the probed call gives the same bits and hands the hidden activation per chunk and the output") {
    // relu(x w1) is exact here: the hidden site must hold relu(x_r w1_k) in row-major order over the two
    // chunks' calls.
    mixprec::diagnostics::recording_probe probe(mixprec::diagnostics::capture::values);
    const auto probed = ffn(x, probe, "block.ffn");
    CHECK(static_cast<bool>(probed == y));
    REQUIRE(probe.sites().size() == 2);
    const auto& h = probe.at("block.ffn.hidden");
    CHECK(h.calls == 2);
    CHECK(h.element_type == mixprec::dtype::bfloat16);  // the compute type of p=f32,c=bf16
    REQUIRE(h.values.size() == rows * hidden);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t k = 0; k < hidden; ++k) {
        REQUIRE(h.values[r * hidden + k] == std::max(0.0, static_cast<double>(x(r, 0)) * w1(0, k)));
      }
    }
    const auto& out = probe.at("block.ffn.out");
    CHECK(out.calls == 1);
    REQUIRE(out.values.size() == rows);
    for (std::size_t r = 0; r < rows; ++r) REQUIRE(out.values[r] == static_cast<double>(y(r, 0)));
    // The null probe is accepted and changes nothing.
    CHECK(static_cast<bool>(ffn(x, mixprec::diagnostics::null_probe{}, "block.ffn") == y));
  }
}

TEST_CASE("feed_forward checks that its projections chain and that w3 matches the gating", "[nn][feed_forward]") {
  using Catch::Matchers::Contains;
  using D = nn::dense<p_f32>;
  CHECK_THROWS_WITH(
      nn::feed_forward<p_f32>(ffn_activation::relu, D(4, 8), D(7, 4)),
      Contains("w1 has 8 outputs") && Contains("[4, 8]") && Contains("w2 takes 7 inputs") && Contains("[7, 4]"));
  CHECK_THROWS_WITH(nn::feed_forward<p_f32>(ffn_activation::swiglu, D(4, 8), D(8, 4)), Contains("swiglu is gated"));
  CHECK_THROWS_WITH(nn::feed_forward<p_f32>(ffn_activation::gelu, D(4, 8), D(8, 4), D(4, 8)), Contains("not gated"));
  CHECK_THROWS_WITH(nn::feed_forward<p_f32>(ffn_activation::geglu, D(4, 8), D(8, 4), D(4, 9)),
                    Contains("w3 has kernel [4, 9]") && Contains("[4, 8]"));
  const nn::feed_forward<p_f32> ffn(ffn_activation::silu, D(4, 8), D(8, 4));
  CHECK_THROWS_WITH(ffn(xt::xtensor<float, 2>::from_shape({3, 5})),
                    Contains("feed_forward") && Contains("[3, 5]") && Contains("[4, 8]") && Contains("expects 4"));
}
