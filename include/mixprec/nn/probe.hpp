/// \file
/// \brief The probe interface (in namespace `mixprec::diagnostics`): what a model calls at each named site with the
/// tensor it produced there (`diagnostics::probe`), and `null_probe`, the probe that does nothing and costs nothing.
/// `recording_probe` (diagnostics/recording_probe.hpp) is the one that records. Core header: no
/// Eigen, no xtensor.
///
/// **Why it sits in nn/.** The layers themselves call probes (`feed_forward`'s hidden activation,
/// `attention`'s context: sites a model cannot reach from outside), and a folder includes only the
/// folders below it (docs/DESIGN.md), so the interface stands beside the layers; the probes that record
/// (`recording_probe`, `compare_runs`, the float16 scale planner) are diagnostics/, above them.
/// `<mixprec/diagnostics/probe.hpp>` includes this header.
///
/// **Why a template parameter, not a virtual interface.** A model takes its probe as a template
/// parameter (`template <class P, diagnostics::probe Probe = diagnostics::null_probe>`), as it already
/// takes its policy:
///
/// 1. With `null_probe` the call is an empty inline function: nothing is left after inlining, and
///    `Probe::enabled == false` lets the model skip, with `if constexpr`, any work done only for the
///    probe (building a site name such as "layers.3.attention" allocates a string). A virtual no-op
///    still costs the name, the call and the lost inlining at every site.
/// 2. Probes take tensors of any element type (float, bfloat16, float8...). A virtual function cannot
///    be a template, so a virtual interface would need one function per element type, or a copy to a
///    fixed type before every call.
/// 3. The tensor is passed as a contiguous range and read during the call only: no copy is made
///    unless the probe keeps values (`recording_probe` in `capture::values` mode).
///
/// A run that must pick a probe at run time instantiates the model twice (null and recording); the
/// probe type is a compile-time choice exactly like the policy.
///
/// **Example** (a model's forward pass):
///
///     template <class P, mixprec::diagnostics::probe Probe = mixprec::diagnostics::null_probe>
///     xt::xtensor<float, 2> forward(const xt::xtensor<float, 2>& x, Probe&& probe = {}) {
///       auto h = embed(x);
///       probe.observe("embedding", h.storage());            // a constant name: nothing to skip
///       for (int l = 0; l < n_layers; ++l) {
///         h = block(l, h);
///         if constexpr (mixprec::diagnostics::probe_enabled_v<Probe>) {   // no string for null_probe
///           probe.observe("layers." + std::to_string(l) + ".out", h.storage());
///         }
///       }
///       return h;
///     }
#pragma once

#include <concepts>
#include <ranges>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixprec/formats/basic_float.hpp"

namespace mixprec::diagnostics {

/// The element types the diagnostics read: float, double and every mixprec small float (bfloat16,
/// float16, float8/6/4). Each converts to double exactly, so statistics and captured values lose
/// nothing. (long double is not one: it may not fit in double; complex tensors have no single
/// magnitude scale to report — probe their real and imaginary parts separately.)
template <class T>
concept floating_element = std::same_as<T, float> || std::same_as<T, double> || small_float<T>;

/// What a probe or `tensor_stats` reads: a contiguous range with a known size — `std::span<const T>`,
/// `std::vector<T>`, `std::array<T, N>`, the `storage()` of a row-major `xt::xtensor` / `xt::xarray`
/// (whose order is the logical row-major order), or `std::span(ptr, n)` for raw memory. The element
/// type must be a `floating_element` (checked with a static_assert that says so).
template <class R>
concept tensor_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

/// The element type of a `tensor_range`, const removed.
template <tensor_range R>
using tensor_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

/// A probe: a type with a member `observe(std::string_view site, const R& values)` accepting every
/// `tensor_range` R of a `floating_element` type (checked here with `std::vector<float>`), and a
/// constant `static constexpr bool enabled` (false only for probes that ignore every call, so that
/// models can skip work done only for them). References to probes model it too, so a model can take
/// `Probe&& probe` (a forwarding reference) with `diagnostics::probe Probe`.
///
/// `site` names where in the model the tensor was produced ("layers.0.attention.out"); a probe may
/// keep the name but must not keep a reference to `values` after the call.
template <class P>
concept probe = requires(std::remove_reference_t<P>& p, std::string_view site, const std::vector<float>& values) {
  typename std::bool_constant<std::remove_cvref_t<P>::enabled>;
  p.observe(site, values);
};

/// The probe that does nothing: `observe` is an empty constexpr function, and `enabled` is false.
/// The default probe of a model, so that a model runs without any diagnostics overhead. It still
/// rejects element types that a recording probe could not read (a static_assert), so that a model
/// that compiles with `null_probe` also compiles with `recording_probe`.
struct null_probe {
  /// False: a model may skip, with `if constexpr`, the work it would do only for the probe.
  static constexpr bool enabled = false;

  /// Does nothing (checks at compile time that `values` holds a `floating_element` type).
  template <tensor_range R>
  constexpr void observe(std::string_view /*site*/, const R& /*values*/) const noexcept {
    static_assert(floating_element<tensor_element_t<R>>,
                  "mixprec diagnostics read float, double and the mixprec small floats (bfloat16, float16, "
                  "float8/6/4): cast other element types (integers, long double, complex parts) to one of them first.");
  }
};

/// `Probe::enabled` for a probe type (references and const removed): false for `null_probe`.
template <probe Probe>
inline constexpr bool probe_enabled_v = std::remove_cvref_t<Probe>::enabled;

}  // namespace mixprec::diagnostics
