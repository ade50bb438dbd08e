/// \file
/// \brief `kernels::activation_kind`, the element-wise activations and derivatives that have a
/// vectorised kernel (`kernels::activation_rows_kernel`, kernels/activations.hpp), and the constants of
/// GELU's two forms, shared by the scalar formulas and the vectorised kernels so that both evaluate the
/// same expression.
#pragma once

#include <cstdint>
#include <numbers>

namespace mixprec::kernels {

/// An activation or derivative with a vectorised kernel (the formulas of activations.hpp): the
/// logistic ones are `x / (1 + e^-z)` for some z, their derivatives built on e = e^-|z|; erf-GELU and
/// its derivative are built on erfc(-x / sqrt 2) and e^(-x^2 / 2).
enum class activation_kind : std::uint8_t {
  sigmoid,               ///< 1 / (1 + e^-x)
  silu,                  ///< x / (1 + e^-x)
  gelu_tanh,             ///< x / (1 + e^-2y), y = sqrt(2/pi) (x + 0.044715 x^3)
  gelu_erf,              ///< 0.5 x erfc(-x / sqrt 2)
  sigmoid_derivative,    ///< e / (1 + e)^2, e = e^-|x|
  silu_derivative,       ///< s + x e / (1 + e)^2, s = sigmoid(x) from e = e^-|x|
  gelu_tanh_derivative,  ///< s + x e / (1 + e)^2 · 2 sqrt(2/pi) (1 + 3 · 0.044715 x^2), e = e^-2|y|
  gelu_erf_derivative,   ///< 0.5 erfc(-x / sqrt 2) + x e^(-x^2 / 2) / sqrt(2 pi)
};

/// The derivative's kind of an activation's kind (itself for a derivative).
[[nodiscard]] constexpr activation_kind derivative_of(activation_kind kind) noexcept {
  switch (kind) {
    case activation_kind::sigmoid: return activation_kind::sigmoid_derivative;
    case activation_kind::silu: return activation_kind::silu_derivative;
    case activation_kind::gelu_tanh: return activation_kind::gelu_tanh_derivative;
    case activation_kind::gelu_erf: return activation_kind::gelu_erf_derivative;
    case activation_kind::sigmoid_derivative:
    case activation_kind::silu_derivative:
    case activation_kind::gelu_tanh_derivative:
    case activation_kind::gelu_erf_derivative: break;
  }
  return kind;
}

namespace detail {

/// The cubic coefficient of the tanh approximation of GELU (Hendrycks & Gimpel 2016, section 2).
inline constexpr double gelu_tanh_cubic = 0.044715;

/// sqrt(2 / pi) = sqrt(2) · (1 / sqrt(pi)), the tanh approximation's outer factor (rounded once to
/// the opmath type where it is used).
inline constexpr double gelu_tanh_scale = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;

/// 1 / sqrt(2), erf-GELU's argument scale: gelu(x) = 0.5 x erfc(-x / sqrt 2) (rounded once to the
/// opmath type where it is used).
inline constexpr double gelu_erf_scale = std::numbers::sqrt2 / 2.0;

/// 1 / sqrt(2 pi) = (1 / sqrt(pi)) / sqrt(2), the normal density's factor in erf-GELU's derivative.
inline constexpr double normal_density_scale = std::numbers::inv_sqrtpi / std::numbers::sqrt2;

}  // namespace detail

}  // namespace mixprec::kernels
