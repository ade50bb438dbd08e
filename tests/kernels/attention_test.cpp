// Tests of kernels::attention (kernels/attention.hpp) called directly, without nn::attention: the
// result of a small problem against a float64 softmax written here, and the errors for a problem that
// is inconsistent (nn validates its own problems; a direct caller gets an exception, never a hang or
// an out-of-bounds read). The tiled paths themselves are tested through nn::attention
// (tests/nn/attention_test.cpp) at every SIMD level.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/kernels/attention.hpp"

namespace attention_test {

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
                          Catch::Contains("seq <= keys <= capacity"));
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
  // seq > keys: one query more than the source holds (queries and out sized for it).
  const std::vector<float> q3(6, 1.0f);
  std::vector<float> out3(6);
  p = problem_of(3, 2);
  CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q3, kv, p, out3, scratch), Catch::Contains("seq 3, keys 2"));
  // The shape check keeps the message nn's callers see.
  std::vector<float> short_out(1);
  CHECK_THROWS_WITH(mixprec::kernels::attention<float>(q, kv, problem_of(1, 2), short_out, scratch),
                    Catch::Contains("scaled_dot_product_attention: queries have 2 and out 1 elements"));
}

}  // namespace attention_test
