/// \file
/// \brief `nn::dot_product`: the matrix products of a `dense` layer, injectable at run time (Flax's
/// `dot_general` attribute, Haliax's "dot injection"), so that a quantised product (the float8
/// product with delayed scaling of scaled/float8_dot.hpp, a weight-only float8 product) replaces the
/// plain one without a new layer type.
///
/// A layer with an injected product hands it float32 values and keeps everything else:
///  - x arrives rounded to the layer's compute type (what the plain product would see), widened to
///    float; the kernel arrives as stored (the float32 master weights under `p=f32`), widened to
///    float: the injected product decides how to round both.
///  - the layer adds the bias (rounded to the compute type) in float32 and rounds y to its output type;
///    in the backward pass it rounds dy to the compute type first, as the plain pass does, and sums the
///    bias gradient itself.
/// The layers are `const` in their forward and backward passes and the training loops call them
/// from several threads at once (data-parallel workers), so an implementation must be thread-safe.
///
/// **Example** (scaled/float8_dot.hpp):
///
///     auto fp8 = std::make_shared<mixprec::scaled::float8_dot<>>();
///     layer.set_dot(fp8);                 // layer: nn::dense<P>; forward and backward now run in float8
///     ... forward, backward, optimiser step ...
///     fp8->update_scales();               // once per training step (delayed scaling)
#pragma once

#include <cstddef>
#include <span>

namespace mixprec::nn {

/// The sizes of a dense layer's products: x [rows, in], kernel [in, out], y [rows, out].
struct dot_shape {
  std::size_t rows = 0;  ///< rows of x (the leading axes of the input, flattened)
  std::size_t in = 0;    ///< input features
  std::size_t out = 0;   ///< output features
  /// The layer whose kernel this is (a `dense` passes itself), or nullptr. A product may keep a
  /// prepared copy of the kernel per owner (quantised and packed) until `parameters_changed`; with
  /// nullptr it must prepare the kernel at every call.
  const void* owner = nullptr;
};

/// The products of a dense layer (file comment). All arrays are row-major float32; sizes match
/// `s` (the layer checks them before calling).
class dot_product {
 public:
  dot_product() = default;
  dot_product(const dot_product&) = delete;
  dot_product& operator=(const dot_product&) = delete;
  virtual ~dot_product() = default;

  /// y [rows, out] = x [rows, in] · kernel [in, out]; y is overwritten.
  virtual void forward(std::span<const float> x, std::span<const float> kernel, std::span<float> y, dot_shape s) = 0;

  /// The backward pass of `forward`: dx [rows, in] = dy [rows, out] · kernelᵀ (overwritten) and
  /// dkernel [in, out] = xᵀ · dy (overwritten; the layer adds it to its gradient). `x` is the input
  /// of the matching forward call, as that call received it.
  virtual void backward(std::span<const float> x, std::span<const float> dy, std::span<const float> kernel,
                        std::span<float> dx, std::span<float> dkernel, dot_shape s) = 0;

  /// Called by a layer that injects this product whenever the kernels it passes may change or a new
  /// layer starts using it: every non-const access to its parameters (`kernel()`, `for_each_parameter`,
  /// `parameters_changed()`), `set_dot`, and copying or assigning the layer. A product that keeps a
  /// prepared kernel (scaled::float8_dot keeps it quantised and packed) drops it here. Not called
  /// while the layer runs a forward or backward pass (the layer is being modified then). Default:
  /// nothing.
  virtual void parameters_changed() noexcept {}
};

}  // namespace mixprec::nn
