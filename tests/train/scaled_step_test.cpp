// Tests of mixprec/train/scaled_step.hpp, optimizer::step and mixprec/nn/parameters.hpp: nn layers'
// gradients as trees (all_finite, unscale_in_place, clip, zero, alone and in a tuple), the named walk
// and its errors, and the GradScaler-style step against the hand-written sequence, bit for bit.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/clip.hpp"
#include "mixprec/train/scaled_step.hpp"

namespace scaled_step_test {

using layer = mixprec::nn::dense<mixprec::mixed_float16>;
using mixprec::all_finite;

namespace {
constexpr float inf = std::numeric_limits<float>::infinity();

/// Gradients of `d` filled with distinct values (scaled by `s`).
layer::gradients filled(const layer& d, float s) {
  auto g = d.zero_gradients();
  float v = 0.25f;
  g.for_each([&](std::string_view, auto& t) {
    for (auto& x : t) x = (v += 0.5f) * s;
  });
  return g;
}

std::vector<std::uint32_t> bits(const layer& d) {
  std::vector<std::uint32_t> out;
  d.for_each_parameter([&](std::string_view, const auto& t) {
    for (float x : t) out.push_back(std::bit_cast<std::uint32_t>(x));
  });
  return out;
}

layer make(unsigned seed, mixprec::nn::use_bias bias = mixprec::nn::use_bias::yes) {
  std::mt19937 rng(seed);
  return layer(3, 2, rng, bias);
}

/// Gradients walked under other names: "bias" becomes "b".
struct renamed {
  layer::gradients& inner;
  template <class F>
  void for_each(F&& f) {
    inner.for_each([&](std::string_view name, auto& t) { f(name == "bias" ? std::string_view("b") : name, t); });
  }
};

/// Gradients walked with the tensors swapped: a rank-1 tensor under "kernel".
struct rank_swapped {
  layer::gradients& inner;
  template <class F>
  void for_each(F&& f) {
    f(std::string_view("kernel"), *inner.bias);
    f(std::string_view("bias"), inner.kernel);
  }
};

/// The hand-written loop the scaled step replaces (examples/train/trainer.hpp before it).
template <class L>
bool manual_step(L& ls, mixprec::train::adamw& opt, double lr, layer& d, layer::gradients& g) {
  ls.unscale_in_place(g.kernel);
  ls.unscale_in_place(*g.bias);
  bool finite = true;
  for (float x : g.kernel) finite = finite && std::isfinite(x);
  for (float x : *g.bias) finite = finite && std::isfinite(x);
  ls.adjust(finite);
  if (!finite) return false;
  opt.begin_step(lr);
  opt.update("kernel", d.kernel(), g.kernel, true);
  opt.update("bias", *d.bias(), *g.bias, false);
  return true;
}
}  // namespace

TEST_CASE("a layer's gradients and a tuple of layers' gradients are trees", "[train][tree]") {
  const layer d = make(1);
  auto g = filled(d, 1.0f);
  auto h = filled(d, 2.0f);
  auto both = std::tie(g, h);
  CHECK(all_finite(g));
  CHECK(all_finite(both));
  h.kernel(1, 0) = inf;
  CHECK(all_finite(g));
  CHECK_FALSE(all_finite(both));
  h.kernel(1, 0) = 1.0f;

  const auto before = g;
  mixprec::static_loss_scale(4.0f).unscale_in_place(both);
  CHECK(g.kernel(0, 1) == before.kernel(0, 1) / 4);
  CHECK((*g.bias)(1) == (*before.bias)(1) / 4);

  double sum = 0;
  for (const auto* t : {&g, &h})
    t->for_each([&](std::string_view, const auto& x) {
      for (float v : x) sum += double(v) * double(v);
    });
  CHECK(mixprec::train::global_grad_norm(both) == std::sqrt(sum));
  CHECK(mixprec::train::global_grad_norm(g, h) == std::sqrt(sum));
  const double norm = mixprec::train::clip_grad_norm(0.5, both);
  CHECK(norm == std::sqrt(sum));
  CHECK(mixprec::train::global_grad_norm(both) == Approx(0.5).epsilon(1e-5));

  const auto doubled = mixprec::tree_map([](float x) { return 2 * x; }, g);
  static_assert(std::is_same_v<decltype(doubled), const layer::gradients>);
  CHECK(doubled.kernel(0, 0) == 2 * g.kernel(0, 0));

  const float* data = g.kernel.data();
  g.zero();
  mixprec::tree_zero(both);
  CHECK(g.kernel.data() == data);
  CHECK(mixprec::train::global_grad_norm(both) == 0.0);
  CHECK(g.bias.has_value());
}

TEST_CASE("nn::for_each_parameter zips parameters and gradients by name", "[train][walk]") {
  layer d = make(2);
  auto g = filled(d, 1.0f);
  std::vector<std::string> names;
  mixprec::nn::for_each_parameter(d, g, [&](std::string_view name, auto& p, auto& dp) {
    CHECK(p.shape() == dp.shape());
    names.emplace_back(name);
  });
  CHECK(names == std::vector<std::string>{"kernel", "bias"});

  layer no_bias = make(2, mixprec::nn::use_bias::no);
  auto g1 = no_bias.zero_gradients();
  const auto noop = [](std::string_view, auto&, auto&) {};
  CHECK_THROWS_WITH(mixprec::nn::for_each_parameter(no_bias, g, noop),
                    "nn::for_each_parameter: the gradients have 2 tensors but the layer has 1 parameters");
  CHECK_THROWS_WITH(mixprec::nn::for_each_parameter(d, g1, noop),
                    "nn::for_each_parameter: the layer has more parameters than the gradients (1); parameter 1 is "
                    "\"bias\"");

  renamed other{g};
  CHECK_THROWS_WITH(mixprec::nn::for_each_parameter(d, other, noop),
                    "nn::for_each_parameter: parameter 1 is \"bias\" but gradient 1 is \"b\"");

  rank_swapped swapped{g};
  CHECK_THROWS_WITH(mixprec::nn::for_each_parameter(d, swapped, noop),
                    "nn::for_each_parameter: parameter \"kernel\" has rank 2 but its gradient has rank 1");
}

TEST_CASE("optimizer::step updates every parameter as begin_step + update do", "[train][step]") {
  layer a = make(3), b = make(3);
  const auto g = filled(a, 1.0f);
  mixprec::train::adamw oa, ob;
  oa.step(1e-2, a, g, "block");
  ob.begin_step(1e-2);
  ob.update("block.kernel", b.kernel(), g.kernel, true);
  ob.update("block.bias", *b.bias(), *g.bias, false);
  CHECK(bits(a) == bits(b));
  CHECK(oa.find_state("block.kernel") != nullptr);
  CHECK(oa.step() == 1);

  layer no_bias = make(3, mixprec::nn::use_bias::no);
  CHECK_THROWS_WITH(oa.step(1e-2, no_bias, g),
                    "nn::for_each_parameter: the gradients have 2 tensors but the layer has 1 parameters");
  CHECK(oa.step() == 1);  // checked before begin_step
}

TEST_CASE("optimizer::step with `only` steps the parameters it accepts and leaves the others", "[train][step]") {
  layer a = make(3), b = make(3);
  const auto before = bits(a);
  auto g = filled(a, 1.0f);
  mixprec::train::adamw oa, ob;
  mixprec::no_op_loss_scale none;
  CHECK(mixprec::train::scaled_step(
      none, oa, 1e-2, a, g, {.prefix = "block", .only = [](std::string_view n) { return n == "block.kernel"; }}));
  ob.begin_step(1e-2);
  ob.update("block.kernel", b.kernel(), g.kernel, true);
  CHECK(bits(a) == bits(b));  // the kernel stepped, the bias not
  CHECK(bits(a) != before);
  CHECK(oa.find_state("block.bias") == nullptr);
  CHECK(oa.state_bytes() == b.kernel().size() * 2 * sizeof(float));  // m and v of the kernel
  oa.keep_states([](std::string_view) { return false; });
  CHECK(oa.state_bytes() == 0);
}

namespace {
/// An optimiser of its own whose step takes no parameter filter: plain SGD without state.
struct plain_sgd {
  int steps = 0;
  template <class Model, class Grads>
  void step(double lr, Model& model, const Grads& grads, std::string_view) {
    mixprec::nn::for_each_parameter(model, grads, [&](std::string_view, auto& p, const auto& dp) {
      for (std::size_t i = 0; i < p.size(); ++i)
        p.data()[i] = static_cast<float>(p.data()[i] - static_cast<float>(lr) * dp.data()[i]);
    });
    ++steps;
  }
};
}  // namespace

TEST_CASE("scaled_step drives an optimiser without a filter, and refuses `only` for it", "[train][scaled_step]") {
  mixprec::nn::dense<mixprec::full_precision> d(2, 2);
  auto g = d.zero_gradients();
  g.kernel.fill(1.0f);
  plain_sgd opt;
  mixprec::no_op_loss_scale none;
  CHECK(mixprec::train::scaled_step(none, opt, 0.5, d, g));
  CHECK(opt.steps == 1);
  CHECK(d.kernel()(0, 0) == -0.5f);  // zeros - 0.5 · 1
  CHECK_THROWS_WITH(mixprec::train::scaled_step(none, opt, 0.5, d, g, {.only = [](std::string_view) { return true; }}),
                    Catch::Contains("this optimiser's step takes no parameter filter"));
  CHECK(opt.steps == 1);
}

TEMPLATE_TEST_CASE("a finite scaled step is the hand-written sequence, bit for bit", "[train][scaled_step]",
                   mixprec::dynamic_loss_scale, mixprec::static_loss_scale, mixprec::no_op_loss_scale) {
  const auto make_scale = [] {
    if constexpr (std::is_same_v<TestType, mixprec::static_loss_scale>) {
      return TestType(8.0f);
    } else if constexpr (std::is_same_v<TestType, mixprec::dynamic_loss_scale>) {
      return TestType({.initial_scale = 8.0f, .period = 2});
    } else {
      return TestType{};
    }
  };
  layer a = make(4), b = make(4);
  TestType la = make_scale(), lb = make_scale();
  mixprec::train::adamw oa, ob;
  for (int it = 0; it < 3; ++it) {
    auto ga = filled(a, la.loss_scale() * float(it + 1));
    auto gb = filled(b, lb.loss_scale() * float(it + 1));
    CHECK(mixprec::train::scaled_step(la, oa, 1e-2, a, ga));
    CHECK(manual_step(lb, ob, 1e-2, b, gb));
    CHECK(bits(a) == bits(b));
    CHECK(la.loss_scale() == lb.loss_scale());
  }
  CHECK(oa.step() == 3);
}

TEST_CASE("a non-finite gradient skips the step, halves the dynamic scale, leaves the rest", "[train][scaled_step]") {
  layer d = make(5);
  mixprec::dynamic_loss_scale ls({.initial_scale = 1024.0f});
  mixprec::train::adamw opt;
  auto g = filled(d, 1024.0f);
  REQUIRE(mixprec::train::scaled_step(ls, opt, 1e-2, d, g));
  const auto before = bits(d);
  const auto state = *opt.find_state("kernel");
  g = filled(d, 1024.0f);
  (*g.bias)(0) = inf;
  CHECK_FALSE(mixprec::train::scaled_step(ls, opt, 1e-2, d, g, {.max_norm = 1.0}));
  CHECK(bits(d) == before);
  CHECK(opt.step() == 1);
  CHECK(opt.find_state("kernel")->moments32 == state.moments32);
  CHECK(ls.loss_scale() == 512.0f);

  mixprec::no_op_loss_scale none;
  CHECK_FALSE(mixprec::train::scaled_step(none, opt, 1e-2, d, g));
  CHECK(bits(d) == before);
}

namespace {
/// The step of docs/loss_scaling.md ("With nn layers"), verbatim.
template <class L, class Layer>
bool doc_step(L& ls, mixprec::train::adamw& opt, double lr, Layer& layer, typename Layer::gradients& grads) {
  ls.unscale_in_place(grads);  // any layer's gradients, a std::tie of several, a vector<span>
  const bool finite = mixprec::all_finite(grads);
  ls.adjust(finite);                       // grow every 2000 finite steps, halve otherwise
  if (finite) opt.step(lr, layer, grads);  // begin_step + one update per parameter, nanoGPT's decay rule
  grads.zero();                            // in place, ready for the next accumulation
  return finite;
}
}  // namespace

TEST_CASE("the step of docs/loss_scaling.md compiles and is the scaled step", "[train][scaled_step][docs]") {
  layer a = make(7), b = make(7);
  mixprec::dynamic_loss_scale la, lb;
  mixprec::train::adamw oa, ob;
  for (const float bad : {1.0f, inf, 1.0f}) {
    auto ga = filled(a, 32768.0f * bad);
    auto gb = filled(b, 32768.0f * bad);
    const bool stepped = mixprec::train::scaled_step(la, oa, 1e-3, a, ga);
    ga.zero();
    CHECK(doc_step(lb, ob, 1e-3, b, gb) == stepped);
    CHECK(bits(a) == bits(b));
    CHECK(la.loss_scale() == lb.loss_scale());
    CHECK(mixprec::train::global_grad_norm(gb) == 0.0);
  }
  CHECK(la.loss_scale() == 16384.0f);
}

TEST_CASE("the scaled step clips the unscaled gradients when asked", "[train][scaled_step]") {
  layer a = make(6), b = make(6);
  mixprec::static_loss_scale la(16.0f), lb(16.0f);
  mixprec::train::adamw oa, ob;
  auto ga = filled(a, 16.0f);
  auto gb = filled(b, 16.0f);
  CHECK(mixprec::train::scaled_step(la, oa, 1e-2, a, ga, {.max_norm = 0.5, .prefix = "fc"}));
  lb.unscale_in_place(gb);
  mixprec::train::clip_grad_norm(0.5, gb);
  ob.step(1e-2, b, gb, "fc");
  CHECK(bits(a) == bits(b));
  CHECK(oa.find_state("fc.bias") != nullptr);
}

TEST_CASE("the generic scaled step takes any tree and any step", "[train][scaled_step]") {
  std::vector<float> a{2.0f, 4.0f};
  std::vector<std::span<float>> grads{std::span<float>(a)};
  mixprec::static_loss_scale ls(2.0f);
  int calls = 0;
  CHECK(mixprec::train::scaled_step(ls, grads, [&] { ++calls; }));
  CHECK(a == std::vector<float>{1.0f, 2.0f});
  a[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(mixprec::train::scaled_step(ls, grads, [&] { ++calls; }));
  CHECK(calls == 1);
}

}  // namespace scaled_step_test
