// The error audit of the policies (issue 12, "Every public entry point documents what it throws; a test
// covers each documented error"): one test case per header of include/mixprec/policies/, one section per
// documented error that no other test triggers with its message checked. Covered elsewhere:
// - loss_scale.hpp: static_loss_scale(scale), dynamic_loss_scale(options) field checks, the state's
//   counter and range: loss_scale_test.cpp.
// - policy.hpp: resolve with `promote` and no inputs: policy_test.cpp (the promotion error by type only).
// - policy_scope.hpp: policy_scope(p) with a float8/float6 member, dtype_ish(text): policy_scope_test.cpp.
// - runtime_policy.hpp: parse_policy: parse_policy_test.cpp; to_string, operator<<: parse_policy_test.cpp;
//   visit, visit<P...>: visit_test.cpp.
// - policy_string.hpp: its errors are static_asserts (tests/compile_fail/).
// all_finite.hpp and cast.hpp document no errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/policies/loss_scale.hpp"
#include "mixprec/policies/policy.hpp"
#include "mixprec/policies/policy_scope.hpp"
#include "mixprec/policies/runtime_policy.hpp"
#include "support/error_message.hpp"

namespace documented_errors_test {

using mixprec::dtype;
using mixprec::runtime_policy;

namespace {

using test_support::says;

}  // namespace

TEST_CASE("loss_scale.hpp: every documented error untested elsewhere is thrown", "[policies][errors][loss_scale]") {
  using O = mixprec::dynamic_loss_scale_options;
  SECTION("options: max_loss_scale not finite") {
    CHECK_THROWS_MATCHES(mixprec::dynamic_loss_scale(O{.max_loss_scale = std::numeric_limits<float>::infinity()}),
                         std::invalid_argument, says({"mixprec::dynamic_loss_scale", "max_loss_scale = inf"}));
  }
  SECTION("float constructor: as the options constructor") {
    CHECK_THROWS_MATCHES(mixprec::dynamic_loss_scale(-1.0f), std::invalid_argument,
                         says({"mixprec::dynamic_loss_scale", "initial_scale = -1"}));
  }
  SECTION("state: loss_scale not positive and finite") {
    const O ok{.initial_scale = 8.0f, .period = 4};
    CHECK_THROWS_MATCHES(
        mixprec::dynamic_loss_scale(mixprec::dynamic_loss_scale_state{std::numeric_limits<float>::quiet_NaN(), 0, ok}),
        std::invalid_argument, says({"loss_scale = nan", "positive finite"}));
    CHECK_THROWS_MATCHES(mixprec::dynamic_loss_scale(mixprec::dynamic_loss_scale_state{0.0f, 0, ok}),
                         std::invalid_argument, says({"loss_scale = 0", "positive finite"}));
  }
  SECTION("state: invalid options") {
    CHECK_THROWS_MATCHES(mixprec::dynamic_loss_scale(mixprec::dynamic_loss_scale_state{8.0f, 0, O{.period = 0}}),
                         std::invalid_argument, says({"period = 0"}));
  }
}

TEST_CASE("policy.hpp: resolve's promotion error names both dtypes", "[policies][errors][policy]") {
  CHECK_THROWS_MATCHES(
      mixprec::resolve(mixprec::semantic_dtype::compute, mixprec::promote_policy{}, dtype::float8_e4m3fn),
      mixprec::type_promotion_error, says({"float8_e4m3fn"}));
}

TEST_CASE("policy_scope.hpp: every documented error untested elsewhere is thrown", "[policies][errors][policy_scope]") {
  SECTION("policy_scope(p): a member that is not a real floating dtype") {
    CHECK_THROWS_MATCHES(mixprec::policy_scope(runtime_policy{dtype::float32, dtype::int8, dtype::float32}),
                         mixprec::policy_error,
                         says({"mixprec::policy_scope: runtime_policy.compute is int8", "f32, bf16, f16 or f64"}));
    CHECK_THROWS_MATCHES(mixprec::policy_scope(runtime_policy{static_cast<dtype>(222), dtype::float32, dtype::float32}),
                         mixprec::policy_error, says({"runtime_policy.param holds 222", "not a dtype enumerator"}));
    CHECK(mixprec::policy_scope_depth() == 0);
  }
  SECTION("policy_scope(text): a string parse_policy refuses") {
    CHECK_THROWS_MATCHES(mixprec::policy_scope("p=f32,c=int8"), mixprec::policy_parse_error, says({"int8"}));
    CHECK(mixprec::policy_scope_depth() == 0);
  }
  SECTION("dtype_ish(d): a dtype no policy holds") {
    CHECK_THROWS_MATCHES(mixprec::dtype_ish(dtype::int32), mixprec::policy_error,
                         says({"mixprec::dtype_ish: the dtype is int32", "not a real floating dtype"}));
    CHECK_THROWS_MATCHES(mixprec::dtype_ish(dtype::float8_e5m2), mixprec::policy_error,
                         says({"(float8_e5m2)", "which no policy holds"}));
  }
  SECTION("dtype_ish(text): a dtype name no policy holds") {
    CHECK_THROWS_MATCHES(mixprec::dtype_ish("int8"), mixprec::policy_error,
                         says({"mixprec::dtype_ish: 'int8'", "names neither a role nor a dtype"}));
  }
}

#if defined(__cpp_lib_format)
TEST_CASE("runtime_policy.hpp: std::format of a policy no policy may hold", "[policies][errors][runtime_policy]") {
  CHECK_THROWS_MATCHES(std::format("{}", runtime_policy{dtype::float32, dtype::int8, dtype::float32}),
                       mixprec::policy_error, says({"runtime_policy.compute is int8"}));
}
#endif

}  // namespace documented_errors_test
