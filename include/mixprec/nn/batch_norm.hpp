/// \file
/// \brief `nn::batch_norm<P>`: batch normalisation over every axis but the last (Ioffe and Szegedy 2015;
/// Flax `nn.BatchNorm`, PyTorch `BatchNorm1d`), statistics in `promote_types(float32, compute)` (Flax
/// FLIP 1777), running statistics, train and eval modes, and statistics shared by worker threads
/// (`batch_sync`, PyTorch's SyncBatchNorm semantics).
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/batch_norm.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/norm_params.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

/// Whether a layer with batch statistics normalises with the statistics of the batch it is given and
/// updates its running statistics (`train`), or normalises with the running statistics and changes
/// nothing (`eval`). Flax: `use_running_average=False/True`; PyTorch: `module.train()` / `module.eval()`.
enum class mode { train, eval };

/// How the running statistics are updated (docs/layers.md, "batch_norm", has the table and sources).
///  - `flax` (Flax `nn.BatchNorm`): `ra = momentum * ra + (1 - momentum) * batch`, momentum 0.99, the
///    biased (population) batch variance goes into the running variance.
///  - `pytorch` (PyTorch `torch.nn.BatchNorm1d`): `ra = (1 - momentum) * ra + momentum * batch`,
///    momentum 0.1, the unbiased variance (times n / (n - 1)) goes into the running variance while the
///    batch is normalised with the biased one; `cumulative_average` is PyTorch's `momentum=None`.
enum class batch_norm_convention { flax, pytorch };

/// Options of `batch_norm` (Flax `nn.BatchNorm`'s arguments and defaults unless `convention` is pytorch).
/// \throws std::invalid_argument (from the layer's constructor) if `epsilon` is negative or not finite,
///         `momentum` is outside [0, 1], or `cumulative_average` is set with the flax convention.
struct batch_norm_options {
  batch_norm_convention convention = batch_norm_convention::flax;  ///< running-statistics rule
  std::optional<double> momentum = std::nullopt;  ///< unset: the convention's default (flax 0.99, pytorch 0.1)
  bool cumulative_average = false;                ///< pytorch only: PyTorch's `momentum=None`, weight 1 / batches seen
  double epsilon = 1e-5;  ///< added to the variance before the square root (Flax and PyTorch: 1e-5)
  bool use_scale = true;  ///< learnable scale [features], initialised to ones
  bool use_bias = true;   ///< learnable bias [features], initialised to zeros
};

/// A group of `workers` threads that each hold part of one batch and want the statistics of the whole
/// batch (PyTorch's SyncBatchNorm, Flax's `axis_name`): every worker calls the layer with
/// `sync_slot{&group, w}` for its own index w, and the calls meet in the group (a `std::barrier`).
/// Per-worker partial statistics are combined in worker order, so every worker gets the same bits. One
/// group serves one
/// layer call at a time; every worker must make the same sequence of calls (a worker that does not call
/// leaves the others waiting). A worker whose input is rejected still meets the others, and then every
/// worker throws the same error.
/// \throws std::invalid_argument from the constructor when `workers` is 0.
class batch_sync {
 public:
  /// A group of `workers` (>= 1) threads.
  explicit batch_sync(std::size_t workers)
      : workers_(check_workers(workers)),
        slots_(workers),
        errors_(workers),
        barrier_(static_cast<std::ptrdiff_t>(workers)) {}

  /// The number of workers.
  [[nodiscard]] std::size_t workers() const noexcept { return workers_; }

  /// Called by every worker w (each once): publishes `mine` (or `error`, non-empty when this worker's
  /// input was rejected), waits for all, then calls `combine(slots)` with every worker's vector in worker
  /// order. \throws std::invalid_argument, in every worker, if any worker reported an error (naming it).
  template <class F>
  void exchange(std::size_t worker, std::vector<double> mine, const std::string& error, F&& combine) {
    if (worker >= workers_) {
      throw std::invalid_argument(internal::concat("batch_sync: worker index ", worker, " but the group has ", workers_,
                                                   " workers (indices 0 to ", workers_ - 1, ")"));
    }
    slots_[worker] = std::move(mine);
    errors_[worker] = error;
    barrier_.arrive_and_wait();
    std::string first_error;
    for (std::size_t w = 0; w < workers_ && first_error.empty(); ++w) {
      if (!errors_[w].empty()) first_error = internal::concat("worker ", w, ": ", errors_[w]);
    }
    if (first_error.empty()) combine(static_cast<const std::vector<std::vector<double>>&>(slots_));
    barrier_.arrive_and_wait();  // nobody overwrites a slot before every worker has read them all
    if (!first_error.empty()) throw std::invalid_argument(first_error);
  }

 private:
  static std::size_t check_workers(std::size_t n) {
    if (n == 0) throw std::invalid_argument("batch_sync: a group needs at least 1 worker, got 0");
    return n;
  }
  std::size_t workers_;
  std::vector<std::vector<double>> slots_;
  std::vector<std::string> errors_;
  std::barrier<> barrier_;
};

/// Where a worker's call meets the others: its group and its index (default: no group, the call's own
/// rows are the whole batch). Train mode only (eval calls ignore it). Worker 0 updates the running
/// statistics once the group has met, so read them (an eval call, `running_mean()`) only after every
/// worker's train call has returned.
struct sync_slot {
  batch_sync* group = nullptr;  ///< the group, or nullptr for an unsynchronised call
  std::size_t worker = 0;       ///< this worker's index in the group, 0 <= worker < group->workers()
};

/// Batch normalisation: `y = (x - mean) / sqrt(var + epsilon) * scale + bias`, the statistics taken per
/// feature over every axis but the last (Flax's default `axis=-1`).
///
/// - **Parameters**: optional `scale` (ones) and `bias` (zeros) [features] in `P::param_type`;
///   `for_each_parameter` walks "scale", "bias".
/// - **State** (not parameters, never touched by an optimiser): running mean (zeros) and variance
///   (ones) [features] in `stat_type = statistics_t<compute_t<P, input_type>>` = promote_types(float32,
///   compute) (FLIP 1777: "calculating statistics is by default always done in float32 ... we should now
///   use np.promote_types(float32, dtype) ... The running batch statistics will be stored with the same
///   dtype"). `for_each_buffer` walks "mean", "var" (Flax's `batch_stats` names) and, under the pytorch
///   convention, "num_batches_tracked" (a [1] tensor holding the count) for checkpoints.
/// - **Input**: x [..., features], rank >= 2 (the batch axes first), element type T; a view or map
///   as for every layer (docs/layers.md, "Containers"). Output `output_t<P, T>`, same shape.
/// - **Computation**: x rounded to C = `compute_t<P, T>` and widened to S = `statistics_t<C>` (float32
///   for bfloat16, float16, float32; float64 for float64). Train mode: per feature, sums of d = x - x[first
///   row] and d^2, over blocks of 8 rows in S and then in float64 (the shift keeps them accurate for data
///   ~1e6 with unit spread), the mean and biased variance rounded to S; workers' partial statistics
///   combine by Chan et al.'s pairwise rule. Two passes over x (statistics, normalisation:
///   kernels/batch_norm.hpp, vectorised and split over the kernels' threads); `forward_into` writes into a caller's
///   array. Eval mode: the running statistics. Then `(x - mean) * (rsqrt(var + eps) * scale) + bias` in S with the
///   parameters rounded to C, rounded once to the output type. A batch of one row has variance 0 and gives `bias`
///   (finite) under the flax convention.
/// - **Errors** (`std::invalid_argument`, naming the sizes): zero features; an input of rank < 2 or
///   whose last axis is not `features()`; a train-mode batch of zero rows, or of one row under the
///   pytorch convention (PyTorch: "Expected more than 1 value per channel when training"); train mode
///   on a const layer.
/// - **Complex** inputs (FLIP 1777, Flax's `_compute_stats`): the mean is complex, the variance is
///   mean(|x - mean|^2), real; the running mean is then complex (`stat_type`) and the running variance
///   real (`var_type`): declare `batch_norm<P, std::complex<float>>`. No backward pass for them (as
///   layer_norm's and group_norm's).
/// - **The running statistics' dtype** is `promote_types(float32, compute_t<P, Input>)`, fixed at
///   construction; `Input` (the second template argument) defaults to the param type. A non-const
///   (train-capable) call with an input whose statistics are wider (a float64 input under a promote
///   policy with float32 parameters, a complex input under a real `Input`) does not compile, as storing
///   them would round them or drop an imaginary part: declare `batch_norm<P, double>` or
///   `batch_norm<P, std::complex<float>>` (the static_assert says so). Eval on a const layer takes any
///   input of the layer's kind (real, or complex for a complex Input). The from_scope form takes the
///   default Input only.
///
/// **Example**:
///
///     nn::batch_norm<mixprec::policy<float, mixprec::bfloat16, mixprec::bfloat16>> bn(256);
///     auto y = bn(x, nn::mode::train);    // x [batch, 256]; updates bn.running_mean(), running_var()
///     auto z = std::as_const(bn)(x, nn::mode::eval);   // thread-safe, running statistics
template <class P, class Input = void>
class batch_norm : public detail::norm_params<P> {
  using base = detail::norm_params<P>;
  using base::bias_;
  using base::features_;
  using base::scale_;

 public:
  using typename base::grad_type;
  using typename base::gradients;
  using typename base::param_type;
  /// The input element type whose statistics the running statistics hold: `Input`, or the param type.
  using input_type = std::conditional_t<std::is_void_v<Input>, param_type, Input>;
  using stat_type = statistics_t<compute_t<P, input_type>>;  ///< running mean, promote(float32, C)
  using stat_vector = xt::xtensor<stat_type, 1>;             ///< [features]
  using var_type = internal::real_of_t<stat_type>;           ///< running variance: stat_type's real type
  using var_vector = xt::xtensor<var_type, 1>;               ///< [features]

  /// A layer for `features` features: scale ones, bias zeros, running mean zeros, running variance ones.
  /// \throws std::invalid_argument if `features` is 0 or an option is out of range (batch_norm_options).
  explicit batch_norm(std::size_t features, const batch_norm_options& options = {})
      : base(features, options.use_scale, options.use_bias), options_(options) {
    this->check_some_features("batch_norm");
    detail::check_epsilon("batch_norm", options_.epsilon);
    const bool flax = options_.convention == batch_norm_convention::flax;
    momentum_ = options_.momentum.value_or(flax ? 0.99 : 0.1);
    if (!(momentum_ >= 0.0 && momentum_ <= 1.0)) {
      throw std::invalid_argument(
          internal::concat("batch_norm: momentum is ", detail::number_string(momentum_), " but must be in [0, 1]"));
    }
    if (flax && options_.cumulative_average) {
      throw std::invalid_argument(
          "batch_norm: cumulative_average is PyTorch's momentum=None; set convention = batch_norm_convention::pytorch");
    }
    running_mean_ = stat_vector(xt::zeros<stat_type>({features_}));
    running_var_ = var_vector(xt::ones<var_type>({features_}));
    batches_ = var_vector(xt::zeros<var_type>({1}));
  }

  /// The epsilon added to the variance.
  [[nodiscard]] double epsilon() const noexcept { return options_.epsilon; }
  /// The momentum in the convention's meaning (flax: weight of the old running value; pytorch: of the batch).
  [[nodiscard]] double momentum() const noexcept { return momentum_; }
  /// The options the layer was made with.
  [[nodiscard]] const batch_norm_options& options() const noexcept { return options_; }
  /// The running mean [features] in `stat_type`.
  [[nodiscard]] const stat_vector& running_mean() const noexcept { return running_mean_; }
  /// The running variance [features] in `var_type` (`stat_type` for real statistics).
  [[nodiscard]] const var_vector& running_var() const noexcept { return running_var_; }
  /// Train-mode calls seen (PyTorch's `num_batches_tracked`).
  [[nodiscard]] std::uint64_t batches_tracked() const noexcept { return static_cast<std::uint64_t>(batches_(0)); }

  /// What `backward` needs for inputs of element type T: the mode, x̂ (rows × features) and the reciprocal
  /// standard deviation r [features] in S, and the row count of the whole (synchronised) batch.
  template <class T>
  struct saved {
    using stat_type = statistics_t<compute_t<P, T>>;
    mode used = mode::eval;
    std::vector<stat_type> xhat;                       ///< (x − mean) · r, this call's rows × features
    std::vector<internal::real_of_t<stat_type>> rstd;  ///< r = 1 / sqrt(var + eps) per feature
    std::size_t batch_rows = 0;                        ///< rows of the whole batch (all workers) in train mode
  };

  /// Calls `f(name, tensor)` on the state that is not a parameter (Flax's `batch_stats` collection): "mean",
  /// "var" [features] and, under the pytorch convention, "num_batches_tracked" [1]: the mean in `stat_type`,
  /// the others in `var_type` (the same type unless the statistics are complex).
  /// Checkpoints save and load these; optimisers must not see them.
  template <class F>
  void for_each_buffer(F&& f) {
    f(std::string_view("mean"), running_mean_);
    f(std::string_view("var"), running_var_);
    if (options_.convention == batch_norm_convention::pytorch) f(std::string_view("num_batches_tracked"), batches_);
  }
  /// Const form of `for_each_buffer`.
  template <class F>
  void for_each_buffer(F&& f) const {
    f(std::string_view("mean"), running_mean_);
    f(std::string_view("var"), running_var_);
    if (options_.convention == batch_norm_convention::pytorch) f(std::string_view("num_batches_tracked"), batches_);
  }

  /// Normalises x [..., features] (rank >= 2) in mode `m`; returns the same kind of container in
  /// `output_t<P, T>`. Train mode uses the batch's statistics (the whole group's with `sync`) and updates
  /// the running statistics (under `sync`, worker 0 updates them); eval mode reads them only.
  /// \throws std::invalid_argument as listed in the class comment.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in, mode m, sync_slot sync = {}) {
    const auto& x = detail::as_array(x_in);
    return train_or_eval<std::nullptr_t>(x, m, nullptr, sync);
  }
  /// Eval mode on a const layer (safe from several threads at once). \throws std::invalid_argument for
  /// `mode::train` (it updates the running statistics: call it on a non-const layer).
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in, mode m) const {
    const auto& x = detail::as_array(x_in);
    return run<std::nullptr_t>(x, m, nullptr, sync_slot{}, nullptr);
  }

  /// `operator()(x, m, sync)`, saving x̂ and r in `ctx` for `backward`. Same bits as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx, mode m, sync_slot sync = {}) {
    const auto& x = detail::as_array(x_in);
    return train_or_eval(x, m, &ctx, sync);
  }
  /// Eval-mode `forward` on a const layer. \throws std::invalid_argument for `mode::train`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx, mode m) const {
    const auto& x = detail::as_array(x_in);
    return run(x, m, &ctx, sync_slot{}, nullptr);
  }

  /// `operator()(x, m, sync)` written into `out`, which must have x's shape and element type
  /// `output_t<P, T>` (a caller's buffer: no allocation for the result). Same bits as `operator()`.
  /// \throws std::invalid_argument as `operator()`, or if out's shape is not x's.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, mode m, sync_slot sync = {}) {
    auto&& out = detail::as_output(out_in);
    const auto& x = detail::as_array(x_in);
    std::string out_error;  // reported in every worker of a group, as run_into's own errors
    try {
      check_out<X>(out, x);
    } catch (const std::invalid_argument& e) {
      if (sync.group == nullptr || m == mode::eval) throw;
      out_error = e.what();
    }
    check_storable<detail::value_t<X>>();
    partial total;
    run_into(x, out_error.empty() ? out.data() : nullptr, m, static_cast<std::nullptr_t>(nullptr), sync, &total,
             out_error);
    if (m == mode::train && (sync.group == nullptr || sync.worker == 0)) update_running(total);
  }
  /// Eval-mode `forward_into` on a const layer. \throws std::invalid_argument for `mode::train`.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, mode m) const {
    auto&& out = detail::as_output(out_in);
    const auto& x = detail::as_array(x_in);
    check_out<X>(out, x);
    run_into(x, out.data(), m, static_cast<std::nullptr_t>(nullptr), sync_slot{}, nullptr);
  }

  /// The VJP. Train mode, through the batch statistics (PyTorch's batch_norm_backward; docs/training.md, "Gradient
  /// formulas"): with N the rows of the whole batch and sums over all of them (every worker's, met in `sync`), `dx = r
  /// · scale · (dy − Σdy / N − x̂ · Σ(dy·x̂) / N)` per feature; eval mode, through the affine map only: `dx = r · scale ·
  /// dy`. dx is rounded once to the input type T (same kind of container as dy); `grads.scale += Σ dy·x̂`, `grads.bias
  /// += Σ dy` over this call's rows (in `grad_t<P>`: the trainer sums the workers' gradients). \throws
  /// std::invalid_argument if dy's shape is not the saved forward's or the gradients do not match the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads, sync_slot sync = {}) const {
    const auto& dy = detail::as_array(dy_in);
    using C = compute_t<P, T>;
    using S = typename saved<T>::stat_type;
    const std::size_t f = features_;
    std::string error;
    try {
      check_input("batch_norm::backward", dy);
      detail::check_backward_rows("batch_norm::backward", detail::leading_size(dy), ctx.xhat.size() / f);
      if (ctx.rstd.size() != f || ctx.xhat.size() % f != 0) {
        throw std::invalid_argument(internal::concat("batch_norm::backward: the saved context holds ", ctx.rstd.size(),
                                                     " standard deviations but the layer has ", f,
                                                     " features; pass the context filled by this layer's forward()"));
      }
      this->check_gradients("batch_norm::backward", grads);
    } catch (const std::invalid_argument& e) {
      if (sync.group == nullptr || ctx.used == mode::eval) throw;
      error = e.what();
    }
    const std::size_t rows = error.empty() ? ctx.xhat.size() / f : 0;
    const std::vector<S> scale = detail::widened_param<C>(scale_, f, S(1));
    std::vector<double> sdy(f, 0.0), sdyx(f, 0.0);
    std::vector<S> d(f);
    for (std::size_t r = 0; r < rows; ++r) {
      const S* xh = ctx.xhat.data() + r * f;
      for (std::size_t j = 0; j < f; ++j) {
        const S v = internal::round_to<S>(dy.data()[r * f + j]);
        sdy[j] += static_cast<double>(v);
        sdyx[j] += static_cast<double>(v * xh[j]);
      }
    }
    if (grads.scale && error.empty()) {
      for (std::size_t j = 0; j < f; ++j) grads.scale->data()[j] += static_cast<grad_type>(sdyx[j]);
    }
    if (grads.bias && error.empty()) {
      for (std::size_t j = 0; j < f; ++j) grads.bias->data()[j] += static_cast<grad_type>(sdy[j]);
    }
    auto dx = detail::make_like<T>(dy, f);
    if (ctx.used == mode::eval) {
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < f; ++j) {
          const S v = internal::round_to<S>(dy.data()[r * f + j]);
          dx.data()[r * f + j] = internal::round_out<T>(ctx.rstd[j] * scale[j] * v);
        }
      }
      return dx;
    }
    std::vector<double> total_dy = sdy, total_dyx = sdyx;
    if (sync.group != nullptr) {
      std::vector<double> mine(2 * f);
      std::copy(sdy.begin(), sdy.end(), mine.begin());
      std::copy(sdyx.begin(), sdyx.end(), mine.begin() + static_cast<std::ptrdiff_t>(f));
      sync.group->exchange(sync.worker, std::move(mine), error, [&](const std::vector<std::vector<double>>& all) {
        std::fill(total_dy.begin(), total_dy.end(), 0.0);
        std::fill(total_dyx.begin(), total_dyx.end(), 0.0);
        for (const auto& s : all) {
          for (std::size_t j = 0; j < f; ++j) {
            total_dy[j] += s[j];
            total_dyx[j] += s[f + j];
          }
        }
      });
    }
    const double n = static_cast<double>(ctx.batch_rows);
    std::vector<S> mean_dy(f), mean_dyx(f), coef(f);
    for (std::size_t j = 0; j < f; ++j) {
      mean_dy[j] = static_cast<S>(total_dy[j] / n);
      mean_dyx[j] = static_cast<S>(total_dyx[j] / n);
      coef[j] = ctx.rstd[j] * scale[j];
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const S* xh = ctx.xhat.data() + r * f;
      for (std::size_t j = 0; j < f; ++j) {
        const S v = internal::round_to<S>(dy.data()[r * f + j]);
        dx.data()[r * f + j] = internal::round_out<T>(coef[j] * (v - mean_dy[j] - xh[j] * mean_dyx[j]));
      }
    }
    return dx;
  }

 private:
  template <class X>
  void check_input(const char* where, const X& x) const {
    if (x.dimension() < 2) {
      throw std::invalid_argument(internal::concat(where, ": input has shape ", detail::shape_string(x.shape()),
                                                   " (rank ", x.dimension(),
                                                   ") but batch normalisation needs rank >= 2, [batch..., ", features_,
                                                   "]: the statistics are taken over every axis but the last"));
    }
    detail::check_features(where, x, features_, [&] {
      return internal::concat("scale, bias and running statistics shape [", features_, "]");
    });
  }

  template <class X, class Y, class A>
  static void check_out(const Y& out, const A& x) {
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, detail::value_t<X>>>,
                  "batch_norm::forward_into(out, x, mode): out's element type must be output_t<P, T> of the "
                  "layer's policy P for x's element type T; make out with that type, or use the value-returning "
                  "call.");
    detail::check_output_shape("batch_norm::forward_into", "out", out, x);
  }

  /// Whether the statistics of inputs of type T (`promote_types(float32, compute_t<P, T>)`) fit the running
  /// statistics' `stat_type` without rounding: a float64 batch under a policy whose running statistics are
  /// float32 (a promote policy with float32 parameters) would be rounded on storing, and a complex batch
  /// has a complex mean.
  template <class T>
  static constexpr bool storable = std::is_same_v<promote_t<statistics_t<compute_t<P, T>>, stat_type>, stat_type>;

  /// Train-capable calls (non-const) refuse at compile time the inputs whose statistics `stat_type` cannot hold.
  template <class T>
  static constexpr void check_storable() {
    static_assert(storable<T>,
                  "batch_norm: this input's statistics (promote_types(float32, compute_t<P, T>): float64 or complex) "
                  "are wider than the running statistics' stat_type, fixed by the policy at construction "
                  "(promote_types(float32, compute_t<P, input_type>), input_type the param type unless given), so "
                  "a train-mode call would round them on storing. Declare the layer as nn::batch_norm<P, T> with T "
                  "this input's element type (e.g. double, std::complex<float>), or call eval mode on a const "
                  "layer (std::as_const(bn)(x, nn::mode::eval)).");
  }

  /// Per-feature partial statistics of this worker: rows, mean (complex for complex statistics, else with
  /// imaginary part 0) and M2 = Σ |x - mean|^2, in float64.
  struct partial {
    double rows = 0;
    std::vector<std::complex<double>> mean;
    std::vector<double> m2;
  };

  /// This worker's partial statistics of x [rows, features]: the shifted sums of kernels::batch_norm_sums
  /// (d = x - x[first row], in blocks of 8 rows summed in S, then float64), turned into the mean and M2.
  template <class C, class T>
  partial partial_stats(const T* in, std::size_t rows) const {
    using S = accumulator_t<C>;  // statistics_t<C>, complex for complex C
    using A = std::conditional_t<detail::is_complex_v<S>, std::complex<double>, double>;
    const std::size_t f = features_;
    partial p;
    p.rows = static_cast<double>(rows);
    p.mean.assign(f, 0.0);
    p.m2.assign(f, 0.0);
    if (rows == 0) return p;
    std::vector<S> shift(f);
    internal::round_widen_n<C>(in, f, shift.data());
    std::vector<A> s1(f);
    std::vector<double> s2(f);
    kernels::batch_norm_sums<C>(in, rows, f, shift.data(), s1.data(), s2.data());
    const double n = p.rows;
    for (std::size_t j = 0; j < f; ++j) {
      p.mean[j] = static_cast<std::complex<double>>(static_cast<A>(shift[j]) + s1[j] / n);
      p.m2[j] = std::max(0.0, s2[j] - std::norm(std::complex<double>(s1[j])) / n);
    }
    return p;
  }

  /// Chan, Golub and LeVeque's pairwise combination: b merged into a.
  static void merge(partial& a, const partial& b) {
    if (b.rows == 0) return;
    if (a.rows == 0) {
      a = b;
      return;
    }
    const double n = a.rows + b.rows;
    for (std::size_t j = 0; j < a.mean.size(); ++j) {
      const std::complex<double> delta = b.mean[j] - a.mean[j];
      a.mean[j] += delta * (b.rows / n);
      a.m2[j] += b.m2[j] + std::norm(delta) * (a.rows * b.rows / n);
    }
    a.rows = n;
  }

  /// `run` on a non-const layer: train mode then updates the running statistics (worker 0 of a group).
  template <class Ctx, class X>
  auto train_or_eval(const X& x, mode m, Ctx ctx, sync_slot sync) {
    check_storable<detail::value_t<X>>();
    partial total;
    auto y = run(x, m, ctx, sync, &total);
    if (m == mode::train && (sync.group == nullptr || sync.worker == 0)) update_running(total);
    return y;
  }

  /// The forward pass; in train mode the batch's combined statistics go to `*total` (nullptr: a const
  /// layer, where train mode is an error).
  template <class Ctx, class X>
  auto run(const X& x, mode m, Ctx ctx, sync_slot sync, partial* total_out) const {
    using O = output_t<P, detail::value_t<X>>;
    // A rank-0 x is an error reported below (in every worker of a group); its y is never written.
    auto y = x.dimension() == 0 ? detail::rebind_t<X, O>::from_shape(x.shape()) : detail::make_like<O>(x, features_);
    run_into(x, y.data(), m, ctx, sync, total_out);
    return y;
  }

  /// The forward pass written to `out` (x's rows × features elements).
  template <class Ctx, class X, class O>
  void run_into(const X& x, O* out_data, mode m, Ctx ctx, sync_slot sync, partial* total_out,
                const std::string& earlier_error = {}) const {
    const bool may_update = total_out != nullptr;
    using T = detail::value_t<X>;
    static_assert(std::is_same_v<Ctx, std::nullptr_t> || !detail::is_complex_v<T>,
                  "batch_norm::forward(x, ctx, mode): complex inputs have no backward pass here (as for layer_norm "
                  "and group_norm); normalise them with operator()(x, mode) or forward_into.");
    using C = compute_t<P, T>;
    using S = accumulator_t<C>;  // statistics_t<C>, complex for complex C (FLIP 1777)
    using R = internal::real_of_t<S>;
    static_assert(!detail::is_complex_v<stat_type> || detail::is_complex_v<S>,
                  "batch_norm<P, std::complex<...>>: the running mean is complex, so inputs must be complex too; "
                  "convert real inputs to std::complex, or use a batch_norm with a real Input type.");
    static_assert(std::is_same_v<O, output_t<P, T>>);
    const std::size_t f = features_;
    std::string error;
    try {
      if (!earlier_error.empty()) throw std::invalid_argument(earlier_error);
      check_input("batch_norm", x);
      if (m == mode::train && !may_update) {
        throw std::invalid_argument(
            "batch_norm: mode::train updates the running statistics, so it needs a non-const layer; use "
            "mode::eval on a const layer");
      }
    } catch (const std::invalid_argument& e) {
      if (sync.group == nullptr || m == mode::eval) throw;
      error = e.what();
    }
    const std::size_t rows = error.empty() ? detail::leading_size(x) : 0;
    std::vector<S> mean(f), corr(f, S(0));
    std::vector<R> rstd(f);
    std::size_t batch_rows = rows;
    if (m == mode::train) {
      partial total = partial_stats<C>(x.data(), rows);
      if (sync.group != nullptr) {
        // [rows, Re mean (f), Im mean (f), M2 (f)]
        std::vector<double> mine(1 + 3 * f);
        mine[0] = total.rows;
        for (std::size_t j = 0; j < f; ++j) {
          mine[1 + j] = total.mean[j].real();
          mine[1 + f + j] = total.mean[j].imag();
          mine[1 + 2 * f + j] = total.m2[j];
        }
        sync.group->exchange(sync.worker, std::move(mine), error, [&](const std::vector<std::vector<double>>& all) {
          total = partial{};
          for (const auto& s : all) {
            partial p;
            p.rows = s[0];
            p.mean.resize(f);
            p.m2.resize(f);
            for (std::size_t j = 0; j < f; ++j) {
              p.mean[j] = {s[1 + j], s[1 + f + j]};
              p.m2[j] = s[1 + 2 * f + j];
            }
            merge(total, p);
          }
        });
      }
      batch_rows = static_cast<std::size_t>(total.rows);
      const bool pytorch = options_.convention == batch_norm_convention::pytorch;
      if (batch_rows == 0 || (pytorch && batch_rows == 1)) {
        throw std::invalid_argument(internal::concat(
            "batch_norm: mode::train needs ", pytorch ? "at least 2 rows" : "at least 1 row",
            " in the batch to take statistics from, got ", batch_rows, " (input shape ",
            detail::shape_string(x.shape()), ")",
            pytorch ? "; the pytorch convention's unbiased variance divides by rows - 1 (PyTorch: \"Expected more "
                      "than 1 value per channel when training\")"
                    : ""));
      }
      const double n = total.rows;
      for (std::size_t j = 0; j < f; ++j) {
        const double var = total.m2[j] / n;
        mean[j] = narrowed<S>(total.mean[j]);
        corr[j] = narrowed<S>(total.mean[j] - static_cast<std::complex<double>>(mean[j]));
        // r in float64, rounded once: var itself may exceed float (a column of +-3e19), r never does.
        rstd[j] = static_cast<R>(1.0 / std::sqrt(var + options_.epsilon));
      }
      *total_out = std::move(total);
    } else {
      for (std::size_t j = 0; j < f; ++j) {
        mean[j] = static_cast<S>(running_mean_(j));
        rstd[j] = static_cast<R>(1.0 / std::sqrt(static_cast<double>(running_var_(j)) + options_.epsilon));
      }
    }
    // Parameters rounded to the compute type, in S (1 and 0 when absent).
    std::vector<S> mult = detail::widened_param<C>(scale_, f, S(1));
    const std::vector<S> bias = detail::widened_param<C>(bias_, f, S(0));
    for (std::size_t j = 0; j < f; ++j) mult[j] *= rstd[j];
    S* xhat = nullptr;
    const S* rstd_of_xhat = nullptr;  // x̂ is saved for real inputs only (complex ones have no backward)
    if constexpr (!std::is_same_v<Ctx, std::nullptr_t> && !detail::is_complex_v<S>) {
      ctx->used = m;
      ctx->rstd = rstd;
      ctx->batch_rows = batch_rows;
      ctx->xhat.resize(rows * f);
      xhat = ctx->xhat.data();
      rstd_of_xhat = rstd.data();
    }
    kernels::batch_norm_apply<C>(x.data(), rows, f, mean.data(), corr.data(), mult.data(), bias.data(), rstd_of_xhat,
                                 out_data, xhat);
  }

  /// A float64 statistic as S: the real part when S is real (the imaginary part is then 0), else rounded.
  template <class S>
  static S narrowed(const std::complex<double>& z) noexcept {
    if constexpr (detail::is_complex_v<S>) {
      return static_cast<S>(z);
    } else {
      return static_cast<S>(z.real());
    }
  }

  /// The running-statistics update of `options_.convention`, in float64 (complex float64 for a complex
  /// mean), rounded to `stat_type` and `var_type`.
  void update_running(const partial& total) {
    const double n = total.rows;
    const double seen = static_cast<double>(batches_(0)) + 1.0;
    batches_(0) = static_cast<var_type>(seen);
    const bool pytorch = options_.convention == batch_norm_convention::pytorch;
    // w: the weight of the batch's statistic.
    const double w = pytorch ? (options_.cumulative_average ? 1.0 / seen : momentum_) : 1.0 - momentum_;
    for (std::size_t j = 0; j < features_; ++j) {
      const double var = pytorch ? total.m2[j] / (n - 1.0) : total.m2[j] / n;
      if constexpr (detail::is_complex_v<stat_type>) {
        running_mean_(j) =
            static_cast<stat_type>((1.0 - w) * static_cast<std::complex<double>>(running_mean_(j)) + w * total.mean[j]);
      } else {
        running_mean_(j) =
            static_cast<stat_type>((1.0 - w) * static_cast<double>(running_mean_(j)) + w * total.mean[j].real());
      }
      running_var_(j) = static_cast<var_type>((1.0 - w) * static_cast<double>(running_var_(j)) + w * var);
    }
  }

  batch_norm_options options_;
  double momentum_ = 0.99;
  stat_vector running_mean_;
  var_vector running_var_;
  var_vector batches_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<batch_norm> = "mixprec::nn::batch_norm";
}  // namespace detail

/// batch_norm with its policy taken from the `policy_scope` live at construction: one of the listed `Ps...`
/// (nn/from_scope.hpp). Constructed with `batch_norm<P>`'s constructor arguments, optionally preceded by
/// `compute_dtype(...)`, or with `from_factory`. Adds to `scoped_layer` the non-const train-mode call and
/// the buffer walk. Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class batch_norm<from_scope<Ps...>, void> : public detail::scoped_layer<batch_norm, Ps...> {
  using base = detail::scoped_layer<batch_norm, Ps...>;

 public:
  using base::base;
  using base::operator();

  /// `batch_norm<P>::operator()(x, m, sync)` of the selected policy (train mode updates its running
  /// statistics). Returns what the const call returns for the same input.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x, mode m, sync_slot sync = {}) {
    using R = std::remove_cvref_t<decltype(std::declval<const base&>()(x, m))>;
    return this->visit([&](auto& layer) { return detail::to_common_result<R>(layer(x, m, sync)); });
  }

  /// The layer's `for_each_buffer(f)` (a generic `f`: the tensors are in each policy's `stat_type`).
  template <class F>
  void for_each_buffer(F&& f) {
    this->visit([&](auto& layer) { layer.for_each_buffer(f); });
  }
  /// Const form of `for_each_buffer`.
  template <class F>
  void for_each_buffer(F&& f) const {
    this->visit([&](const auto& layer) { layer.for_each_buffer(f); });
  }
};

}  // namespace mixprec::nn
