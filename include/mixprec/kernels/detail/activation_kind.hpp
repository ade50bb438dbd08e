/// \file
/// \brief Private: the element-wise activations that have a vectorised kernel (activation_avx2.hpp), and
/// the constants of the tanh form of GELU, shared by the scalar formulas (kernels/activations.hpp) and
/// the kernel so that both evaluate the same expression.
#pragma once

#include <cstdint>
#include <numbers>

namespace mixprec::kernels::detail {

/// An activation with a vectorised kernel; each is `x / (1 + e^-z)` for some z (see activations.hpp).
enum class activation_kind : std::uint8_t {
  sigmoid,    ///< 1 / (1 + e^-x)
  silu,       ///< x / (1 + e^-x)
  gelu_tanh,  ///< x / (1 + e^-2y), y = sqrt(2/pi) (x + 0.044715 x^3)
};

/// The cubic coefficient of the tanh approximation of GELU (Hendrycks & Gimpel 2016, section 2).
inline constexpr double gelu_tanh_cubic = 0.044715;

/// sqrt(2 / pi) = sqrt(2) · (1 / sqrt(pi)), the tanh approximation's outer factor (rounded once to
/// the opmath type where it is used).
inline constexpr double gelu_tanh_scale = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;

}  // namespace mixprec::kernels::detail
