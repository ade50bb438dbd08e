/// \file
/// \brief Private: AVX-512 softmax rows (float opmath) for `kernels::softmax`, `softmax_rows` and
/// `online_softmax<float>`, through a `target` attribute, called only when `mixprec::active_isa()` is
/// at least `isa::avx512`.
///
/// softmax_avx2.hpp's rows on 16 lanes, giving their bits: `exp16_shifted` is `exp8` lane for lane
/// for the x_j - max a row can hold (exp_avx512.hpp), each vector partial sum of the AVX2 rows is one
/// half of a 16-lane accumulator here (the float32 block sums and float64 chains of `exp_sum_from`,
/// the online softmax's first and last 8 of every 16), and the values after the last full 16 are
/// handed to the AVX2 rows' `_from` functions with those partial sums. So a softmax does not depend
/// on the level it runs at (tests/kernels/softmax_test.cpp compares the levels bit for bit). Elements
/// other than float are converted by norm_avx512's loads and stores (norm_avx2's exact conversions).
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/detail/exp_avx512.hpp"
#include "mixprec/kernels/detail/norm_avx2.hpp"
#include "mixprec/kernels/detail/norm_avx512.hpp"
#include "mixprec/kernels/detail/softmax_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace softmax_avx512 {

using exp_avx512::all_lanes;
using softmax_avx2::row_max;

using norm_avx512::load16;
using norm_avx512::lower_half;
using norm_avx512::store16;
using norm_avx512::upper_half;

/// The largest of x [n] widened to float (-Inf for n = 0), and whether any is NaN.
template <class I>
MIXPREC_TARGET_AVX512 inline row_max max_of(const I* x, std::size_t n) noexcept {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = neg_inf;
  __m512 m1 = neg_inf;
  __mmask16 nan = 0;
  std::size_t j = 0;
  for (; n - j >= 32; j += 32) {
    const __m512 a = load16<I>(x + j);
    const __m512 b = load16<I>(x + j + 16);
    m0 = _mm512_maskz_max_ps(all_lanes, m0, a);
    m1 = _mm512_maskz_max_ps(all_lanes, m1, b);
    nan = static_cast<__mmask16>(nan | _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q));
  }
  const row_max rest = softmax_avx2::max_of<I>(x + j, n - j);
  const __m512 m = _mm512_maskz_max_ps(all_lanes, m0, m1);
  const float wide = norm_avx2::horizontal_max(_mm256_max_ps(lower_half(m), upper_half(m)));
  return {wide > rest.max ? wide : rest.max, nan != 0 || rest.nan};
}

/// e_j = exp(x_j - m) for the 16 values of x at j, stored to e + j; the line of `next` at j prefetched.
template <class I>
MIXPREC_TARGET_AVX512_INLINE inline __m512 exp_step(const I* x, std::size_t j, __m512 m, float* e,
                                                    const I* next) noexcept {
  norm_avx512::prefetch_next<I>(next, j);
  const __m512 v = exp_avx512::exp16_shifted(_mm512_sub_ps(load16<I>(x + j), m));
  _mm512_storeu_ps(e + j, v);
  return v;
}

/// Adds a block's float32 lane sums f to the float64 chains: lanes 0-7 to `low`, 8-15 to `high`.
MIXPREC_TARGET_AVX512_INLINE inline void add_block(__m512d& low, __m512d& high, __m512 f) noexcept {
  constexpr auto all8 = static_cast<__mmask8>(0xFF);
  low = _mm512_add_pd(low, _mm512_maskz_cvtps_pd(all8, lower_half(f)));
  high = _mm512_add_pd(high, _mm512_maskz_cvtps_pd(all8, upper_half(f)));
}

/// e_j = exp(x_j - m) for x [n], stored to `e` (may be x itself when I is float); returns Σ e_j
/// (softmax_avx2::exp_sum_from's float32 blocks of float32_steps steps and float64 chains: its order
/// and bits). Whole blocks run unrolled; the last block, shorter, and the values after the last full
/// 16 continue as the AVX2 rows do. `next` (the following row, or null) is prefetched.
template <class I>
MIXPREC_TARGET_AVX512 inline double exp_sum(const I* x, std::size_t n, float m, float* e, const I* next) noexcept {
  constexpr std::size_t steps = softmax_avx2::float32_steps;
  const __m512 mv = _mm512_set1_ps(m);
  __m512d low = _mm512_setzero_pd();   // softmax_avx2's chains s[0] (lanes 0-3) and s[1] (lanes 4-7)
  __m512d high = _mm512_setzero_pd();  // its s[2] and s[3]
  std::size_t j = 0;
  for (; n - j >= steps * 16; j += steps * 16) {
    __m512 f = exp_step<I>(x, j, mv, e, next);  // lanes 0-7: softmax_avx2's f0, lanes 8-15: its f1
#pragma GCC unroll 4
    for (std::size_t step = 1; step < steps; ++step) f = _mm512_add_ps(f, exp_step<I>(x, j + 16 * step, mv, e, next));
    add_block(low, high, f);
  }
  if (n - j >= 16) {
    __m512 f = _mm512_setzero_ps();
    for (; n - j >= 16; j += 16) f = _mm512_add_ps(f, exp_step<I>(x, j, mv, e, next));
    add_block(low, high, f);
  }
  return softmax_avx2::exp_sum_from<I>(x, n, j, m, e,
                                       {{lower_half(low), upper_half(low), lower_half(high), upper_half(high)}},
                                       norm_avx512::offset(next, j));
}

/// The softmax of x [n] into y [n] (may alias x when both are float): softmax_avx2::softmax_row's
/// contract and bits. e is kept in y when O is float, else in `scratch` (n floats). `next` (the
/// following row, or null) is prefetched.
template <class I, class O>
MIXPREC_TARGET_AVX512 inline void softmax_row(const I* x, O* y, std::size_t n, float* scratch, const I* next) noexcept {
  const row_max mx = max_of<I>(x, n);
  std::size_t j = 0;
  float f = 0.0F;
  if (softmax_avx2::uniform_row(mx, f)) {
    for (; n - j >= 16; j += 16) store16<O>(y + j, _mm512_set1_ps(f));
    softmax_avx2::fill_from<O>(y, n, j, f);
    return;
  }
  float* e = scratch;
  if constexpr (std::is_same_v<O, float>) e = y;
  const auto total = static_cast<float>(exp_sum<I>(x, n, mx.max, e, next));
  const float inv = 1.0F / total;
  const __m512 iv = _mm512_set1_ps(inv);
  for (; n - j >= 16; j += 16) store16<O>(y + j, _mm512_mul_ps(_mm512_loadu_ps(e + j), iv));
  softmax_avx2::scale_from<O>(e, y, n, j, inv);
}

/// `online_softmax<float>::update`'s block pass: s_j = exp(s_j - m) in place (`exp16_nonpositive`);
/// returns Σ s_j in float32 (softmax_avx2::exp_shift_in_place's order and bits).
MIXPREC_TARGET_AVX512 inline float exp_shift_in_place(float* s, std::size_t n, float m) noexcept {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 total = _mm512_setzero_ps();  // lanes 0-7: softmax_avx2's s0, lanes 8-15: its s1
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    const __m512 v = exp_avx512::exp16_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    _mm512_storeu_ps(s + j, v);
    total = _mm512_add_ps(total, v);
  }
  return softmax_avx2::exp_shift_from(s, n, j, m, lower_half(total), upper_half(total));
}

}  // namespace softmax_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
