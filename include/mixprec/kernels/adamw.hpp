/// \file
/// \brief `kernels::adamw_update`: one AdamW step over a parameter's float32 (or float64) values and
/// moments, in PyTorch's order of operations (`torch/optim/adamw.py`, single-tensor path), vectorised
/// for float (AVX2 and AVX-512, chosen at run time) and split over the kernels' threads for large
/// tensors. `train::adamw` calls it for every parameter whose values it holds as float or double (the
/// parameter itself, or the float32 master weights of a 16-bit parameter).
///
/// Every element is independent and each lane does `adamw_element` operation for operation
/// (IEEE operations, each rounded once, none fused): the same bits at every level and thread count as
/// the scalar code of a build without FMA contraction (the default, no `-march`).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <stdexcept>

#include "mixprec/arch/isa.hpp"
#include "mixprec/arch/message.hpp"
#include "mixprec/kernels/adamw_element.hpp"
#include "mixprec/kernels/compiled.hpp"
#include "mixprec/kernels/detail/adamw_rows.hpp"
#include "mixprec/kernels/threads.hpp"

namespace mixprec::kernels {

/// Elements per task when `adamw_update` splits a tensor over threads (a multiple of 16 lanes), and
/// the fewest elements per thread that pay for a fork (about 10 µs of one core's work).
inline constexpr std::size_t adamw_chunk = std::size_t{1} << 14;

/// One AdamW step (PyTorch's single-tensor AdamW; docs/training.md, "Optimisers") over n elements:
/// for each i, `theta[i]`, `m[i]` and `v[i]` are updated from `grad[i]` by `adamw_element` with
/// the step's scalars `c` (decoupled weight decay on the pre-update value, lerp for the first moment,
/// bias corrections, eps after the square root). S is float (vectorised) or double.
/// \throws std::invalid_argument when grad, m or v do not hold as many elements as theta.
template <std::floating_point S>
void adamw_update(std::span<S> theta, std::span<const S> grad, std::span<S> m, std::span<S> v,
                  const adamw_coefficients<S>& c) {
  const std::size_t n = theta.size();
  if (grad.size() != n || m.size() != n || v.size() != n) {
    throw std::invalid_argument(internal::concat("kernels::adamw_update: theta has ", n, " elements, grad ",
                                                 grad.size(), ", m ", m.size(), " and v ", v.size(),
                                                 "; all four must have the same size"));
  }
  const auto run = [&](std::size_t begin, std::size_t count) {
    S* t = theta.data() + begin;
    const S* g = grad.data() + begin;
    S* mi = m.data() + begin;
    S* vi = v.data() + begin;
#if MIXPREC_X86_DISPATCH
    if constexpr (std::same_as<S, float>) {
      const isa level = active_isa();
      if (level >= isa::avx512) {
        ::mixprec::detail::simd_avx512::adamw::row(t, g, mi, vi, count, c);
        return;
      }
      if (level >= isa::avx2) {
        ::mixprec::detail::simd_avx2::adamw::row(t, g, mi, vi, count, c);
        return;
      }
    }
#endif
    for (std::size_t i = 0; i < count; ++i) t[i] = adamw_element(t[i], g[i], mi[i], vi[i], c);
  };
  const std::size_t threads = std::min(num_threads(), n / adamw_chunk);
  if (threads <= 1) {
    run(0, n);
    return;
  }
  const std::size_t tasks = (n + adamw_chunk - 1) / adamw_chunk;
  internal::parallel_for(tasks, threads, [&](std::size_t task) {
    const std::size_t begin = task * adamw_chunk;
    run(begin, std::min(adamw_chunk, n - begin));
  });
}

}  // namespace mixprec::kernels

// Types and `extern` cannot be parenthesised in a declaration.
// NOLINTBEGIN(bugprone-macro-parentheses)
/// The compiled library's AdamW step (kernels/compiled.hpp): float and double state.
#define MIXPREC_ADAMW_INSTANTIATION(E, S)                                                                         \
  E template void mixprec::kernels::adamw_update<S>(std::span<S>, std::span<const S>, std::span<S>, std::span<S>, \
                                                    const mixprec::kernels::adamw_coefficients<S>&);
#define MIXPREC_ADAMW_INSTANTIATIONS(E) MIXPREC_ADAMW_INSTANTIATION(E, float) MIXPREC_ADAMW_INSTANTIATION(E, double)
// NOLINTEND(bugprone-macro-parentheses)
#if MIXPREC_EXTERN_KERNELS
MIXPREC_ADAMW_INSTANTIATIONS(extern)
#endif
