// Tests of kernels::matmul: "operands rounded to the compute dtype, products summed in float32".
//
// References are computed here with plain loops in double (or long double), never with the code
// under test. Rounding an operand to the compute type uses the number types' own conversion
// (`bfloat16(x)`), which tests/types checks bit by bit against the format specifications.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/kernels/gemm.hpp"

namespace gemm_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::float8_e4m3fn;
using mixprec::kernels::b_layout;
using mixprec::kernels::matmul;
using mixprec::kernels::matmul_shape;

namespace {

/// 2^e as a double (exact).
double pow2(int e) { return std::ldexp(1.0, e); }

/// Row-major b(k, n) stored in `layout`, from a function of (p, j).
template <class T, class F>
std::vector<T> make_b(std::size_t k, std::size_t n, b_layout layout, F value) {
  std::vector<T> b(k * n);
  for (std::size_t p = 0; p < k; ++p) {
    for (std::size_t j = 0; j < n; ++j) b[layout == b_layout::k_n ? p * n + j : j * k + p] = T(value(p, j));
  }
  return b;
}

template <class T>
T b_at(const std::vector<T>& b, std::size_t k, std::size_t n, b_layout layout, std::size_t p, std::size_t j) {
  return layout == b_layout::k_n ? b[p * n + j] : b[j * k + p];
}

/// The value `x` has after rounding to C, as a double.
template <class C, class S>
double rounded(S x) {
  if constexpr (std::is_same_v<C, double>) {
    return static_cast<double>(x);
  } else if constexpr (std::is_same_v<C, float>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(C(static_cast<float>(x)));
  }
}

}  // namespace

TEST_CASE("matmul rounds each operand to the compute type once", "[kernels][gemm]") {
  // 1 + 2^-10 is a float16 value but not a bfloat16 one (8 significant bits): bfloat16 rounds it to 1.
  const std::vector<float> a{static_cast<float>(1.0 + pow2(-10))};
  const std::vector<float> b{1.0f};
  std::vector<float> y(1);
  for (auto layout : {b_layout::k_n, b_layout::n_k}) {
    matmul<bfloat16>(a, b, y, {1, 1, 1}, layout);
    CHECK(y[0] == 1.0f);
    matmul<float16>(a, b, y, {1, 1, 1}, layout);
    CHECK(y[0] == static_cast<float>(1.0 + pow2(-10)));
    matmul<float>(a, b, y, {1, 1, 1}, layout);
    CHECK(y[0] == static_cast<float>(1.0 + pow2(-10)));
  }
}

TEST_CASE("matmul forms products of bfloat16 operands exactly in float32", "[kernels][gemm]") {
  // (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14: 15 significant bits, exact in float, not representable in bfloat16.
  const float v = static_cast<float>(1.0 + pow2(-7));
  for (auto layout : {b_layout::k_n, b_layout::n_k}) {
    std::vector<float> y(1);
    matmul<bfloat16>(std::vector<bfloat16>{bfloat16(v)}, std::vector<bfloat16>{bfloat16(v)}, y, {1, 1, 1}, layout);
    CHECK(static_cast<double>(y[0]) == 1.0 + pow2(-6) + pow2(-14));
  }
}

TEST_CASE("matmul sums bfloat16 products in float32, not in bfloat16 and not in double", "[kernels][gemm]") {
  SECTION("256 + 1 + 1 + 1 + 1 is 260 (a bfloat16 accumulator stays at 256)") {
    // In bfloat16 the spacing at 256 is 2: 256 + 1 ties to even = 256, four times over. float32 holds 260.
    for (std::size_t m : {1U, 3U, 40U}) {  // gemv and gemm paths (and Eigen's small-size lazy product)
      for (std::size_t n : {1U, 5U, 40U}) {
        for (auto layout : {b_layout::k_n, b_layout::n_k}) {
          CAPTURE(m, n, layout == b_layout::k_n);
          const std::size_t k = 5;
          std::vector<bfloat16> a(m * k, bfloat16(1.0f));
          for (std::size_t i = 0; i < m; ++i) a[i * k] = bfloat16(256.0f);
          const auto b = make_b<bfloat16>(k, n, layout, [](auto, auto) { return 1.0f; });
          std::vector<float> y(m * n);
          matmul<bfloat16>(a, b, y, {m, k, n}, layout);
          for (float v : y) CHECK(v == 260.0f);
          std::vector<bfloat16> y16(m * n);  // 260 = 256 + 4 is a bfloat16 value: one rounding keeps it
          matmul<bfloat16>(a, b, y16, {m, k, n}, layout);
          for (bfloat16 v : y16) CHECK(static_cast<float>(v) == 260.0f);
        }
      }
    }
  }
  SECTION("2^24 + 1 is 2^24 (float32 accumulation; double would keep 2^24 + 1)") {
    // With two terms the result does not depend on the summation order: 2^24 + 1 ties to even in float.
    const std::vector<bfloat16> a{bfloat16(static_cast<float>(pow2(24))), bfloat16(1.0f)};
    const std::vector<bfloat16> b{bfloat16(1.0f), bfloat16(1.0f)};
    std::vector<double> y(1);
    matmul<bfloat16>(a, b, y, {1, 2, 1}, b_layout::k_n);
    CHECK(y[0] == pow2(24));
    matmul<double>(a, b, y, {1, 2, 1}, b_layout::k_n);
    CHECK(y[0] == pow2(24) + 1.0);
  }
}

TEST_CASE("matmul adds the bias in the accumulator and rounds the output once", "[kernels][gemm]") {
  // x.w = 1 + 2^-8 (exact in float); + bias 2^-8 = 1 + 2^-7, a bfloat16 value. Rounding the product to
  // bfloat16 first (as a framework that adds the bias in bfloat16 does) gives 1 (tie to even) and then
  // 1 + 2^-8 -> 1 again.
  const std::vector<float> x{1.0f, 1.0f};
  const std::vector<float> w{1.0f, static_cast<float>(pow2(-8))};
  const std::vector<float> bias{static_cast<float>(pow2(-8))};
  std::vector<bfloat16> y(1);
  matmul<bfloat16>(x, w, bias, y, {1, 2, 1}, b_layout::n_k);
  CHECK(static_cast<double>(y[0]) == 1.0 + pow2(-7));
}

TEST_CASE("matmul with k = 0 gives zeros, or the bias", "[kernels][gemm]") {
  // n = 3 (a partial panel: the engine's scratch tile) and n = 32 (whole panels: a float y is its own tile).
  for (const std::size_t n : {std::size_t{3}, std::size_t{32}}) {
    CAPTURE(n);
    const std::vector<float> empty;
    std::vector<float> y(2 * n, 42.0f);
    matmul<float>(empty, empty, y, {2, 0, n}, b_layout::k_n);
    for (float v : y) CHECK(v == 0.0f);
    std::vector<float> bias(n);
    for (std::size_t j = 0; j < n; ++j) bias[j] = static_cast<float>(j + 1);
    matmul<bfloat16>(empty, empty, bias, y, {2, 0, n}, b_layout::n_k);
    for (std::size_t j = 0; j < n; ++j) {
      CHECK(y[j] == bias[j]);
      CHECK(y[n + j] == bias[j]);
    }
  }
}

TEMPLATE_TEST_CASE("matmul equals a double sum of the rounded operands within float32 accumulation error",
                   "[kernels][gemm]", bfloat16, float16, float8_e4m3fn, float, double) {
  using C = TestType;
  // The products of two rounded operands are exact in the accumulator (<= 2 x 11 significant bits in
  // float for the small formats; for float and double, Eigen's product itself rounds once: one more u).
  // Summing K terms in any order (Eigen blocks and vectorises) has error <= gamma_K * sum|a'b'| with
  // gamma_K = K u / (1 - K u) (Higham, Accuracy and Stability, Thm 3.1 / 3.5); (K + 2) u covers it and
  // the product rounding. u = 2^-24 for the float accumulator, 2^-53 for double.
  const double u = std::is_same_v<C, double> ? pow2(-53) : pow2(-24);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct dims {
    std::size_t m, k, n;
  };
  // Includes gemv (m = 1 or n = 1) and Eigen's small-size coefficient-wise product (7 x 33 x 19).
  const std::vector<dims> sizes{dims{7, 33, 19}, dims{1, 300, 70}, dims{70, 300, 1}, dims{40, 120, 50}};
  for (dims d : sizes) {
    for (auto layout : {b_layout::k_n, b_layout::n_k}) {
      CAPTURE(d.m, d.k, d.n, layout == b_layout::k_n);
      std::vector<float> a(d.m * d.k);
      for (auto& v : a) v = normal(rng);
      const auto b = make_b<float>(d.k, d.n, layout, [&](auto, auto) { return normal(rng); });
      std::vector<double> y(d.m * d.n);
      matmul<C>(a, b, y, {d.m, d.k, d.n}, layout);
      // The operands as rounded to C, in double, laid out as a [m, k] and bt [n, k].
      std::vector<double> ar(a.size()), btr(b.size());
      for (std::size_t i = 0; i < a.size(); ++i) ar[i] = rounded<C>(a[i]);
      for (std::size_t p = 0; p < d.k; ++p) {
        for (std::size_t j = 0; j < d.n; ++j) btr[j * d.k + p] = rounded<C>(b_at(b, d.k, d.n, layout, p, j));
      }
      for (std::size_t i = 0; i < d.m; ++i) {
        for (std::size_t j = 0; j < d.n; ++j) {
          double ref = 0.0;
          double abs_sum = 0.0;
          for (std::size_t p = 0; p < d.k; ++p) {
            const double prod = ar[i * d.k + p] * btr[j * d.k + p];
            ref += prod;
            abs_sum += std::abs(prod);
          }
          const double tol = static_cast<double>(d.k + 2) * u * abs_sum;
          INFO("i=" << i << " j=" << j << " ref=" << ref << " tol=" << tol);
          REQUIRE(std::abs(y[i * d.n + j] - ref) <= tol);
        }
      }
    }
  }
}

TEST_CASE("matmul cut into many scratch blocks keeps the one-block error bound", "[kernels][gemm]") {
  // block_elements = 1000 with k = 97: blocks of 10 rows of a and 10 columns of b (a y block of 100),
  // so 37 x 23 is cut 4 x 3 ways with ragged last blocks; float a, bfloat16 b, bfloat16 y exercise
  // every conversion path. Tolerance: the same bound as with one block, |y - ref| <= u_bf16 |ref| (one
  // output rounding) + (K + 2) 2^-24 sum|a'b'|.
  const std::size_t m = 37, k = 97, n = 23;
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k);
  for (auto& v : a) v = dist(rng);
  std::vector<double> ar(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) ar[i] = rounded<bfloat16>(a[i]);
  for (auto layout : {b_layout::k_n, b_layout::n_k}) {
    for (std::size_t block : {std::size_t{1}, std::size_t{1000}, mixprec::kernels::matmul_block_elements}) {
      CAPTURE(layout == b_layout::k_n, block);
      const auto b = make_b<bfloat16>(k, n, layout, [&](auto, auto) { return dist(rng); });
      std::vector<bfloat16> y(m * n);
      matmul<bfloat16>(a, b, y, {m, k, n}, layout, block);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double ref = 0.0;
          double abs_sum = 0.0;
          for (std::size_t p = 0; p < k; ++p) {
            const double prod = ar[i * k + p] * static_cast<double>(b_at(b, k, n, layout, p, j));
            ref += prod;
            abs_sum += std::abs(prod);
          }
          const double tol = pow2(-8) * std::abs(ref) + static_cast<double>(k + 2) * pow2(-24) * abs_sum;
          REQUIRE(std::abs(static_cast<double>(y[i * n + j]) - ref) <= tol);
        }
      }
    }
  }
  std::vector<float> y(m * n);
  CHECK_THROWS_AS(matmul<float>(a, std::vector<float>(k * n), y, {m, k, n}, b_layout::k_n, 0), std::invalid_argument);
}

TEST_CASE("matmul of complex64 activations and float32 weights runs a complex GEMM", "[kernels][gemm]") {
  // Each complex product of a complex and a real (imaginary part 0) operand costs two real products and,
  // in Eigen's complex kernel, up to two additions per term: (K + 4) u sum|a||b| bounds the error of each part.
  const std::size_t m = 3, k = 50, n = 4;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::complex<float>> a(m * k);
  for (auto& v : a) v = {normal(rng), normal(rng)};
  std::vector<float> w(n * k);
  for (auto& v : w) v = normal(rng);
  std::vector<std::complex<float>> y(m * n);
  matmul<std::complex<float>>(a, w, y, {m, k, n}, b_layout::n_k);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      std::complex<double> ref = 0.0;
      double abs_sum = 0.0;
      for (std::size_t p = 0; p < k; ++p) {
        const std::complex<double> av(a[i * k + p].real(), a[i * k + p].imag());
        ref += av * static_cast<double>(w[j * k + p]);
        abs_sum += std::abs(av) * std::abs(static_cast<double>(w[j * k + p]));
      }
      const double tol = static_cast<double>(k + 4) * pow2(-24) * abs_sum;
      CHECK(std::abs(static_cast<double>(y[i * n + j].real()) - ref.real()) <= tol);
      CHECK(std::abs(static_cast<double>(y[i * n + j].imag()) - ref.imag()) <= tol);
    }
  }
}

TEST_CASE("matmul rejects sizes that do not match the shape, naming the shapes", "[kernels][gemm]") {
  using Catch::Matchers::Contains;
  std::vector<float> a(6), b(12), y(8), bias(4);
  CHECK_NOTHROW(matmul<float>(a, b, y, {2, 3, 4}, b_layout::k_n));
  CHECK_THROWS_WITH(matmul<float>(a, b, y, {2, 4, 4}, b_layout::k_n),
                    Contains("a has 6 elements") && Contains("[2, 4]"));
  CHECK_THROWS_WITH(matmul<float>(a, std::vector<float>(10), y, {2, 3, 4}, b_layout::n_k),
                    Contains("b has 10 elements") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(matmul<float>(a, b, std::vector<float>(9), {2, 3, 4}, b_layout::k_n),
                    Contains("y has 9 elements") && Contains("[2, 4]"));
  CHECK_THROWS_AS(matmul<float>(a, b, std::vector<float>(3), y, {2, 3, 4}, b_layout::k_n), std::invalid_argument);
}

}  // namespace gemm_test
