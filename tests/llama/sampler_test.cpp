// sampler.hpp against run.c's sampling rules (karpathy/llama2.c run.c: random_u32, random_f32, softmax,
// sample_argmax, sample_mult, sample_topp, sample).
//
// Reference values: the xorshift* outputs for seed 1 were computed with Python big integers from the
// generator's definition (Vigna's xorshift64*, shifts 12/25/27, multiplier 0x2545F4914F6CDD1D, high 32 bits);
// the token sequences were produced by run.c's own sampling functions (random_u32, random_f32, softmax,
// sample_argmax, sample_mult, compare, sample_topp and the body of sample, transcribed unchanged into a scratch
// C program outside the repository, built with gcc 12 at -O0 and -O2, same output) on the logits defined by
// `test_logits` below. None of these values comes from the code under test.
#include "llama/sampler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

namespace {

using Catch::Matchers::Contains;

// 64 distinct logits in [-5, 5]: ((37 i) mod 101) / 10 - 5, maximal (5.0) at i = 30.
std::vector<float> test_logits() {
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[static_cast<std::size_t>(i)] = static_cast<float>((i * 37) % 101) / 10.0f - 5.0f;
  return logits;
}

std::vector<int> draws(float temperature, float topp, std::uint64_t seed, std::uint64_t& final_state) {
  llama2c::sampler s(temperature, topp, seed);
  const std::vector<float> logits = test_logits();
  std::vector<int> out;
  for (int i = 0; i < 20; ++i) out.push_back(s.sample(logits));
  final_state = s.rng().state();
  return out;
}

}  // namespace

TEST_CASE("xorshift_rng produces run.c's random_u32 and random_f32 sequences", "[llama][sampler]") {
  llama2c::xorshift_rng one(1);
  for (const std::uint32_t expected : {1206177355u, 2882512552u, 3117485455u, 1303648416u, 241277360u}) {
    CHECK(one.next_u32() == expected);
  }
  llama2c::xorshift_rng a(42);
  for (const std::uint32_t expected : {1456360119u, 3359763283u, 3393612768u, 4054632243u, 3283045847u}) {
    CHECK(a.next_u32() == expected);
  }
  // random_f32 = (random_u32 >> 8) / 2^24: exact, so the same draws give these floats exactly.
  llama2c::xorshift_rng b(42);
  for (const std::uint32_t u : {1456360119u, 3359763283u, 3393612768u, 4054632243u, 3283045847u}) {
    const float f = b.next_f32();
    CHECK(f == static_cast<float>(std::ldexp(static_cast<double>(u >> 8), -24)));
    CHECK(f >= 0.0f);
    CHECK(f < 1.0f);
  }
  CHECK_THROWS_AS(llama2c::xorshift_rng(0), std::invalid_argument);
  CHECK_THROWS_WITH(llama2c::xorshift_rng(0), Contains("seed 0") && Contains("non-zero seed"));
}

TEST_CASE("a seed gives the same tokens as run.c's sampler for the same logits", "[llama][sampler]") {
  std::uint64_t state = 0;
  SECTION("temperature 1, top-p 0.9 (run.c's defaults), seed 42") {
    CHECK(draws(1.0f, 0.9f, 42, state) ==
          std::vector<int>{19, 57, 57, 24, 57, 16, 60, 49, 19, 38, 49, 19, 46, 60, 30, 38, 19, 19, 13, 19});
    CHECK(state == 8732068698753013883ull);
  }
  SECTION("temperature 0.8, top-p 1 (plain multinomial), seed 1337") {
    CHECK(draws(0.8f, 1.0f, 1337, state) ==
          std::vector<int>{19, 19, 27, 60, 49, 27, 21, 30, 30, 46, 30, 30, 49, 30, 19, 27, 19, 57, 19, 60});
    CHECK(state == 1143591747317312021ull);
  }
  SECTION("temperature 1.5, top-p 0.5, seed 7") {
    CHECK(draws(1.5f, 0.5f, 7, state) ==
          std::vector<int>{38, 27, 30, 30, 19, 19, 38, 30, 19, 38, 8, 8, 49, 38, 30, 60, 27, 38, 19, 8});
    CHECK(state == 1586496945815482766ull);
  }
  SECTION("temperature 1, top-p 0 (plain multinomial), seed 2024") {
    CHECK(draws(1.0f, 0.0f, 2024, state) ==
          std::vector<int>{60, 8, 16, 19, 60, 24, 8, 60, 51, 60, 30, 30, 8, 38, 19, 38, 19, 49, 27, 19});
    CHECK(state == 3623140615414039370ull);
  }
  SECTION("temperature 0 is greedy and draws no random numbers") {
    CHECK(draws(0.0f, 0.9f, 5, state) == std::vector<int>(20, 30));
    CHECK(state == 5);
  }
}

TEST_CASE("sample_argmax returns the lowest index among equal maxima and rejects NaN", "[llama][sampler]") {
  CHECK(llama2c::sample_argmax(std::vector<float>{1, 3, 2}) == 1);
  CHECK(llama2c::sample_argmax(std::vector<float>{-4, -1, -1, -2}) == 1);
  CHECK(llama2c::sample_argmax(std::vector<float>{7, 7, 7}) == 0);
  CHECK(llama2c::sample_argmax(std::vector<float>{0, std::numeric_limits<float>::infinity(), 5}) == 1);
  CHECK_THROWS_AS(llama2c::sample_argmax(std::vector<float>{}), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sample_argmax(std::vector<float>{1, std::nanf(""), 2}), std::domain_error);
  CHECK_THROWS_WITH(llama2c::sample_argmax(std::vector<float>{1, std::nanf(""), 2}), Contains("value 1 is NaN"));
}

TEST_CASE("softmax matches a float64 softmax and sums to one", "[llama][sampler]") {
  std::vector<float> x = test_logits();
  const std::vector<float> logits = x;
  llama2c::softmax(x);
  double max_logit = -1e300;
  for (const float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
  double denominator = 0;
  for (const float l : logits) denominator += std::exp(static_cast<double>(l) - max_logit);
  double total = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double reference = std::exp(static_cast<double>(logits[i]) - max_logit) / denominator;
    CHECK(static_cast<double>(x[i]) == Approx(reference).epsilon(1e-5));
    total += x[i];
  }
  CHECK(total == Approx(1.0).epsilon(1e-6));
  std::vector<float> huge{1000.0f, 1000.0f};  // max subtraction: no overflow
  llama2c::softmax(huge);
  CHECK(huge[0] == 0.5f);
  CHECK(huge[1] == 0.5f);
}

TEST_CASE("sample_mult picks the first index whose running sum exceeds the coin", "[llama][sampler]") {
  const std::vector<float> p{0.25f, 0.25f, 0.5f};
  CHECK(llama2c::sample_mult(p, 0.0f) == 0);
  CHECK(llama2c::sample_mult(p, 0.2499f) == 0);
  CHECK(llama2c::sample_mult(p, 0.25f) == 1);  // strict: coin < cdf
  CHECK(llama2c::sample_mult(p, 0.5f) == 2);
  CHECK(llama2c::sample_mult(p, 0.9999f) == 2);
  CHECK(llama2c::sample_mult(std::vector<float>{0.1f, 0.1f, 0.1f}, 0.9f) == 2);  // total < coin: last index
  CHECK(llama2c::sample_mult(std::vector<float>{0.0f, 1.0f, 0.0f}, 0.0f) == 1);
  CHECK_THROWS_AS(llama2c::sample_mult(std::vector<float>{}, 0.5f), std::invalid_argument);
}

TEST_CASE("sample_topp draws from the smallest sorted prefix whose mass exceeds topp", "[llama][sampler]") {
  // sorted: 0.5 (index 2), 0.3 (index 1), 0.15 (index 3), 0.05 (index 0); topp 0.7 keeps {2, 1}, mass 0.8
  const std::vector<float> p{0.05f, 0.3f, 0.5f, 0.15f};
  CHECK(llama2c::sample_topp(p, 0.7f, 0.0f) == 2);
  CHECK(llama2c::sample_topp(p, 0.7f, 0.6f) == 2);    // r = 0.48 < 0.5
  CHECK(llama2c::sample_topp(p, 0.7f, 0.65f) == 1);   // r = 0.52
  CHECK(llama2c::sample_topp(p, 0.7f, 0.999f) == 1);  // never 3 or 0
  CHECK(llama2c::sample_topp(p, 0.4f, 0.999f) == 2);  // 0.5 alone exceeds 0.4
  CHECK(llama2c::sample_topp(p, 0.9f, 0.999f) == 3);  // keeps {2, 1, 3}: 0.95
  CHECK(llama2c::sample_topp(std::vector<float>{1.0f}, 0.9f, 0.5f) == 0);
  // tiny topp with a flat distribution: run.c's candidate list would be empty (probindex[-1]); we use all
  CHECK(llama2c::sample_topp(std::vector<float>{0.5f, 0.5f}, 0.01f, 0.9f) == 0);
  CHECK_THROWS_AS(llama2c::sample_topp(p, 0.0f, 0.5f), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sample_topp(p, 1.0f, 0.5f), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sample_topp(std::vector<float>{}, 0.5f, 0.5f), std::invalid_argument);
  CHECK_THROWS_WITH(llama2c::sample_topp(std::vector<float>{0.5f, std::nanf(""), 0.5f}, 0.5f, 0.5f),
                    "llama2c::sample_topp: a probability is NaN");
  // Ties keep index order, as a stable sort does (two equal probabilities ahead of a smaller one).
  CHECK(llama2c::sample_topp(std::vector<float>{0.1f, 0.45f, 0.45f}, 0.5f, 0.0f) == 1);
  CHECK(llama2c::sample_topp(std::vector<float>{0.1f, 0.45f, 0.45f}, 0.5f, 0.99f) == 2);
  // The reused candidate list gives the same draws.
  std::vector<llama2c::prob_index> kept(7, llama2c::prob_index{9.0f, 9});
  CHECK(llama2c::sample_topp(p, 0.7f, 0.65f, kept) == 1);
  CHECK(llama2c::sample_topp(p, 0.9f, 0.999f, kept) == 3);
}

TEST_CASE("sampler draws tokens with the softmax probabilities", "[llama][sampler]") {
  // logits log(0.1), log(0.2), log(0.7) at temperature 1: 30000 draws land within 1% of each probability.
  const std::vector<float> logits{std::log(0.1f), std::log(0.2f), std::log(0.7f)};
  llama2c::sampler s(1.0f, 1.0f, 20240601);
  std::array<int, 3> counts{};
  constexpr int n = 30000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<std::size_t>(s.sample(logits))];
  CHECK(counts[0] / double(n) == Approx(0.1).margin(0.01));
  CHECK(counts[1] / double(n) == Approx(0.2).margin(0.01));
  CHECK(counts[2] / double(n) == Approx(0.7).margin(0.01));
}

TEST_CASE("sampler rejects bad parameters and non-finite logits", "[llama][sampler]") {
  CHECK_THROWS_WITH(llama2c::sampler(-0.5f, 0.9f, 1), Contains("temperature must be finite and >= 0"));
  CHECK_THROWS_AS(llama2c::sampler(std::nanf(""), 0.9f, 1), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sampler(std::numeric_limits<float>::infinity(), 0.9f, 1), std::invalid_argument);
  CHECK_THROWS_WITH(llama2c::sampler(1.0f, 1.5f, 1), Contains("topp must be in [0, 1]"));
  CHECK_THROWS_AS(llama2c::sampler(1.0f, -0.1f, 1), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sampler(1.0f, std::nanf(""), 1), std::invalid_argument);
  CHECK_THROWS_AS(llama2c::sampler(1.0f, 0.9f, 0), std::invalid_argument);

  llama2c::sampler s(1.0f, 0.9f, 1);
  CHECK_THROWS_AS(s.sample(std::vector<float>{}), std::invalid_argument);
  CHECK_THROWS_WITH(s.sample(std::vector<float>{0.0f, std::nanf("")}), Contains("logit 1"));
  CHECK_THROWS_AS(s.sample(std::vector<float>{0.0f, std::numeric_limits<float>::infinity()}), std::domain_error);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(s.sample(std::vector<float>{minus_inf, minus_inf}), Contains("every logit is -inf"));
  CHECK(s.sample(std::vector<float>{minus_inf, 0.0f, minus_inf}) == 1);  // a masked logit has probability 0
  // a tiny temperature overflows logit / temperature
  llama2c::sampler cold(1e-38f, 0.0f, 1);
  CHECK_THROWS_WITH(cold.sample(std::vector<float>{1000.0f, 0.0f}), Contains("logit 0 / temperature is inf"));
}
