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
/// **Tiling** (`kernels::attention`, kernels/attention.hpp): FlashAttention's loop over tiles of
/// `query_block` queries × `key_block` keys, whose scratch does not grow with the sequence
/// (`attention_workspace::elements`); only the O(seq) buffers q, k, v, the attended heads and the cache
/// do. A query sees its keys in the same tiles whether it comes in a long prompt or alone during
/// decoding. The backward is `kernels::attention_backward` (FlashAttention-2's).
///
/// **Masks**: a fully masked query row (e.g. a padding query under left padding and a causal mask)
/// attends to nothing and outputs zeros (before the output projection; y is then the bias bo, or 0),
/// never NaN. A masked key contributes exactly nothing, whatever its key and value hold (Inf and NaN
/// included), to the output and to the gradients.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/attention.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/kernels/score_bias.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/kv_cache.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/rotary.hpp"
#include "mixprec/nn/scaled_dot_product_attention.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

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
  /// The score bias for inputs of element type `In` (kernels/score_bias.hpp), in the opmath of their
  /// compute type: float32 for float32, bfloat16 and float16 compute, float64 for float64.
  template <class In>
  using bias_type = kernels::score_bias<accumulator_t<compute_t<P, In>>>;

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
    return with_mask<In>(key_mask_in, [&](const auto* mask) {
      return forward_impl(x, static_cast<cache_type<In>*>(nullptr), mask, static_cast<saved<In>*>(nullptr), probe,
                          site);
    });
  }

  /// Self-attention with an additive score bias (T5's relative position bias, ALiBi, a stored mask of
  /// floats): scale · q · k + bias before the masks and the softmax (kernels/score_bias.hpp). `bias` is
  /// dense [batch or 1, heads or 1, seq, seq] or relative [heads or 1, 2 seq − 1], in opmath; pass
  /// `no_key_mask` for no key padding mask. A masked key stays masked whatever its bias.
  /// \throws std::invalid_argument as `operator()`, or when the bias does not fit the call.
  template <detail::layer_input X, class M>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto
      operator()(const X& x_in, const M& key_mask_in, const bias_type<detail::value_t<X>>& bias) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    return with_mask<In>(key_mask_in, [&](const auto* mask) {
      diagnostics::null_probe none;
      return forward_impl(x, static_cast<cache_type<In>*>(nullptr), mask, static_cast<saved<In>*>(nullptr), none, {},
                          bias);
    });
  }

  /// `operator()(x, key_mask, bias)` (the same bits) that hands `probe` the sites `<site>.context` and
  /// `<site>.out`, as the unbiased probed call does.
  /// \throws std::invalid_argument as `operator()(x, key_mask, bias)`, and whatever `probe.observe` throws.
  template <detail::layer_input X, class M, diagnostics::probe Probe>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto
      operator()(const X& x_in, const M& key_mask_in, const bias_type<detail::value_t<X>>& bias, Probe&& probe,
                 std::string_view site) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    return with_mask<In>(key_mask_in, [&](const auto* mask) {
      return forward_impl(x, static_cast<cache_type<In>*>(nullptr), mask, static_cast<saved<In>*>(nullptr), probe, site,
                          bias);
    });
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

  /// Attention of x's tokens over the cache and themselves with a score bias over every cached key: dense
  /// [batch or 1, heads or 1, seq, cache.size() + seq] or relative [heads or 1, 2 (cache.size() + seq) − 1]
  /// (a decoder's relative position bias, its rows for the keys after this call's append).
  /// \throws std::invalid_argument as `operator()(x, cache)`, or when the bias does not fit the call.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in, cache_type<detail::value_t<X>>& cache,
                                const bias_type<detail::value_t<X>>& bias) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    diagnostics::null_probe none;
    return forward_impl(x, &cache, static_cast<const no_mask*>(nullptr), static_cast<saved<In>*>(nullptr), none, {},
                        bias);
  }

  /// `operator()(x, cache)` written into `out` (x's shape, element type `output_t<P, T>`), its
  /// buffers (q, k, v, the attended heads, the attention tiles) taken from `ws`: the same bits, and no
  /// heap allocation once `ws` has warmed up and the packed kernels are kept — a decode loop's call.
  /// \throws std::invalid_argument as `operator()(x, cache)`, or if out's shape is not x's.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, cache_type<detail::value_t<X>>& cache, workspace& ws) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
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
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, workspace& ws) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
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
    std::vector<opmath_type> lse;     ///< [batch, n_heads, seq]; −Inf for a query with no visible key
    std::vector<std::uint8_t> valid;  ///< [batch, seq] key validity (0 = padding); empty: every key is valid
    std::size_t batch = 0, seq = 0;
    /// The forward's score bias, copied (the caller's buffer need not outlive the forward), and its layout.
    std::vector<opmath_type> bias_values;
    kernels::score_bias_layout bias_layout{};
    /// Cross-attention (`cross_forward`): the context rounded to C (shared by wk and wv), and its
    /// positions per batch row; `keys` is 0 for self-attention, whose keys are x's own.
    typename projection_type::template saved<T> context;
    std::size_t keys = 0;

    /// The saved score bias as the kernels read it.
    [[nodiscard]] kernels::score_bias<opmath_type> bias() const noexcept { return {bias_layout, bias_values}; }
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

  /// As above with a key padding mask (or `no_key_mask`) and a score bias (see `operator()(x, mask,
  /// bias)`); `ctx` keeps a copy of the bias, and `backward(ctx, dy, grads, d_bias)` gives its gradient.
  /// \throws std::invalid_argument as `operator()(x, mask, bias)`.
  template <detail::layer_input X, class M>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto forward(const X& x_in, const M& key_mask_in, const bias_type<detail::value_t<X>>& bias,
                                 saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    using In = detail::value_t<X>;
    return with_mask<In>(key_mask_in, [&](const auto* mask) {
      diagnostics::null_probe none;
      return forward_impl(x, static_cast<cache_type<In>*>(nullptr), mask, &ctx, none, {}, bias);
    });
  }

  /// The VJP of `forward`: dO = dy · woᵀ (wo's gradients added), dQ, dK and dV from
  /// `kernels::attention_backward` (FlashAttention-2's backward from the saved log-sum-exps, in A; masked
  /// keys get exactly nothing, so under `causal` a NaN in dy at position t reaches dx at positions <= t
  /// only), RoPE's inverse rotation on dQ and dK, and the projections' backward: dx = dQ·Wqᵀ + dK·Wkᵀ +
  /// dV·Wvᵀ summed in A and rounded once to T (same kind of container as dy), parameter gradients added
  /// into `grads`. The gradient is that of the opmath softmax (with `softmax_precision::compute` the
  /// forward's roundings of scores and weights to C are not differentiated). Scratch: O(seq · heads ·
  /// head_dim).
  /// \throws std::invalid_argument if dy's features or rows do not match the saved forward, `ctx` was not
  ///         saved by a forward of this layer's shape, or the gradients are not shaped like the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    check_backward(ctx, dy, "attention::backward");
    auto dx = detail::make_like<T>(dy, config_.d_model);
    backward_to(ctx, dy, grads, dx.data(), {});
    return dx;
  }

  /// `backward(ctx, dy, grads)` that also adds the gradient of the forward's score bias into `d_bias`,
  /// laid out as the bias was (summed over what it is broadcast over; for a relative bias, over the
  /// (query, key) pairs at each distance: `relative_position_bias::backward` then maps it to the table).
  /// The bias enters the scores unscaled: d_bias = dS = P ⊙ (dP − D) (kernels::attention_backward).
  /// \throws std::invalid_argument as `backward`, or when d_bias is not shaped as the saved bias (checked
  ///         before anything is added).
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads,
                              std::span<typename saved<T>::opmath_type> d_bias) const {
    const auto& dy = detail::as_array(dy_in);
    check_backward(ctx, dy, "attention::backward");
    (void)kernels::check_score_bias("attention::backward", "d_bias (shaped as the forward's bias)", ctx.bias_layout,
                                    d_bias.size(), ctx.batch, config_.n_heads, ctx.seq, ctx.seq, true);
    auto dx = detail::make_like<T>(dy, config_.d_model);
    backward_to(ctx, dy, grads, dx.data(), d_bias);
    return dx;
  }

  /// `backward(ctx, dy, grads)` writing dx into `dx_out` [..., d_model] (dy's shape; element type T, the
  /// forward input's; a caller's buffer — `xt::xtensor`, `xt::adapt`, a RowMajor `Eigen::Map` — not
  /// overlapping dy): the same bits, and dx is not allocated.
  /// \throws std::invalid_argument as `backward`, or if dx_out's shape is not dy's (checked before
  ///   anything is added to `grads`).
  template <class T, detail::layer_input DY, detail::layer_output DXOut>
  void backward_into(DXOut& dx_out, const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    detail::backward_into<T>(
        "attention::backward_into", dx_out, dy_in, config_.d_model,
        [&](const auto& dy) { check_backward(ctx, dy, "attention::backward_into"); },
        [&](const auto& dy, auto& dx) { backward_to(ctx, dy, grads, dx.data(), {}); });
  }

  // ---- cross-attention (T5's EncDecAttention: queries from the decoder, keys and values from the encoder) ----

  /// Cross-attention of x [batch, seq, d_model] (or [seq, d_model]) over `context` [batch, keys, d_model]
  /// (the same rank and batch, its own length; the same element type): q = x · Wq, k = context · Wk,
  /// v = context · Wv, then the tiled attention with no causal mask and no position encoding (the
  /// config must have neither: T5's cross-attention has no position bias), y = attended · Wo.
  /// `context_mask` [keys] / [batch, keys] marks the context's padding (or `no_key_mask`); a query whose
  /// context is all padding outputs zeros before Wo. Output: x's shape, `output_t<P, In>`.
  /// \throws std::invalid_argument when the config is causal or rotary, the ranks, batches or features do
  ///         not match, or the mask is not the context's shape without d_model.
  template <detail::layer_input X, detail::layer_input Ctx, class M>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto cross(const X& x_in, const Ctx& context_in, const M& context_mask_in) const {
    diagnostics::null_probe none;
    return cross_call(x_in, context_in, context_mask_in, static_cast<saved<detail::value_t<X>>*>(nullptr), none, {});
  }

  /// `cross(x, context, context_mask)` (the same bits) that hands `probe` the sites `<site>.context` (the
  /// attended heads before Wo, in C) and `<site>.out` (after Wo), as self-attention's probed call does.
  /// \throws std::invalid_argument as `cross`, and whatever `probe.observe` throws.
  template <detail::layer_input X, detail::layer_input Ctx, class M, diagnostics::probe Probe>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto cross(const X& x_in, const Ctx& context_in, const M& context_mask_in, Probe&& probe,
                               std::string_view site) const {
    return cross_call(x_in, context_in, context_mask_in, static_cast<saved<detail::value_t<X>>*>(nullptr), probe, site);
  }

  /// `cross(x, context, context_mask)`, saving in `ctx` what `cross_backward` needs. The same bits.
  /// \throws std::invalid_argument as `cross`.
  template <detail::layer_input X, detail::layer_input Ctx, class M>
  requires(std::same_as<M, no_key_mask_t> || (detail::layer_input<M> && std::same_as<detail::value_t<M>, bool>))
      [[nodiscard]] auto cross_forward(const X& x_in, const Ctx& context_in, const M& context_mask_in,
                                       saved<detail::value_t<X>>& ctx) const {
    diagnostics::null_probe none;
    return cross_call(x_in, context_in, context_mask_in, &ctx, none, {});
  }

  /// Projects `context` [batch, keys, d_model] (or [keys, d_model]) into `cache`'s keys and values once per
  /// sequence, for decoding with `cross(x, cache)`: the cache is cleared, then holds the context's keys
  /// and values and its validity (`context_mask`, or `no_key_mask`). Make the cache with
  /// `make_cache<In>(batch, keys)`. The same keys and values, bit for bit, as `cross` computes.
  /// \throws std::invalid_argument when the config is causal or rotary, the context's features or the
  ///         mask's shape do not match, or the cache's batch, heads or capacity do not fit the context.
  template <detail::layer_input Ctx, class M>
  requires(std::same_as<M, no_key_mask_t> ||
           (detail::layer_input<M> &&
            std::same_as<detail::value_t<M>, bool>)) void fill_context(const Ctx& context_in, const M& context_mask_in,
                                                                       cache_type<detail::value_t<Ctx>>& cache) const {
    using In = detail::value_t<Ctx>;
    using C = compute_t<P, In>;
    const auto& context = detail::as_array(context_in);
    check_cross_config("attention::fill_context");
    with_mask<In>(context_mask_in, [&](const auto* mask) {
      const auto [batch, keys] = check_context("attention::fill_context", context, mask,
                                               static_cast<const std::remove_cvref_t<decltype(context)>*>(nullptr));
      if (cache.batch() != batch || cache.n_kv_heads() != config_.n_kv_heads || cache.head_dim() != config_.head_dim ||
          cache.capacity() < keys) {
        throw std::invalid_argument(internal::concat(
            "attention::fill_context: the kv_cache has batch ", cache.batch(), ", ", cache.n_kv_heads(),
            " kv heads of dimension ", cache.head_dim(), " and capacity ", cache.capacity(), " but the context ",
            detail::shape_string(context.shape()), " needs batch ", batch, ", ", config_.n_kv_heads,
            " kv heads of dimension ", config_.head_dim, " and ", keys, " positions; make it with make_cache<In>(",
            batch, ", ", keys, ")"));
      }
      const std::size_t kv_width = config_.n_kv_heads * config_.head_dim;
      std::vector<C> k(batch * keys * kv_width), v(batch * keys * kv_width);
      const std::span<const In> cs(context.data(), context.size());
      project<C>(wk_, cs, batch * keys, std::span<C>(k));
      project<C>(wv_, cs, batch * keys, std::span<C>(v));
      std::span<const bool> valid;
      if (mask != nullptr) valid = std::span<const bool>(mask->data(), mask->size());
      cache.clear();
      cache.append(std::span<const C>(k), std::span<const C>(v), keys, valid);
      return 0;
    });
  }

  /// Cross-attention of x [batch, seq, d_model] over the context keys and values that `fill_context`
  /// put in `cache` (read, not changed): a decoder step's cross-attention. The same bits as
  /// `cross(x, context, context_mask)` for the same x.
  /// \throws std::invalid_argument when the config is causal or rotary, x's features do not match, the
  ///         cache's batch or heads are not x's and the layer's, or the cache is empty.
  template <detail::layer_input X>
  [[nodiscard]] auto cross(const X& x_in, const cache_type<detail::value_t<X>>& cache) const {
    using In = detail::value_t<X>;
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    const auto& x = detail::as_array(x_in);
    check_cross_config("attention::cross");
    check_input(x, static_cast<const cache_type<In>*>(nullptr), static_cast<const no_mask*>(nullptr));
    const std::size_t batch = x.shape().size() == 3 ? x.shape()[0] : 1;
    if (cache.batch() != batch || cache.n_kv_heads() != config_.n_kv_heads || cache.head_dim() != config_.head_dim ||
        cache.empty()) {
      throw std::invalid_argument(
          internal::concat("attention::cross: the kv_cache has batch ", cache.batch(), ", ", cache.n_kv_heads(),
                           " kv heads of dimension ", cache.head_dim(), " and ", cache.size(), " positions but x ",
                           detail::shape_string(x.shape()), " and the layer need batch ", batch, ", ",
                           config_.n_kv_heads, " kv heads of dimension ", config_.head_dim,
                           " and at least one position; fill it with fill_context(context, mask, cache)"));
    }
    auto y = detail::make_like<output_t<P, In>>(x, config_.d_model);
    diagnostics::null_probe none;
    cross_into(x, static_cast<const std::remove_cvref_t<decltype(x)>*>(nullptr), static_cast<const no_mask*>(nullptr),
               &cache, static_cast<saved<In>*>(nullptr), y.data(), none, {});
    return y;
  }

  /// The gradients of a cross-attention forward: dx (x's shape) and d_context (the context's shape), in
  /// the forward input's type T.
  template <class DX>
  struct cross_cotangents {
    DX dx;         ///< [..., seq, d_model]: through the queries
    DX d_context;  ///< [..., keys, d_model]: through the keys and values
  };

  /// The VJP of `cross_forward`: dO = dy · Woᵀ, then `kernels::attention_backward` over the context's
  /// keys (masked ones get exactly nothing), dx = dQ · Wqᵀ and d_context = dK · Wkᵀ + dV · Wvᵀ, each summed
  /// in A and rounded once to T; the four projections' gradients added into `grads`.
  /// \throws std::invalid_argument if dy's features or rows do not match the saved forward, or `ctx` was
  ///         not saved by `cross_forward` of this layer.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto cross_backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const internal::profile_scope region("nn::attention.cross_backward");
    using A = typename saved<T>::opmath_type;
    const auto& dy = detail::as_array(dy_in);
    if (ctx.keys == 0) {
      throw std::invalid_argument(
          "attention::cross_backward: the context was saved by a self-attention forward; pass it to backward()");
    }
    check_backward(ctx, dy, "attention::cross_backward", true);
    const std::size_t rows = ctx.batch * ctx.seq;
    const std::size_t kv_rows = ctx.batch * ctx.keys;
    auto [dq, dk, dv] = head_cotangents(ctx, dy, grads, {});
    std::vector<A> dx_acc(rows * config_.d_model, A(0)), dc_acc(kv_rows * config_.d_model, A(0));
    wq_.backward_accumulate(ctx.in, std::span<const A>(dq), grads.wq, std::span<A>(dx_acc));
    wk_.backward_accumulate(ctx.context, std::span<const A>(dk), grads.wk, std::span<A>(dc_acc));
    wv_.backward_accumulate(ctx.context, std::span<const A>(dv), grads.wv, std::span<A>(dc_acc));
    auto dx = detail::make_like<T>(dy, config_.d_model);
    for (std::size_t i = 0; i < dx_acc.size(); ++i) dx.data()[i] = internal::round_out<T>(dx_acc[i]);
    // d_context: dy's kind of container with the context's leading axes.
    using DX = decltype(dx);
    DX dc;
    if (dy.shape().size() == 3) {
      dc = DX::from_shape({ctx.batch, ctx.keys, config_.d_model});
    } else {
      dc = DX::from_shape({ctx.keys, config_.d_model});
    }
    for (std::size_t i = 0; i < dc_acc.size(); ++i) dc.data()[i] = internal::round_out<T>(dc_acc[i]);
    return cross_cotangents<DX>{std::move(dx), std::move(dc)};
  }

 private:
  /// Cross-attention needs a config with no causal mask and no rotary embedding.
  void check_cross_config(const char* where) const {
    if (config_.causal || config_.rotary) {
      throw std::invalid_argument(internal::concat(
          where, ": the layer's config is ", config_.causal ? "causal" : "rotary",
          " but cross-attention's queries have no positions among the context's keys; build the cross-attention "
          "layer with causal = false and no rotary (T5's EncDecAttention)"));
    }
  }

  /// The checks of a context [batch, keys, d_model] or [keys, d_model] and its mask (against x's rank and
  /// batch when x is given); returns {batch, keys}.
  template <class Ctx, class M, class X = Ctx>
  std::pair<std::size_t, std::size_t> check_context(const char* where, const Ctx& context, const M* mask,
                                                    const X* x) const {
    const auto& shape = context.shape();
    const std::size_t rank = shape.size();
    if (rank != 2 && rank != 3) {
      throw std::invalid_argument(internal::concat(where, ": the context has shape ", detail::shape_string(shape),
                                                   " but the layer takes [keys, d_model] or [batch, keys, d_model]"));
    }
    detail::check_features(where, context, config_.d_model, "d_model");
    const std::size_t batch = rank == 3 ? shape[0] : 1;
    const std::size_t keys = shape[rank - 2];
    if (x != nullptr && (x->shape().size() != rank || (rank == 3 && x->shape()[0] != batch))) {
      throw std::invalid_argument(internal::concat(where, ": x has shape ", detail::shape_string(x->shape()),
                                                   " and the context ", detail::shape_string(shape),
                                                   "; they need the same rank and batch"));
    }
    if (keys == 0) {
      throw std::invalid_argument(internal::concat(where, ": the context ", detail::shape_string(shape),
                                                   " has no positions; cross-attention needs at least one"));
    }
    if (mask != nullptr) {
      const auto& ms = mask->shape();
      if (ms.size() != rank - 1 || !std::equal(ms.begin(), ms.end(), shape.begin())) {
        throw std::invalid_argument(internal::concat(
            where, ": the context mask has shape ", detail::shape_string(ms), " but the context ",
            detail::shape_string(shape), " needs ",
            rank == 3 ? detail::attention_dims_string({batch, keys}) : detail::attention_dims_string({keys}),
            " (the context's shape without d_model; true = real token, false = padding)"));
      }
    }
    return {batch, keys};
  }

  template <class X, class Ctx, class M, class Probe>
  auto cross_call(const X& x_in, const Ctx& context_in, const M& context_mask_in, saved<detail::value_t<X>>* ctx,
                  Probe& probe, std::string_view site) const {
    using In = detail::value_t<X>;
    static_assert(std::same_as<In, detail::value_t<Ctx>>,
                  "nn::attention::cross: x and the context must have the same element type (they share the "
                  "projections' compute type and the cache type); convert one of them.");
    const auto& x = detail::as_array(x_in);
    const auto& context = detail::as_array(context_in);
    check_cross_config("attention::cross");
    check_input(x, static_cast<const cache_type<In>*>(nullptr), static_cast<const no_mask*>(nullptr));
    return with_mask<In>(context_mask_in, [&](const auto* mask) {
      (void)check_context("attention::cross", context, mask, &x);
      auto y = detail::make_like<output_t<P, In>>(x, config_.d_model);
      cross_into(x, &context, mask, static_cast<const cache_type<In>*>(nullptr), ctx, y.data(), probe, site);
      return y;
    });
  }

  /// The cross-attention forward of checked inputs into y_data: over `context` (projected here; kept in
  /// `ctx` when training) or, when it is null, over the keys and values already in `cache`.
  template <class X, class Ctx, class M, class Probe>
  void cross_into(const X& x, const Ctx* context, const M* context_mask, const cache_type<detail::value_t<X>>* cache,
                  saved<detail::value_t<X>>* ctx, output_t<P, detail::value_t<X>>* y_data, Probe& probe,
                  std::string_view site) const {
    const internal::profile_scope region("nn::attention.cross");
    using In = detail::value_t<X>;
    using C = compute_t<P, In>;
    using O = output_t<P, In>;
    const auto& shape = x.shape();
    const std::size_t rank = shape.size();
    const std::size_t batch = rank == 3 ? shape[0] : 1;
    const std::size_t seq = shape[rank - 2];
    const std::size_t q_width = config_.n_heads * config_.head_dim;
    const std::size_t kv_width = config_.n_kv_heads * config_.head_dim;
    const std::size_t rows = batch * seq;
    workspace ws{workspace::per_call};
    std::vector<C> q(rows * q_width), attended(rows * q_width), k, v;
    std::optional<kv_cache<C>> local;
    if (context != nullptr) {
      const std::size_t keys = context->shape()[context->shape().size() - 2];
      k.resize(batch * keys * kv_width);
      v.resize(batch * keys * kv_width);
      if (ctx != nullptr) {
        // Training: x and the context rounded to C once and kept for the backward (the same operands).
        ctx->in.rows = rows;
        ctx->in.x.resize(x.size());
        internal::round_n<C>(x.data(), x.size(), ctx->in.x.data());
        ctx->context.rows = batch * keys;
        ctx->context.x.resize(context->size());
        internal::round_n<C>(context->data(), context->size(), ctx->context.x.data());
        project<C>(wq_, std::span<const C>(ctx->in.x), rows, std::span<C>(q));
        project<C>(wk_, std::span<const C>(ctx->context.x), batch * keys, std::span<C>(k));
        project<C>(wv_, std::span<const C>(ctx->context.x), batch * keys, std::span<C>(v));
      } else {
        project<C>(wq_, std::span<const In>(x.data(), x.size()), rows, std::span<C>(q));
        const std::span<const In> cs(context->data(), context->size());
        project<C>(wk_, cs, batch * keys, std::span<C>(k));
        project<C>(wv_, cs, batch * keys, std::span<C>(v));
      }
      std::span<const bool> valid;
      if (context_mask != nullptr) valid = std::span<const bool>(context_mask->data(), context_mask->size());
      local.emplace(batch, config_.n_kv_heads, config_.head_dim, keys);
      local->append(std::span<const C>(k), std::span<const C>(v), keys, valid);
      cache = &*local;
    } else {
      project<C>(wq_, std::span<const In>(x.data(), x.size()), rows, std::span<C>(q));
    }
    const bool lse_from_forward = attend_and_project<C, O>(std::span<const C>(q), *cache, batch, seq, {},
                                                           std::span<C>(attended), ctx, probe, site, y_data, ws);
    if (ctx != nullptr) {
      const std::size_t keys = cache->size();
      ctx->batch = batch;
      ctx->seq = seq;
      ctx->keys = keys;
      ctx->valid.clear();
      if (context_mask != nullptr) ctx->valid.assign(context_mask->data(), context_mask->data() + context_mask->size());
      ctx->bias_values.clear();
      ctx->bias_layout = {};
      if (!lse_from_forward) {
        ctx->lse.resize(batch * config_.n_heads * seq);
        kernels::attention_backward_problem problem = backward_problem(batch, seq);
        problem.keys = keys;
        kernels::attention_log_sum_exp<C>(q, k, ctx->valid, problem, ctx->lse);
      }
      ctx->attended.rows = rows;
      ctx->attended.x = std::move(attended);
      ctx->q = std::move(q);
      ctx->k = std::move(k);
      ctx->v = std::move(v);
    }
  }

  /// The checks of `backward`: dy's features and rows, the saved context (the projections check the
  /// gradients before adding to them).
  template <class T, class DY>
  void check_backward(const saved<T>& ctx, const DY& dy, const char* where, bool cross = false) const {
    detail::check_features(where, dy, config_.d_model, "d_model");
    const std::size_t rows = ctx.batch * ctx.seq;
    detail::check_backward_rows(where, detail::leading_size(dy), rows);
    const std::size_t hd = config_.head_dim;
    const std::size_t q_width = config_.n_heads * hd;
    const std::size_t kv_width = config_.n_kv_heads * hd;
    const std::size_t kv_rows = ctx.batch * (ctx.keys == 0 ? ctx.seq : ctx.keys);
    if (ctx.keys != 0 && !cross) {
      throw std::invalid_argument(internal::concat(where, ": the context was saved by cross_forward (", ctx.keys,
                                                   " context keys); pass it to cross_backward()"));
    }
    if (ctx.q.size() != rows * q_width || ctx.k.size() != kv_rows * kv_width || ctx.v.size() != kv_rows * kv_width ||
        ctx.lse.size() != ctx.batch * config_.n_heads * ctx.seq || ctx.attended.x.size() != rows * q_width ||
        ctx.in.x.size() != rows * config_.d_model || (!ctx.valid.empty() && ctx.valid.size() != kv_rows) ||
        (ctx.keys != 0 && ctx.context.x.size() != kv_rows * config_.d_model) ||
        ctx.bias_values.size() != ctx.bias_layout.size()) {
      throw std::invalid_argument(internal::concat(
          where, ": the saved context does not fit this layer (", ctx.q.size(), " query and ", ctx.k.size(),
          " key values for ", rows, " rows; the layer has ", config_.n_heads, " heads and ", config_.n_kv_heads,
          " kv heads of dimension ", hd, "); pass the context filled by this layer's forward()"));
    }
  }

  /// The backward pass after its checks: dx written at `out` (rows · d_model values), gradients added.
  template <class T, class DY>
  void backward_to(const saved<T>& ctx, const DY& dy, gradients& grads, T* out,
                   std::span<typename saved<T>::opmath_type> d_bias) const {
    const internal::profile_scope region("nn::attention.backward");
    using A = typename saved<T>::opmath_type;
    const std::size_t rows = ctx.batch * ctx.seq;
    const std::size_t q_width = config_.n_heads * config_.head_dim;
    const std::size_t kv_width = config_.n_kv_heads * config_.head_dim;
    const std::size_t seq = ctx.seq;
    auto [dq, dk, dv] = head_cotangents(ctx, dy, grads, d_bias);
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
    for (std::size_t i = 0; i < dx_acc.size(); ++i) out[i] = internal::round_out<T>(dx_acc[i]);
  }

  /// The first half of both backward passes: dO = dy · woᵀ (wo's gradients added; dy rounded to C as
  /// the kernel reads it), then `kernels::attention_backward` from the saved forward: dQ [batch · seq,
  /// n_heads · head_dim], and dK and dV over the saved keys (x's own, or the context's), in opmath;
  /// the bias's gradient added into `d_bias` when it is not empty.
  template <class T, class DY>
  auto head_cotangents(const saved<T>& ctx, const DY& dy, gradients& grads,
                       std::span<typename saved<T>::opmath_type> d_bias) const {
    using C = typename saved<T>::compute_type;
    using A = typename saved<T>::opmath_type;
    const std::size_t rows = ctx.batch * ctx.seq;
    const std::size_t kv_rows = ctx.batch * (ctx.keys == 0 ? ctx.seq : ctx.keys);
    xt::xtensor<C, 2> dy2 = xt::xtensor<C, 2>::from_shape({rows, config_.d_model});
    internal::round_n<C>(dy.data(), dy.size(), dy2.data());
    const auto d_att = wo_.backward(ctx.attended, dy2, grads.wo);
    const std::size_t kv_width = config_.n_kv_heads * config_.head_dim;
    std::array<std::vector<A>, 3> d{std::vector<A>(rows * config_.n_heads * config_.head_dim, A(0)),
                                    std::vector<A>(kv_rows * kv_width, A(0)), std::vector<A>(kv_rows * kv_width, A(0))};
    kernels::attention_backward_problem problem = backward_problem(ctx.batch, ctx.seq);
    problem.keys = ctx.keys;
    kernels::attention_backward<C>({.queries = ctx.q,
                                    .keys = ctx.k,
                                    .values = ctx.v,
                                    .out = ctx.attended.x,
                                    .d_out = std::span<const C>(d_att.data(), d_att.size()),
                                    .log_sum_exp = ctx.lse,
                                    .validity = ctx.valid,
                                    .bias = ctx.bias()},
                                   problem, {d[0], d[1], d[2], d_bias});
    return d;
  }

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

  /// Calls `f(mask)` with a pointer to the key padding mask `key_mask_in` viewed as an array, or a null
  /// `const no_mask*` for `no_key_mask`, after checking that x's element type is real.
  template <class In, class M, class F>
  static auto with_mask(const M& key_mask_in, F&& f) {
    static_assert(detail::attention_real_v<In>,
                  "nn::attention does not support complex (or integer) inputs: the softmax needs real scores. "
                  "Pass float, double or a mixprec small float.");
    if constexpr (!detail::attention_real_v<In>) {
      return;  // stopped at the static_assert above; nothing more is instantiated
    } else if constexpr (std::same_as<M, no_key_mask_t>) {
      return f(static_cast<const no_mask*>(nullptr));
    } else {
      const auto& key_mask = detail::as_array(key_mask_in);
      return f(&key_mask);
    }
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
                    saved<detail::value_t<X>>* ctx, Probe& probe, std::string_view site,
                    const bias_type<detail::value_t<X>>& bias = {}) const {
    using In = detail::value_t<X>;
    using C = compute_t<P, In>;
    using O = output_t<P, In>;
    static_assert(detail::attention_real_v<C>,
                  "nn::attention: the compute type must be real (float, double or a mixprec small float).");

    check_input(x, cache, key_mask);
    auto y = detail::make_like<O>(x, config_.d_model);
    workspace ws{workspace::per_call};
    attend_into(x, cache, key_mask, ctx, probe, site, y.data(), ws, bias);
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
                   Probe& probe, std::string_view site, output_t<P, detail::value_t<X>>* y_data, workspace& ws,
                   const bias_type<detail::value_t<X>>& bias = {}) const {
    const internal::profile_scope region("nn::attention.forward");
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
    // The bias is checked before the cache changes: a refused call appends nothing.
    const kernels::score_bias_layout bias_layout =
        kernels::check_score_bias("attention", "the score bias", bias.layout, bias.values.size(), batch,
                                  config_.n_heads, seq, (cache != nullptr ? cache->size() : 0) + seq, true);
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

    const bool lse_from_forward =
        attend_and_project<C, O>(std::span<const C>(q), kv, batch, seq, bias, attended, ctx, probe, site, y_data, ws);
    if (ctx != nullptr) {
      // Training sees whole sequences (no cache): the layout checked above, for seq queries and seq keys.
      ctx->bias_layout = bias_layout;
      ctx->bias_values.assign(bias.values.begin(), bias.values.end());
      save_for_backward(*ctx, batch, seq, std::move(q_kept), std::move(k_kept), std::move(v_kept),
                        std::move(attended_kept), valid, lse_from_forward);
    }
  }

  /// The attention of the projected queries `q` over `kv` into `attended`, then wo into `y_data`
  /// (`batch · seq` rows), the probe's `<site>.context` and `<site>.out` observed. Training under the
  /// opmath softmax: the kernel writes the log-sum-exps the backward reads (FlashAttention-2's L) into
  /// `ctx`, and this returns true; under softmax_precision::compute the caller recomputes them from q and
  /// k in opmath, since the backward differentiates the opmath softmax.
  template <class C, class O, class T, class Probe>
  bool attend_and_project(std::span<const C> q, const kv_cache<C>& kv, std::size_t batch, std::size_t seq,
                          const kernels::score_bias<accumulator_t<C>>& bias, std::span<C> attended, saved<T>* ctx,
                          Probe& probe, std::string_view site, O* y_data, workspace& ws) const {
    std::span<accumulator_t<C>> lse;
    const bool lse_from_forward = ctx != nullptr && config_.softmax == kernels::softmax_precision::opmath;
    if (lse_from_forward) {
      ctx->lse.resize(batch * config_.n_heads * seq);
      lse = ctx->lse;
    }
    scaled_dot_product_attention<C>(q, kv, seq, config_, bias, attended, lse, ws);
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      probe.observe(internal::concat(site, ".context"), std::span<const C>(attended));
    }
    const std::span<O> y(y_data, batch * seq * config_.d_model);
    project<C>(wo_, std::span<const C>(attended), batch * seq, y);
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      probe.observe(internal::concat(site, ".out"), std::span<const O>(y));
    }
    return lse_from_forward;
  }

  /// The kernels' description of this layer's backward over `batch` rows of `seq` tokens.
  [[nodiscard]] kernels::attention_backward_problem backward_problem(std::size_t batch, std::size_t seq) const {
    return {.batch = batch,
            .seq = seq,
            .n_heads = config_.n_heads,
            .n_kv_heads = config_.n_kv_heads,
            .head_dim = config_.head_dim,
            .query_block = config_.query_block,
            .key_block = config_.key_block,
            .causal = config_.causal,
            .scale = *config_.scale};
  }

  /// Fills the training context after a forward: the tensors, and, unless the forward wrote them
  /// (`lse_saved`), each query's log-sum-exp of its visible scores (kernels::attention_log_sum_exp).
  template <class T, class C>
  void save_for_backward(saved<T>& ctx, std::size_t batch, std::size_t seq, std::vector<C> q, std::vector<C> k,
                         std::vector<C> v, std::vector<C> attended, std::span<const bool> valid, bool lse_saved) const {
    ctx.batch = batch;
    ctx.seq = seq;
    ctx.keys = 0;  // self-attention: x's own keys
    ctx.context = {};
    ctx.valid.assign(valid.begin(), valid.end());
    if (!lse_saved) {
      ctx.lse.resize(batch * config_.n_heads * seq);
      kernels::attention_log_sum_exp<C>(q, k, ctx.valid, ctx.bias(), backward_problem(batch, seq), ctx.lse);
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
