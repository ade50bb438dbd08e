/// \file
/// \brief Private: the vectorised softmax rows (float opmath) of `kernels::softmax`, `softmax_rows` and
/// `online_softmax<float>`, one body (softmax_rows-inl.hpp) compiled for every SIMD target
/// (`simd_avx2::softmax::row`, 8 lanes; `simd_avx512::softmax::row`, 16), chosen by kernels/softmax.hpp.
///
/// The conventions of kernels/softmax.hpp's portable rows (NaN anywhere: all NaN; every value -Inf:
/// all zeros). e_j = exp(x_j - m) by exp.hpp's `exp_shifted` (for x - max <= 0: < 1 ulp); their sum l
/// adds float32 lane sums of at most `float32_steps` values each into float64 chains; each probability
/// is e_j · (1 / l) rounded once to the output type. Before that rounding, for normal e_j, within 10u
/// relative (u = 2^-24, to first order) of the exact exp(x_j - m) / Σ exp(x_t - m) of the rounded
/// differences: 2u from e_j's exp, 2u from the exps in l, 3u from the float32 lane sums, u each from l
/// rounded to float, from 1 / l and from the product. Three passes over a row: max, exp (stored: in
/// the output when it is float, else in a row of scratch), scale.
///
/// The same bits at 8 and 16 lanes: the order of the additions is fixed in steps of 16 values (each
/// step 16 / lanes vectors: one accumulator per 8 values, whatever the width; 16 float64 chains) and
/// the values after the last full step are summed by 8-lane code on both targets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "mixprec/kernels/detail/exp.hpp"

namespace mixprec::detail::softmax_common {

/// The largest of a row's values widened to float (-Inf for an empty row), and whether any is NaN.
struct row_max {
  float max;
  bool nan;
};

/// Whether every output of a softmax row is one value, and which (`fill`): NaN when the row has a NaN
/// or a +Inf (exp(+Inf - +Inf) is NaN, as in the direct formula), 0 when every value is -Inf (masked).
/// Otherwise the row's maximum m is finite and every x_j - m is <= 0 or -Inf.
[[nodiscard]] inline bool uniform_row(row_max mx, float& fill) noexcept {
  constexpr float inf = std::numeric_limits<float>::infinity();
  if (!mx.nan && mx.max != inf && mx.max != -inf) return false;
  fill = mx.nan || mx.max == inf ? std::numeric_limits<float>::quiet_NaN() : 0.0F;
  return true;
}

/// How many steps of 16 values the exp pass adds in float32 lanes before it adds those lane sums to its
/// float64 chains: each lane's float32 sum then has at most 3 roundings of nonnegative values, a
/// relative error below 3u (u = 2^-24), and a float64 addition costs a quarter of what it did per value.
inline constexpr std::size_t float32_steps = 4;

}  // namespace mixprec::detail::softmax_common

#define MIXPREC_SIMD_BODY "mixprec/kernels/detail/softmax_rows-inl.hpp"
#include "mixprec/kernels/detail/simd/foreach_target.hpp"
