/// \file
/// \brief Private: how the element-wise sigmoid, SiLU, tanh-GELU and erf-GELU and their derivatives on float32
/// values reach their vectorised kernels — the run-time choice by `mixprec::active_isa()`, read once per call: the
/// kernel of activation.hpp at 16 lanes (`simd_avx512`) from the avx512 level up, at 8 (`simd_avx2`)
/// at avx2. The two give the same bits; the portable level keeps the scalar formulas of
/// kernels/activations.hpp (`std::exp`, `std::erfc`).
#pragma once

#include <cstddef>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/activation_kind.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/activation.hpp"

namespace mixprec::kernels::detail {

#if MIXPREC_X86_DISPATCH
/// activation_rows for one kind at `level`: the 16-lane kernel from the avx512 level up, else the
/// 8-lane one.
template <activation_kind K>
void activation_row_at(isa level, const float* x, const float* gate, float* y, std::size_t n) noexcept {
  if (level >= isa::avx512) {
    mixprec::detail::simd_avx512::activation::row<K>(x, gate, y, n);
  } else {
    mixprec::detail::simd_avx2::activation::row<K>(x, gate, y, n);
  }
}
#endif

/// Whether `level` (`mixprec::active_isa()`, read once per operation) runs the vectorised kernels.
[[nodiscard]] inline bool activation_simd(isa level) noexcept {
#if MIXPREC_X86_DISPATCH
  return level >= isa::avx2;
#else
  static_cast<void>(level);
  return false;
#endif
}

/// y[i] = f(x[i]) (times gate[i] when `gate` is not null) for i < n, in float32, f the activation or
/// derivative `kind`, through the kernel of `level`, for which `activation_simd(level)` must hold (the
/// caller evaluates the scalar formula otherwise). y may be x or gate (element-wise, in place).
inline void activation_rows(isa level, activation_kind kind, const float* x, const float* gate, float* y,
                            std::size_t n) noexcept {
#if MIXPREC_X86_DISPATCH
  switch (kind) {
    case activation_kind::sigmoid: activation_row_at<activation_kind::sigmoid>(level, x, gate, y, n); break;
    case activation_kind::silu: activation_row_at<activation_kind::silu>(level, x, gate, y, n); break;
    case activation_kind::gelu_tanh: activation_row_at<activation_kind::gelu_tanh>(level, x, gate, y, n); break;
    case activation_kind::gelu_erf: activation_row_at<activation_kind::gelu_erf>(level, x, gate, y, n); break;
    case activation_kind::sigmoid_derivative:
      activation_row_at<activation_kind::sigmoid_derivative>(level, x, gate, y, n);
      break;
    case activation_kind::silu_derivative:
      activation_row_at<activation_kind::silu_derivative>(level, x, gate, y, n);
      break;
    case activation_kind::gelu_tanh_derivative:
      activation_row_at<activation_kind::gelu_tanh_derivative>(level, x, gate, y, n);
      break;
    case activation_kind::gelu_erf_derivative:
      activation_row_at<activation_kind::gelu_erf_derivative>(level, x, gate, y, n);
      break;
  }
#else
  static_cast<void>(level), static_cast<void>(kind), static_cast<void>(x), static_cast<void>(gate);
  static_cast<void>(y), static_cast<void>(n);
#endif
}

}  // namespace mixprec::kernels::detail

#if MIXPREC_X86_DISPATCH
// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's SIMD activation rows (kernels/compiled.hpp): every activation_kind.
#define MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, K)                                                   \
  E template void mixprec::kernels::detail::activation_row_at<mixprec::kernels::activation_kind::K>( \
      mixprec::isa, const float*, const float*, float*, std::size_t) noexcept;
#define MIXPREC_ACTIVATION_ROW_INSTANTIATIONS(E)                \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, sigmoid)              \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, silu)                 \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, gelu_tanh)            \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, gelu_erf)             \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, sigmoid_derivative)   \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, silu_derivative)      \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, gelu_tanh_derivative) \
  MIXPREC_ACTIVATION_ROW_INSTANTIATION(E, gelu_erf_derivative)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_ACTIVATION_ROW_INSTANTIATIONS(extern)
#endif
#endif
