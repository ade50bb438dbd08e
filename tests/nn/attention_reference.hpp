// Test support for the attention tests: a float64 reference attention with plain loops (projections,
// RoPE, scores q·k / sqrt(d), masks, softmax over all keys at once, weighted sum, output projection) that
// also propagates magnitudes to give each output a first-order error scale M (nn::attention_error_bound).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "mixprec/nn/attention.hpp"

namespace layer_tests {

/// Weights as doubles, [in, out] row-major; biases empty when absent.
struct weights64 {
  std::vector<double> wq, wk, wv, wo, bq, bk, bv, bo;
};

/// The reference's output: y [rows, d_model] and, per element, a first-order error scale `bound`: the
/// result of the same computation on magnitudes (|x| |w| sums, rotations of magnitudes, score
/// magnitudes times 2 through the softmax; see `reference_attention`).
struct ref_out {
  std::vector<double> y;
  std::vector<double> bound;
};

/// Reference attention for x [batch, seq, d_model] (doubles), from the config as the user wrote it
/// (defaults resolved here independently). `valid` [batch * seq] (empty: all real). `round_c` is the
/// rounding to the compute type applied to scores and probabilities in `softmax_precision::compute`
/// (null: none). Only the query rows in `rows` (flat b * seq + t) are evaluated (empty: all).
///
/// Error scale: if every value an operation reads is off by at most eps times its magnitude and the
/// operation adds a relative eps, the result is off by at most ~eps times the magnitude computed here:
///  - projections: M = sum |x| |w| + |b| (with magnitudes of inputs in place of |x| for wo);
///  - rotations: Ma' = |c| Ma + |s| Mb (and symmetrically);
///  - scores: Ms_j = scale sum_i (Mq_i |k_ji| + |q_i| Mk_ji) (+ |s_j| when scores are rounded);
///  - softmax: dp_j = p_j (ds_j - sum_t p_t ds_t), so the weighted sum moves by <= 2 max_j Ms_j sum_j p_j |v_j|:
///    Ma_i = sum_j p_j (Mv_ji + 2 max Ms |v_ji|) + |a_i| (+ sum_j p_j |v_ji| when probabilities are rounded).
inline ref_out reference_attention(const mixprec::nn::attention_config& cfg, std::size_t batch, std::size_t seq,
                                   const std::vector<double>& x, const weights64& w, const std::vector<char>& valid,
                                   double (*round_c)(double), const std::vector<std::size_t>& rows = {}) {
  const std::size_t d = cfg.d_model, H = cfg.n_heads;
  const std::size_t KV = cfg.n_kv_heads == 0 ? H : cfg.n_kv_heads;
  const std::size_t hd = cfg.head_dim == 0 ? d / H : cfg.head_dim;
  const double scale = cfg.scale ? *cfg.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const std::size_t n = batch * seq;

  auto project = [&](const std::vector<double>& in, const std::vector<double>& in_mag, std::size_t in_w,
                     const std::vector<double>& wt, const std::vector<double>& b, std::size_t out_w,
                     std::vector<double>& out, std::vector<double>& out_mag) {
    out.assign(n * out_w, 0.0);
    out_mag.assign(n * out_w, 0.0);
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t o = 0; o < out_w; ++o) {
        double s = b.empty() ? 0.0 : b[o];
        double m = b.empty() ? 0.0 : std::abs(b[o]);
        for (std::size_t i = 0; i < in_w; ++i) {
          s += in[r * in_w + i] * wt[i * out_w + o];
          m += (in_mag[r * in_w + i] + std::abs(in[r * in_w + i])) * std::abs(wt[i * out_w + o]);
        }
        out[r * out_w + o] = s;
        out_mag[r * out_w + o] = m;
      }
    }
  };
  const std::vector<double> zero_mag(x.size(), 0.0);
  std::vector<double> q, qm, k, km, v, vm;
  project(x, zero_mag, d, w.wq, w.bq, H * hd, q, qm);
  project(x, zero_mag, d, w.wk, w.bk, KV * hd, k, km);
  project(x, zero_mag, d, w.wv, w.bv, KV * hd, v, vm);

  if (cfg.rotary) {
    const double theta = cfg.rotary->theta;
    const bool adjacent = cfg.rotary->layout == mixprec::nn::rope_layout::adjacent_pairs;
    auto rotate = [&](std::vector<double>& val, std::vector<double>& mag, std::size_t heads) {
      for (std::size_t r = 0; r < n; ++r) {
        const double pos = static_cast<double>(r % seq);
        for (std::size_t h = 0; h < heads; ++h) {
          for (std::size_t i = 0; i < hd / 2; ++i) {
            const double angle = pos / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hd));
            const double c = std::cos(angle), s = std::sin(angle);
            const std::size_t ia = r * heads * hd + h * hd + (adjacent ? 2 * i : i);
            const std::size_t ib = r * heads * hd + h * hd + (adjacent ? 2 * i + 1 : i + hd / 2);
            const double a = val[ia], b = val[ib], ma = mag[ia], mb = mag[ib];
            val[ia] = a * c - b * s;
            val[ib] = a * s + b * c;
            mag[ia] = std::abs(c) * ma + std::abs(s) * mb + std::abs(a * c) + std::abs(b * s);
            mag[ib] = std::abs(s) * ma + std::abs(c) * mb + std::abs(a * s) + std::abs(b * c);
          }
        }
      }
    };
    rotate(q, qm, H);
    rotate(k, km, KV);
  }

  std::vector<double> att(n * H * hd, 0.0), att_mag(n * H * hd, 0.0);
  std::vector<char> want(n, rows.empty() ? 1 : 0);
  for (std::size_t r : rows) want[r] = 1;
  const std::size_t group = H / KV;
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < seq; ++t) {
      if (!want[b * seq + t]) continue;
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = h / group;
        const double* qv = &q[(b * seq + t) * H * hd + h * hd];
        const double* qmv = &qm[(b * seq + t) * H * hd + h * hd];
        std::vector<double> s, sm;
        std::vector<std::size_t> keys;
        for (std::size_t j = 0; j < seq; ++j) {
          if (cfg.causal && j > t) continue;
          if (!valid.empty() && !valid[b * seq + j]) continue;
          const double* kv = &k[(b * seq + j) * KV * hd + g * hd];
          const double* kmv = &km[(b * seq + j) * KV * hd + g * hd];
          double dot = 0.0, mag = 0.0;
          for (std::size_t i = 0; i < hd; ++i) {
            dot += qv[i] * kv[i];
            mag += qmv[i] * std::abs(kv[i]) + std::abs(qv[i]) * kmv[i] + std::abs(qv[i] * kv[i]);
          }
          double score = dot * scale;
          mag *= scale;
          if (round_c != nullptr) {
            mag += std::abs(score);
            score = round_c(score);
          }
          s.push_back(score);
          sm.push_back(mag);
          keys.push_back(j);
        }
        double* out = &att[(b * seq + t) * H * hd + h * hd];
        double* out_mag = &att_mag[(b * seq + t) * H * hd + h * hd];
        if (keys.empty()) continue;  // fully masked: zeros
        const double m = *std::max_element(s.begin(), s.end());
        const double smax = *std::max_element(sm.begin(), sm.end());
        double l = 0.0;
        for (double sj : s) l += std::exp(sj - m);
        for (std::size_t jj = 0; jj < keys.size(); ++jj) {
          double p = std::exp(s[jj] - m) / l;
          if (round_c != nullptr) p = round_c(p);
          const double* vv = &v[(b * seq + keys[jj]) * KV * hd + g * hd];
          const double* vmv = &vm[(b * seq + keys[jj]) * KV * hd + g * hd];
          for (std::size_t i = 0; i < hd; ++i) {
            out[i] += p * vv[i];
            out_mag[i] += p * (vmv[i] + 2.0 * smax * std::abs(vv[i]) + (round_c != nullptr ? std::abs(vv[i]) : 0.0));
          }
        }
        for (std::size_t i = 0; i < hd; ++i) out_mag[i] += std::abs(out[i]);
      }
    }
  }
  ref_out r;
  project(att, att_mag, H * hd, w.wo, w.bo, d, r.y, r.bound);
  return r;
}

}  // namespace layer_tests
