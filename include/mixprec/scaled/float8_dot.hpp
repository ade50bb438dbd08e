/// \file
/// \brief Quantised products to inject into dense layers (nn/dot_product.hpp, "dot injection"):
/// `scaled::float8_dot`, the float8 product of NVIDIA TransformerEngine's delayed-scaling recipe
/// (forward E4M3, backward E5M2 under the hybrid format), and `scaled::float8_weight_dot`, weight-only
/// float8 with per-output-channel scales.
///
/// **float8_dot** (per layer: three `delayed_scaling` tensors, x, kernel and dy; by default the kernel
/// is scaled by its current amax instead, see the constructor). Each call quantises its operands by
/// their delayed scales (data = v * M / scale, rounded to nearest even, saturated to
/// +-M and counted when they saturate), multiplies the float8 data through kernels::matmul (converted
/// exactly to bfloat16, products exact and summed in float32) and multiplies the sums by the two
/// steps (scale / M):
///
///     forward   y      = Q_fwd(x) · Q_fwd(kernel)                      (e4m3fn x e4m3fn)
///     backward  dx     = Q_bwd(dy) · Q_fwd(kernel)ᵀ                    (e5m2 x e4m3fn under hybrid)
///               dkernel = Q_fwd(x)ᵀ · Q_bwd(dy)                        (e4m3fn x e5m2)
///
/// The backward pass quantises x and the kernel with the scales of the forward pass of the same step,
/// so it sees the operands the forward saw (TransformerEngine keeps them; we quantise again, bit for
/// bit the same, once a history exists: before it each call measures its own operands, and a layer
/// that projects its rows in chunks — feed_forward — quantises each chunk of x by its own amax in that
/// first forward pass). The kernel is quantised and packed (bfloat16 panels) once and kept per layer
/// until the layer's parameters change (`nn::dot_product::parameters_changed`, which `dense` calls on
/// every non-const access) or, with delayed kernel scaling, until its scale moves: an optimiser step
/// prepares it afresh, the forward and backward passes of a step share it. Each call records the
/// amaxes of its operands; `update_scales()`, called once per
/// training step after the optimiser (TE's amax reduction at the end of an iteration), moves the
/// step's largest amax of each tensor into its history, so the scales used at step t come from the
/// amaxes of steps before t. Before any history, a call measures its operands (current scaling) so the
/// first step is not quantised by an arbitrary scale (TE starts from scale 1). Thread-safe: the
/// training loop's workers call one layer at once; the scales change only in `update_scales`.
///
/// **float8_weight_dot** (weight-only float8, for inference): the kernel is quantised to e4m3fn with
/// one scale per output column (its amax, current scaling) and kept, as 1-byte panels, until the
/// layer's parameters change; each call multiplies it with x rounded to bfloat16,
/// y[:, j] = (x · Q(kernel)[:, j]) * step_j (products exact, sums in float32, the step applied in
/// double and rounded once). Its backward pass is the
/// straight-through estimator: dx uses the quantised kernel, dkernel = xᵀ · dy in float32 (the master
/// weights are updated as if the quantisation were the identity).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "mixprec/formats/bfloat16.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/formats/saturate_cast.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/quantise.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/scratch.hpp"
#include "mixprec/nn/dot_product.hpp"
#include "mixprec/scaled/delayed_scaling.hpp"
#include "mixprec/scaled/scaled_format.hpp"

namespace mixprec::scaled {

/// Counters of a float8 product: saturated operand elements since construction, per tensor.
struct float8_clip_counts {
  std::size_t x = 0;       ///< inputs beyond the delayed scale of x
  std::size_t kernel = 0;  ///< weights beyond theirs
  std::size_t dy = 0;      ///< output gradients beyond theirs
};

/// The float8 product with delayed scaling (file comment), for `nn::dense::set_dot`. `Format` is the
/// recipe (TE's `Format`): hybrid (e4m3fn forward, e5m2 backward, TE's default) or e4m3.
template <float8_recipe_format Format = float8_recipe_format::hybrid>
class float8_dot final : public nn::dot_product {
 public:
  using forward_format = typename float8_recipe_formats<Format>::forward_format;
  using backward_format = typename float8_recipe_formats<Format>::backward_format;

  /// A product whose three tensors use `options` (history length, max/most_recent, margin, power of
  /// two). With `current_kernel_scaling` (the default) the kernel is scaled by its own amax instead,
  /// measured whenever the kept kernel is prepared again (after each change of the parameters;
  /// current scaling, as torchao's float8 training does for weights): the weights change at every
  /// optimiser step and usually grow, so a delayed scale would saturate their largest elements step
  /// after step, while their amax is one cheap pass over a tensor far smaller than the activations.
  /// Its amaxes still go into `kernel_scaling()`'s history, for reports.
  /// \throws std::invalid_argument for invalid options (delayed_scaling's checks).
  explicit float8_dot(const delayed_scaling_options& options = {}, bool current_kernel_scaling = true)
      : x_(options), kernel_(options), dy_(options), current_kernel_scaling_(current_kernel_scaling) {}

  void forward(std::span<const float> x, std::span<const float> kernel, std::span<float> y, nn::dot_shape s) override {
    const double x_scale = scale_for<forward_format>(x_, x);
    const auto xq = internal::thread_scratch<forward_format, struct forward_x>(x.size());
    std::size_t x_clips = 0;
    const float x_amax = kernels::quantise_by_scale(x, x_scale, xq, x_clips);
    const prepared_view k = prepared(kernel, s, false);
    kernels::matmul<bfloat16>(xq, *k.packed, y, s.rows);
    scale_by(y, x_scale / format_max<forward_format>() * k.step);
    const std::lock_guard lock(mutex_);
    pending_.x = nan_max(pending_.x, x_amax);
    pending_.kernel = nan_max(pending_.kernel, k.amax);
    clips_.x += x_clips;
    clips_.kernel += k.clips;
  }

  void backward(std::span<const float> x, std::span<const float> dy, std::span<const float> kernel, std::span<float> dx,
                std::span<float> dkernel, nn::dot_shape s) override {
    const double x_scale = scale_for<forward_format>(x_, x);
    const double dy_scale = scale_for<backward_format>(dy_, dy);
    const auto xq = internal::thread_scratch<forward_format, struct backward_x>(x.size());
    const auto gq = internal::thread_scratch<backward_format, struct backward_dy>(dy.size());
    std::size_t ignored = 0, g_clips = 0;  // x and the kernel were counted in the forward pass
    (void)kernels::quantise_by_scale(x, x_scale, xq, ignored);
    const float g_amax = kernels::quantise_by_scale(dy, dy_scale, gq, g_clips);
    const prepared_view k = prepared(kernel, s, true);
    const double x_step = x_scale / format_max<forward_format>();
    const double dy_step = dy_scale / format_max<backward_format>();
    // dx [rows, in] = dy [rows, out] · kernelᵀ: the kept kernel packed as b(k = out, n = in).
    kernels::matmul<bfloat16>(gq, *k.packed, dx, s.rows);
    scale_by(dx, dy_step * k.step);
    // dkernel [in, out] = xᵀ [in, rows] · dy [rows, out].
    std::fill(dkernel.begin(), dkernel.end(), 0.0f);
    kernels::matmul_accumulate<bfloat16>(xq, kernels::a_layout::k_m, gq, kernels::b_layout::k_n, dkernel,
                                         {.m = s.in, .k = s.rows, .n = s.out});
    scale_by(dkernel, x_step * dy_step);
    const std::lock_guard lock(mutex_);
    pending_.dy = nan_max(pending_.dy, g_amax);
    clips_.dy += g_clips;
  }

  /// Drops the kept kernel (nn::dot_product::parameters_changed): the next call quantises and packs
  /// the kernel it is handed.
  void parameters_changed() noexcept override {
    const std::lock_guard lock(kernel_mutex_);
    kept_ = {};
  }

  /// Ends a training step: the step's amax of each tensor (the largest over every call since the last
  /// update) goes into its history (`delayed_scaling::update`), and the scales for the next step follow.
  /// Tensors not used since the last update are left alone (TE skips a zero amax).
  void update_scales() {
    const std::lock_guard lock(mutex_);
    if (pending_.x) x_.update(*pending_.x);
    if (pending_.kernel) kernel_.update(*pending_.kernel);
    if (pending_.dy) dy_.update(*pending_.dy);
    pending_ = {};
  }

  /// The delayed scaling of the inputs, the weights and the output gradients (histories, scales, and
  /// checkpoint state). Not to be read while another thread runs the layer.
  [[nodiscard]] const delayed_scaling<forward_format>& x_scaling() const noexcept { return x_; }
  [[nodiscard]] const delayed_scaling<forward_format>& kernel_scaling() const noexcept { return kernel_; }
  [[nodiscard]] const delayed_scaling<backward_format>& dy_scaling() const noexcept { return dy_; }

  /// Replaces the three scalings and the clip counts with saved ones (`x_scaling().state()`, ...,
  /// `clip_counts()` of the product being continued, e.g. from a checkpoint), dropping any amaxes not
  /// yet applied by `update_scales`: the product then continues as the saved one would have. Not to be
  /// called while another thread runs the layer.
  /// \throws std::invalid_argument for a state `delayed_scaling` refuses (non-finite scale, a history
  ///         longer than its options allow, ...); nothing is changed then.
  void restore(const delayed_scaling_state& x, const delayed_scaling_state& kernel, const delayed_scaling_state& dy,
               const float8_clip_counts& clips) {
    delayed_scaling<forward_format> x_new(x);
    delayed_scaling<forward_format> kernel_new(kernel);
    delayed_scaling<backward_format> dy_new(dy);
    const std::lock_guard lock(mutex_);
    x_ = std::move(x_new);
    kernel_ = std::move(kernel_new);
    dy_ = std::move(dy_new);
    clips_ = clips;
    pending_ = {};
  }

  /// Saturated operand elements since construction (or since the counts a `restore` set).
  [[nodiscard]] float8_clip_counts clip_counts() const {
    const std::lock_guard lock(mutex_);
    return clips_;
  }

 private:
  struct pending_amaxes {
    std::optional<double> x, kernel, dy;
  };

  static std::optional<double> nan_max(std::optional<double> held, float amax) {
    const auto a = static_cast<double>(amax);
    if (!held || std::isnan(a) || *held < a) return a;
    return held;
  }

  /// y *= step, the product in double rounded once to float (a float step could underflow).
  static void scale_by(std::span<float> y, double step) {
    for (float& v : y) v = static_cast<float>(static_cast<double>(v) * step);
  }

  /// What a call needs of one tensor's scaling, read under the lock (update_scales may run on another
  /// thread): its scale, whether to measure the operand instead (no history yet, or current scaling),
  /// and the options that turn an amax into a scale.
  struct held_scale {
    double scale;
    bool measure;
    delayed_scaling_options options;
  };

  template <class F>
  static held_scale hold(const delayed_scaling<F>& d, bool current) {
    return {d.scale(), current || d.amax_history().empty(), d.options()};
  }

  /// The held scale, or the rule (margin, power of two) applied to the operand's own amax (measured
  /// outside the lock, by kernels::absmax).
  template <class F>
  static double scale_of(const held_scale& held, std::span<const float> x) {
    if (!held.measure || x.empty()) return held.scale;
    delayed_scaling<F> current(held.options);
    current.update_from(x);
    return current.scale();
  }

  /// The scale of one activation operand: its delayed scale, or its own amax before any history.
  template <class F, class D>
  double scale_for(const D& scaling, std::span<const float> x) const {
    std::unique_lock lock(mutex_);
    const held_scale held = hold(scaling, false);
    lock.unlock();
    return scale_of<F>(held, x);
  }

  /// The kernel quantised by its scale and packed for the products, kept per layer (`dot_shape::owner`)
  /// until `parameters_changed` (the layer's kernel changed) or, with delayed kernel scaling, until
  /// its scale moves. Quantising and packing happen once per kernel instead of twice per step.
  struct kept_kernel {
    const void* owner = nullptr;
    std::size_t in = 0, out = 0;
    double scale = 0.0;
    float amax = 0.0f;
    std::size_t clips = 0;
    std::vector<forward_format> data;                   ///< [in, out], quantised
    std::shared_ptr<const kernels::packed_b> forward;   ///< b(in, out): y = x · kernel
    std::shared_ptr<const kernels::packed_b> backward;  ///< b(out, in): dx = dy · kernelᵀ, on first use
  };
  /// What a call reads of the kept kernel (the packing is shared, immutable).
  struct prepared_view {
    std::shared_ptr<const kernels::packed_b> packed;
    double step;  ///< scale / M: the value of one data unit
    float amax;
    std::size_t clips;
  };

  prepared_view prepared(std::span<const float> kernel, nn::dot_shape s, bool transposed) {
    std::unique_lock lock(mutex_);
    const held_scale held = hold(kernel_, current_kernel_scaling_);
    lock.unlock();
    const std::lock_guard kernel_lock(kernel_mutex_);
    kept_kernel& k = kept_;
    const bool valid = s.owner != nullptr && k.owner == s.owner && k.in == s.in && k.out == s.out &&
                       k.data.size() == kernel.size() && (held.measure || k.scale == held.scale);
    if (!valid) {
      k = {};
      k.scale = scale_of<forward_format>(held, kernel);
      k.data.resize(kernel.size());
      k.amax = kernels::quantise_by_scale(kernel, k.scale, std::span<forward_format>(k.data), k.clips);
      k.forward = std::make_shared<const kernels::packed_b>(
          kernels::pack_b<bfloat16>(k.data, s.in, s.out, kernels::b_layout::k_n));
      k.owner = s.owner;  // a kernel without an owner is prepared again at every call
      k.in = s.in;
      k.out = s.out;
    }
    if (transposed && !k.backward) {
      k.backward = std::make_shared<const kernels::packed_b>(
          kernels::pack_b<bfloat16>(k.data, s.out, s.in, kernels::b_layout::n_k));
    }
    return {transposed ? k.backward : k.forward, k.scale / format_max<forward_format>(), k.amax, k.clips};
  }

  mutable std::mutex mutex_;
  delayed_scaling<forward_format> x_;
  delayed_scaling<forward_format> kernel_;
  delayed_scaling<backward_format> dy_;
  bool current_kernel_scaling_;
  pending_amaxes pending_;
  float8_clip_counts clips_;
  mutable std::mutex kernel_mutex_;  ///< guards kept_ (taken after mutex_ is released, never inside it)
  kept_kernel kept_;
};

/// Weight-only float8 (file comment): the kernel quantised to e4m3fn per output column, x rounded to
/// bfloat16, float32 accumulation; straight-through backward. The quantised kernel is kept per layer
/// (`dot_shape::owner`) as 1-byte panels (kernels::packed_b keeps float8_e4m3fn weights as their own
/// bytes: a single-row product streams one byte per weight) until `parameters_changed`; memory: one byte per
/// weight plus one double per output column (the backward pass adds a transposed packing, bfloat16
/// where a column holds NaN, on first use). Use one product per layer: a product shared by several
/// layers prepares the kernel again whenever the layer changes. Thread-safe.
class float8_weight_dot final : public nn::dot_product {
 public:
  void forward(std::span<const float> x, std::span<const float> kernel, std::span<float> y, nn::dot_shape s) override {
    const prepared_view k = prepared(kernel, s, false);
    kernels::matmul<bfloat16>(x, *k.packed, y, s.rows);
    const double* steps = k.kept->steps.data();
    for (std::size_t r = 0; r < s.rows; ++r) {
      float* row = y.data() + r * s.out;
      for (std::size_t j = 0; j < s.out; ++j) row[j] = static_cast<float>(static_cast<double>(row[j]) * steps[j]);
    }
  }

  void backward(std::span<const float> x, std::span<const float> dy, std::span<const float> kernel, std::span<float> dx,
                std::span<float> dkernel, nn::dot_shape s) override {
    const prepared_view k = prepared(kernel, s, true);
    // dx = dy · (Q(kernel) * step)ᵀ: the column steps move onto dy's columns.
    const std::span<float> dy_scaled = internal::thread_scratch<float, struct weight_dot_dy>(dy.size());
    const double* steps = k.kept->steps.data();
    for (std::size_t r = 0; r < s.rows; ++r) {
      for (std::size_t j = 0; j < s.out; ++j) {
        dy_scaled[r * s.out + j] = static_cast<float>(static_cast<double>(dy[r * s.out + j]) * steps[j]);
      }
    }
    kernels::matmul<bfloat16>(dy_scaled, *k.packed, dx, s.rows);
    std::fill(dkernel.begin(), dkernel.end(), 0.0f);
    kernels::matmul_accumulate<float>(x, kernels::a_layout::k_m, dy, kernels::b_layout::k_n, dkernel,
                                      {.m = s.in, .k = s.rows, .n = s.out});
  }

  /// Drops the kept kernel (nn::dot_product::parameters_changed): the next call quantises and packs
  /// the kernel it is handed.
  void parameters_changed() noexcept override {
    const std::lock_guard lock(mutex_);
    kept_.reset();
    backward_.reset();
  }

  /// Bytes of the kept kernel (its packings and column steps); 0 when none is kept.
  [[nodiscard]] std::size_t kept_bytes() const {
    const std::lock_guard lock(mutex_);
    if (!kept_) return 0;
    return kept_->forward.bytes() + kept_->steps.size() * sizeof(double) + (backward_ ? backward_->bytes() : 0);
  }

 private:
  /// The kernel quantised per column and packed as b(in, out); immutable once made.
  struct kept_kernel {
    const void* owner = nullptr;
    std::size_t in = 0, out = 0;
    std::vector<double> steps;  ///< [out]: the value of one e4m3fn unit of each column
    kernels::packed_b forward;  ///< b(in, out): y = x · Q(kernel)
  };
  struct prepared_view {
    std::shared_ptr<const kept_kernel> kept;
    std::shared_ptr<const kernels::packed_b> backward_pack;  ///< set when asked for the transposed packing
    const kernels::packed_b* packed;                         ///< the packing the call asked for
  };

  /// kq = kernel / step_j rounded to e4m3fn, step_j = amax of column j / 448 (1 for a zero column),
  /// in double: a tiny column keeps a tiny step instead of a float step that underflows.
  static std::vector<double> quantise_columns(std::span<const float> kernel, nn::dot_shape s,
                                              std::vector<float8_e4m3fn>& kq) {
    constexpr double m = format_max<float8_e4m3fn>();
    std::vector<double> steps(s.out, 0.0);
    for (std::size_t i = 0; i < s.in; ++i) {
      for (std::size_t j = 0; j < s.out; ++j) steps[j] = std::max(steps[j], std::fabs(double(kernel[i * s.out + j])));
    }
    for (double& step : steps) step = step > 0.0 ? step / m : 1.0;
    kq.resize(kernel.size());
    for (std::size_t i = 0; i < s.in; ++i) {
      for (std::size_t j = 0; j < s.out; ++j) {
        // |kernel / step| <= 448 up to rounding; NaN stays NaN (e4m3fn's NaN).
        kq[i * s.out + j] = saturate_cast<float8_e4m3fn>(double(kernel[i * s.out + j]) / steps[j]);
      }
    }
    return steps;
  }

  static std::shared_ptr<const kept_kernel> prepare(std::span<const float> kernel, nn::dot_shape s) {
    auto k = std::make_shared<kept_kernel>();
    std::vector<float8_e4m3fn> kq;
    k->steps = quantise_columns(kernel, s, kq);
    k->forward = kernels::pack_b<bfloat16>(kq, s.in, s.out, kernels::b_layout::k_n);
    k->owner = s.owner;
    k->in = s.in;
    k->out = s.out;
    return k;
  }

  /// The kept kernel for this call (prepared now when none is kept for this layer and shape), and the
  /// transposed packing when `transposed`.
  prepared_view prepared(std::span<const float> kernel, nn::dot_shape s, bool transposed) {
    std::shared_ptr<const kept_kernel> k;
    std::shared_ptr<const kernels::packed_b> back;
    if (s.owner == nullptr) {  // nothing is kept (weight cache off): prepare for this call only
      k = prepare(kernel, s);
    } else {
      const std::lock_guard lock(mutex_);
      if (!kept_ || kept_->owner != s.owner || kept_->in != s.in || kept_->out != s.out) {
        kept_ = prepare(kernel, s);
        backward_.reset();
      }
      k = kept_;
      back = backward_;
    }
    if (!transposed) return {k, nullptr, &k->forward};
    if (!back) {
      std::vector<float8_e4m3fn> kq;
      (void)quantise_columns(kernel, s, kq);  // the same bits as the kept forward packing
      back =
          std::make_shared<const kernels::packed_b>(kernels::pack_b<bfloat16>(kq, s.out, s.in, kernels::b_layout::n_k));
      if (s.owner != nullptr) {
        const std::lock_guard lock(mutex_);
        if (kept_ == k) backward_ = back;
      }
    }
    return {k, back, back.get()};
  }

  mutable std::mutex mutex_;  ///< guards kept_ and backward_
  std::shared_ptr<const kept_kernel> kept_;
  std::shared_ptr<const kernels::packed_b> backward_;
};

}  // namespace mixprec::scaled
