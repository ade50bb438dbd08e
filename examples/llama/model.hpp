/// \file
/// \brief `llama::model<P>`: the Llama-2 decoder of a llama2.c checkpoint (stories260K) assembled from
/// mixprec's layers only — `nn::embedding`, library transformer blocks (`nn::transformer_block` with
/// `nn::rms_norm` in its fused residual form, `nn::attention`: grouped-query, adjacent-pair RoPE,
/// causal, key/value cache, and a SwiGLU `nn::feed_forward`) and a final `nn::rms_norm` — under the
/// precision policy `P`, decoding one token at a time. The weights come in as a state dict
/// (llama2c_state_dict.hpp), loaded strictly.
///
/// The architecture (llama2.c run.c `forward`, model.py; Touvron et al. 2023, "Llama 2"):
///
///     x = embedding[token]
///     for each layer l:  x += wo · attention(rmsnorm(x, rms_att[l]))                (RoPE, causal, GQA)
///                        x += w2 · (silu(w1 · rmsnorm(x, rms_ffn[l])) * (w3 · rmsnorm(x, rms_ffn[l])))
///     logits = embedding^T · rmsnorm(x, rms_final)                                 (tied classifier)
///
/// Under `P = policy<Param, Compute, Output>`: every weight is stored as Param (rounded once from the
/// file's float32); each layer rounds its inputs to Compute, accumulates in float32 (float64 under
/// float64 compute) and returns Output; the residual stream `x` is never rounded to a 16-bit type: it is
/// carried by the fused `rms_norm(x_block, residual)` form in `nn::residual_t<P, Output>` (float32, or
/// float64 under float64 compute), as flash-attention's `residual_in_fp32` and NovelAI's float16 T5 do.
///
/// **Probe sites**, in execution order, observed once per `forward` call (one decoding step):
///
/// | site | tensor | element type |
/// |---|---|---|
/// | `embedding` | the token's embedding row [dim] | Output |
/// | `layers.<l>.attention` | attention block output, after wo [dim] | Output |
/// | `layers.<l>.residual_attn` | residual stream after the attention add [dim] | residual_t |
/// | `layers.<l>.ffn` | feed-forward block output, after w2 [dim] | Output |
/// | `layers.<l>.residual` | residual stream after block l (both adds) [dim] | residual_t |
/// | `final_norm` | rmsnorm(x, rms_final), the classifier's input [dim] | Output |
/// | `logits` | [vocab] | Output |
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <mixprec/arrays/xtensor.hpp>
#include <mixprec/diagnostics/probe.hpp>
#include <mixprec/nn/embedding.hpp>
#include <mixprec/nn/parameters.hpp>
#include <mixprec/nn/repeated.hpp>
#include <mixprec/nn/transformer_block.hpp>
#include <mixprec/nn/workspace.hpp>
#include <mixprec/policies/policy.hpp>
#include <mixprec/train/state_dict.hpp>
#include <xtensor/xadapt.hpp>

#include "llama2c_state_dict.hpp"

namespace llama {

/// RMSNorm epsilon of llama2.c (run.c `rmsnorm`: `ss += 1e-5f`; model.py `norm_eps = 1e-5`).
inline constexpr double rms_norm_epsilon = 1e-5;
/// RoPE base of Llama 2 and llama2.c (run.c `powf(10000.0f, head_dim / (float)head_size)`).
inline constexpr double rope_theta = 10000.0;

/// A llama2.c Llama-2 model under the policy `P`, with one key/value cache per layer for incremental
/// decoding of a single sequence: call `forward(token)` for the tokens of the sequence in order; the
/// n-th call (from 0) runs at position n. `reset()` starts a new sequence.
///
/// - **Weights**: loaded from a `llama2c::checkpoint` (float32, `[out, in]`), rounded once to
///   `P::param_type`. The classifier is the token embedding (`nn::embedding::attend`); checkpoints with a
///   separate classifier (`wcls`) are rejected.
/// - **Types**: activations between layers are `activation_type` (= the policy's output type); the
///   residual stream is `residual_type` (float32, or float64 under float64 compute); logits are
///   `activation_type`.
/// - **Errors**: the constructor throws std::invalid_argument for a checkpoint with an untied classifier
///   (and whatever the layers throw for inconsistent shapes); `forward` throws std::out_of_range for a
///   token outside the vocabulary and std::length_error once `seq_len` positions have been decoded.
///
/// `P` must not use `mixprec::promote` (the activation type would then depend on the input; give the
/// output type explicitly).
///
/// **Example**:
///
///     const auto ck = llama2c::read_checkpoint("stories260K.bin");
///     llama::model<mixprec::policy<float, mixprec::bfloat16, float>> m(ck);
///     auto logits = m.forward(1);                          // BOS at position 0: [vocab] float
///     mixprec::diagnostics::recording_probe probe;
///     auto next = m.forward(403, probe);                   // position 1, statistics per site recorded
template <class P>
class model : public mixprec::nn::parameter_walks<model<P>> {
  friend class mixprec::nn::parameter_walks<model>;
  static_assert(!mixprec::uses_promote_v<P>,
                "llama::model needs a policy with explicit compute and output types (no mixprec::promote): the "
                "activations between layers have the policy's output type.");

 public:
  using policy_type = P;                          ///< the policy
  using param_type = typename P::param_type;      ///< element type the weights are stored in
  using compute_type = typename P::compute_type;  ///< element type the layers compute in
  /// Element type of the activations between layers and of the logits: the policy's output type.
  using activation_type = typename P::output_type;
  /// Element type of the residual stream (float32, or float64 under float64 compute).
  using residual_type = mixprec::nn::residual_t<P, activation_type>;
  /// One transformer block: rms_norm, attention, rms_norm, SwiGLU.
  using block_type = mixprec::nn::transformer_block<P, mixprec::nn::rms_norm<P>>;
  /// The key/value cache of one layer (elements of the compute type).
  using cache_type = typename block_type::template cache_type<activation_type>;
  /// Logits [vocab].
  using logits_type = xt::xtensor<activation_type, 1>;

  /// Builds the model from a checkpoint (which need not outlive it).
  /// \throws std::invalid_argument when the checkpoint has a separate classifier (wcls) or no layer;
  ///   mixprec::train::safetensors_error when a tensor's shape does not match the configuration.
  explicit model(const llama2c::checkpoint& ck)
      : config_(ck.config),
        embedding_(size(ck.config.vocab_size), size(ck.config.dim)),
        layers_(size(ck.config.n_layers), block_type(block_config(ck.config))),
        final_norm_(size(ck.config.dim), {.epsilon = rms_norm_epsilon}) {
    if (!ck.config.shared_classifier) {
      throw std::invalid_argument(
          "llama::model: this checkpoint has a separate classifier (wcls; negative vocab_size in its header); the "
          "example supports tied classifiers only (the classifier is the token embedding, as in stories260K)");
    }
    if (config_.n_layers < 1) {
      throw std::invalid_argument("llama::model: the checkpoint has n_layers = " + std::to_string(config_.n_layers) +
                                  "; a model needs at least one layer");
    }
    mixprec::train::load_state(llama2c::state_dict(ck), *this, {}, {.convert = true});  // rounded once to Param
    for (const auto& block : layers_.layers()) {
      caches_.push_back(block.attn().template make_cache<activation_type>(1, size(config_.seq_len)));
    }
  }

  /// The checkpoint's hyper-parameters.
  [[nodiscard]] const llama2c::model_config& config() const noexcept { return config_; }
  /// Number of tokens decoded since construction or the last `reset()`: the position of the next token.
  [[nodiscard]] std::size_t position() const noexcept { return caches_.empty() ? 0 : caches_.front().size(); }

  /// Calls `f(mixprec::nn::dense<P>&)` on every projection of every layer (wq, wk, wv, wo, w1, w2, w3,
  /// in that order, layer by layer), for example to inject a product with `set_dot`
  /// (`scaled::float8_weight_dot` for weight-only float8). The classifier (the token embedding) is
  /// not a projection.
  template <class F>
  void for_each_projection(F&& f) {
    layers_.for_each_projection([&](const std::string& /*name*/, auto& layer) { f(layer); });
  }

  /// Forgets the sequence (clears every key/value cache): the next token is at position 0.
  void reset() {
    for (auto& cache : caches_) cache.clear();
  }

  /// Runs one decoding step: `token` at position `position()`, appended to the caches. Returns the
  /// logits [vocab] in `activation_type`. Every site of the file comment is passed to `probe.observe`.
  /// \throws std::out_of_range if `token` is not in [0, vocab_size); std::length_error once seq_len
  ///   positions have been decoded (call reset()).
  template <mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
  logits_type forward(int token, Probe&& probe = {}) {
    logits_type out = logits_type::from_shape({size(config_.vocab_size)});
    forward_into(out, token, probe);
    return out;
  }

  /// `forward(token, probe)` writing the logits into `logits` ([vocab]; a caller's buffer, reused across
  /// steps). With the null probe, a step after the first makes **no heap allocation**: the activations
  /// live in buffers of the model, the layers' scratch in its `nn::workspace`, the packed weights and
  /// the key/value caches were made before (tests/llama/allocation_test.cpp counts).
  /// \throws std::invalid_argument if `logits` does not have vocab_size elements; otherwise as `forward`.
  template <mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
  void forward_into(logits_type& logits, int token, Probe&& probe = {}) {
    if (position() >= size(config_.seq_len)) {
      throw std::length_error("llama::model::forward: the sequence already has seq_len = " +
                              std::to_string(config_.seq_len) + " tokens (the model's context); call reset()");
    }
    if (logits.size() != size(config_.vocab_size)) {
      throw std::invalid_argument("llama::model::forward_into: logits has " + std::to_string(logits.size()) +
                                  " elements; make it [vocab_size] = [" + std::to_string(config_.vocab_size) + "]");
    }
    ids_(0) = static_cast<std::int32_t>(token);
    embedding_.forward_into(h_, ids_);  // [1, dim]; throws std::out_of_range
    probe.observe("embedding", std::span<const activation_type>(h_.data(), h_.size()));
    // The residual stream starts as the embedding; each block's adds are fused into the norm after them.
    layers_[0].ln_1().forward_into(x_, residual_, h_, mixprec::nn::no_residual, workspace_);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const auto& next_norm = l + 1 < layers_.size() ? layers_[l + 1].ln_1() : final_norm_;
      std::string site;
      if constexpr (mixprec::diagnostics::probe_enabled_v<Probe>) site = "layers." + std::to_string(l);
      layers_[l].decode_into(x_, residual_, block_out_, caches_[l], next_norm, workspace_, probe, site);
    }
    probe.observe("final_norm", std::span<const activation_type>(x_.data(), x_.size()));
    auto row =
        xt::adapt(logits.data(), logits.size(), xt::no_ownership(), std::array<std::size_t, 2>{1, logits.size()});
    embedding_.attend_into(row, x_);  // [1, dim] -> [1, vocab], written into `logits` in place
    probe.observe("logits", std::span<const activation_type>(logits.data(), logits.size()));
  }

 private:
  static std::size_t size(int v) { return static_cast<std::size_t>(v); }

  static mixprec::nn::transformer_block_config block_config(const llama2c::model_config& c) {
    return {.attention = {.d_model = size(c.dim),
                          .n_heads = size(c.n_heads),
                          .n_kv_heads = size(c.n_kv_heads),
                          .head_dim = size(c.head_size()),
                          .causal = true,
                          .rotary = mixprec::nn::rotary_config{.layout = mixprec::nn::rope_layout::adjacent_pairs,
                                                               .theta = rope_theta}},
            .hidden = size(c.hidden_dim),
            .activation = mixprec::nn::ffn_activation::swiglu,
            .norm_epsilon = rms_norm_epsilon};
  }

  /// The walk of `for_each_parameter` (nn::parameter_walks): "tok_embeddings.embedding",
  /// "layers.<l>.ln_1.scale", "layers.<l>.attn.wq.kernel", ..., "layers.<l>.mlp.w3.kernel", "norm.scale"
  /// (the names of llama2c_state_dict.hpp).
  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    self.embedding_.for_each_parameter(mixprec::nn::prefixed("tok_embeddings.", f));
    self.layers_.for_each_parameter(mixprec::nn::prefixed("layers.", f));
    self.final_norm_.for_each_parameter(mixprec::nn::prefixed("norm.", f));
  }

  template <class T>
  static xt::xtensor<T, 2> row(int n) {
    return xt::xtensor<T, 2>::from_shape({std::size_t{1}, size(n)});
  }

  llama2c::model_config config_;
  mixprec::nn::embedding<P> embedding_;
  mixprec::nn::repeated<block_type> layers_;
  mixprec::nn::rms_norm<P> final_norm_;
  std::vector<cache_type> caches_;
  // The buffers of one decoding step, made once: the token id [1], the embedding row, the normalised
  // activations and a block's output [1, dim], the residual stream [1, dim]; and the layers' scratch.
  xt::xtensor<std::int32_t, 1> ids_ = xt::xtensor<std::int32_t, 1>::from_shape({1});
  xt::xtensor<activation_type, 2> h_ = row<activation_type>(config_.dim);
  xt::xtensor<activation_type, 2> x_ = row<activation_type>(config_.dim);
  xt::xtensor<activation_type, 2> block_out_ = row<activation_type>(config_.dim);
  xt::xtensor<residual_type, 2> residual_ = row<residual_type>(config_.dim);
  mixprec::nn::workspace workspace_;
};

}  // namespace llama
