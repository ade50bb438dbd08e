// Tests of mixprec/arrays/xtensor.hpp: xtensor containers as trees (cast, loss scaling, all_finite). The
// cast result must be an evaluated container of the new element type (xtensor's pitfall docs: an
// `auto` expression must not outlive its operands). Bit patterns are worked out from the formats.
#include <catch2/catch.hpp>

#include <array>
#include <complex>
#include <cstddef>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xadapt.hpp>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/cast.hpp"
#include "mixprec/policies/loss_scale.hpp"

namespace cast_xtensor_test {

using mixprec::bfloat16;
using mixprec::float16;

TEST_CASE("an xt::xarray of float cast to bfloat16 is an evaluated xarray of the same shape", "[cast][xtensor]") {
  const xt::xarray<float> x = {{1.0f, 3.14159274f, -2.0f}, {0.5f, 0.1f, 65504.0f}};
  const auto h = mixprec::cast_floating<bfloat16>(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xarray<bfloat16>>);
  REQUIRE(h.dimension() == 2);
  CHECK(h.shape(0) == 2);
  CHECK(h.shape(1) == 3);
  CHECK(h(0, 0).bits() == 0x3F80);  // 1.0
  CHECK(h(0, 1).bits() == 0x4049);  // 3.14159274f: low half 0x0FDB rounds down
  CHECK(h(0, 2).bits() == 0xC000);  // -2.0
  CHECK(h(1, 0).bits() == 0x3F00);  // 0.5
  CHECK(h(1, 1).bits() == 0x3DCD);  // 0.1f = 0x3DCCCCCD rounds up
  CHECK(h(1, 2).bits() == 0x4780);  // 65504 rounds up to 65536
}

TEST_CASE("xt::xtensor keeps its rank and a column-major layout", "[cast][xtensor]") {
  xt::xtensor<double, 2, xt::layout_type::column_major> x = xt::zeros<double>({2, 3});
  x(0, 2) = 3.0;
  x(1, 0) = -0.25;
  const auto f = mixprec::cast_floating<float>(x);
  using column_major_f = xt::xtensor<float, 2, xt::layout_type::column_major>;
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(f)>, column_major_f>);
  CHECK(f.shape(0) == 2);
  CHECK(f.shape(1) == 3);
  CHECK(f(0, 2) == 3.0f);
  CHECK(f(1, 0) == -0.25f);
  CHECK(f(1, 2) == 0.0f);
  CHECK(f.data()[1] == -0.25f);  // column-major storage: (1, 0) is the second element
}

TEST_CASE("an xarray with dynamic layout keeps its strides", "[cast][xtensor]") {
  xt::xarray<float, xt::layout_type::dynamic> x;
  x.resize({2, 2}, xt::layout_type::column_major);
  x(0, 0) = 1.0f;
  x(0, 1) = 2.0f;
  x(1, 0) = 3.0f;
  x(1, 1) = 4.0f;
  const auto h = mixprec::cast_floating<float16>(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xarray<float16, xt::layout_type::dynamic>>);
  CHECK(static_cast<float>(h(0, 1)) == 2.0f);
  CHECK(static_cast<float>(h(1, 0)) == 3.0f);
  CHECK(h(1, 1).bits() == 0x4400);  // 4 = 2^2: exponent 17
}

TEST_CASE("xt::xtensor_fixed is cast to a fixed tensor of the new type", "[cast][xtensor]") {
  const xt::xtensor_fixed<float, xt::xshape<2, 2>> x = {{1.0f, 2.0f}, {3.0f, 0.1f}};
  const auto h = mixprec::cast_floating<bfloat16>(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xtensor_fixed<bfloat16, xt::xshape<2, 2>>>);
  CHECK(h(1, 0).bits() == 0x4040);  // 3.0 = 1.5 * 2^1
  CHECK(h(1, 1).bits() == 0x3DCD);
}

TEST_CASE("complex xtensor containers follow a double target", "[cast][xtensor]") {
  const xt::xtensor<std::complex<float>, 1> z = {std::complex<float>(1.0f, -1.0f), std::complex<float>(0.5f, 2.0f)};
  const auto zd = mixprec::cast_floating<double>(z);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(zd)>, xt::xtensor<std::complex<double>, 1>>);
  CHECK(zd(1) == std::complex<double>(0.5, 2.0));
}

TEST_CASE("xtensor containers inside trees, with a policy and with promote", "[cast][xtensor]") {
  using P = mixprec::policy<float, bfloat16, float>;
  const std::vector<xt::xtensor<float, 1>> layers{xt::xtensor<float, 1>{1.0f, 2.0f}, xt::xtensor<float, 1>{0.5f}};
  const auto c = mixprec::cast_to_compute<P>(std::pair{layers, 12});
  using expected = std::pair<std::vector<xt::xtensor<bfloat16, 1>>, int>;
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(c)>, expected>);
  CHECK(c.first[0](1).bits() == 0x4000);  // 2.0
  CHECK(c.first[1](0).bits() == 0x3F00);  // 0.5
  CHECK(c.second == 12);

  // Flax's promote: bfloat16 activations with float32 weights compute in float32.
  using Q = mixprec::policy<float, mixprec::promote>;
  const xt::xtensor<bfloat16, 1> x = {bfloat16(1.5f), bfloat16(-2.0f)};
  const xt::xtensor<float, 1> w = {0.25f, 4.0f};
  const auto [xc, wc] = mixprec::cast_to_compute<Q>(std::pair{x, w});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(xc)>, xt::xtensor<float, 1>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(wc)>, xt::xtensor<float, 1>>);
  CHECK(xc(0) == 1.5f);
  CHECK(xc(1) == -2.0f);
}

TEST_CASE("all_finite and loss scaling reach into xtensor leaves", "[xtensor][all_finite][loss_scale]") {
  xt::xtensor<bfloat16, 1> g = {bfloat16(1.0f), bfloat16(-3.0f), bfloat16(0.5f)};
  const auto t = std::tuple{g, xt::xarray<double>{1.0, 2.0}, 5};
  CHECK(mixprec::all_finite(t));

  auto broken = t;
  std::get<0>(broken)(2) = bfloat16(std::numeric_limits<float>::infinity());
  CHECK_FALSE(mixprec::all_finite(broken));
  broken = t;
  std::get<1>(broken)(0) = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(mixprec::all_finite(broken));

  const mixprec::dynamic_loss_scale ls({.initial_scale = 256.0f});
  const auto scaled = ls.scale(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(scaled)>, std::remove_cvref_t<decltype(t)>>);
  CHECK(std::get<0>(scaled)(1).bits() == 0xC440);  // -768 = -1.5 * 2^9: exponent 136, mantissa 0b1000000
  CHECK(std::get<1>(scaled)(1) == 512.0);
  CHECK(std::get<2>(scaled) == 5);
  const auto back = ls.unscale(scaled);
  CHECK(std::get<0>(back) == std::get<0>(t));
  CHECK(std::get<1>(back) == std::get<1>(t));
}

TEST_CASE("xt::adapt adaptors are trees: casts give owning containers, in-place walks write through",
          "[cast][xtensor][adapt]") {
  std::vector<float> buffer{1.0f, 3.14159274f, -2.0f, 0.5f, 0.1f, 65504.0f};
  auto fixed_rank = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::array<std::size_t, 2>{2, 3});
  const auto h = mixprec::cast_floating<bfloat16>(fixed_rank);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(h)>, xt::xtensor<bfloat16, 2>>);
  REQUIRE(h.shape() == std::array<std::size_t, 2>{2, 3});
  CHECK(h(0, 1).bits() == 0x4049);  // pi: 1.5707963 * 2^1, mantissa 0x49 after rounding to nearest
  CHECK(h(1, 2).bits() == 0x4780);  // 65504 rounds up to 65536 = 2^16
  auto any_rank = xt::adapt(buffer.data(), buffer.size(), xt::no_ownership(), std::vector<std::size_t>{6});
  const auto d = mixprec::cast_floating<double>(any_rank);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(d)>, xt::xarray<double>>);
  CHECK(d(5) == 65504.0);

  // Several trees at once, and in place through the adaptor: the caller's buffer changes.
  std::vector<float> other{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  auto other_adaptor = xt::adapt(other.data(), other.size(), xt::no_ownership(), std::array<std::size_t, 2>{2, 3});
  const auto sum = mixprec::tree_map([](float a, float b) { return a + b; }, fixed_rank, other_adaptor);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(sum)>, xt::xtensor<float, 2>>);
  CHECK(sum(1, 0) == 1.5f);
  const mixprec::static_loss_scale ls(4.0f);
  const auto unscaled = ls.unscale(fixed_rank);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(unscaled)>, xt::xtensor<float, 2>>);
  CHECK(unscaled(0, 0) == 0.25f);
  CHECK(buffer[0] == 1.0f);  // unscale copies
  ls.unscale_in_place(fixed_rank);
  CHECK(buffer == std::vector<float>{0.25f, 3.14159274f / 4, -0.5f, 0.125f, 0.1f / 4, 16376.0f});
  buffer[3] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(mixprec::all_finite(fixed_rank));
}

}  // namespace cast_xtensor_test
