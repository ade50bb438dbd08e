// Tests of nn::embedding<P>: lookups, id checks and the tied classifier `attend`, against float64
// references written here.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/nn/embedding.hpp"
#include "mixprec/policies/policy.hpp"
#include "policies.hpp"
#include "same_roundings.hpp"

namespace embedding_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::promote;
namespace nn = mixprec::nn;

namespace {
using namespace layer_tests;  // NOLINT(google-build-using-namespace): test support

/// A [vocab, features] table of distinct values with more digits than bfloat16 or float16 keep.
xt::xtensor<double, 2> make_table(std::size_t vocab, std::size_t features) {
  auto t = xt::xtensor<double, 2>::from_shape({vocab, features});
  for (std::size_t v = 0; v < vocab; ++v) {
    for (std::size_t f = 0; f < features; ++f) t(v, f) = std::sin(1.0 + 0.37 * static_cast<double>(v * features + f));
  }
  return t;
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("embedding returns table rows rounded to the compute type, in the output type",
                        "[nn][embedding]", all_policies) {
  using P = TestType;
  using Param = typename P::param_type;
  using C = nn::compute_t<P, Param>;
  using O = nn::output_t<P, Param>;
  const auto table = make_table(10, 4);
  const auto e = nn::embedding<P>::from_table(table);
  const xt::xtensor<std::int32_t, 2> ids = {{3, 0, 9}, {3, 7, 1}};
  const auto h = e(ids);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xtensor<O, 3>>);
  REQUIRE(h.shape()[0] == 2);
  REQUIRE(h.shape()[1] == 3);
  REQUIRE(h.shape()[2] == 4);
  // Each value is the table entry rounded to the param type, then to C, then to O: per step at most
  // u of that type (relative), and exact when the type is at least as wide as the previous one.
  const double tol = unit_roundoff<Param>() + unit_roundoff<C>() + unit_roundoff<O>();
  for (std::size_t a = 0; a < 2; ++a) {
    for (std::size_t b = 0; b < 3; ++b) {
      for (std::size_t f = 0; f < 4; ++f) {
        const double ref = table(static_cast<std::size_t>(ids(a, b)), f);
        const double got = static_cast<double>(h(a, b, f));
        CHECK(std::abs(got - ref) <= tol * std::abs(ref));
        // Exactly the chain of roundings: param, compute, output.
        CHECK(got == static_cast<double>(O(C(Param(ref)))));
      }
    }
  }
}

TEST_CASE("embedding under p=f32, c=bf16 rounds the rows to bfloat16", "[nn][embedding]") {
  xt::xtensor<float, 2> table = {{1.0f + 0x1p-10f, 2.0f}};
  const auto e = nn::embedding<p_c_bf16>::from_table(table);
  const auto h = e(xt::xtensor<int, 1>{0});
  CHECK(h(0, 0) == 1.0f);  // 1 + 2^-10 is not a bfloat16 value; stored exactly in the float32 param
  CHECK(e.table()(0, 0) == 1.0f + 0x1p-10f);
  const auto h32 = nn::embedding<p_f32>::from_table(table)(xt::xtensor<int, 1>{0});
  CHECK(h32(0, 0) == 1.0f + 0x1p-10f);
}

TEST_CASE("embedding accepts ids of any integer type and rank", "[nn][embedding]") {
  const auto e = nn::embedding<p_f32>::from_table(make_table(16, 3));
  const auto expect = [&](auto h, std::size_t flat, std::size_t id) {
    for (std::size_t f = 0; f < 3; ++f) CHECK(h.data()[flat * 3 + f] == static_cast<float>(make_table(16, 3)(id, f)));
  };
  expect(e(xt::xtensor<std::int8_t, 1>{5, 15}), 1, 15);
  expect(e(xt::xtensor<std::uint16_t, 1>{5, 15}), 0, 5);
  expect(e(xt::xtensor<std::int64_t, 3>{{{2}}, {{11}}}), 1, 11);
  expect(e(xt::xtensor<mixprec::int4, 1>{mixprec::int4(7)}), 0, 7);
  expect(e(xt::xtensor<mixprec::uint4, 1>{mixprec::uint4(15)}), 0, 15);
  const auto hx = e(xt::xarray<std::uint64_t>{{1, 2}, {3, 4}});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(hx)>, xt::xarray<float>>);
  REQUIRE(hx.dimension() == 3);
  expect(hx, 3, 4);
  // A rank-0 id gives one vector.
  const auto h0 = e(xt::xtensor<int, 0>(9));
  REQUIRE(h0.dimension() == 1);
  expect(h0, 0, 9);
}

TEST_CASE("embedding rejects ids out of range with the id, its position and the vocabulary size", "[nn][embedding]") {
  using Catch::Matchers::Contains;
  const nn::embedding<p_f32> e(10, 4);
  CHECK_THROWS_AS(e(xt::xtensor<int, 1>{10}), std::out_of_range);
  CHECK_THROWS_WITH(e(xt::xtensor<int, 2>{{1, 2, 3}, {4, 5, -1}}),
                    Contains("id -1") && Contains("[1, 2]") && Contains("vocabulary of 10") && Contains("0 to 9"));
  CHECK_THROWS_WITH(e(xt::xtensor<std::uint64_t, 1>{0, 18446744073709551615ULL}),
                    Contains("id 18446744073709551615") && Contains("[1]"));
  CHECK_THROWS_WITH(e(xt::xtensor<mixprec::int4, 1>{mixprec::int4(-8)}), Contains("id -8"));
  xt::xarray<long> big = xt::xarray<long>::from_shape({1, 1});
  big(0, 0) = 10;
  CHECK_THROWS_WITH(e(big), Contains("id 10") && Contains("[0, 0]"));
}

TEMPLATE_LIST_TEST_CASE("embedding::attend is x . table^T with float32 accumulation", "[nn][embedding]", all_policies) {
  using P = TestType;
  using C = nn::compute_t<P, float>;
  using O = nn::output_t<P, float>;
  using Acc = mixprec::accumulator_t<C>;
  const std::size_t vocab = 11, features = 24;
  std::mt19937 rng(8);
  const auto e = nn::embedding<P>::normal(vocab, features, rng);
  auto x = xt::xtensor<float, 2>::from_shape({3, features});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const auto logits = e.attend(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(logits)>, xt::xtensor<O, 2>>);
  REQUIRE(logits.shape()[1] == vocab);
  // Bound as for dense (see dense_test.cpp): (2 u_C + u_C^2) S + (K + 2) u_acc (1 + u_C)^2 S + u_O |y|.
  const double u_c = unit_roundoff<C>(), u_acc = unit_roundoff<Acc>();
  const double u_o = std::is_same_v<O, Acc> ? 0.0 : unit_roundoff<O>();
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t v = 0; v < vocab; ++v) {
      double ref = 0.0, s = 0.0;
      for (std::size_t f = 0; f < features; ++f) {
        const double p = static_cast<double>(x(r, f)) * static_cast<double>(e.table()(v, f));
        ref += p;
        s += std::abs(p);
      }
      const double err =
          (2 * u_c + u_c * u_c) * s + static_cast<double>(features + 2) * u_acc * (1 + u_c) * (1 + u_c) * s;
      CHECK(std::abs(static_cast<double>(logits(r, v)) - ref) <= err + u_o * (std::abs(ref) + err));
    }
  }
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(e.attend(xt::xtensor<float, 2>::from_shape({3, 5})),
                    Contains("[3, 5]") && Contains("[11, 24]") && Contains("expects 24"));
}

TEMPLATE_LIST_TEST_CASE(
    "embedding::attend equals a reference with its roundings up to float32 accumulation, and sees planted bugs",
    "[nn][embedding][same_roundings]", compute16_policies) {
  // The same-roundings reference (same_roundings.hpp): x and the table rounded to C, products summed in
  // float64, the result rounded to O. What the layer's float32 sum of K products leaves is
  // gamma_{K+1} sum |x t|; through the rounding to O, round_within turns it into 0 (no rounding boundary
  // within reach: the layer must give the reference's value exactly) or one ulp of O. Planted bugs, each
  // a reference computed with it: sums accumulated in C (rounded after each term), and x not rounded to
  // C. The layer must be outside each one's bound, and the references further apart than both bounds.
  using P = TestType;
  using C = nn::compute_t<P, float>;
  using O = nn::output_t<P, float>;
  const std::size_t vocab = 11, features = 24, rows = 4;
  std::mt19937 rng(18);
  const auto e = nn::embedding<P>::normal(vocab, features, rng);
  auto x = xt::xtensor<float, 2>::from_shape({rows, features});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const auto logits = e.attend(x);
  struct bugs {
    bool accumulate_in_c = false;
    bool unrounded_x = false;
  };
  auto reference = [&](bugs bug) {
    std::vector<double> y(rows * vocab), bound(rows * vocab);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t v = 0; v < vocab; ++v) {
        double s = 0.0, mag = 0.0;
        for (std::size_t f = 0; f < features; ++f) {
          const double xv = bug.unrounded_x ? static_cast<double>(x(r, f)) : round_as<C>(static_cast<double>(x(r, f)));
          const double p = xv * round_as<C>(static_cast<double>(e.table()(v, f)));
          s = bug.accumulate_in_c ? add_in(&round_as<C>, s, p) : s + p;
          mag += std::abs(p);
        }
        // + 1: the product's rounding when x is not rounded to C (exact products of C values otherwise).
        const bounded o = round_within(&round_as<O>, s, gamma_f32(features + 1) * mag);
        y[r * vocab + v] = o.v;
        bound[r * vocab + v] = o.e;
      }
    }
    return std::pair{y, bound};
  };
  const auto [ref, bound] = reference({});
  const comparison c = compare_with(logits, ref, bound);
  INFO(c.outside << " of " << c.elements << " outside, worst error / bound " << c.worst << ", " << c.exact << " exact");
  for (std::size_t i = 0; i < ref.size(); ++i) {
    INFO("element " << i << ": got " << static_cast<double>(logits.data()[i]) << ", reference " << ref[i] << ", bound "
                    << bound[i]);
    REQUIRE(std::abs(static_cast<double>(logits.data()[i]) - ref[i]) <= bound[i]);
  }
  for (const auto& [name, bug] : {std::pair{"sums accumulated in C", bugs{.accumulate_in_c = true}},
                                  std::pair{"x not rounded to C", bugs{.unrounded_x = true}}}) {
    const auto [bug_ref, bug_bound] = reference(bug);
    const comparison b = separate(compare_with(logits, bug_ref, bug_bound), ref, bound, bug_ref, bug_bound);
    INFO("planted bug: " << name << ": the layer is outside its bound at " << b.outside << " of " << b.elements
                         << " elements (worst error / bound " << b.worst << "); separation " << b.separation);
    CHECK(b.outside > 0);
    CHECK(b.separation > 1.0);
  }
}

TEST_CASE("embedding::attend follows promote for bf16, f64 and complex inputs", "[nn][embedding]") {
  const nn::embedding<p_promote> e(4, 2);
  STATIC_REQUIRE(std::is_same_v<decltype(e.attend(xt::xtensor<bfloat16, 2>{}))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(e.attend(xt::xtensor<double, 2>{}))::value_type, double>);
  STATIC_REQUIRE(
      std::is_same_v<decltype(e.attend(xt::xtensor<std::complex<float>, 2>{}))::value_type, std::complex<float>>);
  STATIC_REQUIRE(std::is_same_v<decltype(e(xt::xtensor<int, 1>{}))::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(nn::embedding<p_bf16>(4, 2)(xt::xtensor<int, 1>{}))::value_type, bfloat16>);
}

}  // namespace embedding_test
