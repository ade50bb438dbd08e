/// \file
/// \brief Element-wise activations and their derivatives computed in "opmath": float32 for float and
/// every 16-bit-or-smaller format, float64 for double; the result is rounded once to the output type.
///
/// This is PyTorch's `opmath_type` rule (and what the float16 T5 work relies on for GELU): half
/// formats are widened exactly to float, the formula runs in float, and only the result is rounded.
/// So the cube inside tanh-GELU cannot overflow float16 (gelu(float16(100)) is 100, not NaN), and
/// exp/erf/tanh have float accuracy rather than that of a half-precision polynomial.
///
/// Formulas (x real; in opmath):
///
/// | function | definition | evaluated as (same value, no cancellation) |
/// |---|---|---|
/// | `relu` | max(x, 0), NaN stays NaN | — |
/// | `sigmoid` | 1 / (1 + e^-x) | — |
/// | `silu` (swish-1) | x * sigmoid(x) | x / (1 + e^-x) |
/// | `gelu`, `none` | 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel 2016) | 0.5 x erfc(-x / sqrt 2) |
/// | `gelu`, `tanh` | 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) | x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3)))
/// | | `exp` | e^x | — | | `rsqrt` | 1 / sqrt(x) | — |
///
/// The rewritten forms use 1 + erf(z) = erfc(-z) and 1 + tanh(y) = 2 / (1 + e^-2y): the textbook
/// forms cancel catastrophically for negative x (1 + erf(-4) = 1.5e-8 is below float's resolution of
/// 1), the rewritten ones keep full relative accuracy there.
/// Infinities follow the formulas: gelu and silu of -Inf are NaN (-Inf * 0), of +Inf are +Inf.
///
/// Derivatives (`*_derivative`, for backward passes; docs/training.md, "Gradient formulas": the formulas of PyTorch's
/// CPU `GeluBackwardKernelImpl` / `silu_backward` / `threshold_backward`), in opmath, rounded once:
///
/// | function | derivative | evaluated as |
/// |---|---|---|
/// | `relu` | 1 if x > 0, else 0 (0 at x = 0, as PyTorch and JAX); NaN stays NaN | — |
/// | `sigmoid` | sigmoid(x) (1 - sigmoid(x)) | q, z = x |
/// | `silu` | sigmoid(x) (1 + x (1 - sigmoid(x))) | s + x q, z = x |
/// | `gelu`, `none` | Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi) | 0.5 erfc(-x / sqrt 2) + x phi(x) |
/// | `gelu`, `tanh` | (1 + t)/2 + x (1 - t^2) k (1 + 3 a x^2) / 2, t = tanh(y) | s + 2 k x (1 + 3 a x^2) q, z = 2y |
///
/// with e = e^-|z|, q = e / (1 + e)^2 = sigmoid(z) sigmoid(-z), s = sigmoid(z) = 1 / (1 + e) for
/// z >= 0 and e / (1 + e) below (for z = 2y, s = (1 + t)/2), y = k (x + a x^3), k = sqrt(2/pi),
/// a = 0.044715. The rewritten forms never subtract nearly equal numbers: 1 - sigmoid(z) and
/// 1 - t^2 = 4 sigmoid(2y) sigmoid(-2y) come from e directly instead of from 1 - (a number close to
/// 1). What cancellation remains is the function's own: gelu' and silu' cross zero (at x = -0.7518
/// and -1.2785), where the error is relative to the magnitude of the two terms, not to the result.
/// At +-Inf the derivatives are their limits (1 at +Inf, 0 at -Inf; relu' and sigmoid' follow their
/// formulas: 1 and 0, 0 and 0), not the NaN of Inf * 0.
/// Range forms (`silu(in, out)` etc.): `sigmoid`, `silu` and both forms of `gelu`, and their
/// derivatives, are vectorised for float opmath, chosen at run time (kernels/detail/activation_rows.hpp:
/// 16 lanes from the avx512 level, 8 at avx2; the same bits on both). The logistic ones evaluate the same
/// formulas with a vectorised exp within 2 ulps (kernels/detail/exp.hpp) where glibc's `expf` is
/// within 1; the erf form evaluates erfc by its own approximation (kernels/detail/erfc_fit.hpp) and
/// e^(-x^2/2) with x^2 split exactly, within 15 units of 2^-24 at every x (derived; 4.9 measured;
/// the scalar form's error grows as x^2 in the negative tail). The error bounds the tests hold the
/// scalar forms to hold for them too, but a result can differ from the scalar function's by a few
/// ulps of opmath (and then, rarely, by one in the output type). The portable level and double
/// opmath evaluate the scalar formulas element by element.
/// Light: no Eigen, no xtensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/formats/convert.hpp"
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/detail/activation_rows.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels {

/// Which GELU formula (PyTorch's `approximate='none' | 'tanh'`). Note that Flax's and JAX's
/// `nn.gelu` default to the tanh form (`approximate=True`), PyTorch's to the erf form.
enum class gelu_approximation : std::uint8_t {
  none,  ///< exact: 0.5 x (1 + erf(x / sqrt 2))
  tanh,  ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2, T5 v1.1 "gelu_new")
};

/// Real element types the activations accept: float, double and every small float.
template <class T>
concept activation_scalar = std::same_as<T, float> || std::same_as<T, double> || small_float<T>;

/// The type an activation of `T` is evaluated in: float for float and the small floats, double for double.
template <activation_scalar T>
using opmath_t = accumulator_t<T>;

namespace detail {

// The formulas, on opmath values (float or double).

template <std::floating_point A>
[[nodiscard]] inline A relu_op(A x) noexcept {
  return (x > A{0} || std::isnan(x)) ? x : A{0};
}
template <std::floating_point A>
[[nodiscard]] inline A sigmoid_op(A x) noexcept {
  return A{1} / (A{1} + std::exp(-x));
}
template <std::floating_point A>
[[nodiscard]] inline A silu_op(A x) noexcept {
  return x / (A{1} + std::exp(-x));
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_erf_op(A x) noexcept {
  // gelu_erf_scale = 1 / sqrt(2) (activation_kind.hpp), rounded once from double.
  constexpr A inv_sqrt2 = static_cast<A>(gelu_erf_scale);
  return A{0.5} * x * std::erfc(-x * inv_sqrt2);
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_tanh_op(A x) noexcept {
  // gelu_tanh_scale and gelu_tanh_cubic (activation_kind.hpp) rounded once from double.
  constexpr A sqrt_2_over_pi = static_cast<A>(gelu_tanh_scale);
  constexpr A cubic = static_cast<A>(gelu_tanh_cubic);
  const A y = sqrt_2_over_pi * (x + cubic * x * x * x);
  return x / (A{1} + std::exp(A{-2} * y));
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_op(A x, gelu_approximation approximation) noexcept {
  return approximation == gelu_approximation::tanh ? gelu_tanh_op(x) : gelu_erf_op(x);
}

// The derivatives (see the file comment for the formulas and why they are written this way).

template <std::floating_point A>
[[nodiscard]] inline A relu_derivative_op(A x) noexcept {
  return std::isnan(x) ? x : (x > A{0} ? A{1} : A{0});
}
/// sigmoid(z) sigmoid(-z) = e / (1 + e)^2 with e = e^-|z| (even in z, no 1 - sigmoid cancellation).
template <std::floating_point A>
[[nodiscard]] inline A sigmoid_product_op(A e) noexcept {
  const A d = A{1} + e;
  return e / (d * d);
}
template <std::floating_point A>
[[nodiscard]] inline A sigmoid_derivative_op(A x) noexcept {
  return sigmoid_product_op(std::exp(-std::abs(x)));
}
template <std::floating_point A>
[[nodiscard]] inline A silu_derivative_op(A x) noexcept {
  const A e = std::exp(-std::abs(x));
  const A s = x >= A{0} ? A{1} / (A{1} + e) : e / (A{1} + e);  // sigmoid(x), NaN for NaN
  if (e == A{0}) return s;                                     // |x| huge or Inf: x q is 0 (not Inf * 0)
  return s + x * sigmoid_product_op(e);
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_erf_derivative_op(A x) noexcept {
  constexpr A inv_sqrt2 = static_cast<A>(gelu_erf_scale);
  constexpr A inv_sqrt_2pi = static_cast<A>(normal_density_scale);  // 1 / sqrt(2 pi)
  const A cdf = A{0.5} * std::erfc(-x * inv_sqrt2);
  const A pdf = std::exp(A{-0.5} * x * x) * inv_sqrt_2pi;
  if (pdf == A{0}) return cdf;  // |x| huge or Inf: x phi(x) is 0 (not Inf * 0)
  return cdf + x * pdf;
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_tanh_derivative_op(A x) noexcept {
  constexpr A sqrt_2_over_pi = static_cast<A>(gelu_tanh_scale);
  constexpr A cubic = static_cast<A>(gelu_tanh_cubic);
  constexpr A two_k = static_cast<A>(2.0 * gelu_tanh_scale);
  constexpr A three_a = static_cast<A>(3.0 * gelu_tanh_cubic);
  const A y = sqrt_2_over_pi * (x + cubic * x * x * x);
  const A e = std::exp(A{-2} * std::abs(y));
  const A s = y >= A{0} ? A{1} / (A{1} + e) : e / (A{1} + e);  // (1 + tanh y) / 2 = sigmoid(2y)
  if (e == A{0}) return s;                                     // |x| huge or Inf: the second term is 0
  // (1 - t^2) / 2 = 2 sigmoid(2y) sigmoid(-2y) = 2 q; x q first: it is small where x^2 is large.
  return s + (x * sigmoid_product_op(e)) * (two_k * (A{1} + three_a * x * x));
}
template <std::floating_point A>
[[nodiscard]] inline A gelu_derivative_op(A x, gelu_approximation approximation) noexcept {
  return approximation == gelu_approximation::tanh ? gelu_tanh_derivative_op(x) : gelu_erf_derivative_op(x);
}

template <std::floating_point A>
[[nodiscard]] inline A exp_op(A x) noexcept {
  return std::exp(x);
}
template <std::floating_point A>
[[nodiscard]] inline A rsqrt_op(A x) noexcept {
  return A{1} / std::sqrt(x);
}

template <class R>
using range_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
concept activation_input =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && activation_scalar<range_element_t<R>>;
template <class R>
concept activation_output =
    std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && activation_scalar<range_element_t<R>> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// The scalar formula of `kind` on a float32 opmath value (the same functions as `silu`, `gelu`, ...).
[[nodiscard]] inline float scalar_activation(activation_kind kind, float x) noexcept {
  switch (kind) {
    case activation_kind::sigmoid: return sigmoid_op(x);
    case activation_kind::silu: return silu_op(x);
    case activation_kind::gelu_tanh: return gelu_tanh_op(x);
    case activation_kind::gelu_erf: return gelu_erf_op(x);
    case activation_kind::sigmoid_derivative: return sigmoid_derivative_op(x);
    case activation_kind::silu_derivative: return silu_derivative_op(x);
    case activation_kind::gelu_tanh_derivative: return gelu_tanh_derivative_op(x);
    case activation_kind::gelu_erf_derivative: return gelu_erf_derivative_op(x);
  }
  return x;
}

}  // namespace detail

/// The float32 activation rows of this CPU, chosen once at construction (as a oneDNN primitive: the
/// implementation picked once, then run): the 16-lane kernel from the avx512 level up, the 8-lane one
/// at avx2 (the same bits, kernels/detail/activation_rows.hpp), the scalar formulas at the portable
/// level. It reads `mixprec::active_isa()` once, so construct one per operation: every call of that
/// operation then runs on one level.
class activation_rows_kernel {
 public:
  activation_rows_kernel() noexcept : level_(active_isa()) {}

  /// Whether the rows run vectorised (avx2 and above). The vectorised kernels evaluate the formulas of
  /// the file comment within the stated bounds, not always to the bits of the scalar functions, so a
  /// caller that promises the scalar functions' bits at the portable level branches on this.
  [[nodiscard]] bool vectorised() const noexcept { return detail::activation_simd(level_); }

  /// y[i] = f(x[i]), or f(x[i]) · gate[i] when `gate` is not null, for i < n, in float32, f the
  /// activation or derivative `kind`; y may be x or gate (element by element, in place). Vectorised
  /// when `vectorised()`, else the scalar formulas.
  void operator()(activation_kind kind, const float* x, const float* gate, float* y, std::size_t n) const noexcept {
    if (vectorised()) {
      detail::activation_rows(level_, kind, x, gate, y, n);
    } else if (gate != nullptr) {
      for (std::size_t i = 0; i < n; ++i) y[i] = detail::scalar_activation(kind, x[i]) * gate[i];
    } else {
      for (std::size_t i = 0; i < n; ++i) y[i] = detail::scalar_activation(kind, x[i]);
    }
  }

 private:
  isa level_;
};

namespace detail {

/// \throws std::invalid_argument naming the function `name` unless the output has the input's size.
inline void check_same_size(const char* name, std::size_t in, std::size_t out) {
  if (out != in) {
    throw std::invalid_argument(internal::concat("kernels::", name, ": the output has ", out,
                                                 " elements but the input has ", in,
                                                 "; pass an output of the same size."));
  }
}

/// out[i] = round_to<Out>(op(widen(in[i]))), after checking the sizes.
template <class In, class Out, class Op>
void transform(const char* name, const In& in, Out&& out, Op op) {
  using I = range_element_t<In>;
  using O = range_element_t<Out>;
  const auto n = std::ranges::size(in);
  check_same_size(name, n, std::ranges::size(out));
  const I* src = std::ranges::data(in);
  O* dst = std::ranges::data(out);
  for (std::size_t i = 0; i < n; ++i) dst[i] = internal::round_out<O>(op(internal::widen(src[i])));
}

/// `transform` for an activation with a vectorised kernel (detail/activation_rows.hpp): when the
/// input's opmath is float, blocks of 1024 values are widened to float (`mixprec::convert`, exact), run
/// through the kernel (or `op` at the portable level) and rounded once to the output type in bulk.
template <class In, class Out, class Op>
void transform_activation(const char* name, const In& in, Out&& out, activation_kind kind, Op op) {
  using I = range_element_t<In>;
  using O = range_element_t<Out>;
  if constexpr (std::same_as<opmath_t<I>, float>) {
    const auto n = std::ranges::size(in);
    check_same_size(name, n, std::ranges::size(out));
    const I* src = std::ranges::data(in);
    O* dst = std::ranges::data(out);
    constexpr std::size_t block = 1024;  // 2 x 4 KiB on the stack; fewer calls of the bulk conversions
    float wide[block];
    float values[block];
    const activation_rows_kernel rows;  // one level for the whole call
    for (std::size_t i0 = 0; i0 < n; i0 += block) {
      const std::size_t m = std::min(block, n - i0);
      const float* x = wide;
      if constexpr (std::same_as<I, float>) {
        x = src + i0;
      } else {
        mixprec::convert(std::span<const I>(src + i0, m), std::span<float>(wide, m));
      }
      float* y = values;
      if constexpr (std::same_as<O, float>) y = dst + i0;
      if (rows.vectorised()) {
        rows(kind, x, nullptr, y, m);
      } else {
        for (std::size_t i = 0; i < m; ++i) y[i] = op(x[i]);
      }
      if constexpr (!std::same_as<O, float>) internal::round_n<O>(values, m, dst + i0);
    }
  } else {
    transform(name, in, out, op);
  }
}

}  // namespace detail

/// max(x, 0); NaN stays NaN (as jax.nn.relu and torch.relu). Exact in every type.
template <activation_scalar T>
[[nodiscard]] inline T relu(T x) noexcept {
  return internal::round_out<T>(detail::relu_op(internal::widen(x)));
}

/// The logistic function 1 / (1 + e^-x), evaluated in `opmath_t<T>` and rounded once to `T`.
template <activation_scalar T>
[[nodiscard]] inline T sigmoid(T x) noexcept {
  return internal::round_out<T>(detail::sigmoid_op(internal::widen(x)));
}

/// SiLU / swish-1, x * sigmoid(x) (the llama feed-forward gate), in `opmath_t<T>`, rounded once to `T`.
template <activation_scalar T>
[[nodiscard]] inline T silu(T x) noexcept {
  return internal::round_out<T>(detail::silu_op(internal::widen(x)));
}

/// GELU in its erf form (default) or tanh form, in `opmath_t<T>`, rounded once to `T`.
///
/// **Example**:
///
///     kernels::gelu(float16(100.0f), gelu_approximation::tanh);  // 100: the cube 1e6 is formed in float
///     kernels::gelu(1.0);                                        // 0.8413447460685429 (x * Phi(x))
template <activation_scalar T>
[[nodiscard]] inline T gelu(T x, gelu_approximation approximation = gelu_approximation::none) noexcept {
  return internal::round_out<T>(detail::gelu_op(internal::widen(x), approximation));
}

/// The derivative of `relu`: 1 for x > 0, 0 for x <= 0 (0 at the kink, as PyTorch's
/// `threshold_backward` and JAX's `relu`); NaN stays NaN, so that a NaN pre-activation shows in the
/// gradient. Exact in every type.
template <activation_scalar T>
[[nodiscard]] inline T relu_derivative(T x) noexcept {
  return internal::round_out<T>(detail::relu_derivative_op(internal::widen(x)));
}

/// The derivative of `sigmoid`, sigmoid(x) (1 - sigmoid(x)), evaluated as e / (1 + e)^2 with
/// e = e^-|x| in `opmath_t<T>` (full relative accuracy in both tails) and rounded once to `T`.
template <activation_scalar T>
[[nodiscard]] inline T sigmoid_derivative(T x) noexcept {
  return internal::round_out<T>(detail::sigmoid_derivative_op(internal::widen(x)));
}

/// The derivative of `silu`, sigmoid(x) (1 + x (1 - sigmoid(x))) (docs/training.md, "Gradient formulas";
/// PyTorch's `silu_backward`), in `opmath_t<T>`, rounded once to `T`. 0.5 at 0; 1 at +Inf, 0 at -Inf.
template <activation_scalar T>
[[nodiscard]] inline T silu_derivative(T x) noexcept {
  return internal::round_out<T>(detail::silu_derivative_op(internal::widen(x)));
}

/// The derivative of `gelu` in the same form: Phi(x) + x phi(x) for the erf form, and
/// (1 + t)/2 + x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2) / 2 with t = tanh(sqrt(2/pi) (x + 0.044715
/// x^3)) for the tanh form (docs/training.md, "Gradient formulas"; PyTorch's `GeluBackwardKernelImpl`), in
/// `opmath_t<T>` without cancellation (see the file comment), rounded once to `T`. 0.5 at 0; 1 at +Inf, 0 at -Inf.
///
/// **Example**:
///
///     kernels::gelu_derivative(1.0);                                // 1.0833154705876864 (Phi(1) + phi(1))
///     kernels::gelu_derivative(bfloat16(0.0f), gelu_approximation::tanh);  // 0.5
template <activation_scalar T>
[[nodiscard]] inline T gelu_derivative(T x, gelu_approximation approximation = gelu_approximation::none) noexcept {
  return internal::round_out<T>(detail::gelu_derivative_op(internal::widen(x), approximation));
}

/// e^x in `opmath_t<T>`, rounded once to `T` (overflow gives the overflow value of `T`: Inf or NaN).
template <activation_scalar T>
[[nodiscard]] inline T exp(T x) noexcept {
  return internal::round_out<T>(detail::exp_op(internal::widen(x)));
}

/// 1 / sqrt(x) in `opmath_t<T>`, rounded once to `T`. rsqrt(0) = +Inf, rsqrt(x < 0) = NaN.
template <activation_scalar T>
[[nodiscard]] inline T rsqrt(T x) noexcept {
  return internal::round_out<T>(detail::rsqrt_op(internal::widen(x)));
}

/// Element-wise `relu` of a contiguous range into another of the same size (any activation_scalar
/// element types: each result is computed in the input's opmath and rounded once to the output's type).
/// \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void relu(const In& in, Out&& out) {
  detail::transform("relu", in, out, [](auto v) { return detail::relu_op(v); });
}
/// Element-wise `sigmoid` (see `relu` for the range rules; vectorised for float opmath, see the file
/// comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void sigmoid(const In& in, Out&& out) {
  detail::transform_activation("sigmoid", in, out, activation_kind::sigmoid,
                               [](auto v) { return detail::sigmoid_op(v); });
}
/// Element-wise `silu` (see `relu` for the range rules; vectorised for float opmath, see the file
/// comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void silu(const In& in, Out&& out) {
  detail::transform_activation("silu", in, out, activation_kind::silu, [](auto v) { return detail::silu_op(v); });
}
/// Element-wise `gelu` (see `relu` for the range rules; vectorised for float opmath, see the file
/// comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void gelu(const In& in, Out&& out, gelu_approximation approximation = gelu_approximation::none) {
  if (approximation == gelu_approximation::tanh) {
    detail::transform_activation("gelu", in, out, activation_kind::gelu_tanh,
                                 [](auto v) { return detail::gelu_tanh_op(v); });
  } else {
    detail::transform_activation("gelu", in, out, activation_kind::gelu_erf,
                                 [](auto v) { return detail::gelu_erf_op(v); });
  }
}
/// Element-wise `relu_derivative` (see `relu` for the range rules). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void relu_derivative(const In& in, Out&& out) {
  detail::transform("relu_derivative", in, out, [](auto v) { return detail::relu_derivative_op(v); });
}
/// Element-wise `sigmoid_derivative` (see `relu` for the range rules; vectorised for float opmath, see the
/// file comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void sigmoid_derivative(const In& in, Out&& out) {
  detail::transform_activation("sigmoid_derivative", in, out, activation_kind::sigmoid_derivative,
                               [](auto v) { return detail::sigmoid_derivative_op(v); });
}
/// Element-wise `silu_derivative` (see `relu` for the range rules; vectorised for float opmath, see the file
/// comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void silu_derivative(const In& in, Out&& out) {
  detail::transform_activation("silu_derivative", in, out, activation_kind::silu_derivative,
                               [](auto v) { return detail::silu_derivative_op(v); });
}
/// Element-wise `gelu_derivative` (see `relu` for the range rules; vectorised for float opmath, see the
/// file comment). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void gelu_derivative(const In& in, Out&& out, gelu_approximation approximation = gelu_approximation::none) {
  if (approximation == gelu_approximation::tanh) {
    detail::transform_activation("gelu_derivative", in, out, activation_kind::gelu_tanh_derivative,
                                 [](auto v) { return detail::gelu_tanh_derivative_op(v); });
  } else {
    detail::transform_activation("gelu_derivative", in, out, activation_kind::gelu_erf_derivative,
                                 [](auto v) { return detail::gelu_erf_derivative_op(v); });
  }
}
/// Element-wise `exp` (see `relu` for the range rules). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void exp(const In& in, Out&& out) {
  detail::transform("exp", in, out, [](auto v) { return detail::exp_op(v); });
}
/// Element-wise `rsqrt` (see `relu` for the range rules). \throws std::invalid_argument if the sizes differ.
template <detail::activation_input In, detail::activation_output Out>
void rsqrt(const In& in, Out&& out) {
  detail::transform("rsqrt", in, out, [](auto v) { return detail::rsqrt_op(v); });
}

}  // namespace mixprec::kernels
