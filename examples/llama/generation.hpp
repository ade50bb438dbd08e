/// \file
/// \brief `llama::generation`, what a generation run produced (tokens, inputs, time), and
/// `common_prefix`. Light: no layers, so the report code does not compile the model.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace llama {

/// The result of `generate`.
struct generation {
  /// The generated tokens (BOS excluded), in order.
  std::vector<int> tokens;
  /// The token fed to each forward pass: BOS, then every generated token but the last (the inputs
  /// `teacher_force` replays). `inputs.size()` is the number of forward passes.
  std::vector<int> inputs;
  /// Wall-clock time of the forward passes and sampling (std::chrono::steady_clock), in seconds.
  double seconds = 0.0;

  /// Forward passes per second (0 when nothing ran).
  [[nodiscard]] double tokens_per_second() const noexcept {
    return seconds > 0.0 ? static_cast<double>(inputs.size()) / seconds : 0.0;
  }
};

/// The number of leading tokens `a` and `b` have in common (the position of the first divergence).
[[nodiscard]] inline std::size_t common_prefix(std::span<const int> a, std::span<const int> b) noexcept {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace llama
