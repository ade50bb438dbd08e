/// \file
/// \brief `scaled_step`: the GradScaler-style step of a loss-scaled (or unscaled) training loop in one
/// call: unscale the gradients in place → `all_finite` → `ls.adjust(finite)` → skip, or clip (when
/// asked) and step. Returns whether the step ran.
///
/// Sources: PyTorch's `torch.amp.GradScaler` (`unscale_(optimizer)` records whether an Inf/NaN was
/// found, `step(optimizer)` skips `optimizer.step()` then, `update()` shrinks the scale after a skip and
/// grows it after `growth_interval` finite steps) and jmp's `DynamicLossScale` (README loop:
/// `grads = loss_scale.unscale(grads); grads_finite = jmp.all_finite(grads); loss_scale =
/// loss_scale.adjust(grads_finite); params = jmp.select_tree(grads_finite, new_params, params)`).
/// Clipping comes after unscaling, as PyTorch's AMP recipe prescribes (clipping scaled gradients makes
/// the threshold S times too small).
///
/// The loss scale is any `loss_scale_like`: `dynamic_loss_scale` (the scale halves after a skipped step,
/// by its options), `static_loss_scale` (fixed; a non-finite step is still skipped) and
/// `no_op_loss_scale` (float32 and bfloat16 runs: nothing to unscale, and a step whose gradients hold an
/// Inf or NaN is skipped rather than written into the parameters).
///
///     mixprec::dynamic_loss_scale ls;
///     mixprec::train::adamw opt;
///     auto grads = model.zero_gradients();
///     // ... forward on ls.scale(loss), backward accumulating into grads ...
///     bool stepped = mixprec::train::scaled_step(ls, opt, lr, model, grads, {.max_norm = 1.0});
///     grads.zero();
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "mixprec/arch/profile.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/train/clip.hpp"

namespace mixprec::train {

/// Options of `scaled_step`.
struct scaled_step_options {
  /// Clip the unscaled gradients to this global 2-norm before the step (`clip_grad_norm`, PyTorch's
  /// rule); no clipping when empty.
  std::optional<double> max_norm = std::nullopt;
  /// The prefix of the parameter names given to the optimiser (`optimizer::step`'s `prefix`).
  std::string_view prefix = {};
  /// The parameters the optimiser steps (`optimizer::step`'s `only`: a ZeRO-1 rank's shard); all when
  /// empty.
  std::function<bool(std::string_view)> only = {};
};

/// The generic form: `ls.unscale_in_place(grads)`; `finite = all_finite(grads)`; `ls.adjust(finite)`;
/// when finite, `clip_grad_norm(*max_norm, grads)` if `max_norm` is set, then `step()`. Returns
/// `finite` (whether `step` ran). `grads` is any mixprec tree (a layer's `gradients`, a tuple of
/// several layers' gradients, a `std::vector<std::span<float>>`); `step` is any callable, e.g. one
/// that calls `begin_step` and `update` itself. On a skip, `step` is not called, so parameters and
/// optimiser state (moments, master weights, t) stay as they were; the gradients are left unscaled.
template <loss_scale_like L, class Grads, class Step>
bool scaled_step(L& ls, Grads& grads, Step&& step, std::optional<double> max_norm = std::nullopt) {
  {
    const internal::profile_scope region("train::scaled_step.unscale");
    ls.unscale_in_place(grads);
  }
  bool finite = false;
  {
    const internal::profile_scope region("train::scaled_step.all_finite");
    finite = all_finite(grads);
  }
  ls.adjust(finite);
  if (!finite) return false;
  if (max_norm) {
    const internal::profile_scope region("train::clip_grad_norm");
    clip_grad_norm(*max_norm, grads);
  }
  const internal::profile_scope region("train::optimizer.step");
  std::forward<Step>(step)();
  return true;
}

/// The optimiser form: as the generic form with `opt.step(lr, model, grads, options.prefix,
/// options.only)` as the step (`begin_step(lr)` and one `update` per parameter of `model`, nanoGPT's
/// decay rule; only the parameters `only` accepts when it is set). `opt` is an `adamw`, an `sgd`, a
/// `distributed::sharded_optimizer`, or any optimiser whose `step(lr, model, grads, prefix)` takes no
/// filter (then `options.only` must be empty); `model` a layer or model with `for_each_parameter`,
/// `grads` its gradients.
/// \throws std::invalid_argument when the parameter and gradient walks disagree (after `adjust`,
///         before any parameter changes), or `options.only` is set for an optimiser without the filter;
///         and what `optimizer::update` throws.
template <loss_scale_like L, class Optimizer, class Model, class Grads>
bool scaled_step(L& ls, Optimizer& opt, double lr, Model& model, Grads& grads,
                 const scaled_step_options& options = {}) {
  return scaled_step(
      ls, grads,
      [&] {
        if constexpr (requires { opt.step(lr, model, std::as_const(grads), options.prefix, options.only); }) {
          opt.step(lr, model, std::as_const(grads), options.prefix, options.only);
        } else {
          if (options.only) {
            throw std::invalid_argument(
                "train::scaled_step: options.only is set, but this optimiser's step takes no parameter filter");
          }
          opt.step(lr, model, std::as_const(grads), options.prefix);
        }
      },
      options.max_norm);
}

}  // namespace mixprec::train
