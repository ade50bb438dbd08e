/// \file
/// \brief Private: the AVX-512 row kernel of layer_norm, through a `target` attribute, called only
/// when `mixprec::active_isa()` is at least `isa::avx512`; and the 16-lane loads, roundings and stores
/// the AVX-512 rows share (the softmax's too).
///
/// norm_avx2::layer_norm_row's contract on 16 lanes: one pass for the statistics (float64 sums of
/// d = x - pivot and d², max |x|), a second from L1 that normalises, the same rejection of rows that
/// are not finite or need rescaling. The statistics pass keeps four independent sets of float64 accumulators (64
/// elements per step) where the AVX2 rows keep two (16): each set's additions form one dependent chain,
/// and the AVX2 pass waits on their latency. So the sums are added in another order than at the avx2
/// level: the statistics differ from its in the last float64 bits, which can move a float32 result by
/// one rounding (tests/kernels/norm_rows_test.cpp holds every level to the long double reference). The
/// normalisation is the AVX2 rows' arithmetic element for element (the same operations in the same
/// order) in steps of 32, and the elements after the last full step are handed to the AVX2 rows.
///
/// The roundings to bfloat16 and float16 are the 16-lane encoders of `mixprec::convert`
/// (formats/detail/convert_x86.hpp), with the AVX2 roundings' bits (tests/kernels/norm_avx512_test.cpp
/// sweeps them against the scalar codecs): bfloat16 by integer arithmetic on the float's bits
/// (VCVTNEPS2BF16 would flush subnormal inputs to zero), float16 by VCVTPS2PH with the NaN lanes
/// re-encoded. Two 16-lane bfloat16 results are packed by one word permutation.
///
/// Only where it measured faster than the AVX2 rows: layer_norm rows, written with ordinary stores or,
/// for outputs larger than the last-level cache, with non-temporal stores (docs/performance.md,
/// "Norm rows: measurements behind the design"). The rms_norm rows (one multiply per element,
/// statistics without the centring) took no gain and keep the AVX2 rows: their code is not compiled
/// twice (a 16-lane rms_norm made mixprec-llama's policy translation units markedly slower to compile).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/detail/convert_lanewise.hpp"
#include "mixprec/formats/detail/convert_x86.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float_format.hpp"
#include "mixprec/kernels/detail/exp_avx512.hpp"
#include "mixprec/kernels/detail/norm_avx2.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace norm_avx512 {

using exp_avx512::all_lanes;
using norm_avx2::row_stats;
using norm_avx2::store_kind;

/// The lanes of one 512-bit vector of floats.
inline constexpr std::size_t lanes = 16;

/// Lanes 0-7 and 8-15 of v, and of a float64 v lanes 0-3 and 4-7 (the zero-masking extractions:
/// GCC 12's casts and plain extractions pass an undefined register, exp_avx512.hpp).
MIXPREC_TARGET_AVX512_INLINE inline __m256 lower_half(__m512 v) noexcept {
  return _mm512_maskz_extractf32x8_ps(static_cast<__mmask8>(0xFF), v, 0);
}
MIXPREC_TARGET_AVX512_INLINE inline __m256 upper_half(__m512 v) noexcept {
  return _mm512_maskz_extractf32x8_ps(static_cast<__mmask8>(0xFF), v, 1);
}
MIXPREC_TARGET_AVX512_INLINE inline __m256d lower_half(__m512d v) noexcept {
  return _mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xF), v, 0);
}
MIXPREC_TARGET_AVX512_INLINE inline __m256d upper_half(__m512d v) noexcept {
  return _mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xF), v, 1);
}

/// The 16 floats whose lanes 0-7 are `low` and 8-15 are `high`.
MIXPREC_TARGET_AVX512_INLINE inline __m512 join(__m256 low, __m256 high) noexcept {
  // Two zero-masking insertions: GCC 12's _mm512_zextps256_ps512 passes an undefined register.
  return _mm512_maskz_insertf32x8(all_lanes, _mm512_maskz_insertf32x8(all_lanes, _mm512_setzero_ps(), low, 0), high, 1);
}

/// Lanes [0, t) set, for t < 16.
MIXPREC_TARGET_AVX512_INLINE inline __mmask16 first_lanes(std::size_t t) noexcept {
  return static_cast<__mmask16>((1U << t) - 1U);
}

/// 16 elements widened exactly to float (norm_avx2::load8's conversions).
template <class I>
MIXPREC_TARGET_AVX512_INLINE inline __m512 load16(const I* p) noexcept {
  if constexpr (std::is_same_v<I, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<I, bfloat16>) {
    const __m512i wide =
        _mm512_maskz_cvtepu16_epi32(all_lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all_lanes, wide, 8 * sizeof(bfloat16)));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

/// The first t (< 16) elements widened to float, the other lanes 0; nothing past them is read.
template <class I>
MIXPREC_TARGET_AVX512_INLINE inline __m512 load_first(const I* p, std::size_t t) noexcept {
  const __mmask16 k = first_lanes(t);
  if constexpr (std::is_same_v<I, float>) {
    return _mm512_maskz_loadu_ps(k, p);
  } else if constexpr (std::is_same_v<I, bfloat16>) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(all_lanes, _mm256_maskz_loadu_epi16(k, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all_lanes, wide, 8 * sizeof(bfloat16)));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, _mm256_maskz_loadu_epi16(k, p));
  }
}

/// bfloat16 patterns of 16 floats, in the low halves of the 32-bit lanes (high halves zero): the
/// 16-lane encoder of `mixprec::convert` (formats/detail/convert_x86.hpp; nearest-even, NaN to
/// bfloat16's quiet NaN with the sign kept), the bits of norm_avx2::round_bf16_bits shifted down.
MIXPREC_TARGET_AVX512_INLINE inline __m512i bf16_patterns(__m512 v) noexcept {
  return avx512::encode16<formats::bfloat16, overflow_mode::to_inf_or_nan>(_mm512_castps_si512(v));
}

/// float16 patterns of 16 floats: the 16-lane encoder of `mixprec::convert` (VCVTPS2PH, nearest-even,
/// overflow to Inf; NaN lanes re-encoded to float16's quiet NaN with the sign kept), the bits of
/// f16c::encode8_float16<overflow_mode::to_inf_or_nan>.
MIXPREC_TARGET_AVX512_INLINE inline __m256i float16_patterns(__m512 v) noexcept {
  return avx512::encode16_narrow<formats::float16, overflow_mode::to_inf_or_nan>(_mm512_castps_si512(v));
}

/// 16 floats rounded to C and widened back (norm_avx2::round8 on 16 lanes); identity for float.
template <class C>
MIXPREC_TARGET_AVX512_INLINE inline __m512 round16(__m512 v) noexcept {
  if constexpr (std::is_same_v<C, float>) {
    return v;
  } else if constexpr (std::is_same_v<C, bfloat16>) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all_lanes, bf16_patterns(v), 8 * sizeof(bfloat16)));
  } else {
    return _mm512_maskz_cvtph_ps(all_lanes, float16_patterns(v));
  }
}

/// 16 floats rounded to O (`round_to<O>`: norm_avx2::store8 on 16 lanes) and stored.
template <class O>
MIXPREC_TARGET_AVX512_INLINE inline void store16(O* p, __m512 v) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm512_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(all_lanes, bf16_patterns(v)));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), float16_patterns(v));
  }
}

/// The 32 bfloat16 patterns of a (elements 0-15) and b (16-31), rounded: the low half of each 32-bit
/// lane of bf16_patterns, gathered by one two-source word permutation (even words of a, then of b).
inline constexpr std::array<std::uint16_t, 2 * lanes> even_words = [] {
  std::array<std::uint16_t, 2 * lanes> words{};
  for (std::size_t j = 0; j < words.size(); ++j) words[j] = static_cast<std::uint16_t>(2 * j);
  return words;
}();

MIXPREC_TARGET_AVX512_INLINE inline __m512i bf16_pair(__m512 a, __m512 b) noexcept {
  return _mm512_permutex2var_epi16(bf16_patterns(a), _mm512_loadu_si512(even_words.data()), bf16_patterns(b));
}

/// 32 floats, elements 0-15 `a` and 16-31 `b`, rounded to O and stored (store16 twice; bfloat16 by
/// bf16_pair, one permutation where store16 shifts and narrows each half).
template <class O>
MIXPREC_TARGET_AVX512_INLINE inline void store32(O* p, __m512 a, __m512 b) noexcept {
  if constexpr (std::is_same_v<O, bfloat16>) {
    _mm512_storeu_si512(p, bf16_pair(a, b));
  } else {
    store16<O>(p, a);
    store16<O>(p + lanes, b);
  }
}

/// store32 with non-temporal stores (past the caches, no read for ownership: outputs larger than the
/// last-level cache); `p` aligned to 64 bytes.
template <class O>
MIXPREC_TARGET_AVX512_INLINE inline void stream32(O* p, __m512 a, __m512 b) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm512_stream_ps(p, a);
    _mm512_stream_ps(p + lanes, b);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), bf16_pair(a, b));
  } else {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), float16_patterns(a));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p + lanes), float16_patterns(b));
  }
}

/// The number of leading elements of y [n] to store normally before `stream32` can take 64-byte
/// aligned stores.
template <class O>
[[nodiscard]] inline std::size_t unaligned_head(const O* y, std::size_t n) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(y);
  return std::min(n, ((64 - address % 64) % 64) / sizeof(O));
}

/// 16 elements of x widened to float and rounded to C (skipped where exact: norm_avx2::rounds).
template <class T, class C>
MIXPREC_TARGET_AVX512_INLINE inline __m512 load_c(const T* x) noexcept {
  if constexpr (norm_avx2::rounds<T, C>) {
    return round16<C>(load16<T>(x));
  } else {
    return load16<T>(x);
  }
}

/// Float64 sums over 16 lanes of d = v - pivot: Σd in `sum`, Σd² in `squares` (lanes 0-7 of v in the
/// `_lo` halves, 8-15 in `_hi`), and the largest |v|. One set of the statistics pass's four.
struct moments16 {
  __m512d sum_lo, sum_hi, squares_lo, squares_hi;
  __m512 amax;
};

MIXPREC_TARGET_AVX512 inline moments16 zero_moments() noexcept {
  return {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_ps()};
}

/// norm_avx2::add8 on 16 values: d = widen(v) - pivot in float64, Σd and Σd² by FMA.
MIXPREC_TARGET_AVX512_INLINE inline void add16(moments16& m, __m512 v, __m512d pivot) noexcept {
  constexpr auto all8 = static_cast<__mmask8>(0xFF);
  const __m512d lo = _mm512_sub_pd(_mm512_maskz_cvtps_pd(all8, lower_half(v)), pivot);
  const __m512d hi = _mm512_sub_pd(_mm512_maskz_cvtps_pd(all8, upper_half(v)), pivot);
  m.sum_lo = _mm512_add_pd(m.sum_lo, lo);
  m.sum_hi = _mm512_add_pd(m.sum_hi, hi);
  m.squares_lo = _mm512_fmadd_pd(lo, lo, m.squares_lo);
  m.squares_hi = _mm512_fmadd_pd(hi, hi, m.squares_hi);
  const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
  m.amax = _mm512_maskz_max_ps(all_lanes, _mm512_castsi512_ps(magnitude), m.amax);
}

/// The statistics pass's four accumulator sets (four independent chains of additions).
using moment_sets = moments16[4];

/// The sum of the 16 lanes of `a` and `b` in the order ((a0 + a1) + (a2 + a3)) lane by lane, then
/// across lanes (norm_avx2::horizontal_sum): `lo` and `hi` are the four sets' `_lo` and `_hi` sums.
MIXPREC_TARGET_AVX512_INLINE inline double total(const __m512d (&lo)[4], const __m512d (&hi)[4]) noexcept {
  __m512d set[4];
  for (std::size_t s = 0; s < 4; ++s) set[s] = _mm512_add_pd(lo[s], hi[s]);
  const __m512d sum = _mm512_add_pd(_mm512_add_pd(set[0], set[1]), _mm512_add_pd(set[2], set[3]));
  return norm_avx2::horizontal_sum(lower_half(sum), upper_half(sum));
}

/// The statistics of the four sets.
MIXPREC_TARGET_AVX512_INLINE inline row_stats finish(double pivot, const moment_sets& m) noexcept {
  const __m512d sum_lo[4] = {m[0].sum_lo, m[1].sum_lo, m[2].sum_lo, m[3].sum_lo};
  const __m512d sum_hi[4] = {m[0].sum_hi, m[1].sum_hi, m[2].sum_hi, m[3].sum_hi};
  const __m512d squares_lo[4] = {m[0].squares_lo, m[1].squares_lo, m[2].squares_lo, m[3].squares_lo};
  const __m512d squares_hi[4] = {m[0].squares_hi, m[1].squares_hi, m[2].squares_hi, m[3].squares_hi};
  const __m512 amax = _mm512_maskz_max_ps(all_lanes, _mm512_maskz_max_ps(all_lanes, m[0].amax, m[1].amax),
                                          _mm512_maskz_max_ps(all_lanes, m[2].amax, m[3].amax));
  return {pivot, total(sum_lo, sum_hi), total(squares_lo, squares_hi),
          norm_avx2::horizontal_max(_mm256_max_ps(lower_half(amax), upper_half(amax)))};
}

/// Prefetches the cache line of element j of the next row (null: none): j steps by 16, and exactly
/// one j per 64-byte block of the row passes the test (T of at most 4 bytes).
template <class T>
MIXPREC_TARGET_AVX512_INLINE inline void prefetch_next(const void* next, std::size_t j) noexcept {
  static_assert(64 / sizeof(T) >= lanes, "one step of 16 elements must not span more than one cache line");
  if (next != nullptr && j % (64 / sizeof(T)) < lanes) {
    _mm_prefetch(static_cast<const char*>(next) + j * sizeof(T), _MM_HINT_T0);
  }
}

/// Prefetches the cache line of element j of the next row (null: none), whatever j.
template <class T>
MIXPREC_TARGET_AVX512_INLINE inline void prefetch_line(const T* next, std::size_t j) noexcept {
  if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T0);
}

/// The leading elements of the next row that a layer_norm row's statistics pass prefetches (half of
/// each of its 64-element steps); the normalisation prefetches the rest. So memory is read through
/// both passes: prefetched from the normalisation alone, it idled through every statistics pass.
/// (measured: docs/performance.md, "Norm rows: measurements behind the design").
[[nodiscard]] constexpr std::size_t prefetched_by_statistics(std::size_t n) noexcept {
  return n / (4 * lanes) * (2 * lanes);
}

/// `p + j`, or null when p is null.
template <class P>
[[nodiscard]] inline P* offset(P* p, std::size_t j) noexcept {
  return p != nullptr ? p + j : nullptr;
}

/// norm_avx2::row_moments<T, C, true> on 16 lanes: one pass over x [n] (n >= 1; read, rounded to C,
/// not stored), Σd and Σd² of d = x - pivot in float64 and max |x|, with pivot = x[0] rounded to C.
/// The first prefetched_by_statistics(n) elements of `next` (the next row, or null) are prefetched.
template <class T, class C>
MIXPREC_TARGET_AVX512 inline row_stats row_moments(const T* x, std::size_t n, const T* next) noexcept {
  moment_sets m = {zero_moments(), zero_moments(), zero_moments(), zero_moments()};
  const float pivot = _mm256_cvtss_f32(norm_avx2::load_rounded<T, C>(x, n));
  const __m512d p = _mm512_set1_pd(pivot);
  std::size_t j = 0;
  for (; n - j >= 4 * lanes; j += 4 * lanes) {
    prefetch_next<T>(next, j / 2);
    prefetch_next<T>(next, j / 2 + lanes);
    for (std::size_t s = 0; s < 4; ++s) add16(m[s], load_c<T, C>(x + j + s * lanes), p);
  }
  for (; n - j >= lanes; j += lanes) add16(m[0], load_c<T, C>(x + j), p);
  if (j < n) {
    const std::size_t t = n - j;
    // Lanes past n hold the pivot: d = 0 there.
    const __m512 v = _mm512_mask_blend_ps(first_lanes(t), _mm512_set1_ps(pivot), round16<C>(load_first<T>(x + j, t)));
    add16(m[0], v, p);
  }
  return finish(pivot, m);
}

/// One layer_norm step of 32 elements: d = (x - mean) - correction, y = round_to<O>(fma(d, inv·scale,
/// bias)) stored the `Store` way (streaming: y + j aligned to 64 bytes), x̂ = d·inv when `xhat` is given.
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX512_INLINE inline void layer_norm_step(const T* x, std::size_t j, __m512 m, __m512 c, __m512 r,
                                                         const float* scale, const float* bias, O* y,
                                                         float* xhat) noexcept {
  const __m512 d0 = _mm512_sub_ps(_mm512_sub_ps(load_c<T, C>(x + j), m), c);
  const __m512 d1 = _mm512_sub_ps(_mm512_sub_ps(load_c<T, C>(x + j + lanes), m), c);
  const __m512 y0 = _mm512_fmadd_ps(d0, _mm512_mul_ps(r, _mm512_loadu_ps(scale + j)), _mm512_loadu_ps(bias + j));
  const __m512 y1 =
      _mm512_fmadd_ps(d1, _mm512_mul_ps(r, _mm512_loadu_ps(scale + j + lanes)), _mm512_loadu_ps(bias + j + lanes));
  if constexpr (Store == store_kind::streaming) {
    stream32<O>(y + j, y0, y1);
  } else {
    store32<O>(y + j, y0, y1);
  }
  if (xhat != nullptr) {
    _mm512_storeu_ps(xhat + j, _mm512_mul_ps(d0, r));
    _mm512_storeu_ps(xhat + j + lanes, _mm512_mul_ps(d1, r));
  }
}

/// norm_avx2::layer_norm_apply on 16 lanes, the same arithmetic element for element: d = (x - mean) -
/// correction; y = round_to<O>(fma(d, inv·scale, bias)); x̂ = d·inv when `xhat` is given. Steps of
/// 32 elements; what is left after them goes to the AVX2 rows. `Store` streaming: non-temporal
/// stores of y from its first 64-byte boundary on (the elements before it and the tail through the
/// AVX2 rows), as the AVX2 rows do when no x̂ is kept (training reads y back: cached stores). The
/// elements of `next` (the next row, or null) from prefetched_by_statistics(n) on are prefetched.
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX512 inline void layer_norm_apply(const T* x, std::size_t n, float mean, float correction, float inv,
                                                   const float* scale, const float* bias, O* y, float* xhat,
                                                   const T* next) noexcept {
  const __m512 m = _mm512_set1_ps(mean);
  const __m512 c = _mm512_set1_ps(correction);
  const __m512 r = _mm512_set1_ps(inv);
  // The loops prefetch at h + j / 2 (steps of 16 with j's steps of 32, up to n - 16): the line at h
  // first (a head j0 <= 31 skips up to 15 elements, within its line), the lines after the loops' last
  // position after them.
  const std::size_t h = prefetched_by_statistics(n);
  if (h < n) prefetch_line(next, h);
  std::size_t j = 0;
  if (Store == store_kind::streaming && xhat == nullptr) {
    j = unaligned_head(y, n);
    if (j > 0) {
      norm_avx2::layer_norm_apply<T, C, O, store_kind::cached>(x, j, mean, correction, inv, scale, bias, y, nullptr,
                                                               nullptr);
    }
    for (; n - j >= 2 * lanes; j += 2 * lanes) {
      prefetch_next<T>(next, h + j / 2);
      layer_norm_step<T, C, O, store_kind::streaming>(x, j, m, c, r, scale, bias, y, nullptr);
    }
  } else {
    for (; n - j >= 2 * lanes; j += 2 * lanes) {
      prefetch_next<T>(next, h + j / 2);
      layer_norm_step<T, C, O, store_kind::cached>(x, j, m, c, r, scale, bias, y, xhat);
    }
  }
  for (std::size_t p = h + j / 2; p < n; p += 64 / sizeof(T)) prefetch_line(next, p);
  prefetch_line(next, n - 1);
  if (j < n) {
    norm_avx2::layer_norm_apply<T, C, O, Store>(x + j, n - j, mean, correction, inv, scale + j, bias + j, y + j,
                                                offset(xhat, j), nullptr);
  }
}

/// norm_avx2::layer_norm_row with the 16-lane passes, y stored the `Store` way: false, having written
/// nothing, when the row is not finite or needs rescaling.
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX512 inline bool layer_norm_row(const T* x, std::size_t n, float eps, const float* scale,
                                                 const float* bias, O* y, float* xhat, float* rstd,
                                                 const T* next) noexcept {
  const row_stats stats = row_moments<T, C>(x, n, next);
  if (!norm_avx2::plain_row(stats, n)) return false;
  const norm_avx2::layer_norm_factors f = norm_avx2::layer_norm_factors_of(stats, n, eps);
  layer_norm_apply<T, C, O, Store>(x, n, f.mean, f.correction, f.inv, scale, bias, y, xhat, next);
  if (rstd != nullptr) *rstd = f.inv;
  return true;
}

}  // namespace norm_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
