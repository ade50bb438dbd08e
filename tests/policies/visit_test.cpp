// Tests for mixprec::visit (mixprec/policies/runtime_policy.hpp): a runtime_policy selects the compile-time
// policy<P, C, O> whose element types match its dtypes. The expected C++ type of each dtype is the
// test's own table (NumPy/JAX names: float32 is `float`, float64 is `double`).
#include <catch2/catch.hpp>

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "mixprec/policies/runtime_policy.hpp"

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::runtime_policy;

namespace {

// The test's own map from C++ type to dtype, written by hand (not mixprec::dtype_of_v).
template <class T>
constexpr dtype expected_dtype() {
  if constexpr (std::is_same_v<T, float>) {
    return dtype::float32;
  } else if constexpr (std::is_same_v<T, double>) {
    return dtype::float64;
  } else if constexpr (std::is_same_v<T, mixprec::bfloat16>) {
    return dtype::bfloat16;
  } else if constexpr (std::is_same_v<T, mixprec::float16>) {
    return dtype::float16;
  } else {
    return dtype::bool_;  // never a policy dtype: makes the comparison fail
  }
}

// What f sees: the three types mapped back to dtypes, and whether the argument is exactly policy<...>.
struct seen {
  dtype param;
  dtype compute;
  dtype output;
  bool is_policy_of_its_members;
};

constexpr auto record = []<class P>(P) {
  using param = typename P::param_type;
  using compute = typename P::compute_type;
  using output = typename P::output_type;
  return seen{expected_dtype<param>(), expected_dtype<compute>(), expected_dtype<output>(),
              std::is_same_v<P, mixprec::policy<param, compute, output>>};
};

// Counts its calls; callable only as an lvalue, so visit must use it in place.
struct counting {
  int calls = 0;
  template <class P>
  void operator()(P) & {
    ++calls;
  }
};

constexpr std::array<dtype, 4> four{dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16};

}  // namespace

TEST_CASE("visit passes the policy<P, C, O> matching each of the 64 runtime policies", "[policy][visit]") {
  int count = 0;
  for (dtype p : four) {
    for (dtype c : four) {
      for (dtype o : four) {
        const runtime_policy policy{p, c, o};
        CAPTURE(mixprec::name(p), mixprec::name(c), mixprec::name(o));
        const seen s = mixprec::visit(policy, record);
        CHECK(s.param == p);
        CHECK(s.compute == c);
        CHECK(s.output == o);
        CHECK(s.is_policy_of_its_members);
        ++count;
      }
    }
  }
  CHECK(count == 64);
}

TEST_CASE("visit reaches the named policies by their jmp strings", "[policy][visit]") {
  const auto is = []<class Expected>(std::type_identity<Expected>) {
    return [](auto policy) { return std::is_same_v<decltype(policy), Expected>; };
  };
  CHECK(mixprec::visit(mixprec::parse_policy("p=f32,c=bf16,o=f32"),
                       is(std::type_identity<mixprec::policy<float, mixprec::bfloat16, float>>{})));
  CHECK(mixprec::visit(mixprec::parse_policy("c=f16"),
                       is(std::type_identity<mixprec::policy<float, mixprec::float16, mixprec::float16>>{})));
  CHECK(mixprec::visit(mixprec::parse_policy("f64"), is(std::type_identity<mixprec::policy<double>>{})));
  using all_bf16 = mixprec::policy<mixprec::bfloat16, mixprec::bfloat16, mixprec::bfloat16>;
  CHECK(mixprec::visit(mixprec::parse_policy("bf16"), is(std::type_identity<all_bf16>{})));
}

TEST_CASE("visit returns what f returns, by value or by reference, and forwards f", "[policy][visit]") {
  // A value computed from the selected types: bytes of param + compute + output.
  const auto bytes = [](auto policy) {
    using P = decltype(policy);
    return sizeof(typename P::param_type) + sizeof(typename P::compute_type) + sizeof(typename P::output_type);
  };
  CHECK(mixprec::visit(mixprec::parse_policy("p=f64,c=bf16,o=f32"), bytes) == 8u + 2u + 4u);
  CHECK(mixprec::visit(mixprec::parse_policy("f16"), bytes) == 2u + 2u + 2u);

  // A reference result refers to the caller's object.
  int counter = 0;
  int& r = mixprec::visit(runtime_policy{}, [&counter](auto) -> int& { return counter; });
  r = 7;
  CHECK(counter == 7);

  // A stateful function object is used in place (forwarded, not copied).
  counting f;
  mixprec::visit(runtime_policy{}, f);
  mixprec::visit(runtime_policy{dtype::float16, dtype::float16, dtype::float16}, f);
  CHECK(f.calls == 2);
}

TEST_CASE("visit rejects a runtime_policy with a dtype outside f32, f64, bf16, f16", "[policy][visit][errors]") {
  const auto noop = [](auto) {};
  CHECK_THROWS_AS(mixprec::visit(mixprec::parse_policy("c=float8_e4m3fn,o=f32"), noop), std::invalid_argument);
  CHECK_THROWS_WITH(mixprec::visit(mixprec::parse_policy("c=float8_e4m3fn,o=f32"), noop),
                    Contains("compute dtype") && Contains("is float8_e4m3fn") &&
                        Contains("only float32, float64, bfloat16 and float16"));
  CHECK_THROWS_WITH(mixprec::visit(runtime_policy{dtype::int8, dtype::float32, dtype::float32}, noop),
                    Contains("param dtype") && Contains("is int8"));
  CHECK_THROWS_WITH(mixprec::visit(runtime_policy{dtype::float32, dtype::float32, static_cast<dtype>(250)}, noop),
                    Contains("output dtype") && Contains("non-enumerator 250"));
  // f is not called when the policy is rejected.
  bool called = false;
  CHECK_THROWS(mixprec::visit(runtime_policy{dtype::float32, dtype::float32, dtype::float8_e5m2},
                              [&called](auto) { called = true; }));
  CHECK_FALSE(called);
}
