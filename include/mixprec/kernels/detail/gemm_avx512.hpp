/// \file
/// \brief Private: the AVX-512 micro-kernels of the blocked GEMM, compiled through a `target` attribute
/// and called only when `mixprec::active_isa()` is at least `isa::avx512` (arch/detail/target.hpp
/// explains the rules):
///  - `block`: the macro-kernel for packed a and b panels of any format. Its micro-tile is 12 rows ×
///    32 columns (two 6-row a panels against two 16-column b panels, the packings of gemm_pack.hpp
///    unchanged) in 24 zmm accumulators: per k step, two b loads (widened exactly as they load), 12
///    broadcasts of a and 24 FMAs — the shape of BLIS's and oneDNN's AVX-512 SGEMM kernels, with
///    2 + 1 + 24 of the 32 registers in use. The AVX2 kernel's 6 × 16 tile feeds its FMAs with one
///    load per 2.4 FMAs; this one with one per 1.7, at twice the width.
///  - `single_row`: the single-row kernel (one row of a against packed b panels: the batch-1 product)
///    for float32, float16 and float8_e4m3fn panels, 16 columns per FMA where the AVX2 row takes 8. For
///    1-byte e4m3 panels decoding float8 is what bounds the AVX2 row (about five vector instructions
///    per 8 weights: a core decodes them more slowly than memory delivers them; measured:
///    docs/kernels.md, "1-byte float8 panels"); with 512-bit vectors one panel row of 16 weights
///    takes a sign-extension, a shift, a mask, one VCVTPH2PS and one FMA. A
///    float16 row takes one VCVTPH2PS, a float32 row none.
///
/// Summation order: that of gemm_avx2.hpp (every output element is `c += Σ_p a·b` over each k-slice
/// in ascending p, one FMA per term into an accumulator that starts at 0), so the results are
/// bit-identical to the AVX2 level's, for every panel format.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace gemm_avx512 {

using kernels::epilogue;
using kernels::detail::a_read;
using kernels::detail::e4m3_panel_scale;
using kernels::detail::e4m3_read;
using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;
using kernels::detail::panel_element_t;
using kernels::detail::panel_format;

/// Row p of an e4m3 panel (16 float8_e4m3fn patterns, none NaN) as 16 floats divided by 2^8
/// (kernels::detail::e4m3_panel_scale), exactly: the float16 reading of gemm_avx2::load_e4m3_panel_scaled.
MIXPREC_TARGET_AVX512 inline __m512 load_e4m3_panel_scaled(const std::uint8_t* b) noexcept {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, kernels::detail::e4m3_half_shift),
                                     _mm256_set1_epi16(static_cast<short>(kernels::detail::e4m3_half_mask)));
  // The zero-masking form with every lane selected: the same instruction, and no undefined source
  // register (GCC 12's plain _mm512_cvtph_ps passes one and -Wmaybe-uninitialized fires at -O2).
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(~__mmask16{0}), h);
}

/// Row p of a b panel (16 columns) widened exactly to 16 floats (bfloat16 panels are read a pair of
/// rows at a time, see micro_tile).
template <panel_format F>
MIXPREC_TARGET_AVX512 inline __m512 load_b_row(const panel_element_t<F>* b) noexcept {
  static_assert(F != panel_format::bf16, "bfloat16 panels hold rows in pairs");
  if constexpr (F == panel_format::f32) {
    return _mm512_loadu_ps(b);
  } else if constexpr (F == panel_format::e4m3) {
    return _mm512_mul_ps(load_e4m3_panel_scaled(b), _mm512_set1_ps(e4m3_panel_scale));  // exact: 2^8
  } else {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(~__mmask16{0}), v);  // see load_e4m3_panel_scaled
  }
}

/// The end of a micro-row (single_row): c[0, P·16) = acc, stored or added to c per `Out`
/// (gemm_pack.hpp's tile_write).
template <int P, epilogue Out>
MIXPREC_TARGET_AVX512_INLINE inline void store_row(__m512 (&acc)[P], float* c) noexcept {
  static_assert(kernels::detail::tile_write<Out>, "a micro-kernel stores or accumulates its tile");
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) {
    float* cq = c + static_cast<std::size_t>(q) * gemm_nr;
    if constexpr (Out == epilogue::accumulate) acc[q] = _mm512_add_ps(_mm512_loadu_ps(cq), acc[q]);
    _mm512_storeu_ps(cq, acc[q]);
  }
}

/// rows.template run<width>(q, p0, depth) for a width in [1, P], as a compile-time width.
template <int P, class Rows>
MIXPREC_TARGET_AVX512_INLINE inline void run_width(std::size_t width, const Rows& rows, std::size_t q, std::size_t p0,
                                                   std::size_t depth) noexcept {
  if constexpr (P > 1) {
    if (width < static_cast<std::size_t>(P)) {
      run_width<P - 1>(width, rows, q, p0, depth);
      return;
    }
  }
  rows.template run<P>(q, p0, depth);
}

/// The single rows' walk (every single_row of this file and gemm_avx512bf16.hpp): the panels in groups
/// of at most Group (≤ 8), each group streamed from start to end in k-slices of kc, each slice one call
/// `rows.template run<P>(q, p0, depth)` for the P panels from q and the rows [p0, p0 + depth); a
/// slice after the first adds to c (the per-element order of the micro-tiles).
template <std::size_t Group, class Rows>
MIXPREC_TARGET_AVX512_INLINE inline void walk_single_row(std::size_t panels, std::size_t k, std::size_t kc,
                                                         const Rows& rows) noexcept {
  static_assert(Group >= 1 && Group <= 8, "groups of one to eight panels");
  for (std::size_t q = 0; q < panels; q += Group) {
    const std::size_t width = panels - q < Group ? panels - q : Group;
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t depth = k - p0 < kc ? k - p0 : kc;
      run_width<static_cast<int>(Group)>(width, rows, q, p0, depth);
    }
  }
}

/// One row against P consecutive panels of format F (f32, f16 or e4m3; P · 16 columns) over kc steps:
/// c[0, P·16) = a · b, stored or added to c per `Out`, a packed (element p at a[p · gemm_mr]).
/// `panel_stride` is the distance between panels (panel_stride<F>(k) elements). With
/// `e4m3_read::scaled` (e4m3 panels only) the rows are read as `load_e4m3_panel_scaled` gives them
/// (the weights / 2^8) and a holds its values times 2^8: the same products, one multiplication fewer
/// per 16 weights.
template <int P, panel_format F, e4m3_read Read, epilogue Out>
MIXPREC_TARGET_AVX512 inline void micro_row(std::size_t kc, const float* a, const panel_element_t<F>* b,
                                            std::size_t panel_stride, float* c) noexcept {
  static_assert(Read == e4m3_read::exact || F == panel_format::e4m3, "only e4m3 panels have a scaled load");
  __m512 acc[P];
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) acc[q] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m512 ar = _mm512_set1_ps(*a);
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      const panel_element_t<F>* bq = b + static_cast<std::size_t>(q) * panel_stride;
      if constexpr (Read == e4m3_read::scaled) {
        acc[q] = _mm512_fmadd_ps(ar, load_e4m3_panel_scaled(bq), acc[q]);
      } else {
        acc[q] = _mm512_fmadd_ps(ar, load_b_row<F>(bq), acc[q]);
      }
    }
    a += gemm_mr;
    b += gemm_nr;
  }
  store_row<P, Out>(acc, c);
}

/// The micro-rows of single_row, for walk_single_row: a packed as one row (element p at a[p · gemm_mr]).
template <panel_format F, e4m3_read Read>
struct fma_rows {
  const float* a;
  const panel_element_t<F>* b;
  std::size_t panel_stride;
  float* c;

  template <int P>
  MIXPREC_TARGET_AVX512 void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    if (p0 == 0) {
      micro_row<P, F, Read, epilogue::store>(depth, a, b + q * panel_stride, panel_stride, c + q * gemm_nr);
    } else {
      micro_row<P, F, Read, epilogue::accumulate>(depth, a + p0 * gemm_mr, b + q * panel_stride + p0 * gemm_nr,
                                                  panel_stride, c + q * gemm_nr);
    }
  }
};

/// The single-row kernel: one row against `panels` panels of format F (f32, f16 or e4m3) over
/// all of k: c[0, panels·16) = a · b, in k-slices of `kc` (a fresh accumulator per slice, added to the
/// running sum: gemm_avx2::single_row's per-element order, so its bits), each group of panels streamed
/// from start to end: eight for 1-byte e4m3 panels (eight FMA chains hide the decoding), four for float32
/// and float16 ones (four weight streams, as the AVX2 row reads: eight streams of 4-byte weights read
/// more slowly from memory; measured: docs/kernels.md, "Engine measurements"). With
/// `e4m3_read::scaled`, a holds its values times 2^8 (gemm_engine.hpp's scale_row_up).
template <panel_format F, e4m3_read Read = e4m3_read::exact>
MIXPREC_TARGET_AVX512 inline void single_row(std::size_t panels, std::size_t k, std::size_t kc, const float* a,
                                             const panel_element_t<F>* b, std::size_t panel_stride, float* c) noexcept {
  static_assert(F != panel_format::bf16, "bfloat16 panels hold rows in pairs: gemm_avx512bf16::single_row");
  walk_single_row<Read == e4m3_read::scaled ? 8 : 4>(panels, k, kc, fma_rows<F, Read>{a, b, panel_stride, c});
}

/// The b panels (of the next pair, at most 2) whose k-slice the tile of rows from i in the pair of
/// panels from q prefetches into L1 as it runs (walk_tiles), one cache line per panel per step or
/// per few steps (kernels::detail::panel_rows_per_line): the first tile of each pair fetches the next pair, which the
/// following tiles then find in L1, so that only the first pair of a slice waits on memory. Without it the hardware
/// prefetcher sees each panel's slice as a short stream of its own (16 KiB, a new 4 KiB page every
/// 64 rows) and the first tile of every pair stalls: with a 16 MiB column block of b the f32 product
/// ran slower without it (measured: docs/kernels.md, "Engine measurements").
[[nodiscard]] constexpr int panels_ahead(std::size_t i, std::size_t q, std::size_t panels) noexcept {
  if (i != 0 || q + 2 >= panels) return 0;
  return panels - (q + 2) >= 2 ? 2 : 1;
}

/// Prefetches the cache line at `row` of each of `N` panels `panel_stride` elements apart (see
/// panels_ahead).
template <int N, class T>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void prefetch_panel_rows(
    const T* row, std::size_t panel_stride) noexcept {
#pragma GCC unroll 2
  for (int w = 0; w < N; ++w) {
    _mm_prefetch(reinterpret_cast<const char*>(row + static_cast<std::size_t>(w) * panel_stride), _MM_HINT_T0);
  }
}

/// c[height, W·16] (row stride ldc) = acc for the first `height` of the R rows of accumulators, stored
/// or added to c per `Out`: the end of every AVX-512 micro-tile.
template <int R, int W, epilogue Out>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void store_tile(__m512 (&acc)[R][W], float* c,
                                                                            std::size_t ldc,
                                                                            std::size_t height) noexcept {
  static_assert(kernels::detail::tile_write<Out>, "a micro-kernel stores or accumulates its tile");
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    if (static_cast<std::size_t>(r) >= height) break;
    float* row = c + static_cast<std::size_t>(r) * ldc;
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      float* cw = row + static_cast<std::size_t>(w) * gemm_nr;
      if constexpr (Out == epilogue::accumulate) acc[r][w] = _mm512_add_ps(_mm512_loadu_ps(cw), acc[r][w]);
      _mm512_storeu_ps(cw, acc[r][w]);
    }
  }
}

/// One k step of a micro-tile: acc[r][w] += a(r) · b[w] for the 6·A rows, a(r) at
/// a[(r / 6) · a_stride + r % 6] (`a_read::packed`) or at a[row_offset[r]] (`a_read::in_place`).
template <int A, int W, a_read AR>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void fma_step(const float* a, std::size_t a_stride,
                                                                          const std::size_t* row_offset,
                                                                          const __m512 (&b)[W],
                                                                          __m512 (&acc)[A * gemm_mr][W]) noexcept {
#pragma GCC unroll 12
  for (int r = 0; r < A * static_cast<int>(gemm_mr); ++r) {
    const std::size_t at = AR == a_read::in_place
                               ? row_offset[r]
                               : static_cast<std::size_t>(r / 6) * a_stride + static_cast<std::size_t>(r % 6);
    const __m512 ar = _mm512_set1_ps(a[at]);
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) acc[r][w] = _mm512_fmadd_ps(ar, b[w], acc[r][w]);
  }
}

/// c[height, W·16] (row stride ldc, height ≤ 6·A) = a · b over kc steps, stored or added to c per
/// `Out`, for A a panels (6 rows each, `a_stride` floats apart; rows past `height` are the packing's
/// zeros and are computed but not stored) against W b panels (`panel_stride` elements apart). With
/// `a_read::in_place`, a is read in place instead (row r at a + r · a_stride, contiguous in k:
/// gemm_avx2::micro_tile_impl's in-place reading), rows past `height` reading row height − 1 again
/// (computed, not stored).
template <int A, int W, panel_format F, a_read AR, epilogue Out, int Ahead = 0>
MIXPREC_TARGET_AVX512 inline void micro_tile(std::size_t kc, const float* a, std::size_t a_stride,
                                             const panel_element_t<F>* b, std::size_t panel_stride, float* c,
                                             std::size_t ldc, std::size_t height,
                                             const panel_element_t<F>* ahead = nullptr) noexcept {
  constexpr int rows = A * static_cast<int>(gemm_mr);
  constexpr bool in_place = AR == a_read::in_place;
  constexpr std::size_t a_step = in_place ? 1 : gemm_mr;  // from a(r, p) to a(r, p + 1)
  std::size_t row_offset[in_place ? rows : 1] = {};
  if constexpr (in_place) {
    for (int r = 0; r < rows; ++r) {
      row_offset[r] = (static_cast<std::size_t>(r) < height ? static_cast<std::size_t>(r) : height - 1) * a_stride;
    }
  }
  __m512 acc[rows][W];
#pragma GCC unroll 12
  for (int r = 0; r < rows; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) acc[r][w] = _mm512_setzero_ps();
  }
  if constexpr (F == panel_format::bf16) {
    // A pair row (gemm_pack.hpp): row p in the lanes' high halves (their floats once the low bits are
    // cleared), row p + 1 in the low halves (shifted up).
    const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(kernels::detail::bf16_high_half));
    for (std::size_t p = 0; p < kc; p += 2) {
      __m512 even[W];
      __m512 odd[W];
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) {
        const __m512i v = _mm512_loadu_si512(b + p * gemm_nr + static_cast<std::size_t>(w) * panel_stride);
        even[w] = _mm512_castsi512_ps(_mm512_and_si512(v, high_halves));
        // The zero-masking form, every lane selected (see load_e4m3_panel_scaled: GCC 12's plain
        // _mm512_slli_epi32 passes an undefined register and -Wmaybe-uninitialized fires at -O2).
        odd[w] = _mm512_castsi512_ps(
            _mm512_maskz_slli_epi32(static_cast<__mmask16>(~__mmask16{0}), v, kernels::detail::bf16_pattern_bits));
      }
      // Indexed from a and b rather than advanced past them: after an odd kc's last step a pointer
      // advanced by two steps would point beyond the operand.
      fma_step<A, W, AR>(a + p * a_step, a_stride, row_offset, even, acc);
      if (p + 1 < kc) fma_step<A, W, AR>(a + (p + 1) * a_step, a_stride, row_offset, odd, acc);
    }
  } else {
    for (std::size_t p = 0; p < kc; ++p) {
      __m512 bw[W];
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) bw[w] = load_b_row<F>(b + static_cast<std::size_t>(w) * panel_stride);
      if constexpr (Ahead > 0) {
        if (p % kernels::detail::panel_rows_per_line<F> == 0) {
          prefetch_panel_rows<Ahead>(ahead + p * gemm_nr, panel_stride);
        }
      }
      fma_step<A, W, AR>(a, a_stride, row_offset, bw, acc);
      a += a_step;
      b += gemm_nr;
    }
  }
  store_tile<rows, W, Out>(acc, c, ldc, height);
}

/// One tile of walk_tiles: rows [i, i + height) (height ≤ 12) against panels [q, q + width) (width 1
/// or 2), prefetching `Ahead` panels of the next pair.
template <int Ahead, class Tile>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void walk_tile(const Tile& tile, std::size_t i,
                                                                           std::size_t q, std::size_t height,
                                                                           std::size_t width) noexcept {
  const bool pair = width == 2;
  if (height > gemm_mr) {
    if (pair) {
      tile.template run<2, 2, Ahead>(i, q, height);
    } else {
      tile.template run<2, 1, Ahead>(i, q, height);
    }
  } else if (pair) {
    tile.template run<1, 2, Ahead>(i, q, height);
  } else {
    tile.template run<1, 1, Ahead>(i, q, height);
  }
}

/// The 12 × 32 tile walk of the AVX-512 macro-kernels (block and block_rows below, and
/// gemm_avx512bf16::block): each pair of b panels (a slice of 2 · kc · 16 elements, in L1) meets every
/// row of a in tiles of 12 rows. For the tile of rows [i, i + height) and panels [q, q + W) it calls
/// `tile.template run<A, W, Ahead>(i, q, height)`, A the a panels (6 rows each) the tile spans and
/// Ahead the panels from q + 2 whose slice the tile prefetches (panels_ahead).
template <class Tile>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void walk_tiles(std::size_t rows, std::size_t panels,
                                                                            const Tile& tile) noexcept {
  for (std::size_t q = 0; q < panels; q += 2) {
    const std::size_t width = panels - q >= 2 ? 2 : 1;
    for (std::size_t i = 0; i < rows; i += 2 * gemm_mr) {
      const std::size_t height = rows - i < 2 * gemm_mr ? rows - i : 2 * gemm_mr;
      switch (panels_ahead(i, q, panels)) {
        case 2: walk_tile<2>(tile, i, q, height, width); break;
        case 1: walk_tile<1>(tile, i, q, height, width); break;
        default: walk_tile<0>(tile, i, q, height, width); break;
      }
    }
  }
}

/// The FMA tiles of one k-slice, for walk_tiles, stored or added to c per `Out`: a packed
/// (`a_read::packed`: ceil(rows / 6) a panels of kc × 6) or read in place (row stride lda).
template <panel_format F, a_read AR, epilogue Out>
struct fma_tiles {
  std::size_t kc;
  const float* a;
  std::size_t lda;
  const panel_element_t<F>* b;
  std::size_t panel_stride;
  float* c;
  std::size_t ldc;

  template <int A, int W, int Ahead>
  MIXPREC_TARGET_AVX512 void run(std::size_t i, std::size_t q, std::size_t height) const noexcept {
    constexpr bool in_place = AR == a_read::in_place;
    const std::size_t a_stride = in_place ? lda : gemm_mr * kc;  // from one a panel (or row) to the next
    const float* ai = in_place ? a + i * lda : a + (i / gemm_mr) * a_stride;
    const panel_element_t<F>* bq = b + q * panel_stride;
    micro_tile<A, W, F, AR, Out, Ahead>(kc, ai, a_stride, bq, panel_stride, c + i * ldc + q * gemm_nr, ldc, height,
                                        Ahead > 0 ? bq + 2 * panel_stride : nullptr);
  }
};

/// The macro-kernel: c[rows, panels·16] (row stride ldc) = a_block · b over one k-slice of kc, stored
/// or added to c per `Out`, with the contract and per-element order of gemm_avx2::block. `a` holds
/// ceil(rows / 6) a panels of kc × 6; `b` points at the slice's first row in the first panel, panels
/// `panel_stride` elements apart.
template <panel_format F, epilogue Out>
MIXPREC_TARGET_AVX512 inline void block(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                        const panel_element_t<F>* b, std::size_t panel_stride, float* c,
                                        std::size_t ldc) noexcept {
  walk_tiles(rows, panels, fma_tiles<F, a_read::packed, Out>{kc, a, 0, b, panel_stride, c, ldc});
}

/// `block` for an a read in place: a[rows, kc] with row stride lda, no packing (gemm_avx2::block_rows's
/// contract: attention's query blocks and weight tiles), the same bits.
template <panel_format F, epilogue Out>
MIXPREC_TARGET_AVX512 inline void block_rows(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                             std::size_t lda, const panel_element_t<F>* b, std::size_t panel_stride,
                                             float* c, std::size_t ldc) noexcept {
  walk_tiles(rows, panels, fma_tiles<F, a_read::in_place, Out>{kc, a, lda, b, panel_stride, c, ldc});
}

}  // namespace gemm_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
