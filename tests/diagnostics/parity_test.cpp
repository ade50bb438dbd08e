// Tests of mixprec/diagnostics/parity.hpp: the parity of two recorded runs on small arrays whose
// differences, relative differences and nearest-rank quantiles are computed by hand in the comments;
// the non-finite rules; the first non-finite site; mismatch errors; and the printed table.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/parity.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::diagnostics::capture;
using mixprec::diagnostics::compare_runs;
using mixprec::diagnostics::parity_options;
using mixprec::diagnostics::parity_report;
using mixprec::diagnostics::recording_probe;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

std::vector<bfloat16> bf16_bits(std::initializer_list<unsigned> patterns) {
  std::vector<bfloat16> v;
  for (unsigned p : patterns) v.push_back(bfloat16::from_bits(static_cast<std::uint16_t>(p)));
  return v;
}
}  // namespace

TEST_CASE("compare_runs gives hand-computed differences and nearest-rank quantiles", "[diagnostics][parity]") {
  // a = {1, 2.5, -3, 4} (float32), reference b = {1, 2, -3.5, 0} (float64):
  // |a - b| = {0, 0.5, 0.5, 4}: max 4; sorted 0, 0.5, 0.5, 4: p50 = 2nd = 0.5; p99 = ceil(3.96) = 4th = 4;
  // p99.9 and p99.99 = 4th = 4. Relative to max(|b|, tiny) with tiny = 0.5: {0, 0.25, 1/7, 4 / 0.5 = 8}: max 8.
  recording_probe a(capture::values), b(capture::values);
  a.observe("out", std::vector<float>{1.0f, 2.5f, -3.0f, 4.0f});
  b.observe("out", std::vector<double>{1.0, 2.0, -3.5, 0.0});
  const parity_report r = compare_runs(a, b, {.tiny = 0.5});
  REQUIRE(r.sites.size() == 1);
  const auto& p = r.sites[0];
  CHECK(p.site == "out");
  CHECK(p.count == 4);
  CHECK(p.max_abs_diff == 4.0);
  CHECK(p.max_rel_diff == 8.0);
  CHECK(p.abs_diff_quantiles[0] == 0.5);
  CHECK(p.abs_diff_quantiles[1] == 4.0);
  CHECK(p.abs_diff_quantiles[2] == 4.0);
  CHECK(p.abs_diff_quantiles[3] == 4.0);
  CHECK(p.nonfinite_a == 0);
  CHECK(p.nonfinite_b == 0);
  CHECK_FALSE(r.first_nonfinite_site.has_value());
  CHECK(r.first_nonfinite_site_or_none() == "none");

  // With the default tiny (2^-1022), the zero reference makes 4 / 2^-1022 = 2^1024 overflow: +inf.
  const parity_report d = compare_runs(a, b);
  CHECK(d.tiny == std::ldexp(1.0, -1022));
  CHECK(d.at("out").max_rel_diff == inf);
  // Without the zero: {0, 0.25, 1/7}: max 0.25.
  recording_probe a2(capture::values), b2(capture::values);
  a2.observe("out", std::vector<float>{1.0f, 2.5f, -3.0f});
  b2.observe("out", std::vector<double>{1.0, 2.0, -3.5});
  CHECK(compare_runs(a2, b2).at("out").max_rel_diff == 0.25);
}

TEST_CASE("compare_runs quantiles pick p50 p99 p99.9 p99.99 of 1000 shuffled differences", "[diagnostics][parity]") {
  // b = 1 everywhere; a = 1 + k 2^-10 for k = 1..1000 (exact in double), in shuffled order.
  // |a - b| = k 2^-10; sorted, the j-th smallest is j 2^-10, so p50 -> k = 500, p99 -> 990,
  // p99.9 -> 999, p99.99 -> ceil(999.9) = 1000. max |a-b| = max rel = 1000 2^-10 (|b| = 1).
  std::vector<double> k(1000);
  std::iota(k.begin(), k.end(), 1.0);
  std::mt19937 rng(11);
  std::shuffle(k.begin(), k.end(), rng);
  std::vector<double> av;
  for (double kk : k) av.push_back(1.0 + std::ldexp(kk, -10));
  recording_probe a(capture::values), b(capture::values);
  // Two calls at the site (e.g. two decoding steps): the values are compared as concatenated.
  a.observe("mlp", std::span<const double>(av.data(), 400));
  a.observe("mlp", std::span<const double>(av.data() + 400, 600));
  b.observe("mlp", std::vector<float>(1000, 1.0f));
  const auto p = compare_runs(a, b).at("mlp");
  CHECK(p.count == 1000);
  CHECK(p.abs_diff_quantiles[0] == std::ldexp(500.0, -10));
  CHECK(p.abs_diff_quantiles[1] == std::ldexp(990.0, -10));
  CHECK(p.abs_diff_quantiles[2] == std::ldexp(999.0, -10));
  CHECK(p.abs_diff_quantiles[3] == std::ldexp(1000.0, -10));
  CHECK(p.max_abs_diff == std::ldexp(1000.0, -10));
  CHECK(p.max_rel_diff == std::ldexp(1000.0, -10));
}

TEST_CASE("compare_runs of a bfloat16 run against a float32 run", "[diagnostics][parity]") {
  // Reference (float32): {1 + 2^-9, 3, 1 + 3 2^-9}. The bfloat16 run holds them rounded to 8 bits
  // (spacing 2^-7 at 1): 0x3F80 = 1, 0x4040 = 3, 0x3F81 = 1 + 2^-7.
  // |a - b| = {2^-9, 0, 2^-7 - 3 2^-9 = 2^-9}; rel = {2^-9 / (1 + 2^-9) = 1/513, 0, 1/515}: max 1/513.
  recording_probe bf16_run(capture::values), f32_run(capture::values);
  bf16_run.observe("proj", bf16_bits({0x3F80, 0x4040, 0x3F81}));
  f32_run.observe("proj", std::vector<float>{1.0f + 0x1p-9f, 3.0f, 1.0f + 3 * 0x1p-9f});
  const auto p = compare_runs(bf16_run, f32_run).at("proj");
  CHECK(p.max_abs_diff == 0x1p-9);
  CHECK_THAT(p.max_rel_diff, WithinRel(1.0 / 513.0, 1e-15));
  // Sorted {0, 2^-9, 2^-9}: p50 = 2nd = 2^-9.
  CHECK(p.abs_diff_quantiles[0] == 0x1p-9);
}

TEST_CASE("compare_runs: equal non-finite values agree, other non-finite pairs are infinitely apart",
          "[diagnostics][parity]") {
  // a: {NaN, +Inf, -Inf, 1, NaN, 1, +Inf, -0, 1.7e308}
  // b: {NaN, +Inf, -Inf, 2, 1, +Inf, -Inf, +0, -1.7e308}
  // |a-b|: {0, 0, 0, 1, inf, inf, inf, 0, inf (3.4e308 overflows)}
  // sorted: 0 0 0 0 1 inf inf inf inf: p50 = ceil(4.5) = 5th = 1; p99 = 9th = inf.
  recording_probe a(capture::values), b(capture::values);
  a.observe("s", std::vector<double>{qnan, inf, -inf, 1.0, qnan, 1.0, inf, -0.0, 1.7e308});
  b.observe("s", std::vector<double>{qnan, inf, -inf, 2.0, 1.0, inf, -inf, 0.0, -1.7e308});
  const auto r = compare_runs(a, b);
  const auto& p = r.at("s");
  CHECK(p.max_abs_diff == inf);
  CHECK(p.max_rel_diff == inf);
  CHECK(p.abs_diff_quantiles[0] == 1.0);
  CHECK(p.abs_diff_quantiles[1] == inf);
  CHECK(p.nonfinite_a == 5);  // NaN, +Inf, -Inf, NaN, +Inf
  CHECK(p.nonfinite_b == 5);  // NaN, +Inf, -Inf, +Inf, -Inf
  CHECK(r.first_nonfinite_site == "s");

  // Only the finite pairs: {1 vs 2} -> 1, rel 1/2.
  recording_probe a1(capture::values), b1(capture::values);
  a1.observe("s", std::vector<double>{qnan, 1.0});
  b1.observe("s", std::vector<double>{qnan, 2.0});
  CHECK(compare_runs(a1, b1).at("s").max_abs_diff == 1.0);
  CHECK(compare_runs(a1, b1).at("s").max_rel_diff == 0.5);
}

TEST_CASE("compare_runs reports sites in run a's order and its first non-finite site", "[diagnostics][parity]") {
  recording_probe a(capture::values), b(capture::values);
  a.observe("s1", std::vector<float>{1.0f, 2.0f});
  a.observe("s2", std::vector<float>{std::numeric_limits<float>::infinity(), 1.0f});
  a.observe("s3", std::vector<float>{std::numeric_limits<float>::quiet_NaN(), 1.0f});
  // The reference saw the sites in another order: matching is by name.
  b.observe("s3", std::vector<float>{0.0f, 1.0f});
  b.observe("s1", std::vector<float>{1.0f, 2.0f});
  b.observe("s2", std::vector<float>{5.0f, 1.0f});
  const auto r = compare_runs(a, b, {.label_a = "f16", .label_b = "f64"});
  REQUIRE(r.sites.size() == 3);
  CHECK(r.sites[0].site == "s1");
  CHECK(r.sites[1].site == "s2");
  CHECK(r.sites[2].site == "s3");
  CHECK(r.first_nonfinite_site == "s2");  // s3 went non-finite too, but later
  CHECK(r.first_nonfinite_site_or_none() == "s2");
  CHECK(r.label_a == "f16");
  CHECK(r.label_b == "f64");
  CHECK_THROWS_AS(r.at("s4"), std::out_of_range);

  // A non-finite reference does not make run a non-finite.
  recording_probe fine(capture::values), broken_ref(capture::values);
  fine.observe("x", std::vector<float>{1.0f});
  broken_ref.observe("x", std::vector<float>{std::numeric_limits<float>::infinity()});
  CHECK(compare_runs(fine, broken_ref).first_nonfinite_site_or_none() == "none");
  CHECK(compare_runs(fine, broken_ref).at("x").nonfinite_b == 1);

  // A site observed with no elements compares as 0 everywhere.
  recording_probe ea(capture::values), eb(capture::values);
  ea.observe("empty", std::vector<float>{});
  eb.observe("empty", std::vector<double>{});
  const auto e = compare_runs(ea, eb).at("empty");
  CHECK(e.count == 0);
  CHECK(e.max_abs_diff == 0.0);
  CHECK(e.abs_diff_quantiles[3] == 0.0);
}

TEST_CASE("compare_runs rejects runs that observed different sites or sizes, naming the site and sizes",
          "[diagnostics][parity]") {
  recording_probe a(capture::values), b(capture::values);
  a.observe("x", std::vector<float>(12, 1.0f));
  SECTION("a site in run a only") {
    CHECK_THROWS_AS(compare_runs(a, b), std::invalid_argument);
    CHECK_THROWS_WITH(
        compare_runs(a, b, {.label_a = "bf16", .label_b = "f32"}),
        Contains("'x'") && Contains("12 elements in run 'bf16'") && Contains("absent (0 elements) from run 'f32'"));
  }
  SECTION("a site in the reference run only") {
    b.observe("x", std::vector<float>(12, 1.0f));
    b.observe("y", std::vector<double>(5, 1.0));
    CHECK_THROWS_WITH(compare_runs(a, b), Contains("'y'") && Contains("5 elements in run 'reference'") &&
                                              Contains("absent (0 elements) from run 'a'"));
  }
  SECTION("different sizes at a site") {
    b.observe("x", std::vector<float>(16, 1.0f));
    CHECK_THROWS_WITH(compare_runs(a, b),
                      Contains("'x'") && Contains("12 elements in run 'a'") && Contains("16 in run 'reference'"));
  }
  SECTION("different sizes reached over several calls") {
    b.observe("x", std::vector<float>(6, 1.0f));
    CHECK_THROWS_WITH(compare_runs(a, b), Contains("12 elements") && Contains("6 in run"));
    b.observe("x", std::vector<float>(6, 1.0f));
    CHECK_NOTHROW(compare_runs(a, b));
  }
  SECTION("a run recorded statistics only") {
    recording_probe stats_only;  // capture::statistics
    stats_only.observe("x", std::vector<float>(12, 1.0f));
    CHECK_THROWS_WITH(compare_runs(a, stats_only),
                      Contains("run 'reference' kept no values for site 'x'") && Contains("capture::values"));
    CHECK_THROWS_WITH(compare_runs(stats_only, a), Contains("run 'a' kept no values"));
  }
  SECTION("a bad tiny") {
    b.observe("x", std::vector<float>(12, 1.0f));
    CHECK_THROWS_WITH(compare_runs(a, b, {.tiny = 0.0}), Contains("tiny"));
    CHECK_THROWS_WITH(compare_runs(a, b, {.tiny = -1.0}), Contains("tiny"));
    CHECK_THROWS_WITH(compare_runs(a, b, {.tiny = inf}), Contains("tiny"));
    CHECK_THROWS_WITH(compare_runs(a, b, {.tiny = qnan}), Contains("tiny"));
  }
}

TEST_CASE("a parity report prints as an aligned table with the first non-finite site", "[diagnostics][parity]") {
  // proj: the bfloat16-vs-float32 case above: max |a-b| = 2^-9 = 1.953e-03; rms of the reference
  //   sqrt(((1 + 2^-9)^2 + 9 + (1 + 3 2^-9)^2) / 3) = 1.91622, so max/rms = 1.019e-03; every quantile
  //   2^-9 (sorted {0, 2^-9, 2^-9}: p50 = 2nd).
  // logits: a = {+Inf, 1}, b = {3e38, 1}: |a-b| = {inf, 0}; max/rms = inf; sorted {0, inf}: p50 = 1st = 0.
  recording_probe bf16_run(capture::values), f32_run(capture::values);
  bf16_run.observe("proj", bf16_bits({0x3F80, 0x4040, 0x3F81}));
  f32_run.observe("proj", std::vector<float>{1.0f + 0x1p-9f, 3.0f, 1.0f + 3 * 0x1p-9f});
  bf16_run.observe("logits", bf16_bits({0x7F80, 0x3F80}));
  f32_run.observe("logits", std::vector<float>{3e38f, 1.0f});
  const auto report = compare_runs(bf16_run, f32_run, {.label_a = "bf16", .label_b = "f32"});
  const std::string expected =
      "parity of bf16 against f32 (|a-b| per element; max/rms = max|a-b| / rms of f32 at the site)\n"
      "site    elements   max|a-b|    max/rms        p50        p99      p99.9     p99.99  nonfinite bf16  nonfinite "
      "f32\n"
      "------  --------  ---------  ---------  ---------  ---------  ---------  ---------  --------------  "
      "-------------\n"
      "proj           3  1.953e-03  1.019e-03  1.953e-03  1.953e-03  1.953e-03  1.953e-03               0              "
      "0\n"
      "logits         2        inf        inf  0.000e+00        inf        inf        inf               1              "
      "0\n"
      "first non-finite site in bf16: logits\n";
  CHECK(mixprec::diagnostics::to_string(report) == expected);
  std::ostringstream os;
  os << report;
  CHECK(os.str() == expected);
}

TEST_CASE("errors relative to the reference's RMS are not dominated by near-zero references", "[diagnostics][parity]") {
  // b = {1e-30, 1, -1, 1}, a = b + {1e-6, 0, 0, 0}: the element-wise relative error of the first
  // element is 1e24, while max|a-b| / rms(b) = 1e-6 / sqrt((1e-60 + 3) / 4) = 1e-6 / sqrt(0.75).
  recording_probe a(capture::values), b(capture::values);
  const std::vector<double> ref{1e-30, 1.0, -1.0, 1.0};
  b.observe("x", ref);
  a.observe("x", std::vector<double>{1e-30 + 1e-6, 1.0, -1.0, 1.0});
  const auto p = compare_runs(a, b).at("x");
  CHECK(p.max_rel_diff > 1e23);
  CHECK_THAT(p.reference_rms, WithinRel(std::sqrt(0.75), 1e-15));
  CHECK_THAT(p.max_rms_rel_diff, WithinRel((1e-30 + 1e-6 - 1e-30) / std::sqrt(0.75), 1e-12));
  CHECK(p.max_diff_in_u == 0.0);  // no unit roundoff given
}

TEST_CASE("the error in units of the compute format's unit roundoff", "[diagnostics][parity]") {
  // The bfloat16 case: max|a-b| = 2^-9, rms(b) as above, u = 2^-8 (bfloat16): 2^-9 / (rms 2^-8) = 0.5 / rms.
  recording_probe bf16_run(capture::values), f32_run(capture::values);
  bf16_run.observe("proj", bf16_bits({0x3F80, 0x4040, 0x3F81}));
  const std::vector<float> ref{1.0f + 0x1p-9f, 3.0f, 1.0f + 3 * 0x1p-9f};
  f32_run.observe("proj", ref);
  double sum = 0.0;
  for (float v : ref) sum += static_cast<double>(v) * v;
  const double rms = std::sqrt(sum / 3.0);
  const auto report = compare_runs(bf16_run, f32_run, {.label_a = "bf16", .label_b = "f32", .unit_roundoff = 0x1p-8});
  const auto& p = report.at("proj");
  CHECK_THAT(p.max_diff_in_u, WithinRel(0.5 / rms, 1e-14));
  const std::string text = mixprec::diagnostics::to_string(report);
  CHECK_THAT(text, Contains("; u = 3.906e-03)") && Contains("max/(rms u)") && Contains("2.609e-01"));
}

TEST_CASE("RMS edge cases: non-finite references are left out, a zero reference gives inf or 0",
          "[diagnostics][parity]") {
  const double inf = std::numeric_limits<double>::infinity();
  recording_probe a(capture::values), b(capture::values);
  b.observe("s", std::vector<double>{inf, 3.0, -4.0});  // rms over {3, -4}: sqrt(12.5)
  a.observe("s", std::vector<double>{inf, 3.5, -4.0});
  b.observe("zero", std::vector<double>{0.0, 0.0});
  a.observe("zero", std::vector<double>{0.0, 1.0});
  b.observe("same", std::vector<double>{0.0, 0.0});
  a.observe("same", std::vector<double>{0.0, 0.0});
  b.observe("huge", std::vector<double>{1e300, -1e300});  // the squares would overflow
  a.observe("huge", std::vector<double>{1e300, -1e300});
  const auto r = compare_runs(a, b);
  CHECK_THAT(r.at("s").reference_rms, WithinRel(std::sqrt(12.5), 1e-15));
  CHECK_THAT(r.at("s").max_rms_rel_diff, WithinRel(0.5 / std::sqrt(12.5), 1e-15));
  CHECK(r.at("zero").max_rms_rel_diff == inf);
  CHECK(r.at("same").max_rms_rel_diff == 0.0);
  CHECK_THAT(r.at("huge").reference_rms, WithinRel(1e300, 1e-15));
}

TEST_CASE("a bad unit roundoff is a clear error", "[diagnostics][parity]") {
  recording_probe a(capture::values), b(capture::values);
  a.observe("s", std::vector<double>{1.0});
  b.observe("s", std::vector<double>{1.0});
  CHECK_THROWS_WITH(compare_runs(a, b, {.unit_roundoff = -1.0}), Contains("unit_roundoff"));
  CHECK_THROWS_AS(compare_runs(a, b, {.unit_roundoff = std::numeric_limits<double>::infinity()}),
                  std::invalid_argument);
  CHECK_THROWS_AS(compare_runs(a, b, {.unit_roundoff = std::numeric_limits<double>::quiet_NaN()}),
                  std::invalid_argument);
}
