// Tests of mixprec/train/sgd.hpp against a float64 reference written here from PyTorch's SGD
// (torch/optim/sgd.py; TRAINING.md §3) and hand-checked first steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/train/safetensors.hpp"
#include "mixprec/train/sgd.hpp"

namespace sgd_test {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::train::sgd;
using mixprec::train::sgd_options;

namespace {

// SGD in float64 from the formulas: g += wd*theta (if decay); b = g at the first step, else
// b = mu*b + (1-tau)*g; g = g + mu*b (Nesterov) or b; theta -= lr*g.
struct reference_sgd {
  double mu, tau, wd;
  bool nesterov;
  std::vector<double> b;
  void step(std::vector<double>& p, const std::vector<double>& grad, double lr, bool decay) {
    const bool first = b.empty();
    if (first) b.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decay) g += wd * p[i];
      if (mu != 0) {
        b[i] = first ? g : mu * b[i] + (1 - tau) * g;
        g = nesterov ? g + mu * b[i] : b[i];
      }
      p[i] -= lr * g;
    }
  }
};

const std::vector<double> p0 = {1.0, -0.5, 0.25, 3.0, -2.0};
const std::vector<std::vector<double>> grads = {
    {0.5, -0.25, 1e-4, 2.0, -3.0}, {-0.1, 0.3, 2e-4, 1.5, 0.5}, {0.2, 0.2, -1e-3, -1.0, 0.25}};
const std::vector<double> lrs = {0.1, 0.05, 0.02};

}  // namespace

TEST_CASE("SGD: hand-checked first steps", "[sgd]") {
  // theta = 1, g = 0.5, wd = 0.1, lr = 0.1: g' = 0.5 + 0.1 = 0.6; plain/momentum: b = 0.6, theta = 0.94.
  // Nesterov (mu 0.9): g'' = 0.6 + 0.9 * 0.6 = 1.14, theta = 1 - 0.114 = 0.886.
  for (const bool nesterov : {false, true}) {
    sgd opt({.momentum = 0.9, .dampening = 0.0, .weight_decay = 0.1, .nesterov = nesterov});
    std::vector<double> p = {1.0};
    const std::vector<double> g = {0.5};
    opt.begin_step(0.1);
    opt.update("p", std::span<double>(p), std::span<const double>(g), true);
    CHECK_THAT(p[0], WithinRel(nesterov ? 0.886 : 0.94, 1e-15));
    CHECK_THAT(opt.find_state("p")->moments64[0][0], WithinRel(0.6, 1e-15));
  }
}

TEST_CASE("SGD matches a 3-step float64 reference", "[sgd]") {
  struct config {
    double mu, tau, wd;
    bool nesterov;
  };
  for (const config c : {config{0.0, 0.0, 0.0, false}, config{0.9, 0.0, 0.01, false}, config{0.9, 0.1, 0.01, false},
                         config{0.8, 0.0, 0.05, true}}) {
    for (const bool decay : {true, false}) {
      INFO("momentum " << c.mu << " dampening " << c.tau << " wd " << c.wd << " nesterov " << c.nesterov << " decay "
                       << decay);
      reference_sgd ref{c.mu, c.tau, c.wd, c.nesterov, {}};
      const sgd_options opts{.momentum = c.mu, .dampening = c.tau, .weight_decay = c.wd, .nesterov = c.nesterov};
      sgd opt_d(opts), opt_f(opts);
      std::vector<double> expected = p0, pd = p0;
      std::vector<float> pf(p0.begin(), p0.end());
      for (int s = 0; s < 3; ++s) {
        ref.step(expected, grads[s], lrs[s], decay);
        std::vector<float> gf(grads[s].begin(), grads[s].end());
        opt_d.begin_step(lrs[s]);
        opt_d.update("w", std::span<double>(pd), std::span<const double>(grads[s]), decay);
        opt_f.begin_step(lrs[s]);
        opt_f.update("w", std::span<float>(pf), std::span<const float>(gf), decay);
        for (std::size_t i = 0; i < p0.size(); ++i) {
          INFO("step " << s + 1 << " element " << i);
          CHECK_THAT(pd[i], WithinRel(expected[i], 1e-14));
          CHECK_THAT(static_cast<double>(pf[i]), WithinAbs(expected[i], 1e-6 * (std::abs(p0[i]) + 1.0)));
        }
      }
    }
  }
}

TEST_CASE("SGD checks its options and saves its momentum buffer", "[sgd]") {
  CHECK_THROWS_AS(sgd({.momentum = 0.0, .nesterov = true}), std::invalid_argument);
  CHECK_THROWS_AS(sgd({.momentum = 0.9, .dampening = 0.1, .nesterov = true}), std::invalid_argument);
  CHECK_THROWS_AS(sgd({.momentum = -1.0}), std::invalid_argument);

  sgd a({.momentum = 0.9, .weight_decay = 0.01});
  std::vector<bfloat16> p = {bfloat16(1.0f), bfloat16(-2.0f)};
  const std::vector<float> g = {0.25f, 0.5f};
  a.begin_step(0.1);
  a.update("w", std::span<bfloat16>(p), std::span<const float>(g), true);
  mixprec::train::checkpoint ck;
  a.save_state(ck);
  CHECK(ck.contains("sgd.momentum_buffer.w"));
  CHECK(ck.contains("master.w"));
  CHECK(ck.metadata.at("sgd.momentum") == "0.90000000000000002");
  sgd b({.momentum = 0.9, .weight_decay = 0.01});
  b.load_state(mixprec::train::checkpoint::from_bytes(ck.to_bytes()));
  std::vector<bfloat16> q = p;
  a.begin_step(0.1);
  a.update("w", std::span<bfloat16>(p), std::span<const float>(g), true);
  b.begin_step(0.1);
  b.update("w", std::span<bfloat16>(q), std::span<const float>(g), true);
  CHECK(p[0].bits() == q[0].bits());
  CHECK(p[1].bits() == q[1].bits());
  CHECK(a.find_state("w")->master == b.find_state("w")->master);
}

}  // namespace sgd_test
