/// \file
/// \brief The training run of the t5 example under one policy (`train_policy<P>`, declared in runs.hpp)
/// and the evaluation it reports: teacher-forced validation loss and token accuracy, and the exact-match
/// accuracy of greedy decoding with the key/value caches.
///
/// Step order (PyTorch AMP, jmp, Micikevicius et al. §3.2; docs/training.md): sample a batch → forward
/// (teacher forcing) → fused float32 cross-entropy, its gradient seeded with S / N (S the loss scale, N
/// the batch's targets; padding targets ignored) → backward → `train::scaled_step`: unscale the float32
/// gradients in place, check they are finite, adjust S, then clip and step AdamW, or skip the step and
/// count it. Float16 compute uses jmp's dynamic loss scale; float32 and bfloat16 none (a non-finite
/// step is still skipped).
///
/// Include this header in the translation unit that instantiates `train_policy<P>` for one policy
/// (train_f32.cpp, ...): each policy instantiates the whole model, forward and backward.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iomanip>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/diagnostics/residual_scale_plan.hpp"
#include "mixprec/formats/float16.hpp"
#include "mixprec/kernels/threads.hpp"
#include "mixprec/nn/cross_entropy.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/runtime_policy.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/lr_schedule.hpp"
#include "mixprec/train/scaled_step.hpp"
#include "model.hpp"
#include "model_io.hpp"
#include "reversal_data.hpp"
#include "runs.hpp"

namespace t5_example {

/// What `evaluate` measures over a set of chunks.
struct eval_result {
  double loss = 0;                    ///< teacher-forced mean cross-entropy per target
  double token_accuracy = 0;          ///< teacher-forced argmax == target, over the targets
  double exact_match = 0;             ///< greedy decodings equal to the reversed chunk and eos (when decoded)
  std::size_t chunks = 0;             ///< chunks evaluated
  std::size_t exact = 0;              ///< of them, decoded exactly
  std::size_t decode_mismatches = 0;  ///< decodings that a teacher-forced pass disagrees with (when checked)
  /// A few (chunk, greedy decoding) pairs, when decoded.
  std::vector<std::pair<std::string, std::string>> samples;
};

/// The index of the largest of `n` values at `z` (the first on ties).
template <class T>
[[nodiscard]] std::int32_t argmax(const T* z, std::size_t n) {
  return static_cast<std::int32_t>(std::max_element(z, z + n) - z);
}

/// The rows of `decoded` (greedy decodings of batch `b`) whose ids a teacher-forced pass over
/// [bos, decoded ids...] does not reproduce as its argmax at every position.
template <class P>
std::size_t decoding_mismatches(const t5_model<P>& model, const seq2seq_batch& b,
                                const std::vector<std::vector<std::int32_t>>& decoded) {
  const std::size_t vocab = model.config().vocab;
  std::size_t longest = 1;
  for (const auto& d : decoded) longest = std::max(longest, d.size());
  id_matrix input = id_matrix::from_shape({decoded.size(), longest});
  input.fill(reversal_data::pad);
  for (std::size_t row = 0; row < decoded.size(); ++row) {
    input(row, 0) = reversal_data::bos;
    for (std::size_t i = 0; i + 1 < decoded[row].size(); ++i) input(row, i + 1) = decoded[row][i];
  }
  typename t5_model<P>::saved s;
  const auto logits = model.forward(b.encoder_ids, b.encoder_mask, input, s);
  std::size_t mismatches = 0;
  for (std::size_t row = 0; row < decoded.size(); ++row) {
    bool same = true;
    for (std::size_t i = 0; i < decoded[row].size(); ++i) {
      same = same && argmax(logits.data() + (row * longest + i) * vocab, vocab) == decoded[row][i];
    }
    mismatches += same ? 0 : 1;
  }
  return mismatches;
}

/// Runs `f(w)` for every worker w in [0, workers): worker 0 on the calling thread, the others on threads
/// of their own, each with its kernels kept on its thread (`mixprec::single_threaded_scope`) when there
/// are several; returns when all have, rethrowing the first worker's exception.
template <class F>
void run_workers(std::size_t workers, F&& f) {
  if (workers <= 1) {
    f(std::size_t{0});
    return;
  }
  std::vector<std::exception_ptr> errors(workers);
  const auto body = [&](std::size_t w) {
    const mixprec::single_threaded_scope single;
    try {
      f(w);
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> threads;
    for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(body, w);
    body(0);
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

/// Evaluates `model` on `texts` in batches of `batch` chunks: the teacher-forced loss and token accuracy,
/// and with `decode` the greedy decodings (`t5_model::greedy_decode`, up to the longest target of each
/// batch) and their exact-match accuracy. With `check_decoding` each decoding is also fed back as the
/// decoder's input of a teacher-forced pass, whose argmax must reproduce it id for id: the key/value
/// caches and the per-step position bias give what the full causal pass gives. The batches are shared
/// among `workers` threads (batch i to worker i mod workers); the result does not depend on their number.
template <class P>
eval_result evaluate(const t5_model<P>& model, const reversal_data& data, const std::vector<std::string>& texts,
                     std::size_t batch, std::size_t workers, bool decode, bool check_decoding = false) {
  const std::size_t vocab = model.config().vocab;
  struct part {
    double loss_sum = 0;
    std::size_t targets = 0, correct = 0, chunks = 0, exact = 0, mismatches = 0;
    std::vector<std::pair<std::string, std::string>> samples;
  };
  const std::size_t batches = (texts.size() + batch - 1) / batch;
  std::vector<part> parts(batches);
  run_workers(std::min(workers, batches), [&](std::size_t w) {
    for (std::size_t i = w; i < batches; i += std::min(workers, batches)) {
      part& r = parts[i];
      const std::size_t first = i * batch;
      const std::size_t end = std::min(texts.size(), first + batch);
      const seq2seq_batch b = data.make_batch(
          {texts.begin() + static_cast<std::ptrdiff_t>(first), texts.begin() + static_cast<std::ptrdiff_t>(end)});
      typename t5_model<P>::saved s;
      const auto logits = model.forward(b.encoder_ids, b.encoder_mask, b.decoder_ids, s);
      const std::vector<float> z(logits.begin(), logits.end());  // float32 logits for the loss
      const std::span<const std::int32_t> t(b.targets.data(), b.targets.size());
      r.loss_sum =
          mixprec::nn::cross_entropy_loss(std::span<const float>(z), vocab, t) * static_cast<double>(b.target_count);
      for (std::size_t k = 0; k < t.size(); ++k) {
        if (t[k] != mixprec::nn::ignore_index) r.correct += argmax(z.data() + k * vocab, vocab) == t[k] ? 1 : 0;
      }
      r.targets = b.target_count;
      r.chunks = b.texts.size();
      if (!decode) continue;
      const std::size_t steps = b.targets.shape()[1];
      const auto decoded = model.greedy_decode(b.encoder_ids, b.encoder_mask, steps);
      for (std::size_t row = 0; row < decoded.size(); ++row) {
        std::vector<std::int32_t> expected;
        for (std::size_t k = 0; k < steps && b.targets(row, k) != mixprec::nn::ignore_index; ++k) {
          expected.push_back(b.targets(row, k));
        }
        r.exact += decoded[row] == expected ? 1 : 0;
        if (r.samples.size() < 4) r.samples.emplace_back(b.texts[row], data.decode(decoded[row]));
      }
      if (check_decoding) r.mismatches = decoding_mismatches(model, b, decoded);
    }
  });
  eval_result r;
  double loss_sum = 0;
  std::size_t targets = 0, correct = 0;
  for (const part& p : parts) {
    loss_sum += p.loss_sum;
    targets += p.targets;
    correct += p.correct;
    r.chunks += p.chunks;
    r.exact += p.exact;
    r.decode_mismatches += p.mismatches;
    for (const auto& sample : p.samples) {
      if (r.samples.size() < 4) r.samples.push_back(sample);
    }
  }
  r.loss = loss_sum / static_cast<double>(targets);
  r.token_accuracy = static_cast<double>(correct) / static_cast<double>(targets);
  r.exact_match = static_cast<double>(r.exact) / static_cast<double>(r.chunks);
  return r;
}

/// `v` with `digits` digits after the point ("nan" and "inf" as such), without touching a stream's state.
[[nodiscard]] inline std::string format_fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

/// "p=f32,c=bf16,o=f32": jmp's string of policy P, every dtype named (f32, bf16, f16, f64).
template <class P>
[[nodiscard]] std::string policy_name() {
  const mixprec::runtime_policy p = mixprec::to_runtime_policy<P>();
  const auto short_name = [](mixprec::dtype d) -> std::string {
    switch (d) {
      case mixprec::dtype::float32: return "f32";
      case mixprec::dtype::bfloat16: return "bf16";
      case mixprec::dtype::float16: return "f16";
      case mixprec::dtype::float64: return "f64";
      default: return std::string(mixprec::name(d));
    }
  };
  return "p=" + short_name(p.param) + ",c=" + short_name(p.compute) + ",o=" + short_name(p.output);
}

template <class P>
train_report train_policy(const train_settings& settings, const reversal_data& data, std::ostream& out) {
  namespace tr = mixprec::train;
  using model_type = t5_model<P>;
  constexpr bool float16_compute = std::is_same_v<nn::compute_t<P, float>, mixprec::float16>;
  if (settings.steps < 1 || settings.batch == 0 || settings.eval_every < 1 || settings.val_size == 0 ||
      settings.eval_batch == 0) {
    throw std::invalid_argument("train: steps, batch, eval_every, val_size and eval_batch must be at least 1");
  }
  t5_config config = settings.model;
  config.vocab = data.vocab_size();
  std::mt19937_64 init_rng(settings.seed);
  model_type model = model_type::init(config, init_rng);

  train_report report;
  report.policy = policy_name<P>();
  report.parameters = nn::parameter_count(model);
  out << "t5 example: policy " << report.policy << ", " << report.parameters << " parameters (d_model "
      << config.d_model << ", " << config.n_heads << " heads, d_ff " << config.d_ff << ", " << config.encoder_layers
      << " encoder + " << config.decoder_layers << " decoder layers, " << config.num_buckets
      << " position buckets, max distance " << config.max_distance << ")\n"
      << "task: reverse chunks of " << data.min_chars() << ".." << data.max_chars() << " bytes of '" << data.source()
      << "' (" << data.vocab_size() << " ids); batch " << settings.batch << ", " << settings.steps << " steps\n";

  if constexpr (float16_compute) {
    if (settings.plan) {
      // The plan needs a float32 run of the same weights: the initial weights under p=f32,c=f32,o=f32, on
      // a few training batches of their own; float16 with the planner's default headroom (2 bits).
      std::mt19937_64 calibration_rng(settings.seed + 3);
      std::vector<seq2seq_batch> batches;
      for (std::size_t i = 0; i < settings.calibration_batches; ++i) {
        batches.push_back(data.sample(split::train, settings.batch, calibration_rng));
      }
      const auto plans = calibrate_plans(with_policy<mixprec::full_precision>(model), batches, {});
      out << "float16 residual-scale plan, calibrated on the initial weights in float32:\nencoder " << plans.encoder
          << "decoder " << plans.decoder;
      model.apply_plan(plans.encoder, plans.decoder);
    }
  } else {
    if (settings.plan) throw std::invalid_argument("--plan is for float16 compute (--policy f16)");
  }

  auto grads = model.zero_gradients();
  tr::adamw adamw({.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = settings.weight_decay});
  const tr::cosine_schedule schedule{.learning_rate = settings.learning_rate,
                                     .min_lr = settings.min_lr,
                                     .warmup_iters = std::min(settings.warmup, settings.steps - 1),
                                     .lr_decay_iters = settings.steps - 1};
  std::optional<mixprec::dynamic_loss_scale> ls;
  if constexpr (float16_compute) ls.emplace();
  mixprec::no_op_loss_scale unscaled;

  std::mt19937_64 batch_rng(settings.seed + 1);
  const std::vector<std::string> val_texts = data.validation_texts(settings.val_size, settings.seed + 2);
  const std::vector<std::string> subset(
      val_texts.begin(),
      val_texts.begin() + static_cast<std::ptrdiff_t>(std::min(settings.eval_subset, val_texts.size())));
  // Data parallel over the batch's chunks: worker w runs the forward and backward passes of its share
  // (a batch of its own, padded to its own longest chunk) into its own gradients, which are then summed
  // in worker order (deterministic for a worker count). Each seeds its loss gradient with S / N, N the
  // targets of the whole batch, so the sum is the gradient of S times the batch's mean loss.
  const std::size_t workers = std::max<std::size_t>(1, std::min(settings.workers, settings.batch));
  struct worker {
    typename model_type::saved ctx;
    typename model_type::gradients grads;
    xt::xtensor<float, 3> dlogits;
    double loss = 0;          // mean over its targets
    std::size_t targets = 0;  // its targets
    std::size_t tokens = 0;   // its non-padding ids
  };
  std::vector<worker> team(workers);
  if (workers > 1) {
    for (auto& w : team) w.grads = model.zero_gradients();
  }
  std::vector<std::span<float>> grad_spans;  // the step's gradients, in walk order
  grads.for_each([&](std::string_view, auto& g) { grad_spans.emplace_back(g.data(), g.size()); });

  double loss_since = 0;
  std::int64_t steps_since = 0;
  std::size_t tokens = 0;
  const auto log_point = [&](std::int64_t step) {
    const eval_result e = evaluate(model, data, subset, settings.eval_batch, workers, false);
    eval_point p{
        step,
        steps_since == 0 ? std::numeric_limits<double>::quiet_NaN() : loss_since / static_cast<double>(steps_since),
        e.loss, ls ? ls->loss_scale() : 1.0f, report.skipped_steps};
    report.curve.push_back(p);
    out << "step " << std::setw(5) << step << "  train " << format_fixed(p.train_loss, 4) << "  val "
        << format_fixed(p.val_loss, 4) << "  loss scale " << p.loss_scale << "  skipped " << p.skipped << std::endl;
    loss_since = 0;
    steps_since = 0;
  };

  for (std::int64_t it = 0; it < settings.steps; ++it) {
    if (it % settings.eval_every == 0) log_point(it);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::string> texts = data.sample_texts(split::train, settings.batch, batch_rng);
    std::size_t batch_targets = 0;
    for (const auto& t : texts) batch_targets += t.size() + 1;  // the chunk, then eos
    const float scale = ls ? ls->loss_scale() : 1.0f;
    const double seed = static_cast<double>(scale) / static_cast<double>(batch_targets);
    if (workers == 1) grads.zero();
    run_workers(workers, [&](std::size_t w) {
      worker& wk = team[w];
      const auto begin = texts.begin() + static_cast<std::ptrdiff_t>(settings.batch * w / workers);
      const auto end = texts.begin() + static_cast<std::ptrdiff_t>(settings.batch * (w + 1) / workers);
      const seq2seq_batch b = data.make_batch({begin, end});
      const auto logits = model.forward(b.encoder_ids, b.encoder_mask, b.decoder_ids, wk.ctx);
      if (wk.dlogits.shape() != logits.shape()) wk.dlogits = xt::xtensor<float, 3>::from_shape(logits.shape());
      wk.loss = mixprec::nn::softmax_cross_entropy(std::span<const float>(logits.data(), logits.size()), config.vocab,
                                                   std::span<const std::int32_t>(b.targets.data(), b.targets.size()),
                                                   std::span<float>(wk.dlogits.data(), wk.dlogits.size()), seed);
      wk.targets = b.target_count;
      wk.tokens = b.real_tokens;
      if (workers == 1) {
        model.backward(wk.ctx, wk.dlogits, grads);
      } else {
        wk.grads.zero();
        model.backward(wk.ctx, wk.dlogits, wk.grads);
      }
    });
    double loss = 0;
    for (const auto& wk : team) {
      loss += wk.loss * static_cast<double>(wk.targets) / static_cast<double>(batch_targets);
      tokens += wk.tokens;
    }
    if (workers > 1) {
      grads.zero();
      for (const auto& wk : team) {
        std::size_t i = 0;
        wk.grads.for_each([&](std::string_view, const auto& g) {
          float* into = grad_spans[i++].data();
          for (std::size_t e = 0; e < g.size(); ++e) into[e] += g.data()[e];
        });
      }
    }
    const tr::scaled_step_options step_options{.max_norm = settings.grad_clip};
    const double lr = schedule(it);
    const bool stepped = ls ? tr::scaled_step(*ls, adamw, lr, model, grads, step_options)
                            : tr::scaled_step(unscaled, adamw, lr, model, grads, step_options);
    if (!stepped) ++report.skipped_steps;
    report.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.step_losses.push_back(loss);
    loss_since += loss;
    ++steps_since;
  }
  log_point(settings.steps);

  const eval_result final_eval = evaluate(model, data, val_texts, settings.eval_batch, workers, true, settings.check);
  report.val_loss = final_eval.loss;
  report.token_accuracy = final_eval.token_accuracy;
  report.exact_match = final_eval.exact_match;
  report.val_chunks = final_eval.chunks;
  report.decode_mismatches = final_eval.decode_mismatches;
  report.tokens_per_s = static_cast<double>(tokens) / report.train_seconds;
  report.final_loss_scale = ls ? ls->loss_scale() : 1.0f;
  out << "final (" << report.policy << "): val loss " << format_fixed(report.val_loss, 4) << ", token accuracy "
      << format_fixed(100.0 * report.token_accuracy, 2) << "%, exact match " << final_eval.exact << "/"
      << final_eval.chunks << " (" << format_fixed(100.0 * report.exact_match, 2) << "%), "
      << format_fixed(report.tokens_per_s, 0) << " tokens/s (" << format_fixed(report.train_seconds, 1)
      << " s of training, " << workers << " worker" << (workers > 1 ? "s" : "") << "), skipped steps "
      << report.skipped_steps << ", final loss scale " << report.final_loss_scale << '\n';
  for (const auto& [text, decoded] : final_eval.samples) {
    std::string shown = text;
    std::replace(shown.begin(), shown.end(), '\n', '|');
    std::string got = decoded;
    std::replace(got.begin(), got.end(), '\n', '|');
    out << "  \"" << shown << "\" -> \"" << got << "\"\n";
  }
  if (settings.check) {
    // Finite losses, a lower loss over the last quarter of the steps than over the first, and decodings
    // that the teacher-forced pass reproduces.
    const auto& l = report.step_losses;
    const std::size_t quarter = std::max<std::size_t>(1, l.size() / 4);
    double head = 0, tail = 0;
    for (std::size_t i = 0; i < quarter; ++i) {
      head += l[i];
      tail += l[l.size() - 1 - i];
    }
    const bool finite =
        std::all_of(l.begin(), l.end(), [](double v) { return std::isfinite(v); }) && std::isfinite(report.val_loss);
    report.sane = finite && tail < head && report.decode_mismatches == 0;
    out << "check: losses " << (finite ? "finite" : "NOT FINITE") << ", mean loss of the first " << quarter << " steps "
        << format_fixed(head / static_cast<double>(quarter), 4) << ", of the last " << quarter << " steps "
        << format_fixed(tail / static_cast<double>(quarter), 4)
        << (tail < head ? " (decreased)" : " (DID NOT DECREASE)")
        << ", decodings differing from the teacher-forced pass: " << report.decode_mismatches << '\n';
  }
  if (settings.save) {
    save_model(model.has_plan() ? model.without_plan() : model, data, *settings.save);
    out << "saved the parameters to " << settings.save->string() << '\n';
  }
  return report;
}

}  // namespace t5_example
