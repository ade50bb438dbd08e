/// \file
/// \brief Private: the scaling pass of float8 quantisation in AVX2 (`quantise_avx2::scale_block`),
/// chosen at run time by `kernels::quantise_by_scale` (kernels/quantise.hpp): per element, |x|'s pattern into an
/// integer maximum (absmax, NaN detected: kernels/detail/absmax_avx2.hpp explains why patterns order
/// like values), a count of the finite elements above the bound, and x · mult clamped to ±M for finite
/// x (NaN and Inf pass through). The same values as the portable loop: one float multiplication,
/// min/max are exact, and MXCSR only matters to the multiplication, as in the portable loop.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/absmax_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace quantise_avx2 {

/// out[i] = finite(x[i]) ? clamp(x[i] * mult, -m, m) : x[i] * mult for i < n (n a multiple of 8);
/// returns in `absmax_bits` the max with the patterns of |x[i]| and adds to `clips` the finite |x[i]|
/// above `bound`.
MIXPREC_TARGET_AVX2 inline void scale_block(const float* x, std::size_t n, float mult, float bound, float m, float* out,
                                            std::uint32_t& absmax_bits, std::size_t& clips) noexcept {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i infinity = _mm256_set1_epi32(0x7F800000);
  const __m256 vmult = _mm256_set1_ps(mult), vbound = _mm256_set1_ps(bound);
  const __m256 hi = _mm256_set1_ps(m), lo = _mm256_set1_ps(-m);
  __m256i amax = _mm256_set1_epi32(static_cast<int>(absmax_bits));
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), magnitude);
    amax = _mm256_max_epu32(amax, a);
    const __m256i finite = _mm256_cmpgt_epi32(infinity, a);  // patterns below +Inf's (signed: all < 2^31)
    const __m256 above = _mm256_cmp_ps(_mm256_castsi256_ps(a), vbound, _CMP_GT_OQ);
    const int clipped = _mm256_movemask_ps(_mm256_and_ps(above, _mm256_castsi256_ps(finite)));
    count += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(clipped)));
    const __m256 p = _mm256_mul_ps(v, vmult);
    const __m256 c = _mm256_min_ps(_mm256_max_ps(p, lo), hi);
    _mm256_storeu_ps(out + i, _mm256_blendv_ps(p, c, _mm256_castsi256_ps(finite)));
  }
  absmax_bits = absmax_avx2::horizontal_max(amax);
  clips += count;
}

}  // namespace quantise_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
