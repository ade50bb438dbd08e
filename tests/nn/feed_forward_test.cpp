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
#include <utility>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"
#include "same_roundings.hpp"

namespace feed_forward_test {

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
  const std::size_t in = 12, hidden = 20, rows = 4;
  // Every level this CPU runs: SiLU and tanh-GELU take the vectorised kernel from avx2 up
  // (kernels/detail/activation_rows.hpp), the scalar formulas at portable.
  for (const mixprec::isa level : mixprec::all_isas) {
    if (level > mixprec::detected_isa()) continue;
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    for (ffn_activation act : all_activations) {
      CAPTURE(nn::activation_name(act));
      std::mt19937 rng(static_cast<unsigned>(act) + 100);
      const auto ffn = nn::feed_forward<P>::init(act, in, hidden, rng, nn::use_bias::yes);
      auto xf = xt::xtensor<float, 2>::from_shape({rows, in});
      std::normal_distribution<float> normal(0.0f, 1.5f);
      for (auto& v : xf) v = normal(rng);
      // Inputs of float under every policy, and of bfloat16, float16 and double where they make a case of
      // their own (input_case, policies.hpp): the same values rounded to the input type.
      for_each_type<float, bfloat16, float16, double>([&]<class T>() {
        if constexpr (input_case<P, T>) {
          using O = nn::output_t<P, T>;
          const mixprec::dtype input = mixprec::dtype_of_v<T>;
          CAPTURE(input);
          auto x = xt::xtensor<T, 2>::from_shape({rows, in});
          for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(xf.data()[i]);
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
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The same roundings as the layer (issue 12): a float64 reference that rounds to C where feed_forward
// does, so that only float32 arithmetic is left and the bound is tight; with planted bugs.
// ---------------------------------------------------------------------------------------------

namespace {

/// Bugs that can be planted in `same_roundings_ffn` (all false: the layer as documented).
struct ffn_bugs {
  bool accumulate_in_c = false;         ///< the three GEMMs' sums rounded to C after each term
  bool rounded_pre_activation = false;  ///< w1 x and w3 x rounded to C before the activation (kept in float32)
  bool unrounded_hidden = false;        ///< the hidden activation left in float32 for w2 (rounded to C)
};

/// max |act'|: gelu 1.129, gelu_tanh 1.13, silu 1.0998; relu 1.
double act_lipschitz(ffn_activation a) { return a == ffn_activation::relu ? 1.0 : 1.13; }

/// A bound on |act(x) - act(x) evaluated in float32| for a float x, by the formulas of
/// kernels/activations.hpp, relative to `magnitude` >= |act(x)|, in units of u = 2^-24 (exp within
/// 2 ulps = 4 u, erfc within 8 ulps = 16 u):
///  - silu x / (1 + e^-x): exp 4 u, the sum and the quotient u each: 6 u;
///  - gelu 0.5 x erfc(-x / sqrt 2): the argument z is off by 2 u |z| (a rounded constant, a product),
///    which moves erfc by |d ln erfc / dz| 2 u |z| <= (2 |z| + 1.5) 2 u |z|; erfc 16 u, the products 2 u:
///    (2 x^2 + 3 |x| + 20) u;
///  - gelu_tanh x / (1 + e^-2y), y = k (x + a x^3): y is off by 7 u |y| (two rounded constants, five
///    operations, no cancellation), which moves e^-2y by 14 u |y|; exp 4 u, the sum and the quotient:
///    (14 |y| + 8) u;
///  - relu: exact.
double act_float_error(ffn_activation a, double x, double magnitude) {
  const double u = u_f32(), ax = std::abs(x);
  switch (a) {
    case ffn_activation::relu: return 0.0;
    case ffn_activation::silu:
    case ffn_activation::swiglu: return 6.0 * u * magnitude;
    case ffn_activation::gelu:
    case ffn_activation::geglu: return (2.0 * ax * ax + 3.0 * ax + 20.0) * u * magnitude;
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh: {
      const double y = std::sqrt(2.0 / std::numbers::pi) * (ax + 0.044715 * ax * ax * ax);
      return (14.0 * y + 8.0) * u * magnitude;
    }
  }
  return 0.0;
}

/// feed_forward in float64 with the layer's roundings (nn/feed_forward.hpp), for x [rows, in]:
/// x, the kernels and the biases rounded to C; h1 = w1 x + b1 and h3 = w3 x + b3 summed in float32 and
/// kept there; act(h1) [* h3] in float32, rounded to C; y = w2 hidden + b2 summed in float32, rounded to
/// O. Bounds, per element, of what float32 arithmetic leaves (same_roundings.hpp): gamma_{n+1} of the
/// sums' magnitudes; through the activation, its Lipschitz constant times h1's bound plus its float32
/// error (`act_float_error`); the gate product's propagation and rounding; the rounding points as
/// `round_within`. Returns {y, bound} [rows, out].
template <class P>
std::pair<std::vector<double>, std::vector<double>> same_roundings_ffn(const nn::feed_forward<P>& ffn,
                                                                       const xt::xtensor<float, 2>& x,
                                                                       double (*to_c)(double), double (*to_o)(double),
                                                                       const ffn_bugs& bug = {}) {
  const std::size_t rows = x.shape()[0], in = ffn.in_features(), hidden = ffn.hidden_features(),
                    out = ffn.out_features();
  const ffn_activation act = ffn.activation();
  const double u = u_f32();
  auto sum = [&](double s, double term) { return bug.accumulate_in_c ? add_in(to_c, s, term) : s + term; };
  // in [k] · kernel(:, o) + bias(o), operands rounded to C, with the bound of its float32 sum.
  auto dot = [&](const nn::dense<P>& d, const std::vector<double>& v, const std::vector<double>& ve, std::size_t o) {
    const double bias = d.bias() ? to_c(static_cast<double>(d.bias()->data()[o])) : 0.0;
    double s = 0.0, mag = std::abs(bias), prop = 0.0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double wv = to_c(static_cast<double>(d.kernel()(i, o)));
      s = sum(s, v[i] * wv);
      mag += std::abs(v[i] * wv);
      prop += ve[i] * std::abs(wv);
    }
    const double g = gamma_f32(v.size() + 1);
    return bounded{sum(s, bias), prop + g * (mag + prop)};
  };
  std::vector<double> y(rows * out), bound(rows * out);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> xc(in), zero(in, 0.0), a(hidden), ae(hidden);
    for (std::size_t i = 0; i < in; ++i) xc[i] = to_c(static_cast<double>(x(r, i)));
    for (std::size_t k = 0; k < hidden; ++k) {
      bounded h1 = dot(ffn.w1(), xc, zero, k);
      if (bug.rounded_pre_activation) h1 = round_within(to_c, h1.v, h1.e);
      const double f = ref_act(act, h1.v);
      const double fe = act_lipschitz(act) * h1.e +
                        act_float_error(act, std::abs(h1.v) + h1.e, std::abs(f) + act_lipschitz(act) * h1.e);
      bounded g{f, fe};
      if (nn::is_gated(act)) {
        bounded h3 = dot(*ffn.w3(), xc, zero, k);
        if (bug.rounded_pre_activation) h3 = round_within(to_c, h3.v, h3.e);
        const double prop = fe * std::abs(h3.v) + std::abs(f) * h3.e + fe * h3.e;
        g = {f * h3.v, prop + u * (std::abs(f) + fe) * (std::abs(h3.v) + h3.e)};
      }
      const bounded h = round_within(bug.unrounded_hidden ? &round_as<float> : to_c, g.v, g.e);
      a[k] = h.v;
      ae[k] = h.e;
    }
    for (std::size_t o = 0; o < out; ++o) {
      const bounded s = dot(ffn.w2(), a, ae, o);
      const bounded v = round_within(to_o, s.v, s.e);
      y[r * out + o] = v.v;
      bound[r * out + o] = v.e;
    }
  }
  return {y, bound};
}

/// Non-zero biases N(0, 0.3^2) in the param type, so that their rounding to C is exercised.
template <class P>
void random_biases(nn::dense<P>& d, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 0.3);
  for (auto& b : *d.bias()) b = static_cast<typename P::param_type>(normal(rng));
}

}  // namespace

TEMPLATE_LIST_TEST_CASE(
    "feed_forward equals a reference with its roundings up to float32 arithmetic, and sees planted bugs",
    "[nn][feed_forward][same_roundings]", compute16_policies) {
  // The bound holds only what float32 arithmetic leaves (see same_roundings_ffn); where the layer rounds
  // to C or O a value within reach of a rounding boundary, one ulp there, carried on through |w2|.
  // Each planted bug is a reference computed with it: the layer must be outside its bound somewhere and
  // the two references must be further apart than both bounds, so a layer with the bug cannot pass.
  // (A relu block gives the same result whether h1 is rounded to C before relu or not, so that bug is
  // not planted there: relu commutes with rounding.)
  using P = TestType;
  using C = nn::compute_t<P, float>;
  using O = nn::output_t<P, float>;
  const std::size_t in = 12, hidden = 20, rows = 4;
  for (ffn_activation act : all_activations) {
    CAPTURE(nn::activation_name(act));
    std::mt19937 rng(static_cast<unsigned>(act) + 200);
    auto ffn = nn::feed_forward<P>::init(act, in, hidden, rng, nn::use_bias::yes);
    random_biases(ffn.w1(), rng);
    random_biases(ffn.w2(), rng);
    if (ffn.w3()) random_biases(*ffn.w3(), rng);
    auto x = xt::xtensor<float, 2>::from_shape({rows, in});
    std::normal_distribution<float> normal(0.0f, 1.5f);
    for (auto& v : x) v = normal(rng);
    const auto y = std::as_const(ffn)(x);
    const auto [ref, bound] = same_roundings_ffn(ffn, x, &round_as<C>, &round_as<O>);
    const comparison c = compare_with(y, ref, bound);
    INFO(c.outside << " of " << c.elements << " outside, worst error / bound " << c.worst << ", " << c.exact
                   << " exact");
    for (std::size_t i = 0; i < ref.size(); ++i) {
      INFO("element " << i << ": got " << static_cast<double>(y.data()[i]) << ", reference " << ref[i] << ", bound "
                      << bound[i]);
      REQUIRE(std::abs(static_cast<double>(y.data()[i]) - ref[i]) <= bound[i]);
    }
    std::vector<std::pair<const char*, ffn_bugs>> bugs{
        {"sums accumulated in C", {.accumulate_in_c = true}},
        {"hidden activation not rounded to C", {.unrounded_hidden = true}}};
    if (act != ffn_activation::relu) bugs.push_back({"w1 x, w3 x rounded to C", {.rounded_pre_activation = true}});
    for (const auto& [name, bug] : bugs) {
      const auto [bug_ref, bug_bound] = same_roundings_ffn(ffn, x, &round_as<C>, &round_as<O>, bug);
      const comparison b = separate(compare_with(y, bug_ref, bug_bound), ref, bound, bug_ref, bug_bound);
      INFO("planted bug: " << name << ": the layer is outside its bound at " << b.outside << " of " << b.elements
                           << " elements (worst error / bound " << b.worst << "); separation " << b.separation);
      CHECK(b.outside > 0);
      CHECK(b.separation > 1.0);
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

}  // namespace feed_forward_test
