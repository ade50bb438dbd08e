// Test-only reference model of mixprec's number formats, written from the format specifications and
// NOT from mixprec's headers: nothing here reads `mixprec::float_format`, `mixprec::formats::*` or
// anything in mixprec::detail. The only things taken from mixprec are the type names (to map a type to
// its specification below) and the public `from_bits`/`bits()` used by the tests.
//
// Where the facts come from (checked against the sources, cited per format in `specs` below):
//  - IEEE 754-2019: binary16; Inf/NaN encodings and the quiet bit (§3.4, §6.2.1); roundTiesToEven
//    (§4.3.1); overflow decided on the result rounded as if the exponent range were unbounded (§7.4).
//  - OCP 8-bit Floating Point Specification (OFP8) rev. 1.0: E4M3 (= float8_e4m3fn) and E5M2.
//  - OCP Microscaling Formats (MX) v1.0: E8M0, FP6 E2M3 / E3M2, FP4 E2M1.
//  - jax-ml/ml_dtypes: ml_dtypes/include/float8.h (class comments: "Exponent: 4, Mantissa: 3, bias: 7.
//    Extended range: no inf, NaN represented by 0bS111'1111" for e4m3fn; "exponent bias: 8 ... NaNs:
//    ... `0b10000000`" for e4m3fnuz; bias 16 for e5m2fnuz, 11 for e4m3b11fnuz, 3 for e3m4 and 7 for
//    e4m3, both "IEEE 754"; e8m0fnu "bit encoding: S0E8M0, exponent bias: 127, NaNs: 0b11111111"),
//    ml_dtypes/include/mxfloat.h (bias = 2^(E-1) - 1, "no inf, no NaN"; quiet_NaN() = 0b1'00..0),
//    ml_dtypes/tests/float8_test.cc and mxfloat_test.cc (published values pinned in the tests).
//  - docs/formats.md of this project for the choices the specs leave open (ties in e8m0 go to the even
//    exponent field; saturate_cast clamps ±Inf).
//
// The model is deliberately naive:
//  - decode: the textbook formula with std::ldexp, per field, in double:
//        normal     (-1)^S * (2^m + M) * 2^(E - bias - m)
//        subnormal  (-1)^S *        M  * 2^(1 - bias - m)      (E == 0; e8m0 has no subnormals)
//  - encode: a *search* of the sorted table of every finite value of the format for the nearest one,
//    ties to the even bit pattern, with one virtual value past max (max + ulp(max)) that stands for
//    "overflow", decided by the same nearest/ties-to-even rule as IEEE 754 §7.4 prescribes.
//    The real number being rounded is given only through an exact comparison `sign(x - m)` for table
//    midpoints m, so one routine serves doubles, exact sums, exact quotients and 64-bit integers.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/formats/float4.hpp"
#include "mixprec/formats/float6.hpp"
#include "mixprec/formats/float8.hpp"

namespace mixprec_test {

/// How a format spends its special encodings (named after the spec families, not after mixprec's enum).
enum class specials {
  ieee,  ///< IEEE 754: exponent all ones = Inf (mantissa 0) or NaN (bfloat16, float16, e5m2, e3m4, e4m3)
  fn,    ///< OCP E4M3: no Inf; only S.1111.111 is NaN (float8_e4m3fn)
  fnuz,  ///< no Inf, no -0; only 1.000...0 is NaN (Graphcore/AMD e4m3fnuz, e5m2fnuz, e4m3b11fnuz)
  mx,    ///< OCP MX FP6/FP4: every pattern is a number (no Inf, no NaN)
  e8m0,  ///< OCP MX E8M0: unsigned, no zero, every E is 2^(E-127) except 0xFF = NaN
};

enum class overflow { to_inf_or_nan, saturate };

struct format_spec {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  specials kind;

  [[nodiscard]] constexpr bool is_signed() const { return kind != specials::e8m0; }
  [[nodiscard]] constexpr int bits() const { return (is_signed() ? 1 : 0) + exponent_bits + mantissa_bits; }
  [[nodiscard]] constexpr std::uint32_t patterns() const { return std::uint32_t{1} << bits(); }
  [[nodiscard]] constexpr std::uint32_t sign_bit() const {
    return is_signed() ? std::uint32_t{1} << (exponent_bits + mantissa_bits) : 0U;
  }
  [[nodiscard]] constexpr std::uint32_t exponent_field(std::uint32_t p) const {
    return (p >> mantissa_bits) & ((std::uint32_t{1} << exponent_bits) - 1U);
  }
  [[nodiscard]] constexpr std::uint32_t mantissa_field(std::uint32_t p) const {
    return p & ((std::uint32_t{1} << mantissa_bits) - 1U);
  }
  [[nodiscard]] constexpr std::uint32_t all_ones_exponent() const { return (std::uint32_t{1} << exponent_bits) - 1U; }
  [[nodiscard]] constexpr std::uint32_t all_ones_mantissa() const { return (std::uint32_t{1} << mantissa_bits) - 1U; }
};

/// The specification of every format, from the sources in the file comment.
namespace specs {
// Google Brain bfloat16: the top 16 bits of an IEEE binary32 (8 exponent bits, bias 127).
inline constexpr format_spec bfloat16{"bfloat16", 8, 7, 127, specials::ieee};
// IEEE 754-2019 binary16: 5 exponent bits, bias 15, 10 trailing significand bits.
inline constexpr format_spec float16{"float16", 5, 10, 15, specials::ieee};
// OFP8 E4M3 = ml_dtypes float8_e4m3fn: bias 7, no Inf, NaN S.1111.111.
inline constexpr format_spec e4m3fn{"float8_e4m3fn", 4, 3, 7, specials::fn};
// OFP8 E5M2 = ml_dtypes float8_e5m2: bias 15, IEEE Inf and NaN.
inline constexpr format_spec e5m2{"float8_e5m2", 5, 2, 15, specials::ieee};
// ml_dtypes float8_e4m3fnuz: "exponent bias: 8 ... NaNs: 0b10000000", no Inf, no -0.
inline constexpr format_spec e4m3fnuz{"float8_e4m3fnuz", 4, 3, 8, specials::fnuz};
// ml_dtypes float8_e5m2fnuz: "exponent bias: 16", NaN 0b10000000, no Inf, no -0.
inline constexpr format_spec e5m2fnuz{"float8_e5m2fnuz", 5, 2, 16, specials::fnuz};
// ml_dtypes float8_e4m3b11fnuz: "Exponent: 4, Mantissa: 3, bias: 11 ... NaN represented by 0b1000'0000".
inline constexpr format_spec e4m3b11fnuz{"float8_e4m3b11fnuz", 4, 3, 11, specials::fnuz};
// ml_dtypes float8_e3m4: "Exponent: 3, Mantissa: 4, bias: 3. IEEE 754."
inline constexpr format_spec e3m4{"float8_e3m4", 3, 4, 3, specials::ieee};
// ml_dtypes float8_e4m3: "Exponent: 4, Mantissa: 3, bias: 7. IEEE 754."
inline constexpr format_spec e4m3{"float8_e4m3", 4, 3, 7, specials::ieee};
// OCP MX E8M0 = ml_dtypes float8_e8m0fnu: unsigned, 8 exponent bits, bias 127, NaN 0xFF.
inline constexpr format_spec e8m0fnu{"float8_e8m0fnu", 8, 0, 127, specials::e8m0};
// OCP MX FP6 E2M3: bias 1 (= 2^(2-1) - 1 in ml_dtypes mxfloat.h), no Inf/NaN.
inline constexpr format_spec e2m3fn{"float6_e2m3fn", 2, 3, 1, specials::mx};
// OCP MX FP6 E3M2: bias 3, no Inf/NaN.
inline constexpr format_spec e3m2fn{"float6_e3m2fn", 3, 2, 3, specials::mx};
// OCP MX FP4 E2M1: bias 1, no Inf/NaN.
inline constexpr format_spec e2m1fn{"float4_e2m1fn", 2, 1, 1, specials::mx};
}  // namespace specs

/// Every small float type of mixprec, for TEMPLATE_LIST_TEST_CASE.
using all_small_floats = std::tuple<mixprec::bfloat16, mixprec::float16, mixprec::float8_e4m3fn, mixprec::float8_e5m2,
                                    mixprec::float8_e4m3fnuz, mixprec::float8_e5m2fnuz, mixprec::float8_e4m3b11fnuz,
                                    mixprec::float8_e3m4, mixprec::float8_e4m3, mixprec::float8_e8m0fnu,
                                    mixprec::float6_e2m3fn, mixprec::float6_e3m2fn, mixprec::float4_e2m1fn>;
using float8_types =
    std::tuple<mixprec::float8_e4m3fn, mixprec::float8_e5m2, mixprec::float8_e4m3fnuz, mixprec::float8_e5m2fnuz,
               mixprec::float8_e4m3b11fnuz, mixprec::float8_e3m4, mixprec::float8_e4m3, mixprec::float8_e8m0fnu>;
using narrow_types =
    std::tuple<mixprec::float8_e4m3fn, mixprec::float8_e5m2, mixprec::float8_e4m3fnuz, mixprec::float8_e5m2fnuz,
               mixprec::float8_e4m3b11fnuz, mixprec::float8_e3m4, mixprec::float8_e4m3, mixprec::float8_e8m0fnu,
               mixprec::float6_e2m3fn, mixprec::float6_e3m2fn, mixprec::float4_e2m1fn>;
using wide_types = std::tuple<mixprec::bfloat16, mixprec::float16>;

/// The specification of the mixprec type T (by name only).
template <class T>
constexpr const format_spec& spec_of() {
  if constexpr (std::is_same_v<T, mixprec::bfloat16>)
    return specs::bfloat16;
  else if constexpr (std::is_same_v<T, mixprec::float16>)
    return specs::float16;
  else if constexpr (std::is_same_v<T, mixprec::float8_e4m3fn>)
    return specs::e4m3fn;
  else if constexpr (std::is_same_v<T, mixprec::float8_e5m2>)
    return specs::e5m2;
  else if constexpr (std::is_same_v<T, mixprec::float8_e4m3fnuz>)
    return specs::e4m3fnuz;
  else if constexpr (std::is_same_v<T, mixprec::float8_e5m2fnuz>)
    return specs::e5m2fnuz;
  else if constexpr (std::is_same_v<T, mixprec::float8_e4m3b11fnuz>)
    return specs::e4m3b11fnuz;
  else if constexpr (std::is_same_v<T, mixprec::float8_e3m4>)
    return specs::e3m4;
  else if constexpr (std::is_same_v<T, mixprec::float8_e4m3>)
    return specs::e4m3;
  else if constexpr (std::is_same_v<T, mixprec::float8_e8m0fnu>)
    return specs::e8m0fnu;
  else if constexpr (std::is_same_v<T, mixprec::float6_e2m3fn>)
    return specs::e2m3fn;
  else if constexpr (std::is_same_v<T, mixprec::float6_e3m2fn>)
    return specs::e3m2fn;
  else {
    static_assert(std::is_same_v<T, mixprec::float4_e2m1fn>, "add the new type to spec_of in reference_format.hpp");
    return specs::e2m1fn;
  }
}

// ------------------------------------------------------------------------------------------------
// Small text helpers for failure messages.

inline std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%02llX", static_cast<unsigned long long>(v));
  return buf;
}
inline std::string show(double x) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%.17g (%a)", x, x);
  return buf;
}

/// Collects mismatches of a long loop and prints the first few, so one CHECK covers the loop.
class mismatches {
 public:
  void add(const std::string& what) {
    if (count_ < 12) text_ += what + "\n";
    ++count_;
  }
  [[nodiscard]] std::size_t count() const { return count_; }
  [[nodiscard]] std::string report() const {
    return count_ == 0 ? std::string("no mismatch")
                       : std::to_string(count_) + " mismatch(es); the first ones:\n" + text_;
  }

 private:
  std::size_t count_ = 0;
  std::string text_;
};

// ------------------------------------------------------------------------------------------------
// The reference model of one format.

class reference {
 public:
  struct entry {
    double value;
    std::uint32_t bits;  // pattern; for the two virtual overflow entries: sign | (max magnitude + 1)
    bool overflow;       // the virtual value max + ulp(max) (or its negative)
  };

  explicit reference(const format_spec& f) : f_(f) {
    for (std::uint32_t p = 0; p < f_.patterns(); ++p) {
      if (is_nan(p) || is_inf(p)) continue;
      if (f_.is_signed() && p == f_.sign_bit()) continue;  // -0 (or the fnuz NaN, already skipped)
      table_.push_back({decode(p), p, false});
    }
    std::sort(table_.begin(), table_.end(), [](const entry& a, const entry& b) { return a.value < b.value; });
    const entry top = table_.back();
    max_ = top.value;
    max_bits_ = top.bits;
    // ulp(max) = 2^(exponent of max - m). With the exponent range unbounded, the next value after max
    // is max + ulp(max) and its pattern is "max's pattern + 1" (only its parity matters, for ties).
    const double ulp_of_max = std::ldexp(1.0, std::ilogb(max_) - f_.mantissa_bits);
    table_.push_back({max_ + ulp_of_max, max_bits_ + 1U, true});
    if (f_.is_signed()) {
      table_.insert(table_.begin(), {-(max_ + ulp_of_max), f_.sign_bit() | (max_bits_ + 1U), true});
    }
    for (const entry& e : table_) {
      if (!e.overflow && e.value > 0) positives_.push_back(e);
    }
  }

  [[nodiscard]] const format_spec& spec() const { return f_; }

  // --- decoding -------------------------------------------------------------------------------
  [[nodiscard]] bool is_nan(std::uint32_t p) const {
    switch (f_.kind) {
      case specials::ieee: return f_.exponent_field(p) == f_.all_ones_exponent() && f_.mantissa_field(p) != 0;
      case specials::fn:
        return f_.exponent_field(p) == f_.all_ones_exponent() && f_.mantissa_field(p) == f_.all_ones_mantissa();
      case specials::fnuz: return p == f_.sign_bit();
      case specials::mx: return false;
      case specials::e8m0: return p == 0xFFU;
    }
    return false;
  }
  [[nodiscard]] bool is_inf(std::uint32_t p) const {
    return f_.kind == specials::ieee && f_.exponent_field(p) == f_.all_ones_exponent() && f_.mantissa_field(p) == 0;
  }
  [[nodiscard]] bool sign_of(std::uint32_t p) const { return (p & f_.sign_bit()) != 0; }

  /// The exact value of pattern p as a double (every format here fits). NaN patterns give a quiet
  /// NaN carrying the pattern's sign bit.
  [[nodiscard]] double decode(std::uint32_t p) const {
    const double sign = sign_of(p) ? -1.0 : 1.0;  // (copysign: multiplying a NaN keeps its sign on x86)
    if (is_nan(p)) return std::copysign(std::numeric_limits<double>::quiet_NaN(), sign);
    if (is_inf(p)) return std::copysign(std::numeric_limits<double>::infinity(), sign);
    const int m = f_.mantissa_bits;
    const auto e = static_cast<int>(f_.exponent_field(p));
    const auto mant = static_cast<double>(f_.mantissa_field(p));
    if (f_.kind == specials::e8m0) return std::ldexp(1.0, e - f_.bias);  // no zero, no subnormals
    if (e == 0) return sign * std::ldexp(mant, 1 - f_.bias - m);
    return sign * std::ldexp(std::ldexp(1.0, m) + mant, e - f_.bias - m);
  }

  // --- special patterns -------------------------------------------------------------------------
  [[nodiscard]] double max() const { return max_; }
  [[nodiscard]] std::uint32_t max_bits() const { return max_bits_; }
  [[nodiscard]] bool has_nan() const { return f_.kind != specials::mx; }
  [[nodiscard]] bool has_inf() const { return f_.kind == specials::ieee; }
  /// Every finite value > 0 with its pattern, ascending (the virtual overflow entry excluded).
  [[nodiscard]] const std::vector<entry>& positives() const { return positives_; }

  /// The canonical quiet NaN keeping the sign (IEEE 754-2019 §6.2.1: exponent all ones, first
  /// mantissa bit set; ml_dtypes' quiet_NaN() for the others; fnuz and e8m0 have one NaN; the MX
  /// formats have none and ml_dtypes maps NaN to quiet_NaN() = 1.00..0, negated (+0) for -NaN).
  [[nodiscard]] std::uint32_t nan_bits(bool negative) const {
    const std::uint32_t sign = negative ? f_.sign_bit() : 0U;
    switch (f_.kind) {
      case specials::ieee:
        return sign | (f_.all_ones_exponent() << f_.mantissa_bits) | (std::uint32_t{1} << (f_.mantissa_bits - 1));
      case specials::fn: return sign | (f_.all_ones_exponent() << f_.mantissa_bits) | f_.all_ones_mantissa();
      case specials::fnuz: return f_.sign_bit();
      case specials::mx: return negative ? 0U : f_.sign_bit();
      case specials::e8m0: return 0xFFU;
    }
    return 0;
  }
  /// What a finite value beyond max (after rounding) becomes.
  [[nodiscard]] std::uint32_t overflow_bits(bool negative, overflow mode) const {
    const std::uint32_t sign = negative ? f_.sign_bit() : 0U;
    if (mode == overflow::saturate || f_.kind == specials::mx) return sign | max_bits_;
    switch (f_.kind) {
      case specials::ieee: return sign | (f_.all_ones_exponent() << f_.mantissa_bits);
      case specials::fn:
      case specials::fnuz:
      case specials::e8m0: return nan_bits(negative);
      case specials::mx: break;
    }
    return sign | max_bits_;
  }
  /// What ±Inf becomes: Inf; NaN where the format has only NaN; ±max for MX (no NaN) and saturate.
  /// e8m0 has no negative numbers: -Inf is NaN, or its smallest value 2^-127 when saturating.
  [[nodiscard]] std::uint32_t infinity_bits(bool negative, overflow mode) const {
    if (f_.kind == specials::e8m0 && negative) return mode == overflow::saturate ? 0x00U : nan_bits(false);
    return overflow_bits(negative, mode);
  }
  /// What ±0 becomes: ±0; +0 only for fnuz; e8m0 (no zero): NaN, or 2^-127 when saturating.
  [[nodiscard]] std::uint32_t zero_bits(bool negative, overflow mode) const {
    switch (f_.kind) {
      case specials::fnuz: return 0U;
      case specials::e8m0: return mode == overflow::saturate ? 0x00U : nan_bits(false);
      default: return negative ? f_.sign_bit() : 0U;
    }
  }

  // --- rounding -------------------------------------------------------------------------------
  /// Rounds the real number x, known only through `cmp(m)` = sign(x - m) (exact), to nearest with
  /// ties to the even pattern. x must be finite and non-zero.
  template <class Compare>
  [[nodiscard]] std::uint32_t round_real(Compare cmp, overflow mode) const {
    const bool negative = cmp(0.0) < 0;
    if (negative && f_.kind == specials::e8m0) return mode == overflow::saturate ? 0x00U : nan_bits(false);
    // Largest k with table[k] <= x (binary search on the exact comparison).
    std::size_t lo = 0;
    std::size_t hi = table_.size();  // invariant: table[lo] <= x (or lo == 0), table[hi] > x (or end)
    if (cmp(table_.front().value) < 0) return finish(table_.front(), negative, mode);  // below -virtual, or < 2^-127
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (cmp(table_[mid].value) >= 0)
        lo = mid;
      else
        hi = mid;
    }
    if (hi == table_.size() || cmp(table_[lo].value) == 0) return finish(table_[lo], negative, mode);
    const entry& a = table_[lo];
    const entry& b = table_[hi];
    const int c = cmp((a.value + b.value) / 2);  // the midpoint of two table values is exact in double
    if (c < 0) return finish(a, negative, mode);
    if (c > 0) return finish(b, negative, mode);
    return finish((a.bits & 1U) == 0 ? a : b, negative, mode);  // tie: the even pattern
  }

  /// T(x) for a double (or float, widened exactly) x.
  [[nodiscard]] std::uint32_t round(double x, overflow mode = overflow::to_inf_or_nan) const {
    if (std::isnan(x)) return nan_bits(std::signbit(x));
    if (std::isinf(x)) return infinity_bits(std::signbit(x), mode);
    if (x == 0) return zero_bits(std::signbit(x), mode);
    return round_real([x](double m) { return (x > m) - (x < m); }, mode);
  }

  /// The correctly rounded a + b of two finite doubles (computed exactly with TwoSum).
  [[nodiscard]] std::uint32_t round_sum(double a, double b, overflow mode = overflow::to_inf_or_nan) const {
    const double s = a + b;
    if (!std::isfinite(s) || s == 0) return round(s, mode);  // s == 0 only when a + b == 0 exactly
    const double bb = s - a;
    const double err = (a - (s - bb)) + (b - bb);  // TwoSum (Knuth): a + b == s + err exactly
    // sign((s + err) - m): d = s - m is exact whenever it can matter (s and m close); when it is not
    // exact, |s - m| is far larger than |err| <= ulp(s)/2 and its sign decides.
    return round_real(
        [s, err](double m) {
          const double d = s - m;
          return (d > -err) - (d < -err);
        },
        mode);
  }

  /// The correctly rounded a / b of two finite doubles that are values of a format here (b != 0).
  /// sign(a/b - m) = sign(a - m*b) * sign(b); m*b is exact (at most 13 + 11 significant bits).
  [[nodiscard]] std::uint32_t round_quotient(double a, double b, overflow mode = overflow::to_inf_or_nan) const {
    const double q = a / b;
    if (!std::isfinite(a) || !std::isfinite(b) || b == 0 || q == 0) return round(q, mode);
    const int sb = b > 0 ? 1 : -1;
    return round_real(
        [a, b, sb](double m) {
          const double mb = m * b;
          return ((a > mb) - (a < mb)) * sb;
        },
        mode);
  }

  /// T(i) for any integer, compared exactly (no conversion of i to a floating type).
  template <std::integral Int>
  [[nodiscard]] std::uint32_t round_integer(Int i, overflow mode = overflow::to_inf_or_nan) const {
    if (i == 0) return zero_bits(false, mode);
    bool negative = false;
    std::uint64_t mag = 0;
    if constexpr (std::is_signed_v<Int>) {
      negative = i < 0;
      mag = negative ? std::uint64_t{0} - static_cast<std::uint64_t>(static_cast<std::int64_t>(i))
                     : static_cast<std::uint64_t>(i);
    } else {
      mag = static_cast<std::uint64_t>(i);
    }
    return round_real(
        [negative, mag](double m) {
          // sign(x - m) with x = ±mag. Compare |x| with |m| on the side of x's sign.
          if (negative != (m < 0) && m != 0) return negative ? -1 : 1;  // opposite signs
          const double am = std::fabs(m);
          int s = 0;  // sign(mag - am)
          if (am >= 18446744073709551616.0) {
            s = -1;
          } else {
            const double fl = std::floor(am);  // exact; fl < 2^64
            const auto ifl = static_cast<std::uint64_t>(fl);
            if (mag > ifl)
              s = 1;
            else if (mag < ifl)
              s = -1;
            else
              s = (fl == am) ? 0 : -1;
          }
          return negative ? -s : s;
        },
        mode);
  }

 private:
  [[nodiscard]] std::uint32_t finish(const entry& e, bool negative, overflow mode) const {
    if (e.overflow) return overflow_bits(negative, mode);
    if (e.value == 0) return zero_bits(negative, mode);
    return e.bits;
  }

  format_spec f_;
  std::vector<entry> table_;      // every finite value once (+0 only), ascending, with the overflow sentinels
  std::vector<entry> positives_;  // the finite values > 0
  double max_ = 0;
  std::uint32_t max_bits_ = 0;
};

/// The reference of mixprec type T (built once).
template <class T>
const reference& reference_of() {
  static const reference r(spec_of<T>());
  return r;
}

/// float's own bit pattern helpers (IEEE binary32, for NaN payload checks).
inline std::uint32_t float_bits(float x) { return std::bit_cast<std::uint32_t>(x); }
inline std::uint64_t double_bits(double x) { return std::bit_cast<std::uint64_t>(x); }

/// The neighbours of x one ulp away in float and in double.
inline float float_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
inline float float_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }
inline double double_up(double x) { return std::nextafter(x, std::numeric_limits<double>::infinity()); }
inline double double_down(double x) { return std::nextafter(x, -std::numeric_limits<double>::infinity()); }

/// A random float with a biased choice: half of the time any bit pattern (NaN, Inf, subnormal,
/// huge), otherwise a value whose exponent lies within [lo_exp, hi_exp] and whose 23 fraction bits
/// are random, with a random sign.
inline float random_float(std::mt19937_64& rng, int lo_exp, int hi_exp) {
  if ((rng() & 1U) == 0) return std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  const int e = lo_exp + static_cast<int>(rng() % static_cast<std::uint64_t>(hi_exp - lo_exp + 1));
  const float frac = 1.0F + static_cast<float>(rng() & 0x7FFFFFU) * 0x1p-23F;
  const float v = std::ldexp(frac, e);
  return (rng() & 2U) != 0 ? -v : v;
}
/// As random_float, for double (52 random fraction bits).
inline double random_double(std::mt19937_64& rng, int lo_exp, int hi_exp) {
  if ((rng() & 1U) == 0) return std::bit_cast<double>(rng());
  const int e = lo_exp + static_cast<int>(rng() % static_cast<std::uint64_t>(hi_exp - lo_exp + 1));
  const double frac = 1.0 + static_cast<double>(rng() & 0xFFFFFFFFFFFFFULL) * 0x1p-52;
  const double v = std::ldexp(frac, e);
  return (rng() & 2U) != 0 ? -v : v;
}

}  // namespace mixprec_test
