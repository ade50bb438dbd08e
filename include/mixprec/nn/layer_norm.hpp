/// \file
/// \brief `nn::layer_norm<P>`: layer normalisation over the last axis (Ba et al. 2016; Flax
/// `nn.LayerNorm`), statistics in float32 or wider by the two-pass algorithm.
#pragma once

#include <cmath>
#include <cstddef>
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
#include "mixprec/nn/detail/norm_params.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

/// Options of `layer_norm` (Flax `nn.LayerNorm`'s arguments and defaults).
/// \throws std::invalid_argument (from the layer's constructor) if `epsilon` is negative or not finite.
struct layer_norm_options {
  double epsilon = 1e-6;  ///< added to the variance before the square root; finite, >= 0 (Flax's default 1e-6)
  bool use_scale = true;  ///< learnable scale [features], initialised to ones
  bool use_bias = true;   ///< learnable bias [features], initialised to zeros
};

/// Layer normalisation of the last axis: `y = (x - mean) / sqrt(var + epsilon) * scale + bias`.
///
/// - **Parameters**: optional `scale` and `bias` [features] in `P::param_type`.
/// - **Input**: `xt::xtensor<T, N>` (N >= 1) or `xt::xarray<T>`, shape [..., features], or a view or
///   map (docs/layers.md, "Containers").
/// - **Computation**, per row: x is rounded to `C = compute_t<P, T>` and widened to the statistics
///   type `S = accumulator_t<C>` (float32 for bfloat16/float16 compute, float64 for float64;
///   `statistics_t<C>` of layer_types.hpp where that is defined); mean and variance come from the
///   corrected two-pass algorithm (`kernels::mean_variance`: exact mean first, then squared deviations,
///   compensated sums), accurate for data ~1e6 with unit spread, unlike Flax's default
///   `use_fast_variance=True` (E[x^2] - E[x]^2). Deviations subtract the rounded mean and then its
///   rounding error (`mean_correction`), so that x - mean is accurate at such offsets too. Rows whose
///   sum or squared deviations would overflow S (a float32 row of +-3e19, or values near float's max),
///   or whose squares would underflow it, are first divided by a power of two
///   (`kernels::rescaling_exponent`: exact, with epsilon divided by its square), so every finite row
///   normalises correctly; ordinary rows are not rescaled. The
///   normalisation `(x - mean) * (rsqrt(var + eps) * scale) + bias` runs in S with the parameters
///   rounded to C; each result is rounded once to `O = output_t<P, T>`.
/// - **Fast path**: on a CPU with AVX2 or AVX-512, with T, C and O each float, bfloat16 or float16,
///   ordinary rows take the vectorised rows of `kernels::layer_norm_rows` instead: the same formula with the
///   statistics summed in float64 in one pass (d = x - x[0]; mean and variance from Σd and Σd²) and
///   the last step as one FMA — within a few float32 roundings of the path above; rows that are not
///   finite or need rescaling still take it. Rows are split over `mixprec::num_threads()` threads;
///   no bit depends on the thread count.
/// - **Complex** inputs (Flax's rule): mean of x (complex), variance = mean(|x - mean|^2) (real);
///   scale and bias multiply and add as complex numbers.
/// - **Errors**: `std::invalid_argument` when the last axis is not `features` or parameter shapes differ,
///   and from the constructors when epsilon is negative or not finite (the message names the layer, the
///   parameter and the value). Zero features is valid: x [..., 0] gives an empty y, and backward an empty dx.
///
/// - **Training**: `forward(x, ctx)` saves x̂ and r per row; `backward(ctx, dy, grads)` returns dx in the
///   input type and adds the scale and bias gradients (float32); `for_each_parameter` walks "scale",
///   "bias" (docs/training.md).
///
/// **Example**:
///
///     nn::layer_norm<mixprec::policy<float, mixprec::bfloat16, float>> ln(512);
///     xt::xtensor<float, 3> y = ln(x);   // x [batch, seq, 512]
template <class P>
class layer_norm : public detail::norm_params<P> {
  using base = detail::norm_params<P>;
  using base::bias_;
  using base::features_;
  using base::scale_;

 public:
  using typename base::grad_type;
  using typename base::gradients;
  using typename base::param_type;
  using typename base::vector_type;

  /// A layer for `features` features with Flax's initial parameters: scale ones, bias zeros (as
  /// selected by `options`).
  /// \throws std::invalid_argument if `options.epsilon` is negative or not finite.
  explicit layer_norm(std::size_t features, layer_norm_options options = {})
      : base(features, options.use_scale, options.use_bias), epsilon_(options.epsilon) {
    detail::check_epsilon("layer_norm", epsilon_);
  }

  /// A layer from explicit parameters in the param type (either may be absent).
  /// \throws std::invalid_argument if a parameter does not have `features` elements, or `epsilon` is
  ///         negative or not finite.
  layer_norm(std::size_t features, std::optional<vector_type> scale, std::optional<vector_type> bias,
             double epsilon = 1e-6)
      : base(features, std::move(scale), std::move(bias)), epsilon_(epsilon) {
    detail::check_epsilon("layer_norm", epsilon_);
    this->check_param_shapes("layer_norm");
  }

  /// A layer from a scale and a bias [features] of any floating type, rounded once to the param type.
  /// \throws std::invalid_argument if their sizes differ, or `epsilon` is negative or not finite.
  template <class W>
  [[nodiscard]] static layer_norm from_params(const xt::xtensor<W, 1>& scale, const xt::xtensor<W, 1>& bias,
                                              double epsilon = 1e-6) {
    return layer_norm(scale.size(), detail::to_param<param_type>(scale), detail::to_param<param_type>(bias), epsilon);
  }

  /// The epsilon added to the variance.
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }

  /// Normalises each row of x [..., features]; returns the same kind of container, same shape, in
  /// `output_t<P, T>`. \throws std::invalid_argument if the last axis is not `features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    return run(x, nullptr);
  }

  /// `operator()(x)` written into `out`, which must have x's shape and element type `output_t<P, T>`
  /// (a caller's buffer, reused across calls: no allocation for the result). Same bits as `operator()`.
  /// \throws std::invalid_argument if the last axis of x is not `features()` or out's shape is not x's.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, T>>,
                  "layer_norm::forward_into(out, x): out's element type must be output_t<P, T> of the layer's "
                  "policy P for x's element type T; make out with that type, or use the value-returning call.");
    detail::check_features("layer_norm", x, features_,
                           [&] { return internal::concat("scale and bias shape [", features_, "]"); });
    detail::check_output_shape("layer_norm::forward_into", "out", out, x);
    normalise(x.data(), features_ == 0 ? 0 : x.size() / features_, out.data(), nullptr);
  }

  /// What `backward` needs for inputs of element type T (real): the normalised rows x̂ and the
  /// reciprocal standard deviation r of each row (in x's units), in S = `accumulator_t<compute_t<P, T>>`.
  template <class T>
  struct saved {
    using stat_type = accumulator_t<compute_t<P, T>>;
    std::vector<stat_type> xhat;  ///< (x − mean) · r, rows × features
    std::vector<stat_type> rstd;  ///< r = 1 / sqrt(var + eps) per row
  };

  /// `operator()(x)`, saving x̂ and r in `ctx` for `backward`. Same result, bit for bit (one code path).
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    detail::check_real<detail::value_t<X>>("layer_norm");
    return run(x, &ctx);
  }

  /// The VJP (docs/training.md, "Gradient formulas"; PyTorch's layer_norm_backward): with g = scale ⊙ dy (scale as the
  /// forward used it, rounded to C), per row `dx = r · (g − mean(g) − x̂ · mean(g ⊙ x̂))` in S, rounded once to the
  /// input type T (same kind of container as dy); adds `grads.scale += Σrows dy ⊙ x̂` and
  /// `grads.bias += Σrows dy` (float32; float64 under float64).
  /// \throws std::invalid_argument if dy's last axis is not `features()`, its rows are not the saved
  ///         ones, `ctx` was not saved by a forward of this layer's shape, or the gradients do not match
  ///         the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    check_backward(ctx, dy, grads, "layer_norm::backward");
    auto dx = detail::make_like<T>(dy, features_);
    backward_to(ctx, dy, grads, dx.data());
    return dx;
  }

  /// `backward(ctx, dy, grads)` writing dx into `dx_out` [..., features] (dy's shape; element type T, the
  /// forward input's; a caller's buffer — `xt::xtensor`, `xt::adapt`, a RowMajor `Eigen::Map` — not
  /// overlapping dy): the same bits, and dx is not allocated.
  /// \throws std::invalid_argument as `backward`, or if dx_out's shape is not dy's (checked before
  ///   anything is added to `grads`).
  template <class T, detail::layer_input DY, detail::layer_output DXOut>
  void backward_into(DXOut& dx_out, const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    detail::backward_into<T>(
        "layer_norm::backward_into", dx_out, dy_in, features_,
        [&](const auto& dy) { check_backward(ctx, dy, grads, "layer_norm::backward_into"); },
        [&](const auto& dy, auto& dx) { backward_to(ctx, dy, grads, dx.data()); });
  }

 private:
  /// The checks of `backward`: dy's features and rows, the saved context, the gradients.
  template <class T, class DY>
  void check_backward(const saved<T>& ctx, const DY& dy, const gradients& grads, const char* where) const {
    const std::size_t f = features_;
    detail::check_features(where, dy, f, [&] { return internal::concat("scale and bias shape [", f, "]"); });
    // Rows as the forward counted them (none when there are no features: x and dy are then empty).
    detail::check_backward_rows(where, f == 0 ? 0 : detail::leading_size(dy), ctx.rstd.size());
    if (ctx.xhat.size() != ctx.rstd.size() * f) {
      throw std::invalid_argument(internal::concat(
          where, ": the saved context holds ", ctx.xhat.size(), " normalised values for ", ctx.rstd.size(),
          " rows but the layer has ", f, " features; pass the context filled by this layer's forward()"));
    }
    this->check_gradients(where, grads);
  }

  /// The backward pass after its checks: dx written at `dx` (dy's size), the gradients added.
  template <class T, class DY>
  void backward_to(const saved<T>& ctx, const DY& dy, gradients& grads, T* dx) const {
    const internal::profile_scope region("nn::layer_norm.backward");
    using C = compute_t<P, T>;
    using S = typename saved<T>::stat_type;
    const std::size_t f = features_;
    const std::vector<S> scale = detail::widened_param<C>(scale_, f, S(1));
    std::vector<S> d(f), g(f);
    const std::size_t rows = ctx.rstd.size();
    for (std::size_t r = 0; r < rows; ++r) {
      const S* xh = ctx.xhat.data() + r * f;
      for (std::size_t j = 0; j < f; ++j) d[j] = internal::round_to<S>(dy.data()[r * f + j]);
      S sum_g = 0, sum_gx = 0;
      for (std::size_t j = 0; j < f; ++j) {
        g[j] = scale[j] * d[j];
        sum_g += g[j];
        sum_gx += g[j] * xh[j];
      }
      const S mean_g = sum_g / static_cast<S>(f);
      const S mean_gx = sum_gx / static_cast<S>(f);
      const S rs = ctx.rstd[r];
      for (std::size_t j = 0; j < f; ++j) {
        dx[r * f + j] = internal::round_out<T>(rs * (g[j] - mean_g - xh[j] * mean_gx));
      }
      if (grads.scale) {
        for (std::size_t j = 0; j < f; ++j) grads.scale->data()[j] += static_cast<grad_type>(d[j] * xh[j]);
      }
      if (grads.bias) {
        for (std::size_t j = 0; j < f; ++j) grads.bias->data()[j] += static_cast<grad_type>(d[j]);
      }
    }
  }
  /// The normalisation of `operator()`; with `ctx` (real inputs), also saves x̂ and r.
  template <class X, class Ctx>
  auto run(const X& x, Ctx ctx) const {
    using T = detail::value_t<X>;
    detail::check_features("layer_norm", x, features_,
                           [&] { return internal::concat("scale and bias shape [", features_, "]"); });
    auto y = detail::make_like<output_t<P, T>>(x, features_);
    normalise(x.data(), features_ == 0 ? 0 : x.size() / features_, y.data(), ctx);
    return y;
  }

  /// Normalises `rows` rows of `in` into `out` through `kernels::layer_norm_rows` (the vectorised rows
  /// where this CPU and the types have them, split over the kernels' threads); the rows it does not take
  /// go to `portable_row`.
  template <class T, class O, class Ctx>
  void normalise(const T* in, std::size_t rows, O* out, Ctx ctx) const {
    using C = compute_t<P, T>;
    using S = accumulator_t<C>;
    constexpr bool saves = !std::is_same_v<Ctx, std::nullptr_t> && !internal::is_complex_v<S>;
    const std::size_t f = features_;
    // Parameters rounded to the compute type, in the statistics type (1 and 0 when absent).
    const std::vector<S> scale = detail::widened_param<C>(scale_, f, S(1));
    const std::vector<S> bias = detail::widened_param<C>(bias_, f, S(0));
    S* xhat = nullptr;
    S* rstd = nullptr;
    if constexpr (saves) {
      if (ctx != nullptr) {
        ctx->xhat.resize(rows * f);
        ctx->rstd.resize(rows);
        xhat = ctx->xhat.data();
        rstd = ctx->rstd.data();
      }
    }
    kernels::layer_norm_rows<C>(in, rows, f, static_cast<float>(epsilon_), scale.data(), bias.data(), out, xhat, rstd,
                                [&](std::size_t r, std::span<S> row) {
                                  portable_row<C>(in + r * f, row, scale, bias, out + r * f,
                                                  xhat != nullptr ? xhat + r * f : nullptr,
                                                  rstd != nullptr ? rstd + r : nullptr);
                                });
  }

  /// One row on the portable path: x rounded to C into `row` (S), corrected two-pass statistics with
  /// the power-of-two rescaling of extreme rows, y = (x - mean) * (r * scale) + bias rounded to O.
  template <class C, class T, class S, class O>
  void portable_row(const T* in, std::span<S> row, const std::vector<S>& scale, const std::vector<S>& bias, O* out,
                    S* xhat, S* rstd) const {
    using R = internal::real_of_t<S>;
    const std::size_t f = row.size();
    const R eps = static_cast<R>(epsilon_);
    internal::round_widen_n<C>(in, f, row.data());
    // Rows whose sums or squares would overflow or underflow S are divided by 2^k (exact); then
    // (x - mean) / sqrt(var + eps) = (z - mean_z) / sqrt(var_z + eps 2^-2k) with z = x 2^-k.
    const int k = kernels::rescaling_exponent(row);
    R eps_row = eps;
    int unscale = 0;  // exponent to multiply deviations by when eps 2^-2k is beyond R's range
    if (k != 0) {
      for (S& v : row) v = internal::scale_pow2(v, -k);
      eps_row = static_cast<R>(std::ldexp(epsilon_, -2 * k));  // scaled in double: exact
      if (!std::isfinite(eps_row)) {
        // A tiny row with eps dominating: var < eps 2^-R::max_exponent is negligible beside eps.
        eps_row = eps;
        unscale = k;
      }
    }
    const auto stats = kernels::mean_variance(row);
    const R inv = unscale != 0 ? R(1) / std::sqrt(eps) : R(1) / std::sqrt(stats.variance + eps_row);
    for (std::size_t j = 0; j < f; ++j) {
      S deviation = (row[j] - stats.mean) - stats.mean_correction;
      if (unscale != 0) deviation = internal::scale_pow2(deviation, unscale);
      out[j] = internal::round_out<O>(deviation * (inv * scale[j]) + bias[j]);
      if constexpr (!internal::is_complex_v<S>) {
        if (xhat != nullptr) xhat[j] = deviation * inv;
      }
    }
    if constexpr (!internal::is_complex_v<S>) {
      // r in x's units: the rescaled row's r_z = 2^k r_x (unless eps dominated, where inv already is r_x).
      if (rstd != nullptr) *rstd = (k != 0 && unscale == 0) ? std::ldexp(inv, -k) : inv;
    }
  }

  double epsilon_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<layer_norm> = "mixprec::nn::layer_norm";
}  // namespace detail

/// layer_norm, layer normalisation, with its policy taken from the `policy_scope` live at construction: one of the
/// listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members). Constructed with `layer_norm<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class layer_norm<from_scope<Ps...>> : public detail::scoped_layer<layer_norm, Ps...> {
 public:
  using detail::scoped_layer<layer_norm, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
