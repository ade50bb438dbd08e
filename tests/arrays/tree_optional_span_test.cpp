// Tests of mixprec/arrays/tree.hpp's std::optional and std::span nodes, structs opting in through a
// static member tree_children, and tree_zero.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/formats/bfloat16.hpp"

namespace tree_optional_span_test {

using mixprec::tree_for_each;
using mixprec::tree_map;

namespace {
struct grads {
  std::vector<float> kernel;
  std::optional<std::vector<float>> bias;
  static auto tree_children(auto& self) noexcept { return std::tie(self.kernel, self.bias); }
};

float sum(const auto& tree) {
  float s = 0;
  tree_for_each([&s](const auto& x) { s += static_cast<float>(x); }, tree);
  return s;
}
}  // namespace

static_assert(mixprec::tree<std::optional<float>>);
static_assert(mixprec::tree<std::span<float>>);
static_assert(mixprec::tree_product_node<grads>);

TEST_CASE("std::optional is a node of zero or one child", "[arrays][tree]") {
  const std::optional<std::vector<float>> some{{1.0f, 2.0f}};
  const std::optional<std::vector<float>> none;
  CHECK(sum(some) == 3.0f);
  CHECK(sum(none) == 0.0f);
  const auto doubled = tree_map([](float x) { return 2 * x; }, some);
  static_assert(std::is_same_v<decltype(doubled), const std::optional<std::vector<float>>>);
  CHECK(*doubled == std::vector<float>{2.0f, 4.0f});
  CHECK_FALSE(tree_map([](float x) { return 2 * x; }, none).has_value());
  const auto halves = tree_map([](float x) { return mixprec::bfloat16(x); }, some);
  static_assert(std::is_same_v<decltype(halves), const std::optional<std::vector<mixprec::bfloat16>>>);
}

TEST_CASE("an empty and an engaged optional differ in structure", "[arrays][tree]") {
  const std::optional<float> some{1.0f}, none;
  CHECK(tree_map([](float a, float b) { return a + b; }, some, some) == std::optional<float>(2.0f));
  CHECK_THROWS_WITH(tree_map([](float a, float b) { return a + b; }, some, none),
                    "mixprec::tree_map: the trees differ in structure: at root, tree 2 has 0 children where the "
                    "first tree has 1. Every tree must have the structure of the first.");
}

TEST_CASE("std::span walks write through, and a vector of spans is a tree", "[arrays][tree]") {
  std::vector<float> a{1.0f, 2.0f}, b{3.0f};
  std::vector<std::span<float>> spans{std::span<float>(a), std::span<float>(b)};
  tree_for_each([](float& x) { x *= 2; }, spans);
  CHECK(a == std::vector<float>{2.0f, 4.0f});
  CHECK(b == std::vector<float>{6.0f});
  const auto mapped = tree_map([](float x) { return x + 1; }, spans);
  static_assert(std::is_same_v<decltype(mapped), const std::vector<std::vector<float>>>);
  CHECK(mapped[0] == std::vector<float>{3.0f, 5.0f});
}

TEST_CASE("a struct with tree_children is a product node, rebuilt when the leaves keep their type", "[arrays][tree]") {
  const grads g{{1.0f, 2.0f}, std::vector<float>{3.0f}};
  CHECK(sum(g) == 6.0f);
  const auto same = tree_map([](float x) { return -x; }, g);
  static_assert(std::is_same_v<decltype(same), const grads>);
  CHECK(same.kernel == std::vector<float>{-1.0f, -2.0f});
  CHECK(*same.bias == std::vector<float>{-3.0f});
  const auto cast = tree_map([](float x) { return static_cast<double>(x); }, g);
  static_assert(
      std::is_same_v<decltype(cast), const std::tuple<std::vector<double>, std::optional<std::vector<double>>>>);
  CHECK(std::get<0>(cast) == std::vector<double>{1.0, 2.0});
  const auto added = tree_map([](float x, float y) { return x + y; }, g, g);
  CHECK(added.kernel == std::vector<float>{2.0f, 4.0f});
  const grads no_bias{{1.0f}, std::nullopt};
  CHECK_THROWS_WITH(tree_map([](float x, float y) { return x + y; }, g, no_bias),
                    Catch::Contains("at root[0], tree 2 has 1 children where the first tree has 2"));
}

TEST_CASE("tree_zero zeroes every leaf where it is", "[arrays][tree]") {
  grads g{{1.0f, -2.0f}, std::vector<float>{3.0f}};
  const float* kernel_data = g.kernel.data();
  std::tuple<grads, std::vector<int>> both{g, {4, 5}};
  mixprec::tree_zero(g);
  CHECK(g.kernel == std::vector<float>{0.0f, 0.0f});
  CHECK(!std::signbit(g.kernel[1]));
  CHECK(*g.bias == std::vector<float>{0.0f});
  CHECK(g.kernel.data() == kernel_data);
  mixprec::tree_zero(both);
  CHECK(sum(both) == 0.0f);
  std::vector<float> buffer{1.0f, 2.0f};
  std::vector<std::span<float>> spans{std::span<float>(buffer)};
  mixprec::tree_zero(spans);
  CHECK(buffer == std::vector<float>{0.0f, 0.0f});
}

}  // namespace tree_optional_span_test
