// Tests of mixprec::convert (formats/convert.hpp). Built twice: portable (mixprec_formats_convert_test)
// and with -mf16c -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (tests/simd.cmake). Both
// compare every result, bit for bit, with the scalar conversions of basic_float.hpp (To(x),
// saturate_cast<To>(x), static_cast<float>(x)), which are the definition, so the two builds are
// bit-identical to each other. A few spot checks use values taken from the format specifications.
#include "mixprec/formats/convert.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/mxcsr_scope.hpp"

#include "mixprec/arch/isa.hpp"
#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/saturate_cast.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <xmmintrin.h>
#define MIXPREC_TEST_X86 1
#endif

namespace convert_test {

namespace {

using namespace mixprec;

using all_formats =
    std::tuple<bfloat16, float16, float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e4m3b11fnuz,
               float8_e3m4, float8_e4m3, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn>;

// ---------------------------------------------------------------------------------------------
// Which paths this build can run.

/// Instruction sets the compiler targets in this build that this CPU lacks.
std::vector<std::string> missing_cpu_features() {
  std::vector<std::string> missing;
#if defined(MIXPREC_TEST_X86)
  __builtin_cpu_init();
#if defined(__F16C__)
  // Clang 14's __builtin_cpu_supports has no "f16c": read CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_F16C) == 0) missing.emplace_back("f16c");
#endif
#if defined(__AVX2__)
  if (!__builtin_cpu_supports("avx2")) missing.emplace_back("avx2");
#endif
#if defined(__FMA__)
  if (!__builtin_cpu_supports("fma")) missing.emplace_back("fma");
#endif
#if defined(__AVX512F__)
  if (!__builtin_cpu_supports("avx512f")) missing.emplace_back("avx512f");
#endif
#if defined(__AVX512BW__)
  if (!__builtin_cpu_supports("avx512bw")) missing.emplace_back("avx512bw");
#endif
#if defined(__AVX512VL__)
  if (!__builtin_cpu_supports("avx512vl")) missing.emplace_back("avx512vl");
#endif
#if defined(__AVX512BF16__)
  if (!__builtin_cpu_supports("avx512bf16")) missing.emplace_back("avx512bf16");
#endif
#endif
  return missing;
}

/// Whether `mixprec::convert` (the path this build selected) can run on this CPU.
bool simd_runs_here() {
  static const bool runs = missing_cpu_features().empty();
  return runs;
}

/// One path to test: `convert` under an instruction-set limit (`simd`), or `detail::convert_portable`.
struct path {
  bool simd;
  mixprec::isa level;  ///< the `isa_limit_scope` of a `convert` path
};

/// The paths to test: `convert` at every level this CPU runs (a build without -m flags chooses its
/// loops at run time: AVX-512, AVX2/F16C or portable), or once where the build's flags fix them, and
/// `detail::convert_portable`. On a CPU without the targeted instruction sets only the portable one.
std::vector<path> paths() {
  std::vector<path> out;
  if (simd_runs_here()) {
    if (convert_instruction_sets == "portable" || convert_instruction_sets == "f16c") {
      for (const mixprec::isa level : mixprec::all_isas) {
        if (level <= mixprec::detected_isa()) out.push_back({true, level});
      }
    } else {
      out.push_back({true, mixprec::detected_isa()});
    }
  }
  out.push_back({false, mixprec::isa::portable});
  return out;
}

template <class From, class To>
void run(const path& p, std::span<const From> in, std::span<To> out,
         overflow_mode mode = overflow_mode::to_inf_or_nan) {
  if (p.simd) {
    const mixprec::isa_limit_scope limit(p.level);
    convert(in, out, mode);
  } else {
    detail::convert_portable(in, out, mode);
  }
}

std::string path_name(const path& p) {
  return p.simd ? "mixprec::convert at level " + std::string(mixprec::name(p.level))
                : "mixprec::detail::convert_portable";
}

// ---------------------------------------------------------------------------------------------
// Inputs and the scalar definition.

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
std::uint64_t bits_of(double x) { return std::bit_cast<std::uint64_t>(x); }

/// Every pattern of T in order, its bits in the low bits of the storage.
template <class T>
std::vector<T> all_patterns() {
  std::vector<T> v;
  for (std::uint32_t p = 0; p < (std::uint32_t{1} << T::format.bits()); ++p) {
    v.push_back(T::from_bits(static_cast<typename T::storage_type>(p)));
  }
  return v;
}

constexpr std::size_t float_input_tails = 25;

/// About 1.6 million floats: every value of the top 16 bits (sign, exponent, 7 mantissa bits: every
/// bfloat16 and 8-bit pattern, every float subnormal range, +-0, +-Inf, NaNs with many payloads)
/// combined with low 16-bit tails that make, for every format, exactly representable values,
/// midpoints (ties of both parities; float16's midpoints are tails (2k+1) * 0x1000), midpoints +-1 ulp,
/// and a few arbitrary tails. The overflow boundaries (e.g. 65520 = 0x477FF000 for float16, 464 =
/// 0x43E80000 for e4m3fn) are among them.
const std::vector<float>& float_inputs() {
  static const std::vector<float> inputs = [] {
    constexpr std::array<std::uint32_t, float_input_tails> tails = {
        0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF,                  // bfloat16: exact, midpoint +-1
        0x1000, 0x3000, 0x5000, 0x7000, 0x9000, 0xB000, 0xD000, 0xF000,  // float16 midpoints
        0x0FFF, 0x1001, 0x2FFF, 0x3001, 0xEFFF, 0xF001,                  // float16 midpoints +-1 ulp
        0x2000, 0x6000, 0xE000,                                          // float16 exact
        0x5A5A, 0xA5A5};                                                 // arbitrary
    std::vector<float> v;
    v.reserve(65536 * tails.size());
    for (std::uint32_t high = 0; high < 65536; ++high) {
      for (const std::uint32_t tail : tails) v.push_back(std::bit_cast<float>((high << 16) | tail));
    }
    return v;
  }();
  return inputs;
}

/// The scalar definition of float -> T.
template <class T, class Real>
std::uint32_t scalar_encode(Real x, overflow_mode mode) {
  return mode == overflow_mode::saturate ? saturate_cast<T>(x).bits() : T(x).bits();
}

/// Counts elements whose bits differ and remembers the first one.
struct mismatches {
  std::size_t count = 0;
  std::string first;
  void add(std::size_t index, std::uint64_t input, std::uint64_t got, std::uint64_t expected) {
    if (count++ == 0) {
      first = "first mismatch at index " + std::to_string(index) + ": input bits " + hex(input) + " gave " + hex(got) +
              ", the scalar conversion gives " + hex(expected);
    }
  }
  static std::string hex(std::uint64_t v) {
    std::string s;
    do {
      s.insert(s.begin(), "0123456789ABCDEF"[v & 0xFU]);
      v >>= 4;
    } while (v != 0);
    return "0x" + s;
  }
};

constexpr std::array<overflow_mode, 2> modes = {overflow_mode::to_inf_or_nan, overflow_mode::saturate};
const char* mode_name(overflow_mode m) { return m == overflow_mode::saturate ? "saturate" : "to_inf_or_nan"; }

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("the SIMD build runs on this CPU or says which instruction sets it lacks", "[convert][simd]") {
  const std::vector<std::string> missing = missing_cpu_features();
  std::string list;
  for (const auto& name : missing) list += (list.empty() ? "" : ", ") + name;
  if (!missing.empty()) {
    WARN("SKIPPED: this CPU lacks " << list
                                    << ", which this build targets: mixprec::convert's SIMD path is NOT tested here; "
                                       "only the portable path is.");
  }
  INFO("mixprec::convert_instruction_sets = " << convert_instruction_sets);
  // The path the header selected follows the compiler's target macros.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512BF16__) && \
    !defined(MIXPREC_NO_SIMD)
  CHECK(convert_instruction_sets == "avx512f+avx512bw+avx512vl+avx512bf16");
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && !defined(MIXPREC_NO_SIMD)
  CHECK(convert_instruction_sets == "avx512f+avx512bw+avx512vl");
#elif defined(__F16C__) && !defined(MIXPREC_NO_SIMD)
  CHECK(convert_instruction_sets == "f16c");
#else
  CHECK(convert_instruction_sets == "portable");
#endif
}

TEMPLATE_LIST_TEST_CASE("convert decodes every pattern of every format to the bits of static_cast<float>", "[convert]",
                        all_formats) {
  using T = TestType;
  const std::vector<T> patterns = all_patterns<T>();
  // Small formats: the patterns repeated 17 times, each repeat shifted by one place, so that every
  // pattern passes through every SIMD lane. The 16-bit formats: all patterns, then from index 1.
  std::vector<T> in;
  if (patterns.size() <= 256) {
    for (std::size_t k = 0; k < patterns.size() * 17; ++k)
      in.push_back(patterns[(k + k / patterns.size()) % patterns.size()]);
  } else {
    in = patterns;
  }
  for (const path& simd : paths()) {
    CAPTURE(path_name(simd));
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      CAPTURE(offset);
      const std::span<const T> source = std::span<const T>(in).subspan(offset);
      std::vector<float> out(source.size());
      run(simd, source, std::span<float>(out));
      mismatches bad;
      for (std::size_t i = 0; i < source.size(); ++i) {
        const std::uint32_t expected = bits_of(static_cast<float>(source[i]));
        if (bits_of(out[i]) != expected) bad.add(i, source[i].bits(), bits_of(out[i]), expected);
      }
      INFO(bad.first);
      CHECK(bad.count == 0);

      std::vector<double> wide(source.size());
      run(simd, source, std::span<double>(wide));
      mismatches bad_wide;
      for (std::size_t i = 0; i < source.size(); ++i) {
        const std::uint64_t expected = bits_of(static_cast<double>(source[i]));
        if (bits_of(wide[i]) != expected) bad_wide.add(i, source[i].bits(), bits_of(wide[i]), expected);
      }
      INFO(bad_wide.first);
      CHECK(bad_wide.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("convert encodes floats to the bits of the scalar To(x) and saturate_cast<To>(x)", "[convert]",
                        all_formats) {
  using T = TestType;
  const std::vector<float>& in = float_inputs();
  std::vector<T> out(in.size());
  for (const overflow_mode mode : modes) {
    CAPTURE(mode_name(mode));
    std::vector<std::uint32_t> expected(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) expected[i] = scalar_encode<T>(in[i], mode);
    for (const path& simd : paths()) {
      CAPTURE(path_name(simd));
      run(simd, std::span<const float>(in), std::span<T>(out), mode);
      mismatches bad;
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (out[i].bits() != expected[i]) bad.add(i, bits_of(in[i]), out[i].bits(), expected[i]);
      }
      INFO(bad.first);
      CHECK(bad.count == 0);
    }
  }
}

// Hidden (not run by ctest; a Release build takes minutes): every one of the 2^32 floats, both modes,
// every format.  Run it with:  mixprec_formats_convert_simd_test "[exhaustive]"
TEMPLATE_LIST_TEST_CASE("convert encodes every one of the 2^32 floats to the bits of the scalar conversion",
                        "[.][exhaustive][convert]", all_formats) {
  using T = TestType;
  constexpr std::size_t chunk = std::size_t{1} << 20;
  std::vector<float> in(chunk);
  std::vector<T> out(chunk);
  for (const overflow_mode mode : modes) {
    CAPTURE(mode_name(mode));
    for (const path& simd : paths()) {
      CAPTURE(path_name(simd));
      mismatches bad;
      for (std::uint64_t base = 0; base < (std::uint64_t{1} << 32); base += chunk) {
        for (std::size_t i = 0; i < chunk; ++i) in[i] = std::bit_cast<float>(static_cast<std::uint32_t>(base + i));
        run(simd, std::span<const float>(in), std::span<T>(out), mode);
        for (std::size_t i = 0; i < chunk; ++i) {
          const std::uint32_t expected = scalar_encode<T>(in[i], mode);
          if (out[i].bits() != expected)
            bad.add(static_cast<std::size_t>(base + i), bits_of(in[i]), out[i].bits(), expected);
        }
      }
      INFO(bad.first);
      CHECK(bad.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("convert rounds doubles once, to the bits of the scalar To(x)", "[convert]", all_formats) {
  using T = TestType;
  // Every float input as a double, and its two double neighbours: a neighbour of a float midpoint is
  // exactly where rounding through float first (double rounding) would go wrong.
  std::vector<double> in;
  const std::vector<float>& floats = float_inputs();
  for (std::size_t i = 0; i < floats.size(); i += 7) {
    const double d = floats[i];
    in.push_back(d);
    if (std::isfinite(d) && d != 0.0) {
      in.push_back(std::bit_cast<double>(bits_of(d) + 1));
      in.push_back(std::bit_cast<double>(bits_of(d) - 1));
    }
  }
  for (const double d : {1e300, -1e300, 1e-300, -1e-300, std::numeric_limits<double>::denorm_min(),
                         std::bit_cast<double>(std::uint64_t{0x7FF0000000000001}),     // NaN, payload lost in float
                         std::bit_cast<double>(std::uint64_t{0xFFF8000000000123})}) {  // -NaN
    in.push_back(d);
  }
  std::vector<T> out(in.size());
  for (const overflow_mode mode : modes) {
    CAPTURE(mode_name(mode));
    for (const path& simd : paths()) {
      CAPTURE(path_name(simd));
      run(simd, std::span<const double>(in), std::span<T>(out), mode);
      mismatches bad;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint32_t expected = scalar_encode<T>(in[i], mode);
        if (out[i].bits() != expected) bad.add(i, bits_of(in[i]), out[i].bits(), expected);
      }
      INFO(bad.first);
      CHECK(bad.count == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE(
    "convert handles lengths that are not a multiple of the vector width and writes nothing outside out", "[convert]",
    all_formats) {
  using T = TestType;
  constexpr std::size_t guard = 40;
  const std::vector<float>& source = float_inputs();
  const T sentinel = T::from_bits(static_cast<typename T::storage_type>(0x5));
  constexpr float float_sentinel = -12345.0F;
  // `shift` moves the input window (encoding) and the output window (decoding) by elements: the
  // AVX-512 loops convert the elements before the first 64-byte boundary on their own.
  for (const auto& [n, shift] : {std::pair<std::size_t, std::size_t>{0, 0},
                                 {1, 0},
                                 {15, 0},
                                 {17, 0},
                                 {1003, 0},
                                 {17, 3},
                                 {1003, 5},
                                 {40, 9},
                                 {1003, 13},
                                 {31, 15}}) {
    CAPTURE(n, shift);
    // A window of the inputs rich in special values: from 2^127 * 1.875 (high bits 0x7F70) on, through
    // overflow, +Inf and NaNs.
    const std::span<const float> in =
        std::span<const float>(source).subspan(std::size_t{0x7F70} * float_input_tails + shift, n);
    for (const path& simd : paths()) {
      CAPTURE(path_name(simd));
      std::vector<T> buffer(n + 2 * guard, sentinel);
      run(simd, in, std::span<T>(buffer).subspan(guard, n));
      std::size_t wrong = 0;
      std::size_t touched = 0;
      for (std::size_t i = 0; i < buffer.size(); ++i) {
        if (i < guard || i >= guard + n) {
          touched += buffer[i].bits() != sentinel.bits() ? 1 : 0;
        } else {
          wrong += buffer[i].bits() != T(in[i - guard]).bits() ? 1 : 0;
        }
      }
      CHECK(wrong == 0);
      CHECK(touched == 0);

      // And back: decode the first n patterns (cycling through the format).
      std::vector<T> patterns(n);
      for (std::size_t i = 0; i < n; ++i) {
        patterns[i] = T::from_bits(static_cast<typename T::storage_type>(i % (std::size_t{1} << T::format.bits())));
      }
      std::vector<float> floats(n + 2 * guard + shift, float_sentinel);
      const std::size_t first = guard + shift;
      run(simd, std::span<const T>(patterns), std::span<float>(floats).subspan(first, n));
      wrong = 0;
      touched = 0;
      for (std::size_t i = 0; i < floats.size(); ++i) {
        if (i < first || i >= first + n) {
          touched += bits_of(floats[i]) != bits_of(float_sentinel) ? 1 : 0;
        } else {
          wrong += bits_of(floats[i]) != bits_of(static_cast<float>(patterns[i - first])) ? 1 : 0;
        }
      }
      CHECK(wrong == 0);
      CHECK(touched == 0);
    }
  }
}

TEST_CASE("convert throws std::invalid_argument naming both sizes when they differ", "[convert]") {
  const std::vector<float> three(3, 1.0F);
  std::vector<bfloat16> four(4);
  std::vector<float> five(5);
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(convert(std::span<const float>(three), std::span<bfloat16>(four)), std::invalid_argument);
  CHECK_THROWS_WITH(convert(std::span<const float>(three), std::span<bfloat16>(four)),
                    Contains("input has 3 elements") && Contains("output has 4"));
  CHECK_THROWS_WITH(convert(four, five), Contains("input has 4 elements") && Contains("output has 5"));
  CHECK_THROWS_WITH(detail::convert_portable(std::span<const float>(three), std::span<bfloat16>(four)),
                    Contains("input has 3 elements") && Contains("output has 4"));
  // Nothing was written.
  for (const bfloat16 b : four) CHECK(b.bits() == 0);
}

TEST_CASE("convert takes spans, vectors and arrays", "[convert]") {
  const std::vector<float> x = {1.0F, 300.0F, 1000.0F};
  std::vector<float8_e4m3fn> y(x.size());
  convert(x, y);  // vectors
  // OCP FP8 E4M3: 1.0 = 0.0111.000; 300 -> 288 = 1.125 * 2^8 = 0.1111.001; 1000 > 464 -> NaN 0.1111.111
  CHECK(y[0].bits() == 0x38);
  CHECK(y[1].bits() == 0x79);
  CHECK(y[2].bits() == 0x7F);
  std::array<float8_e4m3fn, 3> z{};
  convert(std::span<const float>(x), std::span<float8_e4m3fn>(z), overflow_mode::saturate);
  CHECK(z[2].bits() == 0x7E);  // 448 = 1.75 * 2^8 = 0.1111.110
  std::array<float, 3> back{};
  convert(z, back);
  CHECK(back[0] == 1.0F);
  CHECK(back[1] == 288.0F);
  CHECK(back[2] == 448.0F);
}

TEST_CASE("convert matches values from the format specifications", "[convert]") {
  // Independent references: IEEE 754 binary16, the bfloat16 definition (top half of binary32 with
  // round-to-nearest-even), the OCP 8-bit FP specification (E4M3 max 448, E5M2 max 57344), OCP MX FP4.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {1.0F,       -2.0F, 65504.0F, 65520.0F,  0x1p-24F,   0x1p-25F,
                                 0x1.8p-25F, inf,   -nan,     0x1p-133F, 1.00390625F};
  for (const path& simd : paths()) {
    CAPTURE(path_name(simd));
    std::vector<float16> h(in.size());
    run(simd, std::span<const float>(in), std::span<float16>(h));
    CHECK(h[0].bits() == 0x3C00);
    CHECK(h[1].bits() == 0xC000);
    CHECK(h[2].bits() == 0x7BFF);  // max
    CHECK(h[3].bits() == 0x7C00);  // max + half ulp: the tie goes to even, past max: Inf
    CHECK(h[4].bits() == 0x0001);  // smallest subnormal
    CHECK(h[5].bits() == 0x0000);  // half of it: tie to even, 0
    CHECK(h[6].bits() == 0x0001);  // 0.75 of it: up
    CHECK(h[7].bits() == 0x7C00);
    CHECK(h[8].bits() == 0xFE00);  // canonical quiet NaN, sign kept
    run(simd, std::span<const float>(in), std::span<float16>(h), overflow_mode::saturate);
    CHECK(h[3].bits() == 0x7BFF);
    CHECK(h[7].bits() == 0x7BFF);

    std::vector<bfloat16> b(in.size());
    run(simd, std::span<const float>(in), std::span<bfloat16>(b));
    CHECK(b[0].bits() == 0x3F80);
    CHECK(b[7].bits() == 0x7F80);
    CHECK(b[8].bits() == 0xFFC0);
    CHECK(b[9].bits() == 0x0001);   // 2^-133 is the smallest bfloat16 subnormal (a float subnormal)
    CHECK(b[10].bits() == 0x3F80);  // 1 + 2^-8: the midpoint of 1 and 1 + 2^-7, to even: 1

    const std::vector<float> fp8_in = {448.0F, 464.0F, 480.0F, 57344.0F, 61440.0F, 0x1p-9F, 0x1p-16F, -0.0F};
    std::vector<float8_e4m3fn> e4(fp8_in.size());
    std::vector<float8_e5m2> e5(fp8_in.size());
    run(simd, std::span<const float>(fp8_in), std::span<float8_e4m3fn>(e4));
    run(simd, std::span<const float>(fp8_in), std::span<float8_e5m2>(e5));
    CHECK(e4[0].bits() == 0x7E);  // 448: max
    CHECK(e4[1].bits() == 0x7E);  // 464: midpoint of 448 and 480 (not representable): to even, 448
    CHECK(e4[2].bits() == 0x7F);  // 480: NaN (no Inf in E4M3)
    CHECK(e4[5].bits() == 0x01);  // 2^-9: smallest subnormal
    CHECK(e4[7].bits() == 0x80);  // -0
    CHECK(e5[3].bits() == 0x7B);  // 57344: max
    CHECK(e5[4].bits() == 0x7C);  // 61440: midpoint past max, odd max: Inf
    CHECK(e5[6].bits() == 0x01);  // 2^-16: smallest subnormal

    const std::vector<float4_e2m1fn> fp4 = all_patterns<float4_e2m1fn>();
    std::vector<float> fp4_values(fp4.size());
    run(simd, std::span<const float4_e2m1fn>(fp4), std::span<float>(fp4_values));
    const std::array<float, 16> mx_fp4 = {0.0F,  0.5F,  1.0F,  1.5F,  2.0F,  3.0F,  4.0F,  6.0F,
                                          -0.0F, -0.5F, -1.0F, -1.5F, -2.0F, -3.0F, -4.0F, -6.0F};
    for (std::size_t i = 0; i < mx_fp4.size(); ++i) CHECK(bits_of(fp4_values[i]) == bits_of(mx_fp4[i]));

    // A double just above a bfloat16 midpoint: 1 + 2^-8 + 2^-40 rounds up to 1 + 2^-7 (0x3F81).
    // Through float it would first become the midpoint 1 + 2^-8 and then round to even, 1.0.
    const std::vector<double> d = {1.0 + 0x1p-8 + 0x1p-40};
    std::vector<bfloat16> bd(1);
    run(simd, std::span<const double>(d), std::span<bfloat16>(bd));
    CHECK(bd[0].bits() == 0x3F81);
  }
}

#if defined(MIXPREC_TEST_X86)
namespace {
using test_support::mxcsr_scope;

template <class T>
void check_under_mxcsr(unsigned csr) {
  const std::vector<float>& in = float_inputs();
  const std::vector<T> patterns = all_patterns<T>();
  std::vector<std::uint32_t> expected_encode(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) expected_encode[i] = T(in[i]).bits();
  // The same values as doubles (exact), which must round to the same patterns.
  const std::vector<double> in_double(in.begin(), in.end());
  for (const path& simd : paths()) {
    CAPTURE(path_name(simd));
    std::vector<T> out(in.size());
    std::vector<T> out_from_double(in.size());
    std::vector<float> decoded(patterns.size());
    std::vector<double> decoded_double(patterns.size());
    {
      const mxcsr_scope scope(csr);
      run(simd, std::span<const float>(in), std::span<T>(out));
      run(simd, std::span<const double>(in_double), std::span<T>(out_from_double));
      run(simd, std::span<const T>(patterns), std::span<float>(decoded));
      run(simd, std::span<const T>(patterns), std::span<double>(decoded_double));
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i) bad += out[i].bits() != expected_encode[i] ? 1 : 0;
    for (std::size_t i = 0; i < in.size(); ++i) bad += out_from_double[i].bits() != expected_encode[i] ? 1 : 0;
    for (std::size_t i = 0; i < patterns.size(); ++i)
      bad += bits_of(decoded[i]) != bits_of(static_cast<float>(patterns[i])) ? 1 : 0;
    // To double: the exact value (float -> double widening in the default environment is exact).
    for (std::size_t i = 0; i < patterns.size(); ++i)
      bad += bits_of(decoded_double[i]) != bits_of(static_cast<double>(static_cast<float>(patterns[i]))) ? 1 : 0;
    CHECK(bad == 0);
  }
}
}  // namespace

TEST_CASE("convert gives the same bits under flush-to-zero and denormals-are-zero with rounding toward zero",
          "[convert]") {
  // MXCSR: FTZ (bit 15), DAZ (bit 6), rounding control toward zero (bits 13-14 = 11), all exceptions masked.
  const unsigned csr = (_mm_getcsr() & ~0x6000U) | 0x8000U | 0x0040U | 0x6000U | 0x1F80U;
  check_under_mxcsr<bfloat16>(csr);
  check_under_mxcsr<float16>(csr);
  check_under_mxcsr<float8_e4m3fn>(csr);
  check_under_mxcsr<float8_e5m2>(csr);
  check_under_mxcsr<float8_e8m0fnu>(csr);
}
#endif

}  // namespace convert_test
