/// \file
/// \brief `nn::error_bound<T>(layer)`: how far each output element of a layer may be from the exact
/// result, derived from the policy's formats and the layer's dimensions. These are the bounds the layer
/// tests check (`tests/nn/*_test.cpp`); docs/layers.md, "Expected difference from float32", sets them
/// beside measured differences.
///
/// A bound is a struct of coefficients (unit roundoffs, combined the way the layer rounds) with a
/// function that evaluates them for one output element. The function takes magnitudes of the exact
/// computation: S = sum |x w| + |b| for a product, |y|, a norm's row statistics. Pass float64 (or wider)
/// values of the exact computation. The layer's own outputs in their place change the bound only at
/// second order (u^2). The bound depends on the layer's dimensions and on the number of keys for
/// attention, never on the number of rows: rows are independent.
///
/// **Error model** (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.2 and §3.1):
///  - a rounding to a format with p significand bits has a relative error of at most u = 2^-p
///    (`unit_roundoff<T>()`, finfo<T>::eps / 2: float 2^-24, bfloat16 2^-8, float16 2^-11, double 2^-53);
///  - a sum of n terms in the accumulator, in any order, is within
///    gamma_n = n u_acc / (1 - n u_acc) of the sum of the terms' magnitudes;
///  - assumed: no value leaves the normal range of a format it is rounded to (no overflow, and no
///    subnormal result: in float16, magnitudes stay within [6.1e-5, 65504]).
///
/// **Exact** means the real-number result (in practice, float64) for the same inputs and parameters.
/// By default these are the parameters as the layer stores them, in `P::param_type`. With
/// `parameters_from<Source>` they are the parameters before the layer rounded them to its param type,
/// for example the float32 weights a bfloat16 model was loaded from. That bound then also covers the
/// difference between the policy and a float32 model.
///
/// **Example** (dense, p=f32 c=bf16 o=f32, K = 256 inputs):
///
///     const auto bound = nn::error_bound<float>(layer);  // m = 2^-7 + 2^-16 + 258 2^-24 to first order
///     // For output element n of a row x: S = sum_k |x_k w_kn| + |b_n|, y = the exact x . w_n + b_n.
///     assert(std::abs(y_layer - y) <= bound(S, std::abs(y)));
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/nn/attention.hpp"
#include "mixprec/nn/batch_norm.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/feed_forward.hpp"
#include "mixprec/nn/group_norm.hpp"
#include "mixprec/nn/layer_norm.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/rms_norm.hpp"

namespace mixprec::nn {

/// The unit roundoff u = 2^-p of a real floating type with p significand bits: `finfo<T>::eps / 2`,
/// derived from the format (float 2^-24, bfloat16 2^-8, float16 2^-11, double 2^-53). A dimensionless
/// relative error.
template <class T>
[[nodiscard]] constexpr double unit_roundoff() noexcept {
  return static_cast<double>(finfo<T>::eps) / 2;
}

/// The relative error of rounding a `From` value to `To`: `unit_roundoff<To>()` when `To` has fewer
/// significand bits than `From`, else 0 (the conversion is exact, ranges permitting).
template <class To, class From>
[[nodiscard]] constexpr double rounding_error() noexcept {
  return finfo<To>::nmant >= finfo<From>::nmant ? 0.0 : unit_roundoff<To>();
}

/// Tag for `error_bound`: the exact result uses the parameters as they were *before* the layer rounded
/// them to its param type, values of type `Source` (for example float32 checkpoints loaded into a
/// bfloat16 model). The rounding from `Source` to the param type then counts as one more rounding of
/// every parameter.
template <class Source>
struct parameters_from_t {
  explicit constexpr parameters_from_t() = default;
};
/// `nn::error_bound<float>(layer, nn::parameters_from<float>)`: see `parameters_from_t`.
template <class Source>
inline constexpr parameters_from_t<Source> parameters_from{};

namespace detail {

/// (1 + a)(1 + b) - 1: two relative errors in a row.
[[nodiscard]] constexpr double compose_errors(double a, double b) noexcept { return a + b + a * b; }

/// gamma_n = n u / (1 - n u) (Higham, Lemma 3.1); +Inf when n u >= 1 (no bound).
[[nodiscard]] inline double gamma(std::size_t n, double u) noexcept {
  const double nu = static_cast<double>(n) * u;
  return nu < 1.0 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

/// The relative error with which a parameter given in `Source` reaches a kernel working in `Use`,
/// through the layer's param type `Param`.
template <class Use, class Param, class Source>
[[nodiscard]] constexpr double parameter_rounding() noexcept {
  return compose_errors(rounding_error<Param, Source>(), rounding_error<Use, Param>());
}

template <class C>
constexpr void check_real_compute() noexcept {
  static_assert(!is_complex_v<C>,
                "nn::error_bound covers real inputs only: for complex inputs the layer computes in a complex "
                "type, whose rounding these bounds do not model. Pass a real input type T.");
}

template <class P>
void check_plain_product(const dense<P>& layer, const char* where) {
  if (layer.dot() != nullptr) {
    throw std::invalid_argument(std::string("nn::error_bound: ") + where +
                                " has an injected product (dense::set_dot, for example a float8 one); its error is "
                                "that product's, which these bounds do not model. Remove it with set_dot(nullptr).");
  }
}

}  // namespace detail

// ---- dense ----------------------------------------------------------------------------------------

/// The bound for one output element y_n of a `dense` layer (tests/nn/dense_test.cpp):
///
///     |y_layer - y| <= e + u_O (|y| + e),   e = m S + (1 + m) D
///
/// - S = sum_k |x_k w_kn| + |b_n|, the sum of the magnitudes of the exact terms (same unit as y);
/// - m = `magnitude_coefficient` = u_x + u_w + u_x u_w + gamma_{K+2}(u_acc) (1 + u_x)(1 + u_w): x rounded
///   to C (u_x), the parameters rounded to C (u_w), K products and the bias summed in the accumulator
///   (gamma_{K+2} = (K + 2) u_acc to first order, the tests' term);
/// - u_O = `output_coefficient`: the one rounding of the result to the output type;
/// - D = sum_k d_k |w_kn|, optional: when the input itself is off by at most d_k from an exact x_k (the
///   output of a previous layer), the same rounding and accumulation carry that error as (1 + m) D.
struct dense_error_bound {
  double magnitude_coefficient = 0.0;  ///< m, dimensionless: multiplies S
  double output_coefficient = 0.0;     ///< u_O, dimensionless: multiplies |y| (plus the error before it)

  /// The bound on the error before the output rounding: m S + (1 + m) D (units of y).
  [[nodiscard]] double accumulated(double s, double input_error = 0.0) const noexcept {
    return magnitude_coefficient * s + (1.0 + magnitude_coefficient) * input_error;
  }
  /// The bound on |y_layer - y| for one element: S, |y| and D as in the struct comment (units of y).
  [[nodiscard]] double operator()(double s, double y_abs, double input_error = 0.0) const noexcept {
    const double e = accumulated(s, input_error);
    return e + output_coefficient * (y_abs + e);
  }
};

/// The error bound of `layer` for inputs of element type `T` (real), computing in `compute_t<P, T>`.
/// K = `layer.in_features()`. \throws std::invalid_argument when the layer has an injected product.
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] dense_error_bound error_bound(const dense<P>& layer,
                                            parameters_from_t<Source> = parameters_from<Source>) {
  using C = compute_t<P, T>;
  detail::check_real_compute<C>();
  using Acc = accumulator_t<C>;
  detail::check_plain_product(layer, "this dense layer");
  const double u_x = rounding_error<C, T>();
  const double u_w = detail::parameter_rounding<C, typename P::param_type, Source>();
  const double g = detail::gamma(layer.in_features() + 2, unit_roundoff<Acc>());
  return {detail::compose_errors(u_x, u_w) + g * (1.0 + u_x) * (1.0 + u_w), rounding_error<output_t<P, T>, Acc>()};
}

// ---- layer_norm -----------------------------------------------------------------------------------

/// The bound for one output element y_j = x̂_j scale_j + bias_j of a `layer_norm` row
/// (tests/nn/layer_norm_test.cpp), with x̂_j = (x_j - mean) / sqrt(var + eps) of the exact row:
///
///     |y_layer - y| <= e + u_O (|y| + e),
///     e = n |scale_j| A (2 + |x̂_j|) + s |scale_j x̂_j| + b |bias_j|
///
/// - A = max_j |x_j| / sqrt(var + eps), the row's largest magnitude in units of its standard deviation
///   (dimensionless; about 3 for a Gaussian row of 64 values with a mean near 0);
/// - n = `normalised_coefficient` = u_in + 8 u_S: the row rounded to C (it moves every x_j, the mean and
///   the standard deviation by at most u_in max|x|), and the statistics and the normalisation in
///   S = `statistics_t<C>` (compensated sums, a square root, a division, three products: 8 u_S with margin);
/// - s, b = `scale_coefficient`, `bias_coefficient`: the scale and the bias rounded to C (0 when absent);
/// - u_O = `output_coefficient`: the one rounding to the output type.
struct layer_norm_error_bound {
  double normalised_coefficient = 0.0;  ///< u_in + 8 u_S: multiplies |scale_j| A (2 + |x̂_j|)
  double scale_coefficient = 0.0;       ///< rounding of the scale: multiplies |scale_j x̂_j|
  double bias_coefficient = 0.0;        ///< rounding of the bias: multiplies |bias_j|
  double output_coefficient = 0.0;      ///< u_O: multiplies |y_j| (plus the error before it)

  /// The bound on |y_layer - y_j| (units of y): `row_ratio` = A, `xhat` = x̂_j, and the exact parameters
  /// of feature j (1 and 0 when the layer has none).
  [[nodiscard]] double operator()(double row_ratio, double xhat, double scale = 1.0, double bias = 0.0) const noexcept {
    const double e = normalised_coefficient * std::abs(scale) * row_ratio * (2.0 + std::abs(xhat)) +
                     scale_coefficient * std::abs(scale * xhat) + bias_coefficient * std::abs(bias);
    return e + output_coefficient * (std::abs(xhat * scale + bias) + e);
  }
};

namespace detail {

/// The bound of a norm layer with an optional scale and bias (`norm_params`: layer_norm, batch_norm,
/// group_norm), its statistics taken in S = `statistics_t<C>`: `layer_norm_error_bound`'s coefficients.
template <class T, class Source, class P>
[[nodiscard]] layer_norm_error_bound norm_error_bound(const norm_params<P>& layer) {
  using C = compute_t<P, T>;
  detail::check_real_compute<C>();
  using S = statistics_t<C>;
  const double u_par = detail::parameter_rounding<C, typename P::param_type, Source>();
  return {rounding_error<C, T>() + 8.0 * unit_roundoff<S>(), layer.scale() ? u_par : 0.0, layer.bias() ? u_par : 0.0,
          rounding_error<output_t<P, T>, S>()};
}

}  // namespace detail

/// The error bound of `layer` for inputs of element type `T` (real).
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] layer_norm_error_bound error_bound(const layer_norm<P>& layer,
                                                 parameters_from_t<Source> = parameters_from<Source>) {
  return detail::norm_error_bound<T, Source>(layer);
}

// ---- batch_norm, group_norm -----------------------------------------------------------------------

/// The bound of one output element of a `batch_norm` (tests/nn/batch_norm_test.cpp): `layer_norm`'s
/// bound and coefficients, with the statistics those of the feature's column (train mode: over every
/// row of the batch; eval mode: the running statistics, exact as stored) instead of a row's. A is then
/// max |x_ij| over the column / sqrt(var_j + eps), and x̂_ij = (x_ij - mean_j) / sqrt(var_j + eps). The
/// statistics are summed in float64 and rounded to S = `statistics_t<C>`, within the 8 u_S of the model.
template <class T, class P, class Input, class Source = typename P::param_type>
[[nodiscard]] layer_norm_error_bound error_bound(const batch_norm<P, Input>& layer,
                                                 parameters_from_t<Source> = parameters_from<Source>) {
  return detail::norm_error_bound<T, Source>(layer);
}

/// The bound of one output element of a `group_norm` (tests/nn/group_norm_test.cpp): `layer_norm`'s, with
/// the statistics of the element's (sample, group) and A = max |x| over that group / sqrt(var + eps).
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] layer_norm_error_bound error_bound(const group_norm<P>& layer,
                                                 parameters_from_t<Source> = parameters_from<Source>) {
  return detail::norm_error_bound<T, Source>(layer);
}

// ---- rms_norm -------------------------------------------------------------------------------------

/// The bounds of an `rms_norm` (tests/nn/rms_norm_test.cpp), relative to the exact output
/// y_j = x_j / sqrt(mean(x^2) + eps) * scale_j:
///
///     plain:  |y_layer - y_j| <= (r + u_O (1 + r)) |y_j|,   r = 2 u_in + u_par + 8 u_S
///     fused:  the same with r_f = 2 u_R + u_par + 8 u_S, y of the exact sum residual + x
///     stream: |new_residual - (residual + x) c| <= t |(residual + x) c| + (1 + t) D
///
/// - u_in: the row rounded to C (it moves y_j by u_in and the root mean square by u_in); the fused form
///   does not round x to C but adds it to the stream in R = `residual_t<P, T>` (float32, float64 under
///   float64): u_R per element, counted also for `no_residual` (where it is 0 unless T is wider than R);
/// - u_par: the scale as the product sees it (as stored: rounded to S, `norm_scale_precision::opmath`;
///   or rounded to C, `compute`); 0 when the layer has no scale;
/// - 8 u_S: mean square, square root, division and two products in S = `accumulator_t<C>`, with margin;
/// - t = `stream_coefficient`: the sum in R, the residual scale c rounded to R and the product by it
///   (both exact for a power of two, 0 terms then);
/// - D, optional: a bound on the error residual + x already carries, times |c|.
struct rms_norm_error_bound {
  double relative_coefficient = 0.0;        ///< r of the plain form: 2 u_in + u_par + 8 u_S
  double fused_relative_coefficient = 0.0;  ///< r_f of the fused form: 2 u_R + u_par + 8 u_S
  double output_coefficient = 0.0;          ///< u_O: the rounding of the normalised output
  double stream_coefficient = 0.0;          ///< t: the residual stream carried forward

  /// Plain form: the bound on |y_layer - y_j| for the exact |y_j| (units of y).
  [[nodiscard]] double operator()(double y_abs) const noexcept {
    return (relative_coefficient + output_coefficient * (1.0 + relative_coefficient)) * y_abs;
  }
  /// Fused form: the bound on the normalised output's error, for the exact |y_j| of rmsnorm(residual + x).
  [[nodiscard]] double fused(double y_abs) const noexcept {
    return (fused_relative_coefficient + output_coefficient * (1.0 + fused_relative_coefficient)) * y_abs;
  }
  /// Fused form: the bound on the new residual's error, for the exact |(residual + x) c| (units of x).
  [[nodiscard]] double stream(double abs, double input_error = 0.0) const noexcept {
    return stream_coefficient * abs + (1.0 + stream_coefficient) * input_error;
  }
};

/// The error bound of `layer` for inputs of element type `T` (real), plain and fused.
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] rms_norm_error_bound error_bound(const rms_norm<P>& layer,
                                               parameters_from_t<Source> = parameters_from<Source>) {
  using C = compute_t<P, T>;
  detail::check_real_compute<C>();
  using S = accumulator_t<C>;
  using R = residual_t<P, T>;
  using Param = typename P::param_type;
  double u_par = 0.0;
  if (layer.scale()) {
    u_par = layer.scale_precision() == norm_scale_precision::compute ? detail::parameter_rounding<C, Param, Source>()
                                                                     : detail::parameter_rounding<S, Param, Source>();
  }
  const double u_s = 8.0 * unit_roundoff<S>();
  const double u_r = unit_roundoff<R>();
  double t = u_r;  // the sum residual + x in R
  if (const std::optional<double> c = layer.residual_scale()) {
    const double c_r = static_cast<double>(static_cast<R>(*c));
    const bool exact = c_r == *c;
    int exponent = 0;
    const bool pow2 = exact && std::frexp(*c, &exponent) == 0.5;
    t = detail::compose_errors(t, exact ? 0.0 : u_r);
    t = detail::compose_errors(t, pow2 ? 0.0 : u_r);
  }
  return {2.0 * rounding_error<C, T>() + u_par + u_s, 2.0 * u_r + u_par + u_s, rounding_error<output_t<P, T>, S>(), t};
}

// ---- feed_forward ---------------------------------------------------------------------------------

/// The bound for one output element of a `feed_forward` block (tests/nn/feed_forward_test.cpp),
/// propagated through its stages from the exact values of one row. For hidden unit k:
///
///     h1 = x . w1_k + b1_k, S1 = sum |x w1_k| + |b1_k|     (h3, S3 likewise for gated activations)
///     e1 = projection.accumulated(S1, D1)                  w1 x as kept in the accumulator
///     da = activation(|h1|, e1)                            = L e1 + 32 u_acc (|h1| + 1)
///     gated, a = act(h1) h3:  da = gate(act(h1), da, h3, e3)
///                             = da |h3| + |act(h1)| e3 + da e3 + u_acc |a|
///
/// then for output element o, `output(b2_o)` collects, for every k, `add(a_k, da_k, w2_ko)` and returns
/// the bound for |y_o|: the hidden activation rounded to C, w2 and b2 rounded to C, the w2 GEMM
/// (gamma_{hidden+2}) and the output rounding. L = 1.13 bounds |act'| of every activation (relu 1,
/// silu 1.0998, gelu 1.1289, tanh-gelu 1.1290); 32 u_acc (|h| + 1) is the accuracy of the opmath
/// activations (tests/kernels/activations_test.cpp). D1, D3: optional input errors, as for `dense`.
struct feed_forward_error_bound {
  dense_error_bound projection;           ///< w1 x and w3 x, kept in the accumulator (output_coefficient 0)
  double lipschitz = 1.13;                ///< L: max |act'| over the activations
  double activation_coefficient = 0.0;    ///< 32 u_acc: the activation in opmath, per (|h| + 1)
  double gate_coefficient = 0.0;          ///< u_acc: the gate product in the accumulator
  double hidden_rounding = 0.0;           ///< the hidden activation rounded to C (0 when C is the accumulator)
  double weight_rounding = 0.0;           ///< w2 and b2 rounded to C
  double accumulation_coefficient = 0.0;  ///< gamma_{hidden+2}(u_acc): the w2 GEMM
  double output_coefficient = 0.0;        ///< u_O

  /// The error of act(h1) as computed, given the error e1 of h1 (units of h).
  [[nodiscard]] double activation(double h1_abs, double e1) const noexcept {
    return lipschitz * e1 + activation_coefficient * (h1_abs + 1.0);
  }
  /// The error of the gated activation a = act(h1) h3 before its rounding to C, given the exact act(h1)
  /// and h3, the error `act_error` of act(h1) (`activation`) and the error e3 of h3.
  [[nodiscard]] double gate(double act, double act_error, double h3, double e3) const noexcept {
    return act_error * std::abs(h3) + std::abs(act) * e3 + act_error * e3 + gate_coefficient * std::abs(act * h3);
  }

  /// The w2 stage of one output element: `add` every hidden unit, then call with |y_o|.
  class output_sum {
   public:
    /// Starts the sums with the exact bias b2_o (0 without a bias).
    output_sum(const feed_forward_error_bound& bound, double bias) noexcept
        : u_h_(bound.hidden_rounding),
          u_w_(bound.weight_rounding),
          gamma_(bound.accumulation_coefficient),
          u_o_(bound.output_coefficient),
          err_(u_w_ * std::abs(bias)),
          s_((1.0 + u_w_) * std::abs(bias)) {}
    /// Hidden unit k: its exact value a_k, the bound da_k on its error before the rounding to C, and the
    /// exact weight w2_ko.
    void add(double a, double da, double w) noexcept {
      const double a_mag = std::abs(a) + da;  // bounds the computed a_k
      const double w_abs = std::abs(w);
      err_ += (da + u_h_ * a_mag) * w_abs * (1.0 + u_w_) + u_w_ * a_mag * w_abs;
      s_ += a_mag * (1.0 + u_h_) * w_abs * (1.0 + u_w_);
    }
    /// The bound on |y_layer - y_o| for the exact |y_o| (units of y).
    [[nodiscard]] double operator()(double y_abs) const noexcept {
      const double e = err_ + gamma_ * s_;
      return e + u_o_ * (y_abs + e);
    }

   private:
    double u_h_, u_w_, gamma_, u_o_;
    double err_, s_;
  };
  /// The w2 stage of the output element whose exact bias is `bias` (0 without a bias).
  [[nodiscard]] output_sum output(double bias) const noexcept { return output_sum(*this, bias); }
};

/// The error bound of `layer` for inputs of element type `T` (real).
/// \throws std::invalid_argument when a projection has an injected product.
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] feed_forward_error_bound error_bound(const feed_forward<P>& layer,
                                                   parameters_from_t<Source> = parameters_from<Source>) {
  using C = compute_t<P, T>;
  detail::check_real_compute<C>();
  using Acc = accumulator_t<C>;
  detail::check_plain_product(layer.w1(), "feed_forward's w1");
  detail::check_plain_product(layer.w2(), "feed_forward's w2");
  if (layer.w3()) detail::check_plain_product(*layer.w3(), "feed_forward's w3");
  feed_forward_error_bound b;
  b.projection = error_bound<T>(layer.w1(), parameters_from<Source>);
  b.projection.output_coefficient = 0.0;  // w1 x and w3 x stay in the accumulator
  const double u_acc = unit_roundoff<Acc>();
  b.activation_coefficient = 32.0 * u_acc;
  b.gate_coefficient = u_acc;
  b.hidden_rounding = rounding_error<C, Acc>();
  b.weight_rounding = detail::parameter_rounding<C, typename P::param_type, Source>();
  b.accumulation_coefficient = detail::gamma(layer.hidden_features() + 2, u_acc);
  b.output_coefficient = rounding_error<output_t<P, T>, Acc>();
  return b;
}

// ---- attention ------------------------------------------------------------------------------------

/// The tolerance of an `attention` output element (tests/nn/attention_test.cpp, docs/layers.md "Tests
/// and tolerances"). **Not a rigorous bound**: a first-order error model times a safety factor of 8.
///
///     |y_layer - y| <= 8 eps M + u_O |y|,   eps = u + (K + keys + 8) u_acc
///
/// - M: the first-order error scale of the element, the exact computation carried out on magnitudes
///   (units of y): projections M = sum (|x| + M_x) |w| + |b|; rotations M_a' = |c| M_a + |s| M_b + |a c| +
///   |b s|; scores M_s = scale sum (M_q |k| + |q| M_k + |q k|) (+ |s| when scores are rounded to C);
///   the softmax costs 2 max_j M_s_j: M_a = sum_j p_j (M_v + 2 max M_s |v_j|) + |a| (+ sum_j p_j |v_j| when
///   the probabilities are rounded); then wo as a projection;
/// - u = the unit roundoff of C (or of the parameters' rounding, if larger), K = max(d_model,
///   n_heads head_dim), keys = the most keys a query sees (sequence length plus cached tokens; for
///   `cross`, the context's length);
/// - 8: about 4 to 6 roundings per stage, and margin for the second-order terms of exp in half precision.
///
/// With a score bias (`kernels::score_bias`) the scores are scale q·k + bias: the exact computation uses
/// the bias values the layer reads (a `relative_position_bias`'s rows already rounded to C), M_s gains
/// |scale q k + bias|, and the one more rounding in A per score is inside the (keys + 8) u_acc margin, so
/// the coefficients are the same. Cross-attention is the same computation with the keys and values
/// projected from the context (M of k and v from the context's magnitudes).
struct attention_error_bound {
  double magnitude_coefficient = 0.0;  ///< 8 eps: multiplies M
  double output_coefficient = 0.0;     ///< u_O: multiplies |y|

  /// The tolerance for |y_layer - y| given the element's error scale M and the exact |y| (units of y).
  [[nodiscard]] double operator()(double m, double y_abs) const noexcept {
    return magnitude_coefficient * m + output_coefficient * y_abs;
  }
};

/// The tolerance of `layer` for inputs of element type `T` (real) when a query sees at most `keys` keys.
/// \throws std::invalid_argument when a projection has an injected product.
template <class T, class P, class Source = typename P::param_type>
[[nodiscard]] attention_error_bound error_bound(const attention<P>& layer, std::size_t keys,
                                                parameters_from_t<Source> = parameters_from<Source>) {
  using C = compute_t<P, T>;
  detail::check_real_compute<C>();
  using Acc = accumulator_t<C>;
  detail::check_plain_product(layer.wq(), "attention's wq");
  detail::check_plain_product(layer.wk(), "attention's wk");
  detail::check_plain_product(layer.wv(), "attention's wv");
  detail::check_plain_product(layer.wo(), "attention's wo");
  const attention_config& cfg = layer.config();
  const std::size_t k = std::max(cfg.d_model, cfg.n_heads * cfg.head_dim);
  const double u = std::max(unit_roundoff<C>(), detail::parameter_rounding<C, typename P::param_type, Source>());
  const double eps = u + static_cast<double>(k + keys + 8) * unit_roundoff<Acc>();
  return {8.0 * eps, rounding_error<output_t<P, T>, Acc>()};
}

}  // namespace mixprec::nn
