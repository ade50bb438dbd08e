// Tests the roundings of the SIMD operations (kernels/detail/simd/ops-inl.hpp: `round` and `store`,
// through which the SIMD rows read and write bfloat16 and float16) at 16 lanes (simd_avx512) and at 8
// (simd_avx2) against the scalar codecs of formats/ (bfloat16(x), float16(x): nearest-even, overflow
// to Inf, NaN to the format's quiet NaN with the sign kept), bit for bit, over every 16-bit high half
// of a float with the low halves where the roundings of both formats change, and a random sample: so
// both widths give the same bits.
#include <catch2/catch.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"

namespace simd_ops_test {

#if MIXPREC_X86_DISPATCH
namespace {

using mixprec::bfloat16;
using mixprec::float16;
namespace simd16 = mixprec::detail::simd_avx512;
namespace simd8 = mixprec::detail::simd_avx2;

template <class O>
MIXPREC_TARGET_AVX512 void store16_of(const float* x, O* y) {
  simd16::store<O>(y, simd16::load<simd16::vf>(x));
}

template <class C>
MIXPREC_TARGET_AVX512 void round16_of(const float* x, float* y) {
  simd16::store<float>(y, simd16::round<C>(simd16::load<simd16::vf>(x)));
}

/// The 8-lane forms on 16 values, twice.
template <class O>
MIXPREC_TARGET_AVX2 void store8_twice(const float* x, O* y) {
  simd8::store<O>(y, simd8::load<simd8::vf8>(x));
  simd8::store<O>(y + 8, simd8::load<simd8::vf8>(x + 8));
}

template <class C>
MIXPREC_TARGET_AVX2 void round8_twice(const float* x, float* y) {
  simd8::store<float>(y, simd8::round<C>(simd8::load<simd8::vf8>(x)));
  simd8::store<float>(y + 8, simd8::round<C>(simd8::load<simd8::vf8>(x + 8)));
}

/// The stores and roundings of one width, 16 values at a time.
template <class T>
struct width {
  void (*store)(const float*, T*);
  void (*round)(const float*, float*);
};

/// Low halves (bits 0-15) where a rounding decides differently: bfloat16 keeps bits 16 and up (half
/// an ulp is 0x8000); a normal float16 keeps bits 13 and up (half an ulp 0x1000, its last bit 0x2000).
/// Subnormal float16 results round at bit 14 to 23, set by the high half.
constexpr std::uint16_t low_halves[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x2FFF,
                                        0x3000, 0x3001, 0x7FFF, 0x8000, 0x8001, 0xA000, 0xF000, 0xFFFF};

/// Every high half with every low half of low_halves, then 2^20 random patterns.
std::vector<float> patterns() {
  std::vector<float> out;
  for (std::uint32_t high = 0; high <= 0xFFFF; ++high) {
    for (const std::uint16_t low : low_halves) out.push_back(std::bit_cast<float>(high << 16 | low));
  }
  std::mt19937 random(20261127);
  for (int i = 0; i < (1 << 20); ++i) out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(random())));
  return out;
}

/// The number of patterns whose `store<T>` bits differ from T(x).bits(), or whose `round<T>` value's
/// bits differ from float(T(x))'s; the first such pattern in `where`.
template <class T>
std::size_t mismatches(const std::vector<float>& x, std::uint32_t& where, width<T> w) {
  static_assert(sizeof(float) * 16 == 64);
  std::size_t count = 0;
  T stored[16];
  float rounded[16];
  for (std::size_t i = 0; i + 16 <= x.size(); i += 16) {
    w.store(x.data() + i, stored);
    w.round(x.data() + i, rounded);
    for (std::size_t lane = 0; lane < 16; ++lane) {
      const T expected(x[i + lane]);
      const bool same =
          stored[lane].bits() == expected.bits() &&
          std::bit_cast<std::uint32_t>(rounded[lane]) == std::bit_cast<std::uint32_t>(static_cast<float>(expected));
      if (!same) {
        if (count == 0) where = std::bit_cast<std::uint32_t>(x[i + lane]);
        ++count;
      }
    }
  }
  return count;
}

/// The sweep and the spot values of the file comment, for one width's stores and roundings.
void check_width(width<bfloat16> wb, width<float16> wh) {
  const std::vector<float> x = patterns();
  REQUIRE(x.size() % 16 == 0);
  std::uint32_t where = 0;
  SECTION("bfloat16") {
    const std::size_t count = mismatches<bfloat16>(x, where, wb);
    INFO("first mismatch at the float pattern 0x" << std::hex << where);
    CHECK(count == 0);
  }
  SECTION("float16") {
    const std::size_t count = mismatches<float16>(x, where, wh);
    INFO("first mismatch at the float pattern 0x" << std::hex << where);
    CHECK(count == 0);
  }
  // Spot values from the formats' specs, so that the sweep cannot pass with both sides wrong alike.
  const float spot[16] = {1.0F,
                          std::bit_cast<float>(0x3F808000U),  // 1 + 2^-8: a tie, to the even 1.0
                          std::bit_cast<float>(0x3F818000U),  // a tie, to the even 0x3F82
                          65504.0F,                           // float16 max
                          65520.0F,                           // float16: half an ulp above max, to Inf
                          std::bit_cast<float>(0x7F7FFFFFU),  // float max: bfloat16 rounds it to Inf
                          std::bit_cast<float>(0xFFC12345U),  // a negative NaN with a payload
                          5.9604645e-08F,                     // 2^-24, float16's smallest subnormal
                          2.9802322e-08F,                     // 2^-25: a tie, to the even 0
                          -0.0F,
                          std::bit_cast<float>(0x00000001U),  // float's smallest subnormal
                          0.1F,
                          -2.5F,
                          3.0F,
                          1e-3F,
                          -1e4F};
  bfloat16 b[16];
  float16 h[16];
  wb.store(spot, b);
  wh.store(spot, h);
  CHECK(b[0].bits() == 0x3F80);
  CHECK(b[1].bits() == 0x3F80);
  CHECK(b[2].bits() == 0x3F82);
  CHECK(b[5].bits() == 0x7F80);
  CHECK(b[6].bits() == 0xFFC0);
  CHECK(b[9].bits() == 0x8000);
  CHECK(b[10].bits() == 0x0000);
  CHECK(h[0].bits() == 0x3C00);
  CHECK(h[3].bits() == 0x7BFF);
  CHECK(h[4].bits() == 0x7C00);
  CHECK(h[6].bits() == 0xFE00);
  CHECK(h[7].bits() == 0x0001);
  CHECK(h[8].bits() == 0x0000);
  CHECK(h[9].bits() == 0x8000);
}

}  // namespace

TEST_CASE("store and round at 16 lanes round floats to bfloat16 and float16 with the scalar codecs' bits",
          "[kernels][simd]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512) {
    WARN("this CPU has no AVX-512: the 16-lane roundings are never called here and were not compared");
    return;
  }
  check_width({store16_of<bfloat16>, round16_of<bfloat16>}, {store16_of<float16>, round16_of<float16>});
}

TEST_CASE("store and round at 8 lanes round floats to bfloat16 and float16 with the scalar codecs' bits",
          "[kernels][simd]") {
  if (mixprec::detected_isa() < mixprec::isa::avx2) {
    WARN("this CPU has no AVX2: the 8-lane roundings are never called here and were not compared");
    return;
  }
  check_width({store8_twice<bfloat16>, round8_twice<bfloat16>}, {store8_twice<float16>, round8_twice<float16>});
}
#endif

}  // namespace simd_ops_test
