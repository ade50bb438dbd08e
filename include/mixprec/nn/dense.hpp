/// \file
/// \brief `nn::dense<P>`: the fully connected layer y = x · kernel + bias, with its parameters
/// stored in `P::param_type`, computed in `compute_t<P, T>` with float32 accumulation, returned in
/// `output_t<P, T>` (jmp policies; Flax `nn.Dense` with `dtype=None` via `mixprec::promote`).
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numbers>
#include <optional>
#include <random>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arch/profile.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/packed_b.hpp"
#include "mixprec/kernels/scratch.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/detail/packed_weights.hpp"
#include "mixprec/nn/detail/validate.hpp"
#include "mixprec/nn/dot_product.hpp"
#include "mixprec/nn/from_scope.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/weight_cache.hpp"
#include "mixprec/nn/workspace.hpp"

namespace mixprec::nn {

/// How a weight matrix handed to a layer is laid out (row-major).
enum class weight_layout : std::uint8_t {
  in_out,  ///< [in, out]: Flax's Dense kernel, `y = x @ w` (mixprec's own storage layout)
  out_in,  ///< [out, in]: PyTorch `nn.Linear.weight`, llama2.c checkpoints, `y = x @ w.T`
};

/// Whether a layer built by a factory function gets a bias.
enum class use_bias : std::uint8_t {
  no,   ///< no bias (llama-style projections)
  yes,  ///< a bias, initialised to zeros (Flax's default `bias_init`)
};

namespace detail {

/// Standard deviation of a standard normal truncated to [-2, 2]: sqrt(1 - 2 * 2 phi(2) / (Phi(2) -
/// Phi(-2))) with phi(2) = e^-2 / sqrt(2 pi) and Phi(2) - Phi(-2) = erf(sqrt 2). Flax divides by it in
/// `variance_scaling(..., "truncated_normal")` so that the truncated samples have the requested variance.
[[nodiscard]] inline double truncated_normal_stddev() {
  const double phi2 = std::exp(-2.0) * std::numbers::inv_sqrtpi / std::numbers::sqrt2;
  return std::sqrt(1.0 - 4.0 * phi2 / std::erf(std::numbers::sqrt2));
}

/// A sample of N(0, 1) truncated to [-2, 2], by rejection (accepts 95.4% of draws).
template <class Rng>
[[nodiscard]] double truncated_standard_normal(Rng& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  for (;;) {
    const double z = normal(rng);
    if (std::abs(z) <= 2.0) return z;
  }
}

/// The injected product of a `dense` (a shared_ptr) that tells its product, through
/// `dot_product::parameters_changed`, whenever the layer holding it is copied or assigned (its kernel
/// then lives elsewhere or holds other values), so that a product keeping a prepared kernel per layer
/// never serves a stale one.
class injected_dot {
 public:
  injected_dot() = default;
  explicit injected_dot(std::shared_ptr<dot_product> dot) noexcept : dot_(std::move(dot)) { notify(); }
  injected_dot(const injected_dot& other) noexcept : dot_(other.dot_) { notify(); }
  injected_dot(injected_dot&& other) noexcept : dot_(std::move(other.dot_)) { notify(); }
  injected_dot& operator=(const injected_dot& other) noexcept {
    if (this != &other) dot_ = other.dot_;
    notify();
    return *this;
  }
  injected_dot& operator=(injected_dot&& other) noexcept {
    dot_ = std::move(other.dot_);
    notify();
    return *this;
  }
  ~injected_dot() = default;

  [[nodiscard]] const std::shared_ptr<dot_product>& get() const noexcept { return dot_; }
  explicit operator bool() const noexcept { return dot_ != nullptr; }
  /// Tells the product (if any) that the kernels it is handed may have changed.
  void notify() const noexcept {
    if (dot_) dot_->parameters_changed();
  }

 private:
  std::shared_ptr<dot_product> dot_;
};

}  // namespace detail

/// A fully connected layer: `y[..., o] = sum_i x[..., i] * kernel[i, o] + bias[o]`.
///
/// - **Parameters**: `kernel` [in, out] (Flax's layout) and an optional `bias` [out], stored in
///   `P::param_type`. `from_weights` loads [in, out] or [out, in] matrices of any floating type
///   (rounded once to the param type); [out, in] is transposed once, at load time.
/// - **Input**: `xt::xtensor<T, N>` (any N >= 1) or `xt::xarray<T>`, shape [..., in]; leading axes
///   are flattened into rows. Views and maps too (`xt::adapt`, `xt::view`, `Eigen::Map`: read in place
///   when contiguous row-major, else copied once; docs/layers.md, "Containers").
/// - **Computation** (`kernels::matmul`): x and the parameters are rounded to `C = compute_t<P, T>`,
///   products are summed in `accumulator_t<C>` (float32 for bfloat16/float16 compute), the
///   bias (rounded to C) is added in the accumulator, and the result is rounded once to
///   `O = output_t<P, T>`. (Flax rounds `x · kernel` to the compute dtype before adding the bias; one
///   rounding is at least as accurate.) Complex inputs stay complex: complex64 x with float32 params
///   runs a complex64 GEMM.
/// - **Output**: the same kind of container for an `xt::xtensor`/`xt::xarray` x, an owning `xt::xtensor`
///   for a view or map (docs/layers.md, "Containers"), shape [..., out], element type `O`.
/// - **Errors**: `std::invalid_argument` when the input's last axis is not `in` (both shapes in the
///   message), or when parameter shapes disagree. Zero in or out features is valid: in = 0 gives
///   y = bias (an empty sum), out = 0 an empty y.
/// - **Training** (docs/training.md, "Backward passes"): `forward(x, ctx)` computes `operator()(x)` and saves x as the
///   GEMM saw it (rounded to C); `backward(ctx, dy, grads)` returns dx = dy · kernelᵀ (operands
///   rounded to C, summed in float32, rounded once to the input type T) and adds kernel += xᵀ · dy and
///   bias += Σrows dy into `grads` (`grad_t<P>`: float32, float64 under float64). `for_each_parameter`
///   and `gradients::for_each` walk the same names in the same order: "kernel", "bias".
/// - **Dot injection** (`set_dot`, nn/dot_product.hpp): an injected `dot_product` computes both
///   products of the forward and backward passes instead of kernels::matmul (a float8 product with
///   delayed scaling, say); the policy's roundings of x, dy, the bias and y stay the layer's.
///
/// **Example**:
///
///     using P = mixprec::policy<float, mixprec::bfloat16, float>;   // p=f32, c=bf16, o=f32
///     std::mt19937 rng(0);
///     nn::dense<P> proj(/*in=*/1024, /*out=*/4096, rng);             // Flax's lecun_normal init
///     xt::xtensor<float, 3> x = xt::zeros<float>({2, 7, 1024});
///     xt::xtensor<float, 3> y = proj(x);                             // [2, 7, 4096]
template <class P>
class dense {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using kernel_type = xt::xtensor<param_type, 2>;  ///< [in, out]
  using bias_type = xt::xtensor<param_type, 1>;    ///< [out]
  using grad_type = grad_t<P>;                     ///< element type of the parameter gradients

  /// The parameter gradients, shaped like the parameters, in `grad_t<P>`. `backward` adds into them.
  struct gradients {
    xt::xtensor<grad_type, 2> kernel;               ///< [in, out]
    std::optional<xt::xtensor<grad_type, 1>> bias;  ///< [out], when the layer has a bias
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.kernel, self.bias); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f(name, tensor)` for "kernel" and (if any) "bias", the order of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      f(std::string_view("kernel"), kernel);
      if (bias) f(std::string_view("bias"), *bias);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      f(std::string_view("kernel"), kernel);
      if (bias) f(std::string_view("bias"), *bias);
    }
  };

  /// What `backward` needs from a `forward` of inputs of element type T: x as the GEMM saw it,
  /// rounded to `compute_t<P, T>`, [rows, in] row-major.
  template <class T>
  struct saved {
    std::vector<compute_t<P, T>> x;  ///< the input rounded to the compute type, rows × in
    std::size_t rows = 0;            ///< the number of rows (leading axes of x flattened)
  };

  /// A layer with an all-zero kernel [in, out] and, with `use_bias::yes`, a zero bias [out].
  dense(std::size_t in_features, std::size_t out_features, use_bias bias = use_bias::yes)
      : kernel_(kernel_type::from_shape({in_features, out_features})) {
    kernel_.fill(param_type{});
    if (bias == use_bias::yes) {
      bias_ = bias_type::from_shape({out_features});
      bias_->fill(param_type{});
    }
  }

  /// A layer initialised as `lecun_normal(in_features, out_features, rng, bias)` (Flax's default).
  template <std::uniform_random_bit_generator Rng>
  dense(std::size_t in_features, std::size_t out_features, Rng& rng, use_bias bias = use_bias::yes)
      : dense(lecun_normal(in_features, out_features, rng, bias)) {}

  /// A layer from a kernel [in, out] and an optional bias [out], already in the param type.
  /// \throws std::invalid_argument if the bias does not have `out` elements.
  explicit dense(kernel_type kernel, std::optional<bias_type> bias = std::nullopt)
      : kernel_(std::move(kernel)), bias_(std::move(bias)) {
    if (bias_ && bias_->size() != out_features()) {
      throw std::invalid_argument(internal::concat("dense: bias has shape ", detail::shape_string(bias_->shape()),
                                                   " but the kernel ", detail::shape_string(kernel_.shape()),
                                                   " needs [", out_features(), "]"));
    }
  }

  /// Loads a weight matrix of any floating type laid out as `layout` ([in, out] or [out, in]),
  /// rounded once to the param type; no bias.
  template <class W>
  [[nodiscard]] static dense from_weights(const xt::xtensor<W, 2>& weight, weight_layout layout) {
    return dense(load_kernel(weight, layout));
  }

  /// Loads a weight matrix laid out as `layout` and a bias [out], both rounded once to the param type.
  /// \throws std::invalid_argument if the bias does not have `out` elements.
  template <class W, class B>
  [[nodiscard]] static dense from_weights(const xt::xtensor<W, 2>& weight, const xt::xtensor<B, 1>& bias,
                                          weight_layout layout) {
    return dense(load_kernel(weight, layout), detail::to_param<param_type>(bias));
  }

  /// Flax's default initialisation (`nn.initializers.lecun_normal()`, i.e. `variance_scaling(1,
  /// "fan_in", "truncated_normal")`): kernel entries N(0, 1/in) truncated at two standard deviations of
  /// the untruncated normal and rescaled so that their variance is 1/in; bias zeros. Deterministic for a
  /// given `rng` state and standard library (`std::normal_distribution` is implementation-defined).
  template <class Rng>
  [[nodiscard]] static dense lecun_normal(std::size_t in_features, std::size_t out_features, Rng& rng,
                                          use_bias bias = use_bias::yes) {
    dense layer(in_features, out_features, bias);
    const double stddev =
        in_features == 0 ? 0.0 : std::sqrt(1.0 / static_cast<double>(in_features)) / detail::truncated_normal_stddev();
    for (auto& w : layer.kernel_) w = internal::round_to<param_type>(detail::truncated_standard_normal(rng) * stddev);
    return layer;
  }

  /// Number of input features (rows of the kernel).
  [[nodiscard]] std::size_t in_features() const noexcept { return kernel_.shape()[0]; }
  /// Number of output features (columns of the kernel).
  [[nodiscard]] std::size_t out_features() const noexcept { return kernel_.shape()[1]; }
  /// The kernel [in, out] in the param type.
  [[nodiscard]] const kernel_type& kernel() const noexcept { return kernel_; }
  /// The bias [out] in the param type, if the layer has one.
  [[nodiscard]] const std::optional<bias_type>& bias() const noexcept { return bias_; }
  /// The kernel, writable (an optimiser step, a checkpoint load). Its shape must not change. Drops the
  /// layer's packed copies of the kernel (see `parameters_changed`).
  [[nodiscard]] kernel_type& kernel() noexcept {
    drop_prepared();
    return kernel_;
  }
  /// y [rows, out] = x [rows, in] · kernel (+ bias) computed in `C`, for flat row-major spans: the
  /// projection step of layers built from dense layers (attention, feed_forward), through the kept
  /// packed kernel like `operator()`. Sizes are checked by the product.
  /// \throws std::invalid_argument when x or y does not hold rows × in or rows × out elements.
  template <class C, class In, class Out>
  void project(std::span<const In> x, std::size_t rows, std::span<Out> y) const {
    multiply<C>(x, y, rows);
  }

  /// Tells the layer that its kernel was written through a reference obtained before the last
  /// forward or backward call. The layer keeps the kernel rounded to the compute type and packed for
  /// the matrix-product kernels (kernels::packed_b) across calls, and drops that copy on every
  /// non-const access (`kernel()`, `for_each_parameter`, assignment); only a write through a reference
  /// kept across a call needs this. An injected product is told too (`dot_product::parameters_changed`).
  void parameters_changed() noexcept { drop_prepared(); }

  /// Injects `dot` as this layer's matrix products (nn/dot_product.hpp: Flax's `dot_general`, Haliax's
  /// dot injection), in `operator()`, `forward`, `project` and both backward passes; nullptr restores
  /// the plain product. Copies of the layer share the injected object (and its state, such as
  /// delayed-scaling histories); inject a fresh one per layer. Real inputs only: a complex input with an
  /// injected product throws std::invalid_argument. The product works in float32: under a float64
  /// policy x, the kernel and the kernel gradient pass through float.
  void set_dot(std::shared_ptr<dot_product> dot) noexcept { dot_ = detail::injected_dot(std::move(dot)); }
  /// The injected product, or nullptr for the plain one.
  [[nodiscard]] const std::shared_ptr<dot_product>& dot() const noexcept { return dot_.get(); }
  /// The bias, writable. Its shape must not change.
  [[nodiscard]] std::optional<bias_type>& bias() noexcept { return bias_; }

  /// Calls `f(name, tensor)` on every parameter: "kernel" [in, out], then "bias" [out] if present.
  template <class F>
  void for_each_parameter(F&& f) {
    drop_prepared();
    f(std::string_view("kernel"), kernel_);
    if (bias_) f(std::string_view("bias"), *bias_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    f(std::string_view("kernel"), kernel_);
    if (bias_) f(std::string_view("bias"), *bias_);
  }

  /// Zero gradients shaped like the parameters.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g{xt::zeros<grad_type>(kernel_.shape()), std::nullopt};
    if (bias_) g.bias = xt::xtensor<grad_type, 1>(xt::zeros<grad_type>(bias_->shape()));
    return g;
  }

  /// y = x · kernel + bias for x [..., in]: see the class comment for types and rounding.
  /// \throws std::invalid_argument if the last axis of `x` is not `in_features()`.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    using C = compute_t<P, T>;
    using O = output_t<P, T>;
    detail::check_features("dense", x, in_features(), [&] {
      return internal::concat("kernel shape ", detail::shape_string(kernel_.shape()), " = [in, out]");
    });
    auto y = detail::make_like<O>(x, out_features());
    multiply<C>(detail::flat(x), detail::flat(y), detail::leading_size(x));
    return y;
  }

  /// `operator()(x)` written into `out` [..., out] (x's leading axes; element type `output_t<P, T>`; a
  /// caller's buffer, reused across calls, not overlapping x): the same bits, and no allocation once the
  /// packed kernel is kept (the first call, or the first after a parameter write, packs it).
  /// \throws std::invalid_argument if the last axis of `x` is not `in_features()` or out's shape is not
  ///   x's with `out_features()` on the last axis.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in) const {
    auto&& out = detail::as_output(out_in);
    using Y = std::remove_cvref_t<decltype(out)>;
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    static_assert(std::is_same_v<detail::value_t<Y>, output_t<P, T>>,
                  "dense::forward_into: out's element type must be output_t<P, T> of the layer's policy P for x's "
                  "element type T; make out with that type, or use the value-returning call.");
    detail::check_features("dense", x, in_features(), [&] {
      return internal::concat("kernel shape ", detail::shape_string(kernel_.shape()), " = [in, out]");
    });
    detail::check_output_features("dense::forward_into", out, x, out_features());
    multiply<compute_t<P, T>>(detail::flat(x), detail::flat(out), detail::leading_size(x));
  }
  /// `forward_into(out, x)`: dense needs no scratch; this form lets generic code call every layer alike.
  template <detail::layer_input X, detail::layer_output YOut>
  void forward_into(YOut& out_in, const X& x_in, workspace& /*unused*/) const {
    auto&& out = detail::as_output(out_in);
    forward_into(out, x_in);
  }

  /// `operator()(x)`, saving in `ctx` what `backward` needs (x rounded to the compute type). Same
  /// result, bit for bit, as `operator()`.
  /// \throws std::invalid_argument as `operator()`.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    const auto& x = detail::as_array(x_in);
    using T = detail::value_t<X>;
    using C = compute_t<P, T>;
    using O = output_t<P, T>;
    detail::check_real<T>("dense");
    detail::check_features("dense", x, in_features(), [&] {
      return internal::concat("kernel shape ", detail::shape_string(kernel_.shape()), " = [in, out]");
    });
    ctx.rows = detail::leading_size(x);
    ctx.x.resize(x.size());
    internal::round_n<C>(x.data(), x.size(), ctx.x.data());
    auto y = detail::make_like<O>(x, out_features());
    multiply<C>(ctx.x, detail::flat(y), ctx.rows);
    return y;
  }

  /// The vector-Jacobian product of `forward`: for the output cotangent dy [..., out] (any floating
  /// element type; rounded to C as the forward's operands were), returns dx [..., in] = dy · kernelᵀ in
  /// the input type T (same kind of container as dy), and adds `grads.kernel += xᵀ · dy` and
  /// `grads.bias += Σrows dy`, dy rounded to C once for all three (the cotangent the products see; under
  /// c=bf16 the bias gradient sums bfloat16-rounded values), summed in float32 (float64 under float64);
  /// the sums are never rounded to 16 bits.
  /// \throws std::invalid_argument if dy's last axis is not `out_features()`, its rows are not those
  ///         of the saved forward, `ctx` was not saved by a forward of this layer's shape, or `grads` is
  ///         not shaped like the parameters.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads) const {
    const auto& dy = detail::as_array(dy_in);
    check_backward(ctx, dy, grads, "dense::backward");
    auto dx = detail::make_like<T>(dy, in_features());
    backward_to(ctx, dy, grads, detail::flat(dx));
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
        "dense::backward_into", dx_out, dy_in, in_features(),
        [&](const auto& dy) { check_backward(ctx, dy, grads, "dense::backward_into"); },
        [&](const auto& dy, auto& dx) { backward_to(ctx, dy, grads, detail::flat(dx)); });
  }

  /// As `backward`, for a cotangent dy [rows, out] given as a span, but **adds** dx = dy · kernelᵀ into
  /// `dx_acc` [rows, in] in the accumulator type (float32; float64 under float64) instead of returning
  /// it rounded: for layers that sum the input cotangents of several projections of the same x in
  /// float32 and round once (attention's q, k and v projections).
  /// \throws std::invalid_argument if the sizes do not match the saved forward or the gradients.
  template <class T, class DYE>
  void backward_accumulate(const saved<T>& ctx, std::span<const DYE> dy, gradients& grads,
                           std::span<accumulator_t<compute_t<P, T>>> dx_acc) const {
    using C = compute_t<P, T>;
    if (dy.size() != ctx.rows * out_features() || dx_acc.size() != ctx.rows * in_features()) {
      throw std::invalid_argument(internal::concat("dense::backward_accumulate: dy has ", dy.size(), " and dx ",
                                                   dx_acc.size(), " elements but the saved ", ctx.rows, " rows need ",
                                                   ctx.rows * out_features(), " and ", ctx.rows * in_features(),
                                                   "; pass the cotangent of this forward"));
    }
    check_saved(ctx, "dense::backward_accumulate");
    check_gradients(grads);
    std::vector<C> dy_c(dy.size());
    internal::round_n<C>(dy.data(), dy.size(), dy_c.data());
    if constexpr (!internal::is_complex_v<C>) {
      if (dot_) {
        const std::span<const float> dx_f = injected_backward(ctx, dy_c, grads);
        for (std::size_t i = 0; i < dx_f.size(); ++i) dx_acc[i] += static_cast<accumulator_t<C>>(dx_f[i]);
        return;
      }
    }
    bool packed_done = false;
    if constexpr (detail::packable_compute<C>) {
      if (detail::use_packed<C>()) {
        kernels::matmul_accumulate<C>(dy_c, *transposed_kernel<C>(), dx_acc, ctx.rows);
        packed_done = true;
      }
    }
    if (!packed_done) {
      kernels::matmul_accumulate<C>(dy_c, kernels::a_layout::m_k, detail::flat(kernel_), kernels::b_layout::n_k, dx_acc,
                                    {ctx.rows, out_features(), in_features()});
    }
    add_parameter_gradients(ctx, dy_c, grads);
  }

 private:
  /// The checks of `backward`: dy's features and rows, the saved context, the gradients' shapes.
  template <class T, class DY>
  void check_backward(const saved<T>& ctx, const DY& dy, const gradients& grads, const char* where) const {
    detail::check_features(where, dy, out_features(), [&] {
      return internal::concat("kernel shape ", detail::shape_string(kernel_.shape()), " = [in, out]");
    });
    detail::check_backward_rows(where, detail::leading_size(dy), ctx.rows);
    check_saved(ctx, where);
    check_gradients(grads);
  }

  /// The backward pass after its checks: dx [rows, in] written into `dx`, the gradients added.
  template <class T, class DY, class DX>
  void backward_to(const saved<T>& ctx, const DY& dy, gradients& grads, DX&& dx) const {
    const internal::profile_scope region("nn::dense.backward");
    using C = compute_t<P, T>;
    const std::size_t rows = ctx.rows;
    // dy rounded to C once, shared by both GEMMs (and the bias sum).
    std::vector<C> dy_c(dy.size());
    internal::round_n<C>(dy.data(), dy.size(), dy_c.data());
    if constexpr (!internal::is_complex_v<C>) {
      if (dot_) {
        const std::span<const float> dx_f = injected_backward(ctx, dy_c, grads);
        internal::round_n<T>(dx_f.data(), dx_f.size(), dx.data());
        return;
      }
    }
    // dx [rows, in] = dy [rows, out] · kernelᵀ: the [in, out] kernel read as b(k = out, n = in), n_k.
    bool packed_done = false;
    if constexpr (detail::packable_compute<C>) {
      if (detail::use_packed<C>()) {
        kernels::matmul<C>(dy_c, *transposed_kernel<C>(), dx, rows);
        packed_done = true;
      }
    }
    if (!packed_done) {
      kernels::matmul<C>(dy_c, detail::flat(kernel_), dx, {rows, out_features(), in_features()},
                         kernels::b_layout::n_k);
    }
    add_parameter_gradients(ctx, dy_c, grads);
  }

  /// y [rows, out] = x [rows, in] · kernel (+ bias) in compute type C: through the kept packed kernel
  /// for float32-accumulating C, else kernels::matmul on the kernel as stored.
  template <class C, class XR, class YR>
  void multiply(const XR& x, YR&& y, std::size_t rows) const {
    const internal::profile_scope region("nn::dense.forward");
    if (dot_) {
      if constexpr (internal::is_complex_v<C>) {
        throw std::invalid_argument(
            "dense: an injected dot_product works on real values, and this input is complex; use the plain "
            "product for complex inputs (set_dot(nullptr))");
      } else {
        injected_multiply<C>(x, y, rows);
        return;
      }
    }
    bool packed_done = false;
    if constexpr (detail::packable_compute<C>) {
      if (detail::use_packed<C>()) {
        const auto packed =
            packed_.template get<C>(detail::flat(kernel_), in_features(), out_features(), kernels::b_layout::k_n);
        if (bias_) {
          kernels::matmul<C>(x, *packed, detail::flat(*bias_), y, rows);
        } else {
          kernels::matmul<C>(x, *packed, y, rows);
        }
        packed_done = true;
      }
    }
    if (!packed_done) {
      const kernels::matmul_shape shape{rows, in_features(), out_features()};
      if (bias_) {
        kernels::matmul<C>(x, detail::flat(kernel_), detail::flat(*bias_), y, shape, kernels::b_layout::k_n);
      } else {
        kernels::matmul<C>(x, detail::flat(kernel_), y, shape, kernels::b_layout::k_n);
      }
    }
  }

  /// The kernel as float32 values (a copy).
  [[nodiscard]] std::vector<float> kernel_as_float() const {
    std::vector<float> k(kernel_.size());
    internal::round_n<float>(kernel_.data(), kernel_.size(), k.data());
    return k;
  }

  /// y = x · kernel (+ bias) through the injected product (nn/dot_product.hpp): x rounded to C and
  /// widened to float, the bias rounded to C and added in float32, y rounded once to its type.
  template <class C, class XR, class YR>
  void injected_multiply(const XR& x, YR&& y, std::size_t rows) const {
    const dot_shape s{rows, in_features(), out_features(), kept_owner()};
    if (std::ranges::size(x) != rows * s.in || std::ranges::size(y) != rows * s.out) {
      throw std::invalid_argument(internal::concat(
          "dense: x has ", std::ranges::size(x), " and y ", std::ranges::size(y), " elements but ", rows,
          " rows of the kernel ", detail::shape_string(kernel_.shape()), " need ", rows * s.in, " and ", rows * s.out));
    }
    // Float32 copies in per-thread scratch (kept across calls: no fresh pages per call).
    const std::span<float> x_f = internal::thread_scratch<float, struct injected_x>(rows * s.in);
    const auto* xp = std::ranges::data(x);
    if constexpr (std::is_same_v<accumulator_t<C>, float>) {
      internal::round_widen_n<C>(xp, x_f.size(), x_f.data());  // bulk: the same values
    } else {
      for (std::size_t i = 0; i < x_f.size(); ++i) x_f[i] = static_cast<float>(internal::round_to<C>(xp[i]));
    }
    const std::span<float> y_f = internal::thread_scratch<float, struct injected_y>(rows * s.out);
    if constexpr (std::is_same_v<param_type, float>) {
      dot_.get()->forward(x_f, std::span<const float>(kernel_.data(), kernel_.size()), y_f, s);
    } else {
      dot_.get()->forward(x_f, kernel_as_float(), y_f, s);
    }
    if (bias_) {
      for (std::size_t o = 0; o < s.out; ++o) {
        const auto b = static_cast<float>(internal::round_to<C>(bias_->data()[o]));
        for (std::size_t r = 0; r < rows; ++r) y_f[r * s.out + o] += b;
      }
    }
    auto* yp = std::ranges::data(y);
    using Y = std::remove_cvref_t<decltype(*yp)>;
    internal::round_n<Y>(y_f.data(), y_f.size(), yp);
  }

  /// The backward pass through the injected product: returns dx as float32 and adds the kernel and
  /// bias gradients to `grads`.
  template <class T, class C>
  std::span<const float> injected_backward(const saved<T>& ctx, const std::vector<C>& dy_c, gradients& grads) const {
    const dot_shape s{ctx.rows, in_features(), out_features(), kept_owner()};
    // Float32 copies and results in per-thread scratch (kept across calls); dx_f is valid until the
    // next injected_backward on this thread.
    const std::span<float> x_f = internal::thread_scratch<float, struct injected_x>(ctx.x.size());
    const std::span<float> dy_f = internal::thread_scratch<float, struct injected_dy>(dy_c.size());
    internal::round_n<float>(ctx.x.data(), ctx.x.size(), x_f.data());
    internal::round_n<float>(dy_c.data(), dy_c.size(), dy_f.data());
    const std::span<float> dx_f = internal::thread_scratch<float, struct injected_dx>(s.rows * s.in);
    const std::span<float> dkernel = internal::thread_scratch<float, struct injected_dkernel>(s.in * s.out);
    if constexpr (std::is_same_v<param_type, float>) {
      dot_.get()->backward(x_f, dy_f, std::span<const float>(kernel_.data(), kernel_.size()), dx_f, dkernel, s);
    } else {
      dot_.get()->backward(x_f, dy_f, kernel_as_float(), dx_f, dkernel, s);
    }
    grad_type* g = grads.kernel.data();
    for (std::size_t i = 0; i < dkernel.size(); ++i) g[i] += static_cast<grad_type>(dkernel[i]);
    add_bias_gradient(dy_c, grads, s.rows);
    return dx_f;
  }

  template <class C>
  void add_bias_gradient(const std::vector<C>& dy_c, gradients& grads, std::size_t rows) const {
    if (!bias_) return;
    grad_type* db = grads.bias->data();
    const std::size_t out = out_features();
    for (std::size_t r = 0; r < rows; ++r) {
      const C* row = dy_c.data() + r * out;
      for (std::size_t o = 0; o < out; ++o) db[o] += static_cast<grad_type>(row[o]);
    }
  }

  /// The owner an injected product may keep a prepared kernel for (nn::dot_shape::owner): this layer,
  /// or nullptr while the weight cache is off (nn/weight_cache.hpp: then nothing is kept across calls,
  /// by the layer or by its product).
  [[nodiscard]] const void* kept_owner() const noexcept { return weight_cache_enabled() ? this : nullptr; }

  /// Drops every prepared copy of the kernel: the packed ones, and the injected product's.
  void drop_prepared() noexcept {
    packed_.invalidate();
    dot_.notify();
  }

  /// The kernel [in, out] read as b(k = out, n = in) (its transpose), packed for C and kept.
  template <class C>
  std::shared_ptr<const kernels::packed_b> transposed_kernel() const {
    return packed_.template get<C>(detail::flat(kernel_), out_features(), in_features(), kernels::b_layout::n_k);
  }

  /// \throws std::invalid_argument unless `ctx` holds rows × in inputs (a forward of this layer's shape).
  template <class T>
  void check_saved(const saved<T>& ctx, const char* where) const {
    if (ctx.x.size() != ctx.rows * in_features()) {
      throw std::invalid_argument(internal::concat(
          where, ": the saved context holds ", ctx.x.size(), " input values for ", ctx.rows, " rows but the layer has ",
          in_features(), " inputs; pass the context filled by this layer's forward()"));
    }
  }

  void check_gradients(const gradients& grads) const {
    detail::check_gradient_shape("dense::backward", "kernel", grads.kernel.shape(), kernel_.shape());
    if (bias_.has_value() != grads.bias.has_value() || (bias_ && grads.bias->size() != bias_->size())) {
      throw std::invalid_argument(
          "dense::backward: grads.bias does not match the layer's bias; make the gradients with "
          "zero_gradients()");
    }
  }

  /// kernel += xᵀ · dy and bias += Σrows dy, for dy already rounded to C.
  template <class T, class C>
  void add_parameter_gradients(const saved<T>& ctx, const std::vector<C>& dy_c, gradients& grads) const {
    using G = grad_type;
    const std::size_t rows = ctx.rows;
    // kernel grad [in, out] += xᵀ [in, rows] · dy [rows, out], summed in the accumulator.
    if constexpr (std::is_same_v<accumulator_t<C>, G>) {
      kernels::matmul_accumulate<C>(ctx.x, kernels::a_layout::k_m, dy_c, kernels::b_layout::k_n,
                                    detail::flat(grads.kernel), {in_features(), rows, out_features()});
    } else {
      // float32 accumulation into float64 gradients (p=f64 params with a 16-bit compute type).
      std::vector<accumulator_t<C>> tmp(grads.kernel.size(), accumulator_t<C>{});
      kernels::matmul_accumulate<C>(ctx.x, kernels::a_layout::k_m, dy_c, kernels::b_layout::k_n, tmp,
                                    {in_features(), rows, out_features()});
      for (std::size_t i = 0; i < tmp.size(); ++i) grads.kernel.data()[i] += static_cast<G>(tmp[i]);
    }
    add_bias_gradient(dy_c, grads, rows);
  }

  template <class W>
  static kernel_type load_kernel(const xt::xtensor<W, 2>& weight, weight_layout layout) {
    if (layout == weight_layout::in_out) return detail::to_param<param_type>(weight);
    const std::size_t out = weight.shape()[0];
    const std::size_t in = weight.shape()[1];
    kernel_type kernel = kernel_type::from_shape({in, out});
    const W* src = weight.data();
    param_type* dst = kernel.data();
    for (std::size_t o = 0; o < out; ++o) {
      for (std::size_t i = 0; i < in; ++i) dst[i * out + o] = internal::round_to<param_type>(src[o * in + i]);
    }
    return kernel;
  }

  kernel_type kernel_;
  std::optional<bias_type> bias_;
  detail::packed_weight_cache packed_;  ///< kernel_ packed per compute type and orientation
  detail::injected_dot dot_;            ///< the injected product, or nullptr (set_dot)
};

namespace detail {
template <>
inline constexpr std::string_view layer_name<dense> = "mixprec::nn::dense";
}  // namespace detail

/// dense, y = x · kernel + bias, with its policy taken from the `policy_scope` live at construction: one of the listed
/// `Ps...` (nn/from_scope.hpp, `detail::scoped_layer` for the members). Constructed with `dense<P>`'s
/// constructor arguments, optionally preceded by `compute_dtype(...)`, or with `from_factory`.
/// Errors: `policy_error` when the scope's policy (after the override) is not listed.
template <class... Ps>
class dense<from_scope<Ps...>> : public detail::scoped_layer<dense, Ps...> {
 public:
  using detail::scoped_layer<dense, Ps...>::scoped_layer;
};

}  // namespace mixprec::nn
