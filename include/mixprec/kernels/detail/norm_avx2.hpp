/// \file
/// \brief Private, temporary: the 8-lane loads, stores, reductions and prefetch that softmax_avx2.hpp
/// and softmax_avx512.hpp still take from here. The norm rows that were here are norm.hpp's, written
/// once for every target; these helpers go when the softmax rows are written against simd/ops.hpp.
#pragma once

#include <cstddef>

#include "mixprec/arch/detail/target.hpp"
#include "mixprec/kernels/detail/simd/ops.hpp"

#if MIXPREC_X86_DISPATCH
#include <immintrin.h>

MIXPREC_BEGIN_ISA_NAMESPACE
namespace norm_avx2 {

/// 8 elements widened exactly to float (`simd_avx2::load`).
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load8(const T* p) noexcept {
  return simd_avx2::load<__m256>(p);
}

/// The first `n` (< 8) elements widened to float, the other lanes 0.
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline __m256 load_tail(const T* p, std::size_t n) noexcept {
  alignas(32) T buffer[8] = {};
  for (std::size_t i = 0; i < n; ++i) buffer[i] = p[i];
  return load8<T>(buffer);
}

/// 8 floats rounded to O (`round_to<O>`) and stored (`simd_avx2::store`).
template <class O>
MIXPREC_TARGET_AVX2_INLINE inline void store8(O* p, __m256 v) noexcept {
  simd_avx2::store<O>(p, v);
}

/// The first `n` (< 8) lanes of v rounded to O and stored.
template <class O>
MIXPREC_TARGET_AVX2_INLINE inline void store_tail(O* p, __m256 v, std::size_t n) noexcept {
  alignas(32) O buffer[8];
  store8<O>(buffer, v);
  for (std::size_t i = 0; i < n; ++i) p[i] = buffer[i];
}

/// Lanes [0, n) all ones, the others zero (n < 8).
MIXPREC_TARGET_AVX2_INLINE inline __m256 tail_mask(std::size_t n) noexcept { return simd_avx2::first_lanes<__m256>(n); }

/// The sum of the float64 lanes of a + b, and the largest of 8 floats (`simd_avx2::reduce_add`,
/// `reduce_max`).
MIXPREC_TARGET_AVX2_INLINE inline double horizontal_sum(__m256d a, __m256d b) noexcept {
  return simd_avx2::reduce_add(simd_avx2::add(a, b));
}
MIXPREC_TARGET_AVX2_INLINE inline float horizontal_max(__m256 v) noexcept { return simd_avx2::reduce_max(v); }

/// Prefetches the cache line holding element j of the next row (null: none); j steps by 8 from any
/// start, and exactly one j per 64-byte block of the row passes the test (T of at most 8 bytes).
template <class T>
MIXPREC_TARGET_AVX2_INLINE inline void prefetch_next(const void* next, std::size_t j) noexcept {
  if (next != nullptr && j % (64 / sizeof(T)) < 8) {
    _mm_prefetch(static_cast<const char*>(next) + j * sizeof(T), _MM_HINT_T0);
  }
}

}  // namespace norm_avx2
MIXPREC_END_ISA_NAMESPACE

#endif  // MIXPREC_X86_DISPATCH
