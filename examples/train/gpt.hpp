/// \file
/// \brief The GPT of nanoGPT's shakespeare_char recipe assembled from mixprec's layers: the embeddings,
/// a stack of library transformer blocks (`nn::repeated<nn::transformer_block<P>>`), the final norm and
/// the tied classifier, with a forward pass that saves what the backward pass needs, the backward pass,
/// and the parameter and gradient walks with dotted names.
///
/// Architecture (nanoGPT `model.py`, TRAINING.md §4): token + learned position embeddings; pre-norm
/// blocks `x += attn(ln_1(x)); x += mlp(ln_2(x))`; causal multi-head attention (separate q, k, v
/// projections: nanoGPT's fused `c_attn` split in three, the same function); MLP 4·C with exact GELU;
/// LayerNorm eps 1e-5 without bias; final `ln_f`; the classifier tied to the token embedding. No bias
/// anywhere, no dropout. The residual stream and the logits are float32 whatever the policy (float64
/// under a float64 compute type, for gradient checks); each layer casts per its policy `P`.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/nn/repeated.hpp"
#include "mixprec/nn/transformer_block.hpp"

namespace train_example {

namespace nn = mixprec::nn;

/// The hyper-parameters of the GPT (nanoGPT's `GPTConfig`, shakespeare_char CPU values by default).
struct gpt_config {
  std::size_t vocab = 65;    ///< characters
  std::size_t block = 64;    ///< context length T
  std::size_t n_layer = 4;   ///< transformer blocks
  std::size_t n_head = 4;    ///< attention heads
  std::size_t n_embd = 128;  ///< residual width C
  double ln_epsilon = 1e-5;  ///< PyTorch LayerNorm's default eps, as nanoGPT uses
  double init_std = 0.02;    ///< GPT-2 initialisation N(0, 0.02)
};

/// The GPT with policy `P`; see the file comment.
template <class P>
class gpt : public nn::parameter_walks<gpt<P>> {
  friend class nn::parameter_walks<gpt>;

 public:
  /// The element type of the residual stream and the logits: float32 (float64 under float64 compute).
  using value_type = mixprec::accumulator_t<nn::compute_t<P, float>>;
  /// The residual stream [B, T, C].
  using stream = xt::xtensor<value_type, 3>;
  /// The transformer blocks: layer_norm without bias, causal attention, GELU MLP 4·C.
  using blocks_type = nn::repeated<nn::transformer_block<P>>;

  /// The gradients of every parameter, same names and shapes, in `grad_t<P>` (float32; float64 for
  /// float64 parameters): a mixprec tree.
  struct gradients : nn::gradient_walks<gradients> {
    typename nn::embedding<P>::gradients wte, wpe;
    typename blocks_type::gradients blocks;
    typename nn::layer_norm<P>::gradients ln_f;

    static auto tree_children(auto& self) noexcept { return std::tie(self.wte, self.wpe, self.blocks, self.ln_f); }
    template <class Self, class F>
    static void walk(Self& g, F& f) {
      gpt::walk_parameters(g, f);
    }
  };

  /// GPT-2 initialisation (nanoGPT `_init_weights`): every matrix and embedding N(0, 0.02), the two
  /// residual out-projections (attention `wo`, MLP `w2`) N(0, 0.02 / sqrt(2 n_layer)), norms' scales 1.
  /// Draws in a fixed order from `rng` (std::normal_distribution: implementation-defined sequence).
  template <class Rng>
  gpt(const gpt_config& config, Rng& rng)
      : wte(config.vocab, config.n_embd),
        wpe(config.block, config.n_embd),
        blocks(config.n_layer, nn::transformer_block<P>(
                                   {.attention = {.d_model = config.n_embd, .n_heads = config.n_head, .causal = true},
                                    .norm_epsilon = config.ln_epsilon})),
        ln_f(config.n_embd, {.epsilon = config.ln_epsilon, .use_scale = true, .use_bias = false}) {
    const double residual_std = config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
    this->for_each_parameter([&](std::string_view name, auto& p) {
      using T = typename std::remove_cvref_t<decltype(p)>::value_type;
      if (name.find("ln_") != std::string_view::npos) return;  // norms' scales stay 1
      const bool residual_out = name.ends_with("attn.wo.kernel") || name.ends_with("mlp.w2.kernel");
      std::normal_distribution<double> dist(0.0, residual_out ? residual_std : config.init_std);
      for (auto& w : p) w = mixprec::internal::round_to<T>(dist(rng));
    });
  }

  /// Calls `f(dotted_name, dense&)` on the blocks' projections ("blocks.<l>.attn.wq", ..., ".mlp.w2"), the
  /// products a float8 run replaces; the embeddings and the tied classifier keep the policy's product.
  template <class F>
  void for_each_projection(F&& f) {
    blocks.for_each_projection([&](const std::string& name, auto& layer) { f("blocks." + name, layer); });
  }

  /// Zero gradients for every parameter.
  [[nodiscard]] gradients zero_gradients() const {
    return {{}, wte.zero_gradients(), wpe.zero_gradients(), blocks.zero_gradients(), ln_f.zero_gradients()};
  }

  /// What `backward` needs from `forward`.
  struct saved {
    typename nn::embedding<P>::saved wte, wpe;
    typename blocks_type::template saved<value_type> blocks;
    typename nn::layer_norm<P>::template saved<value_type> ln_f;
    typename nn::embedding<P>::template attend_saved<nn::output_t<P, value_type>> head;
  };

  /// Logits [B, T, vocab] (float32) for ids [B, T]: the inference path (no saved context).
  [[nodiscard]] xt::xtensor<value_type, 3> logits(const xt::xtensor<std::int32_t, 2>& ids) const {
    const auto pos = position_ids(ids.shape()[0], ids.shape()[1]);
    return wte.template attend_logits<value_type>(ln_f(blocks(sum(wte(ids), wpe(pos)))));
  }

  /// The mean cross-entropy of `targets` [B, T] given `ids` [B, T] (float64 sum of float32 terms).
  [[nodiscard]] double loss(const xt::xtensor<std::int32_t, 2>& ids,
                            const xt::xtensor<std::int32_t, 2>& targets) const {
    return nn::cross_entropy_loss(logits(ids), std::span<const std::int32_t>(targets.data(), targets.size()));
  }

  /// Forward pass saving into `ctx`; returns the logits [B, T, vocab] in float32.
  [[nodiscard]] xt::xtensor<value_type, 3> forward(const xt::xtensor<std::int32_t, 2>& ids, saved& ctx) const {
    const auto pos = position_ids(ids.shape()[0], ids.shape()[1]);
    const stream x = blocks.forward(sum(wte.forward(ids, ctx.wte), wpe.forward(pos, ctx.wpe)), ctx.blocks);
    return wte.template attend_forward<value_type>(ln_f.forward(x, ctx.ln_f), ctx.head);
  }

  /// Backward pass from the logits' cotangent [B, T, vocab]: adds every parameter's gradient into `g`.
  void backward(const saved& ctx, const xt::xtensor<value_type, 3>& dlogits, gradients& g) const {
    const auto dh = wte.attend_backward(ctx.head, dlogits, g.wte);  // [B, T, C], tied: adds into g.wte
    const stream dx = blocks.backward(ctx.blocks, ln_f.backward(ctx.ln_f, dh, g.ln_f), g.blocks);
    wte.backward(ctx.wte, dx, g.wte);
    wpe.backward(ctx.wpe, dx, g.wpe);
  }

 private:
  /// The positions 0..T-1 of every row [B, T].
  static xt::xtensor<std::int32_t, 2> position_ids(std::size_t batch, std::size_t seq) {
    return xt::broadcast(xt::arange<std::int32_t>(static_cast<std::int32_t>(seq)), {batch, seq});
  }

  /// The token and position embeddings added in the stream's type.
  template <class A, class B>
  static stream sum(const A& tok, const B& pos) {
    return xt::cast<value_type>(tok) + xt::cast<value_type>(pos);
  }

  /// The walk of `for_each_parameter` (nn::parameter_walks) and of the gradients' `for_each` (`Self` is
  /// gpt or gradients: the same parts, the same names): "wte.embedding", "wpe.embedding",
  /// "blocks.<l>.ln_1.scale", "blocks.<l>.attn.wq.kernel", ..., "blocks.<l>.mlp.w2.kernel", "ln_f.scale".
  template <class Self, class F>
  static void walk_parameters(Self& s, F& f) {
    nn::for_each_tensor(s.wte, nn::prefixed("wte.", f));
    nn::for_each_tensor(s.wpe, nn::prefixed("wpe.", f));
    nn::for_each_tensor(s.blocks, nn::prefixed("blocks.", f));
    nn::for_each_tensor(s.ln_f, nn::prefixed("ln_f.", f));
  }

  nn::embedding<P> wte;
  nn::embedding<P> wpe;
  blocks_type blocks;
  nn::layer_norm<P> ln_f;
};

}  // namespace train_example
