/// \file
/// \brief Private: the vector operations of the SIMD kernels, one body for every x86 target
/// (foreach_target.hpp compiles it as `simd_avx2` and `simd_avx512`).
///
/// Every target has the 8-lane float vector `vf8` (`__m256`, its mask a vector of all-ones lanes); the
/// avx512 target adds the 16-lane `__m512` (mask `__mmask16`). `vf` is the target's widest. Each
/// operation is one IEEE operation per lane, the same at either width, so a kernel written against
/// them gives the same bits at 8 and 16 lanes wherever it adds the same values in the same order:
/// its bodies say where they do. The few operations whose instructions differ by width (`mul_pow2`,
/// the roundings to bfloat16 and float16) give the same bits too; tests/kernels/simd_ops_test.cpp
/// compares the two widths. The AVX-512 forms are the zero-masking ones where GCC 12's plain forms
/// pass an undefined register that -Wmaybe-uninitialized reports at -O2.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/simd/ops.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS {

/// The lanes of the target's widest float vector `vf`.
inline constexpr std::size_t lanes = MIXPREC_SIMD_LANES;
/// The 8-lane float vector of every target, its int32 and float64 companions.
using vf8 = __m256;
using vi8 = __m256i;
using vd4 = __m256d;
#if MIXPREC_SIMD_LANES == 16
using vf = __m512;
using vi = __m512i;
using vd = __m512d;
/// Every lane of a 16-lane mask.
inline constexpr __mmask16 all_lanes = static_cast<__mmask16>(~__mmask16{0});
#else
using vf = __m256;
using vi = __m256i;
using vd = __m256d;
#endif

/// The lanes of a float vector type.
template <class V>
inline constexpr std::size_t lanes_of = sizeof(V) / sizeof(float);

/// float, bfloat16 or float16: the element types the loads and stores below convert.
template <class T>
inline constexpr bool convertible =
    std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// ---- 8 lanes ----------------------------------------------------------------------------------------

/// Every lane `v` (`set<V>`), or 0 (`zero<V>`); `set_int<V>`: every int32 lane `v`.
template <class V>
MIXPREC_SIMD_INLINE inline V set(float v) noexcept;
template <>
MIXPREC_SIMD_INLINE inline vf8 set<vf8>(float v) noexcept {
  return _mm256_set1_ps(v);
}
template <class V>
MIXPREC_SIMD_INLINE inline V zero() noexcept;
template <>
MIXPREC_SIMD_INLINE inline vf8 zero<vf8>() noexcept {
  return _mm256_setzero_ps();
}
template <class V>
MIXPREC_SIMD_INLINE inline auto set_int(std::int32_t v) noexcept;
template <>
MIXPREC_SIMD_INLINE inline auto set_int<vf8>(std::int32_t v) noexcept {
  return _mm256_set1_epi32(v);
}

MIXPREC_SIMD_INLINE inline vf8 add(vf8 a, vf8 b) noexcept { return _mm256_add_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf8 sub(vf8 a, vf8 b) noexcept { return _mm256_sub_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf8 mul(vf8 a, vf8 b) noexcept { return _mm256_mul_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf8 div(vf8 a, vf8 b) noexcept { return _mm256_div_ps(a, b); }
/// The square root of each lane, correctly rounded (IEEE), as `std::sqrt`.
MIXPREC_SIMD_INLINE inline vf8 sqrt(vf8 a) noexcept { return _mm256_sqrt_ps(a); }
/// v itself, as a value the compiler cannot see through: a product passed through it is rounded on
/// its own and never contracted into an FMA with the addition that reads it (GCC and Clang contract
/// `mul` and `add` of the intrinsics under their default -ffp-contract), for code that must give the
/// bits of separate IEEE operations, as the scalar code of a build without FMA does.
template <class V>
MIXPREC_SIMD_INLINE inline V opaque(V v) noexcept {
  asm("" : "+x"(v));
  return v;
}
/// a · b + c, a · b - c and c - a · b, each rounded once (FMA).
MIXPREC_SIMD_INLINE inline vf8 fmadd(vf8 a, vf8 b, vf8 c) noexcept { return _mm256_fmadd_ps(a, b, c); }
MIXPREC_SIMD_INLINE inline vf8 fmsub(vf8 a, vf8 b, vf8 c) noexcept { return _mm256_fmsub_ps(a, b, c); }
MIXPREC_SIMD_INLINE inline vf8 fnmadd(vf8 a, vf8 b, vf8 c) noexcept { return _mm256_fnmadd_ps(a, b, c); }
/// The x86 minimum and maximum: the second operand where either is NaN (so `max(bound, x)` keeps a NaN
/// x), and where both are zeros.
MIXPREC_SIMD_INLINE inline vf8 min(vf8 a, vf8 b) noexcept { return _mm256_min_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf8 max(vf8 a, vf8 b) noexcept { return _mm256_max_ps(a, b); }

/// Ordered comparisons (false where either is NaN) and the NaN test; masks for `select`/`zero_where`.
MIXPREC_SIMD_INLINE inline vf8 lt(vf8 a, vf8 b) noexcept { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
MIXPREC_SIMD_INLINE inline vf8 gt(vf8 a, vf8 b) noexcept { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
MIXPREC_SIMD_INLINE inline vf8 ge(vf8 a, vf8 b) noexcept { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
MIXPREC_SIMD_INLINE inline vf8 eq(vf8 a, vf8 b) noexcept { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
MIXPREC_SIMD_INLINE inline vf8 is_nan(vf8 a) noexcept { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
/// Lanes where a or b is NaN.
MIXPREC_SIMD_INLINE inline vf8 unordered(vf8 a, vf8 b) noexcept { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
/// Lanes of `m` set: `if_true`'s lane, else `if_false`'s.
MIXPREC_SIMD_INLINE inline vf8 select(vf8 m, vf8 if_true, vf8 if_false) noexcept {
  return _mm256_blendv_ps(if_false, if_true, m);
}
/// +0 in the lanes of `m`, v elsewhere.
MIXPREC_SIMD_INLINE inline vf8 zero_where(vf8 m, vf8 v) noexcept { return _mm256_andnot_ps(m, v); }
/// Whether any lane of m is set.
MIXPREC_SIMD_INLINE inline bool any(vf8 m) noexcept { return _mm256_movemask_ps(m) != 0; }
/// The union of two masks.
MIXPREC_SIMD_INLINE inline vf8 either(vf8 a, vf8 b) noexcept { return _mm256_or_ps(a, b); }
/// Lanes [0, t) set, for t < 8.
template <class V>
MIXPREC_SIMD_INLINE inline auto first_lanes(std::size_t t) noexcept;
template <>
MIXPREC_SIMD_INLINE inline auto first_lanes<vf8>(std::size_t t) noexcept {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(t)), index));
}

/// The sign bit of a float, as an int32 lane.
inline constexpr std::int32_t sign_bit = static_cast<std::int32_t>(0x80000000U);
/// The bits of v as int32 lanes, and back.
MIXPREC_SIMD_INLINE inline vi8 bits(vf8 v) noexcept { return _mm256_castps_si256(v); }
MIXPREC_SIMD_INLINE inline vf8 from_bits(vi8 v) noexcept { return _mm256_castsi256_ps(v); }
MIXPREC_SIMD_INLINE inline vi8 add(vi8 a, vi8 b) noexcept { return _mm256_add_epi32(a, b); }
MIXPREC_SIMD_INLINE inline vi8 bit_and(vi8 a, vi8 b) noexcept { return _mm256_and_si256(a, b); }
MIXPREC_SIMD_INLINE inline vi8 bit_or(vi8 a, vi8 b) noexcept { return _mm256_or_si256(a, b); }
MIXPREC_SIMD_INLINE inline vi8 bit_xor(vi8 a, vi8 b) noexcept { return _mm256_xor_si256(a, b); }
template <int N>
MIXPREC_SIMD_INLINE inline vi8 shift_left(vi8 v) noexcept {
  return _mm256_slli_epi32(v, N);
}
/// |x|, -|x| and -x by the sign bit: exact, NaN payloads kept.
MIXPREC_SIMD_INLINE inline vf8 abs(vf8 x) noexcept { return from_bits(bit_and(bits(x), set_int<vf8>(~sign_bit))); }
MIXPREC_SIMD_INLINE inline vf8 minus_abs(vf8 x) noexcept { return from_bits(bit_or(bits(x), set_int<vf8>(sign_bit))); }
MIXPREC_SIMD_INLINE inline vf8 negate(vf8 x) noexcept { return from_bits(bit_xor(bits(x), set_int<vf8>(sign_bit))); }
/// Each lane rounded to the nearest integer, ties to even (as a float).
MIXPREC_SIMD_INLINE inline vf8 round_nearest(vf8 x) noexcept {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/// 2^e as floats, for integral e in [-126, 127] (the exponent field set directly).
MIXPREC_SIMD_INLINE inline vf8 power_of_two(vi8 e) noexcept {
  return from_bits(shift_left<23>(add(e, set_int<vf8>(127))));
}

/// p · 2^k for integral k in [-150, 128] (outside it clamped), rounded once: as p · 2^k1 · 2^k2 with
/// k1 = k / 2 (toward 0) and k2 = k - k1, both normal powers of two, so only the second product rounds
/// (and only when the result is subnormal). The 16-lane form is one VSCALEFPS, which rounds the exact
/// product once too: the same bits.
MIXPREC_SIMD_INLINE inline vf8 mul_pow2(vf8 p, vf8 k) noexcept {
  const __m256i ki = _mm256_cvtps_epi32(min(max(k, set<vf8>(-150.0F)), set<vf8>(128.0F)));
  const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(ki, _mm256_srli_epi32(ki, 31)), 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  return mul(mul(p, power_of_two(k1)), power_of_two(k2));
}

/// The sum and the largest lane of v (the 8-lane horizontal reductions: halves, then pairs, then lanes).
MIXPREC_SIMD_INLINE inline float reduce_add(vf8 v) noexcept {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}
MIXPREC_SIMD_INLINE inline float reduce_max(vf8 v) noexcept {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/// Lane 0 of v.
MIXPREC_SIMD_INLINE inline float first_lane(vf8 v) noexcept { return _mm256_cvtss_f32(v); }

/// Float64 lanes, for sums of floats (`vd4`: 4 lanes; the avx512 target's `vd`: 8): every lane the float
/// v (`set`), or 0 (`zero`); the lanes of a float vector's lower and upper half, widened exactly.
template <>
MIXPREC_SIMD_INLINE inline vd4 set<vd4>(float v) noexcept {
  return _mm256_set1_pd(v);
}
template <>
MIXPREC_SIMD_INLINE inline vd4 zero<vd4>() noexcept {
  return _mm256_setzero_pd();
}
MIXPREC_SIMD_INLINE inline vd4 widen_lower(vf8 v) noexcept { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
MIXPREC_SIMD_INLINE inline vd4 widen_upper(vf8 v) noexcept { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
MIXPREC_SIMD_INLINE inline vd4 add(vd4 a, vd4 b) noexcept { return _mm256_add_pd(a, b); }
MIXPREC_SIMD_INLINE inline vd4 sub(vd4 a, vd4 b) noexcept { return _mm256_sub_pd(a, b); }
MIXPREC_SIMD_INLINE inline vd4 fmadd(vd4 a, vd4 b, vd4 c) noexcept { return _mm256_fmadd_pd(a, b, c); }
/// 4 float64 lanes loaded from p (the second argument names the type) and stored to p, unaligned.
MIXPREC_SIMD_INLINE inline vd4 load_doubles(const double* p, vd4 /*type*/) noexcept { return _mm256_loadu_pd(p); }
MIXPREC_SIMD_INLINE inline void store_doubles(double* p, vd4 v) noexcept { _mm256_storeu_pd(p, v); }
/// The sum of the 4 float64 lanes: halves, then the pair.
MIXPREC_SIMD_INLINE inline double reduce_add(vd4 v) noexcept {
  const __m128d half = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(half, _mm_unpackhi_pd(half, half)));
}

/// bfloat16 patterns (in the high halves of the 32-bit lanes, low halves zero) of 8 floats, rounded to
/// nearest-even; NaN becomes bfloat16's quiet NaN with the sign kept (kernels/rounding.hpp).
MIXPREC_SIMD_INLINE inline vi8 bfloat16_high_bits(vf8 v) noexcept {
  const vi8 u = bits(v);
  const vi8 odd = bit_and(_mm256_srli_epi32(u, 16), set_int<vf8>(1));
  const vi8 rounded =
      bit_and(add(add(u, set_int<vf8>(0x7FFF)), odd), set_int<vf8>(static_cast<std::int32_t>(0xFFFF0000U)));
  const vi8 nan = bit_or(bit_and(u, set_int<vf8>(sign_bit)), set_int<vf8>(0x7FC00000));
  return _mm256_blendv_epi8(rounded, nan, bits(is_nan(v)));
}

/// 8 elements widened exactly to float.
template <class V, class T>
MIXPREC_SIMD_INLINE inline V load(const T* p) noexcept requires(std::is_same_v<V, vf8>&& convertible<T>) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return from_bits(shift_left<16>(_mm256_cvtepu16_epi32(h)));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

/// The first t (< 8) elements widened to float, the other lanes 0; nothing past them is read.
template <class V, class T>
MIXPREC_SIMD_INLINE inline V load_first(const T* p, std::size_t t) noexcept
    requires(std::is_same_v<V, vf8>&& convertible<T>) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_maskload_ps(p, bits(first_lanes<vf8>(t)));
  } else {
    alignas(32) T buffer[8] = {};
    for (std::size_t i = 0; i < t; ++i) buffer[i] = p[i];
    return load<vf8>(buffer);
  }
}

/// 8 floats rounded to C and widened back (`round_to<C>` then `widen`); identity for float.
template <class C>
MIXPREC_SIMD_INLINE inline vf8 round(vf8 v) noexcept {
  if constexpr (std::is_same_v<C, float>) {
    return v;
  } else if constexpr (std::is_same_v<C, bfloat16>) {
    return from_bits(bfloat16_high_bits(v));
  } else {
    return _mm256_cvtph_ps(f16c::encode8_float16<overflow_mode::to_inf_or_nan>(v));
  }
}

/// 8 floats rounded to O (`round_to<O>`) and stored.
template <class O>
MIXPREC_SIMD_INLINE inline void store(O* p, vf8 v) noexcept {
  static_assert(convertible<O>, "store: the output element must be float, bfloat16 or float16.");
  if constexpr (std::is_same_v<O, float>) {
    _mm256_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    const vi8 high = _mm256_srli_epi32(bfloat16_high_bits(v), 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), f16c::encode8_float16<overflow_mode::to_inf_or_nan>(v));
  }
}

/// The first t (< 8) lanes of v rounded to O and stored; nothing past them is written.
template <class O>
MIXPREC_SIMD_INLINE inline void store_first(O* p, vf8 v, std::size_t t) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm256_maskstore_ps(p, bits(first_lanes<vf8>(t)), v);
  } else {
    alignas(32) O buffer[8];
    store<O>(buffer, v);
    for (std::size_t i = 0; i < t; ++i) p[i] = buffer[i];
  }
}

/// 8 floats rounded to O and stored past the caches (non-temporal: no read for ownership, for outputs
/// larger than the last-level cache); p aligned to 8 elements. The writing thread orders them before
/// its later stores with an SFENCE.
template <class O>
MIXPREC_SIMD_INLINE inline void stream(O* p, vf8 v) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm256_stream_ps(p, v);
  } else {
    alignas(16) O buffer[8];
    store<O>(buffer, v);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_load_si128(reinterpret_cast<const __m128i*>(buffer)));
  }
}

#if MIXPREC_SIMD_LANES == 16
// ---- 16 lanes (avx512) -----------------------------------------------------------------------------

template <>
MIXPREC_SIMD_INLINE inline vf set<vf>(float v) noexcept {
  return _mm512_set1_ps(v);
}
template <>
MIXPREC_SIMD_INLINE inline vf zero<vf>() noexcept {
  return _mm512_setzero_ps();
}
template <>
MIXPREC_SIMD_INLINE inline auto set_int<vf>(std::int32_t v) noexcept {
  return _mm512_set1_epi32(v);
}

MIXPREC_SIMD_INLINE inline vf add(vf a, vf b) noexcept { return _mm512_add_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf sub(vf a, vf b) noexcept { return _mm512_sub_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf mul(vf a, vf b) noexcept { return _mm512_mul_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf div(vf a, vf b) noexcept { return _mm512_div_ps(a, b); }
MIXPREC_SIMD_INLINE inline vf sqrt(vf a) noexcept { return _mm512_maskz_sqrt_ps(all_lanes, a); }
MIXPREC_SIMD_INLINE inline vf fmadd(vf a, vf b, vf c) noexcept { return _mm512_fmadd_ps(a, b, c); }
MIXPREC_SIMD_INLINE inline vf fmsub(vf a, vf b, vf c) noexcept { return _mm512_fmsub_ps(a, b, c); }
MIXPREC_SIMD_INLINE inline vf fnmadd(vf a, vf b, vf c) noexcept { return _mm512_fnmadd_ps(a, b, c); }
MIXPREC_SIMD_INLINE inline vf min(vf a, vf b) noexcept { return _mm512_maskz_min_ps(all_lanes, a, b); }
MIXPREC_SIMD_INLINE inline vf max(vf a, vf b) noexcept { return _mm512_maskz_max_ps(all_lanes, a, b); }

MIXPREC_SIMD_INLINE inline __mmask16 lt(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
MIXPREC_SIMD_INLINE inline __mmask16 gt(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
MIXPREC_SIMD_INLINE inline __mmask16 ge(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
MIXPREC_SIMD_INLINE inline __mmask16 eq(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
MIXPREC_SIMD_INLINE inline __mmask16 is_nan(vf a) noexcept { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
MIXPREC_SIMD_INLINE inline __mmask16 unordered(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
MIXPREC_SIMD_INLINE inline vf select(__mmask16 m, vf if_true, vf if_false) noexcept {
  return _mm512_mask_blend_ps(m, if_false, if_true);
}
MIXPREC_SIMD_INLINE inline vf zero_where(__mmask16 m, vf v) noexcept {
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~m), v);
}
MIXPREC_SIMD_INLINE inline bool any(__mmask16 m) noexcept { return m != 0; }
MIXPREC_SIMD_INLINE inline __mmask16 either(__mmask16 a, __mmask16 b) noexcept { return static_cast<__mmask16>(a | b); }
template <>
MIXPREC_SIMD_INLINE inline auto first_lanes<vf>(std::size_t t) noexcept {
  return static_cast<__mmask16>((1U << t) - 1U);
}

MIXPREC_SIMD_INLINE inline vi bits(vf v) noexcept { return _mm512_castps_si512(v); }
MIXPREC_SIMD_INLINE inline vf from_bits(vi v) noexcept { return _mm512_castsi512_ps(v); }
MIXPREC_SIMD_INLINE inline vi add(vi a, vi b) noexcept { return _mm512_add_epi32(a, b); }
MIXPREC_SIMD_INLINE inline vi bit_and(vi a, vi b) noexcept { return _mm512_and_si512(a, b); }
MIXPREC_SIMD_INLINE inline vi bit_or(vi a, vi b) noexcept { return _mm512_or_si512(a, b); }
MIXPREC_SIMD_INLINE inline vi bit_xor(vi a, vi b) noexcept { return _mm512_xor_si512(a, b); }
template <int N>
MIXPREC_SIMD_INLINE inline vi shift_left(vi v) noexcept {
  return _mm512_maskz_slli_epi32(all_lanes, v, N);
}
MIXPREC_SIMD_INLINE inline vf abs(vf x) noexcept { return from_bits(bit_and(bits(x), set_int<vf>(~sign_bit))); }
MIXPREC_SIMD_INLINE inline vf minus_abs(vf x) noexcept { return from_bits(bit_or(bits(x), set_int<vf>(sign_bit))); }
MIXPREC_SIMD_INLINE inline vf negate(vf x) noexcept { return from_bits(bit_xor(bits(x), set_int<vf>(sign_bit))); }
MIXPREC_SIMD_INLINE inline vf round_nearest(vf x) noexcept {
  return _mm512_maskz_roundscale_ps(all_lanes, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/// p · 2^k by VSCALEFPS: the exact product rounded once (the 8-lane `mul_pow2`'s bits for k in
/// [-150, 128]).
MIXPREC_SIMD_INLINE inline vf mul_pow2(vf p, vf k) noexcept { return _mm512_maskz_scalef_ps(all_lanes, p, k); }

/// Lanes 0-7 and 8-15 of v, and the 16 lanes whose halves are `low` and `high`.
MIXPREC_SIMD_INLINE inline vf8 lower_half(vf v) noexcept {
  return _mm512_maskz_extractf32x8_ps(static_cast<__mmask8>(0xFF), v, 0);
}
MIXPREC_SIMD_INLINE inline vf8 upper_half(vf v) noexcept {
  return _mm512_maskz_extractf32x8_ps(static_cast<__mmask8>(0xFF), v, 1);
}
MIXPREC_SIMD_INLINE inline vf join(vf8 low, vf8 high) noexcept {
  return _mm512_maskz_insertf32x8(all_lanes, _mm512_maskz_insertf32x8(all_lanes, _mm512_setzero_ps(), low, 0), high, 1);
}
/// 16 lanes reduced as the 8-lane reductions reduce max(lower, upper) and lower + upper.
MIXPREC_SIMD_INLINE inline float reduce_add(vf v) noexcept { return reduce_add(add(lower_half(v), upper_half(v))); }
MIXPREC_SIMD_INLINE inline float reduce_max(vf v) noexcept { return reduce_max(max(lower_half(v), upper_half(v))); }

template <>
MIXPREC_SIMD_INLINE inline vd set<vd>(float v) noexcept {
  return _mm512_set1_pd(v);
}
template <>
MIXPREC_SIMD_INLINE inline vd zero<vd>() noexcept {
  return _mm512_setzero_pd();
}
MIXPREC_SIMD_INLINE inline vd widen_lower(vf v) noexcept {
  return _mm512_maskz_cvtps_pd(static_cast<__mmask8>(0xFF), lower_half(v));
}
MIXPREC_SIMD_INLINE inline vd widen_upper(vf v) noexcept {
  return _mm512_maskz_cvtps_pd(static_cast<__mmask8>(0xFF), upper_half(v));
}
MIXPREC_SIMD_INLINE inline vd add(vd a, vd b) noexcept { return _mm512_add_pd(a, b); }
MIXPREC_SIMD_INLINE inline vd sub(vd a, vd b) noexcept { return _mm512_sub_pd(a, b); }
MIXPREC_SIMD_INLINE inline vd fmadd(vd a, vd b, vd c) noexcept { return _mm512_fmadd_pd(a, b, c); }
/// 8 float64 lanes loaded from p (the second argument names the type) and stored to p, unaligned.
MIXPREC_SIMD_INLINE inline vd load_doubles(const double* p, vd /*type*/) noexcept { return _mm512_loadu_pd(p); }
MIXPREC_SIMD_INLINE inline void store_doubles(double* p, vd v) noexcept { _mm512_storeu_pd(p, v); }
/// Float64 lanes 0-3 and 4-7 of v.
MIXPREC_SIMD_INLINE inline vd4 lower_half(vd v) noexcept {
  return _mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xF), v, 0);
}
MIXPREC_SIMD_INLINE inline vd4 upper_half(vd v) noexcept {
  return _mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xF), v, 1);
}
/// 8 float64 lanes reduced as the 4-lane `reduce_add` reduces lower + upper.
MIXPREC_SIMD_INLINE inline double reduce_add(vd v) noexcept { return reduce_add(add(lower_half(v), upper_half(v))); }

/// bfloat16 and float16 patterns of 16 floats, in the low halves of the 32-bit lanes / packed: the
/// 16-lane encoders of `mixprec::convert` (formats/detail/convert_x86.hpp), the bits of the 8-lane
/// `bfloat16_high_bits` (shifted down) and of f16c::encode8_float16.
MIXPREC_SIMD_INLINE inline vi bfloat16_patterns(vf v) noexcept {
  return avx512::encode16<formats::bfloat16, overflow_mode::to_inf_or_nan>(bits(v));
}
MIXPREC_SIMD_INLINE inline __m256i float16_patterns(vf v) noexcept {
  return avx512::encode16_narrow<formats::float16, overflow_mode::to_inf_or_nan>(bits(v));
}

/// 16 elements widened exactly to float.
template <class V, class T>
MIXPREC_SIMD_INLINE inline V load(const T* p) noexcept requires(std::is_same_v<V, vf>&& convertible<T>) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const vi wide = _mm512_maskz_cvtepu16_epi32(all_lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return from_bits(shift_left<16>(wide));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

/// The first t (< 16) elements widened to float, the other lanes 0; nothing past them is read.
template <class V, class T>
MIXPREC_SIMD_INLINE inline V load_first(const T* p, std::size_t t) noexcept
    requires(std::is_same_v<V, vf>&& convertible<T>) {
  const __mmask16 k = first_lanes<vf>(t);
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(k, p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return from_bits(shift_left<16>(_mm512_maskz_cvtepu16_epi32(all_lanes, _mm256_maskz_loadu_epi16(k, p))));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, _mm256_maskz_loadu_epi16(k, p));
  }
}

/// 16 floats rounded to C and widened back; identity for float.
template <class C>
MIXPREC_SIMD_INLINE inline vf round(vf v) noexcept {
  if constexpr (std::is_same_v<C, float>) {
    return v;
  } else if constexpr (std::is_same_v<C, bfloat16>) {
    return from_bits(shift_left<16>(bfloat16_patterns(v)));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, float16_patterns(v));
  }
}

/// 16 floats rounded to O (`round_to<O>`) and stored.
template <class O>
MIXPREC_SIMD_INLINE inline void store(O* p, vf v) noexcept {
  static_assert(convertible<O>, "store: the output element must be float, bfloat16 or float16.");
  if constexpr (std::is_same_v<O, float>) {
    _mm512_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(all_lanes, bfloat16_patterns(v)));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), float16_patterns(v));
  }
}

/// The first t (< 16) lanes of v rounded to O and stored; nothing past them is written.
template <class O>
MIXPREC_SIMD_INLINE inline void store_first(O* p, vf v, std::size_t t) noexcept {
  const __mmask16 k = first_lanes<vf>(t);
  if constexpr (std::is_same_v<O, float>) {
    _mm512_mask_storeu_ps(p, k, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    _mm256_mask_storeu_epi16(p, k, _mm512_maskz_cvtepi32_epi16(all_lanes, bfloat16_patterns(v)));
  } else {
    _mm256_mask_storeu_epi16(p, k, float16_patterns(v));
  }
}

/// 16 floats rounded to O and stored past the caches (the 8-lane `stream`'s contract); p aligned to 64
/// bytes for float, 32 otherwise.
template <class O>
MIXPREC_SIMD_INLINE inline void stream(O* p, vf v) noexcept {
  static_assert(convertible<O>, "stream: the output element must be float, bfloat16 or float16.");
  if constexpr (std::is_same_v<O, float>) {
    _mm512_stream_ps(p, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(all_lanes, bfloat16_patterns(v)));
  } else {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), float16_patterns(v));
  }
}

/// The word indices 0, 2, ..., 62: the low halves of the 32-bit lanes of two vectors.
inline constexpr std::array<std::uint16_t, 2 * lanes> even_words = [] {
  std::array<std::uint16_t, 2 * lanes> words{};
  for (std::size_t j = 0; j < words.size(); ++j) words[j] = static_cast<std::uint16_t>(2 * j);
  return words;
}();

/// The 32 bfloat16 patterns of a (elements 0-15) and b (16-31): `bfloat16_patterns`' low words,
/// gathered by one two-source word permutation.
MIXPREC_SIMD_INLINE inline vi bfloat16_pair(vf a, vf b) noexcept {
  return _mm512_permutex2var_epi16(bfloat16_patterns(a), _mm512_loadu_si512(even_words.data()), bfloat16_patterns(b));
}

/// 32 floats, elements 0-15 `a` and 16-31 `b`, rounded to O and stored (`store`, or `stream` with p
/// aligned to 64 bytes); bfloat16 by `bfloat16_pair`, one permutation where `store` narrows each half.
template <class O>
MIXPREC_SIMD_INLINE inline void store(O* p, vf a, vf b) noexcept {
  if constexpr (std::is_same_v<O, bfloat16>) {
    _mm512_storeu_si512(p, bfloat16_pair(a, b));
  } else {
    store<O>(p, a);
    store<O>(p + lanes, b);
  }
}
template <class O>
MIXPREC_SIMD_INLINE inline void stream(O* p, vf a, vf b) noexcept {
  if constexpr (std::is_same_v<O, bfloat16>) {
    _mm512_stream_si512(reinterpret_cast<vi*>(p), bfloat16_pair(a, b));
  } else {
    stream<O>(p, a);
    stream<O>(p + lanes, b);
  }
}
#endif  // MIXPREC_SIMD_LANES == 16

}  // namespace MIXPREC_SIMD_NS

#endif  // MIXPREC_SIMD_NS
