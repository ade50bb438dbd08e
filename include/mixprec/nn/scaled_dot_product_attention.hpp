/// \file
/// \brief `nn::scaled_dot_product_attention`: attention of projected (and rotated) queries against the
/// keys and values of a `kv_cache`, on the tiled kernel (`kernels::attention`), and `attention_config`,
/// the hyper-parameters it and `nn::attention` share (PyTorch's `F.scaled_dot_product_attention` beneath
/// `nn.MultiheadAttention`).
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/kernels/attention.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/nn/kv_cache.hpp"
#include "mixprec/nn/rotary.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

/// The hyper-parameters of an attention layer. Zero in `n_kv_heads` and `head_dim` means "the usual
/// default"; `attention` fills them in (its `config()` returns the resolved values).
///
/// **Example** (llama2.c stories260K: dim 64, 8 heads, 4 kv heads, head_size 8):
///
///     nn::attention_config cfg{.d_model = 64, .n_heads = 8, .n_kv_heads = 4, .head_dim = 8, .causal = true,
///                              .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs}};
struct attention_config {
  std::size_t d_model = 0;                ///< width of the input and output features
  std::size_t n_heads = 0;                ///< query heads
  std::size_t n_kv_heads = 0;             ///< key/value heads, dividing n_heads; 0 = n_heads (multi-head attention)
  std::size_t head_dim = 0;               ///< dimension of one head; 0 = d_model / n_heads
  bool causal = false;                    ///< mask keys after the query's position (decoders)
  std::optional<rotary_config> rotary{};  ///< rotary embedding of q and k; none = no position encoding here
  kernels::softmax_precision softmax = kernels::softmax_precision::opmath;  ///< where the softmax runs
  std::optional<double> scale{};  ///< score scale; none = 1 / sqrt(head_dim) (Vaswani et al. 2017)
  std::size_t query_block = 64;   ///< queries processed together (rows of a score tile); > 0
  std::size_t key_block = 128;    ///< keys per tile of the online softmax; > 0
};

/// Scratch buffers of `scaled_dot_product_attention`, in opmath `A` (the kernel's buffers,
/// `kernels::attention_buffers`). It sizes them itself (to the tile sizes, and on the packed path one kv
/// head's keys and values: O(S), never O(S²)); reuse one workspace across calls to avoid reallocating.
/// `elements()` counts what they hold. The contents are meaningless between calls.
template <std::floating_point A>
using attention_workspace = kernels::attention_buffers<A>;

namespace detail {

inline std::string attention_dims_string(std::initializer_list<std::size_t> dims) {
  std::string s = "[";
  bool first = true;
  for (const std::size_t d : dims) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  return s + "]";
}

/// The config with its defaults filled in, validated.
inline attention_config resolve_attention_config(attention_config c) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("attention_config: " + what); };
  if (c.n_heads == 0) fail("n_heads is 0; an attention layer needs at least one head.");
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0) {
    fail("n_heads = " + std::to_string(c.n_heads) +
         " is not a multiple of n_kv_heads = " + std::to_string(c.n_kv_heads) +
         "; grouped-query attention shares each kv head among n_heads / n_kv_heads "
         "query heads.");
  }
  if (c.head_dim == 0) {
    if (c.d_model == 0 || c.d_model % c.n_heads != 0) {
      fail("head_dim is 0 (= d_model / n_heads) but d_model = " + std::to_string(c.d_model) +
           " is not a positive multiple of n_heads = " + std::to_string(c.n_heads) + "; set head_dim explicitly.");
    }
    c.head_dim = c.d_model / c.n_heads;
  }
  if (c.d_model == 0) fail("d_model is 0; set the width of the layer's input and output features.");
  if (c.query_block == 0 || c.key_block == 0) {
    fail("query_block = " + std::to_string(c.query_block) + " and key_block = " + std::to_string(c.key_block) +
         " must both be positive (tile sizes of the online softmax; e.g. 64 and 128).");
  }
  if (c.scale && !std::isfinite(*c.scale)) fail("scale is not finite; leave it empty for 1 / sqrt(head_dim).");
  if (c.rotary && c.head_dim % 2 != 0) {
    fail("head_dim = " + std::to_string(c.head_dim) + " is odd but rotary embeddings rotate pairs of coordinates.");
  }
  if (!c.scale) c.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return c;
}

template <class T>
inline constexpr bool attention_real_v = std::same_as<T, float> || std::same_as<T, double> || small_float<T>;

/// The tiled attention of `scaled_dot_product_attention` (kernels::attention) after the config is
/// resolved and checked against the cache.
template <class C, class Scratch>
void checked_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                       const attention_config& config, const kernels::score_bias<accumulator_t<C>>& bias,
                       std::span<C> out, std::span<accumulator_t<C>> log_sum_exp, Scratch&& scratch) {
  static_assert(detail::attention_real_v<C>,
                "scaled_dot_product_attention: the compute type must be real (float, double or a mixprec small "
                "float); attention over complex values is not supported.");
  const attention_config c = detail::resolve_attention_config(config);
  const std::size_t hd = c.head_dim;
  const std::size_t total = cache.size();
  if (cache.n_kv_heads() != c.n_kv_heads || cache.head_dim() != hd) {
    throw std::invalid_argument("scaled_dot_product_attention: the cache has " + std::to_string(cache.n_kv_heads()) +
                                " kv heads of dimension " + std::to_string(cache.head_dim()) + " but the config " +
                                std::to_string(c.n_kv_heads) + " of dimension " + std::to_string(hd));
  }
  if (c.causal && seq > total) {
    throw std::invalid_argument("scaled_dot_product_attention: " + std::to_string(seq) +
                                " queries but the cache holds only " + std::to_string(total) +
                                " positions; append the queries' own keys and values to the cache first.");
  }
  const kernels::attention_problem problem{.batch = cache.batch(),
                                           .seq = seq,
                                           .n_heads = c.n_heads,
                                           .n_kv_heads = c.n_kv_heads,
                                           .head_dim = hd,
                                           .keys = total,
                                           .capacity = cache.capacity(),
                                           .query_block = c.query_block,
                                           .key_block = c.key_block,
                                           .causal = c.causal,
                                           .scale = *c.scale,
                                           .softmax = c.softmax};
  kernels::attention<C>(queries, cache, problem, bias, out, log_sum_exp, std::forward<Scratch>(scratch));
}

}  // namespace detail

/// Scaled dot-product attention of projected (and rotated) queries against the keys and values of a
/// cache: the core of `attention`, exposed for testing and for callers that do their own projections.
///
/// - `queries`: [batch, seq, n_heads, head_dim] row-major, in the compute type `C`; query t of batch row
///   b sits at position `cache.size() - seq + t` (its own key and value are already in the cache), or,
///   without a causal mask, may attend to a cache of another length (cross-attention: the context's keys).
/// - `cache`: keys and values [batch, n_kv_heads, positions, head_dim] in `C`, with key validity.
/// - `config`: n_heads, n_kv_heads, head_dim (must match the cache), causal, scale, softmax precision,
///   tile sizes. Query head h reads kv head h / (n_heads / n_kv_heads).
/// - `out`: [batch, seq, n_heads, head_dim], each value rounded once to `C`.
/// - `workspace`: scratch, resized here to the configured tile sizes (and, on the packed path, to one kv
///   head's keys and values packed: 2 × capacity × head_dim values, or 1.5 × with the keys as bfloat16
///   pairs; never O(S²)).
///
/// Masked keys (after the query under `causal`, or invalid in the cache) get weight exactly 0 and
/// contribute exactly nothing, even when their keys or values are Inf or NaN; a query with no unmasked
/// key outputs zeros.
/// \throws std::invalid_argument if the config is invalid, the sizes do not match, the cache's heads
///         do not match the config, or `seq > cache.size()` under a causal mask.
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, std::span<C> out,
                                  attention_workspace<accumulator_t<C>>& workspace) {
  detail::checked_attention<C>(queries, cache, seq, config, {}, out, {}, workspace);
}

/// `scaled_dot_product_attention` with its buffers taken from `ws` (nn/workspace.hpp): no allocation
/// once `ws` has warmed up. Same results, bit for bit.
/// \throws std::invalid_argument as above.
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, std::span<C> out, workspace& ws) {
  scaled_dot_product_attention<C>(queries, cache, seq, config, out, {}, ws);
}

/// `scaled_dot_product_attention` that also writes each query's log-sum-exp of its visible scores into
/// `log_sum_exp` [batch, n_heads, seq] in opmath (−Inf for a query that sees no key): what
/// `kernels::attention_backward` reads (FlashAttention-2's L; PyTorch's flash attention returns it as
/// `logsumexp`). An empty span writes none. Same outputs, bit for bit.
/// \throws std::invalid_argument as above, or when `log_sum_exp` is neither empty nor [batch, n_heads, seq].
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, std::span<C> out,
                                  std::span<accumulator_t<C>> log_sum_exp, workspace& ws) {
  scaled_dot_product_attention<C>(queries, cache, seq, config, {}, out, log_sum_exp, ws);
}

/// `scaled_dot_product_attention` with an additive score bias (kernels/score_bias.hpp): scale · q · k +
/// bias before the masks and the softmax; a dense bias [batch or 1, heads or 1, seq, cache.size()], or a
/// relative one [heads or 1, 2 cache.size() − 1] (T5's relative position bias, ALiBi) read per tile.
/// With an empty bias, the unbiased call's bits.
/// \throws std::invalid_argument as above, or when the bias does not fit the call (`kernels::check_score_bias`).
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, const kernels::score_bias<accumulator_t<C>>& bias,
                                  std::span<C> out, std::span<accumulator_t<C>> log_sum_exp, workspace& ws) {
  using A = accumulator_t<C>;
  const workspace::frame frame(ws);
  detail::checked_attention<C>(queries, cache, seq, config, bias, out, log_sum_exp,
                               [&](const kernels::attention_scratch_sizes& n) {
                                 return kernels::attention_scratch<A>{ws.take<A>(n.queries),
                                                                      ws.take<A>(n.queries),
                                                                      ws.take<A>(n.scores),
                                                                      ws.take<A>(n.keys),
                                                                      ws.take<A>(n.values),
                                                                      ws.take<kernels::online_softmax<A>>(n.softmax),
                                                                      ws.take<A>(n.packed),
                                                                      ws.take<std::uint16_t>(n.key_pairs),
                                                                      ws.take<std::uint32_t>(n.query_pairs)};
                               });
}

}  // namespace mixprec::nn

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's tiled attention forward against a kv_cache, with the layer's buffers
/// (kernels/compiled.hpp): float, float64, bfloat16 and float16 compute.
#define MIXPREC_ATTENTION_INSTANTIATION(E, C)                                                                   \
  E template void mixprec::kernels::attention<C, mixprec::nn::kv_cache<C>,                                      \
                                              mixprec::kernels::attention_buffers<mixprec::accumulator_t<C>>&>( \
      std::span<const C>, const mixprec::nn::kv_cache<C>&, const mixprec::kernels::attention_problem&,          \
      const mixprec::kernels::score_bias<mixprec::accumulator_t<C>>&, std::span<C>,                             \
      std::span<mixprec::accumulator_t<C>>, mixprec::kernels::attention_buffers<mixprec::accumulator_t<C>>&);
#define MIXPREC_ATTENTION_INSTANTIATIONS(E) MIXPREC_FOR_REAL_COMPUTE_TYPES(MIXPREC_ATTENTION_INSTANTIATION, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_ATTENTION_INSTANTIATIONS(extern)
#endif
