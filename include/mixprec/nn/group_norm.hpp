/// \file
/// \brief `nn::group_norm<P>`: group normalisation (Wu and He 2018; Flax `nn.GroupNorm`, PyTorch
/// `torch.nn.GroupNorm` with the features last), statistics in `promote_types(float32, compute)`.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/reductions.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/norm_params.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

/// Options of `group_norm` (Flax `nn.GroupNorm`'s arguments and defaults).
/// \throws std::invalid_argument (from the layer's constructor) if `epsilon` is negative or not finite.
struct group_norm_options {
  double epsilon = 1e-6;  ///< added to the variance before the square root (Flax 1e-6; PyTorch's is 1e-5)
  bool use_scale = true;  ///< learnable scale [features], initialised to ones
  bool use_bias = true;   ///< learnable bias [features], initialised to zeros
};

/// Group normalisation: the features (last axis) are split into `num_groups` groups of consecutive
/// features, and each sample (first axis) is normalised per group over the group's features and every
/// axis between the first and the last (Flax `nn.GroupNorm`: reduction over all non-batch axes;
/// PyTorch `GroupNorm` with channels last), then `* scale + bias` per feature. No running statistics:
/// the same computation in training and inference.
///
/// - **Parameters**: optional `scale` and `bias` [features] in `P::param_type` ("scale", "bias").
/// - **Input**: x [batch, ..., features], rank >= 2; output `output_t<P, T>`, same shape.
/// - **Computation**: x rounded to C = `compute_t<P, T>` and widened to S = `statistics_t<C>` (float32
///   for 16-bit and float32 compute, float64 for float64: FLIP 1777's `promote_types(float32, dtype)`);
///   per (sample, group) the corrected two-pass mean and variance of `kernels::mean_variance`; then
///   `(x - mean) * (rsqrt(var + eps) * scale) + bias` in S, rounded once to the output type.
/// - **Complex** inputs (FLIP 1777, Flax's rule): the mean is complex and the variance is
///   mean(|x - mean|^2) = mean((x - mean) · conj(x - mean)), real.
/// - **Errors** (`std::invalid_argument`, naming the sizes): zero features or zero groups, a group count
///   that does not divide the features, an input of rank < 2 or whose last axis is not `features()`.
template <class P>
class group_norm : public detail::norm_params<P> {
  using base = detail::norm_params<P>;
  using base::bias_;
  using base::features_;
  using base::scale_;

 public:
  using typename base::grad_type;
  using typename base::gradients;

  /// A layer for `features` features in `num_groups` groups: scale ones, bias zeros.
  /// \throws std::invalid_argument if `features` or `num_groups` is 0, `num_groups` does not divide
  ///         `features`, or `options.epsilon` is negative or not finite.
  group_norm(std::size_t features, std::size_t num_groups, const group_norm_options& options = {})
      : base(features, options.use_scale, options.use_bias), groups_(num_groups), epsilon_(options.epsilon) {
    this->check_some_features("group_norm");
    if (groups_ == 0 || features_ % groups_ != 0) {
      throw std::invalid_argument(internal::concat(
          "group_norm: ", features_, " features do not split into ", groups_, " groups of equal size",
          groups_ == 0 ? std::string(" (0 groups)")
                       : internal::concat(" (", features_, " % ", groups_, " = ", features_ % groups_, ")"),
          "; choose num_groups dividing the features (Flax and PyTorch require the same)"));
    }
    detail::check_epsilon("group_norm", epsilon_);
  }

  /// Number of groups.
  [[nodiscard]] std::size_t num_groups() const noexcept { return groups_; }
  /// The epsilon added to the variance.
  [[nodiscard]] double epsilon() const noexcept { return epsilon_; }

  /// What `backward` needs for real inputs of type T: x̂ (rows × features) and r per (sample, group), in S.
  template <class T>
  struct saved {
    using stat_type = statistics_t<compute_t<P, T>>;
    std::vector<stat_type> xhat;  ///< (x − mean) · r
    std::vector<stat_type> rstd;  ///< r = 1 / sqrt(var + eps), samples × groups
  };

  /// Normalises x [batch, ..., features]; returns the same kind of container in `output_t<P, T>`.
  /// \throws std::invalid_argument as listed in the class comment.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    return run(x, static_cast<std::nullptr_t>(nullptr));
  }

  /// `operator()(x)` saving x̂ and r in `ctx` for `backward` (real inputs). Same bits.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    detail::check_real<detail::value_t<X>>("group_norm");
    return run(x, &ctx);
  }

  /// The VJP: with g = scale ⊙ dy and K the elements of one (sample, group), per group
  /// `dx = r · (g − Σg / K − x̂ · Σ(g ⊙ x̂) / K)` in S, rounded once to T; `grads.scale += Σ dy ⊙ x̂` and
  /// `grads.bias += Σ dy` over samples and the middle axes (grad_t<P>).
  /// \throws std::invalid_argument if dy's shape is not the saved forward's or the gradients do not
  ///         match the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    using C = compute_t<P, T>;
    using S = typename saved<T>::stat_type;
    const std::size_t f = features_, cg = f / groups_;
    check_input("group_norm::backward", dy);
    detail::check_backward_rows("group_norm::backward", detail::leading_size(dy), ctx.xhat.size() / f);
    const std::size_t samples = dy.shape()[0];
    if (ctx.rstd.size() != samples * groups_) {
      throw std::invalid_argument(internal::concat(
          "group_norm::backward: the saved context holds ", ctx.rstd.size(), " group statistics but dy has ", samples,
          " samples of ", groups_, " groups; pass the context filled by forward() for this very input"));
    }
    this->check_gradients("group_norm::backward", grads);
    const std::vector<S> scale = detail::widened_param<C>(scale_, f, S(1));
    auto dx = detail::make_like<T>(dy, f);
    const std::size_t rows = ctx.xhat.size() / f;
    const std::size_t per_sample = samples == 0 ? 0 : rows / samples;
    const double k = static_cast<double>(per_sample * cg);
    for (std::size_t n = 0; n < samples; ++n) {
      for (std::size_t g = 0; g < groups_; ++g) {
        double sg = 0, sgx = 0;
        for (std::size_t m = 0; m < per_sample; ++m) {
          const std::size_t base = (n * per_sample + m) * f;
          for (std::size_t j = g * cg; j < (g + 1) * cg; ++j) {
            const S d = internal::round_to<S>(dy.data()[base + j]);
            sg += static_cast<double>(scale[j] * d);
            sgx += static_cast<double>(scale[j] * d * ctx.xhat[base + j]);
            if (grads.scale) grads.scale->data()[j] += static_cast<grad_type>(d * ctx.xhat[base + j]);
            if (grads.bias) grads.bias->data()[j] += static_cast<grad_type>(d);
          }
        }
        const S mean_g = static_cast<S>(sg / k), mean_gx = static_cast<S>(sgx / k);
        const S r = ctx.rstd[n * groups_ + g];
        for (std::size_t m = 0; m < per_sample; ++m) {
          const std::size_t base = (n * per_sample + m) * f;
          for (std::size_t j = g * cg; j < (g + 1) * cg; ++j) {
            const S gj = scale[j] * internal::round_to<S>(dy.data()[base + j]);
            dx.data()[base + j] = internal::round_out<T>(r * (gj - mean_g - ctx.xhat[base + j] * mean_gx));
          }
        }
      }
    }
    return dx;
  }

 private:
  template <class X>
  void check_input(const char* where, const X& x) const {
    if (x.dimension() < 2) {
      throw std::invalid_argument(
          internal::concat(where, ": input has shape ", detail::shape_string(x.shape()), " (rank ", x.dimension(),
                           ") but group normalisation needs rank >= 2, [batch, ..., ", features_,
                           "]: the statistics are taken per sample (the first axis)"));
    }
    detail::check_features(where, x, features_, [&] {
      return internal::concat("scale and bias shape [", features_, "], ", groups_, " groups");
    });
  }

  template <class X, class Ctx>
  auto run(const X& x, Ctx ctx) const {
    using T = detail::value_t<X>;
    using C = compute_t<P, T>;
    using S = accumulator_t<C>;  // statistics_t<C> (real), its complex counterpart for complex C
    using R = internal::real_of_t<S>;
    using O = output_t<P, T>;
    static_assert(detail::is_complex_v<S> || std::is_same_v<S, statistics_t<C>>,
                  "group_norm: the statistics type must be promote_types(float32, compute)");
    constexpr bool saves = !std::is_same_v<Ctx, std::nullptr_t>;
    check_input("group_norm", x);
    const std::size_t f = features_, cg = f / groups_;
    const std::size_t samples = x.shape()[0];
    const std::size_t rows = detail::leading_size(x);
    const std::size_t per_sample = samples == 0 ? 0 : rows / samples;
    const std::vector<S> scale = detail::widened_param<C>(scale_, f, S(1));
    const std::vector<S> bias = detail::widened_param<C>(bias_, f, S(0));
    auto y = detail::make_like<O>(x, f);
    if constexpr (saves) {
      ctx->xhat.resize(rows * f);
      ctx->rstd.resize(samples * groups_);
    }
    std::vector<S> buf(per_sample * cg), row(f);
    const R eps = static_cast<R>(epsilon_);
    if (per_sample * cg == 0) return y;  // a middle axis of extent 0: nothing to normalise
    for (std::size_t n = 0; n < samples; ++n) {
      for (std::size_t g = 0; g < groups_; ++g) {
        for (std::size_t m = 0; m < per_sample; ++m) {
          internal::round_widen_n<C>(x.data() + (n * per_sample + m) * f + g * cg, cg, buf.data() + m * cg);
        }
        const auto st = kernels::mean_variance(buf);
        const R r = R(1) / std::sqrt(st.variance + eps);
        for (std::size_t m = 0; m < per_sample; ++m) {
          const std::size_t base = (n * per_sample + m) * f;
          for (std::size_t c = 0; c < cg; ++c) {
            const std::size_t j = g * cg + c;
            const S dev = (buf[m * cg + c] - st.mean) - st.mean_correction;
            y.data()[base + j] = internal::round_out<O>(dev * (r * scale[j]) + bias[j]);
            if constexpr (saves) ctx->xhat[base + j] = dev * r;
          }
        }
        if constexpr (saves) ctx->rstd[n * groups_ + g] = r;
      }
    }
    return y;
  }

  std::size_t groups_;
  double epsilon_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<group_norm> = "mixprec::nn::group_norm";
}  // namespace detail

/// group_norm with its policy taken from the `policy_scope` live at construction: one of the listed `Ps...`
/// (nn/from_scope.hpp). Constructed with `group_norm<P>`'s constructor arguments, optionally preceded by
/// `compute_dtype(...)`, or with `from_factory`. Errors: `policy_error` when the scope's policy (after the
/// override) is not listed.
template <class... Ps>
class group_norm<from_scope<Ps...>> : public detail::scoped_layer<group_norm, Ps...> {
 public:
  using detail::scoped_layer<group_norm, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
