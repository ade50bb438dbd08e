// Tests of mixprec/diagnostics/probe.hpp and recording_probe.hpp: the null probe costs nothing (it
// is usable in constant expressions and lets a model skip building site names), the recording probe
// accumulates per-site statistics over calls in first-seen order (values computed by hand in the
// comments), keeps values on request, rejects bad input, and prints an aligned table.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/core.hpp"
#include "mixprec/diagnostics/probe.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;
using mixprec::bfloat16;
using mixprec::float16;
using mixprec::diagnostics::capture;
using mixprec::diagnostics::null_probe;
using mixprec::diagnostics::probe_enabled_v;
using mixprec::diagnostics::recording_probe;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

// float16's max 65504 = 2^16 (1 - 2^-11); bfloat16's max = 2^128 (1 - 2^-8) (format specs).
const double log2_float16_max = 16.0 + std::log1p(-0x1p-11) / std::log(2.0);
const double log2_bfloat16_max = 128.0 + std::log1p(-0x1p-8) / std::log(2.0);

/// A toy model, written the way a real one uses its probe: constexpr-friendly, probe as a template
/// parameter, one observation per "layer".
template <mixprec::diagnostics::probe Probe>
constexpr float toy_forward(float x, Probe&& probe) {
  std::array<float, 2> h{x, -2.0f * x};
  probe.observe("input", h);
  for (float& v : h) v = v * v;
  probe.observe("square", h);
  return h[0] + h[1];
}

/// A toy model whose site names are built at run time, only when the probe is enabled.
template <mixprec::diagnostics::probe Probe>
std::vector<float> layered_forward(std::vector<float> h, int layers, Probe&& probe, int& names_built) {
  for (int l = 0; l < layers; ++l) {
    for (float& v : h) v *= 2.0f;
    if constexpr (probe_enabled_v<Probe>) {
      ++names_built;
      probe.observe("layers." + std::to_string(l) + ".out", h);
    }
  }
  return h;
}
}  // namespace

TEST_CASE("null_probe is an empty, disabled probe usable in constant expressions", "[diagnostics][probe]") {
  STATIC_REQUIRE(mixprec::diagnostics::probe<null_probe>);
  STATIC_REQUIRE(mixprec::diagnostics::probe<null_probe&>);
  STATIC_REQUIRE(mixprec::diagnostics::probe<const null_probe&>);
  STATIC_REQUIRE(std::is_empty_v<null_probe>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<null_probe>);
  STATIC_REQUIRE_FALSE(null_probe::enabled);
  STATIC_REQUIRE_FALSE(probe_enabled_v<null_probe&>);
  // The whole forward pass, probe calls included, runs at compile time: x = 3 -> {3, -6} -> {9, 36}.
  STATIC_REQUIRE(toy_forward(3.0f, null_probe{}) == 45.0f);
  STATIC_REQUIRE(noexcept(null_probe{}.observe("x", std::vector<bfloat16>{})));
}

TEST_CASE("a model skips building site names for null_probe and builds them for recording_probe",
          "[diagnostics][probe]") {
  int names_built = 0;
  const auto out = layered_forward({1.0f, -0.5f}, 3, null_probe{}, names_built);
  CHECK(names_built == 0);
  CHECK(out == std::vector<float>{8.0f, -4.0f});

  recording_probe probe;
  names_built = 0;
  const auto recorded = layered_forward({1.0f, -0.5f}, 3, probe, names_built);
  CHECK(recorded == out);  // observing changes nothing
  CHECK(names_built == 3);
  REQUIRE(probe.size() == 3);
  // Layer l holds {2^(l+1), -2^l}: absmax 2^(l+1); RMS sqrt((4^(l+1) + 4^l) / 2) = 2^l sqrt(5/2).
  for (int l = 0; l < 3; ++l) {
    const auto& r = probe.sites()[static_cast<std::size_t>(l)];
    CHECK(r.name == "layers." + std::to_string(l) + ".out");
    CHECK(r.stats.absmax() == std::ldexp(1.0, l + 1));
    CHECK_THAT(r.stats.rms(), WithinRel(std::ldexp(std::sqrt(2.5), l), 1e-15));
  }
}

TEST_CASE("recording_probe keeps sites in the order they were first observed", "[diagnostics][probe]") {
  STATIC_REQUIRE(mixprec::diagnostics::probe<recording_probe>);
  STATIC_REQUIRE(mixprec::diagnostics::probe<recording_probe&>);
  STATIC_REQUIRE(probe_enabled_v<recording_probe&>);
  recording_probe probe;
  CHECK(probe.empty());
  const std::vector<float> x{1.0f};
  for (const char* site : {"z", "a", "m", "a", "z", "z"}) probe.observe(site, x);
  REQUIRE(probe.size() == 3);
  CHECK(probe.sites()[0].name == "z");  // not alphabetical: execution order
  CHECK(probe.sites()[1].name == "a");
  CHECK(probe.sites()[2].name == "m");
  CHECK(probe.sites()[0].calls == 3);
  CHECK(probe.sites()[1].calls == 2);
  CHECK(probe.sites()[2].calls == 1);
  CHECK(probe.at("a").stats.count() == 2);
  CHECK(probe.find("m") == &probe.sites()[2]);
  CHECK(probe.find("nope") == nullptr);
  CHECK_THROWS_AS(probe.at("nope"), std::out_of_range);
  CHECK_THROWS_WITH(probe.at("nope"), Contains("'nope'") && Contains("z, a, m"));
  probe.clear();
  CHECK(probe.empty());
  CHECK(probe.find("z") == nullptr);
}

TEST_CASE("recording_probe accumulates statistics over calls at a site", "[diagnostics][probe]") {
  recording_probe probe;
  // Step 1: {3, -4}; step 2: {0, 12}; step 3: {NaN, -Inf, NaN}.
  // All steps: 7 elements, 2 NaN, 1 Inf; absmax = +inf (the Inf); RMS over the 4 finite elements =
  // sqrt((9 + 16 + 0 + 144) / 4) = 6.5.
  probe.observe("ffn", std::vector<float>{3.0f, -4.0f});
  probe.observe("ffn", std::vector<float>{0.0f, 12.0f});
  const auto& r = probe.at("ffn");
  CHECK(r.calls == 2);
  CHECK(r.element_type == mixprec::dtype::float32);
  CHECK(r.stats.count() == 4);
  CHECK(r.stats.absmax() == 12.0);  // max of the steps' absmax (4, 12)
  CHECK(r.stats.rms() == 6.5);      // over all elements, not the mean of the steps' RMS (3.5355, 6)
  probe.observe("ffn", std::vector<float>{nan_f, -inf_f, nan_f});
  CHECK(r.calls == 3);
  CHECK(r.stats.count() == 7);
  CHECK(r.stats.nan_count() == 2);
  CHECK(r.stats.inf_count() == 1);
  CHECK(r.stats.absmax() == inf);
  CHECK(r.stats.rms() == 6.5);
  CHECK(r.headroom_bits() == -inf);
  CHECK(r.values.empty());  // capture::statistics keeps no values
  CHECK(probe.mode() == capture::statistics);
}

TEST_CASE("recording_probe measures headroom against the site's own float16 or bfloat16 max", "[diagnostics][probe]") {
  recording_probe probe;
  // float16 {1024, -2048}: absmax 2^11; headroom 16 + log2(1 - 2^-11) - 11 = 4.9993 bits.
  probe.observe("h", std::vector<float16>{float16(1024.0f), float16(-2048.0f)});
  CHECK(probe.at("h").element_type == mixprec::dtype::float16);
  CHECK_THAT(probe.at("h").headroom_bits(), WithinAbs(log2_float16_max - 11.0, 1e-12));
  // float16 at its max: no headroom left.
  probe.observe("full", std::vector<float16>{float16(65504.0f)});
  CHECK(probe.at("full").headroom_bits() == 0.0);
  // bfloat16 {2^10}: 128 + log2(1 - 2^-8) - 10 = 117.9944 bits.
  probe.observe("b", std::vector<bfloat16>{bfloat16(0x1p10f), bfloat16(-1.0f)});
  CHECK_THAT(probe.at("b").headroom_bits(), WithinAbs(log2_bfloat16_max - 10.0, 1e-12));
  // An all-zero site has infinite headroom.
  probe.observe("zero", std::vector<bfloat16>(3, bfloat16(0.0f)));
  CHECK(probe.at("zero").headroom_bits() == inf);
}

TEST_CASE("recording_probe in capture::values mode keeps every element of every call as double",
          "[diagnostics][probe]") {
  recording_probe probe(capture::values);
  CHECK(probe.mode() == capture::values);
  // bfloat16 0x3F81 = 1 + 2^-7 (exactly 1.0078125); 0xC2F6 = -(1 + 118/128) * 2^6 = -123.0.
  probe.observe("s", std::vector<bfloat16>{bfloat16::from_bits(0x3F81), bfloat16::from_bits(0xC2F6)});
  probe.observe("s", std::array<bfloat16, 1>{bfloat16::from_bits(0x7FC0)});  // a NaN is kept as a NaN
  const auto& r = probe.at("s");
  REQUIRE(r.values.size() == 3);
  CHECK(r.values[0] == 1.0078125);
  CHECK(r.values[1] == -123.0);
  CHECK(std::isnan(r.values[2]));
  CHECK(r.stats.count() == 3);
}

TEST_CASE("recording_probe reads row-major xtensor containers through storage()", "[diagnostics][probe]") {
  recording_probe probe(capture::values);
  const xt::xtensor<float, 2> x = {{1.0f, -2.0f}, {3.0f, 4.0f}};
  probe.observe("x", x.storage());
  CHECK(probe.at("x").values == std::vector<double>{1.0, -2.0, 3.0, 4.0});  // row-major order
  CHECK(probe.at("x").stats.absmax() == 4.0);
  const xt::xtensor<bfloat16, 1> b = {bfloat16(0.5f), bfloat16(-8.0f)};
  probe.observe("b", b.storage());
  CHECK(probe.at("b").element_type == mixprec::dtype::bfloat16);
  CHECK(probe.at("b").stats.absmax() == 8.0);
  // Raw memory through std::span.
  const float raw[3] = {0.0f, 0.0f, -7.0f};
  probe.observe("raw", std::span<const float>(raw, 3));
  CHECK(probe.at("raw").stats.absmax() == 7.0);
}

TEST_CASE("recording_probe rejects an empty site name and a change of element type", "[diagnostics][probe]") {
  recording_probe probe;
  CHECK_THROWS_WITH(probe.observe("", std::vector<float>{1.0f}), Contains("site name is empty"));
  probe.observe("attn", std::vector<float16>{float16(1.0f)});
  CHECK_THROWS_AS(probe.observe("attn", std::vector<float>{1.0f}), std::invalid_argument);
  CHECK_THROWS_WITH(probe.observe("attn", std::vector<float>{1.0f}),
                    Contains("'attn'") && Contains("float16") && Contains("float32"));
  CHECK(probe.at("attn").calls == 1);  // the rejected calls recorded nothing
  CHECK(probe.at("attn").stats.count() == 1);
}

TEST_CASE("recording_probe prints an aligned statistics table", "[diagnostics][probe]") {
  recording_probe probe;
  // embedding (float16): {3, -4} then {0, 12}: absmax 12, RMS 6.5, headroom log2(65504 / 12) = 12.414.
  probe.observe("embedding", std::vector<float16>{float16(3.0f), float16(-4.0f)});
  probe.observe("embedding", std::vector<float16>{float16(0.0f), float16(12.0f)});
  // logits (float32): {NaN, +Inf, -2}: absmax inf, RMS over the finite element 2, headroom -inf.
  probe.observe("logits", std::vector<float>{nan_f, inf_f, -2.0f});
  // zeros (bfloat16): absmax 0, headroom +inf.
  probe.observe("zeros", std::vector<bfloat16>(2, bfloat16(0.0f)));
  const std::string expected =
      "site       dtype     calls  elements     absmax        rms  nan  inf  headroom (bits)\n"
      "---------  --------  -----  --------  ---------  ---------  ---  ---  ---------------\n"
      "embedding  float16       2         4  1.200e+01  6.500e+00    0    0            12.41\n"
      "logits     float32       1         3        inf  2.000e+00    1    1             -inf\n"
      "zeros      bfloat16      1         2  0.000e+00  0.000e+00    0    0              inf\n";
  CHECK(mixprec::diagnostics::to_string(probe) == expected);
  std::ostringstream os;
  os << probe;
  CHECK(os.str() == expected);

  // Against float16's max instead: the float32 row is still -inf; bfloat16 zeros still inf; the
  // float16 row is unchanged.
  const std::string against_f16 = mixprec::diagnostics::to_string(probe, mixprec::dtype::float16);
  CHECK_THAT(against_f16, Contains("headroom to float16 (bits)"));
  CHECK_THAT(against_f16, Contains("6.500e+00    0    0                       12.41\n"));
  CHECK_THROWS_WITH(mixprec::diagnostics::to_string(probe, mixprec::dtype::int8), Contains("int8"));

  CHECK(mixprec::diagnostics::to_string(recording_probe{}) ==
        "site  dtype  calls  elements  absmax  rms  nan  inf  headroom (bits)\n"
        "----  -----  -----  --------  ------  ---  ---  ---  ---------------\n");
}
