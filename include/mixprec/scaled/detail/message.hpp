/// \file
/// \brief Private: messages of the scaled tensors: `internal::concat` (arch/message.hpp) and `number`, a
/// double in its shortest round-trip form (std::to_chars), which `concat` does not print.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <string>
#include <vector>

#include "mixprec/arch/message.hpp"

namespace mixprec::detail {

/// `x` as the shortest decimal that reads back as the same double ("0.1", "4194304", "nan", "inf").
inline std::string number(double x) {
  std::array<char, 32> buffer{};
  const auto [end, error] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), x);
  return error == std::errc{} ? std::string(buffer.data(), end) : std::string("?");
}

/// A shape as "[2, 3]" (a 0-d shape as "[]").
template <class Shape>
std::string shape_text(const Shape& shape) {
  std::string text = "[";
  std::size_t i = 0;
  for (const auto extent : shape) {
    text += internal::concat(i++ == 0 ? "" : ", ", static_cast<std::size_t>(extent));
  }
  return text + "]";
}

}  // namespace mixprec::detail
