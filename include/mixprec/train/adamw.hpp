/// \file
/// \brief `mixprec::train::adamw`: AdamW as PyTorch computes it (`torch/optim/adamw.py`, the
/// single-tensor path used for CPU tensors), with per-parameter weight-decay switch, float32 state,
/// float32 master weights for 16-bit parameters, and checkpoints (`optimizer.hpp` describes the shared
/// parts: state by name, step counter, 16-bit write-back, checkpoint names).
///
/// **The update** (docs/training.md, "Optimisers"; t counts `begin_step` calls, lr is the one given to `begin_step`),
/// per element, in S = float (double for double parameters), scalars computed in double and then
/// rounded to S, each operation in PyTorch's order:
///
///     theta *= 1 - lr * weight_decay                    (if decay; on the pre-update value: decoupled)
///     m = lerp(m, g, 1 - beta1)                         (exp_avg.lerp_(grad, 1 - beta1))
///     v = v * beta2 + (1 - beta2) * g * g               (exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2))
///     denom = sqrt(v) / sqrt(1 - beta2^t) + eps         (eps after bias correction)
///     theta += -(lr / (1 - beta1^t)) * m / denom        (param.addcdiv_(exp_avg, denom, value=-step_size))
///
/// with beta^t computed in double (`std::pow`). This equals `theta - lr * m_hat / (sqrt(v_hat) + eps)`
/// with m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t). lerp is ATen's: `m + w * (g - m)` for
/// |w| < 0.5, else `g - (g - m) * (1 - w)`. Defaults are PyTorch's (betas 0.9/0.999, eps 1e-8,
/// weight_decay 1e-2). `decay = false` is a parameter group with weight_decay 0 (nanoGPT decays
/// exactly the parameters of rank >= 2: `decays_by_rank`). Not implemented: amsgrad, maximize,
/// capturable/differentiable, per-parameter step counts (PyTorch counts per parameter; here one t is
/// shared, which is the same when every parameter is updated at every step).
///
/// **Errors**: std::invalid_argument for options outside PyTorch's checks (0 <= beta < 1, eps >= 0,
/// weight_decay >= 0), for a gradient whose size differs from the parameter's, and for a parameter
/// whose type or size changes between calls; std::logic_error for `update` before `begin_step`.
///
/// **Checkpoint**: `save_state` writes `adam.m.<name>`, `adam.v.<name>`, `master.<name>`,
/// `kahan.<name>`, `step` and metadata `adamw.*`; `load_state` reads them back (bit-exact).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/adamw.hpp"
#include "mixprec/train/optimizer.hpp"
#include "mixprec/train/safetensors.hpp"

namespace mixprec::train {

/// AdamW options (PyTorch's defaults), plus the 16-bit parameter options.
struct adamw_options {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  precision_options precision{};
};

/// AdamW (see the file comment).
class adamw : public optimizer<adamw> {
  friend class optimizer<adamw>;

 public:
  /// \throws std::invalid_argument when a beta is outside [0, 1) (NaN included), eps or weight_decay is
  ///         negative or NaN, or `precision` asks for Kahan compensation together with master weights.
  explicit adamw(adamw_options options = {})
      : optimizer("adamw", options.precision, {"adam.m.", "adam.v."}, 2), options_(options) {
    if (!(options_.beta1 >= 0.0 && options_.beta1 < 1.0) || !(options_.beta2 >= 0.0 && options_.beta2 < 1.0))
      throw std::invalid_argument("adamw: betas must lie in [0, 1)");
    if (!(options_.eps >= 0.0)) throw std::invalid_argument("adamw: eps must be >= 0");
    if (!(options_.weight_decay >= 0.0)) throw std::invalid_argument("adamw: weight_decay must be >= 0");
  }

  /// The options.
  [[nodiscard]] const adamw_options& options() const noexcept { return options_; }

  /// Writes the optimiser state into `ck` (names in the file comment of optimizer.hpp).
  void save_state(checkpoint& ck) const {
    save_common(ck, {{"beta1", format_option(options_.beta1)},
                     {"beta2", format_option(options_.beta2)},
                     {"eps", format_option(options_.eps)},
                     {"weight_decay", format_option(options_.weight_decay)}});
  }
  /// Replaces the optimiser state with the one in `ck` (throws safetensors_error on a missing or
  /// inconsistent tensor).
  void load_state(const checkpoint& ck) { load_common(ck); }

 private:
  adamw_options options_;

  template <class T, class G>
  void update_impl(std::string_view name, std::span<T> param, std::span<const G> grad, bool decay,
                   std::vector<std::uint64_t> shape) {
    if (grad.size() != param.size())
      fail(name, internal::concat("gradient of ", grad.size(), " elements for ", param.size()));
    parameter_state& st = state_for<T>(name, std::span<const T>(param.data(), param.size()), std::move(shape));
    using S = optimizer_math_t<T>;
    const double t = static_cast<double>(step_);
    const bool apply_decay = decay && options_.weight_decay != 0.0;
    // theta · 1 is theta exactly: a parameter that does not decay takes decay_factor 1.
    const kernels::adamw_coefficients<S> c{
        .step_size = static_cast<S>(lr_ / (1.0 - std::pow(options_.beta1, t))),
        .bias_correction2_sqrt = static_cast<S>(std::sqrt(1.0 - std::pow(options_.beta2, t))),
        .decay_factor = apply_decay ? static_cast<S>(1.0 - lr_ * options_.weight_decay) : S(1),
        .w1 = static_cast<S>(1.0 - options_.beta1),
        .beta2 = static_cast<S>(options_.beta2),
        .w2 = static_cast<S>(1.0 - options_.beta2),
        .eps = static_cast<S>(options_.eps)};
    std::vector<S>& m = moment<S>(st, 0);
    std::vector<S>& v = moment<S>(st, 1);
    if constexpr (std::same_as<G, S>) {
      // The whole tensor at once (vectorised, threaded) where theta is held as S.
      if (write_whole(st, param, [&](std::span<S> theta) { kernels::adamw_update<S>(theta, grad, m, v, c); })) return;
    }
    write(st, param, [&](std::size_t i, S theta) -> S {
      const S g = static_cast<S>(static_cast<optimizer_math_t<G>>(grad[i]));
      return kernels::adamw_element(theta, g, m[i], v[i], c);
    });
  }
};

}  // namespace mixprec::train
