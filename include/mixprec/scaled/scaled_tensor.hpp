/// \file
/// \brief `scaled_tensor<Format>`: low-precision data plus scale metadata (the AutoScale proposal's
/// `ScaledTensor`, as in Graphcore's jax-scalify `ScaledArray`), with `quantise`, `dequantise`,
/// `requantise` and `with_scale`.
///
/// A scaled tensor holds `data` (an `xt::xarray<Format>`, row-major), a `scale_estimate` (the
/// worst-case `scale` and the average-case `expected_scale`), the `scale_rule` it follows, and the
/// `step`: the value of one data unit, so that
///
///     value = data * step,    step = scale_q / U    (scaled_format.hpp: which scale, which U)
///
/// e.g. float8_e4m3fn data quantised by a worst-case scale s hold value * 448 / s. With
/// `power_of_two` the step is rounded **up** to a power of two: quantising and dequantising are then
/// exact exponent shifts (only the rounding to `Format` remains), and rounding up keeps a worst-case
/// scale a bound (rounding down would push the largest values past M and clip them); the price is at
/// most one binade at the bottom of the format.
///
/// **Saturation and clip counts.** Data are written by rounding to nearest even with finite overflow
/// saturated to +-M (`saturate_cast`, OCP FP8's "satfinite"), never NaN or Inf. `clipped()` counts
/// the elements that saturated when the data were last written: 0 under a worst-case scale that
/// holds; more when a promise (`with_scale`) was broken or an average-case scale was exceeded by
/// more than the format's headroom. Nothing is trusted blindly: a broken promise is counted, or with
/// `on_broken_promise::throw_error` reported as an exception.
///
/// **Bad input.** NaN or Inf values cannot be quantised (std::domain_error naming the first one);
/// scales must be finite and positive (std::invalid_argument) and large enough that the step is a
/// normal double (`smallest_scale`, else std::domain_error); inputs must be row-major; int8 data never
/// hold -128. An all-zero (or empty) tensor gets the smallest normal float as both scales, so a scale
/// is never 0 or NaN and vanishes beside the scale of any normal float data in a sum.
///
/// **Range of the values.** Scales are doubles, so represented values may exceed float's range:
/// `dequantise<float>` then gives +-Inf; `dequantise<double>` holds them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/scaled/detail/message.hpp"
#include "mixprec/scaled/scale_estimate.hpp"
#include "mixprec/scaled/scaled_format.hpp"

namespace mixprec {

/// How a tensor is quantised: its `rule` (which scale quantises; whether the hybrid rule's
/// requantisation applies) and whether its step is a power of two.
struct quantise_options {
  scale_rule rule = scale_rule::hybrid;  ///< the proposal's #2 by default.
  bool power_of_two = false;             ///< round the step up to a power of two (exact rescaling).

  friend constexpr bool operator==(const quantise_options&, const quantise_options&) = default;
};

/// What `with_scale` does when the data break the promise (values beyond what the promised scale can
/// hold, which saturate): count them in `clipped()`, or throw std::range_error.
enum class on_broken_promise : std::uint8_t { count, throw_error };

/// The scale that an all-zero tensor gets (both scales): the smallest normal float, 2^-126.
inline constexpr double zero_tensor_scale = static_cast<double>(std::numeric_limits<float>::min());

/// Low-precision data with their scales (file comment). Shapes: any rank (xt::xarray). Made by
/// `quantise`, `with_scale`, `requantise` and the ops of scaled/ops.hpp, or from parts with the
/// constructor; the invariants (valid scales, step consistent with them) always hold.
template <scaled_format Format>
class scaled_tensor {
 public:
  using format_type = Format;
  using data_type = xt::xarray<Format>;

  /// A tensor from its parts: `data` already expressed in units of the step that `estimate` and
  /// `options` define (a tensor saved earlier, or data from another library). `clipped` is the count
  /// to report. \throws std::invalid_argument when a scale is not finite and positive.
  scaled_tensor(data_type data, scale_estimate estimate, quantise_options options, std::size_t clipped = 0)
      : data_(std::move(data)), estimate_(estimate), options_(options), clipped_(clipped) {
    check_scale_estimate(estimate_, "scaled_tensor");
    step_ = step_for(estimate_, options_);
    if constexpr (std::same_as<Format, std::int8_t>) {
      for (std::size_t i = 0; i < data_.size(); ++i) {
        if (data_.data()[i] == std::numeric_limits<std::int8_t>::min()) {
          throw std::invalid_argument(
              internal::concat("scaled_tensor: int8 data are symmetric, [-127, 127], but element ", i,
                               " is -128 (negating it would overflow); clamp the data to [-127, 127]"));
        }
      }
    }
  }

  /// The data, in units of `step()`.
  [[nodiscard]] const data_type& data() const noexcept { return data_; }
  /// The shape of the data.
  [[nodiscard]] const auto& shape() const noexcept { return data_.shape(); }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  /// Both scales (units of the represented values).
  [[nodiscard]] const scale_estimate& estimate() const noexcept { return estimate_; }
  /// The worst-case scale: a bound on |value| (when the rules' assumptions and promises hold).
  [[nodiscard]] double scale() const noexcept { return estimate_.scale; }
  /// The average-case scale: an estimate of the RMS of the values.
  [[nodiscard]] double expected_scale() const noexcept { return estimate_.expected_scale; }
  /// The rule and the power-of-two choice.
  [[nodiscard]] const quantise_options& options() const noexcept { return options_; }
  /// The rule this tensor follows.
  [[nodiscard]] scale_rule rule() const noexcept { return options_.rule; }
  /// The value of one data unit: value = data * step.
  [[nodiscard]] double step() const noexcept { return step_; }
  /// How many elements saturated to +-M when the data were written (file comment).
  [[nodiscard]] std::size_t clipped() const noexcept { return clipped_; }
  /// The represented value of element `i` (storage order), rounded once to double.
  [[nodiscard]] double value(std::size_t i) const { return static_cast<double>(data_.data()[i]) * step_; }

  /// The step that `estimate` and `options` define: scale_q / U, rounded up to a power of two when
  /// asked (file comment).
  /// \throws std::domain_error when the step is not a normal double (a scale below
  ///         `smallest_scale(options)`: the values are too small for this format's scaled tensors).
  [[nodiscard]] static double step_for(const scale_estimate& estimate, const quantise_options& options) {
    const double scale_q = quantisation_scale(estimate, options);
    const double step = scale_q / quantisation_unit<Format>(options.rule);
    if (!(step >= std::numeric_limits<double>::min())) {
      throw std::domain_error(internal::concat(
          "scaled_tensor: the scale ", detail::number(scale_q), " is below ", detail::number(smallest_scale(options)),
          ", the smallest this format can be quantised by (its step would not be a normal double)"));
    }
    if (!options.power_of_two) return step;
    int exponent = 0;
    const double mantissa = std::frexp(step, &exponent);  // step = mantissa * 2^exponent, mantissa in [0.5, 1)
    return mantissa == 0.5 ? step : std::ldexp(1.0, exponent);
  }

  /// The scale a tensor is quantised by: `scale` (worst case, hybrid) or `expected_scale` (average case).
  [[nodiscard]] static constexpr double quantisation_scale(const scale_estimate& estimate,
                                                           const quantise_options& options) noexcept {
    return options.rule == scale_rule::average_case ? estimate.expected_scale : estimate.scale;
  }

  /// The smallest quantisation scale of this format and rule: the one whose step is the smallest normal
  /// double (about 7.6e-270 for bfloat16's worst case, 1e-305 for float8_e4m3fn's).
  [[nodiscard]] static constexpr double smallest_scale(const quantise_options& options) noexcept {
    return std::numeric_limits<double>::min() * quantisation_unit<Format>(options.rule);
  }

  /// The magnitude beyond which a value saturates when written with `estimate` and `options`: |value| >
  /// this means |value / step| > M. Computed from the scale itself (scale_q M / U, exactly scale_q for a
  /// worst-case scale), not from the rounded step, so that a value at the bound is never counted.
  [[nodiscard]] static double saturation_threshold(const scale_estimate& estimate, const quantise_options& options) {
    constexpr double m = format_max<Format>();
    if (options.power_of_two) return step_for(estimate, options) * m;  // a power of two times M: exact
    const double u = quantisation_unit<Format>(options.rule);
    return u == m ? quantisation_scale(estimate, options) : quantisation_scale(estimate, options) * (m / u);
  }

 private:
  data_type data_;
  scale_estimate estimate_;
  quantise_options options_;
  double step_ = 1.0;
  std::size_t clipped_ = 0;
};

namespace detail {

/// Throws std::invalid_argument unless `x` stores its elements in row-major order (its storage is read
/// in order into a row-major tensor of its shape).
template <class E>
void require_row_major(const E& x, std::string_view what) {
  if (x.dimension() > 1 && x.layout() != xt::layout_type::row_major) {
    throw std::invalid_argument(internal::concat(what,
                                                 ": the input is not row-major; copy it into a row-major container "
                                                 "first (xt::xarray<float> y = x;)"));
  }
}

/// Throws std::domain_error naming `what` and the first non-finite value of `values`.
template <class T>
void require_finite_values(const T* values, std::size_t n, std::string_view what) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(static_cast<double>(values[i]))) {
      throw std::domain_error(internal::concat(what, ": the value at index ", i, " is ",
                                               number(static_cast<double>(values[i])),
                                               "; a scaled tensor holds finite values only (check the input with "
                                               "mixprec::all_finite, or find the overflow upstream)"));
    }
  }
}

/// The measured estimate of `n` finite values: {max |x|, sqrt(mean(x^2))}, summed in double; an
/// all-zero or empty input gets `zero_tensor_scale` for both.
template <class T>
scale_estimate measure(const T* values, std::size_t n) {
  double max_abs = 0.0;
  for (std::size_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(static_cast<double>(values[i])));
  if (max_abs == 0.0) return {zero_tensor_scale, zero_tensor_scale};
  // The squares of v / max (in [0, 1]): no overflow or underflow whatever the magnitude of the values.
  double sum_squares = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(values[i]) / max_abs;
    sum_squares += v * v;
  }
  // Rounding could put the RMS an ulp above the max; a sum of squares below DBL_MIN (one value among
  // 10^300 zeros) is kept positive.
  const double rms = max_abs * std::sqrt(sum_squares / static_cast<double>(n));
  return {max_abs, std::clamp(rms, std::numeric_limits<double>::min(), max_abs)};
}

/// `values` (finite, `n` of them, in the shape `shape`) written as a tensor with `estimate`: each is
/// divided by the step (in double) and rounded once to Format, saturating; saturations are counted.
template <scaled_format Format, class T, class Shape>
scaled_tensor<Format> store(const T* values, std::size_t n, const Shape& shape, const scale_estimate& estimate,
                            const quantise_options& options) {
  check_scale_estimate(estimate, "quantise");
  const double step = scaled_tensor<Format>::step_for(estimate, options);
  const double threshold = scaled_tensor<Format>::saturation_threshold(estimate, options);
  typename scaled_tensor<Format>::data_type data(shape);
  std::size_t clipped = 0;
  Format* out = data.data();
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<double>(values[i]);
    clipped += std::fabs(x) > threshold ? 1U : 0U;
    out[i] = to_scaled_format<Format>(x / step);  // saturates at +-M
  }
  return scaled_tensor<Format>(std::move(data), estimate, options, clipped);
}

/// The represented values of `t` in double (value = data * step), storage order.
template <scaled_format Format>
std::vector<double> values_of(const scaled_tensor<Format>& t) {
  std::vector<double> values(t.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = t.value(i);
  return values;
}

/// A broken promise reported as std::range_error (with_scale's `on_broken_promise::throw_error`).
template <scaled_format Format>
void report_broken_promise(const scaled_tensor<Format>& t, on_broken_promise mode) {
  if (mode == on_broken_promise::throw_error && t.clipped() > 0) {
    throw std::range_error(internal::concat(
        "with_scale: the promise scale = ", number(t.scale()), ", expected_scale = ", number(t.expected_scale()),
        " (rule ", to_string(t.rule()), ") is broken: ", t.clipped(), " of ", t.size(),
        " values lie beyond what it can hold and saturated; pass a larger scale, or "
        "quantise to measure it"));
  }
}

}  // namespace detail

/// Quantises `x` (a row-major xtensor container of float or double, evaluated; e.g. `xt::xarray<float>`) to
/// `Format` with the measured scales: `scale` = max |x|, `expected_scale` = sqrt(mean(x^2)) (the
/// proposal's #2; an all-zero tensor gets `zero_tensor_scale`). The result has x's shape.
/// \throws std::domain_error when x holds NaN or Inf, or its values are too small for the format
///         (`smallest_scale`); std::invalid_argument when x is not row-major.
///
///     xt::xarray<float> x = {0.5f, -2.0f, 1.0f};
///     auto t = mixprec::quantise<mixprec::float8_e4m3fn>(x);   // scale 2, data {112, -448, 224}
template <scaled_format Format, class E>
[[nodiscard]] scaled_tensor<Format> quantise(const E& x, quantise_options options = {}) {
  detail::require_row_major(x, "quantise");
  detail::require_finite_values(x.data(), x.size(), "quantise");
  return detail::store<Format>(x.data(), x.size(), x.shape(), detail::measure(x.data(), x.size()), options);
}

/// The represented values of `t` as an `xt::xarray<T>` (T = float or double) of t's shape:
/// data * step, rounded once to T (exact when the step is a power of two and the result is normal).
template <class T = float, scaled_format Format>
[[nodiscard]] xt::xarray<T> dequantise(const scaled_tensor<Format>& t) {
  static_assert(std::is_floating_point_v<T>, "dequantise<T>: T must be float or double.");
  xt::xarray<T> out(t.shape());
  for (std::size_t i = 0; i < t.size(); ++i) out.data()[i] = static_cast<T>(t.value(i));
  return out;
}

/// `t` with its scales measured again from its values (max |value|, RMS) and its data rewritten by the
/// new step: the proposal's "reset to an empirical scale". The rule and options are kept.
template <scaled_format Format>
[[nodiscard]] scaled_tensor<Format> requantise(const scaled_tensor<Format>& t) {
  const std::vector<double> values = detail::values_of(t);
  return detail::store<Format>(values.data(), values.size(), t.shape(), detail::measure(values.data(), values.size()),
                               t.options());
}

/// `x` quantised with the user's promised scales instead of measured ones (the proposal's
/// `with_scale`), e.g. `with_scale({1.0, 1.0}, y)` for a normalised output. The promise is checked,
/// not trusted: values it cannot hold saturate and are counted in `clipped()`, or with
/// `on_broken_promise::throw_error` raise std::range_error.
/// \throws std::invalid_argument for a scale that is not finite and positive; std::domain_error for
///         NaN or Inf in x.
template <scaled_format Format, class E>
[[nodiscard]] scaled_tensor<Format> with_scale(const scale_estimate& promise, const E& x, quantise_options options = {},
                                               on_broken_promise mode = on_broken_promise::count) {
  check_scale_estimate(promise, "with_scale");
  detail::require_row_major(x, "with_scale");
  detail::require_finite_values(x.data(), x.size(), "with_scale");
  scaled_tensor<Format> t = detail::store<Format>(x.data(), x.size(), x.shape(), promise, options);
  detail::report_broken_promise(t, mode);
  return t;
}

/// `t` with its scales replaced by the user's promise (the proposal's `with_scale` on a scaled
/// tensor, overriding what the rules propagated): the data are rewritten in the promised step and
/// checked as in the overload above. The rule and options are kept.
template <scaled_format Format>
[[nodiscard]] scaled_tensor<Format> with_scale(const scale_estimate& promise, const scaled_tensor<Format>& t,
                                               on_broken_promise mode = on_broken_promise::count) {
  check_scale_estimate(promise, "with_scale");
  const std::vector<double> values = detail::values_of(t);
  scaled_tensor<Format> out = detail::store<Format>(values.data(), values.size(), t.shape(), promise, t.options());
  detail::report_broken_promise(out, mode);
  return out;
}

}  // namespace mixprec
