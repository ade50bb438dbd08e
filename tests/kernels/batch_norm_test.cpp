// kernels::batch_norm_sums and kernels::batch_norm_apply against references written here from the
// rule each documents, every float32 operation done in float64 and rounded to float (for +, - and ×
// of floats that is the IEEE float result), on every instruction-set level and thread count, for
// every mix of float, bfloat16 and float16 the vectorised passes take and for shapes with partial
// row blocks and partial vectors of columns.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/core.hpp"
#include "mixprec/kernels/batch_norm.hpp"
#include "mixprec/kernels/threads.hpp"
#include "support/element_bits.hpp"

namespace batch_norm_kernel_test {

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::kernels::batch_norm_block_rows;

/// The levels this CPU runs, portable first.
std::vector<mixprec::isa> levels() {
  std::vector<mixprec::isa> out;
  for (const mixprec::isa level : {mixprec::isa::portable, mixprec::isa::avx2, mixprec::isa::avx512}) {
    if (level <= mixprec::detected_isa()) out.push_back(level);
  }
  return out;
}

/// Sets `mixprec::num_threads()` for a scope.
class thread_count {
 public:
  explicit thread_count(std::size_t n) : previous_(mixprec::set_num_threads(n)) {}
  thread_count(const thread_count&) = delete;
  thread_count& operator=(const thread_count&) = delete;
  ~thread_count() { mixprec::set_num_threads(previous_); }

 private:
  std::size_t previous_;
};

/// x rounded to float and back.
double f(double x) { return static_cast<double>(static_cast<float>(x)); }

/// A float rounded to C (nearest even) and widened back, by mixprec's scalar conversion.
template <class C>
double rounded_to(double x) {
  if constexpr (std::is_same_v<C, float>) {
    return f(x);
  } else {
    return static_cast<double>(static_cast<float>(static_cast<C>(static_cast<float>(x))));
  }
}

using test_support::element_bits;

/// rows × cols values of T, normal around `mean` with spread 2.
template <class T>
std::vector<T> random_values(std::size_t count, double mean, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(mean, 2.0);
  std::vector<T> v(count);
  for (auto& e : v) e = static_cast<T>(static_cast<float>(normal(rng)));
  return v;
}

/// The sums rule: per column, d = round<C>(x) - shift rounded to float; whole blocks of 8 rows summed
/// in float from 0 (Σd, Σd·d), each block's sums added to float64 totals; the rows after the last whole
/// block added one by one (d and d·d, each a float) in float64.
template <class C, class T>
void reference_sums(const std::vector<T>& x, std::size_t rows, std::size_t n, const std::vector<float>& shift,
                    std::vector<double>& s1, std::vector<double>& s2) {
  s1.assign(n, 0.0);
  s2.assign(n, 0.0);
  const auto d_of = [&](std::size_t r, std::size_t j) {
    return f(rounded_to<C>(static_cast<double>(static_cast<float>(x[r * n + j]))) - static_cast<double>(shift[j]));
  };
  const std::size_t whole = rows / batch_norm_block_rows * batch_norm_block_rows;
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t r0 = 0; r0 < whole; r0 += batch_norm_block_rows) {
      double t1 = 0;
      double t2 = 0;
      for (std::size_t k = 0; k < batch_norm_block_rows; ++k) {
        const double d = d_of(r0 + k, j);
        t1 = f(t1 + d);
        t2 = f(t2 + f(d * d));
      }
      s1[j] += t1;
      s2[j] += t2;
    }
    for (std::size_t r = whole; r < rows; ++r) {
      const double d = d_of(r, j);
      s1[j] += d;
      s2[j] += f(d * d);
    }
  }
}

// (x, compute, output) mixes of the vectorised passes, and one the portable loops keep (float64).
using type_mixes = std::tuple<std::tuple<float, float, float>, std::tuple<bfloat16, bfloat16, bfloat16>,
                              std::tuple<float, bfloat16, bfloat16>, std::tuple<bfloat16, bfloat16, float>,
                              std::tuple<float16, float16, float16>, std::tuple<float, float16, float>>;

const std::vector<std::size_t> row_counts = {1, 7, 8, 9, 19, 40};
const std::vector<std::size_t> column_counts = {1, 7, 15, 16, 17, 64, 71, 200};

}  // namespace

TEMPLATE_LIST_TEST_CASE("batch_norm_sums gives the reference's bits on every level and thread count",
                        "[kernels][batch_norm]", type_mixes) {
  using T = std::tuple_element_t<0, TestType>;
  using C = std::tuple_element_t<1, TestType>;
  for (const std::size_t rows : row_counts) {
    for (const std::size_t n : column_counts) {
      // Data far from 0 with unit spread: the shift (the first row) keeps the sums small.
      const auto x = random_values<T>(rows * n, 30.0, static_cast<unsigned>(rows * 1000 + n));
      std::vector<float> shift(n);
      for (std::size_t j = 0; j < n; ++j) shift[j] = static_cast<float>(rounded_to<C>(static_cast<float>(x[j])));
      std::vector<double> e1, e2;
      reference_sums<C>(x, rows, n, shift, e1, e2);
      for (const mixprec::isa level : levels()) {
        for (const std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
          const mixprec::isa_limit_scope limit(level);
          const thread_count with(threads);
          std::vector<double> s1(n, -1.0), s2(n, -1.0);
          mixprec::kernels::batch_norm_sums<C>(x.data(), rows, n, shift.data(), s1.data(), s2.data());
          INFO("rows " << rows << ", columns " << n << ", level " << mixprec::name(level) << ", threads " << threads);
          for (std::size_t j = 0; j < n; ++j) {
            REQUIRE(std::bit_cast<std::uint64_t>(s1[j]) == std::bit_cast<std::uint64_t>(e1[j]));
            REQUIRE(std::bit_cast<std::uint64_t>(s2[j]) == std::bit_cast<std::uint64_t>(e2[j]));
          }
        }
      }
    }
  }
}

TEST_CASE("batch_norm_sums splits a large batch over threads without changing a bit", "[kernels][batch_norm]") {
  // 2 threads take whole 64-column groups once the call has 2 × 64 Ki elements.
  const std::size_t rows = 1030;
  const std::size_t n = 300;
  const auto x = random_values<bfloat16>(rows * n, -4.0, 7);
  std::vector<float> shift(n);
  for (std::size_t j = 0; j < n; ++j) shift[j] = static_cast<float>(x[j]);
  std::vector<double> e1, e2;
  reference_sums<bfloat16>(x, rows, n, shift, e1, e2);
  for (const mixprec::isa level : levels()) {
    for (const std::size_t threads : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
      const mixprec::isa_limit_scope limit(level);
      const thread_count with(threads);
      std::vector<double> s1(n), s2(n);
      mixprec::kernels::batch_norm_sums<bfloat16>(x.data(), rows, n, shift.data(), s1.data(), s2.data());
      for (std::size_t j = 0; j < n; ++j) {
        REQUIRE(s1[j] == e1[j]);
        REQUIRE(s2[j] == e2[j]);
      }
    }
  }
}

TEST_CASE("batch_norm_sums sums a column whose float squares overflow in float64", "[kernels][batch_norm]") {
  // Column 1 holds ±3e19: d² overflows float, so the column is summed again element by element in
  // float64, where it is exact here (d is 0 or -6e19 rounded to float).
  const std::size_t rows = 11;
  const std::size_t n = 3;
  std::vector<float> x(rows * n);
  for (std::size_t r = 0; r < rows; ++r) {
    x[r * n + 0] = static_cast<float>(r);
    x[r * n + 1] = r % 2 == 0 ? 3e19F : -3e19F;
    x[r * n + 2] = 1.0F;
  }
  const std::vector<float> shift = {x[0], x[1], x[2]};
  for (const mixprec::isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    std::vector<double> s1(n), s2(n);
    mixprec::kernels::batch_norm_sums<float>(x.data(), rows, n, shift.data(), s1.data(), s2.data());
    const double d = static_cast<double>(-3e19F) - static_cast<double>(3e19F);
    CHECK(s1[0] == 55.0);   // 0 + 1 + ... + 10
    CHECK(s2[0] == 385.0);  // 0² + ... + 10²
    CHECK(s1[1] == 5 * d);  // five odd rows
    CHECK(s2[1] == 5 * d * d);
    CHECK(std::isfinite(s2[1]));
    CHECK(s1[2] == 0.0);
    CHECK(s2[2] == 0.0);
  }
}

TEMPLATE_LIST_TEST_CASE("batch_norm_apply gives the reference's bits on every level and thread count",
                        "[kernels][batch_norm]", type_mixes) {
  using T = std::tuple_element_t<0, TestType>;
  using C = std::tuple_element_t<1, TestType>;
  using O = std::tuple_element_t<2, TestType>;
  for (const std::size_t rows : row_counts) {
    for (const std::size_t n : column_counts) {
      const auto x = random_values<T>(rows * n, 1.5, static_cast<unsigned>(rows * 77 + n));
      const auto mean = random_values<float>(n, 1.5, 1);
      const auto mult = random_values<float>(n, 0.5, 2);
      const auto bias = random_values<float>(n, 0.0, 3);
      const auto rstd = random_values<float>(n, 3.0, 4);
      std::vector<float> corr(n);
      for (std::size_t j = 0; j < n; ++j) corr[j] = std::ldexp(static_cast<float>(j % 5) - 2.0F, -26);
      // The rule: d = (round<C>(x) - mean) - corr, y = round<O>((d · mult) + bias), x̂ = d · rstd.
      std::vector<O> ey(rows * n);
      std::vector<float> eh(rows * n);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < n; ++j) {
          const double xc = rounded_to<C>(static_cast<double>(static_cast<float>(x[r * n + j])));
          const double d = f(f(xc - static_cast<double>(mean[j])) - static_cast<double>(corr[j]));
          const double y = f(f(d * static_cast<double>(mult[j])) + static_cast<double>(bias[j]));
          ey[r * n + j] = static_cast<O>(static_cast<float>(y));
          eh[r * n + j] = static_cast<float>(d * static_cast<double>(rstd[j]));
        }
      }
      for (const mixprec::isa level : levels()) {
        for (const std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
          const mixprec::isa_limit_scope limit(level);
          const thread_count with(threads);
          std::vector<O> y(rows * n);
          std::vector<float> xhat(rows * n);
          mixprec::kernels::batch_norm_apply<C>(x.data(), rows, n, mean.data(), corr.data(), mult.data(), bias.data(),
                                                rstd.data(), y.data(), xhat.data());
          std::vector<O> y_only(rows * n);
          mixprec::kernels::batch_norm_apply<C>(x.data(), rows, n, mean.data(), corr.data(), mult.data(), bias.data(),
                                                rstd.data(), y_only.data(), static_cast<float*>(nullptr));
          INFO("rows " << rows << ", columns " << n << ", level " << mixprec::name(level) << ", threads " << threads);
          for (std::size_t i = 0; i < rows * n; ++i) {
            REQUIRE(element_bits(y[i]) == element_bits(ey[i]));
            REQUIRE(element_bits(y_only[i]) == element_bits(ey[i]));
            REQUIRE(element_bits(xhat[i]) == element_bits(eh[i]));
          }
        }
      }
    }
  }
}

TEST_CASE("batch_norm_apply keeps a NaN a NaN and rounds past float16's range to Inf", "[kernels][batch_norm]") {
  const std::size_t n = 19;
  std::vector<float> x(2 * n, 1.0F);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[n + 17] = 1e6F;
  const std::vector<float> mean(n, 0.0F), corr(n, 0.0F), mult(n, 1.0F), bias(n, 0.0F), rstd(n, 1.0F);
  for (const mixprec::isa level : levels()) {
    const mixprec::isa_limit_scope limit(level);
    std::vector<float16> y(2 * n);
    mixprec::kernels::batch_norm_apply<float>(x.data(), 2, n, mean.data(), corr.data(), mult.data(), bias.data(),
                                              rstd.data(), y.data(), static_cast<float*>(nullptr));
    CHECK(isnan(y[3]));
    CHECK(static_cast<float>(y[n + 17]) == std::numeric_limits<float>::infinity());
    CHECK(static_cast<float>(y[0]) == 1.0F);
  }
}

}  // namespace batch_norm_kernel_test
