// Test support for the backward passes: float64 central finite differences (TRAINING.md §5, PyTorch's
// torch.autograd.gradcheck: eps 1e-6, allclose with atol 1e-5, rtol 1e-3) and random test data.
// Written independently of the layers: it only perturbs numbers and calls the forward pass.
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace gradcheck {

/// PyTorch gradcheck's defaults.
inline constexpr double eps = 1e-6;
inline constexpr double atol = 1e-5;
inline constexpr double rtol = 1e-3;

/// The central difference (L(v + eps) - L(v - eps)) / 2 eps of `loss()` with respect to each of the
/// `n` doubles at `data` (restored afterwards).
template <class Loss>
std::vector<double> numeric_gradient(double* data, std::size_t n, Loss&& loss, double h = eps) {
  std::vector<double> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = data[i];
    data[i] = v + h;
    const double lp = loss();
    data[i] = v - h;
    const double lm = loss();
    data[i] = v;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

/// Requires |analytic - numeric| <= atol + rtol |numeric| element by element (PyTorch's allclose),
/// reporting the first offending element.
template <class A>
void require_close(const std::string& what, std::span<const A> analytic, const std::vector<double>& numeric,
                   double abs_tol = atol, double rel_tol = rtol) {
  REQUIRE(analytic.size() == numeric.size());
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double a = static_cast<double>(analytic[i]);
    if (!(std::abs(a - numeric[i]) <= abs_tol + rel_tol * std::abs(numeric[i]))) {
      INFO(what << "[" << i << "]: analytic " << a << " vs finite difference " << numeric[i]);
      CHECK(false);
      return;
    }
  }
  SUCCEED(what << ": " << numeric.size() << " elements within gradcheck tolerance");
}

/// Σ w ⊙ y in double: the scalar loss whose gradient with respect to y is the cotangent w.
template <class Y>
double weighted_sum(const Y& y, const std::vector<double>& w) {
  double s = 0;
  for (std::size_t i = 0; i < w.size(); ++i) s += w[i] * static_cast<double>(y.data()[i]);
  return s;
}

/// `n` values uniform in [lo, hi) from a fixed-seed engine.
inline std::vector<double> uniform(std::size_t n, unsigned seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// ‖a − b‖₂ / ‖b‖₂ in double.
template <class A, class B>
double relative_l2(std::span<const A> a, std::span<const B> b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace gradcheck
