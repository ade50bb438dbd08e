/// \file
/// \brief Private: the body of exp.hpp's vectorised exp, compiled once per SIMD target
/// (foreach_target.hpp); each function takes the 8-lane `vf8` or the target's `vf`.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/exp.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS {

/// exp(r) for r = x - k ln 2 (|r| <= ln 2 / 2): the reduction and polynomial of exp.hpp's comment.
template <class V>
MIXPREC_SIMD_INLINE inline V reduced_exp(V x, V k) noexcept {
  using namespace exp_constants;
  V r = fnmadd(k, set<V>(ln2_hi), x);
  r = fnmadd(k, set<V>(ln2_lo), r);
  V p = set<V>(taylor[7]);
#pragma GCC unroll 7
  for (int i = 6; i >= 0; --i) p = fmadd(p, r, set<V>(taylor[i]));
  return p;
}

/// exp(x) for x <= 0 or -Inf, never NaN (the x_j - max of a softmax row without NaN or +Inf): `exp`
/// without its overflow and NaN masks, which no such x reaches (the same bits there).
template <class V>
MIXPREC_SIMD_INLINE inline V exp_shifted(V x) noexcept {
  const V k = round_nearest(mul(x, set<V>(std::numbers::log2e_v<float>)));
  return zero_where(lt(x, set<V>(exp_constants::underflow_below)), mul_pow2(reduced_exp(x, k), k));
}

/// exp(x) (exp.hpp's error): `exp_shifted` with +Inf above the overflow bound and x itself for NaN.
template <class V>
MIXPREC_SIMD_INLINE inline V exp(V x) noexcept {
  const V y = select(gt(x, set<V>(exp_constants::overflow_above)), set<V>(std::numeric_limits<float>::infinity()),
                     exp_shifted(x));
  return select(is_nan(x), x, y);  // NaN in, NaN out
}

/// exp(x) for x <= 0 (or -Inf), for the weights of an online softmax: exp's reduction and polynomial
/// (the same error, at most 2 ulp, for results that are normal floats), with the shortcuts that domain
/// allows — k = round(x / ln 2) by the 1.5 · 2^23 rounding trick, one scaling by 2^k (k >= -126, a
/// normal power of two) — and +0 for x < ln(2^-126) (-Inf included), where exp(x) is not a normal
/// float: a weight below 2^-126 next to the maximum's weight 1 changes no normalised output. NaN gives
/// NaN (the online softmax meets one when a score is +Inf: +Inf - +Inf). About 17 vector operations
/// per vector instead of exp's 30. Positive x is outside the contract.
template <class V>
MIXPREC_SIMD_INLINE inline V exp_nonpositive(V x) noexcept {
  constexpr float round_magic = 12582912.0F;  // 1.5 * 2^23: t = x / ln 2 + magic holds round(x / ln 2)
  const V bound = set<V>(exp_constants::normal_below);
  // max(bound, x) returns its second operand for a NaN x: NaN stays NaN through to the result.
  const V xc = max(bound, x);
  const V t = fmadd(xc, set<V>(std::numbers::log2e_v<float>), set<V>(round_magic));
  const V p = reduced_exp(xc, sub(t, set<V>(round_magic)));
  // t's low mantissa bits hold k (two's complement, offset by the magic's 2^22, which the shift drops):
  // (k << 23) + (127 << 23) is the pattern of 2^k, normal for k in [-126, 0].
  const V scale = from_bits(add(shift_left<23>(bits(t)), set_int<V>(127 << 23)));
  // A NaN x gives x's NaN, quieted (x + x), at every width and whatever order a compiler gives the
  // NaN operands of the product (p and, from t's bits, possibly scale).
  return select(is_nan(x), add(x, x), zero_where(lt(x, bound), mul(p, scale)));
}

}  // namespace MIXPREC_SIMD_NS

#endif  // MIXPREC_SIMD_NS
