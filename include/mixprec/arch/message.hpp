/// \file
/// \brief Internal API shared by every folder: `internal::concat(...)`, which builds a message (an
/// exception's `what()`) by appending its parts to one string. Every layer builds its messages with
/// it. Namespace `mixprec::internal` is the library's documented internal API (docs/kernels.md,
/// "Internal API"): for mixprec's own folders, not for users, and never a folder's private `detail`.
///
/// Why not `std::string` `operator+`: GCC 12 at -O1 and above inlines chains of it and reports false
/// `-Wrestrict`, `-Wstringop-overflow` and `-Warray-bounds` warnings inside libstdc++'s copies (GCC bug
/// 105329 and its relatives, fixed in GCC 13), which break -Werror builds of users' programs.
/// Appending does not trigger them. It belongs with `arch/`: a workaround for the toolchain, not
/// numerics.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

namespace mixprec::internal {

inline void append_part(std::string& s, std::string_view part) { s.append(part); }

inline void append_part(std::string& s, char c) { s.push_back(c); }

template <std::integral I>
requires(!std::same_as<I, bool> && !std::same_as<I, char>) void append_part(std::string& s, I value) {
  s.append(std::to_string(value));
}

/// The concatenation of `parts`: strings, string views, C strings, characters and integers (in decimal).
///
///     concat("matmul: a has ", 6, " elements")   // "matmul: a has 6 elements"
template <class... Parts>
[[nodiscard]] std::string concat(const Parts&... parts) {
  std::string s;
  (append_part(s, parts), ...);
  return s;
}

}  // namespace mixprec::internal
