// Compile-time checks of mixprec/policies/policy.hpp and mixprec/policies/policy_string.hpp. Compiling is passing.
// Expected types follow jmp's grammar and defaults (google-deepmind/jmp, jmp/_src/policy.py at
// 7b3a5f784eca7e1f0f9d231ef8c9dae181f01f16) and, for promote, JAX's published promotion table.
#include <cstddef>
#include <type_traits>
#include <utility>

#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/policy_string.hpp"
#include "mixprec/policies/runtime_policy.hpp"

namespace {

using mixprec::bfloat16;
using mixprec::float16;
using mixprec::policy;
using mixprec::policy_from;
using mixprec::promote;
using mixprec::semantic_dtype;
using std::is_same_v;

// --- policy<Param, Compute, Output>: members and jmp's default chaining ---------------------------
static_assert(is_same_v<policy<float, bfloat16, double>::param_type, float>);
static_assert(is_same_v<policy<float, bfloat16, double>::compute_type, bfloat16>);
static_assert(is_same_v<policy<float, bfloat16, double>::output_type, double>);
static_assert(is_same_v<policy<float16>, policy<float16, float16, float16>>);          // c follows p, o follows c
static_assert(is_same_v<policy<float, bfloat16>, policy<float, bfloat16, bfloat16>>);  // o follows c
static_assert(is_same_v<policy<float, promote>, policy<float, promote, promote>>);
static_assert(is_same_v<policy<float, bfloat16>::with_output<float>, policy<float, bfloat16, float>>);

// --- named policies -------------------------------------------------------------------------------
static_assert(is_same_v<mixprec::full_precision, policy<float, float, float>>);
static_assert(is_same_v<mixprec::mixed_bfloat16, policy<float, bfloat16, float>>);
static_assert(is_same_v<mixprec::mixed_float16, policy<float, float16, float>>);
static_assert(is_same_v<mixprec::half_bfloat16, policy<bfloat16, bfloat16, bfloat16>>);
static_assert(is_same_v<mixprec::half_float16, policy<float16, float16, float16>>);
static_assert(is_same_v<mixprec::double_precision, policy<double, double, double>>);
static_assert(is_same_v<mixprec::promote_policy, policy<float, promote, promote>>);

// --- concepts and traits -------------------------------------------------------------------------
static_assert(mixprec::policy_element<float> && mixprec::policy_element<double>);
static_assert(mixprec::policy_element<bfloat16> && mixprec::policy_element<float16>);
// No policy holds a float8, float6 or float4 type (a policy converts without a scale): the concept that
// says "allowed in a policy" refuses them too. The static_assert sentences: tests/compile_fail/policy_float8_*.
static_assert(!mixprec::policy_element<mixprec::float8_e4m3fn> && !mixprec::policy_element<mixprec::float8_e5m2>);
static_assert(!mixprec::policy_element<mixprec::float8_e8m0fnu> && !mixprec::policy_element<mixprec::float6_e2m3fn>);
static_assert(!mixprec::policy_element<mixprec::float6_e3m2fn> && !mixprec::policy_element<mixprec::float4_e2m1fn>);
static_assert(!mixprec::policy_compute_element<mixprec::float8_e4m3fn>);
static_assert(!mixprec::policy_element<int> && !mixprec::policy_element<std::int8_t>);
static_assert(!mixprec::policy_element<bool> && !mixprec::policy_element<std::complex<float>>);
static_assert(!mixprec::policy_element<const float> && !mixprec::policy_element<float&>);
static_assert(!mixprec::policy_element<long double>);  // no dtype
static_assert(!mixprec::policy_element<promote>);
static_assert(mixprec::policy_compute_element<promote> && mixprec::policy_compute_element<float>);
static_assert(!mixprec::policy_compute_element<int>);
static_assert(mixprec::compile_time_policy<mixprec::mixed_bfloat16>);
static_assert(mixprec::compile_time_policy<const mixprec::mixed_bfloat16&>);
static_assert(!mixprec::compile_time_policy<mixprec::runtime_policy> && !mixprec::compile_time_policy<float>);
static_assert(mixprec::uses_promote_v<mixprec::promote_policy>);
static_assert(mixprec::uses_promote_v<policy<float, bfloat16, promote>>);
static_assert(!mixprec::uses_promote_v<mixprec::mixed_bfloat16>);
static_assert(mixprec::policy<float>{} == mixprec::policy<float>{});

// --- resolve_t ------------------------------------------------------------------------------------
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::param, mixprec::mixed_bfloat16>, float>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::compute, mixprec::mixed_bfloat16>, bfloat16>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::output, mixprec::mixed_bfloat16>, float>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::compute, mixprec::mixed_bfloat16, double>, bfloat16>);
// promote: JAX table f32+bf16=f32, f32+f64=f64, bf16+f16=f32, bf16+i8=bf16; a weak scalar adapts.
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::compute, mixprec::promote_policy, bfloat16>, float>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::output, mixprec::promote_policy, double>, double>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::compute, policy<bfloat16, promote>, float16>, float>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::compute, policy<bfloat16, promote>, std::int8_t>, bfloat16>);
static_assert(
    is_same_v<mixprec::resolve_t<semantic_dtype::compute, policy<bfloat16, promote>, mixprec::weak<double>>, bfloat16>);
static_assert(is_same_v<mixprec::resolve_t<semantic_dtype::param, mixprec::promote_policy>, float>);

// --- policy_from<"..."> ---------------------------------------------------------------------------
static_assert(is_same_v<policy_from<"p=f32,c=bf16,o=f32">, mixprec::mixed_bfloat16>);
static_assert(is_same_v<policy_from<"p=f32,c=f16,o=f32">, mixprec::mixed_float16>);
static_assert(is_same_v<policy_from<"params=float32,compute=float16,output=float32">, mixprec::mixed_float16>);
static_assert(is_same_v<policy_from<"full">, mixprec::full_precision>);
static_assert(is_same_v<policy_from<"f32">, mixprec::full_precision>);
static_assert(is_same_v<policy_from<"bf16">, mixprec::half_bfloat16>);
static_assert(is_same_v<policy_from<"float16">, mixprec::half_float16>);
static_assert(is_same_v<policy_from<"f64">, mixprec::double_precision>);
// jmp's defaults: "c=f16" is p=f32,c=f16,o=f16; "p=f16,c=bf16" is o=bf16; "c=bf16,o=full".
static_assert(is_same_v<policy_from<"c=f16">, policy<float, float16, float16>>);
static_assert(is_same_v<policy_from<"p=f16,c=bf16">, policy<float16, bfloat16, bfloat16>>);
static_assert(is_same_v<policy_from<"c=bfloat16,o=full">, policy<float, bfloat16, float>>);
static_assert(is_same_v<policy_from<"o=f16,p=f64">, policy<double, double, float16>>);
static_assert(is_same_v<policy_from<" p = f32 , c = bf16 ">, policy<float, bfloat16, bfloat16>>);

// One float8 rule: policy_element accepts exactly the element types of the dtypes parse_policy (and so
// policy_from) accepts, which are exactly the dtypes visit dispatches: f32, f64, bf16, f16.
template <mixprec::dtype D>
constexpr bool policy_dtype_rules_agree() {
  constexpr bool visited = mixprec::detail::visit_index(D) < mixprec::visit_dtypes.size();
  constexpr bool parses = mixprec::detail::parse_policy_grammar(mixprec::name(D)).ok;
  if constexpr (mixprec::is_weak(D)) {
    return !visited && !parses;  // no element type
  } else {
    return mixprec::policy_element<mixprec::type_of_t<D>> == visited && parses == visited;
  }
}
template <std::size_t... I>
constexpr bool policy_dtype_rules_agree_for_all(std::index_sequence<I...>) {
  return (policy_dtype_rules_agree<mixprec::all_dtypes[I]>() && ...);
}
static_assert(policy_dtype_rules_agree_for_all(std::make_index_sequence<mixprec::dtype_count>{}));
static_assert(mixprec::policy_element<mixprec::type_of_t<mixprec::dtype::float64>> &&
              !mixprec::policy_element<mixprec::type_of_t<mixprec::dtype::float8_e4m3fnuz>>);

// The run-time and compile-time forms agree (one grammar).
static_assert(mixprec::to_runtime_policy<policy_from<"p=f64,c=f16,o=bf16">>() ==
              mixprec::runtime_policy{mixprec::dtype::float64, mixprec::dtype::float16, mixprec::dtype::bfloat16});

// The shared grammar, evaluated at compile time: errors carry the code and the position.
constexpr auto unknown_key = mixprec::detail::parse_policy_grammar("p=f32,q=bf16");
static_assert(!unknown_key.ok && unknown_key.error == mixprec::policy_parse_errc::unknown_key &&
              unknown_key.position == 6 && unknown_key.size == 1);
constexpr auto repeated = mixprec::detail::parse_policy_grammar("p=f32,params=bf16");
static_assert(!repeated.ok && repeated.error == mixprec::policy_parse_errc::repeated_key && repeated.position == 6 &&
              repeated.previous_position == 0);
// A float8, float6 or float4 name in any role is small_float_dtype, at the name.
constexpr auto float8_compute = mixprec::detail::parse_policy_grammar("p=f32,c=float8_e4m3fn,o=f32");
static_assert(!float8_compute.ok && float8_compute.error == mixprec::policy_parse_errc::small_float_dtype &&
              float8_compute.position == 8 && float8_compute.size == 13);
static_assert(mixprec::detail::parse_policy_grammar("params=float4_e2m1fn").error ==
              mixprec::policy_parse_errc::small_float_dtype);

}  // namespace
