/// \file
/// \brief A T5 v1.1-style encoder–decoder (Raffel et al. 2020; the v1.1 changes: gated-GELU feed-forward,
/// no biases, untied classifier without rescaling) assembled from mixprec's layers, with its training
/// forward/backward, gradient tree, named walks, greedy decoding with key/value caches, probe sites and
/// the float16 residual-scale plan.
///
///     shared embedding E [vocab, d]            (encoder and decoder look their ids up in the same table)
///     encoder: x = E[ids]; relative position bias rows B_enc (bidirectional), computed once per forward
///       block l:  (h, r) = ln_1(x_prev, r)     fused float32 residual stream (no_residual for l = 0)
///                 a = attn(h, padding mask, B_enc)             unscaled attention (scale 1: T5's)
///                 (h, r) = ln_2(a, r);  f = mlp(h)             GEGLU (tanh GELU): w2(gelu(w1 h) ⊙ w3 h)
///       enc = final_norm(f_last, r)
///     decoder: y = E[decoder ids]; B_dec (unidirectional), computed once per forward
///       block l:  (h, r) = ln_1(y_prev, r);  a = self_attn(h, causal, B_dec)
///                 (h, r) = ln_2(a, r);       c = cross_attn(h, enc, encoder padding mask)   (no bias)
///                 (h, r) = ln_3(c, r);       f = mlp(h)
///       logits = lm_head(final_norm(f_last, r))                 untied dense, no bias, no rescale
///
/// **Types.** Parameters in `P::param_type` (float32 here: the master weights), activations between the
/// layers in H = `output_t<P, float>`, the residual stream in R = `residual_t<P, H>` (float32), the
/// relative position biases and their gradients in A = `accumulator_t<compute_t<P, H>>` (float32), the
/// gradients in `grad_t<P>` (float32). Every layer rounds as it does alone (docs/layers.md). The policy's
/// output type must not depend on the input type (an explicit `o=`), so that every layer hands the next
/// one the same type H.
///
/// **Names** (`for_each_parameter`, the gradients' `for_each`, the state dict): "shared.embedding",
/// "encoder.relative_attention_bias.embedding", "encoder.layers.<l>.{ln_1,ln_2}.scale",
/// "encoder.layers.<l>.attn.{wq,wk,wv,wo}.kernel", "encoder.layers.<l>.mlp.{w1,w2,w3}.kernel",
/// "encoder.final_norm.scale", "decoder.relative_attention_bias.embedding",
/// "decoder.layers.<l>.{ln_1,ln_2,ln_3}.scale", "decoder.layers.<l>.{self_attn,cross_attn}.{wq,...}.kernel",
/// "decoder.layers.<l>.mlp.{w1,w2,w3}.kernel", "decoder.final_norm.scale", "lm_head.kernel".
///
/// **Probe sites** (a probed `forward`, in this order): "encoder.embedding"; per encoder block
/// "encoder.layers.<l>.attention.context" (the heads' attended values before wo), ".attention.out",
/// ".ffn.hidden", ".ffn.out", ".residual" (the stream after the block); "encoder.out"; "decoder.embedding";
/// per decoder block "decoder.layers.<l>.self_attention.context", ".self_attention.out",
/// ".cross_attention.context", ".cross_attention.out", ".ffn.hidden", ".ffn.out", ".residual";
/// "decoder.out"; "logits". With a
/// residual-scale plan applied, the out-projection outputs and the stream are observed divided by
/// the block's scale (an exact power of two): the same values as the unplanned model's, so runs with
/// and without a plan compare site by site.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "mixprec/diagnostics/residual_scale_plan.hpp"
#include "mixprec/kernels/score_bias.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/relative_position_bias.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "reversal_data.hpp"

namespace t5_example {

namespace nn = mixprec::nn;
namespace diagnostics = mixprec::diagnostics;

/// An encoder block's layers (`Norm`, `Attention`, `FeedForward` are the layers, or their gradients or
/// saved contexts: one struct shape serves the model, its gradients and its walks).
template <class Norm, class Attention, class FeedForward>
struct encoder_block {
  Norm ln_1;        ///< before self-attention (for l > 0 fused with the previous block's output)
  Attention attn;   ///< bidirectional self-attention with the encoder's relative position bias
  Norm ln_2;        ///< before the feed-forward
  FeedForward mlp;  ///< gated-GELU feed-forward

  /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `walk`.
  static auto tree_children(auto& self) noexcept { return std::tie(self.ln_1, self.attn, self.ln_2, self.mlp); }
  /// Calls `f(name, tensor)` on every tensor of `self` (a block of layers or of gradients): "ln_1.scale",
  /// "attn.wq.kernel", ..., "mlp.w3.kernel".
  template <class Self, class F>
  static void walk(Self& self, F& f) {
    nn::for_each_tensor(self.ln_1, nn::prefixed("ln_1.", f));
    nn::for_each_tensor(self.attn, nn::prefixed("attn.", f));
    nn::for_each_tensor(self.ln_2, nn::prefixed("ln_2.", f));
    nn::for_each_tensor(self.mlp, nn::prefixed("mlp.", f));
  }
};

/// A decoder block's layers (as `encoder_block`).
template <class Norm, class Attention, class FeedForward>
struct decoder_block {
  Norm ln_1;             ///< before self-attention
  Attention self_attn;   ///< causal self-attention with the decoder's relative position bias
  Norm ln_2;             ///< before cross-attention
  Attention cross_attn;  ///< attention over the encoder's output (T5's EncDecAttention: no position bias)
  Norm ln_3;             ///< before the feed-forward
  FeedForward mlp;       ///< gated-GELU feed-forward

  /// The children as a mixprec tree, in the order of `walk`.
  static auto tree_children(auto& self) noexcept {
    return std::tie(self.ln_1, self.self_attn, self.ln_2, self.cross_attn, self.ln_3, self.mlp);
  }
  /// Calls `f(name, tensor)` on every tensor of `self`: "ln_1.scale", "self_attn.wq.kernel", ...,
  /// "cross_attn.wo.kernel", "ln_3.scale", "mlp.w3.kernel".
  template <class Self, class F>
  static void walk(Self& self, F& f) {
    nn::for_each_tensor(self.ln_1, nn::prefixed("ln_1.", f));
    nn::for_each_tensor(self.self_attn, nn::prefixed("self_attn.", f));
    nn::for_each_tensor(self.ln_2, nn::prefixed("ln_2.", f));
    nn::for_each_tensor(self.cross_attn, nn::prefixed("cross_attn.", f));
    nn::for_each_tensor(self.ln_3, nn::prefixed("ln_3.", f));
    nn::for_each_tensor(self.mlp, nn::prefixed("mlp.", f));
  }
};

/// `values` times `factor`, in float32 (a power-of-two factor is exact unless float32 overflows).
template <class E>
[[nodiscard]] std::vector<float> rescaled(std::span<const E> values, double factor) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const E& v : values) out.push_back(static_cast<float>(static_cast<double>(static_cast<float>(v)) * factor));
  return out;
}

/// A probe that hands every site to `inner`, except that the values of a site ending in ".out" are
/// multiplied by `factor` first (converted to float32; exact for a power of two). The feed-forward's
/// probed call observes its hidden activation (not scaled by a plan) and its output (scaled): this
/// undoes the plan's scale of the output only.
template <diagnostics::probe Inner>
struct out_rescaling_probe {
  static constexpr bool enabled = diagnostics::probe_enabled_v<Inner>;  ///< as the inner probe
  Inner& inner;                                                         ///< where the sites go
  double factor = 1.0;                                                  ///< 1 / the block's scale

  /// Observes `values` at `site` (see the struct comment).
  template <diagnostics::tensor_range Range>
  void observe(std::string_view site, const Range& values) {
    if (factor == 1.0 || !site.ends_with(".out")) {
      inner.observe(site, values);
      return;
    }
    inner.observe(site, rescaled(std::span(std::ranges::data(values), std::ranges::size(values)), factor));
  }
};

/// The encoder–decoder under policy `P` (see the file comment).
template <class P>
class t5_model : public nn::parameter_walks<t5_model<P>> {
  friend class nn::parameter_walks<t5_model>;

 public:
  using policy_type = P;
  using H = nn::output_t<P, float>;                       ///< activations between layers
  using R = nn::residual_t<P, H>;                         ///< the residual stream (float32)
  using A = mixprec::accumulator_t<nn::compute_t<P, H>>;  ///< opmath of the position biases
  static_assert(std::is_same_v<nn::output_t<P, H>, H>,
                "t5_model needs a policy whose output type does not depend on the input type (an explicit "
                "o=...), so that every layer hands the next one the same type.");
  using norm_type = nn::rms_norm<P>;
  using attention_type = nn::attention<P>;
  using ffn_type = nn::feed_forward<P>;
  using bias_layer = nn::relative_position_bias<P>;
  using encoder_layer = encoder_block<norm_type, attention_type, ffn_type>;
  using decoder_layer = decoder_block<norm_type, attention_type, ffn_type>;
  /// Logits [batch, decoder seq, vocab].
  using logits_type = xt::xtensor<H, 3>;

  /// Every parameter's gradient, named and shaped as the parameters, in `grad_t<P>` (float32): a mixprec
  /// tree (so `all_finite`, `unscale_in_place`, `clip_grad_norm` and the optimisers take it), with
  /// `for_each` and `zero()`.
  struct gradients : nn::gradient_walks<gradients> {
    typename nn::embedding<P>::gradients shared;  ///< both lookups' gradients, summed
    typename bias_layer::gradients encoder_bias;  ///< summed over the encoder's layers
    std::vector<
        encoder_block<typename norm_type::gradients, typename attention_type::gradients, typename ffn_type::gradients>>
        encoder;                                  ///< block l at index l
    typename norm_type::gradients encoder_final;  ///< the encoder's final norm
    typename bias_layer::gradients decoder_bias;  ///< summed over the decoder's layers
    std::vector<
        decoder_block<typename norm_type::gradients, typename attention_type::gradients, typename ffn_type::gradients>>
        decoder;                                  ///< block l at index l
    typename norm_type::gradients decoder_final;  ///< the decoder's final norm
    typename nn::dense<P>::gradients lm_head;     ///< the classifier

    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`).
    static auto tree_children(auto& self) noexcept {
      return std::tie(self.shared, self.encoder_bias, self.encoder, self.encoder_final, self.decoder_bias, self.decoder,
                      self.decoder_final, self.lm_head);
    }
    /// The walk of `for_each`: the names of the model's `for_each_parameter`.
    template <class Self, class F>
    static void walk(Self& g, F& f) {
      t5_model::walk_parameters(g, f);
    }
  };

  /// What `backward` needs from `forward`: every layer's saved context and the two bias rows.
  struct saved {
    typename nn::embedding<P>::saved encoder_embed;  ///< the encoder's ids
    typename nn::embedding<P>::saved decoder_embed;  ///< the decoder's ids
    /// Each encoder block's layers' contexts, block l at index l.
    std::vector<encoder_block<typename norm_type::template saved<H>, typename attention_type::template saved<H>,
                              typename ffn_type::template saved<H>>>
        encoder;
    typename norm_type::template saved<H> encoder_final;  ///< the encoder's final norm
    /// Each decoder block's layers' contexts, block l at index l.
    std::vector<decoder_block<typename norm_type::template saved<H>, typename attention_type::template saved<H>,
                              typename ffn_type::template saved<H>>>
        decoder;
    typename norm_type::template saved<H> decoder_final;  ///< the decoder's final norm
    typename nn::dense<P>::template saved<H> lm_head;     ///< the classifier's input
    std::vector<A> encoder_bias;                          ///< the encoder's bias rows [n_heads, 2 S − 1]
    std::vector<A> decoder_bias;                          ///< the decoder's bias rows [n_heads, 2 T − 1]
    std::size_t encoder_seq = 0;                          ///< S, the encoder's length
    std::size_t decoder_seq = 0;                          ///< T, the decoder's length
  };

  /// A model of shape `config` with zero projections and tables and unit norm scales (initialise it with
  /// `init`, or load a state dict).
  /// \throws std::invalid_argument when vocab, d_model, a layer count or n_heads is 0, n_heads does not
  ///         divide d_model, or the bucketing is invalid (as `nn::relative_position_bias`).
  explicit t5_model(const t5_config& config)
      : config_(checked(config)),
        shared_(config.vocab, config.d_model),
        encoder_bias_({.n_heads = config.n_heads,
                       .num_buckets = config.num_buckets,
                       .max_distance = config.max_distance,
                       .bidirectional = true}),
        encoder_final_(norm(config)),
        decoder_bias_({.n_heads = config.n_heads,
                       .num_buckets = config.num_buckets,
                       .max_distance = config.max_distance,
                       .bidirectional = false}),
        decoder_final_(norm(config)),
        lm_head_(config.d_model, config.vocab, nn::use_bias::no),
        encoder_scales_(config.encoder_layers, 1.0),
        decoder_scales_(config.decoder_layers, 1.0) {
    const nn::attention_config self_attention{.d_model = config.d_model, .n_heads = config.n_heads, .scale = 1.0};
    nn::attention_config causal = self_attention;
    causal.causal = true;
    for (std::size_t l = 0; l < config.encoder_layers; ++l) {
      encoder_.push_back({norm(config), attention_type(self_attention), norm(config), ffn(config)});
    }
    for (std::size_t l = 0; l < config.decoder_layers; ++l) {
      decoder_.push_back({norm(config), attention_type(causal), norm(config), attention_type(self_attention),
                          norm(config), ffn(config)});
    }
  }

  /// A model of shape `config` with T5's initialisation (Hugging Face's `T5PreTrainedModel._init_weights`,
  /// factor 1): the shared embedding N(0, 1); wq N(0, (d_model · d_kv)^−½) (the 1/√d_kv that T5 leaves
  /// out of its scores); wk, wv N(0, d_model^−½); wo N(0, (n_heads · d_kv)^−½); w1, w3 N(0, d_model^−½);
  /// w2 N(0, d_ff^−½); the bias tables N(0, d_model^−½); norm scales 1. One change: the untied lm_head
  /// is drawn N(0, d_model^−½) instead of N(0, 1), so that the first logits are of unit size (a first
  /// loss near ln vocab) rather than √d_model. Draws in the walk's order from `rng`
  /// (`std::normal_distribution`: implementation-defined).
  /// \throws std::invalid_argument as the constructor.
  template <class Rng>
  [[nodiscard]] static t5_model init(const t5_config& config, Rng& rng) {
    t5_model model(config);
    const auto d = static_cast<double>(config.d_model);
    const double d_kv = d / static_cast<double>(config.n_heads);
    const double heads = static_cast<double>(config.n_heads);
    model.for_each_parameter([&](std::string_view name, auto& p) {
      using T = typename std::remove_cvref_t<decltype(p)>::value_type;
      double stddev = 0;
      if (name.ends_with(".scale")) return;  // norms: ones
      if (name == "shared.embedding") {
        stddev = 1.0;
      } else if (name.ends_with("wq.kernel")) {
        stddev = 1.0 / std::sqrt(d * d_kv);
      } else if (name.ends_with("wo.kernel")) {
        stddev = 1.0 / std::sqrt(heads * d_kv);
      } else if (name.ends_with("w2.kernel")) {
        stddev = 1.0 / std::sqrt(static_cast<double>(config.d_ff));
      } else {  // wk, wv, w1, w3, the bias tables, lm_head
        stddev = 1.0 / std::sqrt(d);
      }
      std::normal_distribution<double> dist(0.0, stddev);
      for (auto& w : p) w = mixprec::internal::round_to<T>(dist(rng));
    });
    return model;
  }

  /// The configuration.
  [[nodiscard]] const t5_config& config() const noexcept { return config_; }

  /// Zero gradients for every parameter.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g;
    g.shared = shared_.zero_gradients();
    g.encoder_bias = encoder_bias_.zero_gradients();
    for (const auto& b : encoder_) {
      g.encoder.push_back(
          {b.ln_1.zero_gradients(), b.attn.zero_gradients(), b.ln_2.zero_gradients(), b.mlp.zero_gradients()});
    }
    g.encoder_final = encoder_final_.zero_gradients();
    g.decoder_bias = decoder_bias_.zero_gradients();
    for (const auto& b : decoder_) {
      g.decoder.push_back({b.ln_1.zero_gradients(), b.self_attn.zero_gradients(), b.ln_2.zero_gradients(),
                           b.cross_attn.zero_gradients(), b.ln_3.zero_gradients(), b.mlp.zero_gradients()});
    }
    g.decoder_final = decoder_final_.zero_gradients();
    g.lm_head = lm_head_.zero_gradients();
    return g;
  }

  /// Teacher-forced logits [B, T, vocab] in H for encoder ids [B, S] with their padding mask [B, S]
  /// (true = real) and decoder input ids [B, T], saving in `s` what `backward` needs. `probe` sees the
  /// sites of the file comment (a probed forward is for inference: its feed-forward contexts are not
  /// saved, so it cannot be followed by `backward`).
  /// \throws std::invalid_argument for inconsistent shapes; std::out_of_range for an id outside the
  ///         vocabulary.
  template <diagnostics::probe Probe = diagnostics::null_probe>
  [[nodiscard]] logits_type forward(const id_matrix& encoder_ids, const mask_matrix& encoder_mask,
                                    const id_matrix& decoder_ids, saved& s, Probe&& probe = {}) const {
    const xt::xtensor<H, 3> enc = encode(encoder_ids, encoder_mask, s, probe);
    return decode(decoder_ids, enc, encoder_mask, s, probe);
  }

  /// The vector-Jacobian product of `forward` from the logits' cotangent [B, T, vocab]: adds every
  /// parameter's gradient into `g` (the shared embedding receives both lookups' gradients; each bias
  /// table the sum over its stack's layers, mapped to the table once).
  /// \throws std::invalid_argument when dlogits' shape is not the forward's logits'.
  template <class DLogits>
  void backward(const saved& s, const DLogits& dlogits, gradients& g) const {
    const std::size_t d_width = config_.n_heads * (2 * s.decoder_seq - 1);
    const std::size_t e_width = config_.n_heads * (2 * s.encoder_seq - 1);
    std::vector<A> d_decoder_bias(d_width, A(0)), d_encoder_bias(e_width, A(0));

    // Decoder, last layer first.
    auto ds = decoder_final_.backward_fused(s.decoder_final, lm_head_.backward(s.lm_head, dlogits, g.lm_head),
                                            g.decoder_final);
    std::optional<xt::xtensor<R, 3>> d_encoder_out;  // the sum of every cross-attention's d_context
    for (std::size_t l = decoder_.size(); l-- > 0;) {
      const auto& b = decoder_[l];
      const auto& c = s.decoder[l];
      auto& gb = g.decoder[l];
      const auto df = b.mlp.backward(c.mlp, ds, gb.mlp);
      const auto ds3 = b.ln_3.backward(c.ln_3, df, ds, gb.ln_3);
      const auto cross = b.cross_attn.cross_backward(c.cross_attn, ds3, gb.cross_attn);
      if (!d_encoder_out) {
        d_encoder_out = xt::xtensor<R, 3>::from_shape(cross.d_context.shape());
        d_encoder_out->fill(R(0));
      }
      add_into(*d_encoder_out, cross.d_context);
      const auto ds2 = b.ln_2.backward(c.ln_2, cross.dx, ds3, gb.ln_2);
      const auto dh = b.self_attn.backward(c.self_attn, ds2, gb.self_attn, std::span<A>(d_decoder_bias));
      ds = b.ln_1.backward(c.ln_1, dh, ds2, gb.ln_1);
    }
    shared_.backward(s.decoder_embed, ds, g.shared);
    decoder_bias_.backward(s.decoder_seq, std::span<const A>(d_decoder_bias), g.decoder_bias);

    // Encoder, from the cotangent of its output.
    auto de = encoder_final_.backward_fused(s.encoder_final, *d_encoder_out, g.encoder_final);
    for (std::size_t l = encoder_.size(); l-- > 0;) {
      const auto& b = encoder_[l];
      const auto& c = s.encoder[l];
      auto& gb = g.encoder[l];
      const auto df = b.mlp.backward(c.mlp, de, gb.mlp);
      const auto ds2 = b.ln_2.backward(c.ln_2, df, de, gb.ln_2);
      const auto dh = b.attn.backward(c.attn, ds2, gb.attn, std::span<A>(d_encoder_bias));
      de = b.ln_1.backward(c.ln_1, dh, ds2, gb.ln_1);
    }
    shared_.backward(s.encoder_embed, de, g.shared);
    encoder_bias_.backward(s.encoder_seq, std::span<const A>(d_encoder_bias), g.encoder_bias);
  }

  /// Greedy decoding of a batch: the encoder runs once, each cross-attention's keys and values are
  /// projected once per sequence into its cache (`fill_context`), and the decoder runs one token per
  /// step for every row at once, each self-attention appending to its cache. Returns each row's ids
  /// after bos, up to and including the first eos (or `max_steps` ids). The relative position bias of a
  /// step covers the cache's keys and the new one (rows for step + 1 keys).
  /// \throws std::invalid_argument for inconsistent shapes or max_steps 0.
  [[nodiscard]] std::vector<std::vector<std::int32_t>> greedy_decode(const id_matrix& encoder_ids,
                                                                     const mask_matrix& encoder_mask,
                                                                     std::size_t max_steps) const {
    if (max_steps == 0) throw std::invalid_argument("greedy_decode: max_steps must be at least 1");
    saved s;
    diagnostics::null_probe none;
    const xt::xtensor<H, 3> enc = encode(encoder_ids, encoder_mask, s, none);
    const std::size_t batch = encoder_ids.shape()[0];
    using cache_type = typename attention_type::template cache_type<H>;
    std::vector<cache_type> self_caches, cross_caches;
    for (const auto& b : decoder_) {
      self_caches.push_back(b.self_attn.template make_cache<H>(batch, max_steps));
      cross_caches.push_back(b.cross_attn.template make_cache<H>(batch, encoder_ids.shape()[1]));
      b.cross_attn.fill_context(enc, encoder_mask, cross_caches.back());
    }
    std::vector<std::vector<std::int32_t>> out(batch);
    std::vector<bool> done(batch, false);
    id_matrix token = id_matrix::from_shape({batch, 1});
    token.fill(reversal_data::bos);
    for (std::size_t step = 0; step < max_steps; ++step) {
      const std::vector<A> rows = decoder_bias_.template rows<H>(step + 1);
      const auto bias = bias_type::relative(std::span<const A>(rows), config_.n_heads);
      auto first = decoder_.front().ln_1(shared_(token), nn::no_residual);
      xt::xtensor<H, 3> h = std::move(first.x);
      xt::xtensor<R, 3> r = std::move(first.residual);
      for (std::size_t l = 0; l < decoder_.size(); ++l) {
        const auto& b = decoder_[l];
        auto mid = b.ln_2(b.self_attn(h, self_caches[l], bias), r);
        auto mid2 = b.ln_3(b.cross_attn.cross(mid.x, cross_caches[l]), mid.residual);
        auto next = opening_norm(decoder_, decoder_final_, l + 1)(b.mlp(mid2.x), mid2.residual);
        h = std::move(next.x);
        r = std::move(next.residual);
      }
      const xt::xtensor<H, 3> logits = lm_head_(h);  // [batch, 1, vocab]
      bool all_done = true;
      for (std::size_t row = 0; row < batch; ++row) {
        const H* z = logits.data() + row * config_.vocab;
        const auto id = static_cast<std::int32_t>(std::max_element(z, z + config_.vocab) - z);
        token(row, 0) = id;
        if (!done[row]) {
          out[row].push_back(id);
          done[row] = id == reversal_data::eos;
        }
        all_done = all_done && done[row];
      }
      if (all_done) break;
    }
    return out;
  }

  /// Applies a float16 residual-scale plan per stack (diagnostics/residual_scale_plan.hpp, as
  /// examples/fp16_plan applies it): in block l of each stack the out-projections (attention wo, the
  /// decoder's cross-attention wo, the feed-forward w2) times S_l, the norm opening the block with
  /// residual scale S_l / S_(l-1) and epsilon eps S_(l-1)^2, the block's inner norms with epsilon
  /// eps S_l^2, the stack's final norm with epsilon eps S_last^2. Every factor is a power of two: the
  /// float32 weights and stream are scaled exactly. The probe sites stay comparable (file comment).
  /// Apply a plan once, to a model without one.
  /// \throws std::invalid_argument when a plan does not have one entry per block of its stack, or the
  ///         model already has a plan.
  void apply_plan(const diagnostics::residual_scale_plan& encoder_plan,
                  const diagnostics::residual_scale_plan& decoder_plan) {
    if (encoder_plan.blocks.size() != encoder_.size() || decoder_plan.blocks.size() != decoder_.size()) {
      throw std::invalid_argument("t5_model::apply_plan: the plans have " + std::to_string(encoder_plan.blocks.size()) +
                                  " and " + std::to_string(decoder_plan.blocks.size()) + " blocks but the model " +
                                  std::to_string(encoder_.size()) + " and " + std::to_string(decoder_.size()));
    }
    if (has_plan()) {
      throw std::invalid_argument("t5_model::apply_plan: the model already has a plan; apply one to a fresh model");
    }
    const double eps = config_.epsilon;
    for (std::size_t l = 0; l < encoder_.size(); ++l) {
      const auto& p = encoder_plan.blocks[l];
      auto& b = encoder_[l];
      b.ln_1 = rescaled_norm(b.ln_1, p.opening_norm_epsilon(eps), p.residual_scale());
      b.ln_2 = rescaled_norm(b.ln_2, p.inner_norm_epsilon(eps), std::nullopt);
      scale_kernel(b.attn.wo(), p.scale);
      scale_kernel(b.mlp.w2(), p.scale);
      encoder_scales_[l] = p.scale;
    }
    encoder_final_ = rescaled_norm(encoder_final_, encoder_plan.final_norm_epsilon(eps), std::nullopt);
    for (std::size_t l = 0; l < decoder_.size(); ++l) {
      const auto& p = decoder_plan.blocks[l];
      auto& b = decoder_[l];
      b.ln_1 = rescaled_norm(b.ln_1, p.opening_norm_epsilon(eps), p.residual_scale());
      b.ln_2 = rescaled_norm(b.ln_2, p.inner_norm_epsilon(eps), std::nullopt);
      b.ln_3 = rescaled_norm(b.ln_3, p.inner_norm_epsilon(eps), std::nullopt);
      scale_kernel(b.self_attn.wo(), p.scale);
      scale_kernel(b.cross_attn.wo(), p.scale);
      scale_kernel(b.mlp.w2(), p.scale);
      decoder_scales_[l] = p.scale;
    }
    decoder_final_ = rescaled_norm(decoder_final_, decoder_plan.final_norm_epsilon(eps), std::nullopt);
  }

  /// Whether a plan with a scale other than 1 is applied.
  [[nodiscard]] bool has_plan() const noexcept {
    const auto unit = [](const std::vector<double>& s) {
      return std::all_of(s.begin(), s.end(), [](double x) { return x == 1.0; });
    };
    return !unit(encoder_scales_) || !unit(decoder_scales_);
  }

  /// A copy with the applied plan undone: out-projections divided by their block's scale (exact), every
  /// norm back to the config's epsilon and no residual scale. The same function as this model, with the
  /// parameters a model without a plan would have (what a checkpoint should hold).
  [[nodiscard]] t5_model without_plan() const {
    t5_model m = *this;
    const double eps = config_.epsilon;
    const auto reset = [eps](norm_type& n) { n = rescaled_norm(n, eps, std::nullopt); };
    for (std::size_t l = 0; l < m.encoder_.size(); ++l) {
      auto& b = m.encoder_[l];
      reset(b.ln_1);
      reset(b.ln_2);
      scale_kernel(b.attn.wo(), 1.0 / encoder_scales_[l]);
      scale_kernel(b.mlp.w2(), 1.0 / encoder_scales_[l]);
    }
    for (std::size_t l = 0; l < m.decoder_.size(); ++l) {
      auto& b = m.decoder_[l];
      reset(b.ln_1);
      reset(b.ln_2);
      reset(b.ln_3);
      scale_kernel(b.self_attn.wo(), 1.0 / decoder_scales_[l]);
      scale_kernel(b.cross_attn.wo(), 1.0 / decoder_scales_[l]);
      scale_kernel(b.mlp.w2(), 1.0 / decoder_scales_[l]);
    }
    reset(m.encoder_final_);
    reset(m.decoder_final_);
    m.encoder_scales_.assign(m.encoder_scales_.size(), 1.0);
    m.decoder_scales_.assign(m.decoder_scales_.size(), 1.0);
    return m;
  }

  /// Multiplies the feed-forward out-projection (w2) of block l of both stacks by growth^l: a model
  /// whose later blocks write ever larger values into the stream, as trained T5 encoders do
  /// (examples/fp16_plan's `growing_weights`). Not the same function: a stress test of float16.
  void grow_feed_forward_outputs(double growth) {
    for (std::size_t l = 0; l < encoder_.size(); ++l) {
      scale_kernel(encoder_[l].mlp.w2(), std::pow(growth, static_cast<double>(l)));
    }
    for (std::size_t l = 0; l < decoder_.size(); ++l) {
      scale_kernel(decoder_[l].mlp.w2(), std::pow(growth, static_cast<double>(l)));
    }
  }

  /// The residual blocks of each stack with the probe sites a plan reads: every out-projection output
  /// (added to the stream), and the feed-forward's hidden activation and each attention's context
  /// (checked only: values stored in the compute type that no residual scale reaches).
  [[nodiscard]] std::pair<std::vector<diagnostics::residual_block_sites>,
                          std::vector<diagnostics::residual_block_sites>>
  plan_sites() const {
    std::vector<diagnostics::residual_block_sites> enc, dec;
    for (std::size_t l = 0; l < encoder_.size(); ++l) {
      const std::string b = "encoder.layers." + std::to_string(l);
      enc.push_back({b, {b + ".attention.out", b + ".ffn.out"}, {b + ".attention.context", b + ".ffn.hidden"}});
    }
    for (std::size_t l = 0; l < decoder_.size(); ++l) {
      const std::string b = "decoder.layers." + std::to_string(l);
      dec.push_back({b,
                     {b + ".self_attention.out", b + ".cross_attention.out", b + ".ffn.out"},
                     {b + ".self_attention.context", b + ".cross_attention.context", b + ".ffn.hidden"}});
    }
    return {enc, dec};
  }

 private:
  using bias_type = typename attention_type::template bias_type<H>;

  /// The walk of `for_each_parameter` and of the gradients' `for_each` (`Self` is the model or its
  /// gradients: the same member names).
  template <class Self, class F>
  static void walk_parameters(Self& s, F& f) {
    nn::for_each_tensor(member(s, &t5_model::shared_, &gradients::shared), nn::prefixed("shared.", f));
    nn::for_each_tensor(member(s, &t5_model::encoder_bias_, &gradients::encoder_bias),
                        nn::prefixed("encoder.relative_attention_bias.", f));
    auto& enc = member(s, &t5_model::encoder_, &gradients::encoder);
    for (std::size_t l = 0; l < enc.size(); ++l) {
      auto g = nn::prefixed("encoder.layers." + std::to_string(l) + ".", f);
      std::remove_cvref_t<decltype(enc[l])>::walk(enc[l], g);
    }
    nn::for_each_tensor(member(s, &t5_model::encoder_final_, &gradients::encoder_final),
                        nn::prefixed("encoder.final_norm.", f));
    nn::for_each_tensor(member(s, &t5_model::decoder_bias_, &gradients::decoder_bias),
                        nn::prefixed("decoder.relative_attention_bias.", f));
    auto& dec = member(s, &t5_model::decoder_, &gradients::decoder);
    for (std::size_t l = 0; l < dec.size(); ++l) {
      auto g = nn::prefixed("decoder.layers." + std::to_string(l) + ".", f);
      std::remove_cvref_t<decltype(dec[l])>::walk(dec[l], g);
    }
    nn::for_each_tensor(member(s, &t5_model::decoder_final_, &gradients::decoder_final),
                        nn::prefixed("decoder.final_norm.", f));
    nn::for_each_tensor(member(s, &t5_model::lm_head_, &gradients::lm_head), nn::prefixed("lm_head.", f));
  }

  /// `s.*model_member` when `s` is the model, `s.*grad_member` when it is the gradients (either const).
  template <class Self, class M, class G>
  static auto& member(Self& s, M t5_model::*model_member, G gradients::*grad_member) {
    if constexpr (std::is_same_v<std::remove_const_t<Self>, t5_model>) {
      return s.*model_member;
    } else {
      return s.*grad_member;
    }
  }

  static t5_config checked(const t5_config& c) {
    const auto positive = [](std::size_t v, const char* what) {
      if (v == 0) throw std::invalid_argument(std::string("t5_model: ") + what + " is 0; it must be at least 1");
    };
    positive(c.vocab, "vocab");
    positive(c.d_model, "d_model");
    positive(c.n_heads, "n_heads");
    positive(c.d_ff, "d_ff");
    positive(c.encoder_layers, "encoder_layers");
    positive(c.decoder_layers, "decoder_layers");
    if (c.d_model % c.n_heads != 0) {
      throw std::invalid_argument("t5_model: n_heads = " + std::to_string(c.n_heads) +
                                  " does not divide d_model = " + std::to_string(c.d_model));
    }
    return c;
  }
  static norm_type norm(const t5_config& c) { return norm_type(c.d_model, {.epsilon = c.epsilon}); }
  static ffn_type ffn(const t5_config& c) {
    return ffn_type(nn::ffn_activation::geglu_tanh, nn::dense<P>(c.d_model, c.d_ff, nn::use_bias::no),
                    nn::dense<P>(c.d_ff, c.d_model, nn::use_bias::no),
                    nn::dense<P>(c.d_model, c.d_ff, nn::use_bias::no));
  }
  /// `norm`'s scale with another epsilon and residual scale.
  static norm_type rescaled_norm(const norm_type& norm, double epsilon, std::optional<double> residual_scale) {
    return norm_type::from_scale(*norm.scale(), {.epsilon = epsilon, .residual_scale = residual_scale});
  }
  static void scale_kernel(nn::dense<P>& layer, double factor) {
    for (auto& w : layer.kernel())
      w = mixprec::internal::round_to<typename P::param_type>(static_cast<double>(w) * factor);
  }
  /// The norm that opens block `next` of a stack (its ln_1), or the stack's final norm after the last.
  template <class Blocks>
  static const norm_type& opening_norm(const Blocks& blocks, const norm_type& final, std::size_t next) {
    return next < blocks.size() ? blocks[next].ln_1 : final;
  }
  /// x += y elementwise in x's type.
  template <class X, class Y>
  static void add_into(X& x, const Y& y) {
    using T = typename X::value_type;
    for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] += static_cast<T>(y.data()[i]);
  }

  /// Observes `t` at `site`, multiplied by `factor` (1 / a block's plan scale) when that is not 1.
  template <class Probe, class T>
  static void observe(Probe& probe, const std::string& site, const T& t, double factor = 1.0) {
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      using E = typename T::value_type;
      const std::span<const E> values(t.data(), t.size());
      if (factor == 1.0) {
        probe.observe(site, values);
      } else {
        probe.observe(site, rescaled(values, factor));
      }
    }
  }

  /// The feed-forward of a block: with an enabled probe its probed call (sites `<site>.hidden` and
  /// `<site>.out`, the output divided by the block's scale), else the training forward saving `ctx`.
  template <class Probe>
  static xt::xtensor<H, 3> run_mlp(const ffn_type& mlp, const xt::xtensor<H, 3>& x,
                                   typename ffn_type::template saved<H>& ctx, Probe& probe, const std::string& site,
                                   double factor) {
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      out_rescaling_probe<Probe> rescale{probe, factor};
      return mlp(x, rescale, site);
    } else {
      return mlp.forward(x, ctx);
    }
  }

  /// Self-attention of a block: with an enabled probe its probed call (sites `<site>.context` and
  /// `<site>.out`, the output divided by the block's scale), else the training forward saving `ctx`.
  template <class Probe, class Mask>
  static xt::xtensor<H, 3> run_attention(const attention_type& attn, const xt::xtensor<H, 3>& x, const Mask& mask,
                                         const bias_type& bias, typename attention_type::template saved<H>& ctx,
                                         Probe& probe, const std::string& site, double factor) {
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      out_rescaling_probe<Probe> rescale{probe, factor};
      return attn(x, mask, bias, rescale, site);
    } else {
      return attn.forward(x, mask, bias, ctx);
    }
  }

  /// Cross-attention of a block over the encoder's output, probed as `run_attention`.
  template <class Probe>
  static xt::xtensor<H, 3> run_cross(const attention_type& attn, const xt::xtensor<H, 3>& x,
                                     const xt::xtensor<H, 3>& enc, const mask_matrix& enc_mask,
                                     typename attention_type::template saved<H>& ctx, Probe& probe,
                                     const std::string& site, double factor) {
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      out_rescaling_probe<Probe> rescale{probe, factor};
      return attn.cross(x, enc, enc_mask, rescale, site);
    } else {
      return attn.cross_forward(x, enc, enc_mask, ctx);
    }
  }

  /// The encoder: its output [B, S, d] in H (see the file comment).
  template <class Probe>
  xt::xtensor<H, 3> encode(const id_matrix& ids, const mask_matrix& mask, saved& s, Probe& probe) const {
    const std::size_t seq = ids.shape()[1];
    s.encoder_seq = seq;
    s.encoder_bias = encoder_bias_.template rows<H>(seq);
    const auto bias = bias_type::relative(std::span<const A>(s.encoder_bias), config_.n_heads);
    s.encoder.resize(encoder_.size());
    const xt::xtensor<H, 3> e = shared_.forward(ids, s.encoder_embed);
    observe(probe, "encoder.embedding", e);
    auto first = encoder_.front().ln_1.forward(e, nn::no_residual, s.encoder.front().ln_1);
    xt::xtensor<H, 3> h = std::move(first.x);
    xt::xtensor<R, 3> r = std::move(first.residual);
    for (std::size_t l = 0; l < encoder_.size(); ++l) {
      const auto& b = encoder_[l];
      auto& c = s.encoder[l];
      const std::string site = "encoder.layers." + std::to_string(l);
      const double unscale = 1.0 / encoder_scales_[l];
      const xt::xtensor<H, 3> a = run_attention(b.attn, h, mask, bias, c.attn, probe, site + ".attention", unscale);
      auto mid = b.ln_2.forward(a, r, c.ln_2);
      const xt::xtensor<H, 3> f = run_mlp(b.mlp, mid.x, c.mlp, probe, site + ".ffn", unscale);
      const bool last = l + 1 == encoder_.size();
      auto& next_ctx = last ? s.encoder_final : s.encoder[l + 1].ln_1;
      auto next = opening_norm(encoder_, encoder_final_, l + 1).forward(f, mid.residual, next_ctx);
      h = std::move(next.x);
      r = std::move(next.residual);
      observe(probe, site + ".residual", r, 1.0 / (last ? encoder_scales_[l] : encoder_scales_[l + 1]));
    }
    observe(probe, "encoder.out", h);
    return h;
  }

  /// The decoder: logits [B, T, vocab] in H from decoder ids [B, T] and the encoder's output.
  template <class Probe>
  logits_type decode(const id_matrix& ids, const xt::xtensor<H, 3>& enc, const mask_matrix& enc_mask, saved& s,
                     Probe& probe) const {
    const std::size_t seq = ids.shape()[1];
    s.decoder_seq = seq;
    s.decoder_bias = decoder_bias_.template rows<H>(seq);
    const auto bias = bias_type::relative(std::span<const A>(s.decoder_bias), config_.n_heads);
    s.decoder.resize(decoder_.size());
    const xt::xtensor<H, 3> e = shared_.forward(ids, s.decoder_embed);
    observe(probe, "decoder.embedding", e);
    auto first = decoder_.front().ln_1.forward(e, nn::no_residual, s.decoder.front().ln_1);
    xt::xtensor<H, 3> h = std::move(first.x);
    xt::xtensor<R, 3> r = std::move(first.residual);
    for (std::size_t l = 0; l < decoder_.size(); ++l) {
      const auto& b = decoder_[l];
      auto& c = s.decoder[l];
      const std::string site = "decoder.layers." + std::to_string(l);
      const double unscale = 1.0 / decoder_scales_[l];
      const xt::xtensor<H, 3> a =
          run_attention(b.self_attn, h, nn::no_key_mask, bias, c.self_attn, probe, site + ".self_attention", unscale);
      auto mid = b.ln_2.forward(a, r, c.ln_2);
      const xt::xtensor<H, 3> x =
          run_cross(b.cross_attn, mid.x, enc, enc_mask, c.cross_attn, probe, site + ".cross_attention", unscale);
      auto mid2 = b.ln_3.forward(x, mid.residual, c.ln_3);
      const xt::xtensor<H, 3> f = run_mlp(b.mlp, mid2.x, c.mlp, probe, site + ".ffn", unscale);
      const bool last = l + 1 == decoder_.size();
      auto& next_ctx = last ? s.decoder_final : s.decoder[l + 1].ln_1;
      auto next = opening_norm(decoder_, decoder_final_, l + 1).forward(f, mid2.residual, next_ctx);
      h = std::move(next.x);
      r = std::move(next.residual);
      observe(probe, site + ".residual", r, 1.0 / (last ? decoder_scales_[l] : decoder_scales_[l + 1]));
    }
    observe(probe, "decoder.out", h);
    logits_type logits = lm_head_.forward(h, s.lm_head);
    observe(probe, "logits", logits);
    return logits;
  }

  t5_config config_;
  nn::embedding<P> shared_;
  bias_layer encoder_bias_;
  std::vector<encoder_layer> encoder_;
  norm_type encoder_final_;
  bias_layer decoder_bias_;
  std::vector<decoder_layer> decoder_;
  norm_type decoder_final_;
  nn::dense<P> lm_head_;
  std::vector<double> encoder_scales_, decoder_scales_;  ///< a plan's S_l per block (1 without a plan)
};

}  // namespace t5_example
