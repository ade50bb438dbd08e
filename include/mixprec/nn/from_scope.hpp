/// \file
/// \brief Layers that take their policy from the `policy_scope` live when they are constructed:
/// `nn::dense<from_scope<Ps...>>` (and the same for every layer), with a per-layer override of the
/// compute role by name, `nn::compute_dtype("param")` (Haliax's run-time policies: a resource
/// environment carrying a jmp policy, and a layer's `compute_dtype` argument naming a role or a dtype).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "mixprec/arch/message.hpp"
#include "mixprec/dtypes/promotion.hpp"
#include "mixprec/nn/detail/arrays.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "mixprec/policies/runtime_policy.hpp"

namespace mixprec::nn {

/// Overrides the compute role of one `from_scope` layer, resolved against the scope's policy when the
/// layer is constructed (Haliax's `compute_dtype` argument, a `DTypeish`): `compute_dtype("param")`
/// computes in the scope's param dtype, `compute_dtype("output")` in its output dtype,
/// `compute_dtype("f32")` (or `dtype::float32`) in float32 whatever the scope says. Errors: throws
/// `policy_error` for a name that is neither a role nor a dtype a policy may hold (`dtype_ish`'s errors).
struct compute_dtype {
  /// A role or a concrete dtype.
  explicit compute_dtype(dtype_ish d) noexcept : value(d) {}
  /// "param", "compute", "output" or a dtype name, as `dtype_ish` parses it.
  explicit compute_dtype(std::string_view text) : value(text) {}
  /// A concrete dtype (float32, float64, bfloat16 or float16).
  explicit compute_dtype(dtype d) : value(d) {}

  dtype_ish value;  ///< what the compute role becomes
};

/// Tag for building a `from_scope` layer with a factory of the layer types:
/// `nn::dense<S> l(nn::from_factory, [&]<class L>(std::type_identity<L>) { return L::from_weights(w, layout); });`
/// `L` is the compile-time layer (`nn::dense<P>`) of the policy the scope selects.
struct from_factory_t {
  explicit from_factory_t() = default;
};
/// The `from_factory_t` value.
inline constexpr from_factory_t from_factory{};

namespace detail {

/// Name of a layer template in error messages.
template <template <class...> class Layer>
inline constexpr std::string_view layer_name = "mixprec::nn layer";

/// The result a `from_scope` layer returns when its listed policies return `R...` for one input:
/// `R` when all agree; the same kind of array with the JAX promotion of their element types when they
/// differ only in element type (e.g. bfloat16 and float32 outputs are returned as float32, every value
/// exactly the one the policy's output type holds); what `common_result_hook` says for a layer's own
/// result structs; otherwise none (`void`).
template <class... R>
struct common_layer_result;

/// Customisation point of `common_layer_result` for a layer's result struct (rms_norm's
/// `act_and_residual`): `applies` and the common `type`.
template <class... R>
struct common_result_hook {
  static constexpr bool applies = false;
};

/// Customisation point of `to_common_result` for a layer's result struct `Out`:
/// `static Out convert(In&&)`.
template <class Out>
struct result_converter;

template <class R0, class... R>
struct common_layer_result<R0, R...> {
  template <class A, class B>
  static constexpr bool same_kind = std::is_same_v<typename array_traits<A>::template rebind<float>,
                                                   typename array_traits<B>::template rebind<float>>;
  static auto pick() {
    if constexpr ((std::is_same_v<R0, R> && ...)) {
      return std::type_identity<R0>{};
    } else if constexpr (common_result_hook<R0, R...>::applies) {
      return std::type_identity<typename common_result_hook<R0, R...>::type>{};
    } else if constexpr (layer_array<R0> && (layer_array<R> && ...)) {
      if constexpr ((same_kind<R0, R> && ...)) {
        using E = promote_t<typename array_traits<R0>::value_type, typename array_traits<R>::value_type...>;
        return std::type_identity<typename array_traits<R0>::template rebind<E>>{};
      } else {
        return std::type_identity<void>{};
      }
    } else {
      return std::type_identity<void>{};
    }
  }
  using type = typename decltype(pick())::type;
};

/// `r` as the result type `Out` that `common_layer_result` chose: unchanged, converted exactly
/// element by element (`Out`'s element type is the JAX promotion of `r`'s, so every value is kept), or
/// by the result struct's `common_result_hook`.
template <class Out, class R>
[[nodiscard]] Out to_common_result(R&& r) {
  using In = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<In, Out>) {
    return std::forward<R>(r);
  } else if constexpr (layer_array<In>) {
    using E = typename array_traits<Out>::value_type;
    Out out = Out::from_shape(r.shape());
    std::transform(r.begin(), r.end(), out.begin(), [](const auto& v) { return static_cast<E>(v); });
    return out;
  } else {
    return result_converter<Out>::convert(std::forward<R>(r));
  }
}

/// A layer whose policy is one of `Ps...`, chosen from the current `policy_scope` (and an optional
/// compute override) when it is constructed, held as a `std::variant` of the compile-time layers
/// `Layer<Ps>...`. Each layer's `Layer<from_scope<Ps...>>` specialisation derives from this.
template <template <class...> class Layer, class... Ps>
class scoped_layer {
  // Instantiates from_scope<Ps...> first, so that its static_asserts (a policy listed, none with promote)
  // are the first errors a bad list gets.
  static_assert(std::is_empty_v<from_scope<Ps...>>);

 public:
  /// The compile-time layers this may hold, one per listed policy.
  using variant_type = std::variant<Layer<Ps>...>;

  /// Constructs `Layer<P>(args...)` for the listed policy `P` equal to `current_policy()`.
  /// Errors: `policy_error` naming the scope's policy and the listed ones when it is none of them;
  /// whatever `Layer<P>`'s constructor throws.
  template <class... Args>
  requires(std::is_constructible_v<Layer<Ps>, Args&&...>&&...) explicit scoped_layer(Args&&... args)
      : scoped_layer(std::nullopt, from_factory,
                     [&]<class L>(std::type_identity<L>) { return L(std::forward<Args>(args)...); }) {}

  /// As above, with the compute role replaced by `compute.value` resolved against the scope's policy.
  template <class... Args>
  requires(std::is_constructible_v<Layer<Ps>, Args&&...>&&...) explicit scoped_layer(compute_dtype compute,
                                                                                     Args&&... args)
      : scoped_layer(std::optional<dtype_ish>(compute.value), from_factory,
                     [&]<class L>(std::type_identity<L>) { return L(std::forward<Args>(args)...); }) {}

  /// Constructs the layer `make(std::type_identity<Layer<P>>{})` returns, `P` chosen as above: for the
  /// layers' factory functions (`from_weights`, `init`). Errors: as above, and whatever `make` throws.
  template <class F>
  scoped_layer(from_factory_t, F&& make) : scoped_layer(std::nullopt, from_factory, std::forward<F>(make)) {}

  /// The factory form with a compute override.
  template <class F>
  scoped_layer(compute_dtype compute, from_factory_t, F&& make)
      : scoped_layer(std::optional<dtype_ish>(compute.value), from_factory, std::forward<F>(make)) {}

  /// The policy this layer runs: the scope's at construction, with the compute override applied.
  [[nodiscard]] runtime_policy policy() const noexcept { return policy_; }

  /// Calls `f(layer)` with the compile-time layer (`Layer<P>&`) and returns what it returns, which must
  /// be one type for every listed policy (as `std::visit`): for what the forwarding members below do
  /// not cover (`forward`/`backward` with their per-policy saved contexts, KV caches, probes).
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), layer_);
  }
  /// Calls `f(layer)` with the compile-time layer (`const Layer<P>&`).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), layer_);
  }

  /// The compile-time layer, if this runs policy `P` (else nullptr).
  template <class P>
  [[nodiscard]] Layer<P>* get_if() noexcept {
    return std::get_if<Layer<P>>(&layer_);
  }
  /// The compile-time layer, if this runs policy `P` (else nullptr).
  template <class P>
  [[nodiscard]] const Layer<P>* get_if() const noexcept {
    return std::get_if<Layer<P>>(&layer_);
  }

  /// The layer's `operator()(args...)`: the same bits as the compile-time layer of `policy()`. Returns
  /// the compile-time layer's container, or, when the listed policies return arrays that differ in
  /// element type only (say o=bf16 and o=f32), that array with the JAX promotion of those element types
  /// (an exact widening: every value is the one the policy's output type holds). Errors: the layer's.
  template <class... Args>
  requires(std::is_invocable_v<const Layer<Ps>&, const Args&...>&&...) [[nodiscard]] auto operator()(
      const Args&... args) const {
    using R = typename common_layer_result<std::invoke_result_t<const Layer<Ps>&, const Args&...>...>::type;
    static_assert(!std::is_void_v<R>,
                  "the listed policies of this from_scope layer return different kinds of result for these "
                  "arguments, which no single C++ type holds: call layer.visit([&](const auto& l) { ... }) "
                  "and handle each policy's result there.");
    return std::visit([&](const auto& layer) { return to_common_result<R>(layer(args...)); }, layer_);
  }

  /// The layer's `for_each_parameter(f)`: `f(name, tensor&)` for each parameter, `tensor` in the param
  /// type of `policy()` (so `f` must accept each listed policy's tensors: a generic lambda).
  template <class F>
  void for_each_parameter(F&& f) {
    std::visit([&](auto& layer) { layer.for_each_parameter(f); }, layer_);
  }
  /// Const form of `for_each_parameter`.
  template <class F>
  void for_each_parameter(F&& f) const {
    std::visit([&](const auto& layer) { layer.for_each_parameter(f); }, layer_);
  }

 private:
  using policy_list = std::array<runtime_policy, sizeof...(Ps)>;
  static constexpr policy_list listed{to_runtime_policy<Ps>()...};

  template <class F>
  scoped_layer(std::optional<dtype_ish> compute, from_factory_t, F&& make)
      : policy_(resolved(compute)), layer_(build(index_of(policy_, compute), make)) {}

  [[nodiscard]] static runtime_policy resolved(const std::optional<dtype_ish>& compute) {
    runtime_policy p = current_policy();
    if (compute) p.compute = compute->resolve(p);
    return p;
  }

  [[nodiscard]] static std::size_t index_of(const runtime_policy& p, const std::optional<dtype_ish>& compute) {
    for (std::size_t i = 0; i < listed.size(); ++i) {
      if (listed[i] == p) return i;
    }
    std::string names;
    for (const runtime_policy& q : listed) {
      if (!names.empty()) names.append("; ");
      names.append(to_string(q));
    }
    throw policy_error(internal::concat(
        name(), "<from_scope<...>>: the policy ", to_string(p), " (the scope's, ", to_string(current_policy()),
        compute ? ", with the compute override" : "", ") is not one of the ", listed.size(), " listed policies (",
        names, "): add its compile-time policy to from_scope<...>'s list, or open a policy_scope with a listed one"));
  }

  /// The layer's name for messages: `Layer<P>::type_name` when it has one (composites made of an alias
  /// template), else `layer_name<Layer>`.
  [[nodiscard]] static constexpr std::string_view name() {
    using first = std::variant_alternative_t<0, variant_type>;
    if constexpr (requires { first::type_name; }) {
      return first::type_name;
    } else {
      return layer_name<Layer>;
    }
  }

  template <class F, std::size_t... I>
  [[nodiscard]] static variant_type build_at(std::size_t index, F& make, std::index_sequence<I...>) {
    std::optional<variant_type> out;
    ((index == I ? (out.emplace(std::in_place_index<I>,
                                make(std::type_identity<std::variant_alternative_t<I, variant_type>>{})),
                    0)
                 : 0),
     ...);
    return std::move(*out);
  }
  template <class F>
  [[nodiscard]] static variant_type build(std::size_t index, F& make) {
    return build_at(index, make, std::index_sequence_for<Ps...>{});
  }

  runtime_policy policy_;
  variant_type layer_;
};

}  // namespace detail

}  // namespace mixprec::nn
