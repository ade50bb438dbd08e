/// \file
/// \brief Private: how the element-wise sigmoid, SiLU and tanh-GELU on float32 values reach their
/// vectorised kernels — the run-time choice by `mixprec::active_isa()`, read once per call: the
/// 16-lane kernel (activation_avx512.hpp) from the avx512 level up, the 8-lane one (activation_avx2.hpp)
/// at avx2. The two give the same bits; the portable level keeps the scalar formulas of
/// kernels/activations.hpp (`std::exp`).
#pragma once

#include <cstddef>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/detail/activation_avx2.hpp"
#include "mixprec/kernels/detail/activation_avx512.hpp"
#include "mixprec/kernels/detail/activation_kind.hpp"

namespace mixprec::kernels::detail {

/// y[i] = act(x[i]) (times gate[i] when `gate` is not null) for i < n, in float32, through the
/// level's kernel; returns false, having written nothing, when the level in use is portable (the caller then
/// evaluates the scalar formula). y may be x or gate (element-wise, in place).
inline bool activation_rows_simd(activation_kind kind, const float* x, const float* gate, float* y,
                                 std::size_t n) noexcept {
#if MIXPREC_X86_DISPATCH
  const isa level = active_isa();
  if (level < isa::avx2) return false;
  namespace a2 = mixprec::detail::activation_avx2;
  namespace a5 = mixprec::detail::activation_avx512;
  const bool wide = level >= isa::avx512;
  switch (kind) {
    case activation_kind::sigmoid:
      wide ? a5::activation_row<activation_kind::sigmoid>(x, gate, y, n)
           : a2::activation_row<activation_kind::sigmoid>(x, gate, y, n);
      break;
    case activation_kind::silu:
      wide ? a5::activation_row<activation_kind::silu>(x, gate, y, n)
           : a2::activation_row<activation_kind::silu>(x, gate, y, n);
      break;
    case activation_kind::gelu_tanh:
      wide ? a5::activation_row<activation_kind::gelu_tanh>(x, gate, y, n)
           : a2::activation_row<activation_kind::gelu_tanh>(x, gate, y, n);
      break;
  }
  return true;
#else
  static_cast<void>(kind), static_cast<void>(x), static_cast<void>(gate), static_cast<void>(y), static_cast<void>(n);
  return false;
#endif
}

}  // namespace mixprec::kernels::detail
