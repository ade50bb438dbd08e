/// \file
/// \brief `nn::repeated<Layer>`: n layers of one type applied in order, each to the output of the one
/// before (a transformer's stack of blocks: PyTorch's `nn.ModuleList` walked in a loop, Flax's list of
/// submodules), with the explicit forward/backward of the nn layers and walks that name each tensor
/// `<index>.<name>` ("0.attn.wq.kernel").
///
/// `Layer` maps x to y of the same element type (`output_t<policy_type, T>` is T), as a
/// `transformer_block` maps its float32 residual stream; it has the nn layers' interface
/// (`operator()(x)`, `forward(x, saved<T>&)`, `backward(ctx, dy, grads)`, `zero_gradients()`,
/// `for_each_parameter`, a `gradients` tree with `for_each`).
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/parameters.hpp"

namespace mixprec::nn {

/// n layers of one type, applied in order (see the file comment). Copyable when `Layer` is.
template <class Layer>
class repeated : public parameter_walks<repeated<Layer>> {
  friend class parameter_walks<repeated>;

 public:
  using layer_type = Layer;                         ///< the type of each layer
  using policy_type = typename Layer::policy_type;  ///< the layers' policy
  /// The output element type for inputs of element type T: T (each layer maps T to T).
  template <class T>
  using output_type = T;

  /// Every layer's gradients, in order: a mixprec tree (a `std::vector` of the layers' gradient trees)
  /// whose `for_each` names tensors as `for_each_parameter` does.
  struct gradients : gradient_walks<gradients> {
    std::vector<typename Layer::gradients> layers;  ///< layer i's gradients at index i

    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`): the vector of the layers' gradients.
    static auto tree_children(auto& self) noexcept { return std::tie(self.layers); }
    /// The walk of `for_each`: `<index>.<name>`.
    template <class Self, class F>
    static void walk(Self& self, F& f) {
      for (std::size_t i = 0; i < self.layers.size(); ++i)
        self.layers[i].for_each(prefixed(std::to_string(i) + ".", f));
    }
  };

  /// What `backward` needs from a `forward` of inputs of element type T: each layer's saved context.
  template <class T>
  struct saved {
    std::vector<typename Layer::template saved<T>> layers;  ///< layer i's context at index i
  };

  /// No layers: the identity (forward returns x, backward dy).
  repeated() = default;
  /// The layers, applied in the order given.
  explicit repeated(std::vector<Layer> layers) : layers_(std::move(layers)) {}
  /// `n` copies of `layer` (each with its own parameters, equal at first).
  repeated(std::size_t n, const Layer& layer) : layers_(n, layer) {}

  /// The number of layers.
  [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
  /// Layer i (unchecked).
  [[nodiscard]] Layer& operator[](std::size_t i) noexcept { return layers_[i]; }
  /// Layer i (unchecked).
  [[nodiscard]] const Layer& operator[](std::size_t i) const noexcept { return layers_[i]; }
  /// The layers.
  [[nodiscard]] std::vector<Layer>& layers() noexcept { return layers_; }
  /// The layers.
  [[nodiscard]] const std::vector<Layer>& layers() const noexcept { return layers_; }

  /// y = layer_{n-1}(... layer_0(x)) (inference: nothing saved). X's container kind is kept.
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x_in) const {
    const auto& x0 = detail::as_array(x_in);
    if (layers_.empty()) return detail::owned_copy(x0);
    auto x = layers_.front()(x0);  // the first layer reads x in place: no copy of the input
    for (std::size_t i = 1; i < layers_.size(); ++i) x = layers_[i](x);
    return x;
  }

  /// The same result as `operator()`, saving every layer's context in `ctx`.
  /// \throws what the layers' forward passes throw.
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x_in, saved<detail::value_t<X>>& ctx) const {
    ctx.layers.resize(layers_.size());
    const auto& x0 = detail::as_array(x_in);
    if (layers_.empty()) return detail::owned_copy(x0);
    auto x = layers_.front().forward(x0, ctx.layers.front());
    for (std::size_t i = 1; i < layers_.size(); ++i) x = layers_[i].forward(x, ctx.layers[i]);
    return x;
  }

  /// The vector-Jacobian product of `forward`: each layer's backward from the last to the first, adding
  /// every layer's parameter gradients into `grads`; returns dx. `ready`, when given, is called with
  /// the layer's index ("3") after each layer's backward (its gradients are then final).
  /// \throws std::invalid_argument when `ctx` or `grads` does not hold one entry per layer, and what the
  ///         layers' backward passes throw.
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy_in, gradients& grads,
                              const gradients_ready& ready = {}) const {
    if (ctx.layers.size() != layers_.size() || grads.layers.size() != layers_.size()) {
      throw std::invalid_argument("nn::repeated::backward: " + std::to_string(layers_.size()) + " layers but " +
                                  std::to_string(ctx.layers.size()) + " saved contexts and " +
                                  std::to_string(grads.layers.size()) +
                                  " gradients (save with forward and make the gradients with zero_gradients)");
    }
    const auto& dy0 = detail::as_array(dy_in);
    if (layers_.empty()) return detail::owned_copy(dy0);
    const std::size_t last = layers_.size() - 1;
    auto dx = layers_[last].backward(ctx.layers[last], dy0, grads.layers[last]);
    if (ready) ready(std::to_string(last));
    for (std::size_t i = last; i-- > 0;) {
      dx = layers_[i].backward(ctx.layers[i], dx, grads.layers[i]);
      if (ready) ready(std::to_string(i));
    }
    return dx;
  }

  /// Calls `f(name, dense&)` on every projection of every layer that lists its projections (a
  /// `transformer_block`), named `<index>.<name>` ("0.attn.wq").
  template <class F>
  requires requires(Layer& l) {
    l.for_each_projection([](const std::string&, auto&) {});
  }
  void for_each_projection(F&& f) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::string head = std::to_string(i) + ".";
      layers_[i].for_each_projection([&](const std::string& name, auto& d) { f(head + name, d); });
    }
  }

  /// Zero gradients shaped like every layer's parameters.
  [[nodiscard]] gradients zero_gradients() const {
    gradients g;
    g.layers.reserve(layers_.size());
    for (const Layer& l : layers_) g.layers.push_back(l.zero_gradients());
    return g;
  }

 private:
  /// The walk of `for_each_parameter` (parameter_walks): `<index>.<name>`.
  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    for (std::size_t i = 0; i < self.layers_.size(); ++i) {
      self.layers_[i].for_each_parameter(prefixed(std::to_string(i) + ".", f));
    }
  }

  std::vector<Layer> layers_;
};

}  // namespace mixprec::nn
