// Tests of nn/error_bound.hpp: (a) every layer's bound holds on Gaussian data for every policy of the
// layer tests and policy<float16>, against long double (float64 for attention) references written here
// from the float32 weights the layers were built from (nn::parameters_from<float>); (b) the bounds are
// not vacuous: for the 16-bit policies some element reaches a stated fraction of its bound, and the
// bounds grow as the compute type narrows (bfloat16 > float16 > float32).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attention_reference.hpp"
#include "mixprec/core.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"

namespace error_bound_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
namespace nn = mixprec::nn;
using nn::ffn_activation;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

using bound_policies = std::tuple<p_f32, p_c_bf16, p_c_f16, p_bf16, p_f16, p_f64, p_promote>;

/// The largest error over its bound seen for one layer and policy, and where: checked against 1 (the
/// bound holds) and, for the 16-bit policies, against 1 / factor (the bound is not vacuous).
struct tally {
  double worst = 0.0;  // max |got - ref| / bound
  std::size_t elements = 0;
  double got = 0.0, ref = 0.0, bound = 0.0;
  void add(double g, double r, double b) {
    ++elements;
    const double ratio = std::abs(g - r) / b;
    if (!(ratio <= worst)) {  // NaN too
      worst = ratio;
      got = g;
      ref = r;
      bound = b;
    }
  }
};

/// Non-vacuity: for the 16-bit policies (c = bf16 or f16) the worst element must reach 1 / factor of its
/// bound, i.e. the bound is at most `factor` times the largest measured error. The bounds add every
/// rounding at its largest (sums of |terms|) where the measured errors of a few thousand Gaussian
/// elements partly cancel. Measured here (worst error / bound, 16-bit policies): dense 0.19-0.24,
/// layer_norm 0.26-0.29, rms_norm 0.34-0.89, feed_forward 0.036-0.048, attention 0.0014-0.0017 (its
/// tolerance is a first-order model times a safety factor of 8, about 600 times the measured error);
/// the factors below leave a margin of 2 to 3 over those.
template <class P>
constexpr bool low_precision =
    std::is_same_v<P, p_c_bf16> || std::is_same_v<P, p_c_f16> || std::is_same_v<P, p_bf16> || std::is_same_v<P, p_f16>;

template <class P>
void check(const tally& t, double factor) {
  INFO(t.elements << " elements; worst: got " << t.got << ", reference " << t.ref << ", bound " << t.bound
                  << ", error / bound " << t.worst);
  REQUIRE(t.elements > 0);
  CHECK(t.worst <= 1.0);
  if constexpr (low_precision<P>) CHECK(t.worst * factor >= 1.0);
}

/// Gaussian float32 values N(mean, sd^2).
std::vector<float> gaussian(std::size_t n, double mean, double sd, std::mt19937& rng) {
  std::normal_distribution<double> normal(mean, sd);
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(normal(rng));
  return v;
}

template <std::size_t N>
xt::xtensor<float, N> tensor(const std::vector<float>& v, const std::array<std::size_t, N>& shape) {
  auto t = xt::xtensor<float, N>::from_shape(shape);
  std::copy(v.begin(), v.end(), t.begin());
  return t;
}

using real = long double;

// The activations, from their definitions, in long double.
real ref_act(ffn_activation a, real x) {
  switch (a) {
    case ffn_activation::relu: return x > 0 ? x : 0.0L;
    case ffn_activation::gelu:
    case ffn_activation::geglu: return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L)));
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh:
      return 0.5L * x * (1.0L + std::tanh(std::sqrt(2.0L / std::numbers::pi_v<real>) * (x + 0.044715L * x * x * x)));
    case ffn_activation::silu:
    case ffn_activation::swiglu: return x / (1.0L + std::exp(-x));
  }
  return 0.0L;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("error_bound of dense holds on Gaussian data and is not vacuous", "[nn][error_bound]",
                        bound_policies) {
  using P = TestType;
  const std::size_t in = 64, out = 48, rows = 64;
  std::mt19937 rng(101);
  const auto w = gaussian(in * out, 0.0, 1.0 / std::sqrt(static_cast<double>(in)), rng);
  const auto b = gaussian(out, 0.0, 0.1, rng);
  const auto x = gaussian(rows * in, 0.0, 1.0, rng);
  const auto layer =
      nn::dense<P>::from_weights(tensor<2>(w, {in, out}), tensor<1>(b, {out}), nn::weight_layout::in_out);
  const auto y = layer(tensor<2>(x, {rows, in}));
  const auto bound = nn::error_bound<float>(layer, nn::parameters_from<float>);
  tally t;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      real ref = b[o], s = std::abs(real(b[o]));
      for (std::size_t k = 0; k < in; ++k) {
        ref += real(x[r * in + k]) * real(w[k * out + o]);
        s += std::abs(real(x[r * in + k]) * real(w[k * out + o]));
      }
      t.add(static_cast<double>(y(r, o)), static_cast<double>(ref),
            bound(static_cast<double>(s), static_cast<double>(std::abs(ref))));
    }
  }
  check<P>(t, 10.0);
}

TEMPLATE_LIST_TEST_CASE("error_bound of layer_norm holds on Gaussian data and is not vacuous", "[nn][error_bound]",
                        bound_policies) {
  using P = TestType;
  const std::size_t f = 64, rows = 48;
  std::mt19937 rng(102);
  const auto scale = gaussian(f, 1.0, 0.2, rng);
  const auto bias = gaussian(f, 0.0, 0.2, rng);
  const auto x = gaussian(rows * f, 0.5, 2.0, rng);
  const auto ln = nn::layer_norm<P>::from_params(tensor<1>(scale, {f}), tensor<1>(bias, {f}), 1e-5);
  const auto y = ln(tensor<2>(x, {rows, f}));
  const auto bound = nn::error_bound<float>(ln, nn::parameters_from<float>);
  tally t;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * f;
    real mean = 0, var = 0, max_abs = 0;
    for (std::size_t j = 0; j < f; ++j) mean += row[j];
    mean /= static_cast<real>(f);
    for (std::size_t j = 0; j < f; ++j) {
      var += (row[j] - mean) * (row[j] - mean);
      max_abs = std::max(max_abs, std::abs(real(row[j])));
    }
    const real sd = std::sqrt(var / static_cast<real>(f) + 1e-5L);
    const double a = static_cast<double>(max_abs / sd);
    for (std::size_t j = 0; j < f; ++j) {
      const real xhat = (row[j] - mean) / sd;
      const real ref = xhat * scale[j] + bias[j];
      t.add(static_cast<double>(y(r, j)), static_cast<double>(ref),
            bound(a, static_cast<double>(xhat), scale[j], bias[j]));
    }
  }
  check<P>(t, 10.0);
}

TEMPLATE_LIST_TEST_CASE("error_bound of rms_norm, plain and fused, holds on Gaussian data and is not vacuous",
                        "[nn][error_bound]", bound_policies) {
  using P = TestType;
  using R = nn::residual_t<P, float>;
  const std::size_t f = 64, rows = 48;
  std::mt19937 rng(103);
  const auto scale = gaussian(f, 1.0, 0.2, rng);
  const auto x = gaussian(rows * f, 0.5, 2.0, rng);
  const auto residual = gaussian(rows * f, 0.0, 4.0, rng);
  // 0.75 is a float but not a power of two: the stream's product by it rounds.
  const auto norm = nn::rms_norm<P>::from_scale(tensor<1>(scale, {f}), {.epsilon = 1e-5, .residual_scale = 0.75});
  const auto y = norm(tensor<2>(x, {rows, f}));
  auto res = xt::xtensor<R, 2>::from_shape({rows, f});
  std::copy(residual.begin(), residual.end(), res.begin());
  const auto fused = norm(tensor<2>(x, {rows, f}), res);
  const auto bound = nn::error_bound<float>(norm, nn::parameters_from<float>);
  // y_j = v_j / sqrt(mean(v^2) + eps) * scale_j of one exact row v.
  auto normalise = [&](const std::vector<real>& v, std::size_t j) {
    real ms = 0;
    for (real e : v) ms += e * e;
    return v[j] / std::sqrt(ms / static_cast<real>(f) + 1e-5L) * scale[j];
  };
  tally plain, sum, stream;
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<real> v(f), s(f);
    for (std::size_t j = 0; j < f; ++j) {
      v[j] = x[r * f + j];
      s[j] = real(residual[r * f + j]) + real(x[r * f + j]);
    }
    for (std::size_t j = 0; j < f; ++j) {
      const real ref = normalise(v, j), ref_fused = normalise(s, j), ref_stream = s[j] * 0.75L;
      plain.add(static_cast<double>(y(r, j)), static_cast<double>(ref), bound(static_cast<double>(std::abs(ref))));
      sum.add(static_cast<double>(fused.x(r, j)), static_cast<double>(ref_fused),
              bound.fused(static_cast<double>(std::abs(ref_fused))));
      stream.add(static_cast<double>(fused.residual(r, j)), static_cast<double>(ref_stream),
                 bound.stream(static_cast<double>(std::abs(ref_stream))));
    }
  }
  SECTION("plain") { check<P>(plain, 5.0); }
  SECTION("fused: the normalised sum") { check<P>(sum, 5.0); }
  SECTION("fused: the stream") {  // float32 errors only (float64 under float64): no 16-bit factor
    CHECK(stream.worst <= 1.0);
    if constexpr (!std::is_same_v<R, double>) CHECK(stream.worst * 10.0 >= 1.0);
  }
}

TEMPLATE_LIST_TEST_CASE("error_bound of feed_forward holds on Gaussian data and is not vacuous", "[nn][error_bound]",
                        bound_policies) {
  using P = TestType;
  const std::size_t in = 32, hidden = 64, rows = 32;
  for (ffn_activation act : {ffn_activation::gelu_tanh, ffn_activation::swiglu}) {
    CAPTURE(nn::activation_name(act));
    std::mt19937 rng(104 + static_cast<unsigned>(act));
    const bool gated = nn::is_gated(act);
    const auto w1 = gaussian(in * hidden, 0.0, 1.0 / std::sqrt(double(in)), rng);
    const auto w3 = gaussian(in * hidden, 0.0, 1.0 / std::sqrt(double(in)), rng);
    const auto w2 = gaussian(hidden * in, 0.0, 1.0 / std::sqrt(double(hidden)), rng);
    const auto b1 = gaussian(hidden, 0.0, 0.1, rng);
    const auto b3 = gaussian(hidden, 0.0, 0.1, rng);
    const auto b2 = gaussian(in, 0.0, 0.1, rng);
    const auto x = gaussian(rows * in, 0.0, 1.0, rng);
    auto dense = [](const std::vector<float>& k, const std::vector<float>& bias, std::size_t i, std::size_t o) {
      return nn::dense<P>::from_weights(tensor<2>(k, {i, o}), tensor<1>(bias, {o}), nn::weight_layout::in_out);
    };
    const nn::feed_forward<P> ffn(act, dense(w1, b1, in, hidden), dense(w2, b2, hidden, in),
                                  gated ? std::optional(dense(w3, b3, in, hidden)) : std::nullopt);
    const auto y = ffn(tensor<2>(x, {rows, in}));
    const auto bound = nn::error_bound<float>(ffn, nn::parameters_from<float>);
    tally t;
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<real> a(hidden);
      std::vector<double> da(hidden);
      for (std::size_t k = 0; k < hidden; ++k) {
        real h1 = b1[k], s1 = std::abs(real(b1[k])), h3 = b3[k], s3 = std::abs(real(b3[k]));
        for (std::size_t i = 0; i < in; ++i) {
          const real xi = x[r * in + i];
          h1 += xi * w1[i * hidden + k];
          s1 += std::abs(xi * w1[i * hidden + k]);
          h3 += xi * w3[i * hidden + k];
          s3 += std::abs(xi * w3[i * hidden + k]);
        }
        const real act_v = ref_act(act, h1);
        const double d_act =
            bound.activation(static_cast<double>(std::abs(h1)), bound.projection.accumulated(static_cast<double>(s1)));
        a[k] = gated ? act_v * h3 : act_v;
        da[k] = gated ? bound.gate(static_cast<double>(act_v), d_act, static_cast<double>(h3),
                                   bound.projection.accumulated(static_cast<double>(s3)))
                      : d_act;
      }
      for (std::size_t o = 0; o < in; ++o) {
        real ref = b2[o];
        auto sum = bound.output(b2[o]);
        for (std::size_t k = 0; k < hidden; ++k) {
          ref += a[k] * w2[k * in + o];
          sum.add(static_cast<double>(a[k]), da[k], w2[k * in + o]);
        }
        t.add(static_cast<double>(y(r, o)), static_cast<double>(ref), sum(static_cast<double>(std::abs(ref))));
      }
    }
    check<P>(t, 60.0);
  }
}

TEMPLATE_LIST_TEST_CASE("error_bound of attention (a first-order model) holds on Gaussian data", "[nn][error_bound]",
                        bound_policies) {
  using P = TestType;
  const nn::attention_config cfg{.d_model = 32,
                                 .n_heads = 4,
                                 .n_kv_heads = 2,
                                 .head_dim = 8,
                                 .causal = true,
                                 .rotary = nn::rotary_config{},
                                 .query_block = 8,
                                 .key_block = 8};
  const std::size_t batch = 2, seq = 24, d = cfg.d_model, q_width = 32, kv_width = 16;
  std::mt19937 rng(105);
  const double sd = 1.0 / std::sqrt(double(d));
  const auto wq = gaussian(d * q_width, 0.0, 2 * sd, rng), wk = gaussian(d * kv_width, 0.0, sd, rng),
             wv = gaussian(d * kv_width, 0.0, sd, rng), wo = gaussian(q_width * d, 0.0, sd, rng);
  const auto bq = gaussian(q_width, 0.0, 0.2, rng), bk = gaussian(kv_width, 0.0, 0.2, rng),
             bv = gaussian(kv_width, 0.0, 0.2, rng), bo = gaussian(d, 0.0, 0.2, rng);
  const auto x = gaussian(batch * seq * d, 0.0, 1.0, rng);
  auto dense = [](const std::vector<float>& k, const std::vector<float>& bias, std::size_t i, std::size_t o) {
    return nn::dense<P>::from_weights(tensor<2>(k, {i, o}), tensor<1>(bias, {o}), nn::weight_layout::in_out);
  };
  const nn::attention<P> layer(cfg, dense(wq, bq, d, q_width), dense(wk, bk, d, kv_width), dense(wv, bv, d, kv_width),
                               dense(wo, bo, q_width, d));
  const auto y = layer(tensor<3>(x, {batch, seq, d}));
  auto doubles = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const weights64 w{doubles(wq), doubles(wk), doubles(wv), doubles(wo),
                    doubles(bq), doubles(bk), doubles(bv), doubles(bo)};
  const auto r = reference_attention(cfg, batch, seq, doubles(x), w, {}, nullptr);
  const auto bound = nn::error_bound<float>(layer, seq, nn::parameters_from<float>);
  tally t;
  for (std::size_t i = 0; i < y.size(); ++i) {
    t.add(static_cast<double>(y.data()[i]), r.y[i], bound(r.bound[i], std::abs(r.y[i])));
  }
  check<P>(t, 2000.0);
}

TEST_CASE("error bounds grow as the compute type narrows: bfloat16 > float16 > float32", "[nn][error_bound]") {
  // The same float32 layers under p=f32 with c=bf16, c=f16 and c=f32 (o=f32), each bound evaluated at the
  // same element.
  std::mt19937 rng(106);
  const auto w = gaussian(16 * 16, 0.0, 0.25, rng);
  const auto b = gaussian(16, 0.0, 0.1, rng);
  const auto w2 = tensor<2>(w, {16, 16});
  const auto b2 = tensor<1>(b, {16});
  auto bounds = [&]<class P>(P) {
    const auto d = nn::dense<P>::from_weights(w2, b2, nn::weight_layout::in_out);
    const auto ln = nn::layer_norm<P>::from_params(b2, b2);
    const auto rms = nn::rms_norm<P>::from_scale(b2, {.scale_precision = nn::norm_scale_precision::compute});
    const nn::feed_forward<P> ffn(ffn_activation::swiglu, d, d, d);
    const nn::attention<P> attn(nn::attention_config{.d_model = 16, .n_heads = 2}, d, d, d, d);
    const auto fb = nn::error_bound<float>(ffn);
    auto out = fb.output(0.1);
    out.add(1.0, fb.gate(1.0, fb.activation(1.0, fb.projection.accumulated(4.0)), 1.0, 0.0), 0.5);
    return std::vector<double>{nn::error_bound<float>(d)(4.0, 1.0),
                               nn::error_bound<float>(ln)(3.0, 1.0, 1.0, 0.1),
                               nn::error_bound<float>(rms)(1.0),
                               nn::error_bound<float>(rms).fused(1.0),
                               out(1.0),
                               nn::error_bound<float>(attn, 16)(10.0, 1.0)};
  };
  const auto bf16 = bounds(p_c_bf16{}), f16 = bounds(p_c_f16{}), f32 = bounds(p_f32{});
  for (std::size_t i = 0; i < bf16.size(); ++i) {
    INFO("layer " << i << ": bf16 " << bf16[i] << ", f16 " << f16[i] << ", f32 " << f32[i]);
    CHECK(bf16[i] > f16[i]);
    CHECK(f16[i] > f32[i]);
    CHECK(f32[i] > 0.0);
  }
}

TEST_CASE("error_bound derives unit roundoffs from the formats and refuses injected products", "[nn][error_bound]") {
  STATIC_REQUIRE(nn::unit_roundoff<float>() == 0x1p-24);
  STATIC_REQUIRE(nn::unit_roundoff<double>() == 0x1p-53);
  STATIC_REQUIRE(nn::unit_roundoff<bfloat16>() == 0x1p-8);
  STATIC_REQUIRE(nn::unit_roundoff<float16>() == 0x1p-11);
  STATIC_REQUIRE(nn::rounding_error<float, bfloat16>() == 0.0);
  STATIC_REQUIRE(nn::rounding_error<bfloat16, float>() == 0x1p-8);
  // dense, K = 10, p=f32 c=bf16 o=f32, float input: m = 2 u + u^2 + gamma_12(2^-24) (1 + u)^2, u_O = 0.
  const nn::dense<p_c_bf16> d(10, 3);
  const auto bound = nn::error_bound<float>(d);
  const double u = 0x1p-8, g = 12 * 0x1p-24 / (1 - 12 * 0x1p-24);
  CHECK(bound.magnitude_coefficient == Approx(2 * u + u * u + g * (1 + u) * (1 + u)).epsilon(1e-15));
  CHECK(bound.output_coefficient == 0.0);
  // bf16 output rounds once more; parameters from float32 into bf16 storage round once more.
  CHECK(nn::error_bound<float>(nn::dense<p_bf16>(10, 3)).output_coefficient == u);
  CHECK(nn::error_bound<float>(nn::dense<p_bf16>(10, 3), nn::parameters_from<float>).magnitude_coefficient >
        nn::error_bound<float>(nn::dense<p_bf16>(10, 3)).magnitude_coefficient);
  // An injected product (float8, ...) is not what these bounds model.
  struct plain_product : nn::dot_product {
    void forward(std::span<const float>, std::span<const float>, std::span<float>, nn::dot_shape) override {}
    void backward(std::span<const float>, std::span<const float>, std::span<const float>, std::span<float>,
                  std::span<float>, nn::dot_shape) override {}
  };
  auto injected = d;
  injected.set_dot(std::make_shared<plain_product>());
  CHECK_THROWS_AS(nn::error_bound<float>(injected), std::invalid_argument);
}

}  // namespace error_bound_test
