/// \file
/// \brief `nn::feed_forward<P>`: the transformer MLP block built on `nn::dense`, plain
/// (`w2(act(w1 x))`: ReLU, GELU, SiLU) or gated (`w2(act(w1 x) * (w3 x))`: SwiGLU as in llama, GEGLU
/// as in T5 v1.1), with the hidden activations computed in float32 opmath, and its backward pass.
#pragma once

#include <algorithm>
#include <concepts>
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
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/activations.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/dense.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/probe.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

namespace detail {

/// The element type `feed_forward<P>` hands its `dense` projections' saved contexts for inputs of type
/// T: the accumulator A of `C = compute_t<P, T>` when `compute_t<P, A>` is C (every policy with a fixed
/// compute type, and `promote` unless it computes in a 16-bit type), so that `dense::backward` returns
/// its dx (dh, and the two halves of the block's dx) unrounded in A; else C itself.
template <class P, class T>
using ffn_hidden_t = std::conditional_t<std::is_same_v<compute_t<P, accumulator_t<compute_t<P, T>>>, compute_t<P, T>>,
                                        accumulator_t<compute_t<P, T>>, compute_t<P, T>>;

}  // namespace detail

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
/// - **Input**: `xt::xtensor<T, N>` (N >= 1) or `xt::xarray<T>`, shape [..., in], or a view or map
///   (docs/layers.md, "Containers").
/// - **Computation**, with `C = compute_t<P, T>` and `Acc = accumulator_t<C>` (float32 for 16-bit
///   compute): `w1 x` and `w3 x` are GEMMs of operands rounded to C summed in Acc (`kernels::matmul`),
///   kept in Acc; the activation and the gate product run in Acc ("opmath", `kernels::activations`), and
///   the hidden activation is rounded once to C, the input type of the `w2` GEMM (what a bf16 kernel
///   with float32 epilogue writes); `w2`'s result is rounded once to `O = output_t<P, T>`. Rows are
///   processed in chunks so that the hidden scratch stays below `kernels::matmul_block_elements`
///   elements per buffer whatever the number of rows.
/// - **Output**: the same kind of container for an `xt::xtensor`/`xt::xarray` x, an owning `xt::xtensor`
///   for a view or map (docs/layers.md, "Containers"), shape [..., out].
/// - **Errors**: `std::invalid_argument` for an input whose last axis is not `in`, and at construction
///   for projections whose shapes do not chain or a w3 missing (gated) or superfluous (plain).
///   Complex compute types do not compile (the activations are real functions).
/// - **Training** (docs/training.md, "Backward passes"): `forward(x, ctx)` returns `operator()(x)` bit for bit (one
///   code path) and saves x and the hidden activation as the GEMMs saw them (in C) and the pre-activations
///   `a = w1 x`, `b = w3 x` in Acc. `backward(ctx, dy, grads)` computes `dh = dy · W2ᵀ`,
///   `da = dh ⊙ b ⊙ act'(a)`, `db = dh ⊙ act(a)` (plain: `da = dh ⊙ act'(a)`) in Acc with the
///   derivatives of `kernels/activations.hpp`, and returns `dx = da · W1ᵀ + db · W3ᵀ` summed in Acc
///   and rounded once to the input type T; it adds the projections' kernel and bias gradients
///   (`dense::backward`) into `grads` (`grad_t<P>`: float32, float64 under float64).
///   `for_each_parameter` and `gradients::for_each` walk the same dotted names in the same order:
///   "w1.kernel", "w1.bias", "w2.kernel", "w2.bias", "w3.kernel", "w3.bias" (biases and w3 if present).
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
  using grad_type = grad_t<P>;  ///< element type of the parameter gradients

  /// The parameter gradients of the three projections, shaped like the parameters, in `grad_t<P>`.
  /// `backward` adds into them; make them with `zero_gradients()`.
  struct gradients {
    typename dense<P>::gradients w1;                 ///< of w1 (the gate, for gated variants)
    typename dense<P>::gradients w2;                 ///< of w2 (the output projection)
    std::optional<typename dense<P>::gradients> w3;  ///< of w3 (the up projection), gated variants only
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.w1, self.w2, self.w3); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f(name, tensor)` for "w1.kernel", "w1.bias", "w2.kernel", "w2.bias", "w3.kernel",
    /// "w3.bias" (the biases and w3 when present): the names and order of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      walk_gradients(*this, f);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      walk_gradients(*this, f);
    }
  };

  /// What `backward` needs from a `forward` of inputs of element type T (C = `compute_t<P, T>`,
  /// Acc = `accumulator_t<C>`). The pre-activations are kept in Acc, unrounded: they are the values the
  /// forward applied the activation to, so the backward differentiates exactly the function the
  /// forward evaluated (act(a) ⊙ b in opmath), at the cost of 4 bytes per hidden value instead of 2;
  /// recomputing them from x would cost two more GEMMs.
  template <class T>
  struct saved {
    /// x as w1 and w3 saw it (rounded to C, rows × in); both projections' backward read it.
    typename dense<P>::template saved<detail::ffn_hidden_t<P, T>> input;
    /// The hidden activation as w2 saw it: round_to<C>(act(a) [⊙ b]), rows × hidden.
    typename dense<P>::template saved<detail::ffn_hidden_t<P, T>> hidden;
    std::vector<accumulator_t<compute_t<P, T>>> a;  ///< w1 x + b1 in Acc, rows × hidden
    std::vector<accumulator_t<compute_t<P, T>>> b;  ///< w3 x + b3 in Acc, rows × hidden (gated only, else empty)
  };

  /// A block from its projections. \throws std::invalid_argument if w1's outputs are not w2's inputs,
  /// if w3 is missing for a gated activation or given for a plain one, or if w3's shape is not w1's.
  feed_forward(ffn_activation activation, dense<P> w1, dense<P> w2, std::optional<dense<P>> w3 = std::nullopt)
      : activation_(activation), w1_(std::move(w1)), w2_(std::move(w2)), w3_(std::move(w3)) {
    auto kernel_shape = [](const dense<P>& d) { return detail::shape_string(d.kernel().shape()); };
    if (w1_.out_features() != w2_.in_features()) {
      throw std::invalid_argument(internal::concat("feed_forward: w1 has ", w1_.out_features(), " outputs (kernel ",
                                                   kernel_shape(w1_), ") but w2 takes ", w2_.in_features(),
                                                   " inputs (kernel ", kernel_shape(w2_), ")"));
    }
    if (is_gated(activation_) && !w3_) {
      throw std::invalid_argument(
          internal::concat("feed_forward: ", activation_name(activation_),
                           " is gated and needs w3 (the up projection, shape [in, hidden] = ", kernel_shape(w1_), ")"));
    }
    if (!is_gated(activation_) && w3_) {
      throw std::invalid_argument(internal::concat("feed_forward: ", activation_name(activation_),
                                                   " is not gated; w3 is only for swiglu, geglu and geglu_tanh"));
    }
    if (w3_ && (w3_->in_features() != w1_.in_features() || w3_->out_features() != w1_.out_features())) {
      throw std::invalid_argument(internal::concat("feed_forward: w3 has kernel ", kernel_shape(*w3_),
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
  /// w1, writable (an optimiser step, a checkpoint load). Its shapes and bias presence must not change.
  [[nodiscard]] dense<P>& w1() noexcept { return w1_; }
  /// w2, writable. Its shapes and bias presence must not change.
  [[nodiscard]] dense<P>& w2() noexcept { return w2_; }
  /// w3, writable. Its shapes and bias presence must not change, nor whether it is present.
  [[nodiscard]] std::optional<dense<P>>& w3() noexcept { return w3_; }
  /// Input features.
  [[nodiscard]] std::size_t in_features() const noexcept { return w1_.in_features(); }
  /// Hidden features.
  [[nodiscard]] std::size_t hidden_features() const noexcept { return w1_.out_features(); }
  /// Output features.
  [[nodiscard]] std::size_t out_features() const noexcept { return w2_.out_features(); }

  /// Calls `f(name, tensor)` on every parameter with dotted names: "w1.kernel" [in, hidden],
  /// "w1.bias" [hidden], "w2.kernel" [hidden, out], "w2.bias" [out], "w3.kernel" [in, hidden],
  /// "w3.bias" [hidden] (biases and w3 when present), the order of `gradients::for_each`.
  template <class F>
  void for_each_parameter(F&& f) {
    walk_parameters(*this, f);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    walk_parameters(*this, f);
  }

  /// Zero gradients shaped like the parameters (w3's only for gated variants).
  [[nodiscard]] gradients zero_gradients() const {
    gradients g{w1_.zero_gradients(), w2_.zero_gradients(), std::nullopt};
    if (w3_) g.w3 = w3_->zero_gradients();
    return g;
  }

  /// y = w2(act(w1 x) [* (w3 x)]) for x [..., in]; see the class comment for types and rounding.
  /// \throws std::invalid_argument if the last axis of x is not `in_features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    diagnostics::null_probe none;
    return run(x, static_cast<saved<detail::value_t<X>>*>(nullptr), none, {});
  }

  /// `operator()(x)` written into `out` [..., out] (x's leading axes; element type `output_t<P, T>`),
  /// the hidden activations of each chunk of rows taken from `ws`: the same bits, and no allocation
  /// once `ws` has warmed up (see nn/workspace.hpp) and the packed kernels are kept.
  /// \throws std::invalid_argument if the last axis of x is not `in_features()` or out's shape is not
  ///   x's with `out_features()` on the last axis.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, workspace& ws) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, T>>,
                  "feed_forward::forward_into: out's element type must be output_t<P, T> of the layer's policy P "
                  "for x's element type T; make out with that type, or use the value-returning call.");
    check_input(x);
    detail::check_output_features("feed_forward::forward_into", out, x, out_features());
    diagnostics::null_probe none;
    run_into(x, out.data(), static_cast<saved<T>*>(nullptr), none, {}, ws);
  }

  /// `operator()(x)` (the same bits) that hands `probe` two sites inside the block: `<site>.hidden`,
  /// the activation act(w1 x) [* (w3 x)] in the compute type C, [rows, hidden] (observed once per
  /// chunk of rows, so a recording probe sees one call per chunk), and `<site>.out`, the block's
  /// output [..., out] in the output type — the out-projection whose magnitude the float16 scale
  /// planner (diagnostics/residual_scale_plan.hpp) reads. With `null_probe` nothing is built or called.
  /// \throws std::invalid_argument as `operator()`, and whatever `probe.observe` throws.
  template <detail::layer_input X, diagnostics::probe Probe>
  [[nodiscard]] auto operator()(const X& x_in, Probe&& probe, std::string_view site) const {
    const auto& x = detail::as_array(x_in);
    return run(x, static_cast<saved<detail::value_t<X>>*>(nullptr), probe, site);
  }

  /// `operator()(x)`, saving in `ctx` what `backward` needs (see `saved`): the same code path, so the
  /// same result bit for bit. Memory: rows × (in + hidden) C values and rows × hidden Acc values (two
  /// such arrays for gated variants). Real inputs only.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    detail::check_real<detail::value_t<X>>("feed_forward");
    diagnostics::null_probe none;
    return run(x, &ctx, none, {});
  }

  /// The vector-Jacobian product of `forward` (docs/training.md, "Gradient formulas"): for the output cotangent dy
  /// [..., out] (any floating element type, rounded to C as the forward's GEMM operands were), returns
  /// dx [..., in] in the input type T (same kind of container as dy) and adds the gradients of the
  /// kernels and biases of w1, w2 (and w3) into `grads`. With Acc = `accumulator_t<C>`:
  /// `dh = dy · W2ᵀ` (Acc), `da = dh ⊙ b ⊙ act'(a)` and `db = dh ⊙ act(a)` (gated) or
  /// `da = dh ⊙ act'(a)` (plain) in Acc; `W2 += hᵀ dy`, `W1 += xᵀ da`, `W3 += xᵀ db`, biases `+= Σrows`
  /// of dy, da, db (`dense::backward`: GEMM operands rounded to C, sums in Acc, gradients in
  /// `grad_t<P>`); `dx = da · W1ᵀ + db · W3ᵀ` summed in Acc and rounded once to T. The rounding of the
  /// hidden activation to C is treated as the identity (straight-through), as every framework does.
  /// \throws std::invalid_argument if dy's last axis is not `out_features()`, its rows are not those
  ///         of the saved forward, `ctx` was not filled by this layer's `forward`, or `grads` is not
  ///         shaped like the parameters. Nothing is added to `grads` when it throws.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    check_backward(ctx, dy, grads, "feed_forward::backward");
    auto dx = detail::make_like<T>(dy, in_features());
    backward_to(ctx, dy, grads, dx.data());
    return dx;
  }

  /// `backward(ctx, dy, grads)` writing dx into `dx_out` [..., in] (dy's leading axes; element type T,
  /// the forward input's; a caller's buffer — `xt::xtensor`, `xt::adapt`, a RowMajor `Eigen::Map` — not
  /// overlapping dy): the same bits, and dx is not allocated.
  /// \throws std::invalid_argument as `backward`, or if dx_out's shape is not dy's with `in_features()`
  ///   on the last axis (checked before anything is added to `grads`).
  template <class T, detail::layer_input DY, detail::layer_output DXOut>
  void backward_into(DXOut& dx_out, const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    detail::backward_into<T>(
        "feed_forward::backward_into", dx_out, dy_in, in_features(),
        [&](const auto& dy) { check_backward(ctx, dy, grads, "feed_forward::backward_into"); },
        [&](const auto& dy, auto& dx) { backward_to(ctx, dy, grads, dx.data()); });
  }

 private:
  /// The checks of `backward`: dy's features and rows, the saved context, the gradients.
  template <class T, class DY>
  void check_backward(const saved<T>& ctx, const DY& dy, const gradients& grads, const char* where) const {
    detail::check_real<T>(where);
    detail::check_features(where, dy, out_features(), [&] {
      return internal::concat("w2 kernel shape ", detail::shape_string(w2_.kernel().shape()), " = [hidden, out]");
    });
    detail::check_backward_rows(where, detail::leading_size(dy), ctx.input.rows);
    check_saved(ctx);
    check_gradients(grads);
  }

  /// The backward pass after its checks: dx written at `out` (rows · in values), the gradients added.
  template <class T, class DY>
  void backward_to(const saved<T>& ctx, const DY& dy, gradients& grads, T* out) const {
    const internal::profile_scope region("nn::feed_forward.backward");
    using C = compute_t<P, T>;
    using Acc = accumulator_t<C>;
    using H = detail::ffn_hidden_t<P, T>;
    const std::size_t rows = ctx.input.rows;
    const std::size_t count = rows * hidden_features();
    // dh = dy · W2ᵀ [..., hidden] in H (= Acc unless promote computes in 16 bits); W2 += hᵀ dy, b2 += Σ dy.
    auto dh = w2_.backward(ctx.hidden, dy, grads.w2);
    // da overwrites dh in place; db (gated) gets its own array.
    auto db = detail::make_like<H>(dy, is_gated(activation_) ? hidden_features() : 0);
    H* g = dh.data();
    H* gb = db.data();
    const Acc* a = ctx.a.data();
    const Acc* b = ctx.b.data();
    if (!simd_activation_backward<Acc, H>(count, a, b, g, gb)) {
      with_activation<Acc>([&](auto act, auto act_derivative) {
        if (is_gated(activation_)) {
          for (std::size_t i = 0; i < count; ++i) {
            const Acc gi = internal::round_to<Acc>(g[i]);
            gb[i] = internal::round_to<H>(gi * act(a[i]));
            g[i] = internal::round_to<H>((gi * b[i]) * act_derivative(a[i]));
          }
        } else {
          for (std::size_t i = 0; i < count; ++i) {
            g[i] = internal::round_to<H>(internal::round_to<Acc>(g[i]) * act_derivative(a[i]));
          }
        }
      });
    }
    // dx = da · W1ᵀ (+ db · W3ᵀ): each half in H by dense::backward (W1 += xᵀ da, W3 += xᵀ db), summed in
    // Acc, rounded once to T.
    const auto dx1 = w1_.backward(ctx.input, dh, grads.w1);
    const std::size_t n = dx1.size();
    if (w3_) {
      const auto dx3 = w3_->backward(ctx.input, db, *grads.w3);
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = internal::round_to<T>(internal::round_to<Acc>(dx1.data()[i]) + internal::round_to<Acc>(dx3.data()[i]));
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = internal::round_to<T>(dx1.data()[i]);
    }
  }

  /// The forward of `operator()` and `forward`: with `ctx`, the pre-activations and the hidden
  /// activation are written into it instead of chunk-sized scratch, and x is saved rounded to C. The
  /// GEMMs get the same operands and shapes either way, so the result is the same bit for bit.
  template <class X, class Probe, class T = detail::value_t<X>>
  [[nodiscard]] auto run(const X& x, saved<T>* ctx, Probe& probe, std::string_view site) const {
    check_input(x);
    auto y = detail::make_like<output_t<P, T>>(x, out_features());
    workspace ws{workspace::per_call};
    run_into(x, y.data(), ctx, probe, site, ws);
    return y;
  }

  template <class X>
  void check_input(const X& x) const {
    detail::check_features("feed_forward", x, in_features(), [&] {
      return internal::concat("w1 kernel shape ", detail::shape_string(w1_.kernel().shape()), " = [in, hidden]");
    });
  }

  /// The forward pass into y_data (x's rows × out), its row chunks' scratch taken from `ws` (or kept in
  /// `ctx` when training). x's features are checked by the caller.
  template <class X, class Probe, class T = detail::value_t<X>>
  void run_into(const X& x, output_t<P, T>* y_data, saved<T>* ctx, Probe& probe, std::string_view site,
                workspace& ws) const {
    const internal::profile_scope region("nn::feed_forward.forward");
    using C = compute_t<P, T>;
    using O = output_t<P, T>;
    using Acc = accumulator_t<C>;
    static_assert(!internal::is_complex_v<C>,
                  "nn::feed_forward: the activations (relu, gelu, silu) are real functions; complex inputs are not "
                  "supported. Feed real and imaginary parts separately, or use nn::dense.");
    // The saved contexts hold values of compute_t<P, ffn_hidden_t<P, T>>: they must be C's.
    static_assert(internal::is_complex_v<C> || std::is_same_v<compute_t<P, detail::ffn_hidden_t<P, T>>, C>);
    const std::size_t in = in_features(), hidden = hidden_features(), out = out_features();
    const bool gated = is_gated(activation_);
    const std::size_t rows = detail::leading_size(x);
    const std::size_t chunk =
        std::max<std::size_t>(1, kernels::matmul_block_elements / std::max<std::size_t>(hidden, 1));
    const workspace::frame frame(ws);
    std::span<Acc> h1;
    std::span<Acc> h3;
    std::span<C> h;
    if (ctx != nullptr) {
      ctx->input.rows = rows;
      ctx->input.x.resize(x.size());
      internal::round_n<C>(x.data(), x.size(), ctx->input.x.data());
      ctx->hidden.rows = rows;
      ctx->hidden.x.resize(rows * hidden);
      ctx->a.resize(rows * hidden);
      ctx->b.resize(gated ? rows * hidden : 0);
    } else {
      h1 = ws.take<Acc>(std::min(chunk, rows) * hidden);
      h3 = ws.take<Acc>(gated ? h1.size() : 0);
      h = ws.take<C>(h1.size());
    }
    const T* x_data = x.data();
    for (std::size_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::size_t n = std::min(chunk, rows - r0);
      const std::span<const T> x_rows(x_data + r0 * in, n * in);
      Acc* a = ctx != nullptr ? ctx->a.data() + r0 * hidden : h1.data();
      Acc* b = ctx != nullptr ? ctx->b.data() + (gated ? r0 * hidden : 0) : h3.data();
      C* act = ctx != nullptr ? ctx->hidden.x.data() + r0 * hidden : h.data();
      project<C>(w1_, x_rows, std::span<Acc>(a, n * hidden), n);
      if (w3_) project<C>(*w3_, x_rows, std::span<Acc>(b, n * hidden), n);
      activate<C>(n * hidden, a, b, act);
      if constexpr (diagnostics::probe_enabled_v<Probe>) {
        probe.observe(internal::concat(site, ".hidden"), std::span<const C>(act, n * hidden));
      }
      project<C>(w2_, std::span<const C>(act, n * hidden), std::span<O>(y_data + r0 * out, n * out), n);
    }
    if constexpr (diagnostics::probe_enabled_v<Probe>) {
      probe.observe(internal::concat(site, ".out"), std::span<const O>(y_data, rows * out));
    }
  }

  /// Calls `f(act, act_derivative)` with the activation of the block and its derivative as functions
  /// of an Acc value (the formulas of `kernels/activations.hpp`, evaluated in Acc).
  template <class Acc, class F>
  void with_activation(F&& f) const {
    switch (activation_) {
      case ffn_activation::relu:
        f([](Acc v) { return kernels::relu(v); }, [](Acc v) { return kernels::relu_derivative(v); });
        break;
      case ffn_activation::gelu:
      case ffn_activation::geglu:
        f([](Acc v) { return kernels::gelu(v, kernels::gelu_approximation::none); },
          [](Acc v) { return kernels::gelu_derivative(v, kernels::gelu_approximation::none); });
        break;
      case ffn_activation::gelu_tanh:
      case ffn_activation::geglu_tanh:
        f([](Acc v) { return kernels::gelu(v, kernels::gelu_approximation::tanh); },
          [](Acc v) { return kernels::gelu_derivative(v, kernels::gelu_approximation::tanh); });
        break;
      case ffn_activation::silu:
      case ffn_activation::swiglu:
        f([](Acc v) { return kernels::silu(v); }, [](Acc v) { return kernels::silu_derivative(v); });
        break;
    }
  }

  /// `f` wrapped so that it receives `prefix + "." + name`.
  template <class F>
  static auto prefixed(std::string_view prefix, F& f) {
    return [prefix, &f](std::string_view name, auto& tensor) {
      std::string full;
      full.reserve(prefix.size() + 1 + name.size());
      full.append(prefix).append(1, '.').append(name);
      f(std::string_view(full), tensor);
    };
  }
  /// The walk of `for_each_parameter` (const or not).
  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    self.w1_.for_each_parameter(prefixed("w1", f));
    self.w2_.for_each_parameter(prefixed("w2", f));
    if (self.w3_) self.w3_->for_each_parameter(prefixed("w3", f));
  }
  /// The walk of `gradients::for_each` (const or not), in the order of `walk_parameters`.
  template <class Grads, class F>
  static void walk_gradients(Grads& g, F& f) {
    g.w1.for_each(prefixed("w1", f));
    g.w2.for_each(prefixed("w2", f));
    if (g.w3) g.w3->for_each(prefixed("w3", f));
  }

  /// \throws std::invalid_argument unless `ctx` holds a forward of this layer's shapes.
  template <class T>
  void check_saved(const saved<T>& ctx) const {
    const std::size_t rows = ctx.input.rows, count = rows * hidden_features();
    if (ctx.input.x.size() != rows * in_features() || ctx.hidden.rows != rows || ctx.hidden.x.size() != count ||
        ctx.a.size() != count || ctx.b.size() != (is_gated(activation_) ? count : 0)) {
      throw std::invalid_argument(
          internal::concat("feed_forward::backward: the saved context does not fit this layer (", ctx.input.x.size(),
                           " input and ", ctx.a.size(), " hidden values for ", rows, " rows; the layer has ",
                           in_features(), " inputs, ", hidden_features(), " hidden features, activation ",
                           activation_name(activation_), "); pass the context filled by this layer's forward()"));
    }
  }

  /// \throws std::invalid_argument unless `grads` is shaped like the parameters (before any `+=`).
  void check_gradients(const gradients& grads) const {
    constexpr const char* where = "feed_forward::backward";
    auto check = [&](const char* name, const dense<P>& layer, const typename dense<P>::gradients& g) {
      const std::string kernel = internal::concat(name, ".kernel");
      detail::check_gradient_shape(where, kernel.c_str(), g.kernel.shape(), layer.kernel().shape());
      if (layer.bias().has_value() != g.bias.has_value() || (g.bias && g.bias->size() != layer.bias()->size())) {
        throw std::invalid_argument(internal::concat(where, ": grads.", name, ".bias does not match ", name,
                                                     "'s bias; make the gradients with zero_gradients()"));
      }
    };
    check("w1", w1_, grads.w1);
    check("w2", w2_, grads.w2);
    if (w3_.has_value() != grads.w3.has_value()) {
      throw std::invalid_argument(internal::concat(where, ": grads.w3 is ", grads.w3 ? "present" : "missing",
                                                   " but the layer (", activation_name(activation_), ") has ",
                                                   w3_ ? "a" : "no", " w3; make the gradients with zero_gradients()"));
    }
    if (w3_) check("w3", *w3_, *grads.w3);
  }

  /// out[n, layer.out] = in[n, layer.in] · kernel (+ bias), computed in C.
  template <class C, class In, class Out>
  static void project(const dense<P>& layer, std::span<const In> in, std::span<Out> out, std::size_t n) {
    layer.template project<C>(in, n, out);
  }

  /// The vectorised kernel of this block's activation (`kernels::activation_rows_kernel`), if it has one.
  [[nodiscard]] std::optional<kernels::activation_kind> simd_activation() const noexcept {
    switch (activation_) {
      case ffn_activation::silu:
      case ffn_activation::swiglu: return kernels::activation_kind::silu;
      case ffn_activation::gelu_tanh:
      case ffn_activation::geglu_tanh: return kernels::activation_kind::gelu_tanh;
      case ffn_activation::gelu:
      case ffn_activation::geglu: return kernels::activation_kind::gelu_erf;
      case ffn_activation::relu: break;
    }
    return std::nullopt;
  }

  /// backward's element-wise part on the vectorised kernels (float opmath and float hidden gradients,
  /// SiLU or GELU): g = g · act'(a), or, gated, gb = g · act(a) and g = (g · b) · act'(a) — the
  /// scalar loop's products in its order. False, having written nothing, where that does not apply
  /// (other types or activations, the portable level).
  template <class Acc, class H>
  bool simd_activation_backward(std::size_t count, const Acc* a, const Acc* b, H* g, H* gb) const {
    if constexpr (std::same_as<Acc, float> && std::same_as<H, float>) {
      const auto kind = simd_activation();
      const kernels::activation_rows_kernel rows;  // one level for the whole call
      if (!kind || !rows.vectorised()) return false;
      const auto derivative = kernels::derivative_of(*kind);
      if (!is_gated(activation_)) {
        rows(derivative, a, g, g, count);
        return true;
      }
      constexpr std::size_t block = 1024;
      float gate_product[block];  // g · b of one block, before g is overwritten
      for (std::size_t i0 = 0; i0 < count; i0 += block) {
        const std::size_t m = std::min(block, count - i0);
        for (std::size_t i = 0; i < m; ++i) gate_product[i] = g[i0 + i] * b[i0 + i];
        rows(*kind, a + i0, g + i0, gb + i0, m);
        rows(derivative, a + i0, gate_product, g + i0, m);
      }
      return true;
    } else {
      static_cast<void>(count), static_cast<void>(a), static_cast<void>(b), static_cast<void>(g);
      static_cast<void>(gb);
      return false;
    }
  }

  /// h[i] = round_to<C>(act(h1[i]) [* h3[i]]), the activation and gate product in opmath (Acc): for
  /// float opmath and SiLU or GELU, through the vectorised kernel in blocks (the scalar formula
  /// at the portable level), each block rounded to C in bulk.
  template <class C, class Acc>
  void activate(std::size_t count, const Acc* h1, const Acc* h3, C* h) const {
    const bool gated = is_gated(activation_);
    if constexpr (std::same_as<Acc, float>) {
      const kernels::activation_rows_kernel rows;  // one level for the whole call
      const auto kind = simd_activation();
      if (kind && rows.vectorised()) {
        const float* gate = gated ? h3 : nullptr;
        if constexpr (std::same_as<C, float>) {
          rows(*kind, h1, gate, h, count);
        } else {
          constexpr std::size_t block = 1024;  // 4 KiB on the stack, one bulk rounding per block
          float values[block];
          for (std::size_t i0 = 0; i0 < count; i0 += block) {
            const std::size_t m = std::min(block, count - i0);
            rows(*kind, h1 + i0, gate != nullptr ? gate + i0 : nullptr, values, m);
            internal::round_n<C>(values, m, h + i0);
          }
        }
        return;
      }
    }
    with_activation<Acc>([&](auto act, auto) {
      if constexpr (std::same_as<C, Acc>) {
        if (gated) {
          for (std::size_t i = 0; i < count; ++i) h[i] = act(h1[i]) * h3[i];
        } else {
          for (std::size_t i = 0; i < count; ++i) h[i] = act(h1[i]);
        }
      } else {
        // Blocks of values in Acc, then one bulk rounding to C per block (`round_n`: the bits of
        // `round_to<C>` per element, without the cost of the scalar codec per float16 element:
        // docs/performance.md, "Whole programs, before and after the run-time dispatch (same binary, same run)").
        constexpr std::size_t block = 256;
        Acc values[block];
        for (std::size_t i0 = 0; i0 < count; i0 += block) {
          const std::size_t m = std::min(block, count - i0);
          if (gated) {
            for (std::size_t i = 0; i < m; ++i) values[i] = act(h1[i0 + i]) * h3[i0 + i];
          } else {
            for (std::size_t i = 0; i < m; ++i) values[i] = act(h1[i0 + i]);
          }
          internal::round_n<C>(values, m, h + i0);
        }
      }
    });
  }

  ffn_activation activation_;
  dense<P> w1_;
  dense<P> w2_;
  std::optional<dense<P>> w3_;
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<feed_forward> = "mixprec::nn::feed_forward";
}  // namespace detail

/// feed_forward, the feed-forward block, with its policy taken from the `policy_scope` live at construction: one of the
/// listed `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members). Constructed with `feed_forward<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class feed_forward<from_scope<Ps...>> : public detail::scoped_layer<feed_forward, Ps...> {
 public:
  using detail::scoped_layer<feed_forward, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
