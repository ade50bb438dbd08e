/// \file
/// \brief Test support: replaces the global `operator new`/`operator delete` of the test executable
/// that includes this header, so a test can count heap allocations and see the largest request made
/// while a piece of code runs (`allocation_counter counter; ...; counter.count()`).
///
/// Include it in exactly ONE translation unit of a test executable: it defines the replacement
/// allocation functions, which may exist once per program ([replacement.functions]).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace mixprec_test {

namespace detail {
inline std::atomic<std::size_t> allocations{0};
inline std::atomic<std::size_t> largest_request{0};
}  // namespace detail

/// Counts the allocations made through `operator new` from its construction on (every thread).
class allocation_counter {
 public:
  allocation_counter() noexcept
      : start_(detail::allocations.load()), previous_largest_(detail::largest_request.exchange(0)) {}
  ~allocation_counter() {
    const std::size_t seen = detail::largest_request.load();
    detail::largest_request.store(std::max(seen, previous_largest_));
  }
  allocation_counter(const allocation_counter&) = delete;
  allocation_counter& operator=(const allocation_counter&) = delete;

  /// Allocations since construction.
  [[nodiscard]] std::size_t count() const noexcept { return detail::allocations.load() - start_; }
  /// The largest single request, in bytes, since construction.
  [[nodiscard]] std::size_t largest() const noexcept { return detail::largest_request.load(); }

 private:
  std::size_t start_;
  std::size_t previous_largest_;
};

namespace detail {
inline void count(std::size_t size) {
  allocations.fetch_add(1);
  std::size_t seen = largest_request.load();
  while (size > seen && !largest_request.compare_exchange_weak(seen, size)) {
  }
}

inline void* counted_allocate(std::size_t size) {
  count(size);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

/// The over-aligned forms (`new` of a type with alignment > alignof(std::max_align_t), or with an
/// explicit std::align_val_t, as nn::workspace allocates its blocks): counted as well.
inline void* counted_allocate(std::size_t size, std::align_val_t align) {
  count(size);
  const auto a = static_cast<std::size_t>(align);
  if (size > std::size_t(-1) - a) throw std::bad_alloc();
  const std::size_t rounded = (std::max<std::size_t>(size, 1) + a - 1) / a * a;  // a multiple, as aligned_alloc wants
  if (void* p = std::aligned_alloc(a, rounded)) return p;
  throw std::bad_alloc();
}
}  // namespace detail

}  // namespace mixprec_test

void* operator new(std::size_t size) { return mixprec_test::detail::counted_allocate(size); }
void* operator new[](std::size_t size) { return mixprec_test::detail::counted_allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (Catch2 registers its tests with them): a nothrow new left to the C++ library
// (or to a sanitizer's replacement) would be freed by the delete above, an allocator mismatch.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return mixprec_test::detail::counted_allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void* operator new(std::size_t size, std::align_val_t align) {
  return mixprec_test::detail::counted_allocate(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return mixprec_test::detail::counted_allocate(size, align);
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return mixprec_test::detail::counted_allocate(size, align);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t& tag) noexcept {
  return operator new(size, align, tag);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
