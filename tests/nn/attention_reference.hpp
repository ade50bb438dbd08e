// Test support for the attention tests: a float64 reference attention with plain loops (projections,
// RoPE, scores q·k / sqrt(d), masks, softmax over all keys at once, weighted sum, output projection) that
// also propagates magnitudes to give each output a first-order error scale M (nn::attention_error_bound);
// and `same_roundings_attention`, the float64 reference that rounds to the compute type where the layer
// does, with a tight bound, and with bugs that can be planted in it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "mixprec/nn/attention.hpp"
#include "same_roundings.hpp"

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
/// `score_bias` (null: none) is added to each scaled score: [batch, n_heads, seq, seq] (query t, key j).
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
                                   double (*round_c)(double), const std::vector<std::size_t>& rows = {},
                                   const std::vector<double>* score_bias = nullptr) {
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
          if (score_bias != nullptr) {
            // An additive score bias [batch, heads, seq, seq], exact; its addition's rounding is covered
            // by the magnitude of the biased score.
            score += (*score_bias)[((b * H + h) * seq + t) * seq + j];
            mag += std::abs(score);
          }
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

/// Bugs that can be planted in `same_roundings_attention` (all false: the layer as documented). The
/// tests check that the layer is within the bound of the correct reference and outside the bound of
/// each planted bug, so a layer with that bug would fail them.
struct attention_bugs {
  bool kv_head_modulo = false;         ///< query head h reads kv head h % n_kv_heads, not h / (n_heads / n_kv_heads)
  bool swapped_rope_layout = false;    ///< RoPE pairs of the other layout (adjacent_pairs <-> half_split)
  bool accumulate_in_c = false;        ///< every sum (projections, q·k, p·v) rounded to C after each term
  bool unrounded_weights = false;      ///< softmax_precision::compute that does not round the weights to C
  bool rounded_probabilities = false;  ///< softmax_precision::compute rounding e_j / l to C instead of e_j
};

/// Where a layer with float32 accumulation rounds: to its compute type C (`to_c`, any of bfloat16,
/// float16, float) and to its output type O (`to_o`); `softmax_in_c`: scores and weights are rounded to
/// C too (softmax_precision::compute with C narrower than float32).
struct attention_roundings {
  double (*to_c)(double) = nullptr;
  double (*to_o)(double) = nullptr;
  bool softmax_in_c = false;
};

/// Attention for x [batch, seq, d_model] (doubles, the input's values) computed in float64 with the
/// roundings of nn::attention<P> (nn/attention.hpp), for policies that accumulate in float32:
///  1. x, the kernels and the biases rounded to C; q, k, v summed (float32 in the layer) and rounded to C;
///  2. RoPE (angle, cos, sin in double; the rotation in float32 in the layer), each coordinate rounded to C;
///  3. scores scale q·k (float32); softmax_in_c: rounded to C;
///  4. the softmax in float32 over key tiles of cfg.key_block keys (online: running max, rescaling);
///     softmax_in_c: the unnormalised weights exp(s_j - running max) rounded to C before they multiply
///     v, the normaliser summed from the unrounded ones;
///  5. the attended heads rounded to C; wo summed (float32) and rounded to O.
/// The bound of each output is what float32 arithmetic can leave between the layer and this reference,
/// propagated in absolute terms through every stage (see same_roundings.hpp for the rounding points):
///  - a float32 sum of n terms: gamma_{n+1} of the sum of magnitudes (the extra term: the bias, or the
///    product's rounding when an operand is not in C), plus the operands' errors times |the other operand|;
///  - RoPE: gamma_3 (|a c| + |b s|) (cos and sin rounded to float, two products, one sum);
///  - scores: scale (gamma_{hd+3} sum |q k| + the q and k errors);
///  - the softmax, opmath: score errors move the output by sum_j p_j e_j |v_j - o| to first order (the
///    softmax is invariant to a common shift, so the running maxima's errors cancel); float32 exp is
///    within 2 ulps, s - max within u |s - max|, each tile's rescaling (exp, product) adds 6 u, so each
///    weight is off by rel = 2 u (max s - min s) + (4 + 6 tiles) u; the weighted sum and the normaliser
///    add their sums' gamma;
///  - the softmax, softmax_in_c: each weight exp(s_j - m_j) is off by exp(e_j + max e) - 1 plus its
///    arithmetic, then rounded to C as above; the quotient sum w v / sum e by the bounds of both sums.
/// `bug` plants one of `attention_bugs`.
inline ref_out same_roundings_attention(const mixprec::nn::attention_config& cfg, std::size_t batch, std::size_t seq,
                                        const std::vector<double>& x, const weights64& w,
                                        const std::vector<char>& valid, const attention_roundings& rd,
                                        const attention_bugs& bug = {}) {
  const std::size_t d = cfg.d_model, H = cfg.n_heads;
  const std::size_t KV = cfg.n_kv_heads == 0 ? H : cfg.n_kv_heads;
  const std::size_t hd = cfg.head_dim == 0 ? d / H : cfg.head_dim;
  const double scale = cfg.scale ? *cfg.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  const std::size_t tiles = (seq + cfg.key_block - 1) / cfg.key_block;
  const std::size_t n = batch * seq;
  const double u = u_f32();
  double (*const to_c)(double) = rd.to_c;
  auto in_c = [&](const std::vector<double>& a) {
    std::vector<double> r(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) r[i] = to_c(a[i]);
    return r;
  };
  auto sum = [&](double s, double term) { return bug.accumulate_in_c ? add_in(to_c, s, term) : s + term; };

  // out [n, out_w] = in [n, in_w] · wt [in_w, out_w] + b, operands in C, rounded by `round`.
  auto project = [&](const std::vector<double>& in, const std::vector<double>& in_e, std::size_t in_w,
                     const std::vector<double>& wt, const std::vector<double>& b, std::size_t out_w,
                     double (*round)(double), std::vector<double>& out, std::vector<double>& out_e) {
    out.assign(n * out_w, 0.0);
    out_e.assign(n * out_w, 0.0);
    const double g = gamma_f32(in_w + 1);
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t o = 0; o < out_w; ++o) {
        const double bias = b.empty() ? 0.0 : b[o];
        double s = 0.0, mag = std::abs(bias), prop = 0.0;
        for (std::size_t i = 0; i < in_w; ++i) {
          const double a = in[r * in_w + i], wv = wt[i * out_w + o];
          s = sum(s, a * wv);
          mag += std::abs(a * wv);
          prop += in_e[r * in_w + i] * std::abs(wv);
        }
        s = sum(s, bias);
        const bounded v = round_within(round, s, prop + g * (mag + prop));
        out[r * out_w + o] = v.v;
        out_e[r * out_w + o] = v.e;
      }
    }
  };
  const std::vector<double> xc = in_c(x), zero(x.size(), 0.0);
  std::vector<double> q, qe, k, ke, v, ve;
  project(xc, zero, d, in_c(w.wq), in_c(w.bq), H * hd, to_c, q, qe);
  project(xc, zero, d, in_c(w.wk), in_c(w.bk), KV * hd, to_c, k, ke);
  project(xc, zero, d, in_c(w.wv), in_c(w.bv), KV * hd, to_c, v, ve);

  if (cfg.rotary) {
    const double theta = cfg.rotary->theta;
    const bool adjacent = (cfg.rotary->layout == mixprec::nn::rope_layout::adjacent_pairs) != bug.swapped_rope_layout;
    auto rotate = [&](std::vector<double>& val, std::vector<double>& err, std::size_t heads) {
      for (std::size_t r = 0; r < n; ++r) {
        const double pos = static_cast<double>(r % seq);
        for (std::size_t i = 0; i < hd / 2; ++i) {
          const double angle = pos / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hd));
          const double c = std::cos(angle), s = std::sin(angle);
          for (std::size_t h = 0; h < heads; ++h) {
            const std::size_t ia = r * heads * hd + h * hd + (adjacent ? 2 * i : i);
            const std::size_t ib = r * heads * hd + h * hd + (adjacent ? 2 * i + 1 : i + hd / 2);
            const double a = val[ia], b = val[ib], ea = err[ia], eb = err[ib];
            const double pa = std::abs(c) * ea + std::abs(s) * eb, pb = std::abs(s) * ea + std::abs(c) * eb;
            const bounded ra =
                round_within(to_c, a * c - b * s, pa + gamma_f32(3) * (std::abs(a * c) + std::abs(b * s) + pa));
            const bounded rb =
                round_within(to_c, a * s + b * c, pb + gamma_f32(3) * (std::abs(a * s) + std::abs(b * c) + pb));
            val[ia] = ra.v;
            err[ia] = ra.e;
            val[ib] = rb.v;
            err[ib] = rb.e;
          }
        }
      }
    };
    rotate(q, qe, H);
    rotate(k, ke, KV);
  }

  std::vector<double> att(n * H * hd, 0.0), att_e(n * H * hd, 0.0);
  const std::size_t group = H / KV;
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::size_t t = 0; t < seq; ++t) {
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t g = bug.kv_head_modulo ? h % KV : h / group;
        const std::size_t qi = (b * seq + t) * H * hd + h * hd;
        std::vector<double> s, se;
        std::vector<std::size_t> keys;
        for (std::size_t j = 0; j < seq; ++j) {
          if (cfg.causal && j > t) continue;
          if (!valid.empty() && !valid[b * seq + j]) continue;
          const std::size_t ki = (b * seq + j) * KV * hd + g * hd;
          double dot = 0.0, mag = 0.0, prop = 0.0;
          for (std::size_t i = 0; i < hd; ++i) {
            dot = sum(dot, q[qi + i] * k[ki + i]);
            mag += std::abs(q[qi + i] * k[ki + i]);
            prop += std::abs(q[qi + i]) * ke[ki + i] + qe[qi + i] * std::abs(k[ki + i]) + qe[qi + i] * ke[ki + i];
          }
          bounded sc{dot * scale, scale * (prop + gamma_f32(hd + 3) * (mag + prop))};
          if (rd.softmax_in_c) sc = round_within(to_c, sc.v, sc.e);
          s.push_back(sc.v);
          se.push_back(sc.e);
          keys.push_back(j);
        }
        if (keys.empty()) continue;  // no visible key: zeros, exactly
        const std::size_t nk = keys.size();
        const double m = *std::max_element(s.begin(), s.end());
        const double range = m - *std::min_element(s.begin(), s.end());
        const double big_e = *std::max_element(se.begin(), se.end());
        auto value = [&](std::size_t jj, std::size_t i) { return v[(b * seq + keys[jj]) * KV * hd + g * hd + i]; };
        auto value_e = [&](std::size_t jj, std::size_t i) { return ve[(b * seq + keys[jj]) * KV * hd + g * hd + i]; };
        double* out = &att[qi];
        double* out_e = &att_e[qi];
        if (!rd.softmax_in_c) {
          double l = 0.0;
          for (double sj : s) l += std::exp(sj - m);
          const double rel = 2.0 * u * range + static_cast<double>(4 + 6 * tiles) * u;
          for (std::size_t i = 0; i < hd; ++i) {
            double acc = 0.0;
            for (std::size_t jj = 0; jj < nk; ++jj) acc = sum(acc, std::exp(s[jj] - m) * value(jj, i));
            const double o = acc / l;
            double score_part = 0.0, spread = 0.0, value_part = 0.0, weighted = 0.0;
            for (std::size_t jj = 0; jj < nk; ++jj) {
              const double p = std::exp(s[jj] - m) / l;
              const double dev = std::abs(value(jj, i) - o);
              score_part += p * se[jj] * dev;
              spread += p * dev;
              value_part += p * value_e(jj, i);
              weighted += p * (std::abs(value(jj, i)) + value_e(jj, i));
            }
            const double arith =
                weighted * (rel + gamma_f32(nk + tiles + 2)) + std::abs(o) * (rel + gamma_f32(nk + 2 * tiles) + u);
            const double err = score_part + 4.0 * big_e * big_e * spread + value_part * (1.0 + 2.0 * big_e) + arith;
            const bounded a = round_within(to_c, o, err);
            out[i] = a.v;
            out_e[i] = a.e;
          }
          continue;
        }
        // softmax_in_c: running maxima over key tiles, weights rounded relative to them.
        std::vector<double> e(nk), ee(nk), wt(nk), we(nk), alpha(nk);
        const double rel_alpha = std::expm1(2.0 * big_e) + u * range + 5.0 * u * static_cast<double>(tiles);
        double l = 0.0, le = 0.0;
        for (std::size_t jj = 0; jj < nk; ++jj) {
          const std::size_t tile = keys[jj] / cfg.key_block;
          double m_run = -std::numeric_limits<double>::infinity(), e_run = 0.0;
          for (std::size_t tt = 0; tt < nk; ++tt) {
            if (keys[tt] / cfg.key_block > tile) continue;
            m_run = std::max(m_run, s[tt]);
            e_run = std::max(e_run, se[tt]);
          }
          e[jj] = std::exp(s[jj] - m_run);
          ee[jj] = e[jj] * (std::exp(se[jj] + e_run) * (1.0 + u * (m_run - s[jj]) + 5.0 * u) - 1.0);
          const bounded r = bug.unrounded_weights ? bounded{e[jj], ee[jj]} : round_within(to_c, e[jj], ee[jj]);
          wt[jj] = r.v;
          we[jj] = r.e;
          alpha[jj] = std::exp(m_run - m);
          l += e[jj] * alpha[jj];
          le += alpha[jj] * (ee[jj] + (e[jj] + ee[jj]) * (rel_alpha + gamma_f32(nk + 2 * tiles)));
        }
        for (std::size_t i = 0; i < hd; ++i) {
          double acc = 0.0, acc_e = 0.0;
          for (std::size_t jj = 0; jj < nk; ++jj) {
            const double vv = value(jj, i), vve = value_e(jj, i);
            const double weight = bug.rounded_probabilities ? to_c(e[jj] * alpha[jj] / l) * l : wt[jj] * alpha[jj];
            acc = sum(acc, weight * vv);
            acc_e += alpha[jj] * (we[jj] * (std::abs(vv) + vve) + wt[jj] * vve +
                                  (wt[jj] + we[jj]) * (std::abs(vv) + vve) * (rel_alpha + gamma_f32(nk + tiles + 2)));
          }
          const double o = acc / l;
          const double q_err = (acc_e + std::abs(o) * le) / (l - le);
          const bounded a = round_within(to_c, o, q_err + u * (std::abs(o) + q_err));
          out[i] = a.v;
          out_e[i] = a.e;
        }
      }
    }
  }
  ref_out r;
  project(att, att_e, H * hd, in_c(w.wo), in_c(w.bo), d, rd.to_o, r.y, r.bound);
  return r;
}

}  // namespace layer_tests
