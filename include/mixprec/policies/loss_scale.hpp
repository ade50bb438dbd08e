/// \file
/// \brief Loss scaling as in DeepMind's jmp (`jmp/_src/loss_scale.py`): `no_op_loss_scale`,
/// `static_loss_scale` and `dynamic_loss_scale`, each with `scale(tree)`, `unscale(tree)`,
/// `loss_scale()` and `adjust(grads_finite)`, plus `unscale_in_place(tree)` (PyTorch's
/// `GradScaler.unscale_`). `docs/loss_scaling.md` explains when to use which.
///
/// Training step (the jmp README's loop):
///
///     mixprec::dynamic_loss_scale ls({.initial_scale = 32768.0f});
///     for (...) {
///       float loss = ls.scale(compute_loss(params));       // loss * S
///       auto grads = ls.unscale(backward(params));         // grads / S, same tree, same leaf types
///       const bool finite = mixprec::all_finite(grads);
///       ls.adjust(finite);                                 // grow every `period` finite steps, shrink otherwise
///       if (finite) apply_update(params, grads);           // skip a non-finite step
///     }
///
/// **Arithmetic on leaves** (`scale` and `unscale` touch floating-point and complex leaves only;
/// integers, bools and intn pass through unchanged, and every leaf keeps its type):
///  - float, double, long double (and complex of them) leaves: one operation in the leaf's own type,
///    with the float scale converted exactly to it: `x * S`, and for `unscale` `x * (1/S)` when S is a
///    power of two (1/S is then exact, so this equals `x / S`), `x / S` otherwise. Each result is
///    rounded once. jmp always multiplies by `1/S`, which rounds twice when S is not a power of two.
///  - small-float leaves (bfloat16, float16, float8...): computed in double and rounded once to the
///    leaf type. A product of a <= 11-bit and a 24-bit significand is exact in double, so `scale` (and
///    `unscale` by a power of two) is correctly rounded; a quotient is rounded to double first, and for
///    formats of <= 11 significant bits that cannot move it onto a rounding midpoint of the leaf type,
///    so `unscale` by any S is correctly rounded too. Overflow follows the leaf type's conversion rule
///    (float16 and bfloat16 give +-Inf, which `all_finite` then reports).
///    jmp, with a float32 loss scale, promotes half-precision leaves to float32 (JAX promotion); its
///    README keeps them half by giving the loss scale the half dtype. mixprec keeps the leaf type.
#pragma once

#include <cmath>
#include <concepts>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mixprec/arrays/tree.hpp"
#include "mixprec/policies/all_finite.hpp"

namespace mixprec {

namespace detail {
/// True when `s` is a positive power of two whose reciprocal is a finite float (so `x * (1/s)` is
/// exactly `x / s`).
[[nodiscard]] inline bool has_exact_reciprocal(float s) noexcept {
  if (!(s > 0.0f) || !std::isfinite(s)) return false;
  int exponent = 0;
  if (std::frexp(s, &exponent) != 0.5f) return false;  // s = 0.5 * 2^exponent exactly iff a power of two
  const float inverse = 1.0f / s;
  return std::isfinite(inverse) && inverse * s == 1.0f;
}

/// Multiplies every floating and complex leaf by `s`; see the file comment for the arithmetic.
struct scale_leaf_fn {
  float s;
  template <class L>
  constexpr L operator()(const L& x) const {
    if constexpr (std::is_floating_point_v<L>) {
      return x * static_cast<L>(s);
    } else if constexpr (complex_leaf<L>) {
      return x * static_cast<typename L::value_type>(s);
    } else if constexpr (small_float<L>) {
      return L(static_cast<double>(static_cast<float>(x)) * static_cast<double>(s));
    } else {
      return x;
    }
  }
};

/// Divides every floating and complex leaf by `s` (multiplying by the exact `inverse` when there is one).
struct unscale_leaf_fn {
  float s;
  float inverse;  ///< 1 / s, meaningful only when `exact`
  bool exact;     ///< whether `inverse` is exactly 1 / s
  template <class L>
  constexpr L operator()(const L& x) const {
    if constexpr (std::is_floating_point_v<L>) {
      return exact ? x * static_cast<L>(inverse) : x / static_cast<L>(s);
    } else if constexpr (complex_leaf<L>) {
      using R = typename L::value_type;
      return exact ? x * static_cast<R>(inverse) : x / static_cast<R>(s);
    } else if constexpr (small_float<L>) {
      const double v = static_cast<double>(static_cast<float>(x));
      return L(exact ? v * static_cast<double>(inverse) : v / static_cast<double>(s));
    } else {
      return x;
    }
  }
};

template <class Tree>
[[nodiscard]] auto scale_tree(const Tree& tree, float s) {
  return tree_map(scale_leaf_fn{s}, tree);
}

template <class Tree>
[[nodiscard]] auto unscale_tree(const Tree& tree, float s) {
  const bool exact = has_exact_reciprocal(s);
  return tree_map(unscale_leaf_fn{s, exact ? 1.0f / s : 0.0f, exact}, tree);
}

/// Divides every floating and complex leaf of `tree` by `s` where it is, with the arithmetic of
/// `unscale_tree` (so the same bits). Leaves of other types are left alone.
template <class Tree>
void unscale_tree_in_place(Tree& tree, float s) {
  static_assert(!std::is_const_v<Tree>,
                "unscale_in_place changes the tree where it is: pass a non-const tree, or use unscale, which returns "
                "an unscaled copy.");
  const bool exact = has_exact_reciprocal(s);
  const unscale_leaf_fn fn{s, exact ? 1.0f / s : 0.0f, exact};
  tree_for_each(
      [&fn](auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (std::is_floating_point_v<L> || complex_leaf<L> || small_float<L>) {
          static_assert(!std::is_const_v<std::remove_reference_t<decltype(leaf)>>,
                        "unscale_in_place: the tree has a const floating-point leaf, which cannot be changed in place; "
                        "use unscale, which returns an unscaled copy.");
          if constexpr (!std::is_const_v<std::remove_reference_t<decltype(leaf)>>) leaf = fn(std::as_const(leaf));
        }
      },
      tree);
}

/// "name = value" for error messages, with enough digits to tell floats apart.
template <class T>
[[nodiscard]] std::string describe_field(const char* name, T value) {
  std::ostringstream out;
  out.precision(std::numeric_limits<float>::max_digits10);
  out << name << " = " << value;
  return out.str();
}

[[noreturn]] inline void throw_loss_scale_error(const std::string& field, const std::string& requirement) {
  throw std::invalid_argument("mixprec::dynamic_loss_scale: " + field + " is invalid: " + requirement);
}
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// no_op_loss_scale
// ---------------------------------------------------------------------------------------------

/// The loss scale that does nothing (jmp's `NoOpLossScale`): a drop-in for code written against the
/// loss scale interface when no scaling is wanted (float32 or bfloat16 training).
struct no_op_loss_scale {
  /// Always 1.
  [[nodiscard]] static constexpr float loss_scale() noexcept { return 1.0f; }
  /// Returns `tree` unchanged (a copy, or the moved-in value).
  template <class Tree>
  [[nodiscard]] static constexpr std::remove_cvref_t<Tree> scale(Tree&& tree) {
    return std::forward<Tree>(tree);
  }
  /// Returns `tree` unchanged (a copy, or the moved-in value).
  template <class Tree>
  [[nodiscard]] static constexpr std::remove_cvref_t<Tree> unscale(Tree&& tree) {
    return std::forward<Tree>(tree);
  }
  /// Leaves `tree` as it is (the in-place form of `unscale`).
  template <class Tree>
  static constexpr void unscale_in_place(Tree& /*tree*/) noexcept {}
  /// Does nothing.
  static constexpr void adjust(bool /*grads_finite*/) noexcept {}

  friend constexpr bool operator==(no_op_loss_scale, no_op_loss_scale) noexcept = default;
};

// ---------------------------------------------------------------------------------------------
// static_loss_scale
// ---------------------------------------------------------------------------------------------

/// A fixed loss scale S (jmp's `StaticLossScale`): `scale` multiplies by S, `unscale` divides by S,
/// `adjust` does nothing. Pick S so that S times the largest gradient stays below the compute type's
/// maximum (NVIDIA's mixed precision guide, quoted by jmp's README: below 65504 for float16).
class static_loss_scale {
 public:
  /// Errors: std::invalid_argument when `scale` is not a positive finite number (0 would erase every
  /// gradient and `unscale` would divide by zero).
  explicit static_loss_scale(float scale) : scale_(scale) {
    if (!(scale > 0.0f) || !std::isfinite(scale)) {
      throw std::invalid_argument("mixprec::static_loss_scale: " + detail::describe_field("scale", scale) +
                                  " is invalid: it must be a positive finite number, e.g. 32768 (2^15)");
    }
  }
  /// The scale S.
  [[nodiscard]] float loss_scale() const noexcept { return scale_; }
  /// `tree` with every floating and complex leaf multiplied by S (see the file comment).
  template <class Tree>
  [[nodiscard]] auto scale(const Tree& tree) const {
    return detail::scale_tree(tree, scale_);
  }
  /// `tree` with every floating and complex leaf divided by S (see the file comment). The same type
  /// as `tree`, except that an `Eigen::Map` or `xt::adapt` leaf comes back as an owning container.
  template <class Tree>
  [[nodiscard]] auto unscale(const Tree& tree) const {
    return detail::unscale_tree(tree, scale_);
  }
  /// Divides every floating and complex leaf of `tree` by S where it is, without a copy; the result
  /// has the bits `unscale(tree)` would return. PyTorch: `GradScaler.unscale_`. A const tree does not
  /// compile (static_assert); a `std::vector<std::span<T>>` is unscaled through its spans (nn layers' `gradients` are
  /// trees too).
  template <class Tree>
  void unscale_in_place(Tree& tree) const {
    detail::unscale_tree_in_place(tree, scale_);
  }
  /// Does nothing: a static scale never changes.
  void adjust(bool /*grads_finite*/) noexcept {}

  friend bool operator==(const static_loss_scale&, const static_loss_scale&) noexcept = default;

 private:
  float scale_;
};

// ---------------------------------------------------------------------------------------------
// dynamic_loss_scale
// ---------------------------------------------------------------------------------------------

/// The knobs of `dynamic_loss_scale`, with jmp's defaults (`DynamicLossScale` dataclass fields).
/// Use designated initializers: `dynamic_loss_scale_options{.initial_scale = 65536.0f, .period = 1000}`.
struct dynamic_loss_scale_options {
  /// Starting scale. jmp requires it; 2^15 is the value of jmp's docstring and README examples.
  float initial_scale = 32768.0f;
  /// Consecutive finite steps before the scale grows (jmp: 2000).
  int period = 2000;
  /// Growth and shrink factor, > 1 (jmp: 2).
  float factor = 2.0f;
  /// Floor of the scale when shrinking (jmp: 1). Must be > 0 (jmp also allows 0).
  float min_loss_scale = 1.0f;
  /// Ceiling of the scale when growing (mixprec's addition; jmp instead refuses a product that is
  /// not finite). The default, the largest finite float, reproduces jmp exactly.
  float max_loss_scale = std::numeric_limits<float>::max();

  friend bool operator==(const dynamic_loss_scale_options&, const dynamic_loss_scale_options&) = default;
};

/// Everything `dynamic_loss_scale` holds, for checkpoints: save `ls.state()`, restore with
/// `dynamic_loss_scale(saved)`. Unlike jmp's pytree round trip (whose `tree_flatten` keeps only the
/// scale, counter, period and factor), every field survives, min and max included.
struct dynamic_loss_scale_state {
  float loss_scale = 32768.0f;  ///< current scale
  int counter = 0;              ///< consecutive finite steps since the last change, in [0, period)
  dynamic_loss_scale_options options{};

  friend bool operator==(const dynamic_loss_scale_state&, const dynamic_loss_scale_state&) = default;
};

/// A loss scale that finds the largest scale keeping gradients finite (jmp's `DynamicLossScale`).
///
/// `adjust(grads_finite)` applies jmp's rule, with a ceiling added:
///  - finite step: the counter goes up by one; when it reaches `period` it resets to 0 and the scale
///    becomes `scale * factor` (computed in float), unless that product is not finite or exceeds
///    `max_loss_scale`, in which case the scale stays (jmp keeps the scale when the product is not
///    finite; with the default `max_loss_scale` this is exactly jmp);
///  - non-finite step: the counter resets to 0 and the scale becomes `max(min_loss_scale, scale / factor)`.
/// So the scale always stays within [min_loss_scale, max_loss_scale].
///
/// Value semantics: copies are independent; `state()` and the constructor from a state round-trip
/// every field.
///
/// **Example** (jmp's published behaviour):
///
///     mixprec::dynamic_loss_scale ls({.initial_scale = 2.0f, .period = 2});
///     for (int i = 0; i < 8; ++i) ls.adjust(true);     // ls.loss_scale() == 32 (four doublings)
///     mixprec::dynamic_loss_scale down({.initial_scale = 400.0f});
///     for (int i = 0; i < 4; ++i) down.adjust(false);  // down.loss_scale() == 25
class dynamic_loss_scale {
 public:
  /// Starts at `options.initial_scale` with counter 0.
  ///
  /// Errors: std::invalid_argument naming the field and its value when `initial_scale`,
  /// `min_loss_scale` or `max_loss_scale` is not positive and finite, `factor` is not finite or not
  /// > 1, `period` < 1, `min_loss_scale > max_loss_scale`, or `initial_scale` is outside
  /// [min_loss_scale, max_loss_scale].
  explicit dynamic_loss_scale(const dynamic_loss_scale_options& options = {})
      : dynamic_loss_scale(dynamic_loss_scale_state{options.initial_scale, 0, options}) {}

  /// Starts at `initial_scale` with jmp's other defaults (jmp: `DynamicLossScale(loss_scale)`).
  /// Errors: as the options constructor.
  explicit dynamic_loss_scale(float initial_scale)
      : dynamic_loss_scale(dynamic_loss_scale_options{.initial_scale = initial_scale}) {}

  /// Restores a saved state (see `state()`).
  ///
  /// Errors: std::invalid_argument as the options constructor, plus when `state.loss_scale` is not
  /// positive and finite or outside [min_loss_scale, max_loss_scale], or `state.counter` is outside
  /// [0, period).
  explicit dynamic_loss_scale(const dynamic_loss_scale_state& state) : state_(state) {
    validate_options(state.options);
    if (!(state.loss_scale > 0.0f) || !std::isfinite(state.loss_scale)) {
      detail::throw_loss_scale_error(detail::describe_field("loss_scale", state.loss_scale),
                                     "it must be a positive finite number");
    }
    if (state.loss_scale < state.options.min_loss_scale || state.loss_scale > state.options.max_loss_scale) {
      detail::throw_loss_scale_error(
          detail::describe_field("loss_scale", state.loss_scale),
          ("it must lie in [min_loss_scale, max_loss_scale] = [" + number(state.options.min_loss_scale) + ", " +
           number(state.options.max_loss_scale) + "]"));
    }
    if (state.counter < 0 || state.counter >= state.options.period) {
      detail::throw_loss_scale_error(
          detail::describe_field("counter", state.counter),
          ("it must lie in [0, period) = [0, " + std::to_string(state.options.period) + ")"));
    }
  }

  /// The current scale S.
  [[nodiscard]] float loss_scale() const noexcept { return state_.loss_scale; }
  /// Consecutive finite steps since the scale last changed, in [0, period).
  [[nodiscard]] int counter() const noexcept { return state_.counter; }
  /// The options this loss scale was built with.
  [[nodiscard]] const dynamic_loss_scale_options& options() const noexcept { return state_.options; }
  /// Everything needed to resume: pass it to `dynamic_loss_scale(state)`.
  [[nodiscard]] const dynamic_loss_scale_state& state() const noexcept { return state_; }

  /// `tree` with every floating and complex leaf multiplied by the current S (see the file comment).
  template <class Tree>
  [[nodiscard]] auto scale(const Tree& tree) const {
    return detail::scale_tree(tree, state_.loss_scale);
  }
  /// `tree` with every floating and complex leaf divided by the current S (see the file comment). The
  /// same type as `tree`, except that an `Eigen::Map` or `xt::adapt` leaf comes back as an owning
  /// container.
  template <class Tree>
  [[nodiscard]] auto unscale(const Tree& tree) const {
    return detail::unscale_tree(tree, state_.loss_scale);
  }
  /// Divides every floating and complex leaf of `tree` by the current S where it is, without a copy;
  /// the result has the bits `unscale(tree)` would return. PyTorch: `GradScaler.unscale_`. A const
  /// tree does not compile (static_assert); a `std::vector<std::span<T>>` is unscaled through its spans (nn layers'
  /// `gradients` are trees too).
  template <class Tree>
  void unscale_in_place(Tree& tree) const {
    detail::unscale_tree_in_place(tree, state_.loss_scale);
  }

  /// Updates the scale and counter after a step whose gradients were (or were not) all finite; the
  /// rule is in the class comment (jmp's `DynamicLossScale.adjust`, plus `max_loss_scale`).
  void adjust(bool grads_finite) noexcept {
    const dynamic_loss_scale_options& o = state_.options;
    if (grads_finite) {
      if (state_.counter == o.period - 1) {
        const float grown = state_.loss_scale * o.factor;
        if (std::isfinite(grown) && grown <= o.max_loss_scale) state_.loss_scale = grown;
        state_.counter = 0;
      } else {
        ++state_.counter;
      }
    } else {
      const float shrunk = state_.loss_scale / o.factor;
      state_.loss_scale = shrunk < o.min_loss_scale ? o.min_loss_scale : shrunk;
      state_.counter = 0;
    }
  }

  friend bool operator==(const dynamic_loss_scale&, const dynamic_loss_scale&) = default;

 private:
  static std::string number(float x) {
    std::ostringstream out;
    out.precision(std::numeric_limits<float>::max_digits10);
    out << x;
    return out.str();
  }

  static void require_positive_finite(const char* name, float value) {
    if (!(value > 0.0f) || !std::isfinite(value)) {
      detail::throw_loss_scale_error(detail::describe_field(name, value), "it must be a positive finite number");
    }
  }

  static void validate_options(const dynamic_loss_scale_options& o) {
    require_positive_finite("initial_scale", o.initial_scale);
    require_positive_finite("min_loss_scale", o.min_loss_scale);
    require_positive_finite("max_loss_scale", o.max_loss_scale);
    if (o.period < 1) {
      detail::throw_loss_scale_error(detail::describe_field("period", o.period),
                                     "it must be at least 1 (jmp's default is 2000)");
    }
    if (!(o.factor > 1.0f) || !std::isfinite(o.factor)) {
      detail::throw_loss_scale_error(detail::describe_field("factor", o.factor),
                                     "it must be a finite number greater than 1 (jmp's default is 2)");
    }
    if (o.min_loss_scale > o.max_loss_scale) {
      detail::throw_loss_scale_error(detail::describe_field("min_loss_scale", o.min_loss_scale),
                                     ("it must not exceed max_loss_scale = " + number(o.max_loss_scale)));
    }
    if (o.initial_scale < o.min_loss_scale || o.initial_scale > o.max_loss_scale) {
      detail::throw_loss_scale_error(detail::describe_field("initial_scale", o.initial_scale),
                                     ("it must lie in [min_loss_scale, max_loss_scale] = [" + number(o.min_loss_scale) +
                                      ", " + number(o.max_loss_scale) + "]"));
    }
  }

  dynamic_loss_scale_state state_;
};

/// What a training loop needs from a loss scale: `no_op_loss_scale`, `static_loss_scale` and
/// `dynamic_loss_scale` all model it (jmp's `LossScale` union), so a step can be written once:
/// `template <loss_scale_like L> void train_step(L& loss_scale, ...)`.
template <class L>
concept loss_scale_like = requires(L& l, const L& cl, const float& x) {
  { cl.loss_scale() } -> std::same_as<float>;
  { cl.scale(x) } -> std::same_as<float>;
  { cl.unscale(x) } -> std::same_as<float>;
  l.adjust(true);
};

}  // namespace mixprec
