/// \file
/// \brief Private, temporary: the 16-lane loads, stores, halves and prefetch that softmax_avx512.hpp
/// still takes from here. The layer_norm rows that were here are norm.hpp's, written once for every
/// target; these helpers go when the softmax rows are written against simd/ops.hpp.
#pragma once

#include <cstddef>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace norm_avx512 {

/// Lanes 0-7 and 8-15 of a float vector, 0-3 and 4-7 of a float64 one.
using simd_avx512::lower_half;
using simd_avx512::upper_half;

/// 16 elements widened exactly to float (`simd_avx512::load`).
template <class I>
MIXPREC_TARGET_AVX512_INLINE inline __m512 load16(const I* p) noexcept {
  return simd_avx512::load<__m512>(p);
}

/// 16 floats rounded to O (`round_to<O>`) and stored (`simd_avx512::store`).
template <class O>
MIXPREC_TARGET_AVX512_INLINE inline void store16(O* p, __m512 v) noexcept {
  simd_avx512::store<O>(p, v);
}

/// Prefetches the cache line of element j of the next row (null: none): j steps by 16, and exactly
/// one j per 64-byte block of the row passes the test (T of at most 4 bytes).
template <class T>
MIXPREC_TARGET_AVX512_INLINE inline void prefetch_next(const void* next, std::size_t j) noexcept {
  static_assert(64 / sizeof(T) >= 16, "one step of 16 elements must not span more than one cache line");
  if (next != nullptr && j % (64 / sizeof(T)) < 16) {
    _mm_prefetch(static_cast<const char*>(next) + j * sizeof(T), _MM_HINT_T0);
  }
}

/// `p + j`, or null when p is null.
template <class P>
[[nodiscard]] inline P* offset(P* p, std::size_t j) noexcept {
  return p != nullptr ? p + j : nullptr;
}

}  // namespace norm_avx512
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
