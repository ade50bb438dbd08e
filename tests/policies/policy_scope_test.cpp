// Tests of policy_scope, current_policy and dtype_ish (policies/policy_scope.hpp): Haliax's
// current_mp_policy / DTypeish / resolve_dtype semantics, per thread.
#include "mixprec/policies/policy_scope.hpp"

#include <atomic>
#include <barrier>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

namespace policy_scope_test {

namespace {

using mixprec::dtype;
using mixprec::dtype_ish;
using mixprec::policy_scope;
using mixprec::runtime_policy;
using mixprec::semantic_dtype;

constexpr runtime_policy f32{dtype::float32, dtype::float32, dtype::float32};
constexpr runtime_policy mixed_bf16{dtype::float32, dtype::bfloat16, dtype::float32};
constexpr runtime_policy all_f16{dtype::float16, dtype::float16, dtype::float16};

}  // namespace

TEST_CASE("without a scope the current policy is float32 everywhere", "[policy_scope]") {
  CHECK(mixprec::policy_scope_depth() == 0);
  CHECK(mixprec::current_policy() == f32);
}

TEST_CASE("scopes nest and each restores the policy it replaced", "[policy_scope]") {
  {
    const policy_scope outer("p=f32,c=bf16,o=f32");
    CHECK(outer.policy() == mixed_bf16);
    CHECK(mixprec::current_policy() == mixed_bf16);
    {
      const policy_scope inner("f16");
      CHECK(mixprec::current_policy() == all_f16);
      CHECK(mixprec::policy_scope_depth() == 2);
      {
        const policy_scope innermost(mixprec::full_precision{});
        CHECK(mixprec::current_policy() == f32);
      }
      CHECK(mixprec::current_policy() == all_f16);
    }
    CHECK(mixprec::current_policy() == mixed_bf16);
  }
  CHECK(mixprec::policy_scope_depth() == 0);
  CHECK(mixprec::current_policy() == f32);
}

TEST_CASE("a bad policy is rejected before anything is pushed", "[policy_scope]") {
  CHECK_THROWS_AS(policy_scope("p=f32,c=int8"), mixprec::policy_parse_error);
  CHECK_THROWS_AS(policy_scope(runtime_policy{dtype::float32, dtype::int8, dtype::float32}), mixprec::policy_error);
  CHECK(mixprec::policy_scope_depth() == 0);
  STATIC_REQUIRE(!std::is_copy_constructible_v<policy_scope>);
  STATIC_REQUIRE(!std::is_move_constructible_v<policy_scope>);
}

TEST_CASE("a policy_scope refuses a float8, float6 or float4 member with the float8 rule's explanation",
          "[policy_scope][errors]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(policy_scope("p=f32,c=float8_e4m3fn,o=f32"), mixprec::policy_parse_error);
  const runtime_policy f8{dtype::float32, dtype::float8_e4m3fn, dtype::float32};
  CHECK_THROWS_AS(policy_scope(f8), mixprec::policy_error);
  CHECK_THROWS_WITH(policy_scope(f8), Contains("mixprec::policy_scope: runtime_policy.compute (float8_e4m3fn)") &&
                                          Contains("which no policy holds") &&
                                          Contains("1000 becomes NaN in float8_e4m3fn") &&
                                          Contains("scaled::float8_dot<>"));
  CHECK_THROWS_WITH(policy_scope(runtime_policy{dtype::float32, dtype::float32, dtype::float6_e3m2fn}),
                    Contains("runtime_policy.output (float6_e3m2fn)") && Contains("which no policy holds"));
  CHECK(mixprec::policy_scope_depth() == 0);
}

TEST_CASE("each thread sees only its own scopes", "[policy_scope][threads]") {
  // Four threads open different scopes at the same time (a barrier lines them up) and each checks,
  // many times while the others hold theirs, that it reads its own policy.
  const std::vector<runtime_policy> policies{mixed_bf16, all_f16, f32,
                                             runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::float32}};
  std::barrier sync(static_cast<std::ptrdiff_t>(policies.size()));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (const runtime_policy& p : policies) {
    threads.emplace_back([&, p] {
      if (mixprec::current_policy() != f32) ++mismatches;  // a new thread starts with no scope
      const policy_scope scope(p);
      sync.arrive_and_wait();
      for (int i = 0; i < 10000; ++i) {
        if (mixprec::current_policy() != p) ++mismatches;
      }
      sync.arrive_and_wait();
    });
  }
  {
    const policy_scope main_scope("bf16");  // the main thread's scope is invisible to the others
    for (auto& t : threads) t.join();
    CHECK(mixprec::current_policy() == runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::bfloat16});
  }
  CHECK(mismatches.load() == 0);
}

TEST_CASE("dtype_ish resolves a role against the policy, and a concrete dtype to itself", "[policy_scope][dtype_ish]") {
  CHECK(dtype_ish(semantic_dtype::compute).resolve(mixed_bf16) == dtype::bfloat16);
  CHECK(dtype_ish(semantic_dtype::param).resolve(mixed_bf16) == dtype::float32);
  CHECK(dtype_ish(semantic_dtype::output).resolve(all_f16) == dtype::float16);
  CHECK(dtype_ish(dtype::float64).resolve(mixed_bf16) == dtype::float64);
  CHECK(dtype_ish("compute") == dtype_ish(semantic_dtype::compute));
  CHECK(dtype_ish("param").role() == semantic_dtype::param);
  CHECK(dtype_ish("parameter").role() == semantic_dtype::param);  // Haliax's resolve_dtype spelling
  CHECK(dtype_ish("bf16") == dtype_ish(dtype::bfloat16));
  CHECK_FALSE(dtype_ish("f16").role().has_value());
  {
    const policy_scope scope("p=f32,c=f16,o=bf16");
    CHECK(dtype_ish("compute").resolve() == dtype::float16);
    CHECK(dtype_ish("output").resolve() == dtype::bfloat16);
    CHECK(dtype_ish("f64").resolve() == dtype::float64);
  }
  CHECK(dtype_ish("compute").resolve() == dtype::float32);
}

TEST_CASE("dtype_ish rejects what names neither a role nor a real floating dtype", "[policy_scope][dtype_ish]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(dtype_ish("computer"), Contains("'computer'") && Contains("param, compute or output"));
  CHECK_THROWS_AS(dtype_ish("int8"), mixprec::policy_error);
  CHECK_THROWS_AS(dtype_ish("c=bf16"), mixprec::policy_error);
  CHECK_THROWS_AS(dtype_ish(""), mixprec::policy_error);
  CHECK_THROWS_AS(dtype_ish(dtype::int32), mixprec::policy_error);
  CHECK_THROWS_AS(dtype_ish(dtype::weak_float), mixprec::policy_error);
}

TEST_CASE("dtype_ish refuses a float8, float6 or float4 dtype, as a policy does", "[policy_scope][dtype_ish]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_AS(dtype_ish("float8_e4m3fn"), mixprec::policy_error);
  CHECK_THROWS_WITH(dtype_ish("float8_e4m3fn"), Contains("mixprec::dtype_ish: 'float8_e4m3fn'") &&
                                                    Contains("which no policy holds") &&
                                                    Contains("scaled::float8_dot<>"));
  CHECK_THROWS_WITH(dtype_ish(dtype::float4_e2m1fn), Contains("(float4_e2m1fn)") && Contains("which no policy holds"));
  CHECK_THROWS_AS(dtype_ish(dtype::float8_e5m2), mixprec::policy_error);
}

}  // namespace policy_scope_test
