/// \file
/// \brief `scale_estimate` (a tensor's worst-case `scale` and average-case `expected_scale`), the
/// `scale_rule`s that choose between them, and the propagation rules of the scale-propagation
/// proposal behind AutoScale (graphcore-research/jax-scalify, docs/scaleprop_proposal_20231110.md),
/// usable without any data: `add_scales`, `mul_scales`, `scalar_mul_scales`, `sum_scales`,
/// `matmul_scales`.
///
/// Every estimate carries both numbers, each propagated by its own rule:
///
/// | op                     | `scale` (worst case: a bound on abs(x)) | `expected_scale` (average case: the RMS)  |
/// |------------------------|-----------------------------------------|-------------------------------------------|
/// | quantise(x)            | max abs(x)                              | sqrt(mean(x^2))                           |
/// | add(A, B), sub(A, B)   | sA + sB                                 | sqrt(eA^2 + eB^2)                         |
/// | mul(A, B)              | sA * sB                                 | eA * eB                                   |
/// | c * A (scalar)         | abs(c) * sA                             | abs(c) * eA                               |
/// | sum of N elements      | N * sA                                  | sqrt(N) * eA                              |
/// | dot, matmul (inner K)  | sA * sB * K                             | eA * eB * sqrt(K)                         |
///
/// The worst-case column holds for any data (each rule bounds the result when the operands are
/// bounded); the average-case column assumes independent zero-mean operands (IID Gaussian, as unit
/// scaling does), so it predicts the RMS of the result, not a bound. Which of the two a tensor is
/// quantised by is its `scale_rule` (scaled_tensor.hpp); the hybrid rule quantises by the worst case
/// and requantises when the two drift further apart than the format can represent
/// (`needs_requantise`, scaled_format.hpp).
///
/// **Example** (the proposal's worked example, a test in tests/scaled/scale_estimate_test.cpp):
///
///     mixprec::scale_estimate a{64, 2}, b{16, 1};
///     mixprec::matmul_scales(a, b, 4096);   // {4194304, 128}: 64*16*4096 and 2*1*sqrt(4096)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "mixprec/scaled/detail/message.hpp"

namespace mixprec {

/// Which scale of a `scale_estimate` quantises a tensor, and whether requantisation is checked
/// (the three designs of the scale-propagation proposal behind AutoScale).
enum class scale_rule : std::uint8_t {
  worst_case,    ///< quantise by `scale`, a bound: in-range operands never give out-of-range results.
  average_case,  ///< quantise by `expected_scale` (the RMS): values beyond it use the format's headroom.
  hybrid,        ///< quantise by `scale`; requantise an operand when `scale / expected_scale` outgrows the format.
};

/// The name of `rule` ("worst_case", "average_case", "hybrid").
[[nodiscard]] constexpr std::string_view to_string(scale_rule rule) noexcept {
  switch (rule) {
    case scale_rule::worst_case: return "worst_case";
    case scale_rule::average_case: return "average_case";
    case scale_rule::hybrid: return "hybrid";
  }
  return "?";
}

/// A tensor's scale metadata (the proposal's #2): `scale`, the worst-case bound on |x| used for
/// quantisation, and `expected_scale`, the average-case estimate of its RMS. Units: those of the
/// represented values. A valid estimate has both finite and positive (`check_scale_estimate`);
/// `expected_scale <= scale` holds for measured estimates (the RMS never exceeds the max) and is kept
/// by every rule above, but is not required (a user's promise may say otherwise).
struct scale_estimate {
  double scale = 1.0;           ///< worst case: a bound on |x|.
  double expected_scale = 1.0;  ///< average case: the RMS of x.

  friend constexpr bool operator==(const scale_estimate&, const scale_estimate&) = default;
};

/// Throws `std::invalid_argument`, naming `what`, unless both scales of `s` are finite and positive
/// (a zero, negative, NaN or infinite scale cannot quantise anything).
inline void check_scale_estimate(const scale_estimate& s, std::string_view what) {
  const auto valid = [](double v) { return std::isfinite(v) && v > 0.0; };
  if (!valid(s.scale) || !valid(s.expected_scale)) {
    throw std::invalid_argument(
        internal::concat(what, ": scales must be finite and positive, got scale = ", detail::number(s.scale),
                         " and expected_scale = ", detail::number(s.expected_scale),
                         " (an all-zero tensor gets the smallest normal float as its scale, never 0)"));
  }
}

/// The estimate of `A + B` or `A - B`: {sA + sB, sqrt(eA^2 + eB^2)} (proposal, tables 1 and 2).
[[nodiscard]] inline scale_estimate add_scales(const scale_estimate& a, const scale_estimate& b) noexcept {
  return {a.scale + b.scale, std::hypot(a.expected_scale, b.expected_scale)};
}

/// The estimate of the elementwise product `A * B`: {sA * sB, eA * eB}.
[[nodiscard]] inline scale_estimate mul_scales(const scale_estimate& a, const scale_estimate& b) noexcept {
  return {a.scale * b.scale, a.expected_scale * b.expected_scale};
}

/// The estimate of `c * A` for a scalar c: {|c| sA, |c| eA} (exact for both: a scalar multiple).
[[nodiscard]] inline scale_estimate scalar_mul_scales(const scale_estimate& a, double c) noexcept {
  const double m = std::fabs(c);
  return {m * a.scale, m * a.expected_scale};
}

/// The estimate of the sum of `count` elements of A: {N sA, sqrt(N) eA} (a dot product with ones).
[[nodiscard]] inline scale_estimate sum_scales(const scale_estimate& a, std::size_t count) noexcept {
  const double n = static_cast<double>(count);
  return {n * a.scale, std::sqrt(n) * a.expected_scale};
}

/// The estimate of a dot product or matrix product with inner dimension K = `inner_dim`:
/// {sA sB K, eA eB sqrt(K)} (proposal: `R.scale = A.scale * B.scale * inner_dim` in the worst case,
/// `* sqrt(inner_dim)` in the average case).
[[nodiscard]] inline scale_estimate matmul_scales(const scale_estimate& a, const scale_estimate& b,
                                                  std::size_t inner_dim) noexcept {
  const double k = static_cast<double>(inner_dim);
  return {a.scale * b.scale * k, a.expected_scale * b.expected_scale * std::sqrt(k)};
}

}  // namespace mixprec
