/// \file
/// \brief Private: the element-wise activations that have a vectorised kernel (activation_avx2.hpp), and
/// the constants of the tanh form of GELU, shared by the scalar formulas (kernels/activations.hpp) and
/// the kernel so that both evaluate the same expression.
#pragma once

#include <cstdint>
#include <numbers>

namespace mixprec::kernels::detail {

/// An activation or derivative with a vectorised kernel (the formulas of activations.hpp): the
/// activations are `x / (1 + e^-z)` for some z, the derivatives built on e = e^-|z|.
enum class activation_kind : std::uint8_t {
  sigmoid,               ///< 1 / (1 + e^-x)
  silu,                  ///< x / (1 + e^-x)
  gelu_tanh,             ///< x / (1 + e^-2y), y = sqrt(2/pi) (x + 0.044715 x^3)
  sigmoid_derivative,    ///< e / (1 + e)^2, e = e^-|x|
  silu_derivative,       ///< s + x e / (1 + e)^2, s = sigmoid(x) from e = e^-|x|
  gelu_tanh_derivative,  ///< s + x e / (1 + e)^2 · 2 sqrt(2/pi) (1 + 3 · 0.044715 x^2), e = e^-2|y|
};

/// The derivative's kind of an activation's kind (itself for a derivative).
[[nodiscard]] constexpr activation_kind derivative_of(activation_kind kind) noexcept {
  switch (kind) {
    case activation_kind::sigmoid: return activation_kind::sigmoid_derivative;
    case activation_kind::silu: return activation_kind::silu_derivative;
    case activation_kind::gelu_tanh: return activation_kind::gelu_tanh_derivative;
    case activation_kind::sigmoid_derivative:
    case activation_kind::silu_derivative:
    case activation_kind::gelu_tanh_derivative: break;
  }
  return kind;
}

/// The cubic coefficient of the tanh approximation of GELU (Hendrycks & Gimpel 2016, section 2).
inline constexpr double gelu_tanh_cubic = 0.044715;

/// sqrt(2 / pi) = sqrt(2) · (1 / sqrt(pi)), the tanh approximation's outer factor (rounded once to
/// the opmath type where it is used).
inline constexpr double gelu_tanh_scale = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;

}  // namespace mixprec::kernels::detail
