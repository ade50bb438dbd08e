/// \file
/// \brief `nn::sequential<Layers...>`: layers whose forward is x → y, chained (PyTorch's
/// `nn.Sequential`, Flax's `nn.Sequential`), with the explicit forward/backward of every mixprec layer:
/// `forward(x, ctx)` saves each layer's context, `backward(ctx, dy, grads)` runs the layers' backward
/// passes in reverse, and the parameter and gradient walks name each tensor `<layer>.<name>`, the layer
/// named by its index ("0.kernel", as PyTorch names them) or by the names given.
///
/// A layer fits when it has the interface of the nn layers: `operator()(x)`, `forward(x,
/// saved<T>&)`, `backward(const saved<T>&, dy, gradients&)`, `zero_gradients()`,
/// `for_each_parameter(f)` and a `gradients` tree with `for_each(f)`, and a `policy_type` (its output
/// element type for inputs of type T is `output_t<policy_type, T>`, or its own `output_type<T>`).
/// dense, feed_forward, layer_norm, rms_norm (without a residual), group_norm, attention (without a
/// mask), transformer_block, repeated and a `sequential` itself fit.
///
///     std::mt19937 rng(0);
///     using P = mixprec::mixed_float16;
///     mixprec::nn::sequential mlp{
///         mixprec::nn::dense<P>(784, 256, rng),
///         mixprec::nn::feed_forward<P>::init(mixprec::nn::ffn_activation::gelu, 256, 1024, rng),
///         mixprec::nn::dense<P>(256, 10, rng)};
///     decltype(mlp)::saved<float> ctx;
///     auto logits = mlp.forward(x, ctx);          // x [batch, 784] float -> logits [batch, 10]
///     auto grads = mlp.zero_gradients();
///     auto dx = mlp.backward(ctx, dlogits, grads);
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/nn/layer_types.hpp"
#include "mixprec/nn/parameters.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec::nn {

namespace detail {

/// The output element type of layer L for inputs of element type T: `L::output_type<T>` when L says
/// (a `transformer_block` returns its stream's type), else `output_t<L::policy_type, T>`.
template <class L, class T>
struct layer_output_type {
  using type = output_t<typename L::policy_type, T>;
};
template <class L, class T>
requires requires { typename L::template output_type<T>; }
struct layer_output_type<L, T> {
  using type = typename L::template output_type<T>;
};
template <class L, class T>
using layer_output_t = typename layer_output_type<L, T>::type;

/// The saved contexts of `Layers...` run in a chain from inputs of element type T: a std::tuple of
/// each layer's `saved<T_i>`, T_0 = T and T_{i+1} = layer_output_t<layer i, T_i>.
template <class T, class... Layers>
struct chain_types {
  using saved = std::tuple<>;
  using output = T;
};
template <class T, class L, class... Rest>
struct chain_types<T, L, Rest...> {
  using next = chain_types<layer_output_t<L, T>, Rest...>;
  using saved = decltype(std::tuple_cat(std::declval<std::tuple<typename L::template saved<T>>>(),
                                        std::declval<typename next::saved>()));
  using output = typename next::output;
};

}  // namespace detail

/// Layers applied in order, each to the output of the one before (see the file comment).
/// Types: each layer keeps its own policy; the element type between two layers is the output type of
/// the first (`output_t<P_i, T_i>`), so a `mixed_float16` chain passes float32 between its layers.
template <class... Layers>
class sequential : public parameter_walks<sequential<Layers...>> {
  friend class parameter_walks<sequential>;
  static_assert(sizeof...(Layers) > 0, "nn::sequential needs at least one layer.");

 public:
  /// The number of layers.
  static constexpr std::size_t size = sizeof...(Layers);
  /// The policy of the first layer (what inputs meet first).
  using policy_type = typename std::tuple_element_t<0, std::tuple<Layers...>>::policy_type;

  /// Every layer's gradients, in order: a mixprec tree (so `all_finite`, `unscale_in_place`,
  /// `clip_grad_norm` and `tree_zero` take it) whose `for_each` names tensors like the parameters.
  struct gradients : gradient_walks<gradients> {
    std::tuple<typename Layers::gradients...> layers;  ///< layer i's gradients at index i
    std::array<std::string, size> names;               ///< the layers' names (as the model's)

    /// The children as a mixprec tree (`mixprec/arrays/tree.hpp`): the layers' gradients, in order.
    static auto tree_children(auto& self) noexcept {
      return std::apply([](auto&... g) { return std::tie(g...); }, self.layers);
    }
    /// The walk of `for_each`: `<layer>.<name>`, as `for_each_parameter` names them (layers by index
    /// when `names` is empty, as after a `tree_map`).
    template <class Self, class F>
    static void walk(Self& self, F& f) {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (std::get<I>(self.layers)
             .for_each(prefixed((self.names[I].empty() ? std::to_string(I) : self.names[I]) + ".", f)),
         ...);
      }
      (std::make_index_sequence<size>{});
    }
  };

  /// What `backward` needs from a `forward` of inputs of element type T: each layer's saved context.
  template <class T>
  struct saved {
    typename detail::chain_types<T, Layers...>::saved layers;  ///< layer i's context at index i
  };

  /// The layers, named "0", "1", ... (PyTorch's `nn.Sequential(*layers)`).
  explicit sequential(Layers... layers) : layers_(std::move(layers)...) {
    for (std::size_t i = 0; i < size; ++i) names_[i] = std::to_string(i);
  }

  /// The layers with the given names (PyTorch's `nn.Sequential(OrderedDict(...))`): tensors are named
  /// `<names[i]>.<name>`.
  /// \throws std::invalid_argument when a name is empty, holds a '.', or is given twice.
  explicit sequential(std::array<std::string, size> names, Layers... layers)
      : layers_(std::move(layers)...), names_(std::move(names)) {
    for (std::size_t i = 0; i < size; ++i) {
      if (names_[i].empty() || names_[i].find('.') != std::string::npos)
        throw std::invalid_argument("nn::sequential: layer " + std::to_string(i) + "'s name \"" + names_[i] +
                                    "\" must be non-empty and hold no '.'");
      for (std::size_t j = 0; j < i; ++j) {
        if (names_[j] == names_[i])
          throw std::invalid_argument("nn::sequential: layers " + std::to_string(j) + " and " + std::to_string(i) +
                                      " are both named \"" + names_[i] + "\"");
      }
    }
  }

  /// Layer I.
  template <std::size_t I>
  [[nodiscard]] auto& layer() noexcept {
    return std::get<I>(layers_);
  }
  /// Layer I (const).
  template <std::size_t I>
  [[nodiscard]] const auto& layer() const noexcept {
    return std::get<I>(layers_);
  }
  /// The layers' names.
  [[nodiscard]] const std::array<std::string, size>& names() const noexcept { return names_; }

  /// y = layer_{n-1}(... layer_0(x)) (inference: nothing saved).
  template <detail::layer_input X>
  [[nodiscard]] auto operator()(const X& x) const {
    return apply_from<0>(x);
  }

  /// The same result as `operator()`, saving every layer's context in `ctx`.
  /// \throws what the layers' forward passes throw (a feature count that does not match, ...).
  template <detail::layer_input X>
  [[nodiscard]] auto forward(const X& x, saved<detail::value_t<X>>& ctx) const {
    return forward_from<0>(x, ctx.layers);
  }

  /// The vector-Jacobian product of `forward`: runs each layer's backward from the last to the first,
  /// adding every layer's parameter gradients into `grads`, and returns dx in the input type T.
  /// \throws what the layers' backward passes throw (a cotangent or gradients of the wrong shape, ...).
  template <class T, detail::layer_input DY>
  [[nodiscard]] auto backward(const saved<T>& ctx, const DY& dy, gradients& grads) const {
    return backward_from<size - 1>(ctx.layers, dy, grads);
  }

  /// Zero gradients shaped like every layer's parameters.
  [[nodiscard]] gradients zero_gradients() const {
    return std::apply([&](const auto&... l) { return gradients{{}, {l.zero_gradients()...}, names_}; }, layers_);
  }

  /// Calls `f(name, tensor)` on every buffer of the layers that have buffers (batch_norm's running
  /// statistics), named like the parameters.
  template <class F>
  void for_each_buffer(F&& f) {
    walk_buffers(*this, f);
  }
  /// Const form of `for_each_buffer`.
  template <class F>
  void for_each_buffer(F&& f) const {
    walk_buffers(*this, f);
  }

 private:
  template <std::size_t I, class X>
  auto apply_from(const X& x) const {
    if constexpr (I + 1 == size) {
      return std::get<I>(layers_)(x);
    } else {
      return apply_from<I + 1>(std::get<I>(layers_)(x));
    }
  }

  template <std::size_t I, class X, class Saved>
  auto forward_from(const X& x, Saved& saved_layers) const {
    auto y = std::get<I>(layers_).forward(x, std::get<I>(saved_layers));
    using L = std::tuple_element_t<I, std::tuple<Layers...>>;
    static_assert(std::is_same_v<detail::value_t<decltype(y)>, detail::layer_output_t<L, detail::value_t<X>>>,
                  "nn::sequential: a layer's output element type must be output_t<P, T> of its policy P for "
                  "inputs of type T, or its own output_type<T> (the type the next layer's saved context is made "
                  "for).");
    if constexpr (I + 1 == size) {
      return y;
    } else {
      return forward_from<I + 1>(y, saved_layers);
    }
  }

  template <std::size_t I, class Saved, class DY>
  auto backward_from(const Saved& saved_layers, const DY& dy, gradients& grads) const {
    auto dx = std::get<I>(layers_).backward(std::get<I>(saved_layers), dy, std::get<I>(grads.layers));
    if constexpr (I == 0) {
      return dx;
    } else {
      return backward_from<I - 1>(saved_layers, dx, grads);
    }
  }

  /// The walk of `for_each_parameter` (parameter_walks): `<layer>.<name>` ("0.kernel", "1.w1.kernel").
  template <class Self, class F>
  static void walk_parameters(Self& self, F& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<I>(self.layers_).for_each_parameter(prefixed(self.names_[I] + ".", f)), ...);
    }
    (std::make_index_sequence<size>{});
  }

  template <class Self, class F>
  static void walk_buffers(Self& self, F& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&](auto& layer) {
            if constexpr (requires { layer.for_each_buffer([](std::string_view, auto&) {}); }) {
              layer.for_each_buffer(prefixed(self.names_[I] + ".", f));
            }
          }(std::get<I>(self.layers_)),
          ...);
    }
    (std::make_index_sequence<size>{});
  }

  std::tuple<Layers...> layers_;
  std::array<std::string, size> names_;
};

}  // namespace mixprec::nn
