// Tests of mixprec/diagnostics/residual_scale_plan.hpp: the float16 scale planner on recorded
// calibration runs whose magnitudes are chosen by hand, so that every exponent, residual scale and
// epsilon below is computed in the comments from float16's largest value, 65504 = 2^16 - 2^5 (IEEE
// 754 binary16); both schedules; internal sites beyond reach; bad input; the printed table. The planner
// on a real encoder (a float32 run that stays bit for bit the same under any plan, a float16 run that
// overflows without one) is tested in tests/fp16_plan/encoder_test.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/residual_scale_plan.hpp"

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::diagnostics::plan_residual_scales;
using mixprec::diagnostics::pre_norm_block_sites;
using mixprec::diagnostics::recording_probe;
using mixprec::diagnostics::residual_block_sites;
using mixprec::diagnostics::residual_scale_options;
using mixprec::diagnostics::scale_schedule;

namespace {

constexpr double float16_max = 65504.0;             // 2^16 - 2^5
constexpr double limit_2_bits = float16_max / 4.0;  // 16376: the default headroom of 2 bits

// A calibration run in which block "b<i>" wrote outputs of magnitude output[i] (one site, a value and
// its negation) and held an internal value of magnitude internal[i].
recording_probe calibration(const std::vector<double>& output, const std::vector<double>& internal) {
  recording_probe run;
  for (std::size_t i = 0; i < output.size(); ++i) {
    const std::string b = "b" + std::to_string(i);
    run.observe(b + ".out", std::vector<double>{0.5, -output[i]});
    run.observe(b + ".hidden", std::vector<double>{internal[i]});
  }
  return run;
}

std::vector<residual_block_sites> sites(std::size_t n) {
  std::vector<residual_block_sites> s;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string b = "b" + std::to_string(i);
    s.push_back({b, {b + ".out"}, {b + ".hidden"}});
  }
  return s;
}

}  // namespace

TEST_CASE("plan_residual_scales: the largest power of two at most 1 that brings each block under max / 2^headroom") {
  // limit 16376. 16376 fits as it is; 16377 needs 2^-1 (8188.5); 65504 needs 2^-2 (16376 exactly, the
  // boundary is inclusive); 1e5 needs 2^-3 (12500; 2^-2 gives 25000); 0 is unscaled.
  const std::vector<double> outputs{16376.0, 16377.0, 65504.0, 1e5, 0.0};
  const auto run = calibration(outputs, std::vector<double>(outputs.size(), 1.0));
  const auto plan = plan_residual_scales(run, sites(outputs.size()));
  CHECK(plan.limit == limit_2_bits);
  CHECK(plan.fits);
  CHECK(plan.problems.empty());
  REQUIRE(plan.blocks.size() == 5);
  const std::vector<int> exponents{0, -1, -2, -3, 0};
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(plan.blocks[i].name == "b" + std::to_string(i));
    CHECK(plan.blocks[i].worst_output == "b" + std::to_string(i) + ".out");
    CHECK(plan.blocks[i].output_absmax == (outputs[i] == 0.0 ? 0.5 : outputs[i]));  // the 0.5 beside it
    CHECK(plan.blocks[i].exponent == exponents[i]);
    CHECK(plan.blocks[i].scale == std::ldexp(1.0, exponents[i]));
    CHECK(plan.blocks[i].scaled_output_absmax() <= limit_2_bits);
  }
  // Residual scales S_l / S_(l-1): 1, 2^-1, 2^-1, 2^-1, 2^3 (the last block takes its bits back).
  CHECK(plan.blocks[0].residual_scale() == 1.0);
  CHECK(plan.blocks[1].residual_scale() == 0.5);
  CHECK(plan.blocks[2].residual_scale() == 0.5);
  CHECK(plan.blocks[3].residual_scale() == 0.5);
  CHECK(plan.blocks[4].residual_scale() == 8.0);
  // Epsilons: the opening norm of b3 reads the stream at S_2 = 2^-2 (eps / 16), its inner norm at
  // S_3 = 2^-3 (eps / 64); the final norm at S_4 = 1.
  CHECK(plan.blocks[3].opening_norm_epsilon(1e-6) == 1e-6 / 16);
  CHECK(plan.blocks[3].inner_norm_epsilon(1e-6) == 1e-6 / 64);
  CHECK(plan.final_scale() == 1.0);
  CHECK(plan.final_norm_epsilon(1e-6) == 1e-6);
}

TEST_CASE("plan_residual_scales: the T5 schedule never lets the scale grow again") {
  // Outputs 1e5 then 10: per block 2^-3 then 1 (residual scale 8); non-increasing 2^-3 twice.
  const auto run = calibration({1e5, 10.0}, {1.0, 1.0});
  const auto per_block = plan_residual_scales(run, sites(2));
  const auto t5 = plan_residual_scales(run, sites(2), {.schedule = scale_schedule::non_increasing});
  CHECK(per_block.blocks[1].exponent == 0);
  CHECK(per_block.blocks[1].residual_scale() == 8.0);
  CHECK(t5.blocks[0].exponent == -3);
  CHECK(t5.blocks[1].exponent == -3);
  CHECK(t5.blocks[1].residual_scale() == 1.0);
  CHECK(t5.blocks[1].input_scale == 0.125);
  CHECK(t5.final_norm_epsilon(1.0) == 1.0 / 64);
  CHECK_THAT(t5.blocks[1].reason, Contains("non-increasing"));
}

TEST_CASE("plan_residual_scales: headroom, format and the worst of several output sites") {
  recording_probe run;
  run.observe("b0.attention.out", std::vector<float>{300.0f});
  run.observe("b0.ffn.out", std::vector<float>{-1000.0f});
  run.observe("b0.attention.context", std::vector<float>{2.0f});
  run.observe("b0.ffn.hidden", std::vector<float>{3.0f});
  const std::vector<residual_block_sites> blocks{pre_norm_block_sites("b0")};
  CHECK(blocks[0].outputs == std::vector<std::string>{"b0.attention.out", "b0.ffn.out"});
  CHECK(blocks[0].internal == std::vector<std::string>{"b0.attention.context", "b0.ffn.hidden"});
  // Headroom 8 bits: limit 65504 / 256 = 255.875; 1000 needs 2^-2 (250).
  const auto plan = plan_residual_scales(run, blocks, {.headroom_bits = 8});
  CHECK(plan.limit == 255.875);
  CHECK(plan.blocks[0].worst_output == "b0.ffn.out");
  CHECK(plan.blocks[0].output_absmax == 1000.0);
  CHECK(plan.blocks[0].exponent == -2);
  CHECK(plan.blocks[0].worst_internal == "b0.ffn.hidden");
  CHECK(plan.blocks[0].internal_absmax == 3.0);
  // float8_e4m3fn (largest finite 448, OCP FP8 spec), no headroom: 1000 needs 2^-2 (250; 2^-1 gives 500).
  const auto e4m3 = plan_residual_scales(run, blocks, {.format = dtype::float8_e4m3fn, .headroom_bits = 0});
  CHECK(e4m3.limit == 448.0);
  CHECK(e4m3.blocks[0].exponent == -2);
  // A fractional headroom: 65504 / 2^0.5.
  CHECK(plan_residual_scales(run, blocks, {.headroom_bits = 0.5}).limit == float16_max / std::sqrt(2.0));
}

TEST_CASE("plan_residual_scales: an internal site beyond the limit makes the plan say it does not fit") {
  // b1.hidden = 20000 > 16376: it precedes the out-projection, so no scale reaches it.
  const auto plan = plan_residual_scales(calibration({10.0, 10.0}, {1.0, 20000.0}), sites(2));
  CHECK_FALSE(plan.fits);
  REQUIRE(plan.problems.size() == 1);
  CHECK_THAT(plan.problems[0], Contains("b1.hidden") && Contains("no residual scale reaches it"));
  CHECK(plan.blocks[1].exponent == 0);  // the outputs still get their plan
}

TEST_CASE("plan_residual_scales: bad input is a clear error") {
  const auto run = calibration({10.0}, {1.0});
  SECTION("a site the calibration never observed") {
    const std::vector<residual_block_sites> blocks{{"b0", {"b0.missing"}, {}}};
    CHECK_THROWS_WITH(plan_residual_scales(run, blocks), Contains("b0.missing") && Contains("never observed"));
  }
  SECTION("a block without output sites") {
    const std::vector<residual_block_sites> blocks{{"b0", {}, {"b0.hidden"}}};
    CHECK_THROWS_WITH(plan_residual_scales(run, blocks), Contains("no output site"));
  }
  SECTION("a calibration that overflowed") {
    recording_probe overflowed;
    overflowed.observe("b0.out", std::vector<float>{1.0f, std::numeric_limits<float>::infinity()});
    const std::vector<residual_block_sites> blocks{{"b0", {"b0.out"}, {}}};
    CHECK_THROWS_WITH(plan_residual_scales(overflowed, blocks), Contains("not finite") && Contains("float32"));
  }
  SECTION("a negative or non-finite headroom") {
    CHECK_THROWS_AS(plan_residual_scales(run, sites(1), {.headroom_bits = -1.0}), std::invalid_argument);
    CHECK_THROWS_AS(plan_residual_scales(run, sites(1), {.headroom_bits = std::nan("")}), std::invalid_argument);
    CHECK_THROWS_AS(plan_residual_scales(run, sites(1), {.headroom_bits = HUGE_VAL}), std::invalid_argument);
  }
  SECTION("a headroom that leaves no range") {
    CHECK_THROWS_WITH(plan_residual_scales(run, sites(1), {.headroom_bits = 2000.0}), Contains("no range"));
  }
  SECTION("a format that is not a real float") {
    CHECK_THROWS_WITH(plan_residual_scales(run, sites(1), {.format = dtype::int8}), Contains("int8"));
    CHECK_THROWS_AS(plan_residual_scales(run, sites(1), {.format = dtype::complex64}), std::invalid_argument);
  }
}

TEST_CASE("plan_residual_scales: a scale below float's normal range is a problem, not a silent plan") {
  // 1e45 needs 2^-136 under the limit 16376 (1e45 * 2^-136 = 11479 <= 16376 < 22959 = 1e45 * 2^-135):
  // below 2^-126, float32 weights scaled by it lose precision.
  const auto plan = plan_residual_scales(calibration({1e45}, {1.0}), sites(1));
  CHECK(plan.blocks[0].exponent == -136);
  CHECK_FALSE(plan.fits);
  REQUIRE(plan.problems.size() == 1);
  CHECK_THAT(plan.problems[0], Contains("below float's smallest normal"));
  // The largest exponent is found exactly far from 1 too: 2^200 needs 2^-200 * 16376's binade.
  const auto far = plan_residual_scales(calibration({0x1p200}, {1.0}), sites(1));
  CHECK(far.blocks[0].exponent == -187);  // 2^200 * 2^-187 = 8192 <= 16376 < 16384 = 2^200 * 2^-186
}

TEST_CASE("plan_residual_scales: no blocks give an empty plan whose final scale is 1") {
  const recording_probe run;
  const auto plan = plan_residual_scales(run, std::vector<residual_block_sites>{});
  CHECK(plan.blocks.empty());
  CHECK(plan.final_scale() == 1.0);
  CHECK(plan.fits);
}

TEST_CASE("residual_scale_plan prints one row per block with its scale and reason") {
  const auto plan = plan_residual_scales(calibration({1e5, 10.0}, {1.0, 20000.0}), sites(2));
  std::ostringstream os;
  os << plan;
  const std::string text = os.str();
  CHECK_THAT(text, Contains("float16") && Contains("1.638e+04"));
  CHECK_THAT(text, Contains("b0") && Contains("2^-3") && Contains("1.000e+05") && Contains("1.250e+04"));
  CHECK_THAT(text, Contains("b1") && Contains("8.000e+00"));
  CHECK_THAT(text, Contains("problem: b1.hidden"));
}
