/// \file
/// \brief Policies chosen at run time for a region of code, per thread: `policy_scope` pushes a
/// `runtime_policy` for its lifetime and `current_policy()` reads the innermost one (Haliax's
/// thread-local resource environment that carries a jmp policy, read by `current_mp_policy()`; Haiku's
/// `push_policy`; like PyTorch's thread-local autocast state). `dtype_ish` names a dtype either by role ("compute",
/// "param", "output"), resolved against the current policy, or concretely ("bf16"), as Haliax's `DTypeish` does for a
/// layer's `compute_dtype` override.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "mixprec/arch/message.hpp"
#include "mixprec/dtypes/dtype.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/runtime_policy.hpp"

namespace mixprec {

namespace detail {

/// This thread's stack of scoped policies, innermost last.
[[nodiscard]] inline std::vector<runtime_policy>& policy_stack() noexcept {
  thread_local std::vector<runtime_policy> stack;
  return stack;
}

}  // namespace detail

/// The policy of the innermost live `policy_scope` on this thread, or full precision (float32
/// everywhere: Haliax's and jmp's default) where none is live. Each thread has its own stack: a scope
/// opened on one thread is invisible to the others.
[[nodiscard]] inline runtime_policy current_policy() noexcept {
  const auto& stack = detail::policy_stack();
  return stack.empty() ? runtime_policy{} : stack.back();
}

/// How many `policy_scope`s are live on this thread (0: `current_policy()` is the default).
[[nodiscard]] inline std::size_t policy_scope_depth() noexcept { return detail::policy_stack().size(); }

/// RAII: makes `policy` the current policy of this thread until the scope ends, then restores the
/// previous one. Scopes nest; they must end in reverse order of creation on the thread that created
/// them, which automatic (stack) objects do by construction, so the type can be neither copied, moved
/// nor allocated on the heap.
///
/// **Example**:
/// ```cpp
/// mixprec::policy_scope outer("p=f32,c=bf16,o=f32");
/// { mixprec::policy_scope inner("f16"); /* current_policy() is f16 everywhere */ }
/// // current_policy() is p=f32,c=bf16,o=f32 again
/// ```
class policy_scope {
 public:
  /// Pushes `policy`. Errors: throws `policy_error` if a member is not float32, float64, bfloat16 or
  /// float16 (for a float8, float6 or float4 dtype with `parse_policy`'s explanation: no policy holds one).
  explicit policy_scope(const runtime_policy& policy) : pushed_(validated(policy)) {
    detail::policy_stack().push_back(pushed_);
  }
  /// Pushes `parse_policy(text)`. Errors: `policy_parse_error` for a string `parse_policy` refuses.
  explicit policy_scope(std::string_view text) : policy_scope(parse_policy(text)) {}
  /// Pushes the run-time form of the compile-time policy `P` (`policy_scope s(mixed_bfloat16{})`).
  template <compile_time_policy P>
  explicit policy_scope(P p) : policy_scope(to_runtime_policy(p)) {}

  policy_scope(const policy_scope&) = delete;
  policy_scope& operator=(const policy_scope&) = delete;
  policy_scope(policy_scope&&) = delete;
  policy_scope& operator=(policy_scope&&) = delete;
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

  ~policy_scope() { detail::policy_stack().pop_back(); }

  /// The policy this scope pushed.
  [[nodiscard]] runtime_policy policy() const noexcept { return pushed_; }

 private:
  // Throws the policy_error of the first member no policy may hold.
  static runtime_policy validated(const runtime_policy& policy) {
    detail::check_runtime_policy(policy, "mixprec::policy_scope");
    return policy;
  }

  runtime_policy pushed_;
};

/// The policy argument of a layer that takes its policy from the `policy_scope` live when the layer is
/// constructed (`nn::dense<from_scope<full_precision, mixed_bfloat16>>`), as Haliax's layers read the
/// policy of the current resource environment. `Ps...` lists the compile-time policies the program
/// supports: each is compiled for the layer, as `visit<Ps...>` does, and a scope holding any other policy
/// is a `policy_error` at construction. List concrete policies only (no `promote`: a scope holds dtypes).
template <compile_time_policy... Ps>
struct from_scope {
  static_assert(sizeof...(Ps) > 0,
                "mixprec::from_scope<> lists no policy: name the compile-time policies the program supports, "
                "e.g. from_scope<full_precision, mixed_bfloat16, mixed_float16>.");
  static_assert((!uses_promote_v<Ps> && ...),
                "mixprec::from_scope lists a policy whose compute or output type is mixprec::promote, which a "
                "policy_scope cannot hold: list policies of concrete dtypes (f32, f64, bf16, f16).");
};

/// A dtype named either by its role in a policy or concretely (Haliax's `DTypeish`): the argument a
/// layer takes to override one of its dtypes, e.g. `dtype_ish("param")` to compute in the param dtype,
/// or `dtype_ish(dtype::float32)` to compute in float32 whatever the policy says.
class dtype_ish {
 public:
  /// The dtype of `role` in the policy it is resolved against.
  constexpr dtype_ish(semantic_dtype role) noexcept : value_(role) {}
  /// A concrete dtype. Errors: throws `policy_error` unless `d` is a dtype a policy may hold: float32,
  /// float64, bfloat16 or float16 (a float8, float6 or float4 one gets `parse_policy`'s explanation).
  dtype_ish(dtype d) : value_(d) { detail::check_policy_dtype(d, "mixprec::dtype_ish: the dtype"); }
  /// Parses "param" (or "parameter", as Haliax's `resolve_dtype` allows), "compute", "output" (a role)
  /// or the name of a dtype a policy may hold as `parse_dtype` reads it ("f32", "bfloat16", "float64").
  /// Errors: throws `policy_error` naming the text and what is accepted; for a float8, float6 or float4
  /// name, with `parse_policy`'s explanation.
  explicit dtype_ish(std::string_view text) : value_(parse(text)) {}

  /// The role, if this names one.
  [[nodiscard]] constexpr std::optional<semantic_dtype> role() const noexcept {
    if (const auto* r = std::get_if<semantic_dtype>(&value_)) return *r;
    return std::nullopt;
  }

  /// The dtype this names under `policy`: the role's dtype there, or the concrete dtype.
  [[nodiscard]] constexpr dtype resolve(const runtime_policy& policy) const noexcept {
    if (const auto* r = std::get_if<semantic_dtype>(&value_)) return mixprec::resolve(*r, policy);
    return std::get<dtype>(value_);
  }

  /// The dtype this names under `current_policy()`.
  [[nodiscard]] dtype resolve() const noexcept { return resolve(current_policy()); }

  friend constexpr bool operator==(const dtype_ish&, const dtype_ish&) noexcept = default;

 private:
  static std::variant<semantic_dtype, dtype> parse(std::string_view text) {
    if (text == "parameter") return semantic_dtype::param;
    for (const semantic_dtype role : {semantic_dtype::param, semantic_dtype::compute, semantic_dtype::output}) {
      if (text == detail::role_name(role)) return role;
    }
    const std::optional<dtype> d = parse_dtype(text);
    if (d && is_small_float(*d)) {
      throw policy_error(detail::small_float_policy_message(internal::concat("mixprec::dtype_ish: '", text, "'")));
    }
    if (d && is_floating(*d) && !is_weak(*d)) return *d;
    throw policy_error(internal::concat("mixprec::dtype_ish: '", text,
                                        "' names neither a role nor a dtype a policy holds: write param, compute or "
                                        "output, or f32, bf16, f16 or f64"));
  }

  std::variant<semantic_dtype, dtype> value_;
};

}  // namespace mixprec
