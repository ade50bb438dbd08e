// The t5 example's parity study (`--parity`, docs/example_t5.md "Parity"), after nai-t5's precision
// parity reports: a trained float32 model is run teacher-forced on validation batches under several
// policies and compared with its float32 run site by site (diagnostics::compare_runs), errors given as
// the 99.9th and 99.99th percentiles of |a - b| relative to the float32 site's RMS. Then a stress test:
// the feed-forward out-projections of block l grown by G^l (as examples/fp16_plan does), where float16
// outputs overflow without the residual-scale plan and stay finite with it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <ios>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/diagnostics/parity.hpp"
#include "mixprec/diagnostics/quantile.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/train/safetensors.hpp"
#include "model.hpp"
#include "model_io.hpp"
#include "runs.hpp"

namespace t5_example {
namespace {

namespace dg = mixprec::diagnostics;
using f32_policy = mixprec::full_precision;                                         // p=f32,c=f32,o=f32
using bf16_policy = mixprec::mixed_bfloat16;                                        // p=f32,c=bf16,o=f32
using f16_policy = mixprec::mixed_float16;                                          // p=f32,c=f16,o=f32
using f16_out_policy = mixprec::policy<float, mixprec::float16, mixprec::float16>;  // p=f32,c=f16,o=f16

/// One run compared with the float32 run.
struct variant {
  std::string label;  ///< the policy, and "+plan" when planned
  dg::parity_report report;
};

/// The index of level p in `dg::parity_quantile_levels`.
std::size_t quantile_index(dg::quantile_level p) {
  const auto& levels = dg::parity_quantile_levels;
  const auto found = std::find(levels.begin(), levels.end(), p);
  if (found == levels.end()) throw std::logic_error("parity: a quantile level the reports do not hold");
  return static_cast<std::size_t>(found - levels.begin());
}

/// The teacher-forced forward of `model` over `batches`, every probe site recorded with its values.
template <class P>
dg::recording_probe record(const t5_model<P>& model, const std::vector<seq2seq_batch>& batches) {
  dg::recording_probe run(dg::capture::values);
  for (const auto& b : batches) {
    typename t5_model<P>::saved s;
    (void)model.forward(b.encoder_ids, b.encoder_mask, b.decoder_ids, s, run);
  }
  return run;
}

/// `model` under P (its float32 parameters), with `plans` applied when given, recorded over `batches`
/// and compared with `reference`.
template <class P, class Model>
variant compare(const std::string& label, const Model& model, const std::vector<seq2seq_batch>& batches,
                const dg::recording_probe& reference, const t5_plans* plans = nullptr) {
  t5_model<P> m = with_policy<P>(model);
  if (plans != nullptr) m.apply_plan(plans->encoder, plans->decoder);
  using C = nn::compute_t<P, float>;
  const dg::parity_options options{
      .label_a = label, .label_b = "f32", .unit_roundoff = static_cast<double>(mixprec::finfo<C>::eps) / 2};
  return {label, dg::compare_runs(record(m, batches), reference, options)};
}

/// "1.234e-03", or "inf"/"nan".
std::string sci(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(3) << v;
  return s.str();
}

/// The table: per site (the reference's order) its float32 RMS, then for each variant p99.9 and p99.99
/// of |a - b| divided by that RMS; then each variant's first non-finite site.
void print_table(std::ostream& out, const dg::recording_probe& reference, const std::vector<variant>& variants) {
  const std::size_t p999 = quantile_index({999, 1000});
  const std::size_t p9999 = quantile_index({9999, 10000});
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"site", "f32 rms"};
  for (const auto& v : variants) {
    header.push_back(v.label + " p99.9");
    header.push_back(v.label + " p99.99");
  }
  rows.push_back(header);
  for (const auto& site : reference.sites()) {
    std::vector<std::string> row{site.name};
    row.push_back(sci(site.stats.rms()));
    for (const auto& v : variants) {
      const dg::site_parity& s = v.report.at(site.name);
      const auto relative = [&](double d) { return d == 0 ? 0.0 : d / s.reference_rms; };
      row.push_back(sci(relative(s.abs_diff_quantiles[p999])));
      row.push_back(sci(relative(s.abs_diff_quantiles[p9999])));
    }
    rows.push_back(row);
  }
  const std::ios::fmtflags flags = out.flags();
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t c = 0; c < rows[i].size(); ++c) {
      out << (c == 0 ? std::left : std::right) << std::setw(static_cast<int>(width[c])) << rows[i][c]
          << (c + 1 < rows[i].size() ? "  " : "\n");
    }
    if (i == 0) {
      for (std::size_t c = 0; c < width.size(); ++c)
        out << std::string(width[c], '-') << (c + 1 < width.size() ? "  " : "\n");
    }
  }
  out.flags(flags);
  for (const auto& v : variants) {
    out << "first non-finite site under " << v.label << ": " << v.report.first_nonfinite_site_or_none();
    if (v.report.first_nonfinite_site) {
      const dg::site_parity& s = v.report.at(*v.report.first_nonfinite_site);
      out << " (" << s.nonfinite_a << " of its " << s.count << " values)";
    }
    out << '\n';
  }
}

/// The largest magnitude recorded at `site`.
double absmax(const dg::recording_probe& run, const std::string& site) { return run.at(site).stats.absmax(); }

/// The stress test's default growth: the smallest power of two G with which the last block's
/// feed-forward output of some stack reaches twice float16's largest value in float32 (one binade past
/// it, so no rounding brings it back): |out| · G^(L−1) >= 2 · 65504, L that stack's blocks.
double overflowing_growth(const t5_config& c, const dg::recording_probe& reference) {
  const double target = 2.0 * static_cast<double>(mixprec::finfo<mixprec::float16>::max);
  double best = 0;
  const auto consider = [&](const std::string& stack, std::size_t layers) {
    if (layers < 2) return;  // block 0 is never grown
    const double m = absmax(reference, stack + ".layers." + std::to_string(layers - 1) + ".ffn.out");
    const double per_block = std::pow(target / m, 1.0 / static_cast<double>(layers - 1));
    const double g = std::exp2(std::ceil(std::log2(std::max(per_block, 1.0))));
    best = best == 0 ? g : std::min(best, g);
  };
  consider("encoder", c.encoder_layers);
  consider("decoder", c.decoder_layers);
  if (best == 0) {
    throw std::invalid_argument(
        "parity: the stress test grows block l by G^l, so it needs a stack of 2 or more "
        "layers; train with --layers 2 or --decoder-layers 2");
  }
  return best;
}

}  // namespace

int run_parity(const parity_settings& settings, const reversal_data& data, std::ostream& out) {
  const mixprec::train::checkpoint ck = mixprec::train::checkpoint::load(settings.load);
  const t5_model<f32_policy> reference_model = load_model<f32_policy>(ck, data);
  const t5_config& config = reference_model.config();

  // Validation batches (the training run's validation set: lengths from seed + 2), and training batches
  // of their own for calibrating the plans, so that a plan is checked on inputs it was not made from.
  const std::vector<std::string> texts =
      data.validation_texts(settings.batches * settings.eval_batch, settings.seed + 2);
  std::vector<seq2seq_batch> batches;
  for (std::size_t i = 0; i < settings.batches; ++i) {
    batches.push_back(data.make_batch({texts.begin() + static_cast<std::ptrdiff_t>(i * settings.eval_batch),
                                       texts.begin() + static_cast<std::ptrdiff_t>((i + 1) * settings.eval_batch)}));
  }
  std::mt19937_64 calibration_rng(settings.seed + 3);
  std::vector<seq2seq_batch> calibration;
  for (std::size_t i = 0; i < settings.calibration_batches; ++i) {
    calibration.push_back(data.sample(split::train, settings.eval_batch, calibration_rng));
  }
  const dg::residual_scale_options plan_options{.headroom_bits = settings.headroom_bits};

  out << "parity of '" << settings.load.string() << "' (d_model " << config.d_model << ", " << config.encoder_layers
      << " + " << config.decoder_layers << " layers) on " << settings.batches << " validation batches of "
      << settings.eval_batch << " chunks, teacher forced; errors are percentiles of |a - b| / rms(f32) per site\n\n";

  // 1. The trained model under each policy against its float32 run.
  const dg::recording_probe reference = record(reference_model, batches);
  out << "float32 run, headroom to float16's largest value per site:\n"
      << dg::to_string(reference, mixprec::dtype::float16) << '\n';
  const t5_plans plans = calibrate_plans(reference_model, calibration, plan_options);
  out << "float16 residual-scale plan of the trained model (calibrated in float32 on " << calibration.size()
      << " training batches):\nencoder " << plans.encoder << "decoder " << plans.decoder << '\n';
  std::vector<variant> trained;
  trained.push_back(compare<bf16_policy>("c=bf16", reference_model, batches, reference));
  trained.push_back(compare<f16_policy>("c=f16", reference_model, batches, reference));
  trained.push_back(compare<f16_out_policy>("c=f16,o=f16", reference_model, batches, reference));
  trained.push_back(compare<f16_out_policy>("c=f16,o=f16+plan", reference_model, batches, reference, &plans));
  out << "the trained model against float32 (p=f32 throughout; o=f32 unless given):\n";
  print_table(out, reference, trained);

  // 2. The stress test: block l's w2 times G^l, in every stack.
  const double growth = settings.growth ? *settings.growth : overflowing_growth(config, reference);
  t5_model<f32_policy> grown = reference_model;
  grown.grow_feed_forward_outputs(growth);
  const dg::recording_probe grown_reference = record(grown, batches);
  out << "\nstress test: the feed-forward out-projection of block l times G^l, G = " << growth
      << (settings.growth ? "" : " (the smallest power of two whose outputs leave float16's range)")
      << "; float32 run, headroom to float16's largest value:\n"
      << dg::to_string(grown_reference, mixprec::dtype::float16) << '\n';
  const t5_plans grown_plans = calibrate_plans(grown, calibration, plan_options);
  out << "its float16 residual-scale plan:\nencoder " << grown_plans.encoder << "decoder " << grown_plans.decoder
      << '\n';
  std::vector<variant> stressed;
  stressed.push_back(compare<f16_policy>("c=f16", grown, batches, grown_reference));
  stressed.push_back(compare<f16_out_policy>("c=f16,o=f16", grown, batches, grown_reference));
  stressed.push_back(compare<f16_out_policy>("c=f16,o=f16+plan", grown, batches, grown_reference, &grown_plans));
  out << "the grown model against its float32 run:\n";
  print_table(out, grown_reference, stressed);

  const bool planned_finite =
      !trained.back().report.first_nonfinite_site.has_value() && !stressed.back().report.first_nonfinite_site;
  const bool unplanned_overflows = stressed[1].report.first_nonfinite_site.has_value();
  out << "\n"
      << (planned_finite && unplanned_overflows
              ? "the plan keeps float16 outputs finite where they overflow without it.\n"
              : "UNEXPECTED: the planned float16 runs are not all finite, or the unplanned stress test stayed "
                "finite.\n");
  return planned_finite && unplanned_overflows ? 0 : 1;
}

}  // namespace t5_example
