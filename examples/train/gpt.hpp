/// \file
/// \brief The GPT of nanoGPT's shakespeare_char recipe: the library's decoder-only model
/// (`nn::causal_lm<P>`: token and learned position embeddings, pre-norm transformer blocks, the final
/// norm and the tied classifier, with forward, backward, gradient tree and named walks) in nanoGPT's
/// shape, and nanoGPT's initialisation.
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
#include <random>
#include <string_view>
#include <type_traits>

#include "mixprec/nn/causal_lm.hpp"

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

/// The GPT under policy `P`. Parameters: "wte.embedding", "wpe.embedding", "layers.<l>.ln_1.scale",
/// "layers.<l>.attn.wq.kernel", ..., "layers.<l>.mlp.w2.kernel", "ln_f.scale".
template <class P>
using gpt = nn::causal_lm<P>;

/// A GPT of shape `config` with GPT-2's initialisation (nanoGPT `_init_weights`): every matrix and
/// embedding N(0, 0.02), the two residual out-projections (attention `wo`, MLP `w2`) N(0, 0.02 /
/// sqrt(2 n_layer)), norms' scales 1. Draws in the walk's order from `rng` (std::normal_distribution:
/// an implementation-defined sequence).
template <class P, class Rng>
gpt<P> make_gpt(const gpt_config& config, Rng& rng) {
  gpt<P> model({.vocab = config.vocab,
                .n_layers = config.n_layer,
                .max_positions = config.block,
                .block = {.attention = {.d_model = config.n_embd, .n_heads = config.n_head, .causal = true},
                          .norm_epsilon = config.ln_epsilon}});
  const double residual_std = config.init_std / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  model.for_each_parameter([&](std::string_view name, auto& p) {
    using T = typename std::remove_cvref_t<decltype(p)>::value_type;
    if (name.find("ln_") != std::string_view::npos) return;  // norms' scales stay 1
    const bool residual_out = name.ends_with("attn.wo.kernel") || name.ends_with("mlp.w2.kernel");
    std::normal_distribution<double> dist(0.0, residual_out ? residual_std : config.init_std);
    for (auto& w : p) w = mixprec::internal::round_to<T>(dist(rng));
  });
  return model;
}

}  // namespace train_example
