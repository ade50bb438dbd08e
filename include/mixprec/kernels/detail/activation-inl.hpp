/// \file
/// \brief Private: the body of activation.hpp's kernels, compiled once per SIMD target
/// (foreach_target.hpp); `apply<K>` takes the 8-lane `vf8` or the target's `vf`.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/activation.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS::activation {

using kernels::activation_kind;

/// tanh-GELU's y = sqrt(2/pi) (x + 0.044715 x^3), the scalar code's operations in its order.
template <class V>
MIXPREC_SIMD_INLINE inline V gelu_tanh_y(V x) noexcept {
  const V cube = mul(mul(mul(set<V>(static_cast<float>(kernels::detail::gelu_tanh_cubic)), x), x), x);
  return mul(set<V>(static_cast<float>(kernels::detail::gelu_tanh_scale)), add(x, cube));
}

/// The derivatives' shared part, from e = e^-|z| (activations.hpp's sigmoid_product_op and the
/// sigmoid by sign): s = (z >= 0 ? 1 : e) / (1 + e) and q = e / (1 + e)^2.
template <class V>
struct sigmoid_pair {
  V s, q;
};
template <class V>
MIXPREC_SIMD_INLINE inline sigmoid_pair<V> sigmoid_parts(V z, V e) noexcept {
  const V one = set<V>(1.0F);
  const V d = add(one, e);
  // z >= 0 is false for NaN: e / (1 + e), NaN, as the scalar code's else branch.
  const V numerator = select(ge(z, zero<V>()), one, e);
  return {div(numerator, d), div(e, mul(d, d))};
}

/// r, with x's lanes that are NaN instead (quietened, sign and payload kept): erf-GELU combines NaNs of
/// both signs (x and |x|), and which one an operation returns depends on its operands' order, which the
/// compiler may swap in a commutative one; this fixes the result's bits on every level.
template <class V>
MIXPREC_SIMD_INLINE inline V nan_as_input(V x, V r) noexcept {
  return select(is_nan(x), add(x, x), r);
}

/// erf-GELU's parts: erfc(-x / sqrt 2) and e = e^(-x^2 / 2).
template <class V>
struct gelu_erf_pair {
  V erfc, e;
};
/// With a = |x| / sqrt 2 (|x| clamped to erfc_fit_clamp, NaN kept): e = e^(-h/2) (1 - l/2) for
/// x^2 = h + l exactly (h = x·x rounded, l = fma(x, x, -h)); erfc(a) = e (1 + s P(s - m)) / (1 + 2a),
/// s = 2a / (a + k) (erfc_fit.hpp); erfc(-a) = 2 - erfc(a) for x > 0 (above 1: no cancellation).
template <class V>
MIXPREC_SIMD_INLINE inline gelu_erf_pair<V> gelu_erf_parts(V x) noexcept {
  const V one = set<V>(1.0F);
  const V minus_half = set<V>(-0.5F);
  // min returns its second operand for a NaN one: NaN stays NaN through to the results.
  const V ax = min(set<V>(kernels::detail::erfc_fit_clamp), abs(x));
  const V h = mul(ax, ax);
  const V l = fmsub(ax, ax, h);
  const V e_h = exp(mul(minus_half, h));
  const V e = fmadd(e_h, mul(minus_half, l), e_h);
  const V a = mul(ax, set<V>(static_cast<float>(kernels::detail::gelu_erf_scale)));
  const V s = div(add(a, a), add(a, set<V>(kernels::detail::erfc_fit_k)));
  const V u = sub(s, set<V>(kernels::detail::erfc_fit_centre));
  constexpr auto& c = kernels::detail::erfc_fit_coefficients;
  V p = set<V>(c.back());
  for (std::size_t i = c.size() - 1; i-- > 0;) p = fmadd(p, u, set<V>(c[i]));
  const V r = div(one, add(one, add(a, a)));
  const V tail = mul(e, fmadd(mul(s, p), r, r));  // erfc(a)
  return {select(gt(x, zero<V>()), sub(set<V>(2.0F), tail), tail), e};
}

/// The activation or derivative K of each lane, in float32 (activation.hpp's formulas).
template <activation_kind K, class V>
MIXPREC_SIMD_INLINE inline V apply(V x) noexcept {
  const V one = set<V>(1.0F);
  if constexpr (K == activation_kind::gelu_tanh) {
    return div(x, add(one, exp(mul(set<V>(-2.0F), gelu_tanh_y(x)))));
  } else if constexpr (K == activation_kind::sigmoid_derivative) {
    return sigmoid_parts(x, exp(minus_abs(x))).q;  // e^-|x|
  } else if constexpr (K == activation_kind::silu_derivative) {
    const V e = exp(minus_abs(x));
    const sigmoid_pair<V> p = sigmoid_parts(x, e);
    // e = 0 (|x| huge or Inf): s alone, not s + Inf · 0.
    return select(eq(e, zero<V>()), p.s, add(p.s, mul(x, p.q)));
  } else if constexpr (K == activation_kind::gelu_tanh_derivative) {
    const V y = gelu_tanh_y(x);
    // e^-2|y|: -2 |y| (the scalar A{-2} * std::abs(y) but for a zero's sign: the same exp) as
    // min(-2y, 2y), whose NaN is y's: every NaN below is then x's, in any operand order.
    const V e = exp(min(mul(set<V>(-2.0F), y), mul(set<V>(2.0F), y)));
    const sigmoid_pair<V> p = sigmoid_parts(y, e);
    const V three_a_x2 = mul(mul(set<V>(static_cast<float>(3.0 * kernels::detail::gelu_tanh_cubic)), x), x);
    const V slope = mul(set<V>(static_cast<float>(2.0 * kernels::detail::gelu_tanh_scale)), add(one, three_a_x2));
    return select(eq(e, zero<V>()), p.s, add(p.s, mul(mul(x, p.q), slope)));
  } else if constexpr (K == activation_kind::gelu_erf) {
    return nan_as_input(x, mul(mul(set<V>(0.5F), x), gelu_erf_parts(x).erfc));
  } else if constexpr (K == activation_kind::gelu_erf_derivative) {
    const gelu_erf_pair<V> p = gelu_erf_parts(x);
    const V cdf = mul(set<V>(0.5F), p.erfc);
    const V pdf = mul(p.e, set<V>(static_cast<float>(kernels::detail::normal_density_scale)));
    // pdf = 0 (|x| huge or Inf): cdf alone, not cdf + Inf · 0.
    return nan_as_input(x, select(eq(pdf, zero<V>()), cdf, add(cdf, mul(x, pdf))));
  } else {
    // -x by the sign bit: exact, as the scalar negation.
    return div(K == activation_kind::sigmoid ? one : x, add(one, exp(negate(x))));
  }
}

/// y[i] = act_K(x[i]), times gate[i] (one more float32 product) when `gate` is not null, for i < n.
/// y may be x or gate (in place); nothing past n is read or written.
template <activation_kind K>
MIXPREC_SIMD_FN inline void row(const float* x, const float* gate, float* y, std::size_t n) noexcept {
  std::size_t i = 0;
  if (gate != nullptr) {
    for (; n - i >= lanes; i += lanes) store(y + i, mul(apply<K>(load<vf>(x + i)), load<vf>(gate + i)));
  } else {
    for (; n - i >= lanes; i += lanes) store(y + i, apply<K>(load<vf>(x + i)));
  }
  if (i < n) {
    const std::size_t t = n - i;
    vf v = apply<K>(load_first<vf>(x + i, t));
    if (gate != nullptr) v = mul(v, load_first<vf>(gate + i, t));
    store_first(y + i, v, t);
  }
}

}  // namespace MIXPREC_SIMD_NS::activation

#endif  // MIXPREC_SIMD_NS
