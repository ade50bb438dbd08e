/// \file
/// \brief One element of an AdamW step (`kernels::adamw_element`) and the step's scalars
/// (`kernels::adamw_coefficients`): the formula `kernels::adamw_update` vectorises (detail/adamw_rows-inl.hpp),
/// and what `train::adamw` calls for the parameter types it does not hold as float or double. Light:
/// no Eigen, no xtensor.
#pragma once

#include <cmath>
#include <concepts>

namespace mixprec::kernels {

/// The scalars of one AdamW step for one parameter, already rounded to the state's type S (float, or
/// double for double parameters), as PyTorch's single-tensor AdamW (`torch/optim/adamw.py`) computes
/// them in double before they meet the tensors.
template <std::floating_point S>
struct adamw_coefficients {
  S step_size = 0;              ///< lr / (1 - beta1^t)
  S bias_correction2_sqrt = 1;  ///< sqrt(1 - beta2^t)
  S decay_factor = 1;           ///< 1 - lr · weight_decay; exactly 1 for a parameter that does not decay
  S w1 = 0;                     ///< 1 - beta1: the gradient's weight in the first moment's lerp
  S beta2 = 0;                  ///< the second moment's decay
  S w2 = 0;                     ///< 1 - beta2
  S eps = 0;                    ///< added after the bias correction
};

/// One element of AdamW (PyTorch's order of operations; train/adamw.hpp's file comment): updates the
/// moments m and v from the gradient g and returns the new theta. Each operation is one IEEE operation
/// of S; lerp is ATen's (`m + w1 (g - m)` for |w1| < 0.5, else `g - (g - m)(1 - w1)`).
template <std::floating_point S>
[[nodiscard]] inline S adamw_element(S theta, S g, S& m, S& v, const adamw_coefficients<S>& c) noexcept {
  m = std::abs(c.w1) < S(0.5) ? m + c.w1 * (g - m) : g - (g - m) * (S(1) - c.w1);
  v = v * c.beta2 + c.w2 * g * g;
  const S denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
  return theta * c.decay_factor + -c.step_size * m / denom;
}

}  // namespace mixprec::kernels
