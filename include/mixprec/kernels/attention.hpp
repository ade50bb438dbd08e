/// \file
/// \brief `kernels::attention`: the tiled ("flash") online-softmax attention of projected queries against
/// a key/value cache, O(S) memory, in float32 (or float64) opmath — the operation beneath
/// `nn::attention`, as PyTorch's `scaled_dot_product_attention` is beneath `nn.MultiheadAttention`. The
/// layer keeps the projections, rotary embeddings, masks, the cache and the parameters; this header
/// keeps the tiles, their micro-kernels and their buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/detail/gemm_engine.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/kernels/threads.hpp"

namespace mixprec::kernels {

/// One attention call, described once: shapes, masks and options, resolved by the caller
/// (nn::attention_config's defaults filled in).
struct attention_problem {
  std::size_t batch = 0;        ///< batch rows
  std::size_t seq = 0;          ///< queries per row; query t sits at position `keys - seq + t`
  std::size_t n_heads = 0;      ///< query heads
  std::size_t n_kv_heads = 0;   ///< key/value heads: query head h reads kv head h / (n_heads / n_kv_heads)
  std::size_t head_dim = 0;     ///< features per head
  std::size_t keys = 0;         ///< positions the key/value source holds (at least `seq`)
  std::size_t capacity = 0;     ///< positions it can hold: the key tiles are sized by it, so that a decode
                                ///< loop's buffers stop growing after its first step
  std::size_t query_block = 0;  ///< queries per tile
  std::size_t key_block = 0;    ///< keys per tile
  bool causal = false;          ///< query t sees keys up to its own position only
  double scale = 0.0;           ///< the score scale (no default here: nn::attention_config's is 1/sqrt(head_dim))
  softmax_precision softmax = softmax_precision::opmath;  ///< scores and weights in opmath, or rounded to C
};

/// A key/value source of `attention` (nn::kv_cache): `keys(b, g)` and `values(b, g)`, contiguous
/// [keys, head_dim] ranges of C for batch row b and kv head g, and `validity(b)`, [keys] bytes (0 for a
/// padding key, which no query sees).
template <class KV, class C>
concept attention_kv_source = requires(const KV& kv, std::size_t i) {
  { kv.keys(i, i).data() } -> std::convertible_to<const C*>;
  { kv.values(i, i).data() } -> std::convertible_to<const C*>;
  { kv.validity(i) } -> std::convertible_to<std::span<const std::uint8_t>>;
};

/// Buffers of one `attention` call, in opmath `A` (nn::attention_workspace holds them between calls).
template <class A>
struct attention_scratch {
  std::span<A> queries;                  ///< [query_block, head_dim]
  std::span<A> accumulators;             ///< [query_block, head_dim]
  std::span<A> scores;                   ///< [query_block, key_block]
  std::span<A> keys;                     ///< [key_block, head_dim] when widened, else empty
  std::span<A> values;                   ///< [key_block, head_dim] when widened or the cache has padding, else empty
  std::span<online_softmax<A>> softmax;  ///< [query_block]
  /// The packed path's buffers (float opmath on AVX2, head_dim and key_block multiples of 16; else
  /// empty): a kv head's keys and values packed as GEMM b panels, a query block and a weight tile
  /// packed as a panels, and a row of conversion scratch.
  std::span<A> packed;
  /// The packed path's bfloat16 scores on VDPBF16PS (else empty): a kv head's keys as pair panels and
  /// a query block as pairs.
  std::span<std::uint16_t> key_pairs;
  std::span<std::uint32_t> query_pairs;
};

/// Element counts of the buffers of one `attention` call.
struct attention_scratch_sizes {
  std::size_t queries = 0;      ///< queries and accumulators, each
  std::size_t scores = 0;       ///< one score tile
  std::size_t keys = 0;         ///< a widened key tile (0 when not widened)
  std::size_t values = 0;       ///< a widened or zero-padded value tile (0 when neither)
  std::size_t softmax = 0;      ///< online softmax states
  std::size_t packed = 0;       ///< the packed path's buffers
  std::size_t key_pairs = 0;    ///< keys as bfloat16 pair panels (patterns)
  std::size_t query_pairs = 0;  ///< a query block as pairs (words)
};

/// The tiled online-softmax attention (FlashAttention's loop, Dao et al. 2022) of projected queries
/// against the keys and values of `kv` (nn::kv_cache), for `problem`: out[b, t, h, :] = softmax(scale ·
/// q·kᵀ, masked) · v, in opmath A = accumulator_t<C>, each output rounded once to C. Its buffers come from
/// `scratch(attention_scratch_sizes)`, called once after the checks. The caller (nn::attention,
/// `scaled_dot_product_attention`) has validated the problem against `kv`; here `queries` and `out`
/// must hold [batch, seq, n_heads, head_dim] values.
///
/// Two ways to compute a tile's products, chosen here once per call. Packed (float opmath on the AVX2
/// level, head_dim and key_block multiples of 16, at least 8 queries): per batch row and kv head, the
/// keys and values are converted once and packed as the blocked GEMM's b panels
/// (kernels/detail/gemm_pack.hpp; values of padding keys zeroed), shared by every query head of the
/// group, and S = Q·Kᵀ and O += P·V run on the GEMM micro-kernel with the query block and the weight
/// tile read in place (the AVX-512 micro-kernel on the avx512 level and above, else the AVX2 one: the
/// same bits); with bfloat16 queries and keys, a power-of-two scale and the avx512bf16 level, S = Q·Kᵀ
/// runs on VDPBF16PS instead, from the keys packed as bfloat16 pairs (the same bits for normal
/// operands). Tiles on the causal diagonal (where queries see different numbers of keys) do their P·V as
/// below, so that a masked key never meets a weight. Otherwise (decode, float64, the portable level)
/// Eigen's products on the tile, its keys and values widened per tile. Memory: the packed copies are
/// O(S) (2 × S × head_dim floats per call, or S × head_dim floats and as many bfloat16 key patterns),
/// never O(S²).
/// \throws std::invalid_argument when `queries` or `out` do not hold [batch, seq, n_heads, head_dim]
///         (the message starts "scaled_dot_product_attention:", the operation nn exposes), or when the
///         problem is inconsistent: n_kv_heads not dividing n_heads, a block of 0, seq > keys or
///         keys > capacity.
template <class C, class KV, class Scratch>
requires attention_kv_source<KV, C>
void attention(std::span<const C> queries, const KV& kv, const attention_problem& problem, std::span<C> out,
               Scratch&& scratch) {
  static_assert(std::same_as<C, float> || std::same_as<C, double> || small_float<C>,
                "scaled_dot_product_attention: the compute type must be real (float, double or a mixprec small "
                "float); attention over complex values is not supported.");
  using A = accumulator_t<C>;
  using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatMap = Eigen::Map<Mat>;
  using ConstMap = Eigen::Map<const Mat>;
  constexpr bool widen_kv = !std::same_as<C, A>;
  constexpr A neg_inf = -std::numeric_limits<A>::infinity();

  const attention_problem& c = problem;
  const std::size_t batch = c.batch;
  const std::size_t seq = c.seq;
  const std::size_t n_heads = c.n_heads;
  const std::size_t hd = c.head_dim;
  const std::size_t total = c.keys;
  const std::size_t expected = batch * seq * n_heads * hd;
  if (queries.size() != expected || out.size() != expected) {
    const std::string shape = internal::concat("[", batch, ", ", seq, ", ", n_heads, ", ", hd, "]");
    throw std::invalid_argument("scaled_dot_product_attention: queries have " + std::to_string(queries.size()) +
                                " and out " + std::to_string(out.size()) +
                                " elements but [batch, seq, n_heads, "
                                "head_dim] = " +
                                shape + " needs " + std::to_string(expected));
  }
  if (c.n_kv_heads == 0 || n_heads % c.n_kv_heads != 0 || c.query_block == 0 || c.key_block == 0 || seq > total ||
      c.capacity < total) {
    throw std::invalid_argument(internal::concat(
        "kernels::attention: the problem is inconsistent (n_heads ", n_heads, ", n_kv_heads ", c.n_kv_heads,
        ", query_block ", c.query_block, ", key_block ", c.key_block, ", seq ", seq, ", keys ", total, ", capacity ",
        c.capacity, "): n_kv_heads must divide n_heads, the blocks must be positive, and seq <= keys <= capacity"));
  }
  if (expected == 0) return;

  const std::size_t offset = total - seq;  // position of query 0
  const std::size_t group = n_heads / c.n_kv_heads;
  const std::size_t qb = std::min(c.query_block, seq);
  const std::size_t kb = std::min(c.key_block, total);
  const bool round_scores = c.softmax == softmax_precision::compute && widen_kv;
  const A scale = static_cast<A>(c.scale);
  const auto ehd = static_cast<Eigen::Index>(hd);

  // Value tiles are copied (padding rows zeroed) when widened, or when the cache holds padding keys.
  bool any_padding_key = false;
  for (std::size_t b = 0; b < batch && !any_padding_key; ++b) {
    const std::span<const std::uint8_t> valid = kv.validity(b);
    any_padding_key = std::find(valid.begin(), valid.end(), std::uint8_t{0}) != valid.end();
  }
  // Key tiles sized by the cache's capacity, not by the positions it holds now, so that a decode loop's
  // buffers stop growing after its first step; never larger than the cache (which exists in memory).
  const std::size_t key_tile = std::min(c.key_block, c.capacity);
  namespace kd = detail;
  bool packed = false;
  if constexpr (std::same_as<A, float>) {
    packed = kd::use_blocked_gemm<C>() && hd % kd::gemm_nr == 0 && c.key_block % kd::gemm_nr == 0 && qb >= 8;
  }
  // The packed path's micro-kernel: the AVX-512 one where the level allows (the same bits as AVX2's).
  const isa level = active_isa();  // read once: every tile runs on one level
  const bool wide = packed && level >= isa::avx512;
  // bfloat16 queries and keys: the scores on VDPBF16PS (twice the multiply-adds of an FMA per
  // instruction) where the scaled queries are still bfloat16 values (a power-of-two scale, as
  // 1/sqrt(64)). Products of bfloat16 values are exact and VDPBF16PS adds them in the FMA kernels'
  // order, so the scores keep their bits, except that subnormal queries, keys and scores (below
  // 2^-126) are read and written as zero (gemm_avx512.hpp).
  bool pair_scores = false;
  if constexpr (std::same_as<C, bfloat16> && std::same_as<A, float>) {
    int exponent = 0;
    pair_scores = wide && level >= isa::avx512bf16 && hd <= kd::gemm_kc &&
                  std::frexp(static_cast<float>(scale), &exponent) == 0.5F;
  }
  const std::size_t padded_keys = kd::gemm_panels(c.capacity) * kd::gemm_nr;  // keys packed, rounded up
  const std::size_t tile_width = kd::gemm_panels(key_tile) * kd::gemm_nr;     // a score row
  const std::size_t packed_keys_size = padded_keys * hd;
  const std::size_t pack_row_size = std::max(hd, padded_keys);
  attention_scratch_sizes sizes{.queries = qb * hd,
                                .scores = qb * (packed ? tile_width : key_tile),
                                .keys = widen_kv && !packed ? key_tile * hd : 0,  // the packed path reads packed keys
                                .values = widen_kv || any_padding_key ? key_tile * hd : 0,
                                .softmax = qb,
                                .packed = 0};
  if (packed) sizes.packed = (pair_scores ? 1 : 2) * packed_keys_size + pack_row_size;
  if (pair_scores) {
    sizes.key_pairs = padded_keys * hd;
    sizes.query_pairs = kd::pair_slice_offset(qb, hd + 1);
  }
  // Tasks are (batch row, kv head) pairs, independent of each other: on the packed path they are
  // spread over the kernels' threads (each with buffers of its own) when the product is large enough
  // (4·H·S²·D at least 4 Mi flops per thread, as the GEMM's rule). No bit depends on the thread count:
  // each output element is computed by one task, in one order.
  const std::size_t tasks = batch * c.n_kv_heads;
  std::size_t slots = 1;
  if (packed) {
    const double flops =
        4.0 * static_cast<double>(batch * n_heads * hd) * static_cast<double>(seq) * static_cast<double>(total);
    const auto by_size = static_cast<std::size_t>(std::min(flops / 4194304.0, 1024.0));
    slots = std::max<std::size_t>(1, std::min({num_threads(), tasks, by_size}));
  }
  attention_scratch_sizes all = sizes;
  for (std::size_t* n : {&all.queries, &all.scores, &all.keys, &all.values, &all.softmax, &all.packed, &all.key_pairs,
                         &all.query_pairs}) {
    *n *= slots;
  }
  const attention_scratch<A> all_buffers = scratch(all);

  using StridedConstMap = Eigen::Map<const Mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  const auto run = [&](std::size_t task, std::size_t slot) {
    const attention_scratch<A> buffers{all_buffers.queries.subspan(slot * sizes.queries, sizes.queries),
                                       all_buffers.accumulators.subspan(slot * sizes.queries, sizes.queries),
                                       all_buffers.scores.subspan(slot * sizes.scores, sizes.scores),
                                       all_buffers.keys.subspan(slot * sizes.keys, sizes.keys),
                                       all_buffers.values.subspan(slot * sizes.values, sizes.values),
                                       all_buffers.softmax.subspan(slot * sizes.softmax, sizes.softmax),
                                       all_buffers.packed.subspan(slot * sizes.packed, sizes.packed),
                                       all_buffers.key_pairs.subspan(slot * sizes.key_pairs, sizes.key_pairs),
                                       all_buffers.query_pairs.subspan(slot * sizes.query_pairs, sizes.query_pairs)};
    // Float key panels only where the scores are not taken from key pairs.
    A* const packed_keys = packed && !pair_scores ? buffers.packed.data() : nullptr;
    A* const packed_values = packed ? buffers.packed.data() + (pair_scores ? 0 : packed_keys_size) : nullptr;
    A* const pack_row = packed ? packed_values + packed_keys_size : nullptr;
    const std::size_t b = task / c.n_kv_heads;
    const std::size_t g = task % c.n_kv_heads;
    const std::span<const std::uint8_t> valid = kv.validity(b);
    {
      const C* keys = kv.keys(b, g).data();
      const C* values = kv.values(b, g).data();
#if MIXPREC_X86_DISPATCH
      if constexpr (std::same_as<A, float>) {
        if (packed) {
          // This kv head's keys as b(head_dim, keys) panels and its values as b(keys, head_dim) panels,
          // converted once for every query head of the group; the values of padding keys zeroed.
          if (pair_scores) {
            kd::pack_b<C, kd::panel_format::bf16>(keys, hd, total, b_layout::n_k, 0, total, buffers.key_pairs.data(),
                                                  pack_row);
          } else {
            kd::pack_b<C>(keys, hd, total, b_layout::n_k, 0, total, packed_keys, pack_row);
          }
          kd::pack_b<C>(values, total, hd, b_layout::k_n, 0, hd, packed_values, pack_row);
          if (any_padding_key) {
            for (std::size_t j = 0; j < total; ++j) {
              if (valid[j] != 0) continue;
              for (std::size_t q = 0; q < hd / kd::gemm_nr; ++q) {
                std::fill_n(packed_values + q * kd::gemm_nr * total + j * kd::gemm_nr, kd::gemm_nr, 0.0F);
              }
            }
          }
        }
      }
#endif
      for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
        for (std::size_t t0 = 0; t0 < seq; t0 += qb) {
          const std::size_t rows = std::min(qb, seq - t0);
          const auto erows = static_cast<Eigen::Index>(rows);
          A* q = buffers.queries.data();
          A* acc = buffers.accumulators.data();
          const C* q_src = queries.data() + ((b * seq + t0) * n_heads + h) * hd;  // row r at r * n_heads * hd
          for (std::size_t r = 0; r < rows; ++r) buffers.softmax[r].reset();
          // The block's queries widened to A; the packed path applies the score scale here (one
          // multiplication per query value instead of one per score; exact when it is a power of two,
          // as 1/sqrt(64) is).
          const A q_scale = packed ? scale : A{1};
          for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t i = 0; i < hd; ++i) {
              q[r * hd + i] = internal::widen(q_src[r * n_heads * hd + i]) * q_scale;
            }
          }
          std::fill_n(acc, rows * hd, A{0});
#if MIXPREC_X86_DISPATCH
          if constexpr (std::same_as<A, float>) {
            if (pair_scores) {
              ::mixprec::detail::gemm_avx512bf16::pack_a_pairs<float>(q, hd, rows, hd, buffers.query_pairs.data());
            }
          }
#endif
          // Keys a query of this block may see: all, or up to the last query's position.
          const std::size_t key_end = c.causal ? offset + t0 + rows : total;
          const std::size_t first = offset + t0;  // position of the block's first query
          for (std::size_t j0 = 0; j0 < key_end; j0 += kb) {
            const std::size_t cols = std::min(kb, key_end - j0);
            const auto ecols = static_cast<Eigen::Index>(cols);
            // Masked keys must contribute exactly nothing, even when their keys or values are Inf or NaN
            // (0 x NaN = NaN in P.V): a tile of padding only is skipped (its keys and values are never
            // read), padding rows of the value tile are zeroed, and keys after a query's position
            // (causal) are left out of its product.
            bool any_valid = false;
            bool any_padding = false;
            for (std::size_t j = 0; j < cols; ++j) (valid[j0 + j] != 0 ? any_valid : any_padding) = true;
            if (!any_valid) continue;  // all -Inf: the online softmax state would not change
            // Keys every query of the block may see (causal: up to the first query's position); the rest
            // of the tile (the diagonal) is done row by row, each query up to its own position.
            const std::size_t shared = !c.causal ? cols : (first >= j0 ? std::min(cols, first - j0 + 1) : 0);
            A* s = buffers.scores.data();
            std::size_t ld = cols;  // row stride of the score tile
            if (packed) {
#if MIXPREC_X86_DISPATCH
              if constexpr (std::same_as<A, float>) {
                ld = kd::gemm_panels(cols) * kd::gemm_nr;
                if (pair_scores) {
                  ::mixprec::detail::gemm_avx512bf16::block<epilogue::store>(
                      rows, kd::gemm_panels(cols), hd, buffers.query_pairs.data(), buffers.key_pairs.data() + j0 * hd,
                      kd::gemm_nr * hd, s, ld);
                } else if (wide) {
                  ::mixprec::detail::gemm_avx512::block_rows<kd::panel_format::f32, epilogue::store>(
                      rows, kd::gemm_panels(cols), hd, q, hd, packed_keys + j0 * hd, kd::gemm_nr * hd, s, ld);
                } else {
                  ::mixprec::detail::gemm_avx2::block_rows<kd::panel_format::f32, epilogue::store>(
                      rows, kd::gemm_panels(cols), hd, q, hd, packed_keys + j0 * hd, kd::gemm_nr * hd, s, ld);
                }
              }
#endif
            } else {
              const A* k_tile = nullptr;
              if constexpr (widen_kv) {
                internal::round_widen_n<C>(keys + j0 * hd, cols * hd, buffers.keys.data());
                k_tile = buffers.keys.data();
              } else {
                k_tile = keys + j0 * hd;
              }
              MatMap(s, erows, ecols).noalias() = ConstMap(q, erows, ehd) * ConstMap(k_tile, ecols, ehd).transpose();
            }
            for (std::size_t r = 0; r < rows; ++r) {
              const std::size_t position = first + r;
              A* row = s + r * ld;
              const A row_scale = packed ? A{1} : scale;  // the packed path scaled the queries
              if (!any_padding && (!c.causal || j0 + cols <= position + 1)) {
                // Every key of the tile is visible to this query.
                if (!packed) {
                  for (std::size_t j = 0; j < cols; ++j) row[j] *= row_scale;
                }
                if (round_scores) {
                  for (std::size_t j = 0; j < cols; ++j) row[j] = internal::round_widen<C>(row[j]);
                }
              } else {
                for (std::size_t j = 0; j < cols; ++j) {
                  const std::size_t key = j0 + j;
                  if ((c.causal && key > position) || valid[key] == 0) {
                    row[j] = neg_inf;
                  } else {
                    row[j] *= row_scale;
                    if (round_scores) row[j] = internal::round_widen<C>(row[j]);
                  }
                }
              }
              const A alpha = buffers.softmax[r].update(std::span<A>(row, cols));
              if (round_scores) {
                for (std::size_t j = 0; j < cols; ++j) row[j] = internal::round_widen<C>(row[j]);
              }
              if (alpha != A{1}) {
                for (std::size_t i = 0; i < hd; ++i) acc[r * hd + i] *= alpha;
              }
            }
            if (packed && shared == cols) {
#if MIXPREC_X86_DISPATCH
              if constexpr (std::same_as<A, float>) {
                // acc += P · V on the micro-kernel: the weights read in place, the values' k-slice
                // [j0, j0 + cols) of the packed panels.
                if (wide) {
                  ::mixprec::detail::gemm_avx512::block_rows<kd::panel_format::f32, epilogue::accumulate>(
                      rows, hd / kd::gemm_nr, cols, s, ld, packed_values + j0 * kd::gemm_nr, kd::gemm_nr * total, acc,
                      hd);
                } else {
                  ::mixprec::detail::gemm_avx2::block_rows<kd::panel_format::f32, epilogue::accumulate>(
                      rows, hd / kd::gemm_nr, cols, s, ld, packed_values + j0 * kd::gemm_nr, kd::gemm_nr * total, acc,
                      hd);
                }
              }
#endif
              continue;
            }
            // The value tile, widened to A and with padding rows zeroed when needed.
            const A* v_tile = nullptr;
            if constexpr (widen_kv) {
              internal::round_widen_n<C>(values + j0 * hd, cols * hd, buffers.values.data());
              v_tile = buffers.values.data();
            } else {
              v_tile = values + j0 * hd;
            }
            if (any_padding) {
              if constexpr (!widen_kv) std::copy_n(values + j0 * hd, cols * hd, buffers.values.data());
              A* v_copy = buffers.values.data();
              for (std::size_t j = 0; j < cols; ++j) {
                if (valid[j0 + j] == 0) std::fill_n(v_copy + j * hd, hd, A{0});
              }
              v_tile = v_copy;
            }
            const StridedConstMap s_tile(s, erows, ecols, Eigen::OuterStride<>(static_cast<Eigen::Index>(ld)));
            const ConstMap v_map(v_tile, ecols, ehd);
            if (shared > 0) {
              const auto eshared = static_cast<Eigen::Index>(shared);
              MatMap(acc, erows, ehd).noalias() += s_tile.leftCols(eshared) * v_map.topRows(eshared);
            }
            if (shared < cols) {
              for (std::size_t r = 0; r < rows; ++r) {
                const std::size_t position = first + r;
                const std::size_t visible = position >= j0 ? std::min(cols, position - j0 + 1) : 0;
                if (visible <= shared) continue;
                const auto from = static_cast<Eigen::Index>(shared);
                const auto count = static_cast<Eigen::Index>(visible - shared);
                MatMap(acc + r * hd, 1, ehd).noalias() +=
                    s_tile.row(static_cast<Eigen::Index>(r)).segment(from, count) * v_map.middleRows(from, count);
              }
            }
          }
          for (std::size_t r = 0; r < rows; ++r) {
            C* dst = out.data() + ((b * seq + t0 + r) * n_heads + h) * hd;
            for (std::size_t i = 0; i < hd; ++i) {
              dst[i] = internal::round_out<C>(buffers.softmax[r].normalize(acc[r * hd + i]));
            }
          }
        }
      }
    }
  };
  if (slots <= 1) {
    for (std::size_t task = 0; task < tasks; ++task) run(task, 0);
  } else {
    internal::parallel_for(slots, slots, [&](std::size_t slot) {
      for (std::size_t task = slot; task < tasks; task += slots) run(task, slot);
    });
  }
}

}  // namespace mixprec::kernels
