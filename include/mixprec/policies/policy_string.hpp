/// \file
/// \brief `policy_from<"p=f32,c=bf16,o=f32">`: a compile-time policy named by a jmp policy string.
/// The string is parsed by the same constexpr grammar as `parse_policy` (policies/detail/policy_grammar.hpp);
/// a malformed string does not compile, and the static_assert says why.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/policies/detail/policy_grammar.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec {

/// A string literal usable as a template argument (a C++20 class-type non-type template parameter),
/// deduced from the literal: `policy_from<"bf16">` makes a `policy_string<5>`. N counts the
/// terminating '\0'.
template <std::size_t N>
struct policy_string {
  char chars[N]{};  ///< the characters, '\0'-terminated; public because a template argument must be structural

  /// Copies the literal `text`. Implicit by design: `policy_from<"bf16">` converts the literal.
  consteval policy_string(const char (&text)[N]) noexcept { std::copy_n(text, N, chars); }

  /// The characters without the terminating '\0'.
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
};

namespace detail {

/// Instantiated only for a malformed string: one static_assert per error, so the diagnostic is one
/// sentence, and the compilers' "in instantiation of policy_string_error_at<6, unknown_key>" note
/// gives the 0-based character offset of the bad token.
template <std::size_t Position, policy_parse_errc Error>
struct policy_string_error_at {
  static_assert(Error != policy_parse_errc::empty_input,
                "The policy string is empty: write a dtype such as \"f32\", or key=value parts such as "
                "\"p=f32,c=bf16,o=f32\".");
  static_assert(Error != policy_parse_errc::empty_part,
                "The policy string has an empty part (a doubled, leading or trailing comma): remove the extra comma.");
  static_assert(Error != policy_parse_errc::missing_equals,
                "The policy string has several parts and one of them has no '=': write each part as key=value, "
                "as in \"p=f32,c=bf16\".");
  static_assert(Error != policy_parse_errc::missing_key,
                "The policy string has a part with nothing before '=': write p=, c= or o= (or params=, compute=, "
                "output=).");
  static_assert(Error != policy_parse_errc::unknown_key,
                "The policy string has an unknown key: the keys are p (or params), c (or compute) and o (or output).");
  static_assert(Error != policy_parse_errc::repeated_key,
                "The policy string sets the same role twice (e.g. p= and params=): give each of p, c and o at most "
                "once.");
  static_assert(Error != policy_parse_errc::missing_value,
                "The policy string has a key with nothing after '=': write a dtype such as f32, bf16, f16 or f64.");
  static_assert(Error != policy_parse_errc::extra_equals,
                "The policy string has a part with two '=': write one key=value per part and separate parts with "
                "commas.");
  static_assert(Error != policy_parse_errc::unknown_dtype,
                "The policy string names an unknown dtype: write f32 (or float32, full), bf16 (bfloat16), "
                "f16 (float16) or f64 (float64).");
  static_assert(Error != policy_parse_errc::platform_dependent_dtype,
                "The policy string says \"half\", which jmp resolves by platform (bfloat16 on TPU, float16 "
                "elsewhere): write bf16 or f16.");
  static_assert(Error != policy_parse_errc::not_floating_dtype,
                "The policy string names a dtype that is not floating (e.g. int8 or complex64): a policy casts "
                "floating values only; write f32, bf16, f16 or f64.");
  static_assert(Error != policy_parse_errc::weak_dtype,
                "The policy string names float*, JAX's weakly typed float, which is not a storage type: write f32, "
                "bf16, f16 or f64.");
  static_assert(Error != policy_parse_errc::small_float_dtype,
                "The policy string names a float8, float6 or float4 dtype, which no policy "
                "holds: " MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON);

  // True, so the caller's static_assert adds no second error: the one above is the diagnostic.
  static constexpr bool value = true;
};

/// Parses `S` at compile time with the grammar `parse_policy` uses.
template <policy_string S>
struct policy_from_parse {
  static constexpr policy_grammar_result result = parse_policy_grammar(S.view());

  // Instantiates policy_string_error_at (whose static_asserts fire) only for a malformed string.
  static_assert(
      std::conditional_t<result.ok, std::true_type, policy_string_error_at<result.position, result.error>>::value);

  using type = policy<type_of_t<result.param>, type_of_t<result.compute>, type_of_t<result.output>>;
};

}  // namespace detail

/// The compile-time policy named by the jmp policy string `S`, parsed at compile time with the same
/// grammar as `parse_policy` (see there, and docs/policies.md): `policy_from<"p=f32,c=bf16,o=f32">` is
/// `mixed_bfloat16`, `policy_from<"c=f16">` is `policy<float, float16, float16>`, `policy_from<"bf16">`
/// is `half_bfloat16`.
///
/// Errors: a malformed string does not compile; a static_assert says what is wrong and how to fix it.
/// A float8, float6 or float4 dtype name (`policy_from<"c=float8_e4m3fn">`) is refused as `parse_policy`
/// refuses it: no policy holds one (see `policy_element`).
template <policy_string S>
using policy_from = typename detail::policy_from_parse<S>::type;

}  // namespace mixprec
