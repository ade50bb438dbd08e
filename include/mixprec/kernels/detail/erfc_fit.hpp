/// \file
/// \brief Private: the polynomial of the vectorised erfc of erf-GELU (activation-inl.hpp's
/// `gelu_erf_parts`), derived by scripts/fit_erfc.py (run it to regenerate this block).
///
/// For a >= 0, erfc(a) = e^(-a^2) (1 + s P(s - m)) / (1 + 2a) with s = 2a / (a + k) (k =
/// `erfc_fit_k`, m = `erfc_fit_centre`) and P the polynomial of `erfc_fit_coefficients` (lowest degree
/// first), the Chebyshev interpolant of degree 10 over a in (0, 10.1], where erfc leaves float32's
/// subnormal range. s P(s - m) is 0 at a = 0, so erfc(0) = 1 exactly; its error as printed below is
/// below 0.6 units of 2^-24, a fraction of float32's rounding of 1 + p.
#pragma once

#include <array>

namespace mixprec::kernels::detail {

// clang-format off
// scripts/fit_erfc.py 2 10: max |s P(s - m) - p| = 3.31e-08 over (0, 10.1] (float32 coefficients, evaluated in double)
inline constexpr float erfc_fit_k = 0x1p+1F;  // 2.0
inline constexpr float erfc_fit_centre = 0x1.ab5f34p-1F;  // 0.8347107172012329
inline constexpr std::array<float, 11> erfc_fit_coefficients = {
    0x1.6013dep-2F,  // 0.3438257873058319
    -0x1.c29c76p-2F,  // -0.4400499761104584
    0x1.c40ab8p-3F,  // 0.22072356939315796
    -0x1.d27b9ap-6F,  // -0.028471851721405983
    -0x1.36366cp-6F,  // -0.018933873623609543
    0x1.03c66ep-8F,  // 0.003963853698223829
    0x1.75a37cp-9F,  // 0.002850636374205351
    -0x1.056da4p-12F,  // -0.00024931743973866105
    -0x1.08172ep-11F,  // -0.0005037127411924303
    -0x1.030176p-15F,  // -3.087588629568927e-05
    0x1.080644p-14F,  // 6.294834020081908e-05
};
// clang-format on

/// The |x| beyond which the erf-GELU kernels clamp x: e^(-x^2 / 2) is 0 in float32 from |x| = 14.43
/// (x^2 / 2 > 150 ln 2), so erfc(|x| / sqrt 2) is 0 and nothing changes; the clamp keeps x^2 and
/// the polynomial finite for the huge and infinite x.
inline constexpr float erfc_fit_clamp = 15.0F;

}  // namespace mixprec::kernels::detail
