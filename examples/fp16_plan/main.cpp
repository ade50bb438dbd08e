// mixprec float16 scale planner: an encoder whose feed-forward out-projections exceed float16's largest
// value (65504) runs non-finite in float16; a plan made from one float32 calibration run (power-of-two
// out-projection and residual scales, epsilons scaled by the square) keeps it finite, and its output is
// compared with the float32 run's (parity quantiles). The plan is made on one input and checked on
// another. Exits 1 if the unplanned float16 run stays finite or a planned one does not.
#include <mixprec/mixprec.hpp>

#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include "encoder.hpp"

using namespace mixprec;

namespace {

using f32_policy = policy<float, float, float>;
using f16_policy = policy<float, float16, float16>;

// The encoder's output alone, recorded with its values (the sites inside differ by the plan's scales).
template <class Model>
diagnostics::recording_probe output_of(const Model& model, const xt::xtensor<float, 2>& x) {
  diagnostics::recording_probe run(diagnostics::capture::values);
  const auto y = model(x);
  run.observe("out", y.storage());
  return run;
}

}  // namespace

int main() {
  const fp16_plan::encoder_config config{};
  const fp16_plan::encoder_weights weights = fp16_plan::growing_weights(config, /*growth=*/8.0, /*seed=*/2026);
  const auto calibration_input = fp16_plan::gaussian_input(64, config.d_model, 1);
  const auto evaluation_input = fp16_plan::gaussian_input(64, config.d_model, 2);

  // 1. Calibrate in float32: every probe site of every layer.
  const fp16_plan::encoder<f32_policy> f32_model(weights);
  diagnostics::recording_probe calibration;
  (void)f32_model(calibration_input, calibration);
  std::vector<diagnostics::residual_block_sites> blocks;
  for (std::size_t l = 0; l < config.n_layers; ++l) {
    blocks.push_back(diagnostics::pre_norm_block_sites("layers." + std::to_string(l)));
  }
  const auto plan = diagnostics::plan_residual_scales(calibration, blocks, {.headroom_bits = 2});
  const auto t5_plan = diagnostics::plan_residual_scales(
      calibration, blocks, {.headroom_bits = 2, .schedule = diagnostics::scale_schedule::non_increasing});
  std::cout << "float32 calibration run (headroom in bits to float16's 65504):\n" << calibration << '\n';
  std::cout << plan << '\n' << "T5 schedule (non-increasing):\n" << t5_plan << '\n';

  // 2. Float16 without a plan, on the evaluation input.
  const fp16_plan::encoder<f16_policy> unplanned(weights);
  diagnostics::recording_probe unplanned_run;
  const auto y_unplanned = unplanned(evaluation_input, unplanned_run);
  std::size_t unplanned_nonfinite = 0;
  for (const float16 v : y_unplanned) unplanned_nonfinite += std::isfinite(static_cast<float>(v)) ? 0 : 1;
  std::string first_overflow = "none";
  for (const auto& site : unplanned_run.sites()) {
    if (site.stats.inf_count() + site.stats.nan_count() != 0) {
      first_overflow = site.name;
      break;
    }
  }
  std::cout << "float16 without a plan: " << unplanned_nonfinite << " of " << y_unplanned.size()
            << " outputs non-finite; first non-finite site: " << first_overflow << "\n\n";

  // 3. Float16 with each plan, against float32, on the evaluation input.
  const auto reference = output_of(f32_model, evaluation_input);
  const diagnostics::parity_options parity{
      .label_a = "f16", .label_b = "f32", .unit_roundoff = static_cast<double>(finfo<float16>::eps) / 2};
  bool planned_finite = true;
  for (const auto* p : {&plan, &t5_plan}) {
    const fp16_plan::encoder<f16_policy> planned(weights, p);
    const auto report = diagnostics::compare_runs(output_of(planned, evaluation_input), reference, parity);
    planned_finite = planned_finite && !report.first_nonfinite_site.has_value();
    std::cout << "float16 with the " << (p == &plan ? "per-block" : "T5 (non-increasing)")
              << " plan, output against float32:\n"
              << report << '\n';
  }
  const bool demonstrated = unplanned_nonfinite != 0 && planned_finite;
  std::cout << (demonstrated ? "the plan keeps float16 finite.\n" : "DEMONSTRATION FAILED\n");
  return demonstrated ? 0 : 1;
}
