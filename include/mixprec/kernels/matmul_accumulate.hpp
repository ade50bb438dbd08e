/// \file
/// \brief `kernels::matmul_accumulate`: y[m, n] += op(a) · op(b) with y in the accumulator type: the
/// product the backward passes need (dW += xᵀ·dy, dx = dy·Wᵀ summed over several terms), with either
/// operand transposed.
///
/// Numerics are `kernels::matmul`'s: every operand is rounded once to `Compute` and widened exactly to
/// `Acc = accumulator_t<Compute>`; the products are summed in Acc (by `matmul`'s blocked engine for
/// float32 accumulation on the AVX2 level and above, else by Eigen), and the sum is added to y, which
/// is an Acc array (float32 for bfloat16/float16/float8 compute, float64 for double). Nothing is
/// rounded to a 16-bit type: parameter gradients stay float32 (docs/training.md,
/// "Gradient formulas").
///
/// Memory: the blocked engine packs the operands block by block, as `matmul` does. On the Eigen path,
/// operands that are not already Acc values are converted whole into scratch buffers (`m k` and
/// `k n` Acc values); operands already in Acc are mapped in place.
#pragma once

#include <complex>
#include <concepts>
#include <cstddef>
#include <ranges>
#include <type_traits>
#include <vector>

#include "mixprec/arch/profile.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/gemm.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace mixprec::kernels {

namespace detail {

/// The operand as Acc values: a pointer into `src` when it already holds Acc values, else `buf`
/// filled with the values rounded to C and widened.
template <class C, class S, class Acc = accumulator_t<C>>
const Acc* as_accumulator(const S* src, std::size_t count, std::vector<Acc>& buf) {
  if constexpr (!needs_conversion<C, S>) {
    return src;
  } else {
    buf.resize(count);
    internal::round_widen_n<C>(src, count, buf.data());
    return buf.data();
  }
}

/// y[m, n] += op(a) · op(b), Eigen's product in Acc on operands already rounded to the compute type and
/// widened: the Eigen half of the matmul_accumulate driver, one instantiation per accumulator type (the
/// compiled library holds them, kernels/compiled.hpp).
template <class Acc>
void eigen_accumulate_product(const Acc* a, a_layout la, const Acc* b, b_layout lb, Acc* y, matmul_shape s) {
  using Mat = row_matrix<Acc>;
  using ConstMap = Eigen::Map<const Mat>;
  const auto m = static_cast<Eigen::Index>(s.m);
  const auto k = static_cast<Eigen::Index>(s.k);
  const auto n = static_cast<Eigen::Index>(s.n);
  Eigen::Map<Mat> y_map(y, m, n);
  const bool at = la == a_layout::k_m;
  const bool bt = lb == b_layout::n_k;
  if (!at && !bt) {
    y_map.noalias() += ConstMap(a, m, k) * ConstMap(b, k, n);
  } else if (!at && bt) {
    y_map.noalias() += ConstMap(a, m, k) * ConstMap(b, n, k).transpose();
  } else if (at && !bt) {
    y_map.noalias() += ConstMap(a, k, m).transpose() * ConstMap(b, k, n);
  } else {
    y_map.noalias() += ConstMap(a, k, m).transpose() * ConstMap(b, n, k).transpose();
  }
}

/// The `matmul_accumulate` driver: y[m, n] += op(a) · op(b) in accumulator_t<C>, sizes checked.
template <class C, class A, class B>
void matmul_accumulate_impl(const A* a, a_layout la, const B* b, b_layout lb, accumulator_t<C>* y, matmul_shape s) {
  using Acc = accumulator_t<C>;
  if (s.m == 0 || s.n == 0 || s.k == 0) return;
  if constexpr (std::same_as<Acc, float> && !internal::is_complex_v<C>) {
    if (use_blocked_gemm<C>()) {
      const gemm_problem<A, float> p{
          .a = a, .a_order = la, .y = y, .m = s.m, .k = s.k, .n = s.n, .out = epilogue::accumulate};
      blocked_gemm<C>(gemm_operands_of<C>(p), b_operand_of<C>(b, lb));
      return;
    }
  }
  const internal::profile_scope region([&] {
    return internal::concat("gemm ", internal::short_type_name<C>(), " m", s.m, " k", s.k, " n", s.n, " += (eigen)");
  });
  std::vector<Acc> a_buf;
  std::vector<Acc> b_buf;
  eigen_accumulate_product<Acc>(as_accumulator<C>(a, s.m * s.k, a_buf), la, as_accumulator<C>(b, s.k * s.n, b_buf), lb,
                                y, s);
}

}  // namespace detail

/// y[m, n] += op(a) · op(b), with op(a) [m, k] read from a [m, k] or a [k, m] (`a_layout`), op(b)
/// [k, n] read from b [k, n] or b [n, k] (`b_layout`), operands rounded to `Compute`, products summed
/// in `accumulator_t<Compute>` (as `matmul` sums them) and added to y, whose element type must be that
/// accumulator (float32, or float64 for double compute). `y` must not overlap `a` or `b`.
///
/// \throws std::invalid_argument when a size does not match the shape (the message gives the shapes).
///
/// **Example** (the kernel gradient of a dense layer, x [rows, in], dy [rows, out], dW [in, out]):
///
///     kernels::matmul_accumulate<bfloat16>(x, kernels::a_layout::k_m, dy, kernels::b_layout::k_n, dW,
///                                          {.m = in, .k = rows, .n = out});   // dW += xᵀ·dy
template <class Compute, detail::matmul_input RA, detail::matmul_input RB, detail::matmul_output RY>
void matmul_accumulate(const RA& a, a_layout la, const RB& b, b_layout lb, RY&& y, matmul_shape s) {
  using A = detail::matmul_element_t<RA>;
  using B = detail::matmul_element_t<RB>;
  using Y = detail::matmul_element_t<RY>;
  using Acc = accumulator_t<Compute>;
  detail::check_compute_type<Compute, A, B>();
  static_assert(std::same_as<Y, Acc>,
                "kernels::matmul_accumulate: y must hold accumulator_t<Compute> values (float for float, "
                "bfloat16, float16 and float8 compute; double for double): it adds to y without rounding.");
  detail::check_matmul_sizes(std::ranges::size(a), std::ranges::size(b), std::ranges::size(y), nullptr, s, lb);
  detail::matmul_accumulate_impl<Compute>(std::ranges::data(a), la, std::ranges::data(b), lb, std::ranges::data(y), s);
}

}  // namespace mixprec::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's Eigen products of `matmul_accumulate` (kernels/compiled.hpp): float32 and
/// float64 accumulators, real and complex.
#define MIXPREC_EIGEN_ACCUMULATE_INSTANTIATION(E, Acc)                                                            \
  E template void mixprec::kernels::detail::eigen_accumulate_product<Acc>(const Acc*, mixprec::kernels::a_layout, \
                                                                          const Acc*, mixprec::kernels::b_layout, \
                                                                          Acc*, mixprec::kernels::matmul_shape);
#define MIXPREC_EIGEN_ACCUMULATE_INSTANTIATIONS(E) \
  MIXPREC_FOR_ACCUMULATOR_TYPES(MIXPREC_EIGEN_ACCUMULATE_INSTANTIATION, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_EIGEN_ACCUMULATE_INSTANTIATIONS(extern)
#endif
