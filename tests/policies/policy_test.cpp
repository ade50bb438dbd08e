// Tests for the compile-time policies of mixprec/policies/policy.hpp that run: resolve (every role, fixed and
// promote), to_runtime_policy, with_output, and the named policies as jmp strings.
//
// References:
// - jmp (google-deepmind/jmp, jmp/_src/policy.py at 7b3a5f784eca7e1f0f9d231ef8c9dae181f01f16): the
//   defaults "params defaults to f32, compute follows params and output follows compute".
// - Flax FLIP 1777 (docs/flip/1777-default-dtype.md): with dtype=None a layer promotes "the layer
//   inputs together with the parameters" with JAX's result_type.
// - JAX "Type promotion semantics" table (jax.readthedocs.io/en/latest/type_promotion.html) for the
//   promoted dtypes: f32+bf16=f32, f32+f16=f32, bf16+f16=f32, f32+f64=f64, f32+i32=f32, f32+c64=c64,
//   bf16+i8=bf16, f32+f*=f32, bf16+f*=bf16.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "mixprec/dtypes/promotion.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/runtime_policy.hpp"

namespace policy_test {

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::promote;
using mixprec::resolve;
using mixprec::runtime_policy;
using mixprec::semantic_dtype;

TEST_CASE("resolve gives the declared dtype of each fixed role", "[policy][resolve]") {
  CHECK(resolve(semantic_dtype::param, mixprec::mixed_bfloat16{}) == dtype::float32);
  CHECK(resolve(semantic_dtype::compute, mixprec::mixed_bfloat16{}) == dtype::bfloat16);
  CHECK(resolve(semantic_dtype::output, mixprec::mixed_bfloat16{}) == dtype::float32);

  using odd = mixprec::policy<double, mixprec::float16, mixprec::bfloat16>;
  CHECK(resolve(semantic_dtype::param, odd{}) == dtype::float64);
  CHECK(resolve(semantic_dtype::compute, odd{}) == dtype::float16);
  CHECK(resolve(semantic_dtype::output, odd{}) == dtype::bfloat16);

  // jmp's chaining: policy<float, bfloat16> is "c=bf16": o follows c.
  CHECK(resolve(semantic_dtype::output, mixprec::policy<float, mixprec::bfloat16>{}) == dtype::bfloat16);
  CHECK(resolve(semantic_dtype::output, mixprec::policy<mixprec::float16>{}) == dtype::float16);

  // Fixed roles ignore the inputs.
  CHECK(resolve(semantic_dtype::compute, mixprec::mixed_float16{}, dtype::float64) == dtype::float16);
  CHECK(resolve(semantic_dtype::param, mixprec::promote_policy{}, dtype::float64) == dtype::float32);
}

TEST_CASE("resolve promotes the inputs together with the parameters for a promote role (Flax FLIP 1777)",
          "[policy][resolve][promote]") {
  const mixprec::promote_policy p{};  // param float32
  for (semantic_dtype role : {semantic_dtype::compute, semantic_dtype::output}) {
    CAPTURE(static_cast<int>(role));
    // JAX table entries, param float32 with the input.
    CHECK(resolve(role, p, dtype::bfloat16) == dtype::float32);  // bf16 input, f32 params: f32
    CHECK(resolve(role, p, dtype::float16) == dtype::float32);
    CHECK(resolve(role, p, dtype::float32) == dtype::float32);
    CHECK(resolve(role, p, dtype::float64) == dtype::float64);  // FLIP 1777: no silent truncation of f64
    CHECK(resolve(role, p, dtype::int32) == dtype::float32);
    CHECK(resolve(role, p, dtype::complex64) == dtype::complex64);  // FLIP 1777: imaginary part kept
    CHECK(resolve(role, p, dtype::weak_float) == dtype::float32);
    // Several inputs: bf16 and f16 meet at f32.
    CHECK(resolve(role, p, dtype::bfloat16, dtype::float16) == dtype::float32);
  }

  // Parameters stored in bfloat16, compute promotes, output fixed.
  using bf16_params = mixprec::policy<mixprec::bfloat16, promote, float>;
  CHECK(resolve(semantic_dtype::compute, bf16_params{}, dtype::bfloat16) == dtype::bfloat16);
  CHECK(resolve(semantic_dtype::compute, bf16_params{}, dtype::int8) == dtype::bfloat16);
  CHECK(resolve(semantic_dtype::compute, bf16_params{}, dtype::weak_float) == dtype::bfloat16);
  CHECK(resolve(semantic_dtype::compute, bf16_params{}, dtype::float16) == dtype::float32);
  CHECK(resolve(semantic_dtype::output, bf16_params{}, dtype::float64) == dtype::float32);
}

TEST_CASE("resolve of a promote role is usable in constant expressions", "[policy][resolve][promote]") {
  STATIC_REQUIRE(resolve(semantic_dtype::compute, mixprec::promote_policy{}, dtype::float64) == dtype::float64);
  STATIC_REQUIRE(resolve(semantic_dtype::compute, mixprec::full_precision{}) == dtype::float32);
}

TEST_CASE("resolve of a promote role without inputs, or with inputs that do not promote, throws",
          "[policy][resolve][promote][errors]") {
  CHECK_THROWS_AS(resolve(semantic_dtype::compute, mixprec::promote_policy{}), std::invalid_argument);
  CHECK_THROWS_AS(resolve(semantic_dtype::compute, mixprec::promote_policy{}), mixprec::policy_error);
  CHECK_THROWS_WITH(resolve(semantic_dtype::output, mixprec::promote_policy{}),
                    Contains("mixprec::promote") && Contains("pass the input dtypes"));
  // The param role of a promoting policy is fixed, so it needs no inputs.
  CHECK(resolve(semantic_dtype::param, mixprec::promote_policy{}) == dtype::float32);
  // JAX does not promote float8 implicitly.
  CHECK_THROWS_AS(resolve(semantic_dtype::compute, mixprec::promote_policy{}, dtype::float8_e4m3fn),
                  mixprec::type_promotion_error);
}

TEST_CASE("the named policies are jmp's policy strings", "[policy][named]") {
  using mixprec::parse_policy;
  using mixprec::to_runtime_policy;
  CHECK(to_runtime_policy<mixprec::full_precision>() == parse_policy("full"));
  CHECK(to_runtime_policy<mixprec::full_precision>() == runtime_policy{dtype::float32, dtype::float32, dtype::float32});
  CHECK(to_runtime_policy<mixprec::mixed_bfloat16>() == parse_policy("p=f32,c=bf16,o=f32"));
  CHECK(to_runtime_policy<mixprec::mixed_bfloat16>() ==
        runtime_policy{dtype::float32, dtype::bfloat16, dtype::float32});
  CHECK(to_runtime_policy<mixprec::mixed_float16>() == runtime_policy{dtype::float32, dtype::float16, dtype::float32});
  CHECK(to_runtime_policy<mixprec::half_bfloat16>() ==
        runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::bfloat16});
  CHECK(to_runtime_policy<mixprec::half_float16>() == runtime_policy{dtype::float16, dtype::float16, dtype::float16});
  CHECK(to_runtime_policy<mixprec::double_precision>() ==
        runtime_policy{dtype::float64, dtype::float64, dtype::float64});
  // with_output is jmp's with_output_dtype.
  CHECK(to_runtime_policy(mixprec::mixed_bfloat16::with_output<mixprec::bfloat16>{}) ==
        runtime_policy{dtype::float32, dtype::bfloat16, dtype::bfloat16});
}

}  // namespace policy_test
