// Compile-time checks of mixprec/formats/*.hpp. Compiling is passing.
// Bit patterns are derived in the comments from the format definitions (IEEE 754-2019 binary16, the
// bfloat16 layout, OCP OFP8 E4M3/E5M2, OCP MX E8M0/FP6/FP4, ml_dtypes' fnuz encodings).
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mixprec/core.hpp"

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::float4_e2m1fn;
using mixprec::float6_e2m3fn;
using mixprec::float6_e3m2fn;
using mixprec::float8_e3m4;
using mixprec::float8_e4m3;
using mixprec::float8_e4m3b11fnuz;
using mixprec::float8_e4m3fn;
using mixprec::float8_e4m3fnuz;
using mixprec::float8_e5m2;
using mixprec::float8_e5m2fnuz;
using mixprec::float8_e8m0fnu;
using std::is_constructible_v;
using std::is_convertible_v;

// --- Value-changing conversions are explicit; value-preserving ones are implicit -----------------
static_assert(!is_convertible_v<float, bfloat16>, "float -> bfloat16 rounds: it must be spelled out");
static_assert(!is_convertible_v<double, bfloat16>);
static_assert(!is_convertible_v<int, bfloat16>);
static_assert(!is_convertible_v<float, float16>);
static_assert(!is_convertible_v<float, float8_e4m3fn>);
static_assert(!is_convertible_v<double, float8_e5m2>);
static_assert(!is_convertible_v<std::int64_t, float4_e2m1fn>);
static_assert(is_constructible_v<bfloat16, float> && is_constructible_v<bfloat16, double>);
static_assert(is_constructible_v<float8_e4m3fn, int> && is_constructible_v<float8_e4m3fn, std::uint64_t>);
static_assert(is_convertible_v<bfloat16, float>, "every small float converts to float exactly, implicitly");
static_assert(is_convertible_v<float16, float> && is_convertible_v<float8_e4m3fn, float>);
static_assert(is_convertible_v<float8_e8m0fnu, float> && is_convertible_v<float4_e2m1fn, float>);
static_assert(is_constructible_v<double, bfloat16>);  // explicit operator double (and float -> double)
// Between two small formats the value can change: explicit only.
static_assert(!is_convertible_v<bfloat16, float16> && is_constructible_v<float16, bfloat16>);
static_assert(!is_convertible_v<float16, bfloat16> && is_constructible_v<bfloat16, float16>);
static_assert(!is_convertible_v<float8_e4m3fn, float8_e5m2> && is_constructible_v<float8_e5m2, float8_e4m3fn>);
static_assert(!is_convertible_v<float8_e4m3fn, bfloat16>);

// --- The types themselves -------------------------------------------------------------------------
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e8m0fnu) == 1);
static_assert(sizeof(float6_e2m3fn) == 1 && sizeof(float4_e2m1fn) == 1);
static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_trivially_copyable_v<float8_e4m3fn>);
static_assert(std::is_standard_layout_v<float16>);
static_assert(mixprec::small_float<bfloat16> && mixprec::small_float<float4_e2m1fn>);
static_assert(!mixprec::small_float<float> && !mixprec::small_float<int> && !mixprec::small_float<mixprec::int4>);
static_assert(!std::is_same_v<float8_e4m3fn, float8_e4m3>, "the OCP and the IEEE-like E4M3 are distinct types");
static_assert(std::is_same_v<bfloat16::storage_type, std::uint16_t>);
static_assert(std::is_same_v<float8_e5m2::storage_type, std::uint8_t>);
static_assert(std::is_same_v<float6_e3m2fn::storage_type, std::uint8_t>);

// --- constexpr conversions: patterns derived from the formats -----------------------------------
static_assert(bfloat16(1.0F).bits() == 0x3F80);         // 0.01111111.0000000
static_assert(bfloat16(-2.0).bits() == 0xC000);         // 1.10000000.0000000
static_assert(bfloat16(3.14159265F).bits() == 0x4049);  // (1 + 73/128) * 2 = 3.140625
static_assert(static_cast<float>(bfloat16::from_bits(0x4049)) == 3.140625F);
static_assert(float16(65504.0F).bits() == 0x7BFF);  // (2 - 2^-10) * 2^15, max
static_assert(float16(65520.0F).bits() == 0x7C00);  // max + half ulp: tie to even = Inf
static_assert(float16(0x1p-24F).bits() == 0x0001);  // 2^-24, min subnormal
static_assert(static_cast<float>(float16::from_bits(0x3C00)) == 1.0F);
static_assert(float8_e4m3fn(448.0F).bits() == 0x7E);      // 0.1111.110: 1.75 * 2^8
static_assert(float8_e4m3fn(464.0F).bits() == 0x7E);      // tie between 448 (even) and 480
static_assert(float8_e4m3fn(-1e6F).bits() == 0xFF);       // overflow: NaN with the sign
static_assert(float8_e5m2(57344.0F).bits() == 0x7B);      // 0.11110.11: 1.75 * 2^15
static_assert(float8_e5m2(1e6F).bits() == 0x7C);          // Inf
static_assert(float8_e4m3fnuz(-0.0F).bits() == 0x00);     // no -0
static_assert(float8_e4m3fnuz(240.0F).bits() == 0x7F);    // 0.1111.111: 1.875 * 2^7
static_assert(float8_e5m2fnuz(1.0F).bits() == 0x40);      // exponent 16 = bias
static_assert(float8_e4m3b11fnuz(30.0F).bits() == 0x7F);  // 1.875 * 2^4
static_assert(float8_e3m4(15.5F).bits() == 0x6F);         // 0.110.1111
static_assert(float8_e4m3(240.0F).bits() == 0x77);        // 0.1110.111
static_assert(float8_e8m0fnu(1.0F).bits() == 0x7F);       // 2^(127 - 127)
static_assert(float8_e8m0fnu(0.0F).bits() == 0xFF);       // no zero: NaN
static_assert(float6_e2m3fn(7.5F).bits() == 0x1F);
static_assert(float6_e3m2fn(28.0F).bits() == 0x1F);
static_assert(float4_e2m1fn(6.0F).bits() == 0x7);
static_assert(float4_e2m1fn(1e9F).bits() == 0x7);                                     // saturates: no Inf, no NaN
static_assert(float4_e2m1fn(3).bits() == 0x5);                                        // integers too: 1.5 * 2
static_assert(bfloat16(std::numeric_limits<std::uint64_t>::max()).bits() == 0x5F80);  // 2^64
static_assert(float8_e4m3fn(float16(448.0F)).bits() == 0x7E);                         // between small floats
static_assert(mixprec::saturate_cast<float8_e4m3fn>(1000.0F).bits() == 0x7E);
static_assert(mixprec::saturate_cast<float8_e5m2>(-std::numeric_limits<float>::infinity()).bits() == 0xFB);

// --- constexpr arithmetic, comparisons, classification ------------------------------------------
static_assert((bfloat16(1.0F) + bfloat16(2.0F)).bits() == bfloat16(3.0F).bits());
static_assert(float8_e4m3fn(1.0F) < float8_e4m3fn(2.0F));
static_assert(float16(0.0F) == float16(-0.0F));
static_assert(!(float16::from_bits(0x7E00) == float16::from_bits(0x7E00)));  // NaN != NaN
static_assert(isnan(float8_e4m3fnuz::from_bits(0x80)) && !isnan(float8_e4m3fnuz::from_bits(0x00)));
static_assert(isinf(float8_e5m2::from_bits(0xFC)) && !isinf(float8_e4m3fn::from_bits(0x7E)));
static_assert(signbit(float6_e2m3fn::from_bits(0x20)) && !signbit(float8_e8m0fnu::from_bits(0xFF)));
static_assert((-float4_e2m1fn(1.0F)).bits() == 0xA);

// --- numeric_limits and finfo are compile-time constants ---------------------------------------
static_assert(std::numeric_limits<bfloat16>::is_specialized);
static_assert(std::numeric_limits<float8_e4m3fn>::max().bits() == 0x7E);
static_assert(std::numeric_limits<float8_e5m2>::infinity().bits() == 0x7C);
static_assert(std::numeric_limits<float16>::epsilon().bits() == 0x1400);  // 2^-10: exponent 5
static_assert(std::numeric_limits<float8_e8m0fnu>::digits == 1 && !std::numeric_limits<float8_e8m0fnu>::is_signed);
static_assert(std::numeric_limits<const bfloat16>::digits == 8);
static_assert(mixprec::finfo<float8_e4m3fn>::max.bits() == 0x7E);
static_assert(mixprec::finfo<bfloat16>::nmant == 7 && mixprec::finfo<bfloat16>::nexp == 8);
static_assert(mixprec::finfo<float6_e3m2fn>::bits == 6 && mixprec::finfo<float4_e2m1fn>::bits == 4);
static_assert(mixprec::finfo<double>::machep == -52);

// --- opmath_type: float where every exact sum, product and quotient is a normal float -------------
static_assert(std::is_same_v<bfloat16::opmath_type, double> && std::is_same_v<float8_e8m0fnu::opmath_type, double>);
static_assert(std::is_same_v<float16::opmath_type, float> && std::is_same_v<float8_e4m3fn::opmath_type, float> &&
              std::is_same_v<float8_e5m2::opmath_type, float> && std::is_same_v<float8_e4m3fnuz::opmath_type, float> &&
              std::is_same_v<float8_e5m2fnuz::opmath_type, float> &&
              std::is_same_v<float8_e4m3b11fnuz::opmath_type, float> &&
              std::is_same_v<float8_e3m4::opmath_type, float> && std::is_same_v<float8_e4m3::opmath_type, float> &&
              std::is_same_v<float6_e2m3fn::opmath_type, float> && std::is_same_v<float6_e3m2fn::opmath_type, float> &&
              std::is_same_v<float4_e2m1fn::opmath_type, float>);

// --- Any bias that keeps every value inside float's range is accepted ----------------------------
// (compile_fail/formats_impossible_bias is a refused one.)
// E5M2 with bias 100: from 2^(1 - 100 - 2) = 2^-101 (pattern 0x01) to below 2^(30 - 100 + 1) = 2^-69.
// Products reach 2^-202, outside float: it computes in double.
struct e5m2_bias100 : mixprec::basic_float<e5m2_bias100, mixprec::float_format{.exponent_bits = 5,
                                                                               .mantissa_bits = 2,
                                                                               .exponent_bias = 100,
                                                                               .nan = mixprec::nan_encoding::ieee}> {
  using basic_float::basic_float;
};
static_assert(std::is_same_v<e5m2_bias100::opmath_type, double>);
static_assert(e5m2_bias100(0x1p-101f).bits() == 0x01 && static_cast<double>(e5m2_bias100::from_bits(0x01)) == 0x1p-101);
static_assert(e5m2_bias100(0x1p-70).bits() == 0x78);  // exponent field -70 + 100 = 30: 30 << 2 = 0x78
static_assert(e5m2_bias100(0x1p-69).bits() == 0x7C);  // above the largest value: +Inf
// E4M3 without Inf/NaN and bias 0: subnormals are multiples of 2^(1 - 0 - 3) = 2^-2, so the integer 1
// is the subnormal 4 x 2^-2 (pattern 0x04); 3 = 1.1b x 2^1 is normal: field 1, mantissa 100b (0x0C).
struct e4m3_bias0 : mixprec::basic_float<e4m3_bias0, mixprec::float_format{.exponent_bits = 4,
                                                                           .mantissa_bits = 3,
                                                                           .exponent_bias = 0,
                                                                           .nan = mixprec::nan_encoding::none}> {
  using basic_float::basic_float;
};
static_assert(e4m3_bias0(1).bits() == 0x04 && e4m3_bias0(1.0f).bits() == 0x04 && e4m3_bias0(3).bits() == 0x0C);
static_assert(static_cast<float>(e4m3_bias0::from_bits(0x04)) == 1.0f);

// --- 128-bit integers (GCC/Clang), in -std=c++20 as in -std=gnu++20 -------------------------------
#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 u128;
static_assert(is_constructible_v<bfloat16, u128> && !is_convertible_v<u128, bfloat16>);
static_assert(bfloat16(u128{1} << 70).bits() == 0x6280);  // exponent field 70 + 127 = 0xC5
#endif

// --- The scalar codec the bulk conversion calls is in the per-ISA inline namespace ---------------
// (formats/detail/isa.hpp): a TU built for AVX-512 and one built for baseline x86-64 get different
// symbols, so the linker cannot give one the other's body. 1.0 is bfloat16 0x3F80 (field 127).
static_assert(mixprec::detail::MIXPREC_DETAIL_CONVERT_ISA::encode<mixprec::formats::bfloat16>(
                  1.0, mixprec::overflow_mode::to_inf_or_nan) == 0x3F80);
static_assert(mixprec::detail::MIXPREC_DETAIL_CONVERT_ISA::encode_integer<mixprec::formats::bfloat16>(
                  1, mixprec::overflow_mode::to_inf_or_nan) == 0x3F80);
static_assert(mixprec::detail::MIXPREC_DETAIL_CONVERT_ISA::decode_to_float<mixprec::formats::bfloat16>(0x3F80) == 1.0f);

// --- intn -------------------------------------------------------------------------------------
static_assert(mixprec::int4(8) == -8 && mixprec::uint4(17) == 1 && mixprec::int2(2) == -2);
static_assert(mixprec::int4::in_range(7) && !mixprec::int4::in_range(8) && !mixprec::uint4::in_range(-1));
static_assert(sizeof(mixprec::int4) == 1 && std::is_trivially_copyable_v<mixprec::uint2>);
static_assert(!is_convertible_v<int, mixprec::int4> && is_convertible_v<mixprec::int4, int>);
static_assert(std::numeric_limits<mixprec::uint4>::max() == 15 && std::numeric_limits<mixprec::int2>::min() == -2);

}  // namespace
