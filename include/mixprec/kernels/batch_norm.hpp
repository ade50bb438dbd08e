/// \file
/// \brief The two passes of batch normalisation over x [rows, n] (row-major, the statistics per
/// column): `batch_norm_sums`, the per-column shifted sums the statistics come from, and
/// `batch_norm_apply`, the normalisation with per-column factors. `nn::batch_norm` calls them; the
/// statistics' combination across workers, the running statistics and the checks stay in the layer.
///
/// Vectorised (AVX2, AVX-512, chosen at run time by `mixprec::active_isa()`, read once per call) for
/// float32 statistics with x, the compute type and the output each float, bfloat16 or float16; a lane
/// is a column and does the portable loops below operation for operation (IEEE operations, each
/// rounded once, none fused), so every level gives the bits of the scalar code of a build without FMA
/// contraction (the default, no `-march`). Columns (sums) and rows (normalisation) are split over the
/// kernels' threads; both are independent, so neither the split nor the thread count changes a bit.
/// Light: no Eigen, no xtensor.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "mixprec/arch/profile.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/batch_norm_columns.hpp"
#include "mixprec/kernels/detail/row_blocks.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels {

/// Rows whose shifted values `batch_norm_sums` adds in the statistics type S before adding the block's
/// sums to the float64 totals: a block's sum is then within 8 units of S's roundoff of its magnitude.
inline constexpr std::size_t batch_norm_block_rows = 8;

namespace detail {

/// Whether the portable loops read x in place (it needs no rounding to C, and widening it to S is
/// exact and vectorises inline: S itself, or bfloat16 into float) rather than rounding a block of it
/// into a buffer in bulk first.
template <class T, class C, class S>
inline constexpr bool batch_norm_reads_directly = std::is_same_v<T, C> &&
                                                  (std::is_same_v<T, S> ||
                                                   (std::is_same_v<T, mixprec::bfloat16> && std::is_same_v<S, float>));

/// A value of x read in place (type C) or of a rounded buffer (already S), as S.
template <class C, class S, class V>
[[nodiscard]] inline S batch_norm_widened(const V& v) noexcept {
  if constexpr (std::is_same_v<V, S>) {
    return v;
  } else if constexpr (std::is_same_v<V, mixprec::bfloat16> && std::is_same_v<S, float>) {
    // bfloat16 is float's upper half: the exact value (a NaN stays a NaN) by a shift the compiler
    // vectorises; the conversion operator also quiets NaNs, which costs several operations here.
    return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits()) << 16);
  } else {
    return internal::round_widen<C>(v);
  }
}

/// |v|² in v's real type: v · v, or re² + im² for a complex v (Flax's `_abs_sq`, FLIP 1777's conjugate).
template <class V>
[[nodiscard]] inline auto squared_magnitude(const V& v) noexcept {
  if constexpr (internal::is_complex_v<V>) {
    return v.real() * v.real() + v.imag() * v.imag();
  } else {
    return v * v;
  }
}

/// `batch_norm_sums` over columns [0, cols) of x (row stride ld) in portable code.
template <class C, class T, class S, class A>
void batch_norm_sums_portable(const T* x, std::size_t rows, std::size_t cols, std::size_t ld, const S* shift, A* s1,
                              double* s2) {
  using R = decltype(squared_magnitude(S{}));
  constexpr std::size_t block = batch_norm_block_rows;
  constexpr bool direct = batch_norm_reads_directly<T, C, S>;
  std::vector<S> buf(direct ? 0 : block * cols);
  const auto add_block = [&](const auto* xb, std::size_t stride, std::size_t nr) {
    if (nr == block) {
      for (std::size_t j = 0; j < cols; ++j) {
        S t1 = 0;
        R t2 = 0;
        for (std::size_t k = 0; k < block; ++k) {
          const S d = batch_norm_widened<C, S>(xb[k * stride + j]) - shift[j];
          t1 += d;
          t2 += squared_magnitude(d);
        }
        s1[j] += static_cast<A>(t1);
        s2[j] += static_cast<double>(t2);
      }
    } else {
      for (std::size_t k = 0; k < nr; ++k) {
        for (std::size_t j = 0; j < cols; ++j) {
          const S d = batch_norm_widened<C, S>(xb[k * stride + j]) - shift[j];
          s1[j] += static_cast<A>(d);
          s2[j] += static_cast<double>(squared_magnitude(d));
        }
      }
    }
  };
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t nr = std::min(block, rows - r0);
    if constexpr (direct) {
      add_block(x + r0 * ld, ld, nr);
    } else {
      for (std::size_t k = 0; k < nr; ++k) internal::round_widen_n<C>(x + (r0 + k) * ld, cols, buf.data() + k * cols);
      add_block(static_cast<const S*>(buf.data()), cols, nr);
    }
  }
}

/// `batch_norm_apply` of rows [begin, end) in portable code.
template <class C, class T, class S, class O>
void batch_norm_apply_portable(const T* x, std::size_t begin, std::size_t end, std::size_t n, const S* mean,
                               const S* corr, const S* mult, const S* bias, const S* rstd, O* y, S* xhat) {
  constexpr bool direct = batch_norm_reads_directly<T, C, S>;
  constexpr bool bulk_out = std::is_same_v<S, float> && mixprec::small_float<O>;
  std::vector<S> row(direct ? 0 : n);
  std::vector<S> wide(bulk_out ? n : 0);
  const auto normalise = [&](const auto* src, std::size_t r) {
    O* out = y + r * n;
    if constexpr (bulk_out) {
      // y in S into `wide`, then one bulk rounding of the row to O (mixprec::convert's): the same bits.
      for (std::size_t j = 0; j < n; ++j) {
        wide[j] = ((batch_norm_widened<C, S>(src[j]) - mean[j]) - corr[j]) * mult[j] + bias[j];
      }
      internal::round_n<O>(wide.data(), n, out);
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        const S dev = (batch_norm_widened<C, S>(src[j]) - mean[j]) - corr[j];
        out[j] = internal::round_out<O>(dev * mult[j] + bias[j]);
      }
    }
    if (xhat != nullptr) {
      for (std::size_t j = 0; j < n; ++j) {
        xhat[r * n + j] = ((batch_norm_widened<C, S>(src[j]) - mean[j]) - corr[j]) * rstd[j];
      }
    }
  };
  for (std::size_t r = begin; r < end; ++r) {
    if constexpr (direct) {
      normalise(x + r * n, r);
    } else {
      internal::round_widen_n<C>(x + r * n, n, row.data());
      normalise(static_cast<const S*>(row.data()), r);
    }
  }
}

}  // namespace detail

/// Per-column sums of batch normalisation's statistics pass over x [rows, n] (row-major, T; each
/// value rounded to C and widened to S): for each column j, with d = x[r, j] - shift[j] (`shift` [n]
/// in S, in practice the first row, so that the sums stay accurate for data far from 0),
/// s1[j] = Σ_r d and s2[j] = Σ_r |d|² ([n], overwritten; float64, s1 complex float64 for complex S). Rows are added in
/// blocks of `batch_norm_block_rows`, each summed in S from 0 in row order and then added to the float64 totals; rows
/// after the last whole block are added one by one in float64. For S float, a column whose block sums of squares
/// overflow float (|d| near 1.8e19) or hold a NaN is summed again element by element in float64, where the square of
/// any float fits. Complex S (FLIP 1777's rule for complex inputs): d is complex and |d|² = re² + im², real.
template <class C, class T, class S, class A>
void batch_norm_sums(const T* x, std::size_t rows, std::size_t n, const S* shift, A* s1, double* s2) {
  static_assert(std::is_same_v<A, std::complex<double>> || (std::is_same_v<A, double> && !internal::is_complex_v<S>),
                "kernels::batch_norm_sums: s1 must be float64, or complex float64 for complex statistics.");
  const internal::profile_scope region("kernels::batch_norm_sums");
  std::fill(s1, s1 + n, A(0));
  std::fill(s2, s2 + n, 0.0);
  constexpr bool simd_types =
      detail::simd_norm_types<T, C, float> && std::is_same_v<S, float> && std::is_same_v<A, double>;
  [[maybe_unused]] const bool simd = simd_types && detail::simd_rows_active();
  [[maybe_unused]] const bool wide = simd && detail::avx512_rows_active();
  const auto columns = [&](std::size_t c0, std::size_t c1) {
    const std::size_t cols = c1 - c0;
#if MIXPREC_X86_DISPATCH
    if constexpr (simd_types) {
      constexpr std::size_t block = batch_norm_block_rows;
      if (wide) {
        ::mixprec::detail::simd_avx512::batch_norm::sums<T, C, block>(x + c0, rows, cols, n, shift + c0, s1 + c0,
                                                                      s2 + c0);
      } else if (simd) {
        ::mixprec::detail::simd_avx2::batch_norm::sums<T, C, block>(x + c0, rows, cols, n, shift + c0, s1 + c0,
                                                                    s2 + c0);
      } else {
        detail::batch_norm_sums_portable<C>(x + c0, rows, cols, n, shift + c0, s1 + c0, s2 + c0);
      }
    } else {
      detail::batch_norm_sums_portable<C>(x + c0, rows, cols, n, shift + c0, s1 + c0, s2 + c0);
    }
#else
    detail::batch_norm_sums_portable<C>(x + c0, rows, cols, n, shift + c0, s1 + c0, s2 + c0);
#endif
    if constexpr (std::is_same_v<decltype(detail::squared_magnitude(S{})), float>) {
      for (std::size_t j = c0; j < c1; ++j) {
        if (std::isfinite(s2[j])) continue;
        s1[j] = A(0);
        s2[j] = 0;
        for (std::size_t r = 0; r < rows; ++r) {
          const A d = static_cast<A>(internal::round_widen<C>(x[r * n + j])) - static_cast<A>(shift[j]);
          s1[j] += d;
          s2[j] += detail::squared_magnitude(d);
        }
      }
    }
  };
  // Whole 64-column groups per task (the lanes of either width, and a cache line of float): a column's
  // sums do not depend on the split.
  constexpr std::size_t group = 64;
  constexpr std::size_t min_elements_per_thread = std::size_t{1} << 16;
  const std::size_t groups = (n + group - 1) / group;
  const std::size_t threads =
      std::min({num_threads(), groups, std::max<std::size_t>(rows * n / min_elements_per_thread, 1)});
  if (threads <= 1) {
    columns(0, n);
    return;
  }
  const std::size_t per_task = (groups + threads - 1) / threads * group;
  internal::parallel_for(threads, threads, [&](std::size_t task) {
    const std::size_t c0 = std::min(n, task * per_task);
    columns(c0, std::min(n, c0 + per_task));
  });
}

/// Batch normalisation's second pass over x [rows, n] (row-major, T; each value rounded to C and
/// widened to S) with per-column factors [n] in S: d = (x - mean[j]) - corr[j] (`corr`: the part of the
/// float64 mean that `mean` does not hold), y[r, j] = round_to<O>(d · mult[j] + bias[j]) (`mult` =
/// rstd · scale; the product rounded on its own, then the sum), and x̂[r, j] = d · rstd[j] into `xhat`
/// [rows, n] when it is not null (the backward pass's saved value).
template <class C, class T, class S, class O>
void batch_norm_apply(const T* x, std::size_t rows, std::size_t n, const S* mean, const S* corr, const S* mult,
                      const S* bias, const S* rstd, O* y, S* xhat) {
  const internal::profile_scope region("kernels::batch_norm_apply");
  constexpr bool simd_types = detail::simd_norm_types<T, C, O> && std::is_same_v<S, float>;
  [[maybe_unused]] const bool simd = simd_types && detail::simd_rows_active();
  [[maybe_unused]] const bool wide = simd && detail::avx512_rows_active();
  detail::for_row_blocks(rows, n, [&](std::size_t begin, std::size_t end) {
#if MIXPREC_X86_DISPATCH
    if constexpr (simd_types) {
      S* h = xhat != nullptr ? xhat + begin * n : nullptr;
      if (wide) {
        ::mixprec::detail::simd_avx512::batch_norm::apply<T, C, O>(x + begin * n, end - begin, n, mean, corr, mult,
                                                                   bias, rstd, y + begin * n, h);
        return;
      }
      if (simd) {
        ::mixprec::detail::simd_avx2::batch_norm::apply<T, C, O>(x + begin * n, end - begin, n, mean, corr, mult, bias,
                                                                 rstd, y + begin * n, h);
        return;
      }
    }
#endif
    detail::batch_norm_apply_portable<C>(x, begin, end, n, mean, corr, mult, bias, rstd, y, xhat);
  });
}

}  // namespace mixprec::kernels

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's batch normalisation passes (kernels/compiled.hpp): float32 statistics,
/// compute float, bfloat16 or float16, x and y each float or the compute type.
#define MIXPREC_BATCH_NORM_SUMS_INSTANTIATION(E, C, T)                                                       \
  E template void mixprec::kernels::batch_norm_sums<C, T, float, double>(const T*, std::size_t, std::size_t, \
                                                                         const float*, double*, double*);
#define MIXPREC_BATCH_NORM_APPLY_INSTANTIATION(E, C, T, O)                                                             \
  E template void mixprec::kernels::batch_norm_apply<C, T, float, O>(const T*, std::size_t, std::size_t, const float*, \
                                                                     const float*, const float*, const float*,         \
                                                                     const float*, O*, float*);
#define MIXPREC_BATCH_NORM_INSTANTIATIONS(E)                                             \
  MIXPREC_BATCH_NORM_SUMS_INSTANTIATION(E, float, float)                                 \
  MIXPREC_BATCH_NORM_APPLY_INSTANTIATION(E, float, float, float)                         \
  MIXPREC_FOR_OPERANDS_1(MIXPREC_BATCH_NORM_SUMS_INSTANTIATION, E, ::mixprec::bfloat16)  \
  MIXPREC_FOR_OPERANDS_1(MIXPREC_BATCH_NORM_SUMS_INSTANTIATION, E, ::mixprec::float16)   \
  MIXPREC_FOR_OPERANDS_2(MIXPREC_BATCH_NORM_APPLY_INSTANTIATION, E, ::mixprec::bfloat16) \
  MIXPREC_FOR_OPERANDS_2(MIXPREC_BATCH_NORM_APPLY_INSTANTIATION, E, ::mixprec::float16)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_BATCH_NORM_INSTANTIATIONS(extern)
#endif
