/// \file
/// \brief Private: the scale and bias of the norm layers that have both (layer_norm, group_norm,
/// batch_norm), written once: the parameters, their gradients, the walks over them and their checks.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/accumulator.hpp"
#include "mixprec/arrays/xtensor.hpp"
#include "mixprec/kernels/rounding.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/layer_types.hpp"

namespace mixprec::nn::detail {

/// The learnable parameters of a norm layer over `features()` features: an optional scale and an
/// optional bias [features] in `P::param_type` (Flax's `use_scale`, `use_bias`), with their gradients in
/// `grad_t<P>`. The layers derive from it: its public members are theirs.
template <class P>
class norm_params {
 public:
  using policy_type = P;
  using param_type = typename P::param_type;
  using vector_type = xt::xtensor<param_type, 1>;  ///< [features]
  using grad_type = grad_t<P>;                     ///< element type of the parameter gradients

  /// The parameter gradients [features] in `grad_t<P>`, present where the layer has the parameter.
  struct gradients {
    std::optional<xt::xtensor<grad_type, 1>> scale;
    std::optional<xt::xtensor<grad_type, 1>> bias;
    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`), in the order of `for_each`: so
    /// `all_finite`, `unscale_in_place`, `clip_grad_norm`, `tree_map` and `tree_zero` take these gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.scale, self.bias); }
    /// Sets every gradient to +0 where it is (shapes and buffers kept, nothing allocated): the
    /// accumulate-then-zero pattern of PyTorch's `zero_grad(set_to_none=False)`.
    void zero() noexcept { mixprec::tree_zero(*this); }
    /// Calls `f(name, tensor)` for "scale" and "bias" (those present), the order of `for_each_parameter`.
    template <class F>
    void for_each(F&& f) {
      if (scale) f(std::string_view("scale"), *scale);
      if (bias) f(std::string_view("bias"), *bias);
    }
    /// Const form of `for_each`.
    template <class F>
    void for_each(F&& f) const {
      if (scale) f(std::string_view("scale"), *scale);
      if (bias) f(std::string_view("bias"), *bias);
    }
  };

  /// Number of features (the last axis).
  [[nodiscard]] std::size_t features() const noexcept { return features_; }
  /// The scale [features], if the layer has one (writable: optimiser steps, checkpoint loads; same shape).
  [[nodiscard]] const std::optional<vector_type>& scale() const noexcept { return scale_; }
  [[nodiscard]] std::optional<vector_type>& scale() noexcept { return scale_; }
  /// The bias [features], if the layer has one (writable, as the scale).
  [[nodiscard]] const std::optional<vector_type>& bias() const noexcept { return bias_; }
  [[nodiscard]] std::optional<vector_type>& bias() noexcept { return bias_; }

  /// Calls `f(name, tensor)` on "scale" and "bias" (those present).
  template <class F>
  void for_each_parameter(F&& f) {
    if (scale_) f(std::string_view("scale"), *scale_);
    if (bias_) f(std::string_view("bias"), *bias_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    if (scale_) f(std::string_view("scale"), *scale_);
    if (bias_) f(std::string_view("bias"), *bias_);
  }

  /// Zero gradients shaped like the parameters.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g;
    if (scale_) g.scale = xt::xtensor<grad_type, 1>(xt::zeros<grad_type>({features_}));
    if (bias_) g.bias = xt::xtensor<grad_type, 1>(xt::zeros<grad_type>({features_}));
    return g;
  }

 protected:
  /// Scale ones and bias zeros [features], each if selected.
  norm_params(std::size_t features, bool use_scale, bool use_bias) : features_(features) {
    if (use_scale) scale_ = vector_type(xt::ones<param_type>({features}));
    if (use_bias) bias_ = vector_type(xt::zeros<param_type>({features}));
  }
  /// The given parameters (either may be absent), unchecked: the layer calls `check_param_shapes`.
  norm_params(std::size_t features, std::optional<vector_type> scale, std::optional<vector_type> bias)
      : features_(features), scale_(std::move(scale)), bias_(std::move(bias)) {}

  /// \throws std::invalid_argument if `features()` is 0 (`layer` names the layer in the message).
  void check_some_features(const char* layer) const {
    if (features_ == 0) {
      throw std::invalid_argument(internal::concat(
          layer, ": features is 0; the layer needs at least one feature to normalise (the last axis of x)"));
    }
  }

  /// \throws std::invalid_argument if the scale or the bias does not have `features()` elements.
  void check_param_shapes(const char* layer) const {
    check_param_shape(layer, "scale", scale_);
    check_param_shape(layer, "bias", bias_);
  }

  /// \throws std::invalid_argument unless `grads` holds a gradient [features] for each parameter the
  ///         layer has and no other (`where`: the failing call, "<layer>::backward").
  void check_gradients(const char* where, const gradients& grads) const {
    if (scale_.has_value() != grads.scale.has_value() || bias_.has_value() != grads.bias.has_value() ||
        (grads.scale && grads.scale->size() != features_) || (grads.bias && grads.bias->size() != features_)) {
      throw std::invalid_argument(internal::concat(
          where, ": the gradients do not match the layer's scale and bias; make them with zero_gradients()"));
    }
  }

  std::size_t features_;
  std::optional<vector_type> scale_;
  std::optional<vector_type> bias_;

 private:
  void check_param_shape(const char* layer, const char* name, const std::optional<vector_type>& p) const {
    if (p && p->size() != features_) {
      throw std::invalid_argument(internal::concat(layer, ": ", name, " has shape ", shape_string(p->shape()),
                                                   " but the layer normalises ", features_, " features (expects [",
                                                   features_, "])"));
    }
  }
};

/// A parameter [n] rounded to C and widened to `accumulator_t<C>`, as the passes use it, or `n` copies
/// of `absent` when the layer has none (1 for a scale, 0 for a bias).
template <class C, class V>
[[nodiscard]] std::vector<accumulator_t<C>> widened_param(const std::optional<V>& p, std::size_t n,
                                                          accumulator_t<C> absent) {
  std::vector<accumulator_t<C>> v(n, absent);
  if (p) internal::round_widen_n<C>(p->data(), n, v.data());
  return v;
}

}  // namespace mixprec::nn::detail
