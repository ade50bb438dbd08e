/// \file
/// \brief `kernels::quantise_by_scale`: the quantisation pass of float8 products under a delayed scale
/// (scaled/float8_dot.hpp), dispatched once per call: the scaling runs in AVX2 where the CPU has it
/// (kernels/detail/quantise_avx2.hpp), the portable loop elsewhere, with the same values. Light: no
/// Eigen, no xtensor.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "mixprec/arch/isa.hpp"
#include "mixprec/formats/basic_float.hpp"
#include "mixprec/formats/finfo.hpp"
#include "mixprec/formats/numeric_limits.hpp"
#include "mixprec/kernels/detail/quantise_avx2.hpp"
#include "mixprec/kernels/rounding.hpp"

namespace mixprec::kernels {

/// Float8 (any signed small float F) data of `x` under the bound `scale`, as delayed scaling quantises
/// (TransformerEngine's recipe; scaled/delayed_scaling.hpp): x * (M / scale), M = F's largest finite value, in float,
/// clamped to +-M, then rounded to F in bulk, into `out` (x's size). The finite elements with |x| > scale (the bound
/// broken: they saturate, even where the product overflows float) are added to `clipped`; an element at the bound whose
/// product rounds a float ulp past M is clamped but not counted; NaN and Inf are not clamped (they make the product
/// non-finite). Returns amax(x) (NaN if x holds one). One pass over x in blocks of `block` elements (the scaled block
/// stays in L1; no scratch array of x's size): the scaling in AVX2 where the CPU has it
/// (kernels/detail/quantise_avx2.hpp, the same values), each block rounded by `mixprec::convert` (run-time dispatched
/// AVX2 lanes). `scale` must leave M / scale finite and positive in float (delayed_scaling's scales do; asserted). Both
/// paths take the amax from the bit patterns of |x|, so it is exact under DAZ too.
template <class F>
requires(small_float<F>&& std::numeric_limits<F>::is_signed) float quantise_by_scale(std::span<const float> x,
                                                                                     double scale, std::span<F> out,
                                                                                     std::size_t& clipped) {
  constexpr double format_max = static_cast<float>(finfo<F>::max);
  constexpr float m = static_cast<float>(format_max);
  constexpr float float_max = std::numeric_limits<float>::max();
  constexpr std::size_t block = 1024;
  const auto mult = static_cast<float>(format_max / scale);
  assert(std::isfinite(mult) && mult > 0.0f);
  // The largest float <= scale: for a float a, a > scale exactly when a > bound.
  float bound = scale >= static_cast<double>(float_max) ? float_max : static_cast<float>(scale);
  if (static_cast<double>(bound) > scale) bound = std::nextafter(bound, 0.0f);
  float scaled[block];
  // amax as the largest pattern of |x| (kernels/detail/absmax_avx2.hpp: patterns order like values,
  // NaN patterns above +Inf's), on both paths.
  std::uint32_t amax_bits = 0;
  std::size_t clips = 0;
#if MIXPREC_X86_DISPATCH
  const bool simd = active_isa() >= isa::avx2;
#endif
  for (std::size_t i0 = 0; i0 < x.size(); i0 += block) {
    const std::size_t n = std::min(block, x.size() - i0);
    const float* xs = x.data() + i0;
    std::size_t done = 0;
#if MIXPREC_X86_DISPATCH
    if (simd) {  // whole groups of 8 lanes (kernels/detail/quantise_avx2.hpp), the rest below
      done = n - n % 8;
      mixprec::detail::quantise_avx2::scale_block(xs, done, mult, bound, m, scaled, amax_bits, clips);
    }
#endif
    for (std::size_t i = done; i < n; ++i) {
      const std::uint32_t pattern = std::bit_cast<std::uint32_t>(xs[i]) & 0x7FFFFFFFU;
      const float a = std::bit_cast<float>(pattern);
      const bool finite = pattern < 0x7F800000U;  // false for NaN and Inf
      amax_bits = std::max(amax_bits, pattern);
      clips += (finite && a > bound) ? 1U : 0U;
      const float v = xs[i] * mult;
      // Finite values saturate at +-M; NaN and Inf stay non-finite (NaN in e4m3fn, which has no Inf), so
      // that the products turn non-finite and a loss scaler or a finiteness check sees the overflow.
      scaled[i] = finite ? std::min(std::max(v, -m), m) : v;
    }
    internal::round_n<F>(scaled, n, out.data() + i0);
  }
  clipped += clips;
  return amax_bits > 0x7F800000U ? std::numeric_limits<float>::quiet_NaN() : std::bit_cast<float>(amax_bits);
}

}  // namespace mixprec::kernels
