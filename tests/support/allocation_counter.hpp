/// \file
/// \brief Test support: counts the heap allocations, the largest request and the peak of live bytes made
/// while a piece of code runs (`allocation_counter counter; ...; counter.count()`).
///
/// The counting is done by replacement global `operator new`/`operator delete` (every form: sized,
/// array, over-aligned, nothrow), defined once in allocation_counter.cpp. A test executable whose sources
/// include this header links that file once (tests/CMakeLists.txt adds it); every test of that
/// executable then allocates through it. Each block carries a 16-byte (or `align`-byte) header with its
/// size, so that a free knows what it returns. Counts are atomic: allocations of every thread count.
#pragma once

#include <cstddef>

namespace mixprec_test {

/// Measures the allocations made through `operator new` from its construction on (every thread).
/// One counter at a time: constructing one restarts `largest()` and `peak()`.
class allocation_counter {
 public:
  allocation_counter() noexcept;
  allocation_counter(const allocation_counter&) = delete;
  allocation_counter& operator=(const allocation_counter&) = delete;
  ~allocation_counter() = default;

  /// Allocations since construction.
  [[nodiscard]] std::size_t count() const noexcept;
  /// The largest single request, in bytes, since construction.
  [[nodiscard]] std::size_t largest() const noexcept;
  /// The most bytes live at once among the blocks allocated since construction (blocks allocated
  /// before it do not count, even when freed meanwhile).
  [[nodiscard]] std::size_t peak() const noexcept;

 private:
  std::size_t start_;
};

}  // namespace mixprec_test
