/// \file
/// \brief `llama2c::state_dict(ck)`: the weights of a llama2.c checkpoint as a state dict
/// (`mixprec::train::checkpoint`, float32) under the parameter names of `nn::causal_lm`, which
/// `llama::model` loads with `mixprec::train::load_state(..., {.convert = true})`: every tensor rounded once to the
/// policy's param type, and strictly (a tensor missing or of another shape is an error that names it).
///
/// | llama2.c (run.c `TransformerWeights`) | state dict name | shape |
/// |---|---|---|
/// | `token_embedding_table` | `wte.embedding` | [vocab, dim] |
/// | `rms_att_weight[l]`, `rms_ffn_weight[l]` | `layers.<l>.ln_1.scale`, `layers.<l>.ln_2.scale` | [dim] |
/// | `wq[l]`, `wk[l]`, `wv[l]`, `wo[l]` ([out, in]) | `layers.<l>.attn.wq.kernel`, ... | [in, out] |
/// | `w1[l]`, `w2[l]`, `w3[l]` ([out, in]) | `layers.<l>.mlp.w1.kernel`, ... | [in, out] |
/// | `rms_final_weight` | `ln_f.scale` | [dim] |
///
/// The dense kernels are transposed from llama2.c's [out, in] to mixprec's [in, out] (exactly: a copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <mixprec/train/safetensors.hpp>

#include "llama2c_checkpoint.hpp"

namespace llama2c {

/// The weights of `ck` under `nn::causal_lm`'s names (see the file comment).
/// \throws mixprec::train::safetensors_error when a slice does not have the size its shape says.
[[nodiscard]] inline mixprec::train::checkpoint state_dict(const checkpoint& ck) {
  mixprec::train::checkpoint out;
  const auto n = [](int v) { return static_cast<std::uint64_t>(v); };
  const auto put = [&](const std::string& name, std::span<const float> values, std::vector<std::uint64_t> shape) {
    out.put(name, values, std::span<const std::uint64_t>(shape));
  };
  // A [out, in] matrix stored as the [in, out] kernel of a dense layer.
  const auto put_kernel = [&](const std::string& name, std::span<const float> w, int rows_out, int cols_in) {
    const auto rows = static_cast<std::size_t>(rows_out), cols = static_cast<std::size_t>(cols_in);
    if (w.size() != rows * cols) return put(name, w, {n(cols_in), n(rows_out)});  // put names the mismatch
    std::vector<float> t(w.size());
    for (std::size_t o = 0; o < rows; ++o) {
      for (std::size_t i = 0; i < cols; ++i) t[i * rows + o] = w[o * cols + i];
    }
    put(name, t, {n(cols_in), n(rows_out)});
  };
  const model_config& c = ck.config;
  put("wte.embedding", ck.token_embedding.values, {n(c.vocab_size), n(c.dim)});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const auto i = static_cast<std::size_t>(l);
    put(p + "ln_1.scale", ck.rms_att.slice(i), {n(c.dim)});
    put_kernel(p + "attn.wq.kernel", ck.wq.slice(i), c.dim, c.dim);
    put_kernel(p + "attn.wk.kernel", ck.wk.slice(i), c.kv_dim(), c.dim);
    put_kernel(p + "attn.wv.kernel", ck.wv.slice(i), c.kv_dim(), c.dim);
    put_kernel(p + "attn.wo.kernel", ck.wo.slice(i), c.dim, c.dim);
    put(p + "ln_2.scale", ck.rms_ffn.slice(i), {n(c.dim)});
    put_kernel(p + "mlp.w1.kernel", ck.w1.slice(i), c.hidden_dim, c.dim);
    put_kernel(p + "mlp.w2.kernel", ck.w2.slice(i), c.dim, c.hidden_dim);
    put_kernel(p + "mlp.w3.kernel", ck.w3.slice(i), c.hidden_dim, c.dim);
  }
  put("ln_f.scale", ck.rms_final.values, {n(c.dim)});
  return out;
}

}  // namespace llama2c
