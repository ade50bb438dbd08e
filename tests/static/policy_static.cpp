// Compile-time checks of mixprec/policies/policy.hpp and mixprec/policies/policy_string.hpp. Compiling is passing.
// Expected types follow jmp's grammar and defaults (google-deepmind/jmp, jmp/_src/policy.py at
// 7b3a5f784eca7e1f0f9d231ef8c9dae181f01f16) and, for promote, JAX's published promotion table.
#include <type_traits>

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
static_assert(mixprec::policy_element<mixprec::float8_e4m3fn> && mixprec::policy_element<mixprec::float4_e2m1fn>);
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
static_assert(is_same_v<policy_from<"c=float8_e4m3fn,o=f32">, policy<float, mixprec::float8_e4m3fn, float>>);

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

}  // namespace
