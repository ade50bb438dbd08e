// Tests of nn/rotary.hpp against hand-computed rotations (cos/sin values of the angles written out
// below, from Python's math module) and against llama2.c's float formula re-typed here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/rotary.hpp"

namespace rotary_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace nn = mixprec::nn;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

namespace {

// cos and sin of the angles used below (Python 3 math.cos / math.sin, correctly rounded doubles).
constexpr double cos1 = 0.5403023058681398, sin1 = 0.8414709848078965;
constexpr double cos001 = 0.9999500004166653, sin001 = 0.009999833334166664;
constexpr double cos3 = -0.9899924966004454, sin3 = 0.1411200080598672;
constexpr double cos003 = 0.9995500337489875, sin003 = 0.02999550020249566;

template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

}  // namespace

TEST_CASE("rotary inverse frequencies are theta^(-2i / head_dim), computed in double", "[nn][rotary]") {
  // head_dim 8, theta 10000 (llama2.c stories260K): 10000^(-i/4) = 1, 0.1, 0.01, 0.001.
  const nn::rotary_embedding rope(8);
  CHECK(rope.inverse_frequency(0) == 1.0);
  CHECK_THAT(rope.inverse_frequency(1), WithinRel(0.1, 1e-15));
  CHECK_THAT(rope.inverse_frequency(2), WithinRel(0.01, 1e-15));
  CHECK_THAT(rope.inverse_frequency(3), WithinRel(0.001, 1e-15));
  // Llama 3's base 500000, head_dim 4: 500000^(-1/2) = 1 / 707.10678118654752.
  const nn::rotary_embedding rope3(4, {.layout = nn::rope_layout::half_split, .theta = 500000.0});
  CHECK_THAT(rope3.inverse_frequency(1), WithinRel(1.0 / 707.10678118654752, 1e-15));
  CHECK(rope3.config().theta == 500000.0);
  CHECK(rope3.head_dim() == 4);
}

TEST_CASE("adjacent-pair RoPE rotates (2i, 2i + 1) of every head by position * frequency", "[nn][rotary]") {
  // head_dim 4: pair 0 = (0, 1) with frequency 1, pair 1 = (2, 3) with frequency 10000^(-1/2) = 0.01.
  const nn::rotary_embedding rope(4, {.layout = nn::rope_layout::adjacent_pairs});
  CHECK(rope.first_of_pair(1) == 2);
  CHECK(rope.second_of_pair(1) == 3);
  std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8};  // two heads
  rope.apply(std::span<double>(x), 1);
  const double tol = 1e-15;
  CHECK_THAT(x[0], WithinAbs(1 * cos1 - 2 * sin1, tol));
  CHECK_THAT(x[1], WithinAbs(1 * sin1 + 2 * cos1, tol));
  CHECK_THAT(x[2], WithinAbs(3 * cos001 - 4 * sin001, tol));
  CHECK_THAT(x[3], WithinAbs(3 * sin001 + 4 * cos001, tol));
  CHECK_THAT(x[4], WithinAbs(5 * cos1 - 6 * sin1, tol));
  CHECK_THAT(x[5], WithinAbs(5 * sin1 + 6 * cos1, tol));
  CHECK_THAT(x[6], WithinAbs(7 * cos001 - 8 * sin001, tol));
  CHECK_THAT(x[7], WithinAbs(7 * sin001 + 8 * cos001, tol));
  // Position 3: angles 3 and 0.03.
  std::vector<double> y{1, 2, 3, 4};
  rope.apply(std::span<double>(y), 3);
  CHECK_THAT(y[0], WithinAbs(1 * cos3 - 2 * sin3, tol));
  CHECK_THAT(y[1], WithinAbs(1 * sin3 + 2 * cos3, tol));
  CHECK_THAT(y[2], WithinAbs(3 * cos003 - 4 * sin003, tol));
  CHECK_THAT(y[3], WithinAbs(3 * sin003 + 4 * cos003, tol));
}

TEST_CASE("half-split RoPE rotates (i, i + head_dim / 2) by position * frequency", "[nn][rotary]") {
  // head_dim 4: pair 0 = (0, 2) with frequency 1, pair 1 = (1, 3) with frequency 0.01 (GPT-NeoX, HF Llama).
  const nn::rotary_embedding rope(4, {.layout = nn::rope_layout::half_split});
  CHECK(rope.first_of_pair(1) == 1);
  CHECK(rope.second_of_pair(1) == 3);
  std::vector<double> x{1, 2, 3, 4};
  rope.apply(std::span<double>(x), 1);
  const double tol = 1e-15;
  CHECK_THAT(x[0], WithinAbs(1 * cos1 - 3 * sin1, tol));
  CHECK_THAT(x[2], WithinAbs(1 * sin1 + 3 * cos1, tol));
  CHECK_THAT(x[1], WithinAbs(2 * cos001 - 4 * sin001, tol));
  CHECK_THAT(x[3], WithinAbs(2 * sin001 + 4 * cos001, tol));
  std::vector<float> y{1, 2, 3, 4};
  rope.apply(std::span<float>(y), 3);
  const double tf = 4 * unit_roundoff<float>() * 7;
  CHECK_THAT(static_cast<double>(y[0]), WithinAbs(1 * cos3 - 3 * sin3, tf));
  CHECK_THAT(static_cast<double>(y[2]), WithinAbs(1 * sin3 + 3 * cos3, tf));
  CHECK_THAT(static_cast<double>(y[1]), WithinAbs(2 * cos003 - 4 * sin003, tf));
  CHECK_THAT(static_cast<double>(y[3]), WithinAbs(2 * sin003 + 4 * cos003, tf));
}

TEMPLATE_TEST_CASE("RoPE at position 0 is the identity, bit for bit", "[nn][rotary]", float, double, bfloat16,
                   float16) {
  for (auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
    const nn::rotary_embedding rope(6, {.layout = layout});
    std::vector<TestType> x;
    for (int i = 0; i < 12; ++i) x.push_back(static_cast<TestType>(0.37f * static_cast<float>(i) - 2.1f));
    const auto before = x;
    rope.apply(std::span<TestType>(x), 0);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(static_cast<double>(x[i]) == static_cast<double>(before[i]));
  }
}

TEMPLATE_TEST_CASE("RoPE of half types runs in float32 and rounds each coordinate once", "[nn][rotary]", bfloat16,
                   float16) {
  // Reference: the rotation of the (exact) half inputs in double. Error: one rounding to T (u_T |ref|),
  // plus float32 opmath: cos/sin rounded to float (u_f each), two products and a sum (3 u_f), relative
  // to |a c| + |b s|.
  const nn::rotary_embedding rope(8, {.layout = nn::rope_layout::half_split});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (std::size_t position : {1u, 17u, 511u, 4095u}) {
    std::vector<TestType> x(16);
    for (auto& v : x) v = static_cast<TestType>(normal(rng));
    std::vector<double> xd(x.begin(), x.end());
    rope.apply(std::span<TestType>(x), position);
    for (std::size_t h = 0; h < 2; ++h) {
      for (std::size_t i = 0; i < 4; ++i) {
        const double angle = static_cast<double>(position) * std::pow(10000.0, -2.0 * static_cast<double>(i) / 8.0);
        const double a = xd[h * 8 + i], b = xd[h * 8 + i + 4];
        const double c = std::cos(angle), s = std::sin(angle);
        const double ra = a * c - b * s, rb = a * s + b * c;
        const double mag = std::abs(a * c) + std::abs(b * s) + std::abs(a * s) + std::abs(b * c);
        const double op = 5 * unit_roundoff<float>() * mag;
        const double tiny = 0.5 * static_cast<double>(std::numeric_limits<TestType>::denorm_min());
        INFO("position " << position << ", head " << h << ", pair " << i);
        CHECK(std::abs(static_cast<double>(x[h * 8 + i]) - ra) <= op + unit_roundoff<TestType>() * std::abs(ra) + tiny);
        CHECK(std::abs(static_cast<double>(x[h * 8 + i + 4]) - rb) <=
              op + unit_roundoff<TestType>() * std::abs(rb) + tiny);
      }
    }
  }
}

TEMPLATE_TEST_CASE("RoPE of half types gives the bits of the float32 rotation rounded once, in every chunk",
                   "[nn][rotary]", bfloat16, float16) {
  // The rotation of each pair written out in float32 (cos and sin computed in double and rounded to
  // float, then a·c − b·s and a·s + b·c, each rounded once to T), against apply: 20 heads of 48 (more
  // than one of the 512-float buffers apply rotates half types in), and one head of 600 (more than a
  // buffer: the element loop).
  for (const auto& [head_dim, heads] : {std::pair<std::size_t, std::size_t>{48, 20}, {600, 1}}) {
    for (const nn::rope_layout layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
      const nn::rotary_embedding rope(head_dim, {.layout = layout});
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<TestType> x(head_dim * heads);
      for (auto& v : x) v = static_cast<TestType>(normal(rng));
      const std::vector<TestType> before = x;
      const std::size_t position = 37;
      rope.apply(std::span<TestType>(x), position);
      std::size_t wrong = 0;
      for (std::size_t h = 0; h < heads; ++h) {
        for (std::size_t i = 0; i < head_dim / 2; ++i) {
          const std::size_t a = layout == nn::rope_layout::adjacent_pairs ? 2 * i : i;
          const std::size_t b = layout == nn::rope_layout::adjacent_pairs ? 2 * i + 1 : i + head_dim / 2;
          const double angle = static_cast<double>(position) * rope.inverse_frequency(i);
          const auto c = static_cast<float>(std::cos(angle));
          const auto s = static_cast<float>(std::sin(angle));
          const auto va = static_cast<float>(before[h * head_dim + a]);
          const auto vb = static_cast<float>(before[h * head_dim + b]);
          wrong += x[h * head_dim + a].bits() != TestType(va * c - vb * s).bits() ? 1 : 0;
          wrong += x[h * head_dim + b].bits() != TestType(va * s + vb * c).bits() ? 1 : 0;
        }
      }
      INFO("head_dim " << head_dim << ", heads " << heads);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("RoPE scores depend only on the difference of positions", "[nn][rotary]") {
  // <R(p) q, R(p') k> = <R(p + s) q, R(p' + s) k>: the property RoFormer is built on.
  for (auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
    const nn::rotary_embedding rope(8, {.layout = layout, .theta = 10000.0});
    std::mt19937 rng(11);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> q(8), k(8);
    for (auto& v : q) v = normal(rng);
    for (auto& v : k) v = normal(rng);
    auto dot_at = [&](std::size_t pq, std::size_t pk) {
      auto a = q, b = k;
      rope.apply(std::span<double>(a), pq);
      rope.apply(std::span<double>(b), pk);
      double d = 0;
      for (std::size_t i = 0; i < 8; ++i) d += a[i] * b[i];
      return d;
    };
    const double d0 = dot_at(7, 3);
    CHECK_THAT(dot_at(107, 103), WithinAbs(d0, 1e-12));
    CHECK_THAT(dot_at(4004, 4000), WithinAbs(d0, 1e-11));
    CHECK(std::abs(dot_at(7, 7) - d0) > 1e-3);  // and it does depend on the difference
  }
}

TEST_CASE("adjacent-pair RoPE agrees with llama2.c's float32 formula", "[nn][rotary]") {
  // llama2.c run.c, for head_size 8: for each even i, head_dim = i % head_size,
  // freq = 1.0f / powf(10000.0f, head_dim / (float)head_size), val = pos * freq,
  // v0' = v0 cosf(val) - v1 sinf(val), v1' = v0 sinf(val) + v1 cosf(val) (all float). Ours computes the
  // angle in double: the two differ by float rounding of the angle (pos * ~2^-24 rad) and the products.
  const std::size_t head_size = 8;
  const nn::rotary_embedding rope(head_size);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int pos : {0, 1, 5, 100, 255}) {
    std::vector<float> ours(16), theirs(16);
    for (std::size_t i = 0; i < 16; ++i) ours[i] = theirs[i] = normal(rng);
    rope.apply(std::span<float>(ours), static_cast<std::size_t>(pos));
    for (std::size_t i = 0; i < 16; i += 2) {
      const std::size_t head_dim = i % head_size;
      const float freq = 1.0f / std::pow(10000.0f, static_cast<float>(head_dim) / static_cast<float>(head_size));
      const float val = static_cast<float>(pos) * freq;
      const float fcr = std::cos(val), fci = std::sin(val);
      const float v0 = theirs[i], v1 = theirs[i + 1];
      theirs[i] = v0 * fcr - v1 * fci;
      theirs[i + 1] = v0 * fci + v1 * fcr;
    }
    for (std::size_t i = 0; i < 16; ++i) {
      INFO("pos " << pos << ", i " << i);
      CHECK_THAT(ours[i], WithinAbs(theirs[i], 1e-5 * (1.0 + static_cast<double>(pos) / 16.0)));
    }
  }
}

TEST_CASE("rotary_embedding rejects odd head dimensions, bad theta and partial heads", "[nn][rotary]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(nn::rotary_embedding(5), Contains("head_dim is 5") && Contains("even"));
  CHECK_THROWS_AS(nn::rotary_embedding(0), std::invalid_argument);
  CHECK_THROWS_WITH(nn::rotary_embedding(4, {.theta = 1.0}), Contains("theta") && Contains("> 1"));
  CHECK_THROWS_AS(nn::rotary_embedding(4, {.theta = std::numeric_limits<double>::quiet_NaN()}), std::invalid_argument);
  const nn::rotary_embedding rope(4);
  std::vector<float> x(6);
  CHECK_THROWS_WITH(rope.apply(std::span<float>(x), 1), Contains("6 elements") && Contains("dimension 4"));
}

TEST_CASE("apply_inverse is the VJP of apply: float64 finite differences, and it undoes apply",
          "[nn][rotary][backward]") {
  for (auto layout : {nn::rope_layout::adjacent_pairs, nn::rope_layout::half_split}) {
    nn::rotary_embedding rope(8, nn::rotary_config{.layout = layout});
    std::vector<double> x(16), w(16);
    for (std::size_t i = 0; i < 16; ++i) {
      x[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
      w[i] = std::cos(1.3 * static_cast<double>(i));
    }
    const std::size_t position = 5;
    // VJP: the gradient of Σ w ⊙ rope(x) with respect to x is apply_inverse(w).
    std::vector<double> vjp = w;
    rope.apply_inverse(std::span<double>(vjp), position);
    for (std::size_t i = 0; i < 16; ++i) {
      auto loss = [&](double h) {
        std::vector<double> xp = x;
        xp[i] += h;
        rope.apply(std::span<double>(xp), position);
        double s = 0;
        for (std::size_t j = 0; j < 16; ++j) s += w[j] * xp[j];
        return s;
      };
      const double fd = (loss(1e-6) - loss(-1e-6)) / 2e-6;
      CHECK(std::abs(vjp[i] - fd) <= 1e-5 + 1e-3 * std::abs(fd));
    }
    std::vector<double> round = x;
    rope.apply(std::span<double>(round), position);
    rope.apply_inverse(std::span<double>(round), position);
    for (std::size_t i = 0; i < 16; ++i) CHECK(std::abs(round[i] - x[i]) <= 4e-16);
  }
}

}  // namespace rotary_test
