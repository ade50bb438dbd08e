// Tests of kernels/activations.hpp against long double references written here from the textbook
// definitions (x86-64 long double: 64-bit significand, unit roundoff 2^-64).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/activations.hpp"

namespace activations_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::kernels::gelu_approximation;
namespace kernels = mixprec::kernels;

namespace {

using ld = long double;

// The definitions, in long double, as written in the papers (no rewriting).
ld ref_gelu_erf(ld x) { return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L))); }
ld ref_gelu_tanh_y(ld x) { return std::sqrt(2.0L / (4.0L * std::atan(1.0L))) * (x + 0.044715L * x * x * x); }
ld ref_gelu_tanh(ld x) { return 0.5L * x * (1.0L + std::tanh(ref_gelu_tanh_y(x))); }
ld ref_sigmoid(ld x) { return 1.0L / (1.0L + std::exp(-x)); }
ld ref_silu(ld x) { return x * ref_sigmoid(x); }

/// Unit roundoff of T: 2^-digits (round to nearest).
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

/// The test points: a fine grid over [-5.5, 8] plus random points. Below -5.5 the textbook forms lose
/// digits even in long double (1 + erf(-6/sqrt 2) = 2e-9, 1 + tanh(y) smaller still): the tails are
/// tested separately below.
std::vector<double> test_points() {
  std::vector<double> xs;
  for (int i = 0; i <= 1350; ++i) xs.push_back(-5.5 + 0.01 * i);
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> dist(-5.5, 8.0);
  for (int i = 0; i < 2000; ++i) xs.push_back(dist(rng));
  xs.push_back(0.0);
  return xs;
}

/// Checks a result f(x) against ref(x) (check_point; x a T value), and f(T(x)) for every test point
/// (check_against_reference), with
///   |f - ref| <= u_T |ref| (the one rounding of the result to T) + rel_op(x) u_op |ref| + tiny
/// rel_op(x): the error of the opmath evaluation in units of u_op (derived per function below);
/// tiny: half the smallest subnormal of T (results that round into or below T's subnormals), plus
/// the long double reference's own error |x| 2^-63 (the textbook GELU forms add 1 + erf(..) or
/// 1 + tanh(..) with an absolute error of 2^-64, times 0.5 |x|): it matters only for double near -5.5,
/// where 1 + erf(x / sqrt 2) is 4e-8.
template <class T, class Ref, class RelOp>
void check_point(T x, T result, Ref ref, RelOp rel_op) {
  using Op = kernels::opmath_t<T>;
  const double u_t = std::is_same_v<T, Op> ? 0.0 : unit_roundoff<T>();
  const double u_op = unit_roundoff<Op>();
  const double tiny = 0.5 * static_cast<double>(std::numeric_limits<T>::denorm_min());
  const ld xv = static_cast<ld>(static_cast<double>(x));
  const ld r = ref(xv);
  const double got = static_cast<double>(result);
  const double tol = (u_t + rel_op(static_cast<double>(xv)) * u_op) * std::abs(static_cast<double>(r)) + tiny +
                     std::abs(static_cast<double>(xv)) * std::ldexp(1.0, -63);
  INFO(std::setprecision(17) << "x = " << static_cast<double>(xv) << ", got " << got << ", reference "
                             << static_cast<double>(r) << ", tolerance " << tol);
  REQUIRE(std::abs(got - static_cast<double>(r)) <= tol);
}

template <class T, class F, class Ref, class RelOp>
void check_against_reference(F f, Ref ref, RelOp rel_op) {
  for (double x0 : test_points()) {
    const T x = static_cast<T>(x0);
    check_point(x, f(x), ref, rel_op);
  }
}

/// The levels this CPU runs: the range activations take the vectorised kernel from `isa::avx2` up
/// (kernels/detail/activation_rows.hpp) and the scalar formulas at `isa::portable`.
std::vector<mixprec::isa> levels() {
  std::vector<mixprec::isa> out;
  for (const mixprec::isa level : mixprec::all_isas) {
    if (level <= mixprec::detected_isa()) out.push_back(level);
  }
  return out;
}

/// Calls `range(in, out)` (in and out of T) once on all the test points (whole vectors of the kernel
/// and a tail) on every level, then `check(x, result)` for each point.
template <class T, class Range, class Check>
void on_every_level(Range range, Check check) {
  std::vector<T> xs;
  for (double x0 : test_points()) xs.push_back(static_cast<T>(x0));
  for (const mixprec::isa level : levels()) {
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    std::vector<T> ys(xs.size());
    range(xs, ys);
    for (std::size_t i = 0; i < xs.size(); ++i) check(xs[i], ys[i]);
  }
}

/// check_against_reference for a range function, on every level (on_every_level).
template <class T, class Range, class Ref, class RelOp>
void check_range_against_reference(Range range, Ref ref, RelOp rel_op) {
  on_every_level<T>(range, [&](T x, T y) { check_point(x, y, ref, rel_op); });
}

}  // namespace

TEST_CASE("tanh-GELU of float16(100) is 100: the cube is formed in float32 opmath", "[kernels][activations]") {
  // 100^3 = 1e6 overflows float16 (max 65504): evaluated in float16, 0.044715 x^3 would be Inf and the
  // result NaN or Inf. In float32 opmath tanh saturates to 1 and gelu(100) = 100, a float16 value.
  const float16 x(100.0f);
  const float16 y = kernels::gelu(x, gelu_approximation::tanh);
  CHECK(isfinite(y));
  CHECK(static_cast<float>(y) == 100.0f);
  CHECK(static_cast<float>(kernels::gelu(x)) == 100.0f);
  CHECK(static_cast<float>(kernels::gelu(float16(-100.0f), gelu_approximation::tanh)) == 0.0f);
  CHECK(static_cast<float>(kernels::silu(float16(60000.0f))) == 60000.0f);
  STATIC_REQUIRE(std::is_same_v<decltype(kernels::gelu(x)), float16>);
  STATIC_REQUIRE(std::is_same_v<kernels::opmath_t<float16>, float>);
  STATIC_REQUIRE(std::is_same_v<kernels::opmath_t<double>, double>);
}

TEMPLATE_TEST_CASE("erf-GELU matches 0.5 x (1 + erf(x / sqrt 2)) within the format's rounding",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // Opmath error of 0.5 x erfc(-x/sqrt 2): the argument carries ~2 roundings (1/sqrt 2 and the
  // product), amplified by erfc's condition number |z erfc'(z) / erfc(z)| <= 2 z^2 + 1 = x^2 + 1 for the
  // z = -x/sqrt 2 >= 0 side (x <= 0), below 1 otherwise; erfc itself is within 4 ulps in glibc; two
  // more products: 8 + 2 (x^2 + 1) u_op.
  check_against_reference<TestType>([](TestType x) { return kernels::gelu(x); }, ref_gelu_erf,
                                    [](double x) { return 8.0 + 2.0 * (x * x + 1.0); });
}

TEMPLATE_TEST_CASE("tanh-GELU matches 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) within the format's rounding",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // Opmath error of x / (1 + e^(-2y)): y = sqrt(2/pi)(x + c x^3) carries <= 6 roundings (two rounded
  // constants, the cube, the product, the sum, the scaling): relative 6u. e^(-2y) then has relative
  // error 2|y| 6u + 1 ulp, damped by e/(1 + e) <= 1 in the denominator; 1 + e and the division: 2 more.
  // Total <= (12 |y| + 4) u_op; the factor 2 below is a margin for exp's own ulp error.
  check_against_reference<TestType>(
      [](TestType x) { return kernels::gelu(x, gelu_approximation::tanh); }, ref_gelu_tanh,
      [](double x) { return 2.0 * (12.0 * std::abs(static_cast<double>(ref_gelu_tanh_y(x))) + 4.0); });
}

TEMPLATE_TEST_CASE("SiLU and sigmoid match x / (1 + e^-x) and 1 / (1 + e^-x) within the format's rounding",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // -x is exact; e^-x within 1-2 ulps; 1 + e and the division: 2 roundings. 6 u_op covers it.
  check_against_reference<TestType>([](TestType x) { return kernels::silu(x); }, ref_silu, [](double) { return 6.0; });
  check_against_reference<TestType>([](TestType x) { return kernels::sigmoid(x); }, ref_sigmoid,
                                    [](double) { return 6.0; });
}

TEMPLATE_TEST_CASE("range SiLU, sigmoid and tanh-GELU meet the scalar functions' bounds on every level",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // The same bounds as the scalar tests above: the vectorised kernel evaluates the same formulas with
  // an exp within 2 ulps (kernels/detail/exp.hpp), inside the margins those bounds leave for exp.
  using T = TestType;
  check_range_against_reference<T>([](const auto& in, auto& out) { kernels::silu(in, out); }, ref_silu,
                                   [](double) { return 6.0; });
  check_range_against_reference<T>([](const auto& in, auto& out) { kernels::sigmoid(in, out); }, ref_sigmoid,
                                   [](double) { return 6.0; });
  check_range_against_reference<T>(
      [](const auto& in, auto& out) { kernels::gelu(in, out, gelu_approximation::tanh); }, ref_gelu_tanh,
      [](double x) { return 2.0 * (12.0 * std::abs(static_cast<double>(ref_gelu_tanh_y(x))) + 4.0); });
}

TEST_CASE("range SiLU and tanh-GELU (and their derivatives' special values) keep the tails on every level",
          "[kernels][activations]") {
  // The negative tail as in the scalar test below (relative bounds while e^-2y is finite, then |x|
  // FLT_MIN), and Inf, NaN, signed zeros, and |x| up to the largest float: the same class of result as
  // the scalar functions (the formulas' limits: silu(-Inf) and gelu(-Inf) NaN, +0 or -0 far below 0).
  const double u = std::ldexp(1.0, -24);
  const double flt_min = static_cast<double>(std::numeric_limits<float>::min());
  const double tiny = static_cast<double>(std::numeric_limits<float>::denorm_min());
  std::vector<float> tail;
  for (double x = -30.0; x < -5.5; x += 0.25) tail.push_back(static_cast<float>(x));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials{inf,    -inf,    std::nanf(""), 0.0f,   -0.0f,   1e-30f,  -1e-30f,
                                    88.0f,  -88.0f,  89.0f,         -89.0f, -104.0f, -200.0f, 1e30f,
                                    -1e30f, 3.4e38f, -3.4e38f,      1e-45f, -1e-45f};
  for (const mixprec::isa level : levels()) {
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    std::vector<float> silu(tail.size()), gelu(tail.size());
    kernels::silu(tail, silu);
    kernels::gelu(tail, gelu, gelu_approximation::tanh);
    for (std::size_t i = 0; i < tail.size(); ++i) {
      const double x = static_cast<double>(tail[i]);
      INFO("x = " << x);
      const ld y = ref_gelu_tanh_y(x);
      const double ref_tanh = static_cast<double>(x / (1.0L + std::exp(-2.0L * y)));
      const double ref_s = static_cast<double>(ref_silu(x));
      CHECK(std::abs(static_cast<double>(silu[i]) - ref_s) <= 6.0 * u * std::abs(ref_s) + tiny);
      if (x >= -10.0) {
        CHECK(std::abs(static_cast<double>(gelu[i]) - ref_tanh) <=
              2.0 * (12.0 * std::abs(static_cast<double>(y)) + 4.0) * u * std::abs(ref_tanh) + tiny);
      } else {
        CHECK(std::abs(static_cast<double>(gelu[i]) - ref_tanh) <= std::abs(x) * flt_min);
      }
    }
    std::vector<float> s(specials.size()), g(specials.size()), q(specials.size()), ge(specials.size());
    kernels::silu(specials, s);
    kernels::gelu(specials, g, gelu_approximation::tanh);
    kernels::sigmoid(specials, q);
    kernels::gelu(specials, ge);
    auto same_class = [](float got, float want) {
      if (std::isnan(want)) return std::isnan(got);
      if (std::isinf(want) || want == 0.0f) return got == want && std::signbit(got) == std::signbit(want);
      return std::abs(static_cast<double>(got) - static_cast<double>(want)) <=
             8.0 * std::ldexp(1.0, -24) * std::abs(static_cast<double>(want));
    };
    std::vector<float> ds(specials.size()), dg(specials.size()), dq(specials.size()), dge(specials.size());
    kernels::silu_derivative(specials, ds);
    kernels::gelu_derivative(specials, dg, gelu_approximation::tanh);
    kernels::sigmoid_derivative(specials, dq);
    kernels::gelu_derivative(specials, dge);
    for (std::size_t i = 0; i < specials.size(); ++i) {
      INFO("x = " << specials[i] << ": silu " << s[i] << ", gelu " << g[i] << ", sigmoid " << q[i] << ", erf-GELU "
                  << ge[i] << "; derivatives " << ds[i] << ", " << dg[i] << ", " << dq[i] << ", " << dge[i]);
      CHECK(same_class(s[i], kernels::silu(specials[i])));
      CHECK(same_class(g[i], kernels::gelu(specials[i], gelu_approximation::tanh)));
      CHECK(same_class(q[i], kernels::sigmoid(specials[i])));
      CHECK(same_class(ds[i], kernels::silu_derivative(specials[i])));
      CHECK(same_class(dg[i], kernels::gelu_derivative(specials[i], gelu_approximation::tanh)));
      CHECK(same_class(dq[i], kernels::sigmoid_derivative(specials[i])));
      CHECK(same_class(ge[i], kernels::gelu(specials[i])));
      CHECK(same_class(dge[i], kernels::gelu_derivative(specials[i])));
    }
  }
}

TEST_CASE("range SiLU, sigmoid and both GELUs and their derivatives give the same bits on every SIMD level",
          "[kernels][activations]") {
  // The 8-lane (avx2) and 16-lane (avx512 and up) kernels evaluate the same operations with exps of the
  // same bits: their results must match bit for bit, tails included (100003 values, not a multiple of
  // 16), over magnitudes from subnormal to the largest float.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-46.0, 38.5);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> x(100003);
  for (float& v : x) v = static_cast<float>((negative(rng) ? -1.0 : 1.0) * std::pow(10.0, exponent(rng)));
  // NaNs of both signs, quiet and signalling, with payloads: the bits of a NaN result must not depend
  // on the level either (the activations fuzz target found a sign that did).
  const std::uint32_t nans[] = {0xFF80C99EU, 0x7F800001U, 0xFFC00000U, 0x7FC12345U, 0xFFFFFFFFU};
  for (std::size_t i = 0; i < std::size(nans); ++i) x[1000 * i + 7] = std::bit_cast<float>(nans[i]);
  std::vector<std::vector<std::uint32_t>> bits;
  for (const mixprec::isa level : levels()) {
    if (level == mixprec::isa::portable) continue;
    const mixprec::isa_limit_scope limit(level);
    std::vector<float> s(x.size()), q(x.size()), g(x.size()), ds(x.size()), dq(x.size()), dg(x.size());
    std::vector<float> ge(x.size()), dge(x.size());
    kernels::silu(x, s);
    kernels::sigmoid(x, q);
    kernels::gelu(x, g, gelu_approximation::tanh);
    kernels::gelu(x, ge);
    kernels::silu_derivative(x, ds);
    kernels::sigmoid_derivative(x, dq);
    kernels::gelu_derivative(x, dg, gelu_approximation::tanh);
    kernels::gelu_derivative(x, dge);
    std::vector<std::uint32_t> all;
    for (const auto* out : {&s, &q, &g, &ge, &ds, &dq, &dg, &dge}) {
      for (const float v : *out) all.push_back(std::bit_cast<std::uint32_t>(v));
    }
    bits.push_back(std::move(all));
  }
  for (std::size_t l = 1; l < bits.size(); ++l) {
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < bits[0].size(); ++i) mismatches += bits[l][i] != bits[0][i] ? 1 : 0;
    CHECK(mismatches == 0);
  }
}

TEMPLATE_TEST_CASE("exp and rsqrt are evaluated in opmath and rounded once", "[kernels][activations]", float, double,
                   bfloat16, float16) {
  // exp: within 2 ulps of opmath (glibc), then one rounding to T. The test range [-5.5, 8] stays inside
  // float16's range (e^8 = 2981).
  check_against_reference<TestType>([](TestType x) { return kernels::exp(x); }, [](ld x) { return std::exp(x); },
                                    [](double) { return 2.0; });
  // rsqrt on positive arguments (a T value a): sqrt and the division, 2 opmath roundings, then one to T.
  const double u_t = std::is_same_v<TestType, kernels::opmath_t<TestType>> ? 0.0 : unit_roundoff<TestType>();
  const double u_op = unit_roundoff<kernels::opmath_t<TestType>>();
  for (double x0 : test_points()) {
    const TestType a(std::abs(x0) + 0.25);
    const ld r = 1.0L / std::sqrt(static_cast<ld>(static_cast<double>(a)));
    INFO("a = " << static_cast<double>(a));
    REQUIRE(std::abs(static_cast<double>(kernels::rsqrt(a)) - static_cast<double>(r)) <=
            (u_t + 2.0 * u_op) * static_cast<double>(r));
  }
  CHECK(kernels::rsqrt(0.0f) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(kernels::rsqrt(-1.0)));
}

TEST_CASE("GELU and SiLU keep their relative accuracy in the negative tail", "[kernels][activations]") {
  // For x < -5.5 the textbook forms cancel (1 + erf(x/sqrt 2) < 4e-8): the reference switches to the
  // identities 1 + erf(z) = erfc(-z) and 1 + tanh(y) = 2 / (1 + e^-2y), still in long double. The
  // relative bounds stop where float32 intermediates leave the normal range (erfc(-x / sqrt 2) below
  // FLT_MIN from x = -12.5; e^-2y overflows from x = -10): beyond, the error is absolute, at most
  // |x| FLT_MIN (an intermediate below FLT_MIN carries an absolute error below FLT_MIN).
  const double u = std::ldexp(1.0, -24);
  const double flt_min = static_cast<double>(std::numeric_limits<float>::min());
  const double tiny = static_cast<double>(std::numeric_limits<float>::denorm_min());
  for (double x = -30.0; x < -5.5; x += 0.25) {
    const float xf = static_cast<float>(x);
    const ld y = ref_gelu_tanh_y(x);
    INFO("x = " << x);
    const double ref_erf = static_cast<double>(0.5L * x * std::erfc(-x / std::sqrt(2.0L)));
    const double ref_tanh = static_cast<double>(x / (1.0L + std::exp(-2.0L * y)));
    const double ref_s = static_cast<double>(ref_silu(x));
    const double got_erf = static_cast<double>(kernels::gelu(xf));
    const double got_tanh = static_cast<double>(kernels::gelu(xf, gelu_approximation::tanh));
    if (x >= -12.5) {
      CHECK(std::abs(got_erf - ref_erf) <= (8.0 + 2.0 * (x * x + 1.0)) * u * std::abs(ref_erf) + tiny);
    } else {
      CHECK(std::abs(got_erf - ref_erf) <= std::abs(x) * flt_min);
    }
    if (x >= -10.0) {
      CHECK(std::abs(got_tanh - ref_tanh) <=
            2.0 * (12.0 * std::abs(static_cast<double>(y)) + 4.0) * u * std::abs(ref_tanh) + tiny);
    } else {
      CHECK(std::abs(got_tanh - ref_tanh) <= std::abs(x) * flt_min);
    }
    CHECK(std::abs(static_cast<double>(kernels::silu(xf)) - ref_s) <= 6.0 * u * std::abs(ref_s) + tiny);
  }
}

TEST_CASE("relu is max(x, 0) and keeps NaN", "[kernels][activations]") {
  CHECK(kernels::relu(-1.5f) == 0.0f);
  CHECK(kernels::relu(2.5) == 2.5);
  CHECK(static_cast<float>(kernels::relu(bfloat16(-3.0f))) == 0.0f);
  CHECK(static_cast<float>(kernels::relu(float16(7.0f))) == 7.0f);
  CHECK(std::isnan(kernels::relu(std::numeric_limits<float>::quiet_NaN())));
  CHECK(isnan(kernels::relu(std::numeric_limits<float16>::quiet_NaN())));
}

TEST_CASE("range activations compute in the input's opmath and round once to the output type",
          "[kernels][activations]") {
  // At the portable level the range forms evaluate the scalar formulas: the same bits as the scalar
  // functions, rounded once. (The vectorised levels are held to the references' bounds above.)
  const mixprec::isa_limit_scope portable(mixprec::isa::portable);
  const std::vector<float> x{-3.0f, -0.5f, 0.0f, 0.7f, 2.0f, 100.0f};
  std::vector<float16> y(x.size());
  kernels::gelu(x, y, gelu_approximation::tanh);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(y[i] == float16(kernels::gelu(x[i], gelu_approximation::tanh)));
  }
  std::vector<bfloat16> z(x.size());
  kernels::silu(x, z);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(z[i] == bfloat16(kernels::silu(x[i])));
  std::vector<double> w(x.size());
  kernels::relu(x, w);
  CHECK(w == std::vector<double>{0, 0, 0, static_cast<double>(0.7f), 2, 100});
  using Catch::Matchers::Contains;
  std::vector<float> short_out(2);
  CHECK_THROWS_WITH(kernels::exp(x, short_out), Contains("exp") && Contains("2 elements") && Contains("6"));
}

// ---------------------------------------------------------------------------------------------------
// Derivatives. References: the textbook derivatives in long double (TRAINING.md §1), themselves checked
// against long double central differences of the textbook functions above, so that a wrong formula
// cannot hide in both the reference and the code.

namespace {

ld ref_gelu_erf_derivative(ld x) {
  const ld pi = 4.0L * std::atan(1.0L);
  return 0.5L * (1.0L + std::erf(x / std::sqrt(2.0L))) + x * std::exp(-0.5L * x * x) / std::sqrt(2.0L * pi);
}
ld ref_gelu_tanh_k() { return std::sqrt(2.0L / (4.0L * std::atan(1.0L))); }
ld ref_gelu_tanh_derivative(ld x) {
  const ld t = std::tanh(ref_gelu_tanh_y(x));
  return 0.5L * (1.0L + t) + 0.5L * x * (1.0L - t * t) * ref_gelu_tanh_k() * (1.0L + 3.0L * 0.044715L * x * x);
}
ld ref_sigmoid_derivative(ld x) { return ref_sigmoid(x) * (1.0L - ref_sigmoid(x)); }
ld ref_silu_derivative(ld x) { return ref_sigmoid(x) * (1.0L + x * (1.0L - ref_sigmoid(x))); }

// The magnitude of the two terms each derivative adds: its error is relative to this, not to the
// derivative, which crosses zero (gelu' at -0.7518, silu' at -1.2785).
ld gelu_erf_terms(ld x) {
  const ld pi = 4.0L * std::atan(1.0L);
  return 0.5L * std::erfc(-x / std::sqrt(2.0L)) + std::abs(x) * std::exp(-0.5L * x * x) / std::sqrt(2.0L * pi);
}
/// The multiplier M of q = e / (1 + e)^2 in the tanh form: gelu' = s + M q, M = 2 k x (1 + 3 a x^2).
ld gelu_tanh_multiplier(ld x) { return 2.0L * ref_gelu_tanh_k() * x * (1.0L + 3.0L * 0.044715L * x * x); }
ld sigmoid_product(ld z) {
  const ld e = std::exp(-std::abs(z));
  return e / ((1.0L + e) * (1.0L + e));
}
ld gelu_tanh_terms(ld x) {
  const ld y = ref_gelu_tanh_y(x);
  return 1.0L / (1.0L + std::exp(-2.0L * y)) + std::abs(gelu_tanh_multiplier(x)) * sigmoid_product(2.0L * y);
}
ld silu_terms(ld x) { return ref_sigmoid(x) + std::abs(x) * sigmoid_product(x); }

/// Checks f(T(x)) against ref(x_T) at every test point with
///   |f - ref| <= u_T |ref| + rel_op(x) u_op terms(x) + tiny_T + the reference's own error,
/// where terms(x) is the magnitude of the summands (see above), tiny_T half of T's smallest subnormal,
/// and the reference's error (textbook forms: 1 + erf or 1 + tanh carry an absolute 2^-64, times up to
/// 0.2 |x|^3 for the tanh form's second term) is bounded by 2^-62 (1 + |x|^3).
template <class T, class Ref, class Terms, class RelOp>
void check_derivative_point(T x, T result, Ref ref, Terms terms, RelOp rel_op) {
  using Op = kernels::opmath_t<T>;
  const double u_t = std::is_same_v<T, Op> ? 0.0 : unit_roundoff<T>();
  const double u_op = unit_roundoff<Op>();
  const double tiny = 0.5 * static_cast<double>(std::numeric_limits<T>::denorm_min());
  const double xv = static_cast<double>(x);
  const double r = static_cast<double>(ref(static_cast<ld>(xv)));
  const double got = static_cast<double>(result);
  const double tol = u_t * std::abs(r) + rel_op(xv) * u_op * static_cast<double>(terms(static_cast<ld>(xv))) + tiny +
                     std::ldexp(1.0 + std::abs(xv * xv * xv), -62);
  INFO(std::setprecision(17) << "x = " << xv << ", got " << got << ", reference " << r << ", tolerance " << tol);
  REQUIRE(std::abs(got - r) <= tol);
}

template <class T, class F, class Ref, class Terms, class RelOp>
void check_derivative(F f, Ref ref, Terms terms, RelOp rel_op) {
  for (double x0 : test_points()) {
    const T x = static_cast<T>(x0);
    check_derivative_point(x, f(x), ref, terms, rel_op);
  }
}

/// check_derivative for a range function, on every level (on_every_level).
template <class T, class Range, class Ref, class Terms, class RelOp>
void check_range_derivative(Range range, Ref ref, Terms terms, RelOp rel_op) {
  on_every_level<T>(range, [&](T x, T y) { check_derivative_point(x, y, ref, terms, rel_op); });
}

}  // namespace

TEST_CASE("the reference derivatives are the derivatives of the reference functions", "[kernels][activations]") {
  // Central differences in long double with h = 2^-14: truncation h^2 |f'''| / 6 < 1e-9 (|f'''| < 1.5
  // for these functions on [-6, 8]), rounding 2^-64 |f| / h < 1e-14.
  const ld h = std::ldexp(1.0L, -14);
  auto diff = [h](auto f, ld x) { return (f(x + h) - f(x - h)) / (2.0L * h); };
  for (int i = 0; i <= 140; ++i) {
    const ld x = -6.0L + 0.1L * i;
    INFO("x = " << static_cast<double>(x));
    CHECK(std::abs(static_cast<double>(ref_gelu_erf_derivative(x) - diff(ref_gelu_erf, x))) <= 2e-9);
    CHECK(std::abs(static_cast<double>(ref_gelu_tanh_derivative(x) - diff(ref_gelu_tanh, x))) <= 2e-9);
    CHECK(std::abs(static_cast<double>(ref_silu_derivative(x) - diff(ref_silu, x))) <= 2e-9);
    CHECK(std::abs(static_cast<double>(ref_sigmoid_derivative(x) - diff(ref_sigmoid, x))) <= 2e-9);
  }
}

TEMPLATE_TEST_CASE("erf-GELU's derivative matches Phi(x) + x phi(x) within the format's rounding",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // Opmath error: Phi = 0.5 erfc(-x / sqrt 2) as the forward (8 + 2 (x^2 + 1) u, see above); phi:
  // x^2 (1 rounding) amplified by exp's condition x^2 / 2, exp (1 ulp), the constant and the product
  // (2): x^2 / 2 + 4; x phi and the sum: 2. Below 12 + 3 (x^2 + 1), relative to Phi + |x| phi.
  check_derivative<TestType>([](TestType x) { return kernels::gelu_derivative(x); }, ref_gelu_erf_derivative,
                             gelu_erf_terms, [](double x) { return 12.0 + 3.0 * (x * x + 1.0); });
}

TEMPLATE_TEST_CASE("tanh-GELU's derivative matches (1 + t)/2 + x (1 - t^2) k (1 + 3 a x^2) / 2",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // Opmath error: y carries 6 roundings (as the forward), so e = e^(-2|y|) has 12 |y| + 2 u; s and
  // q = e / (1 + e)^2 add 2 and 4; the multiplier 2k (1 + 3a x^2) 5 (two constants, x^2, the sum and
  // the product), x q, the product and the sum 3: 12 |y| + 16 u relative to the terms; factor 2 margin
  // for exp's own ulps, as the forward's test.
  check_derivative<TestType>(
      [](TestType x) { return kernels::gelu_derivative(x, gelu_approximation::tanh); }, ref_gelu_tanh_derivative,
      gelu_tanh_terms,
      [](double x) { return 2.0 * (12.0 * std::abs(static_cast<double>(ref_gelu_tanh_y(x))) + 16.0); });
}

TEMPLATE_TEST_CASE("SiLU's and sigmoid's derivatives match sigmoid (1 + x (1 - sigmoid)) and sigmoid (1 - sigmoid)",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // e = e^-|x| (1-2 ulps); s = 1/(1+e) or e/(1+e): 2; q = e / (1+e)^2: 3; x q and the sum: 2. 10 u.
  check_derivative<TestType>([](TestType x) { return kernels::silu_derivative(x); }, ref_silu_derivative, silu_terms,
                             [](double) { return 10.0; });
  check_derivative<TestType>([](TestType x) { return kernels::sigmoid_derivative(x); }, ref_sigmoid_derivative,
                             [](ld x) { return ref_sigmoid_derivative(x); }, [](double) { return 6.0; });
}

TEMPLATE_TEST_CASE(
    "range derivatives of SiLU, sigmoid and tanh-GELU meet the scalar derivatives' bounds on every level",
    "[kernels][activations]", float, double, bfloat16, float16) {
  // The bounds of the two tests above: the vectorised kernel evaluates the same formulas with an exp
  // within 2 ulps, inside the margins they leave for exp.
  using T = TestType;
  check_range_derivative<T>([](const auto& in, auto& out) { kernels::silu_derivative(in, out); }, ref_silu_derivative,
                            silu_terms, [](double) { return 10.0; });
  check_range_derivative<T>([](const auto& in, auto& out) { kernels::sigmoid_derivative(in, out); },
                            ref_sigmoid_derivative, [](ld x) { return ref_sigmoid_derivative(x); },
                            [](double) { return 6.0; });
  check_range_derivative<T>(
      [](const auto& in, auto& out) { kernels::gelu_derivative(in, out, gelu_approximation::tanh); },
      ref_gelu_tanh_derivative, gelu_tanh_terms,
      [](double x) { return 2.0 * (12.0 * std::abs(static_cast<double>(ref_gelu_tanh_y(x))) + 16.0); });
}

/// The error bound of the vectorised erf-GELU kernel (kernels/detail/activation-inl.hpp's
/// gelu_erf_parts), in units of u = 2^-24, relative to |gelu| (and, for the derivative, to the terms
/// Phi + |x| phi), at every x where the result is normal. erfc(a), a = |x| / sqrt 2: e = e^(-x^2/2) from
/// exp (2 ulps: 4 u) and the FMA correction (1); the factor (1 + s P) / (1 + 2a): a's 2 roundings
/// (condition <= 1), r = 1 / (1 + 2a) (2), the fit (0.6), s P (its ~7 u scaled by p / (1 + p) <= 0.13:
/// 1), the FMA (1); the product e q (1): 13 u. 2 - erfc(a) for x > 0 is above 1 (no growth, 1 more);
/// 0.5 x (exact) times erfc: 1 more. 15 u. The derivative: Phi = 0.5 erfc (14), phi = e times a
/// rounded constant (7), x phi and the sum (2): 15 u of the terms. The scalar forms' bounds grow as x^2
/// (the rounding of -x / sqrt 2 inside erfc); the kernel's do not.
constexpr double gelu_erf_kernel_bound = 15.0;

TEMPLATE_TEST_CASE("range erf-GELU and its derivative: the scalar bounds at the portable level, a flat one vectorised",
                   "[kernels][activations]", float, double, bfloat16, float16) {
  // Float opmath on a SIMD level runs the kernel (its bound above); the portable level and double
  // opmath evaluate the scalar formulas (the bounds of the scalar tests).
  using T = TestType;
  std::vector<T> xs;
  for (double x0 : test_points()) xs.push_back(static_cast<T>(x0));
  for (const mixprec::isa level : levels()) {
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    const bool kernel = level >= mixprec::isa::avx2 && std::is_same_v<kernels::opmath_t<T>, float>;
    std::vector<T> g(xs.size()), d(xs.size());
    kernels::gelu(xs, g);
    kernels::gelu_derivative(xs, d);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      check_point(xs[i], g[i], ref_gelu_erf,
                  [kernel](double x) { return kernel ? gelu_erf_kernel_bound : 8.0 + 2.0 * (x * x + 1.0); });
      check_derivative_point(xs[i], d[i], ref_gelu_erf_derivative, gelu_erf_terms, [kernel](double x) {
        return kernel ? gelu_erf_kernel_bound : 12.0 + 3.0 * (x * x + 1.0);
      });
    }
  }
}

TEST_CASE("range erf-GELU keeps its relative accuracy in the negative tail on every vectorised level",
          "[kernels][activations]") {
  // x in [-30, -5.5]: the reference is 0.5 x erfc(-x / sqrt 2) in long double. The kernel's bound holds
  // while e^(-x^2/2) is normal (x >= -13.2): relative, gelu_erf_kernel_bound; beyond, the error is
  // absolute, below |x| FLT_MIN. The scalar form's bound here is 8 + 2 (x^2 + 1) u: up to 350 u.
  const double u = std::ldexp(1.0, -24);
  const double flt_min = static_cast<double>(std::numeric_limits<float>::min());
  const double tiny = static_cast<double>(std::numeric_limits<float>::denorm_min());
  // Random points: on a grid of multiples of 2^-k, x^2 is often exact, which would hide an error in
  // the split x^2 = h + l.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-30.0f, -5.5f);
  std::vector<float> xs(20000);
  for (float& x : xs) x = dist(rng);
  for (const mixprec::isa level : levels()) {
    if (level < mixprec::isa::avx2) continue;
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    std::vector<float> g(xs.size());
    kernels::gelu(xs, g);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const ld x = xs[i];
      const double ref = static_cast<double>(0.5L * x * std::erfc(-x / std::sqrt(2.0L)));
      const double got = static_cast<double>(g[i]);
      INFO(std::setprecision(17) << "x = " << static_cast<double>(x) << ", got " << got << ", reference " << ref);
      if (x >= -13.0L) {
        CHECK(std::abs(got - ref) <= gelu_erf_kernel_bound * u * std::abs(ref) + tiny);
      } else {
        CHECK(std::abs(got - ref) <= std::abs(static_cast<double>(x)) * flt_min);
      }
    }
  }
}

TEMPLATE_TEST_CASE("GELU's and SiLU's derivatives keep their accuracy in the tails", "[kernels][activations]", float,
                   double, bfloat16, float16) {
  // For x < -5.5 the reference switches to the cancellation-free forms (erfc, e^-|z|), in long double.
  // Where an opmath intermediate (erfc, phi, e) falls below the normal range its error becomes absolute,
  // at most a few of opmath's smallest subnormals, times the factor that multiplies it (|x| for phi,
  // |M| for q): hence the second term. Positive tail: the derivatives tend to 1 (tested up to x = 30).
  using Op = kernels::opmath_t<TestType>;
  const double u_t = std::is_same_v<TestType, Op> ? 0.0 : unit_roundoff<TestType>();
  const double u_op = unit_roundoff<Op>();
  const double sub_op = static_cast<double>(std::numeric_limits<Op>::denorm_min());
  const double tiny = 0.5 * static_cast<double>(std::numeric_limits<TestType>::denorm_min());
  const ld pi = 4.0L * std::atan(1.0L);
  auto check = [&](double got, ld ref, ld terms, double rel_op, double multiplier) {
    const double r = static_cast<double>(ref);
    const double tol =
        u_t * std::abs(r) + rel_op * u_op * static_cast<double>(terms) + 8.0 * (1.0 + multiplier) * sub_op + tiny;
    INFO(std::setprecision(17) << "got " << got << ", reference " << r << ", tolerance " << tol);
    CHECK(std::abs(got - r) <= tol);
  };
  std::vector<TestType> xs;
  for (double x0 = -30.0; x0 <= 30.0; x0 += 0.25) {
    if (x0 <= -5.5 || x0 >= 8.0) xs.push_back(TestType(static_cast<float>(x0)));  // the rest: covered above
  }
  // The scalar functions, then the range forms (the vectorised kernel, float opmath) on every level.
  std::vector<TestType> d_erf(xs.size()), d_tanh(xs.size()), d_silu(xs.size()), d_sigmoid(xs.size());
  // kernel: the range forms ran the vectorised kernel (float opmath on a SIMD level), whose erf-GELU
  // derivative has a flat bound (gelu_erf_kernel_bound).
  auto check_all = [&](bool scalar, bool kernel) {
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double x = static_cast<double>(xs[i]);
      const ld xl = x;
      INFO("x = " << x << (scalar ? " (scalar)" : " (range)"));
      const ld erf_ref =
          0.5L * std::erfc(-xl / std::sqrt(2.0L)) + xl * std::exp(-0.5L * xl * xl) / std::sqrt(2.0L * pi);
      check(static_cast<double>(d_erf[i]), erf_ref, gelu_erf_terms(xl),
            kernel ? gelu_erf_kernel_bound : 12.0 + 3.0 * (x * x + 1.0), std::abs(x));
      const ld y = ref_gelu_tanh_y(xl);
      const ld tanh_ref = 1.0L / (1.0L + std::exp(-2.0L * y)) + gelu_tanh_multiplier(xl) * sigmoid_product(2.0L * y);
      check(static_cast<double>(d_tanh[i]), tanh_ref, gelu_tanh_terms(xl),
            2.0 * (12.0 * std::abs(static_cast<double>(y)) + 16.0),
            std::abs(static_cast<double>(gelu_tanh_multiplier(xl))));
      const ld silu_ref = 1.0L / (1.0L + std::exp(-xl)) + xl * sigmoid_product(xl);
      check(static_cast<double>(d_silu[i]), silu_ref, silu_terms(xl), 10.0, std::abs(x));
      check(static_cast<double>(d_sigmoid[i]), sigmoid_product(xl), sigmoid_product(xl), 6.0, 0.0);
    }
  };
  for (std::size_t i = 0; i < xs.size(); ++i) {
    d_erf[i] = kernels::gelu_derivative(xs[i]);
    d_tanh[i] = kernels::gelu_derivative(xs[i], gelu_approximation::tanh);
    d_silu[i] = kernels::silu_derivative(xs[i]);
    d_sigmoid[i] = kernels::sigmoid_derivative(xs[i]);
  }
  check_all(true, false);
  for (const mixprec::isa level : levels()) {
    CAPTURE(level);
    const mixprec::isa_limit_scope limit(level);
    kernels::gelu_derivative(xs, d_erf);
    kernels::gelu_derivative(xs, d_tanh, gelu_approximation::tanh);
    kernels::silu_derivative(xs, d_silu);
    kernels::sigmoid_derivative(xs, d_sigmoid);
    check_all(false, level >= mixprec::isa::avx2 && std::is_same_v<Op, float>);
  }
}

TEMPLATE_TEST_CASE("activation derivatives at 0, at the extremes, at Inf and NaN", "[kernels][activations]", float,
                   double, bfloat16, float16) {
  using T = TestType;
  auto v = [](T x) { return static_cast<double>(x); };
  const T zero(0.0f), neg_zero(-0.0f);
  // At 0 every derivative is exact: gelu'(0) = Phi(0) = 1/2 (both forms), silu'(0) = sigmoid(0) = 1/2,
  // sigmoid'(0) = 1/4, relu'(0) = 0 (PyTorch and JAX).
  for (T z : {zero, neg_zero}) {
    CHECK(v(kernels::gelu_derivative(z)) == 0.5);
    CHECK(v(kernels::gelu_derivative(z, gelu_approximation::tanh)) == 0.5);
    CHECK(v(kernels::silu_derivative(z)) == 0.5);
    CHECK(v(kernels::sigmoid_derivative(z)) == 0.25);
    CHECK(v(kernels::relu_derivative(z)) == 0.0);
  }
  CHECK(v(kernels::relu_derivative(T(0.5f))) == 1.0);
  CHECK(v(kernels::relu_derivative(T(-0.5f))) == 0.0);
  STATIC_REQUIRE(std::is_same_v<decltype(kernels::gelu_derivative(zero)), T>);
  // The largest finite values (where x^2 and x^3 overflow opmath for float formats) and the infinities:
  // the limits 1 and 0, never the NaN of Inf * 0.
  const T big = std::numeric_limits<T>::max();
  const T inf = std::numeric_limits<T>::infinity();
  for (T x : {big, inf}) {
    CAPTURE(v(x));
    CHECK(v(kernels::gelu_derivative(x)) == 1.0);
    CHECK(v(kernels::gelu_derivative(x, gelu_approximation::tanh)) == 1.0);
    CHECK(v(kernels::silu_derivative(x)) == 1.0);
    CHECK(v(kernels::sigmoid_derivative(x)) == 0.0);
    CHECK(v(kernels::relu_derivative(x)) == 1.0);
    const T neg = -x;
    CHECK(v(kernels::gelu_derivative(neg)) == 0.0);
    CHECK(v(kernels::gelu_derivative(neg, gelu_approximation::tanh)) == 0.0);
    CHECK(v(kernels::silu_derivative(neg)) == 0.0);
    CHECK(v(kernels::sigmoid_derivative(neg)) == 0.0);
    CHECK(v(kernels::relu_derivative(neg)) == 0.0);
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  CHECK(std::isnan(v(kernels::gelu_derivative(nan))));
  CHECK(std::isnan(v(kernels::gelu_derivative(nan, gelu_approximation::tanh))));
  CHECK(std::isnan(v(kernels::silu_derivative(nan))));
  CHECK(std::isnan(v(kernels::sigmoid_derivative(nan))));
  CHECK(std::isnan(v(kernels::relu_derivative(nan))));
}

TEST_CASE("activation derivatives match central differences of the library's own forward functions",
          "[kernels][activations]") {
  // In double, h = 2^-20: truncation h^2 |f'''| / 6 < 1e-12, rounding of the difference 2^-53 |f| / h
  // < 1e-9 |f|. A derivative formula with another constant than its forward (k, a) would differ by far
  // more.
  const double h = std::ldexp(1.0, -20);
  for (double x = -8.0; x <= 8.0; x += 0.0625) {
    INFO("x = " << x);
    auto diff = [&](auto f) { return (f(x + h) - f(x - h)) / (2.0 * h); };
    const double tol = 1e-8 * (1.0 + std::abs(x));
    CHECK(std::abs(kernels::gelu_derivative(x) - diff([](double v) { return kernels::gelu(v); })) <= tol);
    CHECK(std::abs(kernels::gelu_derivative(x, gelu_approximation::tanh) -
                   diff([](double v) { return kernels::gelu(v, gelu_approximation::tanh); })) <= tol);
    CHECK(std::abs(kernels::silu_derivative(x) - diff([](double v) { return kernels::silu(v); })) <= tol);
    CHECK(std::abs(kernels::sigmoid_derivative(x) - diff([](double v) { return kernels::sigmoid(v); })) <= tol);
    if (std::abs(x) > 2 * h) {
      CHECK(kernels::relu_derivative(x) == diff([](double v) { return kernels::relu(v); }));
    }
  }
}

TEST_CASE("range derivatives compute in the input's opmath and round once to the output type",
          "[kernels][activations]") {
  // At the portable level: the scalar functions' bits (the vectorised levels: the tests above).
  const mixprec::isa_limit_scope portable(mixprec::isa::portable);
  const std::vector<float> x{-3.0f, -0.75f, 0.0f, 0.7f, 2.0f, 100.0f};
  std::vector<bfloat16> y(x.size());
  kernels::gelu_derivative(x, y, gelu_approximation::tanh);
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(y[i] == bfloat16(kernels::gelu_derivative(x[i], gelu_approximation::tanh)));
  std::vector<float16> z(x.size());
  kernels::gelu_derivative(x, z);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(z[i] == float16(kernels::gelu_derivative(x[i])));
  std::vector<double> s(x.size());
  kernels::silu_derivative(x, s);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(s[i] == static_cast<double>(kernels::silu_derivative(x[i])));
  kernels::sigmoid_derivative(x, s);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(s[i] == static_cast<double>(kernels::sigmoid_derivative(x[i])));
  kernels::relu_derivative(x, s);
  CHECK(s == std::vector<double>{0, 0, 0, 1, 1, 1});
  using Catch::Matchers::Contains;
  std::vector<float> short_out(2);
  CHECK_THROWS_WITH(kernels::gelu_derivative(x, short_out),
                    Contains("gelu_derivative") && Contains("2 elements") && Contains("6"));
  CHECK_THROWS_WITH(kernels::silu_derivative(x, short_out), Contains("silu_derivative"));
  CHECK_THROWS_WITH(kernels::relu_derivative(x, short_out), Contains("relu_derivative"));
  CHECK_THROWS_WITH(kernels::sigmoid_derivative(x, short_out), Contains("sigmoid_derivative"));
}

}  // namespace activations_test
