// The error audit of the kernels (issue 12, "Every public entry point documents what it throws; a test
// covers each documented error"): one test case per header of include/mixprec/kernels/, one section per
// documented error that no other test triggers with its message checked. Covered elsewhere:
// - activations.hpp: exp and the four derivatives with an output of another size: activations_test.cpp.
// - gemm.hpp: matmul's a, b and y sizes: gemm_test.cpp (the bias and block_elements 0 by type only).
// - matmul_accumulate.hpp: y's size: matmul_accumulate_test.cpp.
// - packed_b.hpp: pack_b's size, matmul of another compute type or m, the bias, matmul_accumulate of
//   another compute type: packed_b_test.cpp.
// - reductions.hpp: mean of an empty range: reductions_test.cpp (the others by type only).
// - softmax.hpp: softmax's sizes, softmax_rows with a row_length that does not divide: softmax_test.cpp.
// threads.hpp rethrows the first exception of a task, as documented there.
// Found by the audit: a shape whose element counts wrap around std::size_t passed the size checks of
// matmul, matmul_accumulate, pack_b and the packed products, which then read and wrote out of bounds;
// it is now an error, tested here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/kernels/activations.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/softmax.hpp"
#include "support/error_message.hpp"

namespace documented_errors_test {

namespace kernels = mixprec::kernels;
using mixprec::bfloat16;

namespace {

using test_support::says;

}  // namespace

TEST_CASE("activations.hpp: an output of another size", "[kernels][errors][activations]") {
  const std::vector<float> x(6, 0.5f);
  std::vector<float> out(4);
  const auto msg = [](const std::string& name) {
    return says({"kernels::" + name + ": the output has 4 elements but the input has 6"});
  };
  CHECK_THROWS_MATCHES(kernels::relu(x, out), std::invalid_argument, msg("relu"));
  CHECK_THROWS_MATCHES(kernels::sigmoid(x, out), std::invalid_argument, msg("sigmoid"));
  CHECK_THROWS_MATCHES(kernels::silu(x, out), std::invalid_argument, msg("silu"));
  CHECK_THROWS_MATCHES(kernels::gelu(x, out), std::invalid_argument, msg("gelu"));
  CHECK_THROWS_MATCHES(kernels::rsqrt(x, out), std::invalid_argument, msg("rsqrt"));
}

TEST_CASE("gemm.hpp: every documented error untested elsewhere is thrown", "[kernels][errors][gemm]") {
  std::vector<float> a(6), b(12), y(8), bias(4);
  SECTION("matmul: block_elements 0") {
    CHECK_THROWS_MATCHES(kernels::matmul<float>(a, b, y, {2, 3, 4}, kernels::b_layout::k_n, 0), std::invalid_argument,
                         says({"kernels::matmul: block_elements is 0"}));
  }
  SECTION("matmul with bias: a bias without n elements, block_elements 0") {
    CHECK_THROWS_MATCHES(kernels::matmul<float>(a, b, std::vector<float>(3), y, {2, 3, 4}, kernels::b_layout::k_n),
                         std::invalid_argument, says({"kernels::matmul: bias has 3 elements but shape [4] needs 4"}));
    CHECK_THROWS_MATCHES(kernels::matmul<float>(a, b, bias, y, {2, 3, 4}, kernels::b_layout::k_n, 0),
                         std::invalid_argument, says({"block_elements is 0"}));
  }
}

TEST_CASE("gemm.hpp: a shape whose element counts wrap around std::size_t", "[kernels][errors][gemm]") {
  // m · n = 2^64 wraps to 0, so empty a and y used to pass the size checks and the product read and
  // wrote out of bounds.
  const std::size_t huge = std::size_t{1} << 63;
  std::vector<float> a, b(4), y, bias(2);
  CHECK_THROWS_MATCHES(kernels::matmul<float>(a, b, y, {huge, 2, 2}, kernels::b_layout::k_n), std::invalid_argument,
                       says({"kernels::matmul: the shape", "has more elements than size_t counts"}));
  CHECK_THROWS_MATCHES(kernels::matmul<float>(a, b, bias, y, {huge, 2, 2}, kernels::b_layout::k_n),
                       std::invalid_argument, says({"has more elements than size_t counts"}));
  CHECK_THROWS_MATCHES(
      kernels::matmul_accumulate<float>(a, kernels::a_layout::m_k, b, kernels::b_layout::k_n, y, {huge, 2, 2}),
      std::invalid_argument, says({"has more elements than size_t counts"}));
  CHECK_THROWS_MATCHES(kernels::pack_b<float>(std::vector<float>{}, huge, 2, kernels::b_layout::k_n),
                       std::invalid_argument, says({"kernels::pack_b: b has 0 elements"}));
  const auto packed = kernels::pack_b<float>(b, 2, 2, kernels::b_layout::k_n);
  CHECK_THROWS_MATCHES(kernels::matmul<float>(a, packed, y, huge), std::invalid_argument,
                       says({"kernels::matmul: a has 0 and y 0 elements"}));
}

TEST_CASE("matmul_accumulate.hpp: a and b of another size than the shape", "[kernels][errors][matmul_accumulate]") {
  std::vector<float> a(6), b(6), y(4);
  CHECK_THROWS_MATCHES(kernels::matmul_accumulate<float>(std::vector<float>(5), kernels::a_layout::m_k, b,
                                                         kernels::b_layout::k_n, y, {2, 3, 2}),
                       std::invalid_argument, says({"a has 5 elements"}));
  CHECK_THROWS_MATCHES(kernels::matmul_accumulate<float>(a, kernels::a_layout::m_k, std::vector<float>(7),
                                                         kernels::b_layout::k_n, y, {2, 3, 2}),
                       std::invalid_argument, says({"b has 7 elements"}));
}

TEST_CASE("packed_b.hpp: every documented error untested elsewhere is thrown", "[kernels][errors][packed_b]") {
  const std::vector<float> b(12, 1.0f), a(6, 1.0f), bias(4);
  std::vector<float> y(8);
  const auto packed = kernels::pack_b<bfloat16>(b, 3, 4, kernels::b_layout::k_n);
  SECTION("matmul with bias: another compute type") {
    CHECK_THROWS_MATCHES(kernels::matmul<float>(a, packed, bias, y, 2), std::invalid_argument,
                         says({"b was packed for compute type bfloat16 but the product computes in float32"}));
  }
  SECTION("matmul_accumulate: a or y of another size") {
    std::vector<float> acc(6);
    CHECK_THROWS_MATCHES(kernels::matmul_accumulate<bfloat16>(a, packed, acc, 2), std::invalid_argument,
                         says({"a has 6 and y 6 elements", "with m = 2 needs a [2, 3] and y [2, 4]"}));
  }
}

TEST_CASE("reductions.hpp: an empty range", "[kernels][errors][reductions]") {
  const std::vector<float> empty;
  CHECK_THROWS_MATCHES(kernels::mean_variance(empty), std::invalid_argument,
                       says({"kernels::mean_variance: the range is empty"}));
  CHECK_THROWS_MATCHES(kernels::mean_square(std::span<const float>(empty)), std::invalid_argument,
                       says({"kernels::mean_square: the range is empty"}));
  CHECK_THROWS_MATCHES(kernels::scaled_mean_square(empty), std::invalid_argument,
                       says({"kernels::scaled_mean_square: the range is empty"}));
}

TEST_CASE("softmax.hpp: softmax_rows with row_length 0 or an output of another size", "[kernels][errors][softmax]") {
  const std::vector<float> x(6, 1.0f);
  std::vector<float> p(6), short_p(5);
  CHECK_THROWS_MATCHES(kernels::softmax_rows(x, p, 0), std::invalid_argument,
                       says({"kernels::softmax_rows: row_length 0 does not divide the input's 6 elements"}));
  CHECK_THROWS_MATCHES(kernels::softmax_rows(x, short_p, 3), std::invalid_argument,
                       says({"kernels::softmax_rows: the output has 5"}));
}

}  // namespace documented_errors_test
