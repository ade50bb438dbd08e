/// \file
/// \brief Delayed scaling for float8 training, after NVIDIA TransformerEngine's `DelayedScaling` recipe
/// (`transformer_engine/common/recipe/__init__.py`): each float8 tensor gets a per-tensor scale taken
/// from a history of the amaxes (max |x|) of earlier steps, so quantising a tensor reads it once, not
/// twice. Declares `delayed_scaling<Format>`, its options and checkpoint state, `amax_compute_algo`,
/// and the recipe's pairs of formats (`float8_recipe_format`, `float8_recipe_formats`).
///
/// **Convention.** A mixprec scaled tensor represents data * scale / M, where M = `finfo<Format>::max`
/// (448 for float8_e4m3fn, 57344 for float8_e5m2), and `scale` bounds |x| (it behaves like an amax).
/// TransformerEngine's scale is the inverse of ours, times the format max: TE stores q = x * s_TE,
/// with s_TE = (M / amax) / 2^margin, and `1 / s_TE` as `scale_inv`; mixprec stores the bound
/// scale = amax * 2^margin, and `quantisation_multiplier()` = M / scale is s_TE.
///
/// **Training step** (delayed: the scale used at step t comes from the amaxes of steps before t):
///
///     using formats = mixprec::float8_recipe_formats<mixprec::float8_recipe_format::hybrid>;
///     mixprec::delayed_scaling<formats::forward_format> x_scale;    // activations: e4m3fn
///     mixprec::delayed_scaling<formats::backward_format> g_scale;   // gradients: e5m2
///     for (...) {
///       // quantise x by the bound x_scale.scale(): data = x * (M / scale), saturated to +-M (e.g.
///       // `with_scale` of scaled_tensor.hpp, with this bound as the worst-case scale)
///       x_scale.update_from(x);   // records amax(x); the new scale serves step t + 1
///     }
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/scaled/detail/message.hpp"
#include "mixprec/scaled/scaled_format.hpp"

namespace mixprec {

/// How the amax that sets the next scale is chosen from the history (TE's `amax_compute_algo`).
enum class amax_compute_algo {
  max,          ///< the largest amax of the history window (TE's default, "max")
  most_recent,  ///< the amax just recorded ("most_recent")
};

/// Which float8 formats a training recipe uses (TE's `Format`). TE's `DelayedScaling` accepts E4M3
/// and HYBRID and refuses pure E5M2 ("Pure E5M2 training is not supported."), so there are two.
enum class float8_recipe_format {
  e4m3,    ///< every float8 tensor is e4m3fn (TE `Format.E4M3`: max 448 forward and backward)
  hybrid,  ///< e4m3fn forward, e5m2 backward (TE `Format.HYBRID`, TE's default: 448 / 57344)
};

/// The float8 types of a recipe format: `forward_format` for the forward pass (activations and
/// weights) and `backward_format` for the backward pass (gradients). Both are `float8_e4m3fn` for
/// `e4m3`; `hybrid` takes `float8_e5m2` backward, whose wider range (max 57344, smallest subnormal
/// 2^-16) suits gradients and whose precision (2 mantissa bits) they tolerate.
template <float8_recipe_format F>
struct float8_recipe_formats {
  using forward_format = float8_e4m3fn;
  using backward_format = std::conditional_t<F == float8_recipe_format::hybrid, float8_e5m2, float8_e4m3fn>;
};

/// The knobs of `delayed_scaling`, with TE's defaults (`DelayedScaling` fields). Use designated
/// initializers: `delayed_scaling_options{.amax_history_len = 16, .margin = 1}`.
struct delayed_scaling_options {
  /// Number of amaxes in the window (TE: 1024), at least 1. With 1, `max` is `most_recent`.
  std::size_t amax_history_len = 1024;
  /// How the window's amax is chosen (TE: "max").
  amax_compute_algo algo = amax_compute_algo::max;
  /// Headroom in binades: scale = amax * 2^margin, i.e. the multiplier is (M / amax) / 2^margin (TE:
  /// 0). A negative margin is allowed, as in TE (whose formula takes any integer); it maps amax above
  /// M, so the largest values saturate. Must lie in [-126, 126], where 2^margin is a normal float
  /// (TE computes 2^-margin in float32).
  int margin = 0;
  /// Round the multiplier M / scale down to a power of two (the bound up, as `quantise_options::
  /// power_of_two` of scaled_tensor.hpp rounds its step up): values never saturate more than with the
  /// exact scale (rounding the other way would clip the largest), and multiplying and dividing by the
  /// multiplier are exact in every binary format (barring overflow and underflow), so rescaling adds
  /// no rounding of its own; the price is at most one binade at the bottom of the format. TE's first
  /// release (2022, `pytorch/fp8.py`) computed the multiplier as 2^(floor(log2(M / amax)) - margin);
  /// its current scaling recipes offer the same as `power_2_scale` (`common/recipe/recipe_common.cuh`
  /// clears the float32 mantissa, rounding down). Off by default, as in TE's `DelayedScaling`.
  bool power_of_two_scale = false;
  /// Scale before any amax is recorded (a bound, in the tensor's units). Empty: M, so the first
  /// multiplier is 1, as TE initialises its scale to 1. To start from data instead, call `update`
  /// with a calibration amax before the first step. Set: a positive finite number, normalised as
  /// every scale is (at least `smallest_scale`; rounded when `power_of_two_scale`).
  std::optional<double> initial_scale{};

  friend bool operator==(const delayed_scaling_options&, const delayed_scaling_options&) = default;
};

/// Everything `delayed_scaling` holds, for checkpoints: save `ds.state()`, restore with
/// `delayed_scaling<Format>(saved)`. The scale and the amaxes are in the tensor's units, so the
/// state does not depend on the format (but a power-of-two scale is one for its own format only).
struct delayed_scaling_state {
  /// The current bound; 0 in a default-constructed state, which the constructor refuses.
  double scale = 0.0;
  /// Recorded amaxes, most recent first, at most `options.amax_history_len` of them.
  std::vector<double> amax_history{};
  delayed_scaling_options options{};

  friend bool operator==(const delayed_scaling_state&, const delayed_scaling_state&) = default;
};

namespace detail {
/// Whether `delayed_scaling` takes `T`: a signed 8-bit small float (the float8 family but e8m0fnu,
/// which is unsigned and holds scales, not data).
template <class T>
[[nodiscard]] consteval bool is_delayed_scaling_format() {
  if constexpr (small_float<T>) {
    return T::format.bits() == 8 && T::format.is_signed;
  } else {
    return false;
  }
}

[[noreturn]] inline void throw_delayed_scaling_error(const std::string& what) {
  throw std::invalid_argument(internal::concat("mixprec::delayed_scaling: ", what));
}
}  // namespace detail

/// Delayed per-tensor scaling of one float8 tensor (TE's `DelayedScaling`, one quantizer's
/// `scale` and `amax_history`). `Format` is the tensor's float8 type, e.g. `float8_e4m3fn` or
/// `float8_e5m2`.
///
/// `update(amax)` applies TE's rule (`_default_sf_compute` in `pytorch/quantization.py`, formerly
/// `pytorch/fp8.py`; the kernels of `common/recipe/delayed_scaling.cu`; `DelayedScaleQuantizer` in
/// `jax/quantize/quantizer.py`):
///  - amax = 0 (an all-zero or empty tensor, or a module that did not run): nothing changes, neither
///    history nor scale (TE's fused update, its default: a zero amax neither rotates the history
///    nor changes the scale);
///  - otherwise the amax is recorded at the front of the history, the oldest falling out past
///    `amax_history_len`, and the window's amax a is chosen by `algo` (`max`: the largest; a NaN
///    anywhere in the window makes it NaN, as TE's `torch.max` and `jnp.max` do and as
///    `kernels::absmax` does; `most_recent`: the amax just recorded);
///  - if a is positive and finite, scale = a * 2^margin, raised to `smallest_scale` if below (TE
///    replaces a float32 multiplier that overflows with FLT_MAX) and, with `power_of_two_scale`,
///    rounded up so that M / scale is a power of two;
///  - if a is NaN or Inf, the scale stays. With `max` it stays as long as the NaN or Inf is in the
///    window (TE does the same for Inf; its fused CUDA kernel takes `fmaxf`, which skips a NaN).
///
/// Value semantics; `state()` and the constructor from a state round-trip every field.
///
/// **Example** (M = 448):
///
///     mixprec::delayed_scaling<mixprec::float8_e4m3fn> ds({.amax_history_len = 2});
///     ds.scale();                    // 448: multiplier 1 before any amax (TE's initial scale 1)
///     ds.update(2.0);                // history {2}; scale 2, multiplier 224 = 448 / 2
///     ds.update(1.0);                // history {1, 2}; scale 2 (max of the window)
///     ds.update(0.5);                // history {0.5, 1}; scale 1, multiplier 448
template <class Format>
class delayed_scaling {
  static_assert(detail::is_delayed_scaling_format<Format>(),
                "mixprec::delayed_scaling<Format>: Format must be a signed float8 type such as float8_e4m3fn or "
                "float8_e5m2 (TransformerEngine's delayed scaling recipe is for float8 tensors; float8_e8m0fnu "
                "holds scales, not data).");

 public:
  using format_type = Format;

  /// M, the largest finite value of `Format` (`finfo<Format>::max`): 448 for float8_e4m3fn, 57344
  /// for float8_e5m2.
  static constexpr double format_max = ::mixprec::format_max<Format>();

  /// The smallest scale: the least double with M / scale <= FLT_MAX, so that the multiplier is a
  /// finite float (TE: "when the amax is too tiny that the scale becomes infinite in FP32, we set the
  /// scale to the max value of FP32"). About 1.3e-36 for float8_e4m3fn.
  static constexpr double smallest_scale = [] {
    constexpr double float_max = std::numeric_limits<float>::max();
    double s = format_max / float_max;
    while (format_max / s > float_max) s = std::bit_cast<double>(std::bit_cast<std::uint64_t>(s) + 1);
    return s;
  }();

  /// Starts at `options.initial_scale` (M when empty) with an empty history.
  ///
  /// Errors: std::invalid_argument naming the field and its value when `amax_history_len` is 0,
  /// `margin` lies outside [-126, 126], or `initial_scale` is set but not positive and finite.
  explicit delayed_scaling(const delayed_scaling_options& options = {}) : state_(initial_state(options)) {}

  /// Restores a saved state (see `state()`) exactly.
  ///
  /// Errors: std::invalid_argument as the options constructor, plus when `state.scale` is not finite
  /// or below `smallest_scale`, when `power_of_two_scale` is set and M / scale is not a power of two
  /// (a state saved for another format), when the history holds more than `amax_history_len` amaxes,
  /// or when an amax is negative.
  explicit delayed_scaling(const delayed_scaling_state& state) : state_(state) {
    validate_options(state.options);
    if (!std::isfinite(state.scale) || !(state.scale >= smallest_scale)) {
      detail::throw_delayed_scaling_error(internal::concat(
          "scale = ", detail::number(state.scale), " is invalid: it must be finite and at least smallest_scale = ",
          detail::number(smallest_scale), " (M / FLT_MAX for this format)"));
    }
    if (state.options.power_of_two_scale && normalise(state.scale, state.options) != state.scale) {
      detail::throw_delayed_scaling_error(
          internal::concat("scale = ", detail::number(state.scale),
                           " is invalid: power_of_two_scale is set but M / scale is not a power of two for M = ",
                           detail::number(format_max), " (was the state saved for another format?)"));
    }
    if (state.amax_history.size() > state.options.amax_history_len) {
      detail::throw_delayed_scaling_error(
          internal::concat("the amax history holds ", state.amax_history.size(),
                           " amaxes, more than amax_history_len = ", state.options.amax_history_len));
    }
    for (std::size_t i = 0; i < state.amax_history.size(); ++i) {
      if (state.amax_history[i] < 0.0) {
        detail::throw_delayed_scaling_error(
            internal::concat("amax_history[", i, "] = ", detail::number(state.amax_history[i]),
                             " is invalid: an amax is a largest magnitude, never negative"));
      }
    }
  }

  /// The current bound on |x|, in the tensor's units (TE's `1 / scale` times M); the one to quantise
  /// with at this step.
  [[nodiscard]] double scale() const noexcept { return state_.scale; }
  /// M / scale(): what x is multiplied by before rounding to `Format` (TE's `scale`). At most FLT_MAX.
  [[nodiscard]] double quantisation_multiplier() const noexcept { return format_max / state_.scale; }
  /// scale() / M: the value of one data unit (scaled_tensor's `step`; TE's `scale_inv`).
  [[nodiscard]] double step() const noexcept { return state_.scale / format_max; }
  /// The recorded amaxes, most recent first: the window the last `update` chose its amax from. At
  /// most `amax_history_len` of them (fewer until that many non-zero amaxes have been recorded).
  [[nodiscard]] const std::vector<double>& amax_history() const noexcept { return state_.amax_history; }
  /// The options this object was built with.
  [[nodiscard]] const delayed_scaling_options& options() const noexcept { return state_.options; }
  /// Everything needed to resume: pass it to `delayed_scaling<Format>(state)`.
  [[nodiscard]] const delayed_scaling_state& state() const noexcept { return state_; }

  /// Records the amax of this step's tensor and sets the scale for the next step; the rule is in the
  /// class comment. NaN and +Inf are recorded (the scale then stays).
  ///
  /// Errors: std::invalid_argument when `amax` is negative (-Inf included); nothing changes then.
  void update(double amax) {
    if (amax < 0.0) {
      detail::throw_delayed_scaling_error(internal::concat("update: amax = ", detail::number(amax),
                                                           " is invalid: an amax is a largest magnitude, never "
                                                           "negative (pass max |x|, e.g. kernels::absmax(x))"));
    }
    if (amax == 0.0) return;
    std::vector<double>& history = state_.amax_history;
    history.insert(history.begin(), amax);  // first, so that a bad_alloc leaves the history as it was
    if (history.size() > state_.options.amax_history_len) history.pop_back();
    const double window = window_amax();
    if (std::isfinite(window) && window > 0.0) {
      const double next = normalise(std::ldexp(window, state_.options.margin), state_.options);
      if (std::isfinite(next)) state_.scale = next;
    }
  }

  /// `update(kernels::absmax(x))`: records the amax of a contiguous range `x` of float, double, a
  /// small float or complex (`kernels::absmax`: exact, NaN when an element is NaN, 0 when empty).
  template <class R>
  requires requires(const R& r) { kernels::absmax(r); }
  void update_from(const R& x) { update(static_cast<double>(kernels::absmax(x))); }

  friend bool operator==(const delayed_scaling&, const delayed_scaling&) = default;

 private:
  /// The window's amax under `algo` (the history is not empty here).
  [[nodiscard]] double window_amax() const noexcept {
    const std::vector<double>& history = state_.amax_history;
    if (state_.options.algo == amax_compute_algo::most_recent) return history.front();
    double m = 0.0;
    for (const double a : history) {
      if (std::isnan(a)) return a;
      if (a > m) m = a;
    }
    return m;
  }

  /// `bound` raised to `smallest_scale`, and with `power_of_two_scale` rounded up to the least
  /// M * 2^-k (k an integer) not below it. `bound` is positive or 0 (an underflow); the result may
  /// be +Inf only when `bound` is within a binade of the largest double.
  [[nodiscard]] static double normalise(double bound, const delayed_scaling_options& options) noexcept {
    if (!(bound >= smallest_scale)) bound = smallest_scale;
    if (!options.power_of_two_scale || !std::isfinite(bound)) return bound;
    // k = floor(log2(M / bound)) exactly: with M = m_M 2^e_M and bound = m_b 2^e_b (m in [0.5, 1)),
    // M / bound = (m_M / m_b) 2^(e_M - e_b) and m_M / m_b lies in [1, 2) when m_M >= m_b, else in (0.5, 1).
    int e_m = 0;
    int e_b = 0;
    const double m_m = std::frexp(format_max, &e_m);
    const double m_b = std::frexp(bound, &e_b);
    const int k = e_m - e_b - (m_m >= m_b ? 0 : 1);
    return std::ldexp(format_max, -k);
  }

  static delayed_scaling_state initial_state(const delayed_scaling_options& options) {
    validate_options(options);
    return {normalise(options.initial_scale.value_or(format_max), options), {}, options};
  }

  static void validate_options(const delayed_scaling_options& o) {
    if (o.amax_history_len == 0) {
      detail::throw_delayed_scaling_error(
          "amax_history_len = 0 is invalid: the window must hold at least one amax (TE's default is 1024; 1 "
          "uses the most recent amax only)");
    }
    if (o.margin < -126 || o.margin > 126) {
      detail::throw_delayed_scaling_error(internal::concat(
          "margin = ", o.margin,
          " is invalid: it must lie in [-126, 126], where 2^margin is a normal float (TE's default is 0)"));
    }
    if (o.initial_scale && (!(*o.initial_scale > 0.0) || !std::isfinite(*o.initial_scale))) {
      detail::throw_delayed_scaling_error(
          internal::concat("initial_scale = ", detail::number(*o.initial_scale),
                           " is invalid: it must be a positive finite number (or empty, for M: a multiplier of 1, "
                           "as TE starts)"));
    }
  }

  delayed_scaling_state state_;
};

}  // namespace mixprec
