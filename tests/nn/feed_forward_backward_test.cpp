// Tests of nn::feed_forward's training interface (nn/feed_forward.hpp): forward(x, ctx) against
// operator(), backward(ctx, dy, grads) against float64 central differences (TRAINING.md §5) for every
// activation with and without biases, low-precision policies against a float64 VJP written here with
// plain loops (with a running error bound derived from the formats), +=, the parameter walk, errors.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/arch/isa.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace feed_forward_backward_test {

namespace nn = mixprec::nn;
using gradcheck::tensor_from;
using layer_tests::p_f64;
using nn::ffn_activation;

namespace {

const ffn_activation all_activations[] = {ffn_activation::relu,      ffn_activation::gelu,   ffn_activation::gelu_tanh,
                                          ffn_activation::silu,      ffn_activation::swiglu, ffn_activation::geglu,
                                          ffn_activation::geglu_tanh};

/// The parameters and data of one test problem, as doubles: x [rows, in], w1/w3 [in, hidden],
/// w2 [hidden, out], biases (empty when absent), the cotangent dy [rows, out].
struct problem {
  ffn_activation act{};
  std::size_t rows = 0, in = 0, hidden = 0, out = 0;
  std::vector<double> x, w1, b1, w2, b2, w3, b3, dy;
};

/// Uniform [-1, 1) data from `seed`, each value passed through `round` (to pre-round to a format).
template <class Round>
problem make_problem(ffn_activation act, std::size_t rows, std::size_t in, std::size_t hidden, std::size_t out,
                     bool bias, unsigned seed, Round round) {
  problem p{act, rows, in, hidden, out, {}, {}, {}, {}, {}, {}, {}, {}};
  auto gen = [&](std::size_t n, unsigned s) {
    auto v = gradcheck::uniform(n, seed * 16 + s);
    for (auto& e : v) e = round(e);
    return v;
  };
  p.x = gen(rows * in, 0);
  p.w1 = gen(in * hidden, 1);
  p.w2 = gen(hidden * out, 2);
  p.dy = gen(rows * out, 3);
  if (bias) {
    p.b1 = gen(hidden, 4);
    p.b2 = gen(out, 5);
  }
  if (nn::is_gated(act)) {
    p.w3 = gen(in * hidden, 6);
    if (bias) p.b3 = gen(hidden, 7);
  }
  return p;
}
problem make_problem(ffn_activation act, std::size_t rows, std::size_t in, std::size_t hidden, std::size_t out,
                     bool bias, unsigned seed) {
  return make_problem(act, rows, in, hidden, out, bias, seed, [](double v) { return v; });
}

template <class P>
nn::dense<P> make_dense(const std::vector<double>& w, const std::vector<double>& b, std::size_t in, std::size_t out) {
  using W = typename P::param_type;
  if (b.empty()) return nn::dense<P>(tensor_from<W, 2>(w, {in, out}));
  return nn::dense<P>(tensor_from<W, 2>(w, {in, out}), tensor_from<W, 1>(b, {out}));
}

template <class P>
nn::feed_forward<P> make_ffn(const problem& p) {
  std::optional<nn::dense<P>> w3;
  if (!p.w3.empty()) w3 = make_dense<P>(p.w3, p.b3, p.in, p.hidden);
  return nn::feed_forward<P>(p.act, make_dense<P>(p.w1, p.b1, p.in, p.hidden),
                             make_dense<P>(p.w2, p.b2, p.hidden, p.out), std::move(w3));
}

// The activations and their derivatives from the textbook definitions, in double.
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
double ref_act_derivative(ffn_activation a, double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  switch (a) {
    case ffn_activation::relu: return x > 0 ? 1.0 : 0.0;
    case ffn_activation::gelu:
    case ffn_activation::geglu:
      return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh: {
      const double t = std::tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case ffn_activation::silu:
    case ffn_activation::swiglu: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 + x * (1.0 - s));
    }
  }
  return 0.0;
}

// Opmath (float32) evaluation errors of act and act' at a, in units of u_f32, from the bounds proved
// in tests/kernels/activations_test.cpp (relative to |act| and to the magnitude of act''s two terms,
// which is below 1 + |a|).
double act_eval_error(ffn_activation a, double x) {
  const double y = std::abs(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x));
  switch (a) {
    case ffn_activation::relu: return 0.0;
    case ffn_activation::gelu:
    case ffn_activation::geglu: return (8.0 + 2.0 * (x * x + 1.0)) * std::abs(ref_act(a, x));
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh: return 2.0 * (12.0 * y + 4.0) * std::abs(ref_act(a, x));
    case ffn_activation::silu:
    case ffn_activation::swiglu: return 6.0 * std::abs(ref_act(a, x));
  }
  return 0.0;
}
double derivative_eval_error(ffn_activation a, double x) {
  const double y = std::abs(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x));
  switch (a) {
    case ffn_activation::relu: return 0.0;
    case ffn_activation::gelu:
    case ffn_activation::geglu: return (12.0 + 3.0 * (x * x + 1.0)) * (1.0 + std::abs(x));
    case ffn_activation::gelu_tanh:
    case ffn_activation::geglu_tanh: return 2.0 * (12.0 * y + 16.0) * (1.0 + std::abs(x));
    case ffn_activation::silu:
    case ffn_activation::swiglu: return 10.0 * (1.0 + std::abs(x));
  }
  return 0.0;
}

/// The float64 VJP of the block, in plain loops, and for each result a bound `e_*` on the error of the
/// low-precision computation (operands already in C: u_c is C's unit roundoff, u the accumulator's
/// (float32), u_t that of rounding an accumulator value to the input type). Running error analysis:
/// each intermediate v carries a bound E_v; a length-n sum of products of values with bounds adds
/// (n + 1) u Σ|terms|; a product of values with bounds has (|p| + E_p)(|q| + E_q) - |p q|; a rounding
/// to C adds u_c (|v| + E_v). The rounding of a GEMM operand to C is where the policy's precision
/// enters: h (the hidden activation, forward), da and db (the cotangents of w1 and w3, backward).
struct reference {
  std::vector<double> dx, dw1, db1, dw2, db2, dw3, db3;
  std::vector<double> e_dx, e_dw1, e_db1, e_dw2, e_db2, e_dw3, e_db3;
  double min_abs_a = std::numeric_limits<double>::infinity();  ///< the pre-activation closest to 0 (the ReLU kink)
};

reference vjp(const problem& p, double u_c = 0.0, double u = 0.0, double u_t = 0.0) {
  const std::size_t R = p.rows, I = p.in, H = p.hidden, O = p.out;
  const bool gated = !p.w3.empty();
  reference r;
  std::vector<double> h(R * H), eh(R * H), da(R * H), eda(R * H), db(R * H), edb(R * H);
  auto prod_err = [](double a, double ea, double b, double eb) {
    return (std::abs(a) + ea) * (std::abs(b) + eb) - std::abs(a * b);
  };
  for (std::size_t n = 0; n < R; ++n) {
    for (std::size_t j = 0; j < H; ++j) {
      // Pre-activations a = x w1 + b1 and (gated) g = x w3 + b3, summed in the accumulator.
      auto project = [&](const std::vector<double>& w, const std::vector<double>& b, double& err) {
        double v = b.empty() ? 0.0 : b[j], s = std::abs(v);
        for (std::size_t i = 0; i < I; ++i) {
          v += p.x[n * I + i] * w[i * H + j];
          s += std::abs(p.x[n * I + i] * w[i * H + j]);
        }
        err = static_cast<double>(I + 2) * u * s;
        return v;
      };
      double ea = 0.0, eg = 0.0;
      const double a = project(p.w1, p.b1, ea);
      const double g = gated ? project(p.w3, p.b3, eg) : 1.0;
      r.min_abs_a = std::min(r.min_abs_a, std::abs(a));
      const double act = ref_act(p.act, a), d = ref_act_derivative(p.act, a);
      // |act'| <= 1.13 and |act''| <= 0.8 for every activation here; ReLU's derivative may flip where the
      // computed a can have the other sign.
      const double e_act = 1.13 * ea + u * act_eval_error(p.act, a);
      const double e_d = p.act == ffn_activation::relu ? (std::abs(a) <= ea ? 1.0 : 0.0)
                                                       : 0.8 * ea + u * derivative_eval_error(p.act, a);
      // Hidden h = round_C(act(a) g).
      const double hv = act * g;
      const double e_hpre = gated ? prod_err(act, e_act, g, eg) + u * std::abs(hv) : e_act;
      h[n * H + j] = hv;
      eh[n * H + j] = e_hpre + u_c * (std::abs(hv) + e_hpre);
      // dh = dy w2ᵀ in the accumulator (exact operands).
      double dh = 0.0, sdh = 0.0;
      for (std::size_t k = 0; k < O; ++k) {
        dh += p.dy[n * O + k] * p.w2[j * O + k];
        sdh += std::abs(p.dy[n * O + k] * p.w2[j * O + k]);
      }
      const double edh = static_cast<double>(O + 1) * u * sdh;
      // da = dh g act'(a), db = dh act(a), each rounded to C as an operand of the backward GEMMs.
      const double dav = dh * g * d;
      const double eda_pre =
          (std::abs(dh) + edh) * (std::abs(g) + eg) * (std::abs(d) + e_d) - std::abs(dav) + 2.0 * u * std::abs(dav);
      da[n * H + j] = dav;
      eda[n * H + j] = eda_pre + u_c * (std::abs(dav) + eda_pre);
      if (gated) {
        const double dbv = dh * act;
        const double edb_pre = prod_err(dh, edh, act, e_act) + u * std::abs(dbv);
        db[n * H + j] = dbv;
        edb[n * H + j] = edb_pre + u_c * (std::abs(dbv) + edb_pre);
      }
    }
  }
  // Weight gradients: Σrows of products of operands (with their bounds) summed in the accumulator.
  auto weight_grad = [&](const std::vector<double>& left, const std::vector<double>& eleft, std::size_t L,
                         const std::vector<double>& right, const std::vector<double>& eright, std::size_t Rn,
                         std::vector<double>& out, std::vector<double>& err) {
    out.assign(L * Rn, 0.0);
    err.assign(L * Rn, 0.0);
    for (std::size_t i = 0; i < L; ++i) {
      for (std::size_t k = 0; k < Rn; ++k) {
        double s = 0.0, mag = 0.0, e = 0.0;
        for (std::size_t n = 0; n < R; ++n) {
          const double a = left[n * L + i], b = right[n * Rn + k];
          const double ea_ = eleft.empty() ? 0.0 : eleft[n * L + i], eb_ = eright.empty() ? 0.0 : eright[n * Rn + k];
          s += a * b;
          e += prod_err(a, ea_, b, eb_);
          mag += (std::abs(a) + ea_) * (std::abs(b) + eb_);
        }
        out[i * Rn + k] = s;
        err[i * Rn + k] = e + static_cast<double>(R + 1) * u * mag;
      }
    }
  };
  const std::vector<double> none;
  const std::vector<double> ones(R, 1.0);
  weight_grad(h, eh, H, p.dy, none, O, r.dw2, r.e_dw2);
  weight_grad(p.x, none, I, da, eda, H, r.dw1, r.e_dw1);
  if (!p.b2.empty()) weight_grad(ones, none, 1, p.dy, none, O, r.db2, r.e_db2);
  if (!p.b1.empty()) weight_grad(ones, none, 1, da, eda, H, r.db1, r.e_db1);
  if (gated) {
    weight_grad(p.x, none, I, db, edb, H, r.dw3, r.e_dw3);
    if (!p.b3.empty()) weight_grad(ones, none, 1, db, edb, H, r.db3, r.e_db3);
  }
  // dx = da w1ᵀ + db w3ᵀ, summed in the accumulator, rounded once to the input type.
  r.dx.assign(R * I, 0.0);
  r.e_dx.assign(R * I, 0.0);
  for (std::size_t n = 0; n < R; ++n) {
    for (std::size_t i = 0; i < I; ++i) {
      double s = 0.0, e = 0.0, mag = 0.0;
      for (std::size_t j = 0; j < H; ++j) {
        s += da[n * H + j] * p.w1[i * H + j];
        e += eda[n * H + j] * std::abs(p.w1[i * H + j]);
        mag += (std::abs(da[n * H + j]) + eda[n * H + j]) * std::abs(p.w1[i * H + j]);
        if (gated) {
          s += db[n * H + j] * p.w3[i * H + j];
          e += edb[n * H + j] * std::abs(p.w3[i * H + j]);
          mag += (std::abs(db[n * H + j]) + edb[n * H + j]) * std::abs(p.w3[i * H + j]);
        }
      }
      e += static_cast<double>(H + 2) * u * mag;
      r.dx[n * I + i] = s;
      r.e_dx[n * I + i] = e + u_t * (std::abs(s) + e);
    }
  }
  return r;
}

template <class A>
std::span<const A> flat(const A* data, std::size_t n) {
  return std::span<const A>(data, n);
}

/// Every element of `got` within its bound `err` of `ref` (plus a tiny absolute slack for zeros).
template <class G>
void require_within(const char* what, const G& got, const std::vector<double>& ref, const std::vector<double>& err) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got.data()[i]);
    if (!(std::abs(g - ref[i]) <= err[i] + 1e-30)) {
      INFO(what << "[" << i << "]: got " << g << ", float64 reference " << ref[i] << ", bound " << err[i]);
      CHECK(false);
      return;
    }
  }
  SUCCEED(what << ": " << ref.size() << " elements within their bounds");
}

/// The names of a walk, in order.
template <class Walk>
std::vector<std::string> names_of(Walk&& walk) {
  std::vector<std::string> names;
  walk([&](std::string_view name, auto&) { names.emplace_back(name); });
  return names;
}

}  // namespace

TEST_CASE("feed_forward backward matches float64 central differences for every activation, with and without biases",
          "[nn][feed_forward][backward]") {
  const std::size_t in = 4, hidden = 5, out = 3;
  for (ffn_activation act : all_activations) {
    for (bool bias : {true, false}) {
      CAPTURE(nn::activation_name(act), bias);
      const problem pr = make_problem(act, std::size_t{6}, in, hidden, out, bias, 17 + static_cast<unsigned>(act));
      // Central differences with eps 1e-6 move a pre-activation by at most ~1e-5 (|x|, |w| < 1, in = 4):
      // keep ReLU's kink at least 100 times farther.
      REQUIRE(vjp(pr).min_abs_a > 1e-3);
      auto ffn = make_ffn<p_f64>(pr);
      auto x = tensor_from<double, 3>(pr.x, {2, 3, in});
      const std::vector<double>& w = pr.dy;

      nn::feed_forward<p_f64>::saved<double> ctx;
      const auto y = ffn.forward(x, ctx);
      REQUIRE(bool(y == ffn(x)));
      auto grads = ffn.zero_gradients();
      const auto dy = tensor_from<double, 3>(w, {2, 3, out});
      const auto dx = ffn.backward(ctx, dy, grads);
      STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(dx)>, xt::xtensor<double, 3>>);
      REQUIRE(dx.shape() == x.shape());

      auto loss = [&] { return gradcheck::weighted_sum(ffn(x), w); };
      gradcheck::require_close("dx", flat(dx.data(), dx.size()), gradcheck::numeric_gradient(x.data(), x.size(), loss));
      // Every parameter, found by name in the gradients (the walk's names are checked below).
      std::map<std::string, std::span<const double>> g;
      grads.for_each([&](std::string_view name, const auto& t) { g[std::string(name)] = flat(t.data(), t.size()); });
      std::vector<std::string> expected{"w1.kernel", "w2.kernel"};
      if (bias) expected = {"w1.kernel", "w1.bias", "w2.kernel", "w2.bias"};
      if (nn::is_gated(act)) {
        expected.emplace_back("w3.kernel");
        if (bias) expected.emplace_back("w3.bias");
      }
      std::vector<std::string> checked;
      ffn.for_each_parameter([&](std::string_view name, auto& param) {
        checked.emplace_back(name);
        REQUIRE(g.count(std::string(name)) == 1);
        gradcheck::require_close(std::string(name), g[std::string(name)],
                                 gradcheck::numeric_gradient(param.data(), param.size(), loss));
      });
      CHECK(checked == expected);
    }
  }
}

TEST_CASE("feed_forward backward of rank-1 and xarray inputs returns the same kind of container",
          "[nn][feed_forward][backward]") {
  const problem pr = make_problem(ffn_activation::geglu, 1, 3, 4, 2, true, 40);
  auto ffn = make_ffn<p_f64>(pr);
  auto x1 = tensor_from<double, 1>(pr.x, {3});
  nn::feed_forward<p_f64>::saved<double> ctx;
  (void)ffn.forward(x1, ctx);
  auto g1 = ffn.zero_gradients();
  const auto dx1 = ffn.backward(ctx, tensor_from<double, 1>(pr.dy, {2}), g1);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(dx1)>, xt::xtensor<double, 1>>);
  xt::xarray<double> xa = tensor_from<double, 2>(pr.x, {1, 3});
  xt::xarray<double> dya = tensor_from<double, 2>(pr.dy, {1, 2});
  (void)ffn.forward(xa, ctx);
  auto ga = ffn.zero_gradients();
  const auto dxa = ffn.backward(ctx, dya, ga);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(dxa)>, xt::xarray<double>>);
  REQUIRE(dxa.dimension() == 2);
  const auto ref = vjp(pr);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(dx1(i) == Approx(ref.dx[i]).epsilon(1e-12));
    CHECK(dxa(0, i) == Approx(ref.dx[i]).epsilon(1e-12));
  }
}

TEST_CASE("feed_forward float64 backward agrees with the plain-loop float64 VJP on a larger block",
          "[nn][feed_forward][backward]") {
  // The reference used for the low-precision policies below, checked against the layer under float64
  // (which the central differences above validate): both are float64 computations of the same sums, so
  // they agree to within a few float64 roundings of the magnitudes (bound: vjp's with u = 2^-53).
  for (ffn_activation act : all_activations) {
    CAPTURE(nn::activation_name(act));
    const problem pr = make_problem(act, 8, 16, 24, 12, true, 60 + static_cast<unsigned>(act));
    const auto ref = vjp(pr, 0.0, std::ldexp(1.0, -53) * 4, 0.0);
    auto ffn = make_ffn<p_f64>(pr);
    nn::feed_forward<p_f64>::saved<double> ctx;
    (void)ffn.forward(tensor_from<double, 2>(pr.x, {pr.rows, pr.in}), ctx);
    auto g = ffn.zero_gradients();
    const auto dx = ffn.backward(ctx, tensor_from<double, 2>(pr.dy, {pr.rows, pr.out}), g);
    require_within("dx", dx, ref.dx, ref.e_dx);
    require_within("w1.kernel", g.w1.kernel, ref.dw1, ref.e_dw1);
    require_within("w2.kernel", g.w2.kernel, ref.dw2, ref.e_dw2);
    require_within("w1.bias", *g.w1.bias, ref.db1, ref.e_db1);
    require_within("w2.bias", *g.w2.bias, ref.db2, ref.e_db2);
    if (nn::is_gated(act)) {
      require_within("w3.kernel", g.w3->kernel, ref.dw3, ref.e_dw3);
      require_within("w3.bias", *g.w3->bias, ref.db3, ref.e_db3);
    }
  }
}

TEMPLATE_TEST_CASE(
    "feed_forward backward under a low-precision policy matches the float64 VJP within the format's bound",
    "[nn][feed_forward][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  // Inputs and cotangent in the param type (float, or bfloat16 for p_bf16): T.
  using T = std::conditional_t<std::is_same_v<typename P::param_type, float>, float, typename P::param_type>;
  using G = typename nn::feed_forward<P>::grad_type;
  STATIC_REQUIRE(std::is_same_v<G, float>);
  const double u_c = layer_tests::unit_roundoff<C>();
  const double u = layer_tests::unit_roundoff<float>();
  const double u_t = layer_tests::rounding_to<T, float>();
  // Everything already representable in C: only the internal roundings differ from float64. The bound
  // of each element is vjp's running error bound (see `reference`): u_c enters through the three
  // roundings of GEMM operands to C (h, da, db), u through the float32 sums, u_t through dx's rounding.
  auto to_c = [](double v) { return static_cast<double>(static_cast<float>(C(static_cast<float>(v)))); };
  // Every level this CPU runs: SiLU's and tanh-GELU's forward and backward element-wise parts take the
  // vectorised kernels from avx2 up (kernels/detail/activation_rows.hpp), the scalar formulas at portable.
  for (const mixprec::isa level : mixprec::all_isas) {
    if (level > mixprec::detected_isa()) continue;
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    for (ffn_activation act : all_activations) {
      for (bool bias : {true, false}) {
        CAPTURE(nn::activation_name(act), bias);
        const problem pr = make_problem(act, 16, 32, 48, 24, bias, 90 + static_cast<unsigned>(act), to_c);
        const auto ref = vjp(pr, u_c, u, u_t);
        auto ffn = make_ffn<P>(pr);
        typename nn::feed_forward<P>::template saved<T> ctx;
        (void)ffn.forward(tensor_from<T, 2>(pr.x, {pr.rows, pr.in}), ctx);
        auto g = ffn.zero_gradients();
        const auto dx = ffn.backward(ctx, tensor_from<T, 2>(pr.dy, {pr.rows, pr.out}), g);
        STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(dx)>, xt::xtensor<T, 2>>);
        STATIC_REQUIRE(std::is_same_v<typename decltype(g.w1.kernel)::value_type, float>);
        require_within("dx", dx, ref.dx, ref.e_dx);
        require_within("w1.kernel", g.w1.kernel, ref.dw1, ref.e_dw1);
        require_within("w2.kernel", g.w2.kernel, ref.dw2, ref.e_dw2);
        if (bias) {
          require_within("w1.bias", *g.w1.bias, ref.db1, ref.e_db1);
          require_within("w2.bias", *g.w2.bias, ref.db2, ref.e_db2);
        }
        if (nn::is_gated(act)) {
          require_within("w3.kernel", g.w3->kernel, ref.dw3, ref.e_dw3);
          if (bias) require_within("w3.bias", *g.w3->bias, ref.db3, ref.e_db3);
        }
        // Backstop, whole tensors: relative L2 error below 4 u_C, for the at most three chained roundings
        // to C on any path (h or da/db in the GEMM operands, then dx's own rounding to T = C for p_bf16)
        // plus margin; float32 sums add (k + 1) u_f32 < 0.01 u_C.
        auto rel = [](const auto& got, const std::vector<double>& r) {
          return gradcheck::relative_l2(flat(got.data(), got.size()), std::span<const double>(r));
        };
        CHECK(rel(dx, ref.dx) <= 4 * u_c);
        CHECK(rel(g.w1.kernel, ref.dw1) <= 4 * u_c);
        CHECK(rel(g.w2.kernel, ref.dw2) <= 4 * u_c);
        if (nn::is_gated(act)) CHECK(rel(g.w3->kernel, ref.dw3) <= 4 * u_c);
      }
    }
  }
}

TEST_CASE("feed_forward backward under promote with a 16-bit compute type keeps the cotangents in that type",
          "[nn][feed_forward][backward]") {
  // policy<bfloat16, promote, promote> with bfloat16 inputs computes in bfloat16, but compute_t of a
  // float32 input would be float32: the dense contexts then hold bfloat16 inputs, and dh and the two
  // halves of dx come back rounded to bfloat16 (ffn_hidden_t's fallback). One more rounding to C on
  // each path than the other policies (h; dh; da or db; the halves of dx; dx): relative L2 below 6 u_C.
  using P = mixprec::policy<mixprec::bfloat16, mixprec::promote, mixprec::promote>;
  using T = mixprec::bfloat16;
  STATIC_REQUIRE(std::is_same_v<nn::detail::ffn_hidden_t<P, T>, T>);
  STATIC_REQUIRE(std::is_same_v<nn::detail::ffn_hidden_t<layer_tests::p_c_bf16, float>, float>);
  const double u_c = layer_tests::unit_roundoff<T>();
  auto to_c = [](double v) { return static_cast<double>(static_cast<float>(T(static_cast<float>(v)))); };
  for (ffn_activation act : {ffn_activation::gelu, ffn_activation::swiglu}) {
    CAPTURE(nn::activation_name(act));
    const problem pr = make_problem(act, 16, 32, 48, 24, true, 120 + static_cast<unsigned>(act), to_c);
    const auto ref = vjp(pr);
    auto ffn = make_ffn<P>(pr);
    nn::feed_forward<P>::saved<T> ctx;
    (void)ffn.forward(tensor_from<T, 2>(pr.x, {pr.rows, pr.in}), ctx);
    auto g = ffn.zero_gradients();
    const auto dx = ffn.backward(ctx, tensor_from<T, 2>(pr.dy, {pr.rows, pr.out}), g);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(dx)>, xt::xtensor<T, 2>>);
    auto rel = [](const auto& got, const std::vector<double>& r) {
      return gradcheck::relative_l2(flat(got.data(), got.size()), std::span<const double>(r));
    };
    CHECK(rel(dx, ref.dx) <= 6 * u_c);
    CHECK(rel(g.w1.kernel, ref.dw1) <= 6 * u_c);
    CHECK(rel(g.w2.kernel, ref.dw2) <= 6 * u_c);
    CHECK(rel(*g.w1.bias, ref.db1) <= 6 * u_c);
    if (nn::is_gated(act)) CHECK(rel(g.w3->kernel, ref.dw3) <= 6 * u_c);
  }
}

TEMPLATE_LIST_TEST_CASE("feed_forward forward(x, ctx) returns operator()(x) bit for bit",
                        "[nn][feed_forward][backward]", layer_tests::all_policies) {
  using P = TestType;
  for (ffn_activation act : all_activations) {
    CAPTURE(nn::activation_name(act));
    std::mt19937 rng(static_cast<unsigned>(act) + 7);
    const auto ffn = nn::feed_forward<P>::init(act, 6, 10, rng, nn::use_bias::yes);
    auto x = tensor_from<float, 3>(gradcheck::uniform(std::size_t{60}, 3, -3.0, 3.0), {2, 5, 6});
    typename nn::feed_forward<P>::template saved<float> ctx;
    const auto y1 = ffn.forward(x, ctx);
    const auto y2 = ffn(x);
    REQUIRE(y1.shape() == y2.shape());
    CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(*y1.data())) == 0);
    CHECK(ctx.input.rows == 10);
    CHECK(ctx.a.size() == 10 * 10);
    CHECK(ctx.b.size() == (nn::is_gated(act) ? 100U : 0U));
  }
}

TEST_CASE("feed_forward forward(x, ctx) equals operator() over several row chunks", "[nn][feed_forward][backward]") {
  // hidden = 2^16: operator() processes kernels::matmul_block_elements / hidden = 4 rows per chunk, so
  // 10 rows take three chunks (4, 4, 2), with the saved context written chunk by chunk.
  using P = layer_tests::p_c_bf16;
  const std::size_t hidden = std::size_t{1} << 16;
  REQUIRE(mixprec::kernels::matmul_block_elements / hidden == 4);
  std::mt19937 rng(3);
  const auto ffn = nn::feed_forward<P>::init(ffn_activation::swiglu, 3, hidden, rng, nn::use_bias::yes);
  auto x = tensor_from<float, 2>(gradcheck::uniform(std::size_t{30}, 4), {10, 3});
  nn::feed_forward<P>::saved<float> ctx;
  const auto y1 = ffn.forward(x, ctx);
  const auto y2 = ffn(x);
  CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
  CHECK(ctx.hidden.x.size() == 10 * hidden);
}

TEST_CASE("feed_forward backward adds into the gradients: two passes give twice the gradients",
          "[nn][feed_forward][backward]") {
  const problem pr = make_problem(ffn_activation::swiglu, 4, 3, 5, 2, true, 70);
  auto ffn = make_ffn<p_f64>(pr);
  nn::feed_forward<p_f64>::saved<double> ctx;
  (void)ffn.forward(tensor_from<double, 2>(pr.x, {4, 3}), ctx);
  const auto dy = tensor_from<double, 2>(pr.dy, {4, 2});
  auto once = ffn.zero_gradients();
  const auto dx1 = ffn.backward(ctx, dy, once);
  auto twice = ffn.zero_gradients();
  const auto dx2 = ffn.backward(ctx, dy, twice);
  (void)ffn.backward(ctx, dy, twice);
  CHECK(bool(dx1 == dx2));  // dx is returned, not accumulated
  std::vector<std::span<const double>> a, b;
  once.for_each([&](std::string_view, const auto& t) { a.push_back(flat(t.data(), t.size())); });
  twice.for_each([&](std::string_view, const auto& t) { b.push_back(flat(t.data(), t.size())); });
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  for (std::size_t k = 0; k < a.size(); ++k) {
    for (std::size_t i = 0; i < a[k].size(); ++i) {
      REQUIRE(a[k][i] != 0.0);
      CHECK(b[k][i] == Approx(2 * a[k][i]).epsilon(1e-14));
    }
  }
}

TEST_CASE("feed_forward parameters and gradients are walked by the same dotted names", "[nn][feed_forward][backward]") {
  std::mt19937 rng(5);
  auto gated = nn::feed_forward<layer_tests::p_f32>::init(ffn_activation::swiglu, 3, 4, rng, nn::use_bias::yes);
  const std::vector<std::string> all{"w1.kernel", "w1.bias", "w2.kernel", "w2.bias", "w3.kernel", "w3.bias"};
  CHECK(names_of([&](auto f) { gated.for_each_parameter(f); }) == all);
  const auto& gated_c = gated;
  CHECK(names_of([&](auto f) { gated_c.for_each_parameter(f); }) == all);
  auto g = gated.zero_gradients();
  CHECK(names_of([&](auto f) { g.for_each(f); }) == all);
  const auto& g_c = g;
  CHECK(names_of([&](auto f) { g_c.for_each(f); }) == all);
  // Shapes follow the parameters, element type grad_t<P>.
  std::vector<std::vector<std::size_t>> pshapes, gshapes;
  gated.for_each_parameter(
      [&](std::string_view, const auto& t) { pshapes.emplace_back(t.shape().begin(), t.shape().end()); });
  g.for_each([&](std::string_view, const auto& t) {
    STATIC_REQUIRE(std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, float>);
    gshapes.emplace_back(t.shape().begin(), t.shape().end());
  });
  CHECK(pshapes == gshapes);
  // Parameters are writable through the walk and the non-const accessors.
  gated.for_each_parameter([](std::string_view name, auto& t) { t.fill(name == "w3.bias" ? 2.0F : 0.5F); });
  CHECK(gated.w1().kernel()(2, 3) == 0.5F);
  CHECK((*gated.w3()->bias())(1) == 2.0F);
  gated.w2().kernel()(0, 0) = 3.0F;
  CHECK(std::as_const(gated).w2().kernel()(0, 0) == 3.0F);

  auto plain = nn::feed_forward<layer_tests::p_f32>::init(ffn_activation::gelu, 3, 4, rng, nn::use_bias::no);
  CHECK(names_of([&](auto f) { plain.for_each_parameter(f); }) == std::vector<std::string>{"w1.kernel", "w2.kernel"});
  auto pg = plain.zero_gradients();
  CHECK_FALSE(pg.w3.has_value());
  CHECK(names_of([&](auto f) { pg.for_each(f); }) == std::vector<std::string>{"w1.kernel", "w2.kernel"});
}

TEST_CASE("feed_forward backward rejects a cotangent, context or gradients that do not fit, adding nothing",
          "[nn][feed_forward][backward]") {
  using Catch::Matchers::Contains;
  using P = layer_tests::p_f32;
  std::mt19937 rng(6);
  const auto ffn = nn::feed_forward<P>::init(ffn_activation::swiglu, 3, 4, rng, nn::use_bias::yes);
  nn::feed_forward<P>::saved<float> ctx;
  (void)ffn.forward(xt::xtensor<float, 2>(xt::ones<float>({5, 3})), ctx);
  const xt::xtensor<float, 2> dy = xt::ones<float>({5, 3});
  auto g = ffn.zero_gradients();
  auto all_zero = [&] {
    bool zero = true;
    g.for_each([&](std::string_view, const auto& t) {
      for (float v : t) zero = zero && v == 0.0F;
    });
    return zero;
  };

  const xt::xtensor<float, 2> wide = xt::ones<float>({5, 4});
  CHECK_THROWS_WITH(ffn.backward(ctx, wide, g),
                    Contains("feed_forward::backward") && Contains("[5, 4]") && Contains("expects 3"));
  const xt::xtensor<float, 2> tall = xt::ones<float>({6, 3});
  CHECK_THROWS_WITH(ffn.backward(ctx, tall, g), Contains("feed_forward::backward") && Contains("6 rows") &&
                                                    Contains("had 5") && Contains("forward()"));

  auto bad_kernel = g;
  bad_kernel.w1.kernel = xt::zeros<float>({3, 5});
  CHECK_THROWS_WITH(ffn.backward(ctx, dy, bad_kernel), Contains("feed_forward::backward") &&
                                                           Contains("grads.w1.kernel has shape [3, 5]") &&
                                                           Contains("[3, 4]") && Contains("zero_gradients()"));
  auto bad_bias = g;
  bad_bias.w2.bias.reset();
  CHECK_THROWS_WITH(ffn.backward(ctx, dy, bad_bias), Contains("grads.w2.bias") && Contains("zero_gradients()"));
  auto bad_w3 = g;
  bad_w3.w3->kernel = xt::zeros<float>({4, 4});
  CHECK_THROWS_WITH(ffn.backward(ctx, dy, bad_w3), Contains("grads.w3.kernel has shape [4, 4]"));
  auto no_w3 = g;
  no_w3.w3.reset();
  CHECK_THROWS_WITH(ffn.backward(ctx, dy, no_w3),
                    Contains("grads.w3 is missing") && Contains("swiglu") && Contains("zero_gradients()"));
  CHECK(all_zero());

  // A context from another layer: a plain block with the same shapes saved no b.
  const auto plain = nn::feed_forward<P>::init(ffn_activation::silu, 3, 4, rng, nn::use_bias::yes);
  nn::feed_forward<P>::saved<float> plain_ctx;
  (void)plain.forward(xt::xtensor<float, 2>(xt::ones<float>({5, 3})), plain_ctx);
  CHECK_THROWS_WITH(ffn.backward(plain_ctx, dy, g), Contains("feed_forward::backward") &&
                                                        Contains("saved context does not fit") && Contains("swiglu") &&
                                                        Contains("forward()"));
  // Gradients of the plain block (no w3) for the gated one.
  auto plain_g = plain.zero_gradients();
  CHECK_THROWS_WITH(ffn.backward(ctx, dy, plain_g), Contains("grads.w3 is missing"));
  auto gated_g = ffn.zero_gradients();
  CHECK_THROWS_WITH(plain.backward(plain_ctx, dy, gated_g),
                    Contains("grads.w3 is present") && Contains("silu") && Contains("no w3"));
  CHECK(all_zero());
  // And a well-formed call still works.
  (void)ffn.backward(ctx, dy, g);
  CHECK_FALSE(all_zero());
}

}  // namespace feed_forward_backward_test
