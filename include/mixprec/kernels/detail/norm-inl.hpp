/// \file
/// \brief Private: the body of norm.hpp's rows, compiled once per SIMD target (foreach_target.hpp):
/// `layer_norm_row`, `rms_norm_row`, `rms_norm_fused_row` in namespace `norm` of each target. The
/// constants below are what differs between the targets.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/norm.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS::norm {

/// The sets of float64 accumulators of the statistics pass, one vector each per step: independent
/// chains of additions, so that the pass does not wait on their latency (4 at 16 lanes, 2 at 8). The
/// number fixes the order of the additions: the two targets' statistics differ in the last bits.
inline constexpr std::size_t moment_sets = lanes == 16 ? 4 : 2;
/// The elements of one step of the statistics pass.
inline constexpr std::size_t moments_step = moment_sets * lanes;
/// The vectors of one step of the normalisation: two at 16 lanes, whose 32 bfloat16 results one
/// permutation packs (`store(p, a, b)`).
inline constexpr std::size_t step_vectors = lanes == 16 ? 2 : 1;
/// The elements of one step of the normalisation.
inline constexpr std::size_t step = step_vectors * lanes;
/// Whether a layer_norm row's statistics pass prefetches the first half of the next row, the
/// normalisation the rest (16 lanes: memory is then read through both passes); else the
/// normalisation prefetches all of it (docs/performance.md, "Norm rows: measurements behind the design").
inline constexpr bool prefetch_in_statistics = lanes == 16;

static_assert(moment_sets == 2 || moment_sets == 4, "finish adds the sets pairwise");

/// What the statistics pass found about d = x - pivot: Σd, Σd² (float64) and max |x|. A non-finite
/// `squares` means the row holds Inf or NaN.
struct row_stats {
  double pivot;
  double sum;
  double squares;
  float amax;
};

/// Whether widen(T) → C → float can change a value: not when C is float or T itself.
template <class T, class C>
inline constexpr bool rounds = !std::is_same_v<C, float> && !std::is_same_v<C, T>;

/// A vector of elements of x widened to float and rounded to C (`round_to<C>`, skipped where exact).
template <class V, class T, class C>
MIXPREC_SIMD_INLINE inline V load_c(const T* x) noexcept {
  if constexpr (rounds<T, C>) {
    return round<C>(load<V, T>(x));
  } else {
    return load<V, T>(x);
  }
}

/// Prefetches the cache line holding element j of `next`, a row of T (null: none); j steps by
/// `lanes`, and exactly one j per 64-byte block of the row passes the test.
template <class T>
MIXPREC_SIMD_INLINE inline void prefetch_next(const void* next, std::size_t j) noexcept {
  static_assert(64 / sizeof(T) >= lanes, "one step must not span more than one cache line");
  if (next != nullptr && j % (64 / sizeof(T)) < lanes) {
    _mm_prefetch(static_cast<const char*>(next) + j * sizeof(T), _MM_HINT_T0);
  }
}

/// Prefetches the cache line of element j of `next` (null: none), whatever j.
template <class T>
MIXPREC_SIMD_INLINE inline void prefetch_line(const T* next, std::size_t j) noexcept {
  if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T0);
}

/// The leading elements of the next row that a row's statistics pass prefetches (half of each step's;
/// none without `prefetch_in_statistics`).
[[nodiscard]] constexpr std::size_t prefetched_by_statistics(std::size_t n) noexcept {
  return prefetch_in_statistics ? n / moments_step * (moments_step / 2) : 0;
}

/// What a statistics pass sums: d = x - pivot and d² (`centred`, layer_norm: pivot = x[0]), or only the
/// squares of x (`squares`, rms_norm: pivot 0).
enum class sums : std::uint8_t { centred, squares };

/// Float64 sums of d = v - pivot over the lanes of `vf`: Σd in `sum`, Σd² in `squares` (the lower
/// half of the lanes in `_lower`, the upper in `_upper`), and the largest |v|. One of the
/// statistics pass's `moment_sets`.
struct moments {
  vd sum_lower, sum_upper, squares_lower, squares_upper;
  vf amax;
};

MIXPREC_SIMD_INLINE inline moments zero_moments() noexcept {
  return {zero<vd>(), zero<vd>(), zero<vd>(), zero<vd>(), zero<vf>()};
}

/// Adds a vector: d = widen(v) - pivot in float64 (exact when the exponents of v and the pivot are
/// within 29 of each other, else one float64 rounding), Σd (when `centred`) and Σd² by FMA (one
/// rounding per addition).
template <sums S>
MIXPREC_SIMD_INLINE inline void accumulate(moments& m, vf v, vd pivot) noexcept {
  const vd lower = sub(widen_lower(v), pivot);
  const vd upper = sub(widen_upper(v), pivot);
  if constexpr (S == sums::centred) {
    m.sum_lower = add(m.sum_lower, lower);
    m.sum_upper = add(m.sum_upper, upper);
  }
  m.squares_lower = fmadd(lower, lower, m.squares_lower);
  m.squares_upper = fmadd(upper, upper, m.squares_upper);
  m.amax = max(abs(v), m.amax);
}

/// The statistics of the sets: each set's halves added, the sets added pairwise ((0 + 1) + (2 + 3)),
/// then the lanes (`reduce_add`).
MIXPREC_SIMD_INLINE inline row_stats finish(float pivot, const moments (&m)[moment_sets]) noexcept {
  vd sum[moment_sets];
  vd squares[moment_sets];
  vf amax[moment_sets];
#pragma GCC unroll 4
  for (std::size_t s = 0; s < moment_sets; ++s) {
    sum[s] = add(m[s].sum_lower, m[s].sum_upper);
    squares[s] = add(m[s].squares_lower, m[s].squares_upper);
    amax[s] = m[s].amax;
  }
#pragma GCC unroll 2
  for (std::size_t width = moment_sets / 2; width >= 1; width /= 2) {
#pragma GCC unroll 2
    for (std::size_t s = 0; s < width; ++s) {
      sum[s] = add(sum[2 * s], sum[2 * s + 1]);
      squares[s] = add(squares[2 * s], squares[2 * s + 1]);
      amax[s] = max(amax[2 * s], amax[2 * s + 1]);
    }
  }
  return {pivot, reduce_add(sum[0]), reduce_add(squares[0]), reduce_max(amax[0])};
}

/// One pass over x [n] (read, rounded to C, not stored): Σd and Σd² of d = x - pivot in float64, and
/// max |x|; pivot = x[0] rounded to C for `sums::centred` (layer norm: the shift keeps Σd²/n − (Σd/n)²
/// free of cancellation for data far from 0), 0 for `sums::squares` (rms norm: Σx² only). With
/// `prefetch_in_statistics`, the first prefetched_by_statistics(n) elements of `next` (the next row,
/// or null) are prefetched.
template <class T, class C, sums S>
MIXPREC_SIMD_FN inline row_stats row_moments(const T* x, std::size_t n, [[maybe_unused]] const T* next) noexcept {
  moments m[moment_sets];
#pragma GCC unroll 4
  for (moments& s : m) s = zero_moments();
  const float pivot =
      S == sums::centred && n > 0 ? first_lane(round<C>(n >= 8 ? load<vf8, T>(x) : load_first<vf8, T>(x, n))) : 0.0F;
  const vd p = set<vd>(pivot);
  std::size_t j = 0;
  for (; n - j >= moments_step; j += moments_step) {
    if constexpr (prefetch_in_statistics) {
#pragma GCC unroll 2
      for (std::size_t k = 0; k < moment_sets / 2; ++k) prefetch_next<T>(next, j / 2 + k * lanes);
    }
#pragma GCC unroll 4
    for (std::size_t s = 0; s < moment_sets; ++s) accumulate<S>(m[s], load_c<vf, T, C>(x + j + s * lanes), p);
  }
  for (; n - j >= lanes; j += lanes) accumulate<S>(m[0], load_c<vf, T, C>(x + j), p);
  if (j < n) {
    const std::size_t t = n - j;
    // Lanes past n hold the pivot: d = 0 there.
    accumulate<S>(m[0], select(first_lanes<vf>(t), round<C>(load_first<vf, T>(x + j, t)), set<vf>(pivot)), p);
  }
  return finish(pivot, m);
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

/// The number of leading elements of y [n] to store normally before the streaming stores of whole
/// steps can start: y + it aligned to a step's bytes, at most a cache line.
template <class O>
[[nodiscard]] inline std::size_t unaligned_head(const O* y, std::size_t n) noexcept {
  constexpr std::size_t width = std::min<std::size_t>(64, step * sizeof(O));
  const auto address = reinterpret_cast<std::uintptr_t>(y);
  return std::min(n, ((width - address % width) % width) / sizeof(O));
}

/// A vector (or, for `step_vectors` 2, a pair: elements 0-15 and 16-31) rounded to O and stored the
/// `Store` way (streaming: p aligned as `unaligned_head` leaves it).
template <class O, store_kind Store, class V>
MIXPREC_SIMD_INLINE inline void put(O* p, V v) noexcept {
  if constexpr (Store == store_kind::streaming) {
    stream<O>(p, v);
  } else {
    store<O>(p, v);
  }
}
template <class O, store_kind Store>
MIXPREC_SIMD_INLINE inline void put(O* p, vf a, vf b) noexcept {
  if constexpr (Store == store_kind::streaming) {
    stream<O>(p, a, b);
  } else {
    store<O>(p, a, b);
  }
}

/// Layer normalisation of elements [j, end) in steps of 8 and a last part of fewer (a row's head, or
/// what its whole steps leave): d = (x - mean) - correction; y = round_to<O>(fma(d, inv·scale, bias));
/// x̂ = d·inv when `xhat` is given.
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_INLINE inline void layer_norm_by8(const T* x, std::size_t j, std::size_t end, layer_norm_factors f,
                                               const float* scale, const float* bias, O* y, float* xhat) noexcept {
  const vf8 m = set<vf8>(f.mean);
  const vf8 c = set<vf8>(f.correction);
  const vf8 r = set<vf8>(f.inv);
  for (; end - j >= 8; j += 8) {
    const vf8 d = sub(sub(load_c<vf8, T, C>(x + j), m), c);
    put<O, Store>(y + j, fmadd(d, mul(r, load<vf8, float>(scale + j)), load<vf8, float>(bias + j)));
    if (xhat != nullptr) store<float>(xhat + j, mul(d, r));
  }
  if (j < end) {
    const std::size_t t = end - j;
    const vf8 d = sub(sub(round<C>(load_first<vf8, T>(x + j, t)), m), c);
    store_first<O>(y + j, fmadd(d, mul(r, load_first<vf8, float>(scale + j, t)), load_first<vf8, float>(bias + j, t)),
                   t);
    if (xhat != nullptr) store_first<float>(xhat + j, mul(d, r), t);
  }
}

/// `layer_norm_by8`'s arithmetic on the `step` elements at j, y stored the `Store` way.
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_INLINE inline void layer_norm_step(const T* x, std::size_t j, layer_norm_factors f, const float* scale,
                                                const float* bias, O* y, float* xhat) noexcept {
  const vf r = set<vf>(f.inv);
  vf d[step_vectors];
  vf v[step_vectors];
#pragma GCC unroll 2
  for (std::size_t k = 0; k < step_vectors; ++k) {
    const std::size_t i = j + k * lanes;
    d[k] = sub(sub(load_c<vf, T, C>(x + i), set<vf>(f.mean)), set<vf>(f.correction));
    v[k] = fmadd(d[k], mul(r, load<vf, float>(scale + i)), load<vf, float>(bias + i));
  }
  if constexpr (step_vectors == 2) {
    put<O, Store>(y + j, v[0], v[1]);
  } else {
    put<O, Store>(y + j, v[0]);
  }
  if (xhat != nullptr) {
#pragma GCC unroll 2
    for (std::size_t k = 0; k < step_vectors; ++k) store<float>(xhat + j + k * lanes, mul(d[k], r));
  }
}

/// Layer normalisation of x [n] (read again, rounded to C) by `f` (`layer_norm_by8`'s arithmetic) in
/// whole steps, the rest by 8. `Store` streaming, when no x̂ is kept (training reads y back: cached
/// stores): non-temporal stores of y from `unaligned_head` on. The elements of `next` (the next row,
/// or null) from prefetched_by_statistics(n) on are prefetched.
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_FN inline void layer_norm_apply(const T* x, std::size_t n, layer_norm_factors f, const float* scale,
                                             const float* bias, O* y, float* xhat, const T* next) noexcept {
  // The steps prefetch at h + j / step_vectors, one position per `lanes` elements; with
  // prefetch_in_statistics the line at h first (a head skips less than a line), the lines after the
  // last step's position after the steps.
  const std::size_t h = prefetched_by_statistics(n);
  if constexpr (prefetch_in_statistics) {
    if (h < n) prefetch_line(next, h);
  }
  std::size_t j = 0;
  if (xhat == nullptr) {
    if constexpr (Store == store_kind::streaming) {
      j = unaligned_head(y, n);
      layer_norm_by8<T, C, O, store_kind::cached>(x, 0, j, f, scale, bias, y, nullptr);
    }
    for (; n - j >= step; j += step) {
      prefetch_next<T>(next, h + j / step_vectors);
      layer_norm_step<T, C, O, Store>(x, j, f, scale, bias, y, nullptr);
    }
  } else {
    for (; n - j >= step; j += step) {
      prefetch_next<T>(next, h + j / step_vectors);
      layer_norm_step<T, C, O, store_kind::cached>(x, j, f, scale, bias, y, xhat);
    }
  }
  if constexpr (prefetch_in_statistics) {
    for (std::size_t p = h + j / step_vectors; p < n; p += 64 / sizeof(T)) prefetch_line(next, p);
    prefetch_line(next, n - 1);
  }
  if (xhat == nullptr) {
    layer_norm_by8<T, C, O, Store>(x, j, n, f, scale, bias, y, nullptr);
  } else {
    layer_norm_by8<T, C, O, store_kind::cached>(x, j, n, f, scale, bias, y, xhat);
  }
}

/// One row of `nn::layer_norm`: x [n] (n >= 1) in T, rounded to C; y [n] in O, stored the `Store`
/// way; x̂ and r saved when `xhat` and `rstd` are non-null. Two passes over x (the second from L1):
/// statistics in float64 — with d = x - x[0], mean = x[0] + Σd/n and var = Σd²/n - (Σd/n)², each
/// rounded once to float (epsilon is then added in float, as on the portable path) — and the
/// normalisation. Returns false, having written nothing, when the row is not finite or needs
/// rescaling (the caller takes the portable path). `next` (the next row, or null) is prefetched.
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_FN inline bool layer_norm_row(const T* x, std::size_t n, float eps, const float* scale, const float* bias,
                                           O* y, float* xhat, float* rstd, const T* next) noexcept {
  const row_stats stats = row_moments<T, C, sums::centred>(x, n, next);
  if (!plain_row(stats, n)) return false;
  const layer_norm_factors f = layer_norm_factors_of(stats, n, eps);
  layer_norm_apply<T, C, O, Store>(x, n, f, scale, bias, y, xhat, next);
  if (rstd != nullptr) *rstd = f.inv;
  return true;
}

// ---- rms_norm: called at 8 lanes on every level (norm.hpp) ----------------------------------------

/// RMS normalisation of elements [j, end) in steps of 8 and a last part of fewer: y =
/// round_to<O>((x·inv)·scale); x̂ = x·inv when `xhat` is given.
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_INLINE inline void rms_norm_by8(const T* x, std::size_t j, std::size_t end, float inv, const float* scale,
                                             O* y, float* xhat) noexcept {
  const vf8 r = set<vf8>(inv);
  for (; end - j >= 8; j += 8) {
    const vf8 xh = mul(load_c<vf8, T, C>(x + j), r);
    put<O, Store>(y + j, mul(xh, load<vf8, float>(scale + j)));
    if (xhat != nullptr) store<float>(xhat + j, xh);
  }
  if (j < end) {
    const std::size_t t = end - j;
    const vf8 xh = mul(round<C>(load_first<vf8, T>(x + j, t)), r);
    store_first<O>(y + j, mul(xh, load_first<vf8, float>(scale + j, t)), t);
    if (xhat != nullptr) store_first<float>(xhat + j, xh, t);
  }
}

/// RMS normalisation of x [n] (read again, rounded to C) with reciprocal root mean square `inv`
/// (`rms_norm_by8`'s arithmetic) in vectors, the rest by 8; `Store` as `layer_norm_apply`'s.
/// `next` and `next2` (the fused form's next residual row) are prefetched as rows of Next and float.
template <class T, class C, class O, store_kind Store, class Next = T>
MIXPREC_SIMD_FN inline void rms_norm_apply(const T* x, std::size_t n, float inv, const float* scale, O* y, float* xhat,
                                           const Next* next, const float* next2 = nullptr) noexcept {
  const vf r = set<vf>(inv);
  std::size_t j = 0;
  if (xhat == nullptr) {
    if constexpr (Store == store_kind::streaming) {
      j = unaligned_head(y, n);
      rms_norm_by8<T, C, O, store_kind::cached>(x, 0, j, inv, scale, y, nullptr);
    }
    for (; n - j >= lanes; j += lanes) {
      prefetch_next<Next>(next, j);
      prefetch_next<float>(next2, j);
      put<O, Store>(y + j, mul(mul(load_c<vf, T, C>(x + j), r), load<vf, float>(scale + j)));
    }
    rms_norm_by8<T, C, O, Store>(x, j, n, inv, scale, y, nullptr);
  } else {
    for (; n - j >= lanes; j += lanes) {
      prefetch_next<Next>(next, j);
      prefetch_next<float>(next2, j);
      const vf xh = mul(load_c<vf, T, C>(x + j), r);
      store<O>(y + j, mul(xh, load<vf, float>(scale + j)));
      store<float>(xhat + j, xh);
    }
    rms_norm_by8<T, C, O, store_kind::cached>(x, j, n, inv, scale, y, xhat);
  }
}

/// The fused residual add: stream[j] = residual[j] + widen(x[j]) (x alone without a residual; the
/// stream may be the residual itself), in one pass that also sums stream² (float64) and finds
/// max |stream|.
template <class T>
MIXPREC_SIMD_FN inline row_stats add_residual_row(const T* x, const float* residual, std::size_t n,
                                                  float* stream) noexcept {
  moments m[moment_sets];
#pragma GCC unroll 4
  for (moments& s : m) s = zero_moments();
  const vd origin = zero<vd>();
  std::size_t j = 0;
  for (; n - j >= moments_step; j += moments_step) {
    vf s[moment_sets];
#pragma GCC unroll 4
    for (std::size_t k = 0; k < moment_sets; ++k) s[k] = load<vf, T>(x + j + k * lanes);
    if (residual != nullptr) {
#pragma GCC unroll 4
      for (std::size_t k = 0; k < moment_sets; ++k) s[k] = add(load<vf, float>(residual + j + k * lanes), s[k]);
    }
#pragma GCC unroll 4
    for (std::size_t k = 0; k < moment_sets; ++k) store<float>(stream + j + k * lanes, s[k]);
#pragma GCC unroll 4
    for (std::size_t k = 0; k < moment_sets; ++k) accumulate<sums::squares>(m[k], s[k], origin);
  }
  for (; n - j >= lanes; j += lanes) {
    vf s = load<vf, T>(x + j);
    if (residual != nullptr) s = add(load<vf, float>(residual + j), s);
    store<float>(stream + j, s);
    accumulate<sums::squares>(m[0], s, origin);
  }
  if (j < n) {
    const std::size_t t = n - j;
    vf s = load_first<vf, T>(x + j, t);
    if (residual != nullptr) s = add(load_first<vf, float>(residual + j, t), s);
    store_first<float>(stream + j, s, t);
    accumulate<sums::squares>(m[0], s, origin);  // zero lanes past n add nothing
  }
  return finish(0.0F, m);
}

/// stream[0, n) *= factor.
MIXPREC_SIMD_FN inline void scale_row(float* stream, std::size_t n, float factor) noexcept {
  const vf f = set<vf>(factor);
  std::size_t j = 0;
  for (; n - j >= lanes; j += lanes) store<float>(stream + j, mul(load<vf, float>(stream + j), f));
  for (; j < n; ++j) stream[j] *= factor;
}

/// One row of the plain `nn::rms_norm`: as `layer_norm_row`, inv = 1 / sqrt(float(Σx²/n) + eps).
template <class T, class C, class O, store_kind Store>
MIXPREC_SIMD_FN inline bool rms_norm_row(const T* x, std::size_t n, float eps, const float* scale, O* y, float* xhat,
                                         float* rstd, const T* next) noexcept {
  const row_stats stats = row_moments<T, C, sums::squares>(x, n, next);
  if (!plain_row(stats, n)) return false;
  const float inv = rms_inv_of(stats, n, eps);
  rms_norm_apply<T, C, O, Store>(x, n, inv, scale, y, xhat, next);
  if (rstd != nullptr) *rstd = inv;
  return true;
}

/// One row of the fused `nn::rms_norm`: stream = residual + x (x alone when `residual` is null), y =
/// rmsnorm(stream), then stream *= *stream_factor when given. Returns false when the row is not
/// finite or needs rescaling, having written the unscaled stream only. `next_x` and `next_residual`
/// (the next row's, or null) are prefetched.
template <class T, class O, store_kind Store>
MIXPREC_SIMD_FN inline bool rms_norm_fused_row(const T* x, const float* residual, std::size_t n, float eps,
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

/// Orders this thread's non-temporal stores before what follows (a thread's last row of a call).
MIXPREC_SIMD_FN inline void store_fence() noexcept { _mm_sfence(); }

}  // namespace MIXPREC_SIMD_NS::norm

#endif  // MIXPREC_SIMD_NS
