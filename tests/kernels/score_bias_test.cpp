// Tests of kernels::score_bias (kernels/score_bias.hpp), the additive bias of attention's scores, through the
// kernels that read it (kernels/attention.hpp): kernels::attention (the small Eigen-tiled problem, a problem
// that takes the packed SIMD path, queries after cached keys, cross-attention), attention_log_sum_exp and
// attention_backward, with float64, float and bfloat16 compute.
//
// References, written here from the definitions and nothing else (float64 throughout):
//  - the forward: query i of batch row b sits at position keys - seq + i; it sees key j unless j is padding
//    or (causal) j is after its position; s_ij = scale q_i · k_j + bias_ij over the keys it sees, P = softmax
//    (exp(s - max) / Σ), O = P V, lse = max + log Σ; a query that sees no key (or whose every visible score
//    is −Inf) outputs 0 with lse −Inf. The bias entry of (b, h, i, j) is ((b', h', i, j)) of a dense bias
//    [batch or 1, heads or 1, seq, keys] (b' = 0 when broadcast, h' likewise), or (h', j − position(i) +
//    keys − 1) of a relative bias [heads or 1, 2 keys − 1];
//  - its vector-Jacobian product: D_i = dO_i · O_i (O as the forward saves it, rounded to C), dP_ij =
//    dO_i · v_j, dS_ij = P_ij (dP_ij − D_i), dQ_i = scale Σ_j dS_ij k_j, dK_j = scale Σ_i dS_ij q_i, dV_j =
//    Σ_i P_ij dO_i (dK, dV summed over a group's query heads), and dBias = dS unscaled, added into the entry
//    each (b, h, i, j) reads: summed over the batch rows and heads a dense bias is broadcast over, and for a
//    relative bias over every (i, j) at one distance j − position(i);
//  - central finite differences (support/gradcheck.hpp) of the float64 forward kernel, for the backward.
// Operands are exactly representable in C (and the bias in the opmath type A), so that the kernels and the
// references see the same numbers. Bounds: 64 ulps of A times (1 + |reference|) for O(1) values, plus C's
// epsilon relative for outputs rounded to C (bfloat16), as tests/kernels/attention_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention_support.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/attention.hpp"
#include "mixprec/kernels/score_bias.hpp"
#include "support/gradcheck.hpp"

namespace score_bias_test {

using mixprec::kernels::attention_backward_problem;
using mixprec::kernels::attention_buffers;
using mixprec::kernels::attention_problem;
using mixprec::kernels::score_bias;
using mixprec::kernels::score_bias_form;

constexpr double inf = std::numeric_limits<double>::infinity();

// ---- numbers in C ----

using attention_support::as_type;
using attention_support::forward_of;
using attention_support::in_type;
using attention_support::kv_source;
using attention_support::small_problem;
using attention_support::small_validity;
using attention_support::to_double;
using attention_support::to_type;

/// The bound of a result of compute type C against its float64 reference: 64 ulps of the opmath type.
template <class C>
double tolerance() {
  return 64.0 * std::numeric_limits<mixprec::accumulator_t<C>>::epsilon();
}

/// C's epsilon: the rounding of an output to C, relative (0 when C is its own opmath type).
template <class C>
double rounding_of() {
  return std::is_same_v<C, mixprec::accumulator_t<C>> ? 0.0 : to_double(std::numeric_limits<C>::epsilon());
}

/// One CHECK for a whole tensor: every element within tol (1 + |want|) + unit |want| of `want` (an infinite
/// reference exactly), the first offender named.
template <class T>
void check_close(const std::string& what, const std::vector<T>& got, const std::vector<double>& want, double tol,
                 double unit = 0.0) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = to_double(got[i]);
    const double w = want[i];
    const bool ok = std::isinf(w) ? g == w : std::abs(g - w) <= tol * (1.0 + std::abs(w)) + unit * std::abs(w);
    if (!ok) {
      FAIL_CHECK(what << "[" << i << "]: " << g << " against " << w << " (of " << want.size() << ")");
      return;
    }
  }
  SUCCEED(what << ": " << want.size() << " elements within bounds");
}

/// One CHECK for a whole tensor: `got` has the bits of `want` (compared as values; NaN fails).
template <class T>
void check_same(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(to_double(got[i]) == to_double(want[i]))) {
      FAIL_CHECK(what << "[" << i << "]: " << to_double(got[i]) << " against " << to_double(want[i]));
      return;
    }
  }
  SUCCEED(what << ": " << want.size() << " elements equal");
}

// ---- problems and data ----

/// A problem the packed path takes (float opmath at the AVX2 level and above: head_dim and key_block
/// multiples of 16, at least 8 queries a block; bfloat16 scores on VDPBF16PS for a power-of-two scale where
/// the CPU has it).
attention_backward_problem packed_problem(bool causal, double scale) {
  return {.batch = 2,
          .seq = 40,
          .n_heads = 4,
          .n_kv_heads = 2,
          .head_dim = 16,
          .query_block = 16,
          .key_block = 16,
          .causal = causal,
          .scale = scale};
}
std::vector<std::uint8_t> packed_validity() {
  std::vector<std::uint8_t> v(80, 1);
  v[0] = v[1] = v[40 + 17] = 0;
  return v;
}

/// Four queries after cached keys (forward only): keys 9, the queries at positions 5 to 8.
attention_backward_problem cached_problem(bool causal) {
  return {.batch = 2,
          .seq = 4,
          .n_heads = 2,
          .n_kv_heads = 1,
          .head_dim = 3,
          .query_block = 2,
          .key_block = 3,
          .causal = causal,
          .scale = 0.6,
          .keys = 9};
}
const std::vector<std::uint8_t> cached_validity{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1};

/// Cross-attention: 9 queries against a context of 5 keys, no mask but padding.
attention_backward_problem cross_problem() {
  return {.batch = 2,
          .seq = 9,
          .n_heads = 2,
          .n_kv_heads = 1,
          .head_dim = 3,
          .query_block = 4,
          .key_block = 2,
          .causal = false,
          .scale = 0.8,
          .keys = 5};
}
const std::vector<std::uint8_t> cross_validity{1, 1, 0, 1, 1, 1, 1, 1, 1, 0};

/// A problem's operands as float64 values exact in C: q and dO [batch, seq, n_heads, head_dim], k and v
/// [batch, keys, n_kv_heads, head_dim], the validity [batch, keys] (empty: every key valid).
struct test_data {
  std::vector<double> q, k, v, d_out;
  std::vector<std::uint8_t> validity;
};

template <class C>
test_data data_of(const attention_backward_problem& p, const std::vector<std::uint8_t>& validity, unsigned seed) {
  const std::size_t q_size = p.batch * p.seq * p.n_heads * p.head_dim;
  const std::size_t kv_size = p.batch * p.key_count() * p.n_kv_heads * p.head_dim;
  return {in_type<C>(gradcheck::uniform(q_size, seed, -1.5, 1.5)),
          in_type<C>(gradcheck::uniform(kv_size, seed + 1, -1.5, 1.5)),
          in_type<C>(gradcheck::uniform(kv_size, seed + 2)), in_type<C>(gradcheck::uniform(q_size, seed + 3)),
          validity};
}

/// Whether query i of batch row b sees key j: not padding, and (causal) not after the query's position.
bool sees(const attention_backward_problem& p, const std::vector<std::uint8_t>& validity, std::size_t b, std::size_t i,
          std::size_t j) {
  const std::size_t keys = p.key_count();
  if (!validity.empty() && validity[b * keys + j] == 0) return false;
  return !(p.causal && j > keys - p.seq + i);
}

// ---- biases ----

/// A bias of the test: its form, broadcast counts and values (float64; the tests round them to A).
struct bias_spec {
  score_bias_form form = score_bias_form::none;
  std::size_t batch = 1;
  std::size_t heads = 1;
  std::vector<double> values;
};

/// The entry of `bias` that query i of batch row b and head h reads for key j, from the definitions: dense
/// (b', h', i, j), relative (h', j − position + keys − 1), b' and h' 0 where broadcast.
std::size_t entry_of(const bias_spec& bias, const attention_backward_problem& p, std::size_t b, std::size_t h,
                     std::size_t i, std::size_t j) {
  const std::size_t keys = p.key_count();
  const std::size_t bb = bias.batch == 1 ? 0 : b;
  const std::size_t hh = bias.heads == 1 ? 0 : h;
  if (bias.form == score_bias_form::dense) return ((bb * bias.heads + hh) * p.seq + i) * keys + j;
  const std::size_t position = keys - p.seq + i;
  return hh * (2 * keys - 1) + (j + keys - 1 - position);
}

/// The bias the kernels read: `values` (the spec's, as A) in the spec's form.
template <class A>
score_bias<A> view_of(const bias_spec& spec, const std::vector<A>& values) {
  if (spec.form == score_bias_form::dense) return score_bias<A>::dense(values, spec.batch, spec.heads);
  if (spec.form == score_bias_form::relative) return score_bias<A>::relative(values, spec.heads);
  return {};
}

struct bias_shape {
  const char* name;
  score_bias_form form;
  bool per_batch;
  bool per_head;
};
constexpr std::array<bias_shape, 6> every_bias_shape{{
    {"dense [1, 1, seq, keys]", score_bias_form::dense, false, false},
    {"dense [batch, 1, seq, keys]", score_bias_form::dense, true, false},
    {"dense [1, heads, seq, keys]", score_bias_form::dense, false, true},
    {"dense [batch, heads, seq, keys]", score_bias_form::dense, true, true},
    {"relative [heads, 2 keys - 1]", score_bias_form::relative, false, true},
    {"relative [1, 2 keys - 1]", score_bias_form::relative, false, false},
}};
constexpr std::span<const bias_shape> dense_shapes(every_bias_shape.data(), 4);

/// A bias of `shape` for `p`, values uniform in [-2, 2) rounded to A.
template <class A>
bias_spec bias_of(const attention_backward_problem& p, const bias_shape& shape, unsigned seed) {
  bias_spec s{shape.form, shape.per_batch ? p.batch : 1, shape.per_head ? p.n_heads : 1, {}};
  const std::size_t keys = p.key_count();
  const std::size_t n =
      shape.form == score_bias_form::dense ? s.batch * s.heads * p.seq * keys : s.heads * (2 * keys - 1);
  s.values = in_type<A>(gradcheck::uniform(n, seed, -2.0, 2.0));
  return s;
}

// ---- the float64 reference ----

struct reference_attention {
  std::vector<double> out, lse, dq, dk, dv, d_bias;
};

/// The float64 attention of `p` with `bias` and its VJP for the cotangent d.d_out (see the top of the file):
/// out, dq [batch, seq, n_heads, head_dim], lse [batch, n_heads, seq], dk, dv [batch, keys, n_kv_heads,
/// head_dim], d_bias laid out as the bias.
template <class C>
reference_attention reference_of(const attention_backward_problem& p, const test_data& d, const bias_spec& bias) {
  const std::size_t S = p.seq, K = p.key_count(), H = p.n_heads, G = p.n_kv_heads, D = p.head_dim;
  const auto qi = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t e) {
    return ((b * S + t) * H + h) * D + e;
  };
  const auto ki = [&](std::size_t b, std::size_t j, std::size_t g, std::size_t e) {
    return ((b * K + j) * G + g) * D + e;
  };
  reference_attention r{std::vector<double>(d.q.size(), 0.0), std::vector<double>(p.batch * H * S, 0.0),
                        std::vector<double>(d.q.size(), 0.0), std::vector<double>(d.k.size(), 0.0),
                        std::vector<double>(d.v.size(), 0.0), std::vector<double>(bias.values.size(), 0.0)};
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / (H / G);
      for (std::size_t i = 0; i < S; ++i) {
        std::vector<double> s(K, -inf);
        double max = -inf;
        for (std::size_t j = 0; j < K; ++j) {
          if (!sees(p, d.validity, b, i, j)) continue;  // masked: its bias is never read
          double dot = 0.0;
          for (std::size_t e = 0; e < D; ++e) dot += d.q[qi(b, i, h, e)] * d.k[ki(b, j, g, e)];
          s[j] = p.scale * dot;
          if (bias.form != score_bias_form::none) s[j] += bias.values[entry_of(bias, p, b, h, i, j)];
          max = std::max(max, s[j]);
        }
        std::vector<double> prob(K, 0.0);
        double sum = 0.0;
        if (max > -inf) {
          for (std::size_t j = 0; j < K; ++j) sum += (prob[j] = std::exp(s[j] - max));  // exp(-Inf) = 0
        }
        r.lse[(b * H + h) * S + i] = sum > 0.0 ? max + std::log(sum) : -inf;
        for (double& x : prob) x = sum > 0.0 ? x / sum : 0.0;
        for (std::size_t j = 0; j < K; ++j) {
          for (std::size_t e = 0; e < D; ++e) r.out[qi(b, i, h, e)] += prob[j] * d.v[ki(b, j, g, e)];
        }
        double d_o_dot_o = 0.0;  // D_i, of the output as saved (rounded to C)
        for (std::size_t e = 0; e < D; ++e) {
          d_o_dot_o += d.d_out[qi(b, i, h, e)] * to_double(to_type<C>(r.out[qi(b, i, h, e)]));
        }
        for (std::size_t j = 0; j < K; ++j) {
          if (prob[j] == 0.0) continue;
          double dp = 0.0;
          for (std::size_t e = 0; e < D; ++e) dp += d.d_out[qi(b, i, h, e)] * d.v[ki(b, j, g, e)];
          const double ds = prob[j] * (dp - d_o_dot_o);
          for (std::size_t e = 0; e < D; ++e) {
            r.dq[qi(b, i, h, e)] += p.scale * ds * d.k[ki(b, j, g, e)];
            r.dk[ki(b, j, g, e)] += p.scale * ds * d.q[qi(b, i, h, e)];
            r.dv[ki(b, j, g, e)] += prob[j] * d.d_out[qi(b, i, h, e)];
          }
          if (bias.form != score_bias_form::none) r.d_bias[entry_of(bias, p, b, h, i, j)] += ds;
        }
      }
    }
  }
  return r;
}

/// Whether no (b, h, i, j) that reads entry `n` of a dense bias sees its key.
std::vector<bool> masked_entries(const attention_backward_problem& p, const std::vector<std::uint8_t>& validity,
                                 const bias_spec& bias) {
  std::vector<bool> masked(bias.values.size(), true);
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t h = 0; h < p.n_heads; ++h) {
      for (std::size_t i = 0; i < p.seq; ++i) {
        for (std::size_t j = 0; j < p.key_count(); ++j) {
          if (sees(p, validity, b, i, j)) masked[entry_of(bias, p, b, h, i, j)] = false;
        }
      }
    }
  }
  return masked;
}

// ---- the kernels ----

template <class C>
struct forward_result {
  std::vector<C> out;
  std::vector<mixprec::accumulator_t<C>> lse;
};

/// kernels::attention<C> of `p` on `d` with `bias`: the output and the log-sum-exps.
template <class C>
forward_result<C> forward(const attention_backward_problem& p, const test_data& d,
                          const score_bias<mixprec::accumulator_t<C>>& bias) {
  using A = mixprec::accumulator_t<C>;
  const std::vector<C> q = as_type<C>(d.q), k = as_type<C>(d.k), v = as_type<C>(d.v);
  const kv_source<C> kv(p, k, v, d.validity);
  attention_buffers<A> buffers;
  forward_result<C> r{std::vector<C>(q.size(), to_type<C>(7.0)), std::vector<A>(p.batch * p.n_heads * p.seq, A(7))};
  mixprec::kernels::attention<C>(q, kv, forward_of(p), bias, r.out, r.lse, buffers);
  return r;
}

template <class A>
struct backward_result {
  std::vector<A> lse, dq, dk, dv, d_bias;
};

/// attention_log_sum_exp<C> and attention_backward<C> of `p` on `d` with the bias `spec` (as `values`), the
/// forward's output taken as the reference's rounded to C; d_bias (when the bias has a form) starts at
/// `d_bias_start`.
template <class C>
backward_result<mixprec::accumulator_t<C>> backward(const attention_backward_problem& p, const test_data& d,
                                                    const bias_spec& spec,
                                                    const std::vector<mixprec::accumulator_t<C>>& values,
                                                    const reference_attention& ref, double d_bias_start = 0.0) {
  using A = mixprec::accumulator_t<C>;
  const std::vector<C> q = as_type<C>(d.q), k = as_type<C>(d.k), v = as_type<C>(d.v), d_out = as_type<C>(d.d_out);
  const std::vector<C> out = as_type<C>(ref.out);
  const score_bias<A> bias = view_of(spec, values);
  backward_result<A> r{std::vector<A>(p.batch * p.n_heads * p.seq, A(7)), std::vector<A>(q.size(), A(0)),
                       std::vector<A>(k.size(), A(0)), std::vector<A>(v.size(), A(0)),
                       std::vector<A>(values.size(), static_cast<A>(d_bias_start))};
  mixprec::kernels::attention_log_sum_exp<C>(q, k, d.validity, bias, p, r.lse);
  mixprec::kernels::attention_backward<C>({.queries = q,
                                           .keys = k,
                                           .values = v,
                                           .out = out,
                                           .d_out = d_out,
                                           .log_sum_exp = r.lse,
                                           .validity = d.validity,
                                           .bias = bias},
                                          p, {r.dq, r.dk, r.dv, r.d_bias});
  return r;
}

/// The forward's results against the reference.
template <class C>
void check_forward(const forward_result<C>& got, const reference_attention& ref) {
  check_close("out", got.out, ref.out, tolerance<C>(), rounding_of<C>());
  check_close("lse", got.lse, ref.lse, tolerance<C>());
}

/// The backward's results against the reference.
template <class C>
void check_backward(const backward_result<mixprec::accumulator_t<C>>& got, const reference_attention& ref) {
  check_close("lse (attention_log_sum_exp)", got.lse, ref.lse, tolerance<C>());
  check_close("dq", got.dq, ref.dq, tolerance<C>());
  check_close("dk", got.dk, ref.dk, tolerance<C>());
  check_close("dv", got.dv, ref.dv, tolerance<C>());
  check_close("d_bias", got.d_bias, ref.d_bias, tolerance<C>());
}

// ---- forward ----

struct named_problem {
  std::string name;
  attention_backward_problem p;
  std::vector<std::uint8_t> validity;
};

std::vector<named_problem> forward_problems() {
  std::vector<named_problem> problems;
  for (const bool causal : {true, false}) {
    const std::string mask = causal ? ", causal" : ", not causal";
    problems.push_back({"small" + mask, small_problem(causal), small_validity});
    for (const double scale : {0.25, 1.0, 0.3}) {
      problems.push_back(
          {"packed, scale " + std::to_string(scale) + mask, packed_problem(causal, scale), packed_validity()});
    }
    problems.push_back({"queries after cached keys" + mask, cached_problem(causal), cached_validity});
    attention_backward_problem packed_cached = packed_problem(causal, 0.25);
    packed_cached.seq = 16;
    packed_cached.keys = 40;
    problems.push_back({"packed, queries after cached keys" + mask, packed_cached, packed_validity()});
    // Large enough for the packed path to spread its (batch row, kv head) tasks over two threads.
    attention_backward_problem threaded = packed_problem(causal, 0.25);
    threaded.seq = 128;
    std::vector<std::uint8_t> threaded_validity(2 * 128, 1);
    threaded_validity[0] = threaded_validity[128 + 70] = 0;
    problems.push_back({"packed, 128 queries" + mask, threaded, threaded_validity});
  }
  return problems;
}

TEMPLATE_TEST_CASE("kernels::attention with a score bias matches a float64 biased attention for every bias shape",
                   "[kernels][attention][score_bias]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  for (const named_problem& np : forward_problems()) {
    const test_data d = data_of<C>(np.p, np.validity, 31);
    for (const bias_shape& shape : every_bias_shape) {
      INFO(np.name << ", " << shape.name);
      const bias_spec spec = bias_of<A>(np.p, shape, 41);
      const std::vector<A> values = as_type<A>(spec.values);
      const reference_attention ref = reference_of<C>(np.p, d, spec);
      check_forward(forward<C>(np.p, d, view_of(spec, values)), ref);
    }
  }
}

TEMPLATE_TEST_CASE("kernels::attention of more queries than keys (cross-attention) takes a dense bias",
                   "[kernels][attention][score_bias]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const attention_backward_problem p = cross_problem();
  // One padding key in each row; then a row of padding only, whose queries see nothing.
  const std::vector<std::uint8_t> one_padded_row{1, 0, 1, 1, 1, 0, 0, 0, 0, 0};
  for (const auto& validity : {cross_validity, one_padded_row}) {
    const test_data d = data_of<C>(p, validity, 51);
    for (const bias_shape& shape : dense_shapes) {
      INFO(shape.name << ", row 1 all padding " << (validity[5] == 0));
      const bias_spec spec = bias_of<A>(p, shape, 61);
      const std::vector<A> values = as_type<A>(spec.values);
      const reference_attention ref = reference_of<C>(p, d, spec);
      const forward_result<C> got = forward<C>(p, d, view_of(spec, values));
      check_forward(got, ref);
      if (validity[5] == 0) {
        const std::size_t row = p.seq * p.n_heads * p.head_dim;
        for (std::size_t e = row; e < 2 * row; ++e) REQUIRE(to_double(got.out[e]) == 0.0);
        for (std::size_t h = 0; h < p.n_heads; ++h) {
          for (std::size_t i = 0; i < p.seq; ++i) CHECK(to_double(got.lse[(p.n_heads + h) * p.seq + i]) == -inf);
        }
      }
    }
  }
}

// ---- masks ----

/// `spec` with every entry no query sees set to `poison` (dense: padding keys and keys after the query;
/// relative: the distances after the query, under a causal mask).
bias_spec poisoned(const attention_backward_problem& p, const std::vector<std::uint8_t>& validity, bias_spec spec,
                   double poison) {
  if (spec.form == score_bias_form::dense) {
    const std::vector<bool> masked = masked_entries(p, validity, spec);
    for (std::size_t n = 0; n < masked.size(); ++n) {
      if (masked[n]) spec.values[n] = poison;
    }
  } else if (p.causal) {
    const std::size_t width = 2 * p.key_count() - 1;
    for (std::size_t n = 0; n < spec.values.size(); ++n) {
      if (n % width >= p.key_count()) spec.values[n] = poison;  // distance j - position > 0
    }
  }
  return spec;
}

TEMPLATE_TEST_CASE("A masked key stays masked whatever its bias, and a query that sees no key outputs zeros",
                   "[kernels][attention][score_bias]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  std::vector<named_problem> problems;
  for (const bool causal : {true, false}) {
    const std::string mask = causal ? ", causal" : ", not causal";
    problems.push_back({"small" + mask, small_problem(causal), small_validity});
    problems.push_back({"packed" + mask, packed_problem(causal, 0.25), packed_validity()});
  }
  for (const named_problem& np : problems) {
    const attention_backward_problem& p = np.p;
    const test_data d = data_of<C>(p, np.validity, 71);
    for (const bias_shape& shape : {every_bias_shape[3], every_bias_shape[4]}) {
      // The clean bias: 0 where masked.
      const bias_spec clean = poisoned(p, np.validity, bias_of<A>(p, shape, 81), 0.0);
      const std::vector<A> clean_values = as_type<A>(clean.values);
      const reference_attention ref = reference_of<C>(p, d, clean);
      const forward_result<C> want = forward<C>(p, d, view_of(clean, clean_values));
      check_forward(want, ref);
      const backward_result<A> want_grads = backward<C>(p, d, clean, clean_values, ref);
      check_backward<C>(want_grads, ref);
      for (const double poison : {1e30, inf, std::numeric_limits<double>::quiet_NaN()}) {
        INFO(np.name << ", " << shape.name << ", masked entries " << poison);
        const bias_spec dirty = poisoned(p, np.validity, clean, poison);
        const std::vector<A> dirty_values = as_type<A>(dirty.values);
        // The same bits as with the masked entries 0: the kernels never let a masked score in.
        const forward_result<C> got = forward<C>(p, d, view_of(dirty, dirty_values));
        check_same("out", got.out, want.out);
        check_same("lse", got.lse, want.lse);
        const backward_result<A> grads = backward<C>(p, d, dirty, dirty_values, ref);
        check_same("lse (attention_log_sum_exp)", grads.lse, want_grads.lse);
        check_same("dq", grads.dq, want_grads.dq);
        check_same("dk", grads.dk, want_grads.dk);
        check_same("dv", grads.dv, want_grads.dv);
        check_same("d_bias", grads.d_bias, want_grads.d_bias);
      }
      // The gradient of a dense bias is exactly 0 where no query sees the key; a relative bias's, at the
      // distances after the query (causal).
      if (shape.form == score_bias_form::dense) {
        const std::vector<bool> masked = masked_entries(p, np.validity, clean);
        for (std::size_t n = 0; n < masked.size(); ++n) {
          if (masked[n] && want_grads.d_bias[n] != A(0)) {
            FAIL_CHECK(np.name << ": d_bias[" << n << "] = " << want_grads.d_bias[n] << " at a masked entry");
            break;
          }
        }
      } else if (p.causal) {
        for (std::size_t n = 0; n < want_grads.d_bias.size(); ++n) {
          if (n % (2 * p.seq - 1) >= p.seq && want_grads.d_bias[n] != A(0)) {
            FAIL_CHECK(np.name << ": d_bias[" << n << "] = " << want_grads.d_bias[n] << " after the query");
            break;
          }
        }
      }
      // Row 0's queries 0 and 1 see no key under the causal mask (keys 0 and 1 are padding): zeros, lse -Inf,
      // no gradient.
      if (p.causal) {
        for (std::size_t t = 0; t < 2; ++t) {
          for (std::size_t e = 0; e < p.n_heads * p.head_dim; ++e) {
            const std::size_t n = t * p.n_heads * p.head_dim + e;
            CHECK((to_double(want.out[n]) == 0.0 && want_grads.dq[n] == A(0)));
          }
          for (std::size_t h = 0; h < p.n_heads; ++h) {
            CHECK(to_double(want.lse[h * p.seq + t]) == -inf);
            CHECK(to_double(want_grads.lse[h * p.seq + t]) == -inf);
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("A -Inf bias removes that one score, and a query whose every visible score is -Inf outputs zeros",
                   "[kernels][attention][score_bias]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  SECTION("a -Inf column of a shared bias is a padding key") {
    for (const bool packed : {false, true}) {
      const attention_backward_problem p = packed ? packed_problem(false, 0.25) : small_problem(false);
      const std::vector<std::uint8_t> validity = packed ? packed_validity() : small_validity;
      INFO("packed problem " << packed);
      const test_data d = data_of<C>(p, validity, 91);
      bias_spec spec = bias_of<A>(p, every_bias_shape[0], 92);  // [1, 1, seq, keys]
      const std::size_t key = 3;
      for (std::size_t i = 0; i < p.seq; ++i) spec.values[i * p.seq + key] = -inf;
      const std::vector<A> values = as_type<A>(spec.values);
      // The reference with key 3 padding in every row (and its bias 0).
      test_data without = d;
      for (std::size_t b = 0; b < p.batch; ++b) without.validity[b * p.seq + key] = 0;
      bias_spec finite = spec;
      for (std::size_t i = 0; i < p.seq; ++i) finite.values[i * p.seq + key] = 0.0;
      const reference_attention ref = reference_of<C>(p, without, finite);
      check_forward(forward<C>(p, d, view_of(spec, values)), ref);
      const backward_result<A> grads = backward<C>(p, d, spec, values, ref);
      check_close("lse (attention_log_sum_exp)", grads.lse, ref.lse, tolerance<C>());
      check_close("dq", grads.dq, ref.dq, tolerance<C>());
      check_close("dk", grads.dk, ref.dk, tolerance<C>());  // exactly 0 for key 3
      check_close("dv", grads.dv, ref.dv, tolerance<C>());
      for (std::size_t b = 0; b < p.batch; ++b) {
        for (std::size_t e = 0; e < p.n_kv_heads * p.head_dim; ++e) {
          const std::size_t n = (b * p.seq + key) * p.n_kv_heads * p.head_dim + e;
          CHECK((grads.dk[n] == A(0) && grads.dv[n] == A(0)));
        }
      }
      for (std::size_t i = 0; i < p.seq; ++i) CHECK(grads.d_bias[i * p.seq + key] == A(0));
      check_close("d_bias", grads.d_bias, ref.d_bias, tolerance<C>());  // elsewhere, the reference's
    }
  }
  SECTION("a query that sees one key, biased -Inf, sees nothing") {
    // Causal: row 0's query 2 sees key 2 only (keys 0 and 1 are padding); head 1's bias there is -Inf.
    const attention_backward_problem p = small_problem(true);
    const test_data d = data_of<C>(p, small_validity, 93);
    bias_spec spec = bias_of<A>(p, every_bias_shape[3], 94);  // [batch, heads, seq, keys]
    spec.values[entry_of(spec, p, 0, 1, 2, 2)] = -inf;
    const std::vector<A> values = as_type<A>(spec.values);
    const reference_attention ref = reference_of<C>(p, d, spec);
    REQUIRE(ref.lse[1 * p.seq + 2] == -inf);
    const forward_result<C> got = forward<C>(p, d, view_of(spec, values));
    check_forward(got, ref);
    for (std::size_t e = 0; e < p.head_dim; ++e) {
      CHECK(to_double(got.out[(2 * p.n_heads + 1) * p.head_dim + e]) == 0.0);  // row 0, query 2, head 1
    }
    CHECK(to_double(got.lse[1 * p.seq + 2]) == -inf);
    const backward_result<A> grads = backward<C>(p, d, spec, values, ref);
    check_backward<C>(grads, ref);  // finite everywhere: no NaN from the -Inf
    for (std::size_t e = 0; e < p.head_dim; ++e) CHECK(grads.dq[(2 * p.n_heads + 1) * p.head_dim + e] == A(0));
    CHECK(grads.d_bias[entry_of(spec, p, 0, 1, 2, 2)] == A(0));
  }
}

// ---- no bias ----

TEMPLATE_TEST_CASE("An empty bias is the unbiased kernels bit for bit, and a zero bias gives their results",
                   "[kernels][attention][score_bias]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  for (const bool causal : {true, false}) {
    for (const bool packed : {false, true}) {
      INFO("causal " << causal << ", packed problem " << packed);
      const attention_backward_problem p = packed ? packed_problem(causal, 0.25) : small_problem(causal);
      const std::vector<std::uint8_t> validity = packed ? packed_validity() : small_validity;
      const test_data d = data_of<C>(p, validity, 101);
      const std::vector<C> q = as_type<C>(d.q), k = as_type<C>(d.k), v = as_type<C>(d.v);
      const kv_source<C> kv(p, k, v, validity);
      attention_buffers<A> buffers;
      std::vector<C> out(q.size()), out_empty(q.size()), out_plain(q.size());
      std::vector<A> lse(p.batch * p.n_heads * p.seq), lse_empty(lse.size());
      mixprec::kernels::attention<C>(q, kv, forward_of(p), out, lse, buffers);
      mixprec::kernels::attention<C>(q, kv, forward_of(p), score_bias<A>{}, out_empty, lse_empty, buffers);
      mixprec::kernels::attention<C>(q, kv, forward_of(p), out_plain, buffers);
      check_same("out (empty bias)", out_empty, out);
      check_same("out (no log-sum-exps)", out_plain, out);
      check_same("lse (empty bias)", lse_empty, lse);
      std::vector<A> lse_recomputed(lse.size()), lse_recomputed_empty(lse.size());
      mixprec::kernels::attention_log_sum_exp<C>(q, k, validity, p, lse_recomputed);
      mixprec::kernels::attention_log_sum_exp<C>(q, k, validity, score_bias<A>{}, p, lse_recomputed_empty);
      check_same("attention_log_sum_exp (empty bias)", lse_recomputed_empty, lse_recomputed);

      // A zero bias of every shape: the unbiased reference, and d_bias = dS (summed as the shape says).
      const reference_attention unbiased = reference_of<C>(p, d, bias_spec{});
      for (const bias_shape& shape : every_bias_shape) {
        INFO(shape.name);
        bias_spec zero = bias_of<A>(p, shape, 102);
        std::fill(zero.values.begin(), zero.values.end(), 0.0);
        const std::vector<A> values = as_type<A>(zero.values);
        const reference_attention ref = reference_of<C>(p, d, zero);
        check_forward(forward<C>(p, d, view_of(zero, values)), unbiased);
        if (!packed) {
          const backward_result<A> grads = backward<C>(p, d, zero, values, ref);
          check_close("dq", grads.dq, unbiased.dq, tolerance<C>());
          check_close("dk", grads.dk, unbiased.dk, tolerance<C>());
          check_close("dv", grads.dv, unbiased.dv, tolerance<C>());
          check_close("d_bias", grads.d_bias, ref.d_bias, tolerance<C>());
        }
      }
    }
  }
}

// ---- backward ----

TEMPLATE_TEST_CASE("attention_log_sum_exp and attention_backward with a score bias match the float64 reference",
                   "[kernels][attention][score_bias][backward]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  for (const bool causal : {true, false}) {
    const attention_backward_problem p = small_problem(causal);
    const test_data d = data_of<C>(p, small_validity, 111);
    for (const bias_shape& shape : every_bias_shape) {
      INFO("causal " << causal << ", " << shape.name);
      const bias_spec spec = bias_of<A>(p, shape, 112);
      const std::vector<A> values = as_type<A>(spec.values);
      const reference_attention ref = reference_of<C>(p, d, spec);
      const backward_result<A> grads = backward<C>(p, d, spec, values, ref);
      check_backward<C>(grads, ref);
      if (shape.form == score_bias_form::dense) {
        const std::vector<bool> masked = masked_entries(p, small_validity, spec);
        std::size_t zeros = 0;
        for (std::size_t n = 0; n < masked.size(); ++n) {
          if (!masked[n]) continue;
          ++zeros;
          if (grads.d_bias[n] != A(0)) {
            FAIL_CHECK("d_bias[" << n << "] = " << grads.d_bias[n] << " at a masked entry");
            break;
          }
        }
        // (Without a causal mask, an entry shared by the batch rows is masked only if its key is padding in both.)
        if (causal || shape.per_batch) CHECK(zeros > 0);
      }
      // d_bias is added to: from 1, the same gradient plus 1.
      const backward_result<A> again = backward<C>(p, d, spec, values, ref, 1.0);
      std::vector<double> plus_one = ref.d_bias;
      for (double& x : plus_one) x += 1.0;
      check_close("d_bias added to 1", again.d_bias, plus_one, tolerance<C>());
    }
  }
}

TEMPLATE_TEST_CASE("attention_backward of another number of queries than keys (cross-attention) with a dense bias",
                   "[kernels][attention][score_bias][backward]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const std::vector<std::uint8_t> one_padded_row{1, 0, 1, 1, 1, 0, 0, 0, 0, 0};
  for (const std::size_t seq : {9, 3}) {  // against 5 keys
    attention_backward_problem p = cross_problem();
    p.seq = seq;
    for (const auto& validity : {cross_validity, one_padded_row}) {
      const test_data d = data_of<C>(p, validity, 121);
      for (const bias_shape& shape : dense_shapes) {
        INFO(seq << " queries, " << shape.name << ", row 1 all padding " << (validity[5] == 0));
        const bias_spec spec = bias_of<A>(p, shape, 122);
        const std::vector<A> values = as_type<A>(spec.values);
        const reference_attention ref = reference_of<C>(p, d, spec);
        const backward_result<A> grads = backward<C>(p, d, spec, values, ref);
        check_backward<C>(grads, ref);
        const std::vector<bool> masked = masked_entries(p, validity, spec);
        for (std::size_t n = 0; n < masked.size(); ++n) {
          if (masked[n] && grads.d_bias[n] != A(0)) {
            FAIL_CHECK("d_bias[" << n << "] = " << grads.d_bias[n] << " at a masked entry");
            break;
          }
        }
      }
    }
  }
}

/// The finite-difference check of the backward through the float64 forward kernel: the loss Σ w ⊙ O, its
/// gradient with respect to q, k, v and the bias's values.
void gradient_check(const attention_backward_problem& p, const std::vector<std::uint8_t>& validity, bias_spec spec,
                    unsigned seed) {
  test_data d = data_of<double>(p, validity, seed);
  const std::vector<double>& w = d.d_out;  // dO
  std::vector<double> out(d.q.size()), lse(p.batch * p.n_heads * p.seq);
  attention_buffers<double> buffers;
  const auto run = [&] {
    const kv_source<double> kv(p, d.k, d.v, validity);
    mixprec::kernels::attention<double>(d.q, kv, forward_of(p), view_of(spec, spec.values), out, lse, buffers);
  };
  const auto loss = [&] {
    run();
    double s = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) s += w[i] * out[i];
    return s;
  };
  run();
  const std::vector<double> saved_out = out, saved_lse = lse;
  std::vector<double> dq(d.q.size(), 0.0), dk(d.k.size(), 0.0), dv(d.v.size(), 0.0), d_bias(spec.values.size(), 0.0);
  mixprec::kernels::attention_backward<double>({.queries = d.q,
                                                .keys = d.k,
                                                .values = d.v,
                                                .out = saved_out,
                                                .d_out = w,
                                                .log_sum_exp = saved_lse,
                                                .validity = validity,
                                                .bias = view_of(spec, spec.values)},
                                               p, {dq, dk, dv, d_bias});
  gradcheck::require_close("dq", std::span<const double>(dq),
                           gradcheck::numeric_gradient(d.q.data(), d.q.size(), loss));
  gradcheck::require_close("dk", std::span<const double>(dk),
                           gradcheck::numeric_gradient(d.k.data(), d.k.size(), loss));
  gradcheck::require_close("dv", std::span<const double>(dv),
                           gradcheck::numeric_gradient(d.v.data(), d.v.size(), loss));
  gradcheck::require_close("d_bias", std::span<const double>(d_bias),
                           gradcheck::numeric_gradient(spec.values.data(), spec.values.size(), loss));
}

TEST_CASE("attention_backward is the gradient of the biased kernels::attention (central finite differences)",
          "[kernels][attention][score_bias][backward]") {
  SECTION("a relative bias per head, causal and not") {
    for (const bool causal : {true, false}) {
      INFO("causal " << causal);
      const attention_backward_problem p = small_problem(causal);
      gradient_check(p, small_validity, bias_of<double>(p, every_bias_shape[4], 131), 132);
    }
  }
  SECTION("a relative bias shared by the heads") {
    const attention_backward_problem p = small_problem(true);
    gradient_check(p, small_validity, bias_of<double>(p, every_bias_shape[5], 133), 134);
  }
  SECTION("a dense bias in a cross-attention problem, shared by the batch rows and per batch row and head") {
    const attention_backward_problem p = cross_problem();
    gradient_check(p, cross_validity, bias_of<double>(p, every_bias_shape[2], 135), 136);
    gradient_check(p, cross_validity, bias_of<double>(p, every_bias_shape[3], 137), 138);
  }
}

// ---- errors ----

TEST_CASE("The kernels refuse a score bias that does not fit the call, naming it", "[kernels][attention][score_bias]") {
  SECTION("kernels::attention") {
    const attention_backward_problem p = small_problem(false);  // batch 2, seq = keys = 7, heads 4
    const test_data d = data_of<float>(p, small_validity, 141);
    const std::vector<float> q = as_type<float>(d.q), k = as_type<float>(d.k), v = as_type<float>(d.v);
    const kv_source<float> kv(p, k, v, small_validity);
    attention_buffers<float> buffers;
    std::vector<float> out(q.size(), 7.0F), lse(p.batch * p.n_heads * p.seq, 7.0F);
    std::vector<float> values(49, 0.5F);
    const auto call = [&](const score_bias<float>& bias) {
      mixprec::kernels::attention<float>(q, kv, forward_of(p), bias, out, lse, buffers);
    };
    // The wrong size.
    std::vector<float> ten(10, 0.5F);
    CHECK_THROWS_AS(call(score_bias<float>::dense(ten, 1, 1)), std::invalid_argument);
    CHECK_THROWS_WITH(call(score_bias<float>::dense(ten, 1, 1)),
                      Catch::Contains("kernels::attention: the score bias has 10 elements but [batch, heads, queries, "
                                      "keys] = [1, 1, 7, 7] needs 49"));
    std::vector<float> fifty(50, 0.5F);
    CHECK_THROWS_WITH(call(score_bias<float>::relative(fifty, 4)),
                      Catch::Contains("kernels::attention: the score bias has 50 elements but [heads, 2 keys - 1] = "
                                      "[4, 13] needs 52"));
    // Broadcast counts neither 1 nor the call's.
    std::vector<float> three_rows(3 * 49, 0.5F);
    CHECK_THROWS_WITH(call(score_bias<float>::dense(three_rows, 3, 1)),
                      Catch::Contains("kernels::attention: the score bias holds 3 batch rows and 1 heads but the call "
                                      "has 2 and 4; each must be 1 (shared) or the call's"));
    std::vector<float> two_heads(2 * 49, 0.5F);
    CHECK_THROWS_WITH(call(score_bias<float>::dense(two_heads, 1, 2)),
                      Catch::Contains("holds 1 batch rows and 2 heads but the call has 2 and 4"));
    std::vector<float> three_relative(3 * 13, 0.5F);
    CHECK_THROWS_WITH(call(score_bias<float>::relative(three_relative, 3)),
                      Catch::Contains("holds 1 batch rows and 3 heads but the call has 2 and 4"));
    // Values without a form.
    CHECK_THROWS_WITH(call(score_bias<float>{{}, values}),
                      Catch::Contains("kernels::attention: the score bias has 49 elements but no form"));
    // A refused call writes nothing.
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0F; }));
    CHECK(std::all_of(lse.begin(), lse.end(), [](float x) { return x == 7.0F; }));
    REQUIRE_NOTHROW(call(score_bias<float>::dense(values, 1, 1)));
  }

  SECTION("kernels::attention of more queries than keys") {
    const attention_backward_problem p = cross_problem();  // batch 2, seq 9, keys 5, heads 2
    const test_data d = data_of<float>(p, cross_validity, 142);
    const std::vector<float> q = as_type<float>(d.q), k = as_type<float>(d.k), v = as_type<float>(d.v);
    const kv_source<float> kv(p, k, v, cross_validity);
    attention_buffers<float> buffers;
    std::vector<float> out(q.size(), 7.0F), lse(p.batch * p.n_heads * p.seq, 7.0F);
    std::vector<float> relative(2 * 9, 0.5F);  // [heads, 2 keys - 1]
    CHECK_THROWS_WITH(
        mixprec::kernels::attention<float>(q, kv, forward_of(p), score_bias<float>::relative(relative, 2), out, lse,
                                           buffers),
        Catch::Contains("kernels::attention: the score bias is relative") &&
            Catch::Contains("but the queries have no positions among the keys (cross-attention); pass a dense bias"));
    attention_backward_problem causal = p;
    causal.causal = true;
    std::vector<float> dense(9 * 5, 0.5F);
    CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q, kv, forward_of(causal),
                                                         score_bias<float>::dense(dense, 1, 1), out, lse, buffers),
                      Catch::Contains("kernels::attention: the problem is inconsistent") &&
                          Catch::Contains("seq 9, keys 5") && Catch::Contains("under a causal mask seq <= keys"));
    CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 7.0F; }));
    REQUIRE_NOTHROW(mixprec::kernels::attention<float>(q, kv, forward_of(p), score_bias<float>::dense(dense, 1, 1), out,
                                                       lse, buffers));
  }

  SECTION("attention_log_sum_exp and attention_backward") {
    for (const bool cross : {false, true}) {
      INFO("cross " << cross);
      const attention_backward_problem p = cross ? cross_problem() : small_problem(false);
      const std::vector<std::uint8_t>& validity = cross ? cross_validity : small_validity;
      const test_data d = data_of<float>(p, validity, 143);
      const std::vector<float> q = as_type<float>(d.q), k = as_type<float>(d.k), v = as_type<float>(d.v),
                               d_out = as_type<float>(d.d_out), out(q.size(), 0.25F);
      const std::size_t dense_size = p.seq * p.key_count();  // [1, 1, seq, keys]
      std::vector<float> lse(p.batch * p.n_heads * p.seq, 0.0F);
      std::vector<float> dq(q.size(), 0.0F), dk(k.size(), 0.0F), dv(v.size(), 0.0F);
      const auto backward_call = [&](const attention_backward_problem& problem, const score_bias<float>& bias,
                                     std::vector<float>& d_bias) {
        mixprec::kernels::attention_backward<float>({.queries = q,
                                                     .keys = k,
                                                     .values = v,
                                                     .out = out,
                                                     .d_out = d_out,
                                                     .log_sum_exp = lse,
                                                     .validity = validity,
                                                     .bias = bias},
                                                    problem, {dq, dk, dv, d_bias});
      };
      const std::string bias_size = "[batch, heads, queries, keys] = [1, 1, " + std::to_string(p.seq) + ", " +
                                    std::to_string(p.key_count()) + "] needs " + std::to_string(dense_size);
      std::vector<float> values(dense_size, 0.5F), short_values(dense_size - 1, 0.5F);
      std::vector<float> d_bias(dense_size, 0.0F), short_d_bias(dense_size - 1, 0.0F), none;
      // The bias of the wrong size.
      CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(
                            q, k, validity, score_bias<float>::dense(short_values, 1, 1), p, lse),
                        Catch::Contains("kernels::attention_log_sum_exp: the score bias has " +
                                        std::to_string(dense_size - 1) + " elements but " + bias_size));
      CHECK_THROWS_WITH(backward_call(p, score_bias<float>::dense(short_values, 1, 1), d_bias),
                        Catch::Contains("kernels::attention_backward: the score bias has " +
                                        std::to_string(dense_size - 1) + " elements but " + bias_size));
      // Broadcast counts neither 1 nor the call's.
      std::vector<float> three_rows(3 * dense_size, 0.5F);
      CHECK_THROWS_WITH(backward_call(p, score_bias<float>::dense(three_rows, 3, 1), three_rows),
                        Catch::Contains("kernels::attention_backward: the score bias holds 3 batch rows and 1 heads "
                                        "but the call has 2 and " +
                                        std::to_string(p.n_heads)));
      CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(
                            q, k, validity, score_bias<float>::dense(three_rows, 3, 1), p, lse),
                        Catch::Contains("kernels::attention_log_sum_exp: the score bias holds 3 batch rows"));
      // d_bias of the wrong size, or without a bias.
      CHECK_THROWS_WITH(backward_call(p, score_bias<float>::dense(values, 1, 1), short_d_bias),
                        Catch::Contains("kernels::attention_backward: d_bias (shaped as the bias) has " +
                                        std::to_string(dense_size - 1) + " elements but " + bias_size));
      CHECK_THROWS_WITH(backward_call(p, score_bias<float>{}, d_bias),
                        Catch::Contains("kernels::attention_backward: d_bias (shaped as the bias) has " +
                                        std::to_string(dense_size) + " elements but no form"));
      if (cross) {
        // A relative bias, and a causal mask, need as many keys as queries.
        std::vector<float> relative(p.n_heads * (2 * p.key_count() - 1), 0.5F);
        std::vector<float> d_relative(relative.size(), 0.0F);
        CHECK_THROWS_WITH(backward_call(p, score_bias<float>::relative(relative, p.n_heads), d_relative),
                          Catch::Contains("kernels::attention_backward: the score bias is relative") &&
                              Catch::Contains("pass a dense bias"));
        CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(
                              q, k, validity, score_bias<float>::relative(relative, p.n_heads), p, lse),
                          Catch::Contains("kernels::attention_log_sum_exp: the score bias is relative"));
        attention_backward_problem causal = p;
        causal.causal = true;
        CHECK_THROWS_WITH(backward_call(causal, score_bias<float>::dense(values, 1, 1), d_bias),
                          Catch::Contains("kernels::attention_backward: a causal mask needs as many keys as queries "
                                          "(9 queries, 5 keys)"));
        CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(
                              q, k, validity, score_bias<float>::dense(values, 1, 1), causal, lse),
                          Catch::Contains("kernels::attention_log_sum_exp: a causal mask needs as many keys as "
                                          "queries (9 queries, 5 keys)"));
      }
      // A refused call writes nothing.
      const auto zero = [](const std::vector<float>& x) {
        return std::all_of(x.begin(), x.end(), [](float e) { return e == 0.0F; });
      };
      CHECK((zero(lse) && zero(dq) && zero(dk) && zero(dv) && zero(d_bias)));
      mixprec::kernels::attention_log_sum_exp<float>(q, k, validity, score_bias<float>::dense(values, 1, 1), p, lse);
      REQUIRE_NOTHROW(backward_call(p, score_bias<float>::dense(values, 1, 1), d_bias));
      REQUIRE_NOTHROW(backward_call(p, score_bias<float>::dense(values, 1, 1), none));  // no d_bias wanted
    }
  }
}

}  // namespace score_bias_test
