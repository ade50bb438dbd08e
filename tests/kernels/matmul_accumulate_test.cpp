// Tests of kernels::matmul_accumulate (kernels/matmul_accumulate.hpp): y += op(a)·op(b) for the four
// layouts against a double reference written here, the rounding of operands to the compute type, and
// the size errors.
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"

namespace matmul_accumulate_test {

namespace k = mixprec::kernels;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("matmul_accumulate adds op(a)·op(b) for every layout within float32 summation error",
          "[kernels][matmul_accumulate]") {
  const std::size_t m = 7, kk = 13, n = 5;
  const auto a = random_floats(m * kk, 1);
  const auto b = random_floats(kk * n, 2);
  const auto y0 = random_floats(m * n, 3);
  for (auto la : {k::a_layout::m_k, k::a_layout::k_m}) {
    for (auto lb : {k::b_layout::k_n, k::b_layout::n_k}) {
      std::vector<float> y = y0;
      k::matmul_accumulate<float>(a, la, b, lb, y, {m, kk, n});
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double ref = y0[i * n + j];
          double mag = std::abs(ref);
          for (std::size_t p = 0; p < kk; ++p) {
            const double av = la == k::a_layout::m_k ? a[i * kk + p] : a[p * m + i];
            const double bv = lb == k::b_layout::k_n ? b[p * n + j] : b[j * kk + p];
            ref += av * bv;
            mag += std::abs(av * bv);
          }
          // (k + 1) additions in float32: |err| <= (k + 1) u Σ|terms|.
          CHECK(std::abs(y[i * n + j] - ref) <= (kk + 1) * 0x1p-24 * mag);
        }
      }
    }
  }
}

TEST_CASE("matmul_accumulate rounds operands to the compute type and sums in float32", "[kernels][matmul_accumulate]") {
  // a = 1 + 2^-10 rounds to 1 in bfloat16 (8 significant bits); the sum 1 + 2^-20 stays in float32.
  std::vector<float> a = {1.0F + 0x1p-10F, 0x1p-10F};
  std::vector<float> b = {1.0F, 0x1p-10F};
  std::vector<float> y = {0.0F};
  k::matmul_accumulate<mixprec::bfloat16>(a, k::a_layout::m_k, b, k::b_layout::k_n, y, {1, 2, 1});
  CHECK(y[0] == 1.0F + 0x1p-20F);
}

TEST_CASE("matmul_accumulate rejects sizes that do not match the shape", "[kernels][matmul_accumulate]") {
  std::vector<float> a(6), b(6), y(3);
  CHECK_THROWS_WITH(k::matmul_accumulate<float>(a, k::a_layout::m_k, b, k::b_layout::k_n, y, {2, 3, 2}),
                    Catch::Contains("y has 3 elements"));
}

}  // namespace matmul_accumulate_test
