// Tests of mixprec/arrays/tree.hpp: what is a tree, tree_map, tree_for_each, tree_leaf_types_t, and the
// tree_traits customization point (a user struct template whose element type changes).
#include <catch2/catch.hpp>

#include <array>
#include <complex>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/intn.hpp"
#include "support/layer_params.hpp"

namespace tree_test {

namespace {

using mixprec_test::layer_params;

struct not_a_tree {
  float x;
};

/// Doubles numbers, returning double for floating leaves and keeping integer types.
struct twice_fn {
  template <class L>
  auto operator()(const L& x) const {
    if constexpr (std::is_floating_point_v<L> || mixprec::small_float<L>) {
      return 2.0 * static_cast<double>(x);
    } else {
      return static_cast<L>(x + x);
    }
  }
};

}  // namespace

TEST_CASE("tree concepts classify leaves, nodes and other types", "[tree]") {
  STATIC_REQUIRE(mixprec::tree_leaf<float>);
  STATIC_REQUIRE(mixprec::tree_leaf<const double>);
  STATIC_REQUIRE(mixprec::tree_leaf<bool>);
  STATIC_REQUIRE(mixprec::tree_leaf<std::int8_t>);
  STATIC_REQUIRE(mixprec::tree_leaf<std::complex<float>>);
  STATIC_REQUIRE(mixprec::tree_leaf<mixprec::bfloat16>);
  STATIC_REQUIRE(mixprec::tree_leaf<mixprec::int4>);
  STATIC_REQUIRE_FALSE(mixprec::tree_leaf<std::vector<float>>);

  STATIC_REQUIRE(mixprec::floating_leaf<mixprec::float16>);
  STATIC_REQUIRE(mixprec::floating_leaf<long double>);
  STATIC_REQUIRE_FALSE(mixprec::floating_leaf<int>);
  STATIC_REQUIRE_FALSE(mixprec::floating_leaf<std::complex<float>>);
  STATIC_REQUIRE(mixprec::complex_leaf<std::complex<double>>);

  STATIC_REQUIRE(mixprec::tree<std::tuple<float, int>>);
  STATIC_REQUIRE(mixprec::tree_product_node<std::pair<float, int>>);
  STATIC_REQUIRE(mixprec::tree_range_node<std::vector<float>>);
  STATIC_REQUIRE(mixprec::tree_range_node<std::array<float, 3>>);
  STATIC_REQUIRE(mixprec::tree_range_node<std::map<std::string, float>>);
  STATIC_REQUIRE(mixprec::tree_product_node<layer_params<float>>);
  STATIC_REQUIRE_FALSE(mixprec::tree<std::string>);
  STATIC_REQUIRE_FALSE(mixprec::tree<not_a_tree>);
}

TEST_CASE("tree_map keeps the structure and changes the leaf types f chooses", "[tree]") {
  const auto t =
      std::tuple{std::vector<float>{1.5f, -2.0f}, std::int16_t{7}, std::pair{mixprec::bfloat16(0.25f), true}};
  const auto r = mixprec::tree_map(twice_fn{}, t);
  using R = std::remove_cvref_t<decltype(r)>;
  STATIC_REQUIRE(std::is_same_v<R, std::tuple<std::vector<double>, std::int16_t, std::pair<double, bool>>>);
  CHECK(std::get<0>(r) == std::vector<double>{3.0, -4.0});
  CHECK(std::get<1>(r) == 14);
  CHECK(std::get<2>(r).first == 0.5);
  CHECK(std::get<2>(r).second == true);  // bool + bool = 2, converted back to bool: true
  STATIC_REQUIRE(std::is_same_v<mixprec::tree_map_t<twice_fn, decltype(t)>, R>);
}

TEST_CASE("tree_map on a leaf applies f once", "[tree]") {
  CHECK(mixprec::tree_map([](float x) { return x + 1.0f; }, 2.0f) == 3.0f);
}

TEST_CASE("tree_map on empty containers gives empty containers of the mapped type", "[tree]") {
  const std::vector<float> empty;
  const auto r = mixprec::tree_map(twice_fn{}, empty);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::vector<double>>);
  CHECK(r.empty());
  const auto unit = mixprec::tree_map(twice_fn{}, std::tuple<>{});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(unit)>, std::tuple<>>);
}

TEST_CASE("tree_for_each visits leaves depth first, left to right", "[tree]") {
  const auto t = std::tuple{1, std::vector<std::pair<int, int>>{{2, 3}, {4, 5}}, std::array<int, 2>{6, 7},
                            std::map<std::string, int>{{"b", 9}, {"a", 8}}, 10};
  std::vector<int> seen;
  mixprec::tree_for_each([&seen](const auto& x) { seen.push_back(static_cast<int>(x)); }, t);
  // std::map children are visited in key order: "a" (8) before "b" (9).
  CHECK(seen == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
}

TEST_CASE("tree_map calls f on leaves in tree order", "[tree]") {
  const auto t = std::tuple{1, std::pair{2, 3}, std::vector<int>{4, 5}, 6};
  std::vector<int> order;
  const auto r = mixprec::tree_map(
      [&order](int x) {
        order.push_back(x);
        return x;
      },
      t);
  CHECK(order == std::vector<int>{1, 2, 3, 4, 5, 6});
  CHECK(r == t);
}

TEST_CASE("tree_for_each on a non-const tree can change leaves in place", "[tree]") {
  auto t = std::tuple{std::vector<float>{1.0f, 2.0f}, 3, mixprec::bfloat16(4.0f)};
  mixprec::tree_for_each(
      [](auto& x) {
        using L = std::remove_cvref_t<decltype(x)>;
        if constexpr (std::is_same_v<L, float>) x = 0.0f;
        if constexpr (std::is_same_v<L, mixprec::bfloat16>) x = mixprec::bfloat16(-1.0f);
      },
      t);
  CHECK(std::get<0>(t) == std::vector<float>{0.0f, 0.0f});
  CHECK(std::get<1>(t) == 3);
  CHECK(std::get<2>(t).bits() == 0xBF80);  // -1.0 in bfloat16: sign 1, exponent 127, mantissa 0
}

TEST_CASE("std::map keeps its keys, only values are leaves", "[tree]") {
  const std::map<std::string, std::vector<float>> params{{"w", {1.0f, 2.0f}}, {"b", {0.5f}}};
  const auto r = mixprec::tree_map(twice_fn{}, params);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, std::map<std::string, std::vector<double>>>);
  REQUIRE(r.size() == 2);
  CHECK(r.at("w") == std::vector<double>{2.0, 4.0});
  CHECK(r.at("b") == std::vector<double>{1.0});
}

TEST_CASE("std::vector<bool> is a tree of bools", "[tree]") {
  const std::vector<bool> flags{true, false, true};
  const auto as_int = mixprec::tree_map([](bool b) { return b ? 1 : 0; }, flags);
  CHECK(as_int == std::vector<int>{1, 0, 1});
  int count = 0;
  mixprec::tree_for_each([&count](const bool& b) { count += b ? 1 : 0; }, flags);
  CHECK(count == 2);
}

TEST_CASE("a user struct template opts in with children and rebuild, and mapping changes its T", "[tree]") {
  const layer_params<float> p{1.5f, -0.5f, 42};
  const auto r = mixprec::tree_map(twice_fn{}, p);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(r)>, layer_params<double>>);
  CHECK(r.w == 3.0);
  CHECK(r.b == -1.0);
  CHECK(r.step == 84);

  // Nested: the struct's children are themselves trees.
  const layer_params<std::vector<float>> q{{1.0f, 2.0f}, {3.0f}, 5};
  const auto s = mixprec::tree_map(twice_fn{}, q);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(s)>, layer_params<std::vector<double>>>);
  CHECK(s.w == std::vector<double>{2.0, 4.0});
  CHECK(s.b == std::vector<double>{6.0});
  CHECK(s.step == 10);
}

TEST_CASE("tree_leaf_types_t lists leaf types in tree order from the type alone", "[tree]") {
  using T = std::tuple<float, std::vector<std::pair<mixprec::bfloat16, int>>, layer_params<double>,
                       std::map<std::string, std::complex<float>>>;
  STATIC_REQUIRE(
      std::is_same_v<mixprec::tree_leaf_types_t<T>,
                     mixprec::type_list<float, mixprec::bfloat16, int, double, double, int, std::complex<float>>>);
  STATIC_REQUIRE(std::is_same_v<mixprec::tree_leaf_types_t<std::tuple<>>, mixprec::type_list<>>);
  STATIC_REQUIRE(std::is_same_v<mixprec::tree_leaf_types_t<mixprec::int4>, mixprec::type_list<mixprec::int4>>);
}

}  // namespace tree_test
