// mixprec error bounds: how far each layer, and a small pre-norm block, is from the exact float32 model
// under five policies, next to nn::error_bound's bound. Prints the markdown table of docs/layers.md
// ("Expected difference from float32 (error_bound)") and exits with 1 if any element exceeds its bound.
//
// One float32 model (Gaussian weights, seed 2026): every policy's layers are built from the same float32
// weights (rounded to the policy's param type on loading) and run on the same float32 input x [64, 256],
// N(0, 1). The reference is the float32 model evaluated in float64 with plain loops written here; the
// bounds are `nn::error_bound<In>(layer, nn::parameters_from<float>)`, which count the rounding of the
// float32 weights to the param type too. Per layer and policy: the largest |policy - float64| over all
// output elements, the bound at that element, and the largest ratio error / bound over all elements.
#include <mixprec/core.hpp>
#include <mixprec/nn/error_bound.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace nn = mixprec::nn;
using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;

namespace {

constexpr std::size_t rows = 64, d = 256, hidden = 512;            // tokens, features, ffn hidden
constexpr std::size_t n_heads = 4, n_kv_heads = 2, head_dim = 64;  // attention (GQA), causal, RoPE
constexpr std::size_t q_width = n_heads * head_dim, kv_width = n_kv_heads * head_dim;
constexpr double epsilon = 1e-5;  // both norms (llama2.c's)
constexpr unsigned seed = 2026;

/// The float32 model: weights [in, out] row-major, and the input.
struct model {
  std::vector<float> x;                      // [rows, d], N(0, 1)
  std::vector<float> w, b;                   // dense [d, d] N(0, 1/d), bias [d] N(0, 0.1^2)
  std::vector<float> norm_scale, norm_bias;  // [d], 1 + N(0, 0.1^2) and N(0, 0.1^2)
  std::vector<float> w1, w3, w2;             // swiglu ffn [d, hidden], [d, hidden], [hidden, d]
  std::vector<float> wq, wk, wv, wo;         // attention, no biases
};

std::vector<float> gaussian(std::size_t n, double mean, double sd, std::mt19937& rng) {
  std::normal_distribution<double> normal(mean, sd);
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(normal(rng));
  return v;
}

model make_model() {
  std::mt19937 rng(seed);
  model m;
  const double sd_d = 1.0 / std::sqrt(static_cast<double>(d));
  m.x = gaussian(rows * d, 0.0, 1.0, rng);
  m.w = gaussian(d * d, 0.0, sd_d, rng);
  m.b = gaussian(d, 0.0, 0.1, rng);
  m.norm_scale = gaussian(d, 1.0, 0.1, rng);
  m.norm_bias = gaussian(d, 0.0, 0.1, rng);
  m.w1 = gaussian(d * hidden, 0.0, sd_d, rng);
  m.w3 = gaussian(d * hidden, 0.0, sd_d, rng);
  m.w2 = gaussian(hidden * d, 0.0, 1.0 / std::sqrt(static_cast<double>(hidden)), rng);
  m.wq = gaussian(d * q_width, 0.0, sd_d, rng);
  m.wk = gaussian(d * kv_width, 0.0, sd_d, rng);
  m.wv = gaussian(d * kv_width, 0.0, sd_d, rng);
  m.wo = gaussian(q_width * d, 0.0, 1.0 / std::sqrt(static_cast<double>(q_width)), rng);
  return m;
}

xt::xtensor<float, 2> matrix(const std::vector<float>& v, std::size_t r, std::size_t c) {
  auto t = xt::xtensor<float, 2>::from_shape({r, c});
  std::copy(v.begin(), v.end(), t.begin());
  return t;
}
xt::xtensor<float, 1> vector(const std::vector<float>& v) {
  auto t = xt::xtensor<float, 1>::from_shape({v.size()});
  std::copy(v.begin(), v.end(), t.begin());
  return t;
}

// ---- float64 references of the float32 model -------------------------------------------------------

/// y = x . w (+ b) for x [n, in], w [in, out]; `s` = sum |x w| (+ |b|), the magnitudes the bounds take.
void project(const std::vector<double>& x, std::size_t n, std::size_t in, const std::vector<float>& w,
             const std::vector<float>* b, std::size_t out, std::vector<double>& y, std::vector<double>& s) {
  y.assign(n * out, 0.0);
  s.assign(n * out, 0.0);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double acc = b != nullptr ? (*b)[o] : 0.0, mag = b != nullptr ? std::abs((*b)[o]) : 0.0;
      for (std::size_t k = 0; k < in; ++k) {
        const double t = x[r * in + k] * static_cast<double>(w[k * out + o]);
        acc += t;
        mag += std::abs(t);
      }
      y[r * out + o] = acc;
      s[r * out + o] = mag;
    }
  }
}

/// rmsnorm of every row of x [rows, d]: x / sqrt(mean(x^2) + eps) * scale.
std::vector<double> rms_norm_reference(const std::vector<double>& x, const std::vector<float>& scale) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (std::size_t j = 0; j < d; ++j) ms += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(d) + epsilon);
    for (std::size_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] * inv * static_cast<double>(scale[j]);
  }
  return y;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

/// Causal self-attention with RoPE (adjacent pairs, theta 10000) for x [rows, d], and per output the
/// first-order error scale M of nn::attention_error_bound (tests/nn/attention_reference.hpp's rules).
void attention_reference(const model& m, const std::vector<double>& x, std::vector<double>& y,
                         std::vector<double>& mag) {
  std::vector<double> q, qm, k, km, v, vm;
  project(x, rows, d, m.wq, nullptr, q_width, q, qm);
  project(x, rows, d, m.wk, nullptr, kv_width, k, km);
  project(x, rows, d, m.wv, nullptr, kv_width, v, vm);
  auto rotate = [](std::vector<double>& val, std::vector<double>& vmag, std::size_t heads) {
    for (std::size_t t = 0; t < rows; ++t) {
      for (std::size_t h = 0; h < heads; ++h) {
        for (std::size_t i = 0; i < head_dim / 2; ++i) {
          const double angle =
              static_cast<double>(t) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(head_dim));
          const double c = std::cos(angle), s = std::sin(angle);
          const std::size_t ia = (t * heads + h) * head_dim + 2 * i, ib = ia + 1;
          const double a = val[ia], b = val[ib], ma = vmag[ia], mb = vmag[ib];
          val[ia] = a * c - b * s;
          val[ib] = a * s + b * c;
          vmag[ia] = std::abs(c) * ma + std::abs(s) * mb + std::abs(a * c) + std::abs(b * s);
          vmag[ib] = std::abs(s) * ma + std::abs(c) * mb + std::abs(a * s) + std::abs(b * c);
        }
      }
    }
  };
  rotate(q, qm, n_heads);
  rotate(k, km, n_kv_heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> att(rows * q_width, 0.0), att_mag(rows * q_width, 0.0);
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t h = 0; h < n_heads; ++h) {
      const std::size_t g = h / (n_heads / n_kv_heads);
      const double* qv = &q[(t * n_heads + h) * head_dim];
      const double* qmv = &qm[(t * n_heads + h) * head_dim];
      std::vector<double> s(t + 1), sm(t + 1);
      for (std::size_t j = 0; j <= t; ++j) {
        const double* kv = &k[(j * n_kv_heads + g) * head_dim];
        const double* kmv = &km[(j * n_kv_heads + g) * head_dim];
        double dot = 0.0, dm = 0.0;
        for (std::size_t i = 0; i < head_dim; ++i) {
          dot += qv[i] * kv[i];
          dm += qmv[i] * std::abs(kv[i]) + std::abs(qv[i]) * kmv[i] + std::abs(qv[i] * kv[i]);
        }
        s[j] = dot * scale;
        sm[j] = dm * scale;
      }
      const double smax = *std::max_element(sm.begin(), sm.end());
      const double top = *std::max_element(s.begin(), s.end());
      double l = 0.0;
      for (double e : s) l += std::exp(e - top);
      double* out = &att[(t * n_heads + h) * head_dim];
      double* out_mag = &att_mag[(t * n_heads + h) * head_dim];
      for (std::size_t j = 0; j <= t; ++j) {
        const double p = std::exp(s[j] - top) / l;
        for (std::size_t i = 0; i < head_dim; ++i) {
          const double vj = v[(j * n_kv_heads + g) * head_dim + i];
          out[i] += p * vj;
          out_mag[i] += p * (vm[(j * n_kv_heads + g) * head_dim + i] + 2.0 * smax * std::abs(vj));
        }
      }
      for (std::size_t i = 0; i < head_dim; ++i) out_mag[i] += std::abs(out[i]);
    }
  }
  // wo reads the attended heads with their magnitudes: M = sum (M_a + |a|) |w|.
  y.assign(rows * d, 0.0);
  mag.assign(rows * d, 0.0);
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t o = 0; o < d; ++o) {
      for (std::size_t i = 0; i < q_width; ++i) {
        const double w = m.wo[i * d + o];
        y[t * d + o] += att[t * q_width + i] * w;
        mag[t * d + o] += (att_mag[t * q_width + i] + std::abs(att[t * q_width + i])) * std::abs(w);
      }
    }
  }
}

// ---- measuring --------------------------------------------------------------------------------------

/// The largest error, the exact |y| and the bound at that element, and the largest error / bound.
struct result {
  double error = -1.0, y = 0.0, bound = 0.0, ratio = 0.0;
  void add(double got, double ref, double b) {
    const double e = std::abs(got - ref);
    if (!(e <= error)) {  // NaN too
      error = e;
      y = std::abs(ref);
      bound = b;
    }
    ratio = std::max(ratio, std::isnan(e) ? HUGE_VAL : e / b);
  }
};

/// One line of the table.
struct line {
  int layer;
  const char* layer_name;
  const char* policy_name;
  result r;
};
std::vector<line> table;

void record(int layer, const char* layer_name, const char* policy_name, const result& r) {
  table.push_back({layer, layer_name, policy_name, r});
}

struct references {
  std::vector<double> x, dense, dense_s, norm, rms, ffn_h1, ffn_s1, ffn_h3, ffn_s3, ffn, attn, attn_m;
  std::vector<double> block_h, block_h1, block_s1, block_h3, block_s3, block_f, block_z;
};

/// The swiglu hidden activations of h [rows, d] and the ffn output; returns y, keeps the pre-activations.
std::vector<double> ffn_reference(const model& m, const std::vector<double>& h, std::vector<double>& h1,
                                  std::vector<double>& s1, std::vector<double>& h3, std::vector<double>& s3) {
  project(h, rows, d, m.w1, nullptr, hidden, h1, s1);
  project(h, rows, d, m.w3, nullptr, hidden, h3, s3);
  std::vector<double> a(rows * hidden), y, unused;
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = silu(h1[i]) * h3[i];
  project(a, rows, hidden, m.w2, nullptr, d, y, unused);
  return y;
}

references make_references(const model& m) {
  references r;
  r.x.assign(m.x.begin(), m.x.end());
  project(r.x, rows, d, m.w, &m.b, d, r.dense, r.dense_s);
  r.rms = rms_norm_reference(r.x, m.norm_scale);
  r.ffn = ffn_reference(m, r.x, r.ffn_h1, r.ffn_s1, r.ffn_h3, r.ffn_s3);
  attention_reference(m, r.x, r.attn, r.attn_m);
  // The block: h = rmsnorm(x), f = ffn(h), z = x + f.
  r.block_h = r.rms;
  r.block_f = ffn_reference(m, r.block_h, r.block_h1, r.block_s1, r.block_h3, r.block_s3);
  r.block_z.resize(rows * d);
  for (std::size_t i = 0; i < r.block_z.size(); ++i) r.block_z[i] = r.x[i] + r.block_f[i];
  return r;
}

/// The feed_forward bound for output (t, o) with exact value y. `in1`, `in3` [rows, hidden]: when the
/// input carries errors d_i, sum_i d_i |w1_ik| and sum_i d_i |w3_ik| (empty: an exact input).
template <class Bound>
double ffn_bound(const Bound& fb, const model& m, std::size_t t, std::size_t o, const std::vector<double>& h1,
                 const std::vector<double>& s1, const std::vector<double>& h3, const std::vector<double>& s3,
                 const std::vector<double>& in1, const std::vector<double>& in3, double y) {
  auto sum = fb.output(0.0);  // no bias
  for (std::size_t k = 0; k < hidden; ++k) {
    const std::size_t j = t * hidden + k;
    const double e1 = fb.projection.accumulated(s1[j], in1.empty() ? 0.0 : in1[j]);
    const double e3 = fb.projection.accumulated(s3[j], in3.empty() ? 0.0 : in3[j]);
    const double act = silu(h1[j]);
    const double d_act = fb.activation(std::abs(h1[j]), e1);
    sum.add(act * h3[j], fb.gate(act, d_act, h3[j], e3), m.w2[k * d + o]);
  }
  return sum(std::abs(y));
}

/// sum_i d_i |w_ik| for every row t and hidden unit k: errors d [rows, d] carried through |w| [d, hidden].
std::vector<double> carry(const std::vector<double>& errors, const std::vector<float>& w) {
  std::vector<double> out(rows * hidden, 0.0);
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t i = 0; i < d; ++i) {
      for (std::size_t k = 0; k < hidden; ++k) {
        out[t * hidden + k] += errors[t * d + i] * std::abs(static_cast<double>(w[i * hidden + k]));
      }
    }
  }
  return out;
}

template <class P>
void run(const char* name, const model& m, const references& ref) {
  using O = nn::output_t<P, float>;
  const auto from_float = nn::parameters_from<float>;
  const auto x = matrix(m.x, rows, d);

  {  // dense
    const auto layer = nn::dense<P>::from_weights(matrix(m.w, d, d), vector(m.b), nn::weight_layout::in_out);
    const auto y = layer(x);
    const auto bound = nn::error_bound<float>(layer, from_float);
    result r;
    for (std::size_t i = 0; i < y.size(); ++i) {
      r.add(static_cast<double>(y.data()[i]), ref.dense[i], bound(ref.dense_s[i], std::abs(ref.dense[i])));
    }
    record(0, "dense", name, r);
  }
  {  // layer_norm
    const auto ln = nn::layer_norm<P>::from_params(vector(m.norm_scale), vector(m.norm_bias), epsilon);
    const auto y = ln(x);
    const auto bound = nn::error_bound<float>(ln, from_float);
    result r;
    for (std::size_t t = 0; t < rows; ++t) {
      double mean = 0.0, var = 0.0, max_abs = 0.0;
      for (std::size_t j = 0; j < d; ++j) mean += ref.x[t * d + j];
      mean /= static_cast<double>(d);
      for (std::size_t j = 0; j < d; ++j) {
        var += (ref.x[t * d + j] - mean) * (ref.x[t * d + j] - mean);
        max_abs = std::max(max_abs, std::abs(ref.x[t * d + j]));
      }
      const double sd = std::sqrt(var / static_cast<double>(d) + epsilon);
      for (std::size_t j = 0; j < d; ++j) {
        const double xhat = (ref.x[t * d + j] - mean) / sd;
        const double s = m.norm_scale[j], b = m.norm_bias[j];
        r.add(static_cast<double>(y(t, j)), xhat * s + b, bound(max_abs / sd, xhat, s, b));
      }
    }
    record(1, "layer_norm", name, r);
  }
  const auto norm = nn::rms_norm<P>::from_scale(vector(m.norm_scale), {.epsilon = epsilon});
  {  // rms_norm
    const auto y = norm(x);
    const auto bound = nn::error_bound<float>(norm, from_float);
    result r;
    for (std::size_t i = 0; i < y.size(); ++i) {
      r.add(static_cast<double>(y.data()[i]), ref.rms[i], bound(std::abs(ref.rms[i])));
    }
    record(2, "rms_norm", name, r);
  }
  const nn::feed_forward<P> ffn(nn::ffn_activation::swiglu,
                                nn::dense<P>::from_weights(matrix(m.w1, d, hidden), nn::weight_layout::in_out),
                                nn::dense<P>::from_weights(matrix(m.w2, hidden, d), nn::weight_layout::in_out),
                                nn::dense<P>::from_weights(matrix(m.w3, d, hidden), nn::weight_layout::in_out));
  {  // feed_forward
    const auto y = ffn(x);
    const auto bound = nn::error_bound<float>(ffn, from_float);
    result r;
    for (std::size_t t = 0; t < rows; ++t) {
      for (std::size_t o = 0; o < d; ++o) {
        const double b =
            ffn_bound(bound, m, t, o, ref.ffn_h1, ref.ffn_s1, ref.ffn_h3, ref.ffn_s3, {}, {}, ref.ffn[t * d + o]);
        r.add(static_cast<double>(y(t, o)), ref.ffn[t * d + o], b);
      }
    }
    record(3, "feed_forward (swiglu)", name, r);
  }
  {  // attention
    const nn::attention_config cfg{.d_model = d,
                                   .n_heads = n_heads,
                                   .n_kv_heads = n_kv_heads,
                                   .head_dim = head_dim,
                                   .causal = true,
                                   .rotary = nn::rotary_config{.layout = nn::rope_layout::adjacent_pairs}};
    const auto attn =
        nn::attention<P>::from_weights(cfg, matrix(m.wq, d, q_width), matrix(m.wk, d, kv_width),
                                       matrix(m.wv, d, kv_width), matrix(m.wo, q_width, d), nn::weight_layout::in_out);
    const auto y = attn(x);
    const auto bound = nn::error_bound<float>(attn, rows, from_float);
    result r;
    for (std::size_t i = 0; i < y.size(); ++i) {
      r.add(static_cast<double>(y.data()[i]), ref.attn[i], bound(ref.attn_m[i], std::abs(ref.attn[i])));
    }
    record(4, "attention (tolerance model)", name, r);
  }
  {  // the block: (h, r) = norm(x, no_residual); f = ffn(h); z = r + f, the next norm's residual add
    const auto [h, stream] = norm(x, nn::no_residual);
    const auto f = ffn(h);
    const auto z = norm(f, stream).residual;
    const auto norm_bound = nn::error_bound<float>(norm, from_float);
    const auto ffn_b = nn::error_bound<O>(ffn, from_float);
    const auto stream_bound = nn::error_bound<nn::output_t<P, O>>(norm, from_float);
    std::vector<double> d_h(rows * d);  // bounds on the errors of h, the ffn's input
    for (std::size_t i = 0; i < d_h.size(); ++i) d_h[i] = norm_bound.fused(std::abs(ref.block_h[i]));
    const std::vector<double> in1 = carry(d_h, m.w1), in3 = carry(d_h, m.w3);
    result r;
    for (std::size_t t = 0; t < rows; ++t) {
      for (std::size_t o = 0; o < d; ++o) {
        const std::size_t i = t * d + o;
        const double e_f =
            ffn_bound(ffn_b, m, t, o, ref.block_h1, ref.block_s1, ref.block_h3, ref.block_s3, in1, in3, ref.block_f[i]);
        r.add(static_cast<double>(z(t, o)), ref.block_z[i], stream_bound.stream(std::abs(ref.block_z[i]), e_f));
      }
    }
    record(5, "block: x + ffn(rms_norm(x))", name, r);
  }
}

}  // namespace

int main() {
  const model m = make_model();
  const references ref = make_references(m);
  run<policy<float>>("f32", m, ref);
  run<policy<float, bfloat16, float>>("p=f32 c=bf16 o=f32", m, ref);
  run<policy<float, float16, float>>("p=f32 c=f16 o=f32", m, ref);
  run<policy<bfloat16>>("bf16", m, ref);
  run<policy<float16>>("f16", m, ref);
  std::stable_sort(table.begin(), table.end(), [](const line& a, const line& b) { return a.layer < b.layer; });
  std::printf("| layer | policy | max \\|policy - float64\\| | \\|y\\| there | bound there | max error / bound |\n");
  std::printf("|---|---|---|---|---|---|\n");
  bool all_hold = true;
  for (const line& l : table) {
    std::printf("| %s | %s | %.3g | %.3g | %.3g | %.3g |\n", l.layer_name, l.policy_name, l.r.error, l.r.y, l.r.bound,
                l.r.ratio);
    if (!(l.r.ratio <= 1.0)) {
      all_hold = false;
      std::fprintf(stderr, "%s under %s: an element exceeds its bound (error / bound %.3g)\n", l.layer_name,
                   l.policy_name, l.r.ratio);
    }
  }
  return all_hold ? 0 : 1;
}
