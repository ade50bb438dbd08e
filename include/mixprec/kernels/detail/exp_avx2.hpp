/// \file
/// \brief Private: exp of 8 floats with AVX2 + FMA (`exp8`), for the softmax rows; compiled through a
/// `target` attribute and called only when `mixprec::active_isa()` is at least `isa::avx2`.
///
/// The classic range reduction (Cody & Waite 1980; Tang 1989): k = round(x / ln 2), r = x - k ln 2
/// in two FMA steps with ln 2 split into a float and the float of the remainder (so k · ln2_hi is
/// exact inside the FMA), |r| <= ln 2 / 2; exp(r) by its degree-7 Taylor polynomial (truncation
/// error r^8/8! < 2^-28 relative, below a quarter of float's unit roundoff), in Horner form with
/// FMAs; the result p · 2^k is scaled by two powers of two when 2^k alone is not a normal float, so
/// subnormal results are rounded once, as `std::exp` rounds them.
///
/// Error: at most 2 units in the last place against the exact exp over every float in [-104, 88.7];
/// at most 1 over the 2^22 of them that tests/kernels/exp_avx2_test.cpp sweeps against `std::exp` in
/// double (the bound the softmax rows' error statements use); exp(-Inf) and
/// every x below ln(2^-150) give +0, +Inf above ln(max float), NaN propagates.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <numbers>

#include "mixprec/arch/detail/target.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace exp_avx2 {

/// ln 2 as a float, and the float of what that lost: ln2_hi + ln2_lo = ln 2 to about 2^-48.
inline constexpr float ln2_hi = std::numbers::ln2_v<float>;
inline constexpr float ln2_lo = static_cast<float>(std::numbers::ln2 - static_cast<double>(ln2_hi));

/// 1/k! as a float, the Taylor coefficients of exp.
constexpr float inverse_factorial(int k) {
  double f = 1.0;
  for (int i = 2; i <= k; ++i) f *= i;
  return static_cast<float>(1.0 / f);
}

/// Below ln(2^-150) (about -103.97), exp(x) is at most half float's smallest subnormal and rounds to
/// +0; above 128 ln 2 (about 88.72), beyond ln(float max), it overflows. Between ln(float max) and
/// 128 ln 2 the scaling itself overflows to +Inf. Both bounds keep k in [-150, 128].
inline constexpr float underflow_below = static_cast<float>(
    (std::numeric_limits<float>::min_exponent - std::numeric_limits<float>::digits - 1) * std::numbers::ln2);
inline constexpr float overflow_above =
    static_cast<float>(std::numeric_limits<float>::max_exponent * std::numbers::ln2);

/// 2^e as floats, for e in [-126, 127] (the exponent field set directly).
MIXPREC_TARGET_AVX2_INLINE inline __m256 power_of_two(__m256i e) noexcept {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

/// exp(r) for r = x - k ln 2 (|r| <= ln 2 / 2), the reduction and polynomial of the file comment.
MIXPREC_TARGET_AVX2_INLINE inline __m256 reduced_exp(__m256 x, __m256 k) noexcept {
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ln2_hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ln2_lo), r);
  __m256 p = _mm256_set1_ps(inverse_factorial(7));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inverse_factorial(6)));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inverse_factorial(5)));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inverse_factorial(4)));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inverse_factorial(3)));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inverse_factorial(2)));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0F));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0F));
  return p;
}

/// exp(x) of 8 floats x <= 0 or -Inf, never NaN (the x_j - max of a softmax row without NaN or +Inf):
/// `exp8` without its overflow and NaN masks, which no such x reaches (the same bits there).
MIXPREC_TARGET_AVX2_INLINE inline __m256 exp8_shifted(__m256 x) noexcept {
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(std::numbers::log2e_v<float>)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 p = reduced_exp(x, k);
  // p · 2^k as p · 2^k1 · 2^k2 with k1 = k / 2 (toward 0) and k2 = k - k1: both normal powers of two
  // for k in [-150, 128], so only the last product rounds (and only when the result is subnormal).
  // Outside the domain k is clamped first; the blends give the limits.
  const __m256i ki =
      _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(k, _mm256_set1_ps(128.0F)), _mm256_set1_ps(-150.0F)));
  const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(ki, _mm256_srli_epi32(ki, 31)), 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, power_of_two(k1)), power_of_two(k2));
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(underflow_below), _CMP_LT_OQ));
}

/// exp(x) of 8 floats (see the file comment for the error): `exp8_shifted` with +Inf above the
/// overflow bound and x itself for NaN.
MIXPREC_TARGET_AVX2_INLINE inline __m256 exp8(__m256 x) noexcept {
  const __m256 y = _mm256_blendv_ps(exp8_shifted(x), _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                                    _mm256_cmp_ps(x, _mm256_set1_ps(overflow_above), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}

/// Below ln(2^-126) (about -87.34) exp(x) is not a normal float.
inline constexpr float normal_below =
    static_cast<float>((std::numeric_limits<float>::min_exponent - 1) * std::numbers::ln2);

/// exp(x) of 8 floats x <= 0 (or -Inf), for the weights of an online softmax: exp8's reduction and
/// polynomial (the same error, at most 2 ulp, for results that are normal floats), with the shortcuts
/// that domain allows — k = round(x / ln 2) by the 1.5 · 2^23 rounding trick, one scaling by 2^k
/// (k >= -126, a normal power of two) — and +0 for x < ln(2^-126) (-Inf included), where exp(x) is not
/// a normal float (at that bound itself, one correctly rounded subnormal): a weight below 2^-126 next
/// to the maximum's weight 1 changes no normalised output. NaN gives NaN (the online softmax meets one
/// when a score is +Inf: +Inf - +Inf). About 17 vector operations per 8 values instead of exp8's 30.
/// Positive x is outside the contract.
MIXPREC_TARGET_AVX2_INLINE inline __m256 exp8_nonpositive(__m256 x) noexcept {
  constexpr float round_magic = 12582912.0F;  // 1.5 * 2^23: t = x / ln 2 + magic holds round(x / ln 2)
  const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(normal_below), _CMP_LT_OQ);
  // max(bound, x) returns its second operand for a NaN x: NaN stays NaN through to the result.
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(normal_below), x);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(std::numbers::log2e_v<float>), _mm256_set1_ps(round_magic));
  const __m256 k = _mm256_sub_ps(t, _mm256_set1_ps(round_magic));
  const __m256 p = reduced_exp(xc, k);
  // t's low mantissa bits hold k (two's complement, offset by the magic's 2^22, which the shift drops):
  // (k << 23) + (127 << 23) is the pattern of 2^k, normal for k in [-126, 0].
  const __m256i scale_bits =
      _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23), _mm256_set1_epi32(127 << 23));
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(scale_bits)));
}

}  // namespace exp_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
