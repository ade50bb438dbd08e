// Tests of nn::batch_norm<P> (nn/batch_norm.hpp) against float64 references written here: the running
// statistics of the flax and pytorch conventions over several steps, eval outputs, low-precision outputs
// within nn::error_bound, the VJP against central differences, two synchronised workers against one,
// the buffer walk, the from_scope form and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/error_bound.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "nn/gradcheck.hpp"
#include "nn/policies.hpp"

namespace batch_norm_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace nn = mixprec::nn;
using gradcheck::flat_values;
using gradcheck::tensor_from;
using layer_tests::p_f64;

namespace {

/// Column statistics of a rows × f matrix in long double: mean and M2 = Σ (x - mean)^2 per feature.
struct column_stats {
  std::vector<long double> mean, m2;
};
column_stats reference_stats(const std::vector<double>& x, std::size_t rows, std::size_t f) {
  column_stats s{std::vector<long double>(f, 0.0L), std::vector<long double>(f, 0.0L)};
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < f; ++j) s.mean[j] += x[r * f + j];
  }
  for (std::size_t j = 0; j < f; ++j) s.mean[j] /= static_cast<long double>(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < f; ++j) {
      const long double d = x[r * f + j] - s.mean[j];
      s.m2[j] += d * d;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("batch_norm flax convention: 5 train steps, running statistics and eval outputs", "[nn][batch_norm]") {
  const std::size_t f = 3, rows = 6;  // x [2, 3, 3]: statistics over the first two axes
  nn::batch_norm<p_f64> bn(f);        // flax: momentum 0.99, biased variance into the running one
  STATIC_REQUIRE(std::is_same_v<nn::batch_norm<p_f64>::stat_type, double>);
  REQUIRE(bn.momentum() == 0.99);
  bn.scale()->data()[1] = 2.0;
  bn.bias()->data()[2] = -0.5;
  std::vector<long double> ra_mean(f, 0.0L), ra_var(f, 1.0L);
  for (unsigned step = 0; step < 5; ++step) {
    auto v = gradcheck::uniform(rows * f, 10 + step, -1.0, 3.0);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= 1.0 + static_cast<double>(i % f);  // columns differ
    const auto x = tensor_from<double, 3>(v, {2, 3, f});
    const auto y = bn(x, nn::mode::train);
    const auto st = reference_stats(v, rows, f);
    for (std::size_t j = 0; j < f; ++j) {
      const long double var = st.m2[j] / rows;
      ra_mean[j] = 0.99L * ra_mean[j] + 0.01L * st.mean[j];
      ra_var[j] = 0.99L * ra_var[j] + 0.01L * var;
      for (std::size_t r = 0; r < rows; ++r) {
        const long double ref =
            (v[r * f + j] - st.mean[j]) / std::sqrt(var + 1e-5L) * (j == 1 ? 2 : 1) - (j == 2 ? 0.5L : 0);
        CHECK(y.data()[r * f + j] == Approx(static_cast<double>(ref)).margin(1e-13));
      }
    }
  }
  for (std::size_t j = 0; j < f; ++j) {
    CHECK(bn.running_mean()(j) == Approx(static_cast<double>(ra_mean[j])).epsilon(1e-13));
    CHECK(bn.running_var()(j) == Approx(static_cast<double>(ra_var[j])).epsilon(1e-13));
  }
  CHECK(bn.batches_tracked() == 5);
  const auto xe = tensor_from<double, 2>(gradcheck::uniform(4 * f, 30), {4, f});
  const auto ye = std::as_const(bn)(xe, nn::mode::eval);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t j = 0; j < f; ++j) {
      const long double ref =
          (xe(r, j) - ra_mean[j]) / std::sqrt(ra_var[j] + 1e-5L) * (j == 1 ? 2 : 1) - (j == 2 ? 0.5L : 0);
      CHECK(ye(r, j) == Approx(static_cast<double>(ref)).margin(1e-12));
    }
  }
}

TEST_CASE("batch_norm pytorch convention: unbiased running variance, biased normalisation, cumulative average",
          "[nn][batch_norm]") {
  const std::size_t f = 2, rows = 5;
  for (const bool cumulative : {false, true}) {
    CAPTURE(cumulative);
    nn::batch_norm<p_f64> bn(f, {.convention = nn::batch_norm_convention::pytorch, .cumulative_average = cumulative});
    REQUIRE(bn.momentum() == 0.1);
    std::vector<long double> ra_mean(f, 0.0L), ra_var(f, 1.0L);
    for (unsigned step = 0; step < 5; ++step) {
      const auto v = gradcheck::uniform(rows * f, 40 + step, -2.0, 2.0);
      const auto y = bn(tensor_from<double, 2>(v, {rows, f}), nn::mode::train);
      const auto st = reference_stats(v, rows, f);
      const long double w = cumulative ? 1.0L / (step + 1) : 0.1L;
      for (std::size_t j = 0; j < f; ++j) {
        ra_mean[j] = (1 - w) * ra_mean[j] + w * st.mean[j];
        ra_var[j] = (1 - w) * ra_var[j] + w * st.m2[j] / (rows - 1);  // unbiased
        for (std::size_t r = 0; r < rows; ++r) {
          const long double ref = (v[r * f + j] - st.mean[j]) / std::sqrt(st.m2[j] / rows + 1e-5L);  // biased
          CHECK(y(r, j) == Approx(static_cast<double>(ref)).margin(1e-13));
        }
      }
    }
    for (std::size_t j = 0; j < f; ++j) {
      CHECK(bn.running_mean()(j) == Approx(static_cast<double>(ra_mean[j])).epsilon(1e-13));
      CHECK(bn.running_var()(j) == Approx(static_cast<double>(ra_var[j])).epsilon(1e-13));
    }
  }
  // PyTorch's documented update on a hand-computed case (torch.nn.BatchNorm1d(1), one train step from
  // running_mean 0, running_var 1, momentum 0.1): x = [1, 3] has mean 2, biased variance 1, unbiased 2, so
  // running_mean = 0.9 * 0 + 0.1 * 2 = 0.2 and running_var = 0.9 * 1 + 0.1 * 2 = 1.1; the output is
  // (x - 2) / sqrt(1 + 1e-5) = -+0.999995. The flax convention gives 0.02 and 0.99 * 1 + 0.01 * 1 = 1.
  xt::xtensor<double, 2> x13 = {{1.0}, {3.0}};
  nn::batch_norm<p_f64> torch_like(1, {.convention = nn::batch_norm_convention::pytorch});
  const auto y = torch_like(x13, nn::mode::train);
  CHECK(torch_like.running_mean()(0) == Approx(0.2).epsilon(1e-15));
  CHECK(torch_like.running_var()(0) == Approx(1.1).epsilon(1e-15));
  CHECK(y(0, 0) == Approx(-1.0 / std::sqrt(1.00001)).epsilon(1e-15));
  // PyTorch's own output for this case, float32 (torch 1.13.0a0, Debian's python3-torch, printed on
  // 2026-11-29 by `bn = torch.nn.BatchNorm1d(1); y = bn(torch.tensor([[1.0], [3.0]]))`): running_mean
  // 0.20000000298023224, running_var 1.100000023841858, y = -+0.9999949932098389, num_batches_tracked 1.
  // CI does not install torch, so the values are written here rather than computed by it.
  nn::batch_norm<mixprec::policy<float>> torch_f32(1, {.convention = nn::batch_norm_convention::pytorch});
  const auto y32 = torch_f32(xt::xtensor<float, 2>{{1.0F}, {3.0F}}, nn::mode::train);
  CHECK(static_cast<double>(torch_f32.running_mean()(0)) == 0.20000000298023224);
  CHECK(static_cast<double>(torch_f32.running_var()(0)) == 1.100000023841858);
  CHECK(static_cast<double>(y32(0, 0)) == Approx(-0.9999949932098389).epsilon(1e-7));  // within 1 float ulp
  CHECK(static_cast<double>(y32(1, 0)) == Approx(0.9999949932098389).epsilon(1e-7));
  CHECK(torch_f32.batches_tracked() == 1);
  nn::batch_norm<p_f64> flax_like(1);
  (void)flax_like(x13, nn::mode::train);
  CHECK(flax_like.running_mean()(0) == Approx(0.02).epsilon(1e-15));
  CHECK(flax_like.running_var()(0) == Approx(1.0).epsilon(1e-15));
  std::vector<std::string> names;
  torch_like.for_each_buffer([&](std::string_view n, const auto&) { names.emplace_back(n); });
  CHECK(names == std::vector<std::string>{"mean", "var", "num_batches_tracked"});
}

TEMPLATE_TEST_CASE("batch_norm with 16-bit outputs keeps float32 statistics and stays within error_bound",
                   "[nn][batch_norm]", layer_tests::p_bf16, layer_tests::p_f16, layer_tests::p_c_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  STATIC_REQUIRE(std::is_same_v<typename nn::batch_norm<P>::stat_type, float>);
  // 4096 rows of values ~300: in float16 the sum of squares (~4e8) and even x^2 (9e4) overflow 65504.
  const std::size_t rows = 4096, f = 4;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(rows * f);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<double>(static_cast<float>(C(static_cast<float>(300.0 + 20.0 * normal(rng)))));
  }
  nn::batch_norm<P> bn(f);
  const auto x = tensor_from<C, 2>(v, {rows, f});
  typename nn::batch_norm<P>::template saved<C> ctx;
  STATIC_REQUIRE(std::is_same_v<typename decltype(ctx)::stat_type, float>);
  const auto y = bn.forward(x, ctx, nn::mode::train);
  const auto st = reference_stats(v, rows, f);
  const auto bound = nn::error_bound<C>(bn);
  for (std::size_t j = 0; j < f; ++j) {
    const long double sd = std::sqrt(st.m2[j] / rows + 1e-5L);
    double max_abs = 0;
    for (std::size_t r = 0; r < rows; ++r) max_abs = std::max(max_abs, std::abs(v[r * f + j]));
    const double a = max_abs / static_cast<double>(sd);
    CHECK(std::isfinite(static_cast<double>(bn.running_var()(j))));
    CHECK(static_cast<double>(bn.running_var()(j)) ==
          Approx(static_cast<double>(0.99L + 0.01L * st.m2[j] / rows)).epsilon(1e-6));
    for (std::size_t r = 0; r < rows; ++r) {
      const double ref = static_cast<double>((v[r * f + j] - st.mean[j]) / sd);
      const double got = static_cast<double>(y(r, j));
      REQUIRE(std::isfinite(got));
      REQUIRE(std::abs(got - ref) <= bound(a, ref));
    }
  }
}

TEST_CASE("batch_norm normalises float32 columns whose squares overflow float", "[nn][batch_norm]") {
  // +-3e19 + k: d^2 ~ 4e39 > float's max 3.4e38; the layer sums such columns again in float64.
  nn::batch_norm<layer_tests::p_f32> bn(2);
  xt::xtensor<float, 2> x = {{3e19f, 1.0f}, {-3e19f, 2.0f}, {3e19f, 3.0f}, {-3e19f, 4.0f}};
  const auto y = bn(x, nn::mode::train);
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(y(r, 0) == Approx(r % 2 == 0 ? 1.0 : -1.0).epsilon(1e-6));
    CHECK(y(r, 1) == Approx((static_cast<double>(r) - 1.5) / std::sqrt(1.25 + 1e-5)).epsilon(1e-6));
  }
  CHECK(bn.running_mean()(0) == Approx(0.0).margin(1e12));  // mean 0 (spacing of float at 3e19: 2.2e12)
}

TEST_CASE("batch_norm keeps float64 statistics for float64 inputs", "[nn][batch_norm]") {
  // Data 1e8 + k * 2^-20 (exact in double): float32 statistics could not tell the rows apart (spacing 8 at 1e8).
  using P = layer_tests::p_promote;  // params f32, compute promote: float64 input computes in float64
  const std::size_t rows = 4, f = 2;
  std::vector<double> v;
  for (std::size_t i = 0; i < rows * f; ++i) v.push_back(1e8 + static_cast<double>(i / f) * 0x1p-20);
  // Input double: the running statistics hold float64 (batch_norm<P> would hold float32 and refuses a
  // train-mode float64 call at compile time: compile_fail nn_batch_norm_running_dtype).
  nn::batch_norm<P, double> bn(f, {.momentum = 0.0, .epsilon = 0.0});
  STATIC_REQUIRE(std::is_same_v<typename nn::batch_norm<P>::stat_type, float>);
  STATIC_REQUIRE(std::is_same_v<typename nn::batch_norm<P, double>::stat_type, double>);
  typename nn::batch_norm<P, double>::template saved<double> ctx;
  STATIC_REQUIRE(std::is_same_v<typename decltype(ctx)::stat_type, double>);
  const auto y = bn.forward(tensor_from<double, 2>(v, {rows, f}), ctx, nn::mode::train);
  STATIC_REQUIRE(std::is_same_v<decltype(y)::value_type, double>);
  // rows at 0, 1, 2, 3 (x 2^-20): mean 1.5, biased sd sqrt(1.25) (same units; eps 0)
  for (std::size_t r = 0; r < rows; ++r) {
    CHECK(y(r, 0) == Approx((static_cast<double>(r) - 1.5) / std::sqrt(1.25)).margin(1e-9));
  }
  // Momentum 0: the running statistics are the batch's, kept in float64 (float32 would round the mean to 1e8).
  CHECK(bn.running_mean()(0) == 1e8 + 1.5 * 0x1p-20);
  CHECK(bn.running_var()(0) == 1.25 * 0x1p-40);
  const auto z = std::as_const(bn)(tensor_from<double, 2>(v, {rows, f}), nn::mode::eval);
  for (std::size_t r = 0; r < rows; ++r) {
    CHECK(z(r, 1) == Approx((static_cast<double>(r) - 1.5) / std::sqrt(1.25)).margin(1e-9));
  }
  nn::batch_norm<p_f64> b64(f);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(b64.running_mean())>::value_type, double>);
}

TEST_CASE("batch_norm of complex input: complex mean, variance mean(|x - mean|^2), complex running mean",
          "[nn][batch_norm]") {
  // FLIP 1777 / Flax: statistics of complex inputs with the conjugate; float64 reference written here.
  using P = layer_tests::p_promote;
  using cf = std::complex<float>;
  const std::size_t rows = 13, f = 3;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto x = xt::xtensor<cf, 2>::from_shape({rows, f});
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < f; ++j) {
      x(r, j) = cf(static_cast<float>(3.0 * j + normal(rng)), static_cast<float>(-2.0 + 0.5 * normal(rng)));
    }
  }
  const double momentum = 0.9;
  nn::batch_norm<P, cf> bn(f, {.momentum = momentum});
  STATIC_REQUIRE(std::is_same_v<nn::batch_norm<P, cf>::stat_type, cf>);
  STATIC_REQUIRE(std::is_same_v<nn::batch_norm<P, cf>::var_type, float>);
  std::vector<std::complex<double>> ra(f, 0.0);
  std::vector<double> rv(f, 1.0);
  for (int step = 0; step < 3; ++step) {
    auto xs = x;
    for (auto& v : xs) v *= cf(1.0F + 0.25F * static_cast<float>(step), 0.0F);  // a different batch per step
    const auto y = bn(xs, nn::mode::train);
    STATIC_REQUIRE(std::is_same_v<decltype(y)::value_type, cf>);
    for (std::size_t j = 0; j < f; ++j) {
      std::complex<double> mean = 0;
      for (std::size_t r = 0; r < rows; ++r) mean += std::complex<double>(xs(r, j));
      mean /= static_cast<double>(rows);
      double var = 0;
      for (std::size_t r = 0; r < rows; ++r) var += std::norm(std::complex<double>(xs(r, j)) - mean);
      var /= static_cast<double>(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        const std::complex<double> want = (std::complex<double>(xs(r, j)) - mean) / std::sqrt(var + 1e-5);
        CHECK(std::abs(std::complex<double>(y(r, j)) - want) < 1e-5);
      }
      ra[j] = momentum * ra[j] + (1.0 - momentum) * mean;  // flax: biased variance into the running one
      rv[j] = momentum * rv[j] + (1.0 - momentum) * var;
    }
  }
  for (std::size_t j = 0; j < f; ++j) {
    CHECK(std::abs(std::complex<double>(bn.running_mean()(j)) - ra[j]) < 1e-5 * (1.0 + std::abs(ra[j])));
    CHECK(static_cast<double>(bn.running_var()(j)) == Approx(rv[j]).epsilon(1e-5));
    CHECK(bn.running_mean()(j).imag() != 0.0F);  // the imaginary part of the mean is kept
  }
  // Eval: the running statistics, on a const layer.
  const auto z = std::as_const(bn)(x, nn::mode::eval);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < f; ++j) {
      const std::complex<double> want = (std::complex<double>(x(r, j)) - ra[j]) / std::sqrt(rv[j] + 1e-5);
      CHECK(std::abs(std::complex<double>(z(r, j)) - want) < 1e-4);
    }
  }
  // Two synchronised workers (half the rows each) give one worker's complex statistics.
  nn::batch_norm<P, cf> one(f), two(f);
  const auto y1 = one(x, nn::mode::train);
  nn::batch_sync group(2);
  const std::size_t half = 6;
  auto top = xt::xtensor<cf, 2>::from_shape({half, f});
  auto bottom = xt::xtensor<cf, 2>::from_shape({rows - half, f});
  std::copy(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(half * f), top.begin());
  std::copy(x.begin() + static_cast<std::ptrdiff_t>(half * f), x.end(), bottom.begin());
  xt::xtensor<cf, 2> y_top, y_bottom;
  std::thread other([&] { y_bottom = two(bottom, nn::mode::train, {&group, 1}); });
  y_top = two(top, nn::mode::train, {&group, 0});
  other.join();
  for (std::size_t j = 0; j < f; ++j) {
    CHECK(std::abs(std::complex<double>(two.running_mean()(j)) - std::complex<double>(one.running_mean()(j))) < 1e-6);
    CHECK(two.running_var()(j) == Approx(one.running_var()(j)).epsilon(1e-6));
    for (std::size_t r = 0; r < half; ++r) CHECK(std::abs(std::complex<double>(y_top(r, j) - y1(r, j))) < 1e-6);
  }
}

TEST_CASE("batch_norm eval leaves the running statistics bit-identical and is const and thread-safe",
          "[nn][batch_norm]") {
  const std::size_t f = 5;
  nn::batch_norm<layer_tests::p_c_bf16> bn(f);
  (void)bn(tensor_from<float, 2>(gradcheck::uniform(8 * f, 50), {8, f}), nn::mode::train);
  const auto mean0 = bn.running_mean();
  const auto var0 = bn.running_var();
  const auto x = tensor_from<float, 2>(gradcheck::uniform(6 * f, 51, -4.0, 4.0), {6, f});
  const auto y_ref = bn(x, nn::mode::eval);  // the non-const call in eval mode changes nothing either
  const auto& cbn = bn;
  std::vector<xt::xtensor<float, 2>> outs(2);
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 20; ++i) outs[t] = cbn(x, nn::mode::eval);
      });
    }
  }
  CHECK(std::memcmp(mean0.data(), bn.running_mean().data(), f * sizeof(float)) == 0);
  CHECK(std::memcmp(var0.data(), bn.running_var().data(), f * sizeof(float)) == 0);
  CHECK(bn.batches_tracked() == 1);
  CHECK(bool(outs[0] == y_ref));
  CHECK(bool(outs[1] == y_ref));
  CHECK_THROWS_WITH(cbn(x, nn::mode::train), Catch::Contains("non-const layer"));
}

TEST_CASE("batch_norm forward_into writes the bits of operator() into a caller's array", "[nn][batch_norm]") {
  const std::size_t f = 6;
  nn::batch_norm<layer_tests::p_bf16> a(f), b(f);
  const auto x = tensor_from<bfloat16, 3>(gradcheck::uniform(2 * 5 * f, 80, -3.0, 3.0), {2, 5, f});
  auto out = xt::xtensor<bfloat16, 3>::from_shape({2, 5, f});
  for (const nn::mode m : {nn::mode::train, nn::mode::eval, nn::mode::train}) {
    const auto y = a(x, m);
    b.forward_into(out, x, m);
    CHECK(std::memcmp(y.data(), out.data(), y.size() * sizeof(bfloat16)) == 0);
  }
  CHECK(std::memcmp(a.running_var().data(), b.running_var().data(), f * sizeof(float)) == 0);
  std::as_const(b).forward_into(out, x, nn::mode::eval);
  auto wrong = xt::xtensor<bfloat16, 3>::from_shape({2, 4, f});
  CHECK_THROWS_WITH(b.forward_into(wrong, x, nn::mode::train),
                    Catch::Contains("out has shape [2, 4, 6]") && Catch::Contains("x has shape [2, 5, 6]"));
}

TEST_CASE("batch_norm of a batch of one row is finite under flax and an error under pytorch", "[nn][batch_norm]") {
  nn::batch_norm<layer_tests::p_f32> bn(3);
  bn.bias()->data()[1] = 0.25f;
  xt::xtensor<float, 2> one = {{1.0f, -7.0f, 1e30f}};
  const auto y = bn(one, nn::mode::train);
  CHECK(y(0, 0) == 0.0f);
  CHECK(y(0, 1) == 0.25f);
  CHECK(y(0, 2) == 0.0f);
  nn::batch_norm<layer_tests::p_f32> torch_like(3, {.convention = nn::batch_norm_convention::pytorch});
  CHECK_THROWS_WITH(torch_like(one, nn::mode::train),
                    Catch::Contains("at least 2 rows") && Catch::Contains("got 1") && Catch::Contains("[1, 3]"));
  xt::xtensor<float, 2> none = xt::xtensor<float, 2>::from_shape({0, 3});
  CHECK_THROWS_WITH(bn(none, nn::mode::train), Catch::Contains("at least 1 row") && Catch::Contains("got 0"));
}

TEST_CASE("batch_norm rejects zero features, rank-1 inputs, wrong features and bad options", "[nn][batch_norm]") {
  CHECK_THROWS_WITH(nn::batch_norm<p_f64>(0), Catch::Contains("features is 0"));
  nn::batch_norm<p_f64> bn(4);
  xt::xtensor<double, 1> rank1 = xt::zeros<double>({4});
  CHECK_THROWS_WITH(bn(rank1, nn::mode::train), Catch::Contains("shape [4] (rank 1)") && Catch::Contains("rank >= 2"));
  xt::xtensor<double, 2> wrong = xt::zeros<double>({2, 5});
  CHECK_THROWS_WITH(bn(wrong, nn::mode::eval), Catch::Contains("5 features") && Catch::Contains("expects 4"));
  xt::xarray<double> scalar = 3.0;  // rank 0
  CHECK_THROWS_WITH(bn(scalar, nn::mode::train), Catch::Contains("shape [] (rank 0)"));
  CHECK_THROWS_WITH(nn::batch_norm<p_f64>(4, {.momentum = 1.5}), Catch::Contains("momentum is 1.5"));
  CHECK_THROWS_WITH(nn::batch_norm<p_f64>(4, {.epsilon = -1.0}), Catch::Contains("epsilon is -1"));
  CHECK_THROWS_WITH(nn::batch_norm<p_f64>(4, {.cumulative_average = true}), Catch::Contains("pytorch"));
  CHECK_THROWS_WITH(nn::batch_sync(0), Catch::Contains("got 0"));
}

TEST_CASE("batch_norm backward through the batch statistics matches float64 central differences",
          "[nn][batch_norm][backward]") {
  const std::size_t f = 4;
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    const bool scale = variant != 2, bias = variant == 0;
    nn::batch_norm<p_f64> layer(f, {.epsilon = 1e-3, .use_scale = scale, .use_bias = bias});
    gradcheck::fill_parameters(layer, 60 + static_cast<unsigned>(variant), 0.5, 1.5);
    auto x = tensor_from<double, 3>(gradcheck::uniform(3 * 2 * f, 61, -2.0, 3.0), {3, 2, f});
    const auto w = gradcheck::uniform(x.size(), 62);
    for (const nn::mode m : {nn::mode::train, nn::mode::eval}) {
      nn::batch_norm<p_f64>::saved<double> ctx;
      const auto y = layer.forward(x, ctx, m);
      REQUIRE(bool(y == layer(x, m)));
      auto g = layer.zero_gradients();
      const auto dx = layer.backward(ctx, tensor_from<double, 3>(w, {3, 2, f}), g);
      auto loss = [&] { return gradcheck::weighted_sum(layer(x, m), w); };
      gradcheck::require_norm_gradients(layer, x, dx, g, loss, scale, bias);
    }
  }
}

TEMPLATE_TEST_CASE("batch_norm backward under a low-precision policy matches the float64 VJP",
                   "[nn][batch_norm][backward]", layer_tests::p_c_bf16, layer_tests::p_c_f16, layer_tests::p_bf16) {
  using P = TestType;
  using C = typename P::compute_type;
  const std::size_t rows = 32, f = 8;
  const auto xv = gradcheck::rounded_to<C>(gradcheck::uniform(rows * f, 63));
  const auto sv = gradcheck::rounded_to<C>(gradcheck::uniform(f, 64, 0.5, 1.5));
  const auto wv = gradcheck::uniform(rows * f, 65);
  nn::batch_norm<P> low(f);
  nn::batch_norm<p_f64> ref(f);
  for (std::size_t j = 0; j < f; ++j) {
    low.scale()->data()[j] = static_cast<typename P::param_type>(static_cast<float>(sv[j]));
    ref.scale()->data()[j] = sv[j];
  }
  typename nn::batch_norm<P>::template saved<float> ctx;
  (void)low.forward(tensor_from<float, 2>(xv, {rows, f}), ctx, nn::mode::train);
  auto g = low.zero_gradients();
  const auto dx = low.backward(ctx, tensor_from<float, 2>(wv, {rows, f}), g);
  nn::batch_norm<p_f64>::saved<double> rctx;
  (void)ref.forward(tensor_from<double, 2>(xv, {rows, f}), rctx, nn::mode::train);
  auto rg = ref.zero_gradients();
  const auto rdx = ref.backward(rctx, tensor_from<double, 2>(wv, {rows, f}), rg);
  // Inputs and scale exact in C; the rest is float32 arithmetic and dx's rounding to float (dy is float:
  // rounded to S = float, not to C, as layer_norm's backward): 64 u_f32 relative, as layer_norm's test.
  const double u32 = layer_tests::unit_roundoff<float>();
  CHECK(gradcheck::relative_l2(std::span<const float>(dx.data(), dx.size()), flat_values(rdx)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.scale->data(), f), flat_values(*rg.scale)) <= 64 * u32);
  CHECK(gradcheck::relative_l2(std::span<const float>(g.bias->data(), f), flat_values(*rg.bias)) <= 64 * u32);
}

TEST_CASE("two synchronised workers give the statistics and gradients of one worker over the whole batch",
          "[nn][batch_norm][threads]") {
  const std::size_t f = 6, rows = 11, split = 7;  // worker 0: rows 0-6, worker 1: rows 7-10
  const auto xv = gradcheck::uniform(rows * f, 70, -1.0, 5.0);
  const auto wv = gradcheck::uniform(rows * f, 71);
  nn::batch_norm<p_f64> one(f, {.convention = nn::batch_norm_convention::pytorch});
  one.scale()->data()[2] = 3.0;
  nn::batch_norm<p_f64> two = one;
  nn::batch_norm<p_f64>::saved<double> ctx;
  const auto y = one.forward(tensor_from<double, 2>(xv, {rows, f}), ctx, nn::mode::train);
  auto g = one.zero_gradients();
  const auto dx = one.backward(ctx, tensor_from<double, 2>(wv, {rows, f}), g);

  nn::batch_sync sync(2);
  std::vector<double> y2(rows * f), dx2(rows * f);
  std::vector<nn::batch_norm<p_f64>::gradients> g2{two.zero_gradients(), two.zero_gradients()};
  auto worker = [&](std::size_t w) {
    const std::size_t begin = w == 0 ? 0 : split, end = w == 0 ? split : rows;
    const std::vector<double> xs(xv.begin() + begin * f, xv.begin() + end * f);
    const std::vector<double> ws(wv.begin() + begin * f, wv.begin() + end * f);
    nn::batch_norm<p_f64>::saved<double> c;
    const auto yw = two.forward(tensor_from<double, 2>(xs, {end - begin, f}), c, nn::mode::train, {&sync, w});
    const auto dxw = two.backward(c, tensor_from<double, 2>(ws, {end - begin, f}), g2[w], {&sync, w});
    std::copy(yw.begin(), yw.end(), y2.begin() + static_cast<std::ptrdiff_t>(begin * f));
    std::copy(dxw.begin(), dxw.end(), dx2.begin() + static_cast<std::ptrdiff_t>(begin * f));
  };
  {
    std::jthread t1(worker, 1);
    worker(0);
  }
  for (std::size_t i = 0; i < rows * f; ++i) {
    CHECK(y2[i] == Approx(y.data()[i]).margin(1e-13));
    CHECK(dx2[i] == Approx(dx.data()[i]).margin(1e-13));
  }
  for (std::size_t j = 0; j < f; ++j) {
    CHECK(two.running_mean()(j) == Approx(one.running_mean()(j)).epsilon(1e-14));
    CHECK(two.running_var()(j) == Approx(one.running_var()(j)).epsilon(1e-14));  // unbiased over 11 rows
    CHECK((*g2[0].scale)(j) + (*g2[1].scale)(j) == Approx((*g.scale)(j)).margin(1e-13));
    CHECK((*g2[0].bias)(j) + (*g2[1].bias)(j) == Approx((*g.bias)(j)).margin(1e-13));
  }
  CHECK(two.batches_tracked() == 1);  // updated once (by worker 0), not once per worker

  // A worker whose input is rejected still meets the other, and both throw its error.
  std::vector<std::string> errors(2);
  auto bad = [&](std::size_t w) {
    try {
      const std::size_t cols = w == 1 ? f + 1 : f;
      xt::xtensor<double, 2> xs = xt::ones<double>(std::array<std::size_t, 2>{3, cols});
      (void)two(xs, nn::mode::train, {&sync, w});
    } catch (const std::invalid_argument& e) {
      errors[w] = e.what();
    }
  };
  {
    std::jthread t1(bad, 1);
    bad(0);
  }
  CHECK_THAT(errors[0], Catch::Contains("worker 1") && Catch::Contains("7 features"));
  CHECK(errors[1] == errors[0]);
}

TEST_CASE("batch_norm walks parameters and buffers apart, and has a from_scope form", "[nn][batch_norm]") {
  nn::batch_norm<layer_tests::p_c_bf16> bn(3);
  std::vector<std::string> params, buffers;
  bn.for_each_parameter([&](std::string_view n, auto&) { params.emplace_back(n); });
  bn.for_each_buffer([&](std::string_view n, auto& t) {
    buffers.emplace_back(n);
    STATIC_REQUIRE(std::is_same_v<typename std::remove_cvref_t<decltype(t)>::value_type, float>);
  });
  CHECK(params == std::vector<std::string>{"scale", "bias"});
  CHECK(buffers == std::vector<std::string>{"mean", "var"});
  // A checkpoint load writes the buffers; eval then uses them.
  bn.for_each_buffer([&](std::string_view n, auto& t) {
    for (auto& v : t) v = n == "mean" ? 1.0f : 4.0f;
  });
  xt::xtensor<float, 2> x = {{3.0f, 1.0f, -1.0f}};
  const auto y = std::as_const(bn)(x, nn::mode::eval);
  CHECK(y(0, 0) == Approx(2.0 / std::sqrt(4.00001)).epsilon(1e-6));
  CHECK(y(0, 2) == Approx(-2.0 / std::sqrt(4.00001)).epsilon(1e-6));

  using scoped = mixprec::from_scope<layer_tests::p_f32, layer_tests::p_c_bf16>;
  const mixprec::policy_scope scope(layer_tests::p_c_bf16{});
  nn::batch_norm<scoped> sbn(3);
  xt::xtensor<float, 2> batch = {{1.0f, 2.0f, 3.0f}, {3.0f, 2.0f, 1.0f}};
  const auto ys = sbn(batch, nn::mode::train);
  CHECK(ys(0, 0) == Approx(-1.0 / std::sqrt(1.00001)).epsilon(1e-6));
  std::vector<double> means;
  sbn.for_each_buffer([&](std::string_view n, const auto& t) {
    if (n == "mean") means.assign(t.begin(), t.end());
  });
  REQUIRE(means.size() == 3);
  for (const double m : means) CHECK(m == Approx(0.02).epsilon(1e-6));  // flax: 0.99 * 0 + 0.01 * 2
}

}  // namespace batch_norm_test
