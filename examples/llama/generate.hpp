/// \file
/// \brief Text generation with a `llama::model` as llama2.c's run.c `generate` does it (start from BOS,
/// feed each chosen token back, stop after `steps` forward passes or when BOS comes out), and
/// teacher-forced replay of a recorded token sequence, for parity comparisons between policies.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <mixprec/diagnostics/probe.hpp>

#include "generation.hpp"
#include "llama2c_tokenizer.hpp"
#include "model.hpp"
#include "sampler.hpp"

namespace llama {

/// The logits of a model as float32, the type llama2.c's sampler works in (exact for float32, bfloat16
/// and float16 logits; float64 logits are rounded to nearest), written into `out` (resized to the
/// logits' size: no allocation when it already is).
template <class T>
void to_float(const xt::xtensor<T, 1>& logits, std::vector<float>& out) {
  out.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits.data()[i]);
}

/// The logits as float32 in a new vector (see the form above).
template <class T>
[[nodiscard]] std::vector<float> to_float(const xt::xtensor<T, 1>& logits) {
  std::vector<float> out(logits.size());
  to_float(logits, out);
  return out;
}

/// Generates up to `steps` tokens from BOS at position 0 (run.c `generate` with an empty prompt):
/// each forward pass's logits go to `sampler` (greedy at temperature 0), the chosen token is fed back,
/// and generation stops early when the sampler picks BOS (run.c's "BOS delimits sequences").
/// The model is `reset()` first. Every forward pass is observed by `probe`. The loop reuses its logits
/// buffers, so with the null probe a step after the first allocates nothing (tests/llama/allocation_test.cpp).
/// \throws std::invalid_argument when `steps` is not in [1, seq_len]; whatever `forward` or the sampler
///   throws (std::domain_error for NaN logits).
template <class P, mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
generation generate(model<P>& m, int steps, llama2c::sampler& sampler, Probe&& probe = {}) {
  if (steps < 1 || steps > m.config().seq_len) {
    throw std::invalid_argument("llama::generate: steps = " + std::to_string(steps) + " must be in [1, " +
                                std::to_string(m.config().seq_len) + "] (the model's seq_len)");
  }
  m.reset();
  generation out;
  out.tokens.reserve(static_cast<std::size_t>(steps));
  out.inputs.reserve(static_cast<std::size_t>(steps));
  const auto start = std::chrono::steady_clock::now();
  auto logits = model<P>::logits_type::from_shape({static_cast<std::size_t>(m.config().vocab_size)});
  std::vector<float> logits_f32(logits.size());
  int token = llama2c::tokenizer::bos;
  for (int pos = 0; pos < steps; ++pos) {
    out.inputs.push_back(token);
    m.forward_into(logits, token, probe);
    to_float(logits, logits_f32);
    const int next = sampler.sample(logits_f32);
    if (next == llama2c::tokenizer::bos) break;
    out.tokens.push_back(next);
    token = next;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

/// Runs the model over `inputs` (positions 0, 1, ...) regardless of what it predicts ("teacher
/// forcing"), so that two policies see the same tokens and their probe sites align step by step.
/// The model is `reset()` first. Returns the logits of the last step (empty when `inputs` is empty).
/// \throws std::invalid_argument when there are more inputs than seq_len; whatever `forward` throws.
template <class P, mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
typename model<P>::logits_type teacher_force(model<P>& m, std::span<const int> inputs, Probe&& probe = {}) {
  if (inputs.size() > static_cast<std::size_t>(m.config().seq_len)) {
    throw std::invalid_argument("llama::teacher_force: " + std::to_string(inputs.size()) +
                                " tokens exceed the model's seq_len " + std::to_string(m.config().seq_len));
  }
  m.reset();
  typename model<P>::logits_type logits;
  for (const int token : inputs) logits = m.forward(token, probe);
  return logits;
}

}  // namespace llama
