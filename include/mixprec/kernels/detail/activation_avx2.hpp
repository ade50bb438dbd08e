/// \file
/// \brief Private: the AVX2 + FMA kernel of the element-wise sigmoid, SiLU, tanh-GELU and erf-GELU and
/// their derivatives (optionally times a gate: SwiGLU's and GEGLU's products, and the backward's) on
/// float32 values, compiled through a `target` attribute and called only when `mixprec::active_isa()`
/// is at least `isa::avx2` (kernels/detail/activation_rows.hpp).
///
/// The logistic kinds: each lane evaluates the scalar formula of kernels/activations.hpp operation for
/// operation, with exp_avx2::exp8 for `std::exp`: the activations as `x / (1 + e^-z)`, z = x (SiLU;
/// sigmoid with 1 for the numerator) or 2 sqrt(2/pi) (x + 0.044715 x^3) (tanh-GELU, the cube and the
/// sums in the scalar code's order), the derivatives from e = e^-|z| without cancellation. Every other
/// operation is one IEEE operation rounded alike, so a result differs from the scalar one only through
/// exp8's error (at most 2 ulp against the exact exp, where glibc's expf is within 1), which the error
/// statements of activations.hpp already allow for. Infinities and NaN follow the formulas as the
/// scalar code does (exp8 gives +Inf above its overflow bound, +0 below its underflow bound and keeps NaN).
///
/// erf-GELU and its derivative have no vectorised `std::erfc` to follow: `gelu_erf_parts` evaluates
/// erfc(-x / sqrt 2) from its own approximation (erfc_fit.hpp) and e^(-x^2 / 2) with x^2 split exactly
/// by an FMA, so neither carries the rounding of -x / sqrt 2 into the exponent, as the scalar form
/// does (its error grows as x^2 there; this one stays within 15 units of 2^-24 over the whole range,
/// tests/kernels/activations_test.cpp).
#pragma once

#include <cstddef>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/detail/erfc_fit.hpp"
#include "mixprec/kernels/detail/exp_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace activation_avx2 {

using kernels::activation_kind;

/// tanh-GELU's y = sqrt(2/pi) (x + 0.044715 x^3) of 8 floats, the scalar code's operations in its order.
MIXPREC_TARGET_AVX2_INLINE inline __m256 gelu_tanh_y8(__m256 x) noexcept {
  const __m256 cube = _mm256_mul_ps(
      _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(static_cast<float>(kernels::detail::gelu_tanh_cubic)), x), x), x);
  return _mm256_mul_ps(_mm256_set1_ps(static_cast<float>(kernels::detail::gelu_tanh_scale)), _mm256_add_ps(x, cube));
}

/// The derivatives' shared part, from e = e^-|z| (activations.hpp's sigmoid_product_op and the
/// sigmoid by sign): s = (z >= 0 ? 1 : e) / (1 + e) and q = e / (1 + e)^2.
struct sigmoid_parts8 {
  __m256 s, q;
};
MIXPREC_TARGET_AVX2_INLINE inline sigmoid_parts8 sigmoid_parts(__m256 z, __m256 e) noexcept {
  const __m256 one = _mm256_set1_ps(1.0F);
  const __m256 d = _mm256_add_ps(one, e);
  // z >= 0 is false for NaN: e / (1 + e), NaN, as the scalar code's else branch.
  const __m256 numerator = _mm256_blendv_ps(e, one, _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ));
  return {_mm256_div_ps(numerator, d), _mm256_div_ps(e, _mm256_mul_ps(d, d))};
}

/// r, with x's lanes that are NaN instead (quietened, sign and payload kept): erf-GELU combines NaNs of
/// both signs (x and |x|), and which one an operation returns depends on its operands' order, which the
/// compiler may swap in a commutative one; this fixes the result's bits on every level.
MIXPREC_TARGET_AVX2_INLINE inline __m256 nan_as_input(__m256 x, __m256 r) noexcept {
  return _mm256_blendv_ps(r, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/// erf-GELU's parts of 8 floats: erfc(-x / sqrt 2) and e = e^(-x^2 / 2).
struct gelu_erf_parts8 {
  __m256 erfc, e;
};
/// With a = |x| / sqrt 2 (|x| clamped to erfc_fit_clamp, NaN kept): e = e^(-h/2) (1 - l/2) for
/// x^2 = h + l exactly (h = x·x rounded, l = fma(x, x, -h)); erfc(a) = e (1 + s P(s - m)) / (1 + 2a),
/// s = 2a / (a + k) (erfc_fit.hpp); erfc(-a) = 2 - erfc(a) for x > 0 (above 1: no cancellation).
MIXPREC_TARGET_AVX2_INLINE inline gelu_erf_parts8 gelu_erf_parts(__m256 x) noexcept {
  const __m256 one = _mm256_set1_ps(1.0F);
  const __m256 minus_half = _mm256_set1_ps(-0.5F);
  // min returns its second operand for a NaN one: NaN stays NaN through to the results.
  const __m256 ax =
      _mm256_min_ps(_mm256_set1_ps(kernels::detail::erfc_fit_clamp), _mm256_andnot_ps(_mm256_set1_ps(-0.0F), x));
  const __m256 h = _mm256_mul_ps(ax, ax);
  const __m256 l = _mm256_fmsub_ps(ax, ax, h);
  const __m256 e_h = exp_avx2::exp8(_mm256_mul_ps(minus_half, h));
  const __m256 e = _mm256_fmadd_ps(e_h, _mm256_mul_ps(minus_half, l), e_h);
  const __m256 a = _mm256_mul_ps(ax, _mm256_set1_ps(static_cast<float>(kernels::detail::gelu_erf_scale)));
  const __m256 s = _mm256_div_ps(_mm256_add_ps(a, a), _mm256_add_ps(a, _mm256_set1_ps(kernels::detail::erfc_fit_k)));
  const __m256 u = _mm256_sub_ps(s, _mm256_set1_ps(kernels::detail::erfc_fit_centre));
  constexpr auto& c = kernels::detail::erfc_fit_coefficients;
  __m256 p = _mm256_set1_ps(c.back());
  for (std::size_t i = c.size() - 1; i-- > 0;) p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(c[i]));
  const __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, _mm256_add_ps(a, a)));
  const __m256 tail = _mm256_mul_ps(e, _mm256_fmadd_ps(_mm256_mul_ps(s, p), r, r));  // erfc(a)
  const __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  return {_mm256_blendv_ps(tail, _mm256_sub_ps(_mm256_set1_ps(2.0F), tail), positive), e};
}

/// The activation or derivative K of 8 floats, in float32 (see the file comment).
template <activation_kind K>
MIXPREC_TARGET_AVX2_INLINE inline __m256 activation8(__m256 x) noexcept {
  const __m256 one = _mm256_set1_ps(1.0F);
  const __m256 sign = _mm256_set1_ps(-0.0F);
  if constexpr (K == activation_kind::gelu_tanh) {
    const __m256 y = gelu_tanh_y8(x);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp_avx2::exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0F), y))));
  } else if constexpr (K == activation_kind::sigmoid_derivative) {
    return sigmoid_parts(x, exp_avx2::exp8(_mm256_or_ps(x, sign))).q;  // e^-|x|: the sign bit set
  } else if constexpr (K == activation_kind::silu_derivative) {
    const __m256 e = exp_avx2::exp8(_mm256_or_ps(x, sign));
    const sigmoid_parts8 p = sigmoid_parts(x, e);
    // e = 0 (|x| huge or Inf): s alone, not s + Inf · 0.
    return _mm256_blendv_ps(_mm256_add_ps(p.s, _mm256_mul_ps(x, p.q)), p.s,
                            _mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_EQ_OQ));
  } else if constexpr (K == activation_kind::gelu_tanh_derivative) {
    const __m256 y = gelu_tanh_y8(x);
    // e^-2|y|: -2 |y| as the scalar A{-2} * std::abs(y).
    const __m256 e = exp_avx2::exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0F), _mm256_andnot_ps(sign, y)));
    const sigmoid_parts8 p = sigmoid_parts(y, e);
    const __m256 three_a_x2 =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(static_cast<float>(3.0 * kernels::detail::gelu_tanh_cubic)), x), x);
    const __m256 slope = _mm256_mul_ps(_mm256_set1_ps(static_cast<float>(2.0 * kernels::detail::gelu_tanh_scale)),
                                       _mm256_add_ps(one, three_a_x2));
    return _mm256_blendv_ps(_mm256_add_ps(p.s, _mm256_mul_ps(_mm256_mul_ps(x, p.q), slope)), p.s,
                            _mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_EQ_OQ));
  } else if constexpr (K == activation_kind::gelu_erf) {
    return nan_as_input(x, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5F), x), gelu_erf_parts(x).erfc));
  } else if constexpr (K == activation_kind::gelu_erf_derivative) {
    const gelu_erf_parts8 p = gelu_erf_parts(x);
    const __m256 cdf = _mm256_mul_ps(_mm256_set1_ps(0.5F), p.erfc);
    const __m256 pdf = _mm256_mul_ps(p.e, _mm256_set1_ps(static_cast<float>(kernels::detail::normal_density_scale)));
    // pdf = 0 (|x| huge or Inf): cdf alone, not cdf + Inf · 0.
    return nan_as_input(x, _mm256_blendv_ps(_mm256_add_ps(cdf, _mm256_mul_ps(x, pdf)), cdf,
                                            _mm256_cmp_ps(pdf, _mm256_setzero_ps(), _CMP_EQ_OQ)));
  } else {
    // -x by the sign bit: exact, as the scalar negation.
    const __m256 e = exp_avx2::exp8(_mm256_xor_ps(x, sign));
    return _mm256_div_ps(K == activation_kind::sigmoid ? one : x, _mm256_add_ps(one, e));
  }
}

/// The lane mask of the first t (< 8) lanes, for masked loads and stores.
MIXPREC_TARGET_AVX2_INLINE inline __m256i first_lanes(std::size_t t) noexcept {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(t)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// y[i] = act_K(x[i]), times gate[i] (one more float32 product) when `gate` is not null, for i < n.
/// y may be x (in place); nothing past n is read or written.
template <activation_kind K>
MIXPREC_TARGET_AVX2 inline void activation_row(const float* x, const float* gate, float* y, std::size_t n) noexcept {
  std::size_t i = 0;
  if (gate != nullptr) {
    for (; n - i >= 8; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_mul_ps(activation8<K>(_mm256_loadu_ps(x + i)), _mm256_loadu_ps(gate + i)));
    }
  } else {
    for (; n - i >= 8; i += 8) _mm256_storeu_ps(y + i, activation8<K>(_mm256_loadu_ps(x + i)));
  }
  if (i < n) {
    const __m256i lanes = first_lanes(n - i);
    __m256 v = activation8<K>(_mm256_maskload_ps(x + i, lanes));
    if (gate != nullptr) v = _mm256_mul_ps(v, _mm256_maskload_ps(gate + i, lanes));
    _mm256_maskstore_ps(y + i, lanes, v);
  }
}

}  // namespace activation_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
