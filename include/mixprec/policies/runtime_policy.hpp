/// \file
/// \brief Run-time policies: `runtime_policy` (three dtypes), `parse_policy` (jmp's `get_policy`
/// grammar, strict), `to_string` / `operator<<` / `std::formatter`, `resolve`, `to_runtime_policy`,
/// and `visit`, which turns a run-time policy into the matching compile-time `policy<...>` so a
/// configuration string can select a templated code path: `visit<P1, P2, ...>(p, f)` over the listed
/// policies only (cheap to compile), or `visit(p, f)` over all 64 policies of f32/f64/bf16/f16.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/arch/message.hpp"
#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/policies/detail/policy_grammar.hpp"
#include "mixprec/policies/policy.hpp"

namespace mixprec {

/// A mixed-precision policy chosen at run time (jmp's `Policy`): the dtype parameters are stored in,
/// the dtype compute happens in, and the dtype outputs are returned in. Default: all float32.
/// `parse_policy` only makes policies whose three dtypes are float32, float64, bfloat16 or float16 (no
/// float8, float6 or float4 type: see `policy_element`); `to_string`, `visit` and `policy_scope` reject
/// anything else. There is no run-time `promote` (jmp's grammar has none).
struct runtime_policy {
  dtype param = dtype::float32;    ///< storage dtype of weights
  dtype compute = dtype::float32;  ///< dtype activations and weights are cast to before a kernel
  dtype output = dtype::float32;   ///< dtype returned to the caller

  /// Equal when all three dtypes are equal.
  friend constexpr bool operator==(const runtime_policy&, const runtime_policy&) noexcept = default;
};

/// Thrown by `parse_policy` for a malformed policy string: a `policy_error` (so a std::invalid_argument)
/// that also says where. `what()` names the bad token, its 0-based character offset in the input, the
/// input, and how to fix it; `code()`, `position()` and `token()` give the same facts to code.
class policy_parse_error : public policy_error {
 public:
  /// `message` is the full `what()` text; `token` is the offending text (empty when a token is
  /// missing, then `position` is where it was expected).
  policy_parse_error(policy_parse_errc code, std::size_t position, std::string token, const std::string& message)
      : policy_error(message), code_(code), position_(position), token_(std::move(token)) {}

  /// Why the string was rejected.
  [[nodiscard]] policy_parse_errc code() const noexcept { return code_; }
  /// 0-based character offset of the offending token in the input.
  [[nodiscard]] std::size_t position() const noexcept { return position_; }
  /// The offending token ("" when something is missing).
  [[nodiscard]] const std::string& token() const noexcept { return token_; }

 private:
  policy_parse_errc code_;
  std::size_t position_;
  std::string token_;
};

namespace detail {

/// "the param dtype" etc., for messages.
[[nodiscard]] constexpr std::string_view role_name(semantic_dtype role) noexcept {
  switch (role) {
    case semantic_dtype::param: return "param";
    case semantic_dtype::compute: return "compute";
    case semantic_dtype::output: break;
  }
  return "output";
}

/// The `what()` of every run-time refusal of a float8, float6 or float4 dtype in a policy (parse_policy,
/// visit, to_string, policy_scope, dtype_ish): `subject` names the dtype and where it was found, then
/// the rule and the explicit float8 paths (MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON, policy.hpp).
[[nodiscard]] inline std::string small_float_policy_message(std::string_view subject) {
  return internal::concat(subject, " is a float8, float6 or float4 dtype, which no policy holds: ",
                          std::string_view(MIXPREC_DETAIL_SMALL_FLOAT_POLICY_REASON));
}

/// Builds the `policy_parse_error` for a failed `parse_policy_grammar(text)`.
[[nodiscard]] inline policy_parse_error make_policy_parse_error(std::string_view text, const policy_grammar_result& r) {
  const std::string_view token = text.substr(r.position, r.size);
  const std::string_view part = text.substr(r.part_position, r.part_size);
  const std::string position = std::to_string(r.position);
  std::string at;
  at += internal::concat(" at position ", position, " in \"", text, "\"");
  constexpr std::string_view dtypes_hint =
      "write f32 (or float32, full), bf16 (bfloat16), f16 (float16) or f64 (float64)";
  std::string message = "mixprec::parse_policy: ";
  switch (r.error) {
    case policy_parse_errc::empty_input:
      message += internal::concat("empty policy string \"", text, "\"",
                                  ": write a dtype such as \"f32\", or key=value parts such as \"p=f32,c=bf16,o=f32\"");
      break;
    case policy_parse_errc::empty_part:
      message += internal::concat("empty part", at, " (a doubled, leading or trailing comma): remove the extra comma");
      break;
    case policy_parse_errc::missing_equals:
      message += internal::concat(
          "part '", token, "'", at,
          " has no '=': when a policy has several comma-separated parts, each is key=value (p=, c=, o=)");
      break;
    case policy_parse_errc::missing_key:
      message += internal::concat("missing key before '='", at, " (part '", part,
                                  "'): write p=, c= or o= (or params=, compute=, output=)");
      break;
    case policy_parse_errc::unknown_key:
      message += internal::concat("unknown key '", token, "'", at,
                                  ": keys are p (or params), c (or compute) and o (or output)");
      break;
    case policy_parse_errc::repeated_key: {
      std::string_view role = "a";
      for (const auto& [key, named] : policy_keys) {
        if (key == token) role = role_name(named);
      }
      message += internal::concat(
          "key '", token, "'", at, " sets the ", role, " dtype again (already set by '",
          text.substr(r.previous_position, r.previous_size), "' at position ", std::to_string(r.previous_position),
          "): give each of p, c and o at most once (jmp silently keeps the last; mixprec rejects it)");
      break;
    }
    case policy_parse_errc::missing_value:
      message += internal::concat("missing dtype after '", text.substr(r.part_position, r.position - r.part_position),
                                  "'", at, ": ", dtypes_hint);
      break;
    case policy_parse_errc::extra_equals:
      message +=
          internal::concat("second '='", at, " (part '", part,
                           "'): write one key=value per part and separate parts with commas, as in \"p=f32,c=bf16\"");
      break;
    case policy_parse_errc::unknown_dtype:
      message += internal::concat("unknown dtype '", token, "'", at, ": ", dtypes_hint);
      break;
    case policy_parse_errc::platform_dependent_dtype:
      message +=
          internal::concat("dtype '", token, "'", at,
                           " is platform-dependent in jmp (bfloat16 on TPU, float16 elsewhere): write bf16 or f16");
      break;
    case policy_parse_errc::not_floating_dtype:
      message += internal::concat("dtype '", token, "'", at,
                                  " is not a floating dtype (a policy casts floating values only): ", dtypes_hint);
      break;
    case policy_parse_errc::weak_dtype:
      message += internal::concat("dtype '", token, "'", at,
                                  " is JAX's weakly typed float, not a storage type: ", dtypes_hint);
      break;
    case policy_parse_errc::small_float_dtype:
      message += small_float_policy_message(internal::concat("dtype '", token, "'", at));
      break;
  }
  return policy_parse_error(r.error, r.position, std::string(token), message);
}

/// Throws `policy_error` unless `d` is a dtype a policy may hold: float32, float64, bfloat16 or
/// float16. `subject` says where `d` was found ("mixprec::to_string: runtime_policy.compute").
inline void check_policy_dtype(dtype d, std::string_view subject) {
  const auto index = static_cast<std::size_t>(d);
  if (index >= dtype_count) {
    throw policy_error(
        internal::concat(subject, " holds ", std::to_string(index), ", which is not a dtype enumerator"));
  }
  if (!is_floating(d) || is_weak(d)) {
    throw policy_error(internal::concat(
        subject, " is ", name(d), ", which is not a real floating dtype; a policy holds f32, bf16, f16 or f64 only"));
  }
  if (is_small_float(d)) throw policy_error(small_float_policy_message(internal::concat(subject, " (", name(d), ")")));
}

/// Throws `policy_error` unless every member of `p` is a dtype a policy may hold (`check_policy_dtype`);
/// `caller` starts the message ("mixprec::to_string").
inline void check_runtime_policy(const runtime_policy& p, std::string_view caller) {
  check_policy_dtype(p.param, internal::concat(caller, ": runtime_policy.param"));
  check_policy_dtype(p.compute, internal::concat(caller, ": runtime_policy.compute"));
  check_policy_dtype(p.output, internal::concat(caller, ": runtime_policy.output"));
}

/// Throws the float8 rule's `policy_error` if a member of `p` is a float8, float6 or float4 dtype.
inline void check_no_small_float(const runtime_policy& p, std::string_view caller) {
  for (const semantic_dtype role : {semantic_dtype::param, semantic_dtype::compute, semantic_dtype::output}) {
    const dtype d = role == semantic_dtype::param ? p.param : role == semantic_dtype::compute ? p.compute : p.output;
    if (is_small_float(d)) {
      throw policy_error(small_float_policy_message(
          internal::concat(caller, ": runtime_policy.", role_name(role), " (", name(d), ")")));
    }
  }
}

}  // namespace detail

/// Parses a policy string in jmp's `get_policy` grammar (jmp/_src/policy.py):
///
/// | form | meaning |
/// |---|---|
/// | `"bf16"` | a lone dtype: param = compute = output = bfloat16 |
/// | `"p=f32,c=bf16,o=f32"` | comma-separated key=value parts, any order |
/// | keys | `p` / `params`, `c` / `compute`, `o` / `output` |
/// | dtypes | `f32` / `float32` / `full`, `bf16` / `bfloat16`, `f16` / `float16`, `f64` / `float64` (jmp's) |
/// | defaults | unset p is float32, unset c follows p, unset o follows c (`"c=bf16"` is p=f32,c=bf16,o=bf16) |
///
/// So it accepts exactly the 64 policies `visit(p, f)` dispatches. A float8, float6 or float4 dtype is
/// refused in every role: no policy holds one (`policy_element`); float8 computation is explicit, in
/// `scaled/` (`scaled::float8_dot` injected with `nn::dense::set_dot`, `scaled::float8_weight_dot`).
///
/// Spaces around tokens are ignored; names are case-sensitive, as in jmp.
///
/// Errors: throws `policy_parse_error` (a std::invalid_argument) naming the bad token and its 0-based
/// character offset for: empty input, an empty part (`"p=f32,,c=bf16"`, trailing comma), a part without
/// '=' in a multi-part policy, a missing key or value (`"=f32"`, `"p="`), an unknown key, a repeated
/// role (`"p=f32,params=bf16"`; jmp keeps the last, mixprec rejects), a second '=', an unknown dtype,
/// `"half"` (platform-dependent in jmp), a non-floating dtype (`"int8"`), `"float*"`, and a float8,
/// float6 or float4 dtype (`"c=float8_e4m3fn"`: code `small_float_dtype`, whose `what()` says why and
/// names the explicit float8 paths).
///
/// **Example**:
/// ```cpp
/// auto p = mixprec::parse_policy("p=f32,c=bf16,o=f32");
/// assert(p == (mixprec::runtime_policy{dtype::float32, dtype::bfloat16, dtype::float32}));
/// ```
[[nodiscard]] inline runtime_policy parse_policy(std::string_view text) {
  const detail::policy_grammar_result r = detail::parse_policy_grammar(text);
  if (!r.ok) throw detail::make_policy_parse_error(text, r);
  return {r.param, r.compute, r.output};
}

/// The canonical policy string "p=<param>,c=<compute>,o=<output>", each dtype written with its
/// shortest jmp name (f32, bf16, f16, f64). `parse_policy(to_string(p)) == p` for every valid `p`.
/// jmp's `Policy.__str__` writes the same form but spells float32 "full".
///
/// Errors: throws `policy_error` if a member is not float32, float64, bfloat16 or float16: a
/// non-floating dtype, or a float8, float6 or float4 one (no policy holds those; the message says why
/// and names the explicit float8 paths).
[[nodiscard]] inline std::string to_string(const runtime_policy& p) {
  detail::check_runtime_policy(p, "mixprec::to_string");
  std::string text;
  text += detail::policy_key_name(semantic_dtype::param);
  text += '=';
  text += detail::policy_dtype_name(p.param);
  text += ',';
  text += detail::policy_key_name(semantic_dtype::compute);
  text += '=';
  text += detail::policy_dtype_name(p.compute);
  text += ',';
  text += detail::policy_key_name(semantic_dtype::output);
  text += '=';
  text += detail::policy_dtype_name(p.output);
  return text;
}

/// Writes `to_string(p)` ("p=f32,c=bf16,o=f32"). Errors: as `to_string`.
inline std::ostream& operator<<(std::ostream& os, const runtime_policy& p) { return os << to_string(p); }

/// The dtype of `role` in `p` (jmp's `param_dtype` / `compute_dtype` / `output_dtype`).
[[nodiscard]] constexpr dtype resolve(semantic_dtype role, const runtime_policy& p) noexcept {
  switch (role) {
    case semantic_dtype::param: return p.param;
    case semantic_dtype::compute: return p.compute;
    case semantic_dtype::output: break;
  }
  return p.output;
}

/// The run-time form of the compile-time policy `P`: `to_runtime_policy(mixed_bfloat16{})` is
/// {float32, bfloat16, float32}. A policy that uses `promote` has no run-time form (static_assert).
template <compile_time_policy P>
[[nodiscard]] constexpr runtime_policy to_runtime_policy(P = {}) noexcept {
  static_assert(!uses_promote_v<P>,
                "A policy whose compute or output type is mixprec::promote has no runtime_policy form: the "
                "promoted dtype depends on the inputs. Use resolve(role, policy, input_dtypes...) instead.");
  using Q = std::remove_cvref_t<P>;
  if constexpr (uses_promote_v<P>) {
    return {};
  } else {
    return {dtype_of_v<typename Q::param_type>, dtype_of_v<typename Q::compute_type>,
            dtype_of_v<typename Q::output_type>};
  }
}

// ---------------------------------------------------------------------------------------------
// visit: run-time policy -> compile-time policy
// ---------------------------------------------------------------------------------------------

/// The dtypes `visit` dispatches over, in index order: the four that jmp's grammar names.
inline constexpr std::array<dtype, 4> visit_dtypes{dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16};

namespace detail {

/// Number of dtypes `visit` dispatches over (n), so n^3 policies.
inline constexpr std::size_t visit_n = visit_dtypes.size();

/// The policy `visit` passes for table index I = n^2 * param + n * compute + output (indices into
/// `visit_dtypes`).
template <std::size_t I>
using visit_policy_t = policy<type_of_t<visit_dtypes[I / (visit_n * visit_n)]>,
                              type_of_t<visit_dtypes[(I / visit_n) % visit_n]>, type_of_t<visit_dtypes[I % visit_n]>>;

/// Index of `d` in `visit_dtypes`, or visit_dtypes.size().
[[nodiscard]] constexpr std::size_t visit_index(dtype d) noexcept {
  for (std::size_t i = 0; i < visit_dtypes.size(); ++i) {
    if (visit_dtypes[i] == d) return i;
  }
  return visit_dtypes.size();
}

template <class F, std::size_t... I>
consteval bool visit_invocable(std::index_sequence<I...>) {
  return (std::is_invocable_v<F, visit_policy_t<I>> && ...);
}

template <class F, std::size_t... I>
consteval bool visit_same_result(std::index_sequence<I...>) {
  using R = std::invoke_result_t<F, visit_policy_t<0>>;
  return (std::is_same_v<R, std::invoke_result_t<F, visit_policy_t<I>>> && ...);
}

template <class R, class F, std::size_t I>
R visit_call(F&& f) {
  return std::invoke(std::forward<F>(f), visit_policy_t<I>{});
}

/// `p` in the form of `to_string` for messages, without throwing: a member that is no dtype
/// enumerator is written "?", a non-floating one by its name ("p=f32,c=int8,o=f32").
[[nodiscard]] inline std::string describe_policy(const runtime_policy& p) {
  std::string shown;
  for (semantic_dtype r : {semantic_dtype::param, semantic_dtype::compute, semantic_dtype::output}) {
    const dtype rd = resolve(r, p);
    if (!shown.empty()) shown += ',';
    shown +=
        internal::concat(policy_key_name(r), "=",
                         static_cast<std::size_t>(rd) < dtype_count ? policy_dtype_name(rd) : std::string_view("?"));
  }
  return shown;
}

/// Throws `policy_error` naming the role and dtype that `visit` cannot dispatch (after
/// `check_no_small_float`: what is left is a non-floating dtype or no enumerator at all).
inline void check_visit_dtype(dtype d, semantic_dtype role, const runtime_policy& p) {
  if (visit_index(d) < visit_dtypes.size()) return;
  const auto index = static_cast<std::size_t>(d);
  const std::string found = index < dtype_count ? std::string(name(d)) : "the non-enumerator " + std::to_string(index);
  throw policy_error(
      internal::concat("mixprec::visit: the ", role_name(role), " dtype of policy ", describe_policy(p), " is ", found,
                       "; a policy holds only float32, float64, bfloat16 and float16, and visit dispatches all "
                       "4^3 = 64 such policies (exactly those parse_policy accepts)"));
}

template <class R, class F, class P>
R visit_listed_call(F&& f) {
  return std::invoke(std::forward<F>(f), P{});
}

/// The `policy_error` of `visit<Ps...>` for a run-time policy that is none of the listed ones.
template <std::size_t N>
[[nodiscard]] policy_error make_visit_listed_error(const runtime_policy& p,
                                                   const std::array<runtime_policy, N>& listed) {
  std::string message;
  message += internal::concat("mixprec::visit: policy ", describe_policy(p), " is not one of the ", std::to_string(N),
                              " listed policies (");
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) message += "; ";
    message += to_string(listed[i]);
  }
  message += internal::concat("): add its compile-time policy to visit<...>'s list, or ask for a listed one");
  return policy_error(message);
}

}  // namespace detail

/// Calls `f(policy<P, C, O>{})` for the compile-time policy whose types match the dtypes of `p`, and
/// returns what `f` returns. `f` must accept all 64 policies over {float, double, bfloat16, float16}
/// (a generic lambda, typically) and return the same type for each (static_assert otherwise).
/// Dispatch is one indexed call through a table of 64 function pointers.
///
/// It compiles `f` 64 times: prefer `visit<P1, P2, ...>(p, f)`, which compiles only the policies a
/// program uses (docs/policies.md gives measured compile times of both).
///
/// The 64 policies are exactly those `parse_policy` accepts: every policy string that parses can be
/// visited, and no other run-time policy can (no policy holds a float8, float6 or float4 type).
///
/// Errors: throws `policy_error` (a std::invalid_argument) if a dtype of `p` is not float32, float64,
/// bfloat16 or float16 — for a float8, float6 or float4 dtype with the same explanation as
/// `parse_policy`'s; `f` is then not called.
///
/// **Example**:
/// ```cpp
/// auto policy = mixprec::parse_policy(config_string);
/// double loss = mixprec::visit(policy, [&]<class P>(P) { return train_step<P>(batch); });
/// ```
template <class F>
decltype(auto) visit(const runtime_policy& p, F&& f) {
  constexpr auto all = std::make_index_sequence<detail::visit_n * detail::visit_n * detail::visit_n>{};
  static_assert(detail::visit_invocable<F>(all),
                "mixprec::visit: f must be callable with every policy<P, C, O> for P, C, O in {float, double, "
                "bfloat16, float16}; write f as a generic lambda, e.g. [](auto policy) { ... }.");
  if constexpr (detail::visit_invocable<F>(all)) {
    static_assert(detail::visit_same_result<F>(all),
                  "mixprec::visit: f must return the same type for all 64 policies (like std::visit); convert the "
                  "results to one type inside f.");
    using R = std::invoke_result_t<F, detail::visit_policy_t<0>>;
    detail::check_no_small_float(p, "mixprec::visit");
    detail::check_visit_dtype(p.param, semantic_dtype::param, p);
    detail::check_visit_dtype(p.compute, semantic_dtype::compute, p);
    detail::check_visit_dtype(p.output, semantic_dtype::output, p);
    constexpr std::size_t n = detail::visit_n;
    const std::size_t index =
        n * n * detail::visit_index(p.param) + n * detail::visit_index(p.compute) + detail::visit_index(p.output);
    return [&]<std::size_t... I>(std::index_sequence<I...>)->R {
      using call = R (*)(F &&);
      static constexpr std::array<call, sizeof...(I)> table{&detail::visit_call<R, F, I>...};
      return table[index](std::forward<F>(f));
    }
    (all);
  }
}

/// Calls `f(P{})` for the listed compile-time policy `P` (one of `Ps...`) whose run-time form
/// `to_runtime_policy<P>()` equals `p`, and returns what `f` returns (a reference result stays a
/// reference; `f` is forwarded, not copied). Only the listed policies are instantiated, so a program
/// that uses two or three policies compiles `f` two or three times instead of 64 (docs/policies.md
/// has measured compile times). Any policy without `promote` can be listed (a policy's types are
/// float, double, bfloat16 or float16). The first listed match is taken when a policy is listed twice.
///
/// Requirements (static_assert otherwise): every listed policy is a compile-time `policy<...>` without
/// `promote` (it needs a run-time form); `f` accepts every listed policy and returns the same type
/// for each (as `std::visit` requires).
///
/// Errors: throws `policy_error` (a std::invalid_argument) naming `p` and every listed policy as policy
/// strings when `p` is none of them — or, when `p` holds a float8, float6 or float4 dtype, the
/// explanation `parse_policy` gives for one; `f` is then not called.
///
/// **Example**:
/// ```cpp
/// auto policy = mixprec::parse_policy(argv[1]);   // "f32", "p=f32,c=bf16,o=f32" or "p=f32,c=f16,o=f32"
/// double loss = mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16, mixprec::mixed_float16>(
///     policy, [&]<class P>(P) { return train_step<P>(batch); });
/// ```
template <compile_time_policy... Ps, class F>
requires(sizeof...(Ps) > 0) decltype(auto) visit(const runtime_policy& p, F&& f) {
  static_assert((!uses_promote_v<Ps> && ...),
                "mixprec::visit<P...>: a listed policy uses mixprec::promote, which has no run-time form; list "
                "policies whose three types are fixed.");
  static_assert((std::is_invocable_v<F, std::remove_cvref_t<Ps>> && ...),
                "mixprec::visit<P...>: f must be callable with every listed policy; write f as a generic lambda, "
                "e.g. [](auto policy) { ... }.");
  if constexpr ((!uses_promote_v<Ps> && ...) && (std::is_invocable_v<F, std::remove_cvref_t<Ps>> && ...)) {
    using R = std::invoke_result_t<F, std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Ps...>>>>;
    static_assert((std::is_same_v<R, std::invoke_result_t<F, std::remove_cvref_t<Ps>>> && ...),
                  "mixprec::visit<P...>: f must return the same type for every listed policy (like std::visit); "
                  "convert the results to one type inside f.");
    using call = R (*)(F &&);
    static constexpr std::array<runtime_policy, sizeof...(Ps)> listed{to_runtime_policy<Ps>()...};
    static constexpr std::array<call, sizeof...(Ps)> table{
        &detail::visit_listed_call<R, F, std::remove_cvref_t<Ps>>...};
    for (std::size_t i = 0; i < listed.size(); ++i) {
      if (listed[i] == p) return table[i](std::forward<F>(f));
    }
    detail::check_no_small_float(p, "mixprec::visit");
    throw detail::make_visit_listed_error(p, listed);
  }
}

}  // namespace mixprec

#if defined(__cpp_lib_format)
/// `std::format("{}", p)` writes `to_string(p)` ("p=f32,c=bf16,o=f32"), with the format spec of a
/// string. Only where the standard library has `<format>` (`__cpp_lib_format`; not GCC 12's
/// libstdc++). Errors: as `to_string` (`policy_error` for a member that is not float32, float64,
/// bfloat16 or float16).
template <>
struct std::formatter<mixprec::runtime_policy, char> : std::formatter<std::string_view, char> {
  /// Formats the canonical policy string.
  template <class FormatContext>
  auto format(const mixprec::runtime_policy& p, FormatContext& ctx) const {
    const std::string text = mixprec::to_string(p);
    return std::formatter<std::string_view, char>::format(text, ctx);
  }
};
#endif
