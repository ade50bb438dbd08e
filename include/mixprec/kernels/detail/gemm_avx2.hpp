/// \file
/// \brief Private: the AVX2 + FMA register-blocked micro-kernels of the blocked GEMM, compiled through
/// a `target` attribute so that a build without `-m` flags has them, and called only when
/// `mixprec::active_isa()` is at least `isa::avx2` (arch/detail/target.hpp explains the rules: per-ISA
/// namespace, only pointers and sizes cross the boundary).
///
/// A micro-tile is R × 16 floats (R ≤ 6) held in 2R ymm accumulators: per k step, two loads of the b
/// panel row, R broadcasts of a, 2R FMAs (BLIS's Haswell 6×16 kernel shape: 12 accumulators + 2 b
/// vectors + 1 broadcast = 15 of the 16 registers). A single row (m = 1: a token's step) takes four panels at once
/// so that eight independent FMA chains hide the FMA latency.
///
/// Summation order, on which bit-reproducibility rests: every output element is `c += Σ_p a·b` over
/// each k-slice of `gemm_kc` in ascending p, one FMA per term into an accumulator that starts at 0,
/// whatever R, the number of panels taken together, the blocking or the thread that computes it. So a
/// row of y does not depend on how many other rows are computed with it (batch invariance).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace gemm_avx2 {

using kernels::epilogue;
using kernels::detail::a_read;
using kernels::detail::e4m3_panel_scale;
using kernels::detail::e4m3_read;
using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;
using kernels::detail::panel_element_t;
using kernels::detail::panel_format;

/// Row p of an e4m3 panel (16 float8_e4m3fn patterns) as floats divided by 2^8, exactly: columns 0-7
/// and 8-15. float8_e4m3fn s.eeee.mmm is the float16 pattern s.0eeee.mmm0000000 of the value times
/// 2^-8 (e4m3fn's exponent bias is 7, float16's 15; the subnormals agree too, both being the mantissa
/// times the smallest normal's ulp): sign-extended to 16 bits, the 7 magnitude bits shifted into
/// place, the sign's copy in the exponent's top bit cleared, then VCVTPH2PS, which widens exactly and
/// ignores MXCSR.DAZ (the results, at least 2^-17, are normal floats). 2^-8 · 2^8 = 2^0 makes the
/// scaling free for a caller that multiplies the other factor by 2^8 (single_row, below).
MIXPREC_TARGET_AVX2 inline void load_e4m3_panel_scaled(const std::uint8_t* b, __m256& lo, __m256& hi) noexcept {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, kernels::detail::e4m3_half_shift),
                                     _mm256_set1_epi16(static_cast<short>(kernels::detail::e4m3_half_mask)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/// Row p + `Row` (Row 0 or 1) of a bfloat16 pair row (gemm_pack.hpp: 16 lanes, lane j holding
/// b(p, j) in its high half and b(p + 1, j) in its low half) widened exactly: columns 0-7 and 8-15.
/// Row p is the high halves with the low bits cleared (their floats), row p + 1 the low halves
/// shifted up. Each row loads the pair row again (from L1): the 6-row tile's 12 accumulators leave
/// no register to keep it in.
template <std::size_t Row>
MIXPREC_TARGET_AVX2_INLINE inline void load_bf16_pair_row(const std::uint16_t* b, __m256& lo, __m256& hi) noexcept {
  static_assert(Row < 2, "a pair row holds rows p and p + 1");
  const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + gemm_nr));
  constexpr int bf16_shift = kernels::detail::bf16_pattern_bits;
  if constexpr (Row == 1) {
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v0, bf16_shift));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(v1, bf16_shift));
  } else {
    // Two shifts rather than an AND with a mask, which would hold a register the 6 × 16 tile needs.
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v0, bf16_shift), bf16_shift));
    hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v1, bf16_shift), bf16_shift));
  }
}

/// Row p of a b panel (16 columns) widened exactly to two vectors of 8 floats: columns 0-7 and 8-15
/// (bfloat16 panels are read a pair of rows at a time: load_bf16_pair_row).
template <panel_format F>
MIXPREC_TARGET_AVX2 inline void load_b_row(const panel_element_t<F>* b, __m256& lo, __m256& hi) noexcept {
  static_assert(F != panel_format::bf16, "bfloat16 panels hold rows in pairs: load_bf16_pair_row");
  if constexpr (F == panel_format::f32) {
    lo = _mm256_loadu_ps(b);
    hi = _mm256_loadu_ps(b + 8);
  } else if constexpr (F == panel_format::e4m3) {
    load_e4m3_panel_scaled(b, lo, hi);
    const __m256 scale = _mm256_set1_ps(e4m3_panel_scale);
    lo = _mm256_mul_ps(lo, scale);  // exact: a power of two, on normal floats
    hi = _mm256_mul_ps(hi, scale);
  } else {
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8)));
  }
}

/// Eight floats of a tile written to c per `Out` (gemm_pack.hpp's tile_write): stored, or added to c.
template <epilogue Out>
MIXPREC_TARGET_AVX2_INLINE inline void write_c(float* c, __m256 acc) noexcept {
  static_assert(kernels::detail::tile_write<Out>, "a micro-kernel stores or accumulates its tile");
  if constexpr (Out == epilogue::accumulate) acc = _mm256_add_ps(_mm256_loadu_ps(c), acc);
  _mm256_storeu_ps(c, acc);
}

/// One k step of a micro-tile: acc[r] += a(r) · b for R rows, a(r) at a[r] (`a_read::packed`) or
/// a[r · lda] (`a_read::in_place`), b the step's panel row as two vectors (columns 0-7, 8-15).
template <int R, a_read AR>
MIXPREC_TARGET_AVX2_INLINE inline void fma_step(const float* a, std::size_t lda, __m256 b0, __m256 b1,
                                                __m256 (&acc0)[R], __m256 (&acc1)[R]) noexcept {
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    const __m256 ar = _mm256_broadcast_ss(a + static_cast<std::size_t>(r) * (AR == a_read::in_place ? lda : 1));
    acc0[r] = _mm256_fmadd_ps(ar, b0, acc0[r]);
    acc1[r] = _mm256_fmadd_ps(ar, b1, acc1[r]);
  }
}

/// c[R, 16] (row stride ldc) = a · b_panel over kc steps, stored or added to c per `Out`, with a read
/// per `AR`: packed (a panel: element (r, p) at a[p * 6 + r]) or in place (row r at `a + r * lda`,
/// contiguous in k). The same per-element order either way. With `Ahead` (0 or 1), the k-slice of the
/// panel at `ahead` is prefetched into L1 meanwhile, one cache line per step or per few steps
/// (block_impl: the next panel's, during the first tile of each panel).
template <int R, panel_format F, a_read AR, epilogue Out, int Ahead = 0>
MIXPREC_TARGET_AVX2 inline void micro_tile_impl(std::size_t kc, const float* a, std::size_t lda,
                                                const panel_element_t<F>* b, float* c, std::size_t ldc,
                                                const panel_element_t<F>* ahead = nullptr) noexcept {
  static_assert(Ahead == 0 || Ahead == 1, "the AVX2 tiles prefetch the next panel or none");
  __m256 acc0[R];
  __m256 acc1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
  constexpr std::size_t a_step = AR == a_read::in_place ? 1 : gemm_mr;  // from a(r, p) to a(r, p + 1)
  if constexpr (F == panel_format::bf16) {
    std::size_t p = 0;
    for (; p + 2 <= kc; p += 2) {
      __m256 b0, b1;
      if constexpr (Ahead > 0) _mm_prefetch(reinterpret_cast<const char*>(ahead + p * gemm_nr), _MM_HINT_T0);
      load_bf16_pair_row<0>(b, b0, b1);
      fma_step<R, AR>(a, lda, b0, b1, acc0, acc1);
      load_bf16_pair_row<1>(b, b0, b1);
      fma_step<R, AR>(a + a_step, lda, b0, b1, acc0, acc1);
      a += 2 * a_step;
      b += 2 * gemm_nr;
    }
    if (p < kc) {  // the last row of an odd slice: the even half of its pair row
      __m256 b0, b1;
      load_bf16_pair_row<0>(b, b0, b1);
      fma_step<R, AR>(a, lda, b0, b1, acc0, acc1);
    }
  } else {
    for (std::size_t p = 0; p < kc; ++p) {
      __m256 b0, b1;
      if constexpr (Ahead > 0) {
        if (p % kernels::detail::panel_rows_per_line<F> == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + p * gemm_nr), _MM_HINT_T0);
        }
      }
      load_b_row<F>(b, b0, b1);
      fma_step<R, AR>(a, lda, b0, b1, acc0, acc1);
      a += a_step;
      b += gemm_nr;
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* row = c + static_cast<std::size_t>(r) * ldc;
    write_c<Out>(row, acc0[r]);
    write_c<Out>(row + 8, acc1[r]);
  }
}

/// c[R, 16] (row stride ldc) = a_panel · b_panel over kc steps, stored or added to c per `Out`.
template <int R, panel_format F, epilogue Out>
MIXPREC_TARGET_AVX2 inline void micro_tile(std::size_t kc, const float* a, const panel_element_t<F>* b, float* c,
                                           std::size_t ldc) noexcept {
  micro_tile_impl<R, F, a_read::packed, Out>(kc, a, 0, b, c, ldc);
}

/// One row against four consecutive b panels (64 columns): c[0, 64) = a · b, stored or added to c per
/// `Out`. `panel_stride` is the distance between panels (panel_stride<F>(k) elements). Same
/// per-element order as micro_tile. With `e4m3_read::scaled` (e4m3 panels only) the b rows are read as
/// `load_e4m3_panel_scaled` gives them (the weights / 2^8) and a must hold its values times 2^8: the
/// same products, one multiplication fewer per 8 weights.
template <panel_format F, e4m3_read Read, epilogue Out>
MIXPREC_TARGET_AVX2 inline void micro_row4(std::size_t kc, const float* a, const panel_element_t<F>* b,
                                           std::size_t panel_stride, float* c) noexcept {
  static_assert(Read == e4m3_read::exact || F == panel_format::e4m3, "only e4m3 panels have a scaled load");
  __m256 acc[8];
#pragma GCC unroll 8
  for (std::size_t v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
  if constexpr (F == panel_format::bf16) {
    // Indexed from a and b rather than advanced past them: after an odd kc's last step a pointer
    // advanced by two steps would point beyond the operand.
    for (std::size_t p = 0; p < kc; p += 2) {
      const __m256 a_even = _mm256_broadcast_ss(a + p * gemm_mr);
      const __m256 a_odd = _mm256_broadcast_ss(a + (p + 1 < kc ? p + 1 : p) * gemm_mr);  // unused past an odd kc
      const std::uint16_t* bp = b + p * gemm_nr;
#pragma GCC unroll 4
      for (std::size_t q = 0; q < 4; ++q) {
        __m256 lo, hi;
        load_bf16_pair_row<0>(bp + q * panel_stride, lo, hi);
        acc[2 * q] = _mm256_fmadd_ps(a_even, lo, acc[2 * q]);
        acc[2 * q + 1] = _mm256_fmadd_ps(a_even, hi, acc[2 * q + 1]);
        if (p + 1 < kc) {
          load_bf16_pair_row<1>(bp + q * panel_stride, lo, hi);
          acc[2 * q] = _mm256_fmadd_ps(a_odd, lo, acc[2 * q]);
          acc[2 * q + 1] = _mm256_fmadd_ps(a_odd, hi, acc[2 * q + 1]);
        }
      }
    }
  } else {
    for (std::size_t p = 0; p < kc; ++p) {
      const __m256 ar = _mm256_broadcast_ss(a);
#pragma GCC unroll 4
      for (std::size_t q = 0; q < 4; ++q) {
        __m256 lo;
        __m256 hi;
        if constexpr (Read == e4m3_read::scaled) {
          load_e4m3_panel_scaled(b + q * panel_stride, lo, hi);
        } else {
          load_b_row<F>(b + q * panel_stride, lo, hi);
        }
        acc[2 * q] = _mm256_fmadd_ps(ar, lo, acc[2 * q]);
        acc[2 * q + 1] = _mm256_fmadd_ps(ar, hi, acc[2 * q + 1]);
      }
      a += gemm_mr;
      b += gemm_nr;
    }
  }
#pragma GCC unroll 8
  for (std::size_t v = 0; v < 8; ++v) write_c<Out>(c + 8 * v, acc[v]);
}

/// micro_tile_impl for a tile of `height` (1 to 6) rows.
template <panel_format F, a_read AR, epilogue Out, int Ahead>
MIXPREC_TARGET_AVX2_INLINE inline void tile_of_height(std::size_t height, std::size_t kc, const float* a,
                                                      std::size_t lda, const panel_element_t<F>* b, float* c,
                                                      std::size_t ldc, const panel_element_t<F>* ahead) noexcept {
  switch (height) {
    case 1: micro_tile_impl<1, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
    case 2: micro_tile_impl<2, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
    case 3: micro_tile_impl<3, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
    case 4: micro_tile_impl<4, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
    case 5: micro_tile_impl<5, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
    default: micro_tile_impl<6, F, AR, Out, Ahead>(kc, a, lda, b, c, ldc, ahead); break;
  }
}

/// The macro-kernel body: c[rows, panels·16] (row stride ldc) = a · b over one k-slice of kc, stored
/// or added to c per `Out`, with a read per `AR`: packed (ceil(rows / 6) a panels of kc × 6) or in
/// place (row stride lda).
template <panel_format F, a_read AR, epilogue Out>
MIXPREC_TARGET_AVX2 inline void block_impl(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                           std::size_t lda, const panel_element_t<F>* b, std::size_t panel_stride,
                                           float* c, std::size_t ldc) noexcept {
  std::size_t q = 0;
  if constexpr (AR == a_read::packed) {
    if (rows == 1) {
      for (; q + 4 <= panels; q += 4) {
        micro_row4<F, e4m3_read::exact, Out>(kc, a, b + q * panel_stride, panel_stride, c + q * gemm_nr);
      }
    }
  }
  for (; q < panels; ++q) {
    const panel_element_t<F>* bq = b + q * panel_stride;
    for (std::size_t i = 0; i < rows; i += gemm_mr) {
      const float* ai = AR == a_read::in_place ? a + i * lda : a + (i / gemm_mr) * gemm_mr * kc;
      float* ci = c + i * ldc + q * gemm_nr;
      const std::size_t height = rows - i >= gemm_mr ? gemm_mr : rows - i;
      // The first tile of each panel prefetches the next panel's slice (gemm_avx512::panels_ahead).
      if (i == 0 && q + 1 < panels) {
        tile_of_height<F, AR, Out, 1>(height, kc, ai, lda, bq, ci, ldc, bq + panel_stride);
      } else {
        tile_of_height<F, AR, Out, 0>(height, kc, ai, lda, bq, ci, ldc, nullptr);
      }
    }
  }
}

/// The macro-kernel: c[rows, panels·16] (row stride ldc) = a_block · b over one k-slice of kc, stored
/// (`epilogue::store`: the first slice) or added to c (`epilogue::accumulate`). `a` holds
/// ceil(rows / 6) a panels of kc × 6; `b` points at the slice's first row in the first panel, panels
/// `panel_stride` elements apart.
template <panel_format F, epilogue Out>
MIXPREC_TARGET_AVX2 inline void block(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                      const panel_element_t<F>* b, std::size_t panel_stride, float* c,
                                      std::size_t ldc) noexcept {
  block_impl<F, a_read::packed, Out>(rows, panels, kc, a, 0, b, panel_stride, c, ldc);
}

/// `block` for an a read in place: a[rows, kc] with row stride lda, no packing (see micro_tile_impl).
template <panel_format F, epilogue Out>
MIXPREC_TARGET_AVX2 inline void block_rows(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                           std::size_t lda, const panel_element_t<F>* b, std::size_t panel_stride,
                                           float* c, std::size_t ldc) noexcept {
  block_impl<F, a_read::in_place, Out>(rows, panels, kc, a, lda, b, panel_stride, c, ldc);
}

/// One row against `panels` b panels over all of k (k > 0): c[0, panels·16) = a · b, in k-slices of
/// `kc` with the per-element order of `block` (the first slice stored, each later one added), but with
/// the panel loop outside the slice loop, so that each group of four panels is streamed from start to
/// end: the single-row product reads the weights once, sequentially.
/// With `e4m3_read::scaled` (e4m3 panels, a times 2^8: see micro_row4) the groups of four panels skip
/// the weights' scaling; the last panels (fewer than four) read unscaled rows, so a is divided back
/// first.
template <panel_format F, e4m3_read Read = e4m3_read::exact>
MIXPREC_TARGET_AVX2 inline void single_row(std::size_t panels, std::size_t k, std::size_t kc, float* a,
                                           const panel_element_t<F>* b, std::size_t panel_stride, float* c) noexcept {
  std::size_t q = 0;
  for (; q + 4 <= panels; q += 4) {
    const panel_element_t<F>* bq = b + q * panel_stride;
    micro_row4<F, Read, epilogue::store>(std::min(kc, k), a, bq, panel_stride, c + q * gemm_nr);
    for (std::size_t p0 = kc; p0 < k; p0 += kc) {
      micro_row4<F, Read, epilogue::accumulate>(std::min(kc, k - p0), a + p0 * gemm_mr, bq + p0 * gemm_nr, panel_stride,
                                                c + q * gemm_nr);
    }
  }
  if constexpr (Read == e4m3_read::scaled) {
    if (q < panels) {
      for (std::size_t p = 0; p < k; ++p) a[p * gemm_mr] /= e4m3_panel_scale;  // exact: a power of two
    }
  }
  for (; q < panels; ++q) {
    const panel_element_t<F>* bq = b + q * panel_stride;
    micro_tile<1, F, epilogue::store>(std::min(kc, k), a, bq, c + q * gemm_nr, 0);
    for (std::size_t p0 = kc; p0 < k; p0 += kc) {
      micro_tile<1, F, epilogue::accumulate>(std::min(kc, k - p0), a + p0 * gemm_mr, bq + p0 * gemm_nr, c + q * gemm_nr,
                                             0);
    }
  }
}

}  // namespace gemm_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
