// Tests of mixprec/train/clip.hpp against PyTorch's clip_grad_norm_ rule (torch/nn/utils/clip_grad.py,
// norm_type 2): norm = sqrt(sum g^2) over all gradients, scale = min(1, max_norm / (norm + 1e-6)).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/train/clip.hpp"

namespace clip_test {

using Catch::Matchers::WithinRel;
using mixprec::bfloat16;

TEST_CASE("the global norm spans every gradient and every type", "[clip]") {
  // 3-4-12-84 chain: sqrt(9 + 16) = 5, sqrt(25 + 144) = 13, sqrt(169 + 7056) = 85.
  std::vector<float> a = {3.0f, 4.0f};
  xt::xtensor<bfloat16, 2> b = {{bfloat16(12.0f)}};
  std::vector<double> c = {84.0};
  CHECK(mixprec::train::global_grad_norm(std::span<float>(a), b, c) == 85.0);
}

TEST_CASE("the sum of squares: eight partial sums in the stream's order, within its error bound", "[clip]") {
  // Order: 11 values; element i into partial i mod 8, the partials added pairwise. Written out here.
  const std::vector<double> x = {1e8, 1.0, 3.0, -2.5, 7.0, 1e-3, 0.5, 2.0, -1e8, 4.0, 0.25};
  mixprec::detail::sum_of_squares s;
  for (const double v : x) s.add(v);
  double p[8];
  for (int k = 0; k < 8; ++k) p[k] = x[static_cast<std::size_t>(k)] * x[static_cast<std::size_t>(k)];
  for (int k = 0; k < 3; ++k) p[k] += x[static_cast<std::size_t>(8 + k)] * x[static_cast<std::size_t>(8 + k)];
  CHECK(s.total() == ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])));
  // Accuracy: 100,003 values against a long double sum; within the bound (n/8 + 3)·2⁻⁵³ of the sum.
  mixprec::detail::sum_of_squares big;
  long double reference = 0;
  const std::size_t n = 100'003;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = std::sin(0.001 * static_cast<double>(i) * static_cast<double>(i % 97)) * 3.7;
    big.add(v);
    reference += static_cast<long double>(v) * v;
  }
  // The bound, plus the reference's own error (n additions with 64-bit significands, x86's long double).
  const double bound =
      (static_cast<double>(n) / 8 + 3) * std::ldexp(1.0, -53) + static_cast<double>(n) * std::ldexp(1.0, -64);
  CHECK(std::abs(big.total() - static_cast<double>(reference)) <= bound * static_cast<double>(reference));
}

TEST_CASE("clipping scales by max_norm / (norm + 1e-6) only above max_norm", "[clip]") {
  std::vector<float> a = {3.0f, 4.0f};
  std::vector<double> b = {0.0, 0.0};
  const double norm = mixprec::train::clip_grad_norm(1.0, std::span<float>(a), b);
  CHECK(norm == 5.0);
  const double scale = 1.0 / (5.0 + 1e-6);
  CHECK(a[0] == static_cast<float>(3.0f * static_cast<float>(scale)));
  CHECK(a[1] == static_cast<float>(4.0f * static_cast<float>(scale)));
  CHECK_THAT(std::hypot(static_cast<double>(a[0]), static_cast<double>(a[1])), WithinRel(1.0, 1e-6));

  std::vector<float> small = {0.3f, 0.4f};  // norm 0.5 < 1: untouched
  CHECK_THAT(mixprec::train::clip_grad_norm(1.0, small), WithinRel(0.5, 1e-7));
  CHECK(small[0] == 0.3f);
  CHECK(small[1] == 0.4f);

  xt::xtensor<bfloat16, 1> h = {bfloat16(6.0f), bfloat16(8.0f)};  // norm 10 -> 2
  CHECK(mixprec::train::clip_grad_norm(2.0, h) == 10.0);
  CHECK(h(0).bits() == bfloat16(6.0f * static_cast<float>(2.0 / (10.0 + 1e-6))).bits());
}

TEST_CASE("a non-finite norm: NaN spreads by default, or an error when asked", "[clip]") {
  std::vector<float> g = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_AS(mixprec::train::clip_grad_norm({.max_norm = 1.0, .error_if_nonfinite = true}, g), std::runtime_error);
  CHECK(g[0] == 1.0f);  // untouched
  CHECK(std::isnan(mixprec::train::clip_grad_norm(1.0, g)));
  CHECK(std::isnan(g[0]));  // PyTorch multiplies by the NaN scale as well
  std::vector<float> inf = {2.0f, std::numeric_limits<float>::infinity()};
  CHECK(std::isinf(mixprec::train::clip_grad_norm(1.0, inf)));
  CHECK(inf[0] == 0.0f);  // scale 1 / (inf + 1e-6) = 0
}

TEST_CASE("a vector of spans (a model's gradient tensors) is clipped as one global norm", "[clip]") {
  // 3-4-12 chain: sqrt(9 + 16 + 144) = 13.
  std::vector<float> a = {3.0f, 4.0f};
  std::vector<float> b = {12.0f};
  std::vector<std::span<float>> grads = {std::span<float>(a), std::span<float>(b)};
  CHECK(mixprec::train::global_grad_norm(grads) == 13.0);
  CHECK(mixprec::train::clip_grad_norm(1.0, grads) == 13.0);
  const float scale = static_cast<float>(1.0 / (13.0 + 1e-6));
  CHECK(a[0] == 3.0f * scale);
  CHECK(b[0] == 12.0f * scale);
}

}  // namespace clip_test
