/// \file
/// \brief Private: the AVX-512 decode kernel for float8_e4m3fn weight panels (one row of a against
/// packed 1-byte b panels: the batch-1 product of weight-only float8 inference), compiled through a
/// `target` attribute and called only when `mixprec::active_isa()` is at least `isa::avx512`
/// (arch/detail/target.hpp explains the rules).
///
/// Decoding float8 is what bounds the AVX2 decode of 1-byte panels (about five vector instructions
/// per 8 weights: a core streams ~14 G weights/s, below the memory's rate); with 512-bit vectors one
/// panel row of 16 weights takes a sign-extension, a shift, a mask, one VCVTPH2PS and one FMA.
///
/// Summation order: that of gemm_avx2::micro_row4 (every output element is `c += Σ_p a·b` over each
/// k-slice in ascending p, one FMA per term into an accumulator that starts at 0), so the results
/// are bit-identical to the AVX2 level's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/gemm_pack.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace gemm_avx512 {

using kernels::detail::gemm_mr;
using kernels::detail::gemm_nr;

/// Row p of an e4m3 panel (16 float8_e4m3fn patterns, none NaN) as 16 floats divided by 2^8
/// (kernels::detail::e4m3_panel_scale), exactly: the float16 reading of gemm_avx2::load_e4m3_panel_scaled.
MIXPREC_TARGET_AVX512 inline __m512 load_e4m3_panel_scaled(const std::uint8_t* b) noexcept {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, kernels::detail::e4m3_half_shift),
                                     _mm256_set1_epi16(static_cast<short>(kernels::detail::e4m3_half_mask)));
  // The zero-masking form with every lane selected: the same instruction, and no undefined source
  // register (GCC 12's plain _mm512_cvtph_ps passes one and -Wmaybe-uninitialized fires at -O2).
  return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(~__mmask16{0}), h);
}

/// One row against P consecutive e4m3 panels (P · 16 columns) over kc steps:
/// c[0, P·16) = (accumulate ? c : 0) + a · b, with a (packed: element p at a[p · gemm_mr]) holding its
/// values times 2^8. `panel_stride` is the distance between panels (gemm_nr · k bytes).
template <int P>
MIXPREC_TARGET_AVX512 inline void micro_row_e4m3(std::size_t kc, const float* a, const std::uint8_t* b,
                                                 std::size_t panel_stride, float* c, bool accumulate) noexcept {
  __m512 acc[P];
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) acc[q] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m512 ar = _mm512_set1_ps(*a);
#pragma GCC unroll 8
    for (int q = 0; q < P; ++q) {
      acc[q] = _mm512_fmadd_ps(ar, load_e4m3_panel_scaled(b + static_cast<std::size_t>(q) * panel_stride), acc[q]);
    }
    a += gemm_mr;
    b += gemm_nr;
  }
#pragma GCC unroll 8
  for (int q = 0; q < P; ++q) {
    float* cq = c + static_cast<std::size_t>(q) * gemm_nr;
    if (accumulate) acc[q] = _mm512_add_ps(_mm512_loadu_ps(cq), acc[q]);
    _mm512_storeu_ps(cq, acc[q]);
  }
}

/// One row against `panels` e4m3 panels over all of k: c[0, panels·16) = a · b, in k-slices of `kc`,
/// each group of eight panels (eight independent FMA chains) streamed from start to end; a holds its
/// values times 2^8 (gemm_engine.hpp's scale_row_up).
MIXPREC_TARGET_AVX512 inline void row_block_e4m3(std::size_t panels, std::size_t k, std::size_t kc, const float* a,
                                                 const std::uint8_t* b, std::size_t panel_stride, float* c) noexcept {
  constexpr std::size_t group = 8;
  for (std::size_t q = 0; q < panels; q += group) {
    const std::size_t width = panels - q < group ? panels - q : group;
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t depth = k - p0 < kc ? k - p0 : kc;
      const float* ap = a + p0 * gemm_mr;
      const std::uint8_t* bp = b + q * panel_stride + p0 * gemm_nr;
      float* cq = c + q * gemm_nr;
      const bool accumulate = p0 != 0;
      switch (width) {
        case 1: micro_row_e4m3<1>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 2: micro_row_e4m3<2>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 3: micro_row_e4m3<3>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 4: micro_row_e4m3<4>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 5: micro_row_e4m3<5>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 6: micro_row_e4m3<6>(depth, ap, bp, panel_stride, cq, accumulate); break;
        case 7: micro_row_e4m3<7>(depth, ap, bp, panel_stride, cq, accumulate); break;
        default: micro_row_e4m3<8>(depth, ap, bp, panel_stride, cq, accumulate); break;
      }
    }
  }
}

}  // namespace gemm_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
