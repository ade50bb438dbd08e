/// \file
/// \brief Private: the x86 SIMD loops of `mixprec::convert`. The AVX-512 loops (namespace `avx512`)
/// are compiled into every GCC/Clang x86 build through `target` attributes and called when
/// `mixprec::active_isa()` is at least `isa::avx512` at run time (arch/detail/target.hpp: per-ISA
/// namespace; only pointers and sizes cross from a caller of another level), or always when the
/// compiler targets AVX-512 itself (`-mavx512f -mavx512bw -mavx512vl [-mavx512bf16]`, `-march=native`
/// on a CPU that has them: namespace `x86`, which also holds the F16C-only loops of a `-mf16c` build).
/// Users include `<mixprec/formats/convert.hpp>`.
///
/// Every result is bit-identical to the scalar codec (`float_codec.hpp`):
///  - AVX-512 (F, BW, VL): 16 lanes of `encode_lane` / `decode_lane` (convert_lanewise.hpp) in
///    integer intrinsics, operation for operation, for every format.
///  - float16 uses the hardware conversions VCVTPS2PH (round to nearest even from the immediate, so
///    MXCSR.RC does not matter; MXCSR.FTZ is ignored by the instruction; a DAZ-flushed float subnormal
///    rounds to the same +-0) and VCVTPH2PS (exact; NaN keeps its payload and gets the quiet bit, which
///    is the scalar definition). VCVTPS2PH keeps NaN payload bits where the scalar codec gives the
///    canonical quiet NaN, and gives Inf where saturation wants +-max: those lanes are redone.
///  - bfloat16 with AVX512-BF16 uses VCVTNEPS2BF16 (round to nearest even; never consults MXCSR), which
///    flushes float subnormal inputs to zero and keeps NaN payloads: those lanes, and overflowing lanes
///    when saturating, are redone with the integer path. A `kortest` skips the repair when no lane needs
///    it. Compiled in with -mavx512bf16, and chosen at run time on the avx512bf16 level otherwise
///    (`encode_bfloat16_native`).
///  - F16C alone (AVX2-class CPUs): float16 with the 256-bit forms of the same instructions.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "mixprec/formats/detail/convert_f16c.hpp"
#include "mixprec/formats/detail/convert_lanewise.hpp"  // decides MIXPREC_DETAIL_CONVERT_{AVX512,AVX512BF16,F16C}
#include "mixprec/formats/float_format.hpp"

#if MIXPREC_X86_DISPATCH || defined(MIXPREC_DETAIL_CONVERT_AVX512) || defined(MIXPREC_DETAIL_CONVERT_F16C)
#include <immintrin.h>

#if MIXPREC_X86_DISPATCH
/// The AVX-512 loops' attributes: compiled for AVX-512 whatever the command line targets.
#define MIXPREC_DETAIL_CONVERT_AVX512_FN MIXPREC_TARGET_AVX512
#define MIXPREC_DETAIL_CONVERT_AVX512_INLINE MIXPREC_TARGET_AVX512_INLINE
#else  // a compiler without target attributes that targets AVX-512 from its command line
#define MIXPREC_DETAIL_CONVERT_AVX512_FN
#define MIXPREC_DETAIL_CONVERT_AVX512_INLINE
#endif

// GCC 12 warns "'__Y' is used uninitialized" / "may be used uninitialized" inside its own AVX-512
// intrinsics once they are inlined (GCC bug 105593: _mm512_undefined_epi32). GCC checks the pragma at
// every level of the inlining stack, so disabling both warnings over the functions below silences
// exactly these reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mixprec::detail {
inline namespace MIXPREC_DETAIL_CONVERT_ISA {

#if MIXPREC_X86_DISPATCH || defined(MIXPREC_DETAIL_CONVERT_AVX512)
namespace avx512 {

/// Whether the AVX-512 path converts format `F` (all formats; the trait keeps the dispatch uniform).
template <float_format F>
inline constexpr bool handles = true;

[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m512i splat(std::uint32_t v) noexcept {
  return _mm512_set1_epi32(static_cast<int>(v));
}

/// Per lane: `neg` where `negative` is set, else `pos`.
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m512i by_sign(__mmask16 negative, std::uint32_t pos,
                                                                          std::uint32_t neg) noexcept {
  return _mm512_mask_mov_epi32(splat(pos), negative, splat(neg));
}

/// Mask of the first `count` lanes, count < 16.
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __mmask16 first_lanes(std::size_t count) noexcept {
  return static_cast<__mmask16>((1U << count) - 1U);
}

/// The number of elements of T before the first 64-byte boundary at or after p (0 to 15 for float;
/// 0 when p is not aligned to its element).
template <class T>
[[nodiscard]] inline std::size_t aligned_head(const T* p) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  return address % sizeof(T) != 0 ? 0 : ((64 - address % 64) % 64) / sizeof(T);
}

/// 16 lanes of `encode_lane<F, Mode>`: float bits in, pattern of F (zero-extended) out.
template <float_format F, overflow_mode Mode>
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m512i encode16(__m512i u) noexcept {
  using C = encode_constants<F, Mode>;
  const __m512i one = splat(1U);
  if constexpr (F == formats::bfloat16 && Mode == overflow_mode::to_inf_or_nan) {
    // convert_avx2.hpp's bfloat16 shortcut on 16 lanes: (u + 0x7FFF + lsb) >> 16 rounds every float
    // but NaN (subnormals, a carry into Inf), and NaN becomes the canonical quiet NaN with its sign:
    // (high & sign) | nan_pos of the high half, one VPTERNLOGD ((a & b) | c is truth table 0xEA).
    static_assert(C::nan_neg == (C::sign | C::nan_pos), "a negative NaN is the positive one with the sign bit");
    const __m512i high = _mm512_srli_epi32(u, C::shift);
    const __m512i lsb = _mm512_and_si512(high, one);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, splat(C::round_bias)), lsb), C::shift);
    // {sae}: a signalling NaN raises no invalid-operation flag (the conversions raise none).
    const __mmask16 nan =
        _mm512_cmp_round_ps_mask(_mm512_castsi512_ps(u), _mm512_castsi512_ps(u), _CMP_UNORD_Q, _MM_FROUND_NO_EXC);
    return _mm512_mask_mov_epi32(rounded, nan,
                                 _mm512_ternarylogic_epi32(high, splat(C::sign), splat(C::nan_pos), 0xEA));
  }
  const __m512i a = _mm512_and_si512(u, splat(float_bits::magnitude));
  const __mmask16 negative = _mm512_cmpneq_epi32_mask(u, a);
  const __m512i rebiased = _mm512_sub_epi32(a, splat(C::rebias));
  const __m512i parity = _mm512_and_si512(_mm512_srli_epi32(rebiased, C::shift), one);
  __m512i mag = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(rebiased, splat(C::round_bias)), parity), C::shift);
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(a, splat(C::subnormal_below));
  if constexpr (F.has_zero && C::B == float_bits::exponent_bias) {
    // bfloat16: its subnormals are float's, and the normal formula above already rounds them.
  } else if constexpr (F.has_zero && C::subnormal_by_scaling) {
    // |x| * 2^(B + M - 1) is exact (a power-of-two scaling that stays normal where used), and
    // rounding it to an integer, nearest even, is the subnormal magnitude. Both use embedded rounding
    // {rn-sae}: MXCSR.RC is ignored and no flag is raised. DAZ/FTZ can only turn a float subnormal
    // input into 0, and such an input rounds to 0 anyway (below half of F's smallest subnormal).
    constexpr int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 scaled =
        _mm512_mul_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(splat(C::subnormal_scale)), rn);
    mag = _mm512_mask_mov_epi32(mag, subnormal, _mm512_cvt_roundps_epi32(scaled, rn));
  } else {  // no zero (e8m0): |x| below 2^-126 becomes 2^-127 or 2^-126
    const __mmask16 up = _mm512_cmpgt_epu32_mask(a, splat(C::no_zero_midpoint));
    mag = _mm512_mask_mov_epi32(mag, subnormal, _mm512_maskz_mov_epi32(up, one));
  }
  __m512i r = mag;
  if constexpr (C::sign != 0U) r = _mm512_mask_or_epi32(mag, negative, mag, splat(C::sign));
  const __mmask16 overflow = _mm512_cmpgt_epu32_mask(mag, splat(C::max_magnitude));
  r = _mm512_mask_mov_epi32(r, overflow, by_sign(negative, C::overflow_pos, C::overflow_neg));
  if constexpr (F.nan == nan_encoding::negative_zero) {
    r = _mm512_mask_mov_epi32(r, _mm512_testn_epi32_mask(mag, mag), _mm512_setzero_si512());  // no -0
  }
  if constexpr (!F.is_signed) r = _mm512_mask_mov_epi32(r, negative, splat(C::negative_finite));
  const __mmask16 zero = _mm512_testn_epi32_mask(a, a);
  const __mmask16 not_finite = _mm512_cmpge_epu32_mask(a, splat(float_bits::infinity));
  if (_kortestz_mask16_u8(zero, not_finite) == 0) {  // rare: skip when no lane is 0, Inf or NaN
    r = _mm512_mask_mov_epi32(r, zero, by_sign(negative, C::zero_pos, C::zero_neg));
    const __mmask16 inf = _mm512_cmpeq_epi32_mask(a, splat(float_bits::infinity));
    r = _mm512_mask_mov_epi32(r, inf, by_sign(negative, C::inf_pos, C::inf_neg));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, splat(float_bits::infinity));
    r = _mm512_mask_mov_epi32(r, nan, by_sign(negative, C::nan_pos, C::nan_neg));
  }
  return r;
}

/// 16 lanes of `decode_lane<F>`: pattern of F (zero-extended) in, float bits out.
template <float_format F>
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m512i decode16(__m512i x) noexcept {
  using C = decode_constants<F>;
  if constexpr (F == formats::bfloat16) {
    // The top half of a float: only NaNs change, they get the quiet bit.
    const __m512i u = _mm512_slli_epi32(x, C::shift);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, splat(float_bits::magnitude)), splat(float_bits::infinity));
    return _mm512_mask_or_epi32(u, nan, u, splat(float_bits::quiet_nan));
  } else if constexpr (!F.has_zero) {
    __m512i r = _mm512_slli_epi32(x, float_bits::mantissa_bits);
    r = _mm512_mask_mov_epi32(r, _mm512_testn_epi32_mask(x, x), splat(C::no_zero_smallest));
    static_assert(F.nan == nan_encoding::all_ones, "e8m0's NaN is its all-ones pattern");
    return _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(x, splat(F.magnitude_mask())),
                                 splat(float_bits::quiet_nan));
  } else {
    __m512i sign = _mm512_setzero_si512();
    if constexpr (F.is_signed) sign = _mm512_slli_epi32(_mm512_and_si512(x, splat(F.sign_mask())), C::sign_shift);
    const __m512i mag = _mm512_and_si512(x, splat(F.magnitude_mask()));
    const __m512i exponent = _mm512_srli_epi32(mag, C::M);
    const __m512i mantissa = _mm512_and_si512(mag, splat(C::mantissa_mask));
    __m512i r = _mm512_add_epi32(_mm512_slli_epi32(mag, C::shift), splat(C::rebias));
    if constexpr (C::subnormal_detour) {
      const __m512i as_float = _mm512_castps_si512(_mm512_cvtepi32_ps(mantissa));  // exact: mantissa < 2^10
      const __m512i sub =
          _mm512_maskz_add_epi32(_mm512_test_epi32_mask(mantissa, mantissa), as_float, splat(C::subnormal_rebias));
      r = _mm512_mask_mov_epi32(r, _mm512_testn_epi32_mask(exponent, exponent), sub);
    }
    if constexpr (F.nan == nan_encoding::ieee) {
      const __m512i special =
          _mm512_mask_or_epi32(splat(float_bits::infinity), _mm512_test_epi32_mask(mantissa, mantissa),
                               splat(float_bits::quiet_nan), _mm512_slli_epi32(mantissa, C::shift));
      r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(exponent, splat(C::max_exponent)), special);
    } else if constexpr (F.nan == nan_encoding::all_ones) {
      r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(mag, splat(F.magnitude_mask())),
                                splat(float_bits::quiet_nan));
    } else if constexpr (F.nan == nan_encoding::negative_zero) {
      r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(x, splat(F.sign_mask())), splat(float_bits::quiet_nan));
    }
    return _mm512_or_si512(sign, r);
  }
}

/// Loads 16 patterns (`Full`) or the lanes of `mask` of a 1- or 2-byte format, zero-extended to 32 bits.
template <bool Full, class T>
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m512i load_patterns(const T* p, __mmask16 mask) noexcept {
  if constexpr (sizeof(T) == 1) {
    if constexpr (Full) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, p));
  } else {
    if constexpr (Full) return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
  }
}

/// Stores the low 8 or 16 bits of all 16 lanes (`Full`) or of the lanes of `mask`.
template <bool Full, class T>
MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline void store_patterns(T* p, __m512i r, __mmask16 mask) noexcept {
  if constexpr (sizeof(T) == 1) {
    if constexpr (Full) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(r));
    } else {
      _mm512_mask_cvtepi32_storeu_epi8(p, mask, r);
    }
  } else {
    if constexpr (Full) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
    } else {
      _mm512_mask_cvtepi32_storeu_epi16(p, mask, r);
    }
  }
}

/// The lanes of 16 floats (bits `u`) whose bfloat16 VCVTNEPS2BF16 rounds differently from the scalar
/// codec: float subnormals (the instruction reads them as zero) and NaN (it keeps the payload), and,
/// when saturating, lanes above bfloat16's largest finite value. Found on the integer bits: VFPCLASSPS
/// would read a subnormal as zero under MXCSR.DAZ.
template <overflow_mode Mode>
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __mmask16 bfloat16_native_misses(__m512i u) noexcept {
  const __m512i a = _mm512_and_si512(u, splat(float_bits::magnitude));
  __mmask16 redo = _mm512_cmpgt_epu32_mask(a, splat(float_bits::infinity));  // NaN
  if constexpr (Mode == overflow_mode::saturate) {
    redo = _mm512_cmpgt_epu32_mask(a, splat(encode_constants<formats::bfloat16, Mode>::max_float_bits));
  }
  return redo | _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, splat(1U)), splat(float_bits::mantissa));  // subnormal
}

/// Encodes 16 floats (bits `u`) into the 16-bit patterns of F, for the hardware-assisted formats.
template <float_format F, overflow_mode Mode>
[[nodiscard]] MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline __m256i encode16_narrow(__m512i u) noexcept {
  using C = encode_constants<F, Mode>;
  const __m512i a = _mm512_and_si512(u, splat(float_bits::magnitude));
  __mmask16 redo = _mm512_cmpgt_epu32_mask(a, splat(float_bits::infinity));  // NaN: the hardware keeps payloads
  if constexpr (Mode == overflow_mode::saturate) {
    redo = _mm512_cmpgt_epu32_mask(a, splat(C::max_float_bits));  // may round past max; Inf; NaN
  }
  __m256i h;
  if constexpr (F == formats::float16) {
    h = _mm512_cvtps_ph(_mm512_castsi512_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    static_assert(F == formats::bfloat16);
#if defined(MIXPREC_DETAIL_CONVERT_AVX512BF16)
    h = std::bit_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_castsi512_ps(u)));
    redo = bfloat16_native_misses<Mode>(u);
#endif
  }
  if (redo != 0) h = _mm256_mask_mov_epi16(h, redo, _mm512_cvtepi32_epi16(encode16<F, Mode>(u)));
  return h;
}

/// Whether F has a hardware-assisted encoder here.
template <float_format F>
inline constexpr bool narrow_in_hardware = F == formats::float16
#if defined(MIXPREC_DETAIL_CONVERT_AVX512BF16)
                                           || F == formats::bfloat16
#endif
    ;

/// Encodes 16 floats (`Full`) or the lanes of `mask`.
template <class To, overflow_mode Mode, bool Full>
MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline void encode_block(const float* in, To* out, __mmask16 mask) noexcept {
  constexpr float_format F = To::format;
  const __m512i u = Full ? _mm512_loadu_si512(in) : _mm512_maskz_loadu_epi32(mask, in);
  if constexpr (narrow_in_hardware<F>) {
    const __m256i h = encode16_narrow<F, Mode>(u);
    if constexpr (Full) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
    } else {
      _mm256_mask_storeu_epi16(out, mask, h);
    }
  } else {
    store_patterns<Full>(out, encode16<F, Mode>(u), mask);
  }
}

/// out[i] = encode<F>(in[i], Mode) for i < n, with To a 1- or 2-byte small float of format F.
template <class To, overflow_mode Mode>
MIXPREC_DETAIL_CONVERT_AVX512_FN inline void encode(const float* in, To* out, std::size_t n) noexcept {
  // The elements before in's first 64-byte boundary, masked: the 64-byte loads after them are aligned
  // (one that straddles two cache lines is slower in L2: docs/conversions.md, "Which instructions").
  std::size_t i = std::min(n, aligned_head<float>(in));
  if (i > 0) encode_block<To, Mode, false>(in, out, first_lanes(i));
  for (; n - i >= 16; i += 16) encode_block<To, Mode, true>(in + i, out + i, 0xFFFF);
  if (i < n) encode_block<To, Mode, false>(in + i, out + i, first_lanes(n - i));
}

#if MIXPREC_X86_DISPATCH
/// The bfloat16 patterns of 16 floats (bits `u`) on the run-time avx512bf16 level: VCVTNEPS2BF16 (round
/// to nearest even, whatever MXCSR says), the lanes of bfloat16_native_misses redone by encode16.
template <overflow_mode Mode>
[[nodiscard]] MIXPREC_TARGET_AVX512BF16_INLINE inline __m256i encode16_bfloat16_native(__m512i u) noexcept {
  const __mmask16 redo = bfloat16_native_misses<Mode>(u);
  __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_castsi512_ps(u)));  // no std::bit_cast: -Wpsabi
  if (redo != 0) h = _mm256_mask_mov_epi16(h, redo, _mm512_cvtepi32_epi16(encode16<formats::bfloat16, Mode>(u)));
  return h;
}

/// `encode` for bfloat16 on the run-time avx512bf16 level: the same bits. Steps of 32 floats take one
/// VCVTNE2PS2BF16 when none of them needs the repair (faster in L2 than the 16-lane steps;
/// measured: docs/conversions.md, "Performance"),
/// else two encode16_bfloat16_native.
template <class To, overflow_mode Mode>
MIXPREC_TARGET_AVX512BF16 inline void encode_bfloat16_native(const float* in, To* out, std::size_t n) noexcept {
  static_assert(To::format == formats::bfloat16);
  std::size_t i = std::min(n, aligned_head<float>(in));  // encode's aligned loads
  if (i > 0) {
    const __mmask16 mask = first_lanes(i);
    _mm256_mask_storeu_epi16(out, mask, encode16_bfloat16_native<Mode>(_mm512_maskz_loadu_epi32(mask, in)));
  }
  for (; n - i >= 32; i += 32) {
    const __m512i lo = _mm512_loadu_si512(in + i);
    const __m512i hi = _mm512_loadu_si512(in + i + 16);
    if ((bfloat16_native_misses<Mode>(lo) | bfloat16_native_misses<Mode>(hi)) == 0) {
      _mm512_storeu_si512(
          out + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo))));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), encode16_bfloat16_native<Mode>(lo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16), encode16_bfloat16_native<Mode>(hi));
    }
  }
  for (; n - i >= 16; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        encode16_bfloat16_native<Mode>(_mm512_loadu_si512(in + i)));
  }
  if (i < n) {
    const __mmask16 mask = first_lanes(n - i);
    _mm256_mask_storeu_epi16(out + i, mask, encode16_bfloat16_native<Mode>(_mm512_maskz_loadu_epi32(mask, in + i)));
  }
}
#endif

/// Decodes 16 patterns (`Full`) or the lanes of `mask`.
template <class From, bool Full>
MIXPREC_DETAIL_CONVERT_AVX512_INLINE inline void decode_block(const From* in, float* out, __mmask16 mask) noexcept {
  constexpr float_format F = From::format;
  __m512 r;
  if constexpr (F == formats::float16) {
    const __m256i h =
        Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)) : _mm256_maskz_loadu_epi16(mask, in);
    r = _mm512_cvtph_ps(h);  // exact; NaN: payload kept, quiet bit set (the scalar definition)
  } else {
    r = _mm512_castsi512_ps(decode16<F>(load_patterns<Full>(in, mask)));
  }
  if constexpr (Full) {
    _mm512_storeu_ps(out, r);
  } else {
    _mm512_mask_storeu_ps(out, mask, r);
  }
}

/// out[i] = decode_to_float<F>(in[i]) for i < n.
template <class From>
MIXPREC_DETAIL_CONVERT_AVX512_FN inline void decode(const From* in, float* out, std::size_t n) noexcept {
  std::size_t i = std::min(n, aligned_head<float>(out));  // out's 64-byte stores aligned after these
  if (i > 0) decode_block<From, false>(in, out, first_lanes(i));
  for (; n - i >= 16; i += 16) decode_block<From, true>(in + i, out + i, 0xFFFF);
  if (i < n) decode_block<From, false>(in + i, out + i, first_lanes(n - i));
}

}  // namespace avx512
#endif  // MIXPREC_X86_DISPATCH || MIXPREC_DETAIL_CONVERT_AVX512

/// The loops a build that targets AVX-512 or F16C on its command line takes at every call.
namespace x86 {

#if defined(MIXPREC_DETAIL_CONVERT_AVX512)

/// Whether the AVX-512 path converts format `F` (all formats).
template <float_format F>
inline constexpr bool handles = avx512::handles<F>;

template <class To, overflow_mode Mode>
inline void encode(const float* in, To* out, std::size_t n) noexcept {
  avx512::encode<To, Mode>(in, out, n);
}

template <class From>
inline void decode(const From* in, float* out, std::size_t n) noexcept {
  avx512::decode<From>(in, out, n);
}

#elif defined(MIXPREC_DETAIL_CONVERT_F16C)

/// With F16C alone only float16 has a SIMD path; the other formats use the portable loops.
template <float_format F>
inline constexpr bool handles = F == formats::float16;

// The float16 loops themselves are in convert_f16c.hpp, where a build without -mf16c also gets them
// for run-time dispatch.
template <class To, overflow_mode Mode>
inline void encode(const float* in, To* out, std::size_t n) noexcept {
  f16c::encode<To, Mode>(in, out, n);
}

template <class From>
inline void decode(const From* in, float* out, std::size_t n) noexcept {
  f16c::decode<From>(in, out, n);
}

#endif

}  // namespace x86
}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace mixprec::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef MIXPREC_DETAIL_CONVERT_AVX512_FN
#undef MIXPREC_DETAIL_CONVERT_AVX512_INLINE

#endif  // MIXPREC_X86_DISPATCH || MIXPREC_DETAIL_CONVERT_AVX512 || MIXPREC_DETAIL_CONVERT_F16C
