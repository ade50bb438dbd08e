/// \file
/// \brief Private: `concat(...)` for building exception messages by appending to one string.
///
/// Chains of `std::string` `operator+` with string literals trigger a false `-Wrestrict` (and
/// `-Wstringop-overflow`) inside libstdc++ when GCC 12 inlines them at -O2/-O3, which breaks user builds
/// with -Werror; appending does not. Light: no Eigen, no xtensor.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

namespace mixprec::kernels::detail {

inline void append_part(std::string& s, std::string_view part) { s.append(part); }

template <std::integral I>
requires(!std::same_as<I, bool> && !std::same_as<I, char>) void append_part(std::string& s, I value) {
  s.append(std::to_string(value));
}

/// The concatenation of `parts`: strings, string views, C strings, and integers (in decimal).
///
///     concat("matmul: a has ", 6, " elements")   // "matmul: a has 6 elements"
template <class... Parts>
[[nodiscard]] std::string concat(const Parts&... parts) {
  std::string s;
  (append_part(s, parts), ...);
  return s;
}

}  // namespace mixprec::kernels::detail
