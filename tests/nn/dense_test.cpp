// Tests of nn::dense<P> against float64 references written here with plain loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/weight_cache.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"
#include "same_roundings.hpp"

namespace dense_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

/// `x` rounded once to C (real C), as a double: a double is never rounded to float first.
template <class C, class S>
double round_to(S x) {
  if constexpr (std::is_same_v<C, double>) {
    return static_cast<double>(x);
  } else {
    return static_cast<double>(static_cast<C>(static_cast<double>(x)));
  }
}

template <class T>
xt::xtensor<T, 3> random_input(std::size_t a, std::size_t b, std::size_t f, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto x = xt::xtensor<T, 3>::from_shape({a, b, f});
  for (auto& v : x) v = static_cast<T>(normal(rng));
  return x;
}

}  // namespace

namespace {

/// One (policy, input type) case of the reference test, as doubles: x [rows, in], the layer's y
/// [rows, out], its kernel [in, out] and bias [out], the rounding to C, the bound of nn::error_bound and
/// the unit roundoffs of C, the accumulator and the output rounding. The checks below do not depend on
/// the types, so each extra input type costs only the layer's own instantiation.
struct dense_case {
  std::vector<double> x, y, kernel, bias;
  std::size_t rows = 0, in = 0, out = 0;
  double (*round_c)(double) = nullptr;
  nn::dense_error_bound bound;
  double u_c = 0.0, u_acc = 0.0, u_o = 0.0;
};

// Bounds. S = sum_i |x_i w_io| + |b_o| (exact operands: the stored params, the inputs).
//  - rounding x, w to C: each product is off by <= (2 u_C + u_C^2) |x w|; the bias by u_C |b|
//    (u_x + u_w + u_x u_w with u_x, u_w the roundings that happen: 0 where C holds T or the params);
//  - the accumulator (Eigen, any order): gamma_{K+1} <= (K + 2) u_acc of the rounded magnitudes,
//    which are <= (1 + u_C)^2 S;
//  - the output rounding to O: u_O of the accumulated value.
// The first check takes that bound from nn::error_bound (nn/error_bound.hpp); the reference stays
// this file's own. With the operands rounded to C in the reference (second check) only the last two
// terms remain: that check pins the rounding points (it fails if x or w were not rounded to C, or
// summed in C).
void check_dense(const dense_case& c) {
  const double k_terms = static_cast<double>(c.in + 2);
  for (std::size_t r = 0; r < c.rows; ++r) {
    for (std::size_t o = 0; o < c.out; ++o) {
      double ref = c.bias[o];
      double ref_rounded = c.round_c(c.bias[o]);
      double s = std::abs(ref);
      for (std::size_t i = 0; i < c.in; ++i) {
        const double xv = c.x[r * c.in + i];
        const double wv = c.kernel[i * c.out + o];
        ref += xv * wv;
        ref_rounded += c.round_c(xv) * c.round_c(wv);
        s += std::abs(xv * wv);
      }
      const double got = c.y[r * c.out + o];
      const double acc_err = k_terms * c.u_acc * (1 + c.u_c) * (1 + c.u_c) * s;
      const double tol = c.bound(s, std::abs(ref));
      const double tol_rounded = acc_err + c.u_o * (std::abs(ref_rounded) + acc_err);
      INFO("row " << r << " out " << o << ": got " << got << ", reference " << ref << ", rounded reference "
                  << ref_rounded);
      REQUIRE(std::abs(got - ref) <= tol);
      REQUIRE(std::abs(got - ref_rounded) <= tol_rounded);
    }
  }
}

template <class A>
std::vector<double> doubles_of(const A& a) {
  std::vector<double> v(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) v[i] = static_cast<double>(a.data()[i]);
  return v;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("dense matches a float64 reference within bounds derived from the policy's formats",
                        "[nn][dense]", all_policies) {
  using P = TestType;
  const std::size_t in = 37, out = 19;
  std::mt19937 rng(5);
  auto layer = nn::dense<P>::lecun_normal(in, out, rng);
  // A non-zero bias so that its rounding and addition are exercised.
  auto bias = xt::xtensor<float, 1>::from_shape({out});
  for (std::size_t o = 0; o < out; ++o) bias(o) = 0.1f * static_cast<float>(o) - 0.9f;
  auto kernel_f = xt::xtensor<double, 2>::from_shape({in, out});
  for (std::size_t i = 0; i < layer.kernel().size(); ++i)
    kernel_f.data()[i] = static_cast<double>(layer.kernel().data()[i]);
  layer = nn::dense<P>::from_weights(kernel_f, bias, nn::weight_layout::in_out);

  auto run_case = [&]<class T>() {
    using C = nn::compute_t<P, T>;
    using O = nn::output_t<P, T>;
    using Acc = mixprec::accumulator_t<C>;
    const mixprec::dtype input = mixprec::dtype_of_v<T>;
    CAPTURE(input);
    const auto x = random_input<T>(2, 3, in, 17);
    const auto y = layer(x);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<O, 3>>);
    REQUIRE(y.shape()[0] == 2);
    REQUIRE(y.shape()[1] == 3);
    REQUIRE(y.shape()[2] == out);
    check_dense({.x = doubles_of(x),
                 .y = doubles_of(y),
                 .kernel = doubles_of(layer.kernel()),
                 .bias = doubles_of(*layer.bias()),
                 .rows = 6,
                 .in = in,
                 .out = out,
                 .round_c = &round_as<C>,
                 .bound = nn::error_bound<T>(layer),
                 .u_c = unit_roundoff<C>(),
                 .u_acc = unit_roundoff<Acc>(),
                 .u_o = std::is_same_v<O, Acc> ? 0.0 : unit_roundoff<O>()});
  };
  // Inputs of every floating type the layers take: float, bfloat16, float16 and double (C and O follow
  // compute_t and output_t: under promote, bfloat16 and float16 compute in float32 and double in double).
  // float under every policy; the others where they make a different case: a conversion the policy
  // rounds (float16 to bfloat16, bfloat16 to float16, double straight to bfloat16 or float16) or a
  // compute type it picks (promote). Every pair costs its own instantiation of the GEMM path.
  for_each_type<float, bfloat16, float16, double>([&]<class T>() {
    if constexpr (input_case<P, T>) run_case.template operator()<T>();
  });
}

TEST_CASE("dense output dtypes follow the policy, including Flax's promote cases", "[nn][dense]") {
  const auto x32 = random_input<float>(1, 2, 4, 1);
  const auto xbf = random_input<bfloat16>(1, 2, 4, 1);
  const auto x64 = random_input<double>(1, 2, 4, 1);
  auto xc = xt::xtensor<std::complex<float>, 2>::from_shape({3, 4});
  for (std::size_t i = 0; i < xc.size(); ++i) xc.data()[i] = {static_cast<float>(i), -1.0f};
  std::mt19937 rng(1);

  const auto promote_layer = nn::dense<p_promote>::lecun_normal(4, 5, rng);
  // Flax: bf16 input with float32 params and dtype=None computes and returns float32.
  STATIC_REQUIRE(std::is_same_v<decltype(promote_layer(xbf))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(promote_layer(x32))::value_type, float>);
  // float64 input is never truncated.
  STATIC_REQUIRE(std::is_same_v<decltype(promote_layer(x64))::value_type, double>);
  // complex64 input stays complex64 (complex GEMM), with promote and with a float32 policy.
  STATIC_REQUIRE(std::is_same_v<decltype(promote_layer(xc))::value_type, std::complex<float>>);
  const auto f32_layer = nn::dense<p_f32>::lecun_normal(4, 5, rng);
  STATIC_REQUIRE(std::is_same_v<decltype(f32_layer(xc))::value_type, std::complex<float>>);
  // An explicit compute dtype of bf16 (output defaults to compute) returns bf16, whatever the input.
  const auto bf16_layer = nn::dense<policy<float, bfloat16>>::lecun_normal(4, 5, rng);
  STATIC_REQUIRE(std::is_same_v<decltype(bf16_layer(x32))::value_type, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<decltype(bf16_layer(x64))::value_type, bfloat16>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::dense<p_c_bf16>(4, 5)(x64))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<nn::dense<p_bf16>::param_type, bfloat16>);

  // Values: the promoted float64 path computes in double.
  const auto y64 = promote_layer(x64);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t o = 0; o < 5; ++o) {
      double ref = 0.0;
      for (std::size_t i = 0; i < 4; ++i)
        ref += x64.data()[r * 4 + i] * static_cast<double>(promote_layer.kernel()(i, o));
      CHECK(std::abs(y64.data()[r * 5 + o] - ref) <= 8 * std::ldexp(1.0, -53) * 4 * (std::abs(ref) + 10));
    }
  }
}

TEST_CASE("dense of complex64 input and float32 params matches a complex128 reference", "[nn][dense]") {
  std::mt19937 rng(3);
  auto layer = nn::dense<p_f32>::lecun_normal(6, 3, rng);
  auto x = xt::xtensor<std::complex<float>, 2>::from_shape({4, 6});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = {normal(rng), normal(rng)};
  const auto y = layer(x);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t o = 0; o < 3; ++o) {
      std::complex<double> ref = 0.0;
      double s = 0.0;
      for (std::size_t i = 0; i < 6; ++i) {
        const std::complex<double> xv(x(r, i).real(), x(r, i).imag());
        const double w = static_cast<double>(layer.kernel()(i, o));
        ref += xv * w;
        s += std::abs(xv) * std::abs(w);
      }
      const double tol = 10 * std::ldexp(1.0, -24) * s;  // (K + 4) u per part, K = 6
      CHECK(std::abs(static_cast<double>(y(r, o).real()) - ref.real()) <= tol);
      CHECK(std::abs(static_cast<double>(y(r, o).imag()) - ref.imag()) <= tol);
    }
  }
}

TEST_CASE("dense loads [out, in] weights (llama2.c, PyTorch) as the transpose of [in, out]", "[nn][dense]") {
  // w_out_in[o][i] = 10 o + i; the stored kernel [in, out] must hold kernel(i, o) = 10 o + i.
  xt::xtensor<float, 2> w_out_in = xt::xtensor<float, 2>::from_shape({3, 2});
  for (std::size_t o = 0; o < 3; ++o) {
    for (std::size_t i = 0; i < 2; ++i) w_out_in(o, i) = static_cast<float>(10 * o + i);
  }
  const auto layer = nn::dense<p_f32>::from_weights(w_out_in, nn::weight_layout::out_in);
  REQUIRE(layer.in_features() == 2);
  REQUIRE(layer.out_features() == 3);
  for (std::size_t o = 0; o < 3; ++o) {
    for (std::size_t i = 0; i < 2; ++i) CHECK(layer.kernel()(i, o) == static_cast<float>(10 * o + i));
  }
  // y = x . w^T: x = [1, 2] -> [0 + 2*1, 10 + 2*11, 20 + 2*21] = [2, 32, 62] (exact in float).
  const xt::xtensor<float, 1> x = {1.0f, 2.0f};
  const auto y = layer(x);
  CHECK(y(0) == 2.0f);
  CHECK(y(1) == 32.0f);
  CHECK(y(2) == 62.0f);
  // The same values through xt::xarray and a rank-4 input.
  const xt::xarray<float> xa = xt::xarray<float>::from_shape({1, 1, 1, 2});
  auto xa2 = xa;
  xa2(0, 0, 0, 0) = 1.0f;
  xa2(0, 0, 0, 1) = 2.0f;
  const auto ya = layer(xa2);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(ya)>, xt::xarray<float>>);
  REQUIRE(ya.dimension() == 4);
  CHECK(ya(0, 0, 0, 2) == 62.0f);
  // Parameters are rounded once to the param type: 1 + 2^-10 is not a bfloat16.
  xt::xtensor<double, 2> w = {{1.0 + std::ldexp(1.0, -10)}};
  CHECK(static_cast<float>(nn::dense<p_bf16>::from_weights(w, nn::weight_layout::in_out).kernel()(0, 0)) == 1.0f);
}

TEST_CASE("dense rejects inputs and biases of the wrong size, naming both shapes", "[nn][dense]") {
  using Catch::Matchers::Contains;
  const nn::dense<p_f32> layer(8, 16);
  const auto x = xt::xtensor<float, 3>::from_shape({2, 3, 7});
  CHECK_THROWS_WITH(layer(x), Contains("dense") && Contains("[2, 3, 7]") && Contains("[8, 16]") &&
                                  Contains("7 features") && Contains("expects 8"));
  CHECK_THROWS_AS(layer(xt::xarray<float>(1.0f)), std::invalid_argument);  // rank 0
  xt::xtensor<float, 2> k = xt::zeros<float>({8, 16});
  xt::xtensor<float, 1> b = xt::zeros<float>({15});
  CHECK_THROWS_WITH(nn::dense<p_f32>::from_weights(k, b, nn::weight_layout::in_out),
                    Contains("bias has shape [15]") && Contains("[8, 16]"));
  // An empty batch is fine.
  CHECK(layer(xt::xtensor<float, 2>::from_shape({0, 8})).shape()[0] == 0);
}

TEST_CASE("dense::lecun_normal draws a truncated normal with variance 1/in, as Flax's default", "[nn][dense]") {
  // Flax (flax/linen/initializers via jax.nn.initializers.variance_scaling) divides by
  // .87962566103423978, the standard deviation of N(0, 1) truncated to [-2, 2].
  CHECK(std::abs(nn::detail::truncated_normal_stddev() - 0.87962566103423978) <= 1e-15);
  std::mt19937 rng(2024);
  const std::size_t in = 256, out = 256;
  const auto layer = nn::dense<p_f32>::lecun_normal(in, out, rng, nn::use_bias::no);
  // The constructor taking a generator is the same initialiser (DESIGN.md's `dense<P> proj(in, out, rng)`).
  std::mt19937 rng2(2024);
  const nn::dense<p_f32> same(in, out, rng2, nn::use_bias::no);
  CHECK(same.kernel() == layer.kernel());
  CHECK_FALSE(layer.bias().has_value());
  double sum = 0.0, sum2 = 0.0, max_abs = 0.0;
  for (float w : layer.kernel()) {
    sum += w;
    sum2 += static_cast<double>(w) * w;
    max_abs = std::max(max_abs, std::abs(static_cast<double>(w)));
  }
  const double n = static_cast<double>(in * out);
  const double var = sum2 / n - (sum / n) * (sum / n);
  const double target = 1.0 / static_cast<double>(in);
  CHECK(std::abs(sum / n) <= 4 * std::sqrt(target / n));  // 4 standard errors of the mean
  CHECK(std::abs(var - target) <= 0.03 * target);         // sample variance: relative sd ~ sqrt(2/n) = 0.55%
  CHECK(max_abs <= 2 * std::sqrt(target) / 0.87962566103423978 * (1 + 1e-6));  // truncated at 2 sigma
}

TEST_CASE("dense keeps its packed kernel only while the kernel is unchanged", "[nn][dense][packed]") {
  // dense keeps the kernel rounded and packed across calls (kernels::packed_b). Every way of writing
  // the kernel must be seen by the next call: the accessor, for_each_parameter, and a reference kept
  // across a call followed by parameters_changed().
  using P = policy<float, bfloat16, float>;
  std::mt19937 rng(5);
  auto layer = nn::dense<P>::lecun_normal(8, 5, rng);
  const auto x = random_input<float>(1, 3, 8, 6);
  // The float64 reference of x · kernel + bias with x and kernel rounded to bfloat16 (k = 8 terms:
  // the float32 sum is within 8 u Σ|x w| of it, far below the 0.05 changes made below).
  auto reference = [&](const nn::dense<P>& l) {
    xt::xtensor<double, 3> y = xt::zeros<double>({std::size_t{1}, std::size_t{3}, std::size_t{5}});
    for (std::size_t r = 0; r < 3; ++r)
      for (std::size_t o = 0; o < 5; ++o) {
        double s = round_to<bfloat16>((*l.bias())(o));
        for (std::size_t i = 0; i < 8; ++i) s += round_to<bfloat16>(x(0, r, i)) * round_to<bfloat16>(l.kernel()(i, o));
        y(0, r, o) = s;
      }
    return y;
  };
  auto close = [](const auto& got, const xt::xtensor<double, 3>& want) {
    for (std::size_t o = 0; o < 5; ++o)
      for (std::size_t r = 0; r < 3; ++r)
        if (std::fabs(static_cast<double>(got(0, r, o)) - want(0, r, o)) > 1e-5 * (1 + std::fabs(want(0, r, o))))
          return false;
    return true;
  };
  const auto& const_layer = layer;
  CHECK(close(const_layer(x), reference(layer)));  // packs the kernel
  CHECK(close(const_layer(x), reference(layer)));  // reuses it

  layer.kernel()(2, 3) += 0.5f;  // the non-const accessor drops the packed copy
  CHECK(close(const_layer(x), reference(layer)));

  layer.for_each_parameter([](std::string_view name, auto& t) {
    if (name == "kernel") t(0, 0) -= 0.75f;
  });
  CHECK(close(const_layer(x), reference(layer)));

  auto& kept = layer.kernel();  // a reference kept across a call
  CHECK(close(const_layer(x), reference(layer)));
  kept(7, 4) += 1.0f;
  layer.parameters_changed();
  CHECK(close(const_layer(x), reference(layer)));

  // A copy packs its own kernel: changing the original leaves the copy's output alone.
  const nn::dense<P> copy = layer;
  const auto copy_before = copy(x);
  layer.kernel()(1, 1) += 2.0f;
  CHECK(bool(copy(x) == copy_before));
  CHECK(close(const_layer(x), reference(layer)));

  // The backward pass reads the kernel transposed, packed separately, and follows changes too.
  typename nn::dense<P>::template saved<float> ctx;
  auto grads = layer.zero_gradients();
  const auto y = layer.forward(x, ctx);
  const xt::xtensor<float, 3> dy = xt::ones<float>(y.shape());
  const auto dx_before = layer.backward(ctx, dy, grads);
  layer.kernel()(4, 2) += 1.0f;
  const auto dx_after = layer.backward(ctx, dy, grads);
  // dx[i] = Σ_o dy[o] · kernel[i, o]: only input feature 4 changes, by bfloat16(kernel + 1) − bfloat16(kernel).
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t i = 0; i < 8; ++i) {
      CAPTURE(r, i);
      if (i == 4) {
        CHECK(dx_after(0, r, i) != dx_before(0, r, i));
      } else {
        CHECK(dx_after(0, r, i) == dx_before(0, r, i));
      }
    }
}

TEST_CASE("dense forward passes on several threads at once share one packed kernel", "[nn][dense][packed]") {
  using P = policy<float, bfloat16, float>;
  std::mt19937 rng(7);
  const auto layer = nn::dense<P>::lecun_normal(64, 48, rng);
  const auto x = random_input<float>(2, 5, 64, 8);
  const auto expected = nn::dense<P>(layer)(x);  // a copy: its own packing
  std::vector<xt::xtensor<float, 3>> results(4);
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < results.size(); ++t) threads.emplace_back([&, t] { results[t] = layer(x); });
  }
  for (const auto& r : results) CHECK(bool(r == expected));
}

TEST_CASE("with the weight cache off, dense gives the same bits and follows every change", "[nn][dense][packed]") {
  using P = policy<float, bfloat16, float>;
  std::mt19937 rng(9);
  auto layer = nn::dense<P>::lecun_normal(40, 24, rng);
  const auto x = random_input<float>(2, 3, 40, 10);
  const auto cached = layer(x);
  const bool previous = nn::set_weight_cache(false);
  CHECK_FALSE(nn::weight_cache_enabled());
  CHECK(bool(layer(x) == cached));  // the same engine and order, packed per call
  auto& kept = layer.kernel();
  const auto before = layer(x);
  kept(0, 0) += 1.0f;  // no parameters_changed(): nothing is kept while the cache is off
  CHECK_FALSE(bool(layer(x) == before));
  nn::set_weight_cache(previous);
  CHECK(nn::weight_cache_enabled());
}

}  // namespace dense_test
