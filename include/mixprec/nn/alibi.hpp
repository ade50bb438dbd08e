/// \file
/// \brief ALiBi (Press, Smith and Lewis 2022, "Train Short, Test Long: Attention with Linear Biases"):
/// `nn::alibi_slopes`, the per-head slopes of the paper's reference code, and `nn::alibi_bias`, the
/// linear score bias −slope · distance as the relative rows `kernels::attention` computes per tile
/// (O(S) per head, never [S, S]).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/kernels/score_bias.hpp"

namespace mixprec::nn {

/// The ALiBi slope of each of `n_heads` heads (Press et al. 2022, section 3 and the reference code's
/// `get_slopes`): for n a power of two, the geometric sequence 2^(−8/n), 2^(−16/n), ..., 2^(−8) (ratio
/// and first term 2^(−8/n)); otherwise, with m the largest power of two below n, the m slopes of m heads
/// followed by every other slope of 2m heads (the 1st, 3rd, 5th, ...), n − m of them.
/// \throws std::invalid_argument when `n_heads` is 0.
[[nodiscard]] inline std::vector<double> alibi_slopes(std::size_t n_heads) {
  if (n_heads == 0) throw std::invalid_argument("nn::alibi_slopes: n_heads is 0; ALiBi needs at least one head.");
  const auto power_of_two = [](std::size_t n, std::vector<double>& out, std::size_t step, std::size_t count) {
    // slope_i = 2^(−8 (i + 1) / n): exp2 of an exact quotient (the reference multiplies start · ratio^i).
    for (std::size_t i = 0; i < n && count > 0; i += step, --count) {
      out.push_back(std::exp2(-8.0 * static_cast<double>(i + 1) / static_cast<double>(n)));
    }
  };
  std::size_t m = 1;
  while (m * 2 <= n_heads) m *= 2;
  std::vector<double> slopes;
  slopes.reserve(n_heads);
  power_of_two(m, slopes, 1, m);
  if (m < n_heads) power_of_two(2 * m, slopes, 2, n_heads - m);
  return slopes;
}

/// ALiBi's score bias as relative rows for `kernels::attention`: row h, entry d + keys − 1, is
/// −slopes[h] · |d| for the key at distance d = key position − query position, in opmath A, [heads,
/// 2 keys − 1] (`kernels::score_bias::relative`). Under a causal mask only d <= 0 is read, where this is
/// the paper's −slope · (i − j); a bidirectional encoder takes the symmetric −slope · |i − j| (as
/// Hugging Face's and xFormers' bidirectional ALiBi). Memory: 2 · keys · heads values, O(S).
/// \throws std::invalid_argument when `slopes` is empty or `keys` is 0.
template <class A>
[[nodiscard]] std::vector<A> alibi_bias(std::span<const double> slopes, std::size_t keys) {
  if (slopes.empty() || keys == 0) {
    throw std::invalid_argument(internal::concat("nn::alibi_bias: ", slopes.size(), " slopes and ", keys,
                                                 " keys; pass nn::alibi_slopes(n_heads) and the positions the "
                                                 "keys span (at least 1)"));
  }
  const std::size_t width = 2 * keys - 1;
  std::vector<A> rows(slopes.size() * width);
  for (std::size_t h = 0; h < slopes.size(); ++h) {
    for (std::size_t i = 0; i < width; ++i) {
      const double distance = std::abs(static_cast<double>(i) - static_cast<double>(keys - 1));
      rows[h * width + i] = static_cast<A>(-slopes[h] * distance);
    }
  }
  return rows;
}

}  // namespace mixprec::nn
