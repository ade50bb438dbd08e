/// \file
/// \brief Private: AVX2 + FMA softmax rows (float opmath) for `kernels::softmax`, `softmax_rows` and
/// `online_softmax<float>`, through a `target` attribute, called only when `mixprec::active_isa()` is
/// at least `isa::avx2`.
///
/// The same conventions as the portable rows of kernels/softmax.hpp (NaN anywhere: all NaN; every
/// value -Inf: all zeros); exp is `exp_avx2::exp8` (< 1 ulp), the sum of the exponentials accumulates
/// in float64 (float32 in the online softmax's block pass), and each probability is e_j · (1 / l) rounded once to the
/// output type: within 2 ulp of float of the portable path's e_j / l. Three passes over a row: max, exp (stored: in the
/// output when it is float, else in a row of scratch), scale.
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

/// e_j = exp(x_j - m) for x [n]; stored to `e` when it is non-null (may be x itself when I is float);
/// returns Σ e_j in float64.
template <class I>
MIXPREC_TARGET_AVX2 inline double exp_sum(const I* x, std::size_t n, float m, float* e) noexcept {
  const __m256 mv = _mm256_set1_ps(m);
  __m256d s0 = _mm256_setzero_pd();
  __m256d s1 = _mm256_setzero_pd();
  std::size_t j = 0;
  for (; n - j >= 8; j += 8) {
    const __m256 v = exp_avx2::exp8(_mm256_sub_ps(load8<I>(x + j), mv));
    if (e != nullptr) _mm256_storeu_ps(e + j, v);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  if (j < n) {
    const std::size_t t = n - j;
    const __m256 v = _mm256_and_ps(exp_avx2::exp8(_mm256_sub_ps(load_tail<I>(x + j, t), mv)), tail_mask(t));
    if (e != nullptr) store_tail<float>(e + j, v, t);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  return norm_avx2::horizontal_sum(s0, s1);
}

/// The softmax of x [n] into y [n] (may alias x when both are float): max, e = exp(x - max) with
/// Σ e in float64, y = e · (1 / Σ e). e is kept in y when O is float, else in `scratch` (n floats).
template <class I, class O>
MIXPREC_TARGET_AVX2 inline void softmax_row(const I* x, O* y, std::size_t n, float* scratch) noexcept {
  const row_max mx = max_of<I>(x, n);
  if (mx.nan || mx.max == -std::numeric_limits<float>::infinity()) {
    const __m256 fill = _mm256_set1_ps(mx.nan ? std::numeric_limits<float>::quiet_NaN() : 0.0F);
    std::size_t j = 0;
    for (; n - j >= 8; j += 8) store8<O>(y + j, fill);
    if (j < n) store_tail<O>(y + j, fill, n - j);
    return;
  }
  float* e = scratch;
  if constexpr (std::is_same_v<O, float>) e = y;
  const auto total = static_cast<float>(exp_sum<I>(x, n, mx.max, e));
  const __m256 inv = _mm256_set1_ps(1.0F / total);
  std::size_t j = 0;
  for (; n - j >= 8; j += 8) store8<O>(y + j, _mm256_mul_ps(_mm256_loadu_ps(e + j), inv));
  if (j < n) store_tail<O>(y + j, _mm256_mul_ps(load_tail<float>(e + j, n - j), inv), n - j);
}

/// `online_softmax<float>::update`'s block pass: s_j = exp(s_j - m) in place (`exp8_nonpositive`: s_j
/// <= m, weights below 2^-126 flushed to +0); returns Σ s_j, summed in float32 (two vector partial sums:
/// error at most n u of the sum, within the online softmax's bound, whose blocks are attention's key
/// tiles of ~128 scores; the row softmax above sums in float64).
MIXPREC_TARGET_AVX2 inline float exp_shift_in_place(float* s, std::size_t n, float m) noexcept {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 s0 = _mm256_setzero_ps();
  __m256 s1 = _mm256_setzero_ps();
  std::size_t j = 0;
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

}  // namespace softmax_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
