/// \file
/// \brief `llama::model<P>`: the Llama-2 decoder of a llama2.c checkpoint (stories260K) as the library's
/// `nn::causal_lm<P, nn::rms_norm<P>>` (token embedding, transformer blocks with grouped-query
/// attention, adjacent-pair RoPE and SwiGLU, final rms_norm, tied classifier) under the precision
/// policy `P`, decoding one token at a time. The weights come in as a state dict
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

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

#include <mixprec/diagnostics/probe.hpp>
#include <mixprec/nn/causal_lm.hpp>
#include <mixprec/train/state_dict.hpp>

#include "llama2c_state_dict.hpp"

namespace llama {

/// RMSNorm epsilon of llama2.c (run.c `rmsnorm`: `ss += 1e-5f`; model.py `norm_eps = 1e-5`).
inline constexpr double rms_norm_epsilon = 1e-5;
/// RoPE base of Llama 2 and llama2.c (run.c `powf(10000.0f, head_dim / (float)head_size)`).
inline constexpr double rope_theta = 10000.0;

/// A llama2.c Llama-2 model under the policy `P`, decoding a single sequence: call `forward(token)` for
/// the tokens of the sequence in order; the n-th call (from 0) runs at position n. `reset()` starts a
/// new sequence.
///
/// - **Weights**: loaded from a `llama2c::checkpoint` (float32, `[out, in]`), rounded once to
///   `P::param_type`. The classifier is the token embedding; checkpoints with a separate classifier
///   (`wcls`) are rejected.
/// - **Types**: activations between layers and the logits are `activation_type` (the policy's output
///   type); the residual stream is float32 (float64 under float64 compute).
/// - **Errors**: the constructor throws std::invalid_argument for a checkpoint with an untied classifier
///   or no layer; `forward` throws std::out_of_range for a token outside the vocabulary and
///   std::length_error once `seq_len` positions have been decoded.
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
class model {
  static_assert(!mixprec::uses_promote_v<P>,
                "llama::model needs a policy with explicit compute and output types (no mixprec::promote): the "
                "activations between layers have the policy's output type.");

 public:
  using policy_type = P;
  /// The library model: rms_norm blocks, rotary grouped-query attention, SwiGLU, tied classifier.
  using lm_type = mixprec::nn::causal_lm<P, mixprec::nn::rms_norm<P>>;
  /// Element type of the activations between layers and of the logits: the policy's output type.
  using activation_type = typename lm_type::activation_type;
  /// Logits [vocab].
  using logits_type = xt::xtensor<activation_type, 1>;

  /// Builds the model from a checkpoint (which need not outlive it).
  /// \throws std::invalid_argument when the checkpoint has a separate classifier (wcls) or no layer;
  ///   mixprec::train::safetensors_error when a tensor's shape does not match the configuration.
  explicit model(const llama2c::checkpoint& ck)
      : config_(ck.config), lm_(lm_config(ck.config)), state_(lm_.make_decode_state(size(ck.config.seq_len))) {
    mixprec::train::load_state(llama2c::state_dict(ck), lm_, {}, {.convert = true});  // rounded once to Param
  }

  /// The checkpoint's hyper-parameters.
  [[nodiscard]] const llama2c::model_config& config() const noexcept { return config_; }
  /// Number of tokens decoded since construction or the last `reset()`: the position of the next token.
  [[nodiscard]] std::size_t position() const noexcept { return state_.position(); }

  /// Calls `f(mixprec::nn::dense<P>&)` on every projection of every layer (wq, wk, wv, wo, w1, w2, w3,
  /// in that order, layer by layer), for example to inject a product with `set_dot`
  /// (`scaled::float8_weight_dot` for weight-only float8). The classifier is not a projection.
  template <class F>
  void for_each_projection(F&& f) {
    lm_.for_each_projection([&](const std::string& /*name*/, auto& layer) { f(layer); });
  }

  /// Forgets the sequence (clears every key/value cache): the next token is at position 0.
  void reset() { state_.reset(); }

  /// Runs one decoding step: `token` at position `position()`. Returns the logits [vocab] in
  /// `activation_type`. Every site of the file comment is passed to `probe.observe`.
  /// \throws std::out_of_range if `token` is not in [0, vocab_size); std::length_error once seq_len
  ///   positions have been decoded (call reset()).
  template <mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
  logits_type forward(int token, Probe&& probe = {}) {
    return lm_.decode(token, state_, probe);
  }

  /// `forward(token, probe)` writing the logits into `logits` ([vocab]; a caller's buffer, reused across
  /// steps). With the null probe, a step after the first makes **no heap allocation**
  /// (tests/llama/allocation_test.cpp counts).
  /// \throws std::invalid_argument if `logits` does not have vocab_size elements; otherwise as `forward`.
  template <mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
  void forward_into(logits_type& logits, int token, Probe&& probe = {}) {
    lm_.decode_into(std::span<activation_type>(logits.data(), logits.size()), token, state_, probe);
  }

 private:
  static std::size_t size(int v) { return static_cast<std::size_t>(v); }

  static mixprec::nn::causal_lm_config lm_config(const llama2c::model_config& c) {
    if (!c.shared_classifier) {
      throw std::invalid_argument(
          "llama::model: this checkpoint has a separate classifier (wcls; negative vocab_size in its header); the "
          "example supports tied classifiers only (the classifier is the token embedding, as in stories260K)");
    }
    if (c.n_layers < 1) {
      throw std::invalid_argument("llama::model: the checkpoint has n_layers = " + std::to_string(c.n_layers) +
                                  "; a model needs at least one layer");
    }
    return {
        .vocab = size(c.vocab_size),
        .n_layers = size(c.n_layers),
        .block = {.attention = {.d_model = size(c.dim),
                                .n_heads = size(c.n_heads),
                                .n_kv_heads = size(c.n_kv_heads),
                                .head_dim = size(c.head_size()),
                                .causal = true,
                                .rotary = mixprec::nn::rotary_config{.layout = mixprec::nn::rope_layout::adjacent_pairs,
                                                                     .theta = rope_theta}},
                  .hidden = size(c.hidden_dim),
                  .activation = mixprec::nn::ffn_activation::swiglu,
                  .norm_epsilon = rms_norm_epsilon}};
  }

  llama2c::model_config config_;
  lm_type lm_;
  typename lm_type::decode_state state_;
};

}  // namespace llama
