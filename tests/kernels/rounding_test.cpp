// Tests of the rounding the kernels and layers share (kernels/rounding.hpp, mixprec::internal), the
// first step of every matmul: "round once to the compute type, widen exactly to the accumulator". The bulk paths must
// give the same bits as the scalar conversions of the number types (which tests/types checks against the format
// specifications) for every input, special values included.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace rounding_test {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::float8_e4m3fn;
using mixprec::float8_e5m2;
namespace mi = mixprec::internal;

namespace {

/// Floats that exercise rounding: specials, extremes, ties at several exponents, and random bit patterns.
std::vector<float> probe_floats() {
  std::vector<float> v{0.0f,
                       -0.0f,
                       1.0f,
                       -1.0f,
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::quiet_NaN(),
                       std::bit_cast<float>(0x7F800001U),  // signalling NaN
                       std::numeric_limits<float>::max(),
                       -std::numeric_limits<float>::max(),
                       std::numeric_limits<float>::min(),
                       std::numeric_limits<float>::denorm_min(),
                       65504.0f,
                       65520.0f,  // float16 overflow threshold (rounds to Inf)
                       448.0f,
                       464.0f};
  // bfloat16 ties and near-ties around 1, 2^100, 2^-130 (subnormal): pattern | 0x8000 etc.
  for (std::uint32_t base : {0x3F800000U, 0x71800000U, 0x00100000U, 0x7F7F0000U}) {
    for (std::uint32_t low : {0x7FFFU, 0x8000U, 0x8001U, 0x18000U, 0x17FFFU, 0xFFFFU}) {
      v.push_back(std::bit_cast<float>(base + low));
      v.push_back(std::bit_cast<float>((base + low) | 0x80000000U));
    }
  }
  std::mt19937 rng(123);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(bits(rng)));
  return v;
}

/// The first input whose two results differ (NaNs compared by sign), or none. Counting first and
/// asserting once keeps the test fast (hundreds of thousands of inputs).
template <class F, class G>
void check_same_bits(const std::vector<float>& in, F f, G g) {
  std::size_t mismatches = 0;
  std::uint32_t first_bits = 0;
  for (float x : in) {
    const float a = f(x), b = g(x);
    const bool same = std::isnan(b) ? (std::isnan(a) && std::signbit(a) == std::signbit(b))
                                    : std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
    if (!same && mismatches++ == 0) first_bits = std::bit_cast<std::uint32_t>(x);
  }
  INFO(mismatches << " mismatches; first input bits 0x" << std::hex << first_bits);
  CHECK(mismatches == 0);
}

template <class C>
void check_bulk_matches_scalar(const std::vector<float>& in) {
  std::vector<float> out(in.size());
  mi::round_widen_n<C>(in.data(), in.size(), out.data());
  std::size_t i = 0;
  check_same_bits(
      in, [&](float) { return out[i++]; }, [](float x) { return static_cast<float>(C(x)); });
}

}  // namespace

TEST_CASE("round_through_bfloat16 equals bfloat16(x) widened, bit for bit", "[kernels][convert]") {
  // Same bits, NaN included (bfloat16's canonical quiet NaN keeps the input's sign).
  check_same_bits(
      probe_floats(), [](float x) { return mi::round_through_bfloat16(x); },
      [](float x) { return static_cast<float>(bfloat16(x)); });
  // Two hand-checked cases: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (8 significant bits): even -> 1;
  // the largest float rounds up to Inf.
  CHECK(mi::round_through_bfloat16(1.0f + 0x1p-8f) == 1.0f);
  CHECK(mi::round_through_bfloat16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(std::isinf(mi::round_through_bfloat16(std::numeric_limits<float>::max())));
}

TEST_CASE("round_to<bfloat16> of a float equals bfloat16(x) for every pattern and every kind of low half",
          "[kernels][convert]") {
  // Round to nearest even on the top 16 bits depends only on the low half against 0x8000 and on bit
  // 16: every top half with low halves 0, 1, 0x7FFF (below), 0x8000 (tie), 0x8001 (above), 0xFFFF
  // covers every case of the carry, the carry into the exponent and into Inf, and every NaN pattern.
  std::size_t mismatches = 0;
  for (std::uint32_t top = 0; top < 0x10000U; ++top) {
    for (const std::uint32_t low : {0x0U, 0x1U, 0x7FFFU, 0x8000U, 0x8001U, 0xFFFFU}) {
      const float x = std::bit_cast<float>((top << 16) | low);
      const auto fast = mi::round_to<bfloat16>(x).bits();
      const auto codec = bfloat16(x).bits();
      if (fast != codec && ++mismatches <= 5) {
        CAPTURE(top, low);
        CHECK(fast == codec);
      }
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("round_widen_n gives the scalar conversion's bits for float sources", "[kernels][convert]") {
  const auto in = probe_floats();
  check_bulk_matches_scalar<bfloat16>(in);
  check_bulk_matches_scalar<float16>(in);
  check_bulk_matches_scalar<float8_e4m3fn>(in);
  check_bulk_matches_scalar<float8_e5m2>(in);
}

TEST_CASE("round_widen_n rounds double sources once and widens small floats exactly", "[kernels][convert]") {
  // 1 + 2^-8 + 2^-30 in double is just above the bfloat16 tie: one rounding gives 1 + 2^-7; rounding to
  // float first would land on the tie 1 + 2^-8 and then round to even, 1.
  const std::vector<double> d{1.0 + 0x1p-8 + 0x1p-30, -3.0, 1e300};
  std::vector<float> out(d.size());
  mi::round_widen_n<bfloat16>(d.data(), d.size(), out.data());
  CHECK(out[0] == 1.0f + 0x1p-7f);
  CHECK(out[1] == -3.0f);
  CHECK(std::isinf(out[2]));
  const std::vector<float16> h{float16(0.5f), float16(-65504.0f), std::numeric_limits<float16>::denorm_min()};
  std::vector<float> wide(h.size());
  mi::round_widen_n<float16>(h.data(), h.size(), wide.data());
  CHECK(wide[0] == 0.5f);
  CHECK(wide[1] == -65504.0f);
  CHECK(wide[2] == 0x1p-24f);
  // Identity for float -> float and double -> double; integers convert like C(i).
  const std::vector<int> ids{3, -7};
  std::vector<float> fi(2);
  mi::round_widen_n<float>(ids.data(), 2, fi.data());
  CHECK(fi == std::vector<float>{3.0f, -7.0f});
}

}  // namespace rounding_test
