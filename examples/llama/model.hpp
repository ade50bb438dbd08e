/// \file
/// \brief `llama::model<P>`: the Llama-2 decoder of a llama2.c checkpoint (stories260K) assembled from
/// mixprec's layers only — `nn::embedding`, `nn::rms_norm` (fused residual form), `nn::attention`
/// (grouped-query, adjacent-pair RoPE, causal, key/value cache) and `nn::feed_forward` (SwiGLU) — under
/// the precision policy `P`, decoding one token at a time.
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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mixprec/arrays/xtensor.hpp>
#include <mixprec/diagnostics/probe.hpp>
#include <mixprec/nn/attention.hpp>
#include <mixprec/nn/embedding.hpp>
#include <mixprec/nn/feed_forward.hpp>
#include <mixprec/nn/rms_norm.hpp>
#include <mixprec/nn/workspace.hpp>
#include <mixprec/policies/policy.hpp>

#include "llama2c_checkpoint.hpp"

namespace llama {

namespace detail {

/// Slice `index` of the leading axis of `t` (e.g. layer l of an [L, out, in] tensor) as a float32 matrix
/// [rows, cols]. \throws std::out_of_range / std::logic_error when the slice does not have rows * cols values.
inline xt::xtensor<float, 2> matrix(const llama2c::tensor& t, std::size_t index, std::size_t rows, std::size_t cols) {
  const std::span<const float> s = t.slice(index);
  if (s.size() != rows * cols) {
    throw std::logic_error("llama::model: a checkpoint slice has " + std::to_string(s.size()) + " values, expected " +
                           std::to_string(rows) + " x " + std::to_string(cols));
  }
  auto m = xt::xtensor<float, 2>::from_shape({rows, cols});
  std::copy(s.begin(), s.end(), m.data());
  return m;
}

/// `values` as a float32 vector [n].
inline xt::xtensor<float, 1> vector(std::span<const float> values) {
  auto v = xt::xtensor<float, 1>::from_shape({values.size()});
  std::copy(values.begin(), values.end(), v.data());
  return v;
}

/// The contiguous elements of an xtensor container, for `probe.observe`.
template <class X>
[[nodiscard]] auto elements(const X& x) {
  return std::span<const typename X::value_type>(x.data(), x.size());
}

/// "layers.<l>.<what>".
[[nodiscard]] inline std::string layer_site(std::size_t l, const char* what) {
  return "layers." + std::to_string(l) + "." + what;
}

}  // namespace detail

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
class model {
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
  /// The key/value cache of one layer (elements of the compute type).
  using cache_type = typename mixprec::nn::attention<P>::template cache_type<activation_type>;
  /// Logits [vocab].
  using logits_type = xt::xtensor<activation_type, 1>;

  /// Builds the model from a checkpoint (which need not outlive it).
  /// \throws std::invalid_argument when the checkpoint has a separate classifier (wcls) or no layer;
  ///   std::out_of_range / std::logic_error when a tensor's shape does not match the configuration.
  explicit model(const llama2c::checkpoint& ck)
      : config_(ck.config), embedding_(load_embedding(ck)), final_norm_(norm_from(ck.rms_final.values)) {
    if (config_.n_layers < 1) {
      throw std::invalid_argument("llama::model: the checkpoint has n_layers = " + std::to_string(config_.n_layers) +
                                  "; a model needs at least one layer");
    }
    const std::size_t dim = size(config_.dim), hidden = size(config_.hidden_dim), kv_dim = size(config_.kv_dim());
    const mixprec::nn::attention_config attention_config{
        .d_model = dim,
        .n_heads = size(config_.n_heads),
        .n_kv_heads = size(config_.n_kv_heads),
        .head_dim = size(config_.head_size()),
        .causal = true,
        .rotary = mixprec::nn::rotary_config{.layout = mixprec::nn::rope_layout::adjacent_pairs, .theta = rope_theta},
    };
    using dense = mixprec::nn::dense<P>;
    constexpr auto out_in = mixprec::nn::weight_layout::out_in;  // llama2.c stores [out, in]
    for (std::size_t l = 0; l < size(config_.n_layers); ++l) {
      layer block{
          norm_from(ck.rms_att.slice(l)),
          mixprec::nn::attention<P>::from_weights(
              attention_config, detail::matrix(ck.wq, l, dim, dim), detail::matrix(ck.wk, l, kv_dim, dim),
              detail::matrix(ck.wv, l, kv_dim, dim), detail::matrix(ck.wo, l, dim, dim), out_in),
          norm_from(ck.rms_ffn.slice(l)),
          mixprec::nn::feed_forward<P>(mixprec::nn::ffn_activation::swiglu,
                                       dense::from_weights(detail::matrix(ck.w1, l, hidden, dim), out_in),
                                       dense::from_weights(detail::matrix(ck.w2, l, dim, hidden), out_in),
                                       dense::from_weights(detail::matrix(ck.w3, l, hidden, dim), out_in)),
      };
      caches_.push_back(block.attention.template make_cache<activation_type>(1, size(config_.seq_len)));
      layers_.push_back(std::move(block));
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
    for (layer& l : layers_) {
      f(l.attention.wq());
      f(l.attention.wk());
      f(l.attention.wv());
      f(l.attention.wo());
      f(l.ffn.w1());
      f(l.ffn.w2());
      if (l.ffn.w3()) f(*l.ffn.w3());
    }
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
    constexpr bool probing = mixprec::diagnostics::probe_enabled_v<Probe>;
    ids_(0) = static_cast<std::int32_t>(token);
    embedding_.forward_into(h_, ids_);  // [1, dim]; throws std::out_of_range
    probe.observe("embedding", detail::elements(h_));

    // The residual stream starts as the embedding; each fused norm adds the previous block's output
    // and updates the stream in place.
    layers_.front().attention_norm.forward_into(x_, residual_, h_, mixprec::nn::no_residual, workspace_);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const layer& block = layers_[l];
      block.attention.forward_into(block_out_, x_, caches_[l], workspace_);
      if constexpr (probing) probe.observe(detail::layer_site(l, "attention"), detail::elements(block_out_));
      block.ffn_norm.forward_into(x_, residual_, block_out_, residual_, workspace_);
      if constexpr (probing) probe.observe(detail::layer_site(l, "residual_attn"), detail::elements(residual_));
      block.ffn.forward_into(block_out_, x_, workspace_);
      if constexpr (probing) probe.observe(detail::layer_site(l, "ffn"), detail::elements(block_out_));
      const auto& next_norm = l + 1 < layers_.size() ? layers_[l + 1].attention_norm : final_norm_;
      next_norm.forward_into(x_, residual_, block_out_, residual_, workspace_);
      if constexpr (probing) probe.observe(detail::layer_site(l, "residual"), detail::elements(residual_));
    }
    probe.observe("final_norm", detail::elements(x_));
    embedding_.attend_into(logits_row_, x_);  // [1, vocab]
    std::copy(logits_row_.data(), logits_row_.data() + logits_row_.size(), logits.data());
    probe.observe("logits", detail::elements(logits));
  }

 private:
  struct layer {
    mixprec::nn::rms_norm<P> attention_norm;
    mixprec::nn::attention<P> attention;
    mixprec::nn::rms_norm<P> ffn_norm;
    mixprec::nn::feed_forward<P> ffn;
  };

  static std::size_t size(int v) { return static_cast<std::size_t>(v); }

  template <class T>
  static xt::xtensor<T, 2> row(int n) {
    return xt::xtensor<T, 2>::from_shape({std::size_t{1}, size(n)});
  }

  static mixprec::nn::rms_norm<P> norm_from(std::span<const float> gain) {
    return mixprec::nn::rms_norm<P>::from_scale(detail::vector(gain), {.epsilon = rms_norm_epsilon});
  }

  static mixprec::nn::embedding<P> load_embedding(const llama2c::checkpoint& ck) {
    if (!ck.config.shared_classifier) {
      throw std::invalid_argument(
          "llama::model: this checkpoint has a separate classifier (wcls; negative vocab_size in its header); the "
          "example supports tied classifiers only (the classifier is the token embedding, as in stories260K)");
    }
    const auto& e = ck.token_embedding;
    auto table = xt::xtensor<float, 2>::from_shape({e.shape.at(0), e.shape.at(1)});
    std::copy(e.values.begin(), e.values.end(), table.data());
    return mixprec::nn::embedding<P>::from_table(table);
  }

  llama2c::model_config config_;
  mixprec::nn::embedding<P> embedding_;
  mixprec::nn::rms_norm<P> final_norm_;
  std::vector<layer> layers_;
  std::vector<cache_type> caches_;
  // The buffers of one decoding step, made once: the token id [1], the embedding row, the normalised
  // activations and a block's output [1, dim], the residual stream [1, dim], the logits [1, vocab]; and
  // the layers' scratch.
  xt::xtensor<std::int32_t, 1> ids_ = xt::xtensor<std::int32_t, 1>::from_shape({1});
  xt::xtensor<activation_type, 2> h_ = row<activation_type>(config_.dim);
  xt::xtensor<activation_type, 2> x_ = row<activation_type>(config_.dim);
  xt::xtensor<activation_type, 2> block_out_ = row<activation_type>(config_.dim);
  xt::xtensor<residual_type, 2> residual_ = row<residual_type>(config_.dim);
  xt::xtensor<activation_type, 2> logits_row_ = row<activation_type>(config_.vocab_size);
  mixprec::nn::workspace workspace_;
};

}  // namespace llama
