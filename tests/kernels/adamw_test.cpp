// kernels::adamw_update against a reference written here from PyTorch's AdamW formula, each float32
// operation done in float64 and rounded to float (for +, -, ×, ÷ and √ of floats that is the IEEE
// float result: 53 >= 2 · 24 + 2 bits), on every instruction-set level and thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/adamw.hpp"
#include "mixprec/kernels/threads.hpp"

namespace adamw_test {

namespace {

using mixprec::kernels::adamw_coefficients;

/// The levels this CPU runs, portable first.
std::vector<mixprec::isa> levels() {
  std::vector<mixprec::isa> out;
  for (const mixprec::isa level : {mixprec::isa::portable, mixprec::isa::avx2, mixprec::isa::avx512}) {
    if (level <= mixprec::detected_isa()) out.push_back(level);
  }
  return out;
}

/// x rounded to float and back.
double f(double x) { return static_cast<double>(static_cast<float>(x)); }

struct state {
  std::vector<float> theta, grad, m, v;
};

/// One AdamW element in float32 arithmetic, each operation in float64 rounded to float (PyTorch's
/// order: `exp_avg.lerp_(grad, w1)`, `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, w2)`,
/// `denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps`, `param.mul_(decay).addcdiv_(exp_avg, denom,
/// value=-step_size)`).
void reference_step(float& theta, float g, float& m, float& v, const adamw_coefficients<float>& c) {
  const double gd = g, md = m, vd = v;
  const double m1 = std::abs(c.w1) < 0.5F ? f(md + f(c.w1 * f(gd - md))) : f(gd - f(f(gd - md) * f(1.0 - c.w1)));
  const double v1 = f(f(vd * c.beta2) + f(f(c.w2 * gd) * gd));
  const double denom = f(f(f(std::sqrt(v1)) / c.bias_correction2_sqrt) + c.eps);
  theta = static_cast<float>(f(static_cast<double>(theta) * c.decay_factor) + f(f(-c.step_size * m1) / denom));
  m = static_cast<float>(m1);
  v = static_cast<float>(v1);
}

/// n elements of a training-like state: weights ~ 0.1, gradients over 2^-30 .. 2^4 in magnitude (zeros
/// among them), moments from earlier steps.
state random_state(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0F, 1.0F);
  std::uniform_int_distribution<int> exponent(-30, 4);
  state s;
  for (std::size_t i = 0; i < n; ++i) {
    s.theta.push_back(0.1F * unit(rng));
    s.grad.push_back(i % 17 == 0 ? 0.0F : std::ldexp(unit(rng), exponent(rng)));
    s.m.push_back(0.01F * unit(rng));
    s.v.push_back(i % 13 == 0 ? 0.0F : std::ldexp(std::abs(unit(rng)), 2 * exponent(rng)));
  }
  return s;
}

/// The bits of a float array.
std::vector<std::uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<std::uint32_t> out(x.size());
  std::memcpy(out.data(), x.data(), x.size() * sizeof(float));
  return out;
}

/// A step's scalars as train::adamw rounds them from lr, betas, eps and weight decay at step t.
adamw_coefficients<float> coefficients(double lr, double beta1, double beta2, double eps, double weight_decay,
                                       double t) {
  return {.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t))),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t))),
          .decay_factor = static_cast<float>(1.0 - lr * weight_decay),
          .w1 = static_cast<float>(1.0 - beta1),
          .beta2 = static_cast<float>(beta2),
          .w2 = static_cast<float>(1.0 - beta2),
          .eps = static_cast<float>(eps)};
}

}  // namespace

TEST_CASE("kernels::adamw_update is PyTorch's AdamW in float32 operations, bit for bit, at every level",
          "[kernels][adamw]") {
  // nanoGPT's betas, and a beta1 below 0.5 (the lerp's other form); no decay (factor exactly 1).
  const std::vector<adamw_coefficients<float>> steps{coefficients(1e-3, 0.9, 0.99, 1e-8, 0.1, 1),
                                                     coefficients(6e-4, 0.9, 0.95, 1e-8, 0.1, 250),
                                                     coefficients(1e-2, 0.3, 0.999, 1e-6, 0.0, 3)};
  for (const auto& c : steps) {
    // A whole number of 16-lane vectors, one 8-lane vector and a scalar tail.
    const state start = random_state(16 * 40 + 8 + 5, 7);
    state want = start;
    for (std::size_t i = 0; i < want.theta.size(); ++i)
      reference_step(want.theta[i], want.grad[i], want.m[i], want.v[i], c);
    for (const mixprec::isa level : levels()) {
      CAPTURE(level, c.w1, c.step_size);
      const mixprec::isa_limit_scope limit(level);
      state got = start;
      mixprec::kernels::adamw_update<float>(got.theta, got.grad, got.m, got.v, c);
      CHECK(bits_of(got.theta) == bits_of(want.theta));
      CHECK(bits_of(got.m) == bits_of(want.m));
      CHECK(bits_of(got.v) == bits_of(want.v));
    }
  }
}

TEST_CASE("kernels::adamw_update splits large tensors over threads without changing a bit", "[kernels][adamw]") {
  const adamw_coefficients<float> c = coefficients(1e-3, 0.9, 0.99, 1e-8, 0.1, 10);
  const state start = random_state(5 * mixprec::kernels::adamw_chunk + 3, 11);
  state one = start;
  state two = start;
  {
    const std::size_t previous = mixprec::set_num_threads(1);
    mixprec::kernels::adamw_update<float>(one.theta, one.grad, one.m, one.v, c);
    mixprec::set_num_threads(2);
    mixprec::kernels::adamw_update<float>(two.theta, two.grad, two.m, two.v, c);
    mixprec::set_num_threads(previous);
  }
  CHECK(bits_of(one.theta) == bits_of(two.theta));
  CHECK(bits_of(one.m) == bits_of(two.m));
  CHECK(bits_of(one.v) == bits_of(two.v));
  state want = start;
  for (std::size_t i = 0; i < want.theta.size(); ++i)
    reference_step(want.theta[i], want.grad[i], want.m[i], want.v[i], c);
  CHECK(bits_of(two.theta) == bits_of(want.theta));
}

TEST_CASE("kernels::adamw_update in float64 follows the same formula", "[kernels][adamw]") {
  // Three elements by hand: theta 1, g 0.5, zero moments, first step with lr 0.1, betas 0.9/0.999,
  // eps 0, no decay: m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25, theta' = 1 - 0.1 · 0.5 / 0.5 = 0.9.
  const adamw_coefficients<double> c{.step_size = 0.1 / (1.0 - 0.9),
                                     .bias_correction2_sqrt = std::sqrt(1.0 - 0.999),
                                     .decay_factor = 1.0,
                                     .w1 = 1.0 - 0.9,
                                     .beta2 = 0.999,
                                     .w2 = 1.0 - 0.999,
                                     .eps = 0.0};
  std::vector<double> theta{1.0, 1.0, -2.0}, grad{0.5, -0.5, 0.0}, m(3, 0.0), v(3, 0.0);
  mixprec::kernels::adamw_update<double>(theta, grad, m, v, c);
  CHECK(theta[0] == Approx(0.9).epsilon(1e-12));
  CHECK(theta[1] == Approx(1.1).epsilon(1e-12));
  CHECK(std::isnan(theta[2]));  // 0 / 0 with eps 0, as PyTorch gives
  CHECK(m[0] == Approx(0.05).epsilon(1e-12));
  CHECK(v[0] == Approx(0.00025).epsilon(1e-12));
}

TEST_CASE("kernels::adamw_update refuses arrays of different sizes, naming them", "[kernels][adamw]") {
  std::vector<float> theta(4), grad(4), m(4), v(3);
  CHECK_THROWS_WITH(
      mixprec::kernels::adamw_update<float>(theta, grad, m, v, {}),
      "kernels::adamw_update: theta has 4 elements, grad 4, m 4 and v 3; all four must have the same size");
}

}  // namespace adamw_test
