/// \file
/// \brief `kernels::packed_b`: a right operand (a layer's weights) rounded to a compute type and laid
/// out in the blocked GEMM's panels once, then multiplied by many left operands without converting
/// or re-reading the original again — what oneDNN's reordered weights and PyTorch's
/// `mkldnn_reorder_linear_weight` are for. `pack_b<C>` makes one; `matmul<C>(a, packed, y, m)` uses it.
///
/// A packed_b is a snapshot: writing the original afterwards does not change it. nn::dense keeps one
/// per compute type and orientation and repacks when its parameters may have changed (see there).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <stdexcept>
#include <vector>

#include "mixprec/arch/profile.hpp"
#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/formats/float8.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/cache_aligned.hpp"
#include "mixprec/kernels/detail/gemm_engine.hpp"
#include "mixprec/kernels/gemm.hpp"
#include "mixprec/kernels/matmul_accumulate.hpp"
#include "mixprec/kernels/scratch.hpp"

namespace mixprec::kernels {

/// b(k, n) rounded once to a compute type C and packed in panels of 16 columns
/// (kernels/detail/gemm_pack.hpp), k · ceil(n / 16) · 16 elements: bfloat16 patterns for bfloat16 and
/// the float8/6/4 compute types (all exact in bfloat16), float16 patterns for float16, floats for
/// float — so the packed copy of 16-bit weights is half the size of float ones, and a single-row
/// product (m = 1: a token's step) streams half the bytes. Weights stored as `float8_e4m3fn` (for compute types that
/// hold its values exactly: float, bfloat16, float16, float8_e4m3fn) keep their own 1-byte patterns unless one of them
/// is NaN: a quarter of the float bytes, decoded exactly in the micro-kernel. Made by `pack_b<C>`.
class packed_b {
 public:
  /// An empty operand (k = n = 0).
  packed_b() = default;

  /// The contracted dimension: rows of b(k, n).
  [[nodiscard]] std::size_t k() const noexcept { return k_; }
  /// Columns of b(k, n): the outputs of the product.
  [[nodiscard]] std::size_t n() const noexcept { return n_; }
  /// The compute type the values were rounded to.
  [[nodiscard]] dtype compute() const noexcept { return compute_; }
  /// Bytes held by the packed panels (zero padded past column n).
  [[nodiscard]] std::size_t bytes() const noexcept {
    return floats_.size() * sizeof(float) + halves_.size() * sizeof(std::uint16_t) + bytes_.size();
  }
  /// Bytes per packed element: 4 (float panels), 2 (bfloat16 / float16 patterns) or 1 (float8_e4m3fn
  /// patterns).
  [[nodiscard]] std::size_t element_bytes() const noexcept {
    switch (format_) {
      case detail::panel_format::f32: return sizeof(float);
      case detail::panel_format::e4m3: return 1;
      case detail::panel_format::bf16:
      case detail::panel_format::f16: break;
    }
    return sizeof(std::uint16_t);
  }
  /// The panels as the engine reads them.
  [[nodiscard]] detail::packed_b_view view() const noexcept {
    const void* data = nullptr;
    switch (format_) {
      case detail::panel_format::f32: data = floats_.data(); break;
      case detail::panel_format::e4m3: data = bytes_.data(); break;
      case detail::panel_format::bf16:
      case detail::panel_format::f16: data = halves_.data(); break;
    }
    return {data, k_, n_, format_};
  }

 private:
  template <class C, class RB>
  friend packed_b pack_b(const RB& b, std::size_t k, std::size_t n, b_layout layout);

  // Cache-line aligned (detail/cache_aligned.hpp): the micro-kernels' 64-byte loads each touch one line.
  detail::cache_aligned_vector<float> floats_;          // f32 panels
  detail::cache_aligned_vector<std::uint16_t> halves_;  // bf16 / f16 panels
  detail::cache_aligned_vector<std::uint8_t> bytes_;    // float8_e4m3fn panels
  std::size_t k_ = 0;
  std::size_t n_ = 0;
  dtype compute_ = dtype::float32;
  detail::panel_format format_ = detail::panel_format::f32;
};

/// Whether products in compute type C run on the packed engine at the instruction-set level in use
/// (float32-accumulating real types from the avx2 level up): then weights kept packed by `pack_b`
/// pay for their packing. At the portable level the products take Eigen's, which are faster there
/// than the engine's portable kernel. Read once per operation.
template <class C>
[[nodiscard]] inline bool packed_products_active() noexcept {
  return detail::use_blocked_gemm<C>();
}

/// Packs b(k, n), stored [k, n] (`b_layout::k_n`, Flax kernels) or [n, k] (`b_layout::n_k`, PyTorch
/// and llama2.c weights), for products computed in `Compute` (float or a small float: float32
/// accumulation). Every value is rounded once to `Compute`, exactly as `matmul<Compute>` rounds it.
/// \throws std::invalid_argument when b does not hold k · n elements.
template <class Compute, class RB>
[[nodiscard]] packed_b pack_b(const RB& b, std::size_t k, std::size_t n, b_layout layout) {
  using B = detail::matmul_element_t<RB>;
  static_assert(std::same_as<accumulator_t<Compute>, float> && !internal::is_complex_v<Compute>,
                "kernels::pack_b<Compute>: packing is for float32-accumulating compute types (float, bfloat16, "
                "float16, the float8/6/4 formats); use kernels::matmul for double and complex products.");
  detail::check_compute_type<Compute, B>();
  if (std::ranges::size(b) != k * n || (k != 0 && (k * n) / k != n)) {  // or k · n wraps around
    throw std::invalid_argument(
        internal::concat("kernels::pack_b: b has ", std::ranges::size(b), " elements but its shape ",
                         layout == b_layout::k_n ? "[k, n] = [" : "[n, k] = [", layout == b_layout::k_n ? k : n, ", ",
                         layout == b_layout::k_n ? n : k, "] needs ", k * n));
  }
  const internal::profile_scope region(
      [&] { return internal::concat("pack_b ", internal::short_type_name<Compute>(), " k", k, " n", n); });
  packed_b out;
  out.k_ = k;
  out.n_ = n;
  out.compute_ = dtype_of_v<Compute>;
  constexpr detail::panel_format format = detail::kept_panel_format<Compute>();
  out.format_ = format;
  // Elements of the kept panels (detail::panel_stride: paired bfloat16 rows pad an odd k).
  const std::size_t count = detail::gemm_panels(n) * detail::panel_stride<format>(k);
  std::vector<float> row(std::max(k, n));
  if constexpr (std::same_as<B, float8_e4m3fn> &&
                (std::same_as<Compute, float> || internal::values_exact_in<float8_e4m3fn, Compute>)) {
    // float8 weights keep their bytes (the micro-kernel decodes them exactly), unless a NaN is among
    // them: the 1-byte panels hold finite values only.
    const auto* data = std::ranges::data(b);
    const bool finite =
        std::none_of(data, data + k * n, [](float8_e4m3fn v) { return std::isnan(static_cast<float>(v)); });
    if (finite) {
      out.format_ = detail::panel_format::e4m3;
      out.bytes_.resize(detail::gemm_panels(n) * detail::panel_stride<detail::panel_format::e4m3>(k));
      detail::pack_b<Compute, detail::panel_format::e4m3>(data, k, n, layout, 0, n, out.bytes_.data(), row.data());
      return out;
    }
  }
  if constexpr (format == detail::panel_format::f32) {
    out.floats_.resize(count);
    detail::pack_b<Compute, format>(std::ranges::data(b), k, n, layout, 0, n, out.floats_.data(), row.data());
  } else {
    out.halves_.resize(count);
    detail::pack_b<Compute, format>(std::ranges::data(b), k, n, layout, 0, n, out.halves_.data(), row.data());
  }
  return out;
}

namespace detail {

template <class Compute, class A, class Y>
void check_packed_product(const packed_b& b, std::size_t a_size, std::size_t y_size, std::size_t m) {
  if (b.compute() != dtype_of_v<Compute>) {
    throw std::invalid_argument(internal::concat("kernels::matmul: b was packed for compute type ", name(b.compute()),
                                                 " but the product computes in ", name(dtype_of_v<Compute>),
                                                 "; pack it with kernels::pack_b<", name(dtype_of_v<Compute>), ">"));
  }
  const bool wraps = m != 0 && ((m * b.k()) / m != b.k() || (m * b.n()) / m != b.n());
  if (wraps || a_size != m * b.k() || y_size != m * b.n()) {
    throw std::invalid_argument(internal::concat(
        "kernels::matmul: a has ", a_size, " and y ", y_size, " elements but a packed b(k = ", b.k(), ", n = ", b.n(),
        ") with m = ", m, " needs a [", m, ", ", b.k(), "] and y [", m, ", ", b.n(), "]"));
  }
}

}  // namespace detail

/// y[m, n] = a[m, k] · b(k, n) with b packed by `pack_b<Compute>`: the same values as the unpacked
/// `matmul<Compute>` (a rounded to Compute, products summed in float32, one rounding to y's type).
/// \throws std::invalid_argument when b was packed for another compute type or a size does not match.
template <class Compute, detail::matmul_input RA, detail::matmul_output RY>
void matmul(const RA& a, const packed_b& b, RY&& y, std::size_t m) {
  using A = detail::matmul_element_t<RA>;
  using Y = detail::matmul_element_t<RY>;
  detail::check_compute_type<Compute, A>();
  detail::check_packed_product<Compute, A, Y>(b, std::ranges::size(a), std::ranges::size(y), m);
  detail::blocked_gemm<Compute>(
      detail::gemm_operands_of<Compute>(detail::gemm_problem<A, Y>{
          .a = std::ranges::data(a), .y = std::ranges::data(y), .m = m, .k = b.k(), .n = b.n()}),
      b.view());
}

/// y[m, n] = a[m, k] · b(k, n) + bias[n] with b packed by `pack_b<Compute>`; bias rounded to Compute
/// and added in float32 before the one rounding to y's type, as the unpacked `matmul`.
/// \throws std::invalid_argument when b was packed for another compute type or a size does not match.
template <class Compute, detail::matmul_input RA, detail::matmul_input RBias, detail::matmul_output RY>
void matmul(const RA& a, const packed_b& b, const RBias& bias, RY&& y, std::size_t m) {
  using A = detail::matmul_element_t<RA>;
  using Bias = detail::matmul_element_t<RBias>;
  using Y = detail::matmul_element_t<RY>;
  detail::check_compute_type<Compute, A, Bias>();
  detail::check_packed_product<Compute, A, Y>(b, std::ranges::size(a), std::ranges::size(y), m);
  if (std::ranges::size(bias) != b.n()) {
    throw std::invalid_argument(
        internal::concat("kernels::matmul: bias has ", std::ranges::size(bias), " elements but b has n = ", b.n()));
  }
  struct bias_tag;  // the bias in float32: a per-thread buffer, so that a call allocates nothing once warm
  const std::span<float> bias_acc = internal::thread_scratch<float, bias_tag>(b.n());
  internal::round_widen_n<Compute>(std::ranges::data(bias), b.n(), bias_acc.data());
  detail::blocked_gemm<Compute>(detail::gemm_operands_of<Compute>(detail::gemm_problem<A, Y>{.a = std::ranges::data(a),
                                                                                             .y = std::ranges::data(y),
                                                                                             .m = m,
                                                                                             .k = b.k(),
                                                                                             .n = b.n(),
                                                                                             .out = epilogue::bias,
                                                                                             .bias = bias_acc.data()}),
                                b.view());
}

/// y[m, n] += a[m, k] · b(k, n) with b packed by `pack_b<Compute>` and y in float32 (the accumulator),
/// as the unpacked `matmul_accumulate` with `a_layout::m_k`: the input cotangent of a layer whose
/// weights are kept packed, summed over several projections before one rounding.
/// \throws std::invalid_argument when b was packed for another compute type or a size does not match.
template <class Compute, detail::matmul_input RA, detail::matmul_output RY>
void matmul_accumulate(const RA& a, const packed_b& b, RY&& y, std::size_t m) {
  using A = detail::matmul_element_t<RA>;
  using Y = detail::matmul_element_t<RY>;
  detail::check_compute_type<Compute, A>();
  static_assert(std::same_as<Y, float>, "kernels::matmul_accumulate: y must hold float32 accumulator values.");
  detail::check_packed_product<Compute, A, Y>(b, std::ranges::size(a), std::ranges::size(y), m);
  detail::blocked_gemm<Compute>(
      detail::gemm_operands_of<Compute>(detail::gemm_problem<A, Y>{.a = std::ranges::data(a),
                                                                   .y = std::ranges::data(y),
                                                                   .m = m,
                                                                   .k = b.k(),
                                                                   .n = b.n(),
                                                                   .out = epilogue::accumulate}),
      b.view());
}

}  // namespace mixprec::kernels

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's products (kernels/compiled.hpp): the engine below `blocked_gemm` for b packed
/// per call and kept packings, in float, bfloat16 and float16 compute (one instantiation each serves
/// every element type of a and y), the packings of b in float32 or the compute type, and for bfloat16
/// the VDPBF16PS pairs of a in float32 or bfloat16.
#define MIXPREC_ENGINE_INSTANTIATION(E, C)                                                            \
  E template void mixprec::kernels::detail::blocked_gemm<C, mixprec::kernels::detail::b_operand>(     \
      const mixprec::kernels::detail::gemm_operands&, const mixprec::kernels::detail::b_operand&);    \
  E template void mixprec::kernels::detail::blocked_gemm<C, mixprec::kernels::detail::packed_b_view>( \
      const mixprec::kernels::detail::gemm_operands&, const mixprec::kernels::detail::packed_b_view&);
#define MIXPREC_PACKING_INSTANTIATION(E, C, S)                                                              \
  E template void mixprec::kernels::detail::pack_b<C, mixprec::kernels::detail::kept_panel_format<C>(), S>( \
      const S*, std::size_t, std::size_t, mixprec::kernels::b_layout, std::size_t, std::size_t,             \
      mixprec::kernels::detail::panel_element_t<mixprec::kernels::detail::kept_panel_format<C>()>*, float*);
/// The VDPBF16PS pairs of a (compute types whose values are bfloat16 values).
#define MIXPREC_PAIR_PACKING_INSTANTIATION(E, C, A)                                                             \
  E template void mixprec::kernels::detail::pack_pairs_as<C, A>(                                                \
      const void*, mixprec::kernels::a_layout, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, \
      std::size_t, std::uint32_t*, mixprec::kernels::detail::gemm_scratch&);
#define MIXPREC_ENGINE_INSTANTIATIONS(E, C) \
  MIXPREC_ENGINE_INSTANTIATION(E, C)        \
  MIXPREC_FOR_OPERANDS_1(MIXPREC_PACKING_INSTANTIATION, E, C)
#define MIXPREC_ENGINE_INSTANTIATIONS_BFLOAT16(E)       \
  MIXPREC_ENGINE_INSTANTIATIONS(E, ::mixprec::bfloat16) \
  MIXPREC_FOR_OPERANDS_1(MIXPREC_PAIR_PACKING_INSTANTIATION, E, ::mixprec::bfloat16)
#define MIXPREC_ENGINE_INSTANTIATIONS_FLOAT(E) \
  MIXPREC_ENGINE_INSTANTIATION(E, float)       \
  MIXPREC_PACKING_INSTANTIATION(E, float, float)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_ENGINE_INSTANTIATIONS_FLOAT(extern)
MIXPREC_ENGINE_INSTANTIATIONS_BFLOAT16(extern)
MIXPREC_ENGINE_INSTANTIATIONS(extern, ::mixprec::float16)
#endif
