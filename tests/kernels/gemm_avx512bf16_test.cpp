// Tests the 16-lane packing of a into VDPBF16PS pairs (kernels/detail/gemm_avx512.hpp,
// pack_a_pairs) against the portable packing it replaces for row-major float and bfloat16 a
// (kernels/detail/gemm_pack.hpp, pack_a_pairs_from), word for word: every panel height, row lengths
// around the 32-element steps, offsets into a larger a, and the values where rounding to bfloat16
// decides (ties, NaN payloads, Inf, subnormals, overflow to Inf); and pack_a_pairs_km, the pairing of
// a bfloat16 a stored [k, m], against the same portable packing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "mixprec/arch/isa.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/kernels/detail/gemm_avx512.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

namespace gemm_avx512bf16_test {

#if MIXPREC_X86_DISPATCH
namespace {

using mixprec::bfloat16;
namespace kd = mixprec::kernels::detail;

/// Float patterns where the rounding to bfloat16 decides, mixed into random values.
constexpr std::uint32_t special[] = {
    0x3F808000U,  // 1 + 2^-8: a tie, to the even 1.0
    0x3F818000U,  // a tie, to the even 0x3F82
    0x3F808001U,  // above the tie: up
    0x7F7FFFFFU,  // float max: to Inf
    0x7F800000U,  // Inf
    0xFF800000U,  // -Inf
    0x7FC00001U,  // a quiet NaN with a payload in the low half
    0xFF812345U,  // a negative signalling NaN
    0x00000001U,  // the smallest subnormal: to 0
    0x0000FFFFU,  // a subnormal, rounded up to a subnormal bfloat16
    0x80000000U,  // -0
    0x007FFFFFU,  // the largest subnormal: to the smallest normal
};

/// The specials without NaN and subnormals: rows of these take VCVTNE2PS2BF16 in whole (pack_a_pairs
/// rounds 32 floats with the instruction unless one of them is NaN or subnormal).
constexpr std::uint32_t native_special[] = {0x3F808000U, 0x3F818000U, 0x3F808001U, 0x7F7FFFFFU,
                                            0x7F800000U, 0xFF800000U, 0x80000000U};

/// `count` values: normal ones with a special every 7th (from `special`, or `native_special` when
/// `native_only`).
template <class S>
std::vector<S> values(std::size_t count, std::uint32_t seed, bool native_only = false) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::vector<S> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t pick =
        native_only ? native_special[(i / 7) % std::size(native_special)] : special[(i / 7) % std::size(special)];
    const float x = i % 7 == 3 ? std::bit_cast<float>(pick) : normal(random);
    if constexpr (std::is_same_v<S, float>) {
      out[i] = x;
    } else {
      // bfloat16 elements: any 16-bit pattern, NaN payloads included.
      out[i] = bfloat16::from_bits(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16 ^ (i % 5)));
    }
  }
  return out;
}

/// Packs `rows` rows and kc columns of an a of S at offsets (2, 3) of a larger a, stored [m, k] (pack_a_pairs)
/// or [k, m] (pack_a_pairs_km, bfloat16 only), and compares the words with pack_a_pairs_from's.
template <class S>
void check_pack(std::size_t rows, std::size_t kc, mixprec::kernels::a_layout layout, bool native_only = false) {
  const bool row_major = layout == mixprec::kernels::a_layout::m_k;
  const std::size_t i0 = 2;
  const std::size_t p0 = 3;
  const std::size_t m = i0 + rows + 1;
  const std::size_t k = p0 + kc + 5;
  const auto seed = static_cast<std::uint32_t>(rows * 1000 + kc + (row_major ? 0 : 7));
  const std::vector<S> a = values<S>(m * k, seed, native_only);
  const std::size_t panels = (rows + kd::gemm_mr - 1) / kd::gemm_mr;
  const std::size_t words = panels * kd::gemm_mr * ((kc + 1) / 2);
  std::vector<std::uint32_t> expected(words + 1, 0xDEADBEEFU);
  std::vector<std::uint32_t> packed(words + 1, 0xDEADBEEFU);
  std::vector<float> row(std::max(kc, rows));
  std::vector<float> floats(kd::gemm_mr * std::max(kc + 1, panels * kc));
  kd::pack_a_pairs_from<bfloat16>(a.data(), m, k, layout, i0, rows, p0, kc, expected.data(), row.data(), floats.data());
  if (row_major) {
    mixprec::detail::gemm_avx512bf16::pack_a_pairs<S>(a.data() + i0 * k + p0, k, rows, kc, packed.data());
  } else if constexpr (std::is_same_v<S, bfloat16>) {
    mixprec::detail::gemm_avx512bf16::pack_a_pairs_km(a.data() + p0 * m + i0, m, rows, kc, packed.data());
  }
  INFO((row_major ? "[m, k]" : "[k, m]") << " a: rows " << rows << ", kc " << kc
                                         << (native_only ? ", no NaN or subnormal" : ""));
  for (std::size_t w = 0; w <= words; ++w) {
    INFO("word " << w << " of " << words << " (the last is past the panels and must stay untouched)");
    REQUIRE(packed[w] == expected[w]);
  }
}

}  // namespace

TEST_CASE("pack_a_pairs_km gives pack_a_pairs_from's words for a bfloat16 a stored [k, m]", "[kernels][gemm]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512bf16) {
    WARN("this CPU has no AVX512_BF16: the [k, m] pair packing is never called here and was not compared");
    return;
  }
  for (const std::size_t rows : {1, 2, 5, 6, 7, 12, 13, 95, 96}) {
    for (const std::size_t kc : {1, 2, 3, 15, 16, 17, 64, 65, 255, 256}) {
      check_pack<bfloat16>(rows, kc, mixprec::kernels::a_layout::k_m);
    }
  }
}

TEST_CASE("pack_a_pairs gives pack_a_pairs_from's words for float and bfloat16 rows", "[kernels][gemm]") {
  if (mixprec::detected_isa() < mixprec::isa::avx512bf16) {
    WARN("this CPU has no AVX512_BF16: the 16-lane pair packing is never called here and was not compared");
    return;
  }
  for (const std::size_t rows : {1, 2, 5, 6, 7, 12, 13, 95, 96}) {
    for (const std::size_t kc : {1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 127, 255, 256}) {
      check_pack<float>(rows, kc, mixprec::kernels::a_layout::m_k);
      check_pack<float>(rows, kc, mixprec::kernels::a_layout::m_k, true);
      check_pack<bfloat16>(rows, kc, mixprec::kernels::a_layout::m_k);
    }
  }
  // The specials themselves, spelled out: 1 + 2^-8 ties to 1.0 (0x3F80), float max rounds to Inf,
  // a negative signalling NaN becomes bfloat16's negative quiet NaN (0xFFC0).
  const float x[4] = {std::bit_cast<float>(0x3F808000U), 2.0F, std::bit_cast<float>(0x7F7FFFFFU),
                      std::bit_cast<float>(0xFF812345U)};
  std::uint32_t pair[kd::gemm_mr * 2] = {};
  mixprec::detail::gemm_avx512bf16::pack_a_pairs<float>(x, 4, 1, 4, pair);
  CHECK(pair[0] == 0x3F804000U);            // (1.0, 2.0)
  CHECK(pair[kd::gemm_mr] == 0x7F80FFC0U);  // (Inf, -NaN)
  CHECK(pair[1] == 0U);                     // rows past the one given are zero
}
#endif

}  // namespace gemm_avx512bf16_test
