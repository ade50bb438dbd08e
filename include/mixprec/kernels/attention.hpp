/// \file
/// \brief `kernels::attention`: the tiled ("flash") online-softmax attention of projected queries against
/// a key/value cache, O(S) memory, in float32 (or float64) opmath, and its backward for training
/// (`kernels::attention_backward`, `kernels::attention_log_sum_exp`) — the operations beneath
/// `nn::attention`, as PyTorch's `scaled_dot_product_attention` is beneath `nn.MultiheadAttention`. The
/// layer keeps the projections, rotary embeddings, masks, the cache, the parameters and the gradients'
/// tree; this header keeps the loops over heads and tiles, their micro-kernels and their buffers.
///
/// **Tiling** (forward): each (batch row, head, block of `query_block` queries) walks the keys in tiles
/// of `key_block`, keeping per query the running max and sum of `online_softmax` and rescaling its
/// opmath accumulator (FlashAttention's loop; Dao et al. 2022). The scratch is `query_block * (key_block
/// + 2 head_dim + 2) + 2 key_block head_dim` opmath values whatever the sequence length (the key/value
/// tiles only when C is not A, the value tile also when C is A and a tile holds padding; the packed
/// path adds one kv head's keys and values, O(S)). Tiles start at key positions that are multiples of
/// `key_block`, so a query sees its keys in the same tiles whether it comes in a long prompt or alone.
///
/// **Masks**: a query that sees no key outputs zeros, never NaN (the convention of `online_softmax`).
/// A masked key contributes exactly nothing, whatever its key and value hold (Inf and NaN included): a
/// tile of padding only is skipped, padding rows of the value tile are zeroed before P·V, and under
/// `causal` each query's P·V stops at its own position (0 × NaN would otherwise be NaN); the backward
/// reads padding keys and values as zero and gives them exactly zero gradients.
///
/// **Score bias and cross-attention**: every operation takes an additive score bias
/// (kernels/score_bias.hpp: dense, or relative rows for T5's relative position bias and ALiBi, O(S) per
/// head), and the backward its gradient. Without a causal mask or a relative bias the queries need no
/// positions among the keys: cross-attention, with its own key count.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/gemm_engine.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/score_bias.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/kernels/threads.hpp"

namespace mixprec::kernels {

/// One attention call, described once: shapes, masks and options, resolved by the caller
/// (nn::attention_config's defaults filled in).
struct attention_problem {
  std::size_t batch = 0;        ///< batch rows
  std::size_t seq = 0;          ///< queries per row; query t sits at position `keys - seq + t` (seq <= keys),
                                ///< or has no position (cross-attention: seq > keys, no causal mask)
  std::size_t n_heads = 0;      ///< query heads
  std::size_t n_kv_heads = 0;   ///< key/value heads: query head h reads kv head h / (n_heads / n_kv_heads)
  std::size_t head_dim = 0;     ///< features per head
  std::size_t keys = 0;         ///< positions the key/value source holds (at least `seq` under `causal`)
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

/// Buffers of `attention` kept between calls (nn::attention_workspace), in opmath `A`: pass one as
/// `attention`'s scratch and it grows them to what the call asks for, so that a decode loop stops
/// allocating after its first step. The contents are meaningless between calls.
template <std::floating_point A>
struct attention_buffers {
  std::vector<A> queries;       ///< [query_block, head_dim] one block of queries, widened to A
  std::vector<A> accumulators;  ///< [query_block, head_dim] unnormalised outputs
  std::vector<A> scores;        ///< [query_block, key_block] one tile of scores, then weights
  std::vector<A> keys;          ///< [key_block, head_dim] one tile of keys widened to A (empty if C is A)
  /// [key_block, head_dim] one tile of values widened to A, padding rows zeroed (if C is A: empty until a
  /// tile holds padding, then a copy of that tile with its padding rows zeroed)
  std::vector<A> values;
  std::vector<online_softmax<A>> softmax;  ///< [query_block] running max and sum per query
  /// The packed path's copies (see `attention`): one kv head's keys and values as GEMM panels,
  /// 2 × capacity × head_dim values (O(S); the values only, 1 ×, when the keys are kept as
  /// `key_pairs`), and a query block and a weight tile packed.
  std::vector<A> packed;
  /// bfloat16 scores on VDPBF16PS: one kv head's keys as bfloat16 pair panels (capacity × head_dim
  /// patterns) ...
  std::vector<std::uint16_t> key_pairs;
  /// ... and a query block as pairs (query_block × head_dim / 2 words, rounded up to whole 6-row panels).
  std::vector<std::uint32_t> query_pairs;

  /// Number of opmath values the buffers hold (their capacities; an online_softmax counts 2), with
  /// the pairs counted by their bytes.
  [[nodiscard]] std::size_t elements() const noexcept {
    return queries.capacity() + accumulators.capacity() + scores.capacity() + keys.capacity() + values.capacity() +
           2 * softmax.capacity() + packed.capacity() +
           (key_pairs.capacity() * sizeof(std::uint16_t) + query_pairs.capacity() * sizeof(std::uint32_t)) / sizeof(A);
  }

  /// The scratch of one `attention` call: the buffers resized to `n` (those a call does not use, sized
  /// 0 in `n`, keep what they hold).
  attention_scratch<A> operator()(const attention_scratch_sizes& n) {
    queries.resize(n.queries);
    accumulators.resize(n.queries);
    scores.resize(n.scores);
    if (n.keys != 0) keys.resize(n.keys);
    if (n.values != 0) values.resize(n.values);
    softmax.resize(n.softmax);
    if (n.packed != 0) packed.resize(n.packed);
    if (n.key_pairs != 0) key_pairs.resize(n.key_pairs);
    if (n.query_pairs != 0) query_pairs.resize(n.query_pairs);
    return {queries, accumulators, scores, keys, values, softmax, packed, key_pairs, query_pairs};
  }
};

namespace detail {
/// max + log(sum) of a finished online softmax: its scores' log-sum-exp; −Inf where it saw no key
/// (sum 0), and where a score was NaN or +Inf (the backward then gives that query's keys nothing).
template <class A>
A log_sum_exp_of(const online_softmax<A>& state) {
  const A mx = state.max();
  const A l = state.sum();
  return l > A(0) && !std::isinf(mx) ? mx + std::log(l) : -std::numeric_limits<A>::infinity();
}
}  // namespace detail

/// The tiled online-softmax attention (FlashAttention's loop, Dao et al. 2022) of projected queries
/// against the keys and values of `kv` (nn::kv_cache), for `problem`: out[b, t, h, :] = softmax(scale ·
/// q·kᵀ + bias, masked) · v, in opmath A = accumulator_t<C>, each output rounded once to C. The score
/// bias (kernels/score_bias.hpp; empty: none, the same bits as without) is read per tile: a query's row
/// of a dense bias, or its slice of a relative one; a masked key stays masked whatever its bias. Its buffers come from
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
/// operands). A tile on the causal diagonal (where queries see different numbers of keys) does its P·V
/// as one product too, the weights of masked keys exactly 0, when every value a query must not see there
/// is finite (each row then has the bits of its visible keys alone), else row by row over each query's
/// visible keys, so that a masked Inf or NaN never meets a weight. Otherwise (decode, float64, the portable level)
/// Eigen's products on the tile, its keys and values widened per tile. Memory: the packed copies are
/// O(S) (2 × S × head_dim floats per call, or S × head_dim floats and as many bfloat16 key patterns),
/// never O(S²).
///
/// `log_sum_exp`, when not empty, receives each query's log-sum-exp of its visible scores,
/// lse = max + log(sum) of its online softmax after the last tile, [batch, n_heads, seq] (−Inf for a
/// query that sees no key): the statistics FlashAttention-2's forward saves for its backward (Dao 2023,
/// Algorithm 1's L), which `attention_backward` reads. With `softmax_precision::compute` they are those
/// of the rounded scores.
/// \throws std::invalid_argument when `queries` or `out` do not hold [batch, seq, n_heads, head_dim]
///         (the message starts "scaled_dot_product_attention:", the operation nn exposes), when
///         `log_sum_exp` is neither empty nor [batch, n_heads, seq], when the problem is inconsistent:
///         n_kv_heads not dividing n_heads, a block of 0, keys > capacity, or seq > keys under `causal`,
///         or when the bias does not fit the call (`check_score_bias`: its size, its broadcast counts, a
///         relative bias with seq > keys).
template <class C, class KV, class Scratch>
requires attention_kv_source<KV, C>
void attention(std::span<const C> queries, const KV& kv, const attention_problem& problem,
               const score_bias<accumulator_t<C>>& bias, std::span<C> out, std::span<accumulator_t<C>> log_sum_exp,
               Scratch&& scratch) {
  const internal::profile_scope region("kernels::attention");
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
  if (c.n_kv_heads == 0 || n_heads % c.n_kv_heads != 0 || c.query_block == 0 || c.key_block == 0 ||
      (c.causal && seq > total) || c.capacity < total) {
    throw std::invalid_argument(internal::concat(
        "kernels::attention: the problem is inconsistent (n_heads ", n_heads, ", n_kv_heads ", c.n_kv_heads,
        ", query_block ", c.query_block, ", key_block ", c.key_block, ", seq ", seq, ", keys ", total, ", capacity ",
        c.capacity, "): n_kv_heads must divide n_heads, the blocks must be positive, keys <= capacity, and under a ",
        "causal mask seq <= keys"));
  }
  // Queries have positions among the keys (query t at keys - seq + t) when seq <= keys; cross-attention
  // may have more queries than keys, and then no causal mask and no relative bias.
  const score_bias_layout bias_layout = check_score_bias("kernels::attention", "the score bias", bias.layout,
                                                         bias.values.size(), batch, n_heads, seq, total, seq <= total);
  const A* const bias_values = bias.values.data();
  const bool biased = !bias.empty();
  if (!log_sum_exp.empty() && log_sum_exp.size() != batch * n_heads * seq) {
    throw std::invalid_argument(internal::concat("kernels::attention: log_sum_exp has ", log_sum_exp.size(),
                                                 " elements but [batch, n_heads, seq] = [", batch, ", ", n_heads, ", ",
                                                 seq, "] needs ", batch * n_heads * seq, " (or none)"));
  }
  if (expected == 0) return;

  const std::size_t offset = seq <= total ? total - seq : 0;  // position of query 0
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
    bool values_finite = false;  // this kv head's packed values (padding zeroed) hold no Inf or NaN
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
          // Whether a causal diagonal tile may do its P·V in one product (below): every packed value finite.
          values_finite =
              std::all_of(packed_values, packed_values + total * hd, [](float v) { return std::isfinite(v); });
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
            // Widened exactly in bulk (F16C for float16), then scaled: the same values.
            internal::round_widen_n<C>(q_src + r * n_heads * hd, hd, q + r * hd);
            for (std::size_t i = 0; i < hd; ++i) q[r * hd + i] *= q_scale;
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
              // The bias of this query's keys j0, j0 + 1, ... (read per tile: a relative bias is one row of
              // distances per head, never [S, S]).
              const A* bias_row = biased ? bias_values + bias_layout.row_offset(b, h, t0 + r, position) + j0 : nullptr;
              if (!any_padding && (!c.causal || j0 + cols <= position + 1)) {
                // Every key of the tile is visible to this query.
                if (!packed) {
                  for (std::size_t j = 0; j < cols; ++j) row[j] *= row_scale;
                }
                if (biased) detail::add_bias_row(row, bias_row, cols);
                if (round_scores) {
                  for (std::size_t j = 0; j < cols; ++j) row[j] = internal::round_widen<C>(row[j]);
                }
              } else if (!any_padding) {
                // The causal diagonal without padding: the keys after the query's position are masked.
                const std::size_t visible = position >= j0 ? std::min(cols, position - j0 + 1) : 0;
                if (!packed) {
                  for (std::size_t j = 0; j < visible; ++j) row[j] *= row_scale;
                }
                if (biased) detail::add_bias_row(row, bias_row, visible);
                if (round_scores) {
                  for (std::size_t j = 0; j < visible; ++j) row[j] = internal::round_widen<C>(row[j]);
                }
                std::fill(row + visible, row + cols, neg_inf);
              } else {
                for (std::size_t j = 0; j < cols; ++j) {
                  const std::size_t key = j0 + j;
                  if ((c.causal && key > position) || valid[key] == 0) {
                    row[j] = neg_inf;
                  } else {
                    row[j] *= row_scale;
                    if (biased) row[j] += bias_row[j];
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
            if (packed) {
#if MIXPREC_X86_DISPATCH
              if constexpr (std::same_as<A, float>) {
                // acc += P · V on the micro-kernel: the weights read in place, the values' k-slice
                // [j0, j0 + cols) of the packed panels. Each row's sum runs over the keys in order, one
                // FMA chain from +0 per row, whatever the other rows (gemm_avx512.hpp, fma_tile).
                const auto product = [&](std::size_t n_rows, const A* weights, std::size_t keys, A* into) {
                  if (wide) {
                    ::mixprec::detail::gemm_avx512::block_rows<kd::panel_format::f32, epilogue::accumulate>(
                        n_rows, hd / kd::gemm_nr, keys, weights, ld, packed_values + j0 * kd::gemm_nr,
                        kd::gemm_nr * total, into, hd);
                  } else {
                    ::mixprec::detail::gemm_avx2::block_rows<kd::panel_format::f32, epilogue::accumulate>(
                        n_rows, hd / kd::gemm_nr, keys, weights, ld, packed_values + j0 * kd::gemm_nr,
                        kd::gemm_nr * total, into, hd);
                  }
                };
                // On the causal diagonal, a query's weights for the keys after it are exactly 0, and 0 × v
                // adds +0 to a partial sum (its value unchanged) where v is finite: the whole tile in one
                // product then gives each row the bits of its visible keys alone. Where a value is Inf or
                // NaN (0 × NaN = NaN), each row takes its visible keys only: the same bits for those rows.
                if (shared == cols || values_finite) {
                  product(rows, s, cols, acc);
                } else {
                  for (std::size_t r = 0; r < rows; ++r) {
                    const std::size_t position = first + r;
                    const std::size_t visible = position >= j0 ? std::min(cols, position - j0 + 1) : 0;
                    if (visible > 0) product(1, s + r * ld, visible, acc + r * hd);
                  }
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
            // Normalised in A, then rounded once to C in bulk (F16C for float16).
            A* normalised = acc + r * hd;
            for (std::size_t i = 0; i < hd; ++i) normalised[i] = buffers.softmax[r].normalize(normalised[i]);
            internal::round_n<C>(normalised, hd, out.data() + ((b * seq + t0 + r) * n_heads + h) * hd);
          }
          if (!log_sum_exp.empty()) {
            for (std::size_t r = 0; r < rows; ++r) {
              log_sum_exp[(b * n_heads + h) * seq + t0 + r] = detail::log_sum_exp_of(buffers.softmax[r]);
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

/// `attention` without its log-sum-exps (inference, and the training forward under
/// `softmax_precision::compute`).
/// \throws std::invalid_argument as the overload above.
template <class C, class KV, class Scratch>
requires attention_kv_source<KV, C>
void attention(std::span<const C> queries, const KV& kv, const attention_problem& problem, std::span<C> out,
               Scratch&& scratch) {
  attention<C>(queries, kv, problem, score_bias<accumulator_t<C>>{}, out, std::span<accumulator_t<C>>(),
               std::forward<Scratch>(scratch));
}

/// `attention` without a score bias (the same bits as the biased call with an empty bias).
/// \throws std::invalid_argument as the biased overload.
template <class C, class KV, class Scratch>
requires attention_kv_source<KV, C>
void attention(std::span<const C> queries, const KV& kv, const attention_problem& problem, std::span<C> out,
               std::span<accumulator_t<C>> log_sum_exp, Scratch&& scratch) {
  attention<C>(queries, kv, problem, score_bias<accumulator_t<C>>{}, out, log_sum_exp, std::forward<Scratch>(scratch));
}

// ---- backward (training: whole sequences, no cache) ----

/// One attention backward call, described once: the forward of a training step over whole sequences
/// (no cache: query t and key t both sit at position t). Every tensor is row-major with the tokens
/// outermost and the heads side by side, [batch, seq, heads, head_dim] (nn::attention's projected q, k
/// and v: head h in columns [h · head_dim, (h + 1) · head_dim) of a token's row); the log-sum-exps are
/// [batch, n_heads, seq].
struct attention_backward_problem {
  std::size_t batch = 0;        ///< batch rows
  std::size_t seq = 0;          ///< queries per row (and keys, unless `keys` says otherwise)
  std::size_t n_heads = 0;      ///< query heads
  std::size_t n_kv_heads = 0;   ///< key/value heads: query head h reads kv head h / (n_heads / n_kv_heads)
  std::size_t head_dim = 0;     ///< features per head
  std::size_t query_block = 0;  ///< queries per tile
  std::size_t key_block = 0;    ///< keys per tile
  bool causal = false;          ///< query t sees keys up to position t only
  double scale = 0.0;           ///< the forward's score scale (finite; nn::attention_config's is 1/sqrt(head_dim))
  /// keys per row; 0 = seq (self-attention). Cross-attention's keys and values come from a context of
  /// another length: its queries have no positions among the keys (no causal mask, no relative bias).
  std::size_t keys = 0;

  /// The keys per row: `keys`, or `seq` when it is 0.
  [[nodiscard]] constexpr std::size_t key_count() const noexcept { return keys == 0 ? seq : keys; }
};

/// What `attention_backward` reads: the forward's tensors in its compute type C (as it rounded them), the
/// log-sum-exps in opmath A = accumulator_t<C>; shapes as `attention_backward_problem` says.
template <class C>
struct attention_backward_inputs {
  std::span<const C> queries;                     ///< [batch, seq, n_heads, head_dim], as the scores saw them
  std::span<const C> keys;                        ///< [batch, keys, n_kv_heads, head_dim], as the scores saw them
  std::span<const C> values;                      ///< [batch, keys, n_kv_heads, head_dim]
  std::span<const C> out;                         ///< [batch, seq, n_heads, head_dim]: the forward's output O
  std::span<const C> d_out;                       ///< [batch, seq, n_heads, head_dim]: dO, the cotangent of O
  std::span<const accumulator_t<C>> log_sum_exp;  ///< [batch, n_heads, seq], from `attention_log_sum_exp`
  std::span<const std::uint8_t> validity;         ///< [batch, keys]: 0 for a padding key; empty: every key valid
  score_bias<accumulator_t<C>> bias{};            ///< the forward's score bias; empty: none
};

/// Where `attention_backward` adds its gradients, in opmath A.
template <class A>
struct attention_backward_gradients {
  std::span<A> d_queries;  ///< [batch, seq, n_heads, head_dim]
  std::span<A> d_keys;     ///< [batch, keys, n_kv_heads, head_dim], summed over the query heads of a group
  std::span<A> d_values;   ///< [batch, keys, n_kv_heads, head_dim], summed over the query heads of a group
  /// The score bias's gradient, laid out as the bias (summed over the batch rows and heads it is
  /// broadcast over; for a relative bias, over the score pairs at each distance); empty: not wanted.
  std::span<A> d_bias{};
};

namespace detail {

/// One tensor of an attention backward call as its check sees it: its name, its size, and its shape
/// (the names of its dimensions, and their values: the first `rank` of `shape`).
struct attention_tensor_size {
  const char* name;
  std::size_t size;
  const char* dims;
  std::array<std::size_t, 4> shape;
  std::size_t rank = 4;
};

/// The checks shared by `attention_backward` and `attention_log_sum_exp`: a consistent problem, then
/// each tensor's size against its shape, then the validity's; messages starting with `where`.
inline void check_attention_backward(const char* where, const attention_backward_problem& p,
                                     std::initializer_list<attention_tensor_size> tensors,
                                     std::span<const std::uint8_t> validity) {
  if (p.n_heads == 0 || p.n_kv_heads == 0 || p.n_heads % p.n_kv_heads != 0 || p.query_block == 0 || p.key_block == 0) {
    throw std::invalid_argument(internal::concat(
        where, ": the problem is inconsistent (n_heads ", p.n_heads, ", n_kv_heads ", p.n_kv_heads, ", query_block ",
        p.query_block, ", key_block ", p.key_block, "): n_heads must be positive, n_kv_heads must divide it, and the ",
        "blocks must be positive"));
  }
  if (!std::isfinite(p.scale)) {
    throw std::invalid_argument(internal::concat(
        where, ": the problem's scale is not finite (the forward's score scale, e.g. 1/sqrt(head_dim))"));
  }
  const auto check = [where](const attention_tensor_size& t) {
    std::size_t expected = 1;
    bool wraps = false;  // a count beyond std::size_t would pass the size check wrapped around
    std::string shape;
    for (std::size_t d = 0; d < t.rank; ++d) {
      wraps = wraps || (t.shape[d] != 0 && expected > std::numeric_limits<std::size_t>::max() / t.shape[d]);
      expected *= t.shape[d];
      shape += internal::concat(d == 0 ? "[" : ", ", t.shape[d]);
    }
    if (wraps) {
      throw std::invalid_argument(internal::concat(where, ": the shape of ", t.name, ", ", t.dims, " = ", shape,
                                                   "], has more elements than std::size_t counts"));
    }
    if (t.size != expected) {
      throw std::invalid_argument(internal::concat(where, ": ", t.name, " has ", t.size, " elements but ", t.dims,
                                                   " = ", shape, "] needs ", expected));
    }
  };
  for (const attention_tensor_size& t : tensors) check(t);
  if (!validity.empty()) check({"validity", validity.size(), "[batch, keys]", {p.batch, p.key_count(), 0, 0}, 2});
  if (p.causal && p.key_count() != p.seq) {
    throw std::invalid_argument(internal::concat(where, ": a causal mask needs as many keys as queries (", p.seq,
                                                 " queries, ", p.key_count(), " keys)"));
  }
}

/// The shapes `attention_backward` and `attention_log_sum_exp` check their tensors against.
inline attention_tensor_size attention_query_shaped(const char* name, std::size_t size,
                                                    const attention_backward_problem& p) {
  return {name, size, "[batch, seq, n_heads, head_dim]", {p.batch, p.seq, p.n_heads, p.head_dim}};
}
/// See `attention_query_shaped`.
inline attention_tensor_size attention_kv_shaped(const char* name, std::size_t size,
                                                 const attention_backward_problem& p) {
  return {name, size, "[batch, keys, n_kv_heads, head_dim]", {p.batch, p.key_count(), p.n_kv_heads, p.head_dim}};
}
/// See `attention_query_shaped`.
inline attention_tensor_size attention_lse_shaped(const char* name, std::size_t size,
                                                  const attention_backward_problem& p) {
  return {name, size, "[batch, n_heads, seq]", {p.batch, p.n_heads, p.seq, 0}, 3};
}

/// Copies head columns [col, col + hd) of `seq` rows of stride `width` into `out` [seq, hd], widened to
/// opmath; rows of padding keys (`validity[b * seq + j]` == 0) are zero, so that they cannot poison a
/// tile's products.
template <class C, class Mat>
void gather_attention_head(const C* src, std::size_t seq, std::size_t width, std::size_t col, std::size_t hd,
                           std::span<const std::uint8_t> validity, std::size_t b, Mat& out) {
  using A = typename Mat::Scalar;
  static_assert(Mat::IsRowMajor && std::same_as<A, accumulator_t<C>>,
                "gather_attention_head writes rows of a row-major matrix of the accumulator type");
  out.resize(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
  for (std::size_t j = 0; j < seq; ++j) {
    A* row = out.data() + j * hd;
    const C* in = src + j * width + col;
    if (!validity.empty() && validity[b * seq + j] == 0) {
      std::fill_n(row, hd, A(0));
    } else {
      internal::round_widen_n<C>(in, hd, row);  // exact, in bulk (F16C for float16)
    }
  }
}

/// Adds `in` [seq, hd] into head columns [col, col + hd) of `seq` rows of stride `width`.
template <class Mat, class A>
void scatter_attention_head(const Mat& in, A* dst, std::size_t seq, std::size_t width, std::size_t col,
                            std::size_t hd) {
  for (std::size_t j = 0; j < seq; ++j) {
    for (std::size_t e = 0; e < hd; ++e) {
      dst[j * width + col + e] += in(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(e));
    }
  }
}

}  // namespace detail

/// The log-sum-exp of each query's visible scores, lse_i = log Σ_j exp(scale q_i · k_j + bias_ij) over the
/// keys it sees (causal, valid), in opmath A = accumulator_t<C>: the statistics FlashAttention-2 saves for
/// its backward (Dao 2023, Algorithm 1's L), recomputed from the forward's q and k in opmath: for a
/// forward that did not write them (`attention`'s `log_sum_exp`), as under `softmax_precision::compute`,
/// whose backward differentiates the opmath softmax. Tile by tile (query_block × key_block score
/// products in A), then one online log-sum-exp per score in key order. `lse` [batch, n_heads, seq] is
/// written; a query with no visible key gets −Inf. Memory O(seq · head_dim).
/// \throws std::invalid_argument (messages starting "kernels::attention_log_sum_exp:") when the problem
///         is inconsistent (no heads, n_kv_heads not dividing n_heads, a block of 0, a scale not finite,
///         a causal mask with keys ≠ seq), a tensor's size is not its shape's (keys [batch, keys, n_kv_heads,
///         head_dim]; validity: [batch, keys] or empty; a shape whose element count does not fit
///         std::size_t is refused too), or the bias does not fit (`check_score_bias`; a relative bias
///         needs keys == seq).
template <class C>
void attention_log_sum_exp(std::span<const C> queries, std::span<const C> keys, std::span<const std::uint8_t> validity,
                           const score_bias<accumulator_t<C>>& bias, const attention_backward_problem& problem,
                           std::span<accumulator_t<C>> lse) {
  const internal::profile_scope region("kernels::attention_log_sum_exp");
  static_assert(std::same_as<C, float> || std::same_as<C, double> || small_float<C>,
                "kernels::attention_log_sum_exp: the compute type must be real (float, double or a mixprec small "
                "float).");
  using A = accumulator_t<C>;
  using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const attention_backward_problem& c = problem;
  const std::size_t hd = c.head_dim;
  detail::check_attention_backward(
      "kernels::attention_log_sum_exp", c,
      {detail::attention_query_shaped("queries", queries.size(), c),
       detail::attention_kv_shaped("keys", keys.size(), c), detail::attention_lse_shaped("lse", lse.size(), c)},
      validity);
  const std::size_t seq = c.seq;
  const std::size_t nk = c.key_count();
  const score_bias_layout bias_layout =
      check_score_bias("kernels::attention_log_sum_exp", "the score bias", bias.layout, bias.values.size(), c.batch,
                       c.n_heads, seq, nk, nk == seq);
  const std::size_t n_heads = c.n_heads;
  const std::size_t group = n_heads / c.n_kv_heads;
  const std::size_t q_width = n_heads * hd;
  const std::size_t kv_width = c.n_kv_heads * hd;
  const A scale = static_cast<A>(c.scale);
  const std::size_t bq = std::min(c.query_block, seq);
  const std::size_t bk = std::min(c.key_block, nk);
  Mat kg, qh, sc;
  // Each query's running maximum and sum over the key tiles (the online softmax: vectorised exp for
  // float), and one tile's visible scores, -Inf where a key is padding.
  std::vector<online_softmax<A>> state(seq);
  std::vector<A> tile_scores(bk);
  for (std::size_t b = 0; b < c.batch; ++b) {
    for (std::size_t g = 0; g < c.n_kv_heads; ++g) {
      detail::gather_attention_head(keys.data() + b * nk * kv_width, nk, kv_width, g * hd, hd, validity, b, kg);
      for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
        detail::gather_attention_head(queries.data() + b * seq * q_width, seq, q_width, h * hd, hd, {}, b, qh);
        for (auto& s : state) s.reset();
        for (std::size_t i0 = 0; i0 < seq; i0 += bq) {
          const auto ni = static_cast<Eigen::Index>(std::min(bq, seq - i0));
          for (std::size_t j0 = 0; j0 < nk; j0 += bk) {
            if (c.causal && j0 > i0 + static_cast<std::size_t>(ni) - 1) break;
            const auto nj = static_cast<Eigen::Index>(std::min(bk, nk - j0));
            sc.noalias() = scale * (qh.middleRows(static_cast<Eigen::Index>(i0), ni) *
                                    kg.middleRows(static_cast<Eigen::Index>(j0), nj).transpose());
            for (Eigen::Index i = 0; i < ni; ++i) {
              const std::size_t qi = i0 + static_cast<std::size_t>(i);
              const auto cols = static_cast<std::size_t>(nj);
              const std::size_t visible = !c.causal ? cols : (qi >= j0 ? std::min(cols, qi - j0 + 1) : 0);
              if (visible == 0) continue;
              const A* row = sc.data() + static_cast<std::size_t>(i) * cols;
              std::copy_n(row, visible, tile_scores.data());
              if (!bias.empty()) {
                const A* bias_row = bias.values.data() + bias_layout.row_offset(b, h, qi, qi) + j0;
                for (std::size_t j = 0; j < visible; ++j) tile_scores[j] += bias_row[j];
              }
              if (!validity.empty()) {
                for (std::size_t j = 0; j < visible; ++j) {
                  if (validity[b * nk + j0 + j] == 0) tile_scores[j] = -std::numeric_limits<A>::infinity();
                }
              }
              (void)state[qi].update(std::span<A>(tile_scores.data(), visible));
            }
          }
        }
        for (std::size_t i = 0; i < seq; ++i) lse[(b * n_heads + h) * seq + i] = detail::log_sum_exp_of(state[i]);
      }
    }
  }
}

/// `attention_log_sum_exp` without a score bias.
/// \throws std::invalid_argument as the biased overload.
template <class C>
void attention_log_sum_exp(std::span<const C> queries, std::span<const C> keys, std::span<const std::uint8_t> validity,
                           const attention_backward_problem& problem, std::span<accumulator_t<C>> lse) {
  attention_log_sum_exp<C>(queries, keys, validity, score_bias<accumulator_t<C>>{}, problem, lse);
}

/// The backward of scaled dot-product attention (FlashAttention-2's backward, Dao 2023, Algorithm 2,
/// tiles of query_block queries × key_block keys, each kv head's dK and dV kept whole): with
/// D_i = Σ_e dO_ie O_ie, for each query i and visible key j of its kv head g, all in opmath
/// A = accumulator_t<C> (products of C values summed in A):
///
///     s_ij = scale q_i · k_j + bias_ij    P_ij = exp(s_ij − lse_i)     dV_j += P_ij dO_i     dP_ij = dO_i · v_j
///     dS_ij = P_ij (dP_ij − D_i)  dQ_i += scale dS_ij k_j      dK_j += scale dS_ij q_i     dbias_ij += dS_ij
///
/// dK and dV sum over the query heads of a group. Each head's dQ, and each kv head's dK and dV, are
/// added into `grads` once, after all its tiles (so zeroed gradients receive the sums exactly). Masked
/// keys (after the query under `causal`, or padding) and queries with an lse of −Inf get P = 0 exactly
/// and contribute nothing, even when their keys or values are Inf or NaN, or the cotangent of a query
/// that does not see them is: keys and values of padding are read as zero, and a non-finite row of dO
/// reaches dV only through its query's nonzero weights. The gradient is that of the opmath softmax.
/// Memory: O(seq · head_dim) per head (the tiles' products on `matmul`'s engine, no seq × seq matrix).
/// \throws std::invalid_argument (messages starting "kernels::attention_backward:") when the problem is
///         inconsistent (no heads, n_kv_heads not dividing n_heads, a block of 0, a scale not finite, a
///         causal mask with keys ≠ seq), a tensor's size is not its shape's (as `attention_log_sum_exp`;
///         checked in the order of `attention_backward_inputs`' members, then the gradients', validity
///         last), or the bias or d_bias does not fit (`check_score_bias`; d_bias is laid out as the bias;
///         a relative bias needs keys == seq).
namespace detail {
/// p_j = exp(scale · s_j − lse) for j < n, one query's probabilities recomputed from its log-sum-exp:
/// for float, the vectorised exp (softmax_rows-inl.hpp `exp_affine`, within 2 ulp; the same bits at
/// AVX2 and AVX-512) when the CPU has AVX2; `std::exp` otherwise.
template <class A>
void attention_probabilities(const A* s, A* p, std::size_t n, A scale, A lse) {
#if MIXPREC_X86_DISPATCH
  if constexpr (std::same_as<A, float>) {
    if (simd_rows_active()) {
      if (avx512_rows_active()) {
        mixprec::detail::simd_avx512::softmax::exp_affine(s, p, n, scale, lse);
      } else {
        mixprec::detail::simd_avx2::softmax::exp_affine(s, p, n, scale, lse);
      }
      return;
    }
  }
#endif
  for (std::size_t j = 0; j < n; ++j) p[j] = std::exp(scale * s[j] - lse);
}
}  // namespace detail

namespace detail {
/// y[m, n] = a[m, k] · op(b) in opmath A, one product of the attention backward's tiles: `kernels::matmul`'s
/// engine (the blocked GEMM for float on the AVX2 level and above, Eigen's product otherwise).
template <class A>
void attention_product(const A* a, const A* b, b_layout lb, A* y, matmul_shape s) {
  matmul_impl<A>(a, b, static_cast<const A*>(nullptr), y, s, lb, matmul_block_elements);
}
/// y[m, n] += op(a) · b[k, n] in opmath A (`kernels::matmul_accumulate`'s engine).
template <class A>
void attention_accumulate(const A* a, a_layout la, const A* b, A* y, matmul_shape s) {
  matmul_accumulate_impl<A>(a, la, b, b_layout::k_n, y, s);
}
}  // namespace detail

template <class C>
void attention_backward(const attention_backward_inputs<C>& in, const attention_backward_problem& problem,
                        const attention_backward_gradients<accumulator_t<C>>& grads) {
  const internal::profile_scope region("kernels::attention_backward");
  static_assert(std::same_as<C, float> || std::same_as<C, double> || small_float<C>,
                "kernels::attention_backward: the compute type must be real (float, double or a mixprec small "
                "float).");
  using A = accumulator_t<C>;
  using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;
  const attention_backward_problem& c = problem;
  const std::size_t hd = c.head_dim;
  const std::size_t q_width = c.n_heads * hd;
  const std::size_t kv_width = c.n_kv_heads * hd;
  detail::check_attention_backward("kernels::attention_backward", c,
                                   {detail::attention_query_shaped("queries", in.queries.size(), c),
                                    detail::attention_kv_shaped("keys", in.keys.size(), c),
                                    detail::attention_kv_shaped("values", in.values.size(), c),
                                    detail::attention_query_shaped("out", in.out.size(), c),
                                    detail::attention_query_shaped("d_out", in.d_out.size(), c),
                                    detail::attention_lse_shaped("log_sum_exp", in.log_sum_exp.size(), c),
                                    detail::attention_query_shaped("d_queries", grads.d_queries.size(), c),
                                    detail::attention_kv_shaped("d_keys", grads.d_keys.size(), c),
                                    detail::attention_kv_shaped("d_values", grads.d_values.size(), c)},
                                   in.validity);
  const std::size_t seq = c.seq;
  const std::size_t nk = c.key_count();
  const score_bias<A>& bias = in.bias;
  const score_bias_layout bias_layout = check_score_bias("kernels::attention_backward", "the score bias", bias.layout,
                                                         bias.values.size(), c.batch, c.n_heads, seq, nk, nk == seq);
  if (!grads.d_bias.empty()) {
    (void)check_score_bias("kernels::attention_backward", "d_bias (shaped as the bias)", bias.layout,
                           grads.d_bias.size(), c.batch, c.n_heads, seq, nk, nk == seq);
  }
  const bool biased = !bias.empty();
  const bool bias_gradient = biased && !grads.d_bias.empty();
  const std::size_t n_heads = c.n_heads;
  const std::size_t group = n_heads / c.n_kv_heads;
  const A scale = static_cast<A>(c.scale);
  const std::span<const std::uint8_t> valid = in.validity;
  const std::size_t bq = std::min(c.query_block, seq);
  const std::size_t bk = std::min(c.key_block, nk);
  Mat kg, vg, dkg, dvg, qh, doh, dqh, sc, pr, dpr;
  Vec dd(static_cast<Eigen::Index>(seq));
  for (std::size_t b = 0; b < c.batch; ++b) {
    for (std::size_t g = 0; g < c.n_kv_heads; ++g) {
      detail::gather_attention_head(in.keys.data() + b * nk * kv_width, nk, kv_width, g * hd, hd, valid, b, kg);
      detail::gather_attention_head(in.values.data() + b * nk * kv_width, nk, kv_width, g * hd, hd, valid, b, vg);
      dkg.setZero(static_cast<Eigen::Index>(nk), static_cast<Eigen::Index>(hd));
      dvg.setZero(static_cast<Eigen::Index>(nk), static_cast<Eigen::Index>(hd));
      for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
        const std::size_t head = b * seq * q_width;
        detail::gather_attention_head(in.queries.data() + head, seq, q_width, h * hd, hd, {}, b, qh);
        detail::gather_attention_head(in.d_out.data() + head, seq, q_width, h * hd, hd, {}, b, doh);
        detail::gather_attention_head(in.out.data() + head, seq, q_width, h * hd, hd, {}, b, dqh);  // O, for now
        dd = (doh.cwiseProduct(dqh)).rowwise().sum();  // D_i = Σ_e dO_ie O_ie
        dqh.setZero(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
        const A* lse = in.log_sum_exp.data() + (b * n_heads + h) * seq;
        for (std::size_t i0 = 0; i0 < seq; i0 += bq) {
          const auto ni = static_cast<Eigen::Index>(std::min(bq, seq - i0));
          const auto ei0 = static_cast<Eigen::Index>(i0);
          // dO rows that are not finite (NaN or Inf in dy) take the dV product apart, below.
          const bool do_finite = doh.middleRows(ei0, ni).allFinite();
          for (std::size_t j0 = 0; j0 < nk; j0 += bk) {
            if (c.causal && j0 > i0 + static_cast<std::size_t>(ni) - 1) break;  // tiles above the diagonal
            const auto nj = static_cast<Eigen::Index>(std::min(bk, nk - j0));
            const auto ej0 = static_cast<Eigen::Index>(j0);
            const auto cols = static_cast<std::size_t>(nj);
            const auto rows = static_cast<std::size_t>(ni);
            const A* q_blk = qh.data() + i0 * hd;    // [rows, hd]
            const A* do_blk = doh.data() + i0 * hd;  // [rows, hd]
            const A* k_tile = kg.data() + j0 * hd;   // [cols, hd]
            const A* v_tile = vg.data() + j0 * hd;   // [cols, hd]
            sc.resize(ni, nj);
            pr.resize(ni, nj);
            dpr.resize(ni, nj);
            detail::attention_product(q_blk, k_tile, b_layout::n_k, sc.data(), {rows, hd, cols});  // S = Q Kᵀ
            for (std::size_t i = 0; i < rows; ++i) {
              // P_ij = exp(scale S_ij + bias_ij - lse_i) for the keys query i sees (j <= i under causal; none
              // when all its keys are masked: lse = -Inf), 0 for the others and for padding keys.
              const std::size_t qi = i0 + i;
              std::size_t visible = cols;
              if (c.causal) visible = qi >= j0 ? std::min(cols, qi - j0 + 1) : 0;
              if (std::isinf(lse[qi])) visible = 0;
              A* p_row = pr.data() + i * cols;
              A* s_row = sc.data() + i * cols;
              if (biased) {
                // The biased score first, then exp(s - lse): one rounding more than the unbiased path's
                // fused exp(scale s - lse), as the forward rounds scale · s before adding the bias.
                const A* bias_row = bias.values.data() + bias_layout.row_offset(b, h, qi, qi) + j0;
                for (std::size_t j = 0; j < visible; ++j) s_row[j] = scale * s_row[j] + bias_row[j];
                detail::attention_probabilities(s_row, p_row, visible, A(1), lse[qi]);
              } else {
                detail::attention_probabilities(s_row, p_row, visible, scale, lse[qi]);
              }
              std::fill(p_row + visible, p_row + cols, A(0));
              if (!valid.empty()) {
                for (std::size_t j = 0; j < visible; ++j) {
                  if (valid[b * nk + j0 + j] == 0) p_row[j] = A(0);
                }
              }
            }
            A* dv_tile = dvg.data() + j0 * hd;
            if (do_finite) {
              detail::attention_accumulate(pr.data(), a_layout::k_m, do_blk, dv_tile, {cols, rows, hd});  // Pᵀ dO
            } else {
              // 0 × NaN = NaN: a non-finite row of dO reaches only the keys its query sees (P ≠ 0), so
              // that masked keys get exactly nothing from it; the finite rows take the product.
              Mat finite_do = doh.middleRows(ei0, ni);
              for (Eigen::Index i = 0; i < ni; ++i) {
                if (finite_do.row(i).allFinite()) continue;
                finite_do.row(i).setZero();
                for (Eigen::Index j = 0; j < nj; ++j) {
                  if (pr(i, j) != A(0)) dvg.row(ej0 + j) += pr(i, j) * doh.row(ei0 + i);
                }
              }
              detail::attention_accumulate(pr.data(), a_layout::k_m, finite_do.data(), dv_tile, {cols, rows, hd});
            }
            detail::attention_product(do_blk, v_tile, b_layout::n_k, dpr.data(), {rows, hd, cols});  // dP = dO Vᵀ
            // dS = P ⊙ (dP − D), the bias's gradient (the bias enters the scores unscaled), then scale · dS;
            // P = 0 exactly where masked, so masked keys contribute nothing.
            for (std::size_t i = 0; i < rows; ++i) {
              const A di = dd(ei0 + static_cast<Eigen::Index>(i));
              A* p_row = pr.data() + i * cols;
              const A* dp_row = dpr.data() + i * cols;
              if (bias_gradient) {
                const std::size_t qi = i0 + i;
                A* d_bias_row = grads.d_bias.data() + bias_layout.row_offset(b, h, qi, qi) + j0;
                for (std::size_t j = 0; j < cols; ++j) {
                  if (p_row[j] != A(0)) d_bias_row[j] += p_row[j] * (dp_row[j] - di);
                }
              }
              for (std::size_t j = 0; j < cols; ++j) {
                p_row[j] = p_row[j] == A(0) ? A(0) : scale * (p_row[j] * (dp_row[j] - di));
              }
            }
            detail::attention_accumulate(pr.data(), a_layout::m_k, k_tile, dqh.data() + i0 * hd,
                                         {rows, cols, hd});  // dQ += scale dS K
            detail::attention_accumulate(pr.data(), a_layout::k_m, q_blk, dkg.data() + j0 * hd,
                                         {cols, rows, hd});  // dK += scale dSᵀ Q
          }
        }
        detail::scatter_attention_head(dqh, grads.d_queries.data() + head, seq, q_width, h * hd, hd);
      }
      detail::scatter_attention_head(dkg, grads.d_keys.data() + b * nk * kv_width, nk, kv_width, g * hd, hd);
      detail::scatter_attention_head(dvg, grads.d_values.data() + b * nk * kv_width, nk, kv_width, g * hd, hd);
    }
  }
}

}  // namespace mixprec::kernels

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's attention backward (kernels/compiled.hpp): float, float64, bfloat16 and
/// float16 compute.
#define MIXPREC_ATTENTION_BACKWARD_INSTANTIATION(E, C)                                                            \
  E template void mixprec::kernels::attention_log_sum_exp<C>(                                                     \
      std::span<const C>, std::span<const C>, std::span<const std::uint8_t>,                                      \
      const mixprec::kernels::score_bias<mixprec::accumulator_t<C>>&,                                             \
      const mixprec::kernels::attention_backward_problem&, std::span<mixprec::accumulator_t<C>>);                 \
  E template void mixprec::kernels::attention_backward<C>(                                                        \
      const mixprec::kernels::attention_backward_inputs<C>&, const mixprec::kernels::attention_backward_problem&, \
      const mixprec::kernels::attention_backward_gradients<mixprec::accumulator_t<C>>&);
#define MIXPREC_ATTENTION_BACKWARD_INSTANTIATIONS(E) \
  MIXPREC_FOR_REAL_COMPUTE_TYPES(MIXPREC_ATTENTION_BACKWARD_INSTANTIATION, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_ATTENTION_BACKWARD_INSTANTIATIONS(extern)
#endif
