// Tests of nn::softmax_cross_entropy and nn::cross_entropy_loss (nn/cross_entropy.hpp) against a
// long-double reference written here and float64 central differences of the loss; stability at ±1e4;
// ignore_index; the seed; errors.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/nn/cross_entropy.hpp"
#include "support/gradcheck.hpp"

namespace cross_entropy_test {

namespace nn = mixprec::nn;

namespace {

/// Mean of −log softmax(z)_t over non-ignored rows, in long double.
long double reference_loss(const std::vector<double>& z, std::size_t vocab, const std::vector<std::int32_t>& t) {
  long double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == nn::ignore_index) continue;
    long double m = -INFINITY;
    for (std::size_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<long double>(z[i * vocab + j]));
    long double s = 0;
    for (std::size_t j = 0; j < vocab; ++j) s += std::exp(static_cast<long double>(z[i * vocab + j]) - m);
    sum += m + std::log(s) - static_cast<long double>(z[i * vocab + static_cast<std::size_t>(t[i])]);
    ++n;
  }
  return sum / static_cast<long double>(n);
}

}  // namespace

TEST_CASE("softmax_cross_entropy: loss against a long-double reference, dlogits against finite differences",
          "[nn][cross_entropy]") {
  const std::size_t vocab = 7, rows = 4;
  auto z = gradcheck::uniform(rows * vocab, 100, -3.0, 3.0);
  const std::vector<std::int32_t> t = {3, nn::ignore_index, 0, 6};
  std::vector<double> dz(z.size());
  const double loss = nn::softmax_cross_entropy<double>(z, vocab, t, dz, 1.0 / 3.0);
  CHECK(loss == Approx(static_cast<double>(reference_loss(z, vocab, t))).epsilon(1e-14));
  CHECK(nn::cross_entropy_loss<double>(z, vocab, t) == loss);
  auto f = [&] { return nn::cross_entropy_loss<double>(z, vocab, t); };
  // seed 1/3 = 1/N for the 3 non-ignored rows: dlogits is exactly d(mean loss)/dz.
  gradcheck::require_close("dlogits", std::span<const double>(dz), gradcheck::numeric_gradient(z.data(), z.size(), f));
  for (std::size_t j = 0; j < vocab; ++j) CHECK(dz[1 * vocab + j] == 0.0);  // ignored row
  for (std::size_t i : {0u, 2u, 3u}) {
    double s = 0;
    for (std::size_t j = 0; j < vocab; ++j) s += dz[i * vocab + j];
    CHECK(std::abs(s) <= 1e-15);
  }
}

TEST_CASE("softmax_cross_entropy scales its gradient by the seed (a loss scale) and not its loss",
          "[nn][cross_entropy]") {
  const std::vector<float> z = {0.5f, -1.0f, 2.0f, 0.0f};
  const std::vector<std::int32_t> t = {1, 0};
  std::vector<float> d1(4), d2(4);
  const double l1 = nn::softmax_cross_entropy<float>(z, 2, t, d1, 0.5);
  const double l2 = nn::softmax_cross_entropy<float>(z, 2, t, d2, 0.5 * 1024.0);
  CHECK(l1 == l2);
  for (std::size_t i = 0; i < 4; ++i) CHECK(d2[i] == d1[i] * 1024.0f);  // a power of two: exact
}

TEST_CASE("softmax_cross_entropy is finite for logits of ±1e4 in float32", "[nn][cross_entropy]") {
  const std::vector<float> z = {1e4f, -1e4f, 0.0f, -1e4f, 1e4f, 1e4f};
  const std::vector<std::int32_t> t = {1, 2};
  std::vector<float> dz(6);
  const double loss = nn::softmax_cross_entropy<float>(z, 3, t, dz, 0.5);
  // Row 0 (target −1e4 against a maximum of 1e4): 2e4; row 1 (target one of two equal maxima): log 2.
  CHECK(loss == Approx((2e4 + std::log(2.0)) / 2).epsilon(1e-6));
  for (float v : dz) CHECK(std::isfinite(v));
}

TEST_CASE("softmax_cross_entropy with every row ignored is NaN, as PyTorch's mean", "[nn][cross_entropy]") {
  const std::vector<double> z = {1.0, 2.0};
  const std::vector<std::int32_t> t = {nn::ignore_index};
  std::vector<double> dz(2, 7.0);
  CHECK(std::isnan(nn::softmax_cross_entropy<double>(z, 2, t, dz, 1.0)));
  CHECK(dz[0] == 0.0);
  CHECK(dz[1] == 0.0);
}

TEST_CASE("softmax_cross_entropy rejects sizes and targets that do not fit", "[nn][cross_entropy]") {
  const std::vector<double> z(6, 0.0);
  std::vector<double> dz(6);
  CHECK_THROWS_WITH(nn::softmax_cross_entropy<double>(z, 3, std::vector<std::int32_t>{0, 3}, dz, 1.0),
                    Catch::Contains("target 3 of row 1"));
  CHECK_THROWS_WITH(nn::softmax_cross_entropy<double>(z, 3, std::vector<std::int32_t>{-1, 0}, dz, 1.0),
                    Catch::Contains("target -1 of row 0"));
  CHECK_THROWS_WITH(nn::cross_entropy_loss<double>(z, 4, std::vector<std::int32_t>{0, 0}),
                    Catch::Contains("do not make 2 rows of 4"));
  std::vector<double> small(5);
  CHECK_THROWS_WITH(nn::softmax_cross_entropy<double>(z, 3, std::vector<std::int32_t>{0, 0}, small, 1.0),
                    Catch::Contains("dlogits has 5"));
}

}  // namespace cross_entropy_test
