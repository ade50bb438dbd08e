// Tests of the float16 scale planner on a real model (examples/fp16_plan/encoder.hpp, built from the
// library's layers): applying a plan is exact (in float32 the planned encoder computes the same bits as
// the unplanned one, whatever the scales: powers of two, epsilons scaled by the square); the encoder
// with growing feed-forward out-projections overflows in float16 at the site the plan targets; planned,
// it stays finite and close to float32 on an input it was not calibrated on.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "fp16_plan/encoder.hpp"

using mixprec::float16;
using mixprec::policy;
namespace diagnostics = mixprec::diagnostics;

namespace {

using f32_policy = policy<float, float, float>;
using f16_policy = policy<float, float16, float16>;

std::vector<diagnostics::residual_block_sites> encoder_sites(std::size_t n_layers) {
  std::vector<diagnostics::residual_block_sites> blocks;
  for (std::size_t l = 0; l < n_layers; ++l) {
    blocks.push_back(diagnostics::pre_norm_block_sites("layers." + std::to_string(l)));
  }
  return blocks;
}

diagnostics::recording_probe calibrate(const fp16_plan::encoder_weights& w, const xt::xtensor<float, 2>& x) {
  diagnostics::recording_probe run;
  (void)fp16_plan::encoder<f32_policy>(w)(x, run);
  return run;
}

}  // namespace

TEST_CASE("a plan changes nothing in float32: the planned encoder computes the same bits") {
  const fp16_plan::encoder_config config{.n_layers = 4};
  const auto x = fp16_plan::gaussian_input(24, config.d_model, 7);
  // Growing (8^l) and shrinking (8^-l) out-projections, with headrooms that make every block's scale
  // differ: residual scales below and above 1, epsilons down to about 2^-30 eps.
  for (const double growth : {8.0, 0.125}) {
    const auto weights = fp16_plan::growing_weights(config, growth, 11);
    const auto calibration = calibrate(weights, x);
    const fp16_plan::encoder<f32_policy> unplanned(weights);
    const auto reference = unplanned(x);
    for (const double headroom : {2.0, 14.0, 16.0, 20.0}) {
      for (const auto schedule :
           {diagnostics::scale_schedule::per_block, diagnostics::scale_schedule::non_increasing}) {
        const auto plan = diagnostics::plan_residual_scales(calibration, encoder_sites(config.n_layers),
                                                            {.headroom_bits = headroom, .schedule = schedule});
        CAPTURE(growth, headroom, plan.blocks.front().exponent, plan.blocks.back().exponent);
        const auto y = fp16_plan::encoder<f32_policy>(weights, &plan)(x);
        REQUIRE(static_cast<bool>(y == reference));
      }
    }
    // The headrooms above did scale: with 20 bits (limit 65504 / 2^20 < 0.07) every block is scaled.
    const auto plan =
        diagnostics::plan_residual_scales(calibration, encoder_sites(config.n_layers), {.headroom_bits = 20.0});
    for (const auto& b : plan.blocks) CHECK(b.exponent < 0);
  }
}

TEST_CASE("an encoder whose out-projections exceed 65504 overflows in float16, and planned it stays finite") {
  const fp16_plan::encoder_config config{};  // 6 blocks; block 5's feed-forward reaches ~8e4 in float32
  const auto weights = fp16_plan::growing_weights(config, 8.0, 2026);
  const auto calibration = calibrate(weights, fp16_plan::gaussian_input(64, config.d_model, 1));
  REQUIRE(calibration.at("layers.5.ffn.out").stats.absmax() > 65504.0);
  const auto evaluation = fp16_plan::gaussian_input(64, config.d_model, 2);

  // Without a plan: the first non-finite value appears where the out-projection leaves float16's range,
  // and reaches the output through the final norm.
  diagnostics::recording_probe unplanned_run;
  const auto y_unplanned = fp16_plan::encoder<f16_policy>(weights)(evaluation, unplanned_run);
  std::string first_nonfinite;
  for (const auto& site : unplanned_run.sites()) {
    if (first_nonfinite.empty() && site.stats.inf_count() + site.stats.nan_count() != 0) first_nonfinite = site.name;
  }
  CHECK(first_nonfinite == "layers.5.ffn.out");
  CHECK(unplanned_run.at("out").stats.nan_count() + unplanned_run.at("out").stats.inf_count() > 0);

  // With a plan (both schedules): finite everywhere, and the output within 32 float16 unit roundoffs
  // (2^-11) of the float32 run, relative to its RMS (each block rounds its float16 outputs a few times;
  // measured: 11 u).
  const auto reference = fp16_plan::encoder<f32_policy>(weights)(evaluation);
  for (const auto schedule : {diagnostics::scale_schedule::per_block, diagnostics::scale_schedule::non_increasing}) {
    const auto plan =
        diagnostics::plan_residual_scales(calibration, encoder_sites(config.n_layers), {.schedule = schedule});
    CHECK(plan.fits);
    CHECK(plan.blocks.back().exponent < 0);
    diagnostics::recording_probe planned_run;
    const auto y = fp16_plan::encoder<f16_policy>(weights, &plan)(evaluation, planned_run);
    for (const auto& site : planned_run.sites()) {
      CAPTURE(site.name);
      CHECK(site.stats.inf_count() + site.stats.nan_count() == 0);
    }
    double max_diff = 0.0, sum_squares = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double ref = reference.data()[i];
      max_diff = std::max(max_diff, std::abs(static_cast<double>(y.data()[i]) - ref));
      sum_squares += ref * ref;
    }
    const double rms = std::sqrt(sum_squares / static_cast<double>(y.size()));
    CHECK(max_diff / rms <= 32 * 0x1p-11);
  }
}

TEST_CASE("loading a plan made for another number of blocks is refused") {
  const fp16_plan::encoder_config config{.n_layers = 2};
  const auto weights = fp16_plan::growing_weights(config, 1.0, 3);
  const auto calibration = calibrate(weights, fp16_plan::gaussian_input(8, config.d_model, 1));
  auto plan = diagnostics::plan_residual_scales(calibration, encoder_sites(2));
  plan.blocks.pop_back();
  CHECK_THROWS_AS(fp16_plan::encoder<f16_policy>(weights, &plan), std::invalid_argument);
}
