// Tests of nn/relative_position_bias.hpp's T5 bucketing, `nn::relative_position_bucket`, against:
// - a reference re-typed here from the published code, Hugging Face transformers'
//   `T5Attention._relative_position_bucket` (src/transformers/models/t5/modeling_t5.py), itself "adapted
//   from Mesh Tensorflow" `_relative_position_bucket` (mesh_tensorflow/transformer/transformer_layers.py).
//   Both compute the log part in float32 (torch `n.float()` / `mtf.to_float(n)`; Python's double
//   `math.log(max_distance / max_exact)` enters as a float32 scalar), which the reference reproduces;
// - buckets worked out by hand from that formula for T5's defaults (32 buckets, max_distance 128), the
//   arithmetic written next to each;
// - a published table: google-research/google-research imp/max/modeling/embeddings_test.py
//   (`PosBiasTest.test_get_relative_position_bucket`), whose `get_relative_position_bucket` is T5's
//   formula plus a float32 epsilon inside the log; none of its entries lies on a bucket boundary, so
//   the epsilon changes none of them.
// And of the layer `nn::relative_position_bias<P>`: its rows against the table looked up bucket by bucket,
// and its table's gradient, through two attention layers that share it as T5's stack does, against
// float64 central differences (tests/support/gradcheck.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/relative_position_bias.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace relative_position_bias_test {

namespace nn = mixprec::nn;

namespace {

// Hugging Face's T5Attention._relative_position_bucket, one scalar at a time (the Python works on a
// tensor of relative positions; `torch.where` picks the small or the large branch per element). Only
// the branch `torch.where` keeps is evaluated here: the other one would take log(0) for position 0.
std::int64_t t5_reference_bucket(std::int64_t relative_position, bool bidirectional, std::int64_t num_buckets,
                                 std::int64_t max_distance) {
  std::int64_t relative_buckets = 0;
  if (bidirectional) {
    num_buckets /= 2;                                            // num_buckets //= 2
    if (relative_position > 0) relative_buckets += num_buckets;  // (relative_position > 0) * num_buckets
    relative_position = relative_position < 0 ? -relative_position : relative_position;  // torch.abs
  } else {
    relative_position = -std::min<std::int64_t>(relative_position, 0);  // -torch.min(rp, zeros_like(rp))
  }
  const std::int64_t max_exact = num_buckets / 2;  // num_buckets // 2
  const bool is_small = relative_position < max_exact;
  if (is_small) return relative_buckets + relative_position;
  // torch.log(relative_position.float() / max_exact): a float32 tensor divided by a Python int (float32).
  const float quotient = static_cast<float>(relative_position) / static_cast<float>(max_exact);
  const float log_quotient = std::log(quotient);
  // / math.log(max_distance / max_exact): Python's true division and log in double, the scalar then
  // taken as float32 by the float32 tensor it divides.
  const auto log_range =
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  // * (num_buckets - max_exact), still float32, then .to(torch.long): truncation toward zero.
  const float scaled = log_quotient / log_range * static_cast<float>(num_buckets - max_exact);
  std::int64_t if_large = max_exact + static_cast<std::int64_t>(scaled);
  if_large = std::min(if_large, num_buckets - 1);  // torch.min(.., full_like(.., num_buckets - 1))
  return relative_buckets + if_large;
}

std::size_t bucket(std::ptrdiff_t relative_position, bool bidirectional, std::size_t num_buckets = 32,
                   std::size_t max_distance = 128) {
  return nn::relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}

struct bucketing {
  std::size_t num_buckets;
  std::size_t max_distance;
};

}  // namespace

TEST_CASE("T5 bidirectional buckets of the default 32 buckets and max_distance 128, worked by hand",
          "[nn][relative_position_bias]") {
  // Bidirectional: 16 buckets a side; keys after the query (relative position > 0) take 16 + their
  // bucket. n = |relative position|, max_exact = 16 / 2 = 8: n < 8 is bucket n; beyond,
  // 8 + floor(ln(n / 8) / ln(128 / 8) * (16 - 8)) = 8 + floor(8 ln(n / 8) / ln 16), at most 15.
  CHECK(bucket(0, true) == 0);    // n = 0 < 8, not after the query
  CHECK(bucket(-1, true) == 1);   // n = 1 < 8
  CHECK(bucket(1, true) == 17);   // 16 + 1
  CHECK(bucket(-7, true) == 7);   // n = 7 < 8
  CHECK(bucket(7, true) == 23);   // 16 + 7
  CHECK(bucket(-8, true) == 8);   // 8 + floor(8 ln 1 / ln 16) = 8 + 0
  CHECK(bucket(8, true) == 24);   // 16 + 8
  CHECK(bucket(-12, true) == 9);  // 8 + floor(8 · 0.405465 / 2.772589 = 1.1699) = 9
  // n = 16: ln 2 / ln 16 = 1/4 exactly, and in float32 too (ln 16 rounded to float32 is 4 times ln 2
  // rounded, a power-of-two scaling), so 8 + floor(8 / 4) = 10.
  CHECK(bucket(-16, true) == 10);
  CHECK(bucket(16, true) == 26);   // 16 + 10
  CHECK(bucket(20, true) == 26);   // 16 + 8 + floor(8 · 0.916291 / 2.772589 = 2.6439) = 16 + 10
  CHECK(bucket(-32, true) == 12);  // 8 + floor(8 · 2 ln 2 / 4 ln 2 = 4) = 12
  // n = 64: ln 8 / ln 16 = 3/4; float32 logf(8) = 2.0794415 is 3 times the float32 ln 2, so exactly 6.
  CHECK(bucket(-64, true) == 14);
  CHECK(bucket(-100, true) == 15);  // 8 + floor(8 · 2.525729 / 2.772589 = 7.2877) = 15
  CHECK(bucket(-127, true) == 15);  // 8 + floor(8 · 2.764746 / 2.772589 = 7.9774) = 15
  CHECK(bucket(-128, true) == 15);  // 8 + 8 = 16, capped at 15
  CHECK(bucket(128, true) == 31);   // 16 + 15
  CHECK(bucket(200, true) == 31);   // 16 + min(8 + floor(8 · 3.218876 / 2.772589 = 9.2877), 15) = 16 + 15
  CHECK(bucket(-200, true) == 15);  // min(17, 15)
  CHECK(bucket(-1000, true) == 15);
  CHECK(bucket(1000, true) == 31);
}

TEST_CASE("T5 unidirectional buckets of the default 32 buckets and max_distance 128, worked by hand",
          "[nn][relative_position_bias]") {
  // Unidirectional (a causal decoder): all 32 buckets for keys at or before the query; keys after it
  // (relative position > 0) are bucket 0. n = max(-relative position, 0), max_exact = 32 / 2 = 16: n < 16
  // is bucket n; beyond, 16 + floor(ln(n / 16) / ln(128 / 16) * (32 - 16)) = 16 + floor(16 ln(n / 16) / ln 8),
  // at most 31.
  CHECK(bucket(0, false) == 0);
  CHECK(bucket(5, false) == 0);  // n = max(-5, 0) = 0
  CHECK(bucket(1000, false) == 0);
  CHECK(bucket(-1, false) == 1);
  CHECK(bucket(-5, false) == 5);
  CHECK(bucket(-15, false) == 15);
  CHECK(bucket(-16, false) == 16);    // 16 + floor(16 ln 1 / ln 8) = 16
  CHECK(bucket(-20, false) == 17);    // 16 + floor(16 · 0.223144 / 2.079442 = 1.7169) = 17
  CHECK(bucket(-32, false) == 21);    // 16 + floor(16 ln 2 / 3 ln 2 = 5.333) = 21
  CHECK(bucket(-64, false) == 26);    // 16 + floor(16 · 2 ln 2 / 3 ln 2 = 10.667) = 26
  CHECK(bucket(-100, false) == 30);   // 16 + floor(16 · 1.832581 / 2.079442 = 14.1006) = 30
  CHECK(bucket(-127, false) == 31);   // 16 + floor(16 · 2.071598 / 2.079442 = 15.940) = 31
  CHECK(bucket(-128, false) == 31);   // 16 + 16 = 32, capped at 31
  CHECK(bucket(-1000, false) == 31);  // 16 + floor(16 · 4.135167 / 2.079442 = 31.82) = 47, capped at 31
}

TEST_CASE("T5 buckets reproduce the published google-research imp table", "[nn][relative_position_bias]") {
  // imp/max/modeling/embeddings_test.py, test_get_relative_position_bucket: the relative positions
  // -10 ... 9 (row by row) and their buckets for six bucketings.
  const auto check_table = [](bool bidirectional, std::size_t num_buckets, std::size_t max_distance,
                              const std::vector<std::size_t>& expected) {
    REQUIRE(expected.size() == 20);
    for (std::ptrdiff_t rp = -10; rp < 10; ++rp) {
      CAPTURE(bidirectional, num_buckets, max_distance, rp);
      CHECK(bucket(rp, bidirectional, num_buckets, max_distance) == expected[static_cast<std::size_t>(rp + 10)]);
    }
  };
  check_table(false, 4, 3, {3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  check_table(false, 8, 10, {7, 7, 7, 6, 5, 4, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  check_table(false, 16, 9, {15, 15, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  check_table(true, 4, 4, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3});
  // An odd num_buckets: 15 // 2 = 7 buckets a side, the positive side offset by 7 (up to 13).
  check_table(true, 15, 4, {6, 6, 6, 6, 6, 6, 6, 3, 2, 1, 0, 8, 9, 10, 13, 13, 13, 13, 13, 13});
  check_table(true, 16, 8, {7, 7, 7, 7, 6, 5, 4, 3, 2, 1, 0, 9, 10, 11, 12, 13, 14, 15, 15, 15});
}

TEST_CASE("T5 buckets match the Hugging Face / mesh-tensorflow float32 formula for every position in [-300, 300]",
          "[nn][relative_position_bias]") {
  const bucketing settings[] = {{32, 128}, {16, 64}, {64, 256}};
  for (const bucketing s : settings) {
    for (const bool bidirectional : {true, false}) {
      std::size_t mismatches = 0;
      for (std::ptrdiff_t rp = -300; rp <= 300; ++rp) {
        const std::int64_t expected = t5_reference_bucket(rp, bidirectional, static_cast<std::int64_t>(s.num_buckets),
                                                          static_cast<std::int64_t>(s.max_distance));
        const std::size_t got = nn::relative_position_bucket(rp, bidirectional, s.num_buckets, s.max_distance);
        if (static_cast<std::int64_t>(got) != expected) {
          ++mismatches;
          CAPTURE(s.num_buckets, s.max_distance, bidirectional, rp, expected, got);
          FAIL_CHECK("bucket differs from the reference");
        }
      }
      CAPTURE(s.num_buckets, s.max_distance, bidirectional);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("T5 buckets take the log part in float32 as both references, where double would pick another bucket",
          "[nn][relative_position_bias]") {
  // Bucketings found by search where the float32 evaluation (float32 quotient, logf, the log range
  // rounded to float32, float32 divide and multiply; logf correctly rounded, checked against the double
  // log rounded to float32) truncates to another integer than the same formula in double.
  // 18 buckets bidirectional: 9 a side, max_exact 4, 5 log buckets over ln(128 / 4) = ln 32. n = 8:
  // 5 ln 2 / ln 32 = 1 exactly; float32 gives 1.0 (bucket 4 + 1), double 0.99999999999999989 (4 + 0).
  CHECK(bucket(-8, true, 18, 128) == 5);
  CHECK(bucket(8, true, 18, 128) == 14);   // 9 + 5
  CHECK(bucket(-16, true, 18, 128) == 6);  // 5 ln 4 / ln 32 = 2: float32 2.0, double 1.9999999999999998
  // 30 buckets bidirectional: 15 a side, max_exact 7, 8 log buckets over ln(636 / 7). n = 206:
  // 8 ln(206 / 7) / ln(636 / 7) = 5.99999948 (double and exact), but float32 rounds it to 6.0: 7 + 6.
  CHECK(bucket(-206, true, 30, 636) == 13);
  CHECK(bucket(206, true, 30, 636) == 28);  // 15 + 13
  // 34 buckets bidirectional: 17 a side, max_exact 8, 9 log buckets over ln(27 / 8) = 3 ln 1.5. n = 12:
  // 9 ln 1.5 / (3 ln 1.5) = 3 exactly (double 3.0), float32 2.99999976: 8 + 2.
  CHECK(bucket(-12, true, 34, 27) == 10);
  CHECK(bucket(-18, true, 34, 27) == 13);  // 9 ln 2.25 / ln 3.375 = 6: float32 5.99999952, 8 + 5
  // 36 buckets unidirectional: max_exact 18, 18 log buckets over ln(32 / 18) = 2 ln(4 / 3). n = 24:
  // 18 ln(4 / 3) / (2 ln(4 / 3)) = 9: float32 9.00000095 (18 + 9), double 8.9999999999999982 (18 + 8).
  CHECK(bucket(-24, false, 36, 32) == 27);

  const bucketing settings[] = {{18, 128}, {30, 636}, {34, 27}, {36, 32}};
  for (const bucketing s : settings) {
    for (const bool bidirectional : {true, false}) {
      for (std::ptrdiff_t rp = -700; rp <= 700; ++rp) {
        const std::int64_t expected = t5_reference_bucket(rp, bidirectional, static_cast<std::int64_t>(s.num_buckets),
                                                          static_cast<std::int64_t>(s.max_distance));
        const std::size_t got = nn::relative_position_bucket(rp, bidirectional, s.num_buckets, s.max_distance);
        if (static_cast<std::int64_t>(got) != expected) {
          CAPTURE(s.num_buckets, s.max_distance, bidirectional, rp, expected, got);
          FAIL_CHECK("bucket differs from the reference");
        }
      }
    }
  }
}

TEST_CASE("T5 buckets stay in range, grow with the distance, and share the last bucket at and beyond max_distance",
          "[nn][relative_position_bias]") {
  const bucketing settings[] = {{32, 128}, {16, 64}, {64, 256}};
  for (const bucketing s : settings) {
    CAPTURE(s.num_buckets, s.max_distance);
    const std::size_t half = s.num_buckets / 2;
    std::size_t previous_before = 0, previous_after = half, previous_causal = 0;
    for (std::ptrdiff_t n = 0; n <= 1000; ++n) {
      CAPTURE(n);
      const std::size_t before = bucket(-n, true, s.num_buckets, s.max_distance);
      const std::size_t after = bucket(n, true, s.num_buckets, s.max_distance);
      const std::size_t causal = bucket(-n, false, s.num_buckets, s.max_distance);
      CHECK(before < half);
      CHECK((n == 0 ? after == 0 : (after >= half && after < s.num_buckets)));
      CHECK(causal < s.num_buckets);
      CHECK(before >= previous_before);
      if (n > 0) CHECK(after >= previous_after);
      CHECK(causal >= previous_causal);
      if (static_cast<std::size_t>(n) >= s.max_distance) {
        CHECK(before == half - 1);
        CHECK(after == s.num_buckets - 1);
        CHECK(causal == s.num_buckets - 1);
      }
      previous_before = before;
      previous_after = n > 0 ? after : half;
      previous_causal = causal;
    }
  }
  // The extremes of std::ptrdiff_t: no overflow of |relative position|, the last bucket of each side.
  constexpr std::ptrdiff_t lowest = std::numeric_limits<std::ptrdiff_t>::min();
  constexpr std::ptrdiff_t highest = std::numeric_limits<std::ptrdiff_t>::max();
  CHECK(bucket(lowest, true) == 15);
  CHECK(bucket(highest, true) == 31);
  CHECK(bucket(lowest, false) == 31);
  CHECK(bucket(highest, false) == 0);
}

TEST_CASE("T5 bucketings that leave no exact range or no log range throw std::invalid_argument",
          "[nn][relative_position_bias]") {
  // Bidirectional: num_buckets // 2 a side, max_exact = that // 2, which must be at least 1.
  CHECK_THROWS_AS(bucket(0, true, 0, 128), std::invalid_argument);
  CHECK_THROWS_AS(bucket(0, true, 2, 128), std::invalid_argument);
  CHECK_THROWS_AS(bucket(0, true, 3, 128), std::invalid_argument);
  CHECK_NOTHROW(bucket(0, true, 4, 128));
  // Unidirectional: max_exact = num_buckets // 2 >= 1.
  CHECK_THROWS_AS(bucket(0, false, 0, 128), std::invalid_argument);
  CHECK_THROWS_AS(bucket(0, false, 1, 128), std::invalid_argument);
  CHECK_NOTHROW(bucket(0, false, 2, 128));
  // max_distance <= max_exact: log(max_distance / max_exact) <= 0, no log range (T5's formula would
  // divide by 0 or by a negative log).
  CHECK_THROWS_AS(bucket(-20, true, 32, 8), std::invalid_argument);  // max_exact = 8
  CHECK_THROWS_AS(bucket(-20, true, 32, 7), std::invalid_argument);
  CHECK_THROWS_AS(bucket(-20, true, 32, 0), std::invalid_argument);
  CHECK_NOTHROW(bucket(-20, true, 32, 9));
  CHECK_THROWS_AS(bucket(-20, false, 32, 16), std::invalid_argument);  // max_exact = 16
  CHECK_THROWS_AS(bucket(-20, false, 32, 15), std::invalid_argument);
  CHECK_NOTHROW(bucket(-20, false, 32, 17));
  // The misconfigurations of the imp test (test_get_realtive_position_bucket_misconfigured).
  for (const std::ptrdiff_t rp : {0, -1, 1}) {
    CHECK_THROWS_AS(bucket(rp, false, 8, 3), std::invalid_argument);
    CHECK_THROWS_AS(bucket(rp, false, 8, 4), std::invalid_argument);
    CHECK_THROWS_AS(bucket(rp, true, 16, 4), std::invalid_argument);
    CHECK_THROWS_AS(bucket(rp, true, 16, 3), std::invalid_argument);
  }
}

TEST_CASE("relative_position_bias rows are the table entries of each distance's bucket, in the compute type",
          "[nn][relative_position_bias]") {
  const nn::relative_position_bias_config cfg{.n_heads = 3, .num_buckets = 8, .max_distance = 12};
  using P = layer_tests::p_c_bf16;  // float32 parameters, bfloat16 compute
  auto layer = nn::relative_position_bias<P>(cfg);
  const auto values = gradcheck::uniform(8 * 3, 5, -3.0, 3.0);
  for (std::size_t i = 0; i < values.size(); ++i) layer.table().data()[i] = static_cast<float>(values[i]);
  const std::size_t keys = 20;
  const std::vector<float> rows = layer.rows<float>(keys);
  REQUIRE(rows.size() == 3 * (2 * keys - 1));
  for (std::size_t h = 0; h < 3; ++h) {
    for (std::ptrdiff_t d = -19; d <= 19; ++d) {
      const std::size_t bucket = nn::relative_position_bucket(d, true, 8, 12);
      const float entry = layer.table()(bucket, h);
      // Rounded once to bfloat16 (the policy's compute type), kept in float32.
      CHECK(rows[h * (2 * keys - 1) + static_cast<std::size_t>(d + 19)] ==
            static_cast<float>(mixprec::bfloat16(entry)));
    }
  }
  CHECK_THROWS_AS(layer.rows<float>(0), std::invalid_argument);
  auto g = layer.zero_gradients();
  std::vector<float> short_rows(5);
  CHECK_THROWS_WITH(layer.backward<float>(keys, short_rows, g), Catch::Contains("[n_heads, 2 keys - 1] = [3, 39]"));
  CHECK_THROWS_WITH(nn::relative_position_bias<P>(cfg, xt::xtensor<float, 2>::from_shape({3, 8})),
                    Catch::Contains("[num_buckets, n_heads] = [8, 3]"));
  CHECK_THROWS_AS(nn::relative_position_bias<P>(nn::relative_position_bias_config{.n_heads = 0}),
                  std::invalid_argument);
}

TEST_CASE("relative_position_bias shared by two attention layers gets the sum of their gradients (finite differences)",
          "[nn][relative_position_bias][backward]") {
  using P = layer_tests::p_f64;
  for (const bool bidirectional : {true, false}) {
    INFO("bidirectional " << bidirectional);
    // T5: unscaled scores, the encoder's bias bidirectional, the decoder's causal; buckets small enough
    // that both the exact and the log range are used by a sequence of 7.
    const nn::attention_config cfg{
        .d_model = 8, .n_heads = 2, .causal = !bidirectional, .scale = 1.0, .query_block = 3, .key_block = 2};
    const nn::relative_position_bias_config bias_cfg{.n_heads = 2,
                                                     .num_buckets = bidirectional ? std::size_t{8} : std::size_t{4},
                                                     .max_distance = 5,
                                                     .bidirectional = bidirectional};
    nn::attention<P> first(cfg), second(cfg);
    gradcheck::fill_parameters(first, 1, -0.7, 0.7);
    gradcheck::fill_parameters(second, 2, -0.7, 0.7);
    nn::relative_position_bias<P> bias(bias_cfg);
    gradcheck::fill_parameters(bias, 3, -1.0, 1.0);
    const std::size_t seq = 7;
    auto x = gradcheck::tensor_from<double, 3>(gradcheck::uniform(2 * seq * 8, 4), {2, seq, 8});
    const auto w = gradcheck::uniform(x.size(), 5);
    const auto bias_of = [](const std::vector<double>& rows) {
      return mixprec::kernels::score_bias<double>::relative(rows, 2);
    };
    const auto loss = [&] {
      const std::vector<double> rows = bias.rows<double>(seq);
      const auto h = first(x, nn::no_key_mask, bias_of(rows));
      return gradcheck::weighted_sum(second(h, nn::no_key_mask, bias_of(rows)), w);
    };
    // Forward and backward through both layers; each adds its d_bias into one d_rows.
    const std::vector<double> rows = bias.rows<double>(seq);
    nn::attention<P>::saved<double> c1, c2;
    const auto h = first.forward(x, nn::no_key_mask, bias_of(rows), c1);
    (void)second.forward(h, nn::no_key_mask, bias_of(rows), c2);
    std::vector<double> d_rows(rows.size(), 0.0);
    auto g1 = first.zero_gradients();
    auto g2 = second.zero_gradients();
    const auto dh =
        second.backward(c2, gradcheck::tensor_from<double, 3>(w, {2, seq, 8}), g2, std::span<double>(d_rows));
    (void)first.backward(c1, dh, g1, std::span<double>(d_rows));
    auto g = bias.zero_gradients();
    bias.backward<double>(seq, d_rows, g);
    gradcheck::require_close("embedding", gradcheck::flat_values(g.embedding),
                             gradcheck::numeric_gradient(bias.table().data(), bias.table().size(), loss));
    // Buckets that no distance of 7 keys reaches get exactly zero.
    if (!bidirectional) {
      for (std::size_t h2 = 0; h2 < 2; ++h2) CHECK(g.embedding(0, h2) != 0.0);
    }
  }
}

}  // namespace relative_position_bias_test
