/// \file
/// \brief Private: the body of batch_norm_columns.hpp, compiled once per SIMD target
/// (foreach_target.hpp): `sums` and `apply` in namespace `batch_norm` of each target. Each lane does the
/// portable loops of kernels/batch_norm.hpp operation for operation (IEEE operations, each rounded
/// once, products kept apart from the additions that read them by `opaque`), so every width gives the
/// portable code's bits.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/batch_norm_columns.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS::batch_norm {

/// A vector of x (`lanes` elements at p) widened to float and rounded to C (`round<C>`, skipped where it
/// is exact: C float, or C = T); `t` < lanes: the first t elements, the other lanes 0.
template <class T, class C>
MIXPREC_SIMD_INLINE inline vf load_c(const T* p, std::size_t t = lanes) noexcept {
  const vf v = t == lanes ? load<vf, T>(p) : load_first<vf, T>(p, t);
  if constexpr (!std::is_same_v<C, float> && !std::is_same_v<C, T>) {
    return round<C>(v);
  } else {
    return v;
  }
}

/// float64 totals[0, lanes) += the lanes of v widened exactly (`t` < lanes: the first t only).
MIXPREC_SIMD_INLINE inline void add_to(double* totals, vf v, std::size_t t) noexcept {
  if (t == lanes) {
    constexpr std::size_t half = lanes / 2;
    store_doubles(totals, add(load_doubles(totals, vd{}), widen_lower(v)));
    store_doubles(totals + half, add(load_doubles(totals + half, vd{}), widen_upper(v)));
    return;
  }
  alignas(64) float lane[lanes];
  store<float>(lane, v);
  for (std::size_t c = 0; c < t; ++c) totals[c] += static_cast<double>(lane[c]);
}

/// The column sums of kernels::batch_norm_sums over `cols` columns of x (row stride `ld`): per column
/// j, d = x - shift[j]; blocks of `block` rows summed in float (Σd and Σ(d·d), from 0, in row order),
/// each block's two sums then added to the float64 totals s1[j], s2[j]; the last rows (fewer than a
/// block) added one by one in float64.
template <class T, class C, std::size_t block>
MIXPREC_SIMD_FN inline void sums(const T* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* shift,
                                 double* s1, double* s2) noexcept {
  std::size_t r0 = 0;
  for (; rows - r0 >= block; r0 += block) {
    const T* xb = x + r0 * ld;
    for (std::size_t j = 0; j < cols; j += lanes) {
      const std::size_t t = std::min(lanes, cols - j);
      const vf sh = t == lanes ? load<vf, float>(shift + j) : load_first<vf, float>(shift + j, t);
      vf t1 = zero<vf>();
      vf t2 = zero<vf>();
#pragma GCC unroll 8
      for (std::size_t k = 0; k < block; ++k) {
        const vf d = sub(load_c<T, C>(xb + k * ld + j, t), sh);
        t1 = add(t1, d);
        t2 = add(t2, opaque(mul(d, d)));
      }
      add_to(s1 + j, t1, t);
      add_to(s2 + j, t2, t);
    }
  }
  for (; r0 < rows; ++r0) {
    const T* xr = x + r0 * ld;
    for (std::size_t j = 0; j < cols; j += lanes) {
      const std::size_t t = std::min(lanes, cols - j);
      const vf sh = t == lanes ? load<vf, float>(shift + j) : load_first<vf, float>(shift + j, t);
      const vf d = sub(load_c<T, C>(xr + j, t), sh);
      add_to(s1 + j, d, t);
      add_to(s2 + j, mul(d, d), t);
    }
  }
}

/// The normalisation of kernels::batch_norm_apply over `rows` rows of n elements: d = (x - mean) -
/// corr, y = round_to<O>(d · mult + bias) (the product rounded on its own), x̂ = d · rstd when `xhat`
/// is not null.
template <class T, class C, class O>
MIXPREC_SIMD_FN inline void apply(const T* x, std::size_t rows, std::size_t n, const float* mean, const float* corr,
                                  const float* mult, const float* bias, const float* rstd, O* y, float* xhat) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    O* yr = y + r * n;
    float* hr = xhat != nullptr ? xhat + r * n : nullptr;
    std::size_t j = 0;
    for (; n - j >= lanes; j += lanes) {
      const vf d = sub(sub(load_c<T, C>(xr + j), load<vf, float>(mean + j)), load<vf, float>(corr + j));
      store<O>(yr + j, add(opaque(mul(d, load<vf, float>(mult + j))), load<vf, float>(bias + j)));
      if (hr != nullptr) store<float>(hr + j, mul(d, load<vf, float>(rstd + j)));
    }
    if (j < n) {
      const std::size_t t = n - j;
      const vf d =
          sub(sub(load_c<T, C>(xr + j, t), load_first<vf, float>(mean + j, t)), load_first<vf, float>(corr + j, t));
      store_first<O>(yr + j,
                     add(opaque(mul(d, load_first<vf, float>(mult + j, t))), load_first<vf, float>(bias + j, t)), t);
      if (hr != nullptr) store_first<float>(hr + j, mul(d, load_first<vf, float>(rstd + j, t)), t);
    }
  }
}

}  // namespace MIXPREC_SIMD_NS::batch_norm

#endif  // MIXPREC_SIMD_NS
