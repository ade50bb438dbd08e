// Tests of mixprec/scaled/float8_dot.hpp: the float8 product with delayed scaling and the weight-only
// float8 product, against float64 products written here, the delayed-scaling sequence by hand, clip
// counts counted independently, and the products injected into nn::dense.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/scaled/float8_dot.hpp"

namespace float8_dot_test {

using namespace mixprec;

namespace {

std::vector<float> gaussian(std::size_t n, double sigma, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(normal(rng));
  return v;
}

// c [m, n] = op(a) · op(b) in double; a is [m, k] (or [k, m] when a_t), b is [k, n] (or [n, k] when b_t).
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, std::size_t m, std::size_t k,
                            std::size_t n, bool a_t, bool b_t) {
  std::vector<double> c(m * n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) {
      const double av = a_t ? a[p * m + i] : a[i * k + p];
      for (std::size_t j = 0; j < n; ++j) c[i * n + j] += av * (b_t ? b[j * k + p] : b[p * n + j]);
    }
  return c;
}

double relative_error(std::span<const float> y, const std::vector<double>& ref) {
  double e = 0.0, r = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    e += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    r += ref[i] * ref[i];
  }
  return std::sqrt(e / r);
}

float amax(const std::vector<float>& v) {
  float m = 0.0f;
  for (const float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST_CASE("float8_dot: forward and backward against float64, small activations", "[scaled][float8]") {
  // Activations 1e-3 and weights 0.05: cast to e4m3fn without scales most activations would vanish.
  const nn::dot_shape s{.rows = 64, .in = 128, .out = 96};
  const auto x = gaussian(s.rows * s.in, 1e-3, 1), w = gaussian(s.in * s.out, 0.05, 2);
  const auto dy = gaussian(s.rows * s.out, 1e-4, 3);
  scaled::float8_dot<> dot;
  std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), dw(s.in * s.out);
  dot.forward(x, w, y, s);
  CHECK(relative_error(y, product(x, w, s.rows, s.in, s.out, false, false)) < 0.06);
  dot.backward(x, dy, w, dx, dw, s);
  CHECK(relative_error(dx, product(dy, w, s.rows, s.out, s.in, false, true)) < 0.1);  // e5m2 dy
  CHECK(relative_error(dw, product(x, dy, s.in, s.rows, s.out, true, false)) < 0.1);
  // First step, no history: each operand was measured, nothing saturated.
  CHECK(dot.clip_counts().x == 0);
  CHECK(dot.clip_counts().kernel == 0);
  CHECK(dot.clip_counts().dy == 0);
}

TEST_CASE("float8_dot: the scales of step t come from the amaxes of earlier steps", "[scaled][float8]") {
  const nn::dot_shape s{.rows = 8, .in = 16, .out = 4};
  auto x = gaussian(s.rows * s.in, 1.0, 4);
  const auto w = gaussian(s.in * s.out, 0.1, 5);
  scaled::float8_dot<> dot;
  std::vector<float> y(s.rows * s.out);
  CHECK(dot.x_scaling().amax_history().empty());
  dot.update_scales();  // nothing ran: nothing recorded
  CHECK(dot.x_scaling().amax_history().empty());
  dot.forward(x, w, y, s);
  dot.update_scales();
  REQUIRE(dot.x_scaling().amax_history().size() == 1);
  CHECK(dot.x_scaling().scale() == double(amax(x)));       // margin 0: the bound is the amax
  CHECK(dot.kernel_scaling().scale() == double(amax(w)));  // recorded for reports
  CHECK(dot.dy_scaling().amax_history().empty());          // no backward ran
  // Step 2 with inputs twice as large: quantised by step 1's scale, so every |x| > amax / 2 saturates.
  const float a1 = amax(x);
  std::size_t expected_clips = 0;
  for (auto& v : x) {
    expected_clips += std::fabs(v) > a1 / 2 ? 1U : 0U;
    v *= 2.0f;
  }
  dot.forward(x, w, y, s);
  CHECK(dot.clip_counts().x == expected_clips);
  CHECK(dot.x_scaling().scale() == double(a1));  // unchanged until update_scales
  dot.update_scales();
  CHECK(dot.x_scaling().scale() == double(2.0f * a1));  // max of the history {2 a1, a1}
  CHECK(dot.x_scaling().amax_history().size() == 2);
}

TEST_CASE("float8_dot::restore continues a product from its saved scalings, bit for bit", "[scaled][float8]") {
  const nn::dot_shape s{.rows = 8, .in = 16, .out = 4};
  const auto w = gaussian(s.in * s.out, 0.1, 7);
  scaled::float8_dot<> original;
  std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), dw(s.in * s.out);
  for (std::uint64_t step = 0; step < 3; ++step) {  // growing inputs: some saturate under the delayed scale
    auto x = gaussian(s.rows * s.in, 1.0 + static_cast<double>(step), 10 + step);
    original.forward(x, w, y, s);
    original.backward(x, gaussian(s.rows * s.out, 0.01, 20 + step), w, dx, dw, s);
    original.update_scales();
  }
  REQUIRE(original.clip_counts().x > 0);
  scaled::float8_dot<> continued;
  continued.restore(original.x_scaling().state(), original.kernel_scaling().state(), original.dy_scaling().state(),
                    original.clip_counts());
  CHECK(continued.x_scaling().state() == original.x_scaling().state());
  CHECK(continued.dy_scaling().state() == original.dy_scaling().state());
  CHECK(continued.clip_counts().x == original.clip_counts().x);
  // The next step gives the same bits from both (a fresh product would measure x instead: other bits).
  const auto x = gaussian(s.rows * s.in, 4.0, 30);
  const auto dy = gaussian(s.rows * s.out, 0.02, 31);
  std::vector<float> y2(y.size()), dx2(dx.size()), dw2(dw.size());
  original.forward(x, w, y, s);
  original.backward(x, dy, w, dx, dw, s);
  continued.forward(x, w, y2, s);
  continued.backward(x, dy, w, dx2, dw2, s);
  CHECK(y == y2);
  CHECK(dx == dx2);
  CHECK(dw == dw2);
  scaled::float8_dot<> fresh;
  fresh.forward(x, w, y2, s);
  CHECK_FALSE(y == y2);
  // A state the scaling refuses changes nothing.
  auto bad = original.x_scaling().state();
  bad.scale = -1.0;
  CHECK_THROWS_AS(continued.restore(bad, original.kernel_scaling().state(), original.dy_scaling().state(), {}),
                  std::invalid_argument);
  CHECK(continued.x_scaling().state() == original.x_scaling().state());
}

TEST_CASE("float8_dot: the kernel is scaled by its current amax unless delayed scaling is asked for",
          "[scaled][float8]") {
  const nn::dot_shape s{.rows = 8, .in = 16, .out = 4};
  const auto x = gaussian(s.rows * s.in, 1.0, 15);
  auto w = gaussian(s.in * s.out, 0.1, 16);
  std::vector<float> y(s.rows * s.out);
  scaled::float8_dot<> current;
  scaled::float8_dot<> delayed({}, /*current_kernel_scaling=*/false);
  for (auto* dot : {&current, &delayed}) {
    dot->forward(x, w, y, s);
    dot->update_scales();
  }
  const float a1 = amax(w);
  std::size_t expected_clips = 0;
  for (auto& v : w) {
    expected_clips += std::fabs(v) > a1 / 2 ? 1U : 0U;
    v *= 2.0f;  // the weights double (an optimiser step)
  }
  current.forward(x, w, y, s);
  delayed.forward(x, w, y, s);
  CHECK(current.clip_counts().kernel == 0);
  CHECK(delayed.clip_counts().kernel == expected_clips);
  CHECK(relative_error(y, product(x, w, s.rows, s.in, s.out, false, false)) > 0.1);  // delayed: saturated
}

TEST_CASE("float8_dot: concurrent calls record the largest amax of the step", "[scaled][float8]") {
  const nn::dot_shape s{.rows = 16, .in = 32, .out = 8};
  const auto x1 = gaussian(s.rows * s.in, 1.0, 6), x2 = gaussian(s.rows * s.in, 3.0, 7);
  const auto w = gaussian(s.in * s.out, 0.1, 8);
  scaled::float8_dot<> dot;
  std::vector<float> y1(s.rows * s.out), y2(s.rows * s.out);
  std::thread t1([&] { dot.forward(x1, w, y1, s); });
  std::thread t2([&] { dot.forward(x2, w, y2, s); });
  t1.join();
  t2.join();
  dot.update_scales();
  CHECK(dot.x_scaling().amax_history() == std::vector<double>{double(std::max(amax(x1), amax(x2)))});
  CHECK(relative_error(y1, product(x1, w, s.rows, s.in, s.out, false, false)) < 0.06);
}

TEST_CASE("float8_dot: e4m3 recipe keeps gradients in e4m3fn", "[scaled][float8]") {
  STATIC_REQUIRE(std::is_same_v<scaled::float8_dot<float8_recipe_format::e4m3>::backward_format, float8_e4m3fn>);
  STATIC_REQUIRE(std::is_same_v<scaled::float8_dot<>::backward_format, float8_e5m2>);
}

TEST_CASE("float8_dot injected into dense: a float8 layer against float64", "[scaled][float8][nn]") {
  using P = policy<float, bfloat16, float>;
  const std::size_t in = 64, out = 32, rows = 24;
  const auto w = gaussian(in * out, 0.1, 9), b = gaussian(out, 0.1, 10), x = gaussian(rows * in, 1.0, 11);
  xt::xtensor<float, 2> kernel = xt::xtensor<float, 2>::from_shape({in, out});
  std::copy(w.begin(), w.end(), kernel.begin());
  xt::xtensor<float, 1> bias = xt::xtensor<float, 1>::from_shape({out});
  std::copy(b.begin(), b.end(), bias.begin());
  nn::dense<P> layer(kernel, bias);
  auto dot = std::make_shared<scaled::float8_dot<>>();
  layer.set_dot(dot);
  xt::xtensor<float, 2> xt_x = xt::xtensor<float, 2>::from_shape({rows, in});
  std::copy(x.begin(), x.end(), xt_x.begin());
  const xt::xtensor<float, 2> y = layer(xt_x);
  std::vector<double> ref = product(x, w, rows, in, out, false, false);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) ref[r * out + o] += b[o];
  CHECK(relative_error(std::span<const float>(y.data(), y.size()), ref) < 0.06);
}

TEST_CASE("float8_weight_dot: per-column scales keep small columns beside large ones", "[scaled][float8]") {
  const nn::dot_shape s{.rows = 16, .in = 64, .out = 8};
  auto w = gaussian(s.in * s.out, 0.02, 12);
  for (std::size_t i = 0; i < s.in; ++i) w[i * s.out] *= 1.0e5f;  // column 0 is 10^5 times larger
  const auto x = gaussian(s.rows * s.in, 1.0, 13), dy = gaussian(s.rows * s.out, 1.0, 14);
  scaled::float8_weight_dot dot;
  std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), dw(s.in * s.out);
  dot.forward(x, w, y, s);
  const auto ref = product(x, w, s.rows, s.in, s.out, false, false);
  for (std::size_t j = 0; j < s.out; ++j) {  // every column on its own: e4m3fn and bfloat16 precision
    double e = 0.0, r = 0.0;
    for (std::size_t i = 0; i < s.rows; ++i) {
      e += std::pow(double(y[i * s.out + j]) - ref[i * s.out + j], 2);
      r += std::pow(ref[i * s.out + j], 2);
    }
    CAPTURE(j);
    CHECK(std::sqrt(e / r) < 0.06);
  }
  // One scale for the whole kernel would put the small columns below e4m3fn's subnormals (0.02 * 448 /
  // 6000 < 2^-9): column 1 through a per-tensor scale, for contrast.
  const double step = double(amax(w)) / 448.0;
  double e1 = 0.0, r1 = 0.0;
  for (std::size_t r = 0; r < s.rows; ++r) {
    double sum = 0.0;
    for (std::size_t i = 0; i < s.in; ++i) {
      sum += double(x[r * s.in + i]) *
             double(static_cast<float>(saturate_cast<float8_e4m3fn>(double(w[i * s.out + 1]) / step))) * step;
    }
    e1 += std::pow(sum - ref[r * s.out + 1], 2);
    r1 += std::pow(ref[r * s.out + 1], 2);
  }
  CHECK(std::sqrt(e1 / r1) > 0.3);
  dot.backward(x, dy, w, dx, dw, s);
  CHECK(relative_error(dx, product(dy, w, s.rows, s.out, s.in, false, true)) < 0.06);
  // Straight-through: dkernel is the float32 xᵀ · dy.
  CHECK(relative_error(dw, product(x, dy, s.in, s.rows, s.out, true, false)) < 1e-6);
}

TEST_CASE("float8 products: NaN and Inf reach the outputs, tiny weight columns stay finite", "[scaled][float8]") {
  const nn::dot_shape s{.rows = 4, .in = 8, .out = 3};
  auto x = gaussian(s.rows * s.in, 1.0, 20);
  const auto w = gaussian(s.in * s.out, 0.1, 21);
  const auto dy = gaussian(s.rows * s.out, 1.0, 22);
  std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), dw(s.in * s.out);
  // An overflow upstream (Inf in x or dy) must not be clamped into a finite product: a loss scaler has
  // to see it.
  scaled::float8_dot<> dot;
  x[5] = std::numeric_limits<float>::infinity();
  dot.forward(x, w, y, s);
  CHECK_FALSE(std::isfinite(y[0 * s.out]));  // row 0 holds x[5]
  CHECK(std::isfinite(y[1 * s.out]));        // the other rows are untouched
  x[5] = 0.5f;
  auto dy_inf = dy;
  dy_inf[4] = -std::numeric_limits<float>::infinity();
  dot.backward(x, dy_inf, w, dx, dw, s);
  CHECK_FALSE(std::isfinite(dx[1 * s.in]));  // row 1 of dy holds the Inf
  // Weight-only: a column 1e-40 times smaller than usual keeps a tiny step in double, no NaN.
  auto tiny = w;
  for (std::size_t i = 0; i < s.in; ++i) tiny[i * s.out + 2] *= 1e-38f;
  tiny[0 * s.out + 2] = 0.0f;
  scaled::float8_weight_dot weights;
  weights.forward(x, tiny, y, s);
  for (const float v : y) CHECK(std::isfinite(v));
  const auto ref = product(x, tiny, s.rows, s.in, s.out, false, false);
  double e = 0.0, norm = 0.0;  // column 2 over the rows (one row may nearly cancel)
  for (std::size_t r = 0; r < s.rows; ++r) {
    e += std::pow(double(y[r * s.out + 2]) - ref[r * s.out + 2], 2);
    norm += std::pow(ref[r * s.out + 2], 2);
  }
  CHECK(norm > 0.0);
  CHECK(std::sqrt(e / norm) < 0.06);
}

TEST_CASE("float8_dot: the kept kernel never changes a bit, and follows the layer's parameters",
          "[scaled][float8][nn]") {
  // Two products driven identically through several steps: one told the layer (dot_shape::owner, so
  // it keeps the quantised and packed kernel), one not (it prepares the kernel at every call). Their
  // outputs, gradients and clip counts must be equal bit for bit, for current and delayed kernel
  // scaling, while the kernel changes between steps (an optimiser step, announced by
  // parameters_changed as dense does).
  for (const bool current : {true, false}) {
    CAPTURE(current);
    const int owner = 0;
    const nn::dot_shape kept{.rows = 12, .in = 40, .out = 24, .owner = &owner};
    nn::dot_shape fresh = kept;
    fresh.owner = nullptr;
    scaled::float8_dot<> a({}, current), b({}, current);
    auto w = gaussian(kept.in * kept.out, 0.1, 30);
    for (std::uint64_t step = 0; step < 4; ++step) {
      const auto x = gaussian(kept.rows * kept.in, 1.0, 31 + step);
      const auto dy = gaussian(kept.rows * kept.out, 1e-3, 41 + step);
      std::vector<float> ya(kept.rows * kept.out), yb(ya.size()), dxa(kept.rows * kept.in), dxb(dxa.size());
      std::vector<float> dka(kept.in * kept.out), dkb(dka.size());
      a.forward(x, w, ya, kept);
      b.forward(x, w, yb, fresh);
      a.backward(x, dy, w, dxa, dka, kept);
      b.backward(x, dy, w, dxb, dkb, fresh);
      REQUIRE(ya == yb);
      REQUIRE(dxa == dxb);
      REQUIRE(dka == dkb);
      a.update_scales();
      b.update_scales();
      for (auto& v : w) v *= 1.5f;  // the weights grow: a stale kernel would show
      a.parameters_changed();
    }
    CHECK(a.clip_counts().kernel == b.clip_counts().kernel);
    CHECK(a.kernel_scaling().amax_history() == b.kernel_scaling().amax_history());
  }
}

TEST_CASE("float8_weight_dot: the kept 1-byte kernel never changes a bit, and follows the layer's parameters",
          "[scaled][float8][nn]") {
  // One product told the layer (it keeps the quantised kernel as 1-byte panels), one not (it prepares
  // the kernel at every call): equal outputs and gradients bit for bit while the kernel changes
  // between steps (announced by parameters_changed, as dense does).
  const int owner = 0;
  const nn::dot_shape kept{.rows = 12, .in = 40, .out = 24, .owner = &owner};
  nn::dot_shape fresh = kept;
  fresh.owner = nullptr;
  scaled::float8_weight_dot a, b;
  CHECK(a.kept_bytes() == 0);
  auto w = gaussian(kept.in * kept.out, 0.1, 50);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const auto x = gaussian(kept.rows * kept.in, 1.0, 51 + step);
    const auto dy = gaussian(kept.rows * kept.out, 1e-3, 61 + step);
    std::vector<float> ya(kept.rows * kept.out), yb(ya.size()), dxa(kept.rows * kept.in), dxb(dxa.size());
    std::vector<float> dka(kept.in * kept.out), dkb(dka.size());
    a.forward(x, w, ya, kept);
    b.forward(x, w, yb, fresh);
    REQUIRE(ya == yb);
    // 1 byte per weight (two panels of 16 columns) and one double per column; nothing else kept yet.
    CHECK(a.kept_bytes() == kept.in * 32 + kept.out * sizeof(double));
    // A single row (m = 1) gives the row's bits of the product of all rows.
    std::vector<float> y1(kept.out);
    a.forward(std::span<const float>(x).first(kept.in), w, y1,
              {.rows = 1, .in = kept.in, .out = kept.out, .owner = &owner});
    CHECK(std::equal(y1.begin(), y1.end(), ya.begin()));
    a.backward(x, dy, w, dxa, dka, kept);
    b.backward(x, dy, w, dxb, dkb, fresh);
    REQUIRE(dxa == dxb);
    REQUIRE(dka == dkb);
    CHECK(a.kept_bytes() > kept.in * 32 + kept.out * sizeof(double));  // the transposed packing, on first use
    for (auto& v : w) v *= -1.5f;                                      // a stale kernel would show
    a.parameters_changed();
    CHECK(a.kept_bytes() == 0);
  }
}

TEST_CASE("float8_dot injected into dense: every change of the kernel reaches the kept copy", "[scaled][float8][nn]") {
  using P = policy<float, bfloat16, float>;
  const std::size_t in = 32, out = 16, rows = 8;
  std::mt19937 rng(12);
  nn::dense<P> first(in, out, rng, nn::use_bias::no), second(in, out, rng, nn::use_bias::no);
  auto shared = std::make_shared<scaled::float8_dot<>>();  // one product for two layers
  first.set_dot(shared);
  second.set_dot(shared);
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, in});
  const auto values = gaussian(rows * in, 1.0, 13);
  std::copy(values.begin(), values.end(), x.begin());
  // The reference: the same layer with a product of its own that has never kept anything.
  const auto fresh = [&](const nn::dense<P>& layer) {
    nn::dense<P> copy(layer.kernel());
    copy.set_dot(std::make_shared<scaled::float8_dot<>>());
    return xt::xtensor<float, 2>(copy(x));
  };
  CHECK(static_cast<bool>(first(x) == fresh(first)));
  CHECK(static_cast<bool>(second(x) == fresh(second)));  // its own kernel, not the first layer's
  CHECK(static_cast<bool>(first(x) == fresh(first)));
  const xt::xtensor<float, 2> before = first(x);
  first.kernel()(0, 0) += 3.0f;  // non-const access
  CHECK(static_cast<bool>(first(x) == fresh(first)));
  CHECK_FALSE(static_cast<bool>(first(x) == before));
  first.for_each_parameter([](std::string_view, auto& t) { t *= 0.5f; });
  CHECK(static_cast<bool>(first(x) == fresh(first)));
  second = first;  // assignment: the second layer now holds the first one's kernel
  CHECK(static_cast<bool>(second(x) == fresh(first)));
}

TEST_CASE("float8 quantisation: the AVX2 scaling pass gives the portable loop's data, amax and clips",
          "[scaled][float8]") {
  // Lengths around the 8-lane groups and the 1024-element blocks; values inside and beyond the bound,
  // products that overflow float, -0, subnormals, Inf and NaN.
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{33}, std::size_t{1023},
                              std::size_t{1024}, std::size_t{1031}, std::size_t{3000}}) {
    for (const bool special : {false, true}) {
      CAPTURE(n, special);
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng);
      if (special && n > 6) {
        x[0] = -0.0f;
        x[1] = 1e-41f;
        x[2] = 3e38f;  // x * mult overflows float: it saturates
        x[n - 1] = -std::numeric_limits<float>::infinity();
        x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      }
      const double scale = 3.0;  // values above 3 saturate
      std::vector<float8_e4m3fn> simd(n), portable(n);
      std::size_t clips_simd = 0, clips_portable = 0;
      const float amax_simd =
          kernels::quantise_by_scale(std::span<const float>(x), scale, std::span<float8_e4m3fn>(simd), clips_simd);
      float amax_portable = 0.0f;
      {
        const isa_limit_scope limit(isa::portable);
        amax_portable = kernels::quantise_by_scale(std::span<const float>(x), scale, std::span<float8_e4m3fn>(portable),
                                                   clips_portable);
      }
      for (std::size_t i = 0; i < n; ++i) REQUIRE(simd[i].bits() == portable[i].bits());
      CHECK(clips_simd == clips_portable);
      CHECK(((std::isnan(amax_simd) && std::isnan(amax_portable)) || amax_simd == amax_portable));
      // The portable loop against the definition: saturated where |x| > scale, NaN where x is not finite.
      std::size_t expected_clips = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        if (std::isfinite(a) && a > scale) {
          ++expected_clips;
          REQUIRE(std::fabs(static_cast<float>(portable[i])) == 448.0f);
        }
        if (!std::isfinite(x[i])) REQUIRE(std::isnan(static_cast<float>(portable[i])));
      }
      CHECK(clips_portable == expected_clips);
    }
  }
}

TEST_CASE("float8_dot keeps nothing while the weight cache is off, as the plain layer", "[scaled][float8][nn]") {
  // nn/weight_cache.hpp: with the cache off, calls neither use nor make a kept kernel, so a write
  // through a reference kept across calls is seen without parameters_changed.
  using P = policy<float, bfloat16, float>;
  const std::size_t in = 16, out = 8, rows = 4;
  std::mt19937 rng(21);
  nn::dense<P> layer(in, out, rng, nn::use_bias::no);
  layer.set_dot(std::make_shared<scaled::float8_dot<>>());
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, in});
  const auto values = gaussian(rows * in, 1.0, 22);
  std::copy(values.begin(), values.end(), x.begin());
  const bool was = nn::set_weight_cache(false);
  auto& kernel = layer.kernel();
  const xt::xtensor<float, 2> before = layer(x);
  kernel *= 4.0f;  // a power of two: the float8 data stay the same, the scale follows the amax
  const xt::xtensor<float, 2> after = layer(x);
  nn::set_weight_cache(was);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(after.data()[i] == 4.0f * before.data()[i]);
}

TEST_CASE("float8_dot: data-parallel workers share one layer's kept kernel and get the single-thread bits",
          "[scaled][float8][nn]") {
  // Two threads run forward and backward of one layer at once (the training loop's workers), starting
  // with no kept kernel, so both race to prepare it; each result must equal the same call made alone.
  using P = policy<float, bfloat16, float>;
  const std::size_t in = 48, out = 40, rows = 16;
  std::mt19937 rng(23);
  const nn::dense<P> proto(in, out, rng, nn::use_bias::no);
  const auto batch = [&](std::uint64_t seed) {
    xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({rows, in});
    const auto values = gaussian(rows * in, 1.0, seed);
    std::copy(values.begin(), values.end(), x.begin());
    return x;
  };
  const xt::xtensor<float, 2> x1 = batch(24), x2 = batch(25);
  xt::xtensor<float, 2> dy = xt::xtensor<float, 2>::from_shape({rows, out});
  const auto dvalues = gaussian(rows * out, 1e-3, 26);
  std::copy(dvalues.begin(), dvalues.end(), dy.begin());
  struct result {
    xt::xtensor<float, 2> y, dx;
    xt::xtensor<float, 2> dkernel;
  };
  const auto step = [&](const nn::dense<P>& layer, const xt::xtensor<float, 2>& x) {
    nn::dense<P>::saved<float> ctx;
    auto grads = layer.zero_gradients();
    result r;
    r.y = layer.forward(x, ctx);
    r.dx = layer.backward(ctx, dy, grads);
    r.dkernel = grads.kernel;
    return r;
  };
  // Alone: a fresh layer and product per batch (each measures its own first-step scales).
  const auto alone = [&](const xt::xtensor<float, 2>& x) {
    nn::dense<P> layer = proto;
    layer.set_dot(std::make_shared<scaled::float8_dot<>>());
    return step(layer, x);
  };
  const result r1 = alone(x1), r2 = alone(x2);
  for (int trial = 0; trial < 4; ++trial) {
    nn::dense<P> shared = proto;
    shared.set_dot(std::make_shared<scaled::float8_dot<>>());
    result t1, t2;
    std::thread a([&] { t1 = step(shared, x1); });
    std::thread b([&] { t2 = step(shared, x2); });
    a.join();
    b.join();
    REQUIRE(static_cast<bool>(t1.y == r1.y));
    REQUIRE(static_cast<bool>(t2.y == r2.y));
    REQUIRE(static_cast<bool>(t1.dx == r1.dx));
    REQUIRE(static_cast<bool>(t2.dx == r2.dx));
    REQUIRE(static_cast<bool>(t1.dkernel == r1.dkernel));
    REQUIRE(static_cast<bool>(t2.dkernel == r2.dkernel));
  }
}

}  // namespace float8_dot_test
