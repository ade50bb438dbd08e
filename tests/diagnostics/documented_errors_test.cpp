// The error audit of the diagnostics (issue 12, "Every public entry point documents what it throws; a
// test covers each documented error"): one test case per header of include/mixprec/diagnostics/, one
// section per documented error that no other test triggers with its message checked. Covered elsewhere:
// - parity.hpp: compare_runs with a site in one run only, sizes that differ, a run without values, a bad
//   tiny, a negative unit_roundoff: parity_test.cpp.
// - quantile.hpp: nearest_rank (n == 0, levels), quantile_nearest_rank of an empty span or a NaN:
//   quantile_test.cpp.
// - recording_probe.hpp: at of an unknown site, observe with an empty site or another element type,
//   to_string with a dtype that is not real floating: probe_test.cpp.
// - residual_scale_plan.hpp: a site never observed, a block without output sites, an overflowed
//   calibration, a headroom that leaves no range, an integer format: residual_scale_plan_test.cpp.
// - tensor_stats.hpp: headroom_bits (absmax, format max, dtype), format_max: tensor_stats_test.cpp; a
//   value that is no enumerator (an out-of-bounds read before this audit): here.
// probe.hpp documents no errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/core.hpp"
#include "mixprec/diagnostics/parity.hpp"
#include "mixprec/diagnostics/quantile.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/diagnostics/residual_scale_plan.hpp"
#include "mixprec/diagnostics/tensor_stats.hpp"
#include "support/error_message.hpp"

namespace diag = mixprec::diagnostics;

namespace {

using test_support::says;

}  // namespace

TEST_CASE("parity.hpp: every documented error untested elsewhere is thrown", "[diagnostics][errors][parity]") {
  diag::recording_probe a(diag::capture::values), b(diag::capture::values);
  a.observe("s", std::vector<double>{1.0, 2.0});
  b.observe("s", std::vector<double>{1.0, 2.5});
  SECTION("parity_report::at: a site the report does not have") {
    const auto r = diag::compare_runs(a, b);
    CHECK_THROWS_MATCHES(r.at("nope"), std::out_of_range, says({"parity_report::at: no site named 'nope'"}));
  }
  SECTION("compare_runs: unit_roundoff not finite") {
    CHECK_THROWS_MATCHES(diag::compare_runs(a, b, {.unit_roundoff = std::numeric_limits<double>::infinity()}),
                         std::invalid_argument, says({"parity_options::unit_roundoff must be finite"}));
    CHECK_THROWS_MATCHES(diag::compare_runs(a, b, {.unit_roundoff = std::numeric_limits<double>::quiet_NaN()}),
                         std::invalid_argument, says({"parity_options::unit_roundoff must be finite"}));
  }
}

TEST_CASE("quantile.hpp: quantile_nearest_rank with a level of 0 or above 1", "[diagnostics][errors][quantile]") {
  const std::vector<double> v{1.0, 2.0};
  CHECK_THROWS_MATCHES(diag::quantile_nearest_rank(v, {2, 1}), std::invalid_argument,
                       says({"quantile_nearest_rank: the quantile level 2/1 is not in (0, 1]"}));
  CHECK_THROWS_MATCHES(diag::quantile_nearest_rank(v, {0, 1}), std::invalid_argument,
                       says({"quantile_nearest_rank: the quantile level 0/1"}));
}

TEST_CASE("residual_scale_plan.hpp: a negative or non-finite headroom and a format that is not a real float",
          "[diagnostics][errors][residual_scale_plan]") {
  diag::recording_probe run;
  run.observe("b0.out", std::vector<float>{10.0f});
  run.observe("b0.hidden", std::vector<float>{1.0f});
  const std::vector<diag::residual_block_sites> blocks{{"b0", {"b0.out"}, {"b0.hidden"}}};
  CHECK_THROWS_MATCHES(diag::plan_residual_scales(run, blocks, {.headroom_bits = -1.0}), std::invalid_argument,
                       says({"plan_residual_scales: headroom_bits must be finite and >= 0"}));
  CHECK_THROWS_MATCHES(
      diag::plan_residual_scales(run, blocks, {.headroom_bits = std::numeric_limits<double>::infinity()}),
      std::invalid_argument, says({"headroom_bits must be finite and >= 0"}));
  CHECK_THROWS_MATCHES(diag::plan_residual_scales(run, blocks, {.format = mixprec::dtype::complex64}),
                       std::invalid_argument, says({"complex64"}));
  // A value that is no dtype enumerator (it used to be read out of bounds of the table of maxima).
  CHECK_THROWS_MATCHES(diag::plan_residual_scales(run, blocks, {.format = static_cast<mixprec::dtype>(250)}),
                       std::invalid_argument, says({"the format (not a dtype) is not a real floating dtype"}));
}

TEST_CASE("tensor_stats.hpp: format_max of a value that is no dtype enumerator",
          "[diagnostics][errors][tensor_stats]") {
  // It used to read out of bounds of the table of maxima.
  CHECK_THROWS_MATCHES(diag::format_max(static_cast<mixprec::dtype>(250)), std::invalid_argument,
                       says({"format_max: (not a dtype) is not a real floating dtype"}));
  CHECK_THROWS_MATCHES(diag::headroom_bits(diag::tensor_stats{}, static_cast<mixprec::dtype>(mixprec::dtype_count)),
                       std::invalid_argument, says({"(not a dtype)"}));
}
