/// \file
/// \brief The training loop of mixprec-train: nanoGPT's shakespeare_char recipe (TRAINING.md §3, §4)
/// driven by mixprec's pieces — the GPT's forward/backward (gpt.hpp), the fused float32 cross-entropy,
/// loss scaling (`dynamic_loss_scale` for float16 compute, none otherwise), global-norm clipping of the
/// unscaled gradients, AdamW with weight decay on 2-D parameters only, and nanoGPT's cosine schedule.
///
/// Step order (PyTorch AMP, jmp, Micikevicius et al. §3.2): seed the backward with σ = S / N (S the loss
/// scale, N the targets of the step) → backward (gradients add) → unscale the float32 gradients in place
/// → `all_finite` → `ls.adjust(finite)` → if finite: clip, AdamW step; else skip the step (parameters,
/// moments and the step counter untouched) and count it: one `train::scaled_step` call. The parameters
/// and the train state are saved and loaded as state dicts (`train::save_state`, `load_state`).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "char_dataset.hpp"
#include "gpt.hpp"
#include "mixprec/diagnostics/profile.hpp"
#include "mixprec/kernels/threads.hpp"
#include "mixprec/policies/all_finite.hpp"
#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/scaled/float8_dot.hpp"
#include "mixprec/train/adamw.hpp"
#include "mixprec/train/clip.hpp"
#include "mixprec/train/lr_schedule.hpp"
#include "mixprec/train/safetensors.hpp"
#include "mixprec/train/scaled_step.hpp"
#include "mixprec/train/state_dict.hpp"

namespace train_example {

/// The knobs of one training run (nanoGPT's shakespeare_char CPU values by default).
struct run_options {
  std::int64_t iters = 2000;      ///< last iteration; iterations 0..iters run (iters + 1 updates), as nanoGPT
  std::size_t batch = 12;         ///< sequences per step
  std::uint64_t seed = 1337;      ///< initialisation and batch sampling
  std::int64_t eval_every = 250;  ///< evaluate at every multiple of this (and at the end)
  std::size_t eval_iters = 20;    ///< batches per split in a periodic evaluation (nanoGPT's estimate)
  double grad_clip = 1.0;         ///< global-norm clipping threshold
  mixprec::train::cosine_schedule schedule{
      .learning_rate = 1e-3, .min_lr = 1e-4, .warmup_iters = 100, .lr_decay_iters = 2000};
  mixprec::train::adamw_options adamw{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  bool loss_scaling = false;    ///< dynamic loss scaling (float16 compute)
  std::size_t threads = 2;      ///< workers: the batch rows are split between them (data parallel)
  std::size_t val_windows = 0;  ///< validation windows for the final loss; 0 = the whole split
  std::size_t grad_accum = 1;   ///< micro-batches per optimiser step (nanoGPT's gradient_accumulation_steps)
  bool float8 = false;          ///< float8 products with delayed scaling in every projection (dot injection)
  bool profile = false;         ///< time every region of the training steps (evaluations excluded)
};

/// A run to continue: the parameters and the train state an earlier run of the same policy wrote
/// (`params_<policy>.safetensors`, `train_state_<policy>.safetensors`). The continued run computes
/// iterations `iteration + 1 .. iters` and ends with the parameters an uninterrupted run to `iters`
/// would have, bit for bit: the batches are those of the uninterrupted run (the samplers are advanced
/// past the draws of the iterations and evaluations already run), and the optimiser, its master
/// weights and the loss scale continue from the saved state.
struct resume_from {
  const mixprec::train::checkpoint* params = nullptr;
  const mixprec::train::checkpoint* state = nullptr;
};

namespace detail {
/// The run settings a train state records (metadata `run.*`), which a continued run must repeat: the
/// same seed, batch, gradient accumulation and evaluation settings draw the same batches.
inline std::vector<std::pair<std::string, std::string>> recorded_settings(const run_options& opt) {
  return {{"run.seed", std::to_string(opt.seed)},
          {"run.batch", std::to_string(opt.batch)},
          {"run.grad_accum", std::to_string(opt.grad_accum)},
          {"run.eval_every", std::to_string(opt.eval_every)},
          {"run.eval_iters", std::to_string(opt.eval_iters)},
          {"run.loss_scaling", opt.loss_scaling ? "1" : "0"}};
}
}  // namespace detail

/// What a float8 run reports per projection: the amax of its input and of its output gradient at every
/// step (the newest entry of each delayed-scaling history) and how many elements saturated.
struct float8_layer_report {
  std::string name;             ///< e.g. "layers.0.attn.wq"
  std::vector<double> x_amax;   ///< per iteration
  std::vector<double> dy_amax;  ///< per iteration (scaled by the loss scale, if any)
  mixprec::scaled::float8_clip_counts clips;
};

/// Rows [begin, end) of a [B, T] id tensor.
inline xt::xtensor<std::int32_t, 2> rows_of(const xt::xtensor<std::int32_t, 2>& ids, std::size_t begin,
                                            std::size_t end) {
  const std::size_t t = ids.shape()[1];
  xt::xtensor<std::int32_t, 2> out = xt::xtensor<std::int32_t, 2>::from_shape({end - begin, t});
  std::copy(ids.data() + begin * t, ids.data() + end * t, out.data());
  return out;
}

/// A contiguous tensor seen as one axis: what the ranks' gradient average and parameter checksum walk.
template <class T>
struct flat_tensor {
  T* ptr = nullptr;
  std::size_t n = 0;
  [[nodiscard]] T* data() const noexcept { return ptr; }
  [[nodiscard]] std::size_t size() const noexcept { return n; }
  [[nodiscard]] std::array<std::size_t, 1> shape() const noexcept { return {n}; }
};

/// Named flat tensors in walk order, walked as gradients (`for_each`) and as parameters
/// (`for_each_parameter`): one type for every policy's model, so the data-parallel hooks below are not
/// templates.
template <class T>
struct named_flat_tensors {
  std::vector<std::pair<std::string, flat_tensor<T>>> items;
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [name, tensor] : items) f(std::string_view(name), tensor);
  }
  template <class F>
  void for_each_parameter(F&& f) const {
    for_each(f);
  }
};

/// Several processes training one model (main.cpp's MPI form, `--distributed`): this rank of `ranks`,
/// `average(grads)` replacing the gradients by their mean over the ranks (the same bits on every rank),
/// `rescale(factor)` told when the loss scale changes by `factor` (the averaged gradients are scaled:
/// error-feedback residuals follow), and `agree(params)`, whether every rank holds the same parameter
/// bytes; `ready(grads, prefix)` during the backward pass (see below). With ZeRO-1 (`--zero`, mixprec::distributed's
/// `shard_plan`), also `shard(params)`, called once before anything else, which divides the parameter tensors among the
/// ranks and returns whether this rank steps a name; `gather_parameters(params)` after each step (every rank receives
/// the tensors the others stepped); `gather_state(ck)`, the ranks' train states merged into rank 0's. Empty hooks: one
/// process; every rank steps every parameter.
struct data_parallel {
  int rank = 0;
  int ranks = 1;
  std::function<void(const named_flat_tensors<float>&)> average;
  /// Told during the backward pass which gradients are final (`nn::gradients_ready`), so that their
  /// average can start before `average` (one worker thread only: several workers' gradients are summed
  /// after they all finish).
  std::function<void(const named_flat_tensors<float>&, std::string_view)> ready;
  std::function<void(float)> rescale;
  std::function<bool(const named_flat_tensors<std::byte>&)> agree;
  std::function<std::function<bool(std::string_view)>(const named_flat_tensors<std::byte>&)> shard;
  std::function<void(const named_flat_tensors<std::byte>&)> gather_parameters;
  std::function<void(mixprec::train::checkpoint&)> gather_state;
};

/// One evaluation point of a run.
struct eval_point {
  std::int64_t iter = 0;
  double train_loss = 0;  ///< mean over `eval_iters` random train batches
  double val_loss = 0;    ///< mean over `eval_iters` random validation batches
};

/// The outcome of a run.
struct run_result {
  std::vector<eval_point> curve;
  double train_loss = 0;    ///< the last evaluation's train estimate
  double val_loss = 0;      ///< mean cross-entropy over every non-overlapping window of the validation split
  double tokens_per_s = 0;  ///< batch × block × (iters + 1) / training wall time (evaluations excluded)
  std::int64_t skipped_steps = 0;
  float final_loss_scale = 1.0f;
  std::string sample;                       ///< characters sampled from the trained model
  std::vector<float8_layer_report> float8;  ///< per projection, for a float8 run
  /// With `run_options::profile`: the regions of the training steps (diagnostics::profile), summed over
  /// the steps and threads, sorted by self time.
  std::vector<mixprec::diagnostics::profile_region> profile;
  double train_seconds = 0;  ///< wall time of the training steps (evaluations excluded)
  /// Bytes of optimiser state (AdamW's moments, master weights) this process holds at the end.
  std::size_t optimizer_state_bytes = 0;
};

/// Trains a GPT with policy `P` on `data`; `log(eval_point, loss_scale, skipped_steps)` is called at each
/// evaluation. If given, `params_out` receives the trained parameters (dotted names, param dtype) and
/// `state_out` the optimiser and loss-scale state (`train_state.safetensors` of TRAINING.md §6).
/// With `resume`, continues the run that wrote it (see `resume_from`). With several `ranks` (data parallel
/// across processes), rank r takes rows [batch·r/R, batch·(r+1)/R) of every global batch, and the ranks'
/// gradients are averaged after each backward: every rank then steps with the same gradients.
/// \throws std::invalid_argument when `resume` was written with other run settings or is already at or
///   past `opt.iters`, or the ranks do not divide the batch;
///   mixprec::train::safetensors_error when a tensor is missing or has another shape or dtype.
template <class P, class Log>
run_result train(const gpt_config& config, const run_options& opt, const char_dataset& data, Log&& log,
                 mixprec::train::checkpoint* params_out = nullptr, mixprec::train::checkpoint* state_out = nullptr,
                 const resume_from& resume = {}, const data_parallel& ranks = {}) {
  namespace tr = mixprec::train;
  const auto rank_count = static_cast<std::size_t>(ranks.ranks);
  if (opt.batch % rank_count != 0) {
    throw std::invalid_argument("--batch " + std::to_string(opt.batch) + " is not a multiple of the " +
                                std::to_string(rank_count) +
                                " ranks: every rank takes an equal share of the global batch (the average of "
                                "the ranks' gradients is then the batch's)");
  }
  // This rank's rows of every global batch.
  const std::size_t rank_begin = opt.batch * static_cast<std::size_t>(ranks.rank) / rank_count;
  const std::size_t rank_rows = opt.batch / rank_count;
  std::mt19937_64 rng(opt.seed);
  auto model = make_gpt<P>(config, rng);
  auto grads = model.zero_gradients();
  // A float8 run: every projection's products in float8 with delayed scaling (e4m3fn forward, e5m2
  // backward, TransformerEngine's defaults), one product object per layer.
  std::vector<std::shared_ptr<mixprec::scaled::float8_dot<>>> float8_dots;
  run_result result;
  if (opt.float8) {
    model.for_each_projection([&](const std::string& name, auto& layer) {
      float8_dots.push_back(std::make_shared<mixprec::scaled::float8_dot<>>());
      layer.set_dot(float8_dots.back());
      result.float8.push_back({name, {}, {}, {}});
    });
  }
  // One worker per thread, each with a contiguous share of the batch rows.
  struct worker {
    std::size_t row_begin = 0, row_end = 0;
    typename gpt<P>::saved ctx;
    typename gpt<P>::gradients grads;
    xt::xtensor<float, 3> dlogits;
  };
  std::vector<worker> workers(std::max<std::size_t>(1, std::min(opt.threads, rank_rows)));
  // One worker adds into the step's gradients directly; several add into their own, summed after.
  const bool single_worker = workers.size() == 1;
  for (std::size_t w = 0; w < workers.size(); ++w) {
    workers[w].row_begin = rank_begin + rank_rows * w / workers.size();
    workers[w].row_end = rank_begin + rank_rows * (w + 1) / workers.size();
    if (!single_worker) workers[w].grads = model.zero_gradients();
  }
  tr::adamw adamw(opt.adamw);
  std::optional<mixprec::dynamic_loss_scale> ls;
  if (opt.loss_scaling) ls.emplace(mixprec::dynamic_loss_scale_options{.initial_scale = 32768.0f, .period = 2000});

  // The gradient tensors, named, in the order of for_each_parameter: the workers' sums go there, and
  // the ranks average them.
  named_flat_tensors<float> grad_tree;
  grads.for_each([&](std::string_view name, auto& g) {
    static_assert(std::is_same_v<typename std::remove_cvref_t<decltype(g)>::value_type, float>);
    grad_tree.items.emplace_back(std::string(name), flat_tensor<float>{g.data(), g.size()});
  });

  // The parameters' bytes, named, in walk order: what ZeRO-1's ranks exchange and what the ranks' checksum
  // covers.
  named_flat_tensors<std::byte> param_bytes;
  model.for_each_parameter([&](std::string_view name, auto& p) {
    using E = std::remove_cvref_t<decltype(*p.data())>;
    param_bytes.items.emplace_back(
        std::string(name), flat_tensor<std::byte>{reinterpret_cast<std::byte*>(p.data()), p.size() * sizeof(E)});
  });
  // ZeRO-1: the parameters this rank steps (all when empty).
  const std::function<bool(std::string_view)> owns = ranks.shard ? ranks.shard(param_bytes) : nullptr;

  std::mt19937_64 batch_rng(opt.seed + 1);
  std::mt19937_64 eval_rng(opt.seed + 2);
  double train_seconds = 0;
  std::int64_t first_iter = 0;

  if (resume.state != nullptr) {
    const auto& st = *resume.state;
    for (const auto& [key, value] : detail::recorded_settings(opt)) {
      const auto found = st.metadata.find(key);
      if (found == st.metadata.end() || found->second != value) {
        throw std::invalid_argument("resume: the saved run has " + key + " = " +
                                    (found == st.metadata.end() ? std::string("(none)") : found->second) +
                                    " but this run " + value + ": continue with the settings of the saved run");
      }
    }
    const auto saved_iters = st.get_scalar<std::int64_t>("run.iteration");
    if (saved_iters >= opt.iters) {
      throw std::invalid_argument("resume: the saved run already ran iterations 0.." + std::to_string(saved_iters) +
                                  ": give --iters above " + std::to_string(saved_iters));
    }
    tr::load_state(*resume.params, model);  // strict: every parameter, by name, shape and dtype
    tr::load_state(st, adamw, "optimizer");
    if (owns) adamw.keep_states(owns);  // ZeRO-1: the file holds every rank's state; keep this rank's
    if (ls) tr::load_state(st, *ls, "loss_scale");
    result.skipped_steps = st.get_scalar<std::int64_t>("run.skipped_steps");
    // A float8 run: each projection's delayed scalings (scale and amax history of x, kernel, dy) and
    // clip counts, under the options it was built with.
    for (std::size_t l = 0; l < float8_dots.size(); ++l) {
      const std::string prefix = "float8." + result.float8[l].name + ".";
      const auto scaling = [&](const std::string& tensor, const mixprec::delayed_scaling_state& now) {
        mixprec::delayed_scaling_state saved{st.get_scalar<double>(prefix + tensor + ".scale"), {}, now.options};
        const auto history = st.get<double, 1>(prefix + tensor + ".amax_history");
        saved.amax_history.assign(history.begin(), history.end());
        return saved;
      };
      const auto count = [&](const std::string& tensor) {
        return static_cast<std::size_t>(st.get_scalar<std::uint64_t>(prefix + tensor + ".clips"));
      };
      auto& dot = *float8_dots[l];
      dot.restore(scaling("x", dot.x_scaling().state()), scaling("kernel", dot.kernel_scaling().state()),
                  scaling("dy", dot.dy_scaling().state()), {count("x"), count("kernel"), count("dy")});
    }
    // The draws of the iterations and evaluations already run, in the order the loop made them.
    for (std::int64_t it = 0; it <= saved_iters; ++it) {
      if (it % opt.eval_every == 0 || it == saved_iters) {
        for (std::size_t i = 0; i < 2 * opt.eval_iters; ++i) {
          (void)data.sample_batch(i < opt.eval_iters ? split::train : split::val, opt.batch, config.block, eval_rng);
        }
      }
      for (std::size_t micro = 0; micro < opt.grad_accum; ++micro) {
        (void)data.sample_batch(split::train, opt.batch, config.block, batch_rng);
      }
    }
    first_iter = saved_iters + 1;
  }

  auto estimate = [&](split which) {
    double sum = 0;
    for (std::size_t i = 0; i < opt.eval_iters; ++i) {
      const auto b = data.sample_batch(which, opt.batch, config.block, eval_rng);
      sum += model.loss(b.x, b.y);
    }
    return sum / static_cast<double>(opt.eval_iters);
  };

  std::optional<mixprec::diagnostics::profile> prof;  // --profile: the steps' regions
  if (opt.profile) prof.emplace();
  for (std::int64_t it = first_iter; it <= opt.iters; ++it) {
    if (it % opt.eval_every == 0 || it == opt.iters) {
      if (prof) prof->pause();
      eval_point e{it, estimate(split::train), estimate(split::val)};
      result.curve.push_back(e);
      log(e, ls ? ls->loss_scale() : 1.0f, result.skipped_steps);
      if (prof) prof->resume();
    }
    const auto t0 = std::chrono::steady_clock::now();
    const mixprec::internal::profile_scope step_region("train::step");
    const float scale = ls ? ls->loss_scale() : 1.0f;
    // Data parallel over the batch rows: worker w runs forward and backward on its rows into its own
    // gradients; the main thread then sums them in worker order (deterministic for a thread count).
    // With gradient accumulation, every micro-batch adds into the same gradients, the seed divided by
    // the number of micro-batches (TRAINING.md §1: σ = S / (N · accumulation steps)).
    {
      const mixprec::internal::profile_scope region("train::zero_gradients");
      if (single_worker) {
        grads.zero();
      } else {
        for (auto& wk : workers) wk.grads.zero();
      }
    }
    for (std::size_t micro = 0; micro < opt.grad_accum; ++micro) {
      std::optional<mixprec::internal::profile_scope> sampling(std::in_place, "train::sample_batch");
      const auto b = data.sample_batch(split::train, opt.batch, config.block, batch_rng);
      sampling.reset();
      // This rank's targets: the mean over its rows, averaged over the ranks, is the global batch's mean.
      const double seed = static_cast<double>(scale) / static_cast<double>(rank_rows * config.block * opt.grad_accum);
      auto run_worker = [&](std::size_t w) {
        // With several workers the cores are already busy: each worker's products stay on its thread.
        std::optional<mixprec::single_threaded_scope> single;
        if (workers.size() > 1) single.emplace();
        const mixprec::internal::profile_scope worker_region("train::worker");
        auto& wk = workers[w];
        const auto x = rows_of(b.x, wk.row_begin, wk.row_end);
        const auto y = rows_of(b.y, wk.row_begin, wk.row_end);
        const auto logits = model.forward(x, wk.ctx);
        if (wk.dlogits.shape() != logits.shape()) wk.dlogits = xt::xtensor<float, 3>::from_shape(logits.shape());
        (void)mixprec::nn::softmax_cross_entropy(std::span<const float>(logits.data(), logits.size()), config.vocab,
                                                 std::span<const std::int32_t>(y.data(), y.size()),
                                                 std::span<float>(wk.dlogits.data(), wk.dlogits.size()), seed);
        auto& into = single_worker ? grads : wk.grads;
        // Several ranks, one worker, the last micro-batch: each part's average may start once the
        // backward pass has finished its gradients.
        if (single_worker && ranks.ready && micro + 1 == opt.grad_accum) {
          model.backward(wk.ctx, wk.dlogits, into, [&](std::string_view prefix) { ranks.ready(grad_tree, prefix); });
        } else {
          model.backward(wk.ctx, wk.dlogits, into);
        }
      };
      std::vector<std::jthread> threads;
      for (std::size_t w = 1; w < workers.size(); ++w) threads.emplace_back(run_worker, w);
      run_worker(0);
      const mixprec::internal::profile_scope join_region("train::join_workers");
      threads.clear();
    }
    if (!single_worker) {
      const mixprec::internal::profile_scope sum_region("train::sum_worker_gradients");
      grads.zero();
      for (auto& wk : workers) {
        std::size_t i = 0;
        wk.grads.for_each([&](std::string_view, auto& g) {
          float* dst = grad_tree.items[i++].second.data();
          for (std::size_t e = 0; e < g.size(); ++e) dst[e] += g.data()[e];
        });
      }
    }
    // Several ranks: the mean of the ranks' gradients, the same bits on every rank (so the finiteness
    // test, the clipping and AdamW below agree on every rank, and the parameters stay identical).
    if (ranks.average) ranks.average(grad_tree);
    // Unscale (S is a power of two: a product by 1/S, exact), check, adjust S, then skip, or clip and
    // step AdamW over every parameter by name (nanoGPT's decay rule).
    mixprec::no_op_loss_scale unscaled;
    // ZeRO-1: this rank steps its own parameters, then the ranks exchange the new values.
    const tr::scaled_step_options step_options{.max_norm = opt.grad_clip, .only = owns};
    const bool stepped = ls ? tr::scaled_step(*ls, adamw, opt.schedule(it), model, grads, step_options)
                            : tr::scaled_step(unscaled, adamw, opt.schedule(it), model, grads, step_options);
    if (stepped && ranks.gather_parameters) ranks.gather_parameters(param_bytes);
    if (!stepped) ++result.skipped_steps;
    if (ranks.rescale && ls && ls->loss_scale() != scale) ranks.rescale(ls->loss_scale() / scale);
    // Delayed scaling: this step's amaxes become history; the next step's scales follow (also after a
    // skipped step: its amaxes were measured).
    for (auto& dot : float8_dots) dot->update_scales();
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (std::size_t l = 0; l < float8_dots.size(); ++l) {
      const auto& x_history = float8_dots[l]->x_scaling().amax_history();
      const auto& dy_history = float8_dots[l]->dy_scaling().amax_history();
      result.float8[l].x_amax.push_back(x_history.empty() ? 0.0 : x_history.front());
      result.float8[l].dy_amax.push_back(dy_history.empty() ? 0.0 : dy_history.front());
    }
  }
  if (prof) result.profile = prof->stop();
  result.train_seconds = train_seconds;
  for (std::size_t l = 0; l < float8_dots.size(); ++l) result.float8[l].clips = float8_dots[l]->clip_counts();
  result.train_loss = result.curve.back().train_loss;
  result.tokens_per_s =
      static_cast<double>(opt.batch * config.block) * static_cast<double>(opt.iters + 1 - first_iter) / train_seconds;
  result.final_loss_scale = ls ? ls->loss_scale() : 1.0f;
  result.optimizer_state_bytes = adamw.state_bytes();
  if (ranks.agree) {
    // Every rank stepped with the same averaged gradients from the same initialisation: the same bytes.
    if (!ranks.agree(param_bytes)) {
      throw std::runtime_error(
          "data parallel: the ranks' parameters differ after training (their checksums "
          "disagree): every rank must run the same build, settings and data");
    }
  }

  // The whole validation split, every non-overlapping window.
  double sum = 0;
  std::size_t windows = 0;
  data.for_each_val_window(config.block, opt.batch, [&](const auto& x, const auto& y) {
    if (opt.val_windows != 0 && windows >= opt.val_windows) return;  // a test's shortened evaluation
    sum += model.loss(x, y) * static_cast<double>(x.shape()[0]);
    windows += x.shape()[0];
  });
  result.val_loss = sum / static_cast<double>(windows);

  // 200 sampled characters, starting from a newline.
  std::mt19937_64 sample_rng(opt.seed + 3);
  std::vector<std::int32_t> context{data.encode('\n')};
  for (int i = 0; i < 200; ++i) {
    const std::size_t t = std::min(context.size(), config.block);
    xt::xtensor<std::int32_t, 2> x = xt::xtensor<std::int32_t, 2>::from_shape({1, t});
    std::copy(context.end() - static_cast<std::ptrdiff_t>(t), context.end(), x.data());
    const auto z = model.logits(x);
    const float* last = z.data() + (t - 1) * config.vocab;
    std::vector<double> p(config.vocab);
    const double m = *std::max_element(last, last + config.vocab);
    for (std::size_t v = 0; v < config.vocab; ++v) p[v] = std::exp(static_cast<double>(last[v]) - m);
    std::discrete_distribution<std::int32_t> pick(p.begin(), p.end());
    context.push_back(pick(sample_rng));
    result.sample += data.decode(context.back());
  }

  if (params_out != nullptr) tr::save_state(*params_out, model);
  if (state_out != nullptr) {
    // TRAINING.md §6: the optimiser's master weights and moments, its step, and the loss-scale state.
    tr::save_state(*state_out, adamw, "optimizer");
    if (ls) tr::save_state(*state_out, *ls, "loss_scale");
    for (const auto& [key, value] : detail::recorded_settings(opt)) state_out->metadata[key] = value;
    state_out->put_scalar("run.iteration", opt.iters);
    state_out->put_scalar("run.skipped_steps", result.skipped_steps);
    for (std::size_t l = 0; l < float8_dots.size(); ++l) {
      const std::string prefix = "float8." + result.float8[l].name + ".";
      const auto put_scaling = [&](const std::string& tensor, const mixprec::delayed_scaling_state& state,
                                   std::size_t clips) {
        state_out->put_scalar(prefix + tensor + ".scale", state.scale);
        const std::vector<std::uint64_t> shape{state.amax_history.size()};
        state_out->put(prefix + tensor + ".amax_history", std::span<const double>(state.amax_history), shape);
        state_out->put_scalar(prefix + tensor + ".clips", static_cast<std::uint64_t>(clips));
      };
      const auto& dot = *float8_dots[l];
      const auto clips = dot.clip_counts();
      put_scaling("x", dot.x_scaling().state(), clips.x);
      put_scaling("kernel", dot.kernel_scaling().state(), clips.kernel);
      put_scaling("dy", dot.dy_scaling().state(), clips.dy);
    }
    // ZeRO-1: every rank's optimiser state into rank 0's file, as one process writes it.
    if (ranks.gather_state) ranks.gather_state(*state_out);
  }
  return result;
}

}  // namespace train_example
