// Tests of the norm row kernels (kernels/detail/norm_rows.hpp, norm.hpp at 8 and 16 lanes) through nn::layer_norm
// and nn::rms_norm: every row length (whole vectors and tails), every float/bfloat16/float16 mix,
// against long double references written here; rows the SIMD kernels decline (Inf, NaN, extremes)
// take the portable path bit for bit; threads and forward_into change no bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/threads.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/rms_norm.hpp"
#include "mixprec/policies/policy.hpp"
#include "support/element_bits.hpp"

namespace norm_rows_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace nn = mixprec::nn;

namespace {

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}

/// Unit roundoff of a format from its digits: 2^-digits.
template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

/// Half the spacing of O's subnormals: the absolute error of rounding a value below O's normal range.
template <class O>
double half_subnormal() {
  return 0.5 * to_double(std::numeric_limits<O>::denorm_min());
}

using test_support::element_bits;

/// `rows` × `f` values, normal with the given mean and spread.
template <class T>
xt::xtensor<T, 2> random_rows(std::size_t rows, std::size_t f, double mean, double spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(mean, spread);
  auto x = xt::xtensor<T, 2>::from_shape({rows, f});
  for (auto& v : x) v = static_cast<T>(normal(rng));
  return x;
}

xt::xtensor<double, 1> random_vector(std::size_t f, double mean, double spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(mean, spread);
  auto v = xt::xtensor<double, 1>::from_shape({f});
  for (auto& e : v) e = normal(rng);
  return v;
}

// (input T, policy): float, bfloat16 and float16 inputs, compute and outputs.
using norm_cases =
    std::tuple<std::tuple<float, mixprec::policy<float>>, std::tuple<float, mixprec::policy<float, bfloat16, bfloat16>>,
               std::tuple<float, mixprec::policy<float, float16, float>>,
               std::tuple<bfloat16, mixprec::policy<bfloat16>>, std::tuple<float16, mixprec::policy<float16>>,
               std::tuple<bfloat16, mixprec::policy<float, float, float16>>>;

// Whole vectors and tails of the AVX2 rows (8 lanes, 16 per step) and of the AVX-512 rows (16 lanes,
// 64 per step of the statistics pass).
constexpr std::size_t lengths[] = {1, 3, 8, 9, 15, 16, 17, 31, 47, 64, 80, 95, 128, 129, 333, 1027};

/// The levels this CPU runs, each with its own norm rows (avx512bf16 runs the avx512 ones).
std::vector<mixprec::isa> levels() {
  std::vector<mixprec::isa> out;
  for (const mixprec::isa level : mixprec::all_isas) {
    if (level <= mixprec::detected_isa() && level != mixprec::isa::avx512bf16) out.push_back(level);
  }
  return out;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("layer_norm rows of every length match a long double reference on every level",
                        "[kernels][norm_rows]", norm_cases) {
  using T = std::tuple_element_t<0, TestType>;
  using P = std::tuple_element_t<1, TestType>;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  for (const mixprec::isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    for (const std::size_t f : lengths) {
      // An offset of 40 spreads (values ~ 40 +- 1): the mean's rounding must be corrected.
      const auto x = random_rows<T>(3, f, 40.0, 1.0, static_cast<unsigned>(f));
      const auto ln =
          nn::layer_norm<P>::from_params(random_vector(f, 1.0, 0.5, 7), random_vector(f, 0.0, 0.3, 8), 1e-5);
      const auto y = ln(x);
      for (std::size_t r = 0; r < 3; ++r) {
        std::vector<long double> row(f);
        for (std::size_t j = 0; j < f; ++j) row[j] = to_double(static_cast<C>(static_cast<float>(x(r, j))));
        long double mean = 0;
        for (const long double v : row) mean += v;
        mean /= static_cast<long double>(f);
        long double var = 0;
        for (const long double v : row) var += (v - mean) * (v - mean);
        var /= static_cast<long double>(f);
        const long double inv = 1.0L / std::sqrt(var + 1e-5L);
        for (std::size_t j = 0; j < f; ++j) {
          const double s = to_double(static_cast<C>(static_cast<float>(ln.scale()->data()[j])));
          const double b = to_double(static_cast<C>(static_cast<float>(ln.bias()->data()[j])));
          const auto xhat = static_cast<double>((row[j] - mean) * inv);
          const double ref = xhat * s + b;
          // float32 statistics and normalisation, about 8 roundings of s·xhat and b (the deviation
          // is accurate to the spread, not the offset, thanks to the mean's correction), then O's rounding.
          const double err = 8 * unit_roundoff<float>() * (std::abs(s * xhat) + std::abs(s) + std::abs(b));
          const double tol = err + unit_roundoff<O>() * (std::abs(ref) + err) + half_subnormal<O>();
          const double got = to_double(y(r, j));
          INFO("level " << level << ", " << f << " features, row " << r << ", feature " << j << ": got " << got
                        << ", reference " << ref);
          REQUIRE(std::abs(got - ref) <= tol);
        }
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("rms_norm rows of every length, plain and fused, match a long double reference on every level",
                        "[kernels][norm_rows]", norm_cases) {
  using T = std::tuple_element_t<0, TestType>;
  using P = std::tuple_element_t<1, TestType>;
  using C = nn::compute_t<P, T>;
  using O = nn::output_t<P, T>;
  for (const mixprec::isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    for (const std::size_t f : lengths) {
      const auto x = random_rows<T>(3, f, 0.5, 2.0, static_cast<unsigned>(f) + 1);
      const auto residual = random_rows<float>(3, f, 0.0, 3.0, static_cast<unsigned>(f) + 2);
      const nn::rms_norm<P> norm =
          nn::rms_norm<P>::from_scale(random_vector(f, 1.0, 0.5, 9), {.epsilon = 1e-5, .residual_scale = 0.5});
      const auto y = norm(x);
      const auto [h, stream] = norm(x, residual);
      for (std::size_t r = 0; r < 3; ++r) {
        for (const bool fused : {false, true}) {
          std::vector<long double> row(f);
          for (std::size_t j = 0; j < f; ++j) {
            // Plain: x rounded to C. Fused: the stream residual + x, one float32 addition.
            row[j] = fused ? static_cast<long double>(residual(r, j) + static_cast<float>(x(r, j)))
                           : to_double(static_cast<C>(static_cast<float>(x(r, j))));
          }
          long double ms = 0;
          for (const long double v : row) ms += v * v;
          const long double inv = 1.0L / std::sqrt(ms / static_cast<long double>(f) + 1e-5L);
          for (std::size_t j = 0; j < f; ++j) {
            const double s = static_cast<double>(static_cast<float>(norm.scale()->data()[j]));
            const auto ref = static_cast<double>(row[j] * inv * s);
            const double err = 6 * unit_roundoff<float>() * std::abs(ref);
            const double tol = err + unit_roundoff<O>() * (std::abs(ref) + err) + half_subnormal<O>();
            const double got = to_double(fused ? h(r, j) : y(r, j));
            INFO("level " << level << (fused ? ", fused, " : ", plain, ") << f << " features, row " << r << ", feature "
                          << j << ": got " << got << ", reference " << ref);
            REQUIRE(std::abs(got - ref) <= tol);
            if (fused) {
              // The stream carried forward: (residual + x) * 0.5, exactly.
              REQUIRE(stream(r, j) == static_cast<float>(row[j]) * 0.5F);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("rows the SIMD kernels decline (Inf, NaN, rescaled extremes) give the portable path's bits",
          "[kernels][norm_rows]") {
  using P = mixprec::policy<float, float, bfloat16>;
  const std::size_t f = 37;
  auto x = random_rows<float>(8, f, 0.0, 1.0, 3);
  x(1, 5) = std::numeric_limits<float>::quiet_NaN();
  x(2, 0) = std::numeric_limits<float>::infinity();
  for (std::size_t j = 0; j < f; ++j) {
    x(3, j) *= 3e19F;   // squares above float's max: rescaled
    x(4, j) *= 1e-30F;  // squares below float's smallest normal: rescaled
    x(5, j) *= 1e-45F;  // subnormal row, eps dominates
  }
  const nn::layer_norm<P> ln(f, nn::layer_norm_options{.epsilon = 1e-6});
  const nn::rms_norm<P> rms(f);
  const auto same_bits = [&](const auto& a, const auto& b) {
    REQUIRE(a.shape() == b.shape());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("element " << i << " (row " << i / f << ")");
      REQUIRE(element_bits(a.data()[i]) == element_bits(b.data()[i]));
    }
  };
  xt::xtensor<bfloat16, 2> ln_portable;
  xt::xtensor<bfloat16, 2> rms_portable;
  {
    const mixprec::isa_limit_scope portable(mixprec::isa::portable);
    ln_portable = ln(x);
    rms_portable = rms(x);
  }
  const auto ln_here = ln(x);
  const auto rms_here = rms(x);
  for (const std::size_t r : {1, 2, 3, 4, 5}) {
    for (std::size_t j = 0; j < f; ++j) {
      INFO("row " << r << ", feature " << j);
      REQUIRE(element_bits(ln_here(r, j)) == element_bits(ln_portable(r, j)));
      REQUIRE(element_bits(rms_here(r, j)) == element_bits(rms_portable(r, j)));
    }
  }
  // The extreme rows still normalise to finite values; the NaN and Inf rows propagate NaN.
  REQUIRE(std::isfinite(static_cast<float>(ln_here(3, 0))));
  REQUIRE(std::isfinite(static_cast<float>(rms_here(4, 0))));
  REQUIRE(std::isnan(static_cast<float>(ln_here(1, 0))));
  same_bits(ln(x), ln_here);

  // The fused form with those rows, out of place and with the stream updated in place: the same
  // output and stream bits as the portable path (a declined row's stream is not added to twice).
  const nn::rms_norm<P> fused(f, nn::rms_norm_options{.residual_scale = 0.5});
  const auto residual = random_rows<float>(8, f, 0.0, 1.0, 4);
  xt::xtensor<bfloat16, 2> out_portable;
  xt::xtensor<float, 2> stream_portable;
  {
    const mixprec::isa_limit_scope portable(mixprec::isa::portable);
    auto r = fused(x, residual);
    out_portable = r.x;
    stream_portable = r.residual;
  }
  auto out = xt::xtensor<bfloat16, 2>::from_shape({8, f});
  auto stream = residual;
  fused.forward_into(out, stream, x, stream);
  same_bits(out, out_portable);
  same_bits(stream, stream_portable);

  // A signalling NaN of a bfloat16 input is quieted in the stream, as round_to<float> quiets it.
  using Pb = mixprec::policy<bfloat16>;
  auto xb = xt::xtensor<bfloat16, 2>::from_shape({1, 9});
  xb.fill(bfloat16(1.0F));
  xb(0, 2) = bfloat16::from_bits(0x7F81);
  const nn::rms_norm<Pb> first(9);
  const auto started = first(xb, nn::no_residual);
  REQUIRE(std::bit_cast<std::uint32_t>(started.residual(0, 2)) == 0x7FC10000U);
}

TEST_CASE("outputs larger than the last-level cache (non-temporal stores) have the bits of small calls, on every level",
          "[kernels][norm_rows]") {
  // Rows of 4099 elements and 34 MB of output, above the 32 MiB at which the rows stream their stores
  // (float: 2100 rows; bfloat16 and float16: 4200); odd rows start unaligned, so the aligned-store head
  // is taken too.
  const std::size_t f = 4099;
  const auto check = [&]<class T, class P>(std::size_t rows) {
    const auto x = random_rows<T>(rows, f, 0.5, 1.5, 17);
    const auto ln = nn::layer_norm<P>::from_params(random_vector(f, 1.0, 0.2, 18), random_vector(f, 0.0, 0.2, 19));
    const nn::rms_norm<P> rms = nn::rms_norm<P>::from_scale(random_vector(f, 1.0, 0.2, 20));
    for (const mixprec::isa level : levels()) {
      const mixprec::isa_limit_scope limit(level);
      const auto big_ln = ln(x);
      const auto big_rms = rms(x);
      for (const std::size_t r : {std::size_t{0}, std::size_t{1}, std::size_t{777}, rows - 1}) {
        auto row = xt::xtensor<T, 2>::from_shape({1, f});
        std::copy_n(x.data() + r * f, f, row.data());
        const auto small_ln = ln(row);
        const auto small_rms = rms(row);
        for (std::size_t j = 0; j < f; ++j) {
          INFO("level " << level << ", row " << r << ", feature " << j);
          REQUIRE(element_bits(big_ln(r, j)) == element_bits(small_ln(0, j)));
          REQUIRE(element_bits(big_rms(r, j)) == element_bits(small_rms(0, j)));
        }
      }
    }
  };
  check.template operator()<float, mixprec::policy<float>>(2100);
  check.template operator()<bfloat16, mixprec::policy<bfloat16>>(4200);
  check.template operator()<float16, mixprec::policy<float16>>(4200);
}

TEST_CASE("threads and forward_into change no bit of a norm, and the fused stream may be updated in place",
          "[kernels][norm_rows]") {
  using P = mixprec::policy<float, bfloat16, bfloat16>;
  const std::size_t f = 1000;
  const std::size_t rows = 160;  // 160 000 elements: split over the threads
  const auto x = random_rows<float>(rows, f, 1.0, 2.0, 11);
  auto residual = random_rows<float>(rows, f, 0.0, 1.0, 12);
  const auto ln = nn::layer_norm<P>::from_params(random_vector(f, 1.0, 0.2, 13), random_vector(f, 0.0, 0.2, 14));
  const nn::rms_norm<P> rms = nn::rms_norm<P>::from_scale(random_vector(f, 1.0, 0.2, 15), {.residual_scale = 0.25});
  const auto equal_bits = [](const auto& a, const auto& b) {
    REQUIRE(a.shape() == b.shape());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("element " << i);
      REQUIRE(element_bits(a.data()[i]) == element_bits(b.data()[i]));
    }
  };
  const std::size_t before = mixprec::set_num_threads(1);
  const auto ln_one = ln(x);
  const auto rms_one = rms(x);
  const auto fused_one = rms(x, residual);
  mixprec::set_num_threads(2);
  equal_bits(ln(x), ln_one);
  equal_bits(rms(x), rms_one);
  const auto fused_two = rms(x, residual);
  equal_bits(fused_two.x, fused_one.x);
  equal_bits(fused_two.residual, fused_one.residual);

  auto out = xt::xtensor<bfloat16, 2>::from_shape({rows, f});
  ln.forward_into(out, x);
  equal_bits(out, ln_one);
  rms.forward_into(out, x);
  equal_bits(out, rms_one);
  rms.forward_into(out, residual, x, residual);  // the stream updated in place
  equal_bits(out, fused_one.x);
  equal_bits(residual, fused_one.residual);
  mixprec::set_num_threads(before);

  auto wrong = xt::xtensor<bfloat16, 2>::from_shape({rows, f + 1});
  REQUIRE_THROWS_WITH(
      ln.forward_into(wrong, x),
      Catch::Contains("layer_norm::forward_into: out has shape [160, 1001] but x has shape [160, 1000]"));
  auto stream = xt::xtensor<float, 2>::from_shape({rows - 1, f});
  REQUIRE_THROWS_WITH(rms.forward_into(out, stream, x, nn::no_residual),
                      Catch::Contains("new_residual has shape [159, 1000] but x has shape [160, 1000]"));
}

}  // namespace norm_rows_test
