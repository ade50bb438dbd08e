// Tests of mixprec/scaled/block_scaling.hpp: OCP Microscaling (MX v1.0) block scaling with the `ocp` and
// `no_clip` scale rules. Expected values come from references written here in float64 from the spec's
// element parameters (exponent bits, mantissa bits, bias, emax, max: the MX spec's element tables,
// section 5), never from the header: a pattern decoder, a round-to-nearest-even quantiser with
// saturation, and the shared exponent by frexp (ocp) or by search (no_clip). Hand-computed cases follow
// the spec's rule X = 2^(floor(log2(amax)) - emax_elem).
#include <catch2/catch.hpp>

#include "../support/mxcsr_scope.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "mixprec/scaled/block_scaling.hpp"

namespace block_scaling_test {

namespace {

using mixprec::block_scale_rule;

// ------------------------------------------------------------------------------------------------
// The reference: element formats described by the spec's parameters, decoded and rounded in float64.

enum class specials { nan_all_ones, ieee, none };

/// An MX element format as the spec's tables give it.
struct spec_format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  int emax;    // exponent of the largest normal
  double max;  // largest normal
  specials special;

  [[nodiscard]] std::uint32_t patterns() const { return std::uint32_t{1} << (1 + exponent_bits + mantissa_bits); }
  [[nodiscard]] int emin() const { return 1 - bias; }  // exponent of the smallest normal
};

// clang-format off
constexpr spec_format e4m3{"float8_e4m3fn", 4, 3, 7, 8, 448.0, specials::nan_all_ones};
constexpr spec_format e5m2{"float8_e5m2", 5, 2, 15, 15, 57344.0, specials::ieee};
constexpr spec_format e2m3{"float6_e2m3fn", 2, 3, 1, 2, 7.5, specials::none};
constexpr spec_format e3m2{"float6_e3m2fn", 3, 2, 3, 4, 28.0, specials::none};
constexpr spec_format e2m1{"float4_e2m1fn", 2, 1, 1, 2, 6.0, specials::none};
// clang-format on

template <class Elem>
const spec_format& spec_of();
template <>
const spec_format& spec_of<mixprec::float8_e4m3fn>() {
  return e4m3;
}
template <>
const spec_format& spec_of<mixprec::float8_e5m2>() {
  return e5m2;
}
template <>
const spec_format& spec_of<mixprec::float6_e2m3fn>() {
  return e2m3;
}
template <>
const spec_format& spec_of<mixprec::float6_e3m2fn>() {
  return e3m2;
}
template <>
const spec_format& spec_of<mixprec::float4_e2m1fn>() {
  return e2m1;
}

using mx_elements = std::tuple<mixprec::float8_e4m3fn, mixprec::float8_e5m2, mixprec::float6_e2m3fn,
                               mixprec::float6_e3m2fn, mixprec::float4_e2m1fn>;

/// Whether a pattern is a finite number (e4m3fn: S.1111.111 is NaN; e5m2: exponent 11111 is Inf/NaN).
bool is_finite_pattern(const spec_format& f, std::uint32_t bits) {
  const std::uint32_t all_e = (std::uint32_t{1} << f.exponent_bits) - 1U;
  const std::uint32_t all_m = (std::uint32_t{1} << f.mantissa_bits) - 1U;
  const std::uint32_t e = (bits >> f.mantissa_bits) & all_e;
  const std::uint32_t m = bits & all_m;
  switch (f.special) {
    case specials::ieee: return e != all_e;
    case specials::nan_all_ones: return !(e == all_e && m == all_m);
    case specials::none: break;
  }
  return true;
}

/// The value of a finite pattern: (-1)^S * 2^(E - bias) * 1.M, or 2^(1 - bias) * 0.M when E = 0.
double decode(const spec_format& f, std::uint32_t bits) {
  const std::uint32_t all_e = (std::uint32_t{1} << f.exponent_bits) - 1U;
  const std::uint32_t e = (bits >> f.mantissa_bits) & all_e;
  const double m = static_cast<double>(bits & ((std::uint32_t{1} << f.mantissa_bits) - 1U));
  const double fraction = m / std::ldexp(1.0, f.mantissa_bits);
  const double magnitude =
      e == 0 ? std::ldexp(fraction, f.emin()) : std::ldexp(1.0 + fraction, static_cast<int>(e) - f.bias);
  return ((bits >> (f.exponent_bits + f.mantissa_bits)) & 1U) != 0 ? -magnitude : magnitude;
}

/// Rounds v to the element grid: beyond +-max clamps to +-max; otherwise nearest, ties to the even
/// significand, in the binade of v (subnormal spacing 2^(emin - mantissa_bits) below 2^emin).
double reference_round(const spec_format& f, double v) {
  const double a = std::fabs(v);
  if (a > f.max) return std::copysign(f.max, v);
  if (a == 0) return v;
  int e2 = 0;
  std::frexp(a, &e2);  // a = [0.5, 1) * 2^e2, so floor(log2(a)) = e2 - 1
  const int binade = std::max(e2 - 1, f.emin());
  const double quantum = std::ldexp(1.0, binade - f.mantissa_bits);
  const double t = a / quantum;  // exact: a power of two
  double r = std::floor(t);
  const double rest = t - r;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1.0;
  return std::copysign(r * quantum, v);
}

/// The shared exponent k of X = 2^k for a block with largest magnitude `amax` (finite), clamped to e8m0.
int reference_exponent(const spec_format& f, double amax, block_scale_rule rule) {
  if (amax == 0) return 0;
  int k = 0;
  if (rule == block_scale_rule::ocp) {
    int e2 = 0;
    std::frexp(amax, &e2);
    k = (e2 - 1) - f.emax;
  } else {
    k = -1000;  // the smallest k with amax / 2^k <= max, by search
    while (std::ldexp(amax, -k) > f.max) ++k;
  }
  return std::clamp(k, -127, 127);
}

/// The reference quantisation of a float vector: exponents, element values, dequantised values, clips.
struct reference_result {
  std::vector<int> exponents;  // 1000 marks a NaN scale
  std::vector<double> elements;
  std::vector<double> values;
  std::size_t clipped = 0;
};

reference_result reference_quantise(const spec_format& f, const std::vector<float>& x, block_scale_rule rule,
                                    std::size_t block_size) {
  reference_result r;
  for (std::size_t begin = 0; begin < x.size(); begin += block_size) {
    const std::size_t end = std::min(x.size(), begin + block_size);
    double amax = 0;
    bool finite = true;
    for (std::size_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    }
    if (!finite) {
      r.exponents.push_back(1000);
      for (std::size_t i = begin; i < end; ++i) {
        r.elements.push_back(0.0);
        r.values.push_back(std::numeric_limits<double>::quiet_NaN());
      }
      continue;
    }
    const int k = reference_exponent(f, amax, rule);
    r.exponents.push_back(k);
    for (std::size_t i = begin; i < end; ++i) {
      const double scaled = static_cast<double>(x[i]) / std::ldexp(1.0, k);
      if (std::fabs(scaled) > f.max) ++r.clipped;
      const double element = reference_round(f, scaled);
      r.elements.push_back(element);
      r.values.push_back(element * std::ldexp(1.0, k));
    }
  }
  return r;
}

std::string show(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

/// Compares a tensor and its dequantised values with the reference; returns the first few mismatches.
template <class Elem>
std::vector<std::string> compare(const mixprec::mx_block_tensor<Elem>& q, const std::vector<float>& y,
                                 const reference_result& r, std::size_t& mismatches) {
  const spec_format& f = spec_of<Elem>();
  std::vector<std::string> notes;
  auto note = [&](const std::string& s) {
    ++mismatches;
    if (notes.size() < 8) notes.push_back(s);
  };
  if (q.scales.size() != r.exponents.size() || q.elements.size() != r.elements.size() || y.size() != r.values.size()) {
    note("sizes differ");
    return notes;
  }
  for (std::size_t b = 0; b < r.exponents.size(); ++b) {
    const unsigned expected = r.exponents[b] == 1000 ? 0xFFU : static_cast<unsigned>(r.exponents[b] + 127);
    if (q.scales[b].bits() != expected) {
      note("block " + std::to_string(b) + ": scale pattern " + std::to_string(q.scales[b].bits()) + ", expected " +
           std::to_string(expected));
    }
  }
  for (std::size_t i = 0; i < r.elements.size(); ++i) {
    const std::uint32_t bits = q.elements[i].bits();
    const double got = is_finite_pattern(f, bits) ? decode(f, bits) : std::numeric_limits<double>::quiet_NaN();
    if (got != r.elements[i] || std::signbit(got) != std::signbit(r.elements[i])) {
      note("element " + std::to_string(i) + ": " + show(got) + ", expected " + show(r.elements[i]));
    }
    const auto value = static_cast<double>(y[i]);
    const bool same = std::isnan(r.values[i])
                          ? std::isnan(value)
                          : value == r.values[i] && std::signbit(value) == std::signbit(r.values[i]);
    if (!same) note("value " + std::to_string(i) + ": " + show(value) + ", expected " + show(r.values[i]));
  }
  return notes;
}

std::uint32_t float_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

constexpr block_scale_rule both_rules[] = {block_scale_rule::ocp, block_scale_rule::no_clip};

const char* rule_name(block_scale_rule rule) { return rule == block_scale_rule::ocp ? "ocp" : "no_clip"; }

}  // namespace

// ------------------------------------------------------------------------------------------------
// Exhaustive: every finite element pattern, scaled by 2^k, round-trips.

TEMPLATE_LIST_TEST_CASE("every finite element pattern times 2^k round-trips exactly under both rules",
                        "[scaled][block_scaling]", mx_elements) {
  const spec_format& f = spec_of<TestType>();
  // k from the bottom of e8m0 up to the largest k with max * 2^k a float (max < 2^(emax + 1)).
  const int top = 127 - f.emax;
  const std::vector<int> exponents = {-127, -126, -100, -33, -1, 0, 1, 9, 64, top - 1, top};
  for (const block_scale_rule rule : both_rules) {
    for (const int k : exponents) {
      // Pairs {max * 2^k, value(e) * 2^k}, blocks of 2: amax = max * 2^k puts X at 2^k under both rules.
      std::vector<float> x;
      std::vector<std::uint32_t> expected_bits;
      for (std::uint32_t p = 0; p < f.patterns(); ++p) {
        if (!is_finite_pattern(f, p)) continue;
        x.push_back(static_cast<float>(std::ldexp(f.max, k)));
        x.push_back(static_cast<float>(std::ldexp(decode(f, p), k)));
        expected_bits.push_back(p);
      }
      REQUIRE(reference_exponent(f, std::ldexp(f.max, k), rule) == k);
      const auto q = mixprec::mx_quantise<TestType>(x, rule, 2);
      const std::vector<float> y = mixprec::mx_dequantise(q);
      std::size_t bad = 0;
      std::string first;
      for (std::size_t j = 0; j < expected_bits.size(); ++j) {
        const bool ok =
            q.scales[j].bits() == static_cast<unsigned>(k + 127) && q.elements[2 * j + 1].bits() == expected_bits[j] &&
            float_bits(y[2 * j]) == float_bits(x[2 * j]) && float_bits(y[2 * j + 1]) == float_bits(x[2 * j + 1]);
        if (!ok && bad++ == 0) first = "pattern " + std::to_string(expected_bits[j]) + " (" + show(x[2 * j + 1]) + ")";
      }
      INFO(f.name << ", " << rule_name(rule) << ", k = " << k << ": " << bad << " mismatches, first " << first);
      CHECK(bad == 0);
      CHECK(q.clipped == 0);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("every finite element pattern alone in its block matches the reference quantiser",
                        "[scaled][block_scaling]", mx_elements) {
  // One value per block: the ocp rule maps amax to [2^emax, 2^(emax + 1)), which clips values whose
  // significand exceeds max's (e4m3fn 1.875, e2m1fn 1.5 -> 1.75...); no_clip does not.
  const spec_format& f = spec_of<TestType>();
  for (const block_scale_rule rule : both_rules) {
    for (const int k : {-127, -20, 0, 5, 120 - f.emax}) {
      std::vector<float> x;
      for (std::uint32_t p = 0; p < f.patterns(); ++p) {
        if (is_finite_pattern(f, p)) x.push_back(static_cast<float>(std::ldexp(decode(f, p), k)));
      }
      const auto q = mixprec::mx_quantise<TestType>(x, rule, 1);
      const std::vector<float> y = mixprec::mx_dequantise(q);
      const reference_result r = reference_quantise(f, x, rule, 1);
      std::size_t mismatches = 0;
      const auto notes = compare(q, y, r, mismatches);
      INFO(f.name << ", " << rule_name(rule) << ", k = " << k << ": " << (notes.empty() ? "" : notes.front()));
      CHECK(mismatches == 0);
      CHECK(q.clipped == r.clipped);
      if (rule == block_scale_rule::no_clip) CHECK(q.clipped == 0);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Random data against the reference quantiser.

TEMPLATE_LIST_TEST_CASE("random blocks match the float64 reference quantiser element by element",
                        "[scaled][block_scaling]", mx_elements) {
  const spec_format& f = spec_of<TestType>();
  std::mt19937 gen(20240607U + static_cast<unsigned>(f.patterns()));
  std::uniform_real_distribution<double> significand(1.0, 2.0);
  std::uniform_int_distribution<int> spread(0, 24);  // 24 binades below the top: element subnormals and zeros
  std::bernoulli_distribution negative(0.5);
  std::size_t clipped_ocp = 0;
  for (const int top : {-149, -140, -126, -119, -60, -10, 0, 1, 20, 100, 126}) {
    std::vector<float> x(1000);
    for (float& v : x) {
      const double m = std::ldexp(significand(gen), top - spread(gen));
      v = static_cast<float>(negative(gen) ? -m : m);
    }
    x[17] = 0.0f;
    x[18] = -0.0f;
    for (const block_scale_rule rule : both_rules) {
      for (const std::size_t block_size : {std::size_t{32}, std::size_t{7}, std::size_t{1000}, std::size_t{1}}) {
        const auto q = mixprec::mx_quantise<TestType>(x, rule, block_size);
        const std::vector<float> y = mixprec::mx_dequantise(q);
        const reference_result r = reference_quantise(f, x, rule, block_size);
        std::size_t mismatches = 0;
        const auto notes = compare(q, y, r, mismatches);
        std::string all;
        for (const auto& n : notes) all += n + "; ";
        INFO(f.name << ", " << rule_name(rule) << ", top 2^" << top << ", blocks of " << block_size << ": "
                    << mismatches << " mismatches: " << all);
        CHECK(mismatches == 0);
        CHECK(q.clipped == r.clipped);
        CHECK(q.block_size == block_size);
        if (rule == block_scale_rule::no_clip) CHECK(q.clipped == 0);
        if (rule == block_scale_rule::ocp) clipped_ocp += q.clipped;
      }
    }
  }
  CHECK(clipped_ocp > 0);  // the data does exercise the ocp rule's clipping
}

// ------------------------------------------------------------------------------------------------
// Hand-computed cases (X = 2^(floor(log2(amax)) - emax); no_clip: the smallest 2^k with amax / 2^k <= max).

TEST_CASE("float8_e4m3fn blocks: the spec's scale and clipping by hand", "[scaled][block_scaling]") {
  using mixprec::float8_e4m3fn;
  const std::vector<float> at_max = {448.0f, 1.0f};
  auto q = mixprec::mx_quantise<float8_e4m3fn>(at_max);
  CHECK(q.scales.at(0).bits() == 127);  // 2^(8 - 8) = 2^0
  CHECK(q.elements.at(0).bits() == 0x7E);
  CHECK(q.clipped == 0);

  const std::vector<float> one = {1.0f, -0.5f};
  q = mixprec::mx_quantise<float8_e4m3fn>(one);
  CHECK(q.scales.at(0).bits() == 127 - 8);  // 2^(0 - 8)
  CHECK(q.elements.at(0).bits() == 0x78);   // 256 = 2^8: E = 15, M = 0
  CHECK(static_cast<float>(q.elements.at(1)) == -128.0f);

  const std::vector<float> over = {500.0f, 3.0f};
  q = mixprec::mx_quantise<float8_e4m3fn>(over, block_scale_rule::ocp);
  CHECK(q.scales.at(0).bits() == 127);  // floor(log2 500) = 8: X = 2^0
  CHECK(static_cast<float>(q.elements.at(0)) == 448.0f);
  CHECK(q.clipped == 1);
  CHECK(mixprec::mx_dequantise(q) == std::vector<float>{448.0f, 3.0f});
  q = mixprec::mx_quantise<float8_e4m3fn>(over, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 128);                    // X = 2^1: 500 / 2 = 250 <= 448
  CHECK(static_cast<float>(q.elements.at(0)) == 256.0f);  // 250 -> 256 (spacing 16 in [128, 256))
  CHECK(q.clipped == 0);
  CHECK(mixprec::mx_dequantise(q) == std::vector<float>{512.0f, 3.0f});

  // amax = 1.9 * 2^e: amax / X = 1.9 * 2^8 = 486.4 > 448 under ocp, whatever e.
  const std::vector<float> nineteen = {std::ldexp(1.9f, -3), std::ldexp(1.0f, -4)};
  q = mixprec::mx_quantise<float8_e4m3fn>(nineteen);
  CHECK(q.scales.at(0).bits() == 127 - 3 - 8);
  CHECK(q.clipped == 1);
  CHECK(mixprec::mx_dequantise(q).at(0) == std::ldexp(1.75f, -3));
  q = mixprec::mx_quantise<float8_e4m3fn>(nineteen, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 127 - 3 - 8 + 1);
  CHECK(q.clipped == 0);
  CHECK(mixprec::mx_dequantise(q).at(0) == std::ldexp(1.875f, -3));  // 243.2 -> 240 = 1.875 * 2^7
}

TEST_CASE("float8_e5m2 blocks: emax 15, max 57344", "[scaled][block_scaling]") {
  using mixprec::float8_e5m2;
  auto q = mixprec::mx_quantise<float8_e5m2>(std::vector<float>{57344.0f});
  CHECK(q.scales.at(0).bits() == 127);
  q = mixprec::mx_quantise<float8_e5m2>(std::vector<float>{1.0f});
  CHECK(q.scales.at(0).bits() == 127 - 15);
  CHECK(static_cast<float>(q.elements.at(0)) == 32768.0f);
  q = mixprec::mx_quantise<float8_e5m2>(std::vector<float>{60000.0f}, block_scale_rule::ocp);
  CHECK(q.scales.at(0).bits() == 127);  // floor(log2 60000) = 15
  CHECK(static_cast<float>(q.elements.at(0)) == 57344.0f);
  CHECK(q.clipped == 1);
  q = mixprec::mx_quantise<float8_e5m2>(std::vector<float>{60000.0f}, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 128);
  CHECK(static_cast<float>(q.elements.at(0)) == 28672.0f);  // 30000: nearest of {28672, 32768}
  CHECK(q.clipped == 0);
  CHECK(mixprec::mx_dequantise(q).at(0) == 57344.0f);
}

TEST_CASE("float4_e2m1fn blocks: emax 2, max 6", "[scaled][block_scaling]") {
  using mixprec::float4_e2m1fn;
  auto q = mixprec::mx_quantise<float4_e2m1fn>(std::vector<float>{6.0f, -1.0f});
  CHECK(q.scales.at(0).bits() == 127);
  CHECK(q.elements.at(1).bits() == 0xA);  // -1 = S.01.0
  q = mixprec::mx_quantise<float4_e2m1fn>(std::vector<float>{1.0f, 0.25f});
  CHECK(q.scales.at(0).bits() == 127 - 2);
  CHECK(static_cast<float>(q.elements.at(0)) == 4.0f);
  CHECK(static_cast<float>(q.elements.at(1)) == 1.0f);
  q = mixprec::mx_quantise<float4_e2m1fn>(std::vector<float>{7.0f}, block_scale_rule::ocp);
  CHECK(q.scales.at(0).bits() == 127);
  CHECK(static_cast<float>(q.elements.at(0)) == 6.0f);
  CHECK(q.clipped == 1);
  q = mixprec::mx_quantise<float4_e2m1fn>(std::vector<float>{7.0f}, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 128);
  CHECK(static_cast<float>(q.elements.at(0)) == 4.0f);  // 3.5: tie between 3 (1.1 * 2^1) and 4 (1.0 * 2^2): even
  CHECK(mixprec::mx_dequantise(q).at(0) == 8.0f);
}

TEST_CASE("float6 blocks: e2m3fn emax 2 max 7.5, e3m2fn emax 4 max 28", "[scaled][block_scaling]") {
  using mixprec::float6_e2m3fn;
  using mixprec::float6_e3m2fn;
  auto a = mixprec::mx_quantise<float6_e2m3fn>(std::vector<float>{7.9f}, block_scale_rule::ocp);
  CHECK(a.scales.at(0).bits() == 127);
  CHECK(static_cast<float>(a.elements.at(0)) == 7.5f);
  CHECK(a.clipped == 1);
  a = mixprec::mx_quantise<float6_e2m3fn>(std::vector<float>{7.9f}, block_scale_rule::no_clip);
  CHECK(a.scales.at(0).bits() == 128);
  CHECK(static_cast<float>(a.elements.at(0)) == 4.0f);  // 3.95: nearest of {3.75, 4}
  a = mixprec::mx_quantise<float6_e2m3fn>(std::vector<float>{1.0f});
  CHECK(a.scales.at(0).bits() == 127 - 2);
  auto b = mixprec::mx_quantise<float6_e3m2fn>(std::vector<float>{30.0f}, block_scale_rule::ocp);
  CHECK(b.scales.at(0).bits() == 127);
  CHECK(static_cast<float>(b.elements.at(0)) == 28.0f);
  CHECK(b.clipped == 1);
  b = mixprec::mx_quantise<float6_e3m2fn>(std::vector<float>{30.0f}, block_scale_rule::no_clip);
  CHECK(b.scales.at(0).bits() == 128);
  CHECK(static_cast<float>(b.elements.at(0)) == 16.0f);  // 15: tie between 14 (1.11 * 2^3) and 16: even
  b = mixprec::mx_quantise<float6_e3m2fn>(std::vector<float>{1.0f});
  CHECK(b.scales.at(0).bits() == 127 - 4);
  CHECK(static_cast<float>(b.elements.at(0)) == 16.0f);
}

// ------------------------------------------------------------------------------------------------
// The edges: the e8m0 clamp, float's range, zero, NaN and Inf blocks, the last block, errors.

TEST_CASE("the shared exponent clamps at 2^-127 for tiny blocks", "[scaled][block_scaling]") {
  // 2^-130 is a float subnormal: ocp gives 2^(-130 - 8), clamped to 2^-127; the element is 2^-3.
  const std::vector<float> tiny = {std::ldexp(1.0f, -130)};
  for (const block_scale_rule rule : both_rules) {
    const auto q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(tiny, rule);
    CHECK(q.scales.at(0).bits() == 0);
    CHECK(static_cast<float>(q.elements.at(0)) == 0.125f);
    CHECK(float_bits(mixprec::mx_dequantise(q).at(0)) == float_bits(tiny[0]));
    CHECK(q.clipped == 0);
  }
  // The smallest float in e2m1fn: 2^-149 / 2^-127 = 2^-22 rounds to 0 (smallest e2m1fn value 0.5).
  const std::vector<float> denorm_min = {std::numeric_limits<float>::denorm_min(), -0x1p-148f};
  const auto q = mixprec::mx_quantise<mixprec::float4_e2m1fn>(denorm_min, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 0);
  const auto y = mixprec::mx_dequantise(q);
  CHECK(float_bits(y.at(0)) == 0U);
  CHECK(float_bits(y.at(1)) == 0x80000000U);  // -0: the sign is kept
}

TEST_CASE("blocks near FLT_MAX: ocp stays finite, no_clip can round up to 2^128", "[scaled][block_scaling]") {
  const float big = std::numeric_limits<float>::max();  // (2 - 2^-23) * 2^127
  const std::vector<float> x = {big, -big};
  auto q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(x, block_scale_rule::ocp);
  CHECK(q.scales.at(0).bits() == 127 + 119);
  CHECK(q.clipped == 2);
  CHECK(mixprec::mx_dequantise(q) == std::vector<float>{0x1.cp127f, -0x1.cp127f});  // 448 * 2^119
  q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(x, block_scale_rule::no_clip);
  CHECK(q.scales.at(0).bits() == 127 + 120);
  CHECK(static_cast<float>(q.elements.at(0)) == 256.0f);  // 255.99... rounds up to 256 = 2^8
  CHECK(q.clipped == 0);
  const auto y = mixprec::mx_dequantise(q);
  CHECK(y.at(0) == std::numeric_limits<float>::infinity());  // 2^128 is beyond float: documented
  CHECK(y.at(1) == -std::numeric_limits<float>::infinity());
  const auto fp4 = mixprec::mx_quantise<mixprec::float4_e2m1fn>(x, block_scale_rule::ocp);
  CHECK(fp4.scales.at(0).bits() == 127 + 125);
  CHECK(fp4.clipped == 2);                                 // FLT_MAX / 2^125 = 8 - 2^-21 > 6
  CHECK(mixprec::mx_dequantise(fp4).at(0) == 0x1.8p127f);  // 6 * 2^125
}

TEST_CASE("a zero block gets the scale 2^0 and zero elements with their signs", "[scaled][block_scaling]") {
  const std::vector<float> x = {0.0f, -0.0f, 0.0f, 3.0f, 0.0f};
  for (const block_scale_rule rule : both_rules) {
    const auto q = mixprec::mx_quantise<mixprec::float6_e3m2fn>(x, rule, 3);
    REQUIRE(q.scales.size() == 2);
    CHECK(q.scales[0].bits() == 127);
    CHECK(static_cast<float>(q.scales[0]) == 1.0f);
    CHECK(q.scales[1].bits() == 127 + 1 - 4);
    const auto y = mixprec::mx_dequantise(q);
    REQUIRE(y.size() == x.size());
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(float_bits(y[i]) == float_bits(x[i]));
  }
}

TEMPLATE_LIST_TEST_CASE("a block holding NaN or Inf gets the NaN scale and dequantises to NaN",
                        "[scaled][block_scaling]", mx_elements) {
  for (const float special : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(70);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 3.0f;
    x[40] = special;
    const auto q = mixprec::mx_quantise<TestType>(x);
    REQUIRE(q.scales.size() == 3);
    CHECK(q.scales[1].bits() == 0xFF);
    CHECK(isnan(q.scales[1]));
    CHECK_FALSE(isnan(q.scales[0]));
    CHECK_FALSE(isnan(q.scales[2]));
    for (std::size_t i = 32; i < 64; ++i) CHECK(q.elements[i].bits() == 0U);  // +0: documented
    const auto y = mixprec::mx_dequantise(q);
    std::size_t nans = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(y[i])) ++nans;
      if (i < 32 || i >= 64) CHECK(std::isfinite(y[i]));
    }
    CHECK(nans == 32);
    const reference_result r = reference_quantise(spec_of<TestType>(), x, block_scale_rule::ocp, 32);
    CHECK(q.clipped == r.clipped);
  }
}

TEST_CASE("the last block may be shorter and is scaled on its own amax", "[scaled][block_scaling]") {
  std::vector<float> x(70, 100.0f);
  for (std::size_t i = 64; i < 70; ++i) x[i] = 0.01f * static_cast<float>(i - 63);  // amax 0.06
  const auto q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(x);
  CHECK(q.block_size == 32);
  REQUIRE(q.scales.size() == 3);
  CHECK(q.elements.size() == 70);
  CHECK(q.scales[0].bits() == 127 + 6 - 8);  // floor(log2 100) = 6
  CHECK(q.scales[2].bits() == 127 - 5 - 8);  // floor(log2 0.06) = -5
  const auto r = reference_quantise(e4m3, x, block_scale_rule::ocp, 32);
  std::size_t mismatches = 0;
  const auto notes = compare(q, mixprec::mx_dequantise(q), r, mismatches);
  INFO((notes.empty() ? std::string() : notes.front()));
  CHECK(mismatches == 0);
}

TEST_CASE("an empty input gives an empty tensor", "[scaled][block_scaling]") {
  const auto q = mixprec::mx_quantise<mixprec::float8_e5m2>(std::span<const float>{});
  CHECK(q.elements.empty());
  CHECK(q.scales.empty());
  CHECK(q.clipped == 0);
  CHECK(mixprec::mx_dequantise(q).empty());
}

TEST_CASE("block_size 0 and inconsistent tensors are refused", "[scaled][block_scaling]") {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f};
  CHECK_THROWS_AS(mixprec::mx_quantise<mixprec::float8_e4m3fn>(x, block_scale_rule::ocp, 0), std::invalid_argument);
  CHECK_THROWS_WITH(mixprec::mx_quantise<mixprec::float8_e4m3fn>(x, block_scale_rule::ocp, 0),
                    Catch::Contains("block_size is 0"));

  auto q = mixprec::mx_quantise<mixprec::float8_e4m3fn>(x, block_scale_rule::ocp, 2);
  std::vector<float> short_out(2);
  CHECK_THROWS_AS(mixprec::mx_dequantise(q, std::span<float>(short_out)), std::invalid_argument);
  CHECK_THROWS_WITH(mixprec::mx_dequantise(q, std::span<float>(short_out)), Catch::Contains("out has 2 values"));
  std::vector<float> out(3);
  CHECK_NOTHROW(mixprec::mx_dequantise(q, std::span<float>(out)));
  CHECK(out == x);

  auto missing_scale = q;
  missing_scale.scales.pop_back();
  CHECK_THROWS_WITH(mixprec::mx_dequantise(missing_scale), Catch::Contains("1 scales"));
  auto zero_block = q;
  zero_block.block_size = 0;
  CHECK_THROWS_AS(mixprec::mx_dequantise(zero_block), std::invalid_argument);
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
using test_support::mxcsr_scope;
}  // namespace

TEST_CASE("quantise and dequantise give the same bits under FTZ, DAZ and round toward zero",
          "[scaled][block_scaling][fenv]") {
  // Float subnormal inputs, e8m0 scales of 2^-127 and subnormal results: any of them read or written
  // through float arithmetic would be flushed.
  std::vector<float> x;
  for (int e = -149; e <= -100; ++e) {
    x.push_back(std::ldexp(1.0f, e));
    x.push_back(-std::ldexp(1.5f, e));
  }
  for (const block_scale_rule rule : both_rules) {
    const auto plain = mixprec::mx_quantise<mixprec::float8_e5m2>(x, rule, 4);
    const auto plain_y = mixprec::mx_dequantise(plain);
    mixprec::mx_block_tensor<mixprec::float8_e5m2> flushed;
    std::vector<float> flushed_y;
    {
      const mxcsr_scope scope((_mm_getcsr() & ~0x6000U) | 0x8000U | 0x0040U | 0x6000U | 0x1F80U);
      flushed = mixprec::mx_quantise<mixprec::float8_e5m2>(x, rule, 4);
      flushed_y = mixprec::mx_dequantise(flushed);
    }
    REQUIRE(flushed.scales.size() == plain.scales.size());
    std::size_t differ = 0;
    for (std::size_t b = 0; b < plain.scales.size(); ++b) differ += flushed.scales[b].bits() != plain.scales[b].bits();
    for (std::size_t i = 0; i < x.size(); ++i) {
      differ += flushed.elements[i].bits() != plain.elements[i].bits();
      differ += float_bits(flushed_y[i]) != float_bits(plain_y[i]);
    }
    CHECK(differ == 0);
    const auto r = reference_quantise(e5m2, x, rule, 4);
    std::size_t mismatches = 0;
    const auto notes = compare(flushed, flushed_y, r, mismatches);
    INFO(rule_name(rule) << ": " << (notes.empty() ? std::string() : notes.front()));
    CHECK(mismatches == 0);
  }
}
#endif

}  // namespace block_scaling_test
