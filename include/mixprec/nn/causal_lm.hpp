/// \file
/// \brief `nn::causal_lm<P, Norm>`: the decoder-only language model of GPT-2 and Llama assembled from the
/// library's layers: token embedding (and, for GPT-2, learned position embeddings), a stack of pre-norm
/// `transformer_block`s, a final norm and the classifier tied to the token embedding. Training (forward
/// saving contexts, backward, gradient tree, named walks, state dict) and incremental decoding with
/// key/value caches (`decode_state`, `decode_into`).
///
///     x = wte[ids] (+ wpe[positions])                 the residual stream, in value_type (float32)
///     for each block l:  x += attn(ln_1(x));  x += mlp(ln_2(x))
///     logits = wteᵀ · ln_f(x)                          [.., vocab], in value_type
///
/// - **GPT-2 / nanoGPT**: `Norm = layer_norm<P>`, `.max_positions = block size`, causal attention,
///   GELU MLP (the `transformer_block_config` defaults).
/// - **Llama**: `Norm = rms_norm<P>`, `.max_positions = 0` (rotary positions inside attention), SwiGLU,
///   grouped-query attention.
///
/// **Names** (nanoGPT's, with Hugging Face's "layers"): "wte.embedding", "wpe.embedding" (when learned
/// positions are used), "layers.<l>.ln_1.scale", "layers.<l>.attn.wq.kernel", ..., "layers.<l>.mlp.w2.kernel",
/// "ln_f.scale" (and "ln_f.bias" for a layer_norm with bias). Decoding probes the same prefixes.
///
/// **Types.** The residual stream and the training logits are `value_type` = `residual_t<P, float>`
/// (float32; float64 under float64 compute): the stream is never rounded to the compute type. Each
/// sub-layer rounds per P as it does alone (docs/layers.md). Decoding keeps the stream in the same type
/// and its activations between layers in `activation_type` = `output_t<P, value_type>`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/row_major.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/repeated.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/nn/transformer_block.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

/// The shape of a `causal_lm`.
struct causal_lm_config {
  std::size_t vocab = 0;     ///< tokens (rows of the embedding and of the classifier)
  std::size_t n_layers = 0;  ///< transformer blocks
  /// Learned absolute position embeddings "wpe" [max_positions, C] added to the token embeddings
  /// (GPT-2); 0: none (Llama: rotary positions inside attention, `block.attention.rotary`).
  std::size_t max_positions = 0;
  transformer_block_config block;  ///< every block's shape; its attention must be causal
};

/// The decoder-only language model (see the file comment). `Norm` is `layer_norm<P>` or `rms_norm<P>`;
/// decoding (`decode_into`) needs `rms_norm<P>`, whose fused residual form it runs.
template <class P, class Norm = layer_norm<P>>
class causal_lm : public parameter_walks<causal_lm<P, Norm>> {
  friend class parameter_walks<causal_lm>;

 public:
  using policy_type = P;
  /// The name in messages (the `from_scope` form's).
  static constexpr std::string_view type_name = "mixprec::nn::causal_lm";
  using block_type = transformer_block<P, Norm>;  ///< one pre-norm block
  using blocks_type = repeated<block_type>;       ///< the stack of blocks
  /// Element type of the residual stream and of the training logits: float32 (float64 under float64 compute).
  using value_type = residual_t<P, float>;
  /// Element type of the activations between layers when decoding, and of the decoded logits.
  using activation_type = output_t<P, value_type>;
  /// Token ids, [batch, T].
  using ids_type = xt::xtensor<std::int32_t, 2>;

  /// Every parameter's gradient, same names and shapes, in `grad_t<P>`: a mixprec tree, with `for_each` and `zero()`.
  struct gradients : gradient_walks<gradients> {
    typename embedding<P>::gradients wte;
    std::optional<typename embedding<P>::gradients> wpe;  ///< present when the model has learned positions
    typename blocks_type::gradients layers;
    typename Norm::gradients ln_f;

    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`).
    static auto tree_children(auto& self) noexcept { return std::tie(self.wte, self.wpe, self.layers, self.ln_f); }
    /// The walk of `for_each`: the names of `for_each_parameter`.
    template <class Self, class F>
    static void walk(Self& g, F& f) {
      causal_lm::walk_parameters(g, f);
    }
  };

  /// What `backward` needs from `forward`.
  struct saved {
    typename embedding<P>::saved wte, wpe;
    typename blocks_type::template saved<value_type> layers;
    typename Norm::template saved<value_type> ln_f;
    typename embedding<P>::template attend_saved<output_t<P, value_type>> head;
  };

  /// A model of zero embeddings and projections and unit norm scales, shaped by `config` (initialise it
  /// through `for_each_parameter`, or load a state dict).
  /// \throws std::invalid_argument when vocab or n_layers is 0 or the attention is not causal (naming the
  ///   field); as `transformer_block` for inconsistent block shapes.
  explicit causal_lm(const causal_lm_config& config)
      : config_(checked(config)),
        wte(config.vocab, config.block.attention.d_model),
        layers(config.n_layers, block_type(config.block)),
        ln_f(block_type::make_norm(config.block)) {
    if (config.max_positions > 0) wpe.emplace(config.max_positions, config.block.attention.d_model);
  }

  /// The configuration the model was made with.
  [[nodiscard]] const causal_lm_config& config() const noexcept { return config_; }
  /// The token embedding, also the classifier (tied).
  [[nodiscard]] const embedding<P>& token_embedding() const noexcept { return wte; }
  /// The learned position embeddings, or nullptr when the model has none.
  [[nodiscard]] const embedding<P>* position_embedding() const noexcept { return wpe ? &*wpe : nullptr; }
  /// The blocks.
  [[nodiscard]] const blocks_type& blocks() const noexcept { return layers; }
  /// The blocks, writable (shapes must not change).
  [[nodiscard]] blocks_type& blocks() noexcept { return layers; }
  /// The final norm.
  [[nodiscard]] const Norm& final_norm() const noexcept { return ln_f; }

  /// Zero gradients for every parameter.
  [[nodiscard]] gradients zero_gradients() const {
    std::optional<typename embedding<P>::gradients> gp;
    if (wpe) gp = wpe->zero_gradients();
    return {{}, wte.zero_gradients(), std::move(gp), layers.zero_gradients(), ln_f.zero_gradients()};
  }

  /// Calls `f(dotted_name, dense<P>&)` on the blocks' projections ("layers.<l>.attn.wq", ..., ".mlp.w2"):
  /// the products a float8 run replaces (`dense::set_dot`). The embeddings and the tied classifier keep
  /// the policy's product.
  template <class F>
  void for_each_projection(F&& f) {
    layers.for_each_projection(
        [&](const std::string& name, auto& layer) { f(internal::concat("layers.", name), layer); });
  }

  /// Logits [B, T, vocab] in value_type for ids [B, T]: the inference path (no saved context).
  /// \throws std::out_of_range for an id outside the vocabulary; std::invalid_argument when T exceeds
  ///   max_positions (learned positions).
  [[nodiscard]] xt::xtensor<value_type, 3> logits(const ids_type& ids) const {
    stream x = embed(wte(ids), ids, [&](const auto& pos) { return (*wpe)(pos); });
    return wte.template attend_logits<value_type>(ln_f(layers(x)));
  }

  /// The mean cross-entropy of `targets` [B, T] given `ids` [B, T] (float64 sum of value_type terms).
  /// \throws as `logits`, and as `nn::cross_entropy_loss` for a target outside the vocabulary.
  [[nodiscard]] double loss(const ids_type& ids, const ids_type& targets) const {
    return cross_entropy_loss(logits(ids), std::span<const std::int32_t>(targets.data(), targets.size()));
  }

  /// `logits(ids)`, saving into `ctx` what `backward` needs; the same bits.
  [[nodiscard]] xt::xtensor<value_type, 3> forward(const ids_type& ids, saved& ctx) const {
    const internal::profile_scope region("nn::causal_lm.forward");
    const stream x = embed(wte.forward(ids, ctx.wte), ids, [&](const auto& pos) { return wpe->forward(pos, ctx.wpe); });
    return wte.template attend_forward<value_type>(ln_f.forward(layers.forward(x, ctx.layers), ctx.ln_f), ctx.head);
  }

  /// The vector-Jacobian product of `forward` from the logits' cotangent [B, T, vocab]: adds every
  /// parameter's gradient into `g` (the tied classifier's and the lookup's both into `g.wte`).
  /// `ready`, when given, is told each part whose gradients are final, in this order: "ln_f",
  /// "layers.<L-1>", ..., "layers.0", "wpe" (GPT-2 form), "wte" (the reverse of the parameter walk).
  /// \throws std::invalid_argument when dlogits' shape is not the forward's logits'.
  void backward(const saved& ctx, const xt::xtensor<value_type, 3>& dlogits, gradients& g,
                const gradients_ready& ready = {}) const {
    const internal::profile_scope region("nn::causal_lm.backward");
    const auto dh = wte.attend_backward(ctx.head, dlogits, g.wte);
    const auto dn = ln_f.backward(ctx.ln_f, dh, g.ln_f);
    if (ready) ready("ln_f");
    const gradients_ready layer_ready =
        ready ? gradients_ready([&](std::string_view i) { ready(internal::concat("layers.", i)); }) : gradients_ready();
    const stream dx = layers.backward(ctx.layers, dn, g.layers, layer_ready);
    if (wpe) {
      wpe->backward(ctx.wpe, dx, *g.wpe);
      if (ready) ready("wpe");
    }
    wte.backward(ctx.wte, dx, g.wte);
    if (ready) ready("wte");
  }

  /// The key/value caches and step buffers of one sequence being decoded (batch 1): made by
  /// `make_decode_state`, advanced by `decode_into`. The model's weights are not in it: several states
  /// can decode with one model, one thread each.
  class decode_state {
   public:
    /// Tokens decoded since it was made or `reset()`: the position of the next token.
    [[nodiscard]] std::size_t position() const noexcept { return caches_.front().size(); }
    /// The most positions it can hold.
    [[nodiscard]] std::size_t capacity() const noexcept { return caches_.front().capacity(); }
    /// Forgets the sequence: the next token is at position 0.
    void reset() noexcept {
      for (auto& c : caches_) c.clear();
    }

   private:
    friend class causal_lm;
    using cache_type = typename block_type::template cache_type<activation_type>;
    template <class T>
    static xt::xtensor<T, 2> row(std::size_t c) {
      return xt::xtensor<T, 2>::from_shape({std::size_t{1}, c});
    }
    decode_state(const causal_lm& m, std::size_t capacity) {
      const std::size_t c = m.config_.block.attention.d_model;
      for (const auto& block : m.layers.layers()) {
        caches_.push_back(block.attn().template make_cache<activation_type>(1, capacity));
      }
      h_ = row<activation_type>(c), x_ = row<activation_type>(c), hidden_ = row<activation_type>(c);
      residual_ = row<value_type>(c);
    }
    std::vector<cache_type> caches_;
    xt::xtensor<std::int32_t, 1> ids_ = xt::xtensor<std::int32_t, 1>::from_shape({1});
    xt::xtensor<activation_type, 2> h_, x_, hidden_;  // embedding row, normalised activations, a branch's output
    xt::xtensor<value_type, 2> residual_;             // the residual stream
    workspace ws_;                                    // the layers' scratch
  };

  /// A decoding state with room for `capacity` tokens.
  /// \throws std::invalid_argument when capacity is 0, or exceeds max_positions (learned positions).
  [[nodiscard]] decode_state make_decode_state(std::size_t capacity) const {
    static_assert(std::is_same_v<Norm, rms_norm<P>>,
                  "nn::causal_lm decodes with the residual adds fused into the norms, which is rms_norm's fused "
                  "form: make the model with Norm = nn::rms_norm<P>.");
    if (capacity == 0 || (wpe && capacity > wpe->vocab_size())) {
      throw std::invalid_argument(internal::concat("nn::causal_lm::make_decode_state: capacity ", capacity,
                                                   " must be at least 1",
                                                   wpe ? " and at most max_positions (the learned positions)" : "",
                                                   wpe ? internal::concat(" = ", wpe->vocab_size()) : std::string()));
    }
    return decode_state(*this, capacity);
  }

  /// One decoding step of batch 1: `token` at position `state.position()`, appended to the state's
  /// caches; writes the logits [vocab] (activation_type) into `logits`. The residual adds are fused into
  /// the rms_norms (`transformer_block::decode_into`), the stream stays in value_type. With the null
  /// probe a step after the first makes no heap allocation. `probe` sees "embedding" (the token's row),
  /// "layers.<l>.attention", ".residual_attn", ".ffn", ".residual" per block, "final_norm" (ln_f's
  /// output) and "logits".
  /// \throws std::out_of_range for a token outside the vocabulary; std::length_error when the state is
  ///   full (call `reset()`); std::invalid_argument when logits does not have vocab elements.
  template <diagnostics::probe Probe = diagnostics::null_probe>
  void decode_into(std::span<activation_type> logits, int token, decode_state& s, Probe&& probe = {}) const {
    const std::size_t pos = s.position();
    if (pos >= s.capacity()) {
      throw std::length_error(internal::concat("nn::causal_lm::decode_into: the state already holds its capacity of ",
                                               s.capacity(), " tokens; call reset() or make a larger state"));
    }
    if (logits.size() != wte.vocab_size()) {
      throw std::invalid_argument(internal::concat("nn::causal_lm::decode_into: logits has ", logits.size(),
                                                   " elements; make it [vocab] = [", wte.vocab_size(), "]"));
    }
    const auto observe = [&probe](const char* site, const auto& t) {
      probe.observe(site, std::span<const typename std::remove_cvref_t<decltype(t)>::value_type>(t.data(), t.size()));
    };
    s.ids_(0) = static_cast<std::int32_t>(token);
    wte.forward_into(s.h_, s.ids_);  // [1, C]; throws std::out_of_range
    observe("embedding", s.h_);
    if (wpe) {  // the stream starts as wte[token] + wpe[pos], added in value_type as `forward` does
      s.ids_(0) = static_cast<std::int32_t>(pos);
      wpe->forward_into(s.hidden_, s.ids_);
      std::copy(s.hidden_.begin(), s.hidden_.end(), s.residual_.begin());
      layers[0].ln_1().forward_into(s.x_, s.residual_, s.h_, s.residual_, s.ws_);
    } else {
      layers[0].ln_1().forward_into(s.x_, s.residual_, s.h_, no_residual, s.ws_);
    }
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Norm& next = l + 1 < layers.size() ? layers[l + 1].ln_1() : ln_f;
      std::string site;
      if constexpr (diagnostics::probe_enabled_v<Probe>) site = internal::concat("layers.", l);
      layers[l].decode_into(s.x_, s.residual_, s.hidden_, s.caches_[l], next, s.ws_, probe, site);
    }
    observe("final_norm", s.x_);
    row_major_span<activation_type, 2> row(logits.data(), {1, logits.size()});
    wte.attend_into(row, s.x_);  // [1, C] -> [1, vocab], into the caller's buffer
    observe("logits", row);
  }

  /// `decode_into` returning the logits [vocab].
  template <diagnostics::probe Probe = diagnostics::null_probe>
  [[nodiscard]] xt::xtensor<activation_type, 1> decode(int token, decode_state& s, Probe&& probe = {}) const {
    auto out = xt::xtensor<activation_type, 1>::from_shape({wte.vocab_size()});
    decode_into(std::span<activation_type>(out.data(), out.size()), token, s, probe);
    return out;
  }

 private:
  using stream = xt::xtensor<value_type, 3>;

  static const causal_lm_config& checked(const causal_lm_config& c) {
    const char* bad = c.vocab == 0 ? "vocab is 0" : c.n_layers == 0 ? "n_layers is 0" : nullptr;
    if (bad == nullptr && !c.block.attention.causal) bad = "block.attention.causal is false";
    if (bad != nullptr) {
      throw std::invalid_argument(internal::concat("nn::causal_lm: ", bad, "; a causal language model needs a ",
                                                   "vocabulary, at least one block and causal attention"));
    }
    return c;
  }

  /// The stream [B, T, C] in value_type: the token rows `tok`, plus the position rows `position_rows(pos)`
  /// when the model has learned positions (each sum rounded once to value_type).
  template <class Tok, class PositionRows>
  stream embed(const Tok& tok, const ids_type& ids, PositionRows&& position_rows) const {
    stream x = xt::cast<value_type>(tok);
    if (wpe) {
      const std::size_t batch = ids.shape()[0], t = ids.shape()[1];
      if (t > wpe->vocab_size()) {
        throw std::invalid_argument(internal::concat("nn::causal_lm: the sequence has ", t,
                                                     " tokens but the model has max_positions = ", wpe->vocab_size()));
      }
      const ids_type pos = xt::broadcast(xt::arange<std::int32_t>(static_cast<std::int32_t>(t)), {batch, t});
      x += xt::cast<value_type>(position_rows(pos));
    }
    return x;
  }

  /// The walk of `for_each_parameter` (parameter_walks) and of the gradients' `for_each` (`Self` is the
  /// model or its gradients: the same parts, the same names).
  template <class Self, class F>
  static void walk_parameters(Self& s, F& f) {
    for_each_tensor(s.wte, prefixed("wte.", f));
    if (s.wpe) for_each_tensor(*s.wpe, prefixed("wpe.", f));
    for_each_tensor(s.layers, prefixed("layers.", f));
    for_each_tensor(s.ln_f, prefixed("ln_f.", f));
  }

  causal_lm_config config_;
  embedding<P> wte;
  std::optional<embedding<P>> wpe;
  blocks_type layers;
  Norm ln_f;
};

namespace detail {
/// `causal_lm<P, Norm of P>` as a one-parameter template, for `scoped_layer`.
template <class Norm>
struct causal_lm_of {
  template <class P>
  using type = causal_lm<P, typename norm_template<Norm>::template type<P>>;
};
}  // namespace detail

/// `causal_lm` whose policy comes from the `policy_scope` live at construction, one of the listed
/// `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members): constructed with a
/// `causal_lm_config`, optionally preceded by `compute_dtype(...)`. `Norm` is
/// `layer_norm<from_scope<Ps...>>` (the default) or `rms_norm<from_scope<Ps...>>`. The policy is chosen
/// once for the whole model: `visit(f)` calls `f` with the compile-time model, inside which training
/// and decoding are typed (`forward`, `backward`, `decode_into` with their per-policy contexts,
/// gradients and decode states); `for_each_parameter` serves `save_state`/`load_state`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps, class Norm>
class causal_lm<from_scope<Ps...>, Norm>
    : public detail::scoped_layer<detail::causal_lm_of<Norm>::template type, Ps...> {
 public:
  using detail::scoped_layer<detail::causal_lm_of<Norm>::template type, Ps...>::scoped_layer;

  /// The compile-time model's `logits(ids)`: the same bits, as the wider of the listed policies'
  /// logits types when they differ (float64 under a float64 compute type; an exact widening).
  /// \throws as `causal_lm<P>::logits`.
  [[nodiscard]] auto logits(const xt::xtensor<std::int32_t, 2>& ids) const {
    using R = typename detail::common_layer_result<
        decltype(std::declval<const typename detail::causal_lm_of<Norm>::template type<Ps>&>().logits(ids))...>::type;
    return this->visit([&](const auto& m) { return detail::to_common_result<R>(m.logits(ids)); });
  }
  /// The compile-time model's `loss(ids, targets)`.
  /// \throws as `causal_lm<P>::loss`.
  [[nodiscard]] double loss(const xt::xtensor<std::int32_t, 2>& ids,
                            const xt::xtensor<std::int32_t, 2>& targets) const {
    return this->visit([&](const auto& m) { return m.loss(ids, targets); });
  }
};

}  // namespace mixprec::nn
