/// \file
/// \brief Private: the AVX-512 kernels of the blocked GEMM (kernels/detail/gemm_engine.hpp), compiled
/// through `target` attributes and called only at the level each needs (arch/detail/target.hpp
/// explains the rules): the FMA micro-kernels (namespace `gemm_avx512`, from `isa::avx512` on), the
/// VDPBF16PS ones for bfloat16 operands (namespace `gemm_avx512bf16`, `isa::avx512bf16`), and the two
/// walks that run them:
///  - `block`, the macro-kernel: one k-slice of a block of rows against a block of b panels, in
///    micro-tiles of up to 12 rows × 32 columns (two 6-row a panels against two 16-column b panels,
///    the packings of gemm_pack.hpp) in 24 zmm accumulators, the shape of BLIS's and oneDNN's AVX-512
///    SGEMM kernels. The micro-tile is a type holding the operands: `fma_tile` (per k step two b
///    loads, widened exactly as they load, 12 broadcasts of a and 24 FMAs: 2 + 1 + 24 of the 32
///    registers; the AVX2 kernel's 6 × 16 tile feeds its FMAs with one load per 2.4 FMAs, this one
///    with one per 1.7, at twice the width) or `gemm_avx512bf16::pair_tile` (two pair rows of b and
///    12 pairs of a per two k steps into 24 VDPBF16PS).
///  - `single_row`: one row of a (m = 1: a token's step) against all the panels, each group of four
///    or eight panels streamed from start to end over all of k, in micro-rows: `fma_row` for float32,
///    float16 and float8_e4m3fn panels (16 columns per FMA where the AVX2 row takes 8; for 1-byte e4m3
///    panels decoding float8 is what bounds the AVX2 row, about five vector instructions per 8
///    weights, measured: docs/kernels.md, "1-byte float8 panels"; here one panel row of 16 weights
///    takes a sign-extension, a shift, a mask, one VCVTPH2PS and one FMA), `gemm_avx512bf16::pair_row`
///    for bfloat16 pair panels and `gemm_avx512bf16::e4m3_row` for e4m3 panels on VDPBF16PS.
///
/// Summation order: that of gemm_avx2.hpp (every output element is `c += Σ_p a·b` over each k-slice
/// in ascending p, one FMA per term into an accumulator that starts at 0), so the FMA kernels' results
/// are bit-identical to the AVX2 level's, for every panel format.
///
/// VDPBF16PS multiplies 16 pairs of bfloat16 values by 16 pairs and adds both products to 16 float
/// accumulators: twice the multiply-adds of a float32 FMA per instruction, from operands half the
/// size. b panels hold their rows in pairs (gemm_pack.hpp); a is packed in pairs too (`pack_a_pairs`
/// below: 16 lanes, from float or bfloat16 rows, the words of kernels::detail::pack_a_pairs_from), so
/// that one 32-bit broadcast gives a row's two factors. What VDPBF16PS computes (Intel SDM,
/// "VDPBF16PS"; the same on AMD Zen 4 and Zen 5): per lane, `acc += a_high · b_high`, then
/// `acc += a_low · b_low`, each addition rounded to nearest-even; the products of bfloat16 values are
/// exact in float32. With the pairs ordered (high = row p, low = row p + 1) that is two steps of the
/// FMA kernels' ascending-k order: for normal operands and sums the bits equal the avx2 and avx512
/// levels' (tested). It differs in three ways, all stated in docs/kernels.md: subnormal inputs are
/// read as zero and subnormal results flushed to zero (DAZ and FTZ, whatever MXCSR says), the
/// rounding is to nearest-even whatever the rounding mode, and no floating-point exception flag is
/// raised.
///
/// 1-byte float8_e4m3fn panels (gemm_pack.hpp) are decoded to bfloat16 pair rows by byte lookups
/// (`row_e4m3_pairs`: VPERMI2B and VPERMT2B, so these functions also need AVX512_VBMI and are called
/// only where `mixprec::detail::cpu_has_avx512_vbmi()` is true): as they stream in a single row
/// (`e4m3_row`), and a column block at a time into pair panels for `block` (`e4m3_pair_panels`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/detail/convert_x86.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/float_format.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"

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
/// rows at a time, see fma_tile).
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

/// c[0, P·16) = acc, the end of a micro-row of `single_row` at the k-slice from p0: the first slice
/// stores its sums, each later one adds them to c (the tile writes of gemm_pack.hpp's tile_write).
template <int P>
MIXPREC_TARGET_AVX512_INLINE inline void store_row(__m512 (&acc)[P], float* c, std::size_t p0) noexcept {
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) {
    float* cq = c + static_cast<std::size_t>(q) * gemm_nr;
    if (p0 != 0) acc[q] = _mm512_add_ps(_mm512_loadu_ps(cq), acc[q]);
    _mm512_storeu_ps(cq, acc[q]);
  }
}

/// The b panels (of the next pair, at most 2) whose k-slice the tile of rows from i in the pair of
/// panels from q prefetches into L1 as it runs (`block`), one cache line per panel per step or per few
/// steps (kernels::detail::panel_rows_per_line): the first tile of each pair fetches the next pair,
/// which the following tiles then find in L1, so that only the first pair of a slice waits on memory.
/// Without it the hardware prefetcher sees each panel's slice as a short stream of its own (16 KiB, a
/// new 4 KiB page every 64 rows) and the first tile of every pair stalls: with a 16 MiB column block
/// of b the f32 product ran slower without it (measured: docs/kernels.md, "Engine measurements").
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

/// The macro-kernel: c[rows, panels·16] = a · b over one k-slice, stored or added to c per `Out`
/// (gemm_pack.hpp's tile_write), with the per-element order of gemm_avx2::block. Each pair of b
/// panels (a slice of 2 · kc · 16 elements, in L1) meets every row of a in tiles of 12 rows: for the
/// tile of rows [i, i + height) and panels [q, q + W) it runs the micro-kernel
/// `tile.template run<A, W, Ahead, Out>(i, q, height)`, A the a panels (6 rows each) the tile spans
/// and Ahead the panels from q + 2 whose k-slice it prefetches (panels_ahead). `tile` holds the
/// operands, pointers and sizes: an `fma_tile` or a `gemm_avx512bf16::pair_tile`.
template <epilogue Out, class Tile>
MIXPREC_TARGET_AVX512 inline __attribute__((always_inline)) void block(std::size_t rows, std::size_t panels,
                                                                       const Tile& tile) noexcept {
  static_assert(kernels::detail::tile_write<Out>, "a micro-kernel stores or accumulates its tile");
  for (std::size_t q = 0; q < panels; q += 2) {
    const bool pair = panels - q >= 2;  // else the last panel, alone: no panel after it to prefetch
    for (std::size_t i = 0; i < rows; i += 2 * gemm_mr) {
      const std::size_t height = rows - i < 2 * gemm_mr ? rows - i : 2 * gemm_mr;
      const int ahead = panels_ahead(i, q, panels);
      if (height > gemm_mr) {
        if (!pair) {
          tile.template run<2, 1, 0, Out>(i, q, height);
        } else if (ahead == 2) {
          tile.template run<2, 2, 2, Out>(i, q, height);
        } else if (ahead == 1) {
          tile.template run<2, 2, 1, Out>(i, q, height);
        } else {
          tile.template run<2, 2, 0, Out>(i, q, height);
        }
      } else if (!pair) {
        tile.template run<1, 1, 0, Out>(i, q, height);
      } else if (ahead == 2) {
        tile.template run<1, 2, 2, Out>(i, q, height);
      } else if (ahead == 1) {
        tile.template run<1, 2, 1, Out>(i, q, height);
      } else {
        tile.template run<1, 2, 0, Out>(i, q, height);
      }
    }
  }
}

/// One row of a against `panels` b panels over all of k: c[0, panels·16) = a · b, in k-slices of kc
/// (a fresh accumulator per slice, added to the running sum: the per-element order of the micro-tiles,
/// so a row's bits do not depend on the rows computed with it), the panels in groups of `Row::group`
/// (four or eight), each group streamed from start to end: the single-row product reads the weights
/// once, sequentially. Each slice of a group is one micro-row, `row.template run<P>(q, p0, depth)`, for
/// the P panels from q and the panel rows [p0, p0 + depth). `row` holds the operands, pointers and
/// sizes: an `fma_row`, a `gemm_avx512bf16::pair_row` or a `gemm_avx512bf16::e4m3_row`.
template <class Row>
MIXPREC_TARGET_AVX512 inline void single_row(std::size_t panels, std::size_t k, std::size_t kc,
                                             const Row& row) noexcept {
  constexpr std::size_t group = Row::group;
  static_assert(group == 4 || group == 8, "groups of four or eight panels");
  for (std::size_t q = 0; q < panels; q += group) {
    const std::size_t width = panels - q < group ? panels - q : group;
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t depth = k - p0 < kc ? k - p0 : kc;
      switch (width) {
        case 1: row.template run<1>(q, p0, depth); break;
        case 2: row.template run<2>(q, p0, depth); break;
        case 3: row.template run<3>(q, p0, depth); break;
        case 4: row.template run<4>(q, p0, depth); break;
        default:  // five to eight panels: groups of eight only
          if constexpr (group == 8) {
            switch (width) {
              case 5: row.template run<5>(q, p0, depth); break;
              case 6: row.template run<6>(q, p0, depth); break;
              case 7: row.template run<7>(q, p0, depth); break;
              default: row.template run<8>(q, p0, depth); break;
            }
          }
          break;
      }
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

/// The FMA micro-kernel of `block` for b panels of format F: a read per `AR` (a_read::packed:
/// ceil(rows / 6) a panels of kc × 6; a_read::in_place: rows `lda` floats apart, contiguous in k, as
/// gemm_avx2::micro_tile_impl reads them), b from the k-slice's first row in the first panel, panels
/// `panel_stride` elements apart, c with row stride ldc.
template <panel_format F, a_read AR>
struct fma_tile {
  std::size_t kc;
  const float* a;
  std::size_t lda;
  const panel_element_t<F>* b;
  std::size_t panel_stride;
  float* c;
  std::size_t ldc;

  /// Rows [i, i + height) (height ≤ 6·A) and columns [q·16, (q + W)·16) of c = a · b over kc steps,
  /// stored or added to c per `Out`. Packed rows past `height` are the packing's zeros, in-place ones
  /// read row height − 1 again: computed, not stored. With Ahead > 0 the k-slice of the Ahead panels
  /// from q + 2 is prefetched into L1 meanwhile, one cache line per panel per step or per few steps.
  template <int A, int W, int Ahead, epilogue Out>
  MIXPREC_TARGET_AVX512 void run(std::size_t i, std::size_t q, std::size_t height) const noexcept {
    constexpr int rows = A * static_cast<int>(gemm_mr);
    constexpr bool in_place = AR == a_read::in_place;
    constexpr std::size_t a_step = in_place ? 1 : gemm_mr;       // from a(r, p) to a(r, p + 1)
    const std::size_t a_stride = in_place ? lda : gemm_mr * kc;  // from one a panel (or row) to the next
    const float* ap = in_place ? a + i * lda : a + (i / gemm_mr) * a_stride;
    const panel_element_t<F>* bp = b + q * panel_stride;
    const panel_element_t<F>* ahead = Ahead > 0 ? bp + 2 * panel_stride : nullptr;
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
          const __m512i v = _mm512_loadu_si512(bp + p * gemm_nr + static_cast<std::size_t>(w) * panel_stride);
          even[w] = _mm512_castsi512_ps(_mm512_and_si512(v, high_halves));
          // The zero-masking form, every lane selected (see load_e4m3_panel_scaled: GCC 12's plain
          // _mm512_slli_epi32 passes an undefined register and -Wmaybe-uninitialized fires at -O2).
          odd[w] = _mm512_castsi512_ps(
              _mm512_maskz_slli_epi32(static_cast<__mmask16>(~__mmask16{0}), v, kernels::detail::bf16_pattern_bits));
        }
        // Indexed from a and b rather than advanced past them: after an odd kc's last step a pointer
        // advanced by two steps would point beyond the operand.
        fma_step<A, W, AR>(ap + p * a_step, a_stride, row_offset, even, acc);
        if (p + 1 < kc) fma_step<A, W, AR>(ap + (p + 1) * a_step, a_stride, row_offset, odd, acc);
      }
    } else {
      for (std::size_t p = 0; p < kc; ++p) {
        __m512 bw[W];
#pragma GCC unroll 2
        for (int w = 0; w < W; ++w) bw[w] = load_b_row<F>(bp + static_cast<std::size_t>(w) * panel_stride);
        if constexpr (Ahead > 0) {
          if (p % kernels::detail::panel_rows_per_line<F> == 0) {
            prefetch_panel_rows<Ahead>(ahead + p * gemm_nr, panel_stride);
          }
        }
        fma_step<A, W, AR>(ap, a_stride, row_offset, bw, acc);
        ap += a_step;
        bp += gemm_nr;
      }
    }
    store_tile<rows, W, Out>(acc, c + i * ldc + q * gemm_nr, ldc, height);
  }
};

/// `block` on FMA tiles for an a read in place: a[rows, kc] with row stride lda, no packing (the
/// contract of gemm_avx2::block_rows: attention's query blocks and weight tiles), the same bits.
template <panel_format F, epilogue Out>
MIXPREC_TARGET_AVX512 inline void block_rows(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                             std::size_t lda, const panel_element_t<F>* b, std::size_t panel_stride,
                                             float* c, std::size_t ldc) noexcept {
  block<Out>(rows, panels, fma_tile<F, a_read::in_place>{kc, a, lda, b, panel_stride, c, ldc});
}

/// The FMA micro-row of `single_row` for panels of format F (f32, f16 or e4m3): a packed as one row
/// (element p at a[p · gemm_mr]), panels `panel_stride` elements apart, c the row of y. With
/// `e4m3_read::scaled` (e4m3 panels only) the panel rows are read as `load_e4m3_panel_scaled` gives
/// them (the weights / 2^8) and a holds its values times 2^8 (gemm_engine.hpp's scale_row_up): the same
/// products, one multiplication fewer per 16 weights. Groups of eight panels for those (eight FMA
/// chains hide the decoding), of four for the others (four weight streams, as the AVX2 row reads:
/// eight streams of 4-byte weights read more slowly from memory; measured: docs/kernels.md, "Engine
/// measurements").
template <panel_format F, e4m3_read Read = e4m3_read::exact>
struct fma_row {
  static_assert(F != panel_format::bf16, "bfloat16 panels hold rows in pairs: gemm_avx512bf16::pair_row");
  static_assert(Read == e4m3_read::exact || F == panel_format::e4m3, "only e4m3 panels have a scaled load");
  static constexpr std::size_t group = Read == e4m3_read::scaled ? 8 : 4;
  const float* a;
  const panel_element_t<F>* b;
  std::size_t panel_stride;
  float* c;

  /// Columns [q·16, (q + P)·16) of c = a · b over the panel rows [p0, p0 + depth), stored (p0 = 0)
  /// or added to c.
  template <int P>
  MIXPREC_TARGET_AVX512 void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    const float* ap = a + p0 * gemm_mr;
    const panel_element_t<F>* bp = b + q * panel_stride + p0 * gemm_nr;
    __m512 acc[P];
#pragma GCC unroll 8
    for (int w = 0; w < P; ++w) acc[w] = _mm512_setzero_ps();
    for (std::size_t p = 0; p < depth; ++p) {
      const __m512 ar = _mm512_set1_ps(*ap);
#pragma GCC unroll 8
      for (int w = 0; w < P; ++w) {
        const panel_element_t<F>* bw = bp + static_cast<std::size_t>(w) * panel_stride;
        if constexpr (Read == e4m3_read::scaled) {
          acc[w] = _mm512_fmadd_ps(ar, load_e4m3_panel_scaled(bw), acc[w]);
        } else {
          acc[w] = _mm512_fmadd_ps(ar, load_b_row<F>(bw), acc[w]);
        }
      }
      ap += gemm_mr;
      bp += gemm_nr;
    }
    store_row<P>(acc, c + q * gemm_nr, p0);
  }
};

}  // namespace gemm_avx512

namespace gemm_avx512bf16 {

using kernels::epilogue;
using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;

/// 16 lanes of a bfloat16 pair row (32 patterns) as VDPBF16PS's operand.
MIXPREC_TARGET_AVX512BF16 inline __m512bh load_pairs(const std::uint16_t* b) noexcept {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
}

/// The VDPBF16PS micro-kernel of gemm_avx512::block: a in pair panels (pack_a_pairs: ceil(rows / 6)
/// panels of 6 × ceil(kc / 2) 32-bit words), b from the k-slice's first pair row in the first bfloat16
/// pair panel, panels `panel_stride` patterns apart, c with row stride ldc.
struct pair_tile {
  std::size_t kc;
  const std::uint32_t* a;
  const std::uint16_t* b;
  std::size_t panel_stride;
  float* c;
  std::size_t ldc;

  /// Rows [i, i + height) (height ≤ 6·A; the packing's zero rows past it computed, not stored) and
  /// columns [q·16, (q + W)·16) of c = a · b over kc steps, stored or added to c per `Out`, prefetching
  /// the k-slice of the Ahead panels from q + 2.
  template <int A, int W, int Ahead, epilogue Out>
  MIXPREC_TARGET_AVX512BF16 void run(std::size_t i, std::size_t q, std::size_t height) const noexcept {
    constexpr int rows = A * static_cast<int>(gemm_mr);
    const std::size_t pairs = (kc + 1) / 2;
    const std::size_t a_stride = gemm_mr * pairs;  // from one pair panel to the next
    const std::uint32_t* ap = a + (i / gemm_mr) * a_stride;
    const std::uint16_t* bp = b + q * panel_stride;
    const std::uint16_t* ahead = Ahead > 0 ? bp + 2 * panel_stride : nullptr;
    __m512 acc[rows][W];
#pragma GCC unroll 12
    for (int r = 0; r < rows; ++r) {
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) acc[r][w] = _mm512_setzero_ps();
    }
    for (std::size_t t = 0; t < pairs; ++t) {
      __m512bh bw[W];
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) bw[w] = load_pairs(bp + static_cast<std::size_t>(w) * panel_stride);
      if constexpr (Ahead > 0) gemm_avx512::prefetch_panel_rows<Ahead>(ahead + t * 2 * gemm_nr, panel_stride);
#pragma GCC unroll 12
      for (int r = 0; r < rows; ++r) {
        const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(
            static_cast<int>(ap[static_cast<std::size_t>(r / 6) * a_stride + static_cast<std::size_t>(r % 6)])));
#pragma GCC unroll 2
        for (int w = 0; w < W; ++w) acc[r][w] = _mm512_dpbf16_ps(acc[r][w], ar, bw[w]);
      }
      ap += gemm_mr;
      bp += 2 * gemm_nr;
    }
    gemm_avx512::store_tile<rows, W, Out>(acc, c + i * ldc + q * gemm_nr, ldc, height);
  }
};

/// gemm_avx512::block on VDPBF16PS tiles for a caller holding the operands as arrays
/// (kernels/attention.hpp's scores): c[rows, panels·16] (row stride ldc) = a · b over one k-slice of
/// kc, stored or added to c per `Out`, `a` and `b` as pair_tile reads them.
template <epilogue Out>
MIXPREC_TARGET_AVX512BF16 inline void block(std::size_t rows, std::size_t panels, std::size_t kc,
                                            const std::uint32_t* a, const std::uint16_t* b, std::size_t panel_stride,
                                            float* c, std::size_t ldc) noexcept {
  gemm_avx512::block<Out>(rows, panels, pair_tile{kc, a, b, panel_stride, c, ldc});
}

/// The VDPBF16PS micro-row of gemm_avx512::single_row: the row's ceil(k / 2) pairs consecutive (a[t]:
/// a(2t) high, a(2t + 1) low), bfloat16 pair panels `panel_stride` patterns apart, k-slices of even
/// length, c the row of y. Groups of four panels: four weight streams measured faster than eight
/// (docs/kernels.md, "Engine measurements").
struct pair_row {
  static constexpr std::size_t group = 4;
  const std::uint32_t* a;
  const std::uint16_t* b;
  std::size_t panel_stride;
  float* c;

  /// Columns [q·16, (q + P)·16) of c = a · b over the panel rows [p0, p0 + depth), stored (p0 = 0)
  /// or added to c.
  template <int P>
  MIXPREC_TARGET_AVX512BF16 void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    const std::size_t pairs = (depth + 1) / 2;
    const std::uint32_t* ap = a + p0 / 2;
    const std::uint16_t* bp = b + q * panel_stride + p0 * gemm_nr;
    __m512 acc[P];
#pragma GCC unroll 8
    for (int w = 0; w < P; ++w) acc[w] = _mm512_setzero_ps();
    for (std::size_t t = 0; t < pairs; ++t) {
      const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[t])));
#pragma GCC unroll 8
      for (int w = 0; w < P; ++w) {
        acc[w] = _mm512_dpbf16_ps(acc[w], ar, load_pairs(bp + static_cast<std::size_t>(w) * panel_stride));
      }
      bp += 2 * gemm_nr;
    }
    gemm_avx512::store_row<P>(acc, c + q * gemm_nr, p0);
  }
};

/// The sign bit of a float8_e4m3fn pattern (also the sign bit of bfloat16's high byte), and the
/// number of magnitudes below it: the patterns 0 .. 0x7F.
inline constexpr std::size_t e4m3_magnitudes = std::size_t{1} << (8 * sizeof(float8_e4m3fn) - 1);
inline constexpr auto e4m3_sign_bit = static_cast<std::uint8_t>(e4m3_magnitudes);
/// Bytes in a zmm register: also VPERMT2B's index bit that selects its second source.
inline constexpr std::size_t zmm_bytes = sizeof(__m512i);
static_assert(2 * zmm_bytes == e4m3_magnitudes, "two registers hold a table of every magnitude");

/// The bfloat16 patterns of the float8_e4m3fn magnitudes (OCP FP8 spec: every value exact in
/// bfloat16, the subnormals 2^-9 .. 7·2^-9 normal there; 0x7F, NaN, never met in a panel), made from
/// the format types and split into their low bytes (`[0]`) and high bytes (`[1]`): the tables
/// row_e4m3_pairs looks the magnitudes up in.
inline constexpr std::array<std::array<std::uint8_t, e4m3_magnitudes>, 2> e4m3_bf16_bytes = [] {
  std::array<std::array<std::uint8_t, e4m3_magnitudes>, 2> bytes{};
  for (std::size_t m = 0; m < e4m3_magnitudes; ++m) {
    const std::uint16_t bits =
        bfloat16(static_cast<float>(float8_e4m3fn::from_bits(static_cast<std::uint8_t>(m)))).bits();
    bytes[0][m] = static_cast<std::uint8_t>(bits & 0xFFU);
    bytes[1][m] = static_cast<std::uint8_t>(bits >> 8);
  }
  return bytes;
}();
static_assert(e4m3_bf16_bytes[1][0x38] == 0x3F && e4m3_bf16_bytes[0][0x38] == 0x80, "e4m3fn 0x38 is 1.0");

/// VPERMT2B indices that build two bfloat16 pair rows from four rows of an e4m3 panel, given the
/// looked-up low bytes (first source) and high bytes (second source: index bit 6) of the 64 weights
/// (byte 16r + j: row r, column j): index vector u makes pair row u, whose lane j is row 2u's pattern
/// in the high half and row 2u + 1's in the low half (the order of gemm_pack.hpp's pair panels), as
/// the little-endian bytes low(2u + 1), high(2u + 1), low(2u), high(2u).
inline constexpr std::array<std::array<std::uint8_t, zmm_bytes>, 2> e4m3_pair_bytes = [] {
  std::array<std::array<std::uint8_t, zmm_bytes>, 2> index{};
  for (std::size_t u = 0; u < 2; ++u) {
    for (std::size_t j = 0; j < gemm_nr; ++j) {
      const auto even = static_cast<std::uint8_t>(2 * u * gemm_nr + j), odd = static_cast<std::uint8_t>(even + gemm_nr);
      index[u][4 * j + 0] = odd;
      index[u][4 * j + 1] = static_cast<std::uint8_t>(zmm_bytes + odd);
      index[u][4 * j + 2] = even;
      index[u][4 * j + 3] = static_cast<std::uint8_t>(zmm_bytes + even);
    }
  }
  return index;
}();

/// The lookup tables and byte orders of row_e4m3_pairs, loaded once per micro-row.
struct e4m3_tables {
  __m512i low0, low1, high0, high1, pair0, pair1;

  MIXPREC_TARGET_AVX512BF16_VBMI e4m3_tables() noexcept
      : low0(_mm512_loadu_si512(e4m3_bf16_bytes[0].data())),
        low1(_mm512_loadu_si512(e4m3_bf16_bytes[0].data() + zmm_bytes)),
        high0(_mm512_loadu_si512(e4m3_bf16_bytes[1].data())),
        high1(_mm512_loadu_si512(e4m3_bf16_bytes[1].data() + zmm_bytes)),
        pair0(_mm512_loadu_si512(e4m3_pair_bytes[0].data())),
        pair1(_mm512_loadu_si512(e4m3_pair_bytes[1].data())) {}
};

/// Four rows of an e4m3 panel (64 patterns, row r at byte 16r) as two bfloat16 pair rows, exactly:
/// each magnitude looked up in both byte tables (VPERMI2B reads index bits 0-6, so the sign bit
/// selects nothing), the sign bit merged into the high byte, and the bytes put in pair order (two
/// VPERMT2B). Five instructions per 64 weights after their load, where widening through float16 (gemm_avx512's
/// load_e4m3_panel_scaled) takes four per 16.
MIXPREC_TARGET_AVX512BF16_VBMI inline void row_e4m3_pairs(__m512i x, const e4m3_tables& t, __m512bh& first,
                                                          __m512bh& second) noexcept {
  const __m512i low = _mm512_permutex2var_epi8(t.low0, x, t.low1);
  // A | (B & C) for A = the looked-up high bytes, B = x, C = the sign bits: truth table 0xF8.
  const __m512i high = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.high0, x, t.high1), x,
                                                 _mm512_set1_epi8(static_cast<char>(e4m3_sign_bit)), 0xF8);
  first = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi8(low, t.pair0, high));
  second = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi8(low, t.pair1, high));
}

/// The panel rows [p, p + 4) of an e4m3 panel at `b` (row r at byte 16r), rows past kc read as zeros,
/// as two bfloat16 pair rows (row_e4m3_pairs): one 64-byte load, masked for the last one to three rows.
MIXPREC_TARGET_AVX512BF16_VBMI_INLINE inline void load_e4m3_pairs(const std::uint8_t* b, std::size_t p, std::size_t kc,
                                                                  const e4m3_tables& t, __m512bh& first,
                                                                  __m512bh& second) noexcept {
  const std::uint8_t* rows = b + p * gemm_nr;
  if (kc - p >= 4) {
    row_e4m3_pairs(_mm512_loadu_si512(rows), t, first, second);
  } else {
    const auto mask = static_cast<__mmask64>((std::uint64_t{1} << ((kc - p) * gemm_nr)) - 1U);
    row_e4m3_pairs(_mm512_maskz_loadu_epi8(mask, rows), t, first, second);
  }
}

/// The VDPBF16PS micro-row of gemm_avx512::single_row for 1-byte e4m3 panels (AVX512_VBMI beside the
/// avx512bf16 level): the row's ceil(k / 2) pairs consecutive (a[t]: a(2t) high, a(2t + 1) low; a zero
/// low half past an odd k), every value of a a bfloat16 value (compute types whose values bfloat16
/// holds), e4m3 panels `panel_stride` bytes apart, k-slices of even length, c the row of y. Each weight
/// is read as its one byte and decoded exactly (row_e4m3_pairs), so the product streams k · n bytes:
/// the same products and additions as pair_row on bfloat16 pair panels, so the bits of the FMA levels'
/// single rows and micro-tiles, with VDPBF16PS's exceptions.
struct e4m3_row {
  static constexpr std::size_t group = 4;
  const std::uint32_t* a;
  const std::uint8_t* b;
  std::size_t panel_stride;
  float* c;

  /// Columns [q·16, (q + P)·16) of c = a · b over the panel rows [p0, p0 + depth), stored (p0 = 0)
  /// or added to c. Four panel rows (one 64-byte load) at a time, the last one to three through a
  /// masked load; a pair row wholly past the slice is not multiplied (an added 0 · 0 would turn an
  /// accumulated -0 into +0).
  template <int P>
  MIXPREC_TARGET_AVX512BF16_VBMI void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    const std::uint32_t* ap = a + p0 / 2;
    const std::uint8_t* bp = b + q * panel_stride + p0 * gemm_nr;
    const e4m3_tables tables;
    __m512 acc[P];
#pragma GCC unroll 8
    for (int w = 0; w < P; ++w) acc[w] = _mm512_setzero_ps();
    for (std::size_t p = 0; p < depth; p += 4) {
      const bool second_pair = depth - p > 2;
      const auto a0 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[p / 2])));
      const auto a1 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(second_pair ? static_cast<int>(ap[p / 2 + 1]) : 0));
#pragma GCC unroll 8
      for (int w = 0; w < P; ++w) {
        __m512bh first, second;
        load_e4m3_pairs(bp + static_cast<std::size_t>(w) * panel_stride, p, depth, tables, first, second);
        acc[w] = _mm512_dpbf16_ps(acc[w], a0, first);
        if (second_pair) acc[w] = _mm512_dpbf16_ps(acc[w], a1, second);
      }
    }
    gemm_avx512::store_row<P>(acc, c + q * gemm_nr, p0);
  }
};

/// `panels` 1-byte e4m3 panels of depth k (`panel_stride` bytes apart) as bfloat16 pair panels at
/// `out`, exactly (row_e4m3_pairs): gemm_pack.hpp's pair layout, panel_stride<bf16>(k) patterns from
/// one panel to the next, a zero row padding an odd k. A kept e4m3 column block read as the operand
/// of `block` (kernels::detail::e4m3_pairs_view).
MIXPREC_TARGET_AVX512BF16_VBMI inline void e4m3_pair_panels(std::size_t panels, std::size_t k, const std::uint8_t* b,
                                                            std::size_t panel_stride, std::uint16_t* out) noexcept {
  const e4m3_tables tables;
  const std::size_t out_stride = kernels::detail::panel_stride<kernels::detail::panel_format::bf16>(k);
  for (std::size_t q = 0; q < panels; ++q) {
    std::uint16_t* dst = out + q * out_stride;
    for (std::size_t p = 0; p < k; p += 4) {  // pair row p / 2 starts at pattern p · 16
      __m512bh first, second;
      load_e4m3_pairs(b + q * panel_stride, p, k, tables, first, second);
      _mm512_storeu_si512(dst + p * gemm_nr, reinterpret_cast<__m512i>(first));
      if (k - p > 2) _mm512_storeu_si512(dst + (p + 2) * gemm_nr, reinterpret_cast<__m512i>(second));
    }
  }
}

/// Word indices (into the 64 16-bit words of two vectors) that gather 32 floats' bfloat16 patterns —
/// the low word of each 32-bit lane (simd_avx512::bfloat16_patterns) — as 16 pair lanes: lane t's low
/// word is element 2t + 1's pattern (word 4t + 2), its high word element 2t's (word 4t).
inline constexpr std::array<std::uint16_t, 32> pair_words = [] {
  std::array<std::uint16_t, 32> words{};
  for (std::size_t t = 0; t < 16; ++t) {
    words[2 * t] = static_cast<std::uint16_t>(4 * t + 2);
    words[2 * t + 1] = static_cast<std::uint16_t>(4 * t);
  }
  return words;
}();

/// bfloat16's magnitude bits, its Inf pattern and the quiet bit of its NaNs (formats::bfloat16), as
/// 16-bit lanes: a word w is a NaN when (w & magnitude) > infinity, and quiet when the bit is set.
inline constexpr auto bf16_magnitude = static_cast<short>(formats::bfloat16.magnitude_mask());
inline constexpr auto bf16_infinity = static_cast<short>(formats::bfloat16.exponent_mask());
inline constexpr auto bf16_quiet_bit =
    static_cast<short>(formats::bfloat16.quiet_nan_bits() & ~formats::bfloat16.exponent_mask());

/// Lanes [0, t) of 16 set (t ≤ 16).
[[nodiscard]] inline __mmask16 lanes16(std::size_t t) noexcept {
  return static_cast<__mmask16>(t >= 16 ? 0xFFFFU : (1U << t) - 1U);
}

/// One row x [kc] as (kc + 1) / 2 pair words (kernels::detail::bf16_pair's layout): word t =
/// bf16(x[2t]) << 16 | bf16(x[2t + 1]), zero past kc; float elements rounded to nearest-even
/// (VCVTNE2PS2BF16, or simd_avx512::bfloat16_patterns for 32 elements with a subnormal or a NaN among them:
/// NaN to bfloat16's quiet NaN, the sign kept), bfloat16 ones as they are. The kc elements at `ahead` (a row packed
/// later, or null) are prefetched: a's rows are read from beyond the L2 cache, and the lines of one row are too few for
/// the hardware prefetcher.
template <class S>
MIXPREC_TARGET_AVX512BF16 inline void row_pairs(const S* x, std::size_t kc, std::uint32_t* out,
                                                const S* ahead) noexcept {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, bfloat16>, "pairs from float or bfloat16 rows");
  constexpr std::size_t line = 64 / sizeof(S);  // elements per cache line
  const __m512i words = _mm512_loadu_si512(pair_words.data());
  for (std::size_t j = 0; j < kc; j += 32) {
    if (ahead != nullptr) {
      for (std::size_t e = j; e < j + 32 && e < kc; e += line) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + e), _MM_HINT_T0);
      }
    }
    const std::size_t t = kc - j < 32 ? kc - j : 32;
    __m512i pairs;
    if constexpr (std::is_same_v<S, float>) {
      const __m512 low = _mm512_maskz_loadu_ps(lanes16(t), x + j);
      const __m512 high = _mm512_maskz_loadu_ps(lanes16(t > 16 ? t - 16 : 0), x + j + 16);
      constexpr auto nearest = overflow_mode::to_inf_or_nan;
      if ((avx512::bfloat16_native_misses<nearest>(_mm512_castps_si512(low)) |
           avx512::bfloat16_native_misses<nearest>(_mm512_castps_si512(high))) == 0) {
        // VCVTNE2PS2BF16 (the same bits where no lane is subnormal or NaN): element e in word e, so each
        // 32-bit lane holds x[2t] low and x[2t + 1] high, swapped into place by a rotation.
        pairs = _mm512_maskz_rol_epi32(lanes16(16), reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low)), 16);
      } else {
        pairs =
            _mm512_permutex2var_epi16(simd_avx512::bfloat16_patterns(low), words, simd_avx512::bfloat16_patterns(high));
      }
    } else {
      // A signalling NaN is quieted (its quiet bit set), as the exact widening to float does; then
      // element 2t, in the low word of lane t, and 2t + 1, in the high one, swap places.
      const auto loaded = static_cast<__mmask32>(t >= 32 ? 0xFFFFFFFFU : (1U << t) - 1U);
      const __m512i w = _mm512_maskz_loadu_epi16(loaded, x + j);
      const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(w, _mm512_set1_epi16(bf16_magnitude)),
                                                    _mm512_set1_epi16(bf16_infinity));
      const __m512i quieted = _mm512_mask_mov_epi16(w, nan, _mm512_or_si512(w, _mm512_set1_epi16(bf16_quiet_bit)));
      pairs = _mm512_maskz_rol_epi32(lanes16(16), quieted, 16);
    }
    _mm512_mask_storeu_epi32(out + j / 2, lanes16((t + 1) / 2), pairs);
  }
}

/// kernels::detail::pack_a_pairs_from's words for a row-major a of float or bfloat16 (C bfloat16):
/// `rows` rows of kc elements from `a` (row i at a + i·lda), as ceil(rows / 6) pair panels of 6 ×
/// ceil(kc / 2) words (rows past `rows` zero). kc ≤ gemm_kc.
template <class S>
MIXPREC_TARGET_AVX512BF16 inline void pack_a_pairs(const S* a, std::size_t lda, std::size_t rows, std::size_t kc,
                                                   std::uint32_t* dst) noexcept {
  constexpr std::size_t most = (kernels::detail::gemm_kc + 1) / 2;
  alignas(64) std::uint32_t row[gemm_mr][most + 16];  // + 16: row_pairs stores whole vectors' lanes only
  const std::size_t pairs = (kc + 1) / 2;
  for (std::size_t r = 0; r * gemm_mr < rows; ++r) {
    const std::size_t height = rows - r * gemm_mr < gemm_mr ? rows - r * gemm_mr : gemm_mr;
    for (std::size_t ii = 0; ii < gemm_mr; ++ii) {
      if (ii < height) {
        const std::size_t i = r * gemm_mr + ii;
        row_pairs<S>(a + i * lda, kc, row[ii], i + gemm_mr < rows ? a + (i + gemm_mr) * lda : nullptr);
      } else {
        for (std::size_t t = 0; t < pairs; ++t) row[ii][t] = 0;
      }
    }
    std::uint32_t* out = dst + r * gemm_mr * pairs;
    for (std::size_t t = 0; t < pairs; ++t) {
#pragma GCC unroll 6
      for (std::size_t ii = 0; ii < gemm_mr; ++ii) out[t * gemm_mr + ii] = row[ii][t];
    }
  }
}

/// 8 bfloat16 patterns with each signalling NaN quieted (its quiet bit set), as the exact widening to
/// float does.
MIXPREC_TARGET_AVX512BF16_INLINE inline __m128i quieted(__m128i w) noexcept {
  const __mmask8 nan =
      _mm_cmpgt_epu16_mask(_mm_and_si128(w, _mm_set1_epi16(bf16_magnitude)), _mm_set1_epi16(bf16_infinity));
  return _mm_mask_mov_epi16(w, nan, _mm_or_si128(w, _mm_set1_epi16(bf16_quiet_bit)));
}

/// kernels::detail::pack_a_pairs_from's words for a bfloat16 a stored [k, m] (`a_layout::k_m`, the
/// xᵀ of a weight gradient): element (i, p) at a[p · lda + i], `rows` rows of kc elements, as
/// ceil(rows / 6) pair panels of 6 × ceil(kc / 2) words (rows past `rows` zero). Each panel is written
/// in order, 6 words per pair of a's rows: the 6 patterns of row 2t in the high halves, of row 2t + 1
/// (zero past kc) in the low ones, with no pass through float.
MIXPREC_TARGET_AVX512BF16 inline void pack_a_pairs_km(const bfloat16* a, std::size_t lda, std::size_t rows,
                                                      std::size_t kc, std::uint32_t* dst) noexcept {
  static_assert(gemm_mr == 6, "a pair panel's 6 words are written as 4 + 2");
  const std::size_t pairs = (kc + 1) / 2;
  const auto* patterns = reinterpret_cast<const std::uint16_t*>(a);
  for (std::size_t r = 0; r * gemm_mr < rows; ++r) {
    const std::size_t height = rows - r * gemm_mr < gemm_mr ? rows - r * gemm_mr : gemm_mr;
    const auto loaded = static_cast<__mmask8>((1U << height) - 1U);
    const std::uint16_t* column = patterns + r * gemm_mr;
    std::uint32_t* out = dst + r * gemm_mr * pairs;
    for (std::size_t t = 0; t < pairs; ++t) {
      const __m128i even = quieted(_mm_maskz_loadu_epi16(loaded, column + 2 * t * lda));
      const __m128i odd =
          2 * t + 1 < kc ? quieted(_mm_maskz_loadu_epi16(loaded, column + (2 * t + 1) * lda)) : _mm_setzero_si128();
      // Word ii = even[ii] << 16 | odd[ii]: words 0-3, then 4-5.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + t * gemm_mr), _mm_unpacklo_epi16(odd, even));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + t * gemm_mr + 4), _mm_unpackhi_epi16(odd, even));
    }
  }
}

}  // namespace gemm_avx512bf16
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
