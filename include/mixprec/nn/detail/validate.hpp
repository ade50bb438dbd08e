/// \file
/// \brief Private: checks of the scalar options of the norm layers, with messages naming the layer, the
/// parameter and the value.
#pragma once

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <system_error>

#include "mixprec/kernels/detail/message.hpp"

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
    throw std::invalid_argument(kernels::detail::concat(
        layer, ": epsilon is ", number_string(epsilon),
        " but must be finite and >= 0 (it is added to the variance or mean square before the square root; "
        "typical values are 1e-6 and 1e-5)"));
  }
}

/// \throws std::invalid_argument unless `scale` is finite and > 0.
inline void check_residual_scale(const char* layer, double scale) {
  if (!(std::isfinite(scale) && scale > 0.0)) {
    throw std::invalid_argument(kernels::detail::concat(
        layer, ": residual_scale is ", number_string(scale),
        " but must be finite and > 0 (it multiplies the residual stream; use a power of two such as 0.5 so "
        "that the scaling is exact, or leave it unset for no scaling)"));
  }
}

}  // namespace mixprec::nn::detail
