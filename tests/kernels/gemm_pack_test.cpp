// The b panels of the blocked GEMM (kernels/detail/gemm_pack.hpp, pack_b) from a [k, n] b, element by
// element against the rules written here: bfloat16 pair panels hold each float rounded to nearest even
// (NaN: the sign and a quiet NaN) and each bfloat16 pattern as it is (a signalling NaN quieted);
// float16 panels hold each float rounded to nearest even (the bulk conversion's patterns, compared
// with float16's own constructor). Odd k (the pair row's zero pad), a part panel, an offset j0, and the
// values where the rounding decides.
#include <catch2/catch.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

namespace gemm_pack_test {

namespace {

using mixprec::bfloat16;
using mixprec::float16;
namespace kd = mixprec::kernels::detail;

/// Floats where the rounding decides (ties, the largest values, NaN payloads, subnormals) among
/// normal random ones.
std::vector<float> floats(std::size_t count, std::uint32_t seed) {
  constexpr std::uint32_t special[] = {0x3F808000U, 0x3F818000U, 0x3F808001U, 0x7F7FFFFFU, 0x7F800000U,
                                       0xFF800000U, 0x7FC00001U, 0xFF812345U, 0x00000001U, 0x0000FFFFU,
                                       0x80000000U, 0x477FF000U, 0x477FE000U, 0x33800000U};
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = i % 5 == 2 ? std::bit_cast<float>(special[(i / 5) % std::size(special)]) : normal(random);
  }
  return out;
}

/// The bfloat16 pattern of x rounded to nearest even; NaN: the sign and the quiet NaN 0x7FC0.
std::uint16_t bf16_rne(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((u >> 16 & 0x8000U) | 0x7FC0U);
  return static_cast<std::uint16_t>((u + 0x7FFFU + (u >> 16 & 1U)) >> 16);
}

/// The panel element of b(p, j) (j counted from j0) in panels of format F for depth k.
template <kd::panel_format F>
kd::panel_element_t<F> element(const std::vector<kd::panel_element_t<F>>& panels, std::size_t k, std::size_t p,
                               std::size_t j) {
  return panels[(j / kd::gemm_nr) * kd::panel_stride<F>(k) + kd::panel_index<F>(p, j % kd::gemm_nr)];
}

}  // namespace

TEST_CASE("pack_b: bfloat16 pair panels from a [k, n] float or bfloat16 b, element by element", "[kernels][gemm]") {
  for (const std::size_t k : {1, 2, 7, 64}) {
    const std::size_t n = 45;
    const std::size_t j0 = 16;
    const std::size_t cols = n - j0;  // one whole panel and a part panel of 13 columns
    const std::vector<float> b = floats(k * n, static_cast<std::uint32_t>(k));
    std::vector<bfloat16> b16(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
      // Every pattern, signalling NaNs (0x7F81) and payloads included: the float's high half, varied.
      b16[i] = bfloat16::from_bits(static_cast<std::uint16_t>((std::bit_cast<std::uint32_t>(b[i]) >> 16) ^ (i % 3)));
    }
    const std::size_t size = kd::gemm_panels(cols) * kd::panel_stride<kd::panel_format::bf16>(k);
    std::vector<std::uint16_t> from_float(size, 0xDEAD), from_bf16(size, 0xDEAD);
    std::vector<float> row(std::max(k, n));
    kd::pack_b<bfloat16, kd::panel_format::bf16>(b.data(), k, n, mixprec::kernels::b_layout::k_n, j0, cols,
                                                 from_float.data(), row.data());
    kd::pack_b<bfloat16, kd::panel_format::bf16>(b16.data(), k, n, mixprec::kernels::b_layout::k_n, j0, cols,
                                                 from_bf16.data(), row.data());
    INFO("k " << k);
    for (std::size_t p = 0; p < kd::panel_rows<kd::panel_format::bf16>(k); ++p) {
      for (std::size_t j = 0; j < kd::gemm_panels(cols) * kd::gemm_nr; ++j) {
        INFO("p " << p << ", column " << j);
        const bool inside = p < k && j < cols;
        const std::size_t at = p * n + j0 + j;
        const std::uint16_t want_float = inside ? bf16_rne(b[at]) : 0;
        std::uint16_t want_bf16 = 0;
        if (inside) {
          want_bf16 = b16[at].bits();
          if ((want_bf16 & 0x7FFFU) > 0x7F80U) want_bf16 |= 0x0040U;  // a signalling NaN quieted
        }
        REQUIRE(element<kd::panel_format::bf16>(from_float, k, p, j) == want_float);
        REQUIRE(element<kd::panel_format::bf16>(from_bf16, k, p, j) == want_bf16);
      }
    }
  }
}

TEST_CASE("pack_b: float16 panels from a [k, n] float b, element by element", "[kernels][gemm]") {
  const std::size_t k = 9, n = 40, j0 = 16, cols = n - j0;
  const std::vector<float> b = floats(k * n, 3);
  std::vector<std::uint16_t> panels(kd::gemm_panels(cols) * kd::panel_stride<kd::panel_format::f16>(k), 0xDEAD);
  std::vector<float> row(n);
  kd::pack_b<float16, kd::panel_format::f16>(b.data(), k, n, mixprec::kernels::b_layout::k_n, j0, cols, panels.data(),
                                             row.data());
  for (std::size_t p = 0; p < k; ++p) {
    for (std::size_t j = 0; j < kd::gemm_panels(cols) * kd::gemm_nr; ++j) {
      INFO("p " << p << ", column " << j);
      const std::uint16_t got = element<kd::panel_format::f16>(panels, k, p, j);
      if (j >= cols) {
        REQUIRE(got == 0);
        continue;
      }
      const float x = b[p * n + j0 + j];
      const float16 want(x);
      if (x != x) {
        REQUIRE((got & 0x7C00U) == 0x7C00U);  // NaN stays NaN
        REQUIRE((got & 0x03FFU) != 0U);
      } else {
        REQUIRE(got == want.bits());
      }
    }
  }
}

}  // namespace gemm_pack_test
