/// \file
/// \brief Global-norm gradient clipping as PyTorch's `torch.nn.utils.clip_grad_norm_`
/// (`torch/nn/utils/clip_grad.py`, norm_type 2), over any number of gradients of any floating types.
///
///     norm  = sqrt(sum of g^2 over every element of every gradient)     accumulated in double
///     scale = min(1, max_norm / (norm + 1e-6))
///     g    *= scale   (only when scale < 1: a product by 1 changes nothing)
///
/// and the function returns `norm` (the norm before clipping). llm.c instead scales by max_norm/norm
/// when norm > max_norm; nanoGPT uses PyTorch's rule with max_norm 1.0. With loss scaling, clip the
/// *unscaled* gradients (clipping first makes the threshold S times too small: docs/training.md,
/// "Schedule and clipping").
///
/// **Gradients**: each argument is a `std::span<T>` of a floating type (float, double, bfloat16,
/// float16, float8...), a `std::vector` of such spans (a model's gradient tensors collected by a walk
/// over its parameter tree), or any mixprec tree (`std::vector<float>`, `xt::xtensor<bfloat16, 2>`, a struct
/// with `tree_traits`, tuples and maps of those); only floating leaves count, integers are skipped.
/// Each element is scaled in float (double for double and long double leaves) and rounded once to its
/// own type.
///
/// **Non-finite norm**: like PyTorch's default (`error_if_nonfinite=False`), an Inf or NaN norm goes into
/// the arithmetic: a NaN norm makes every gradient NaN, an Inf norm makes the scale 0 (finite elements
/// become 0, infinite ones NaN). With `error_if_nonfinite = true`, std::runtime_error is thrown instead
/// and the gradients are left untouched (PyTorch raises RuntimeError). In a loss-scaled loop, the
/// `all_finite` check skips such a step before clipping is reached.
#pragma once

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/arrays/tree.hpp"

namespace mixprec::detail {
template <class T>
inline constexpr bool clip_is_span = false;
template <class T, std::size_t E>
inline constexpr bool clip_is_span<std::span<T, E>> = true;
template <class T>
inline constexpr bool clip_is_span_list = false;
template <class T, std::size_t E, class A>
inline constexpr bool clip_is_span_list<std::vector<std::span<T, E>, A>> = true;

/// Calls f(element) on every floating element of `grads` (a span or a tree).
template <class F, class Grads>
void clip_for_each(F&& f, Grads&& grads) {
  using G = std::remove_cvref_t<Grads>;
  if constexpr (clip_is_span<G>) {
    static_assert(floating_leaf<typename G::element_type>,
                  "clip_grad_norm: a span of gradients must be of a floating type");
    for (auto& x : grads) f(x);
  } else if constexpr (clip_is_span_list<G>) {
    // A run-time list of gradient tensors (a model's parameters walked by name): one span each.
    for (auto& span : grads) clip_for_each(f, span);
  } else {
    tree_for_each(
        [&f](auto& leaf) {
          if constexpr (floating_leaf<std::remove_cvref_t<decltype(leaf)>>) f(leaf);
        },
        grads);
  }
}

/// The math type of scaling a leaf of type L.
template <class L>
using clip_math_t = std::conditional_t<std::is_floating_point_v<L> && (sizeof(L) > sizeof(float)), L, float>;

/// The sum of the squares of a stream of doubles in eight partial sums: element i of the stream goes
/// to partial i mod 8 (eight at a time), and the partials are added pairwise at the end. Eight
/// independent chains of additions, where a single running sum waits on each addition's latency
/// (docs/training.md, "Schedule and clipping", has the timing); the order is fixed by the stream, so
/// the result is deterministic. Each partial adds about n/8 terms: the rounding error bound is
/// (n/8 + 3)·u·Σx² (u = 2⁻⁵³), below the serial sum's (n − 1)·u·Σx².
class sum_of_squares {
 public:
  void add(double x) noexcept {
    block_[n_] = x * x;
    if (++n_ == block_.size()) {
      for (std::size_t k = 0; k < block_.size(); ++k) partial_[k] += block_[k];
      n_ = 0;
    }
  }
  [[nodiscard]] double total() const noexcept {
    std::array<double, 8> p = partial_;
    for (std::size_t k = 0; k < n_; ++k) p[k] += block_[k];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  }

 private:
  std::array<double, 8> partial_{};
  std::array<double, 8> block_{};
  std::size_t n_ = 0;
};
}  // namespace mixprec::detail

namespace mixprec::train {

/// Options of `clip_grad_norm`.
struct clip_options {
  double max_norm = 1.0;            ///< the largest allowed global norm
  bool error_if_nonfinite = false;  ///< throw std::runtime_error on an Inf/NaN norm (gradients untouched)
};

/// The global 2-norm of all floating elements of `grads...`, accumulated in double (in eight partial
/// sums, in the walk's order: `detail::sum_of_squares`).
template <class... Grads>
[[nodiscard]] double global_grad_norm(const Grads&... grads) {
  detail::sum_of_squares sum;
  const auto add = [&sum](const auto& x) { sum.add(static_cast<double>(x)); };
  (detail::clip_for_each(add, grads), ...);
  return std::sqrt(sum.total());
}

/// Clips `grads...` in place to a global norm of at most `options.max_norm` (PyTorch's rule, see the
/// file comment) and returns the norm before clipping.
/// \throws std::runtime_error when `options.error_if_nonfinite` is set and the norm is Inf or NaN (the
///         gradients are left untouched).
template <class... Grads>
double clip_grad_norm(const clip_options& options, Grads&&... grads) {
  const double norm = global_grad_norm(grads...);
  if (options.error_if_nonfinite && !std::isfinite(norm))
    throw std::runtime_error("clip_grad_norm: the total norm of the gradients is " + std::to_string(norm) +
                             " (non-finite), so it cannot be clipped");
  const double scale = options.max_norm / (norm + 1e-6);
  if (!(scale >= 1.0)) {  // scale < 1, or NaN (PyTorch multiplies by the NaN as well)
    const auto mul = [scale](auto& x) {
      using L = std::remove_cvref_t<decltype(x)>;
      using A = detail::clip_math_t<L>;
      x = static_cast<L>(static_cast<A>(x) * static_cast<A>(scale));
    };
    (detail::clip_for_each(mul, grads), ...);
  }
  return norm;
}

/// `clip_grad_norm({.max_norm = max_norm}, grads...)`.
template <class... Grads>
double clip_grad_norm(double max_norm, Grads&&... grads) {
  return clip_grad_norm(clip_options{max_norm, false}, std::forward<Grads>(grads)...);
}

}  // namespace mixprec::train
