/// \file
/// \brief `nn::attention<P>`: multi-head and grouped-query self-attention with causal and padding
/// masks, rotary position embeddings, a key/value cache for incremental decoding, and a tiled
/// ("flash") softmax in float32 opmath whose memory does not grow with seq^2.
///
/// The computation, for an input x [batch, seq, d_model] (or [seq, d_model]: batch 1), compute type
/// `C = compute_t<P, In>`, output type `O = output_t<P, In>`, opmath `A = accumulator_t<C>` (float32 for
/// bfloat16/float16 compute, float64 for double):
///
///     q = x · Wq (+ bq)   [batch, seq, n_heads,    head_dim]   rounded to C   (kernels::matmul: float32 sums)
///     k = x · Wk (+ bk)   [batch, seq, n_kv_heads, head_dim]   rounded to C
///     v = x · Wv (+ bv)   [batch, seq, n_kv_heads, head_dim]   rounded to C
///     q, k rotated by RoPE at their positions                  in A, rounded once to C     (optional)
///     k, v appended to the key/value cache (element type C)
///     for query head h, kv head g = h / (n_heads / n_kv_heads)  (grouped-query attention):
///       s_j = scale * q_h · k_{g,j}                            in A (products of C values, summed in A)
///       s_j = -Inf where key j is masked (causal: j > query position; padding: key j is padding)
///       a_h = sum_j softmax(s)_j v_{g,j}                       online softmax in A, rounded once to C
///     y = concat_h(a_h) · Wo (+ bo)   [batch, seq, d_model]    summed in float32, rounded once to O
///
/// With `softmax_precision::compute` the scores are rounded to C before the softmax and the weights to
/// C before they multiply v (pure-half framework behaviour); see `kernels::softmax_precision`.
///
/// **Tiling**: each (batch row, head, block of `query_block` queries) walks the keys in tiles of
/// `key_block`, keeping per query the running max and sum of `kernels::online_softmax` and rescaling
/// its float32 accumulator (FlashAttention's loop; Dao et al. 2022). The scratch memory is
/// `query_block * (key_block + 2 head_dim + 2) + 2 key_block head_dim` opmath values whatever the
/// sequence length (`attention_workspace::elements`; the key/value tiles only when C is not A, the value
/// tile also when C is A and a tile holds padding); only the
/// O(seq) buffers q, k, v, the attended heads and the cache grow with the input. Tiles start at key positions that are
/// multiples of `key_block`, so a query sees its keys in the same tiles whether it comes in a long prompt or alone
/// during decoding.
///
/// **Masks**: a fully masked query row (e.g. a padding query under left padding and a causal mask)
/// attends to nothing and outputs zeros (before the output projection; y is then the bias bo, or 0),
/// never NaN — the convention of `kernels::online_softmax`. A masked key contributes exactly nothing,
/// whatever its key and value hold (Inf and NaN included): a tile of padding only is skipped, padding
/// rows of the value tile are zeroed before P·V, and under `causal` each query's P·V stops at its own
/// position (0 × NaN would otherwise be NaN).
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/attention.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/kv_cache.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/probe.hpp"
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

/// Scratch buffers of `scaled_dot_product_attention`, in opmath `A`. It sizes them itself (to the
/// tile sizes, and on the packed path one kv head's keys and values: O(S), never O(S²)); reuse one
/// workspace across calls to avoid reallocating.
/// The contents are meaningless between calls.
template <std::floating_point A>
struct attention_workspace {
  std::vector<A> queries;       ///< [query_block, head_dim] one block of queries, widened to A
  std::vector<A> accumulators;  ///< [query_block, head_dim] unnormalised outputs
  std::vector<A> scores;        ///< [query_block, key_block] one tile of scores, then weights
  std::vector<A> keys;          ///< [key_block, head_dim] one tile of keys widened to A (empty if C is A)
  /// [key_block, head_dim] one tile of values widened to A, padding rows zeroed (if C is A: empty until a
  /// tile holds padding, then a copy of that tile with its padding rows zeroed)
  std::vector<A> values;
  std::vector<kernels::online_softmax<A>> softmax;  ///< [query_block] running max and sum per query
  /// The packed path's copies (see `scaled_dot_product_attention`): one kv head's keys and values as
  /// GEMM panels, 2 × capacity × head_dim values (O(S); the values only, 1 ×, when the keys are kept
  /// as `key_pairs`), and a query block and a weight tile packed.
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
};

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

}  // namespace detail

namespace detail {

/// The tiled attention of `scaled_dot_product_attention` (kernels::attention) after the config is
/// resolved and checked against the cache.
template <class C, class Scratch>
void checked_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                       const attention_config& config, std::span<C> out, Scratch&& scratch) {
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
  if (seq > total) {
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
  kernels::attention<C>(queries, cache, problem, out, std::forward<Scratch>(scratch));
}

}  // namespace detail

/// Scaled dot-product attention of projected (and rotated) queries against the keys and values of a
/// cache: the core of `attention`, exposed for testing and for callers that do their own projections.
///
/// - `queries`: [batch, seq, n_heads, head_dim] row-major, in the compute type `C`; query t of batch row
///   b sits at position `cache.size() - seq + t` (its own key and value are already in the cache).
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
///         do not match the config, or `seq > cache.size()`.
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, std::span<C> out,
                                  attention_workspace<accumulator_t<C>>& workspace) {
  using A = accumulator_t<C>;
  detail::checked_attention<C>(queries, cache, seq, config, out, [&](const kernels::attention_scratch_sizes& n) {
    workspace.queries.resize(n.queries);
    workspace.accumulators.resize(n.queries);
    workspace.scores.resize(n.scores);
    if (n.keys != 0) workspace.keys.resize(n.keys);
    if (n.values != 0) workspace.values.resize(n.values);
    workspace.softmax.resize(n.softmax);
    if (n.packed != 0) workspace.packed.resize(n.packed);
    if (n.key_pairs != 0) workspace.key_pairs.resize(n.key_pairs);
    if (n.query_pairs != 0) workspace.query_pairs.resize(n.query_pairs);
    return kernels::attention_scratch<A>{workspace.queries, workspace.accumulators, workspace.scores,
                                         workspace.keys,    workspace.values,       workspace.softmax,
                                         workspace.packed,  workspace.key_pairs,    workspace.query_pairs};
  });
}

/// `scaled_dot_product_attention` with its buffers taken from `ws` (nn/workspace.hpp): no allocation
/// once `ws` has warmed up. Same results, bit for bit.
/// \throws std::invalid_argument as above.
template <class C>
void scaled_dot_product_attention(std::span<const C> queries, const kv_cache<C>& cache, std::size_t seq,
                                  const attention_config& config, std::span<C> out, workspace& ws) {
  using A = accumulator_t<C>;
  const workspace::frame frame(ws);
  detail::checked_attention<C>(queries, cache, seq, config, out, [&](const kernels::attention_scratch_sizes& n) {
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

/// Tag for `attention`'s probed call without a key padding mask: `attn(x, nn::no_key_mask, probe, "attn")`.
struct no_key_mask_t {
  explicit constexpr no_key_mask_t() = default;
};
/// The `no_key_mask_t` value.
inline constexpr no_key_mask_t no_key_mask{};

/// Multi-head / grouped-query self-attention with policy `P` (jmp-style: parameters stored in
/// `P::param_type`, computed in `compute_t<P, In>`, returned in `output_t<P, In>`).
///
/// - **Parameters**: four `dense<P>` projections, kernels [in, out] (Flax's layout) with optional biases:
///   `wq` [d_model, n_heads * head_dim], `wk` and `wv` [d_model, n_kv_heads * head_dim], `wo`
///   [n_heads * head_dim, d_model]. Within the projected features, head h occupies columns
///   [h * head_dim, (h + 1) * head_dim). `from_weights` loads [in, out] or [out, in] matrices
///   (llama2.c and PyTorch store [out, in]).
/// - **Input**: x `xt::xtensor<In, 2>` [seq, d_model] (one sequence), `xt::xtensor<In, 3>`
///   [batch, seq, d_model], or `xt::xarray<In>` of rank 2 or 3; In is float, double or a small float.
///   Views and maps of those shapes too (`xt::adapt`, `xt::view`, `Eigen::Map`: docs/layers.md,
///   "Containers"), for x, the key mask and dy alike.
/// - **Optional key padding mask**: bool, shape [seq] or [batch, seq] (x's shape without its last axis),
///   true = real token, false = padding (Hugging Face's `attention_mask` convention). Padding keys are
///   never attended; a query with no visible key outputs zeros before `wo`.
/// - **Optional cache** (`cache_type<In>`, from `make_cache<In>`): the new keys and values are appended
///   and the queries attend to every cached position; the token at index t of this call has position
///   `cache.size() + t` (for RoPE and the causal mask). Positions are shared by the batch rows: with left
///   padding the real tokens of a row start at a later position, which RoPE does not notice (q·k
///   depends only on position differences).
/// - **Output**: the same kind of container as an `xt::xtensor`/`xt::xarray` x, an owning `xt::xtensor`
///   for a view or map (docs/layers.md, "Containers"), shape of x, element type `output_t<P, In>`.
/// - **Errors**: `std::invalid_argument` for a wrong rank or feature count (both shapes in the message),
///   a mask of the wrong shape, a cache of another batch size or head shape, or a full cache.
///   Complex inputs do not compile (static_assert).
///
/// **Example** (llama2.c stories260K decoding one token at a time):
///
///     using P = mixprec::policy<float, mixprec::bfloat16, float>;
///     nn::attention_config cfg{.d_model = 64, .n_heads = 8, .n_kv_heads = 4, .causal = true,
///                              .rotary = nn::rotary_config{}};
///     auto attn = nn::attention<P>::from_weights(cfg, wq, wk, wv, wo, nn::weight_layout::out_in);
///     auto cache = attn.make_cache<float>(/*batch=*/1, /*capacity=*/512);   // kv_cache<bfloat16>
///     for (std::size_t pos = 0; pos < n; ++pos) {
///       xt::xtensor<float, 3> x = ...;                 // [1, 1, 64]: this token's normalised residual
///       xt::xtensor<float, 3> y = attn(x, cache);      // [1, 1, 64]
///     }
template <class P>
class attention {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using projection_type = dense<P>;

  /// The key/value cache type for inputs of element type `In`: its elements are the compute type.
  template <class In>
  using cache_type = kv_cache<compute_t<P, In>>;

  /// A layer with all-zero projections (biases, if any, zero too).
  /// \throws std::invalid_argument if the config is invalid.
  explicit attention(const attention_config& config, use_bias bias = use_bias::no)
      : attention(detail::resolve_attention_config(config), bias, resolved_tag{}) {}

  /// A layer from four projections (kernels [in, out], optional biases).
  /// \throws std::invalid_argument if the config is invalid or a kernel's shape does not match it.
  attention(const attention_config& config, projection_type wq, projection_type wk, projection_type wv,
            projection_type wo)
      : config_(detail::resolve_attention_config(config)),
        wq_(std::move(wq)),
        wk_(std::move(wk)),
        wv_(std::move(wv)),
        wo_(std::move(wo)) {
    check_projection("wq", wq_, config_.d_model, config_.n_heads * config_.head_dim, "[d_model, n_heads * head_dim]");
    check_projection("wk", wk_, config_.d_model, config_.n_kv_heads * config_.head_dim,
                     "[d_model, n_kv_heads * head_dim]");
    check_projection("wv", wv_, config_.d_model, config_.n_kv_heads * config_.head_dim,
                     "[d_model, n_kv_heads * head_dim]");
    check_projection("wo", wo_, config_.n_heads * config_.head_dim, config_.d_model, "[n_heads * head_dim, d_model]");
    if (config_.rotary) rotary_.emplace(config_.head_dim, *config_.rotary);
  }

  /// Loads four weight matrices of any floating type laid out as `layout` (no biases), rounded once to
  /// the param type. With `weight_layout::out_in` (llama2.c, PyTorch): wq [n_heads * head_dim, d_model],
  /// wk/wv [n_kv_heads * head_dim, d_model], wo [d_model, n_heads * head_dim].
  /// \throws std::invalid_argument if a shape does not match the config.
  template <class W>
  [[nodiscard]] static attention from_weights(const attention_config& config, const xt::xtensor<W, 2>& wq,
                                              const xt::xtensor<W, 2>& wk, const xt::xtensor<W, 2>& wv,
                                              const xt::xtensor<W, 2>& wo, weight_layout layout) {
    return attention(config, projection_type::from_weights(wq, layout), projection_type::from_weights(wk, layout),
                     projection_type::from_weights(wv, layout), projection_type::from_weights(wo, layout));
  }

  /// Flax's default initialisation for each projection (`dense<P>::lecun_normal`), biases zero if any.
  /// \throws std::invalid_argument if the config is invalid.
  template <class Rng>
  [[nodiscard]] static attention lecun_normal(const attention_config& config, Rng& rng, use_bias bias = use_bias::no) {
    const attention_config c = detail::resolve_attention_config(config);
    auto wq = projection_type::lecun_normal(c.d_model, c.n_heads * c.head_dim, rng, bias);
    auto wk = projection_type::lecun_normal(c.d_model, c.n_kv_heads * c.head_dim, rng, bias);
    auto wv = projection_type::lecun_normal(c.d_model, c.n_kv_heads * c.head_dim, rng, bias);
    auto wo = projection_type::lecun_normal(c.n_heads * c.head_dim, c.d_model, rng, bias);
    return attention(c, std::move(wq), std::move(wk), std::move(wv), std::move(wo));
  }

  /// The config with its defaults resolved (n_kv_heads, head_dim, scale filled in).
  [[nodiscard]] const attention_config& config() const noexcept { return config_; }
  /// Query projection, kernel [d_model, n_heads * head_dim].
  [[nodiscard]] const projection_type& wq() const noexcept { return wq_; }
  /// Key projection, kernel [d_model, n_kv_heads * head_dim].
  [[nodiscard]] const projection_type& wk() const noexcept { return wk_; }
  /// Value projection, kernel [d_model, n_kv_heads * head_dim].
  [[nodiscard]] const projection_type& wv() const noexcept { return wv_; }
  /// Output projection, kernel [n_heads * head_dim, d_model].
  [[nodiscard]] const projection_type& wo() const noexcept { return wo_; }
  /// The rotary embedding applied to q and k, if the config has one.
  [[nodiscard]] const std::optional<rotary_embedding>& rotary() const noexcept { return rotary_; }

  /// An empty key/value cache for inputs of element type `In`: `batch` rows, `capacity` positions,
  /// this layer's kv heads and head dimension, elements of the compute type.
  /// \throws std::invalid_argument if the cache's size in elements overflows (as the kv_cache constructor).
  template <class In>
  [[nodiscard]] cache_type<In> make_cache(std::size_t batch, std::size_t capacity) const {
    return cache_type<In>(batch, config_.n_kv_heads, config_.head_dim, capacity);
  }

  /// Self-attention over x [seq, d_model] or [batch, seq, d_model]: see the class comment.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    return forward(x, static_cast<no_cache*>(nullptr), static_cast<const no_mask*>(nullptr));
  }

  /// Self-attention with a key padding mask [seq] / [batch, seq] (true = real token).
  template <detail::layer_input X, detail::layer_input M>
  requires std::same_as < detail::value_t<M>,
  bool > [[nodiscard]] auto operator()(const X& x_in, const M& key_mask_in) const {
    const auto& x = detail::as_array(x_in);
    const auto& key_mask = detail::as_array(key_mask_in);
    return forward(x, static_cast<no_cache*>(nullptr), &key_mask);
  }

  /// `operator()(x)` or `operator()(x, key_mask)` (the same bits) that hands `probe` two sites inside
  /// the layer: `<site>.context`, the heads' attended values before the output projection in the
  /// compute type C, [rows, n_heads * head_dim], and `<site>.out`, the layer's output (after `wo`) in
  /// the output type — the out-projection the float16 scale planner reads
  /// (diagnostics/residual_scale_plan.hpp). Pass `no_key_mask` for no mask. With `null_probe` nothing
  /// is built or called.
  /// \throws std::invalid_argument as `operator()`, and whatever `probe.observe` throws.
  template <detail::layer_input X, class M, diagnostics::probe Probe>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto
      operator()(const X& x_in, const M& key_mask_in, Probe&& probe, std::string_view site) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    if constexpr (detail::attention_real_v<In>) {
      [[maybe_unused]] const auto& key_mask_view = [&]() -> decltype(auto) {
        if constexpr (std::same_as<M, no_key_mask_t>) {
          return (key_mask_in);
        } else {
          return detail::as_array(key_mask_in);
        }
      }();
      const auto* mask = [&] {
        if constexpr (std::same_as<M, no_key_mask_t>) {
          return static_cast<const no_mask*>(nullptr);
        } else {
          return &key_mask_view;
        }
      }();
      return forward_impl(x, static_cast<cache_type<In>*>(nullptr), mask, static_cast<saved<In>*>(nullptr), probe,
                          site);
    }
  }

  /// Attention of x's tokens over the cache and themselves; appends x's keys and values to `cache`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in, cache_type<detail::value_t<X>>& cache) const {
    const auto& x = detail::as_array(x_in);
    return forward(x, &cache, static_cast<const no_mask*>(nullptr));
  }

  /// As above, with a key padding mask for x's tokens (recorded in the cache for later steps).
  template <detail::layer_input X, detail::layer_input M>
  requires std::same_as < detail::value_t<M>,
  bool >
      [[nodiscard]] auto operator()(const X& x_in, cache_type<detail::value_t<X>>& cache, const M& key_mask_in) const {
    const auto& x = detail::as_array(x_in);
    const auto& key_mask = detail::as_array(key_mask_in);
    return forward(x, &cache, &key_mask);
  }

  /// `operator()(x, cache)` written into `out` (x's shape, element type `output_t<P, T>`), its
  /// buffers (q, k, v, the attended heads, the attention tiles) taken from `ws`: the same bits, and no
  /// heap allocation once `ws` has warmed up and the packed kernels are kept — a decode loop's call.
  /// \throws std::invalid_argument as `operator()(x, cache)`, or if out's shape is not x's.
  template <detail::layer_input X, detail::layer_array Y>
  void forward_into(Y& out, const X& x_in, cache_type<detail::value_t<X>>& cache, workspace& ws) const {
    const auto& x = detail::as_array(x_in);
    check_into<detail::value_t<X>, Y>();
    check_input(x, &cache, static_cast<const no_mask*>(nullptr));
    detail::check_output_shape("attention::forward_into", "out", out, x);
    diagnostics::null_probe none;
    attend_into(x, &cache, static_cast<const no_mask*>(nullptr), static_cast<saved<detail::value_t<X>>*>(nullptr), none,
                {}, out.data(), ws);
  }

  /// Self-attention `operator()(x)` written into `out` (x's shape), its buffers taken from `ws`. The
  /// keys and values of x still go to a cache made for the call (one allocation per call): a loop that
  /// must not allocate decodes with the cache form above.
  /// \throws std::invalid_argument as `operator()(x)`, or if out's shape is not x's.
  template <detail::layer_input X, detail::layer_array Y>
  void forward_into(Y& out, const X& x_in, workspace& ws) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    check_into<In, Y>();
    check_input(x, static_cast<const cache_type<In>*>(nullptr), static_cast<const no_mask*>(nullptr));
    detail::check_output_shape("attention::forward_into", "out", out, x);
    diagnostics::null_probe none;
    attend_into(x, static_cast<cache_type<In>*>(nullptr), static_cast<const no_mask*>(nullptr),
                static_cast<saved<In>*>(nullptr), none, {}, out.data(), ws);
  }

  // ---- training (docs/training.md, "Gradient formulas": FlashAttention-2's backward from a saved
  // log-sum-exp) ----

  using grad_type = grad_t<P>;  ///< element type of the parameter gradients

  /// The gradients of the four projections, float32 (float64 for float64 parameters).
  struct gradients {
    typename projection_type::gradients wq, wk, wv, wo;
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.wq, self.wk, self.wv, self.wo); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f(name, tensor)` with "wq.kernel", ("wq.bias"), "wk.kernel", ..., "wo.kernel": the order
    /// of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      walk_named(f, wq, wk, wv, wo);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      walk_named(f, wq, wk, wv, wo);
    }
  };

  /// What `backward` needs from a `forward` of inputs of element type T, C = `compute_t<P, T>`,
  /// A = `accumulator_t<C>`: x rounded to C (shared by wq, wk, wv), the post-RoPE queries and keys and
  /// the values [rows, width] in C, the attended heads as wo saw them, and one log-sum-exp of the
  /// scores per (batch, head, query) in A. Memory O(seq): no seq × seq matrix is kept.
  template <class T>
  struct saved {
    using compute_type = compute_t<P, T>;
    using opmath_type = accumulator_t<compute_type>;
    typename projection_type::template saved<T> in;                   ///< x rounded to C
    typename projection_type::template saved<compute_type> attended;  ///< concat of heads, rounded to C
    std::vector<compute_type> q, k, v;                                ///< [rows, n_heads|n_kv_heads * head_dim]
    std::vector<opmath_type> lse;  ///< [batch, n_heads, seq]; −Inf for a query with no visible key
    std::vector<bool> valid;       ///< [batch, seq] key validity; empty: every key is valid
    std::size_t batch = 0, seq = 0;
  };

  /// Calls `f(name, tensor)` on every parameter: "wq.kernel", ("wq.bias"), "wk.kernel", ..., "wo.kernel".
  template <class F>
  void for_each_parameter(F&& f) {
    walk_parameters(f, wq_, wk_, wv_, wo_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    walk_parameters(f, wq_, wk_, wv_, wo_);
  }
  /// Zero gradients shaped like the parameters.
  [[nodiscard]] gradients zero_gradients() const {
    return {wq_.zero_gradients(), wk_.zero_gradients(), wv_.zero_gradients(), wo_.zero_gradients()};
  }
  /// The projections, writable (an optimiser step, a checkpoint load). Shapes must not change.
  [[nodiscard]] projection_type& wq() noexcept { return wq_; }
  /// See `wq()`.
  [[nodiscard]] projection_type& wk() noexcept { return wk_; }
  /// See `wq()`.
  [[nodiscard]] projection_type& wv() noexcept { return wv_; }
  /// See `wq()`.
  [[nodiscard]] projection_type& wo() noexcept { return wo_; }

  /// Self-attention `operator()(x)`, saving in `ctx` what `backward` needs. Same result, bit for bit
  /// (one code path). No cache: training sees whole sequences.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    return forward_impl(x, static_cast<cache_type<detail::value_t<X>>*>(nullptr), static_cast<const no_mask*>(nullptr),
                        &ctx);
  }

  /// As above with a key padding mask [seq] / [batch, seq] (true = real token).
  template <detail::layer_input X, detail::layer_input M>
  requires std::same_as < detail::value_t<M>,
  bool > [[nodiscard]] auto forward(const X& x_in, const M& key_mask_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    const auto& key_mask = detail::as_array(key_mask_in);
    return forward_impl(x, static_cast<cache_type<detail::value_t<X>>*>(nullptr), &key_mask, &ctx);
  }

  /// The VJP of `forward` (FlashAttention-2, Dao 2023, Algorithm 2, one query row at a time): with
  /// dO = dy · woᵀ and D_i = Σ_e dO_ie O_ie, for each query i and visible key j of its kv head g,
  /// `s_ij = scale q_i · k_j`, `P_ij = exp(s_ij − lse_i)`, `dV_j += P_ij dO_i`, `dP_ij = dO_i · v_j`,
  /// `dS_ij = P_ij (dP_ij − D_i)`, `dQ_i += scale dS_ij k_j`, `dK_j += scale dS_ij q_i`, all in A (dK and
  /// dV sum over the query heads of a group); then RoPE's inverse rotation on dQ and dK, and the
  /// projections' backward: dx = dQ·Wqᵀ + dK·Wkᵀ + dV·Wvᵀ summed in A and rounded once to T (same kind
  /// of container as dy), parameter gradients added into `grads`. Masked keys get P = 0 exactly and
  /// contribute nothing even when their keys or values are Inf or NaN, or the cotangent of a query
  /// that does not see them is (so under `causal` a NaN in dy at position t reaches dx at positions
  /// <= t only). The gradient is that of the
  /// opmath softmax (with `softmax_precision::compute` the forward's roundings of scores and weights
  /// to C are not differentiated). Scratch: O(seq · heads · head_dim).
  /// \throws std::invalid_argument if dy's features or rows do not match the saved forward, `ctx` was not
  ///         saved by a forward of this layer's shape, or the gradients are not shaped like the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    using C = typename saved<T>::compute_type;
    using A = typename saved<T>::opmath_type;
    detail::check_features("attention::backward", dy, config_.d_model, "d_model");
    const std::size_t rows = ctx.batch * ctx.seq;
    detail::check_backward_rows("attention::backward", detail::leading_size(dy), rows);
    const std::size_t hd = config_.head_dim;
    const std::size_t n_heads = config_.n_heads;
    const std::size_t group = n_heads / config_.n_kv_heads;
    const std::size_t q_width = n_heads * hd;
    const std::size_t kv_width = config_.n_kv_heads * hd;
    const std::size_t seq = ctx.seq;
    if (ctx.q.size() != rows * q_width || ctx.k.size() != rows * kv_width || ctx.v.size() != rows * kv_width ||
        ctx.lse.size() != ctx.batch * n_heads * seq || ctx.attended.x.size() != rows * q_width ||
        ctx.in.x.size() != rows * config_.d_model || (!ctx.valid.empty() && ctx.valid.size() != rows)) {
      throw std::invalid_argument(internal::concat(
          "attention::backward: the saved context does not fit this layer (", ctx.q.size(), " query and ", ctx.k.size(),
          " key values for ", rows, " rows; the layer has ", n_heads, " heads and ", config_.n_kv_heads,
          " kv heads of dimension ", hd, "); pass the context filled by this layer's forward()"));
    }
    const A scale = static_cast<A>(*config_.scale);
    // dO [rows, q_width] = dy · woᵀ (and wo's gradients), in C as the next GEMMs read it.
    xt::xtensor<C, 2> dy2 = xt::xtensor<C, 2>::from_shape({rows, config_.d_model});
    internal::round_n<C>(dy.data(), dy.size(), dy2.data());
    const auto d_att = wo_.backward(ctx.attended, dy2, grads.wo);
    std::vector<A> dq(rows * q_width, A(0)), dk(rows * kv_width, A(0)), dv(rows * kv_width, A(0));
    using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Vec = Eigen::Matrix<A, Eigen::Dynamic, 1>;
    const std::size_t bq = std::min(config_.query_block, seq);
    const std::size_t bk = std::min(config_.key_block, seq);
    Mat kg, vg, dkg, dvg, qh, doh, dqh, sc, pr, dpr;
    Vec dd(static_cast<Eigen::Index>(seq));
    for (std::size_t b = 0; b < ctx.batch; ++b) {
      for (std::size_t g = 0; g < config_.n_kv_heads; ++g) {
        gather_head(ctx.k.data() + b * seq * kv_width, seq, kv_width, g * hd, hd, ctx.valid, b, kg);
        gather_head(ctx.v.data() + b * seq * kv_width, seq, kv_width, g * hd, hd, ctx.valid, b, vg);
        dkg.setZero(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
        dvg.setZero(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
        for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
          gather_head(ctx.q.data() + b * seq * q_width, seq, q_width, h * hd, hd, std::span<const bool>{}, b, qh);
          gather_head(d_att.data() + b * seq * q_width, seq, q_width, h * hd, hd, std::span<const bool>{}, b, doh);
          gather_head(ctx.attended.x.data() + b * seq * q_width, seq, q_width, h * hd, hd, std::span<const bool>{}, b,
                      dqh);
          dd = (doh.cwiseProduct(dqh)).rowwise().sum();  // D_i = Σ_e dO_ie O_ie
          dqh.setZero(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
          const A* lse = ctx.lse.data() + (b * n_heads + h) * seq;
          for (std::size_t i0 = 0; i0 < seq; i0 += bq) {
            const auto ni = static_cast<Eigen::Index>(std::min(bq, seq - i0));
            const auto ei0 = static_cast<Eigen::Index>(i0);
            // dO rows that are not finite (NaN or Inf in dy) take the dV product apart, below.
            const bool do_finite = doh.middleRows(ei0, ni).allFinite();
            for (std::size_t j0 = 0; j0 < seq; j0 += bk) {
              if (config_.causal && j0 > i0 + static_cast<std::size_t>(ni) - 1) break;  // tiles above the diagonal
              const auto nj = static_cast<Eigen::Index>(std::min(bk, seq - j0));
              const auto ej0 = static_cast<Eigen::Index>(j0);
              sc.noalias() = qh.middleRows(ei0, ni) * kg.middleRows(ej0, nj).transpose();
              pr.resize(ni, nj);
              for (Eigen::Index i = 0; i < ni; ++i) {
                const std::size_t qi = i0 + static_cast<std::size_t>(i);
                for (Eigen::Index j = 0; j < nj; ++j) {
                  const std::size_t kj = j0 + static_cast<std::size_t>(j);
                  const bool masked = (config_.causal && kj > qi) || std::isinf(lse[qi]) ||
                                      (!ctx.valid.empty() && !ctx.valid[b * seq + kj]);
                  pr(i, j) = masked ? A(0) : std::exp(scale * sc(i, j) - lse[qi]);
                }
              }
              if (do_finite) {
                dvg.middleRows(ej0, nj).noalias() += pr.transpose() * doh.middleRows(ei0, ni);
              } else {
                // 0 × NaN = NaN: a non-finite row of dO reaches only the keys its query sees (P ≠ 0), so
                // that masked keys get exactly nothing from it; the finite rows take the GEMM.
                Mat finite_do = doh.middleRows(ei0, ni);
                for (Eigen::Index i = 0; i < ni; ++i) {
                  if (finite_do.row(i).allFinite()) continue;
                  finite_do.row(i).setZero();
                  for (Eigen::Index j = 0; j < nj; ++j) {
                    if (pr(i, j) != A(0)) dvg.row(ej0 + j) += pr(i, j) * doh.row(ei0 + i);
                  }
                }
                dvg.middleRows(ej0, nj).noalias() += pr.transpose() * finite_do;
              }
              dpr.noalias() = doh.middleRows(ei0, ni) * vg.middleRows(ej0, nj).transpose();
              // dS = P ⊙ (dP − D); P = 0 exactly where masked, so masked keys contribute nothing.
              for (Eigen::Index i = 0; i < ni; ++i) {
                const A di = dd(ei0 + i);
                for (Eigen::Index j = 0; j < nj; ++j) pr(i, j) = pr(i, j) == A(0) ? A(0) : pr(i, j) * (dpr(i, j) - di);
              }
              dqh.middleRows(ei0, ni).noalias() += scale * (pr * kg.middleRows(ej0, nj));
              dkg.middleRows(ej0, nj).noalias() += scale * (pr.transpose() * qh.middleRows(ei0, ni));
            }
          }
          scatter_head(dqh, dq.data() + b * seq * q_width, seq, q_width, h * hd, hd);
        }
        scatter_head(dkg, dk.data() + b * seq * kv_width, seq, kv_width, g * hd, hd);
        scatter_head(dvg, dv.data() + b * seq * kv_width, seq, kv_width, g * hd, hd);
      }
    }
    if (rotary_) {
      for (std::size_t r = 0; r < rows; ++r) {
        rotary_->apply_inverse(std::span<A>(dq.data() + r * q_width, q_width), r % seq);
        rotary_->apply_inverse(std::span<A>(dk.data() + r * kv_width, kv_width), r % seq);
      }
    }
    std::vector<A> dx_acc(rows * config_.d_model, A(0));
    wq_.backward_accumulate(ctx.in, std::span<const A>(dq), grads.wq, std::span<A>(dx_acc));
    wk_.backward_accumulate(ctx.in, std::span<const A>(dk), grads.wk, std::span<A>(dx_acc));
    wv_.backward_accumulate(ctx.in, std::span<const A>(dv), grads.wv, std::span<A>(dx_acc));
    auto dx = detail::make_like<T>(dy, config_.d_model);
    for (std::size_t i = 0; i < dx_acc.size(); ++i) dx.data()[i] = internal::round_out<T>(dx_acc[i]);
    return dx;
  }

 private:
  template <class F, class... G>
  static void walk_named(F& f, G&... parts) {
    const char* names[] = {"wq.", "wk.", "wv.", "wo."};
    std::size_t i = 0;
    (parts.for_each([&f, prefix = std::string(names[i++])](std::string_view name, auto& t) {
      f(std::string_view(prefix + std::string(name)), t);
    }),
     ...);
  }
  template <class F, class... D>
  static void walk_parameters(F& f, D&... parts) {
    const char* names[] = {"wq.", "wk.", "wv.", "wo."};
    std::size_t i = 0;
    (parts.for_each_parameter([&f, prefix = std::string(names[i++])](std::string_view name, auto& t) {
      f(std::string_view(prefix + std::string(name)), t);
    }),
     ...);
  }

  struct resolved_tag {};
  struct no_cache {};
  using no_mask = xt::xtensor<bool, 1>;

  attention(const attention_config& c, use_bias bias, resolved_tag)
      : attention(c, projection_type(c.d_model, c.n_heads * c.head_dim, bias),
                  projection_type(c.d_model, c.n_kv_heads * c.head_dim, bias),
                  projection_type(c.d_model, c.n_kv_heads * c.head_dim, bias),
                  projection_type(c.n_heads * c.head_dim, c.d_model, bias)) {}

  static void check_projection(const char* name, const projection_type& p, std::size_t in, std::size_t out,
                               const char* formula) {
    if (p.in_features() != in || p.out_features() != out) {
      throw std::invalid_argument(std::string("attention: ") + name + " has kernel shape " +
                                  detail::shape_string(p.kernel().shape()) + " ([in, out]) but the config needs " +
                                  formula + " = " + detail::attention_dims_string({in, out}));
    }
  }

  /// y = x · kernel (+ bias) for `rows` rows, in compute type C, rounded once to y's type.
  template <class C, class In, class Out>
  static void project(const projection_type& p, std::span<const In> x, std::size_t rows, std::span<Out> y) {
    p.template project<C>(x, rows, y);
  }

  /// Checks the element type first, so that a complex input stops at one clear message.
  template <class X, class Cache, class M>
  auto forward(const X& x, Cache* cache, const M* key_mask) const {
    using In = detail::value_t<X>;
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    if constexpr (detail::attention_real_v<In>) {
      if constexpr (std::same_as<Cache, no_cache>) {
        return forward_impl(x, static_cast<cache_type<In>*>(nullptr), key_mask, static_cast<saved<In>*>(nullptr));
      } else {
        return forward_impl(x, cache, key_mask, static_cast<saved<In>*>(nullptr));
      }
    }
  }

  template <class X, class M>
  auto forward_impl(const X& x, cache_type<detail::value_t<X>>* cache, const M* key_mask,
                    saved<detail::value_t<X>>* ctx) const {
    diagnostics::null_probe none;
    return forward_impl(x, cache, key_mask, ctx, none, {});
  }

  template <class X, class M, class Probe>
  auto forward_impl(const X& x, cache_type<detail::value_t<X>>* cache, const M* key_mask,
                    saved<detail::value_t<X>>* ctx, Probe& probe, std::string_view site) const {
    using In = detail::value_t<X>;
    using C = compute_t<P, In>;
    using O = output_t<P, In>;
    static_assert(detail::attention_real_v<C>,
                  "nn::attention: the compute type must be real (float, double or a mixprec small float).");

    check_input(x, cache, key_mask);
    auto y = detail::make_like<O>(x, config_.d_model);
    workspace ws{workspace::per_call};
    attend_into(x, cache, key_mask, ctx, probe, site, y.data(), ws);
    return y;
  }

  /// The element types a `forward_into` call needs: a real input, and out in `output_t<P, In>`.
  template <class In, class Y>
  static constexpr void check_into() {
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, In>>,
                  "attention::forward_into: out's element type must be output_t<P, T> of the layer's policy P for "
                  "x's element type T; make out with that type, or use the value-returning call.");
  }

  /// The checks of `forward_impl`: x's rank and features, the key mask's shape, the cache's shape and room.
  template <class X, class M>
  void check_input(const X& x, const cache_type<detail::value_t<X>>* cache, const M* key_mask) const {
    const auto& shape = x.shape();
    const std::size_t rank = shape.size();
    if constexpr (X::rank != SIZE_MAX) {  // xt::xtensor<In, N>; xt::xarray's rank is dynamic (SIZE_MAX)
      static_assert(X::rank == 2 || X::rank == 3,
                    "nn::attention takes x of shape [seq, d_model] (rank 2) or [batch, seq, d_model] (rank 3).");
    }
    if (rank != 2 && rank != 3) {
      throw std::invalid_argument("attention: input has shape " + detail::shape_string(shape) +
                                  " but the layer takes [seq, d_model] or [batch, seq, d_model] with d_model = " +
                                  std::to_string(config_.d_model));
    }
    detail::check_features("attention", x, config_.d_model, [&] {
      return "d_model; wq kernel shape " + detail::shape_string(wq_.kernel().shape()) +
             " = [d_model, n_heads * head_dim]";
    });
    const std::size_t batch = rank == 3 ? shape[0] : 1;
    const std::size_t seq = shape[rank - 2];
    if (key_mask != nullptr) {
      const auto& ms = key_mask->shape();
      if (ms.size() != rank - 1 || !std::equal(ms.begin(), ms.end(), shape.begin())) {
        const std::string want =
            rank == 3 ? detail::attention_dims_string({batch, seq}) : detail::attention_dims_string({seq});
        throw std::invalid_argument("attention: the key padding mask has shape " + detail::shape_string(ms) +
                                    " but the input " + detail::shape_string(shape) + " needs " + want +
                                    " (x's shape without d_model; true = real token, false = padding)");
      }
    }
    const std::size_t hd = config_.head_dim;
    if (cache != nullptr &&
        (cache->batch() != batch || cache->n_kv_heads() != config_.n_kv_heads || cache->head_dim() != hd)) {
      throw std::invalid_argument(
          "attention: the kv_cache has batch " + std::to_string(cache->batch()) + ", " +
          std::to_string(cache->n_kv_heads()) + " kv heads of dimension " + std::to_string(cache->head_dim()) +
          " (keys [batch, n_kv_heads, capacity, head_dim] = " +
          detail::attention_dims_string({cache->batch(), cache->n_kv_heads(), cache->capacity(), cache->head_dim()}) +
          ") but the input " + detail::shape_string(shape) + " has batch " + std::to_string(batch) + " and the layer " +
          std::to_string(config_.n_kv_heads) + " kv heads of dimension " + std::to_string(hd) +
          "; build the cache with make_cache<In>(batch, capacity).");
    }
    if (cache != nullptr && seq > cache->capacity() - cache->size()) {
      throw std::invalid_argument("attention: the input " + detail::shape_string(shape) + " has " +
                                  std::to_string(seq) + " tokens but the kv_cache holds " +
                                  std::to_string(cache->size()) + " of its " + std::to_string(cache->capacity()) +
                                  " positions; use a cache with a larger capacity, or clear() it.");
    }
  }

  /// The forward pass of x [batch, seq, d_model] into y_data (x's shape), its buffers taken from `ws`
  /// (kept in `ctx` when training). x is checked by the caller.
  template <class X, class M, class Probe>
  void attend_into(const X& x, cache_type<detail::value_t<X>>* cache, const M* key_mask, saved<detail::value_t<X>>* ctx,
                   Probe& probe, std::string_view site, output_t<P, detail::value_t<X>>* y_data, workspace& ws) const {
    using In = detail::value_t<X>;
    using C = compute_t<P, In>;
    using O = output_t<P, In>;
    const auto& shape = x.shape();
    const std::size_t rank = shape.size();
    const std::size_t batch = rank == 3 ? shape[0] : 1;
    const std::size_t seq = shape[rank - 2];
    const std::size_t hd = config_.head_dim;
    const std::size_t q_width = config_.n_heads * hd;
    const std::size_t kv_width = config_.n_kv_heads * hd;
    const std::size_t rows = batch * seq;
    const std::span<const In> xs(x.data(), x.size());
    const workspace::frame frame(ws);
    // Training keeps q, k, v and the context for backward (moved into ctx); inference takes them from ws.
    std::vector<C> q_kept, k_kept, v_kept, attended_kept;
    std::span<C> q, k, v, attended;
    if (ctx != nullptr) {
      q_kept.resize(rows * q_width);
      k_kept.resize(rows * kv_width);
      v_kept.resize(rows * kv_width);
      attended_kept.resize(rows * q_width);
      q = q_kept;
      k = k_kept;
      v = v_kept;
      attended = attended_kept;
    } else {
      q = ws.take<C>(rows * q_width);
      k = ws.take<C>(rows * kv_width);
      v = ws.take<C>(rows * kv_width);
      attended = ws.take<C>(rows * q_width);
    }
    if (ctx != nullptr) {
      // Training: x rounded to C once and kept; the projections read it (the same operand values, so
      // the same bits as reading x).
      ctx->in.rows = rows;
      ctx->in.x.resize(x.size());
      internal::round_n<C>(x.data(), x.size(), ctx->in.x.data());
      const std::span<const C> xc(ctx->in.x);
      project<C>(wq_, xc, rows, std::span<C>(q));
      project<C>(wk_, xc, rows, std::span<C>(k));
      project<C>(wv_, xc, rows, std::span<C>(v));
    } else {
      project<C>(wq_, xs, rows, std::span<C>(q));
      project<C>(wk_, xs, rows, std::span<C>(k));
      project<C>(wv_, xs, rows, std::span<C>(v));
    }

    const std::size_t start = cache != nullptr ? cache->size() : 0;
    if (rotary_) {
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t position = start + r % seq;  // rows > 0 here, so seq > 0
        rotary_->apply(std::span<C>(q.data() + r * q_width, q_width), position);
        rotary_->apply(std::span<C>(k.data() + r * kv_width, kv_width), position);
      }
    }

    std::optional<kv_cache<C>> local;
    kv_cache<C>& kv = cache != nullptr ? *cache : local.emplace(batch, config_.n_kv_heads, hd, seq);
    std::span<const bool> valid;
    if (key_mask != nullptr) valid = std::span<const bool>(key_mask->data(), key_mask->size());
    kv.append(std::span<const C>(k), std::span<const C>(v), seq, valid);

    scaled_dot_product_attention<C>(std::span<const C>(q), kv, seq, config_, attended, ws);

    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      probe.observe(internal::concat(site, ".context"), std::span<const C>(attended));
    }
    const std::span<O> y(y_data, rows * config_.d_model);
    project<C>(wo_, std::span<const C>(attended), rows, y);
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      probe.observe(internal::concat(site, ".out"), std::span<const O>(y));
    }
    if (ctx != nullptr) {
      save_for_backward(*ctx, batch, seq, std::move(q_kept), std::move(k_kept), std::move(v_kept),
                        std::move(attended_kept), valid);
    }
  }

  /// Copies head columns [col, col + hd) of `seq` rows of stride `width` into `out` [seq, hd] in A;
  /// rows of padding keys (`valid[b * seq + j]` false) are zero, so they cannot poison a tile's GEMMs.
  template <class C, class Valid, class Mat>
  static void gather_head(const C* src, std::size_t seq, std::size_t width, std::size_t col, std::size_t hd,
                          const Valid& valid, std::size_t b, Mat& out) {
    out.resize(static_cast<Eigen::Index>(seq), static_cast<Eigen::Index>(hd));
    for (std::size_t j = 0; j < seq; ++j) {
      const bool keep = valid.empty() || valid[b * seq + j];
      for (std::size_t e = 0; e < hd; ++e) {
        out(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(e)) =
            keep ? internal::widen(src[j * width + col + e]) : typename Mat::Scalar(0);
      }
    }
  }

  /// Adds `in` [seq, hd] into head columns [col, col + hd) of `seq` rows of stride `width`.
  template <class Mat, class A>
  static void scatter_head(const Mat& in, A* dst, std::size_t seq, std::size_t width, std::size_t col, std::size_t hd) {
    for (std::size_t j = 0; j < seq; ++j) {
      for (std::size_t e = 0; e < hd; ++e) {
        dst[j * width + col + e] += in(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(e));
      }
    }
  }

  /// Fills the training context after a forward: the tensors, and each query's log-sum-exp of its
  /// visible scores, in A (recomputed here in one pass per query: the tiled forward keeps only
  /// running values).
  template <class T, class C>
  void save_for_backward(saved<T>& ctx, std::size_t batch, std::size_t seq, std::vector<C> q, std::vector<C> k,
                         std::vector<C> v, std::vector<C> attended, std::span<const bool> valid) const {
    using A = accumulator_t<C>;
    const std::size_t hd = config_.head_dim;
    const std::size_t n_heads = config_.n_heads;
    const std::size_t group = n_heads / config_.n_kv_heads;
    const std::size_t q_width = n_heads * hd;
    const std::size_t kv_width = config_.n_kv_heads * hd;
    const A scale = static_cast<A>(*config_.scale);
    ctx.batch = batch;
    ctx.seq = seq;
    ctx.valid.assign(valid.begin(), valid.end());
    ctx.lse.assign(batch * n_heads * seq, -std::numeric_limits<A>::infinity());
    using Mat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const std::size_t bq = std::min(config_.query_block, seq);
    const std::size_t bk = std::min(config_.key_block, seq);
    Mat kg, qh, sc;
    std::vector<A> m(seq), l(seq);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t g = 0; g < config_.n_kv_heads; ++g) {
        gather_head(k.data() + b * seq * kv_width, seq, kv_width, g * hd, hd, valid, b, kg);
        for (std::size_t h = g * group; h < (g + 1) * group; ++h) {
          gather_head(q.data() + b * seq * q_width, seq, q_width, h * hd, hd, std::span<const bool>{}, b, qh);
          std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
          std::fill(l.begin(), l.end(), A(0));
          for (std::size_t i0 = 0; i0 < seq; i0 += bq) {
            const auto ni = static_cast<Eigen::Index>(std::min(bq, seq - i0));
            for (std::size_t j0 = 0; j0 < seq; j0 += bk) {
              if (config_.causal && j0 > i0 + static_cast<std::size_t>(ni) - 1) break;
              const auto nj = static_cast<Eigen::Index>(std::min(bk, seq - j0));
              sc.noalias() = scale * (qh.middleRows(static_cast<Eigen::Index>(i0), ni) *
                                      kg.middleRows(static_cast<Eigen::Index>(j0), nj).transpose());
              for (Eigen::Index i = 0; i < ni; ++i) {
                const std::size_t qi = i0 + static_cast<std::size_t>(i);
                for (Eigen::Index j = 0; j < nj; ++j) {
                  const std::size_t kj = j0 + static_cast<std::size_t>(j);
                  if ((config_.causal && kj > qi) || (!valid.empty() && !valid[b * seq + kj])) continue;
                  const A s = sc(i, j);
                  if (s > m[qi]) {  // online log-sum-exp: rescale the running sum to the new maximum
                    l[qi] = l[qi] * std::exp(m[qi] - s) + A(1);
                    m[qi] = s;
                  } else {
                    l[qi] += std::exp(s - m[qi]);
                  }
                }
              }
            }
          }
          for (std::size_t i = 0; i < seq; ++i) {
            if (l[i] > A(0) && !std::isinf(m[i])) ctx.lse[(b * n_heads + h) * seq + i] = m[i] + std::log(l[i]);
          }
        }
      }
    }
    ctx.attended.rows = batch * seq;
    ctx.attended.x = std::move(attended);
    ctx.q = std::move(q);
    ctx.k = std::move(k);
    ctx.v = std::move(v);
  }

  attention_config config_;
  projection_type wq_;
  projection_type wk_;
  projection_type wv_;
  projection_type wo_;
  std::optional<rotary_embedding> rotary_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<attention> = "mixprec::nn::attention";
}  // namespace detail

/// attention, multi-head self-attention, with its policy taken from the `policy_scope` live at construction: one of the
/// listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members). Constructed with `attention<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class attention<from_scope<Ps...>> : public detail::scoped_layer<attention, Ps...> {
 public:
  using detail::scoped_layer<attention, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
