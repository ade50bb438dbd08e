// Tests of kernels/softmax.hpp (direct and online softmax) against long double references written
// here from the definition softmax(x)_j = e^(x_j) / sum_t e^(x_t), evaluated with the maximum subtracted.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/softmax.hpp"

namespace softmax_test {

using mixprec::bfloat16;
using mixprec::float16;
namespace kernels = mixprec::kernels;

namespace {

using ld = long double;

template <class T>
double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

/// softmax of `x` in long double (masked -Inf entries get 0; all -Inf gives zeros, by our convention).
std::vector<ld> ref_softmax(const std::vector<double>& x) {
  ld m = -std::numeric_limits<ld>::infinity();
  for (double v : x) m = std::max<ld>(m, v);
  std::vector<ld> p(x.size(), 0.0L);
  if (m == -std::numeric_limits<ld>::infinity()) return p;
  ld l = 0.0L;
  for (std::size_t j = 0; j < x.size(); ++j) l += std::exp(static_cast<ld>(x[j]) - m);
  for (std::size_t j = 0; j < x.size(); ++j) p[j] = std::exp(static_cast<ld>(x[j]) - m) / l;
  return p;
}

template <class T>
std::vector<T> random_scores(std::size_t n, double spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, spread);
  std::vector<T> x(n);
  for (auto& v : x) v = static_cast<T>(normal(rng));
  return x;
}

}  // namespace

TEST_CASE("softmax of {1, 2, 3} is {0.0900306, 0.2447285, 0.6652410}", "[kernels][softmax]") {
  // e^k / (e + e^2 + e^3) for k = 1, 2, 3, evaluated to 30 digits with Python's decimal module
  // (independently of this library).
  const std::vector<double> x{1.0, 2.0, 3.0};
  std::vector<double> p(3);
  kernels::softmax(x, p);
  CHECK_THAT(p[0], Catch::Matchers::WithinRel(0.09003057317038046, 1e-15));
  CHECK_THAT(p[1], Catch::Matchers::WithinRel(0.24472847105479765, 1e-15));
  CHECK_THAT(p[2], Catch::Matchers::WithinRel(0.66524095577482189, 1e-15));
  std::vector<float> pf(3);
  kernels::softmax(std::vector<float>{1.0f, 2.0f, 3.0f}, pf);
  CHECK_THAT(pf[2], Catch::Matchers::WithinULP(0.66524095577482189f, 2));
}

TEMPLATE_TEST_CASE("softmax is computed in opmath and rounded once to the output type", "[kernels][softmax]", float,
                   double, bfloat16, float16) {
  using T = TestType;
  using A = kernels::softmax_opmath_t<T>;
  STATIC_REQUIRE(std::is_same_v<A, std::conditional_t<std::is_same_v<T, double>, double, float>>);
  // Error of the opmath evaluation, to first order: x_j - m is exact for x_j >= m / 2 (Sterbenz) and
  // otherwise one rounding, amplified by exp into |x_j - m| u, in the numerator and, weighted by the
  // probabilities, in the sum (Σ_t p_t |x_t - m| u); exp within 1 ulp (2u relative), in the numerator
  // and in the sum. The portable rows: the compensated sum about 2u, the division u. The SIMD rows
  // (float opmath): float32 lane sums of 4 values 3u, the sum rounded to float u, 1 / sum u, the
  // product u. So (|x_j - m| + Σ_t p_t |x_t - m| + 10) u_op relative bounds both. Then one rounding to
  // the output type (u_out).
  for (std::size_t n : {1u, 2u, 7u, 64u, 1000u, 4099u}) {
    const auto x = random_scores<T>(n, 3.0, static_cast<unsigned>(n));
    std::vector<double> xd(n);
    for (std::size_t j = 0; j < n; ++j) xd[j] = static_cast<double>(x[j]);
    const auto ref = ref_softmax(xd);
    double m = -1e300;
    for (double v : xd) m = std::max(m, v);
    double weighted_spread = 0.0;  // Σ_t p_t |x_t - m|: the differences' rounding, through the sum
    for (std::size_t t = 0; t < n; ++t) weighted_spread += static_cast<double>(ref[t]) * std::abs(xd[t] - m);
    std::vector<T> p(n);
    kernels::softmax(x, p);
    std::vector<float> pf(n);  // float output: only the opmath error remains for half inputs
    kernels::softmax(x, pf);
    for (std::size_t j = 0; j < n; ++j) {
      const double r = static_cast<double>(ref[j]);
      const double op = (std::abs(xd[j] - m) + weighted_spread + 10.0) * unit_roundoff<A>() * r;
      const double u_out = std::is_same_v<T, A> ? 0.0 : unit_roundoff<T>();
      // Results in T's subnormal range are rounded with an absolute error of half its smallest subnormal.
      const double tiny = 0.5 * static_cast<double>(std::numeric_limits<T>::denorm_min());
      INFO("n = " << n << ", j = " << j << ", x = " << xd[j] << ", reference " << r);
      REQUIRE(std::abs(static_cast<double>(p[j]) - r) <= op + u_out * r + tiny);
      if constexpr (!std::is_same_v<T, double>)
        REQUIRE(std::abs(static_cast<double>(pf[j]) - r) <= op + unit_roundoff<float>() * r);
    }
  }
}

TEST_CASE("softmax of half inputs near their maximum does not overflow: the maximum is subtracted in float32",
          "[kernels][softmax]") {
  // float16's largest value is 65504: e^65504 overflows any format, e^0 does not.
  const std::vector<float16> x{float16(65504.0f), float16(65504.0f), float16(65472.0f)};
  std::vector<float16> p(3);
  kernels::softmax(x, p);
  CHECK(static_cast<float>(p[0]) == 0.5f);
  CHECK(static_cast<float>(p[1]) == 0.5f);
  CHECK(static_cast<float>(p[2]) == 0.0f);  // e^-32 / 2 = 6e-15, below float16's smallest subnormal (6e-8)
  const std::vector<bfloat16> xb{bfloat16(1.0e30f), bfloat16(1.0e30f)};
  std::vector<float> pb(2);
  kernels::softmax(xb, pb);
  CHECK(pb[0] == 0.5f);
  CHECK(pb[1] == 0.5f);
}

TEST_CASE("softmax gives masked (-Inf) entries probability 0, all -Inf gives zeros, NaN gives NaN",
          "[kernels][softmax]") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> p(4);
  kernels::softmax(std::vector<float>{0.0f, -inf, 0.0f, -inf}, p);
  CHECK(p == std::vector<float>{0.5f, 0.0f, 0.5f, 0.0f});
  kernels::softmax(std::vector<float>{-inf, -inf, -inf, -inf}, p);
  CHECK(p == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
  kernels::softmax(std::vector<float>{0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f, -inf}, p);
  for (float v : p) CHECK(std::isnan(v));
  // +Inf: exp(+Inf - +Inf) is NaN, so every probability is (as in the direct formula), at every level.
  for (const mixprec::isa level : {mixprec::isa::portable, mixprec::detected_isa()}) {
    const mixprec::isa_limit_scope limit(level);
    std::vector<float> row(40, 1.0f);
    row[17] = inf;
    std::vector<float> q(40);
    kernels::softmax(row, q);
    INFO("level " << level);
    for (float v : q) CHECK(std::isnan(v));
  }
}

TEST_CASE("softmax_rows applies softmax to each row and checks its sizes", "[kernels][softmax]") {
  const std::vector<double> x{1.0, 2.0, 3.0, 0.0, 0.0, 0.0};
  std::vector<double> p(6);
  kernels::softmax_rows(x, p, 3);
  CHECK_THAT(p[0], Catch::Matchers::WithinRel(0.09003057317038046, 1e-15));
  CHECK_THAT(p[3], Catch::Matchers::WithinRel(1.0 / 3.0, 1e-15));
  using Catch::Matchers::Contains;
  std::vector<double> short_out(5);
  CHECK_THROWS_WITH(kernels::softmax(x, short_out), Contains("5 elements") && Contains("6"));
  CHECK_THROWS_WITH(kernels::softmax_rows(x, p, 4), Contains("row_length 4") && Contains("6 elements"));
  CHECK_THROWS_AS(kernels::softmax_rows(x, p, 0), std::invalid_argument);
}

TEST_CASE("online_softmax: the running max, sum and rescale factor follow the recurrence", "[kernels][softmax]") {
  // Block 1 = {0}: max 0, sum e^0 = 1. Block 2 = {ln 3, -Inf}: max ln 3, alpha = e^(0 - ln 3) = 1/3,
  // sum = 1/3 * 1 + e^0 + 0 = 4/3, weights {1, 0}.
  kernels::online_softmax<double> s;
  CHECK(s.max() == -std::numeric_limits<double>::infinity());
  CHECK(s.sum() == 0.0);
  CHECK(s.normalize(5.0) == 0.0);
  std::vector<double> b1{0.0};
  CHECK(s.update(std::span<double>(b1)) == 0.0);  // nothing accumulated before: alpha = e^-Inf = 0
  CHECK(b1[0] == 1.0);
  CHECK(s.sum() == 1.0);
  std::vector<double> b2{std::log(3.0), -std::numeric_limits<double>::infinity()};
  const double alpha = s.update(std::span<double>(b2));
  CHECK_THAT(alpha, Catch::Matchers::WithinRel(1.0 / 3.0, 1e-15));
  CHECK_THAT(b2[0], Catch::Matchers::WithinRel(1.0, 1e-15));
  CHECK(b2[1] == 0.0);
  CHECK_THAT(s.sum(), Catch::Matchers::WithinRel(4.0 / 3.0, 1e-15));
  CHECK_THAT(s.normalize(2.0), Catch::Matchers::WithinRel(1.5, 1e-15));
  // A block of a smaller maximum: alpha = 1, weights relative to the kept maximum ln 3.
  std::vector<double> b3{0.0};
  CHECK(s.update(std::span<double>(b3)) == 1.0);
  CHECK_THAT(b3[0], Catch::Matchers::WithinRel(1.0 / 3.0, 1e-15));
  s.reset();
  CHECK(s.sum() == 0.0);
}

TEST_CASE("online_softmax keeps fully masked blocks at weight 0 and propagates NaN", "[kernels][softmax]") {
  constexpr float inf = std::numeric_limits<float>::infinity();
  kernels::online_softmax<float> s;
  std::vector<float> masked{-inf, -inf};
  CHECK(s.update(std::span<float>(masked)) == 1.0f);
  CHECK(masked == std::vector<float>{0.0f, 0.0f});
  CHECK(s.sum() == 0.0f);
  CHECK(s.normalize(1.0f) == 0.0f);  // a fully masked row gives 0, not NaN
  std::vector<float> nan_block{1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(std::isnan(s.update(std::span<float>(nan_block))));
  std::vector<float> later{2.0f};
  s.update(std::span<float>(later));
  CHECK(std::isnan(later[0]));
  CHECK(std::isnan(s.normalize(1.0f)));
}

TEST_CASE("online_softmax: a +Inf score gives NaN (Inf - Inf) in the block it is in, at every level",
          "[kernels][softmax]") {
  // kernels/softmax.hpp's convention: +Inf gives NaN. The AVX2 block pass once returned 2^-126 for it.
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (const mixprec::isa level : {mixprec::isa::portable, mixprec::detected_isa()}) {
    const mixprec::isa_limit_scope limit(level);
    kernels::online_softmax<float> s;
    std::vector<float> block{1.0f, inf, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 1.5f, 2.5f};  // more than 8: the SIMD loop
    s.update(std::span<float>(block));
    INFO("level " << static_cast<int>(level));
    CHECK(std::isnan(block[1]));
    CHECK(std::isnan(s.sum()));
    CHECK(std::isnan(s.normalize(1.0f)));
  }
}

TEST_CASE("online softmax over blocks equals the direct softmax of all scores at once", "[kernels][softmax]") {
  // The attention numerator sum_j p_j v_j computed block by block (rescaling the accumulator by alpha)
  // against the long double direct formula. Error in float: each weight e^(x - m) carries
  // (|x - m| + 3) u (the difference, exp, and the rescalings by alpha, at most one per block boundary
  // crossed: bounded by the number of blocks); the sums of n positive terms (n + blocks) u.
  const std::size_t n = 300;
  const auto x = random_scores<float>(n, 4.0, 7);
  const auto v = random_scores<float>(n, 1.0, 8);
  std::vector<double> xd(x.begin(), x.end());
  const auto p = ref_softmax(xd);
  ld ref = 0.0L, mag = 0.0L;
  double spread = 0.0;
  const double m = *std::max_element(xd.begin(), xd.end());
  for (std::size_t j = 0; j < n; ++j) {
    ref += p[j] * static_cast<ld>(v[j]);
    mag += p[j] * std::abs(static_cast<ld>(v[j]));
    spread = std::max(spread, m - xd[j]);
  }
  for (std::size_t block : {1u, 3u, 64u, 128u, 300u, 1000u}) {
    kernels::online_softmax<float> s;
    float acc = 0.0f;
    std::vector<float> w;
    for (std::size_t j0 = 0; j0 < n; j0 += block) {
      const std::size_t cols = std::min(block, n - j0);
      w.assign(x.begin() + static_cast<std::ptrdiff_t>(j0), x.begin() + static_cast<std::ptrdiff_t>(j0 + cols));
      const float alpha = s.update(std::span<float>(w));
      acc *= alpha;
      for (std::size_t j = 0; j < cols; ++j) acc += w[j] * v[j0 + j];
    }
    const double got = static_cast<double>(s.normalize(acc));
    const double blocks = static_cast<double>((n + block - 1) / block);
    const double tol =
        (spread + 3.0 + blocks + 2.0 * static_cast<double>(n)) * unit_roundoff<float>() * static_cast<double>(mag);
    INFO("block " << block << ": got " << got << ", reference " << static_cast<double>(ref));
    CHECK(std::abs(got - static_cast<double>(ref)) <= tol);
    // The final state is that of the whole range: max exact, sum within the same bound.
    CHECK(s.max() == static_cast<float>(m));
    ld l = 0.0L;
    for (double xv : xd) l += std::exp(static_cast<ld>(xv) - static_cast<ld>(m));
    CHECK(std::abs(static_cast<double>(s.sum()) - static_cast<double>(l)) <=
          (spread + 3.0 + blocks + static_cast<double>(n)) * unit_roundoff<float>() * static_cast<double>(l));
  }
}

namespace {

/// Bit patterns of a range of floats or small floats (NaN payloads included), for bit-for-bit checks.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp of an empty vector's data() (null) would be undefined, even for zero bytes.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// softmax of `x` (converted to In) into Out at the SIMD level `level`.
template <class In, class Out>
std::vector<Out> softmax_at(mixprec::isa level, const std::vector<float>& x) {
  const mixprec::isa_limit_scope limit(level);
  std::vector<In> in(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) in[j] = static_cast<In>(x[j]);
  std::vector<Out> out(x.size());
  kernels::softmax(in, out);
  return out;
}

}  // namespace

TEST_CASE("softmax rows and the online softmax give the same bits at the AVX2 and AVX-512 levels",
          "[kernels][softmax]") {
  // The rows (kernels/detail/softmax_rows-inl.hpp) add in one order at 8 and 16 lanes, so the level a
  // row runs at changes no bit: rows of every length around the 8-, 16- and 32-value steps, masked and
  // NaN entries, and the element types the SIMD rows convert.
  using mixprec::isa;
  if (mixprec::detected_isa() < isa::avx512) {
    WARN("this CPU has no AVX-512: its softmax rows are never called here and were not compared");
    return;
  }
  const isa wide = mixprec::detected_isa();
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 67; ++n) lengths.push_back(n);
  for (const std::size_t n : {127u, 128u, 129u, 1000u, 1031u}) lengths.push_back(n);
  for (const std::size_t n : lengths) {
    std::vector<float> x = random_scores<float>(n, 3.0, static_cast<unsigned>(n) + 100U);
    if (n > 5) x[n / 3] = -inf;  // a masked score
    CAPTURE(n);
    CHECK(same_bits(softmax_at<float, float>(isa::avx2, x), softmax_at<float, float>(wide, x)));
    CHECK(same_bits(softmax_at<bfloat16, bfloat16>(isa::avx2, x), softmax_at<bfloat16, bfloat16>(wide, x)));
    CHECK(same_bits(softmax_at<float16, float>(isa::avx2, x), softmax_at<float16, float>(wide, x)));
    CHECK(same_bits(softmax_at<float, bfloat16>(isa::avx2, x), softmax_at<float, bfloat16>(wide, x)));
    if (n > 0) {
      std::vector<float> nan_row = x;
      nan_row[n - 1] = std::numeric_limits<float>::quiet_NaN();
      CHECK(same_bits(softmax_at<float, float16>(isa::avx2, nan_row), softmax_at<float, float16>(wide, nan_row)));
      const std::vector<float> masked(n, -inf);
      CHECK(same_bits(softmax_at<float, float>(isa::avx2, masked), softmax_at<float, float>(wide, masked)));
      std::vector<float> inf_row = x;
      inf_row[0] = inf;  // +Inf - +Inf is NaN: the whole row is NaN
      const auto inf_out = softmax_at<float, bfloat16>(wide, inf_row);
      CHECK(same_bits(softmax_at<float, bfloat16>(isa::avx2, inf_row), inf_out));
      CHECK(std::all_of(inf_out.begin(), inf_out.end(), [](bfloat16 v) { return std::isnan(static_cast<float>(v)); }));
    }
    // The online softmax over the row in blocks of `block` scores, at each level.
    for (const std::size_t block : {std::size_t{7}, std::size_t{16}, std::size_t{40}, n == 0 ? 1 : n}) {
      std::vector<float> weights[2];
      std::vector<float> state[2];
      const isa levels[2] = {isa::avx2, wide};
      for (int l = 0; l < 2; ++l) {
        const mixprec::isa_limit_scope limit(levels[l]);
        kernels::online_softmax<float> s;
        weights[l] = x;
        for (std::size_t j0 = 0; j0 < n; j0 += block) {
          const std::size_t cols = std::min(block, n - j0);
          state[l].push_back(s.update(std::span<float>(weights[l].data() + j0, cols)));
          state[l].push_back(s.sum());
          state[l].push_back(s.max());
        }
      }
      CAPTURE(block);
      CHECK(same_bits(weights[0], weights[1]));
      CHECK(same_bits(state[0], state[1]));
    }
  }
}

}  // namespace softmax_test
