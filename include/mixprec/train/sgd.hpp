/// \file
/// \brief `mixprec::train::sgd`: SGD with momentum, dampening, Nesterov and weight decay as PyTorch
/// computes it (`torch/optim/sgd.py`, single-tensor path), with a per-parameter weight-decay switch,
/// float32 state and float32 master weights for 16-bit parameters (`optimizer.hpp` describes the
/// shared parts: state by name, step counter, 16-bit write-back, checkpoint names).
///
/// **The update** (docs/training.md, "Optimisers"), per element, in S = float (double for double parameters), scalars
/// rounded from double to S:
///
///     g = g + weight_decay * theta                  (if decay: grad.add(param, alpha=weight_decay))
///     if momentum != 0:
///       b = g                    on this parameter's first update (torch.clone(grad))
///       b = momentum * b + (1 - dampening) * g  afterwards (buf.mul_(momentum).add_(grad, alpha=1-dampening))
///       g = g + momentum * b     if nesterov, else g = b
///     theta = theta - lr * g                        (param.add_(grad, alpha=-lr))
///
/// Defaults are PyTorch's (momentum 0, dampening 0, weight_decay 0, nesterov false). Not implemented:
/// maximize. **Errors**: std::invalid_argument for momentum < 0, weight_decay < 0, or nesterov without
/// momentum > 0 and dampening == 0 (PyTorch's checks), a gradient whose size differs from the parameter's,
/// a parameter whose type or size changes; std::logic_error for `update` before `begin_step`.
///
/// **Checkpoint**: `save_state` writes `sgd.momentum_buffer.<name>` (once the buffer exists),
/// `master.<name>`, `kahan.<name>`, `step` and metadata `sgd.*`; `load_state` reads them back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/train/optimizer.hpp"
#include "mixprec/train/safetensors.hpp"

namespace mixprec::train {

/// SGD options (PyTorch's defaults), plus the 16-bit parameter options.
struct sgd_options {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  precision_options precision{};
};

/// SGD (see the file comment).
class sgd : public optimizer<sgd> {
  friend class optimizer<sgd>;

 public:
  /// \throws std::invalid_argument when momentum or weight_decay is negative or NaN, Nesterov momentum
  ///         is asked for without a momentum or with dampening, or `precision` asks for Kahan compensation
  ///         together with master weights.
  explicit sgd(sgd_options options = {})
      : optimizer("sgd", options.precision, {"sgd.momentum_buffer.", ""}, 1), options_(options) {
    if (!(options_.momentum >= 0.0)) throw std::invalid_argument("sgd: momentum must be >= 0");
    if (!(options_.weight_decay >= 0.0)) throw std::invalid_argument("sgd: weight_decay must be >= 0");
    if (options_.nesterov && (options_.momentum <= 0.0 || options_.dampening != 0.0))
      throw std::invalid_argument("sgd: Nesterov momentum requires a momentum and zero dampening");
  }

  /// The options.
  [[nodiscard]] const sgd_options& options() const noexcept { return options_; }

  /// Writes the optimiser state into `ck`.
  void save_state(checkpoint& ck) const {
    save_common(ck, {{"momentum", format_option(options_.momentum)},
                     {"dampening", format_option(options_.dampening)},
                     {"weight_decay", format_option(options_.weight_decay)},
                     {"nesterov", options_.nesterov ? "true" : "false"}});
  }
  /// Replaces the optimiser state with the one in `ck` (throws safetensors_error on a missing or
  /// inconsistent tensor).
  void load_state(const checkpoint& ck) { load_common(ck); }

 private:
  sgd_options options_;

  template <class T, class G>
  void update_impl(std::string_view name, std::span<T> param, std::span<const G> grad, bool decay,
                   std::vector<std::uint64_t> shape) {
    if (grad.size() != param.size())
      fail(name, internal::concat("gradient of ", grad.size(), " elements for ", param.size()));
    parameter_state& st = state_for<T>(name, std::span<const T>(param.data(), param.size()), std::move(shape));
    using S = optimizer_math_t<T>;
    const S lr = static_cast<S>(lr_);
    const S weight_decay = static_cast<S>(options_.weight_decay);
    const S momentum = static_cast<S>(options_.momentum);
    const S keep = static_cast<S>(1.0 - options_.dampening);
    const bool apply_decay = decay && options_.weight_decay != 0.0;
    const bool use_momentum = options_.momentum != 0.0;
    const bool first = !st.has_moments;
    std::vector<S>& b = moment<S>(st, 0);
    write(st, param, [&](std::size_t i, S theta) -> S {
      S g = static_cast<S>(static_cast<optimizer_math_t<G>>(grad[i]));
      if (apply_decay) g = g + weight_decay * theta;
      if (use_momentum) {
        b[i] = first ? g : b[i] * momentum + keep * g;
        g = options_.nesterov ? g + momentum * b[i] : b[i];
      }
      return theta + -lr * g;
    });
    if (use_momentum) st.has_moments = true;
  }
};

}  // namespace mixprec::train
