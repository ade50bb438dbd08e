// Tests of mixprec/train/adamw.hpp (and the shared parts of optimizer.hpp) against a float64 reference
// written here from PyTorch's AdamW formulas (torch/optim/adamw.py; TRAINING.md §3), hand-checked
// first steps, and the master-weight, stochastic-rounding and Kahan rules of TRAINING.md §2.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/safetensors.hpp"

namespace adamw_test {

using Catch::Matchers::Contains;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::float16;
using mixprec::train::adamw;
using mixprec::train::adamw_options;
using mixprec::train::write_back;

namespace {

// AdamW in float64, written from the formulas: theta *= 1 - lr*wd (if decay); m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; theta -= lr * m_hat / (sqrt(v_hat) + eps), m_hat = m/(1-b1^t), v_hat = v/(1-b2^t).
struct reference_adamw {
  double b1, b2, eps, wd;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& p, const std::vector<double>& g, double lr, bool decay) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

const std::vector<double> p0 = {1.0, -0.5, 0.25, 3.0, -2.0, 1e-3};
const std::vector<std::vector<double>> grads = {
    {0.5, -0.25, 1e-4, 2.0, -3.0, 0.0}, {-0.1, 0.3, 2e-4, 1.5, 0.5, 1e-6}, {0.2, 0.2, -1e-3, -1.0, 0.25, -1e-6}};
const std::vector<double> lrs = {1e-2, 3e-2, 5e-3};

}  // namespace

TEST_CASE("AdamW: hand-checked first step", "[adamw]") {
  // t = 1, m = v = 0: m_hat = g, v_hat = g^2, so theta1 = theta0 (1 - lr wd) - lr g / (|g| + eps).
  // theta0 = 1, g = 0.5, lr = 0.1, wd = 0.01, eps = 1e-8:
  //   0.999 - 0.1 * 0.5 / 0.50000001 = 0.999 - 0.0999999980000000399... = 0.899000001999999960...
  adamw opt({.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
  std::vector<double> p = {1.0, 1.0};
  const std::vector<double> g = {0.5, -0.5};
  opt.begin_step(0.1);
  opt.update("p", std::span<double>(p), std::span<const double>(g), true);
  CHECK_THAT(p[0], WithinRel(0.89900000199999996, 1e-15));
  CHECK_THAT(p[1], WithinRel(0.999 + 0.0999999980000000399, 1e-15));
  CHECK(opt.step() == 1);
  const auto* st = opt.find_state("p");
  REQUIRE(st != nullptr);
  CHECK(st->moments_double);
  CHECK_THAT(st->moments64[0][0], WithinRel(0.05, 1e-15));     // (1 - 0.9) * 0.5
  CHECK_THAT(st->moments64[1][0], WithinRel(0.00025, 1e-12));  // (1 - 0.999) * 0.25
}

TEST_CASE("AdamW matches a 3-step float64 reference", "[adamw]") {
  const adamw_options opts{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  for (const bool decay : {true, false}) {
    INFO("decay " << decay);
    reference_adamw ref{0.9, 0.99, 1e-8, 0.1, {}, {}};
    std::vector<double> expected = p0;
    std::vector<double> pd = p0;
    std::vector<float> pf(p0.begin(), p0.end());
    adamw opt_d(opts), opt_f(opts);
    for (int s = 0; s < 3; ++s) {
      ref.step(expected, grads[s], lrs[s], decay);
      std::vector<float> gf(grads[s].begin(), grads[s].end());
      opt_d.begin_step(lrs[s]);
      opt_d.update("w", std::span<double>(pd), std::span<const double>(grads[s]), decay);
      opt_f.begin_step(lrs[s]);
      opt_f.update("w", std::span<float>(pf), std::span<const float>(gf), decay);
      for (std::size_t i = 0; i < p0.size(); ++i) {
        INFO("step " << s + 1 << " element " << i);
        CHECK_THAT(pd[i], WithinRel(expected[i], 1e-13) || WithinAbs(expected[i], 1e-15));
        // float32 state and arithmetic: a few float ulps of the parameter's scale per step.
        CHECK_THAT(static_cast<double>(pf[i]), WithinAbs(expected[i], 4e-7 * (std::abs(p0[i]) + 0.1)));
      }
    }
  }
}

TEST_CASE("AdamW decays only the parameters flagged for decay", "[adamw]") {
  adamw opt({.weight_decay = 0.5});
  std::vector<float> a = {2.0f}, b = {2.0f};
  const std::vector<float> g = {0.0f};  // zero gradient: the Adam step is 0, only the decay moves
  opt.begin_step(0.1);
  opt.update("a", std::span<float>(a), std::span<const float>(g), true);
  opt.update("b", std::span<float>(b), std::span<const float>(g), false);
  CHECK(a[0] == 2.0f * static_cast<float>(1.0 - 0.1 * 0.5));  // 1.9
  CHECK(b[0] == 2.0f);
  CHECK(mixprec::train::decays_by_rank(2));
  CHECK_FALSE(mixprec::train::decays_by_rank(1));
}

TEMPLATE_TEST_CASE("AdamW keeps float32 master weights for 16-bit parameters", "[adamw]", bfloat16, float16) {
  const adamw_options opts{.beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1};
  adamw opt(opts);
  reference_adamw ref{0.9, 0.99, 1e-8, 0.1, {}, {}};
  std::vector<double> expected;
  std::vector<TestType> p;
  for (double x : p0) {
    p.push_back(TestType(static_cast<float>(x)));
    expected.push_back(static_cast<double>(static_cast<float>(p.back())));  // the master starts at the param
  }
  for (int s = 0; s < 3; ++s) {
    std::vector<TestType> g;
    std::vector<double> gd;
    for (double x : grads[s]) {
      g.push_back(TestType(static_cast<float>(x)));
      gd.push_back(static_cast<double>(static_cast<float>(g.back())));
    }
    ref.step(expected, gd, lrs[s], true);
    opt.begin_step(lrs[s]);
    opt.update("w", std::span<TestType>(p), std::span<const TestType>(g), true);
    const auto* st = opt.find_state("w");
    REQUIRE(st != nullptr);
    REQUIRE(st->master.size() == p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      INFO("step " << s + 1 << " element " << i);
      CHECK(p[i].bits() == TestType(st->master[i]).bits());  // the param is RNE(master)
      CHECK_THAT(static_cast<double>(st->master[i]), WithinAbs(expected[i], 4e-7 * (std::abs(p0[i]) + 0.1)));
    }
  }
}

TEST_CASE("AdamW checks its arguments", "[adamw]") {
  CHECK_THROWS_AS(adamw({.beta1 = 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(adamw({.eps = -1.0}), std::invalid_argument);
  CHECK_THROWS_AS(adamw({.precision = {.master_weights = true, .rounding = write_back::kahan}}), std::invalid_argument);
  adamw opt;
  std::vector<float> p(3), g(2);
  CHECK_THROWS_AS(opt.update("p", std::span<float>(p), std::span<const float>(g), true), std::logic_error);
  opt.begin_step(1e-3);
  CHECK_THROWS_WITH(opt.update("p", std::span<float>(p), std::span<const float>(g), true), Contains("\"p\""));
  std::vector<float> g3(3);
  opt.update("p", std::span<float>(p), std::span<const float>(g3), true);
  std::vector<double> pd(3), gd(3);
  CHECK_THROWS_WITH(opt.update("p", std::span<double>(pd), std::span<const double>(gd), true),
                    Contains("was float32, now float64"));
  std::vector<bfloat16> h(2), gh(2);
  adamw sr({.precision = {.master_weights = false, .rounding = write_back::stochastic}});
  sr.begin_step(1e-3);
  std::vector<float16> f16(2), gf16(2);
  sr.update("f", std::span<float16>(f16), std::span<const float16>(gf16), true);  // float16 rounds stochastically too
  sr.update("h", std::span<bfloat16>(h), std::span<const bfloat16>(gh), true);
  CHECK_THROWS_WITH(sr.update("f", std::span<bfloat16>(h), std::span<const bfloat16>(gh), true),
                    Contains("was float16, now bfloat16"));
}

TEST_CASE("AdamW with xtensor arrays records the shape in its checkpoint", "[adamw]") {
  adamw opt;
  xt::xtensor<float, 2> w = {{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}};
  xt::xtensor<float, 2> dw = {{0.1f, 0.2f, 0.3f}, {0.4f, 0.5f, 0.6f}};
  opt.begin_step(1e-3);
  opt.update("blocks.0.attn.wq.kernel", w, dw, true);
  mixprec::train::checkpoint ck;
  opt.save_state(ck);
  CHECK(ck.at("adam.m.blocks.0.attn.wq.kernel").shape == std::vector<std::uint64_t>{2, 3});
  CHECK(ck.get_scalar<std::int64_t>("step") == 1);
  CHECK(ck.metadata.at("adamw.beta2") == "0.999");
  xt::xtensor<float, 2> bad = xt::zeros<float>({3, 2});
  CHECK_THROWS_AS(opt.update("blocks.0.attn.wq.kernel", w, bad, true), std::invalid_argument);
}

TEST_CASE("AdamW state survives save and load bit-exactly", "[adamw]") {
  const auto run = [](adamw& opt, std::vector<float>& pf, std::vector<double>& pd, std::vector<bfloat16>& ph, int s) {
    std::vector<float> gf(grads[s].begin(), grads[s].end());
    std::vector<bfloat16> gh;
    for (double x : grads[s]) gh.push_back(bfloat16(static_cast<float>(x)));
    opt.begin_step(lrs[s]);
    opt.update("f", std::span<float>(pf), std::span<const float>(gf), true);
    opt.update("d", std::span<double>(pd), std::span<const double>(grads[s]), false);
    opt.update("h", std::span<bfloat16>(ph), std::span<const bfloat16>(gh), true);
  };
  for (const auto& precision :
       {mixprec::train::precision_options{}, mixprec::train::precision_options{false, write_back::kahan, 0},
        mixprec::train::precision_options{false, write_back::stochastic, 1234}}) {
    INFO("rounding " << static_cast<int>(precision.rounding));
    std::vector<float> pf(p0.begin(), p0.end());
    std::vector<double> pd = p0;
    std::vector<bfloat16> ph;
    for (double x : p0) ph.push_back(bfloat16(static_cast<float>(x)));
    adamw a({.precision = precision});
    run(a, pf, pd, ph, 0);
    run(a, pf, pd, ph, 1);
    mixprec::train::checkpoint ck;
    a.save_state(ck);
    const auto bytes = ck.to_bytes();
    CHECK(ck.contains("master.h") == precision.master_weights);
    CHECK(ck.contains("kahan.h") == (precision.rounding == write_back::kahan));
    CHECK(ck.at("adam.v.d").type == mixprec::dtype::float64);

    // Same options but another seed: the seed comes back from the checkpoint's metadata.
    adamw b({.precision = {precision.master_weights, precision.rounding, 99}});
    b.load_state(mixprec::train::checkpoint::from_bytes(bytes));
    CHECK(b.step() == 2);
    CHECK(b.precision().seed == precision.seed);
    std::vector<float> pf2 = pf;
    std::vector<double> pd2 = pd;
    std::vector<bfloat16> ph2 = ph;
    run(a, pf, pd, ph, 2);
    run(b, pf2, pd2, ph2, 2);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      CHECK(std::bit_cast<std::uint32_t>(pf[i]) == std::bit_cast<std::uint32_t>(pf2[i]));
      CHECK(std::bit_cast<std::uint64_t>(pd[i]) == std::bit_cast<std::uint64_t>(pd2[i]));
      CHECK(ph[i].bits() == ph2[i].bits());
    }
    mixprec::train::checkpoint c1, c2;
    a.save_state(c1);
    b.save_state(c2);
    CHECK(c1.to_bytes() == c2.to_bytes());
  }
  // A loaded state that does not fit its parameter is refused at the update.
  adamw a;
  std::vector<float> pf(p0.begin(), p0.end());
  std::vector<double> pd = p0;
  std::vector<bfloat16> ph(p0.size());
  run(a, pf, pd, ph, 0);
  mixprec::train::checkpoint ck;
  a.save_state(ck);
  adamw b;
  b.load_state(ck);
  b.begin_step(1e-3);
  std::vector<float> wrong(p0.size()), g(p0.size());
  CHECK_THROWS_WITH(b.update("h", std::span<float>(wrong), std::span<const float>(g), true),
                    Contains("master weights"));
  std::vector<float> short_p(2), short_g(2);
  CHECK_THROWS_WITH(b.update("f", std::span<float>(short_p), std::span<const float>(short_g), true),
                    Contains("elements"));
  ck.erase("step");
  CHECK_THROWS_AS(b.load_state(ck), mixprec::train::safetensors_error);
}

}  // namespace adamw_test
