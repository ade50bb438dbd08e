/// \file
/// \brief Private: float -> small float encoding in AVX2 integer intrinsics, 8 lanes of
/// `encode_lane` (convert_lanewise.hpp) operation for operation, compiled through a `target` attribute
/// so that every x86 build has it: `mixprec::convert` calls it, in a build without `-mavx512*`, for
/// every format except float16 (F16C's) when `mixprec::active_isa()` is at least `isa::avx2` at run
/// time (arch/detail/target.hpp: per-ISA namespace; only pointers and sizes cross from a caller of
/// another level). Users include `<mixprec/formats/convert.hpp>`.
///
/// Why intrinsics: GCC 12 vectorises the lane-wise loop only with 16-byte vectors and narrow stores
/// (about 1.5 ns per float8 element on Zen 4, no faster than scalar code); these 8 lanes take a few
/// tenths of that. The differences from the AVX-512 form (convert_x86.hpp), each exact:
///  - AVX2 compares only signed 32-bit lanes: every compared value is below 2^31 (magnitudes, and
///    encodings shifted right by at least one bit), where signed and unsigned order agree;
///  - the subnormal rounding is VROUNDPS with an immediate "nearest, no exceptions" (MXCSR.RC is not
///    read) of |x| * 2^(B + M - 1), exact as in the portable path (non-subnormal lanes scale 0), then a
///    truncating conversion of an integer-valued float. DAZ can only turn a float-subnormal |x| into 0,
///    and FTZ only flush a product below 2^-126: both then round to 0 in F, as they must.
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
namespace avx2 {

/// Whether this path encodes format F: every lane-wise format of one or two bytes but float16, which
/// F16C converts in hardware (convert_f16c.hpp).
template <float_format F>
inline constexpr bool handles = lanewise_supported<F>&& F != formats::float16&& F.bits() <= 16;

[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline __m256i splat(std::uint32_t v) noexcept {
  return _mm256_set1_epi32(static_cast<int>(v));
}

/// `mask ? if_set : if_clear` per 32-bit lane (mask lanes all ones or all zeros).
[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline __m256i select(__m256i mask, __m256i if_set,
                                                               __m256i if_clear) noexcept {
  return _mm256_blendv_epi8(if_clear, if_set, mask);
}

/// 8 lanes of `encode_lane<F, Mode>`: float bits in, pattern of F (zero-extended) out.
template <float_format F, overflow_mode Mode>
[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline __m256i encode8(__m256i u) noexcept {
  using C = encode_constants<F, Mode>;
  const __m256i one = splat(1U);
  const __m256i a = _mm256_and_si256(u, splat(float_bits::magnitude));
  const __m256i negative = _mm256_srai_epi32(u, 31);
  const __m256i rebiased = _mm256_sub_epi32(a, splat(C::rebias));
  const __m256i parity = _mm256_and_si256(_mm256_srli_epi32(rebiased, C::shift), one);
  __m256i mag = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(rebiased, splat(C::round_bias)), parity), C::shift);
  const __m256i subnormal = _mm256_cmpgt_epi32(splat(C::subnormal_below), a);
  if constexpr (F.has_zero && C::B == float_bits::exponent_bias) {
    // bfloat16: its subnormals are float's, and the normal formula above already rounds them.
  } else if constexpr (F.has_zero && C::subnormal_by_scaling) {
    const __m256 scaled = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(a, subnormal)),
                                        _mm256_castsi256_ps(splat(C::subnormal_scale)));
    const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    mag = select(subnormal, _mm256_cvttps_epi32(rounded), mag);
  } else {  // no zero (e8m0): |x| below 2^-126 becomes 2^-127 or 2^-126
    const __m256i up = _mm256_cmpgt_epi32(a, splat(C::no_zero_midpoint));
    mag = select(subnormal, _mm256_and_si256(up, one), mag);
  }
  __m256i r = mag;
  if constexpr (C::sign != 0U) r = _mm256_or_si256(mag, _mm256_and_si256(negative, splat(C::sign)));
  const __m256i overflow = _mm256_cmpgt_epi32(mag, splat(C::max_magnitude));
  r = select(overflow, select(negative, splat(C::overflow_neg), splat(C::overflow_pos)), r);
  if constexpr (F.nan == nan_encoding::negative_zero) {
    r = _mm256_andnot_si256(_mm256_cmpeq_epi32(mag, _mm256_setzero_si256()), r);  // no -0
  }
  if constexpr (!F.is_signed) r = select(negative, splat(C::negative_finite), r);
  const __m256i zero = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
  const __m256i not_finite = _mm256_cmpgt_epi32(a, splat(float_bits::infinity - 1U));
  if (!_mm256_testz_si256(_mm256_or_si256(zero, not_finite), _mm256_or_si256(zero, not_finite))) {
    // rare: 0, Inf or NaN in some lane
    r = select(zero, select(negative, splat(C::zero_neg), splat(C::zero_pos)), r);
    const __m256i inf = _mm256_cmpeq_epi32(a, splat(float_bits::infinity));
    r = select(inf, select(negative, splat(C::inf_neg), splat(C::inf_pos)), r);
    const __m256i nan = _mm256_cmpgt_epi32(a, splat(float_bits::infinity));
    r = select(nan, select(negative, splat(C::nan_neg), splat(C::nan_pos)), r);
  }
  return r;
}

/// The low 8 or 16 bits of the 8 lanes of `r` (each below 2^16), in lane order.
template <class To>
MIXPREC_TARGET_AVX2_INLINE inline void store8(To* out, __m256i r) noexcept {
  const __m128i halves = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  if constexpr (sizeof(To) == 1) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(halves, halves));
  } else {
    static_assert(sizeof(To) == 2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), halves);
  }
}

/// out[i] = encode<F>(in[i], Mode) for i < n, with To a 1- or 2-byte small float of format F.
template <class To, overflow_mode Mode>
MIXPREC_TARGET_AVX2 inline void encode(const float* in, To* out, std::size_t n) noexcept {
  constexpr float_format F = To::format;
  static_assert(handles<F>);
  static_assert(sizeof(To) == sizeof(typename To::storage_type), "a small float is its bit pattern");
  std::size_t i = 0;
  for (; n - i >= 8; i += 8) {
    store8(out + i, encode8<F, Mode>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
  if (i < n) {  // tail through a zero-padded buffer
    alignas(32) float buffer[8] = {};
    alignas(16) To result[8];
    for (std::size_t j = 0; j < n - i; ++j) buffer[j] = in[i + j];
    store8(result, encode8<F, Mode>(_mm256_load_si256(reinterpret_cast<const __m256i*>(buffer))));
    for (std::size_t j = 0; j < n - i; ++j) out[i + j] = result[j];
  }
}

}  // namespace avx2
}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail

#endif  // MIXPREC_X86_DISPATCH
