/// \file
/// \brief Private: AVX2 + FMA softmax rows (float opmath) for `kernels::softmax`, `softmax_rows` and
/// `online_softmax<float>`, through a `target` attribute, called only when `mixprec::active_isa()` is
/// at least `isa::avx2`.
///
/// The same conventions as the portable rows of kernels/softmax.hpp (NaN anywhere: all NaN; every
/// value -Inf: all zeros); exp is `exp_avx2::exp8_shifted` (exp8 for x - max <= 0: < 1 ulp), the
/// sum of the exponentials l adds float32 lane sums of at most 4 values each into float64 chains
/// (`exp_sums`, `float32_steps`; the online softmax's block pass sums in float32), and each
/// probability is e_j · (1 / l) rounded once to the output type. Before that rounding, for normal
/// e_j, within 10u relative (u = 2^-24, to first order) of the exact exp(x_j - m) / Σ exp(x_t - m) of
/// the rounded differences: 2u from e_j's exp, 2u from the exps in l, 3u from the float32 lane sums,
/// u each from l rounded to float, from 1 / l and from the product. Three passes over a row: max,
/// exp (stored: in the output when it is float, else in a row of scratch), scale. softmax_avx512.hpp
/// runs the same rows on 16 lanes with the same bits; the `_from` functions below finish its rows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/exp_avx2.hpp"
#include "mixprec/kernels/detail/norm_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace softmax_avx2 {

using norm_avx2::load8;
using norm_avx2::load_tail;
using norm_avx2::store8;
using norm_avx2::store_tail;
using norm_avx2::tail_mask;

/// The largest of x [n] widened to float (-Inf for n = 0), and whether any is NaN.
struct row_max {
  float max;
  bool nan;
};

template <class I>
MIXPREC_TARGET_AVX2 inline row_max max_of(const I* x, std::size_t n) noexcept {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = neg_inf;
  __m256 m1 = neg_inf;
  __m256 nan = _mm256_setzero_ps();
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    const __m256 a = load8<I>(x + j);
    const __m256 b = load8<I>(x + j + 8);
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    __m256 a = t == 8 ? load8<I>(x + j) : load_tail<I>(x + j, t);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    if (t < 8) a = _mm256_blendv_ps(neg_inf, a, tail_mask(t));
    m0 = _mm256_max_ps(m0, a);
  }
  return {norm_avx2::horizontal_max(_mm256_max_ps(m0, m1)), _mm256_movemask_ps(nan) != 0};
}

/// Whether every output of a softmax row is one value, and which (`fill`): NaN when the row has a NaN
/// or a +Inf (exp(+Inf - +Inf) is NaN, as in the direct formula), 0 when every value is -Inf (masked).
/// Otherwise the row's maximum m is finite and every x_j - m is <= 0 or -Inf.
[[nodiscard]] inline bool uniform_row(row_max mx, float& fill) noexcept {
  constexpr float inf = std::numeric_limits<float>::infinity();
  if (!mx.nan && mx.max != inf && mx.max != -inf) return false;
  fill = mx.nan || mx.max == inf ? std::numeric_limits<float>::quiet_NaN() : 0.0F;
  return true;
}

/// The float64 partial sums of `exp_sum`: four chains of 4 lanes, so that the additions of
/// consecutive values do not wait for one another. Of each 16 values, values 0-3 go to s[0], 4-7 to
/// s[1], 8-11 to s[2] and 12-15 to s[3]; a last 8 and a tail of fewer go to s[0] and s[1].
struct exp_sums {
  __m256d s[4];
};

/// How many steps of 16 values `exp_sum` adds in float32 lanes before it adds those lane sums to its
/// float64 chains: each lane's float32 sum then has at most 3 roundings of nonnegative values, a
/// relative error below 3u (u = 2^-24), and a float64 addition costs a quarter of what it did per value.
inline constexpr std::size_t float32_steps = 4;

/// Adds 8 values to two of the chains, in float64.
MIXPREC_TARGET_AVX2_INLINE inline void add_pd8(__m256d& lo, __m256d& hi, __m256 v) noexcept {
  lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/// e_j = exp(x_j - m) for x [j0, n); stored to `e` when it is non-null (may be x itself when I is
/// float); returns Σ e_j, continuing the chains `sums` that the values before j0 (a multiple of 16)
/// left (softmax_avx512::exp_sum hands its remainder, fewer than 16 values, over here: the same order,
/// so the same bits). Steps of 16 values are summed per lane in float32 in blocks of `float32_steps`
/// (from j0), each block's lane sums then added to the float64 chains; a last 8 and a tail go to the
/// chains directly. The lines of `next` (the following row, or null) are prefetched alongside.
template <class I>
MIXPREC_TARGET_AVX2_INLINE inline double exp_sum_from(const I* x, std::size_t n, std::size_t j0, float m, float* e,
                                                      exp_sums sums, const I* next = nullptr) noexcept {
  const __m256 mv = _mm256_set1_ps(m);
  std::size_t j = j0;
  while (n - j >= 16) {
    __m256 f0 = _mm256_setzero_ps();  // values 0-7 of each 16, in float32
    __m256 f1 = _mm256_setzero_ps();  // values 8-15
    for (std::size_t step = 0; step < float32_steps && n - j >= 16; ++step, j += 16) {
      norm_avx2::prefetch_next<I>(next, j);
      const __m256 v0 = exp_avx2::exp8_shifted(_mm256_sub_ps(load8<I>(x + j), mv));
      const __m256 v1 = exp_avx2::exp8_shifted(_mm256_sub_ps(load8<I>(x + j + 8), mv));
      if (e != nullptr) {
        _mm256_storeu_ps(e + j, v0);
        _mm256_storeu_ps(e + j + 8, v1);
      }
      f0 = _mm256_add_ps(f0, v0);
      f1 = _mm256_add_ps(f1, v1);
    }
    add_pd8(sums.s[0], sums.s[1], f0);
    add_pd8(sums.s[2], sums.s[3], f1);
  }
  if (n - j >= 8) {
    const __m256 v = exp_avx2::exp8_shifted(_mm256_sub_ps(load8<I>(x + j), mv));
    if (e != nullptr) _mm256_storeu_ps(e + j, v);
    add_pd8(sums.s[0], sums.s[1], v);
    j += 8;
  }
  if (j < n) {
    const std::size_t t = n - j;
    const __m256 v = _mm256_and_ps(exp_avx2::exp8_shifted(_mm256_sub_ps(load_tail<I>(x + j, t), mv)), tail_mask(t));
    if (e != nullptr) store_tail<float>(e + j, v, t);
    add_pd8(sums.s[0], sums.s[1], v);
  }
  return norm_avx2::horizontal_sum(_mm256_add_pd(sums.s[0], sums.s[2]), _mm256_add_pd(sums.s[1], sums.s[3]));
}

/// e_j = exp(x_j - m) for x [n]; stored to `e` when it is non-null (may be x itself when I is float);
/// returns Σ e_j (`exp_sum_from`'s float32 blocks and float64 chains). `next` (the following row, or
/// null) is prefetched.
template <class I>
MIXPREC_TARGET_AVX2 inline double exp_sum(const I* x, std::size_t n, float m, float* e, const I* next) noexcept {
  return exp_sum_from<I>(x, n, 0, m, e,
                         {{_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}}, next);
}

/// y_j = round_to<O>(f) for j in [j0, n): the row's fill value (NaN or 0).
template <class O>
MIXPREC_TARGET_AVX2 inline void fill_from(O* y, std::size_t n, std::size_t j0, float f) noexcept {
  const __m256 fill = _mm256_set1_ps(f);
  std::size_t j = j0;
  for (; n - j >= 8; j += 8) store8<O>(y + j, fill);
  if (j < n) store_tail<O>(y + j, fill, n - j);
}

/// y_j = round_to<O>(e_j · inv) for j in [j0, n): the softmax's normalisation.
template <class O>
MIXPREC_TARGET_AVX2 inline void scale_from(const float* e, O* y, std::size_t n, std::size_t j0, float inv) noexcept {
  const __m256 iv = _mm256_set1_ps(inv);
  std::size_t j = j0;
  for (; n - j >= 8; j += 8) store8<O>(y + j, _mm256_mul_ps(_mm256_loadu_ps(e + j), iv));
  if (j < n) store_tail<O>(y + j, _mm256_mul_ps(load_tail<float>(e + j, n - j), iv), n - j);
}

/// The softmax of x [n] into y [n] (may alias x when both are float): max, e = exp(x - max) with
/// Σ e (`exp_sum`), y = e · (1 / Σ e). e is kept in y when O is float, else in `scratch` (n floats).
/// `next` (the following row, or null) is prefetched while e is computed: the next row's max pass
/// then reads from the cache instead of waiting on memory.
template <class I, class O>
MIXPREC_TARGET_AVX2 inline void softmax_row(const I* x, O* y, std::size_t n, float* scratch, const I* next) noexcept {
  const row_max mx = max_of<I>(x, n);
  float fill = 0.0F;
  if (uniform_row(mx, fill)) {
    fill_from<O>(y, n, 0, fill);
    return;
  }
  float* e = scratch;
  if constexpr (std::is_same_v<O, float>) e = y;
  const auto total = static_cast<float>(exp_sum<I>(x, n, mx.max, e, next));
  scale_from<O>(e, y, n, 0, 1.0F / total);
}

/// `exp_shift_in_place` from s[j0] on, with the partial sums s0 (each 16 values' first 8) and s1
/// (their last 8) that the values before j0 left (softmax_avx512::exp_shift_in_place hands its
/// remainder over here: the same order, so the same bits).
MIXPREC_TARGET_AVX2_INLINE inline float exp_shift_from(float* s, std::size_t n, std::size_t j0, float m, __m256 s0,
                                                       __m256 s1) noexcept {
  const __m256 mv = _mm256_set1_ps(m);
  std::size_t j = j0;
  for (; n - j >= 16; j += 16) {
    const __m256 a = exp_avx2::exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    const __m256 b = exp_avx2::exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), mv));
    _mm256_storeu_ps(s + j, a);
    _mm256_storeu_ps(s + j + 8, b);
    s0 = _mm256_add_ps(s0, a);
    s1 = _mm256_add_ps(s1, b);
  }
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    const __m256 x = t == 8 ? _mm256_loadu_ps(s + j) : load_tail<float>(s + j, t);
    const __m256 v = _mm256_and_ps(exp_avx2::exp8_nonpositive(_mm256_sub_ps(x, mv)), tail_mask(t));
    if (t == 8) {
      _mm256_storeu_ps(s + j, v);
    } else {
      store_tail<float>(s + j, v, t);
    }
    s0 = _mm256_add_ps(s0, v);
  }
  const __m256 total = _mm256_add_ps(s0, s1);
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

/// `online_softmax<float>::update`'s block pass: s_j = exp(s_j - m) in place (`exp8_nonpositive`: s_j
/// <= m, weights below 2^-126 flushed to +0); returns Σ s_j, summed in float32 (two vector partial sums:
/// error at most n u of the sum, within the online softmax's bound, whose blocks are attention's key
/// tiles of ~128 scores; the row softmax above adds blocks of 4 per lane into float64).
MIXPREC_TARGET_AVX2 inline float exp_shift_in_place(float* s, std::size_t n, float m) noexcept {
  return exp_shift_from(s, n, 0, m, _mm256_setzero_ps(), _mm256_setzero_ps());
}

}  // namespace softmax_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
