/// \file
/// \brief Test support: `element_bits(v)`, the bits of a 16- or 32-bit element (float, bfloat16,
/// float16), for exact comparisons that also match NaNs.
#pragma once

#include <bit>
#include <cstdint>

namespace test_support {

/// The bits of a 16- or 32-bit element (a float's pattern, or a small float's `bits()`).
template <class T>
std::uint32_t element_bits(T v) {
  if constexpr (sizeof(T) == 4) {
    return std::bit_cast<std::uint32_t>(v);
  } else {
    return v.bits();
  }
}

}  // namespace test_support
