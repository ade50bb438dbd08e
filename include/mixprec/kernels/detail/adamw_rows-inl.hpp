/// \file
/// \brief Private: the body of adamw_rows.hpp's row, compiled once per SIMD target (foreach_target.hpp).
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/adamw_rows.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS::adamw {

/// One AdamW step of `lanes` elements: kernels/adamw_element.hpp's `adamw_element`, operation for operation
/// (`Small`: the lerp's form for |w1| < 0.5), no operation fused.
template <bool Small, class V>
MIXPREC_SIMD_INLINE inline void step(float* theta, const float* grad, float* m, float* v,
                                     const kernels::adamw_coefficients<float>& c) noexcept {
  const V g = load<V>(grad);
  const V mi = load<V>(m);
  const V w1 = set<V>(c.w1);
  // Every product that an addition reads goes through `opaque`, so that none is fused into an FMA.
  const V m_new = Small ? add(mi, opaque(mul(w1, sub(g, mi)))) : sub(g, opaque(mul(sub(g, mi), set<V>(1.0F - c.w1))));
  const V v_new = add(opaque(mul(load<V>(v), set<V>(c.beta2))), opaque(mul(mul(set<V>(c.w2), g), g)));
  const V denom = add(div(sqrt(v_new), set<V>(c.bias_correction2_sqrt)), set<V>(c.eps));
  const V t = opaque(mul(load<V>(theta), set<V>(c.decay_factor)));
  store(theta, add(t, div(mul(set<V>(-c.step_size), m_new), denom)));
  store(m, m_new);
  store(v, v_new);
}

/// AdamW over n elements: whole vectors, then 8-lane vectors, then one 8-lane vector for the last
/// (fewer than 8) elements. Every element is independent, so every width gives the same bits.
MIXPREC_SIMD_FN inline void row(float* theta, const float* grad, float* m, float* v, std::size_t n,
                                const kernels::adamw_coefficients<float>& c) noexcept {
  const bool small = c.w1 < 0.5F && c.w1 > -0.5F;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    if (small) {
      step<true, vf>(theta + i, grad + i, m + i, v + i, c);
    } else {
      step<false, vf>(theta + i, grad + i, m + i, v + i, c);
    }
  }
  if constexpr (lanes > 8) {
    for (; i + 8 <= n; i += 8) {
      if (small) {
        step<true, vf8>(theta + i, grad + i, m + i, v + i, c);
      } else {
        step<false, vf8>(theta + i, grad + i, m + i, v + i, c);
      }
    }
  }
  if (i < n) {
    // The last (fewer than 8) elements through an 8-lane step on copies (zeros after them), not through
    // scalar code, which the compiler could contract into FMAs in this function.
    const std::size_t t = n - i;
    float tail[4][8] = {};
    std::copy_n(theta + i, t, tail[0]);
    std::copy_n(grad + i, t, tail[1]);
    std::copy_n(m + i, t, tail[2]);
    std::copy_n(v + i, t, tail[3]);
    if (small) {
      step<true, vf8>(tail[0], tail[1], tail[2], tail[3], c);
    } else {
      step<false, vf8>(tail[0], tail[1], tail[2], tail[3], c);
    }
    std::copy_n(tail[0], t, theta + i);
    std::copy_n(tail[2], t, m + i);
    std::copy_n(tail[3], t, v + i);
  }
}

}  // namespace MIXPREC_SIMD_NS::adamw

#endif  // MIXPREC_SIMD_NS
