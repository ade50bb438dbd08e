/// \file
/// \brief Private: activation_avx2.hpp's kernel on 16 lanes (AVX-512), compiled through a `target`
/// attribute and called only when `mixprec::active_isa()` is at least `isa::avx512`.
///
/// The same operations in the same order as `activation_avx2::activation8`, with exp_avx512::exp16 for
/// exp_avx2::exp8 (the same bits: tests/kernels/exp_avx512_test.cpp), so both levels give the same
/// bits (tests/kernels/activations_test.cpp compares them).
#pragma once

#include <cstddef>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/detail/erfc_fit.hpp"
#include "mixprec/kernels/detail/exp_avx512.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace activation_avx512 {

using kernels::activation_kind;

/// The bits of the float sign.
inline constexpr int sign_bit = static_cast<int>(0x80000000U);

/// x with its sign bit set (-|x|) or cleared (|x|): exact.
MIXPREC_TARGET_AVX512_INLINE inline __m512 minus_abs(__m512 x) noexcept {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(sign_bit)));
}
MIXPREC_TARGET_AVX512_INLINE inline __m512 abs(__m512 x) noexcept {
  // AND with the magnitude bits (GCC 12's _mm512_andnot_si512 passes an undefined register).
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(~sign_bit)));
}

/// activation_avx2::gelu_tanh_y8 on 16 lanes.
MIXPREC_TARGET_AVX512_INLINE inline __m512 gelu_tanh_y16(__m512 x) noexcept {
  const __m512 cube = _mm512_mul_ps(
      _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(static_cast<float>(kernels::detail::gelu_tanh_cubic)), x), x), x);
  return _mm512_mul_ps(_mm512_set1_ps(static_cast<float>(kernels::detail::gelu_tanh_scale)), _mm512_add_ps(x, cube));
}

/// activation_avx2::sigmoid_parts on 16 lanes: s = (z >= 0 ? 1 : e) / (1 + e), q = e / (1 + e)^2.
struct sigmoid_parts16 {
  __m512 s, q;
};
MIXPREC_TARGET_AVX512_INLINE inline sigmoid_parts16 sigmoid_parts(__m512 z, __m512 e) noexcept {
  const __m512 one = _mm512_set1_ps(1.0F);
  const __m512 d = _mm512_add_ps(one, e);
  const __m512 numerator = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
  return {_mm512_div_ps(numerator, d), _mm512_div_ps(e, _mm512_mul_ps(d, d))};
}

/// activation_avx2::nan_as_input on 16 lanes: r, with x's NaN lanes (quietened) instead.
MIXPREC_TARGET_AVX512_INLINE inline __m512 nan_as_input(__m512 x, __m512 r) noexcept {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_add_ps(x, x));
}

/// activation_avx2::gelu_erf_parts on 16 lanes: erfc(-x / sqrt 2) and e = e^(-x^2 / 2).
struct gelu_erf_parts16 {
  __m512 erfc, e;
};
MIXPREC_TARGET_AVX512_INLINE inline gelu_erf_parts16 gelu_erf_parts(__m512 x) noexcept {
  const __m512 one = _mm512_set1_ps(1.0F);
  const __m512 minus_half = _mm512_set1_ps(-0.5F);
  // min returns its second operand for a NaN one: NaN stays NaN through to the results.
  const __m512 ax = _mm512_maskz_min_ps(exp_avx512::all_lanes, _mm512_set1_ps(kernels::detail::erfc_fit_clamp), abs(x));
  const __m512 h = _mm512_mul_ps(ax, ax);
  const __m512 l = _mm512_fmsub_ps(ax, ax, h);
  const __m512 e_h = exp_avx512::exp16(_mm512_mul_ps(minus_half, h));
  const __m512 e = _mm512_fmadd_ps(e_h, _mm512_mul_ps(minus_half, l), e_h);
  const __m512 a = _mm512_mul_ps(ax, _mm512_set1_ps(static_cast<float>(kernels::detail::gelu_erf_scale)));
  const __m512 s = _mm512_div_ps(_mm512_add_ps(a, a), _mm512_add_ps(a, _mm512_set1_ps(kernels::detail::erfc_fit_k)));
  const __m512 u = _mm512_sub_ps(s, _mm512_set1_ps(kernels::detail::erfc_fit_centre));
  constexpr auto& c = kernels::detail::erfc_fit_coefficients;
  __m512 p = _mm512_set1_ps(c.back());
  for (std::size_t i = c.size() - 1; i-- > 0;) p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(c[i]));
  const __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, _mm512_add_ps(a, a)));
  const __m512 tail = _mm512_mul_ps(e, _mm512_fmadd_ps(_mm512_mul_ps(s, p), r, r));  // erfc(a)
  const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  return {_mm512_mask_blend_ps(positive, tail, _mm512_sub_ps(_mm512_set1_ps(2.0F), tail)), e};
}

/// The activation or derivative K of 16 floats, in float32 (activation_avx2::activation8 on 16 lanes).
template <activation_kind K>
MIXPREC_TARGET_AVX512_INLINE inline __m512 activation16(__m512 x) noexcept {
  const __m512 one = _mm512_set1_ps(1.0F);
  if constexpr (K == activation_kind::gelu_tanh) {
    const __m512 y = gelu_tanh_y16(x);
    return _mm512_div_ps(x, _mm512_add_ps(one, exp_avx512::exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0F), y))));
  } else if constexpr (K == activation_kind::sigmoid_derivative) {
    return sigmoid_parts(x, exp_avx512::exp16(minus_abs(x))).q;
  } else if constexpr (K == activation_kind::silu_derivative) {
    const __m512 e = exp_avx512::exp16(minus_abs(x));
    const sigmoid_parts16 p = sigmoid_parts(x, e);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                _mm512_add_ps(p.s, _mm512_mul_ps(x, p.q)), p.s);
  } else if constexpr (K == activation_kind::gelu_tanh_derivative) {
    const __m512 y = gelu_tanh_y16(x);
    const __m512 e = exp_avx512::exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0F), abs(y)));
    const sigmoid_parts16 p = sigmoid_parts(y, e);
    const __m512 three_a_x2 =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(static_cast<float>(3.0 * kernels::detail::gelu_tanh_cubic)), x), x);
    const __m512 slope = _mm512_mul_ps(_mm512_set1_ps(static_cast<float>(2.0 * kernels::detail::gelu_tanh_scale)),
                                       _mm512_add_ps(one, three_a_x2));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                _mm512_add_ps(p.s, _mm512_mul_ps(_mm512_mul_ps(x, p.q), slope)), p.s);
  } else if constexpr (K == activation_kind::gelu_erf) {
    return nan_as_input(x, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5F), x), gelu_erf_parts(x).erfc));
  } else if constexpr (K == activation_kind::gelu_erf_derivative) {
    const gelu_erf_parts16 p = gelu_erf_parts(x);
    const __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5F), p.erfc);
    const __m512 pdf = _mm512_mul_ps(p.e, _mm512_set1_ps(static_cast<float>(kernels::detail::normal_density_scale)));
    return nan_as_input(x, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(pdf, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                                _mm512_add_ps(cdf, _mm512_mul_ps(x, pdf)), cdf));
  } else {
    // -x by the sign bit: exact, as the scalar negation.
    const __m512 minus_x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(sign_bit)));
    const __m512 e = exp_avx512::exp16(minus_x);
    return _mm512_div_ps(K == activation_kind::sigmoid ? one : x, _mm512_add_ps(one, e));
  }
}

/// activation_avx2::activation_row on 16 lanes: y[i] = act_K(x[i]) (times gate[i] when `gate` is not
/// null) for i < n; y may be x or gate; nothing past n is read or written.
template <activation_kind K>
MIXPREC_TARGET_AVX512 inline void activation_row(const float* x, const float* gate, float* y, std::size_t n) noexcept {
  std::size_t i = 0;
  if (gate != nullptr) {
    for (; n - i >= 16; i += 16) {
      _mm512_storeu_ps(y + i, _mm512_mul_ps(activation16<K>(_mm512_loadu_ps(x + i)), _mm512_loadu_ps(gate + i)));
    }
  } else {
    for (; n - i >= 16; i += 16) _mm512_storeu_ps(y + i, activation16<K>(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const auto lanes = static_cast<__mmask16>((1U << (n - i)) - 1U);
    __m512 v = activation16<K>(_mm512_maskz_loadu_ps(lanes, x + i));
    if (gate != nullptr) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(lanes, gate + i));
    _mm512_mask_storeu_ps(y + i, lanes, v);
  }
}

}  // namespace activation_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
