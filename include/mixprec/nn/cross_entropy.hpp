/// \file
/// \brief `nn::softmax_cross_entropy`: the mean softmax cross-entropy of logits against target ids,
/// fused with its gradient, in float32 (float64 for double logits), and `nn::cross_entropy_loss`, the
/// loss alone (docs/training.md, "Gradient formulas"; PyTorch `F.cross_entropy` with
/// `reduction="mean"` and `ignore_index`; llm.c's fused classifier).
///
/// Per row i of logits z [rows, vocab] with target t_i:
///
///     m_i   = max_j z[i, j]
///     lse_i = m_i + log Σ_j exp(z[i, j] − m_i)          in L (float or double), the sum in L
///     ℓ_i   = lse_i − z[i, t_i]                         loss = (1/N) Σ ℓ_i over the N rows whose target is
///                                                       not `ignore_index`, summed in double
///     dz[i, j] = (exp(z[i, j] − lse_i) − 1[j = t_i]) · seed      (0 for an ignored row)
///
/// The seed σ is what the caller wants dL/dz scaled by: 1/N for the plain mean, S/N with a loss scale
/// S, S/(N·accumulation steps) with gradient accumulation. Subtracting the row maximum keeps every
/// exponent ≤ 0, so logits of ±1e4 give a finite loss and gradients.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"

namespace mixprec::nn {

/// The target id that marks a row without a target (PyTorch's default `ignore_index`).
inline constexpr std::int32_t ignore_index = -100;

namespace detail {

/// \throws std::invalid_argument unless logits hold rows × vocab values, targets one per row, and every
/// target is in [0, vocab) or `ignore_index`.
template <class L>
std::size_t check_cross_entropy(std::span<const L> logits, std::size_t vocab, std::span<const std::int32_t> targets) {
  if (vocab == 0) throw std::invalid_argument("softmax_cross_entropy: vocab is 0; pass the number of classes");
  if (logits.size() != targets.size() * vocab) {
    throw std::invalid_argument(
        internal::concat("softmax_cross_entropy: ", logits.size(), " logits do not make ", targets.size(), " rows of ",
                         vocab, " classes; pass logits [rows, vocab] row-major and one target per row"));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const std::int32_t t = targets[i];
    if (t != ignore_index && (t < 0 || static_cast<std::size_t>(t) >= vocab)) {
      throw std::invalid_argument(internal::concat("softmax_cross_entropy: target ", t, " of row ", i,
                                                   " is not a class of a vocabulary of ", vocab, " (0 to ", vocab - 1,
                                                   ") nor ignore_index (", ignore_index, ")"));
    }
  }
  return targets.size();
}

/// log Σ exp(z) of one row, by its maximum (−Inf for an all −Inf row).
template <class L>
L log_sum_exp(const L* z, std::size_t vocab) {
  const L m = *std::max_element(z, z + vocab);
  if (std::isinf(m)) return m;
  L sum = 0;
  for (std::size_t j = 0; j < vocab; ++j) sum += std::exp(z[j] - m);
  return m + std::log(sum);
}

/// The vocabulary of an array of logits: its last extent (0 for a rank-0 array, which the span form refuses).
template <class A>
[[nodiscard]] std::size_t vocab_of(const A& logits) {
  return logits.shape().size() == 0 ? 0 : static_cast<std::size_t>(logits.shape().back());
}
}  // namespace detail

/// The mean cross-entropy of `logits` [rows, vocab] (row-major, float or double) against `targets`
/// [rows] (an id in [0, vocab), or `ignore_index` to skip the row), and its gradient scaled by `seed`
/// written to `dlogits` [rows, vocab] (same type as the logits; ignored rows get zeros). Returns the
/// mean over the non-ignored rows, in double (NaN when every row is ignored, as PyTorch).
/// \throws std::invalid_argument if vocab is 0, the sizes do not match or a target is out of range (naming
///         the row).
template <std::floating_point L>
double softmax_cross_entropy(std::span<const L> logits, std::size_t vocab, std::span<const std::int32_t> targets,
                             std::span<L> dlogits, double seed) {
  const internal::profile_scope region("nn::softmax_cross_entropy");
  const std::size_t rows = detail::check_cross_entropy(logits, vocab, targets);
  if (dlogits.size() != logits.size()) {
    throw std::invalid_argument(internal::concat("softmax_cross_entropy: dlogits has ", dlogits.size(),
                                                 " elements but the logits have ", logits.size(),
                                                 "; pass a buffer of the logits' shape"));
  }
  double sum = 0;
  std::size_t n = 0;
  const L s = static_cast<L>(seed);
  for (std::size_t i = 0; i < rows; ++i) {
    const L* z = logits.data() + i * vocab;
    L* dz = dlogits.data() + i * vocab;
    if (targets[i] == ignore_index) {
      std::fill(dz, dz + vocab, L(0));
      continue;
    }
    const L lse = detail::log_sum_exp(z, vocab);
    const auto t = static_cast<std::size_t>(targets[i]);
    sum += static_cast<double>(lse - z[t]);
    ++n;
    for (std::size_t j = 0; j < vocab; ++j) dz[j] = std::exp(z[j] - lse) * s;
    dz[t] -= s;
  }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(n);
}

/// A row-major array of logits [..., vocab]: `data()`, `size()` and `shape()` (xt::xtensor, xt::xarray).
template <class A>
concept logits_array = requires(A& a) {
  { a.data() } -> std::convertible_to<const typename A::value_type*>;
  a.size();
  a.shape().back();
}
&&std::floating_point<typename A::value_type>;

/// `softmax_cross_entropy` for arrays: vocab is the logits' last axis, the rows its leading axes.
/// \throws std::invalid_argument if `dlogits` does not have the logits' shape, and as the span form.
template <logits_array Logits, logits_array DLogits>
double softmax_cross_entropy(const Logits& logits, std::span<const std::int32_t> targets, DLogits& dlogits,
                             double seed) {
  using L = typename Logits::value_type;
  static_assert(std::is_same_v<typename DLogits::value_type, L>,
                "softmax_cross_entropy: dlogits must have the logits' element type.");
  if (!std::equal(logits.shape().begin(), logits.shape().end(), dlogits.shape().begin(), dlogits.shape().end()))
    throw std::invalid_argument("softmax_cross_entropy: dlogits must have the logits' shape");
  return softmax_cross_entropy(std::span<const L>(logits.data(), logits.size()), detail::vocab_of(logits), targets,
                               std::span<L>(dlogits.data(), dlogits.size()), seed);
}

/// The mean cross-entropy only (evaluation): as `softmax_cross_entropy` without the gradient.
/// \throws std::invalid_argument if vocab is 0, the sizes do not match or a target is out of range.
template <std::floating_point L>
double cross_entropy_loss(std::span<const L> logits, std::size_t vocab, std::span<const std::int32_t> targets) {
  const std::size_t rows = detail::check_cross_entropy(logits, vocab, targets);
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    if (targets[i] == ignore_index) continue;
    const L* z = logits.data() + i * vocab;
    sum += static_cast<double>(detail::log_sum_exp(z, vocab) - z[static_cast<std::size_t>(targets[i])]);
    ++n;
  }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(n);
}

/// `cross_entropy_loss` for arrays: vocab is the logits' last axis, the rows its leading axes.
/// \throws std::invalid_argument as the span form.
template <logits_array Logits>
double cross_entropy_loss(const Logits& logits, std::span<const std::int32_t> targets) {
  using L = typename Logits::value_type;
  return cross_entropy_loss(std::span<const L>(logits.data(), logits.size()), detail::vocab_of(logits), targets);
}

}  // namespace mixprec::nn
