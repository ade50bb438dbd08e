/// \file
/// \brief Private: `cache_aligned_vector<T>`, a std::vector whose elements start on a cache-line
/// boundary, for the GEMM's panels (kernels::packed_b and the per-thread packing scratch).
///
/// The micro-kernels read panel rows in 64-byte loads (float32 panels, bfloat16 pair panels, and the
/// 1-byte e4m3 panels on the VDPBF16PS path), from offsets that are multiples of 64 bytes from the
/// buffer's start; each load is one cache line only when the buffer starts on a line. A plain
/// std::vector need not: glibc serves blocks above its mmap threshold 16 bytes past a page, and
/// others at any 16-byte boundary. Streamed from memory on the VDPBF16PS path, the split loads slow
/// the 1-byte e4m3 panels markedly; in cache they cost nothing measurable (measured:
/// docs/kernels.md, "1-byte float8 panels").
#pragma once

#include <cstddef>
#include <limits>
#include <new>
#include <vector>

namespace mixprec::kernels::detail {

/// Bytes of a cache line on the x86 CPUs the kernels target (and of a zmm register): the alignment of
/// panel buffers, and the unit the macro-kernels prefetch b panels in (gemm_avx512::panels_ahead).
inline constexpr std::size_t cache_line_bytes = 64;

/// An allocator like std::allocator that aligns every block to `cache_line_bytes` (C++17 aligned
/// operator new).
template <class T>
struct cache_aligned_allocator {
  using value_type = T;

  cache_aligned_allocator() noexcept = default;
  /// Implicit, as std::allocator's: containers convert rebound allocators implicitly.
  template <class U>
  cache_aligned_allocator(const cache_aligned_allocator<U>& /*other*/) noexcept {}  // NOLINT(*-explicit-*)

  /// Room for n values of T on a cache-line boundary. \throws std::bad_array_new_length when n values
  /// take more bytes than a size_t counts, std::bad_alloc as operator new does.
  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{cache_line_bytes}));
  }
  void deallocate(T* p, std::size_t /*n*/) noexcept { ::operator delete (p, std::align_val_t{cache_line_bytes}); }

  template <class U>
  friend bool operator==(const cache_aligned_allocator& /*a*/, const cache_aligned_allocator<U>& /*b*/) noexcept {
    return true;
  }
};

/// A vector of T whose data() is aligned to `cache_line_bytes`.
template <class T>
using cache_aligned_vector = std::vector<T, cache_aligned_allocator<T>>;

}  // namespace mixprec::kernels::detail
