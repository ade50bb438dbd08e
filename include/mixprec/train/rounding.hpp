/// \file
/// \brief Writing an updated float32 value back into a 16-bit parameter: stochastic rounding to
/// bfloat16 (llm.c) and float16, its counter-based random bits, and Kahan-compensated addition (optimi). Used by
/// the optimisers (`adamw.hpp`, `sgd.hpp`) when a bfloat16/float16 parameter has no float32 master copy.
///
/// **Stochastic rounding** (llm.c `llmc/cuda_utils.cuh`, `stochastic_rounding`; docs/training.md, "16-bit parameters"):
/// with 16 random bits r, the float32 pattern u of x is truncated to its top 16 bits, and 1 is added to the
/// truncated magnitude when the discarded low 16 bits exceed r. So x rounds away from zero with
/// probability (discarded bits)/2^16, and E[result] = x exactly (unbiased). Special cases (llm.c has
/// none; docs/training.md, "16-bit parameters", lists them): NaN gives a NaN (truncating a NaN whose payload lies only
/// in the low bits would give Inf); a finite x with |x| above the largest bfloat16 (3.3895e38) is rounded to
/// nearest even like the ordinary conversion (so Inf only where RNE gives Inf too); every finite x with
/// |x| <= bfloat16 max gives a finite result; Inf stays Inf; zeros and subnormals work like any value.
///
/// **Random bits**: `stochastic_rounding_bits(seed, step, tensor_id, index)` hashes the four numbers
/// with splitmix64 (Steele, Lea, Flood 2014; the finaliser of `java.util.SplittableRandom`), so the
/// bits of an element depend only on them, not on the order of updates or on the number of threads.
/// llm.c hashes (thread, block, per-step seed) with SquirrelNoise5 instead, which ties its result to
/// the launch geometry.
///
/// **Kahan-compensated parameters** (optimi `optimi/adam.py`, `kahan_sum`; docs/training.md, "16-bit parameters"): each
/// parameter p keeps a compensation c of its own type; an update u (float32) is applied as
/// `c += u; p_new = round(p + c); c += p - p_new`, so updates smaller than half an ulp of p accumulate
/// in c until they move p. Each `+=` is computed in float32 and rounded once to the parameter type.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"

namespace mixprec::train {

/// splitmix64's output function of `x` (one step of the generator): a bijective 64-bit mix.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// The 16 random bits used to round element `index` of the tensor `tensor_id` at optimiser step
/// `step` under `seed`: a chain of splitmix64 over the four numbers, top 16 bits of the result.
[[nodiscard]] constexpr std::uint16_t stochastic_rounding_bits(std::uint64_t seed, std::uint64_t step,
                                                               std::uint64_t tensor_id, std::uint64_t index) noexcept {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ step);
  h = splitmix64(h ^ tensor_id);
  h = splitmix64(h ^ index);
  return static_cast<std::uint16_t>(h >> 48);
}

/// A stable 64-bit id of a parameter name (FNV-1a), used as the tensor id of stochastic rounding so that
/// the random bits follow the parameter, not the order in which the optimiser first met it.
[[nodiscard]] constexpr std::uint64_t tensor_id_of(std::string_view name) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : name) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

/// Stochastic rounding of `x` to bfloat16 with the random bits `r` (see the file comment): rounds away
/// from zero when the low 16 bits of x's float32 pattern exceed r, truncates otherwise.
[[nodiscard]] inline bfloat16 stochastic_round_bf16(float x, std::uint16_t r) noexcept {
  if (std::isnan(x)) return bfloat16(x);  // the ordinary conversion keeps NaN a NaN
  const auto u = std::bit_cast<std::uint32_t>(x);
  constexpr std::uint32_t bf16_max_magnitude = 0x7F7F0000U;        // 3.3895e38
  if ((u & 0x7FFFFFFFU) > bf16_max_magnitude) return bfloat16(x);  // beyond max (or Inf): as RNE
  const std::uint32_t low = u & 0xFFFFU;
  // Adding 1 to the top half increments the magnitude (sign-magnitude); a carry into the exponent is the
  // correct next value, and |x| <= max has low == 0 at max itself, so no Inf can arise here.
  const std::uint32_t top = (u >> 16) + (low > r ? 1U : 0U);
  return bfloat16::from_bits(static_cast<std::uint16_t>(top));
}

/// Stochastic rounding of `x` to float16 with the random bits `r`: x lies between the float16 value
/// t truncated toward zero and the next one away from zero, t + q (q the float16 spacing at |x|:
/// 2^(e - 10) in the binade [2^e, 2^(e+1)), 2^-24 among the subnormals), and rounds away from zero
/// when r < f · 2^16, f = (|x| − |t|) / q the discarded fraction. For a normal float16 result f has 13
/// bits (float32 keeps 13 more than float16's 10), so P(away) = f exactly and E[result] = x (unbiased),
/// as for bfloat16. For a subnormal result f can have more than 16 bits: P(away) = ceil(f · 2^16) / 2^16,
/// a bias away from zero below 2^-16 of the spacing 2^-24. Special cases as for bfloat16: NaN stays NaN;
/// |x| above the float16 maximum (65504), and Inf, round to nearest even (so Inf only where RNE gives it);
/// every finite |x| <= 65504 gives a finite result.
[[nodiscard]] inline float16 stochastic_round_f16(float x, std::uint16_t r) noexcept {
  using limits = std::numeric_limits<float16>;
  const float ax = std::fabs(x);
  if (std::isnan(x) || !(ax <= static_cast<float>(limits::max()))) return float16(x);  // NaN, beyond max, Inf
  // The spacing q = 2^(exponent of |x| - digits + 1), never below the subnormal spacing.
  const int exponent = ax == 0.0f ? limits::min_exponent - 1 : std::ilogb(ax);
  const float q = std::ldexp(1.0f, std::max(exponent, limits::min_exponent - 1) - (limits::digits - 1));
  const float scaled = ax / q;                                               // exact: q is a power of two
  const float truncated = std::trunc(scaled);                                // |t| / q
  const float fraction = scaled - truncated;                                 // exact, in [0, 1)
  const bool away = static_cast<float>(r) < fraction * 65536.0f;             // fraction * 2^16: exact
  return float16(std::copysign((truncated + (away ? 1.0f : 0.0f)) * q, x));  // representable: exact
}

/// One Kahan-compensated update of a 16-bit parameter (see the file comment): `c += u`,
/// `p_new = round(p + c)`, `c += p - p_new`, each sum in float32 rounded once to T (nearest even).
template <class T>
requires std::same_as<T, bfloat16> || std::same_as<T, float16>
constexpr void kahan_add(T& p, T& c, float u) noexcept {
  c = T(static_cast<float>(c) + u);
  const T p_new = T(static_cast<float>(p) + static_cast<float>(c));
  c = T(static_cast<float>(c) + (static_cast<float>(p) - static_cast<float>(p_new)));
  p = p_new;
}

}  // namespace mixprec::train
