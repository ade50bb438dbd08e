/// \file
/// \brief The float16 scale planner: from a calibration run recorded by a `recording_probe`, choose
/// power-of-two residual scales and out-projection scales for a pre-norm residual model, so that the
/// tensors it stores in float16 (or another narrow format) stay finite with a chosen headroom, and say
/// per block what was chosen and why (`plan_residual_scales`, `residual_scale_plan`). Core header: no
/// Eigen, no xtensor.
///
/// **The rule** (the float16 T5 encoder work: NovelAI's t5 README "Float16 considerations" and
/// nai_t5/scripts/t5_encoder_precision_parity.py; docs/diagnostics.md). A pre-norm block adds the
/// outputs of its out-projections (attention `wo`, feed-forward `w2`) to the residual stream, and
/// every norm reads the stream. If block l's out-projection kernels and biases are multiplied by a
/// power of two S_l, its outputs shrink by S_l exactly, and the stream stays proportional to the
/// unscaled one when it carries the same factor: the fused norm that opens block l multiplies the
/// stream by `residual_scale` = S_l / S_(l-1) (`nn::rms_norm_options::residual_scale`), and RMSNorm is
/// invariant to that factor except through epsilon, which must carry the *square* of the stream's
/// factor: rmsnorm(s x; s^2 eps) = rmsnorm(x; eps) exactly (nn/rms_norm.hpp explains why NovelAI's
/// eps × s is only close). Applied to a block ln1 → attention → ln2 → feed-forward, the plan of block
/// l means, at load time:
///
///     ln1:   residual_scale = S_l / S_(l-1)   epsilon = eps * S_(l-1)^2   (it normalises the stream at S_(l-1))
///     wo, w2 kernels and biases *= S_l                                   (outputs now at S_l)
///     ln2:   epsilon = eps * S_l^2                                        (it normalises the stream at S_l)
///     final norm: epsilon = eps * S_last^2
///
/// with S_(-1) = 1 (the first ln1 takes `nn::no_residual`: the stream starts as the unscaled input).
/// `residual_block_plan` gives each of these numbers. Every factor is a power of two, so the weights
/// (float32 masters) and the stream (float32) are scaled exactly; the model is the same function, up
/// to the roundings of the narrow format, which now sees its values inside its range.
///
/// **The choice.** S_l is the largest power of two, at most 1, that brings the largest magnitude of
/// block l's out-projection outputs in the calibration run to at most `limit` = (the format's largest
/// finite value) / 2^headroom_bits. The calibration must not overflow itself (run it in float32:
/// non-finite calibration values are refused). Where the T5 work carries one cumulative scale that
/// only shrinks (`scale_schedule::non_increasing`), the default `scale_schedule::per_block` lets a
/// later block whose outputs are small take its bits back (S may grow again; the stream is float32, so
/// a factor above 1 is as exact as one below): fewer of its float16 outputs fall into subnormals.
/// Sites inside a block that come before its out-projection (the feed-forward's hidden activation,
/// attention's context) are computed from a normalised input and no residual scale reaches them; if
/// one exceeds the limit, the plan says so (`fits` false, the site in `problems`), so that a user
/// scales those projections, or runs that block wider, instead of trusting a plan that cannot work.
/// A block scale below float's smallest normal (outputs beyond about 2^126 times the limit) is a
/// problem too: the float32 weights and stream would lose precision.
///
/// **Example** (a pre-norm encoder whose layers are probed as `layers.<l>.attention` and
/// `layers.<l>.ffn`; examples/fp16_plan is the whole program):
///
///     diagnostics::recording_probe calibration;
///     f32_model(x, calibration);                                   // policy p=f32,c=f32,o=f32
///     std::vector<diagnostics::residual_block_sites> blocks;
///     for (std::size_t l = 0; l < n_layers; ++l)
///       blocks.push_back(diagnostics::pre_norm_block_sites("layers." + std::to_string(l)));
///     const auto plan = diagnostics::plan_residual_scales(calibration, blocks, {.headroom_bits = 2});
///     std::cout << plan;                                           // per block: scale, why
///     auto f16_model = load<policy<float, float16, float16>>(weights, plan);   // applies the table above
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/diagnostics/detail/text_table.hpp"
#include "mixprec/diagnostics/recording_probe.hpp"
#include "mixprec/diagnostics/tensor_stats.hpp"
#include "mixprec/dtypes/dtype.hpp"

namespace mixprec::diagnostics {

namespace detail {
using internal::concat;

/// "1" or "2^e".
[[nodiscard]] inline std::string power_of_two(int e) { return e == 0 ? std::string("1") : internal::concat("2^", e); }

}  // namespace detail

/// The probe sites of one residual block that a plan reads (names as passed to `observe`).
struct residual_block_sites {
  /// The block's name in the plan and its report ("layers.3").
  std::string name;
  /// Sites whose values are added to the residual stream: the block's out-projection outputs
  /// ("layers.3.attention.out", "layers.3.ffn.out"). The plan scales them by the block's scale. At
  /// least one.
  std::vector<std::string> outputs;
  /// Sites inside the block that no residual scale reaches (computed from a normalised input:
  /// "layers.3.ffn.hidden", "layers.3.attention.context"): checked against the limit only.
  std::vector<std::string> internal{};
};

/// The sites of a pre-norm block built from the library's layers and probed through their probed
/// calls, `attention(x, key_mask, probe, block + "." + attention)` and `feed_forward(x, probe, block +
/// "." + ffn)`: outputs `<block>.<attention>.out` and `<block>.<ffn>.out`, internal
/// `<block>.<attention>.context` and `<block>.<ffn>.hidden`.
[[nodiscard]] inline residual_block_sites pre_norm_block_sites(const std::string& block,
                                                               const std::string& attention = "attention",
                                                               const std::string& ffn = "ffn") {
  const std::string a = block + "." + attention;
  const std::string f = block + "." + ffn;
  return {block, {a + ".out", f + ".out"}, {a + ".context", f + ".hidden"}};
}

/// How the block scales of a plan relate to each other.
enum class scale_schedule : unsigned char {
  per_block,       ///< each block its own largest fitting power of two (the stream factor may grow again)
  non_increasing,  ///< the T5 work's cumulative scale: a block never gets more than the previous one
};

/// Options of `plan_residual_scales`.
struct residual_scale_options {
  /// The narrow format the outputs are stored in; its largest finite value bounds them. A floating
  /// dtype with a finite largest value (float16, bfloat16, a float8...).
  dtype format = dtype::float16;
  /// Binades kept free below the format's largest value: outputs are brought to at most
  /// max / 2^headroom_bits (2: a quarter of 65504 for float16, room for inputs larger than the
  /// calibration's and for the narrow run's rounding). Finite and >= 0.
  double headroom_bits = 2.0;
  /// Per block, or non-increasing as in the T5 work.
  scale_schedule schedule = scale_schedule::per_block;
};

/// The plan of one block: its scale S_l = 2^exponent, what it was chosen from, and the numbers to
/// apply at load time (file comment).
struct residual_block_plan {
  /// `residual_block_sites::name`.
  std::string name;
  /// The output site with the largest calibration magnitude, and that magnitude (unscaled).
  std::string worst_output;
  double output_absmax = 0.0;
  /// The internal site with the largest calibration magnitude (empty if none), and that magnitude.
  std::string worst_internal;
  double internal_absmax = 0.0;
  /// log2 of the block's scale (<= 0).
  int exponent = 0;
  /// S_l = 2^exponent: the factor of the block's out-projection kernels and biases, and of the
  /// residual stream within the block.
  double scale = 1.0;
  /// S_(l-1): the stream's factor entering the block (1 for the first block).
  double input_scale = 1.0;
  /// Why this scale (one sentence, with the numbers).
  std::string reason;

  /// The residual scale of the fused norm that opens the block: S_l / S_(l-1) (exact: powers of two).
  [[nodiscard]] double residual_scale() const noexcept { return scale / input_scale; }
  /// Epsilon of the norm that opens the block (it reads the stream at S_(l-1)): eps × S_(l-1)^2.
  [[nodiscard]] double opening_norm_epsilon(double epsilon) const noexcept {
    return epsilon * input_scale * input_scale;
  }
  /// Epsilon of a norm inside the block (it reads the stream at S_l): eps × S_l^2.
  [[nodiscard]] double inner_norm_epsilon(double epsilon) const noexcept { return epsilon * scale * scale; }
  /// The largest output magnitude after scaling: output_absmax × S_l.
  [[nodiscard]] double scaled_output_absmax() const noexcept { return output_absmax * scale; }
};

/// A float16 scale plan: one `residual_block_plan` per block, in order, and whether it keeps every
/// planned site under the limit.
struct residual_scale_plan {
  /// The options it was made with.
  residual_scale_options options;
  /// The bound of every scaled output: format max / 2^headroom_bits.
  double limit = 0.0;
  /// One entry per block, in the order given.
  std::vector<residual_block_plan> blocks;
  /// True when every scaled output and every internal site is at most `limit` in the calibration.
  bool fits = true;
  /// The sites that exceed the limit whatever the scales (internal sites), one sentence each.
  std::vector<std::string> problems;

  /// The stream's factor after the last block (1 for an empty plan): the final norm's epsilon is
  /// eps × final_scale()^2.
  [[nodiscard]] double final_scale() const noexcept { return blocks.empty() ? 1.0 : blocks.back().scale; }
  /// Epsilon of the norm after the last block: eps × final_scale()^2.
  [[nodiscard]] double final_norm_epsilon(double epsilon) const noexcept {
    return epsilon * final_scale() * final_scale();
  }

  /// The plan as an aligned table (block, scale, residual scale, largest output before and after,
  /// largest internal site, reason), then the problems.
  friend std::ostream& operator<<(std::ostream& os, const residual_scale_plan& plan) {
    using detail::alignment;
    using detail::format_scientific;
    std::vector<std::vector<std::string>> rows;
    for (const auto& b : plan.blocks) {
      rows.push_back({b.name, detail::power_of_two(b.exponent), format_scientific(b.residual_scale()),
                      format_scientific(b.output_absmax), format_scientific(b.scaled_output_absmax()),
                      b.worst_internal.empty() ? "-" : format_scientific(b.internal_absmax), b.reason});
    }
    os << "residual scale plan for " << name(plan.options.format) << ": outputs at most "
       << format_scientific(plan.limit) << " (largest finite / 2^" << plan.options.headroom_bits << ")\n"
       << detail::render_table({{"block", alignment::left},
                                {"scale", alignment::right},
                                {"residual scale", alignment::right},
                                {"output max", alignment::right},
                                {"scaled", alignment::right},
                                {"internal max", alignment::right},
                                {"why", alignment::left}},
                               rows);
    for (const auto& p : plan.problems) os << "problem: " << p << '\n';
    return os;
  }
};

namespace detail {

/// The largest integer e <= 0 with value × 2^e <= limit (0 for value <= limit); value and limit
/// finite, limit a positive normal double. From the binary exponents (no log2 rounding), then
/// corrected by one step either way.
[[nodiscard]] inline int fitting_exponent(double value, double limit) {
  if (value <= limit) return 0;
  int value_exponent = 0, limit_exponent = 0;
  (void)std::frexp(value, &value_exponent);
  (void)std::frexp(limit, &limit_exponent);
  int e = limit_exponent - value_exponent;  // within one of the answer
  while (std::ldexp(value, e) > limit) --e;
  while (std::ldexp(value, e + 1) <= limit) ++e;
  return std::min(e, 0);
}

/// The largest calibration magnitude over `sites` and the site that holds it. \throws as
/// `plan_residual_scales`.
[[nodiscard]] inline std::pair<std::string, double> largest_site(const recording_probe& calibration,
                                                                 const std::vector<std::string>& sites,
                                                                 const std::string& block) {
  std::pair<std::string, double> worst{"", 0.0};
  for (const auto& name : sites) {
    const site_record* record = calibration.find(name);
    if (record == nullptr) {
      throw std::invalid_argument(
          internal::concat("plan_residual_scales: block ", block, " names the site \"", name,
                           "\", which the calibration run never observed; probe it (the layers' "
                           "probed calls observe <site>.out, .hidden, .context) or fix the name."));
    }
    const tensor_stats& s = record->stats;
    if (s.nan_count() != 0 || s.inf_count() != 0) {
      throw std::invalid_argument(internal::concat("plan_residual_scales: the calibration values at \"", name,
                                                   "\" are not finite (", s.nan_count(), " NaN, ", s.inf_count(),
                                                   " Inf): the calibration run overflowed; record it in float32."));
    }
    if (worst.first.empty() || s.absmax() > worst.second) worst = {name, s.absmax()};
  }
  return worst;
}

}  // namespace detail

/// Chooses the power-of-two block scales of a pre-norm residual model from a calibration run
/// (file comment: the rule, how to apply it, the schedule).
///
/// - `calibration`: a recording of the model's forward pass on calibration input, in float32 (or
///   any run that did not overflow), with every site named by `blocks`.
/// - `blocks`: the model's residual blocks in execution order.
///
/// \throws std::invalid_argument when a block has no output site, a named site was not observed, a
///         calibration value is NaN or Inf, the format is not a real floating dtype, or the headroom is
///         negative, not finite, or so large that no range is left. Each message says which.
[[nodiscard]] inline residual_scale_plan plan_residual_scales(const recording_probe& calibration,
                                                              std::span<const residual_block_sites> blocks,
                                                              const residual_scale_options& options = {}) {
  if (!std::isfinite(options.headroom_bits) || options.headroom_bits < 0.0) {
    throw std::invalid_argument(internal::concat("plan_residual_scales: headroom_bits must be finite and >= 0, got ",
                                                 detail::format_scientific(options.headroom_bits), "."));
  }
  if (const auto f = static_cast<std::size_t>(options.format); f >= dtype_count || detail::format_max_table[f] == 0.0) {
    throw std::invalid_argument(internal::concat("plan_residual_scales: the format ", name(options.format),
                                                 " is not a real floating dtype; plan for a narrow float such as "
                                                 "float16."));
  }
  residual_scale_plan plan;
  plan.options = options;
  plan.limit = format_max(options.format) / std::exp2(options.headroom_bits);
  if (!(plan.limit >= std::numeric_limits<double>::min())) {
    throw std::invalid_argument(internal::concat(
        "plan_residual_scales: headroom_bits ", detail::format_scientific(options.headroom_bits), " leaves ",
        name(options.format), " no range (limit ", detail::format_scientific(plan.limit), "); use a few bits."));
  }
  const auto number = [](double v) { return detail::format_scientific(v); };
  double input_scale = 1.0;
  int previous_exponent = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const residual_block_sites& sites = blocks[i];
    if (sites.outputs.empty()) {
      throw std::invalid_argument(
          internal::concat("plan_residual_scales: block ", sites.name,
                           " has no output site; name the sites its out-projections write to the "
                           "stream."));
    }
    residual_block_plan b;
    b.name = sites.name;
    std::tie(b.worst_output, b.output_absmax) = detail::largest_site(calibration, sites.outputs, sites.name);
    std::tie(b.worst_internal, b.internal_absmax) = detail::largest_site(calibration, sites.internal, sites.name);
    const int fitting = detail::fitting_exponent(b.output_absmax, plan.limit);
    const bool capped = options.schedule == scale_schedule::non_increasing && i > 0 && previous_exponent < fitting;
    b.exponent = capped ? previous_exponent : fitting;
    b.scale = std::ldexp(1.0, b.exponent);
    b.input_scale = input_scale;
    if (capped) {
      b.reason = internal::concat("kept the previous block's scale (non-increasing schedule); ", b.worst_output,
                                  " alone fits at ", detail::power_of_two(fitting));
    } else if (b.exponent == 0) {
      b.reason = internal::concat(b.worst_output, " reaches ", number(b.output_absmax), " <= limit: unscaled");
    } else {
      b.reason = internal::concat(b.worst_output, " reaches ", number(b.output_absmax),
                                  " > limit: the largest power of two that fits");
    }
    if (b.scale < static_cast<double>(std::numeric_limits<float>::min())) {
      plan.fits = false;
      plan.problems.push_back(internal::concat(
          b.name, ": its scale ", detail::power_of_two(b.exponent),
          " is below float's smallest normal 2^-126: the float32 weights and stream it scales lose their "
          "precision, and epsilon times its square underflows; this model's outputs (",
          number(b.output_absmax), ") are beyond what residual scaling can bring into ", name(options.format), "."));
    }
    if (b.internal_absmax > plan.limit) {
      plan.fits = false;
      plan.problems.push_back(
          internal::concat(b.worst_internal, " reaches ", number(b.internal_absmax), " > limit ", number(plan.limit),
                           ": it precedes the out-projection, so no residual scale reaches it; scale "
                           "that projection's input weights or run the block in float32."));
    }
    input_scale = b.scale;
    previous_exponent = b.exponent;
    plan.blocks.push_back(std::move(b));
  }
  return plan;
}

}  // namespace mixprec::diagnostics
