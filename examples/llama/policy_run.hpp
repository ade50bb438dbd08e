/// \file
/// \brief `llama::policy_run`, what `mixprec-llama` computes for one policy (a timed free-running
/// generation and a teacher-forced replay with every probe site recorded), and `run_policy_as<P>`, which
/// computes it for the compile-time policy `P`.
///
/// `run_policy_as` is only declared here: its definition (policy_run_impl.hpp) is compiled in four
/// translation units, one per parameter dtype, each instantiating it for 16 policies (CMake generates them
/// from policies.cpp.in). So the 64 policies `mixprec::visit` dispatches are compiled in parallel, and the
/// code that only dispatches and reports (main.cpp) does not compile the layers at all.
#pragma once

#include <string>
#include <vector>

#include <mixprec/diagnostics/recording_probe.hpp>
#include <mixprec/dtypes/dtype.hpp>
#include <mixprec/policies/runtime_policy.hpp>

#include "cli.hpp"
#include "generation.hpp"
#include "llama2c_checkpoint.hpp"

namespace llama {

/// The short jmp name of the four dtypes `visit` dispatches ("f32", "f64", "bf16", "f16").
[[nodiscard]] inline std::string short_name(mixprec::dtype d) {
  switch (d) {
    case mixprec::dtype::float32: return "f32";
    case mixprec::dtype::float64: return "f64";
    case mixprec::dtype::bfloat16: return "bf16";
    case mixprec::dtype::float16: return "f16";
    default: return std::string(mixprec::name(d));
  }
}

/// "bf16" when the three dtypes agree, else the canonical "p=f32,c=bf16,o=f32".
[[nodiscard]] inline std::string label(const mixprec::runtime_policy& p) {
  if (p.param == p.compute && p.compute == p.output) return short_name(p.param);
  return "p=" + short_name(p.param) + ",c=" + short_name(p.compute) + ",o=" + short_name(p.output);
}

/// What one policy produced.
struct policy_run {
  mixprec::runtime_policy policy;  ///< the policy
  std::string name;                ///< `label(policy)`
  generation free;                 ///< free-running generation (sampler from the command line), timed
  /// Every probe site of the teacher-forced replay (values kept); empty when no replay was asked for.
  mixprec::diagnostics::recording_probe replay{mixprec::diagnostics::capture::values};
};

/// Runs `llama::model<P>` on the checkpoint: a free-running generation of `o.steps` forward passes with
/// the sampler settings of `o`, timed with std::chrono::steady_clock, without probe, `o.repeats` times
/// (the fastest is kept; every repeat generates the same tokens); then, unless
/// `replay_inputs` is null, a teacher-forced replay recording every probe site: of `*replay_inputs`, or of
/// the run's own inputs when `*replay_inputs` is empty.
/// \throws std::invalid_argument when o.steps exceeds the model's seq_len or the checkpoint has an untied
///   classifier; std::domain_error when the logits hold a NaN (from the sampler).
template <class P>
[[nodiscard]] policy_run run_policy_as(const llama2c::checkpoint& ck, const options& o,
                                       const std::vector<int>* replay_inputs);

}  // namespace llama
