// mixprec scaled tensors: a float8_e4m3fn matrix product under each scale rule, against float64.
// Prints the markdown table of docs/scaled.md ("A scaled float8 matmul on random data").
//
// The operands are small, as activations and weights are (Gaussian, sigma 1e-3 and 0.02): cast to
// e4m3fn without a scale, most of them fall below its smallest subnormal (2^-9) and vanish. Each rule is
// run on fresh operands (quantised from measured scales) and on stale ones (the same data carried under
// a worst-case bound 4096 times too large, as after a chain of worst-case ops; the expected scale is kept).
#include <mixprec/mixprec.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <random>
#include <vector>

using namespace mixprec;

namespace {

xt::xarray<double> gaussian(std::size_t rows, std::size_t cols, double sigma, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  xt::xarray<double> x = xt::xarray<double>::from_shape({rows, cols});
  for (auto& v : x) v = normal(rng);
  return x;
}

std::vector<double> reference_matmul(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::vector<double> y(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < n; ++j) y[i * n + j] += a(i, p) * b(p, j);
  return y;
}

// ||y - ref|| / ||ref||, Frobenius.
template <class Value>
double relative_error(const std::vector<double>& ref, Value value) {
  double err = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = value(i) - ref[i];
    err += d * d;
    norm += ref[i] * ref[i];
  }
  return std::sqrt(err / norm);
}

}  // namespace

int main() {
  constexpr std::size_t m = 64, n = 64;
  std::printf("| K | operands | unscaled e4m3fn | worst_case | average_case | hybrid | hybrid requantised |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const std::size_t k : {64, 1024, 4096}) {
    const xt::xarray<double> x = gaussian(m, k, 1e-3, 1 + k), w = gaussian(k, n, 0.02, 2 + k);
    const std::vector<double> ref = reference_matmul(x, w);
    // Unscaled: each operand rounded to e4m3fn as it is, the product summed in double.
    xt::xarray<double> xc = x, wc = w;
    for (auto& v : xc) v = static_cast<float>(saturate_cast<float8_e4m3fn>(v));
    for (auto& v : wc) v = static_cast<float>(saturate_cast<float8_e4m3fn>(v));
    const std::vector<double> unscaled = reference_matmul(xc, wc);
    const double unscaled_error = relative_error(ref, [&](std::size_t i) { return unscaled[i]; });
    for (const bool stale : {false, true}) {
      std::printf("| %zu | %s | %.3g |", k, stale ? "stale (bound x4096)" : "fresh", unscaled_error);
      const char* requantised = "no";
      for (const auto rule : {scale_rule::worst_case, scale_rule::average_case, scale_rule::hybrid}) {
        auto a = quantise<float8_e4m3fn>(x, {.rule = rule});
        auto b = quantise<float8_e4m3fn>(w, {.rule = rule});
        if (stale) {
          a = with_scale({a.scale() * 4096.0, a.expected_scale()}, a);
          b = with_scale({b.scale() * 4096.0, b.expected_scale()}, b);
        }
        const auto y = scaled::matmul(a, b);
        if (rule == scale_rule::hybrid) {
          // Did the hybrid rule requantise? Its result's bound is then below the stale prediction.
          requantised = y.scale() < matmul_scales(a.estimate(), b.estimate(), k).scale ? "yes" : "no";
        }
        std::printf(" %.3g |", relative_error(ref, [&](std::size_t i) { return y.value(i); }));
      }
      std::printf(" %s |\n", requantised);
    }
  }
  return 0;
}
