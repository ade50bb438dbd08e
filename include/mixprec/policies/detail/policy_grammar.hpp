/// \file
/// \brief The policy-string grammar of jmp's `get_policy`, written once as a constexpr parser. Both
/// `parse_policy` (run time, throws) and `policy_from<"...">` (compile time, static_assert) call
/// `detail::parse_policy_grammar`; neither has a grammar of its own.
///
/// Source: jmp `jmp/_src/policy.py` (`get_policy`, `parse_dtype`, `dtype_to_names`), google-deepmind/jmp
/// commit 7b3a5f784eca7e1f0f9d231ef8c9dae181f01f16. Differences from jmp, all stricter or explicit:
/// spaces around tokens are allowed; empty parts, repeated keys, a second '=' and "half" are errors
/// (jmp fails with a tuple-unpacking error, keeps the last value, or asks the device); other dtype
/// names `parse_dtype` knows are recognised so the error can say what they are (not floating, weak, or
/// a float8/float6/float4 type, which no policy holds: policies/policy.hpp), never accepted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec {

/// Why a policy string was rejected (`policy_parse_error::code()`). The parser reports the first
/// problem in this order: empty input, then any empty part, then each part left to right (its '=',
/// its key, then its value).
enum class policy_parse_errc : std::uint8_t {
  empty_input,               ///< "" or only spaces
  empty_part,                ///< "p=f32,,c=bf16", ",p=f32", "p=f32,": nothing between two commas
  missing_equals,            ///< "p=f32,bf16": a part of a policy with several parts has no '='
  missing_key,               ///< "=bf16": nothing before '='
  unknown_key,               ///< "q=bf16": key is not p, params, c, compute, o or output
  repeated_key,              ///< "p=f32,params=bf16": a role set twice (jmp keeps the last; mixprec rejects)
  missing_value,             ///< "p=": nothing after '='
  extra_equals,              ///< "p=f32=bf16": a second '=' in one part
  unknown_dtype,             ///< "c=f8": not a dtype name
  platform_dependent_dtype,  ///< "half": jmp picks bfloat16 on TPU and float16 elsewhere
  not_floating_dtype,        ///< "c=int8", "c=complex64": a dtype, but not a real floating one
  weak_dtype,                ///< "c=float*": JAX's weakly typed float is not a storage type
  small_float_dtype,         ///< "c=float8_e4m3fn": a float8/float6/float4 dtype, which no policy holds
};

namespace detail {

/// jmp's `dtype_to_names`, grouped by dtype; the first name of each dtype is mixprec's canonical
/// spelling (jmp's `Policy.__str__` writes "full" for float32; mixprec writes "f32").
inline constexpr std::array<std::pair<std::string_view, dtype>, 9> policy_dtype_names{{
    {"f32", dtype::float32},
    {"float32", dtype::float32},
    {"full", dtype::float32},
    {"bf16", dtype::bfloat16},
    {"bfloat16", dtype::bfloat16},
    {"f16", dtype::float16},
    {"float16", dtype::float16},
    {"f64", dtype::float64},
    {"float64", dtype::float64},
}};

/// jmp's keys (`key == "p" or key == "params"`, ...); the first of each role is canonical.
inline constexpr std::array<std::pair<std::string_view, semantic_dtype>, 6> policy_keys{{
    {"p", semantic_dtype::param},
    {"params", semantic_dtype::param},
    {"c", semantic_dtype::compute},
    {"compute", semantic_dtype::compute},
    {"o", semantic_dtype::output},
    {"output", semantic_dtype::output},
}};

/// jmp's `parse_dtype("half")` answers with the device's half type; mixprec has no device.
inline constexpr std::string_view policy_platform_dtype_name = "half";

/// The canonical policy-string spelling of `d`: "f32", "bf16", "f16", "f64", else `name(d)`.
[[nodiscard]] constexpr std::string_view policy_dtype_name(dtype d) noexcept {
  for (const auto& [text, named] : policy_dtype_names) {
    if (named == d) return text;
  }
  return name(d);
}

/// The canonical key of a role: "p", "c", "o".
[[nodiscard]] constexpr std::string_view policy_key_name(semantic_dtype role) noexcept {
  for (const auto& [text, named] : policy_keys) {
    if (named == role) return text;
  }
  return {};
}

/// Outcome of `parse_policy_grammar`. On success `ok` is true and the three dtypes are set (with
/// jmp's defaults applied). On failure `error` says why and [`position`, `position + size`) is the
/// offending token (size 0: the place where a token is missing); `part_*` is the comma-separated part
/// it is in, trimmed; for `repeated_key`, `previous_*` is the key that first set the role. On failure
/// the dtypes hold float32, so a caller that forgets to check gets no uninitialised value.
struct policy_grammar_result {
  dtype param = dtype::float32;
  dtype compute = dtype::float32;
  dtype output = dtype::float32;
  bool ok = false;
  policy_parse_errc error = policy_parse_errc::empty_input;
  std::size_t position = 0;
  std::size_t size = 0;
  std::size_t part_position = 0;
  std::size_t part_size = 0;
  std::size_t previous_position = 0;
  std::size_t previous_size = 0;
};

/// Python's `str.isspace` for ASCII: space, \t, \n, \v, \f, \r.
[[nodiscard]] constexpr bool is_policy_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/// A half-open range [begin, end) of offsets into the input.
struct policy_text_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
  [[nodiscard]] constexpr bool empty() const noexcept { return begin == end; }
};

/// `r` without leading and trailing spaces.
[[nodiscard]] constexpr policy_text_range policy_trim(std::string_view text, policy_text_range r) noexcept {
  while (r.begin < r.end && is_policy_space(text[r.begin])) ++r.begin;
  while (r.end > r.begin && is_policy_space(text[r.end - 1])) --r.end;
  return r;
}

/// Offset of the first `c` in [r.begin, r.end), or r.end.
[[nodiscard]] constexpr std::size_t policy_find(std::string_view text, policy_text_range r, char c) noexcept {
  for (std::size_t i = r.begin; i < r.end; ++i) {
    if (text[i] == c) return i;
  }
  return r.end;
}

/// A parsed dtype token, or the reason it is not one.
struct policy_dtype_token {
  dtype value = dtype::float32;
  bool ok = false;
  policy_parse_errc error = policy_parse_errc::unknown_dtype;
};

/// jmp's `parse_dtype`; every other name `mixprec::parse_dtype` knows is an error that says what it is.
/// So the dtypes accepted are exactly f32, f64, bf16 and f16: the ones `visit` dispatches.
[[nodiscard]] constexpr policy_dtype_token parse_policy_dtype(std::string_view token) noexcept {
  for (const auto& [text, d] : policy_dtype_names) {
    if (text == token) return {d, true, {}};
  }
  if (token == policy_platform_dtype_name) return {dtype::float32, false, policy_parse_errc::platform_dependent_dtype};
  const std::optional<dtype> d = parse_dtype(token);
  if (!d) return {dtype::float32, false, policy_parse_errc::unknown_dtype};
  if (!is_floating(*d)) return {dtype::float32, false, policy_parse_errc::not_floating_dtype};
  if (is_weak(*d)) return {dtype::float32, false, policy_parse_errc::weak_dtype};
  if (is_small_float(*d)) return {dtype::float32, false, policy_parse_errc::small_float_dtype};
  return {*d, true, {}};
}

/// The failure result for `error` at `token` within `part`.
[[nodiscard]] constexpr policy_grammar_result policy_grammar_failure(policy_parse_errc error, policy_text_range token,
                                                                     policy_text_range part) noexcept {
  policy_grammar_result r;
  r.error = error;
  r.position = token.begin;
  r.size = token.size();
  r.part_position = part.begin;
  r.part_size = part.size();
  return r;
}

/// Parses jmp's policy grammar:
///
///     policy := dtype | part ("," part)*        (a lone dtype sets all three roles)
///     part   := key "=" dtype
///     key    := "p" | "params" | "c" | "compute" | "o" | "output"
///     dtype  := "f32" | "float32" | "full" | "bf16" | "bfloat16" | "f16" | "float16" | "f64" | "float64"
///
/// with optional spaces around every token. Any other dtype name is an error: `unknown_dtype`, or for a
/// name `parse_dtype` knows `not_floating_dtype`, `weak_dtype` or `small_float_dtype` (a float8, float6
/// or float4 type, which no policy holds: policy.hpp). Unset roles default as in jmp: param float32,
/// compute = param, output = compute. Never throws; see `policy_grammar_result`.
[[nodiscard]] constexpr policy_grammar_result parse_policy_grammar(std::string_view text) noexcept {
  const policy_text_range all = policy_trim(text, {0, text.size()});
  if (all.empty()) return policy_grammar_failure(policy_parse_errc::empty_input, {0, 0}, {0, 0});

  const bool single_part = policy_find(text, {0, text.size()}, ',') == text.size();
  if (single_part && policy_find(text, all, '=') == all.end) {
    // "bf16": all three roles.
    const policy_dtype_token d = parse_policy_dtype(text.substr(all.begin, all.size()));
    if (!d.ok) return policy_grammar_failure(d.error, all, all);
    policy_grammar_result r;
    r.param = r.compute = r.output = d.value;
    r.ok = true;
    return r;
  }

  // The string's shape first: no empty part anywhere ("p=f32,,c=bf16", ",p=f32", "f32,").
  for (std::size_t begin = 0;;) {
    const std::size_t comma = policy_find(text, {begin, text.size()}, ',');
    if (policy_trim(text, {begin, comma}).empty()) {
      return policy_grammar_failure(policy_parse_errc::empty_part, {begin, begin}, {begin, begin});
    }
    if (comma == text.size()) break;
    begin = comma + 1;
  }

  // Then each key=value part, left to right.
  std::array<std::optional<dtype>, 3> roles{};
  std::array<policy_text_range, 3> role_keys{};
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = policy_find(text, {begin, text.size()}, ',');
    const policy_text_range part = policy_trim(text, {begin, comma});

    const std::size_t equals = policy_find(text, part, '=');
    if (equals == part.end) return policy_grammar_failure(policy_parse_errc::missing_equals, part, part);

    const policy_text_range key = policy_trim(text, {part.begin, equals});
    if (key.empty()) return policy_grammar_failure(policy_parse_errc::missing_key, {equals, equals}, part);
    const std::string_view key_text = text.substr(key.begin, key.size());
    std::optional<semantic_dtype> role;
    for (const auto& [name_text, named] : policy_keys) {
      if (name_text == key_text) role = named;
    }
    if (!role) return policy_grammar_failure(policy_parse_errc::unknown_key, key, part);
    const auto index = static_cast<std::size_t>(*role);
    if (roles[index]) {
      policy_grammar_result r = policy_grammar_failure(policy_parse_errc::repeated_key, key, part);
      r.previous_position = role_keys[index].begin;
      r.previous_size = role_keys[index].size();
      return r;
    }

    const policy_text_range value = policy_trim(text, {equals + 1, part.end});
    if (value.empty()) return policy_grammar_failure(policy_parse_errc::missing_value, {equals + 1, equals + 1}, part);
    const std::size_t second_equals = policy_find(text, value, '=');
    if (second_equals != value.end) {
      return policy_grammar_failure(policy_parse_errc::extra_equals, {second_equals, second_equals + 1}, part);
    }
    const policy_dtype_token d = parse_policy_dtype(text.substr(value.begin, value.size()));
    if (!d.ok) return policy_grammar_failure(d.error, value, part);

    roles[index] = d.value;
    role_keys[index] = key;
    if (comma == text.size()) break;
    begin = comma + 1;
  }

  policy_grammar_result r;
  r.param = roles[0].value_or(dtype::float32);
  r.compute = roles[1].value_or(r.param);
  r.output = roles[2].value_or(r.compute);
  r.ok = true;
  return r;
}

}  // namespace detail
}  // namespace mixprec
