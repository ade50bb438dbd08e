/// \file
/// \brief The learning-rate schedule of nanoGPT (`train.py`, `get_lr(it)`): linear warm-up, cosine
/// decay, then a floor.
///
///     lr(it) = learning_rate * (it + 1) / (warmup_iters + 1)                  if it < warmup_iters
///     lr(it) = min_lr                                                        if it > lr_decay_iters
///     lr(it) = min_lr + 0.5 * (1 + cos(pi * r)) * (learning_rate - min_lr)   otherwise,
///              r = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
///
/// nanoGPT sets this value on every parameter group before each step (`begin_step(lr(it))` here). Its
/// shakespeare_char recipe: learning_rate 1e-3, min_lr 1e-4, warmup 100, lr_decay_iters 2000.
/// All in double. `warmup_iters == lr_decay_iters` is allowed when no iteration reaches the cosine
/// branch with a zero denominator: it == warmup_iters then gives learning_rate (r is taken as 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>

namespace mixprec::train {

/// nanoGPT's cosine schedule with linear warm-up (see the file comment).
struct cosine_schedule {
  double learning_rate = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_iters = 100;
  std::int64_t lr_decay_iters = 2000;

  /// The learning rate of iteration `it` (0-based). Throws std::invalid_argument when
  /// `lr_decay_iters < warmup_iters` or an iteration count is negative.
  [[nodiscard]] double operator()(std::int64_t it) const {
    if (warmup_iters < 0 || lr_decay_iters < warmup_iters || it < 0)
      throw std::invalid_argument("cosine_schedule: need 0 <= warmup_iters <= lr_decay_iters and it >= 0");
    if (it < warmup_iters) return learning_rate * static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
    if (it > lr_decay_iters) return min_lr;
    const double span = static_cast<double>(lr_decay_iters - warmup_iters);
    const double ratio = span == 0.0 ? 0.0 : static_cast<double>(it - warmup_iters) / span;
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
    return min_lr + coeff * (learning_rate - min_lr);
  }
};

}  // namespace mixprec::train
