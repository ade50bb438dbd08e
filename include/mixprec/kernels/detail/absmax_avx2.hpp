/// \file
/// \brief Private: the largest |x| of float data in AVX2 (`absmax_avx2::absmax_bits`), chosen at run
/// time by `kernels::absmax` for contiguous float ranges. It reduces the *bit patterns* of |x| with
/// unsigned 32-bit maxima: for floats without their sign, the order of the patterns is the numeric
/// order, +Inf (0x7F800000) is above every finite pattern and every NaN pattern above +Inf, so one
/// integer maximum gives the exact absmax, or tells that a NaN is present. No rounding, no MXCSR
/// dependence (denormals-are-zero does not touch integer lanes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mixprec/arch/detail/target.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace absmax_avx2 {

/// The largest of the 8 unsigned 32-bit lanes of `m`.
[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline std::uint32_t horizontal_max(__m256i m) noexcept {
  const __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  const __m128i q = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4E));
  const __m128i r = _mm_max_epu32(q, _mm_shuffle_epi32(q, 0xB1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(r));
}

/// max over i < n of (bits(x[i]) & 0x7FFFFFFF): above 0x7F800000 when some x[i] is NaN; 0 for n = 0.
MIXPREC_TARGET_AVX2 inline std::uint32_t absmax_bits(const float* x, std::size_t n) noexcept {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; n - i >= 16; i += 16) {  // two accumulators hide the latency of the maxima
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8));
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(a, magnitude));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(b, magnitude));
  }
  std::uint32_t best = horizontal_max(_mm256_max_epu32(m0, m1));
  for (; i < n; ++i) {
    std::uint32_t u = 0;
    std::memcpy(&u, x + i, sizeof u);
    u &= 0x7FFFFFFFU;
    best = u > best ? u : best;
  }
  return best;
}

}  // namespace absmax_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
