/// \file
/// \brief Private: checks of the scalar options of the norm layers, with messages naming the layer, the
/// parameter and the value.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <complex>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

#include "mixprec/arch/message.hpp"

namespace mixprec::nn::detail {

/// `v` in its shortest round-trip decimal form ("-0.5", "1e-06", "nan", "-inf").
[[nodiscard]] inline std::string number_string(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::string("?");
}

/// \throws std::invalid_argument unless `epsilon` is finite and >= 0.
inline void check_epsilon(const char* layer, double epsilon) {
  if (!(std::isfinite(epsilon) && epsilon >= 0.0)) {
    throw std::invalid_argument(internal::concat(
        layer, ": epsilon is ", number_string(epsilon),
        " but must be finite and >= 0 (it is added to the variance or mean square before the square root; "
        "typical values are 1e-6 and 1e-5)"));
  }
}

/// \throws std::invalid_argument unless `scale` is finite and > 0.
inline void check_residual_scale(const char* layer, double scale) {
  if (!(std::isfinite(scale) && scale > 0.0)) {
    throw std::invalid_argument(internal::concat(
        layer, ": residual_scale is ", number_string(scale),
        " but must be finite and > 0 (it multiplies the residual stream; use a power of two such as 0.5 so "
        "that the scaling is exact, or leave it unset for no scaling)"));
  }
}

/// \throws std::invalid_argument unless a backward pass got as many rows of cotangent as its forward saved.
inline void check_backward_rows(const char* where, std::size_t got, std::size_t saved) {
  if (got != saved) {
    throw std::invalid_argument(internal::concat(where, ": the cotangent has ", got, " rows but the saved forward had ",
                                                 saved, "; pass the context filled by forward() for this very input"));
  }
}

/// \throws std::invalid_argument unless a gradient tensor has its parameter's shape.
template <class GradShape, class ParamShape>
void check_gradient_shape(const char* where, const char* name, const GradShape& got, const ParamShape& want) {
  if (!std::equal(got.begin(), got.end(), want.begin(), want.end())) {
    auto str = [](const auto& shape) {
      std::string s = "[";
      for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
      return s + "]";
    };
    throw std::invalid_argument(internal::concat(where, ": grads.", name, " has shape ", str(got),
                                                 " but the parameter has shape ", str(want),
                                                 "; make the gradients with zero_gradients()"));
  }
}

/// Backward passes are defined for real inputs only.
template <class T>
constexpr void check_real(const char*) {
  static_assert(!std::is_same_v<T, std::complex<float>> && !std::is_same_v<T, std::complex<double>>,
                "forward(x, ctx) / backward: training is defined for real inputs; complex inputs work with "
                "operator() (inference) only.");
}

}  // namespace mixprec::nn::detail
