/// \file
/// \brief Private: AVX2 + FMA row kernels of layer_norm and rms_norm (plain and fused with the
/// residual add), compiled through a `target` attribute and called only when `mixprec::active_isa()` is
/// at least `isa::avx2` (arch/detail/target.hpp: per-ISA namespace, only pointers and sizes cross).
///
/// A row makes one trip through memory: a first pass reads it for its statistics, a second reads it
/// again from L1 (a row of 4096 floats is 16 KiB) and writes the result; no row buffer is written.
/// The sums accumulate in float64 (exact products of floats, ~2^-53 relative error per addition), so
/// the statistics are at least as accurate as the compensated float32 sums of the portable path
/// (kernels/reductions.hpp); non-finite rows and rows that would need the portable path's
/// power-of-two rescaling are reported back (the caller takes the portable path for them).
///
/// Element types: T, C, O each float, bfloat16 or float16 (`norm_avx2::supported`). Conversions are
/// exact widenings, and roundings to nearest-even that give the scalar `round_to`'s bits (NaN included).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/detail/convert_f16c.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/kernels/reductions.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace norm_avx2 {

/// float, bfloat16 or float16: the element types these kernels convert.
template <class T>
inline constexpr bool supported = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

/// 8 elements widened exactly to float.
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load8(const T* p) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

/// The first `n` (< 8) elements widened to float, the other lanes 0.
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load_tail(const T* p, std::size_t n) noexcept {
  alignas(32) T buffer[8] = {};
  for (std::size_t i = 0; i < n; ++i) buffer[i] = p[i];
  return load8<T>(buffer);
}

/// bfloat16 patterns (in the high halves of the 32-bit lanes, low halves zero) of 8 floats, rounded to
/// nearest-even; NaN becomes bfloat16's quiet NaN with the sign kept (kernels/rounding.hpp).
MIXPREC_TARGET_AVX2_INLINE inline __m256i round_bf16_bits(__m256 v) noexcept {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd),
                                           _mm256_set1_epi32(static_cast<int>(0xFFFF0000U)));
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000U)));
  const __m256i nan = _mm256_or_si256(sign, _mm256_set1_epi32(0x7FC00000));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

/// 8 floats rounded to C and widened back (`round_to<C>` then `widen`); identity for float.
template <class C>
MIXPREC_TARGET_AVX2_INLINE inline __m256 round8(__m256 v) noexcept {
  if constexpr (std::is_same_v<C, float>) {
    return v;
  } else if constexpr (std::is_same_v<C, bfloat16>) {
    return _mm256_castsi256_ps(round_bf16_bits(v));
  } else {
    return _mm256_cvtph_ps(f16c::encode8_float16<overflow_mode::to_inf_or_nan>(v));
  }
}

/// 8 floats rounded to O (`round_to<O>`) and stored.
template <class O>
MIXPREC_TARGET_AVX2_INLINE inline void store8(O* p, __m256 v) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm256_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<O, bfloat16>) {
    const __m256i bits = _mm256_srli_epi32(round_bf16_bits(v), 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), f16c::encode8_float16<overflow_mode::to_inf_or_nan>(v));
  }
}

/// The first `n` (< 8) lanes of v rounded to O and stored.
template <class O>
MIXPREC_TARGET_AVX2_INLINE inline void store_tail(O* p, __m256 v, std::size_t n) noexcept {
  alignas(32) O buffer[8];
  store8<O>(buffer, v);
  for (std::size_t i = 0; i < n; ++i) p[i] = buffer[i];
}

/// Orders this thread's non-temporal stores before what follows (a thread's last row of a call).
MIXPREC_TARGET_AVX2 inline void store_fence() noexcept { _mm_sfence(); }

/// Lanes [0, n) all ones, the others zero (n < 8).
MIXPREC_TARGET_AVX2_INLINE inline __m256 tail_mask(std::size_t n) noexcept {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), index));
}

/// Float64 sums over a row of d = v - pivot (the pivot 0 for the mean square): Σd in `sum`, Σd² in
/// `squares`, two lanes-of-4 each (the low and the high half of 8 floats), and the largest |v|.
struct moments8 {
  __m256d sum_lo, sum_hi, squares_lo, squares_hi;
  __m256 amax;
};

MIXPREC_TARGET_AVX2 inline moments8 zero_moments() noexcept {
  return {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_ps()};
}

/// Adds 8 values: d = widen(v) - pivot in float64 (exact when the exponents of v and the pivot are
/// within 29 of each other, else one float64 rounding), Σd (when `Sums`) and Σd² by FMA (one rounding
/// per addition).
template <bool Sums>
MIXPREC_TARGET_AVX2_INLINE inline void add8(moments8& m, __m256 v, __m256d pivot) noexcept {
  const __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), pivot);
  const __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), pivot);
  if constexpr (Sums) {
    m.sum_lo = _mm256_add_pd(m.sum_lo, lo);
    m.sum_hi = _mm256_add_pd(m.sum_hi, hi);
  }
  m.squares_lo = _mm256_fmadd_pd(lo, lo, m.squares_lo);
  m.squares_hi = _mm256_fmadd_pd(hi, hi, m.squares_hi);
  m.amax = _mm256_max_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))), m.amax);
}

MIXPREC_TARGET_AVX2_INLINE inline double horizontal_sum(__m256d a, __m256d b) noexcept {
  const __m256d s = _mm256_add_pd(a, b);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

MIXPREC_TARGET_AVX2_INLINE inline float horizontal_max(__m256 v) noexcept {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/// What the one pass over a row found, about d = x - pivot: Σd, Σd² (float64) and max |x|. A
/// non-finite `squares` means the row holds Inf or NaN.
struct row_stats {
  double pivot;
  double sum;
  double squares;
  float amax;
};

/// The sums of two accumulator sets (two sets: independent chains, so the FP adds' latency is hidden).
MIXPREC_TARGET_AVX2_INLINE inline row_stats finish(double pivot, const moments8& a, const moments8& b) noexcept {
  return {pivot, horizontal_sum(_mm256_add_pd(a.sum_lo, a.sum_hi), _mm256_add_pd(b.sum_lo, b.sum_hi)),
          horizontal_sum(_mm256_add_pd(a.squares_lo, a.squares_hi), _mm256_add_pd(b.squares_lo, b.squares_hi)),
          horizontal_max(_mm256_max_ps(a.amax, b.amax))};
}

/// Whether widen(T) → C → float can change a value: not when C is float or T itself.
template <class T, class C>
inline constexpr bool rounds = !std::is_same_v<C, float> && !std::is_same_v<C, T>;

/// 8 elements of x widened to float and rounded to C (`round_to<C>`, skipped where exact).
template <class T, class C>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load_c(const T* x) noexcept {
  if constexpr (rounds<T, C>) {
    return round8<C>(load8<T>(x));
  } else {
    return load8<T>(x);
  }
}

/// 8 elements of x (or the first `t` < 8, the other lanes 0) rounded to C and widened to float.
template <class T, class C>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load_rounded(const T* x, std::size_t t) noexcept {
  return round8<C>(t >= 8 ? load8<T>(x) : load_tail<T>(x, t));
}

/// One pass over x [n] (read, rounded to C, not stored): Σd and Σd² of d = x - pivot in float64, and
/// max |x|; pivot = x[0] when `Centred` (layer norm: the shift keeps Σd²/n − (Σd/n)² free of
/// cancellation for data far from 0), 0 otherwise (rms norm: Σx² only).
template <class T, class C, bool Centred>
MIXPREC_TARGET_AVX2 inline row_stats row_moments(const T* x, std::size_t n) noexcept {
  moments8 a = zero_moments();
  moments8 b = zero_moments();
  const float pivot = Centred && n > 0 ? _mm256_cvtss_f32(load_rounded<T, C>(x, n)) : 0.0F;
  const __m256d p = _mm256_set1_pd(pivot);
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    add8<Centred>(a, load_c<T, C>(x + j), p);
    add8<Centred>(b, load_c<T, C>(x + j + 8), p);
  }
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    __m256 v = load_rounded<T, C>(x + j, t);
    if (t < 8) v = _mm256_blendv_ps(_mm256_set1_ps(pivot), v, tail_mask(t));  // lanes past n: d = 0
    add8<Centred>(a, v, p);
  }
  return finish(pivot, a, b);
}

/// The fused residual add: stream[j] = residual[j] + widen(x[j]) (x alone without a residual; the
/// stream may be the residual itself), in one pass that also sums stream² (float64) and finds
/// max |stream|.
template <class T>
MIXPREC_TARGET_AVX2 inline row_stats add_residual_row(const T* x, const float* residual, std::size_t n,
                                                      float* stream) noexcept {
  moments8 a = zero_moments();
  moments8 b = zero_moments();
  const __m256d zero = _mm256_setzero_pd();
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    __m256 s0 = load8<T>(x + j);
    __m256 s1 = load8<T>(x + j + 8);
    if (residual != nullptr) {
      s0 = _mm256_add_ps(_mm256_loadu_ps(residual + j), s0);
      s1 = _mm256_add_ps(_mm256_loadu_ps(residual + j + 8), s1);
    }
    _mm256_storeu_ps(stream + j, s0);
    _mm256_storeu_ps(stream + j + 8, s1);
    add8<false>(a, s0, zero);
    add8<false>(b, s1, zero);
  }
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    __m256 s = t == 8 ? load8<T>(x + j) : load_tail<T>(x + j, t);
    if (residual != nullptr)
      s = _mm256_add_ps(t == 8 ? _mm256_loadu_ps(residual + j) : load_tail<float>(residual + j, t), s);
    if (t == 8) {
      _mm256_storeu_ps(stream + j, s);
    } else {
      store_tail<float>(stream + j, s, t);
    }
    add8<false>(a, s, zero);  // zero tail lanes add nothing
  }
  return finish(0.0, a, b);
}

/// 8 values rounded to O and stored with a non-temporal store (past the caches: for outputs too large
/// to stay in them, so that no line is read for ownership first); `p` aligned to the store's width.
template <class O>
MIXPREC_TARGET_AVX2_INLINE inline void stream8(O* p, __m256 v) noexcept {
  if constexpr (std::is_same_v<O, float>) {
    _mm256_stream_ps(p, v);
  } else {
    alignas(16) O buffer[8];
    store8<O>(buffer, v);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_load_si128(reinterpret_cast<const __m128i*>(buffer)));
  }
}

/// The number of leading elements of y [n] to store normally before `stream8` can take aligned stores.
template <class O>
[[nodiscard]] inline std::size_t unaligned_head(const O* y, std::size_t n) noexcept {
  constexpr std::size_t width = 8 * sizeof(O);  // bytes of one stream8
  const auto address = reinterpret_cast<std::uintptr_t>(y);
  return std::min(n, ((width - address % width) % width) / sizeof(O));
}

/// Prefetches the cache line holding element j of the next row (null: none) while this row is
/// normalised, so that the next row's first pass does not wait for memory (one line per 64 bytes of
/// row; T of at most 8 bytes).
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline void prefetch_next(const void* next, std::size_t j) noexcept {
  // j steps by 8 from any start: exactly one j per 64-byte block of the row passes this test.
  if (next != nullptr && j % (64 / sizeof(T)) < 8) {
    _mm_prefetch(static_cast<const char*>(next) + j * sizeof(T), _MM_HINT_T0);
  }
}

/// How the normalised rows are written.
enum class store_kind : std::uint8_t {
  cached,     ///< ordinary stores: the output stays in the caches for the next layer
  streaming,  ///< non-temporal stores, for outputs larger than the last-level cache
};

/// 8 values rounded to O and stored the `Store` way (`stream8` needs y aligned).
template <class O, store_kind Store>
MIXPREC_TARGET_AVX2_INLINE inline void put8(O* y, __m256 v) noexcept {
  if constexpr (Store == store_kind::streaming) {
    stream8<O>(y, v);
  } else {
    store8<O>(y, v);
  }
}

/// Layer normalisation of t ≤ 8 elements (a row's head or tail).
template <class T, class C, class O>
MIXPREC_TARGET_AVX2_INLINE inline void layer_norm_part(const T* x, std::size_t t, __m256 m, __m256 c, __m256 r,
                                                       const float* scale, const float* bias, O* y,
                                                       float* xhat) noexcept {
  const __m256 d = _mm256_sub_ps(_mm256_sub_ps(load_rounded<T, C>(x, t), m), c);
  store_tail<O>(y, _mm256_fmadd_ps(d, _mm256_mul_ps(r, load_tail<float>(scale, t)), load_tail<float>(bias, t)), t);
  if (xhat != nullptr) store_tail<float>(xhat, _mm256_mul_ps(d, r), t);
}

/// Layer normalisation of x [n] (read again, rounded to C) with mean `mean` + `correction` (the
/// float64 mean split in two floats) and reciprocal standard deviation `inv`: d = (x - mean) -
/// correction; y = round_to<O>(fma(d, inv·scale, bias)); x̂ = d·inv when `xhat` is given.
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX2 inline void layer_norm_apply(const T* x, std::size_t n, float mean, float correction, float inv,
                                                 const float* scale, const float* bias, O* y, float* xhat,
                                                 const T* next) noexcept {
  const __m256 m = _mm256_set1_ps(mean);
  const __m256 c = _mm256_set1_ps(correction);
  const __m256 r = _mm256_set1_ps(inv);
  std::size_t j = 0;
  if constexpr (Store == store_kind::streaming) {
    j = unaligned_head(y, n);
    if (j > 0) layer_norm_part<T, C, O>(x, j, m, c, r, scale, bias, y, xhat);
  }
  if (xhat == nullptr) {  // inference: the loop without the x̂ stores
    for (; n - j >= 8; j += 8) {
      prefetch_next<T>(next, j);
      const __m256 d = _mm256_sub_ps(_mm256_sub_ps(load_c<T, C>(x + j), m), c);
      const __m256 v = _mm256_fmadd_ps(d, _mm256_mul_ps(r, _mm256_loadu_ps(scale + j)), _mm256_loadu_ps(bias + j));
      put8<O, Store>(y + j, v);
    }
  } else {
    for (; n - j >= 8; j += 8) {
      prefetch_next<T>(next, j);
      const __m256 d = _mm256_sub_ps(_mm256_sub_ps(load_c<T, C>(x + j), m), c);
      store8<O>(y + j, _mm256_fmadd_ps(d, _mm256_mul_ps(r, _mm256_loadu_ps(scale + j)), _mm256_loadu_ps(bias + j)));
      _mm256_storeu_ps(xhat + j, _mm256_mul_ps(d, r));
    }
  }
  if (j < n)
    layer_norm_part<T, C, O>(x + j, n - j, m, c, r, scale + j, bias + j, y + j, xhat != nullptr ? xhat + j : nullptr);
}

/// RMS normalisation of t ≤ 8 elements (a row's head or tail).
template <class T, class C, class O>
MIXPREC_TARGET_AVX2_INLINE inline void rms_norm_part(const T* x, std::size_t t, __m256 r, const float* scale, O* y,
                                                     float* xhat) noexcept {
  const __m256 xh = _mm256_mul_ps(load_rounded<T, C>(x, t), r);
  store_tail<O>(y, _mm256_mul_ps(xh, load_tail<float>(scale, t)), t);
  if (xhat != nullptr) store_tail<float>(xhat, xh, t);
}

/// RMS normalisation of x [n] (read again, rounded to C) with reciprocal root mean square `inv`:
/// y = round_to<O>((x·inv)·scale); x̂ = x·inv when `xhat` is given.
/// `next` and `next2` (the fused form's next residual row) are prefetched as rows of Next and float.
template <class T, class C, class O, store_kind Store, class Next = T>
MIXPREC_TARGET_AVX2 inline void rms_norm_apply(const T* x, std::size_t n, float inv, const float* scale, O* y,
                                               float* xhat, const Next* next, const float* next2 = nullptr) noexcept {
  const __m256 r = _mm256_set1_ps(inv);
  std::size_t j = 0;
  if constexpr (Store == store_kind::streaming) {
    j = unaligned_head(y, n);
    if (j > 0) rms_norm_part<T, C, O>(x, j, r, scale, y, xhat);
  }
  if (xhat == nullptr) {
    for (; n - j >= 8; j += 8) {
      prefetch_next<Next>(next, j);
      prefetch_next<float>(next2, j);
      const __m256 v = _mm256_mul_ps(_mm256_mul_ps(load_c<T, C>(x + j), r), _mm256_loadu_ps(scale + j));
      put8<O, Store>(y + j, v);
    }
  } else {
    for (; n - j >= 8; j += 8) {
      prefetch_next<Next>(next, j);
      prefetch_next<float>(next2, j);
      const __m256 xh = _mm256_mul_ps(load_c<T, C>(x + j), r);
      store8<O>(y + j, _mm256_mul_ps(xh, _mm256_loadu_ps(scale + j)));
      _mm256_storeu_ps(xhat + j, xh);
    }
  }
  if (j < n) rms_norm_part<T, C, O>(x + j, n - j, r, scale + j, y + j, xhat != nullptr ? xhat + j : nullptr);
}

/// stream[0, n) *= factor.
MIXPREC_TARGET_AVX2 inline void scale_row(float* stream, std::size_t n, float factor) noexcept {
  const __m256 f = _mm256_set1_ps(factor);
  std::size_t j = 0;
  for (; n - j >= 8; j += 8) _mm256_storeu_ps(stream + j, _mm256_mul_ps(_mm256_loadu_ps(stream + j), f));
  for (; j < n; ++j) stream[j] *= factor;
}

/// The statistics of a row are usable as they are: finite, and no power-of-two rescaling needed
/// (`kernels::rescaling_exponent`'s rule, the same as the portable path's).
inline bool plain_row(const row_stats& stats, std::size_t n) noexcept {
  return std::isfinite(stats.squares) && kernels::detail::rescaling_exponent_of_max(stats.amax, n) == 0;
}

/// What normalises a layer_norm row: the float64 mean split in two floats (mean + correction) and the
/// reciprocal standard deviation.
struct layer_norm_factors {
  float mean;
  float correction;
  float inv;
};

/// The layer_norm factors of a row's statistics (d = x - pivot): mean = pivot + Σd/n and var =
/// Σd²/n - (Σd/n)² in float64, each rounded once to float; inv = 1 / sqrt(float(var) + eps) in float
/// (epsilon added in float, as on the portable path).
inline layer_norm_factors layer_norm_factors_of(const row_stats& stats, std::size_t n, float eps) noexcept {
  const double shift = stats.sum / static_cast<double>(n);
  const double mean = stats.pivot + shift;
  const double variance = std::max(stats.squares / static_cast<double>(n) - shift * shift, 0.0);
  const auto rounded = static_cast<float>(mean);
  return {rounded, static_cast<float>(mean - static_cast<double>(rounded)),
          1.0F / std::sqrt(static_cast<float>(variance) + eps)};
}

/// The rms_norm factor of a row's statistics (pivot 0): 1 / sqrt(float(Σx²/n) + eps).
inline float rms_inv_of(const row_stats& stats, std::size_t n, float eps) noexcept {
  return 1.0F / std::sqrt(static_cast<float>(stats.squares / static_cast<double>(n)) + eps);
}

/// One row of `nn::layer_norm`: x [n] (n >= 1) in T, rounded to C; y [n] in O; x̂ and r saved when
/// `xhat` is non-null. Two passes over x (the second from L1): statistics in float64 — with d = x - x[0], mean
/// = x[0] + Σd/n and var = Σd²/n - (Σd/n)², each rounded once to float (epsilon is then added in
/// float, as on the portable path) — and the normalisation. Returns false, having written nothing,
/// when the row is not finite or needs rescaling (the caller takes the portable path).
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX2 inline bool layer_norm_row(const T* x, std::size_t n, float eps, const float* scale,
                                               const float* bias, O* y, float* xhat, float* rstd,
                                               const T* next) noexcept {
  const row_stats stats = row_moments<T, C, true>(x, n);
  if (!plain_row(stats, n)) return false;
  const layer_norm_factors f = layer_norm_factors_of(stats, n, eps);
  layer_norm_apply<T, C, O, Store>(x, n, f.mean, f.correction, f.inv, scale, bias, y, xhat, next);
  if (rstd != nullptr) *rstd = f.inv;
  return true;
}

/// One row of the plain `nn::rms_norm`: as `layer_norm_row`, inv = 1 / sqrt(float(Σx²/n) + eps).
template <class T, class C, class O, store_kind Store>
MIXPREC_TARGET_AVX2 inline bool rms_norm_row(const T* x, std::size_t n, float eps, const float* scale, O* y,
                                             float* xhat, float* rstd, const T* next) noexcept {
  const row_stats stats = row_moments<T, C, false>(x, n);
  if (!plain_row(stats, n)) return false;
  const float inv = rms_inv_of(stats, n, eps);
  rms_norm_apply<T, C, O, Store>(x, n, inv, scale, y, xhat, next);
  if (rstd != nullptr) *rstd = inv;
  return true;
}

/// One row of the fused `nn::rms_norm`: stream = residual + x (x alone when `residual` is null), y =
/// rmsnorm(stream), then stream *= *stream_factor when given. Returns false when the row is not
/// finite or needs rescaling, having written the unscaled stream only.
template <class T, class O, store_kind Store>
MIXPREC_TARGET_AVX2 inline bool rms_norm_fused_row(const T* x, const float* residual, std::size_t n, float eps,
                                                   const float* scale, O* y, float* stream, float* xhat, float* rstd,
                                                   const float* stream_factor, const T* next_x,
                                                   const float* next_residual) noexcept {
  const row_stats stats = add_residual_row<T>(x, residual, n, stream);
  if (!plain_row(stats, n)) return false;
  const float inv = rms_inv_of(stats, n, eps);
  rms_norm_apply<float, float, O, Store, T>(stream, n, inv, scale, y, xhat, next_x, next_residual);
  if (stream_factor != nullptr) scale_row(stream, n, *stream_factor);
  if (rstd != nullptr) *rstd = inv;
  return true;
}

}  // namespace norm_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
