// Tests of kernels::attention and kernels::attention_backward (kernels/attention.hpp) called directly,
// without nn::attention: results of small problems against a float64 attention and its gradient written
// here, the backward against central finite differences of the forward kernel, and the errors for a
// problem that is inconsistent (nn validates its own problems; a direct caller gets an exception, never
// a hang or an out-of-bounds read). The tiled paths themselves are tested through nn::attention
// (tests/nn/attention_test.cpp, attention_training_test.cpp) at every SIMD level.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/attention_support.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/attention.hpp"
#include "support/gradcheck.hpp"

namespace attention_test {

using mixprec::kernels::attention_backward_gradients;
using mixprec::kernels::attention_backward_inputs;
using mixprec::kernels::attention_backward_problem;
using mixprec::kernels::attention_problem;
using mixprec::kernels::attention_scratch;
using mixprec::kernels::attention_scratch_sizes;
using mixprec::kernels::online_softmax;

/// One batch row and one kv head: keys and values [keys, head_dim], every key valid.
struct one_head_source {
  std::vector<float> k, v;
  std::vector<std::uint8_t> valid;
  [[nodiscard]] std::span<const float> keys(std::size_t, std::size_t) const { return k; }
  [[nodiscard]] std::span<const float> values(std::size_t, std::size_t) const { return v; }
  [[nodiscard]] std::span<const std::uint8_t> validity(std::size_t) const { return valid; }
};

/// Owns the buffers `kernels::attention` asks for.
struct owned_scratch {
  std::vector<float> queries, accumulators, scores, keys, values, packed;
  std::vector<online_softmax<float>> softmax;
  std::vector<std::uint16_t> key_pairs;
  std::vector<std::uint32_t> query_pairs;
  attention_scratch<float> operator()(const attention_scratch_sizes& n) {
    queries.resize(n.queries);
    accumulators.resize(n.queries);
    scores.resize(n.scores);
    keys.resize(n.keys);
    values.resize(n.values);
    softmax.resize(n.softmax);
    packed.resize(n.packed);
    key_pairs.resize(n.key_pairs);
    query_pairs.resize(n.query_pairs);
    return {queries, accumulators, scores, keys, values, softmax, packed, key_pairs, query_pairs};
  }
};

attention_problem problem_of(std::size_t seq, std::size_t keys) {
  return {.batch = 1,
          .seq = seq,
          .n_heads = 1,
          .n_kv_heads = 1,
          .head_dim = 2,
          .keys = keys,
          .capacity = keys,
          .query_block = 4,
          .key_block = 4,
          .causal = false,
          .scale = 0.5};
}

TEST_CASE("kernels::attention of one query over three keys is the float64 softmax-weighted sum",
          "[kernels][attention]") {
  const one_head_source kv{{1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {1, 1, 1}};
  const std::vector<float> q{2.0f, -1.0f};
  std::vector<float> out(2);
  owned_scratch scratch;
  mixprec::kernels::attention<float>(q, kv, problem_of(1, 3), out, scratch);
  // Reference: s_j = 0.5 q·k_j, p = softmax(s), out = Σ p_j v_j, in double.
  double s[3], sum = 0.0;
  for (int j = 0; j < 3; ++j) s[j] = 0.5 * (2.0 * kv.k[2 * j] - 1.0 * kv.k[2 * j + 1]);
  for (double& x : s) sum += (x = std::exp(x));
  for (int i = 0; i < 2; ++i) {
    double expected = 0.0;
    for (int j = 0; j < 3; ++j) expected += s[j] / sum * kv.v[2 * j + i];
    CHECK(out[i] == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("kernels::attention rejects an inconsistent problem, naming its sizes", "[kernels][attention]") {
  const one_head_source kv{{1.0f, 0.0f, 0.0f, 1.0f}, {1.0f, 2.0f, 3.0f, 4.0f}, {1, 1}};
  const std::vector<float> q{1.0f, 1.0f};
  std::vector<float> out(2);
  owned_scratch scratch;
  const auto fails = [&](attention_problem p) {
    CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q, kv, p, out, scratch),
                      Catch::Contains("kernels::attention: the problem is inconsistent") &&
                          Catch::Contains("keys <= capacity, and under a causal mask seq <= keys"));
  };
  attention_problem p = problem_of(1, 2);
  p.query_block = 0;
  fails(p);
  p = problem_of(1, 2);
  p.key_block = 0;
  fails(p);
  p = problem_of(1, 2);
  p.capacity = 1;
  fails(p);
  p = problem_of(1, 2);
  p.n_kv_heads = 0;
  fails(p);
  // seq > keys under a causal mask: one query more than the source holds (queries and out sized for it).
  // Without the mask it is cross-attention, whose queries have no positions (tests/kernels/score_bias_test.cpp).
  const std::vector<float> q3(6, 1.0f);
  std::vector<float> out3(6);
  p = problem_of(3, 2);
  p.causal = true;
  CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q3, kv, p, out3, scratch), Catch::Contains("seq 3, keys 2"));
  // The shape check keeps the message nn's callers see.
  std::vector<float> short_out(1);
  CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q, kv, problem_of(1, 2), short_out, scratch),
                    Catch::Contains("scaled_dot_product_attention: queries have 2 and out 1 elements"));
}

// ---- backward ----

using attention_support::as_type;
using attention_support::in_type;
using attention_support::to_double;
using attention_support::to_type;

/// The float64 attention of one problem and its vector-Jacobian product, written from the definitions
/// (softmax over each query's visible keys, then the chain rule of O = P·V, P = softmax(scale Q·Kᵀ)):
/// every tensor [batch, seq, heads, head_dim], the log-sum-exps [batch, n_heads, seq]. The VJP reads
/// the output rounded to C, as the forward saves it (D_i = dO_i · O_i).
struct reference_attention {
  std::vector<double> out, lse, dq, dk, dv;
};

template <class C>
reference_attention reference_of(const attention_backward_problem& p, const std::vector<double>& q,
                                 const std::vector<double>& k, const std::vector<double>& v,
                                 const std::vector<std::uint8_t>& validity, const std::vector<double>& d_out) {
  const std::size_t S = p.seq, H = p.n_heads, G = p.n_kv_heads, D = p.head_dim;
  const auto qi = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t e) {
    return ((b * S + t) * H + h) * D + e;
  };
  const auto ki = [&](std::size_t b, std::size_t t, std::size_t g, std::size_t e) {
    return ((b * S + t) * G + g) * D + e;
  };
  reference_attention r{std::vector<double>(q.size(), 0.0), std::vector<double>(p.batch * H * S, 0.0),
                        std::vector<double>(q.size(), 0.0), std::vector<double>(k.size(), 0.0),
                        std::vector<double>(v.size(), 0.0)};
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / (H / G);
      for (std::size_t i = 0; i < S; ++i) {
        std::vector<double> prob(S, 0.0);
        double max = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < S; ++j) {
          if ((p.causal && j > i) || (!validity.empty() && validity[b * S + j] == 0)) continue;
          double s = 0.0;
          for (std::size_t e = 0; e < D; ++e) s += q[qi(b, i, h, e)] * k[ki(b, j, g, e)];
          prob[j] = p.scale * s;
          max = std::max(max, prob[j]);
        }
        double sum = 0.0;
        for (std::size_t j = 0; j < S; ++j) {
          const bool seen = !((p.causal && j > i) || (!validity.empty() && validity[b * S + j] == 0));
          prob[j] = seen ? std::exp(prob[j] - max) : 0.0;
          sum += prob[j];
        }
        r.lse[(b * H + h) * S + i] = sum > 0.0 ? max + std::log(sum) : -std::numeric_limits<double>::infinity();
        for (double& x : prob) x = sum > 0.0 ? x / sum : 0.0;
        for (std::size_t j = 0; j < S; ++j) {
          for (std::size_t e = 0; e < D; ++e) r.out[qi(b, i, h, e)] += prob[j] * v[ki(b, j, g, e)];
        }
        // dO·O, then for each key dP = dO·v_j, dS = P (dP − dO·O).
        double d_o_dot_o = 0.0;
        for (std::size_t e = 0; e < D; ++e) {
          d_o_dot_o += d_out[qi(b, i, h, e)] * to_double(to_type<C>(r.out[qi(b, i, h, e)]));
        }
        for (std::size_t j = 0; j < S; ++j) {
          if (prob[j] == 0.0) continue;
          double dp = 0.0;
          for (std::size_t e = 0; e < D; ++e) dp += d_out[qi(b, i, h, e)] * v[ki(b, j, g, e)];
          const double ds = prob[j] * (dp - d_o_dot_o);
          for (std::size_t e = 0; e < D; ++e) {
            r.dq[qi(b, i, h, e)] += p.scale * ds * k[ki(b, j, g, e)];
            r.dk[ki(b, j, g, e)] += p.scale * ds * q[qi(b, i, h, e)];
            r.dv[ki(b, j, g, e)] += prob[j] * d_out[qi(b, i, h, e)];
          }
        }
      }
    }
  }
  return r;
}

/// A small grouped-query problem with tiles smaller than the sequence, and its padding (support header).
attention_backward_problem backward_problem_of(bool causal) { return attention_support::small_problem(causal); }
const std::vector<std::uint8_t>& backward_validity = attention_support::small_validity;

TEMPLATE_TEST_CASE("kernels::attention_backward and attention_log_sum_exp match a float64 reference",
                   "[kernels][attention][backward]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  // Bound: the kernel's sums of products of C values in A against the same sums in float64, over at
  // most seq + head_dim terms of O(1) values; A's unit roundoff times a margin of 64 (float: ~4e-6).
  const double tolerance = 64.0 * std::numeric_limits<A>::epsilon();
  for (const bool causal : {true, false}) {
    INFO("causal " << causal);
    const attention_backward_problem p = backward_problem_of(causal);
    const std::size_t q_size = p.batch * p.seq * p.n_heads * p.head_dim;
    const std::size_t kv_size = p.batch * p.seq * p.n_kv_heads * p.head_dim;
    const auto q = in_type<C>(gradcheck::uniform(q_size, 1, -1.5, 1.5));
    const auto k = in_type<C>(gradcheck::uniform(kv_size, 2, -1.5, 1.5));
    const auto v = in_type<C>(gradcheck::uniform(kv_size, 3));
    const auto d_out = in_type<C>(gradcheck::uniform(q_size, 4));
    const reference_attention ref = reference_of<C>(p, q, k, v, backward_validity, d_out);
    const std::vector<C> qc = as_type<C>(q), kc = as_type<C>(k), vc = as_type<C>(v), d_outc = as_type<C>(d_out);
    // The forward's output as it would be saved: the reference rounded to C (D_i = dO_i · O_i reads it).
    const std::vector<C> out = as_type<C>(ref.out);

    std::vector<A> lse(p.batch * p.n_heads * p.seq, A(7));
    mixprec::kernels::attention_log_sum_exp<C>(qc, kc, backward_validity, p, lse);
    for (std::size_t i = 0; i < lse.size(); ++i) {
      INFO("lse " << i);
      if (std::isinf(ref.lse[i])) {
        CHECK(lse[i] == -std::numeric_limits<A>::infinity());  // a query that sees no key
      } else {
        CHECK(std::abs(static_cast<double>(lse[i]) - ref.lse[i]) <= tolerance * (1.0 + std::abs(ref.lse[i])));
      }
    }

    std::vector<A> dq(q_size, A(0)), dk(kv_size, A(0)), dv(kv_size, A(0));
    const attention_backward_inputs<C> in{.queries = qc,
                                          .keys = kc,
                                          .values = vc,
                                          .out = out,
                                          .d_out = d_outc,
                                          .log_sum_exp = lse,
                                          .validity = backward_validity};
    mixprec::kernels::attention_backward<C>(in, p, {dq, dk, dv});
    const auto close = [&](const char* what, const std::vector<A>& got, const std::vector<double>& want) {
      for (std::size_t i = 0; i < want.size(); ++i) {
        INFO(what << "[" << i << "]: " << static_cast<double>(got[i]) << " against " << want[i]);
        CHECK(std::abs(static_cast<double>(got[i]) - want[i]) <= tolerance * (1.0 + std::abs(want[i])));
      }
    };
    close("dq", dq, ref.dq);
    close("dk", dk, ref.dk);
    close("dv", dv, ref.dv);
    // Exactly nothing for the padding keys, and for the queries that see no key.
    for (std::size_t e = 0; e < p.n_kv_heads * p.head_dim; ++e) {
      for (const std::size_t key : {std::size_t{0}, std::size_t{1}, std::size_t{7 + 4}}) {  // row 0: 0, 1; row 1: 4
        CHECK(dk[key * p.n_kv_heads * p.head_dim + e] == A(0));
        CHECK(dv[key * p.n_kv_heads * p.head_dim + e] == A(0));
      }
    }
    if (causal) {
      for (std::size_t e = 0; e < 2 * p.n_heads * p.head_dim; ++e) CHECK(dq[e] == A(0));  // row 0, queries 0, 1
    }
    // The gradients are added: a second call doubles them exactly.
    const std::vector<A> dq1 = dq, dk1 = dk, dv1 = dv;
    mixprec::kernels::attention_backward<C>(in, p, {dq, dk, dv});
    for (std::size_t i = 0; i < dq.size(); ++i) CHECK(dq[i] == 2 * dq1[i]);
    for (std::size_t i = 0; i < dk.size(); ++i) CHECK((dk[i] == 2 * dk1[i] && dv[i] == 2 * dv1[i]));
  }
}

using attention_support::kv_source;

using attention_support::forward_of;

TEST_CASE("kernels::attention_backward is the gradient of kernels::attention (central finite differences)",
          "[kernels][attention][backward]") {
  for (const bool causal : {true, false}) {
    INFO("causal " << causal);
    const attention_backward_problem p = backward_problem_of(causal);
    const attention_problem forward = forward_of(p);
    const std::size_t q_size = p.batch * p.seq * p.n_heads * p.head_dim;
    const std::size_t kv_size = p.batch * p.seq * p.n_kv_heads * p.head_dim;
    auto q = gradcheck::uniform(q_size, 11, -1.5, 1.5);
    auto k = gradcheck::uniform(kv_size, 12, -1.5, 1.5);
    auto v = gradcheck::uniform(kv_size, 13);
    const auto w = gradcheck::uniform(q_size, 14);  // the loss Σ w ⊙ O, so dO = w
    mixprec::kernels::attention_buffers<double> buffers;
    std::vector<double> out(q_size);
    const auto run = [&] {
      const kv_source<double> kv(p, k, v, backward_validity);
      mixprec::kernels::attention<double>(q, kv, forward, out, buffers);
    };
    const auto loss = [&] {
      run();
      double s = 0.0;
      for (std::size_t i = 0; i < q_size; ++i) s += w[i] * out[i];
      return s;
    };
    run();
    const std::vector<double> saved_out = out;
    std::vector<double> lse(p.batch * p.n_heads * p.seq);
    mixprec::kernels::attention_log_sum_exp<double>(q, k, backward_validity, p, lse);
    std::vector<double> dq(q_size, 0.0), dk(kv_size, 0.0), dv(kv_size, 0.0);
    mixprec::kernels::attention_backward<double>({.queries = q,
                                                  .keys = k,
                                                  .values = v,
                                                  .out = saved_out,
                                                  .d_out = w,
                                                  .log_sum_exp = lse,
                                                  .validity = backward_validity},
                                                 p, {dq, dk, dv});
    gradcheck::require_close("dq", std::span<const double>(dq), gradcheck::numeric_gradient(q.data(), q.size(), loss));
    gradcheck::require_close("dk", std::span<const double>(dk), gradcheck::numeric_gradient(k.data(), k.size(), loss));
    gradcheck::require_close("dv", std::span<const double>(dv), gradcheck::numeric_gradient(v.data(), v.size(), loss));
  }
}

TEMPLATE_TEST_CASE("kernels::attention writes the log-sum-exps attention_backward reads",
                   "[kernels][attention][backward]", double, float, mixprec::bfloat16) {
  using C = TestType;
  using A = mixprec::accumulator_t<C>;
  const double tolerance = 64.0 * std::numeric_limits<A>::epsilon();
  // The small problem (Eigen's tiles), and one the packed path takes (head_dim and key_block multiples
  // of 16, 16 queries a block; with scale 1/4, bfloat16 scores on VDPBF16PS where the CPU has it),
  // each with left padding and a padding key in the middle.
  attention_backward_problem packed{.batch = 2,
                                    .seq = 40,
                                    .n_heads = 4,
                                    .n_kv_heads = 2,
                                    .head_dim = 16,
                                    .query_block = 16,
                                    .key_block = 16,
                                    .scale = 0.25};
  std::vector<std::uint8_t> packed_validity(80, 1);
  packed_validity[0] = packed_validity[1] = packed_validity[40 + 17] = 0;
  for (const bool causal : {true, false}) {
    for (const double scale : {0.25, 0.3}) {
      for (const bool small : {true, false}) {
        INFO("causal " << causal << ", scale " << scale << ", small problem " << small);
        attention_backward_problem p = small ? backward_problem_of(causal) : packed;
        p.causal = causal;
        p.scale = scale;
        const std::vector<std::uint8_t>& validity = small ? backward_validity : packed_validity;
        const std::size_t q_size = p.batch * p.seq * p.n_heads * p.head_dim;
        const std::size_t kv_size = p.batch * p.seq * p.n_kv_heads * p.head_dim;
        const auto q = in_type<C>(gradcheck::uniform(q_size, 21, -1.5, 1.5));
        const auto k = in_type<C>(gradcheck::uniform(kv_size, 22, -1.5, 1.5));
        const auto v = in_type<C>(gradcheck::uniform(kv_size, 23));
        const reference_attention ref = reference_of<C>(p, q, k, v, validity, std::vector<double>(q_size, 0.0));
        const std::vector<C> qc = as_type<C>(q), kc = as_type<C>(k), vc = as_type<C>(v);
        const kv_source<C> kv(p, kc, vc, validity);
        mixprec::kernels::attention_buffers<A> buffers;
        std::vector<C> out(q_size), out_without(q_size);
        std::vector<A> lse(p.batch * p.n_heads * p.seq, A(7)), recomputed(lse.size());
        mixprec::kernels::attention<C>(qc, kv, forward_of(p), out, lse, buffers);
        mixprec::kernels::attention<C>(qc, kv, forward_of(p), out_without, buffers);
        CHECK(out == out_without);  // the same outputs, bit for bit
        mixprec::kernels::attention_log_sum_exp<C>(qc, kc, validity, p, recomputed);
        for (std::size_t i = 0; i < lse.size(); ++i) {
          INFO("lse " << i << ": " << static_cast<double>(lse[i]) << " against " << ref.lse[i]);
          if (std::isinf(ref.lse[i])) {
            CHECK(lse[i] == -std::numeric_limits<A>::infinity());  // a query that sees no key
            CHECK(recomputed[i] == lse[i]);
          } else {
            CHECK(std::abs(static_cast<double>(lse[i]) - ref.lse[i]) <= tolerance * (1.0 + std::abs(ref.lse[i])));
          }
        }
      }
    }
  }
  // A log_sum_exp of the wrong size is refused before anything is written.
  const attention_backward_problem p = backward_problem_of(true);
  const std::vector<C> qc(p.batch * p.seq * p.n_heads * p.head_dim, C(1.0F));
  const std::vector<C> kc(p.batch * p.seq * p.n_kv_heads * p.head_dim, C(1.0F));
  const kv_source<C> kv(p, kc, kc, backward_validity);
  mixprec::kernels::attention_buffers<A> buffers;
  std::vector<C> out(qc.size());
  std::vector<A> short_lse(3, A(7));
  CHECK_THROWS_WITH(mixprec::kernels::attention<C>(qc, kv, forward_of(p), out, short_lse, buffers),
                    Catch::Contains("kernels::attention: log_sum_exp has 3 elements but [batch, n_heads, seq] = "
                                    "[2, 4, 7] needs 56 (or none)"));
  CHECK(short_lse[0] == A(7));
}

TEST_CASE("kernels::attention_backward and attention_log_sum_exp refuse a bad problem, naming it",
          "[kernels][attention][backward]") {
  // batch 1, seq 2, one head of dimension 3.
  const attention_backward_problem good{
      .batch = 1, .seq = 2, .n_heads = 1, .n_kv_heads = 1, .head_dim = 3, .query_block = 2, .key_block = 2};
  std::vector<float> q(6, 1.0f), k(6, 1.0f), v(6, 1.0f), out(6, 1.0f), d_out(6, 1.0f), lse(2, 0.0f);
  std::vector<float> dq(6, 0.0f), dk(6, 0.0f), dv(6, 0.0f);
  std::vector<std::uint8_t> validity{1, 1};
  const auto backward = [&](const attention_backward_problem& p) {
    mixprec::kernels::attention_backward<float>(
        {.queries = q, .keys = k, .values = v, .out = out, .d_out = d_out, .log_sum_exp = lse, .validity = validity}, p,
        {dq, dk, dv});
  };
  REQUIRE_NOTHROW(backward(good));
  const std::vector<float> dq_good = dq;
  const auto inconsistent = [&](attention_backward_problem p) {
    CHECK_THROWS_WITH(backward(p), Catch::Contains("kernels::attention_backward: the problem is inconsistent") &&
                                       Catch::Contains("n_kv_heads must divide it"));
    CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(q, k, validity, p, lse),
                      Catch::Contains("kernels::attention_log_sum_exp: the problem is inconsistent"));
  };
  attention_backward_problem p = good;
  p.n_kv_heads = 0;
  inconsistent(p);
  p = good;
  p.n_heads = 3;
  p.n_kv_heads = 2;
  inconsistent(p);
  p = good;
  p.n_heads = 0;
  inconsistent(p);
  p = good;
  p.query_block = 0;
  inconsistent(p);
  p = good;
  p.key_block = 0;
  inconsistent(p);
  p = good;
  p.scale = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(backward(p), Catch::Contains("kernels::attention_backward: the problem's scale is not finite"));
  // Sizes: each tensor named with its shape.
  k.resize(5);
  CHECK_THROWS_WITH(backward(good),
                    Catch::Contains("kernels::attention_backward: keys has 5 elements but [batch, keys, n_kv_heads, "
                                    "head_dim] = [1, 2, 1, 3] needs 6"));
  CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(q, k, validity, good, lse),
                    Catch::Contains("kernels::attention_log_sum_exp: keys has 5 elements"));
  k.resize(6, 1.0f);
  lse.resize(3);
  CHECK_THROWS_WITH(backward(good),
                    Catch::Contains("log_sum_exp has 3 elements but [batch, n_heads, seq] = [1, 1, 2] needs 2"));
  CHECK_THROWS_WITH(mixprec::kernels::attention_log_sum_exp<float>(q, k, validity, good, lse),
                    Catch::Contains("lse has 3 elements but [batch, n_heads, seq] = [1, 1, 2] needs 2"));
  lse.resize(2);
  dv.resize(7);
  CHECK_THROWS_WITH(backward(good), Catch::Contains("d_values has 7 elements but [batch, keys, n_kv_heads, head_dim]"));
  dv.resize(6);
  validity.push_back(1);
  CHECK_THROWS_WITH(backward(good), Catch::Contains("validity has 3 elements but [batch, keys] = [1, 2] needs 2"));
  validity.pop_back();
  // A shape whose element count wraps around std::size_t is refused, not read out of bounds.
  p = good;
  p.batch = std::size_t{1} << 33;
  p.seq = std::size_t{1} << 33;
  CHECK_THROWS_WITH(backward(p), Catch::Contains("the shape of queries") &&
                                     Catch::Contains("has more elements than std::size_t counts"));
  // A refused call writes nothing.
  CHECK(dq == dq_good);
}

}  // namespace attention_test
