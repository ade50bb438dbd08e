/// \file
/// \brief Private: the packed operand formats of the blocked GEMM (kernels/detail/gemm_engine.hpp) and
/// the routines that fill them, converting while they pack.
///
/// Layouts (BLIS's, Van Zee & van de Geijn 2015; docs/kernels.md, "matmul"):
///  - **b panels**: columns are cut into panels of `gemm_nr` columns; panel `q` holds columns
///    [q·nr, q·nr + nr) as `k` rows of `nr` consecutive floats (zero past column n), and the panels
///    follow one another: element (p, j) sits at `(j / nr) · nr · k + p · nr + j % nr`.
///  - **a panels**: rows [i0, i0 + mc) of one k-slice [p0, p0 + kc) are cut into panels of `gemm_mr`
///    rows; each panel holds kc columns of `mr` consecutive floats (zero past the last row).
///
/// Every value is rounded once to the compute type C while it is packed, so a packed operand holds
/// exactly what a float32-accumulating C kernel multiplies. a panels hold floats (the VDPBF16PS
/// kernel pairs them, pack_a_pairs). b panels hold floats, or — for b kept across calls (a layer's
/// weights: `kernels::packed_b`), and for bfloat16 products at the avx512bf16 level — the compute
/// type's own 16-bit patterns (`panel_format`), half the memory and half the bytes a single-row
/// product streams; the FMA micro-kernels widen them exactly as they load them (bfloat16: 16-bit shifts of
/// a pair row, below; float16: F16C's VCVTPH2PS). Weights stored as float8 (float8_e4m3fn, no
/// NaN among them) keep their 1-byte patterns, a quarter of the float bytes (`panel_format::e4m3`):
/// the micro-kernel decodes them exactly (integer shifts, VCVTPH2PS, a multiplication by 2^8).
///
/// bfloat16 panels hold their rows in pairs, as VDPBF16PS reads them (AVX512_BF16; Intel SDM): rows
/// 2t and 2t + 1 of a panel are one *pair row* of 16 32-bit lanes, lane j holding b(2t, j) in its high
/// half and b(2t + 1, j) in its low half (a zero row pads an odd k). VDPBF16PS adds a lane's high
/// product first, then its low one, each rounded once (products of bfloat16 values are exact in
/// float32), so one instruction is two steps of the ascending-k order that the FMA kernels follow. The
/// FMA kernels widen a pair row exactly: row 2t is the high halves with the low bits cleared (their
/// floats), row 2t + 1 the low halves shifted up (`bf16_high_half`, `bf16_pattern_bits`).
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/numeric_limits.hpp"  // std::numeric_limits of the small floats, before any use
#include "mixprec/kernels/detail/cache_aligned.hpp"
#include "mixprec/kernels/layouts.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels::detail {

/// Rows of a register block (the micro-tile is gemm_mr × gemm_nr floats of accumulators).
inline constexpr std::size_t gemm_mr = 6;
/// Columns of a register block and of a b panel: two 8-float AVX2 vectors.
inline constexpr std::size_t gemm_nr = 16;
/// Depth of one k-slice: an a panel (kc × mr) and a b panel slice (kc × nr) stay in L1 together.
inline constexpr std::size_t gemm_kc = 256;
/// Rows of a packed a block (a multiple of gemm_mr): kc × mc floats, 96 KiB, stay in L2.
inline constexpr std::size_t gemm_mc = 96;
/// Columns of a block of b and of the float accumulator tile (a multiple of gemm_nr): the tile is
/// mc × nc floats (384 KiB); b's block is k × nc.
inline constexpr std::size_t gemm_nc = 1024;

static_assert(gemm_mc % gemm_mr == 0 && gemm_nc % gemm_nr == 0, "the blocks must hold whole register blocks");

/// The element format of b panels.
enum class panel_format : std::uint8_t {
  f32,   ///< float
  bf16,  ///< bfloat16 bit patterns (std::uint16_t), rows in pairs (above)
  f16,   ///< IEEE binary16 bit patterns (std::uint16_t)
  e4m3,  ///< float8_e4m3fn bit patterns (std::uint8_t), never NaN (OCP FP8 spec: 0x7F and 0xFF)
};

/// How a micro-kernel reads a: `packed` in panels of gemm_mr rows (pack_a below), or `in_place`, rows
/// contiguous in k one row stride apart (for small products whose rows are already in L1, such as
/// attention's query blocks and weight tiles). The same per-element order either way.
enum class a_read : std::uint8_t { packed, in_place };

/// How a single-row kernel reads 1-byte e4m3 panels: `exact`, each weight widened to its value, or
/// `scaled`, to its value / 2^8 (e4m3_panel_scale) for a row of a held times 2^8: the same products,
/// one multiplication fewer per weight.
enum class e4m3_read : std::uint8_t { exact, scaled };

/// Whether `Out` is a way a micro-kernel writes its float32 tile c: `epilogue::store` (c = a · b, a
/// tile's first k-slice) or `epilogue::accumulate` (c += a · b: the later slices, and sums into a
/// float32 y). The bias is added once, by the engine, after all of k.
template <epilogue Out>
inline constexpr bool tile_write = Out == epilogue::store || Out == epilogue::accumulate;

/// The 16-bit panel format that holds every value of compute type C exactly, or f32.
template <class C>
[[nodiscard]] constexpr panel_format kept_panel_format() noexcept {
  if constexpr (std::same_as<C, float16>) {
    return panel_format::f16;
  } else if constexpr (small_float<C>) {
    if constexpr (internal::values_exact_in<C, bfloat16>) return panel_format::bf16;  // bfloat16, float8/6/4
    return panel_format::f32;
  } else {
    return panel_format::f32;
  }
}

/// 2^8: float8_e4m3fn's patterns, read as float16 patterns (sign and magnitude bits moved into place),
/// are its values divided by this (the two formats' exponent biases differ by 8; the micro-kernel's
/// decoding of e4m3 panels, gemm_avx2.hpp). Derived from the formats' smallest normal exponents.
inline constexpr float e4m3_panel_scale = [] {
  float scale = 1.0f;
  for (int e = std::numeric_limits<float8_e4m3fn>::min_exponent; e > std::numeric_limits<float16>::min_exponent; --e) {
    scale *= 2.0f;
  }
  return scale;
}();
static_assert(e4m3_panel_scale == 256.0f);

/// Left shift that moves a sign-extended e4m3fn pattern's magnitude bits onto float16's (the
/// mantissa widths differ by 7), and the mask that keeps float16's sign and those bits (clearing the
/// sign's copy that lands in the exponent's top bit): the micro-kernels' decoding of e4m3 panels.
inline constexpr int e4m3_half_shift =
    std::numeric_limits<float16>::digits - std::numeric_limits<float8_e4m3fn>::digits;
inline constexpr std::uint16_t e4m3_half_mask =
    static_cast<std::uint16_t>((1U << (8 * sizeof(float16) - 1)) |  // float16's sign
                               (((1U << (8 * sizeof(float8_e4m3fn) - 1)) - 1U) << e4m3_half_shift));
static_assert(e4m3_half_shift == 7 && e4m3_half_mask == 0xBF80U);

/// Element type of a panel format.
template <panel_format F>
using panel_element_t = std::conditional_t<F == panel_format::f32, float,
                                           std::conditional_t<F == panel_format::e4m3, std::uint8_t, std::uint16_t>>;

/// Rows a panel of format F holds for depth k: k, or k rounded up to even for the paired bfloat16 rows.
template <panel_format F>
[[nodiscard]] constexpr std::size_t panel_rows(std::size_t k) noexcept {
  return F == panel_format::bf16 ? k + (k & 1U) : k;
}

/// Elements from one b panel to the next (panels of gemm_nr columns, depth k).
template <panel_format F>
[[nodiscard]] constexpr std::size_t panel_stride(std::size_t k) noexcept {
  return gemm_nr * panel_rows<F>(k);
}

/// Position of element (p, jj) (row p, column jj < gemm_nr) from the start of its panel. Row p starts
/// at p · gemm_nr for every format (a pair row of bfloat16 takes the room of two rows), so a k-slice
/// from an even p0 starts at p0 · gemm_nr.
template <panel_format F>
[[nodiscard]] constexpr std::size_t panel_index(std::size_t p, std::size_t jj) noexcept {
  if constexpr (F == panel_format::bf16) {
    // Lane jj of pair row p / 2: the high 16-bit half (index 2 jj + 1, little-endian) for even p.
    return (p & ~std::size_t{1}) * gemm_nr + 2 * jj + ((p & 1U) ^ 1U);
  } else {
    return p * gemm_nr + jj;
  }
}

/// Bits of a bfloat16 pattern: the low half of a VDPBF16PS pair lane, or a float's high half.
inline constexpr unsigned bf16_pattern_bits = 8 * sizeof(bfloat16);
/// A float's bfloat16 half (its high bits): the float itself when the value is a bfloat16 value.
inline constexpr std::uint32_t bf16_high_half = ~std::uint32_t{0} << bf16_pattern_bits;

/// One VDPBF16PS pair lane (the layout above) from two floats that hold bfloat16 values: `even` in the
/// high half, `odd` in the low half. Exact: the low halves of the floats are zero.
[[nodiscard]] inline std::uint32_t bf16_pair(float even, float odd) noexcept {
  return (std::bit_cast<std::uint32_t>(even) & bf16_high_half) |
         (std::bit_cast<std::uint32_t>(odd) >> bf16_pattern_bits);
}

/// A float that is exactly a value of the panel format, as a panel element.
template <panel_format F>
[[nodiscard]] inline panel_element_t<F> to_panel(float x) noexcept {
  if constexpr (F == panel_format::f32) {
    return x;
  } else if constexpr (F == panel_format::bf16) {
    return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> bf16_pattern_bits);  // exact: low half 0
  } else if constexpr (F == panel_format::e4m3) {
    return float8_e4m3fn(x).bits();  // exact: x is a float8_e4m3fn value
  } else {
    return std::bit_cast<std::uint16_t>(float16(x));  // exact: x is a float16 value
  }
}

/// A panel element widened exactly to float.
template <panel_format F>
[[nodiscard]] inline float from_panel(panel_element_t<F> e) noexcept {
  if constexpr (F == panel_format::f32) {
    return e;
  } else if constexpr (F == panel_format::bf16) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(e) << bf16_pattern_bits);
  } else if constexpr (F == panel_format::e4m3) {
    return static_cast<float>(float8_e4m3fn::from_bits(e));
  } else {
    return static_cast<float>(std::bit_cast<float16>(e));
  }
}

/// Number of b panels for n columns.
[[nodiscard]] constexpr std::size_t gemm_panels(std::size_t n) noexcept { return (n + gemm_nr - 1) / gemm_nr; }

/// Rows of a b panel of format F per cache line: one for float32 panels, 2 for float16, 4 for e4m3
/// (a bfloat16 pair row, two rows, is one line).
template <panel_format F>
inline constexpr std::size_t panel_rows_per_line = cache_line_bytes / (gemm_nr * sizeof(panel_element_t<F>));

/// Packs columns [j0, j0 + cols) of b(k, n) — stored [k, n] (`b_layout::k_n`) or [n, k]
/// (`b_layout::n_k`) — into `cols`-worth of b panels at `dst`, panel_stride<F>(k) elements each (j0 a multiple
/// of gemm_nr; the last panel is zero padded, and so is the pad row of paired bfloat16 rows). `row` is
/// scratch of at least max(k, cols) floats.
template <class C, panel_format F = panel_format::f32, class S>
void pack_b(const S* b, std::size_t k, std::size_t n, b_layout layout, std::size_t j0, std::size_t cols,
            panel_element_t<F>* dst, float* row) {
  const std::size_t panels = gemm_panels(cols);
  if (panel_rows<F>(k) != k) {
    for (std::size_t q = 0; q < panels; ++q) {
      for (std::size_t jj = 0; jj < gemm_nr; ++jj) dst[q * panel_stride<F>(k) + panel_index<F>(k, jj)] = 0;
    }
  }
  if (layout == b_layout::n_k) {
    // Column j of b(k, n) is row j of the [n, k] array. Per panel, a chunk of 64 k-steps of its 16
    // columns is converted into `tile` (16 × 64 floats, in L1), then written out as 64 panel rows.
    constexpr std::size_t chunk = 64;
    float tile[gemm_nr * chunk];
    for (std::size_t q = 0; q < panels; ++q) {
      panel_element_t<F>* panel = dst + q * panel_stride<F>(k);
      const std::size_t width = std::min(gemm_nr, cols - q * gemm_nr);
      for (std::size_t p0 = 0; p0 < k; p0 += chunk) {
        const std::size_t depth = std::min(chunk, k - p0);
        for (std::size_t jj = 0; jj < width; ++jj) {
          const S* col = b + (j0 + q * gemm_nr + jj) * k + p0;
          if constexpr (std::same_as<S, float> && std::same_as<C, float>) {
            std::memcpy(tile + jj * chunk, col, depth * sizeof(float));
          } else {
            internal::round_widen_n<C>(col, depth, tile + jj * chunk);
          }
        }
        for (std::size_t jj = width; jj < gemm_nr; ++jj) std::fill(tile + jj * chunk, tile + jj * chunk + depth, 0.0f);
        for (std::size_t p = 0; p < depth; ++p) {
          for (std::size_t jj = 0; jj < gemm_nr; ++jj) {
            panel[panel_index<F>(p0 + p, jj)] = to_panel<F>(tile[jj * chunk + p]);
          }
        }
      }
    }
  } else {
    // Row p of b(k, n) is contiguous.
    if constexpr (F == panel_format::bf16 && std::same_as<C, bfloat16> &&
                  (std::same_as<S, float> || std::same_as<S, bfloat16>)) {
      // bfloat16 pair panels from a [k, n] b: rows p and p + 1 as bfloat16 patterns (rounded as
      // round_through_bfloat16 rounds; a bfloat16 signalling NaN quieted, as its exact widening to float
      // is), interleaved 16 columns at a time into the pair row (panel_index): the patterns of the
      // conversion through float below, in loops of gemm_nr the compiler vectorises.
      constexpr auto magnitude = static_cast<std::uint16_t>(formats::bfloat16.magnitude_mask());
      constexpr auto infinity = static_cast<std::uint16_t>(formats::bfloat16.exponent_mask());
      constexpr auto quiet = static_cast<std::uint16_t>(formats::bfloat16.quiet_nan_bits() & ~infinity);
      const auto pattern = [](const S& x) -> std::uint16_t {
        if constexpr (std::same_as<S, float>) {
          return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(internal::round_through_bfloat16(x)) >>
                                            bf16_pattern_bits);
        } else {
          const std::uint16_t u = x.bits();
          return (u & magnitude) > infinity ? static_cast<std::uint16_t>(u | quiet) : u;
        }
      };
      for (std::size_t p = 0; p < k; p += 2) {
        const S* even = b + p * n + j0;
        const S* odd = p + 1 < k ? b + (p + 1) * n + j0 : nullptr;
        for (std::size_t q = 0; q < panels; ++q) {
          const std::size_t width = std::min(gemm_nr, cols - q * gemm_nr);
          std::uint16_t e[gemm_nr] = {};
          std::uint16_t o[gemm_nr] = {};
          for (std::size_t jj = 0; jj < width; ++jj) e[jj] = pattern(even[q * gemm_nr + jj]);
          if (odd != nullptr) {
            for (std::size_t jj = 0; jj < width; ++jj) o[jj] = pattern(odd[q * gemm_nr + jj]);
          }
          panel_element_t<F>* out = dst + q * panel_stride<F>(k) + p * gemm_nr;  // pair row p / 2
          for (std::size_t jj = 0; jj < gemm_nr; ++jj) {
            out[2 * jj] = o[jj];      // row p + 1: the low half of lane jj
            out[2 * jj + 1] = e[jj];  // row p: the high half
          }
        }
      }
    } else if constexpr (F == panel_format::f16 && std::same_as<C, float16> &&
                         (std::same_as<S, float> || std::same_as<S, double>)) {
      // float16 panels from a [k, n] b: each row rounded to float16 in bulk (mixprec::convert, F16C where
      // the CPU has it) straight to the patterns the panels hold, then cut into panel rows: the values
      // of the conversion through float below, without a scalar conversion per element.
      constexpr std::size_t block = 512;  // a multiple of gemm_nr
      float16 rounded[block];
      for (std::size_t p = 0; p < k; ++p) {
        const S* src = b + p * n + j0;
        for (std::size_t c0 = 0; c0 < cols; c0 += block) {
          const std::size_t w = std::min(block, cols - c0);
          internal::round_n<float16>(src + c0, w, rounded);
          for (std::size_t q = c0 / gemm_nr; q < gemm_panels(c0 + w); ++q) {
            panel_element_t<F>* out = dst + q * panel_stride<F>(k) + p * gemm_nr;
            const std::size_t width = std::min(gemm_nr, cols - q * gemm_nr);
            for (std::size_t jj = 0; jj < width; ++jj) out[jj] = rounded[q * gemm_nr + jj - c0].bits();
            std::fill(out + width, out + gemm_nr, panel_element_t<F>{0});
          }
        }
      }
    } else {
      // Convert the block's part of row p, then cut it into panel rows.
      for (std::size_t p = 0; p < k; ++p) {
        const float* src = row;
        if constexpr (std::same_as<S, float> && std::same_as<C, float>) {
          src = b + p * n + j0;
        } else {
          internal::round_widen_n<C>(b + p * n + j0, cols, row);
        }
        for (std::size_t q = 0; q < panels; ++q) {
          panel_element_t<F>* panel = dst + q * panel_stride<F>(k);
          const std::size_t width = std::min(gemm_nr, cols - q * gemm_nr);
          if constexpr (F == panel_format::f32) {
            float* out = panel + p * gemm_nr;
            std::memcpy(out, src + q * gemm_nr, width * sizeof(float));
            std::fill(out + width, out + gemm_nr, 0.0f);
          } else {
            for (std::size_t jj = 0; jj < gemm_nr; ++jj) {
              panel[panel_index<F>(p, jj)] = jj < width ? to_panel<F>(src[q * gemm_nr + jj]) : panel_element_t<F>{0};
            }
          }
        }
      }
    }
  }
}

/// Packs rows [i0, i0 + rows) and columns [p0, p0 + kc) of a(m, k) — stored [m, k] (`a_layout::m_k`) or
/// [k, m] (`a_layout::k_m`) — into a panels at `dst` (kc × gemm_mr floats each, zero padded past
/// the last row). `row` is scratch of at least max(kc, rows) floats.
template <class C, class S>
void pack_a(const S* a, std::size_t m, std::size_t k, a_layout layout, std::size_t i0, std::size_t rows, std::size_t p0,
            std::size_t kc, float* dst, float* row) {
  const std::size_t panels = (rows + gemm_mr - 1) / gemm_mr;
  if (layout == a_layout::m_k) {
    for (std::size_t r = 0; r < panels; ++r) {
      float* panel = dst + r * gemm_mr * kc;
      const std::size_t height = std::min(gemm_mr, rows - r * gemm_mr);
      for (std::size_t ii = 0; ii < height; ++ii) {
        const S* src_row = a + (i0 + r * gemm_mr + ii) * k + p0;
        const float* src = row;
        if constexpr (std::same_as<S, float> && std::same_as<C, float>) {
          src = src_row;
        } else {
          internal::round_widen_n<C>(src_row, kc, row);
        }
        for (std::size_t p = 0; p < kc; ++p) panel[p * gemm_mr + ii] = src[p];
      }
      for (std::size_t ii = height; ii < gemm_mr; ++ii) {
        for (std::size_t p = 0; p < kc; ++p) panel[p * gemm_mr + ii] = 0.0f;
      }
    }
  } else {
    // a is [k, m]: row p of the array holds a(i, p) for every i, contiguous in i.
    for (std::size_t p = 0; p < kc; ++p) {
      const S* src_row = a + (p0 + p) * m + i0;
      const float* src = row;
      if constexpr (std::same_as<S, float> && std::same_as<C, float>) {
        src = src_row;
      } else {
        internal::round_widen_n<C>(src_row, rows, row);
      }
      for (std::size_t r = 0; r < panels; ++r) {
        float* out = dst + r * gemm_mr * kc + p * gemm_mr;
        const std::size_t height = std::min(gemm_mr, rows - r * gemm_mr);
        std::memcpy(out, src + r * gemm_mr, height * sizeof(float));
        std::fill(out + height, out + gemm_mr, 0.0f);
      }
    }
  }
}

/// pack_a straight into VDPBF16PS pairs (the layout of pack_a_pairs below), for a compute type C whose
/// values are all bfloat16 values: rows [i0, i0 + rows) and columns [p0, p0 + kc) of a(m, k), stored
/// [m, k] (`a_layout::m_k`) or [k, m]. One pass per row of a [m, k] instead of pack_a's float panels
/// and a second pass over them. `row` is scratch of at least max(kc, rows) floats; `floats` of
/// gemm_mr · max(kc + 1, ceil(rows / gemm_mr) · kc) floats.
template <class C, class S>
void pack_a_pairs_from(const S* a, std::size_t m, std::size_t k, a_layout layout, std::size_t i0, std::size_t rows,
                       std::size_t p0, std::size_t kc, std::uint32_t* dst, float* row, float* floats);

/// The a panels of one k-slice (`panels` panels of kc × gemm_mr floats, as pack_a writes them, every
/// value a bfloat16 value) as VDPBF16PS pairs: panel r's 32-bit element (t, ii), at
/// dst[r · gemm_mr · ceil(kc / 2) + t · gemm_mr + ii], holds a(ii, 2t) in its high half and
/// a(ii, 2t + 1) (zero past kc) in its low half, the order of the b panels' pair rows. Exact: the
/// low halves of the floats are zero.
inline void pack_a_pairs(const float* a, std::size_t panels, std::size_t kc, std::uint32_t* dst) noexcept {
  const std::size_t pairs = (kc + 1) / 2;
  for (std::size_t r = 0; r < panels; ++r) {
    const float* panel = a + r * gemm_mr * kc;
    std::uint32_t* out = dst + r * gemm_mr * pairs;
    for (std::size_t t = 0; t < pairs; ++t) {
      for (std::size_t ii = 0; ii < gemm_mr; ++ii) {
        out[t * gemm_mr + ii] =
            bf16_pair(panel[2 * t * gemm_mr + ii], 2 * t + 1 < kc ? panel[(2 * t + 1) * gemm_mr + ii] : 0.0f);
      }
    }
  }
}

template <class C, class S>
void pack_a_pairs_from(const S* a, std::size_t m, std::size_t k, a_layout layout, std::size_t i0, std::size_t rows,
                       std::size_t p0, std::size_t kc, std::uint32_t* dst, float* row, float* floats) {
  static_assert(internal::values_exact_in<C, bfloat16>, "VDPBF16PS pairs hold bfloat16 values");
  const std::size_t panels = (rows + gemm_mr - 1) / gemm_mr;
  if (layout == a_layout::k_m) {
    pack_a<C>(a, m, k, layout, i0, rows, p0, kc, floats, row);
    pack_a_pairs(floats, panels, kc, dst);
    return;
  }
  // Per panel: its rows rounded to C (as floats, one vectorised pass each) into gemm_mr row buffers
  // of kc + 1 floats (a zero past kc pads the last pair), then the pairs written in panel order.
  const std::size_t pairs = (kc + 1) / 2;
  const std::size_t width = 2 * pairs;
  for (std::size_t r = 0; r < panels; ++r) {
    const std::size_t height = std::min(gemm_mr, rows - r * gemm_mr);
    for (std::size_t ii = 0; ii < gemm_mr; ++ii) {
      float* buffer = floats + ii * width;
      if (ii < height) {
        internal::round_widen_n<C>(a + (i0 + r * gemm_mr + ii) * k + p0, kc, buffer);
        if (kc < width) buffer[kc] = 0.0f;
      } else {
        std::fill(buffer, buffer + width, 0.0f);
      }
    }
    std::uint32_t* out = dst + r * gemm_mr * pairs;
    for (std::size_t t = 0; t < pairs; ++t) {
      for (std::size_t ii = 0; ii < gemm_mr; ++ii) {
        const float* buffer = floats + ii * width;
        out[t * gemm_mr + ii] = bf16_pair(buffer[2 * t], buffer[2 * t + 1]);
      }
    }
  }
}

}  // namespace mixprec::kernels::detail
