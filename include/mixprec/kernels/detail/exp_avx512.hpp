/// \file
/// \brief Private: exp of 16 floats with AVX-512 (`exp16`, `exp16_shifted`, `exp16_nonpositive`), for
/// the softmax rows and the online softmax; compiled through a `target` attribute and called only when
/// `mixprec::active_isa()` is at least `isa::avx512`.
///
/// exp_avx2.hpp's `exp8` and `exp8_nonpositive` on 16 lanes: the same reduction, polynomial and
/// clamps, each an IEEE operation rounded alike, and a scaling that rounds the same exact product once
/// (VSCALEFPS where exp8 takes two products), so they give the AVX2 functions' bits, and their error
/// bounds (tests/kernels/exp_avx512_test.cpp compares them bit for bit). The zero-masking
/// forms of the instructions that have them, every lane selected: GCC 12's plain forms pass an
/// undefined register that -Wmaybe-uninitialized reports at -O2.
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

/// exp(x) of 16 floats x <= 0 or -Inf, never NaN (the x_j - max of a softmax row without NaN or
/// +Inf): exp_avx2::exp8_shifted's (and exp8's) bits there. The scaling p · 2^k is one VSCALEFPS,
/// which rounds the exact product once: exp8's two products by normal powers of two round only in the
/// second, so both give round(p · 2^k) for every k in [-150, 0]; lanes below ln(2^-150) (and -Inf)
/// are zeroed by the mask.
MIXPREC_TARGET_AVX512_INLINE inline __m512 exp16_shifted(__m512 x) noexcept {
  const __m512 k = _mm512_maskz_roundscale_ps(all_lanes, _mm512_mul_ps(x, _mm512_set1_ps(std::numbers::log2e_v<float>)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_avx2::underflow_below), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(in_range, reduced_exp(x, k), k);
}

/// exp(x) of 16 floats: exp_avx2::exp8's bits (at most 2 ulp, 1 over the sweep; +0 below
/// ln(2^-150), +Inf above 128 ln 2, NaN propagates). `exp16_shifted` rounds p · 2^k once for every k
/// of the domain, [-150, 128] (a NaN lane passes its mask, unordered, and is restored below); the
/// masks give +Inf and x itself.
MIXPREC_TARGET_AVX512_INLINE inline __m512 exp16(__m512 x) noexcept {
  const __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_avx2::overflow_above), _CMP_GT_OQ),
                                        exp16_shifted(x), _mm512_set1_ps(std::numeric_limits<float>::infinity()));
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
