/// \file
/// \brief `nn::rms_norm<P>`: RMS normalisation (Zhang & Sennrich 2019; T5's and llama's norm), plain,
/// and fused with the residual add of a pre-norm transformer, with the residual stream kept in
/// float32 (float64 under float64) and an optional residual scale, as in NovelAI's float16 T5 encoder.
///
/// **The fused form** (NovelAI T5 "ActAndResidual", github.com/NovelAI/t5, README "Float16
/// considerations" and its RMSNorm `forward(x, residual)`): each pre-norm block hands its output x to the
/// next norm, which adds it to the residual stream and normalises the sum:
///
///     s            = residual + x          in R = residual_t<P, T>  (x converted exactly when it is narrower)
///     normed       = s * rsqrt(mean(|s|^2) + epsilon) * scale      (in R; result rounded once to the output type)
///     new_residual = s * residual_scale                            (s itself when no residual scale is set)
///
/// NovelAI's `RMSNormCast` runs torch's RMSNorm on `x.float()` with a float32 weight, so the weight
/// multiplies in float32, unrounded: `norm_scale_precision::opmath`, this layer's default.
/// For the first block (`no_residual`), s = x. The norm sees the unscaled sum; only the stream carried
/// forward is scaled. The float16 T5 work uses a residual scale below 1 where the stream would leave
/// float16's range and scales down the out-projections of the following blocks by the same factor, so
/// that x and the stream stay proportional. RMSNorm is invariant to that scaling except through
/// epsilon, which sits inside the square root beside the mean square: rmsnorm(s x; s^2 eps) =
/// rmsnorm(x; eps) exactly, so an exactly equivalent model needs epsilon times the *square* of the
/// accumulated scale s. NovelAI's script (nai_t5/scripts/t5_encoder_precision_parity.py, commit
/// 20112a6, `ln1.eps *= ln1_eps_scale` with the cumulative product of the scales) multiplies epsilon by
/// s itself, which is close only where epsilon is negligible beside the mean square. This layer never
/// changes epsilon: pass `epsilon * s * s` (tested bit for bit for powers of two s, down to 2^-60 and
/// up to 2^60). Powers of two keep the scaling exact.
/// The residual stream is never rounded to the compute type: that is its purpose (flash-attention's
/// fused add + norm kernels also keep it in float32, `residual_in_fp32`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/norms.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

/// The element type of the residual stream of a fused `rms_norm` with policy `P` and inputs `T`: the
/// accumulator of the compute type, i.e. float32 for float32/bfloat16/float16 compute, float64
/// for float64, std::complex of those for complex inputs. Never a 16-bit type.
template <class P, class T>
using residual_t = accumulator_t<compute_t<P, T>>;

/// Tag for the first fused `rms_norm` of a network, where the residual stream starts as x itself.
struct no_residual_t {
  explicit constexpr no_residual_t() = default;
};
/// The `no_residual_t` value: `auto [h, r] = norm(x, nn::no_residual);`.
inline constexpr no_residual_t no_residual{};

/// The result of a fused `rms_norm`: the normalised activation and the new residual stream
/// (NovelAI T5's `ActAndResidual(x, residual)`). Use structured bindings: `auto [h, r] = norm(x, r0);`.
template <class Activation, class Residual>
struct act_and_residual {
  Activation x;       ///< the normalised sum, in output_t<P, T>, input of the next block
  Residual residual;  ///< the residual stream (residual_t<P, T>), scaled by the residual scale if set
};

/// Where `rms_norm` rounds its scale (weight) before multiplying the normalised row by it. The product
/// itself always runs in the statistics type S = `accumulator_t<C>` (float32, float64 under float64
/// compute) and is rounded once to the output type.
///
/// Which model families do what (docs/layers.md has the table):
/// - NovelAI's float16 T5 (`RMSNormCast`: torch RMSNorm on `x.float()`, float32 weight): in float32,
///   `opmath`;
/// - llama2.c (`weight[j] * (ss * x[j])`, all float): in float32, `opmath`;
/// - Hugging Face `T5LayerNorm` / `LlamaRMSNorm` with a float32 weight: in float32, `opmath`;
/// - Hugging Face `T5LayerNorm` with a float16/bfloat16 weight (normalised row cast to the weight's
///   dtype, product in half): `compute` is the nearest (HF also rounds the normalised row and the
///   product to half);
/// - mixprec 0.2.0: `compute`.
enum class norm_scale_precision : std::uint8_t {
  opmath,   ///< the scale as stored (param type), converted to S: no rounding to C. The default.
  compute,  ///< the scale rounded to the compute type C first, then widened to S.
};

/// Options of `rms_norm`.
/// \throws std::invalid_argument (from the layer's constructor) if `epsilon` is negative or not finite,
///         or `residual_scale` is set and not finite and > 0.
struct rms_norm_options {
  double epsilon = 1e-6;  ///< added to the mean square; finite, >= 0 (Flax's and T5's 1e-6; llama2.c: 1e-5)
  bool use_scale = true;  ///< learnable scale [features], initialised to ones
  /// The fused form multiplies the residual stream it returns by this (after normalising); unset: no
  /// scaling. Finite and > 0; use powers of two (exact). See the file comment for epsilon.
  std::optional<double> residual_scale{};
  /// Where the scale is rounded before it multiplies (default `opmath`: in float32 when the residual
  /// stream / statistics are float32, as NovelAI's float16 T5 and llama2.c do).
  norm_scale_precision scale_precision = norm_scale_precision::opmath;
};

/// RMS normalisation of the last axis: `y = x * rsqrt(mean(|x|^2) + epsilon) * scale`.
///
/// - **Parameter**: an optional `scale` [features] in `P::param_type` (llama2.c's `rms_*_weight`).
/// - **Input**: `xt::xtensor<T, N>` (N >= 1) or `xt::xarray<T>`, shape [..., features], or a view or
///   map (docs/layers.md, "Containers").
/// - **Plain form** `norm(x)`: x rounded to `C = compute_t<P, T>` and widened to `S =
///   accumulator_t<C>` (float32 or float64); the mean square is a compensated sum in S
///   (`kernels::scaled_mean_square`: rows whose squares would overflow or underflow S, such as a
///   float32 row of 3e19, are divided by a power of two first, so every finite row normalises
///   correctly); x is normalised in S and the scale applied after normalising, still in S, as
///   llama2.c does (`weight[j] * (ss * x[j])`): the scale as stored by default, or rounded to C with
///   `scale_precision = norm_scale_precision::compute`; one rounding to `O = output_t<P, T>`. On a
///   CPU with AVX2 and float/bfloat16/float16 types, ordinary rows sum their squares in float64
///   instead (the vectorised rows of `kernels::rms_norm_rows`; the fused stream is the same bits), split over
///   `mixprec::num_threads()` threads.
///   An all-zero row gives zeros when epsilon > 0 (0/0 = NaN with epsilon 0, as IEEE says).
/// - **Fused form** `norm(x, residual)` / `norm(x, no_residual)`: see the file comment. The residual
///   may be any container or view a layer takes (docs/layers.md, "Containers"), x's shape, element
///   type `residual_t<P, T>`.
/// - **Errors**: `std::invalid_argument` when the last axis is not `features`, or x and the residual
///   have different shapes (both shapes in the message); from the constructors, when epsilon is
///   negative or not finite or the residual scale is not finite and positive (the message names the
///   layer, the option and the value). Zero features is valid: x [..., 0] gives empty outputs, and the
///   backward passes empty cotangents.
///
/// - **Training**: `forward(x, ctx)` / `forward(x, residual, ctx)` / `forward(x, no_residual, ctx)` save
///   x̂ and r per row; `backward(ctx, dy, grads)` (plain) returns dx in T; `backward(ctx, dnormed,
///   dnew_residual, grads)` and `backward_fused(ctx, dnormed, grads)` (fused) return the stream's
///   cotangent in float32, which is both dx and dresidual; the scale gradient is added (float32).
///
/// **Example** (a pre-norm block with a float32 residual stream and float16 compute):
///
///     using P = mixprec::policy<float, mixprec::float16, mixprec::float16>;
///     nn::rms_norm<P> ln1(512), ln2(512);
///     auto [h, r] = ln1(x, nn::no_residual);   // h: float16 [.., 512], r: float32 [.., 512]
///     auto next = ln2(attn(h), r);             // next.residual = r + attn(h) in float32,
///                                              // next.x = rmsnorm(next.residual) in float16
template <class P>
class rms_norm {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using vector_type = xt::xtensor<param_type, 1>;  ///< [features]

  /// A layer for `features` features; scale ones if `options.use_scale`.
  /// \throws std::invalid_argument if `options.epsilon` is negative or not finite, or
  ///         `options.residual_scale` is set and not finite and > 0.
  explicit rms_norm(std::size_t features, rms_norm_options options = {})
      : features_(features),
        epsilon_(options.epsilon),
        residual_scale_(options.residual_scale),
        scale_precision_(options.scale_precision) {
    detail::check_epsilon("rms_norm", epsilon_);
    if (residual_scale_) detail::check_residual_scale("rms_norm", *residual_scale_);
    if (options.use_scale) {
      scale_ = vector_type::from_shape({features});
      scale_->fill(param_type(1));
    }
  }

  /// A layer whose scale [features] is `scale` of any floating type, rounded once to the param type
  /// (`options.use_scale` is ignored: the layer has this scale).
  /// \throws std::invalid_argument as the constructor.
  template <class W>
  [[nodiscard]] static rms_norm from_scale(const xt::xtensor<W, 1>& scale, rms_norm_options options = {}) {
    rms_norm layer(scale.size(), options);
    layer.scale_ = detail::to_param<param_type>(scale);
    return layer;
  }

  /// Number of features (the normalised axis).
  [[nodiscard]] std::size_t features() const noexcept { return features_; }
  /// The epsilon added to the mean square.
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }
  /// The factor the fused form applies to the residual stream it returns, if any.
  [[nodiscard]] std::optional<double> residual_scale() const noexcept { return residual_scale_; }
  /// The scale [features], if the layer has one.
  [[nodiscard]] const std::optional<vector_type>& scale() const noexcept { return scale_; }
  /// Where the scale is rounded before it multiplies the normalised row.
  [[nodiscard]] norm_scale_precision scale_precision() const noexcept { return scale_precision_; }

  /// Plain RMSNorm of x [..., features]: same kind of container and shape, in `output_t<P, T>`.
  /// \throws std::invalid_argument if the last axis is not `features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    auto y = detail::make_like<output_t<P, T>>(x, features_);
    normalise_plain(x.data(), rows_of(x), y.data(), static_cast<saved<T>*>(nullptr));
    return y;
  }

  /// Fused residual add and RMSNorm: returns {rmsnorm(residual + x), (residual + x) * residual_scale}
  /// (see the file comment). `residual` must have x's shape and element type `residual_t<P, T>`.
  /// \throws std::invalid_argument if the last axis is not `features()` or the shapes differ.
  template <detail::layer_input X, detail::layer_input Residual>
  [[nodiscard]] auto operator()(const X& x_in, const Residual& residual_in) const {
    const auto& x = detail::as_array(x_in);
    const auto& residual = detail::as_array(residual_in);
    check_fused(x, residual);
    return fused(x, residual.data());
  }

  /// Fused form for the first block: the residual stream starts as x (converted to `residual_t<P, T>`).
  /// \throws std::invalid_argument if the last axis is not `features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in, no_residual_t) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    return fused(x, static_cast<const residual_t<P, T>*>(nullptr));
  }

  /// Plain `operator()(x)` written into `out` (x's shape, element type `output_t<P, T>`; a caller's
  /// buffer, reused across calls). Same bits as `operator()(x)`.
  /// \throws std::invalid_argument if the last axis of x is not `features()` or out's shape is not x's.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    check_out_type<T, Y>();
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    detail::check_output_shape("rms_norm::forward_into", "out", out, x);
    normalise_plain(x.data(), rows_of(x), out.data(), static_cast<saved<T>*>(nullptr));
  }

  /// Fused `operator()(x, residual)` written into `out` (the normalised sum, `output_t<P, T>`) and
  /// `new_residual` (the stream, `residual_t<P, T>`), both of x's shape. `new_residual` may be
  /// `residual` itself: the stream is then updated in place, as a decode loop wants. Same bits as
  /// `operator()(x, residual)`.
  /// \throws std::invalid_argument if the last axis is not `features()` or a shape is not x's.
  template <detail::layer_input X, detail::layer_array Residual, detail::layer_output YOut>
  void forward_into(YOut& out_in, Residual& new_residual, const X& x_in, const Residual& residual) const {
    auto&& out = detail::as_output(out_in);
    workspace ws{workspace::per_call};
    forward_into(out, new_residual, x_in, residual, ws);
  }

  /// Fused `forward_into(out, new_residual, x, residual)` with its scratch (the scale in the residual
  /// type, [features]) taken from `ws`: no allocation once `ws` has warmed up (nn/workspace.hpp).
  /// \throws std::invalid_argument as above.
  template <detail::layer_input X, detail::layer_array Residual, detail::layer_output YOut>
  void forward_into(YOut& out_in, Residual& new_residual, const X& x_in, const Residual& residual,
                    workspace& ws) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    check_out_type<T, Y>();
    check_fused(x, residual);
    detail::check_output_shape("rms_norm::forward_into", "out", out, x);
    detail::check_output_shape("rms_norm::forward_into", "new_residual", new_residual, x);
    normalise_fused(x.data(), residual.data(), rows_of(x), out.data(), new_residual.data(),
                    static_cast<saved<T>*>(nullptr), ws);
  }

  /// Fused `operator()(x, no_residual)` written into `out` and `new_residual` (x's shape).
  /// \throws std::invalid_argument if the last axis is not `features()` or a shape is not x's.
  template <detail::layer_input X, detail::layer_array Residual, detail::layer_output YOut>
  void forward_into(YOut& out_in, Residual& new_residual, const X& x_in, no_residual_t) const {
    auto&& out = detail::as_output(out_in);
    workspace ws{workspace::per_call};
    forward_into(out, new_residual, x_in, no_residual, ws);
  }

  /// Fused `forward_into(out, new_residual, x, no_residual)` with its scratch taken from `ws`.
  /// \throws std::invalid_argument as above.
  template <detail::layer_input X, detail::layer_array Residual, detail::layer_output YOut>
  void forward_into(YOut& out_in, Residual& new_residual, const X& x_in, no_residual_t, workspace& ws) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    check_out_type<T, Y>();
    static_assert(std::is_same_v<Residual, detail::rebind_t<X, residual_t<P, T>>>,
                  "rms_norm::forward_into(out, new_residual, x, no_residual): new_residual must be the same kind "
                  "of container as x with element type nn::residual_t<P, T> (float32, or float64 under float64 "
                  "compute).");
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    detail::check_output_shape("rms_norm::forward_into", "out", out, x);
    detail::check_output_shape("rms_norm::forward_into", "new_residual", new_residual, x);
    normalise_fused(x.data(), static_cast<const residual_t<P, T>*>(nullptr), rows_of(x), out.data(),
                    new_residual.data(), static_cast<saved<T>*>(nullptr), ws);
  }

  // ---- training (docs/training.md, "Gradient formulas") ----

  using grad_type = grad_t<P>;  ///< element type of the parameter gradients

  /// The scale's gradient [features] in `grad_t<P>`, when the layer has a scale.
  struct gradients {
    std::optional<xt::xtensor<grad_type, 1>> scale;
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.scale); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f("scale", tensor)` if present: the order of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      if (scale) f(std::string_view("scale"), *scale);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      if (scale) f(std::string_view("scale"), *scale);
    }
  };

  /// What `backward` needs for inputs of element type T (real): the normalised rows x̂ (of x, or of the
  /// stream s = residual + x for the fused form) and each row's reciprocal RMS r (in x's units), in
  /// S = `residual_t<P, T>` (float32; float64 under float64).
  template <class T>
  struct saved {
    using stat_type = residual_t<P, T>;
    std::vector<stat_type> xhat;  ///< x · r (or s · r), rows × features
    std::vector<stat_type> rstd;  ///< r = 1 / sqrt(mean(x²) + eps) per row
    bool fused = false;           ///< saved by the fused form
  };

  /// The scale, writable (an optimiser step, a checkpoint load). Its shape must not change.
  [[nodiscard]] std::optional<vector_type>& scale() noexcept { return scale_; }

  /// Calls `f("scale", tensor)` if the layer has a scale.
  template <class F>
  void for_each_parameter(F&& f) {
    if (scale_) f(std::string_view("scale"), *scale_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    if (scale_) f(std::string_view("scale"), *scale_);
  }
  /// Zero gradients shaped like the parameters.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g;
    if (scale_) g.scale = xt::xtensor<grad_type, 1>(xt::zeros<grad_type>({features_}));
    return g;
  }

  /// Plain `operator()(x)`, saving x̂ and r in `ctx`. Same result, bit for bit.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    detail::check_real<T>("rms_norm");
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    auto y = detail::make_like<output_t<P, T>>(x, features_);
    normalise_plain(x.data(), rows_of(x), y.data(), &ctx);
    return y;
  }

  /// Fused `operator()(x, residual)`, saving ŝ and r in `ctx`. Same result, bit for bit.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X, detail::layer_input Residual>
  [[nodiscard]] auto forward(const X& x_in, const Residual& residual_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    const auto& residual = detail::as_array(residual_in);
    detail::check_real<detail::value_t<X>>("rms_norm");
    check_fused(x, residual);
    return fused(x, residual.data(), &ctx);
  }

  /// Fused `operator()(x, no_residual)`, saving ŝ and r in `ctx`. Same result, bit for bit.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, no_residual_t, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    detail::check_real<T>("rms_norm");
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    return fused(x, static_cast<const residual_t<P, T>*>(nullptr), &ctx);
  }

  /// The VJP of the plain form: with g = scale ⊙ dy (the scale as the forward applied it), per row
  /// `dx = r · (g − x̂ · mean(g ⊙ x̂))` in S, rounded once to T (same kind of container as dy); adds
  /// `grads.scale += Σrows dy ⊙ x̂`.
  /// \throws std::invalid_argument if dy's features or rows do not match, the context is a fused one or
  ///         was not saved by a forward of this layer's shape, or the gradients do not match the scale.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    if (ctx.fused) {
      throw std::invalid_argument(
          "rms_norm::backward: the context was saved by the fused form; call backward(ctx, dnormed, "
          "dnew_residual, grads) or backward_fused(ctx, dnormed, grads)");
    }
    detail::check_features("rms_norm::backward", dy, features_,
                           [&] { return internal::concat("scale shape [", features_, "]"); });
    auto dx = detail::make_like<T>(dy, features_);
    backward_rows<T>(ctx, dy, static_cast<const typename saved<T>::stat_type*>(nullptr), grads, dx.data(), 1.0);
    return dx;
  }

  /// The plain form's `backward(ctx, dy, grads)` writing dx into `dx_out` (dy's shape; element type T,
  /// the forward input's; a caller's buffer — `xt::xtensor`, `xt::adapt`, a RowMajor `Eigen::Map` — not
  /// overlapping dy): the same bits, and dx is not allocated.
  /// \throws std::invalid_argument as `backward`, or if dx_out's shape is not dy's (checked before
  ///   anything is added to `grads`).
  template <class T, detail::layer_input DY, detail::layer_output DXOut>
  void backward_into(DXOut& dx_out, const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    detail::backward_into<T>(
        "rms_norm::backward_into", dx_out, dy_in, features_,
        [&](const auto&) {
          if (ctx.fused) {
            throw std::invalid_argument(
                "rms_norm::backward_into: the context was saved by the fused form, whose cotangent is the "
                "stream's; call backward(ctx, dnormed, dnew_residual, grads) or backward_fused(ctx, dnormed, grads)");
          }
        },
        [&](const auto& dy, auto& dx) {
          backward_rows<T>(ctx, dy, static_cast<const typename saved<T>::stat_type*>(nullptr), grads, dx.data(), 1.0);
        });
  }

  /// The VJP of the fused form: given the cotangents of the normalised output (`dnormed`, any floating
  /// type) and of the new residual stream (`dnew_residual`, in `residual_t<P, T>`), returns the
  /// cotangent of the stream s = residual + x, `ds = r · (g − ŝ · mean(g ⊙ ŝ)) + c · dnew_residual`
  /// (c the residual scale, or 1), in `residual_t<P, T>` (float32): it is both dx and dresidual
  /// (docs/training.md, "Gradient formulas"). Adds `grads.scale += Σrows dnormed ⊙ ŝ`.
  /// \throws std::invalid_argument as the plain `backward` (for dnormed, the context being a plain one),
  ///         or if dnew_residual does not have as many elements as dnormed.
  template <class T, detail::layer_input DY, detail::layer_input DR>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dnormed_in, const DR& dnew_residual_in,
                              gradients& grads) const {
    const auto& dnormed = detail::as_array(dnormed_in);
    const auto& dnew_residual = detail::as_array(dnew_residual_in);
    using R = typename saved<T>::stat_type;
    if (dnew_residual.size() != dnormed.size()) {
      throw std::invalid_argument(internal::concat(
          "rms_norm::backward: dnew_residual has shape ", detail::shape_string(dnew_residual.shape()),
          " but dnormed has shape ", detail::shape_string(dnormed.shape()), "; pass cotangents of both outputs"));
    }
    std::vector<R> dres(dnew_residual.size());
    for (std::size_t i = 0; i < dres.size(); ++i) dres[i] = internal::round_to<R>(dnew_residual.data()[i]);
    return backward_fused_impl(ctx, dnormed, dres.data(), grads);
  }

  /// The fused VJP when the new residual stream is not used (the last norm of a network): its
  /// cotangent is zero.
  /// \throws std::invalid_argument as the plain `backward` (for dnormed, the context being a plain one).
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward_fused(const saved<T>& ctx, const DY& dnormed_in, gradients& grads) const {
    const auto& dnormed = detail::as_array(dnormed_in);
    return backward_fused_impl(ctx, dnormed, static_cast<const typename saved<T>::stat_type*>(nullptr), grads);
  }

 private:
  /// The checks of the fused form: features, the residual's container and element type, equal shapes.
  template <class T, class Y>
  static constexpr void check_out_type() {
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, T>>,
                  "rms_norm::forward_into: out's element type must be output_t<P, T> of the layer's policy P for "
                  "x's element type T; make out with that type, or use the value-returning call.");
  }

  template <class X, class Residual>
  void check_fused(const X& x, const Residual& residual) const {
    using T = detail::value_t<X>;
    using R = residual_t<P, T>;
    static_assert(std::is_same_v<detail::value_t<Residual>, R>,
                  "rms_norm(x, residual): the residual stream must have element type nn::residual_t<P, T> "
                  "(float32, or float64 under float64 compute), as the previous fused rms_norm returned it; "
                  "start the stream with nn::no_residual.");
    detail::check_features("rms_norm", x, features_, [&] { return internal::concat("scale shape [", features_, "]"); });
    if (!std::equal(x.shape().begin(), x.shape().end(), residual.shape().begin(), residual.shape().end())) {
      throw std::invalid_argument(
          internal::concat("rms_norm: x has shape ", detail::shape_string(x.shape()), " but the residual has shape ",
                           detail::shape_string(residual.shape()),
                           "; pass the residual returned by the previous fused rms_norm for this x"));
    }
  }

  template <class T, class DY>
  auto backward_fused_impl(const saved<T>& ctx, const DY& dnormed, const typename saved<T>::stat_type* dres,
                           gradients& grads) const {
    using R = typename saved<T>::stat_type;
    if (!ctx.fused) {
      throw std::invalid_argument(
          "rms_norm::backward: the context was saved by the plain form; call backward(ctx, dy, grads)");
    }
    detail::check_features("rms_norm::backward", dnormed, features_,
                           [&] { return internal::concat("scale shape [", features_, "]"); });
    auto ds = detail::make_like<R>(dnormed, features_);
    const double c = residual_scale_.value_or(1.0);
    backward_rows<T>(ctx, dnormed, dres, grads, ds.data(), c);
    return ds;
  }

  /// out = r (g − x̂ mean(g x̂)) [+ c dres], rounded to out's type; grads.scale += Σ dy x̂.
  template <class T, class DY, class Out>
  void backward_rows(const saved<T>& ctx, const DY& dy, const typename saved<T>::stat_type* dres, gradients& grads,
                     Out* out, double c) const {
    const internal::profile_scope region("nn::rms_norm.backward");
    using C = compute_t<P, T>;
    using S = typename saved<T>::stat_type;
    const std::size_t f = features_;
    detail::check_features("rms_norm::backward", dy, f, [&] { return internal::concat("scale shape [", f, "]"); });
    detail::check_backward_rows("rms_norm::backward", rows_of(dy), ctx.rstd.size());  // as the forward counted
    if (ctx.xhat.size() != ctx.rstd.size() * f) {
      throw std::invalid_argument(internal::concat(
          "rms_norm::backward: the saved context holds ", ctx.xhat.size(), " normalised values for ", ctx.rstd.size(),
          " rows but the layer has ", f, " features; pass the context filled by this layer's forward()"));
    }
    if (scale_.has_value() != grads.scale.has_value() || (grads.scale && grads.scale->size() != f)) {
      throw std::invalid_argument(
          "rms_norm::backward: the gradients do not match the layer's scale; make them with zero_gradients()");
    }
    const std::vector<S> scale = scale_in<C, S>();
    const S cs = internal::round_to<S>(c);
    std::vector<S> d(f), g(f);
    for (std::size_t r = 0; r < ctx.rstd.size(); ++r) {
      const S* xh = ctx.xhat.data() + r * f;
      S sum_gx = 0;
      for (std::size_t j = 0; j < f; ++j) {
        d[j] = internal::round_to<S>(dy.data()[r * f + j]);
        g[j] = scale[j] * d[j];
        sum_gx += g[j] * xh[j];
      }
      const S mean_gx = sum_gx / static_cast<S>(f);
      const S rs = ctx.rstd[r];
      for (std::size_t j = 0; j < f; ++j) {
        S v = rs * (g[j] - xh[j] * mean_gx);
        if (dres != nullptr) v += cs * dres[r * f + j];
        out[r * f + j] = internal::round_out<Out>(v);
      }
      if (grads.scale) {
        for (std::size_t j = 0; j < f; ++j) grads.scale->data()[j] += static_cast<grad_type>(d[j] * xh[j]);
      }
    }
  }

  template <class X>
  std::size_t rows_of(const X& x) const {
    return features_ == 0 ? 0 : x.size() / features_;
  }

  /// The scale in S (ones when the layer has none): as stored (`opmath`) or rounded to C first (`compute`).
  template <class C, class S>
  std::vector<S> scale_in() const {
    std::vector<S> scale(features_);
    scale_into<C>(std::span<S>(scale));
    return scale;
  }

  /// `scale_in` written into `scale` [features].
  template <class C, class S>
  void scale_into(std::span<S> scale) const {
    if (!scale_) {
      std::fill(scale.begin(), scale.end(), S(1));
    } else if (scale_precision_ == norm_scale_precision::compute) {
      internal::round_widen_n<C>(scale_->data(), features_, scale.data());
    } else {
      internal::round_widen_n<S>(scale_->data(), features_, scale.data());
    }
  }

  /// out[j] = round_to<O>(row[j] * rsqrt(mean(|row|^2) + eps) * scale[j]), in S. Rows whose squares
  /// would overflow or underflow S are divided by 2^k first (`kernels::scaled_mean_square`), which is
  /// exact: y = (x 2^-k) * rsqrt(mean(|x 2^-k|^2) + eps 2^-2k) * scale. Ordinary rows have k = 0.
  template <class S, class O>
  void normalise_row(const S* row, std::span<const S> scale, O* out, S* xhat = nullptr, S* rstd = nullptr) const {
    using Real = internal::real_of_t<S>;
    const auto ms = kernels::scaled_mean_square(std::span<const S>(row, features_));
    const int k = ms.exponent;
    // eps 2^-2k, scaled in double (exact) and rounded once to Real.
    const Real eps = static_cast<Real>(k == 0 ? epsilon_ : std::ldexp(epsilon_, -2 * k));
    if (!std::isfinite(eps)) {
      // A tiny row (k < 0) with eps 2^-2k beyond Real's range: mean(|x|^2) < eps 2^-Real::max_exponent is
      // negligible beside eps, so y = x / sqrt(eps) on the unscaled row.
      const Real inv = Real(1) / std::sqrt(static_cast<Real>(epsilon_));
      for (std::size_t j = 0; j < features_; ++j) out[j] = internal::round_out<O>(row[j] * inv * scale[j]);
      if (xhat != nullptr) {
        for (std::size_t j = 0; j < features_; ++j) xhat[j] = row[j] * inv;
        *rstd = inv;
      }
      return;
    }
    const Real inv = Real(1) / std::sqrt(ms.value + eps);
    if (k == 0) {
      for (std::size_t j = 0; j < features_; ++j) out[j] = internal::round_out<O>(row[j] * inv * scale[j]);
      if (xhat != nullptr) {
        for (std::size_t j = 0; j < features_; ++j) xhat[j] = row[j] * inv;
        *rstd = inv;
      }
    } else {
      for (std::size_t j = 0; j < features_; ++j) {
        out[j] = internal::round_out<O>(internal::scale_pow2(row[j], -k) * inv * scale[j]);
      }
      if (xhat != nullptr) {
        for (std::size_t j = 0; j < features_; ++j) xhat[j] = internal::scale_pow2(row[j], -k) * inv;
        *rstd = std::ldexp(inv, -k);  // r in x's units: the rescaled row's r is 2^k times it
      }
    }
  }

  /// The plain form over `rows` rows of `in` into `out` (x̂ and r saved in `ctx` when non-null), through
  /// `kernels::rms_norm_rows` (the vectorised rows where this CPU and the types have them, split over the
  /// kernels' threads); the rows it does not take go to the portable `normalise_row`.
  template <class T, class O>
  void normalise_plain(const T* in, std::size_t rows, O* out, saved<T>* ctx) const {
    using C = compute_t<P, T>;
    using S = accumulator_t<C>;
    const std::size_t f = features_;
    const std::vector<S> scale = scale_in<C, S>();
    S* xhat = nullptr;
    S* rstd = nullptr;
    if (ctx != nullptr) {
      ctx->fused = false;
      ctx->xhat.resize(rows * f);
      ctx->rstd.resize(rows);
      xhat = ctx->xhat.data();
      rstd = ctx->rstd.data();
    }
    kernels::rms_norm_rows<C>(
        in, rows, f, static_cast<float>(epsilon_), scale.data(), out, xhat, rstd, [&](std::size_t r, std::span<S> row) {
          internal::round_widen_n<C>(in + r * f, f, row.data());
          normalise_row<S>(row.data(), scale, out + r * f, xhat != nullptr ? xhat + r * f : nullptr,
                           rstd != nullptr ? rstd + r : nullptr);
        });
  }

  /// The fused form over `rows` rows: stream = residual + x (x alone when `residual` is null; `stream`
  /// may be `residual` itself), out = rmsnorm(stream), then stream *= the residual scale, through
  /// `kernels::rms_norm_fused_rows` as `normalise_plain`.
  template <class T, class O, class R>
  void normalise_fused(const T* in, const R* residual, std::size_t rows, O* out, R* stream, saved<T>* ctx,
                       workspace& ws) const {
    using C = compute_t<P, T>;
    const std::size_t f = features_;
    const workspace::frame frame(ws);
    const std::span<R> scale = ws.take<R>(f);
    scale_into<C>(scale);
    R* xhat = nullptr;
    R* rstd = nullptr;
    if (ctx != nullptr) {
      ctx->fused = true;
      ctx->xhat.resize(rows * f);
      ctx->rstd.resize(rows);
      xhat = ctx->xhat.data();
      rstd = ctx->rstd.data();
    }
    const std::optional<R> factor =
        residual_scale_ ? std::optional<R>(internal::round_to<R>(*residual_scale_)) : std::nullopt;
    kernels::rms_norm_fused_rows(in, residual, rows, f, static_cast<float>(epsilon_), scale.data(), out, stream, xhat,
                                 rstd, factor ? &*factor : nullptr, [&](std::size_t r, bool summed) {
                                   R* s = stream + r * f;
                                   // s = residual + x, element by element in R (one addition each, nothing else). A row
                                   // the vectorised kernel declined holds residual + x already when there is a
                                   // residual; without one it is rebuilt, so that a signalling NaN of x is quieted
                                   // exactly as round_to<R> quiets it.
                                   if (!summed) {
                                     if (residual == nullptr) {
                                       for (std::size_t j = 0; j < f; ++j) s[j] = internal::round_to<R>(in[r * f + j]);
                                     } else {
                                       for (std::size_t j = 0; j < f; ++j)
                                         s[j] = residual[r * f + j] + internal::round_to<R>(in[r * f + j]);
                                     }
                                   }
                                   normalise_row<R>(s, std::span<const R>(scale), out + r * f,
                                                    xhat != nullptr ? xhat + r * f : nullptr,
                                                    rstd != nullptr ? rstd + r : nullptr);
                                   if (factor) {
                                     for (std::size_t j = 0; j < f; ++j) s[j] = s[j] * *factor;
                                   }
                                 });
  }

  /// The fused form; `residual` is null for `no_residual`.
  template <class X, class R>
  auto fused(const X& x, const R* residual, saved<detail::value_t<X>>* ctx = nullptr) const {
    using T = detail::value_t<X>;
    using O = output_t<P, T>;
    static_assert(std::is_same_v<R, residual_t<P, T>>);
    act_and_residual<detail::rebind_t<X, O>, detail::rebind_t<X, R>> result{detail::make_like<O>(x, features_),
                                                                            detail::make_like<R>(x, features_)};
    workspace ws{workspace::per_call};
    normalise_fused(x.data(), residual, rows_of(x), result.x.data(), result.residual.data(), ctx, ws);
    return result;
  }

  std::size_t features_;
  double epsilon_;
  std::optional<double> residual_scale_;
  norm_scale_precision scale_precision_;
  std::optional<vector_type> scale_;
};

namespace detail {
/// A `from_scope` rms_norm's fused result when its policies' results differ: each member in the common
/// container (nn/from_scope.hpp), widened exactly.
template <class... A, class... R>
struct common_result_hook<act_and_residual<A, R>...> {
  using x_type = typename common_layer_result<A...>::type;
  using residual_type = typename common_layer_result<R...>::type;
  static constexpr bool applies = true;
  using type = std::conditional_t<std::is_void_v<x_type> || std::is_void_v<residual_type>, void,
                                  act_and_residual<x_type, residual_type>>;
};
template <class X, class R>
struct result_converter<act_and_residual<X, R>> {
  template <class In>
  static act_and_residual<X, R> convert(In&& in) {
    return {to_common_result<X>(std::forward<In>(in).x), to_common_result<R>(std::forward<In>(in).residual)};
  }
};
}  // namespace detail

namespace detail {
template <>
inline constexpr std::string_view layer_name<rms_norm> = "mixprec::nn::rms_norm";
}  // namespace detail

/// rms_norm, RMS normalisation (plain and fused with the residual stream), with its policy taken from the
/// `policy_scope` live at construction: one of the listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the
/// members). Constructed with `rms_norm<P>`'s constructor arguments, optionally preceded by `compute_dtype(...)`, or
/// with `from_factory`. Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class rms_norm<from_scope<Ps...>> : public detail::scoped_layer<rms_norm, Ps...> {
 public:
  using detail::scoped_layer<rms_norm, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
