/// \file
/// \brief Private: what the row kernels of kernels/ share — the element types their SIMD bodies
/// convert (`simd_norm_types`), whether this CPU runs them (`simd_rows_active`, `avx512_rows_active`,
/// read from `mixprec::active_isa()` once per call) and the split of independent rows over the
/// kernels' threads (`for_row_blocks`).
#pragma once

#include <algorithm>
#include <cstddef>

#include "mixprec/arch/isa.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"
#include "mixprec/kernels/threads.hpp"

namespace mixprec::kernels::detail {

/// True when the SIMD rows take input T, compute C and output O (each float, bfloat16 or float16;
/// the statistics are then float32).
template <class T, class C, class O>
inline constexpr bool simd_norm_types =
#if MIXPREC_X86_DISPATCH
    mixprec::detail::simd_avx2::convertible<T>&& mixprec::detail::simd_avx2::convertible<C>&&
        mixprec::detail::simd_avx2::convertible<O>;
#else
    false;
#endif

/// Whether this CPU (under `MIXPREC_ISA` / `isa_limit_scope`) runs the SIMD rows (8 lanes at least).
/// Read once per call.
[[nodiscard]] inline bool simd_rows_active() noexcept {
#if MIXPREC_X86_DISPATCH
  return active_isa() >= isa::avx2;
#else
  return false;
#endif
}

/// Whether this CPU (under `MIXPREC_ISA` / `isa_limit_scope`) runs the 16-lane rows (layer_norm's of
/// norm.hpp, softmax_rows.hpp, batch_norm_columns.hpp). Read once per call.
[[nodiscard]] inline bool avx512_rows_active() noexcept {
#if MIXPREC_X86_DISPATCH
  return active_isa() >= isa::avx512;
#else
  return false;
#endif
}

/// Calls `f(begin, end)` on contiguous blocks of [0, rows) on up to `mixprec::num_threads()` threads;
/// work below about 64 Ki elements stays on the calling thread (a thread start costs more).
template <class F>
void for_row_blocks(std::size_t rows, std::size_t features, const F& f) {
  constexpr std::size_t min_elements_per_thread = std::size_t{1} << 16;
  const std::size_t by_size = std::max<std::size_t>(rows * features / min_elements_per_thread, 1);
  const std::size_t threads = std::min({mixprec::num_threads(), by_size, std::max<std::size_t>(rows, 1)});
  if (threads <= 1) {
    f(std::size_t{0}, rows);
    return;
  }
  const std::size_t per_task = (rows + threads - 1) / threads;
  internal::parallel_for(threads, threads, [&](std::size_t task) {
    const std::size_t begin = std::min(rows, task * per_task);
    f(begin, std::min(rows, begin + per_task));
  });
}

}  // namespace mixprec::kernels::detail
