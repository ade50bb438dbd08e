/// \file
/// \brief The definition of `llama::run_policy_as` (declared in policy_run.hpp). Included only by the
/// translation units that instantiate it (generated from policies.cpp.in).
#pragma once

#include <utility>
#include <vector>

#include <mixprec/policies/runtime_policy.hpp>

#include "generate.hpp"
#include "model.hpp"
#include "policy_run.hpp"
#include "sampler.hpp"

namespace llama {

template <class P>
policy_run run_policy_as(const llama2c::checkpoint& ck, const options& o, const std::vector<int>* replay_inputs) {
  policy_run run;
  run.policy = mixprec::to_runtime_policy(P{});
  run.name = label(run.policy);
  model<P> m(ck);
  // The fastest of o.repeats identical generations (a fresh sampler each time: same tokens), so that a
  // busy machine disturbs the tokens/s figure less.
  for (int r = 0; r < o.repeats; ++r) {
    llama2c::sampler sampler(o.temperature, o.topp, o.seed);
    generation g = generate(m, o.steps, sampler);
    if (r == 0 || g.seconds < run.free.seconds) run.free = std::move(g);
  }
  if (replay_inputs != nullptr) {
    const std::vector<int>& inputs = replay_inputs->empty() ? run.free.inputs : *replay_inputs;
    static_cast<void>(teacher_force(m, inputs, run.replay));
  }
  return run;
}

}  // namespace llama
