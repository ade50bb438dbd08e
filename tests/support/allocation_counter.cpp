// The replacement global allocation functions behind mixprec_test::allocation_counter
// (allocation_counter.hpp). Linked once into each test executable that counts allocations.
#include "support/allocation_counter.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {

std::atomic<std::size_t> allocations{0};      // every allocation since the program started
std::atomic<std::size_t> largest_request{0};  // since the current counter's construction
std::atomic<std::size_t> live_bytes{0};       // of the blocks allocated in the current epoch
std::atomic<std::size_t> peak_bytes{0};       // the maximum of live_bytes in the current epoch
std::atomic<std::uint64_t> epoch{0};          // one per counter constructed

/// What precedes every block: its size and the epoch it was allocated in. 16 bytes, so that a block
/// after a 16-byte header keeps the default new alignment of x86-64 (__STDCPP_DEFAULT_NEW_ALIGNMENT__).
struct block_header {
  std::size_t size;
  std::uint64_t epoch;
};
constexpr std::size_t default_header = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
static_assert(sizeof(block_header) <= default_header);

void raise_to(std::atomic<std::size_t>& a, std::size_t v) noexcept {
  std::size_t seen = a.load();
  while (v > seen && !a.compare_exchange_weak(seen, v)) {
  }
}

/// Counts a block of `size` bytes at `base` (header included) and returns the address after the header.
void* record(void* base, std::size_t size, std::size_t header_bytes) {
  if (base == nullptr) throw std::bad_alloc();
  const std::uint64_t e = epoch.load();
  *static_cast<block_header*>(base) = block_header{size, e};
  allocations.fetch_add(1);
  raise_to(largest_request, size);
  raise_to(peak_bytes, live_bytes.fetch_add(size) + size);
  return static_cast<char*>(base) + header_bytes;
}

/// Uncounts the block `p` (`header_bytes` after its base) if it belongs to the current epoch, and frees it.
void release(void* p, std::size_t header_bytes) noexcept {
  if (p == nullptr) return;
  void* base = static_cast<char*>(p) - header_bytes;
  const block_header h = *static_cast<const block_header*>(base);
  if (h.epoch == epoch.load()) live_bytes.fetch_sub(h.size);
  std::free(base);
}

void* allocate(std::size_t size) {
  if (size > SIZE_MAX - default_header) throw std::bad_alloc();
  return record(std::malloc(size + default_header), size, default_header);
}

void* allocate(std::size_t size, std::align_val_t align) {
  const auto a = static_cast<std::size_t>(align);
  const std::size_t header = std::max(a, default_header);  // a multiple of a: both are powers of two
  if (size > SIZE_MAX - header - a) throw std::bad_alloc();
  // aligned_alloc wants a multiple of the alignment.
  return record(std::aligned_alloc(a, (size + header + a - 1) / a * a), size, header);
}

std::size_t header_for(std::align_val_t align) { return std::max(static_cast<std::size_t>(align), default_header); }

}  // namespace

namespace mixprec_test {

allocation_counter::allocation_counter() noexcept : start_(allocations.load()) {
  epoch.fetch_add(1);
  live_bytes.store(0);
  peak_bytes.store(0);
  largest_request.store(0);
}

std::size_t allocation_counter::count() const noexcept { return allocations.load() - start_; }
std::size_t allocation_counter::largest() const noexcept { return largest_request.load(); }
std::size_t allocation_counter::peak() const noexcept { return peak_bytes.load(); }

}  // namespace mixprec_test

// GCC 12 at -O2 inlines these replacements into their callers and then misreads the header in front
// of each block as an out-of-bounds access (-Warray-bounds) and std::free of a `new`ed pointer as a
// mismatch (-Wmismatched-new-delete): false positives for a replaced global new/delete pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* p) noexcept { release(p, default_header); }
void operator delete[](void* p) noexcept { release(p, default_header); }
void operator delete(void* p, std::size_t) noexcept { release(p, default_header); }
void operator delete[](void* p, std::size_t) noexcept { release(p, default_header); }
// The nothrow forms too (Catch2 registers its tests with them): a nothrow new left to the C++ library
// (or to a sanitizer's replacement) would be freed by the delete above, an allocator mismatch.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p, default_header); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p, default_header); }
// The over-aligned forms (`new` of a type aligned beyond 16, or with an explicit std::align_val_t, as
// nn::workspace allocates its blocks): a header of `align` bytes keeps the block aligned.
void* operator new(std::size_t size, std::align_val_t align) { return allocate(size, align); }
void* operator new[](std::size_t size, std::align_val_t align) { return allocate(size, align); }
void operator delete(void* p, std::align_val_t align) noexcept { release(p, header_for(align)); }
void operator delete[](void* p, std::align_val_t align) noexcept { release(p, header_for(align)); }
void operator delete(void* p, std::size_t, std::align_val_t align) noexcept { release(p, header_for(align)); }
void operator delete[](void* p, std::size_t, std::align_val_t align) noexcept { release(p, header_for(align)); }
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return allocate(size, align);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t& tag) noexcept {
  return operator new(size, align, tag);
}
void operator delete(void* p, std::align_val_t align, const std::nothrow_t&) noexcept { release(p, header_for(align)); }
void operator delete[](void* p, std::align_val_t align, const std::nothrow_t&) noexcept {
  release(p, header_for(align));
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
