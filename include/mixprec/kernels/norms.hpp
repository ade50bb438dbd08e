/// \file
/// \brief The row operations of the normalisation layers, dispatched once per call: `layer_norm_rows`,
/// `rms_norm_rows` and `rms_norm_fused_rows` run `rows` rows of `n` features (row-major) through the
/// vectorised row kernels of this CPU (layer_norm: the AVX-512 or AVX2 rows; rms_norm: the AVX2 rows;
/// chosen in kernels/detail/norm_rows.hpp by `mixprec::active_isa()`, read once per call), split over the kernels'
/// threads. The layer keeps the definition of a row: a row the vectorised kernel declines (not finite, or needing the
/// power-of-two rescaling), every row at the portable level, and every row of a type combination
/// without a vectorised kernel go to the layer's own `portable_row`, which the kernels call with the
/// row's index. Rows are independent, so neither the path, the split nor the thread count changes a
/// bit of a result (tests/kernels/norm_rows_test.cpp and the layers' tests at every SIMD level).
///
/// Types: input T, compute C and output O each float, bfloat16 or float16 with float32 statistics
/// take the vectorised rows; any other combination (double, complex, float8 outputs) runs every row
/// through `portable_row`. Light: no Eigen, no xtensor.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "mixprec/arch/profile.hpp"
#include "mixprec/kernels/detail/norm_rows.hpp"

namespace mixprec::kernels {

/// Layer normalisation of `rows` rows of x [rows, n] into y [rows, n]: per row, float32 statistics,
/// y = (x - mean) · rstd · scale + bias rounded to O, with x̂ = (x - mean) · rstd into `xhat` [rows, n]
/// and rstd into `rstd` [rows] when they are not null (the backward pass's saved values). `scale` and
/// `bias` [n] are the parameters rounded to C, in S. `portable_row(r, scratch)` computes row r itself
/// (with `scratch`, n elements of S owned by the calling thread, for its working copy), for the rows
/// the vectorised kernel does not take (the file comment). C is the compute type (a template argument:
/// it selects the rounding of x).
template <class C, class T, class O, class S, class PortableRow>
void layer_norm_rows(const T* x, std::size_t rows, std::size_t n, float eps, const S* scale, const S* bias, O* y,
                     S* xhat, S* rstd, const PortableRow& portable_row) {
  const internal::profile_scope region("kernels::layer_norm_rows");
  constexpr bool simd_types = detail::simd_norm_types<T, C, O> && std::is_same_v<S, float>;
  const detail::row_path path = detail::choose_row_path<simd_types>(rows * n * sizeof(O));
  detail::for_row_blocks(rows, n, [&](std::size_t begin, std::size_t end) {
    std::vector<S> scratch;  // the portable rows' working copy, made when a row takes that path
    for (std::size_t r = begin; r < end; ++r) {
      if constexpr (simd_types) {
        if (path.simd && detail::layer_norm_row_simd<T, C, O>(
                             x + r * n, n, eps, scale, bias, y + r * n, xhat != nullptr ? xhat + r * n : nullptr,
                             rstd != nullptr ? rstd + r : nullptr, r + 1 < end ? x + (r + 1) * n : nullptr, path)) {
          continue;
        }
      }
      scratch.resize(n);
      portable_row(r, std::span<S>(scratch));
    }
    if (path.streaming) detail::store_fence();
  });
}

/// RMS normalisation of `rows` rows of x [rows, n] into y [rows, n]: per row, float32 statistics,
/// y = x · rstd · scale rounded to O, x̂ and rstd saved when `xhat` / `rstd` are not null, as
/// `layer_norm_rows` (no bias).
template <class C, class T, class O, class S, class PortableRow>
void rms_norm_rows(const T* x, std::size_t rows, std::size_t n, float eps, const S* scale, O* y, S* xhat, S* rstd,
                   const PortableRow& portable_row) {
  const internal::profile_scope region("kernels::rms_norm_rows");
  constexpr bool simd_types = detail::simd_norm_types<T, C, O> && std::is_same_v<S, float>;
  const detail::row_path path = detail::choose_row_path<simd_types>(rows * n * sizeof(O));
  detail::for_row_blocks(rows, n, [&](std::size_t begin, std::size_t end) {
    std::vector<S> scratch;  // the portable rows' working copy, made when a row takes that path
    for (std::size_t r = begin; r < end; ++r) {
      if constexpr (simd_types) {
        if (path.simd && detail::rms_norm_row_simd<T, C, O>(
                             x + r * n, n, eps, scale, y + r * n, xhat != nullptr ? xhat + r * n : nullptr,
                             rstd != nullptr ? rstd + r : nullptr, r + 1 < end ? x + (r + 1) * n : nullptr, path)) {
          continue;
        }
      }
      scratch.resize(n);
      portable_row(r, std::span<S>(scratch));
    }
    if (path.streaming) detail::store_fence();
  });
}

/// The fused residual form of RMS normalisation (the float32 residual stream of nai-t5 and llama):
/// per row, stream = residual + x (x alone when `residual` is null; `stream` may be `residual`
/// itself), y = rmsnorm(stream) rounded to O, then stream · `stream_factor` when it is not null (the
/// residual scale); x̂ and rstd saved as `rms_norm_rows`. `portable_row(r, summed)` computes row r
/// itself; `summed` is true when the vectorised kernel declined the row after writing
/// residual + x into the row of `stream` (only with a residual).
template <class T, class O, class R, class PortableRow>
void rms_norm_fused_rows(const T* x, const R* residual, std::size_t rows, std::size_t n, float eps, const R* scale,
                         O* y, R* stream, R* xhat, R* rstd, const R* stream_factor, const PortableRow& portable_row) {
  const internal::profile_scope region("kernels::rms_norm_fused_rows");
  constexpr bool simd_types = detail::simd_norm_types<T, float, O> && std::is_same_v<R, float>;
  const detail::row_path path = detail::choose_row_path<simd_types>(rows * n * sizeof(O));
  detail::for_row_blocks(rows, n, [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      bool summed = false;
      if constexpr (simd_types) {
        if (path.simd) {
          const R* res = residual != nullptr ? residual + r * n : nullptr;
          if (detail::rms_norm_fused_row_simd<T, O>(
                  x + r * n, res, n, eps, scale, y + r * n, stream + r * n, xhat != nullptr ? xhat + r * n : nullptr,
                  rstd != nullptr ? rstd + r : nullptr, stream_factor, r + 1 < end ? x + (r + 1) * n : nullptr,
                  r + 1 < end && residual != nullptr ? res + n : nullptr, path)) {
            continue;
          }
          summed = residual != nullptr;
        }
      }
      portable_row(r, summed);
    }
    if (path.streaming) detail::store_fence();
  });
}

}  // namespace mixprec::kernels
