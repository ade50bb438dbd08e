/// \file
/// \brief Private: exp of 16 floats with AVX-512 (`exp16`, `exp16_nonpositive`), for the softmax rows
/// and the online softmax; compiled through a `target` attribute and called only when
/// `mixprec::active_isa()` is at least `isa::avx512`.
///
/// Lane for lane the operations of exp_avx2.hpp's `exp8` and `exp8_nonpositive` (the same reduction,
/// polynomial, clamps and scaling, each an IEEE operation rounded alike), so both give the AVX2
/// functions' bits, and their error bounds (tests/kernels/exp_avx512_test.cpp compares them bit for
/// bit). The zero-masking forms of the instructions that have them, every lane selected: GCC 12's
/// plain forms pass an undefined register that -Wmaybe-uninitialized reports at -O2.
#pragma once

#include <limits>
#include <numbers>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/exp_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace exp_avx512 {

using exp_avx2::inverse_factorial;
using exp_avx2::ln2_hi;
using exp_avx2::ln2_lo;

/// Every lane of a 16-lane mask.
inline constexpr __mmask16 all_lanes = static_cast<__mmask16>(~__mmask16{0});

/// 2^e as floats, for e in [-126, 127] (the exponent field set directly).
MIXPREC_TARGET_AVX512_INLINE inline __m512 power_of_two(__m512i e) noexcept {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all_lanes, _mm512_add_epi32(e, _mm512_set1_epi32(127)), 23));
}

/// exp(r) for r = x - k ln 2 (|r| <= ln 2 / 2): exp_avx2::reduced_exp on 16 lanes.
MIXPREC_TARGET_AVX512_INLINE inline __m512 reduced_exp(__m512 x, __m512 k) noexcept {
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(ln2_hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(ln2_lo), r);
  __m512 p = _mm512_set1_ps(inverse_factorial(7));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(inverse_factorial(6)));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(inverse_factorial(5)));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(inverse_factorial(4)));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(inverse_factorial(3)));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(inverse_factorial(2)));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0F));
  return p;
}

/// exp(x) of 16 floats: exp_avx2::exp8's bits (at most 2 ulp; +0 below ln(2^-150), +Inf above
/// 128 ln 2, NaN propagates).
MIXPREC_TARGET_AVX512_INLINE inline __m512 exp16(__m512 x) noexcept {
  const __m512 k = _mm512_maskz_roundscale_ps(all_lanes, _mm512_mul_ps(x, _mm512_set1_ps(std::numbers::log2e_v<float>)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 p = reduced_exp(x, k);
  // p · 2^k1 · 2^k2 with k1 = k / 2 (toward 0) and k2 = k - k1, k clamped to [-150, 128] (exp8).
  const __m512 clamped = _mm512_maskz_max_ps(all_lanes, _mm512_maskz_min_ps(all_lanes, k, _mm512_set1_ps(128.0F)),
                                             _mm512_set1_ps(-150.0F));
  const __m512i ki = _mm512_maskz_cvtps_epi32(all_lanes, clamped);
  const __m512i k1 =
      _mm512_maskz_srai_epi32(all_lanes, _mm512_add_epi32(ki, _mm512_maskz_srli_epi32(all_lanes, ki, 31)), 1);
  const __m512i k2 = _mm512_sub_epi32(ki, k1);
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, power_of_two(k1)), power_of_two(k2));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_avx2::underflow_below), _CMP_LT_OQ), y,
                           _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_avx2::overflow_above), _CMP_GT_OQ), y,
                           _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);  // NaN in, NaN out
}

/// exp(x) of 16 floats x <= 0 (or -Inf), for the weights of an online softmax: exp_avx2::exp8_nonpositive's
/// bits (+0 below ln(2^-126), NaN gives NaN; positive x is outside the contract).
MIXPREC_TARGET_AVX512_INLINE inline __m512 exp16_nonpositive(__m512 x) noexcept {
  constexpr float round_magic = 12582912.0F;  // 1.5 * 2^23: t = x / ln 2 + magic holds round(x / ln 2)
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_avx2::normal_below), _CMP_NLT_UQ);
  // max(bound, x) returns its second operand for a NaN x: NaN stays NaN through to the result.
  const __m512 xc = _mm512_maskz_max_ps(all_lanes, _mm512_set1_ps(exp_avx2::normal_below), x);
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(std::numbers::log2e_v<float>), _mm512_set1_ps(round_magic));
  const __m512 k = _mm512_sub_ps(t, _mm512_set1_ps(round_magic));
  const __m512 p = reduced_exp(xc, k);
  const __m512i scale_bits =
      _mm512_add_epi32(_mm512_maskz_slli_epi32(all_lanes, _mm512_castps_si512(t), 23), _mm512_set1_epi32(127 << 23));
  // +0 where x < ln(2^-126): exp8_nonpositive's ANDNOT of its `tiny` mask.
  return _mm512_maskz_mul_ps(normal, p, _mm512_castsi512_ps(scale_bits));
}

}  // namespace exp_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
