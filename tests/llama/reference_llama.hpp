/// \file
/// \brief Test oracle: a plain float64 forward pass of the Llama-2 architecture over a llama2.c checkpoint.
///
/// Written for clarity, not speed: every operation is a visible loop in double precision, with no code
/// shared with the library's layers (which are compared against it). The architecture (Llama 2; llama2.c
/// model.py / run.c `forward`):
///
///     x = embedding[token]
///     for each layer l:
///       xb = rmsnorm(x, rms_att[l])                     rmsnorm(v, g)_i = g_i * v_i / sqrt(mean(v^2) + 1e-5)
///       q = wq[l] xb; k = wk[l] xb; v = wv[l] xb        (k, v: n_kv_heads heads)
///       rotate pairs (2i, 2i+1) of each head of q and k by pos * 10000^(-2i / head_size)   (RoPE)
///       cache k, v at pos
///       head h: softmax_t(q_h . k_{t, h / group} / sqrt(head_size)) over t = 0..pos, times v_{t, h / group}
///       x += wo[l] (concatenated heads)
///       xb = rmsnorm(x, rms_ffn[l]);  x += w2[l] (silu(w1[l] xb) * (w3[l] xb))
///     logits = classifier rmsnorm(x, rms_final)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama/llama2c_checkpoint.hpp"

namespace llama_reference {

/// Largest magnitudes seen by a `reference_llama` since construction.
struct activation_stats {
  double max_abs_residual = 0;  ///< |x| of the residual stream: the embedding and after every residual add.
  double max_abs_hidden = 0;    ///< |silu(w1 xb) * (w3 xb)|, the SwiGLU output fed to w2.
  double max_abs_logit = 0;     ///< |logits|.
};

/// y = W x for the `[out, in]` matrix `w` (float32 weights, float64 arithmetic).
inline std::vector<double> matvec(std::span<const float> w, const std::vector<double>& x) {
  const std::size_t in = x.size();
  const std::size_t out = w.size() / in;
  std::vector<double> y(out, 0.0);
  for (std::size_t i = 0; i < out; ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < in; ++j) sum += static_cast<double>(w[i * in + j]) * x[j];
    y[i] = sum;
  }
  return y;
}

/// g_i * x_i / sqrt(mean(x^2) + 1e-5).
inline std::vector<double> rmsnorm(const std::vector<double>& x, std::span<const float> gain) {
  double sum_sq = 0.0;
  for (const double v : x) sum_sq += v * v;
  const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.size()) + 1e-5);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<double>(gain[i]) * x[i] * inv_rms;
  return y;
}

/// Rotates the pairs (2i, 2i+1) of each `head_size`-wide head of `v` by the angle pos * 10000^(-2i/head_size).
inline void rope(std::vector<double>& v, std::size_t head_size, std::size_t pos) {
  for (std::size_t head = 0; head < v.size() / head_size; ++head) {
    for (std::size_t i = 0; i < head_size / 2; ++i) {
      const double freq = 1.0 / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(head_size));
      const double angle = static_cast<double>(pos) * freq;
      double& a = v[head * head_size + 2 * i];
      double& b = v[head * head_size + 2 * i + 1];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = a0 * std::sin(angle) + b0 * std::cos(angle);
    }
  }
}

/// The model with its key/value cache: call `forward(token, pos)` for pos = 0, 1, 2, ... in order.
class reference_llama {
 public:
  /// Keeps a reference to `ck`, which must outlive this object.
  explicit reference_llama(const llama2c::checkpoint& ck)
      : ck_(ck),
        key_cache_(static_cast<std::size_t>(ck.config.n_layers)),
        value_cache_(static_cast<std::size_t>(ck.config.n_layers)) {}

  /// Logits [vocab_size] for `token` at position `pos`; positions must come in order 0, 1, 2, ...
  /// \throws std::invalid_argument on a token outside the vocabulary or a position out of order / >= seq_len.
  std::vector<double> forward(int token, int pos) {
    const auto& c = ck_.config;
    if (token < 0 || token >= c.vocab_size) throw std::invalid_argument("token " + std::to_string(token));
    if (pos != next_pos_ || pos >= c.seq_len) throw std::invalid_argument("position " + std::to_string(pos));
    ++next_pos_;
    const std::size_t dim = static_cast<std::size_t>(c.dim);
    const std::size_t head_size = static_cast<std::size_t>(c.head_size());
    const std::size_t group = static_cast<std::size_t>(c.kv_group_size());

    std::vector<double> x(dim);
    const auto embedding_row = ck_.token_embedding.slice(static_cast<std::size_t>(token));
    for (std::size_t i = 0; i < dim; ++i) x[i] = embedding_row[i];
    note(stats_.max_abs_residual, x);

    for (std::size_t l = 0; l < static_cast<std::size_t>(c.n_layers); ++l) {
      // attention block
      std::vector<double> xb = rmsnorm(x, ck_.rms_att.slice(l));
      std::vector<double> q = matvec(ck_.wq.slice(l), xb);
      std::vector<double> k = matvec(ck_.wk.slice(l), xb);
      std::vector<double> v = matvec(ck_.wv.slice(l), xb);
      rope(q, head_size, static_cast<std::size_t>(pos));
      rope(k, head_size, static_cast<std::size_t>(pos));
      key_cache_[l].push_back(k);
      value_cache_[l].push_back(v);

      std::vector<double> attended(dim, 0.0);
      for (std::size_t h = 0; h < static_cast<std::size_t>(c.n_heads); ++h) {
        const std::size_t kv_head = h / group;
        std::vector<double> scores(static_cast<std::size_t>(pos) + 1);
        for (std::size_t t = 0; t <= static_cast<std::size_t>(pos); ++t) {
          double dot = 0.0;
          for (std::size_t i = 0; i < head_size; ++i) {
            dot += q[h * head_size + i] * key_cache_[l][t][kv_head * head_size + i];
          }
          scores[t] = dot / std::sqrt(static_cast<double>(head_size));
        }
        double max_score = scores[0];
        for (const double s : scores) max_score = std::max(max_score, s);
        double sum = 0.0;
        for (double& s : scores) {
          s = std::exp(s - max_score);
          sum += s;
        }
        for (std::size_t t = 0; t <= static_cast<std::size_t>(pos); ++t) {
          for (std::size_t i = 0; i < head_size; ++i) {
            attended[h * head_size + i] += scores[t] / sum * value_cache_[l][t][kv_head * head_size + i];
          }
        }
      }
      const std::vector<double> attention_out = matvec(ck_.wo.slice(l), attended);
      for (std::size_t i = 0; i < dim; ++i) x[i] += attention_out[i];
      note(stats_.max_abs_residual, x);

      // feed-forward block (SwiGLU)
      xb = rmsnorm(x, ck_.rms_ffn.slice(l));
      std::vector<double> gate = matvec(ck_.w1.slice(l), xb);
      const std::vector<double> up = matvec(ck_.w3.slice(l), xb);
      for (std::size_t i = 0; i < gate.size(); ++i) {
        const double silu = gate[i] / (1.0 + std::exp(-gate[i]));
        gate[i] = silu * up[i];
      }
      note(stats_.max_abs_hidden, gate);
      const std::vector<double> ffn_out = matvec(ck_.w2.slice(l), gate);
      for (std::size_t i = 0; i < dim; ++i) x[i] += ffn_out[i];
      note(stats_.max_abs_residual, x);
    }

    final_hidden_ = rmsnorm(x, ck_.rms_final.values);
    std::vector<double> logits = matvec(ck_.classifier().values, final_hidden_);
    note(stats_.max_abs_logit, logits);
    return logits;
  }

  /// Largest magnitudes seen so far.
  [[nodiscard]] const activation_stats& stats() const noexcept { return stats_; }

  /// The classifier's input of the last `forward`: the final RMSNorm's output [dim].
  [[nodiscard]] const std::vector<double>& final_hidden() const noexcept { return final_hidden_; }

 private:
  static void note(double& max_abs, const std::vector<double>& values) {
    for (const double v : values) max_abs = std::max(max_abs, std::abs(v));
  }

  const llama2c::checkpoint& ck_;
  std::vector<std::vector<std::vector<double>>> key_cache_;    // [layer][pos][kv_dim]
  std::vector<std::vector<std::vector<double>>> value_cache_;  // [layer][pos][kv_dim]
  int next_pos_ = 0;
  activation_stats stats_;
  std::vector<double> final_hidden_;
};

/// Index of the largest value, lowest index on ties (run.c `sample_argmax`).
inline int argmax(const std::vector<double>& values) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int>(best);
}

/// run.c's generation loop with temperature 0: start from BOS (1) at pos 0, feed back the argmax each step,
/// stop after `steps` tokens or when BOS comes out. Returns the generated tokens (BOS excluded).
inline std::vector<int> greedy_decode(reference_llama& model, int steps) {
  std::vector<int> out;
  int token = 1;
  for (int pos = 0; pos < steps; ++pos) {
    const int next = argmax(model.forward(token, pos));
    if (next == 1) break;
    out.push_back(next);
    token = next;
  }
  return out;
}

}  // namespace llama_reference
