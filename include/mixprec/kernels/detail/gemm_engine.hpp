/// \file
/// \brief Private: the blocked, packed GEMM behind `kernels::matmul` and `kernels::matmul_accumulate`
/// for every float32-accumulating compute type (float, bfloat16, float16, the float8/6/4 formats) when
/// the CPU runs the AVX2 level or above; the portable level keeps Eigen's GEMM, except for products
/// with a `kernels::packed_b`, which run here at every level (`portable_block` below).
///
/// Loop nest (BLIS's five loops, with the k loop inside the m loop so that the float accumulator tile
/// is one mc × nc block, however long k is):
///
///     for jc in n step nc:            b block [k, nc] packed once (or read from a kept packed_b)
///       for ic in m step mc:
///         for pc in k step kc:        a block [mc, kc] packed (rounded to C, widened to float)
///           macro-kernel              c_tile[mc, nc] (+)= a_block · b_block[pc : pc + kc]
///         epilogue                    y[ic, jc] = round_to<Y>(c_tile + bias')   or   y += c_tile
///
/// With a kept packing of bfloat16 pairs in several column blocks on one thread, the ic loop goes
/// outside the jc loop instead, and each row block's a pairs are packed once for all of k and every
/// column block (the same slices in the same order).
///
/// `blocked_gemm` chooses the panel format and the level once per product; `blocked_gemm_panels` runs
/// the jc and ic loops (and the threads); `gemm_block` one (jc, ic) block: the pc loop, calling the
/// macro-kernel of the level (gemm_avx512::block on an fma_tile or a gemm_avx512bf16::pair_tile,
/// gemm_avx2::block, portable_block; a single row takes the levels' single_row kernels), and the
/// epilogue. docs/kernels.md, "From a layer to the instruction", follows one product through them.
///
/// Blocks are cut along the output; the block sizes (gemm_pack.hpp) fit the packed a block in L2 and
/// a b panel slice in L1. Work is split over `mixprec::num_threads()` threads by (jc, ic) blocks,
/// which changes no result: see gemm_avx2.hpp for the summation order. Scratch buffers are per thread
/// and kept, so a steady state (the same shapes again) allocates nothing.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/kernels/detail/cache_aligned.hpp"
#include "mixprec/kernels/detail/gemm_avx2.hpp"
#include "mixprec/kernels/detail/gemm_avx512.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/threads.hpp"

namespace mixprec::kernels::detail {

/// Whether the blocked engine computes products for compute type C on this CPU at the level in use.
template <class C>
[[nodiscard]] inline bool use_blocked_gemm() noexcept {
#if MIXPREC_X86_DISPATCH
  if constexpr (std::same_as<accumulator_t<C>, float> && !internal::is_complex_v<C>) {
    return active_isa() >= isa::avx2;
  } else {
    return false;
  }
#else
  return false;
#endif
}

/// The portable macro-kernel: the same contract and per-element order as gemm_avx2::block (one
/// multiply-add per term into an accumulator that starts at 0 per k-slice, stored or added to c per
/// `Out`), in plain C++ that the compiler vectorises for its baseline. Runs packed products when the
/// level in use is portable.
template <panel_format F, epilogue Out>
void portable_block(std::size_t rows, std::size_t panels, std::size_t kc, const float* a, const panel_element_t<F>* b,
                    std::size_t panel_stride, float* c, std::size_t ldc) noexcept {
  static_assert(tile_write<Out>, "a micro-kernel stores or accumulates its tile");
  for (std::size_t q = 0; q < panels; ++q) {
    const panel_element_t<F>* bq = b + q * panel_stride;
    for (std::size_t i = 0; i < rows; i += gemm_mr) {
      const float* ai = a + (i / gemm_mr) * gemm_mr * kc;
      const std::size_t height = std::min(gemm_mr, rows - i);
      for (std::size_t r = 0; r < height; ++r) {
        float acc[gemm_nr] = {};  // one row at a time: 16 accumulators stay in registers
        for (std::size_t p = 0; p < kc; ++p) {
          const float ar = ai[p * gemm_mr + r];
          for (std::size_t j = 0; j < gemm_nr; ++j) acc[j] += ar * from_panel<F>(bq[panel_index<F>(p, j)]);
        }
        float* row = c + (i + r) * ldc + q * gemm_nr;
        for (std::size_t j = 0; j < gemm_nr; ++j) {
          if constexpr (Out == epilogue::accumulate) {
            row[j] += acc[j];
          } else {
            row[j] = acc[j];
          }
        }
      }
    }
  }
}

/// Multiplies the packed row a[p · gemm_mr] (p < k) by e4m3_panel_scale (2^8) and returns true, or
/// changes nothing and returns false unless every element is zero, Inf, NaN or a normal float no
/// larger than max / 2^8: then the scaling and its undoing (gemm_avx2::single_row's tail) are exact
/// and no result is subnormal, whatever MXCSR's FTZ and DAZ say.
inline bool scale_row_up(float* a, std::size_t k) noexcept {
  constexpr float limit = std::numeric_limits<float>::max() / e4m3_panel_scale;
  constexpr float smallest = std::numeric_limits<float>::min();
  for (std::size_t p = 0; p < k; ++p) {
    const float v = std::fabs(a[p * gemm_mr]);
    const bool safe = v == 0.0f || (v >= smallest && v <= limit) || std::isnan(v) || std::isinf(v);
    if (!safe) return false;
  }
  for (std::size_t p = 0; p < k; ++p) a[p * gemm_mr] *= e4m3_panel_scale;
  return true;
}

/// A fully packed b(k, n): gemm_panels(n) panels of k × gemm_nr elements of `format` (gemm_pack.hpp).
struct packed_b_view {
  const void* data = nullptr;
  std::size_t k = 0;
  std::size_t n = 0;
  panel_format format = panel_format::f32;
};

/// One product, described once: y[m, n] = op(a) · b, with `out` saying what happens to y (store, add
/// the bias, or accumulate into a float y). `a` is [m, k] or [k, m] (`a_order`); `bias` is n floats
/// already rounded to C and widened, for `epilogue::bias` only.
template <class A, class Y>
struct gemm_problem {
  const A* a = nullptr;
  a_layout a_order = a_layout::m_k;
  Y* y = nullptr;
  std::size_t m = 0;
  std::size_t k = 0;
  std::size_t n = 0;
  epilogue out = epilogue::store;
  const float* bias = nullptr;
};

struct gemm_scratch;

/// A product (gemm_problem) with the element types of a and y erased: what the engine does with them
/// besides multiplying (packing a, writing y) are functions chosen once from the types
/// (`gemm_operands_of`). Below `blocked_gemm` the engine is then compiled once per compute type and b
/// source, whatever a's and y's types (float, double, bfloat16, float16...): one instantiation, in a
/// user's translation unit or in the compiled library (kernels/compiled.hpp), serves them all.
struct gemm_operands {
  const void* a = nullptr;
  a_layout a_order = a_layout::m_k;
  void* y = nullptr;
  std::size_t m = 0;
  std::size_t k = 0;
  std::size_t n = 0;
  epilogue out = epilogue::store;
  const float* bias = nullptr;
  /// y holds float32 values: an accumulating product adds to it, and a stored one may keep its tile in it.
  bool y_float = false;
  /// `pack_a<C>` for a's element type.
  void (*pack_a)(const void* a, std::size_t m, std::size_t k, a_layout layout, std::size_t i0, std::size_t rows,
                 std::size_t p0, std::size_t kc, float* dst, float* row) = nullptr;
  /// `pack_pair_slice<C>` for a's element type (compute types whose values are bfloat16 values only).
  void (*pack_pairs)(const void* a, a_layout layout, std::size_t m, std::size_t k, std::size_t i0, std::size_t rows,
                     std::size_t p0, std::size_t kc, std::uint32_t* pairs, gemm_scratch& scratch) = nullptr;
  /// Rounds `count` floats to y's element type into y's elements [offset, offset + count).
  void (*store_y)(const float* src, std::size_t count, void* y, std::size_t offset) = nullptr;
};

/// b(k, n) as stored by the caller ([k, n] or [n, k]) with its element type erased, packed block by
/// block as the engine needs it: `pack_f32` (and, for compute types whose values are bfloat16 values,
/// `pack_bf16`) is `pack_b<C, F>` for b's element type.
struct b_operand {
  const void* b = nullptr;
  b_layout layout = b_layout::k_n;
  void (*pack_f32)(const void* b, std::size_t k, std::size_t n, b_layout layout, std::size_t j0, std::size_t cols,
                   float* dst, float* row) = nullptr;
  void (*pack_bf16)(const void* b, std::size_t k, std::size_t n, b_layout layout, std::size_t j0, std::size_t cols,
                    std::uint16_t* dst, float* row) = nullptr;
};

/// Rows [i0, i0 + rows) × columns [j0, j0 + cols) of y: the part of a product one `gemm_block` computes.
struct gemm_tile_range {
  std::size_t i0 = 0;
  std::size_t rows = 0;
  std::size_t j0 = 0;
  std::size_t cols = 0;
};

/// Where `gemm_block` keeps its float32 accumulator tile for a float y that it stores (not
/// accumulates) over whole panels: in y itself, with y's row stride, or in the thread's scratch. When
/// several threads split one column block by rows, tiles in the thread's scratch measured faster
/// (docs/kernels.md, "Engine measurements").
enum class tile_home : std::uint8_t { in_y, scratch };

/// A kept packing of 1-byte e4m3 panels read as bfloat16 pair panels: each column block decoded
/// whole (all of k), exactly, when the engine comes to it (gemm_avx512bf16::e4m3_pair_panels), for
/// the VDPBF16PS macro-kernel. How the batch products of kept e4m3 weights run at the avx512bf16 level
/// with AVX512_VBMI: each weight is decoded once per product (a single row reads the bytes instead).
struct e4m3_pairs_view {
  packed_b_view kept;
};

/// Per-thread scratch of the engine, grown on demand and kept.
struct gemm_scratch {
  /// Cache-line aligned, as the kept panels are (cache_aligned.hpp): a panel's 64-byte loads each
  /// touch one line.
  template <class T>
  using buffer = cache_aligned_vector<T>;
  buffer<float> a_pack, a_row, b_pack, c_tile, row;
  /// The b block that the calling thread packs once for every thread working on its row blocks.
  buffer<float> shared_b;
  /// b blocks packed per call as bfloat16 pair panels (the avx512bf16 level), and a as pairs.
  buffer<std::uint16_t> b_pack16, shared_b16;
  buffer<std::uint32_t> a_pairs;
  /// The pairs of one row block of a over all of k (a kept b in several column blocks, one thread).
  buffer<std::uint32_t> a_pairs_all;
  static gemm_scratch& local() {
    static thread_local gemm_scratch scratch;
    return scratch;
  }
  template <class T>
  static T* sized(buffer<T>& v, std::size_t count) {
    if (v.size() < count) v.resize(count);
    return v.data();
  }
  /// Room for `count` panel elements of format F (f32 or bf16) in `floats` or `halves`.
  template <panel_format F>
  static panel_element_t<F>* sized_panels(buffer<float>& floats, buffer<std::uint16_t>& halves, std::size_t count) {
    static_assert(F == panel_format::f32 || F == panel_format::bf16, "b is packed per call as f32 or bf16 panels");
    if constexpr (F == panel_format::f32) {
      return sized(floats, count);
    } else {
      return sized(halves, count);
    }
  }
};

/// Columns of a b block for depth k: at most `elements` packed elements (1 Mi: 4 MiB of floats), whole
/// panels, at most gemm_nc.
[[nodiscard]] inline std::size_t gemm_block_columns(std::size_t k,
                                                    std::size_t elements = std::size_t{1} << 20) noexcept {
  const std::size_t budget = elements / std::max<std::size_t>(k, 1);
  return std::clamp<std::size_t>(budget / gemm_nr * gemm_nr, gemm_nr, gemm_nc);
}

/// Packs columns [j0, j0 + cols) of b, all of k, as panels of format F at `dst` (gemm_panels(cols) ·
/// panel_stride<F>(k) elements): from the caller's b (as floats, or as bfloat16 pairs for the
/// avx512bf16 level; through the conversion row of `scratch`), or decoded from a kept e4m3 packing.
template <class C, panel_format F>
void pack_block(const b_operand& src, std::size_t k, std::size_t n, std::size_t j0, std::size_t cols,
                panel_element_t<F>* dst, gemm_scratch& scratch) {
  float* row = gemm_scratch::sized(scratch.row, std::max({k, cols, gemm_kc, gemm_mc}));
  if constexpr (F == panel_format::f32) {
    src.pack_f32(src.b, k, n, src.layout, j0, cols, dst, row);
  } else {
    static_assert(F == panel_format::bf16, "b is packed per call as f32 or bf16 panels");
    src.pack_bf16(src.b, k, n, src.layout, j0, cols, dst, row);
  }
}
template <class C, panel_format F>
void pack_block(const e4m3_pairs_view& src, std::size_t k, std::size_t, std::size_t j0, std::size_t cols,
                panel_element_t<F>* dst, gemm_scratch&) {
  static_assert(F == panel_format::bf16, "kept e4m3 panels are decoded to bfloat16 pair panels");
#if MIXPREC_X86_DISPATCH
  ::mixprec::detail::gemm_avx512bf16::e4m3_pair_panels(
      gemm_panels(cols), k,
      static_cast<const std::uint8_t*>(src.kept.data) + (j0 / gemm_nr) * panel_stride<panel_format::e4m3>(k),
      panel_stride<panel_format::e4m3>(k), dst);
#else
  (void)src, (void)k, (void)j0, (void)cols, (void)dst;
#endif
}

/// The packed b panels for columns [j0, j0 + cols) (j0 a multiple of the block width): packed now into
/// the calling thread's scratch (pack_block), or found in a kept packing.
template <class C, panel_format F, class BSrc>
const panel_element_t<F>* b_block(const BSrc& src, std::size_t k, std::size_t n, std::size_t j0, std::size_t cols,
                                  gemm_scratch& scratch) {
  panel_element_t<F>* dst =
      gemm_scratch::sized_panels<F>(scratch.b_pack, scratch.b_pack16, gemm_panels(cols) * panel_stride<F>(k));
  pack_block<C, F>(src, k, n, j0, cols, dst, scratch);
  return dst;
}
template <class C, panel_format F>
const panel_element_t<F>* b_block(const packed_b_view& src, std::size_t k, std::size_t, std::size_t j0, std::size_t,
                                  gemm_scratch&) {
  return static_cast<const panel_element_t<F>*>(src.data) + (j0 / gemm_nr) * panel_stride<F>(k);
}

/// Whether products of compute type C with b panels of format F can run VDPBF16PS: a whose values
/// (rounded to C) are all bfloat16 values, against bfloat16 pair panels or 1-byte e4m3 panels.
template <class C, panel_format F>
inline constexpr bool dpbf16_panels =
    (F == panel_format::bf16 || F == panel_format::e4m3) && kept_panel_format<C>() == panel_format::bf16;

/// Whether they do at this level: from avx512bf16 on, and for e4m3 panels only where the CPU also has
/// AVX512_VBMI (their bytes are decoded to pairs by byte lookups, gemm_avx512bf16::row_e4m3_pairs).
template <class C, panel_format F>
[[nodiscard]] bool use_dpbf16(isa level) noexcept {
  if constexpr (dpbf16_panels<C, F>) {
    return level >= isa::avx512bf16 && (F != panel_format::e4m3 || ::mixprec::detail::cpu_has_avx512_vbmi());
  } else {
    return false;
  }
}

/// The VDPBF16PS pairs of a's rows [i0, i0 + rows) over the k-slice [p0, p0 + kc): ceil(rows / 6)
/// pair panels at `pairs` (pack_a_pairs_from's layout).
template <class C, class A>
void pack_pair_slice(const A* a, a_layout a_order, std::size_t m, std::size_t k, std::size_t i0, std::size_t rows,
                     std::size_t p0, std::size_t kc, std::uint32_t* pairs, gemm_scratch& scratch) {
  float* row = gemm_scratch::sized(scratch.row, std::max({k, gemm_kc, gemm_mc}));
  float* a_pack = gemm_scratch::sized(scratch.a_pack, gemm_mc * gemm_kc);
#if MIXPREC_X86_DISPATCH
  if constexpr (std::same_as<C, bfloat16> && (std::same_as<A, float> || std::same_as<A, bfloat16>)) {
    if (a_order == a_layout::m_k) {
      // Row-major float or bfloat16 a: rounded and paired on 16 lanes (the same words).
      ::mixprec::detail::gemm_avx512bf16::pack_a_pairs<A>(a + i0 * k + p0, k, rows, kc, pairs);
      return;
    }
    if constexpr (std::same_as<A, bfloat16>) {
      // A bfloat16 a stored [k, m]: the patterns paired as they are (the same words).
      ::mixprec::detail::gemm_avx512bf16::pack_a_pairs_km(a + p0 * m + i0, m, rows, kc, pairs);
      return;
    }
  }
#endif
  pack_a_pairs_from<C>(a, m, k, a_order, i0, rows, p0, kc, pairs, row, a_pack);
}

/// Where the pairs of the k-slice from p0 start when the pairs of a `rows`-row block are packed slice
/// after slice (pack_pair_slice for each slice in turn), in 32-bit words: also the words of all
/// slices before p0, so pair_slice_offset(rows, k + 1) words hold all of k (⌈k / 2⌉ pairs a row).
[[nodiscard]] inline std::size_t pair_slice_offset(std::size_t rows, std::size_t p0) noexcept {
  static_assert(gemm_kc % 2 == 0, "whole slices hold whole pairs");
  return (rows + gemm_mr - 1) / gemm_mr * gemm_mr * (p0 / 2);
}

/// One (jc, ic) block of the product `p`: the rows and columns of `range`, all of k, with b's panels
/// for those columns at `b_panels`, at `level`. `home` says where a float y's accumulator tile may live;
/// `packed_pairs`, when not null, holds the block's a rows already packed as VDPBF16PS pairs for all of k.
template <class C, panel_format F>
void gemm_block(const gemm_operands& p, const panel_element_t<F>* b_panels, gemm_tile_range range, isa level,
                gemm_scratch& scratch, tile_home home = tile_home::in_y,
                [[maybe_unused]] const std::uint32_t* packed_pairs = nullptr) {
  const void* const a = p.a;
  const std::size_t m = p.m, k = p.k, n = p.n;
  const std::size_t i0 = range.i0, rows = range.rows, j0 = range.j0, cols = range.cols;
  const bool accumulate = p.out == epilogue::accumulate;
  const std::size_t panels = gemm_panels(cols);
  const std::size_t stride = panel_stride<F>(k);
  // A float y written (not accumulated into) over whole panels is its own accumulator tile, with its
  // row stride: the same sums in the same order, without the copy from a scratch tile. Not when the
  // caller is one of several threads splitting one column block by rows (`tile_home::scratch`):
  // there tiles in y ran slower, for a reason not established (measured: docs/kernels.md, "Engine
  // measurements").
  bool in_place = false;
  if (p.y_float) in_place = home == tile_home::in_y && !accumulate && cols % gemm_nr == 0;
  const std::size_t ldc = in_place ? n : panels * gemm_nr;
  float* tile = nullptr;
  if (in_place) tile = static_cast<float*>(p.y) + i0 * n + j0;
  if (tile == nullptr) tile = gemm_scratch::sized(scratch.c_tile, rows * ldc);
  float* a_pack = gemm_scratch::sized(scratch.a_pack, gemm_mc * gemm_kc);
  float* row = gemm_scratch::sized(scratch.row, std::max({k, cols, gemm_kc, gemm_mc}));
  if (k == 0) {
    for (std::size_t ii = 0; ii < rows; ++ii) std::fill_n(tile + ii * ldc, panels * gemm_nr, 0.0f);
  }
#if MIXPREC_X86_DISPATCH
  namespace gemm_avx2 = ::mixprec::detail::gemm_avx2;
  namespace gemm_avx512 = ::mixprec::detail::gemm_avx512;
  namespace gemm_avx512bf16 = ::mixprec::detail::gemm_avx512bf16;
#endif
  // A single row (m = 1, a token's step) is packed for all of k, then each group of b panels is
  // streamed from start to end: the same k-slices and order as the tiles below, so the same bits.
  const bool one_row = MIXPREC_X86_DISPATCH && rows == 1 && k != 0 && level >= isa::avx2;
  if (one_row) {
#if MIXPREC_X86_DISPATCH
    float* a_row = gemm_scratch::sized(scratch.a_row, k * gemm_mr);
    p.pack_a(a, m, k, p.a_order, i0, 1, 0, k, a_row, row);
    if (use_dpbf16<C, F>(level)) {
      if constexpr (dpbf16_panels<C, F>) {
        // The row's pairs, consecutive: lane 0 of the one-row a panel (element p at a_row[p · gemm_mr]).
        const std::size_t row_pairs = (k + 1) / 2;
        std::uint32_t* pairs = gemm_scratch::sized(scratch.a_pairs, row_pairs);
        for (std::size_t t = 0; t < row_pairs; ++t) {
          pairs[t] = bf16_pair(a_row[2 * t * gemm_mr], 2 * t + 1 < k ? a_row[(2 * t + 1) * gemm_mr] : 0.0f);
        }
        if constexpr (F == panel_format::bf16) {
          gemm_avx512::single_row(panels, k, gemm_kc, gemm_avx512bf16::pair_row{pairs, b_panels, stride, tile});
        } else {
          gemm_avx512::single_row(panels, k, gemm_kc, gemm_avx512bf16::e4m3_row{pairs, b_panels, stride, tile});
        }
      }
    } else if (F == panel_format::e4m3 && scale_row_up(a_row, k)) {
      // float8 weights are decoded as weights / 2^8 and the row multiplied by 2^8 instead (one
      // multiplication per k step instead of one per 8 weights; gemm_avx2::micro_row4), when that
      // cannot overflow.
      if constexpr (F == panel_format::e4m3) {
        if (level >= isa::avx512) {
          gemm_avx512::single_row(panels, k, gemm_kc,
                                  gemm_avx512::fma_row<F, e4m3_read::scaled>{a_row, b_panels, stride, tile});
        } else {
          gemm_avx2::single_row<F, e4m3_read::scaled>(panels, k, gemm_kc, a_row, b_panels, stride, tile);
        }
      }
    } else if (F != panel_format::bf16 && level >= isa::avx512) {
      // 16 columns per FMA; the AVX2 row's bits (the same per-element order).
      if constexpr (F != panel_format::bf16) {
        gemm_avx512::single_row(panels, k, gemm_kc, gemm_avx512::fma_row<F>{a_row, b_panels, stride, tile});
      }
    } else {
      gemm_avx2::single_row<F>(panels, k, gemm_kc, a_row, b_panels, stride, tile);
    }
#endif
  } else {
    // The first k-slice stores its sums in the tile, each later one adds to it (epilogue::store and
    // epilogue::accumulate of the micro-kernels): one running sum per element, slice after slice.
    for (std::size_t p0 = 0; p0 < k; p0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, k - p0);
      const bool first = p0 == 0;
#if MIXPREC_X86_DISPATCH
      // Batches against kept e4m3 panels at the VDPBF16PS level arrive as decoded bfloat16 panels
      // (e4m3_pairs_view, blocked_gemm): only the single row above reads e4m3 panels there.
      if constexpr (F == panel_format::bf16 && dpbf16_panels<C, F>) {
        if (use_dpbf16<C, F>(level)) {
          const std::uint32_t* pairs = nullptr;
          if (packed_pairs != nullptr) {
            pairs = packed_pairs + pair_slice_offset(rows, p0);
          } else {
            std::uint32_t* own = gemm_scratch::sized(scratch.a_pairs, pair_slice_offset(rows, kc + 1));
            p.pack_pairs(a, p.a_order, m, k, i0, rows, p0, kc, own, scratch);
            pairs = own;
          }
          using tiles = gemm_avx512bf16::pair_tile;
          const auto block =
              first ? gemm_avx512::block<epilogue::store, tiles> : gemm_avx512::block<epilogue::accumulate, tiles>;
          block(rows, panels, tiles{kc, pairs, b_panels + p0 * gemm_nr, stride, tile, ldc});
          continue;
        }
      }
#endif
      p.pack_a(a, m, k, p.a_order, i0, rows, p0, kc, a_pack, row);
#if MIXPREC_X86_DISPATCH
      if (level >= isa::avx512) {
        using tiles = gemm_avx512::fma_tile<F, a_read::packed>;
        const auto block =
            first ? gemm_avx512::block<epilogue::store, tiles> : gemm_avx512::block<epilogue::accumulate, tiles>;
        block(rows, panels, tiles{kc, a_pack, 0, b_panels + p0 * gemm_nr, stride, tile, ldc});
        continue;
      }
      if (level >= isa::avx2) {
        const auto block = first ? gemm_avx2::block<F, epilogue::store> : gemm_avx2::block<F, epilogue::accumulate>;
        block(rows, panels, kc, a_pack, b_panels + p0 * gemm_nr, stride, tile, ldc);
        continue;
      }
#endif
      const auto block = first ? portable_block<F, epilogue::store> : portable_block<F, epilogue::accumulate>;
      block(rows, panels, kc, a_pack, b_panels + p0 * gemm_nr, stride, tile, ldc);
    }
  }
  for (std::size_t ii = 0; ii < rows; ++ii) {
    float* src = tile + ii * ldc;
    const std::size_t offset = (i0 + ii) * n + j0;  // of y's row ii in this block
    if (accumulate) {
      // Only a float y is accumulated into (gemm_operands_of checks it).
      float* dst = static_cast<float*>(p.y) + offset;
      for (std::size_t j = 0; j < cols; ++j) dst[j] += src[j];
    } else {
      if (p.out == epilogue::bias) {
        for (std::size_t j = 0; j < cols; ++j) src[j] += p.bias[j0 + j];
      }
      if (!in_place) p.store_y(src, cols, p.y, offset);
    }
  }
}

/// `blocked_gemm` for b panels of format F, every block at `level`.
template <class C, panel_format F, class BSrc>
void blocked_gemm_panels(const gemm_operands& p, const BSrc& b, isa level) {
  const std::size_t m = p.m, k = p.k, n = p.n;
  // A kept packing needs no b scratch: its blocks can be as wide as the accumulator tile allows. Blocks
  // packed per call hold at most 4 MiB of floats; decoded e4m3 blocks up to 8 MiB of bfloat16 pairs,
  // so that up to k = 4096 they are as wide as kept bfloat16 panels' (narrower blocks re-pack a for
  // each, which measured slower: docs/kernels.md, "Engine measurements").
  const std::size_t nc = std::same_as<BSrc, packed_b_view>     ? gemm_nc
                         : std::same_as<BSrc, e4m3_pairs_view> ? gemm_block_columns(k, std::size_t{1} << 22)
                                                               : gemm_block_columns(k);
  const std::size_t col_blocks = (n + nc - 1) / nc;
  const std::size_t row_blocks = (m + gemm_mc - 1) / gemm_mc;
  // Threads from 4 Mi flops each; a single-row product (one row against kept panels) is bound by the
  // stream of weights instead, and takes a second thread from 2 Mi weights (a thread start costs
  // about what streaming 1 Mi weights does).
  const std::size_t work =
      m == 1 && std::same_as<BSrc, packed_b_view> ? (n * k) >> 20 : (2 * m * n * std::max<std::size_t>(k, 1)) >> 23;
  const std::size_t threads = std::min(num_threads(), work);
  if (threads <= 1 || col_blocks * row_blocks < 2) {
    if constexpr (std::same_as<BSrc, packed_b_view> && dpbf16_panels<C, F>) {
      if (col_blocks > 1 && use_dpbf16<C, F>(level)) {
        // A kept b in several column blocks: each row block's a pairs are packed once, for all of k
        // (96 · ceil(k / 2) words of scratch), and used by every column block, instead of packed again
        // for each (rounding a to bfloat16 pairs per column block was measurable: docs/kernels.md,
        // "Engine measurements").
        // The same slices in the same order: the same bits.
        gemm_scratch& scratch = gemm_scratch::local();
        for (std::size_t i0 = 0; i0 < m; i0 += gemm_mc) {
          const std::size_t rows = std::min(gemm_mc, m - i0);
          std::uint32_t* pairs = nullptr;
          if (rows > 1 && k != 0) {  // a single row pairs its row itself
            pairs = gemm_scratch::sized(scratch.a_pairs_all, pair_slice_offset(rows, k + 1));
            for (std::size_t p0 = 0; p0 < k; p0 += gemm_kc) {
              p.pack_pairs(p.a, p.a_order, m, k, i0, rows, p0, std::min(gemm_kc, k - p0),
                           pairs + pair_slice_offset(rows, p0), scratch);
            }
          }
          for (std::size_t j0 = 0; j0 < n; j0 += nc) {
            const std::size_t cols = std::min(nc, n - j0);
            gemm_block<C, F>(p, b_block<C, F>(b, k, n, j0, cols, scratch), {i0, rows, j0, cols}, level, scratch,
                             tile_home::in_y, pairs);
          }
        }
        return;
      }
    }
    // One column block [j0, j0 + nc) after another: its b panels (packed now, or found in a kept
    // packing), then its row blocks.
    gemm_scratch& scratch = gemm_scratch::local();
    for (std::size_t j0 = 0; j0 < n; j0 += nc) {
      const std::size_t cols = std::min(nc, n - j0);
      const panel_element_t<F>* panels = b_block<C, F>(b, k, n, j0, cols, scratch);
      for (std::size_t i0 = 0; i0 < m; i0 += gemm_mc) {
        gemm_block<C, F>(p, panels, {i0, std::min(gemm_mc, m - i0), j0, cols}, level, scratch);
      }
    }
    return;
  }
  // Parallel: each task is one column block, as above, on the scratch of the thread that runs it;
  // with one column block, tasks are row blocks sharing the b block.
  if (col_blocks >= threads || row_blocks == 1) {
    internal::parallel_for(col_blocks, threads, [&](std::size_t task) {
      gemm_scratch& scratch = gemm_scratch::local();
      const std::size_t j0 = task * nc;
      const std::size_t cols = std::min(nc, n - j0);
      const panel_element_t<F>* panels = b_block<C, F>(b, k, n, j0, cols, scratch);
      for (std::size_t i0 = 0; i0 < m; i0 += gemm_mc) {
        gemm_block<C, F>(p, panels, {i0, std::min(gemm_mc, m - i0), j0, cols}, level, scratch);
      }
    });
    return;
  }
  for (std::size_t j0 = 0; j0 < n; j0 += nc) {
    const std::size_t cols = std::min(nc, n - j0);
    const panel_element_t<F>* panels = nullptr;
    if constexpr (std::same_as<BSrc, packed_b_view>) {
      panels = static_cast<const panel_element_t<F>*>(b.data) + (j0 / gemm_nr) * panel_stride<F>(k);
    } else {
      // The b block, packed once for every thread, in the calling thread's scratch (read by the
      // workers until parallel_for returns; the calling thread's gemm_block uses its other buffers).
      gemm_scratch& own = gemm_scratch::local();
      panel_element_t<F>* shared =
          gemm_scratch::sized_panels<F>(own.shared_b, own.shared_b16, gemm_panels(cols) * panel_stride<F>(k));
      pack_block<C, F>(b, k, n, j0, cols, shared, own);
      panels = shared;
    }
    internal::parallel_for(row_blocks, threads, [&](std::size_t task) {
      const std::size_t i0 = task * gemm_mc;
      gemm_block<C, F>(p, panels, {i0, std::min(gemm_mc, m - i0), j0, cols}, level, gemm_scratch::local(),
                       tile_home::scratch);
    });
  }
}

/// The functions behind gemm_operands and b_operand for a's, y's and b's element types.
template <class C, class A>
void pack_a_as(const void* a, std::size_t m, std::size_t k, a_layout layout, std::size_t i0, std::size_t rows,
               std::size_t p0, std::size_t kc, float* dst, float* row) {
  pack_a<C>(static_cast<const A*>(a), m, k, layout, i0, rows, p0, kc, dst, row);
}
template <class C, class A>
void pack_pairs_as(const void* a, a_layout layout, std::size_t m, std::size_t k, std::size_t i0, std::size_t rows,
                   std::size_t p0, std::size_t kc, std::uint32_t* pairs, gemm_scratch& scratch) {
  pack_pair_slice<C>(static_cast<const A*>(a), layout, m, k, i0, rows, p0, kc, pairs, scratch);
}
template <class Y>
void store_as(const float* src, std::size_t count, void* y, std::size_t offset) {
  internal::round_n<Y>(src, count, static_cast<Y*>(y) + offset);
}
template <class C, panel_format F, class S>
void pack_b_as(const void* b, std::size_t k, std::size_t n, b_layout layout, std::size_t j0, std::size_t cols,
               panel_element_t<F>* dst, float* row) {
  pack_b<C, F>(static_cast<const S*>(b), k, n, layout, j0, cols, dst, row);
}

/// `p` with the element types of a and y erased, for `blocked_gemm` in compute type C. An accumulating
/// product adds to a float y (the accumulator).
template <class C, class A, class Y>
[[nodiscard]] gemm_operands gemm_operands_of(const gemm_problem<A, Y>& p) noexcept {
  static_assert(!std::is_const_v<Y>, "the product writes y");
  assert(p.out != epilogue::accumulate || (std::same_as<Y, float>));
  gemm_operands ops{.a = p.a,
                    .a_order = p.a_order,
                    .y = p.y,
                    .m = p.m,
                    .k = p.k,
                    .n = p.n,
                    .out = p.out,
                    .bias = p.bias,
                    .y_float = std::same_as<Y, float>,
                    .pack_a = &pack_a_as<C, A>,
                    .store_y = &store_as<Y>};
  if constexpr (kept_panel_format<C>() == panel_format::bf16) ops.pack_pairs = &pack_pairs_as<C, A>;
  return ops;
}

/// b(k, n) at `b`, stored as `layout` says, with its element type erased, for `blocked_gemm` in
/// compute type C.
template <class C, class S>
[[nodiscard]] b_operand b_operand_of(const S* b, b_layout layout) noexcept {
  b_operand op{.b = b, .layout = layout, .pack_f32 = &pack_b_as<C, panel_format::f32, S>};
  if constexpr (kept_panel_format<C>() == panel_format::bf16) op.pack_bf16 = &pack_b_as<C, panel_format::bf16, S>;
  return op;
}

/// The product `p` (gemm_operands_of a gemm_problem: y = op(a) · b, with its epilogue) against b from
/// `b`: the caller's array (b_operand), a kept packing (packed_b_view) or kept e4m3 panels read as
/// pairs. The one place where a product's kernels are chosen: the panel format and the micro-kernels
/// of the level in use, read once. Only called when use_blocked_gemm<C>() is true, or with a kept
/// packing (any level). One instantiation per compute type and b source serves every element type of
/// a and y (the compiled library holds those of kernels/compiled.hpp).
template <class C, class BSrc>
void blocked_gemm(const gemm_operands& p, const BSrc& b) {
  if (p.m == 0 || p.n == 0) return;
  const internal::profile_scope region([&] {
    const char* b_source = "b:kept";
    if constexpr (std::same_as<BSrc, b_operand>) b_source = b.layout == b_layout::k_n ? "b:kn" : "b:nk";
    return internal::concat("gemm ", internal::short_type_name<C>(), " m", p.m, " k", p.k, " n", p.n,
                            p.a_order == a_layout::m_k ? " a:mk " : " a:km ", b_source,
                            p.out == epilogue::accumulate ? " +=" : (p.out == epilogue::bias ? " +bias" : ""));
  });
  // A bias epilogue names its bias (an empty one, n = 0, may be null and returned above).
  assert(p.out != epilogue::bias || p.bias != nullptr);
  const isa level = active_isa();  // read once: every block of this product runs the same kernel
  if constexpr (std::same_as<BSrc, packed_b_view>) {
    switch (b.format) {
      case panel_format::bf16: blocked_gemm_panels<C, panel_format::bf16>(p, b, level); return;
      case panel_format::f16: blocked_gemm_panels<C, panel_format::f16>(p, b, level); return;
      case panel_format::e4m3:
        if constexpr (dpbf16_panels<C, panel_format::e4m3>) {
          // A batch on VDPBF16PS: each column block decoded once to bfloat16 pairs, for every row
          // block (decoding a slice per row block was slower: docs/kernels.md, "Engine measurements").
          if (p.m > 1 && use_dpbf16<C, panel_format::e4m3>(level)) {
            blocked_gemm_panels<C, panel_format::bf16>(p, e4m3_pairs_view{b}, level);
            return;
          }
        }
        blocked_gemm_panels<C, panel_format::e4m3>(p, b, level);
        return;
      case panel_format::f32: break;
    }
  } else if constexpr (kept_panel_format<C>() == panel_format::bf16) {
    // b packed per call: as bfloat16 pairs where VDPBF16PS multiplies them, else as floats.
    if (use_dpbf16<C, panel_format::bf16>(level)) {
      blocked_gemm_panels<C, panel_format::bf16>(p, b, level);
      return;
    }
  }
  blocked_gemm_panels<C, panel_format::f32>(p, b, level);
}

}  // namespace mixprec::kernels::detail
