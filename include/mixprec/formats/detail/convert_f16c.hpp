/// \file
/// \brief Private: float <-> float16 with F16C (VCVTPS2PH / VCVTPH2PS, 8 lanes), compiled through a
/// `target` attribute so that every x86 build has it: `mixprec::convert` calls it when the compiler
/// targets F16C (-mf16c, -march=...) and, in a build without such flags, when `mixprec::active_isa()`
/// is at least `isa::avx2` at run time (arch/detail/target.hpp: per-ISA namespace, only pointers and
/// sizes cross from a caller of another level). Results are bit-identical to the scalar codec: see
/// convert_x86.hpp for how NaN and saturation lanes are repaired. Users include
/// `<mixprec/formats/convert.hpp>`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/detail/convert_lanewise.hpp"
#include "mixprec/formats/float_format.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

namespace mixprec::detail {
inline namespace MIXPREC_DETAIL_CONVERT_ISA {
namespace f16c {

/// Encodes 8 floats into float16 with VCVTPS2PH, then repairs NaN lanes (canonical quiet NaN with
/// the input's sign) and, when saturating, Inf lanes (+-max).
template <overflow_mode Mode>
[[nodiscard]] MIXPREC_TARGET_AVX2 inline __m128i encode8_float16(__m256 v) noexcept {
  using C = encode_constants<formats::float16, Mode>;
  static_assert(C::nan_neg == (C::nan_pos | C::sign) && C::overflow_neg == (C::overflow_pos | C::sign) &&
                C::inf_neg == (C::inf_pos | C::sign));
  const auto s16 = [](std::uint32_t bits) { return _mm_set1_epi16(static_cast<short>(bits)); };
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  const __m128i sign = _mm_and_si128(h, s16(C::sign));  // VCVTPS2PH keeps the sign of every input
  if constexpr (Mode == overflow_mode::saturate) {
    // Inf results come from Inf or overflowing inputs only; NaN results are not Inf patterns.
    const __m128i inf = _mm_cmpeq_epi16(_mm_andnot_si128(s16(C::sign), h), s16(formats::float16.exponent_mask()));
    h = _mm_blendv_epi8(h, _mm_or_si128(sign, s16(C::overflow_pos)), inf);
  }
  const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extractf128_si256(nan32, 1));
  return _mm_blendv_epi8(h, _mm_or_si128(sign, s16(C::nan_pos)), nan);
}

template <class To, overflow_mode Mode>
MIXPREC_TARGET_AVX2 inline void encode(const float* in, To* out, std::size_t n) noexcept {
  static_assert(To::format == formats::float16);
  std::size_t i = 0;
  for (; n - i >= 8; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), encode8_float16<Mode>(_mm256_loadu_ps(in + i)));
  }
  if (i < n) {  // tail through a zero-padded buffer
    alignas(32) float buffer[8] = {};
    alignas(16) std::uint16_t result[8];
    for (std::size_t j = 0; j < n - i; ++j) buffer[j] = in[i + j];
    _mm_store_si128(reinterpret_cast<__m128i*>(result), encode8_float16<Mode>(_mm256_load_ps(buffer)));
    for (std::size_t j = 0; j < n - i; ++j) out[i + j] = To::from_bits(result[j]);
  }
}

template <class From>
MIXPREC_TARGET_AVX2 inline void decode(const From* in, float* out, std::size_t n) noexcept {
  static_assert(From::format == formats::float16);
  std::size_t i = 0;
  for (; n - i >= 8; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  if (i < n) {
    alignas(16) std::uint16_t buffer[8] = {};
    alignas(32) float result[8];
    for (std::size_t j = 0; j < n - i; ++j) buffer[j] = in[i + j].bits();
    _mm256_store_ps(result, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buffer))));
    for (std::size_t j = 0; j < n - i; ++j) out[i + j] = result[j];
  }
}

}  // namespace f16c
}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail

#endif  // MIXPREC_X86_DISPATCH
