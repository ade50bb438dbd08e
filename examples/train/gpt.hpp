/// \file
/// \brief The GPT of nanoGPT's shakespeare_char recipe assembled from mixprec's layers, with a forward
/// pass that saves what the backward pass needs and the backward pass itself (the layers' VJPs called
/// in reverse, residual cotangents routed by hand), the parameter tree with dotted names, and the
/// gradients tree with the same names.
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
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/layer_norm.hpp"

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
class gpt {
 public:
  using param_type = typename P::param_type;
  using grad_type = nn::grad_t<P>;
  /// The element type of the residual stream and the logits: float32 (float64 under float64 compute).
  using value_type = mixprec::accumulator_t<nn::compute_t<P, float>>;
  /// The residual stream [B, T, C].
  using stream = xt::xtensor<value_type, 3>;
  /// The element type of the norms' outputs: the input of attention, the MLP and the classifier.
  using norm_out_t = nn::output_t<P, value_type>;

  /// One transformer block.
  struct block {
    nn::layer_norm<P> ln_1;
    nn::attention<P> attn;
    nn::layer_norm<P> ln_2;
    nn::feed_forward<P> mlp;
  };

  /// The gradients of every parameter, same names and shapes, in `grad_t<P>` (float32; float64 for
  /// float64 parameters).
  struct gradients {
    typename nn::embedding<P>::gradients wte, wpe;
    struct block_gradients {
      typename nn::layer_norm<P>::gradients ln_1;
      typename nn::attention<P>::gradients attn;
      typename nn::layer_norm<P>::gradients ln_2;
      typename nn::feed_forward<P>::gradients mlp;
    };
    std::vector<block_gradients> blocks;
    typename nn::layer_norm<P>::gradients ln_f;

    /// Calls `f(dotted_name, tensor)` for every gradient, in the order of `gpt::for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      walk(*this, f);
    }
    /// Sets every gradient to zero (once per optimiser step: backward passes add).
    void zero() {
      for_each([](std::string_view, auto& g) { g.fill(grad_type(0)); });
    }
  };

  /// GPT-2 initialisation (nanoGPT `_init_weights`): every matrix and embedding N(0, 0.02), the two
  /// residual out-projections (attention `wo`, MLP `w2`) N(0, 0.02 / sqrt(2 n_layer)), norms' scales 1.
  /// Draws in a fixed order from `rng` (std::normal_distribution: implementation-defined sequence).
  template <class Rng>
  gpt(const gpt_config& config, Rng& rng)
      : config_(config),
        wte_(config.vocab, config.n_embd),
        wpe_(config.block, config.n_embd),
        ln_f_(config.n_embd, norm_options(config)) {
    for (std::size_t l = 0; l < config.n_layer; ++l) {
      const nn::attention_config ac{.d_model = config.n_embd, .n_heads = config.n_head, .causal = true};
      const std::size_t c = config.n_embd;
      blocks_.push_back(block{nn::layer_norm<P>(c, norm_options(config)), nn::attention<P>(ac),
                              nn::layer_norm<P>(c, norm_options(config)),
                              nn::feed_forward<P>(nn::ffn_activation::gelu, nn::dense<P>(c, 4 * c, nn::use_bias::no),
                                                  nn::dense<P>(4 * c, c, nn::use_bias::no))});
    }
    const double residual_std = config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
    for_each_parameter([&](std::string_view name, auto& p) {
      using T = typename std::remove_cvref_t<decltype(p)>::value_type;
      const bool is_norm = name.find("ln_") != std::string_view::npos;
      if (is_norm) return;  // scales stay 1
      const bool residual_out = name.ends_with("attn.wo.kernel") || name.ends_with("mlp.w2.kernel");
      std::normal_distribution<double> dist(0.0, residual_out ? residual_std : config.init_std);
      for (auto& w : p) w = mixprec::internal::round_to<T>(dist(rng));
    });
  }

  [[nodiscard]] const gpt_config& config() const noexcept { return config_; }

  /// Calls `f(dotted_name, tensor)` on every parameter: "wte.embedding", "wpe.embedding",
  /// "blocks.<l>.ln_1.scale", "blocks.<l>.attn.wq.kernel", ..., "blocks.<l>.mlp.w2.kernel", "ln_f.scale".
  template <class F>
  void for_each_parameter(F&& f) {
    walk_parameters(*this, f);
  }
  /// Calls `f(dotted_name, layer)` on every dense layer of the blocks, the matrix products a float8 run
  /// replaces (dot injection): "blocks.<l>.attn.wq", ".wk", ".wv", ".wo", "blocks.<l>.mlp.w1", ".w2". The
  /// embeddings and the tied classifier keep the policy's product.
  template <class F>
  void for_each_projection(F&& f) {
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      const std::string p = "blocks." + std::to_string(l) + ".";
      auto& b = blocks_[l];
      f(p + "attn.wq", b.attn.wq());
      f(p + "attn.wk", b.attn.wk());
      f(p + "attn.wv", b.attn.wv());
      f(p + "attn.wo", b.attn.wo());
      f(p + "mlp.w1", b.mlp.w1());
      f(p + "mlp.w2", b.mlp.w2());
    }
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    walk_parameters(*this, f);
  }

  /// Zero gradients for every parameter.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g{wte_.zero_gradients(), wpe_.zero_gradients(), {}, ln_f_.zero_gradients()};
    for (const auto& b : blocks_) {
      g.blocks.push_back(
          {b.ln_1.zero_gradients(), b.attn.zero_gradients(), b.ln_2.zero_gradients(), b.mlp.zero_gradients()});
    }
    return g;
  }

  /// Number of parameters (nanoGPT prints it without wpe: 0.80M for the recipe).
  [[nodiscard]] std::size_t parameter_count() const {
    std::size_t n = 0;
    for_each_parameter([&](std::string_view, const auto& p) { n += p.size(); });
    return n;
  }

  /// What `backward` needs from `forward`.
  struct saved {
    struct block_saved {
      typename nn::layer_norm<P>::template saved<value_type> ln_1;
      typename nn::attention<P>::template saved<norm_out_t> attn;
      typename nn::layer_norm<P>::template saved<value_type> ln_2;
      typename nn::feed_forward<P>::template saved<norm_out_t> mlp;
    };
    typename nn::embedding<P>::saved wte, wpe;
    std::vector<block_saved> blocks;
    typename nn::layer_norm<P>::template saved<value_type> ln_f;
    typename nn::embedding<P>::template attend_saved<norm_out_t> head;
    std::size_t batch = 0, seq = 0;
  };

  /// Logits [B, T, vocab] (float32) for ids [B, T]: the inference path (no saved context).
  [[nodiscard]] xt::xtensor<value_type, 3> logits(const xt::xtensor<std::int32_t, 2>& ids) const {
    stream x = embed(ids);
    for (const auto& b : blocks_) {
      add_into(x, b.attn(b.ln_1(x)));
      add_into(x, b.mlp(b.ln_2(x)));
    }
    return wte_.template attend_logits<value_type>(ln_f_(x));
  }

  /// The mean cross-entropy of `targets` [B, T] given `ids` [B, T] (float64 sum of float32 terms).
  [[nodiscard]] double loss(const xt::xtensor<std::int32_t, 2>& ids,
                            const xt::xtensor<std::int32_t, 2>& targets) const {
    const auto z = logits(ids);
    return nn::cross_entropy_loss(std::span<const value_type>(z.data(), z.size()), config_.vocab,
                                  std::span<const std::int32_t>(targets.data(), targets.size()));
  }

  /// Forward pass saving into `ctx`; returns the logits [B, T, vocab] in float32.
  [[nodiscard]] xt::xtensor<value_type, 3> forward(const xt::xtensor<std::int32_t, 2>& ids, saved& ctx) const {
    ctx.batch = ids.shape()[0];
    ctx.seq = ids.shape()[1];
    auto tok = wte_.forward(ids, ctx.wte);
    auto pos = wpe_.forward(position_ids(ctx.batch, ctx.seq), ctx.wpe);
    stream x = stream::from_shape({ctx.batch, ctx.seq, config_.n_embd});
    for (std::size_t i = 0; i < x.size(); ++i)
      x.data()[i] = static_cast<value_type>(tok.data()[i]) + static_cast<value_type>(pos.data()[i]);
    ctx.blocks.resize(blocks_.size());
    for (std::size_t l = 0; l < blocks_.size(); ++l) {
      const auto& b = blocks_[l];
      auto& s = ctx.blocks[l];
      add_into(x, b.attn.forward(b.ln_1.forward(x, s.ln_1), s.attn));
      add_into(x, b.mlp.forward(b.ln_2.forward(x, s.ln_2), s.mlp));
    }
    return wte_.template attend_forward<value_type>(ln_f_.forward(x, ctx.ln_f), ctx.head);
  }

  /// Backward pass from the logits' cotangent [B, T, vocab]: adds every parameter's gradient into `g`.
  void backward(const saved& ctx, const xt::xtensor<value_type, 3>& dlogits, gradients& g) const {
    auto dh = wte_.attend_backward(ctx.head, dlogits, g.wte);  // [B, T, C], tied: adds into g.wte
    stream dx = to_stream(ln_f_.backward(ctx.ln_f, dh, g.ln_f));
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      const auto& b = blocks_[l];
      const auto& s = ctx.blocks[l];
      auto& gb = g.blocks[l];
      // x_out = x_mid + mlp(ln_2(x_mid)): dx_mid = dx + ln_2ᵀ(mlpᵀ(dx)).
      add_into(dx, b.ln_2.backward(s.ln_2, b.mlp.backward(s.mlp, dx, gb.mlp), gb.ln_2));
      // x_mid = x_in + attn(ln_1(x_in)).
      add_into(dx, b.ln_1.backward(s.ln_1, b.attn.backward(s.attn, dx, gb.attn), gb.ln_1));
    }
    wte_.backward(ctx.wte, dx, g.wte);
    wpe_.backward(ctx.wpe, dx, g.wpe);
  }

 private:
  static nn::layer_norm_options norm_options(const gpt_config& c) {
    return {.epsilon = c.ln_epsilon, .use_scale = true, .use_bias = false};
  }

  static xt::xtensor<std::int32_t, 2> position_ids(std::size_t batch, std::size_t seq) {
    xt::xtensor<std::int32_t, 2> pos = xt::xtensor<std::int32_t, 2>::from_shape({batch, seq});
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t t = 0; t < seq; ++t) pos(b, t) = static_cast<std::int32_t>(t);
    }
    return pos;
  }

  stream embed(const xt::xtensor<std::int32_t, 2>& ids) const {
    auto tok = wte_(ids);
    auto pos = wpe_(position_ids(ids.shape()[0], ids.shape()[1]));
    stream x = stream::from_shape(tok.shape());
    for (std::size_t i = 0; i < x.size(); ++i)
      x.data()[i] = static_cast<value_type>(tok.data()[i]) + static_cast<value_type>(pos.data()[i]);
    return x;
  }

  template <class A>
  static stream to_stream(const A& a) {
    stream s = stream::from_shape({a.shape()[0], a.shape()[1], a.shape()[2]});
    for (std::size_t i = 0; i < s.size(); ++i) s.data()[i] = static_cast<value_type>(a.data()[i]);
    return s;
  }

  template <class A>
  static void add_into(stream& x, const A& a) {
    value_type* d = x.data();
    const auto* s = a.data();
    for (std::size_t i = 0; i < x.size(); ++i) d[i] += static_cast<value_type>(s[i]);
  }

  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    auto with_prefix = [&f](std::string prefix) {
      return [&f, prefix = std::move(prefix)](std::string_view name, auto& t) { f(prefix + std::string(name), t); };
    };
    self.wte_.for_each_parameter(with_prefix("wte."));
    self.wpe_.for_each_parameter(with_prefix("wpe."));
    for (std::size_t l = 0; l < self.blocks_.size(); ++l) {
      const std::string p = "blocks." + std::to_string(l) + ".";
      self.blocks_[l].ln_1.for_each_parameter(with_prefix(p + "ln_1."));
      self.blocks_[l].attn.for_each_parameter(with_prefix(p + "attn."));
      self.blocks_[l].ln_2.for_each_parameter(with_prefix(p + "ln_2."));
      self.blocks_[l].mlp.for_each_parameter(with_prefix(p + "mlp."));
    }
    self.ln_f_.for_each_parameter(with_prefix("ln_f."));
  }

  template <class F>
  static void walk(gradients& g, F& f) {
    auto with_prefix = [&f](std::string prefix) {
      return [&f, prefix = std::move(prefix)](std::string_view name, auto& t) { f(prefix + std::string(name), t); };
    };
    g.wte.for_each(with_prefix("wte."));
    g.wpe.for_each(with_prefix("wpe."));
    for (std::size_t l = 0; l < g.blocks.size(); ++l) {
      const std::string p = "blocks." + std::to_string(l) + ".";
      g.blocks[l].ln_1.for_each(with_prefix(p + "ln_1."));
      g.blocks[l].attn.for_each(with_prefix(p + "attn."));
      g.blocks[l].ln_2.for_each(with_prefix(p + "ln_2."));
      g.blocks[l].mlp.for_each(with_prefix(p + "mlp."));
    }
    g.ln_f.for_each(with_prefix("ln_f."));
  }

  gpt_config config_;
  nn::embedding<P> wte_;
  nn::embedding<P> wpe_;
  std::vector<block> blocks_;
  nn::layer_norm<P> ln_f_;
};

}  // namespace train_example
