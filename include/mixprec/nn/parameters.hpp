/// \file
/// \brief One named walk over a layer's (or a model's) parameters with their gradients:
/// `nn::for_each_parameter(layer, grads, f(name, param, grad))`, PyTorch's
/// `for name, p in model.named_parameters(): ... p.grad`.
///
/// The layer supplies `for_each_parameter(f(name, tensor))` and its gradients `for_each(f(name,
/// tensor))`, both in the same order (every nn layer's `gradients` walks in the order of its
/// `for_each_parameter`); the two walks are zipped by position and the names must agree. Light: no
/// layer is included, any pair of types with these two walks works (a hand-written model included).
///
/// Also what a model or composite written by hand needs to offer these walks: `prefixed(prefix, f)`,
/// `for_each_tensor`, `parameter_count`, the CRTP bases `parameter_walks` and `gradient_walks`; and
/// `parameter_spans(model)` and `named_parameters(model)` / `named_gradients(grads)`, the parameters and
/// gradients as trees (a list in walk order; a map by dotted name).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/arrays/tree.hpp"

namespace mixprec::nn {

/// Told during a backward pass that the gradients of a sub-tree are final: called with its dotted
/// prefix ("layers.3", "ln_f") once every gradient named `prefix` or `prefix.<...>` will not change
/// again in this backward pass (PyTorch DDP's autograd hooks, one call per layer rather than per
/// tensor). Data-parallel training starts the reduction of those gradients while the backward pass
/// goes on (distributed::gradient_reducer::ready). Empty: not called.
using gradients_ready = std::function<void(std::string_view prefix)>;

namespace detail {
/// The compile-time rank of a tensor type (its `shape_type` is a std::array), or 0 when dynamic.
template <class T>
constexpr std::size_t walk_static_rank() {
  using U = std::remove_cvref_t<T>;
  if constexpr (requires { std::tuple_size<typename U::shape_type>::value; }) {
    return std::tuple_size_v<typename U::shape_type>;
  } else {
    return 0;
  }
}

/// `tensor`'s elements as a span of T. \throws std::invalid_argument (from `who`, naming the tensor) when
/// its element type is another.
template <class T, class Name, class Tensor>
[[nodiscard]] std::span<T> span_of(const char* who, const char* what, const Name& name, Tensor& tensor) {
  using E = std::remove_cvref_t<decltype(*tensor.data())>;
  if constexpr (std::is_same_v<E, T>) {
    return std::span<T>(tensor.data(), tensor.size());
  } else {
    throw std::invalid_argument(internal::concat(who, ": ", what, " \"", std::string_view(name),
                                                 "\" has another element type than the one asked for; pass it as T"));
  }
}

/// Every tensor that `walk(f)` passes to `f(name, tensor)` as a span keyed by its name.
/// \throws std::invalid_argument (from `who`, naming the tensor) for another element type or a repeated name.
template <class T, class Walk>
[[nodiscard]] std::map<std::string, std::span<T>> named_spans(const char* who, const char* what, Walk&& walk) {
  std::map<std::string, std::span<T>> out;
  walk([&](const auto& name, auto& tensor) {
    std::string key{std::string_view(name)};
    if (!out.emplace(key, span_of<T>(who, what, name, tensor)).second) {
      throw std::invalid_argument(internal::concat(who, ": two ", what, "s are named \"", key,
                                                   "\"; give the parts of the model distinct names"));
    }
  });
  return out;
}
}  // namespace detail

/// `f` with `prefix` put before every name it is given: `f(prefix + name, tensor)`. For the walks of a
/// model written by hand: `wte.for_each_parameter(nn::prefixed("wte.", f))`.
template <class F>
[[nodiscard]] auto prefixed(std::string prefix, F& f) {
  return [prefix = std::move(prefix), &f](const auto& name, auto& tensor) {
    f(prefix + std::string(std::string_view(name)), tensor);
  };
}

/// CRTP base of a model or composite layer: `for_each_parameter(f)` in both constnesses, from one
/// `static void walk_parameters(Self& self, F& f)` of `Derived` (Self is `Derived` or `const Derived`;
/// befriend this class when it is private). `f(name, tensor)` as the nn layers' walks.
template <class Derived>
class parameter_walks {
 public:
  /// Calls `f(name, tensor)` on every parameter (writable).
  template <class F>
  void for_each_parameter(F&& f) {
    Derived::walk_parameters(static_cast<Derived&>(*this), f);
  }
  /// Calls `f(name, tensor)` on every parameter (read-only).
  template <class F>
  void for_each_parameter(F&& f) const {
    Derived::walk_parameters(static_cast<const Derived&>(*this), f);
  }
};

/// CRTP base of a composite's `gradients` struct: `for_each(f)` in both constnesses from one `static
/// void walk(Self& self, F& f)` of `Derived`, and `zero()`. `Derived` lists its children with a static
/// `tree_children(self)` (mixprec/arrays/tree.hpp), so it is a tree. Aggregate initialisation starts
/// with `{}` for this base: `gradients{{}, a, b}`.
template <class Derived>
struct gradient_walks {
  /// Calls `f(name, tensor)` on every gradient (writable), named as the parameters.
  template <class F>
  void for_each(F&& f) {
    Derived::walk(static_cast<Derived&>(*this), f);
  }
  /// Calls `f(name, tensor)` on every gradient (read-only).
  template <class F>
  void for_each(F&& f) const {
    Derived::walk(static_cast<const Derived&>(*this), f);
  }
  /// Sets every gradient to +0 where it is (nothing allocated): PyTorch's `zero_grad(set_to_none=False)`.
  void zero() noexcept { mixprec::tree_zero(static_cast<Derived&>(*this)); }
};

/// Calls `f(name, tensor)` on every tensor of `part`: its `for_each_parameter` walk when it has one (a
/// layer or model), else its `for_each` walk (a layer's gradients). Lets one function walk a model's
/// parameters and its gradients, whose parts have the same names.
template <class Part, class F>
void for_each_tensor(Part& part, F&& f) {
  if constexpr (requires { part.for_each_parameter(f); }) {
    part.for_each_parameter(f);
  } else {
    part.for_each(f);
  }
}

/// Every parameter of a layer or model as a span over its elements, in the order of
/// `for_each_parameter`: a `std::vector<std::span<T>>`, which is a mixprec tree, so `all_finite`,
/// `tree_map`, `cast_*`, `global_grad_norm` and `tree_zero` take a model's parameters as they take its
/// gradients (JAX's params pytree). Writing through the spans writes the parameters: the walk is the
/// non-const one, which drops the layers' packed weight copies first (as an optimiser step does; a
/// write kept across a later forward call needs the layer's `parameters_changed()`). T is the
/// parameters' element type: `Model::policy_type::param_type` by default.
/// \throws std::invalid_argument when a parameter has another element type (naming it).
template <class Model, class T = typename Model::policy_type::param_type>
[[nodiscard]] std::vector<std::span<T>> parameter_spans(Model& model) {
  std::vector<std::span<T>> out;
  model.for_each_parameter([&out](const auto& name, auto& tensor) {
    out.push_back(detail::span_of<T>("nn::parameter_spans", "parameter", name, tensor));
  });
  return out;
}

/// Every parameter of a layer or model as a span keyed by its dotted name: a `std::map<std::string,
/// std::span<T>>` (Flax's flattened params dict, `traverse_util.flatten_dict(params, sep=".")`;
/// PyTorch's `dict(model.named_parameters())`). It is a mixprec tree whose structure is the names, so
/// `tree_map(f, nn::named_parameters(model), nn::named_gradients(grads))` pairs each parameter with its
/// gradient by name, and `tree_map` over it keeps the names (a map of `std::vector`s). Writing through
/// the spans writes the parameters (the non-const walk, as `parameter_spans`). T is the parameters'
/// element type: `Model::policy_type::param_type` by default.
/// \throws std::invalid_argument when a parameter has another element type, or a name repeats (naming it).
template <class Model, class T = typename Model::policy_type::param_type>
[[nodiscard]] std::map<std::string, std::span<T>> named_parameters(Model& model) {
  return detail::named_spans<T>("nn::named_parameters", "parameter",
                                [&model](auto&& f) { model.for_each_parameter(f); });
}

/// Every gradient of a gradients tree (a layer's or model's `gradients`, its `for_each` walk) as a span
/// keyed by the parameter's dotted name: the same keys as `named_parameters` of the model. T is the
/// gradients' element type, `grad_t<P>`: float (double for float64 parameters).
/// \throws std::invalid_argument when a gradient has another element type, or a name repeats.
template <class T = float, class Grads>
[[nodiscard]] std::map<std::string, std::span<T>> named_gradients(Grads& grads) {
  return detail::named_spans<T>("nn::named_gradients", "gradient", [&grads](auto&& f) { grads.for_each(f); });
}

/// The number of parameter elements of a layer or model (its `for_each_parameter` walk): PyTorch's
/// `sum(p.numel() for p in model.parameters())`.
template <class Model>
[[nodiscard]] std::size_t parameter_count(const Model& model) {
  std::size_t n = 0;
  model.for_each_parameter([&n](const auto& /*name*/, const auto& tensor) { n += tensor.size(); });
  return n;
}

/// Calls `f(name, param, grad)` on every parameter of `layer` with its gradient in `grads`, in the
/// order of `layer.for_each_parameter`: `name` is a `std::string_view` (the layer's dotted name),
/// `param` the layer's tensor (writable when `layer` is), `grad` the gradient tensor of the same
/// position in `grads.for_each` (writable when `grads` is). Cost: quadratic in the number of tensors
/// (each parameter looks its gradient up by position); nothing is allocated besides the names.
///
/// \throws std::invalid_argument when the walks disagree: a different number of tensors, a name at
///         the same position that differs ("nn::for_each_parameter: parameter 1 is \"bias\" but
///         gradient 1 is \"w3.kernel\""), or a parameter and gradient of different static ranks.
template <class Layer, class Grads, class F>
void for_each_parameter(Layer& layer, Grads& grads, F&& f) {
  std::size_t grad_count = 0;
  grads.for_each([&grad_count](std::string_view, auto&) { ++grad_count; });
  std::size_t index = 0;
  layer.for_each_parameter([&](const auto& raw_name, auto& param) {
    const std::string_view name(raw_name);
    if (index >= grad_count)
      throw std::invalid_argument("nn::for_each_parameter: the layer has more parameters than the gradients (" +
                                  std::to_string(grad_count) + "); parameter " + std::to_string(index) + " is \"" +
                                  std::string(name) + "\"");
    std::size_t position = 0;
    grads.for_each([&](std::string_view grad_name, auto& grad) {
      if (position++ != index) return;
      if (grad_name != name)
        throw std::invalid_argument("nn::for_each_parameter: parameter " + std::to_string(index) + " is \"" +
                                    std::string(name) + "\" but gradient " + std::to_string(index) + " is \"" +
                                    std::string(grad_name) + "\"");
      constexpr std::size_t pr = detail::walk_static_rank<decltype(param)>();
      constexpr std::size_t gr = detail::walk_static_rank<decltype(grad)>();
      if constexpr (pr != 0 && gr != 0 && pr != gr) {
        throw std::invalid_argument("nn::for_each_parameter: parameter \"" + std::string(name) + "\" has rank " +
                                    std::to_string(pr) + " but its gradient has rank " + std::to_string(gr));
      } else {
        f(name, param, grad);
      }
    });
    ++index;
  });
  if (index != grad_count)
    throw std::invalid_argument("nn::for_each_parameter: the gradients have " + std::to_string(grad_count) +
                                " tensors but the layer has " + std::to_string(index) + " parameters");
}

}  // namespace mixprec::nn
