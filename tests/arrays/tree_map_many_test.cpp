// Tests of tree_map over several trees of the same structure (mixprec/arrays/tree.hpp), JAX's
// jax.tree_util.tree_map(f, tree, *rest): leaves at the same place are combined, the result has the
// first tree's structure, and trees of another structure are rejected before f is called. Expected
// values are worked by hand; the numbers are chosen so that float arithmetic is exact.
#include <catch2/catch.hpp>

#include <Eigen/Core>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "mixprec/arrays/eigen.hpp"
#include "mixprec/arrays/tree.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "support/layer_params.hpp"

namespace tree_map_many_test {

using Catch::Matchers::Contains;
using mixprec::bfloat16;

namespace {

using mixprec_test::layer_params;

// p - 0.5 * g for floating leaves (in float), the first tree's value for integers.
struct sgd_fn {
  template <class P, class G>
  auto operator()(const P& p, const G& g) const {
    if constexpr (std::is_integral_v<P>) {
      return p;
    } else {
      return static_cast<float>(p) - 0.5f * static_cast<float>(g);
    }
  }
};

}  // namespace

TEST_CASE("tree_map(f, params, grads) combines the leaves at the same place (an SGD step)", "[tree][tree_map]") {
  const std::tuple<std::vector<float>, float> params{{1.0f, 2.0f}, 0.5f};
  const std::tuple<std::vector<float>, float> grads{{0.5f, -1.0f}, 1.0f};
  const auto updated = mixprec::tree_map(sgd_fn{}, params, grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(updated)>, std::tuple<std::vector<float>, float>>);
  // 1 - 0.25 = 0.75, 2 + 0.5 = 2.5, 0.5 - 0.5 = 0.
  CHECK(std::get<0>(updated) == std::vector<float>{0.75f, 2.5f});
  CHECK(std::get<1>(updated) == 0.0f);
}

TEST_CASE("tree_map over three trees passes one leaf of each, in argument order", "[tree][tree_map]") {
  const std::vector<int> a{1, 2, 3};
  const std::vector<int> b{10, 20, 30};
  const std::vector<int> c{100, 200, 300};
  const auto r = mixprec::tree_map([](int x, int y, int z) { return x + 2 * y + 3 * z; }, a, b, c);
  CHECK(r == std::vector<int>{321, 642, 963});
}

TEST_CASE("the trees may have other leaf types, and f chooses the result's", "[tree][tree_map]") {
  const std::vector<float> params{1.0f, -3.0f};
  const std::vector<bfloat16> grads{bfloat16(2.0f), bfloat16(0.25f)};
  const auto updated = mixprec::tree_map(sgd_fn{}, params, grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(updated)>, std::vector<float>>);
  CHECK(updated == std::vector<float>{0.0f, -3.125f});
  const auto doubled = mixprec::tree_map([](float x, bfloat16 y) { return static_cast<double>(x) * y; }, params, grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(doubled)>, std::vector<double>>);
  CHECK(doubled == std::vector<double>{2.0, -0.75});
}

TEST_CASE("tree_map over several trees calls f depth first, left to right", "[tree][tree_map]") {
  using tree = std::tuple<float, std::vector<std::pair<float, float>>, std::map<std::string, float>>;
  const tree a{1.0f, {{2.0f, 3.0f}, {4.0f, 5.0f}}, {{"x", 6.0f}, {"y", 7.0f}}};
  const tree b{10.0f, {{20.0f, 30.0f}, {40.0f, 50.0f}}, {{"x", 60.0f}, {"y", 70.0f}}};
  std::vector<float> seen;
  const auto r = mixprec::tree_map(
      [&seen](float x, float y) {
        seen.push_back(x);
        seen.push_back(y);
        return x + y;
      },
      a, b);
  CHECK(seen == std::vector<float>{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60, 7, 70});
  CHECK(std::get<0>(r) == 11.0f);
  CHECK(std::get<1>(r) == std::vector<std::pair<float, float>>{{22.0f, 33.0f}, {44.0f, 55.0f}});
  CHECK(std::get<2>(r) == std::map<std::string, float>{{"x", 66.0f}, {"y", 77.0f}});
}

TEST_CASE("a user struct is rebuilt from the first tree's node type", "[tree][tree_map]") {
  const layer_params<std::vector<float>> params{{1.0f, 1.5f}, {0.0f}, 7};
  const layer_params<std::vector<bfloat16>> grads{{bfloat16(1.0f), bfloat16(-1.0f)}, {bfloat16(4.0f)}, 3};
  const auto updated = mixprec::tree_map(sgd_fn{}, params, grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(updated)>, layer_params<std::vector<float>>>);
  CHECK(updated.w == std::vector<float>{0.5f, 2.0f});
  CHECK(updated.b == std::vector<float>{-2.0f});
  CHECK(updated.step == 7);  // integers: the first tree's value
}

TEST_CASE("std::vector<bool> leaves zip with other trees", "[tree][tree_map]") {
  const std::vector<bool> mask{true, false, true};
  const std::vector<float> x{1.5f, 2.5f, 3.5f};
  const auto r = mixprec::tree_map([](bool keep, float v) { return keep ? v : 0.0f; }, mask, x);
  CHECK(r == std::vector<float>{1.5f, 0.0f, 3.5f});
}

TEST_CASE("Eigen and xtensor containers zip element by element", "[tree][tree_map]") {
  Eigen::Matrix<float, 2, 2> m;
  m << 1.0f, 2.0f, 3.0f, 4.0f;
  Eigen::Matrix<float, 2, 2> n;
  n << 0.5f, 0.5f, 1.0f, 1.0f;
  const Eigen::Matrix<float, 2, 2> mn = mixprec::tree_map([](float a, float b) { return a * b; }, m, n);
  CHECK(mn(0, 0) == 0.5f);
  CHECK(mn(0, 1) == 1.0f);
  CHECK(mn(1, 0) == 3.0f);
  CHECK(mn(1, 1) == 4.0f);

  const xt::xtensor<float, 2> a{{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}};
  const xt::xtensor<float, 2> b{{1.0f, 1.0f, 1.0f}, {2.0f, 2.0f, 2.0f}};
  const auto d = mixprec::tree_map([](float x, float y) { return x - y; }, a, b);
  REQUIRE(d.shape(0) == 2);
  REQUIRE(d.shape(1) == 3);
  CHECK(d(0, 0) == 0.0f);
  CHECK(d(0, 2) == 2.0f);
  CHECK(d(1, 0) == 2.0f);
  CHECK(d(1, 2) == 4.0f);
}

TEST_CASE("trees whose containers differ in size, shape or keys are rejected before f is called",
          "[tree][tree_map][errors]") {
  int calls = 0;
  const auto add = [&calls](auto x, auto y) {
    ++calls;
    return x + y;
  };

  const std::tuple<std::vector<float>, std::vector<float>> a{{1.0f}, {1.0f, 2.0f}};
  const std::tuple<std::vector<float>, std::vector<float>> b{{1.0f}, {1.0f, 2.0f, 3.0f}};
  CHECK_THROWS_AS(mixprec::tree_map(add, a, b), std::invalid_argument);
  CHECK_THROWS_WITH(mixprec::tree_map(add, a, b),
                    Contains("the trees differ in structure: at root[1], tree 2 has 3 children where the first tree "
                             "has 2"));
  // The third tree is the one that differs, two levels down.
  const std::vector<std::vector<int>> p{{1, 2}, {3}};
  const std::vector<std::vector<int>> q{{1, 2}, {3}};
  const std::vector<std::vector<int>> r{{1, 2}, {3, 4}};
  CHECK_THROWS_WITH(mixprec::tree_map([&calls](int x, int y, int z) { return x + y + z + 0 * ++calls; }, p, q, r),
                    Contains("at root[1], tree 3 has 2 children where the first tree has 1"));

  const std::map<std::string, float> m1{{"b", 1.0f}, {"w", 2.0f}};
  const std::map<std::string, float> m2{{"b", 1.0f}, {"v", 2.0f}};
  CHECK_THROWS_WITH(mixprec::tree_map(add, m1, m2), Contains("at root, tree 2 has other keys than the first tree"));

  const xt::xtensor<float, 2> x23 = xt::zeros<float>({2, 3});
  const xt::xtensor<float, 2> x32 = xt::zeros<float>({3, 2});
  CHECK_THROWS_WITH(mixprec::tree_map(add, x23, x32),
                    Contains("tree 2 has shape [3, 2] where the first tree has shape [2, 3]"));

  const Eigen::MatrixXf e23 = Eigen::MatrixXf::Zero(2, 3);
  const Eigen::MatrixXf e32 = Eigen::MatrixXf::Zero(3, 2);
  CHECK_THROWS_WITH(mixprec::tree_map(add, e23, e32), Contains("tree 2 is 3 x 2 where the first tree is 2 x 3"));

  CHECK(calls == 0);
}

}  // namespace tree_map_many_test
