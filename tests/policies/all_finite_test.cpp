// Tests of mixprec/policies/all_finite.hpp: jmp's all_finite tests (jmp/_src/loss_scale_test.py,
// test_all_finite with inf and nan), plus a NaN and an Inf hidden in every kind of leaf.
#include <catch2/catch.hpp>

#include <array>
#include <complex>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/intn.hpp"
#include "mixprec/policies/all_finite.hpp"

namespace all_finite_test {

using mixprec::all_finite;
using mixprec::bfloat16;

namespace {
constexpr float pos_inf = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST_CASE("all_finite follows jmp's published cases", "[all_finite]") {
  // jmp: all_finite(None) and all_finite({}) are True.
  CHECK(all_finite(std::tuple<>{}));
  CHECK(all_finite(std::map<std::string, float>{}));
  for (const float non_finite : {pos_inf, quiet_nan}) {
    CAPTURE(non_finite);
    CHECK_FALSE(all_finite(std::map<std::string, float>{{"a", non_finite}}));
    CHECK_FALSE(all_finite(std::map<std::string, float>{{"a", 1.0f}, {"b", non_finite}}));
    CHECK_FALSE(all_finite(std::map<std::string, float>{{"a", non_finite}, {"b", 1.0f}}));
  }
  CHECK(all_finite(std::map<std::string, float>{{"a", 1.0f}, {"b", 1.0f}}));
}

TEST_CASE("all_finite finds NaN and Inf in every kind of floating leaf", "[all_finite]") {
  // A finite tree with one leaf of each kind, then the same tree with one leaf broken.
  auto make = [] {
    return std::tuple{1.0f,
                      2.0,
                      3.0L,
                      bfloat16(4.0f),
                      mixprec::float16(5.0f),
                      mixprec::float8_e4m3fn(6.0f),
                      std::complex<float>(7.0f, 8.0f),
                      std::vector<bfloat16>{bfloat16(9.0f), bfloat16(10.0f)}};
  };
  CHECK(all_finite(make()));

  for (const float bad : {pos_inf, -pos_inf, quiet_nan}) {
    CAPTURE(bad);
    auto t = make();
    std::get<0>(t) = bad;
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<1>(t) = static_cast<double>(bad);
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<2>(t) = static_cast<long double>(bad);
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<3>(t) = bfloat16(bad);
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<4>(t) = mixprec::float16(bad);
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<5>(t) = mixprec::float8_e4m3fn(bad);  // e4m3fn has no Inf: both become its NaN
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<6>(t) = std::complex<float>(1.0f, bad);  // only the imaginary part is bad
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<6>(t) = std::complex<float>(bad, 1.0f);
    CHECK_FALSE(all_finite(t));
    t = make();
    std::get<7>(t)[1] = bfloat16(bad);  // deep inside a container, last element
    CHECK_FALSE(all_finite(t));
  }
}

TEST_CASE("all_finite sees bit patterns, not only converted values", "[all_finite]") {
  CHECK_FALSE(all_finite(bfloat16::from_bits(0x7F80)));          // +Inf: exponent all ones, mantissa 0
  CHECK_FALSE(all_finite(bfloat16::from_bits(0xFFC1)));          // a negative NaN with a payload
  CHECK(all_finite(bfloat16::from_bits(0x7F7F)));                // the largest finite bfloat16
  CHECK_FALSE(all_finite(mixprec::float16::from_bits(0x7C01)));  // a signalling NaN
  CHECK(all_finite(mixprec::float16::from_bits(0x7BFF)));        // 65504
}

TEST_CASE("all_finite ignores integer, bool and intn leaves", "[all_finite]") {
  CHECK(all_finite(std::tuple{std::numeric_limits<std::int64_t>::max(), true, mixprec::int4(-8), std::uint8_t{255}}));
  CHECK(all_finite(std::vector<int>{}));
  const std::array<double, 2> with_nan{0.0, static_cast<double>(quiet_nan)};
  CHECK_FALSE(all_finite(std::pair{std::vector<int>{1, 2, 3}, with_nan}));
}

TEST_CASE("all_finite takes a vector of spans, optionals and tree_children structs", "[all_finite]") {
  std::vector<float> a{1.0f, 2.0f}, b{3.0f};
  std::vector<std::span<float>> spans{std::span<float>(a), std::span<float>(b)};
  CHECK(all_finite(spans));
  b[0] = pos_inf;
  CHECK_FALSE(all_finite(spans));
  const std::vector<std::span<const float>> const_spans{std::span<const float>(a)};
  CHECK(all_finite(const_spans));
  CHECK(all_finite(std::optional<float>{}));
  CHECK_FALSE(all_finite(std::optional<float>{quiet_nan}));
}

}  // namespace all_finite_test
