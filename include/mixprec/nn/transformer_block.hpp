/// \file
/// \brief `nn::transformer_block<P, Norm>`: the pre-norm transformer block of GPT-2 and Llama,
/// `x += attn(norm_1(x)); x += mlp(norm_2(x))`, on a residual stream kept in the input's element type
/// (float32 in a mixed-precision model: the stream is never rounded to the compute type), with the
/// explicit forward/backward of the nn layers, gradient tree, named walks.
///
/// - **GPT-2 / nanoGPT**: `Norm = nn::layer_norm<P>` (epsilon 1e-5, with or without bias), GELU MLP
///   4·C, causal multi-head attention: `transformer_block_config{.attention = {.d_model = C, .n_heads =
///   H, .causal = true}}`.
/// - **Llama**: `Norm = nn::rms_norm<P>`, SwiGLU with its hidden width, grouped-query attention with
///   rotary embeddings: `.attention = {.d_model, .n_heads, .n_kv_heads, .causal = true, .rotary =
///   nn::rotary_config{...}}, .hidden = H, .activation = nn::ffn_activation::swiglu`.
///
/// **Types.** For a stream of element type S (the input x, [..., C]) each sub-layer rounds per the
/// policy P as it does alone: the norms take S and return `output_t<P, S>`, attention and the MLP
/// take that and return `output_t<P, ·>`, and each result is added into the stream in S (one rounding
/// to S per add). The output and dx have x's element type S. Each sub-layer's error bound is its own
/// (docs/layers.md); the block adds two roundings to S per element.
///
/// **Names** (nanoGPT's): "ln_1", "attn", "ln_2", "mlp", so `for_each_parameter` gives
/// "ln_1.scale", "attn.wq.kernel", ..., "mlp.w2.kernel".
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/tree.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

/// The shape and options of a `transformer_block`.
struct transformer_block_config {
  attention_config attention;                        ///< width (d_model), heads, causality, rotary
  std::size_t hidden = 0;                            ///< the MLP's hidden width; 0: 4 · d_model (GPT-2)
  ffn_activation activation = ffn_activation::gelu;  ///< the MLP's activation (swiglu for Llama)
  double norm_epsilon = 1e-5;                        ///< the norms' epsilon (PyTorch's LayerNorm, llama2.c)
  bool norm_bias = false;                            ///< layer_norm with a bias (GPT-2: yes; nanoGPT: no)
  use_bias bias = use_bias::no;                      ///< biases in every projection
};

/// The pre-norm transformer block (see the file comment). `Norm` is `layer_norm<P>` or `rms_norm<P>`.
template <class P, class Norm = layer_norm<P>>
class transformer_block : public parameter_walks<transformer_block<P, Norm>> {
  friend class parameter_walks<transformer_block>;
  static_assert(std::is_same_v<Norm, layer_norm<P>> || std::is_same_v<Norm, rms_norm<P>>,
                "nn::transformer_block: Norm must be nn::layer_norm<P> or nn::rms_norm<P> of the block's policy P.");

 public:
  using policy_type = P;
  using norm_type = Norm;
  /// The name in messages (the `from_scope` form's).
  static constexpr std::string_view type_name = "mixprec::nn::transformer_block";
  /// The output element type for a stream of element type S: S itself (the residual stream).
  template <class S>
  using output_type = S;

  /// The gradients of the four sub-layers, named as the parameters: a tree, with `for_each` and `zero()`.
  struct gradients : gradient_walks<gradients> {
    typename Norm::gradients ln_1;
    typename attention<P>::gradients attn;
    typename Norm::gradients ln_2;
    typename feed_forward<P>::gradients mlp;

    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`.
    static auto tree_children(auto& self) noexcept { return std::tie(self.ln_1, self.attn, self.ln_2, self.mlp); }
    /// The walk of `for_each`: "ln_1.scale", "attn.wq.kernel", ..., "mlp.w2.kernel".
    template <class Self, class F>
    static void walk(Self& self, F& f) {
      self.ln_1.for_each(prefixed("ln_1.", f));
      self.attn.for_each(prefixed("attn.", f));
      self.ln_2.for_each(prefixed("ln_2.", f));
      self.mlp.for_each(prefixed("mlp.", f));
    }
  };

  /// What `backward` needs from a `forward` of a stream of element type S.
  template <class S>
  struct saved {
    typename Norm::template saved<S> ln_1;
    typename attention<P>::template saved<output_t<P, S>> attn;
    typename Norm::template saved<S> ln_2;
    typename feed_forward<P>::template saved<output_t<P, S>> mlp;
  };

  /// A block of zero projections and unit norm scales (zero norm biases), shaped by `config`.
  /// \throws std::invalid_argument as the sub-layers' constructors (heads that do not divide d_model...).
  explicit transformer_block(const transformer_block_config& config)
      : ln_1_(make_norm(config)),
        attn_(config.attention, config.bias),
        ln_2_(make_norm(config)),
        mlp_(make_mlp(config)) {}

  /// A block from its four sub-layers (weights loaded elsewhere).
  /// \throws std::invalid_argument when their widths disagree (the norms', attention's and the MLP's
  ///         input and output widths must all be the same).
  transformer_block(Norm ln_1, attention<P> attn, Norm ln_2, feed_forward<P> mlp)
      : ln_1_(std::move(ln_1)), attn_(std::move(attn)), ln_2_(std::move(ln_2)), mlp_(std::move(mlp)) {
    const std::size_t c = ln_1_.features();
    if (ln_2_.features() != c || attn_.config().d_model != c || mlp_.in_features() != c || mlp_.out_features() != c) {
      throw std::invalid_argument(internal::concat("nn::transformer_block: the sub-layers' widths disagree: ln_1 ", c,
                                                   ", attn ", attn_.config().d_model, ", ln_2 ", ln_2_.features(),
                                                   ", mlp ", mlp_.in_features(), " -> ", mlp_.out_features()));
    }
  }

  /// The first norm (before attention).
  [[nodiscard]] const Norm& ln_1() const noexcept { return ln_1_; }
  /// The attention.
  [[nodiscard]] const attention<P>& attn() const noexcept { return attn_; }
  /// The second norm (before the MLP).
  [[nodiscard]] const Norm& ln_2() const noexcept { return ln_2_; }
  /// The MLP.
  [[nodiscard]] const feed_forward<P>& mlp() const noexcept { return mlp_; }
  /// The first norm, writable (an optimiser step, dot injection). Its shape must not change.
  [[nodiscard]] Norm& ln_1() noexcept { return ln_1_; }
  /// The attention, writable. Its shapes must not change.
  [[nodiscard]] attention<P>& attn() noexcept { return attn_; }
  /// The second norm, writable. Its shape must not change.
  [[nodiscard]] Norm& ln_2() noexcept { return ln_2_; }
  /// The MLP, writable. Its shapes must not change.
  [[nodiscard]] feed_forward<P>& mlp() noexcept { return mlp_; }
  /// The width C of the stream.
  [[nodiscard]] std::size_t features() const noexcept { return ln_1_.features(); }

  /// The block on a stream x [..., C] (inference): `x + attn(ln_1(x))`, then `+ mlp(ln_2(·))`, each add in
  /// x's element type. Attention's masks (causal) are those of its config; x's second-to-last axis is
  /// the sequence.
  /// \throws std::invalid_argument as the sub-layers (x's last axis is not C, ...).
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    auto y = detail::owned_copy(x);
    add_into(y, attn_(ln_1_(y)));
    add_into(y, mlp_(ln_2_(y)));
    return y;
  }

  /// `operator()(x)`, saving each sub-layer's context in `ctx`; the same bits.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const internal::profile_scope region("nn::transformer_block.forward");
    const auto& x = detail::as_array(x_in);
    auto y = detail::owned_copy(x);
    add_into(y, attn_.forward(ln_1_.forward(y, ctx.ln_1), ctx.attn));
    add_into(y, mlp_.forward(ln_2_.forward(y, ctx.ln_2), ctx.mlp));
    return y;
  }

  /// The vector-Jacobian product of `forward`: for dy [..., C], returns dx [..., C] in the stream's type
  /// S (dx = dy + the MLP branch's, then + the attention branch's, each added in S) and adds every
  /// sub-layer's parameter gradients into `grads`.
  /// \throws std::invalid_argument as the sub-layers' backward passes.
  template <class S, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<S>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    auto dx = detail::make_like<S>(dy, detail::last_extent(dy));
    backward_to(ctx, dy, grads, dx);
    return dx;
  }

  /// `backward(ctx, dy, grads)` writing dx into `dx_out` (dy's shape; element type S, the stream's; a
  /// caller's buffer — `xt::xtensor`, `xt::adapt`, a RowMajor `Eigen::Map` — not overlapping dy): the same
  /// bits, dx not allocated.
  /// \throws std::invalid_argument as `backward`, or if dx_out's shape is not dy's (checked before
  ///   anything is added to `grads`).
  template <class S, detail::layer_input DY, detail::layer_output DXOut>
  void backward_into(DXOut& dx_out, const saved<S>& ctx, const DY& dy_in, gradients& grads) const {
    detail::backward_into<S>(
        "transformer_block::backward_into", dx_out, dy_in, features(), [](const auto&) {},
        [&](const auto& dy, auto& dx) { backward_to(ctx, dy, grads, dx); });
  }

  /// Calls `f(name, dense<P>&)` on every projection, the matrix products a float8 run replaces (dot
  /// injection, `dense::set_dot`): "attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w1", "mlp.w2" and,
  /// for gated MLPs, "mlp.w3".
  template <class F>
  void for_each_projection(F&& f) {
    f(std::string("attn.wq"), attn_.wq());
    f(std::string("attn.wk"), attn_.wk());
    f(std::string("attn.wv"), attn_.wv());
    f(std::string("attn.wo"), attn_.wo());
    f(std::string("mlp.w1"), mlp_.w1());
    f(std::string("mlp.w2"), mlp_.w2());
    if (mlp_.w3()) f(std::string("mlp.w3"), *mlp_.w3());
  }

  /// The key/value cache of the block's attention for activations of element type A.
  template <class A>
  using cache_type = typename attention<P>::template cache_type<A>;

  /// One decoding step with the residual adds fused into the rms_norms (llama2.c's loop;
  /// flash-attention's `residual_in_fp32` blocks): the residual stream `residual` (`residual_t<P, A>`,
  /// float32) is never rounded to the activations' type A. On entry `normed` holds ln_1(residual) (made
  /// by the previous block's step, or for the first block by `ln_1().forward_into(normed, residual, x,
  /// nn::no_residual, ws)`). The step runs
  ///
  ///     hidden = attn(normed, cache);   residual += hidden, normed = ln_2(residual)   (fused)
  ///     hidden = mlp(normed);           residual += hidden, normed = next_norm(residual)   (fused)
  ///
  /// where `next_norm` is the next block's `ln_1()` or the model's final norm, so `normed` is ready for
  /// what follows. The same bits as the sub-layers' `forward_into` calls in that order, and no heap
  /// allocation once `ws` and `cache` have warmed up. `probe` sees, when enabled, `<site>.attention` and
  /// `<site>.ffn` (hidden after each branch), `<site>.residual_attn` and `<site>.residual` (the stream
  /// after each add). Shapes: [rows, C] for all three buffers (rows = the tokens of this step).
  /// \throws std::invalid_argument as the sub-layers' `forward_into` (shapes, a full cache).
  template <class A, class R, diagnostics::probe Probe = diagnostics::null_probe>
  void decode_into(A& normed, R& residual, A& hidden, cache_type<typename A::value_type>& cache, const Norm& next_norm,
                   workspace& ws, Probe&& probe = {}, std::string_view site = {}) const {
    static_assert(std::is_same_v<Norm, rms_norm<P>>,
                  "nn::transformer_block::decode_into fuses the residual adds into the norms, which is rms_norm's "
                  "fused form: make the block with Norm = nn::rms_norm<P>.");
    constexpr bool probing = diagnostics::probe_enabled_v<Probe>;
    const auto observe = [&](const char* what, const auto& t) {
      if constexpr (probing) {
        probe.observe(internal::concat(site, ".", what),
                      std::span<const typename std::remove_cvref_t<decltype(t)>::value_type>(t.data(), t.size()));
      }
    };
    attn_.forward_into(hidden, normed, cache, ws);
    observe("attention", hidden);
    ln_2_.forward_into(normed, residual, hidden, residual, ws);
    observe("residual_attn", residual);
    mlp_.forward_into(hidden, normed, ws);
    observe("ffn", hidden);
    next_norm.forward_into(normed, residual, hidden, residual, ws);
    observe("residual", residual);
  }

  /// A norm as the block's (unit scale, zero bias), shaped by `config`: width d_model, its epsilon and
  /// bias option. A model's final norm is made so (`causal_lm`).
  [[nodiscard]] static Norm make_norm(const transformer_block_config& c) {
    if constexpr (std::is_same_v<Norm, layer_norm<P>>) {
      return Norm(c.attention.d_model, {.epsilon = c.norm_epsilon, .use_scale = true, .use_bias = c.norm_bias});
    } else {
      return Norm(c.attention.d_model, {.epsilon = c.norm_epsilon});
    }
  }

  /// Zero gradients shaped like the parameters.
  [[nodiscard]] gradients zero_gradients() const {
    return {{}, ln_1_.zero_gradients(), attn_.zero_gradients(), ln_2_.zero_gradients(), mlp_.zero_gradients()};
  }

 private:
  /// The walk of `for_each_parameter` (parameter_walks): "ln_1.scale" [C] (and "ln_1.bias"),
  /// "attn.wq.kernel", ..., "ln_2.scale", "mlp.w1.kernel", "mlp.w2.kernel" (and "mlp.w3.kernel").
  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    self.ln_1_.for_each_parameter(prefixed("ln_1.", f));
    self.attn_.for_each_parameter(prefixed("attn.", f));
    self.ln_2_.for_each_parameter(prefixed("ln_2.", f));
    self.mlp_.for_each_parameter(prefixed("mlp.", f));
  }

  static feed_forward<P> make_mlp(const transformer_block_config& c) {
    const std::size_t d = c.attention.d_model;
    const std::size_t h = c.hidden == 0 ? 4 * d : c.hidden;
    std::optional<dense<P>> w3;
    if (is_gated(c.activation)) w3 = dense<P>(d, h, c.bias);
    return feed_forward<P>(c.activation, dense<P>(d, h, c.bias), dense<P>(h, d, c.bias), std::move(w3));
  }

  /// The backward pass: dx (an array of the stream's type S, dy's size) = dy, plus each branch's
  /// cotangent added in S; the gradients added.
  template <class S, class DY, class DX>
  void backward_to(const saved<S>& ctx, const DY& dy, gradients& grads, DX& dx) const {
    const internal::profile_scope region("nn::transformer_block.backward");
    std::copy(dy.data(), dy.data() + dy.size(), dx.data());  // dy in the stream's type S
    // y = x_mid + mlp(ln_2(x_mid)): dx_mid = dy + ln_2ᵀ(mlpᵀ(dy)); x_mid = x + attn(ln_1(x)): the same.
    add_into(dx, ln_2_.backward(ctx.ln_2, mlp_.backward(ctx.mlp, dx, grads.mlp), grads.ln_2));
    add_into(dx, ln_1_.backward(ctx.ln_1, attn_.backward(ctx.attn, dx, grads.attn), grads.ln_1));
  }

  /// x += a elementwise, each sum rounded once to x's element type.
  template <class A, class B>
  static void add_into(A& x, const B& a) {
    using S = typename A::value_type;
    S* d = x.data();
    const auto* s = a.data();
    for (std::size_t i = 0; i < x.size(); ++i) d[i] += static_cast<S>(s[i]);
  }

  Norm ln_1_;
  attention<P> attn_;
  Norm ln_2_;
  feed_forward<P> mlp_;
};

namespace detail {
/// The compile-time norm template of a norm type: `layer_norm` or `rms_norm` (of any policy).
template <class Norm>
struct norm_template;
template <class S>
struct norm_template<layer_norm<S>> {
  template <class P>
  using type = layer_norm<P>;
};
template <class S>
struct norm_template<rms_norm<S>> {
  template <class P>
  using type = rms_norm<P>;
};
/// `transformer_block<P, Norm of P>` as a one-parameter template, for `scoped_layer`.
template <class Norm>
struct block_of {
  template <class P>
  using type = transformer_block<P, typename norm_template<Norm>::template type<P>>;
};
}  // namespace detail

/// `transformer_block` whose policy comes from the `policy_scope` live at construction, one of the
/// listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members): constructed with a
/// `transformer_block_config`, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// `Norm` is `layer_norm<from_scope<Ps...>>` (the default) or `rms_norm<from_scope<Ps...>>`. Inference
/// through `operator()`, the parameters through `for_each_parameter` (so `save_state`/`load_state`), and
/// training through `visit` with the compile-time block's `forward`/`backward` and their per-policy
/// contexts and gradients.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps, class Norm>
class transformer_block<from_scope<Ps...>, Norm>
    : public detail::scoped_layer<detail::block_of<Norm>::template type, Ps...> {
 public:
  using detail::scoped_layer<detail::block_of<Norm>::template type, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
