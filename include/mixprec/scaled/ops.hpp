/// \file
/// \brief Operations on scaled tensors (`mixprec::scaled::`): `add`, `sub`, `mul` (elementwise and by
/// a scalar), `sum`, `dot`, `matmul` propagate scales by the rules of scale_estimate.hpp; `div`,
/// `sqrt`, `pow`, `exp`, `log`, which have no good rule, run in float32 and requantise (the
/// scale-propagation proposal behind AutoScale; values beyond float's range are not finite there and
/// raise std::domain_error).
///
/// **Rules.** Every op propagates both scales (`scale` by the worst-case rule, `expected_scale` by
/// the average-case rule) and quantises its result by the one its `scale_rule` names, without
/// measuring the result: that is what scale propagation is for. The rule is the operands' (they must
/// agree) unless the op is given one (`rule` argument: per op). Under the **hybrid** rule an op first
/// requantises (measures again) each operand whose own `scale / expected_scale` exceeds its format's
/// range, then, while the result's predicted estimate would exceed the result format's range, the
/// operand with the larger ratio not yet requantised (the proposal's "worse offender"). When the
/// prediction still exceeds the range with every operand requantised (the rule itself outgrows the
/// format: a worst-case matmul into int8, whose range is 127/8, for K of a few dozen), the result is
/// requantised from its own values, which the op has computed anyway. So is a result whose predicted
/// scale is 0 (an empty product or sum) or too small for its format (`smallest_scale`: products of
/// tiny scales).
///
/// **Arithmetic.** `add`, `sub`, `mul` and `sum` compute each result in double from the represented
/// values and round it once to the result format. `dot` and `matmul` multiply the data through
/// kernels::matmul: both element formats are converted exactly to the narrowest type that holds them
/// (bfloat16 for float8 and int8, else float16, else float), products are exact in float32 and summed
/// in float32 — except for bfloat16 data, whose products would overflow float32 and multiply in
/// double — and the sum is multiplied by step_a * step_b in double before its one rounding to the
/// result format. A result format other than the operands' is named as a template argument
/// (`matmul<float8_e5m2>(grad, weights)`); it is required when the operand formats differ.
///
/// **Example**:
///
///     auto a = mixprec::quantise<mixprec::float8_e4m3fn>(x);         // [m, k], hybrid rule
///     auto b = mixprec::quantise<mixprec::float8_e4m3fn>(w);         // [k, n]
///     auto y = mixprec::scaled::matmul(a, b);                        // scale sA sB k, expected eA eB sqrt(k)
///     xt::xarray<float> yf = mixprec::dequantise(y);
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/scaled/detail/message.hpp"
#include "mixprec/scaled/scale_estimate.hpp"
#include "mixprec/scaled/scaled_format.hpp"
#include "mixprec/scaled/scaled_tensor.hpp"

namespace mixprec::scaled {

namespace detail {

using internal::concat;
using ::mixprec::detail::number;
using ::mixprec::detail::shape_text;

/// The result format of a binary op: `Out`, or the operands' format when `Out` is void (then they
/// must agree).
template <class Out, class A, class B>
using result_format_t = std::conditional_t<std::is_void_v<Out>, A, Out>;

template <class Out, class A, class B>
constexpr void check_result_format() {
  static_assert(!std::is_void_v<Out> || std::is_same_v<A, B>,
                "mixprec::scaled: the operands have different formats; name the result format as the first "
                "template argument, e.g. scaled::matmul<float8_e5m2>(gradient, weights).");
  static_assert(std::is_void_v<Out> || scaled_format<Out>,
                "mixprec::scaled: the result format must be a scaled_format (a signed small float or int8).");
}

/// The rule of an op: the one given, else the operands' (which must agree).
template <class A, class B>
scale_rule resolve_rule(const scaled_tensor<A>& a, const scaled_tensor<B>& b, std::optional<scale_rule> rule,
                        std::string_view op) {
  if (rule) return *rule;
  if (a.rule() != b.rule()) {
    throw std::invalid_argument(internal::concat(op, ": the operands follow different rules (", to_string(a.rule()),
                                                 " and ", to_string(b.rule()),
                                                 "); pass the rule for this op explicitly"));
  }
  return a.rule();
}

/// The options of a result: the op's rule; a power-of-two step when either operand has one.
template <class A, class B>
quantise_options result_options(const scaled_tensor<A>& a, const scaled_tensor<B>& b, scale_rule rule) {
  return {.rule = rule, .power_of_two = a.options().power_of_two || b.options().power_of_two};
}

/// The operands of a binary op after the hybrid rule's requantisation (file comment): copies are
/// made only of the operands that are requantised.
template <scaled_format A, scaled_format B>
class hybrid_operands {
 public:
  hybrid_operands(const scaled_tensor<A>& a, const scaled_tensor<B>& b) : a_(&a), b_(&b) {}
  hybrid_operands(const hybrid_operands&) = delete;
  hybrid_operands& operator=(const hybrid_operands&) = delete;

  /// Applies the hybrid rule for a result in `Out` whose estimate is `propagate(a, b)`. Returns true
  /// when the prediction still exceeds Out's range with both operands requantised: then the result
  /// is to be requantised from its values.
  template <scaled_format Out, class Propagate>
  [[nodiscard]] bool prepare(scale_rule rule, Propagate propagate) {
    if (rule != scale_rule::hybrid) return false;
    if (needs_requantise<A>(a().estimate())) requantise_a();
    if (needs_requantise<B>(b().estimate())) requantise_b();
    while (needs_requantise<Out>(propagate(a().estimate(), b().estimate()))) {
      const bool a_left = !a_copy_;
      const bool b_left = !b_copy_;
      if (!a_left && !b_left) return true;
      const double ratio_a = a().scale() / a().expected_scale();
      const double ratio_b = b().scale() / b().expected_scale();
      if (a_left && (!b_left || ratio_a >= ratio_b)) {
        requantise_a();
      } else {
        requantise_b();
      }
    }
    return false;
  }

  [[nodiscard]] const scaled_tensor<A>& a() const noexcept { return a_copy_ ? *a_copy_ : *a_; }
  [[nodiscard]] const scaled_tensor<B>& b() const noexcept { return b_copy_ ? *b_copy_ : *b_; }

 private:
  void requantise_a() { a_copy_.emplace(requantise(*a_)); }
  void requantise_b() { b_copy_.emplace(requantise(*b_)); }

  const scaled_tensor<A>* a_;
  const scaled_tensor<B>* b_;
  std::optional<scaled_tensor<A>> a_copy_;
  std::optional<scaled_tensor<B>> b_copy_;
};

template <class A, class B>
void check_same_shape(const scaled_tensor<A>& a, const scaled_tensor<B>& b, std::string_view op) {
  if (a.shape() != b.shape()) {
    throw std::invalid_argument(internal::concat(op, ": the shapes differ, ", shape_text(a.shape()), " and ",
                                                 shape_text(b.shape()), " (scaled ops do not broadcast)"));
  }
}

/// A result written with its propagated estimate, or with its measured one when the hybrid rule
/// could not bring the prediction into the format's range.
template <scaled_format Out, class Shape>
scaled_tensor<Out> store_result(const std::vector<double>& values, const Shape& shape, bool measure_result,
                                const scale_estimate& predicted, const quantise_options& options) {
  // A prediction of 0 (an empty product or sum) or below the format's smallest scale cannot quantise.
  const double smallest = scaled_tensor<Out>::smallest_scale(options);
  const bool representable = predicted.scale >= smallest && predicted.expected_scale >= smallest &&
                             std::isfinite(predicted.scale) && std::isfinite(predicted.expected_scale);
  const scale_estimate estimate =
      measure_result || !representable ? ::mixprec::detail::measure(values.data(), values.size()) : predicted;
  return ::mixprec::detail::store<Out>(values.data(), values.size(), shape, estimate, options);
}

/// An elementwise binary op computed in double, quantised by the propagated estimate.
template <class Out, class A, class B, class Op, class Propagate>
scaled_tensor<Out> elementwise(const scaled_tensor<A>& a, const scaled_tensor<B>& b, std::optional<scale_rule> rule,
                               std::string_view name, Op op, Propagate propagate) {
  check_same_shape(a, b, name);
  const scale_rule r = resolve_rule(a, b, rule, name);
  hybrid_operands<A, B> in(a, b);
  const bool measure_result = in.template prepare<Out>(r, propagate);
  std::vector<double> values(a.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = op(in.a().value(i), in.b().value(i));
  return store_result<Out>(values, a.shape(), measure_result, propagate(in.a().estimate(), in.b().estimate()),
                           result_options(a, b, r));
}

/// A unary op with no scale rule: computed in float32 from the dequantised values, then the result is
/// quantised with its measured scales (requantised). \throws std::domain_error when a result is not
/// finite.
template <class F, class Op>
scaled_tensor<F> float32_unary(const scaled_tensor<F>& t, std::string_view name, Op op) {
  std::vector<float> values(t.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = op(static_cast<float>(t.value(i)));
  ::mixprec::detail::require_finite_values(values.data(), values.size(), name);
  return ::mixprec::detail::store<F>(values.data(), values.size(), t.shape(),
                                     ::mixprec::detail::measure(values.data(), values.size()), t.options());
}

/// The data of `t` as a contiguous span (storage order, row-major).
template <class F>
std::span<const F> data_span(const scaled_tensor<F>& t) {
  return {t.data().data(), t.size()};
}

}  // namespace detail

/// A + B, elementwise (equal shapes): scale sA + sB, expected_scale sqrt(eA^2 + eB^2).
/// \throws std::invalid_argument for different shapes or (without `rule`) different rules.
template <class Out = void, scaled_format A, scaled_format B>
[[nodiscard]] scaled_tensor<detail::result_format_t<Out, A, B>> add(const scaled_tensor<A>& a,
                                                                    const scaled_tensor<B>& b,
                                                                    std::optional<scale_rule> rule = {}) {
  detail::check_result_format<Out, A, B>();
  return detail::elementwise<detail::result_format_t<Out, A, B>>(
      a, b, rule, "scaled::add", [](double x, double y) { return x + y; }, add_scales);
}

/// A - B, elementwise (equal shapes): the scales of `add`.
/// \throws std::invalid_argument for different shapes or (without `rule`) different rules.
template <class Out = void, scaled_format A, scaled_format B>
[[nodiscard]] scaled_tensor<detail::result_format_t<Out, A, B>> sub(const scaled_tensor<A>& a,
                                                                    const scaled_tensor<B>& b,
                                                                    std::optional<scale_rule> rule = {}) {
  detail::check_result_format<Out, A, B>();
  return detail::elementwise<detail::result_format_t<Out, A, B>>(
      a, b, rule, "scaled::sub", [](double x, double y) { return x - y; }, add_scales);
}

/// A * B, elementwise (equal shapes): scale sA sB, expected_scale eA eB.
/// \throws std::invalid_argument for different shapes or (without `rule`) different rules.
template <class Out = void, scaled_format A, scaled_format B>
[[nodiscard]] scaled_tensor<detail::result_format_t<Out, A, B>> mul(const scaled_tensor<A>& a,
                                                                    const scaled_tensor<B>& b,
                                                                    std::optional<scale_rule> rule = {}) {
  detail::check_result_format<Out, A, B>();
  return detail::elementwise<detail::result_format_t<Out, A, B>>(
      a, b, rule, "scaled::mul", [](double x, double y) { return x * y; }, mul_scales);
}

/// c * A for a finite scalar c: both scales times |c|. The data are kept and only the step changes —
/// negated for c < 0, which the symmetric formats do exactly — so the values are c times the old ones
/// up to the rounding of the new step in double (exactly when c is a power of two); unless the
/// tensor's step must stay a power of two and c is not one: then the values are rewritten (one
/// rounding each to the format). c = 0 gives the all-zero tensor (scales `zero_tensor_scale`).
/// \throws std::invalid_argument when c is not finite, or a scale times |c| overflows double;
///         std::domain_error when a scale times |c| falls below `smallest_scale` (as `scaled_tensor`).
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> mul(const scaled_tensor<F>& a, double c) {
  if (!std::isfinite(c)) {
    throw std::invalid_argument(
        internal::concat("scaled::mul: the scalar is ", detail::number(c), "; it must be finite"));
  }
  const auto scaled_values = [&] {
    std::vector<double> v(a.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = a.value(i) * c;
    return v;
  };
  if (c == 0.0) {
    const std::vector<double> zeros(a.size(), 0.0);
    return ::mixprec::detail::store<F>(zeros.data(), zeros.size(), a.shape(), {zero_tensor_scale, zero_tensor_scale},
                                       a.options());
  }
  const scale_estimate estimate = scalar_mul_scales(a.estimate(), c);
  int exponent = 0;
  const bool c_power_of_two = std::fabs(std::frexp(c, &exponent)) == 0.5;
  if (a.options().power_of_two && !c_power_of_two) {
    const std::vector<double> values = scaled_values();
    return ::mixprec::detail::store<F>(values.data(), values.size(), a.shape(), estimate, a.options());
  }
  typename scaled_tensor<F>::data_type data = a.data();
  if (c < 0.0) {
    for (auto& x : data) x = static_cast<F>(-x);
  }
  return scaled_tensor<F>(std::move(data), estimate, a.options(), a.clipped());
}

/// The sum of all elements of A, a 0-d tensor: scale N sA, expected_scale sqrt(N) eA (the hybrid rule
/// requantises A first when the result's ratio would exceed F's range).
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> sum(const scaled_tensor<F>& a, std::optional<scale_rule> rule = {}) {
  const scale_rule r = rule.value_or(a.rule());
  const std::size_t n = a.size();
  // The hybrid rule on one operand: requantise it when its own ratio, or the sum's, outgrows F; if the
  // sum's still does, measure the sum.
  std::optional<scaled_tensor<F>> requantised;
  if (r == scale_rule::hybrid &&
      (needs_requantise<F>(a.estimate()) || needs_requantise<F>(sum_scales(a.estimate(), n)))) {
    requantised.emplace(requantise(a));
  }
  const scaled_tensor<F>& x = requantised ? *requantised : a;
  const bool measure_result = r == scale_rule::hybrid && needs_requantise<F>(sum_scales(x.estimate(), n));
  std::vector<double> total(1, 0.0);
  for (std::size_t i = 0; i < n; ++i) total[0] += x.value(i);
  return detail::store_result<F>(total, std::vector<std::size_t>{}, measure_result, sum_scales(x.estimate(), n),
                                 {.rule = r, .power_of_two = a.options().power_of_two});
}

/// The matrix product of A [m, k] and B [k, n], a [m, n] tensor: scale sA sB k, expected_scale eA eB
/// sqrt(k) (`matmul_scales`). The data are multiplied by kernels::matmul (file comment: exact
/// conversion to bfloat16 for float8 and int8, float32 accumulation).
/// \throws std::invalid_argument when A or B is not 2-d, the inner dimensions differ, or (without
///         `rule`) the rules differ.
template <class Out = void, scaled_format A, scaled_format B>
[[nodiscard]] scaled_tensor<detail::result_format_t<Out, A, B>> matmul(const scaled_tensor<A>& a,
                                                                       const scaled_tensor<B>& b,
                                                                       std::optional<scale_rule> rule = {}) {
  detail::check_result_format<Out, A, B>();
  using R = detail::result_format_t<Out, A, B>;
  if (a.shape().size() != 2 || b.shape().size() != 2 || a.shape()[1] != b.shape()[0]) {
    throw std::invalid_argument(internal::concat("scaled::matmul: needs A [m, k] and B [k, n], got A ",
                                                 detail::shape_text(a.shape()), " and B ",
                                                 detail::shape_text(b.shape())));
  }
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  const scale_rule r = detail::resolve_rule(a, b, rule, "scaled::matmul");
  const auto propagate = [k](const scale_estimate& x, const scale_estimate& y) { return matmul_scales(x, y, k); };
  detail::hybrid_operands<A, B> in(a, b);
  const bool measure_result = in.template prepare<R>(r, propagate);
  using C = ::mixprec::detail::exact_compute_t<A, B>;
  std::vector<accumulator_t<C>> y(m * n);
  kernels::matmul<C>(detail::data_span(in.a()), detail::data_span(in.b()), y, {.m = m, .k = k, .n = n},
                     kernels::b_layout::k_n);
  const double step = in.a().step() * in.b().step();
  std::vector<double> values(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) values[i] = static_cast<double>(y[i]) * step;
  return detail::store_result<R>(values, std::vector<std::size_t>{m, n}, measure_result,
                                 propagate(in.a().estimate(), in.b().estimate()), detail::result_options(a, b, r));
}

/// The dot product of 1-d A and B of equal length k, a 0-d tensor: the scales and arithmetic of
/// `matmul` with m = n = 1. \throws std::invalid_argument when A or B is not 1-d or the lengths differ.
template <class Out = void, scaled_format A, scaled_format B>
[[nodiscard]] scaled_tensor<detail::result_format_t<Out, A, B>> dot(const scaled_tensor<A>& a,
                                                                    const scaled_tensor<B>& b,
                                                                    std::optional<scale_rule> rule = {}) {
  detail::check_result_format<Out, A, B>();
  using R = detail::result_format_t<Out, A, B>;
  if (a.shape().size() != 1 || b.shape().size() != 1 || a.size() != b.size()) {
    throw std::invalid_argument(internal::concat("scaled::dot: needs two 1-d tensors of one length, got ",
                                                 detail::shape_text(a.shape()), " and ",
                                                 detail::shape_text(b.shape())));
  }
  const std::size_t k = a.size();
  const scale_rule r = detail::resolve_rule(a, b, rule, "scaled::dot");
  const auto propagate = [k](const scale_estimate& x, const scale_estimate& y) { return matmul_scales(x, y, k); };
  detail::hybrid_operands<A, B> in(a, b);
  const bool measure_result = in.template prepare<R>(r, propagate);
  using C = ::mixprec::detail::exact_compute_t<A, B>;
  accumulator_t<C> y{};
  kernels::matmul<C>(detail::data_span(in.a()), detail::data_span(in.b()), std::span<accumulator_t<C>>(&y, 1),
                     {.m = 1, .k = k, .n = 1}, kernels::b_layout::k_n);
  const std::vector<double> value(1, static_cast<double>(y) * in.a().step() * in.b().step());
  return detail::store_result<R>(value, std::vector<std::size_t>{}, measure_result,
                                 propagate(in.a().estimate(), in.b().estimate()), detail::result_options(a, b, r));
}

/// A / B, elementwise (equal shapes), in float32 then requantised (no scale rule: the quotient's
/// size depends on how small B gets); the result follows `rule`, or the operands' common rule.
/// \throws std::invalid_argument for different shapes or (without `rule`) different rules;
/// std::domain_error when a quotient is not finite (division by zero, or beyond float's range).
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> div(const scaled_tensor<F>& a, const scaled_tensor<F>& b,
                                   std::optional<scale_rule> rule = {}) {
  detail::check_same_shape(a, b, "scaled::div");
  const scale_rule r = detail::resolve_rule(a, b, rule, "scaled::div");
  std::vector<float> values(a.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(a.value(i)) / static_cast<float>(b.value(i));
  }
  ::mixprec::detail::require_finite_values(values.data(), values.size(), "scaled::div");
  return ::mixprec::detail::store<F>(values.data(), values.size(), a.shape(),
                                     ::mixprec::detail::measure(values.data(), values.size()),
                                     detail::result_options(a, b, r));
}

/// sqrt(A) elementwise in float32, requantised. \throws std::domain_error for a negative value.
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> sqrt(const scaled_tensor<F>& a) {
  return detail::float32_unary(a, "scaled::sqrt", [](float x) { return std::sqrt(x); });
}

/// exp(A) elementwise in float32, requantised. \throws std::domain_error when a result overflows float.
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> exp(const scaled_tensor<F>& a) {
  return detail::float32_unary(a, "scaled::exp", [](float x) { return std::exp(x); });
}

/// log(A) elementwise in float32, requantised. \throws std::domain_error for a value <= 0.
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> log(const scaled_tensor<F>& a) {
  return detail::float32_unary(a, "scaled::log", [](float x) { return std::log(x); });
}

/// A^p elementwise in float32 (std::pow), requantised. \throws std::domain_error when a result is not
/// finite (a negative base with a non-integer p, or 0 to a negative power).
template <scaled_format F>
[[nodiscard]] scaled_tensor<F> pow(const scaled_tensor<F>& a, float p) {
  return detail::float32_unary(a, "scaled::pow", [p](float x) { return std::pow(x, p); });
}

}  // namespace mixprec::scaled
