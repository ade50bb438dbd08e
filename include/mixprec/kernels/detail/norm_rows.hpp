/// \file
/// \brief Private: how `nn::layer_norm` and `nn::rms_norm` reach their row kernels — the run-time
/// choice between the SIMD rows of norm.hpp (layer_norm at 16 lanes on the avx512 levels, at 8 on
/// avx2; rms_norm at 8 on both) and the layers' portable rows, and the split of the rows over the
/// kernels' threads (`mixprec::num_threads`). Rows are independent, so neither the split nor the
/// thread count changes a bit of a result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#if __has_include(<unistd.h>)
#include <unistd.h>  // sysconf
#endif

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/norm.hpp"
#include "mixprec/kernels/detail/row_blocks.hpp"

namespace mixprec::kernels::detail {

/// The last-level cache one core can fill, in bytes: `sysconf(_SC_LEVEL3_CACHE_SIZE)` where the C
/// library reports it, capped at 32 MiB (a Zen 4 CCD's L3; virtual machines often report the host's
/// total: docs/performance.md, "Norm rows: measurements behind the design"); 32 MiB when unknown.
/// Read once.
[[nodiscard]] inline std::size_t last_level_cache_bytes() noexcept {
  static const std::size_t bytes = [] {
    constexpr std::size_t cap = std::size_t{32} << 20;
    long reported = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    reported = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return reported > 0 ? std::min(static_cast<std::size_t>(reported), cap) : cap;
  }();
  return bytes;
}

/// Whether a kernel writes an output of `bytes` with non-temporal stores: when it is larger than the
/// last-level cache, which it would only flush (glibc's memcpy makes the same choice above 3/4 of it).
[[nodiscard]] inline bool streaming_output(std::size_t bytes) noexcept { return bytes > last_level_cache_bytes(); }

/// How a norm call runs its rows: the SIMD rows or not, at which width, and with non-temporal stores or not.
struct row_path {
  bool simd;       ///< `simd_rows_active()` and the types take the SIMD rows
  bool wide;       ///< `avx512_rows_active()`: layer_norm rows at 16 lanes (`simd_avx512::norm`)
  bool streaming;  ///< `streaming_output` of the whole output (SIMD rows only)
};

/// The `row_path` of a call writing `output_bytes` with types that take the SIMD rows when `SimdTypes`.
template <bool SimdTypes>
[[nodiscard]] row_path choose_row_path(std::size_t output_bytes) noexcept {
  const bool simd = SimdTypes && simd_rows_active();
  return {simd, simd && avx512_rows_active(), simd && streaming_output(output_bytes)};
}

/// Orders the calling thread's non-temporal stores before its later stores (the end of a row block).
inline void store_fence() noexcept {
#if MIXPREC_X86_DISPATCH
  mixprec::detail::simd_avx2::norm::store_fence();
#endif
}

/// One `nn::layer_norm` row through the SIMD kernel of `path` (`simd_avx512::norm::layer_norm_row` for
/// `wide` paths, else `simd_avx2::norm::layer_norm_row`); false when the kernel declines the row (not
/// finite, or needs rescaling) or is not compiled: the caller takes its portable row. `next` (the following row, or
/// null) is prefetched; `path.streaming`: non-temporal stores of y (the caller then calls `store_fence` after its last
/// row).
template <class T, class C, class O>
bool layer_norm_row_simd(const T* x, std::size_t n, float eps, const float* scale, const float* bias, O* y, float* xhat,
                         float* rstd, const T* next, row_path path) noexcept {
#if MIXPREC_X86_DISPATCH
  if constexpr (simd_norm_types<T, C, O>) {
    using mixprec::detail::store_kind;
    if (path.wide) {
      namespace n16 = mixprec::detail::simd_avx512::norm;
      return path.streaming
                 ? n16::layer_norm_row<T, C, O, store_kind::streaming>(x, n, eps, scale, bias, y, xhat, rstd, next)
                 : n16::layer_norm_row<T, C, O, store_kind::cached>(x, n, eps, scale, bias, y, xhat, rstd, next);
    }
    namespace n8 = mixprec::detail::simd_avx2::norm;
    return path.streaming
               ? n8::layer_norm_row<T, C, O, store_kind::streaming>(x, n, eps, scale, bias, y, xhat, rstd, next)
               : n8::layer_norm_row<T, C, O, store_kind::cached>(x, n, eps, scale, bias, y, xhat, rstd, next);
  }
#endif
  static_cast<void>(x), static_cast<void>(n), static_cast<void>(eps), static_cast<void>(scale);
  static_cast<void>(bias), static_cast<void>(y), static_cast<void>(xhat), static_cast<void>(rstd);
  static_cast<void>(next), static_cast<void>(path);
  return false;
}

/// One plain `nn::rms_norm` row through the 8-lane kernel on every level (norm.hpp: the rms_norm rows
/// are compiled at 8 lanes only); false as `layer_norm_row_simd`.
template <class T, class C, class O>
bool rms_norm_row_simd(const T* x, std::size_t n, float eps, const float* scale, O* y, float* xhat, float* rstd,
                       const T* next, row_path path) noexcept {
#if MIXPREC_X86_DISPATCH
  if constexpr (simd_norm_types<T, C, O>) {
    using mixprec::detail::store_kind;
    namespace n8 = mixprec::detail::simd_avx2::norm;
    return path.streaming ? n8::rms_norm_row<T, C, O, store_kind::streaming>(x, n, eps, scale, y, xhat, rstd, next)
                          : n8::rms_norm_row<T, C, O, store_kind::cached>(x, n, eps, scale, y, xhat, rstd, next);
  }
#endif
  static_cast<void>(x), static_cast<void>(n), static_cast<void>(eps), static_cast<void>(scale);
  static_cast<void>(y), static_cast<void>(xhat), static_cast<void>(rstd);
  static_cast<void>(next), static_cast<void>(path);
  return false;
}

/// One fused `nn::rms_norm` row through the 8-lane kernel on every level; false (with the unscaled
/// stream written) as `layer_norm_row_simd`.
template <class T, class O>
bool rms_norm_fused_row_simd(const T* x, const float* residual, std::size_t n, float eps, const float* scale, O* y,
                             float* stream, float* xhat, float* rstd, const float* stream_factor, const T* next_x,
                             const float* next_residual, row_path path) noexcept {
#if MIXPREC_X86_DISPATCH
  if constexpr (simd_norm_types<T, float, O>) {
    using mixprec::detail::store_kind;
    namespace n8 = mixprec::detail::simd_avx2::norm;
    return path.streaming
               ? n8::rms_norm_fused_row<T, O, store_kind::streaming>(x, residual, n, eps, scale, y, stream, xhat, rstd,
                                                                     stream_factor, next_x, next_residual)
               : n8::rms_norm_fused_row<T, O, store_kind::cached>(x, residual, n, eps, scale, y, stream, xhat, rstd,
                                                                  stream_factor, next_x, next_residual);
  }
#endif
  static_cast<void>(x), static_cast<void>(residual), static_cast<void>(n), static_cast<void>(eps);
  static_cast<void>(scale), static_cast<void>(y), static_cast<void>(stream), static_cast<void>(xhat);
  static_cast<void>(rstd), static_cast<void>(stream_factor), static_cast<void>(path);
  static_cast<void>(next_x), static_cast<void>(next_residual);
  return false;
}

}  // namespace mixprec::kernels::detail

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's SIMD norm rows (kernels/compiled.hpp): layer_norm and rms_norm rows in
/// float, bfloat16 and float16 compute with x and y in float32 or the compute type; the fused rms_norm
/// rows for x and y in float32, bfloat16 or float16.
#define MIXPREC_NORM_ROW_INSTANTIATION(E, C, T, O)                                                                     \
  E template bool mixprec::kernels::detail::layer_norm_row_simd<T, C, O>(const T*, std::size_t, float, const float*,   \
                                                                         const float*, O*, float*, float*, const T*,   \
                                                                         mixprec::kernels::detail::row_path) noexcept; \
  E template bool mixprec::kernels::detail::rms_norm_row_simd<T, C, O>(const T*, std::size_t, float, const float*, O*, \
                                                                       float*, float*, const T*,                       \
                                                                       mixprec::kernels::detail::row_path) noexcept;
#define MIXPREC_FUSED_NORM_ROW_INSTANTIATION(E, T, O)                                                               \
  E template bool mixprec::kernels::detail::rms_norm_fused_row_simd<T, O>(                                          \
      const T*, const float*, std::size_t, float, const float*, O*, float*, float*, float*, const float*, const T*, \
      const float*, mixprec::kernels::detail::row_path) noexcept;
#define MIXPREC_FUSED_NORM_ROWS_FOR(E, T)                         \
  MIXPREC_FUSED_NORM_ROW_INSTANTIATION(E, T, float)               \
  MIXPREC_FUSED_NORM_ROW_INSTANTIATION(E, T, ::mixprec::bfloat16) \
  MIXPREC_FUSED_NORM_ROW_INSTANTIATION(E, T, ::mixprec::float16)
#define MIXPREC_NORM_ROW_INSTANTIATIONS(E)                                       \
  MIXPREC_NORM_ROW_INSTANTIATION(E, float, float, float)                         \
  MIXPREC_FOR_OPERANDS_2(MIXPREC_NORM_ROW_INSTANTIATION, E, ::mixprec::bfloat16) \
  MIXPREC_FOR_OPERANDS_2(MIXPREC_NORM_ROW_INSTANTIATION, E, ::mixprec::float16)  \
  MIXPREC_FOR_ROW_TYPES(MIXPREC_FUSED_NORM_ROWS_FOR, E)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_NORM_ROW_INSTANTIATIONS(extern)
#endif
