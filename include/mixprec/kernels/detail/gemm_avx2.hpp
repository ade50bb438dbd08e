/// \file
/// \brief Private: the AVX2 + FMA register-blocked micro-kernels of the blocked GEMM, compiled through
/// a `target` attribute so that a build without `-m` flags has them, and called only when
/// `mixprec::active_isa()` is at least `isa::avx2` (arch/detail/target.hpp explains the rules: per-ISA
/// namespace, only pointers and sizes cross the boundary).
///
/// A micro-tile is R × 16 floats (R ≤ 6) held in 2R ymm accumulators: per k step, two loads of the b
/// panel row, R broadcasts of a, 2R FMAs (BLIS's Haswell 6×16 kernel shape: 12 accumulators + 2 b
/// vectors + 1 broadcast = 15 of the 16 registers). One row (decode: m = 1) takes four panels at once
/// so that eight independent FMA chains hide the FMA latency.
///
/// Summation order, on which bit-reproducibility rests: every output element is `c += Σ_p a·b` over
/// each k-slice of `gemm_kc` in ascending p, one FMA per term into an accumulator that starts at 0,
/// whatever R, the number of panels taken together, the blocking or the thread that computes it. So a
/// row of y does not depend on how many other rows are computed with it (batch invariance).
#pragma once

#include <cstddef>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace gemm_avx2 {

using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;

/// c[R, 16] (row stride ldc) = (accumulate ? c : 0) + a_panel · b_panel over kc steps.
template <int R>
MIXPREC_TARGET_AVX2 inline void micro_tile(std::size_t kc, const float* a, const float* b, float* c, std::size_t ldc,
                                           bool accumulate) noexcept {
  __m256 acc0[R];
  __m256 acc1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc0[r] = _mm256_setzero_ps();
    acc1[r] = _mm256_setzero_ps();
  }
  for (std::size_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(ar, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(ar, b1, acc1[r]);
    }
    a += gemm_mr;
    b += gemm_nr;
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* row = c + static_cast<std::size_t>(r) * ldc;
    if (accumulate) {
      acc0[r] = _mm256_add_ps(_mm256_loadu_ps(row), acc0[r]);
      acc1[r] = _mm256_add_ps(_mm256_loadu_ps(row + 8), acc1[r]);
    }
    _mm256_storeu_ps(row, acc0[r]);
    _mm256_storeu_ps(row + 8, acc1[r]);
  }
}

/// One row against four consecutive b panels (64 columns): c[0, 64) = (accumulate ? c : 0) + a · b.
/// `panel_stride` is the distance between panels (nr · k floats). Same per-element order as micro_tile.
MIXPREC_TARGET_AVX2 inline void micro_row4(std::size_t kc, const float* a, const float* b, std::size_t panel_stride,
                                           float* c, bool accumulate) noexcept {
  __m256 acc[8];
#pragma GCC unroll 8
  for (std::size_t v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m256 ar = _mm256_broadcast_ss(a);
#pragma GCC unroll 4
    for (std::size_t q = 0; q < 4; ++q) {
      const float* bq = b + q * panel_stride;
      acc[2 * q] = _mm256_fmadd_ps(ar, _mm256_loadu_ps(bq), acc[2 * q]);
      acc[2 * q + 1] = _mm256_fmadd_ps(ar, _mm256_loadu_ps(bq + 8), acc[2 * q + 1]);
    }
    a += gemm_mr;
    b += gemm_nr;
  }
#pragma GCC unroll 8
  for (std::size_t v = 0; v < 8; ++v) {
    if (accumulate) acc[v] = _mm256_add_ps(_mm256_loadu_ps(c + 8 * v), acc[v]);
    _mm256_storeu_ps(c + 8 * v, acc[v]);
  }
}

/// The macro-kernel: c[rows, panels·16] (row stride ldc) (+)= a_block · b over one k-slice of kc.
/// `a` holds ceil(rows / 6) a panels of kc × 6; `b` points at the slice's first row in the first
/// panel, panels `panel_stride` floats apart.
MIXPREC_TARGET_AVX2 inline void block(std::size_t rows, std::size_t panels, std::size_t kc, const float* a,
                                      const float* b, std::size_t panel_stride, float* c, std::size_t ldc,
                                      bool accumulate) noexcept {
  std::size_t q = 0;
  if (rows == 1) {
    for (; q + 4 <= panels; q += 4) micro_row4(kc, a, b + q * panel_stride, panel_stride, c + q * gemm_nr, accumulate);
  }
  for (; q < panels; ++q) {
    const float* bq = b + q * panel_stride;
    for (std::size_t i = 0; i < rows; i += gemm_mr) {
      const float* ai = a + (i / gemm_mr) * gemm_mr * kc;
      float* ci = c + i * ldc + q * gemm_nr;
      switch (rows - i >= gemm_mr ? gemm_mr : rows - i) {
        case 1: micro_tile<1>(kc, ai, bq, ci, ldc, accumulate); break;
        case 2: micro_tile<2>(kc, ai, bq, ci, ldc, accumulate); break;
        case 3: micro_tile<3>(kc, ai, bq, ci, ldc, accumulate); break;
        case 4: micro_tile<4>(kc, ai, bq, ci, ldc, accumulate); break;
        case 5: micro_tile<5>(kc, ai, bq, ci, ldc, accumulate); break;
        default: micro_tile<6>(kc, ai, bq, ci, ldc, accumulate); break;
      }
    }
  }
}

}  // namespace gemm_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
