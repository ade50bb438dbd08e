// The error audit of the scaled tensors (issue 12, "Every public entry point documents what it throws; a
// test covers each documented error"): one test case per header of include/mixprec/scaled/, one section
// per documented error that no other test triggers with its message checked. Covered elsewhere:
// - block_scaling.hpp: mx_quantise with block_size 0, mx_dequantise(q, out) of another size, a scale
//   count that does not match: block_scaling_test.cpp.
// - delayed_scaling.hpp: amax_history_len 0, margin, a negative initial_scale, the state checks, update
//   with a negative amax: delayed_scaling_test.cpp.
// - ops.hpp: add's shapes and rules, matmul's and dot's shapes, mul(c) with a non-finite c, div's
//   rules and non-finite quotients, log, sqrt: ops_test.cpp.
// - scale_estimate.hpp: check_scale_estimate: scale_estimate_test.cpp.
// - scaled_tensor.hpp: quantise of NaN/Inf, of values too small, of a column-major input; int8's -128;
//   with_scale's broken promise: scaled_tensor_test.cpp.
// scaled_format.hpp documents no errors. The audit found scaled::mul(a, c) throwing, undocumented, when
// the scaled scales leave double's range; its doc comment now says so, tested here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/formats/float8.hpp"
#include "mixprec/scaled/block_scaling.hpp"
#include "mixprec/scaled/delayed_scaling.hpp"
#include "mixprec/scaled/float8_dot.hpp"
#include "mixprec/scaled/ops.hpp"
#include "mixprec/scaled/scaled_tensor.hpp"
#include "support/error_message.hpp"

namespace documented_errors_test {

using namespace mixprec;

namespace {

using test_support::says;

}  // namespace

namespace {
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
constexpr double pinf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("block_scaling.hpp: every documented error untested elsewhere is thrown", "[scaled][errors][block_scaling]") {
  const std::vector<float> x{1.0f, 2.0f, 3.0f};
  auto q = mx_quantise<float8_e4m3fn>(std::span<const float>(x), block_scale_rule::ocp, 2);
  q.block_size = 0;
  SECTION("mx_dequantise(q, out): block_size 0") {
    std::vector<float> out(3);
    CHECK_THROWS_MATCHES(mx_dequantise(q, std::span<float>(out)), std::invalid_argument,
                         says({"mixprec::mx_dequantise: the tensor's block_size is 0"}));
  }
  SECTION("mx_dequantise(q): block_size 0") {
    CHECK_THROWS_MATCHES(mx_dequantise(q), std::invalid_argument, says({"block_size is 0: it must be at least 1"}));
  }
}

TEST_CASE("delayed_scaling.hpp: a NaN or infinite initial_scale", "[scaled][errors][delayed_scaling]") {
  CHECK_THROWS_MATCHES(delayed_scaling<float8_e4m3fn>({.initial_scale = qnan}), std::invalid_argument,
                       says({"mixprec::delayed_scaling", "initial_scale = nan is invalid"}));
  CHECK_THROWS_MATCHES(delayed_scaling<float8_e4m3fn>({.initial_scale = pinf}), std::invalid_argument,
                       says({"initial_scale = inf is invalid"}));
}

TEST_CASE("float8_dot.hpp: invalid options and a state delayed_scaling refuses", "[scaled][errors][float8_dot]") {
  SECTION("constructor: invalid options") {
    CHECK_THROWS_MATCHES(scaled::float8_dot<>({.amax_history_len = 0}), std::invalid_argument,
                         says({"mixprec::delayed_scaling", "amax_history_len = 0"}));
    CHECK_THROWS_MATCHES(scaled::float8_dot<>({.margin = 127}), std::invalid_argument, says({"margin = 127"}));
  }
  SECTION("restore: a non-finite scale, nothing changed") {
    scaled::float8_dot<> dot;
    auto bad = dot.x_scaling().state();
    bad.scale = qnan;
    const auto before = dot.dy_scaling().state();
    CHECK_THROWS_MATCHES(dot.restore(dot.x_scaling().state(), dot.kernel_scaling().state(), bad, {}),
                         std::invalid_argument, says({"mixprec::delayed_scaling", "must be finite"}));
    CHECK(dot.dy_scaling().state() == before);
  }
}

TEST_CASE("ops.hpp: every documented error untested elsewhere is thrown", "[scaled][errors][ops]") {
  const xt::xarray<double> x23 = {{1.0, -2.0, 0.5}, {0.25, 3.0, -1.0}};
  const auto a = quantise<float8_e4m3fn>(x23);
  const auto t = quantise<float8_e4m3fn>(xt::xarray<double>(xt::transpose(x23)));
  const auto w = quantise<float8_e4m3fn>(x23, {.rule = scale_rule::worst_case});
  SECTION("sub and mul: different shapes or rules") {
    CHECK_THROWS_MATCHES(scaled::sub(a, t), std::invalid_argument,
                         says({"scaled::sub: the shapes differ, [2, 3] and [3, 2]"}));
    CHECK_THROWS_MATCHES(scaled::mul(a, t), std::invalid_argument, says({"scaled::mul: the shapes differ"}));
    CHECK_THROWS_MATCHES(scaled::sub(a, w), std::invalid_argument, says({"scaled::sub", "different rules"}));
    CHECK_THROWS_MATCHES(scaled::mul(a, w), std::invalid_argument, says({"scaled::mul", "different rules"}));
    CHECK_NOTHROW(scaled::mul(a, w, scale_rule::hybrid));
  }
  SECTION("div: different shapes") {
    CHECK_THROWS_MATCHES(scaled::div(a, t), std::invalid_argument, says({"scaled::div: the shapes differ"}));
  }
  SECTION("matmul and dot: different rules") {
    const auto wt = quantise<float8_e4m3fn>(xt::xarray<double>(xt::transpose(x23)), {.rule = scale_rule::worst_case});
    CHECK_THROWS_MATCHES(scaled::matmul(a, wt), std::invalid_argument, says({"scaled::matmul", "different rules"}));
    const auto v = quantise<float8_e4m3fn>(xt::xarray<double>{1.0, 2.0});
    const auto vw = quantise<float8_e4m3fn>(xt::xarray<double>{1.0, 2.0}, {.rule = scale_rule::worst_case});
    CHECK_THROWS_MATCHES(scaled::dot(v, vw), std::invalid_argument, says({"scaled::dot", "different rules"}));
    const auto v3 = quantise<float8_e4m3fn>(xt::xarray<double>{1.0, 2.0, 3.0});
    CHECK_THROWS_MATCHES(scaled::dot(v, v3), std::invalid_argument, says({"scaled::dot: needs two 1-d tensors"}));
  }
  SECTION("mul(a, c): scales that overflow double or fall below smallest_scale") {
    const auto huge = quantise<float8_e4m3fn>(xt::xarray<double>{1e300, -2.0});
    CHECK_THROWS_MATCHES(scaled::mul(huge, 1e10), std::invalid_argument,
                         says({"scaled_tensor: scales must be finite and positive", "scale = inf"}));
    CHECK_THROWS_MATCHES(scaled::mul(a, 1e-310), std::domain_error,
                         says({"scaled_tensor: the scale", "the smallest this format can be quantised by"}));
  }
  SECTION("exp: a result that overflows float") {
    const auto big = quantise<float8_e4m3fn>(xt::xarray<double>{1.0, 100.0});
    CHECK_THROWS_MATCHES(scaled::exp(big), std::domain_error, says({"scaled::exp: the value at index 1 is inf"}));
  }
  SECTION("pow: a result that is not finite") {
    const auto neg = quantise<float8_e4m3fn>(xt::xarray<double>{-2.0, 1.0});
    CHECK_THROWS_MATCHES(scaled::pow(neg, 0.5f), std::domain_error,
                         says({"scaled::pow: the value at index 0 is", "nan"}));
    const auto zero = quantise<float8_e4m3fn>(xt::xarray<double>{1.0, 0.0});
    CHECK_THROWS_MATCHES(scaled::pow(zero, -1.0f), std::domain_error,
                         says({"scaled::pow: the value at index 1 is inf"}));
  }
}

TEST_CASE("scaled_tensor.hpp: every documented error untested elsewhere is thrown", "[scaled][errors][scaled_tensor]") {
  const xt::xarray<float8_e4m3fn> data = {float8_e4m3fn(1.0f), float8_e4m3fn(-2.0f)};
  SECTION("constructor: a scale that is not finite and positive") {
    CHECK_THROWS_MATCHES(scaled_tensor<float8_e4m3fn>(data, {0.0, 1.0}, {}), std::invalid_argument,
                         says({"scaled_tensor: scales must be finite and positive", "scale = 0"}));
    CHECK_THROWS_MATCHES(scaled_tensor<float8_e4m3fn>(data, {1.0, pinf}, {}), std::invalid_argument,
                         says({"expected_scale = inf"}));
  }
  SECTION("step_for: a scale below smallest_scale") {
    CHECK_THROWS_MATCHES(scaled_tensor<float8_e4m3fn>::step_for({1e-320, 1e-320}, {}), std::domain_error,
                         says({"scaled_tensor: the scale", "the smallest this format can be quantised by"}));
  }
  SECTION("with_scale: an invalid promise, NaN or Inf in x") {
    const xt::xarray<double> x = {0.5, 1.0};
    CHECK_THROWS_MATCHES(with_scale<float8_e4m3fn>({qnan, 1.0}, x), std::invalid_argument,
                         says({"scales must be finite and positive", "scale = nan"}));
    CHECK_THROWS_MATCHES(with_scale<float8_e4m3fn>({1.0, 1.0}, xt::xarray<double>{0.5, pinf}), std::domain_error,
                         says({"the value at index 1 is inf"}));
  }
}

}  // namespace documented_errors_test
