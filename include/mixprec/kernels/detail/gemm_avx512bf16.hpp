/// \file
/// \brief Private: the VDPBF16PS micro-kernels of the blocked GEMM for bfloat16 operands (AVX512_BF16,
/// compiled through a `target` attribute and called only when `mixprec::active_isa()` is
/// `isa::avx512bf16`; arch/detail/target.hpp explains the rules).
///
/// VDPBF16PS multiplies 16 pairs of bfloat16 values by 16 pairs and adds both products to 16 float
/// accumulators: twice the multiply-adds of a float32 FMA per instruction, from operands half the
/// size. b panels hold their rows in pairs (gemm_pack.hpp); a is packed in pairs too
/// (pack_a_pairs), so that one 32-bit broadcast gives a row's two factors.
///
/// What VDPBF16PS computes (Intel SDM, "VDPBF16PS"; the same on AMD Zen 4 and Zen 5): per lane,
/// `acc += a_high · b_high`, then `acc += a_low · b_low`, each addition rounded to nearest-even; the
/// products of bfloat16 values are exact in float32. With the pairs ordered (high = row p, low = row
/// p + 1) that is two steps of the FMA kernels' ascending-k order: for normal operands and sums the
/// bits equal the avx2 and avx512 levels' (tested). It differs in three ways, all stated in
/// docs/kernels.md: subnormal inputs are read as zero and subnormal results flushed to zero
/// (DAZ and FTZ, whatever MXCSR says), the rounding is to nearest-even whatever the rounding mode,
/// and no floating-point exception flag is raised.
///
/// a is packed in pairs here too (`pack_a_pairs` below: 16 lanes, from float or bfloat16 rows), the
/// words of kernels::detail::pack_a_pairs_from.
///
/// Shapes: `block`'s micro-tile is 12 rows × 32 columns (two 6-row a panels, two 16-column b panels)
/// in 24 zmm accumulators, two pair rows of b loaded and 12 pairs of a broadcast per two k steps;
/// `single_row` (one row: m = 1) takes four panels at once, one pair row each per two k steps.
///
/// 1-byte float8_e4m3fn panels (gemm_pack.hpp) are decoded to bfloat16 pair rows by byte lookups
/// (`row_e4m3_pairs`: VPERMI2B and VPERMT2B, so these functions also need AVX512_VBMI and are called
/// only where `mixprec::detail::cpu_has_avx512_vbmi()` is true): as they stream in the single row
/// (`single_row_e4m3`), and a column block at a time into pair panels for `block` (`e4m3_pair_panels`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/float_format.hpp"
#include "mixprec/kernels/detail/gemm_avx512.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"
#include "mixprec/kernels/detail/norm_avx512.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace gemm_avx512bf16 {

using kernels::epilogue;
using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;

/// 16 lanes of a bfloat16 pair row (32 patterns) as VDPBF16PS's operand.
MIXPREC_TARGET_AVX512BF16 inline __m512bh load_pairs(const std::uint16_t* b) noexcept {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(b));
}

/// c[height, W·16] (row stride ldc, height ≤ 6·A) = a · b over kc steps, stored or added to c per
/// `Out`, for A a pair panels (pack_a_pairs: 6 rows each, `a_stride` 32-bit elements apart; rows past
/// `height` are zeros, computed but not stored) against W bfloat16 pair panels (`panel_stride`
/// patterns apart).
template <int A, int W, epilogue Out, int Ahead = 0>
MIXPREC_TARGET_AVX512BF16 inline void micro_tile(std::size_t kc, const std::uint32_t* a, std::size_t a_stride,
                                                 const std::uint16_t* b, std::size_t panel_stride, float* c,
                                                 std::size_t ldc, std::size_t height,
                                                 const std::uint16_t* ahead = nullptr) noexcept {
  constexpr int rows = A * static_cast<int>(gemm_mr);
  __m512 acc[rows][W];
#pragma GCC unroll 12
  for (int r = 0; r < rows; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) acc[r][w] = _mm512_setzero_ps();
  }
  const std::size_t pairs = (kc + 1) / 2;
  for (std::size_t t = 0; t < pairs; ++t) {
    __m512bh bw[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) bw[w] = load_pairs(b + static_cast<std::size_t>(w) * panel_stride);
    if constexpr (Ahead > 0) gemm_avx512::prefetch_panel_rows<Ahead>(ahead + t * 2 * gemm_nr, panel_stride);
#pragma GCC unroll 12
    for (int r = 0; r < rows; ++r) {
      const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(
          static_cast<int>(a[static_cast<std::size_t>(r / 6) * a_stride + static_cast<std::size_t>(r % 6)])));
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) acc[r][w] = _mm512_dpbf16_ps(acc[r][w], ar, bw[w]);
    }
    a += gemm_mr;
    b += 2 * gemm_nr;
  }
  gemm_avx512::store_tile<rows, W, Out>(acc, c, ldc, height);
}

/// The VDPBF16PS tiles of one k-slice, for gemm_avx512::walk_tiles: a in pair panels (pack_a_pairs),
/// c stored or added to per `Out`.
template <epilogue Out>
struct dpbf16_tiles {
  std::size_t kc;
  const std::uint32_t* a;
  const std::uint16_t* b;
  std::size_t panel_stride;
  float* c;
  std::size_t ldc;

  template <int A, int W, int Ahead>
  MIXPREC_TARGET_AVX512BF16 void run(std::size_t i, std::size_t q, std::size_t height) const noexcept {
    const std::size_t a_stride = gemm_mr * ((kc + 1) / 2);  // from one pair panel to the next
    const std::uint16_t* bq = b + q * panel_stride;
    micro_tile<A, W, Out, Ahead>(kc, a + (i / gemm_mr) * a_stride, a_stride, bq, panel_stride,
                                 c + i * ldc + q * gemm_nr, ldc, height, Ahead > 0 ? bq + 2 * panel_stride : nullptr);
  }
};

/// The macro-kernel: c[rows, panels·16] (row stride ldc) = a_block · b over one k-slice of kc, stored
/// or added to c per `Out` (the contract of gemm_avx2::block). `a` holds ceil(rows / 6) pair panels
/// (pack_a_pairs) of 6 × ceil(kc / 2); `b` points at the slice's first pair row in the first panel,
/// panels `panel_stride` patterns apart.
template <epilogue Out>
MIXPREC_TARGET_AVX512BF16 inline void block(std::size_t rows, std::size_t panels, std::size_t kc,
                                            const std::uint32_t* a, const std::uint16_t* b, std::size_t panel_stride,
                                            float* c, std::size_t ldc) noexcept {
  gemm_avx512::walk_tiles(rows, panels, dpbf16_tiles<Out>{kc, a, b, panel_stride, c, ldc});
}

/// One row against P consecutive pair panels over `pairs` pair rows: c[0, P·16) = a · b, stored or
/// added to c per `Out`, with a's pairs consecutive (a[t]: a(2t) high, a(2t + 1) low).
template <int P, epilogue Out>
MIXPREC_TARGET_AVX512BF16 inline void micro_row(std::size_t pairs, const std::uint32_t* a, const std::uint16_t* b,
                                                std::size_t panel_stride, float* c) noexcept {
  __m512 acc[P];
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) acc[q] = _mm512_setzero_ps();
  for (std::size_t t = 0; t < pairs; ++t) {
    const auto ar = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[t])));
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      acc[q] = _mm512_dpbf16_ps(acc[q], ar, load_pairs(b + static_cast<std::size_t>(q) * panel_stride));
    }
    b += 2 * gemm_nr;
  }
  gemm_avx512::store_row<P, Out>(acc, c);
}

/// The micro-rows of single_row, for gemm_avx512::walk_single_row: a as the row's pairs.
struct pair_rows {
  const std::uint32_t* a;
  const std::uint16_t* b;
  std::size_t panel_stride;
  float* c;

  template <int P>
  MIXPREC_TARGET_AVX512BF16 void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    if (p0 == 0) {
      micro_row<P, epilogue::store>((depth + 1) / 2, a, b + q * panel_stride, panel_stride, c + q * gemm_nr);
    } else {
      micro_row<P, epilogue::accumulate>((depth + 1) / 2, a + p0 / 2, b + q * panel_stride + p0 * gemm_nr, panel_stride,
                                         c + q * gemm_nr);
    }
  }
};

/// One row against `panels` pair panels over all of k: c[0, panels·16) = a · b in k-slices of `kc`
/// (even), each group of four panels streamed from start to end (the per-element order of `block`,
/// so a row's bits do not depend on the rows computed with it). `a` holds the row's ceil(k / 2) pairs.
MIXPREC_TARGET_AVX512BF16 inline void single_row(std::size_t panels, std::size_t k, std::size_t kc,
                                                 const std::uint32_t* a, const std::uint16_t* b,
                                                 std::size_t panel_stride, float* c) noexcept {
  // Four weight streams: measured faster than eight (docs/kernels.md, "Engine measurements").
  gemm_avx512::walk_single_row<4>(panels, k, kc, pair_rows{a, b, panel_stride, c});
}

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

/// One row against P consecutive 1-byte e4m3 panels (P · 16 columns) over kc steps, on VDPBF16PS:
/// c[0, P·16) = a · b, stored or added to c per `Out`, with a's ceil(kc / 2) pairs consecutive (a[t]: a(2t)
/// high, a(2t + 1) low; a zero low half past an odd kc) and every value of a a bfloat16 value. Four
/// panel rows (one 64-byte load) at a time, the last one to three through a masked load; a pair row
/// wholly past kc is not multiplied (an added 0 · 0 would turn an accumulated -0 into +0). The same
/// products and additions as micro_row on bfloat16 pair panels.
template <int P, epilogue Out>
MIXPREC_TARGET_AVX512BF16_VBMI inline void micro_row_e4m3(std::size_t kc, const std::uint32_t* a, const std::uint8_t* b,
                                                          std::size_t panel_stride, float* c) noexcept {
  const e4m3_tables tables;
  __m512 acc[P];
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) acc[q] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < kc; p += 4) {
    const bool second_pair = kc - p > 2;
    const auto a0 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[p / 2])));
    const auto a1 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(second_pair ? static_cast<int>(a[p / 2 + 1]) : 0));
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      __m512bh first, second;
      load_e4m3_pairs(b + static_cast<std::size_t>(q) * panel_stride, p, kc, tables, first, second);
      acc[q] = _mm512_dpbf16_ps(acc[q], a0, first);
      if (second_pair) acc[q] = _mm512_dpbf16_ps(acc[q], a1, second);
    }
  }
  gemm_avx512::store_row<P, Out>(acc, c);
}

/// The micro-rows of single_row_e4m3, for gemm_avx512::walk_single_row: a as the row's pairs.
struct e4m3_rows {
  const std::uint32_t* a;
  const std::uint8_t* b;
  std::size_t panel_stride;
  float* c;

  template <int P>
  MIXPREC_TARGET_AVX512BF16_VBMI void run(std::size_t q, std::size_t p0, std::size_t depth) const noexcept {
    if (p0 == 0) {
      micro_row_e4m3<P, epilogue::store>(depth, a, b + q * panel_stride, panel_stride, c + q * gemm_nr);
    } else {
      micro_row_e4m3<P, epilogue::accumulate>(depth, a + p0 / 2, b + q * panel_stride + p0 * gemm_nr, panel_stride,
                                              c + q * gemm_nr);
    }
  }
};

/// The single-row kernel for 1-byte e4m3 panels (AVX512_VBMI beside the avx512bf16 level): one row
/// against `panels` panels over all of k, c[0, panels·16) = a · b in k-slices of `kc` (even), each
/// group of panels streamed from start to end (single_row's order, so the bits of the FMA levels'
/// single rows and micro-tiles, with VDPBF16PS's exceptions). `a` holds the row's ceil(k / 2) pairs, every value a
/// bfloat16 value (compute types whose values bfloat16 holds). Each weight is read as its one byte and
/// decoded exactly (row_e4m3_pairs), so the product streams k · n bytes.
MIXPREC_TARGET_AVX512BF16_VBMI inline void single_row_e4m3(std::size_t panels, std::size_t k, std::size_t kc,
                                                           const std::uint32_t* a, const std::uint8_t* b,
                                                           std::size_t panel_stride, float* c) noexcept {
  gemm_avx512::walk_single_row<4>(panels, k, kc, e4m3_rows{a, b, panel_stride, c});
}

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
/// the low word of each 32-bit lane (norm_avx512::bf16_patterns) — as 16 pair lanes: lane t's low
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
/// (VCVTNE2PS2BF16, or norm_avx512::bf16_patterns for 32 elements with a subnormal or a NaN among them:
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
        pairs = _mm512_permutex2var_epi16(norm_avx512::bf16_patterns(low), words, norm_avx512::bf16_patterns(high));
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

}  // namespace gemm_avx512bf16
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
