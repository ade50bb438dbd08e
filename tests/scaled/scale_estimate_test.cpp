// Tests of mixprec/scaled/scale_estimate.hpp: the propagation rules of the scale-propagation proposal
// behind AutoScale (graphcore-research/jax-scalify, docs/scaleprop_proposal_20231110.md), by hand, and its
// worked example.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "mixprec/scaled/scale_estimate.hpp"

namespace scale_estimate_test {

using mixprec::scale_estimate;

TEST_CASE("scale rules: the proposal's worked example, A (64, 2) times B (16, 1) over K = 4096", "[scaled]") {
  // Proposal #3: "(64*16*4096, 2*1*sqrt(4096)) = (4194304, 128)"; after requantising A to (8, 4):
  // "(524288, 256)".
  CHECK(mixprec::matmul_scales({64, 2}, {16, 1}, 4096) == scale_estimate{4194304, 128});
  CHECK(mixprec::matmul_scales({8, 4}, {16, 1}, 4096) == scale_estimate{524288, 256});
}

TEST_CASE("scale rules: add, sub, mul, scalar and sum by hand", "[scaled]") {
  // add/sub: worst case sA + sB; average case sqrt(eA^2 + eB^2): 3-4-5.
  CHECK(mixprec::add_scales({2, 3}, {5, 4}) == scale_estimate{7, 5});
  CHECK(mixprec::mul_scales({2, 3}, {5, 4}) == scale_estimate{10, 12});
  CHECK(mixprec::scalar_mul_scales({2, 3}, -0.5) == scale_estimate{1, 1.5});
  // sum of N = 100 elements: N sA and sqrt(N) eA.
  CHECK(mixprec::sum_scales({2, 3}, 100) == scale_estimate{200, 30});
  // dot with K = 9: sA sB 9 and eA eB 3.
  CHECK(mixprec::matmul_scales({2, 3}, {5, 4}, 9) == scale_estimate{90, 36});
}

TEST_CASE("scale rules: the hypot of add does not overflow or underflow for extreme scales", "[scaled]") {
  // sqrt(eA^2 + eB^2) computed naively overflows for 1e200; hypot keeps it.
  const scale_estimate big = mixprec::add_scales({1e200, 1e200}, {1e200, 1e200});
  CHECK(big.expected_scale == Approx(std::sqrt(2.0) * 1e200));
  const scale_estimate tiny = mixprec::add_scales({1e-200, 3e-200}, {1e-200, 4e-200});
  CHECK(tiny.expected_scale == Approx(5e-200));
}

TEST_CASE("check_scale_estimate: zero, negative and non-finite scales are rejected with a clear message", "[scaled]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const scale_estimate bad : {scale_estimate{0, 1}, scale_estimate{1, 0}, scale_estimate{-1, 1},
                                   scale_estimate{1, -2}, scale_estimate{nan, 1}, scale_estimate{1, inf}}) {
    CAPTURE(bad.scale, bad.expected_scale);
    CHECK_THROWS_WITH(mixprec::check_scale_estimate(bad, "here"),
                      Catch::Matchers::StartsWith("here: scales must be finite and positive"));
  }
  CHECK_NOTHROW(mixprec::check_scale_estimate({1e-300, 1e-300}, "here"));
}

TEST_CASE("scale_rule names", "[scaled]") {
  CHECK(mixprec::to_string(mixprec::scale_rule::worst_case) == "worst_case");
  CHECK(mixprec::to_string(mixprec::scale_rule::average_case) == "average_case");
  CHECK(mixprec::to_string(mixprec::scale_rule::hybrid) == "hybrid");
}

}  // namespace scale_estimate_test
