/// \file
/// \brief Private: the body of softmax_rows.hpp's rows, compiled once per SIMD target
/// (foreach_target.hpp). The order of every sum is fixed in steps of 16 values, each step
/// `step_vectors` (16 / lanes) vectors `vf` (one accumulator per 8 values at either width), and in
/// 8-lane `vf8` code after the last full step, so both targets give the same bits.
// No include guard: compiled once per target (foreach_target.hpp).

#ifndef MIXPREC_SIMD_NS
#include "mixprec/kernels/detail/softmax_rows.hpp"  // on its own: the driver, which compiles this body per target
#else

namespace MIXPREC_SIMD_NS::softmax {

using softmax_common::row_max;

/// The vectors `vf` of one step of 16 values.
inline constexpr std::size_t step_vectors = 16 / lanes;

/// 16 values held as `step_vectors` vectors, as two 8-lane vectors: values 0-7 and 8-15.
template <class V, std::size_t N>
MIXPREC_SIMD_INLINE inline void as_halves(const V (&v)[N], vf8& low, vf8& high) noexcept {
  if constexpr (N == 2) {
    low = v[0];
    high = v[1];
  } else {
    low = lower_half(v[0]);
    high = upper_half(v[0]);
  }
}

/// 16 float64 chains held as 16 / (lanes / 2) vectors, as four 4-lane vectors: chains 0-3, ..., 12-15.
template <class D, std::size_t N>
MIXPREC_SIMD_INLINE inline void as_quarters(const D (&s)[N], vd4 (&q)[4]) noexcept {
  if constexpr (N == 4) {
#pragma GCC unroll 4
    for (std::size_t i = 0; i < 4; ++i) q[i] = s[i];
  } else {
    q[0] = lower_half(s[0]);
    q[1] = upper_half(s[0]);
    q[2] = lower_half(s[1]);
    q[3] = upper_half(s[1]);
  }
}

/// The 8-lane max pass over x [n]: two accumulators over steps of 16 values, then 8 values at a time
/// into the first; the largest value (-Inf for n = 0) and whether any is NaN.
template <class I>
MIXPREC_SIMD_INLINE inline row_max max_of8(const I* x, std::size_t n) noexcept {
  const vf8 neg_inf = set<vf8>(-std::numeric_limits<float>::infinity());
  vf8 m0 = neg_inf;
  vf8 m1 = neg_inf;
  vf8 nan = first_lanes<vf8>(0);
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    const vf8 a = load<vf8>(x + j);
    const vf8 b = load<vf8>(x + j + 8);
    m0 = max(m0, a);
    m1 = max(m1, b);
    nan = either(nan, unordered(a, b));
  }
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    vf8 a = t == 8 ? load<vf8>(x + j) : load_first<vf8>(x + j, t);
    nan = either(nan, is_nan(a));
    if (t < 8) a = select(first_lanes<vf8>(t), a, neg_inf);
    m0 = max(m0, a);
  }
  return {reduce_max(max(m0, m1)), any(nan)};
}

/// The largest of x [n] widened to float (-Inf for n = 0), and whether any is NaN: `max_of8`, after
/// steps of 32 values on two 16-lane accumulators at 16 lanes (a maximum is exact whatever the order;
/// only the sign of a zero maximum can differ between the widths, and it changes no exp(x - max)).
template <class I>
MIXPREC_SIMD_INLINE inline row_max row_max_of(const I* x, std::size_t n) noexcept {
  if constexpr (lanes == 8) {
    return max_of8<I>(x, n);
  } else {
    const vf neg_inf = set<vf>(-std::numeric_limits<float>::infinity());
    vf m0 = neg_inf;
    vf m1 = neg_inf;
    auto nan = first_lanes<vf>(0);
    std::size_t j = 0;
    for (; n - j >= 2 * lanes; j += 2 * lanes) {
      const vf a = load<vf>(x + j);
      const vf b = load<vf>(x + j + lanes);
      m0 = max(m0, a);
      m1 = max(m1, b);
      nan = either(nan, unordered(a, b));
    }
    const row_max rest = max_of8<I>(x + j, n - j);
    const float wide = reduce_max(max(m0, m1));
    return {wide > rest.max ? wide : rest.max, any(nan) || rest.nan};
  }
}

/// `row_max_of` for `online_softmax<float>::update` (`row` inlines it).
template <class I>
MIXPREC_SIMD_FN inline row_max max_of(const I* x, std::size_t n) noexcept {
  return row_max_of<I>(x, n);
}

/// Prefetches the cache line of element j of `next` (the following row, or null); j steps by 16, so
/// exactly one j per 64-byte line passes the test.
template <class I>
MIXPREC_SIMD_INLINE inline void prefetch_next(const I* next, std::size_t j) noexcept {
  if (next != nullptr && j % (64 / sizeof(I)) < 16) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T0);
}

/// v = exp(x_j - m) for the 16 values of x at j, stored to e + j; the line of `next` at j prefetched.
template <class I>
MIXPREC_SIMD_INLINE inline void exp_step(const I* x, std::size_t j, vf m, float* e, const I* next,
                                         vf (&v)[step_vectors]) noexcept {
  prefetch_next<I>(next, j);
#pragma GCC unroll 2
  for (std::size_t i = 0; i < step_vectors; ++i) v[i] = exp_shifted(sub(load<vf>(x + j + i * lanes), m));
#pragma GCC unroll 2
  for (std::size_t i = 0; i < step_vectors; ++i) store(e + j + i * lanes, v[i]);
}

/// f += exp(x_j - m) for the 16 values of x at j (`exp_step`), lane by lane.
template <class I>
MIXPREC_SIMD_INLINE inline void add_step(const I* x, std::size_t j, vf m, float* e, const I* next,
                                         vf (&f)[step_vectors]) noexcept {
  vf v[step_vectors];
  exp_step<I>(x, j, m, e, next, v);
#pragma GCC unroll 2
  for (std::size_t i = 0; i < step_vectors; ++i) f[i] = add(f[i], v[i]);
}

/// Adds the lanes of f (float32 sums) to two float64 chains: its lower half to `low`, upper to `high`.
template <class D, class V>
MIXPREC_SIMD_INLINE inline void add_to_chains(D& low, D& high, V f) noexcept {
  low = add(low, widen_lower(f));
  high = add(high, widen_upper(f));
}

/// Adds a block's float32 lane sums f (one per value of a step) to the 16 float64 chains s.
template <class D, std::size_t N>
MIXPREC_SIMD_INLINE inline void add_block(D (&s)[N], const vf (&f)[step_vectors]) noexcept {
#pragma GCC unroll 2
  for (std::size_t i = 0; i < step_vectors; ++i) add_to_chains(s[2 * i], s[2 * i + 1], f[i]);
}

/// e_j = exp(x_j - m) for x [n], stored to e (may be x itself when I is float); returns Σ e_j. Steps of
/// 16 values are summed per lane in float32 in blocks of `float32_steps` steps, each block's lane sums
/// then added to 16 float64 chains (value i of each step to chain i); a last 8 values and a tail of
/// fewer go to chains 0-7 directly. `next` (the following row, or null) is prefetched alongside.
template <class I>
MIXPREC_SIMD_FN inline double exp_sum(const I* x, std::size_t n, float m, float* e, const I* next) noexcept {
  constexpr std::size_t steps = softmax_common::float32_steps;
  const vf mv = set<vf>(m);
  vd chains[2 * step_vectors];
#pragma GCC unroll 4
  for (std::size_t i = 0; i < 2 * step_vectors; ++i) chains[i] = zero<vd>();
  std::size_t j = 0;
  for (; n - j >= steps * 16; j += steps * 16) {  // whole blocks, unrolled
    vf f[step_vectors];                           // the block's float32 lane sums
    exp_step<I>(x, j, mv, e, next, f);
#pragma GCC unroll 4
    for (std::size_t step = 1; step < steps; ++step) add_step<I>(x, j + 16 * step, mv, e, next, f);
    add_block(chains, f);
  }
  if (n - j >= 16) {  // the last block, shorter
    vf f[step_vectors];
    exp_step<I>(x, j, mv, e, next, f);
    for (j += 16; n - j >= 16; j += 16) add_step<I>(x, j, mv, e, next, f);
    add_block(chains, f);
  }
  vd4 q[4];
  as_quarters(chains, q);
  const vf8 m8 = set<vf8>(m);
  if (n - j >= 8) {
    const vf8 v = exp_shifted(sub(load<vf8>(x + j), m8));
    store(e + j, v);
    add_to_chains(q[0], q[1], v);
    j += 8;
  }
  if (j < n) {
    const std::size_t t = n - j;
    const vf8 v = select(first_lanes<vf8>(t), exp_shifted(sub(load_first<vf8>(x + j, t), m8)), zero<vf8>());
    store_first(e + j, v, t);
    add_to_chains(q[0], q[1], v);
  }
  return reduce_add(add(add(q[0], q[2]), add(q[1], q[3])));
}

/// y_j = round_to<O>(f) for j < n: a uniform row's value (NaN or 0).
template <class O>
MIXPREC_SIMD_FN inline void fill(O* y, std::size_t n, float f) noexcept {
  std::size_t j = 0;
  for (; n - j >= lanes; j += lanes) store(y + j, set<vf>(f));
  for (; n - j >= 8; j += 8) store(y + j, set<vf8>(f));
  if (j < n) store_first(y + j, set<vf8>(f), n - j);
}

/// y_j = round_to<O>(e_j · inv) for j < n: the normalisation.
template <class O>
MIXPREC_SIMD_FN inline void scale(const float* e, O* y, std::size_t n, float inv) noexcept {
  const vf iv = set<vf>(inv);
  std::size_t j = 0;
  for (; n - j >= lanes; j += lanes) store(y + j, mul(load<vf>(e + j), iv));
  const vf8 iv8 = set<vf8>(inv);
  for (; n - j >= 8; j += 8) store(y + j, mul(load<vf8>(e + j), iv8));
  if (j < n) store_first(y + j, mul(load_first<vf8>(e + j, n - j), iv8), n - j);
}

/// The softmax of x [n] into y [n] (may alias x when both are float): max, e = exp(x - max) with Σ e
/// (`exp_sum`), y = e · (1 / Σ e). e is kept in y when O is float, else in `scratch` (n floats).
/// `next` (the following row, or null) is prefetched while e is computed: the next row's max pass
/// then reads from the cache instead of waiting on memory.
template <class I, class O>
MIXPREC_SIMD_FN inline void row(const I* x, O* y, std::size_t n, float* scratch, const I* next) noexcept {
  const row_max mx = row_max_of<I>(x, n);
  float f = 0.0F;
  if (softmax_common::uniform_row(mx, f)) {
    fill<O>(y, n, f);
    return;
  }
  float* e = scratch;
  if constexpr (std::is_same_v<O, float>) e = y;
  const auto total = static_cast<float>(exp_sum<I>(x, n, mx.max, e, next));
  scale<O>(e, y, n, 1.0F / total);
}

/// `online_softmax<float>::update`'s block pass (FlashAttention's online softmax): s_j = exp(s_j - m)
/// in place (`exp_nonpositive`: s_j <= m, weights below 2^-126 flushed to +0); returns Σ s_j, summed in
/// float32 in two 8-lane partial sums, values 0-7 and 8-15 of each step (error at most n u of the sum,
/// within the online softmax's bound, whose blocks are attention's key tiles of ~128 scores).
MIXPREC_SIMD_FN inline float exp_shift_in_place(float* s, std::size_t n, float m) noexcept {
  const vf mv = set<vf>(m);
  vf total[step_vectors];
#pragma GCC unroll 2
  for (std::size_t i = 0; i < step_vectors; ++i) total[i] = zero<vf>();
  std::size_t j = 0;
  for (; n - j >= 16; j += 16) {
    vf v[step_vectors];
#pragma GCC unroll 2
    for (std::size_t i = 0; i < step_vectors; ++i) v[i] = exp_nonpositive(sub(load<vf>(s + j + i * lanes), mv));
#pragma GCC unroll 2
    for (std::size_t i = 0; i < step_vectors; ++i) {
      store(s + j + i * lanes, v[i]);
      total[i] = add(total[i], v[i]);
    }
  }
  vf8 s0;
  vf8 s1;
  as_halves(total, s0, s1);
  const vf8 m8 = set<vf8>(m);
  for (; j < n; j += 8) {
    const std::size_t t = std::min<std::size_t>(n - j, 8);
    if (t == 8) {
      const vf8 v = exp_nonpositive(sub(load<vf8>(s + j), m8));
      store(s + j, v);
      s0 = add(s0, v);
    } else {
      const vf8 v = select(first_lanes<vf8>(t), exp_nonpositive(sub(load_first<vf8>(s + j, t), m8)), zero<vf8>());
      store_first(s + j, v, t);
      s0 = add(s0, v);
    }
  }
  return reduce_add(add(s0, s1));
}

/// y_j = exp(scale · s_j − offset) for j < n: the argument rounded twice (the product, then the
/// difference; no FMA), as the scalar `std::exp(scale * s - offset)` rounds it, then `exp` (exp.hpp: at
/// most 2 ulp from the exact exp of that argument; +Inf, NaN and underflow as `std::exp`). Attention's
/// backward recomputes its probabilities so from the forward's log-sum-exps. Elementwise: the same bits
/// at 8 and 16 lanes.
MIXPREC_SIMD_FN inline void exp_affine(const float* s, float* y, std::size_t n, float scale, float offset) noexcept {
  const vf sv = set<vf>(scale);
  const vf ov = set<vf>(offset);
  std::size_t j = 0;
  for (; n - j >= lanes; j += lanes) store(y + j, exp(sub(mul(load<vf>(s + j), sv), ov)));
  if (j < n) {
    const std::size_t t = n - j;
    store_first(y + j, exp(sub(mul(load_first<vf>(s + j, t), sv), ov)), t);
  }
}

}  // namespace MIXPREC_SIMD_NS::softmax

#endif  // MIXPREC_SIMD_NS
