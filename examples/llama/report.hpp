/// \file
/// \brief What `mixprec-llama` computes and prints for each policy: the free-running generation (timed),
/// the teacher-forced replay of the reference's tokens with every probe site recorded, the parity of each
/// policy against the reference, a summary table, and the SVG chart of the per-site error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <mixprec/diagnostics/parity.hpp>
#include <mixprec/diagnostics/recording_probe.hpp>
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/formats/finfo.hpp>
#include <mixprec/formats/float16.hpp>
#include <mixprec/policies/runtime_policy.hpp>

#include "cli.hpp"
#include "generation.hpp"
#include "llama2c_checkpoint.hpp"
#include "policy_run.hpp"
#include "svg_plot.hpp"

namespace llama {

/// Runs `policy` on the checkpoint (see `run_policy_as`), dispatched through `mixprec::visit` to the
/// compile-time `policy<P, C, O>` of its dtypes (any of the 64 over f32, f64, bf16, f16).
/// \throws std::invalid_argument if a dtype is not one of those four; whatever `run_policy_as` throws.
[[nodiscard]] inline policy_run run_policy(const mixprec::runtime_policy& policy, const llama2c::checkpoint& ck,
                                           const options& o, const std::vector<int>* replay_inputs) {
  return mixprec::visit(policy, [&]<class P>(P) { return run_policy_as<P>(ck, o, replay_inputs); });
}

/// The reference run and one run per policy of the command line, in command-line order (a policy equal
/// to the reference gets a copy of the reference's run).
struct comparison {
  policy_run reference;
  std::vector<policy_run> runs;

  /// Whether `run` is the reference policy.
  [[nodiscard]] bool is_reference(const policy_run& run) const noexcept { return run.policy == reference.policy; }
};

/// Runs the reference (replaying its own inputs) and every other policy of `o` (replaying the reference's).
[[nodiscard]] inline comparison run_comparison(const llama2c::checkpoint& ck, const options& o) {
  comparison c;
  const std::vector<int> own_inputs;
  c.reference = run_policy(o.reference.policy, ck, o, &own_inputs);
  c.runs.reserve(o.policies.size());
  for (const policy_arg& p : o.policies) {
    c.runs.push_back(p.policy == o.reference.policy ? c.reference
                                                    : run_policy(p.policy, ck, o, &c.reference.free.inputs));
  }
  return c;
}

namespace detail {

/// printf-style formatting into a std::string.
template <class... Args>
[[nodiscard]] std::string format(const char* fmt, Args... args) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

/// Columns padded to their widest cell (first column left-aligned, the others right-aligned), with a
/// dashed rule under the header.
[[nodiscard]] inline std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t j = 0; j < row.size(); ++j) width[j] = std::max(width[j], row[j].size());
  }
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t j = 0; j < rows[r].size(); ++j) {
      const std::string& cell = rows[r][j];
      const std::string pad(width[j] - cell.size(), ' ');
      out += j == 0 ? cell + pad : "  " + pad + cell;
    }
    out += '\n';
    if (r == 0) {
      for (std::size_t j = 0; j < width.size(); ++j) out += (j == 0 ? "" : "  ") + std::string(width[j], '-');
      out += '\n';
    }
  }
  return out;
}

}  // namespace detail

/// Index of p99.9 in `mixprec::diagnostics::parity_quantile_levels` (the quantile the summary and the chart
/// show).
inline constexpr std::size_t p999_index = [] {
  std::size_t i = 0;
  while (i < mixprec::diagnostics::parity_quantile_levels.size() &&
         mixprec::diagnostics::parity_quantile_levels[i] != mixprec::diagnostics::quantile_level{999, 1000}) {
    ++i;
  }
  return i;
}();
static_assert(p999_index < mixprec::diagnostics::parity_quantile_levels.size(),
              "parity reports no longer include p99.9: pick another quantile for the summary and the chart.");

/// The unit roundoff (eps / 2, from `finfo`) of the compute dtypes the example runs: float32, float64,
/// bfloat16, float16.
[[nodiscard]] inline double unit_roundoff(mixprec::dtype d) {
  switch (d) {
    case mixprec::dtype::float32: return mixprec::finfo<float>::eps / 2;
    case mixprec::dtype::float64: return mixprec::finfo<double>::eps / 2;
    case mixprec::dtype::bfloat16: return static_cast<double>(mixprec::finfo<mixprec::bfloat16>::eps) / 2;
    case mixprec::dtype::float16: return static_cast<double>(mixprec::finfo<mixprec::float16>::eps) / 2;
    default: break;
  }
  throw std::invalid_argument("llama::unit_roundoff: the example runs f32, f64, bf16 and f16 compute only");
}

/// The parity of `run`'s replay against the reference's (labels: the policies' names), with errors also
/// in units of the run's compute dtype's unit roundoff.
[[nodiscard]] inline mixprec::diagnostics::parity_report parity(const policy_run& run, const policy_run& reference) {
  return mixprec::diagnostics::compare_runs(
      run.replay, reference.replay,
      {.label_a = run.name, .label_b = reference.name, .unit_roundoff = unit_roundoff(run.policy.compute)});
}

/// The summary table: per policy, how many generated tokens equal the reference's before the first
/// divergence, the logits' max |a-b| and p99.9 against the reference (teacher-forced), the largest
/// max |a-b| of the residual stream, the first non-finite site, and tokens per second.
[[nodiscard]] inline std::string summary(const comparison& c) {
  std::vector<std::vector<std::string>> rows{{"policy", "tokens = " + c.reference.name, "logits max|a-b|",
                                              "logits p99.9", "residual max|a-b|", "first non-finite", "tokens/s"}};
  const std::size_t n_ref = c.reference.free.tokens.size();
  for (const policy_run& run : c.runs) {
    std::vector<std::string> row{run.name};
    const std::size_t same = common_prefix(run.free.tokens, c.reference.free.tokens);
    const bool identical = same == n_ref && run.free.tokens.size() == n_ref;
    row.push_back(std::to_string(same) + "/" + std::to_string(n_ref) + (identical ? " (all)" : ""));
    if (c.is_reference(run)) {
      row.insert(row.end(), {"(reference)", "", "", ""});
    } else {
      const auto report = parity(run, c.reference);
      const auto& logits = report.at("logits");
      double residual = 0;
      for (const auto& s : report.sites) {
        if (s.site.find("residual") != std::string::npos) residual = std::max(residual, s.max_abs_diff);
      }
      row.push_back(detail::format("%.3e", logits.max_abs_diff));
      row.push_back(detail::format("%.3e", logits.abs_diff_quantiles[p999_index]));
      row.push_back(detail::format("%.3e", residual));
      row.push_back(report.first_nonfinite_site_or_none());
    }
    row.push_back(detail::format("%.0f", run.free.tokens_per_second()));
    rows.push_back(std::move(row));
  }
  return detail::table(rows);
}

/// The step at which the reference's top two logits were closest (its most fragile greedy choice), and
/// their gap; nothing when the reference recorded no logits.
struct closest_call {
  std::size_t step = 0;  ///< 0-based decoding step (position)
  double gap = 0.0;      ///< largest logit minus the second largest
};

/// See `closest_call`: read from the reference's recorded "logits" site ([steps, vocab] values).
[[nodiscard]] inline std::optional<closest_call> closest_greedy_call(const policy_run& reference, std::size_t vocab) {
  const auto* site = reference.replay.find("logits");
  if (site == nullptr || vocab < 2 || site->values.size() < vocab) return std::nullopt;
  std::optional<closest_call> best;
  for (std::size_t step = 0; step * vocab + vocab <= site->values.size(); ++step) {
    const auto first = site->values.begin() + static_cast<std::ptrdiff_t>(step * vocab);
    std::vector<double> row(first, first + static_cast<std::ptrdiff_t>(vocab));
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
    const double gap = row[0] - row[1];
    if (!best || gap < best->gap) best = closest_call{step, gap};
  }
  return best;
}

/// The SVG chart: x = the probe sites in execution order, two panels (log10 of max |a-b| and of the
/// p99.9 of |a-b| against the reference), one coloured line per policy other than the reference.
/// \throws std::invalid_argument when no policy other than the reference ran.
[[nodiscard]] inline std::string plot(const comparison& c) {
  std::vector<std::string> sites;
  for (const auto& s : c.reference.replay.sites()) sites.push_back(s.name);
  svg::panel max_panel{"max |a - b|  (log scale)", {}}, q_panel{"p99.9 of |a - b|  (log scale)", {}};
  for (const policy_run& run : c.runs) {
    if (c.is_reference(run)) continue;
    const auto report = parity(run, c.reference);
    svg::series max_series{run.name, {}}, q_series{run.name, {}};
    for (const auto& site : sites) {
      max_series.values.push_back(report.at(site).max_abs_diff);
      q_series.values.push_back(report.at(site).abs_diff_quantiles[p999_index]);
    }
    max_panel.lines.push_back(std::move(max_series));
    q_panel.lines.push_back(std::move(q_series));
  }
  if (max_panel.lines.empty()) {
    throw std::invalid_argument("--plot: no policy other than the reference (" + c.reference.name +
                                ") ran; nothing to compare");
  }
  return svg::line_chart("stories260K: error per site against " + c.reference.name,
                         "every element of each site over " + std::to_string(c.reference.free.inputs.size()) +
                             " decoding steps, each policy fed " + c.reference.name +
                             "'s tokens (teacher-forced); hollow marker on 0 = bit-identical",
                         sites, {max_panel, q_panel}, "probe site (execution order)");
}

/// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
[[nodiscard]] inline std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      if (const auto colon = line.find(':'); colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  }
  return "unknown CPU";
}

}  // namespace llama
