/// \file
/// \brief `mixprec::convert(in, out)`: bulk conversion between float (or double) and every small
/// float, vectorised where the compiler targets F16C / AVX-512 / AVX512-BF16, bit-identical to the
/// scalar conversions `To(x)`, `saturate_cast<To>(x)` and `static_cast<float>(x)` for every input.
///
/// In a build without AVX-512 flags (the default), the loops are chosen at run time from
/// `mixprec::active_isa()`: 16 AVX-512 lanes (every format; float16 through VCVTPS2PH/VCVTPH2PS; but
/// e5m2 and e4m3fn decode through float16 on the AVX2 loops) at `isa::avx512` and above, else F16C
/// (float16) or 8 AVX2 integer lanes (every other format) at `isa::avx2`, else the portable loops. A build that targets
/// AVX-512 (`-mavx512f -mavx512bw -mavx512vl [-mavx512bf16]`, `-march=native`) takes the AVX-512 loops at every call
/// and needs a CPU with AVX-512; one that targets F16C (`-mf16c`) takes them for float16. Define `MIXPREC_NO_SIMD`
/// before including this header to force the portable loops. How the results are kept identical:
/// docs/conversions.md.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "mixprec/arch/isa.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/detail/convert_avx2.hpp"
#include "mixprec/formats/detail/convert_f16c.hpp"
#include "mixprec/formats/detail/convert_lanewise.hpp"
#include "mixprec/formats/detail/float_codec.hpp"
#include "mixprec/formats/float_format.hpp"

#include "mixprec/formats/detail/convert_x86.hpp"

namespace mixprec {
namespace detail {
inline namespace MIXPREC_DETAIL_CONVERT_ISA {

template <class T>
concept convert_real = std::same_as<T, float> || std::same_as<T, double>;

/// The pairs `convert` handles: float or double to a small float, a small float to float or double.
template <class From, class To>
inline constexpr bool bulk_convertible = (convert_real<From> && small_float<To>) ||
                                         (small_float<From> && convert_real<To>);

/// Portable float -> F: the lane-wise integer encoder, one element per iteration (vectorisable).
template <class To, overflow_mode Mode>
inline void encode_portable(const float* in, To* out, std::size_t n) noexcept {
  using storage = typename To::storage_type;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = To::from_bits(static_cast<storage>(encode_lane<To::format, Mode>(std::bit_cast<std::uint32_t>(in[i]))));
  }
}

/// Portable F -> float: 8-bit-or-smaller formats read the scalar conversion's own 256-entry table
/// (directly: `operator float` is an ordinary inline member, outside the per-ISA namespace);
/// 16-bit formats use the lane-wise integer decoder.
template <class From>
inline void decode_portable(const From* in, float* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (From::format.bits() <= 8) {
      out[i] = decode_table<From::format>[in[i].bits()];
    } else {
      out[i] = std::bit_cast<float>(decode_lane<From::format>(in[i].bits()));
    }
  }
}

template <class To, overflow_mode Mode, bool Simd>
inline void encode_n(const float* in, To* out, std::size_t n) noexcept {
#if MIXPREC_X86_DISPATCH && !defined(MIXPREC_DETAIL_CONVERT_AVX512)
  if constexpr (Simd && To::format == formats::bfloat16) {  // VCVTNEPS2BF16, chosen at run time
    if (active_isa() >= isa::avx512bf16) {
      avx512::encode_bfloat16_native<To, Mode>(in, out, n);
      return;
    }
  }
  if constexpr (Simd && avx512::handles<To::format>) {  // 16 lanes (convert_x86.hpp), chosen at run time
    if (active_isa() >= isa::avx512) {
      avx512::encode<To, Mode>(in, out, n);
      return;
    }
  }
#endif
#if defined(MIXPREC_DETAIL_CONVERT_AVX512) || defined(MIXPREC_DETAIL_CONVERT_F16C)
  if constexpr (Simd && x86::handles<To::format>) {
    x86::encode<To, Mode>(in, out, n);
    return;
  }
#elif MIXPREC_X86_DISPATCH
  if constexpr (Simd && To::format == formats::float16) {
    if (active_isa() >= isa::avx2) {  // a build without -mf16c on a CPU with it
      f16c::encode<To, Mode>(in, out, n);
      return;
    }
  }
#endif
#if MIXPREC_X86_DISPATCH && !defined(MIXPREC_DETAIL_CONVERT_AVX512)
  if constexpr (Simd && avx2::handles<To::format>) {  // the other formats: 8 integer lanes (convert_avx2.hpp)
    if (active_isa() >= isa::avx2) {
      avx2::encode<To, Mode>(in, out, n);
      return;
    }
  }
#endif
  encode_portable<To, Mode>(in, out, n);
}

template <class From, bool Simd>
inline void decode_n(const From* in, float* out, std::size_t n) noexcept {
#if MIXPREC_X86_DISPATCH && !defined(MIXPREC_DETAIL_CONVERT_AVX512)
  // 16 lanes (convert_x86.hpp), chosen at run time; not for e5m2 and e4m3fn, whose AVX2 loops through
  // float16 and VCVTPH2PS decode as fast or faster (measured: docs/conversions.md, "Which instructions").
  if constexpr (Simd && avx512::handles<From::format> && !avx2::via_float16<From::format>) {
    if (active_isa() >= isa::avx512) {
      avx512::decode<From>(in, out, n);
      return;
    }
  }
#endif
#if defined(MIXPREC_DETAIL_CONVERT_AVX512) || defined(MIXPREC_DETAIL_CONVERT_F16C)
  if constexpr (Simd && x86::handles<From::format>) {
    x86::decode<From>(in, out, n);
    return;
  }
#elif MIXPREC_X86_DISPATCH
  if constexpr (Simd && From::format == formats::float16) {
    if (active_isa() >= isa::avx2) {
      f16c::decode<From>(in, out, n);
      return;
    }
  }
#endif
#if MIXPREC_X86_DISPATCH && !defined(MIXPREC_DETAIL_CONVERT_AVX512)
  if constexpr (Simd && avx2::decodes<From::format>) {  // the other formats: 8 integer lanes (convert_avx2.hpp)
    if (active_isa() >= isa::avx2) {
      avx2::decode<From>(in, out, n);
      return;
    }
  }
#endif
  decode_portable<From>(in, out, n);
}

/// The conversion proper, sizes already checked. `Simd` = false forces the portable loops.
template <class From, class To, bool Simd>
inline void convert_n(const From* in, To* out, std::size_t n, overflow_mode mode) noexcept {
  if constexpr (std::same_as<From, float>) {
    static_assert(sizeof(To) == sizeof(typename To::storage_type), "a small float is its bit pattern");
    if (mode == overflow_mode::saturate) {
      encode_n<To, overflow_mode::saturate, Simd>(in, out, n);
    } else {
      encode_n<To, overflow_mode::to_inf_or_nan, Simd>(in, out, n);
    }
  } else if constexpr (std::same_as<From, double>) {
    // One rounding from double (never through float): the scalar codec, element by element.
    using storage = typename To::storage_type;
    for (std::size_t i = 0; i < n; ++i) out[i] = To::from_bits(static_cast<storage>(encode<To::format>(in[i], mode)));
  } else if constexpr (std::same_as<To, float>) {
    static_assert(sizeof(From) == sizeof(typename From::storage_type), "a small float is its bit pattern");
    decode_n<From, Simd>(in, out, n);
  } else {
    // To double: decode a block to float, then widen (exact; the scalar operator double does the same).
    // Formats with values below 2^-126 (bfloat16, e8m0) give float subnormals, which a plain
    // float -> double conversion flushes to 0 under DAZ: those widen through widen_to_double.
    constexpr std::size_t block = 256;
    float buffer[block];
    for (std::size_t i = 0; i < n; i += block) {
      const std::size_t m = n - i < block ? n - i : block;
      decode_n<From, Simd>(in + i, buffer, m);
      if constexpr (From::format.finest_exponent() >= -126) {
        for (std::size_t j = 0; j < m; ++j) out[i + j] = static_cast<double>(buffer[j]);
      } else {
        for (std::size_t j = 0; j < m; ++j) out[i + j] = widen_to_double(buffer[j]);
      }
    }
  }
}

/// Throws std::invalid_argument unless the two sizes match.
inline void check_convert_sizes(std::size_t in, std::size_t out) {
  if (in != out) {
    throw std::invalid_argument("mixprec::convert: the input has " + std::to_string(in) +
                                " elements but the output has " + std::to_string(out) +
                                "; pass an output of the same size as the input.");
  }
}

template <class From, class To>
inline constexpr void static_check_convertible() {
  static_assert(!std::is_const_v<To>,
                "mixprec::convert writes into `out`: pass a span of mutable elements, not of const ones.");
  static_assert(bulk_convertible<From, std::remove_const_t<To>>,
                "mixprec::convert converts float or double to a small float (bfloat16, float16, float8_*, float6_*, "
                "float4_e2m1fn) or a small float to float or double; convert other pairs through float.");
}

}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace detail

inline namespace MIXPREC_DETAIL_CONVERT_ISA {

/// The instruction sets `convert` is compiled for in this translation unit (fixed at compile time by
/// the compiler's target flags): "avx512f+avx512bw+avx512vl+avx512bf16", "avx512f+avx512bw+avx512vl",
/// "f16c" (float16 in F16C) or "portable". In a "portable" build on x86 (no -m flags: the default),
/// every format still takes the AVX-512 lanes (decoding e5m2 and e4m3fn excepted; encoding bfloat16
/// takes VCVTNEPS2BF16 at `isa::avx512bf16`) when `mixprec::active_isa()` is at least `isa::avx512` at
/// run time, else float16 the F16C loops and the other formats the
/// AVX2 integer lanes (both directions) at `isa::avx2`; an "f16c" build (-mf16c) chooses the AVX-512 lanes, and the
/// AVX2 lanes for the formats other than float16, the same way.
inline constexpr std::string_view convert_instruction_sets =
#if defined(MIXPREC_DETAIL_CONVERT_AVX512BF16)
    "avx512f+avx512bw+avx512vl+avx512bf16";
#elif defined(MIXPREC_DETAIL_CONVERT_AVX512)
    "avx512f+avx512bw+avx512vl";
#elif defined(MIXPREC_DETAIL_CONVERT_F16C)
    "f16c";
#else
    "portable";
#endif

/// Converts every element of `in` into the element of `out` at the same index:
///  - float or double -> small float `To`: `out[i]` has exactly the bits of `To(in[i])`
///    (`mode == overflow_mode::to_inf_or_nan`, ml_dtypes' rule) or of `saturate_cast<To>(in[i])`
///    (`overflow_mode::saturate`, "satfinite"): round to nearest even once (a double is never rounded
///    to float first), NaN -> the format's canonical quiet NaN with the input's sign where it has one;
///  - small float -> float or double: exact, `out[i] == static_cast<float>(in[i])` bit for bit (NaN
///    included: ieee formats keep the payload and set the quiet bit); `mode` is ignored.
///
/// Vectorised with AVX-512 (F, BW, VL; AVX512-BF16 for float -> bfloat16) or F16C (float16) when the
/// compiler targets them, and, chosen at run time in a build without -m flags, with F16C for float16
/// and AVX2 integer lanes for the other formats' encoding (`MIXPREC_ISA=portable` turns both off); the
/// results are the same bits in every build and on every level (see docs/conversions.md).
/// Neither the MXCSR rounding mode nor FTZ/DAZ changes them. `in` and `out` must not overlap.
///
/// \throws std::invalid_argument if `in.size() != out.size()` (the message gives both sizes).
///
/// **Example**:
///
///     std::vector<float> x = {1.0f, 300.0f, 1000.0f};
///     std::vector<mixprec::float8_e4m3fn> y(x.size());
///     mixprec::convert(std::span<const float>(x), std::span(y));            // 1, 288, NaN
///     mixprec::convert(x, y, mixprec::overflow_mode::saturate);              // 1, 288, 448
///     std::vector<float> back(y.size());
///     mixprec::convert(y, back);                                             // 1, 288, 448
template <class From, class To>
void convert(std::span<const From> in, std::span<To> out, overflow_mode mode = overflow_mode::to_inf_or_nan) {
  detail::static_check_convertible<From, To>();
  if constexpr (detail::bulk_convertible<From, To> && !std::is_const_v<To>) {
    detail::check_convert_sizes(in.size(), out.size());
    detail::convert_n<From, To, true>(in.data(), out.data(), in.size(), mode);
  }
}

/// `convert` for any contiguous containers with `std::data` and `std::size` (std::vector,
/// std::array, C arrays, Eigen vectors...): the same as the span overload on their elements.
template <class In, class Out>
requires requires(const In& in, Out& out) {
  std::data(in);
  std::size(in);
  std::data(out);
  std::size(out);
}
void convert(const In& in, Out&& out, overflow_mode mode = overflow_mode::to_inf_or_nan) {
  using From = std::remove_cvref_t<decltype(*std::data(in))>;
  using ToRef = decltype(*std::data(out));
  static_assert(!std::is_const_v<std::remove_reference_t<ToRef>>,
                "mixprec::convert writes into its second argument: pass a mutable container or span, not a const one.");
  using To = std::remove_reference_t<ToRef>;
  convert(std::span<const From>(std::data(in), std::size(in)), std::span<To>(std::data(out), std::size(out)), mode);
}

}  // namespace MIXPREC_DETAIL_CONVERT_ISA

namespace detail {
inline namespace MIXPREC_DETAIL_CONVERT_ISA {
/// `convert` restricted to the portable loops, whatever the compiler targets (the tests compare
/// both; the SIMD test build falls back to this one on a CPU without the instruction sets).
template <class From, class To>
void convert_portable(std::span<const From> in, std::span<To> out, overflow_mode mode = overflow_mode::to_inf_or_nan) {
  static_check_convertible<From, To>();
  if constexpr (bulk_convertible<From, To> && !std::is_const_v<To>) {
    check_convert_sizes(in.size(), out.size());
    convert_n<From, To, false>(in.data(), out.data(), in.size(), mode);
  }
}
}  // namespace MIXPREC_DETAIL_CONVERT_ISA
}  // namespace detail

}  // namespace mixprec
