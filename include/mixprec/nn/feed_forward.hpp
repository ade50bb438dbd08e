/// \file
/// \brief `nn::feed_forward<P>`: the transformer MLP block built on `nn::dense`, plain
/// (`w2(act(w1 x))`: ReLU, GELU, SiLU) or gated (`w2(act(w1 x) * (w3 x))`: SwiGLU as in llama, GEGLU
/// as in T5 v1.1), with the hidden activations computed in float32 opmath.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/activations.hpp"
#include "mixprec/kernels/detail/convert.hpp"
#include "mixprec/kernels/detail/message.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn {

/// The activation of a `feed_forward` block, and whether it is gated (Shazeer 2020, "GLU Variants
/// Improve Transformer").
enum class ffn_activation : std::uint8_t {
  relu,        ///< w2(relu(w1 x))                       (T5 v1.0, the original transformer)
  gelu,        ///< w2(gelu(w1 x)), erf form              (BERT, PyTorch's default GELU)
  gelu_tanh,   ///< w2(gelu_tanh(w1 x))                  (GPT-2; Flax's nn.gelu default)
  silu,        ///< w2(silu(w1 x))
  swiglu,      ///< w2(silu(w1 x) * (w3 x))              (llama, llama2.c: w1 gate, w3 up, w2 down)
  geglu,       ///< w2(gelu(w1 x) * (w3 x)), erf form
  geglu_tanh,  ///< w2(gelu_tanh(w1 x) * (w3 x))         (T5 v1.1 "gated-gelu", gelu_new)
};

/// True for the gated variants (swiglu, geglu, geglu_tanh), which need the third projection w3.
[[nodiscard]] constexpr bool is_gated(ffn_activation a) noexcept {
  return a == ffn_activation::swiglu || a == ffn_activation::geglu || a == ffn_activation::geglu_tanh;
}

/// The lower-case name of `a` ("swiglu"), for messages.
[[nodiscard]] constexpr const char* activation_name(ffn_activation a) noexcept {
  switch (a) {
    case ffn_activation::relu: return "relu";
    case ffn_activation::gelu: return "gelu";
    case ffn_activation::gelu_tanh: return "gelu_tanh";
    case ffn_activation::silu: return "silu";
    case ffn_activation::swiglu: return "swiglu";
    case ffn_activation::geglu: return "geglu";
    case ffn_activation::geglu_tanh: return "geglu_tanh";
  }
  return "?";
}

/// A feed-forward block `y = w2(act(w1 x) [* (w3 x)])` of three (gated) or two `nn::dense<P>` layers.
///
/// - **Parameters**: `w1` [in -> hidden], `w2` [hidden -> out], and for gated activations `w3`
///   [in -> hidden], each with an optional bias, stored in `P::param_type` (see `nn::dense`).
/// - **Input**: `xt::xtensor<T, N>` (N >= 1) or `xt::xarray<T>`, shape [..., in].
/// - **Computation**, with `C = compute_t<P, T>` and `Acc = accumulator_t<C>` (float32 for 16-bit
///   compute): `w1 x` and `w3 x` are GEMMs of operands rounded to C summed in Acc (`kernels::matmul`),
///   kept in Acc; the activation and the gate product run in Acc ("opmath", `kernels::activations`), and
///   the hidden activation is rounded once to C, the input type of the `w2` GEMM (what a bf16 kernel
///   with float32 epilogue writes); `w2`'s result is rounded once to `O = output_t<P, T>`. Rows are
///   processed in chunks so that the hidden scratch stays below `kernels::matmul_block_elements`
///   elements per buffer whatever the number of rows.
/// - **Output**: the same kind of container, shape [..., out].
/// - **Errors**: `std::invalid_argument` for an input whose last axis is not `in`, and at construction
///   for projections whose shapes do not chain or a w3 missing (gated) or superfluous (plain).
///   Complex compute types do not compile (the activations are real functions).
///
/// **Example** (llama2.c's FFN, weights in its [out, in] layout):
///
///     using P = mixprec::policy<float>;
///     nn::feed_forward<P> ffn(nn::ffn_activation::swiglu,
///                             nn::dense<P>::from_weights(w1, nn::weight_layout::out_in),   // [hidden, dim]
///                             nn::dense<P>::from_weights(w2, nn::weight_layout::out_in),   // [dim, hidden]
///                             nn::dense<P>::from_weights(w3, nn::weight_layout::out_in));  // [hidden, dim]
///     auto y = ffn(x);  // x [seq, dim] -> [seq, dim]
template <class P>
class feed_forward {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;

  /// A block from its projections. \throws std::invalid_argument if w1's outputs are not w2's inputs,
  /// if w3 is missing for a gated activation or given for a plain one, or if w3's shape is not w1's.
  feed_forward(ffn_activation activation, dense<P> w1, dense<P> w2, std::optional<dense<P>> w3 = std::nullopt)
      : activation_(activation), w1_(std::move(w1)), w2_(std::move(w2)), w3_(std::move(w3)) {
    auto kernel_shape = [](const dense<P>& d) { return detail::shape_string(d.kernel().shape()); };
    if (w1_.out_features() != w2_.in_features()) {
      throw std::invalid_argument(
          kernels::detail::concat("feed_forward: w1 has ", w1_.out_features(), " outputs (kernel ", kernel_shape(w1_),
                                  ") but w2 takes ", w2_.in_features(), " inputs (kernel ", kernel_shape(w2_), ")"));
    }
    if (is_gated(activation_) && !w3_) {
      throw std::invalid_argument(kernels::detail::concat(
          "feed_forward: ", activation_name(activation_),
          " is gated and needs w3 (the up projection, shape [in, hidden] = ", kernel_shape(w1_), ")"));
    }
    if (!is_gated(activation_) && w3_) {
      throw std::invalid_argument(
          kernels::detail::concat("feed_forward: ", activation_name(activation_),
                                  " is not gated; w3 is only for swiglu, geglu and geglu_tanh"));
    }
    if (w3_ && (w3_->in_features() != w1_.in_features() || w3_->out_features() != w1_.out_features())) {
      throw std::invalid_argument(kernels::detail::concat("feed_forward: w3 has kernel ", kernel_shape(*w3_),
                                                          " but w1 has kernel ", kernel_shape(w1_),
                                                          "; the gate and up projections must have the same shape"));
    }
  }

  /// A block [features -> hidden -> features] with Flax's default initialisation of each projection
  /// (`dense::lecun_normal`), with or without biases.
  template <class Rng>
  [[nodiscard]] static feed_forward init(ffn_activation activation, std::size_t features, std::size_t hidden, Rng& rng,
                                         use_bias bias = use_bias::no) {
    auto w1 = dense<P>::lecun_normal(features, hidden, rng, bias);
    std::optional<dense<P>> w3;
    if (is_gated(activation)) w3 = dense<P>::lecun_normal(features, hidden, rng, bias);
    auto w2 = dense<P>::lecun_normal(hidden, features, rng, bias);
    return feed_forward(activation, std::move(w1), std::move(w2), std::move(w3));
  }

  /// The activation (and gating) of the block.
  [[nodiscard]] ffn_activation activation() const noexcept { return activation_; }
  /// The first projection [in -> hidden] (the gate, for gated variants).
  [[nodiscard]] const dense<P>& w1() const noexcept { return w1_; }
  /// The output projection [hidden -> out].
  [[nodiscard]] const dense<P>& w2() const noexcept { return w2_; }
  /// The up projection [in -> hidden] of gated variants.
  [[nodiscard]] const std::optional<dense<P>>& w3() const noexcept { return w3_; }
  /// Input features.
  [[nodiscard]] std::size_t in_features() const noexcept { return w1_.in_features(); }
  /// Hidden features.
  [[nodiscard]] std::size_t hidden_features() const noexcept { return w1_.out_features(); }
  /// Output features.
  [[nodiscard]] std::size_t out_features() const noexcept { return w2_.out_features(); }

  /// y = w2(act(w1 x) [* (w3 x)]) for x [..., in]; see the class comment for types and rounding.
  /// \throws std::invalid_argument if the last axis of x is not `in_features()`.
  template <detail::layer_array X>
  [[nodiscard]] auto operator()(const X& x) const {
    using T = detail::value_t<X>;
    using C = compute_t<P, T>;
    using O = output_t<P, T>;
    using Acc = accumulator_t<C>;
    static_assert(!kernels::detail::is_complex_v<C>,
                  "nn::feed_forward: the activations (relu, gelu, silu) are real functions; complex inputs are not "
                  "supported. Feed real and imaginary parts separately, or use nn::dense.");
    detail::check_features(
        "feed_forward", x, in_features(),
        kernels::detail::concat("w1 kernel shape ", detail::shape_string(w1_.kernel().shape()), " = [in, hidden]"));
    const std::size_t in = in_features(), hidden = hidden_features(), out = out_features();
    auto y = detail::make_like<O>(x, out);
    const std::size_t rows = detail::leading_size(x);
    const std::size_t chunk =
        std::max<std::size_t>(1, kernels::matmul_block_elements / std::max<std::size_t>(hidden, 1));
    std::vector<Acc> h1(std::min(chunk, rows) * hidden);
    std::vector<Acc> h3(is_gated(activation_) ? h1.size() : 0);
    std::vector<C> h(h1.size());
    const T* x_data = x.data();
    O* y_data = y.data();
    for (std::size_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::size_t n = std::min(chunk, rows - r0);
      const std::span<const T> x_rows(x_data + r0 * in, n * in);
      project<C>(w1_, x_rows, std::span<Acc>(h1.data(), n * hidden), n);
      if (w3_) project<C>(*w3_, x_rows, std::span<Acc>(h3.data(), n * hidden), n);
      activate<C>(n * hidden, h1.data(), h3.data(), h.data());
      project<C>(w2_, std::span<const C>(h.data(), n * hidden), std::span<O>(y_data + r0 * out, n * out), n);
    }
    return y;
  }

 private:
  /// out[n, layer.out] = in[n, layer.in] · kernel (+ bias), computed in C.
  template <class C, class In, class Out>
  static void project(const dense<P>& layer, std::span<const In> in, std::span<Out> out, std::size_t n) {
    const kernels::matmul_shape shape{n, layer.in_features(), layer.out_features()};
    const std::span<const param_type> kernel(layer.kernel().data(), layer.kernel().size());
    if (layer.bias()) {
      const std::span<const param_type> bias(layer.bias()->data(), layer.bias()->size());
      kernels::matmul<C>(in, kernel, bias, out, shape, kernels::b_layout::k_n);
    } else {
      kernels::matmul<C>(in, kernel, out, shape, kernels::b_layout::k_n);
    }
  }

  /// h[i] = round_to<C>(act(h1[i]) [* h3[i]]), the activation and gate product in opmath (Acc).
  template <class C, class Acc>
  void activate(std::size_t count, const Acc* h1, const Acc* h3, C* h) const {
    auto run = [&](auto act) {
      if (is_gated(activation_)) {
        for (std::size_t i = 0; i < count; ++i) h[i] = kernels::detail::round_to<C>(act(h1[i]) * h3[i]);
      } else {
        for (std::size_t i = 0; i < count; ++i) h[i] = kernels::detail::round_to<C>(act(h1[i]));
      }
    };
    switch (activation_) {
      case ffn_activation::relu: run([](Acc v) { return kernels::relu(v); }); break;
      case ffn_activation::gelu:
      case ffn_activation::geglu: run([](Acc v) { return kernels::gelu(v, kernels::gelu_approximation::none); }); break;
      case ffn_activation::gelu_tanh:
      case ffn_activation::geglu_tanh:
        run([](Acc v) { return kernels::gelu(v, kernels::gelu_approximation::tanh); });
        break;
      case ffn_activation::silu:
      case ffn_activation::swiglu: run([](Acc v) { return kernels::silu(v); }); break;
    }
  }

  ffn_activation activation_;
  dense<P> w1_;
  dense<P> w2_;
  std::optional<dense<P>> w3_;
};

}  // namespace mixprec::nn
