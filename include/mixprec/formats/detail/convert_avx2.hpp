/// \file
/// \brief Private: float <-> small float in AVX2 integer intrinsics, 8 lanes of `encode_lane` and
/// `decode_lane` (convert_lanewise.hpp) operation for operation, compiled through a `target` attribute
/// so that every x86 build has it: `mixprec::convert` calls it, in a build without `-mavx512*`, for
/// every format except float16 (F16C's) when `mixprec::active_isa()` is at least `isa::avx2` at run
/// time (arch/detail/target.hpp: per-ISA namespace; only pointers and sizes cross from a caller of
/// another level); decoding the same way, where it replaces the portable loops (a 256-entry table for
/// 8-bit formats, the lane-wise decoder for bfloat16). Users include `<mixprec/formats/convert.hpp>`.
///
/// Why intrinsics: GCC 12 vectorises the lane-wise loop only with 16-byte vectors and narrow stores
/// (no faster than scalar code); these 8 lanes take a fraction of its time (measured: docs/conversions.md,
/// "Which instructions"). The differences from the AVX-512 form (convert_x86.hpp), each exact:
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
  if constexpr (F == formats::bfloat16 && Mode == overflow_mode::to_inf_or_nan) {
    // bfloat16 is float's top half: round to nearest even on the bits, (u + 0x7FFF + lsb) >> 16, which
    // also rounds subnormals right, carries a rounded-up maximum into the exponent (Inf), and keeps Inf
    // and the zeros; only NaN (which the carry could turn into Inf) needs the canonical quiet NaN with
    // the input's sign. The general form below gives the same bits in more operations.
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, C::shift), one);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, splat(C::round_bias)), lsb), C::shift);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, splat(float_bits::magnitude)), splat(float_bits::infinity));
    return select(nan, select(_mm256_srai_epi32(u, 31), splat(C::nan_neg), splat(C::nan_pos)), rounded);
  }
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
  if constexpr (sizeof(To) == 2) {  // 16 per trip: one pack and one 32-byte store
    for (; n - i >= 16; i += 16) {
      const __m256i a = encode8<F, Mode>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
      const __m256i b = encode8<F, Mode>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
      // packus interleaves 128-bit halves (a.lo b.lo a.hi b.hi); the permute restores element order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
    }
  }
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

/// Whether this path decodes format F: as `handles` (float16 has F16C's `VCVTPH2PS`).
template <float_format F>
inline constexpr bool decodes = handles<F>;

/// The one bit pattern of a format without zero (e8m0) that is NaN, found from the format's own rule.
template <float_format F>
inline constexpr std::uint32_t only_nan_pattern = [] {
  std::uint32_t found = 0;
  int count = 0;
  for (std::uint32_t x = 0; x < (std::uint32_t{1} << F.bits()); ++x) {
    if (F.is_nan_bits(x)) {
      found = x;
      ++count;
    }
  }
  return count == 1 ? found : ~std::uint32_t{0};
}();

/// 8 lanes of `decode_lane<F>`: patterns of F (zero-extended) in, float bits out, operation for
/// operation (the subnormal detour converts the integer mantissa with VCVTDQ2PS: exact, and its result
/// is a normal float, so DAZ and FTZ cannot change it).
template <float_format F>
[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline __m256i decode8(__m256i x) noexcept {
  using C = decode_constants<F>;
  const __m256i zero = _mm256_setzero_si256();
  if constexpr (F == formats::bfloat16) {  // the top half of a float: NaNs get the quiet bit
    const __m256i r = _mm256_slli_epi32(x, C::shift);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(r, splat(float_bits::magnitude)), splat(float_bits::infinity));
    return _mm256_or_si256(r, _mm256_and_si256(nan, splat(float_bits::quiet_nan)));
  } else if constexpr (!F.has_zero) {  // e8m0: 2^(x - 127); 0 is a float subnormal, one pattern is NaN
    static_assert(only_nan_pattern<F> != ~std::uint32_t{0}, "a format without zero has exactly one NaN pattern");
    __m256i r = _mm256_slli_epi32(x, float_bits::mantissa_bits);
    r = select(_mm256_cmpeq_epi32(x, zero), splat(C::no_zero_smallest), r);
    return select(_mm256_cmpeq_epi32(x, splat(only_nan_pattern<F>)), splat(float_bits::quiet_nan), r);
  } else {
    const __m256i mag = _mm256_and_si256(x, splat(F.magnitude_mask()));
    const __m256i exponent = _mm256_srli_epi32(mag, C::M);
    const __m256i mantissa = _mm256_and_si256(mag, splat(C::mantissa_mask));
    __m256i r = _mm256_add_epi32(_mm256_slli_epi32(mag, C::shift), splat(C::rebias));
    if constexpr (C::subnormal_detour) {
      const __m256i sub = _mm256_andnot_si256(
          _mm256_cmpeq_epi32(mantissa, zero),
          _mm256_add_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(mantissa)), splat(C::subnormal_rebias)));
      r = select(_mm256_cmpeq_epi32(exponent, zero), sub, r);
    }
    if constexpr (F.nan == nan_encoding::ieee) {
      const __m256i special =
          select(_mm256_cmpeq_epi32(mantissa, zero), splat(float_bits::infinity),
                 _mm256_or_si256(splat(float_bits::quiet_nan), _mm256_slli_epi32(mantissa, C::shift)));
      r = select(_mm256_cmpeq_epi32(exponent, splat(C::max_exponent)), special, r);
    } else if constexpr (F.nan == nan_encoding::all_ones) {
      r = select(_mm256_cmpeq_epi32(mag, splat(F.magnitude_mask())), splat(float_bits::quiet_nan), r);
    } else if constexpr (F.nan == nan_encoding::negative_zero) {
      r = select(_mm256_cmpeq_epi32(x, splat(F.sign_mask())), splat(float_bits::quiet_nan), r);
    }
    if constexpr (F.is_signed) {
      r = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_and_si256(x, splat(F.sign_mask())), C::sign_shift));
    }
    return r;
  }
}

/// 8 patterns of a 1- or 2-byte small float, zero-extended to 32-bit lanes.
template <class From>
[[nodiscard]] MIXPREC_TARGET_AVX2_INLINE inline __m256i load8(const From* in) noexcept {
  if constexpr (sizeof(From) == 1) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
  } else {
    static_assert(sizeof(From) == 2);
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  }
}

/// The OCP float8 formats decode faster through float16 and F16C's `VCVTPH2PS` (exact, and not subject
/// to DAZ: tests/formats/convert_test.cpp runs every pattern under FTZ+DAZ): e5m2 is float16's top byte
/// (same exponent, bias and Inf/NaN), so its pattern shifted left by 8 is the float16 of the same value;
/// e4m3fn's sign and magnitude placed as a float16's (magnitude << 7) give its value times 2^(B16 - 7),
/// a normal float16 or float16 subnormal whose float is then scaled back exactly (the result is a
/// normal float), and its one NaN magnitude (S.1111.111, which would land on the finite 480) becomes
/// float16's quiet NaN with the input's sign first, so the result is `decode_lane`'s quiet NaN.
template <float_format F>
inline constexpr bool via_float16 = F == formats::e5m2 || F == formats::e4m3fn;

/// 16 patterns of e5m2 or e4m3fn (16 bytes at `in`) to floats at `out`.
template <float_format F>
MIXPREC_TARGET_AVX2_INLINE inline void decode16_via_float16(const std::uint8_t* in, float* out) noexcept {
  constexpr int half_mantissa_bits = formats::float16.mantissa_bits;
  constexpr int half_bias = formats::float16.exponent_bias;
  constexpr int shift = half_mantissa_bits - F.mantissa_bits;  // F's magnitude into float16's place
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  if constexpr (F == formats::e5m2) {
    static_assert(F.exponent_bits == formats::float16.exponent_bits && F.exponent_bias == half_bias &&
                  F.nan == nan_encoding::ieee && formats::float16.bits() - F.bits() == shift);
    const __m256i halves = _mm256_slli_epi16(bytes, shift);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm256_castsi256_si128(halves)));
    _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1)));
  } else {
    static_assert(F == formats::e4m3fn && F.nan == nan_encoding::all_ones);
    constexpr int sign_shift = formats::float16.bits() - F.bits();  // F's sign bit to float16's
    // 2^(half_bias - B) as a float (exact).
    constexpr float scale = [] {
      float v = 1.0F;
      for (int i = 0; i < half_bias - F.exponent_bias; ++i) v *= 2.0F;
      return v;
    }();
    const __m256i sign =
        _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(static_cast<short>(F.sign_mask()))), sign_shift);
    const __m256i magnitude = _mm256_and_si256(bytes, _mm256_set1_epi16(static_cast<short>(F.magnitude_mask())));
    const __m256i nan = _mm256_cmpeq_epi16(magnitude, _mm256_set1_epi16(static_cast<short>(F.magnitude_mask())));
    // float16's quiet NaN with F's sign where F has its NaN; float16's VCVTPH2PS keeps it (quiet, sign
    // kept) and the multiplication returns it unchanged.
    constexpr auto half_quiet_nan = static_cast<short>(
        (((1 << formats::float16.exponent_bits) - 1) << half_mantissa_bits) | (1 << (half_mantissa_bits - 1)));
    const __m256i halves = _mm256_blendv_epi8(_mm256_or_si256(sign, _mm256_slli_epi16(magnitude, shift)),
                                              _mm256_or_si256(sign, _mm256_set1_epi16(half_quiet_nan)), nan);
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(halves)), _mm256_set1_ps(scale)));
    _mm256_storeu_ps(out + 8,
                     _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1)), _mm256_set1_ps(scale)));
  }
}

/// out[i] = static_cast<float>(in[i]) for i < n, with From a 1- or 2-byte small float of a format
/// `decodes` accepts: 8 lanes of `decode_lane` (bit-identical to the scalar conversion), or 16 through
/// float16 for e5m2 and e4m3fn.
template <class From>
MIXPREC_TARGET_AVX2 inline void decode(const From* in, float* out, std::size_t n) noexcept {
  constexpr float_format F = From::format;
  static_assert(decodes<F>);
  static_assert(sizeof(From) == sizeof(typename From::storage_type), "a small float is its bit pattern");
  std::size_t i = 0;
  if constexpr (via_float16<F>) {
    for (; n - i >= 16; i += 16) decode16_via_float16<F>(reinterpret_cast<const std::uint8_t*>(in + i), out + i);
  }
  for (; n - i >= 16; i += 16) {  // two vectors per trip: independent chains for the out-of-order core
    const __m256i a = decode8<F>(load8(in + i));
    const __m256i b = decode8<F>(load8(in + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 8), b);
  }
  for (; n - i >= 8; i += 8) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), decode8<F>(load8(in + i)));
  if (i < n) {  // tail through a zero-padded buffer
    alignas(16) From buffer[16] = {};
    alignas(32) float result[8];
    for (std::size_t j = 0; j < n - i; ++j) buffer[j] = in[i + j];
    _mm256_store_si256(reinterpret_cast<__m256i*>(result), decode8<F>(load8(buffer)));
    for (std::size_t j = 0; j < n - i; ++j) out[i + j] = result[j];
  }
}

}  // namespace avx2
}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail

#endif  // MIXPREC_X86_DISPATCH
