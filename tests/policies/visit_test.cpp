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

namespace visit_test {

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
  // A float8 member (parse_policy refuses it, so the policy is built by hand): the float8 rule's
  // explanation, the same as parse_policy's.
  const runtime_policy f8{dtype::float32, dtype::float8_e4m3fn, dtype::float32};
  CHECK_THROWS_AS(mixprec::visit(f8, noop), std::invalid_argument);
  CHECK_THROWS_AS(mixprec::visit(f8, noop), mixprec::policy_error);
  CHECK_THROWS_WITH(mixprec::visit(f8, noop), Contains("mixprec::visit: runtime_policy.compute (float8_e4m3fn)") &&
                                                  Contains("which no policy holds") &&
                                                  Contains("1000 becomes NaN in float8_e4m3fn") &&
                                                  Contains("scaled::float8_dot<>") && Contains("set_dot"));
  CHECK_THROWS_WITH(mixprec::visit(runtime_policy{dtype::float4_e2m1fn, dtype::float32, dtype::float32}, noop),
                    Contains("runtime_policy.param (float4_e2m1fn)") && Contains("which no policy holds"));
  CHECK_THROWS_WITH(
      mixprec::visit(runtime_policy{dtype::int8, dtype::float32, dtype::float32}, noop),
      Contains("param dtype") && Contains("is int8") && Contains("only float32, float64, bfloat16 and float16"));
  CHECK_THROWS_WITH(mixprec::visit(runtime_policy{dtype::float32, dtype::float32, static_cast<dtype>(250)}, noop),
                    Contains("output dtype") && Contains("non-enumerator 250"));
  // f is not called when the policy is rejected.
  bool called = false;
  CHECK_THROWS(mixprec::visit(runtime_policy{dtype::float32, dtype::float32, dtype::float8_e5m2},
                              [&called](auto) { called = true; }));
  CHECK_FALSE(called);
}

// ---------------------------------------------------------------------------------------------
// The listed form visit<P1, P2, ...>(p, f)
// ---------------------------------------------------------------------------------------------

namespace {

using f32_everywhere = mixprec::policy<float, float, float>;
using f32_bf16_f32 = mixprec::policy<float, mixprec::bfloat16, float>;
using f32_f16_f32 = mixprec::policy<float, mixprec::float16, float>;

// Compiles only for the three policies above: its body fails a static_assert for any other. Its
// return type is written out, so checking that it is invocable does not instantiate the body; only
// calling it does. A visit that instantiated f for a policy not listed would not compile.
struct only_three {
  template <class P>
  int operator()(P) const {
    static_assert(
        std::is_same_v<P, f32_everywhere> || std::is_same_v<P, f32_bf16_f32> || std::is_same_v<P, f32_f16_f32>,
        "visit<...> instantiated f for a policy that is not listed");
    if constexpr (std::is_same_v<P, f32_everywhere>) {
      return 1;
    } else if constexpr (std::is_same_v<P, f32_bf16_f32>) {
      return 2;
    } else {
      return 3;
    }
  }
};

}  // namespace

TEST_CASE("the named policies are the jmp policies full, p=f32,c=bf16,o=f32 and p=f32,c=f16,o=f32",
          "[policy][visit][listed]") {
  STATIC_REQUIRE(std::is_same_v<mixprec::full_precision, f32_everywhere>);
  STATIC_REQUIRE(std::is_same_v<mixprec::mixed_bfloat16, f32_bf16_f32>);
  STATIC_REQUIRE(std::is_same_v<mixprec::mixed_float16, f32_f16_f32>);
}

TEST_CASE("visit<P...> calls f with the listed policy matching the runtime policy, and only those are compiled",
          "[policy][visit][listed]") {
  using mixprec::full_precision;
  using mixprec::mixed_bfloat16;
  using mixprec::mixed_float16;
  const only_three f;
  CHECK(mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(mixprec::parse_policy("full"), f) == 1);
  CHECK(mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(mixprec::parse_policy("f32"), f) == 1);
  CHECK(mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(mixprec::parse_policy("p=f32,c=bf16,o=f32"), f) ==
        2);
  CHECK(mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(mixprec::parse_policy("c=float16,o=full"), f) ==
        3);
  // The order of the list does not matter.
  CHECK(mixprec::visit<mixed_float16, full_precision, mixed_bfloat16>(mixprec::parse_policy("c=bf16,o=f32"), f) == 2);
  // One listed policy is enough.
  CHECK(mixprec::visit<mixed_float16>(runtime_policy{dtype::float32, dtype::float16, dtype::float32}, f) == 3);
}

TEST_CASE("visit<P...> passes exactly the listed type", "[policy][visit][listed]") {
  using f16_f32 = mixprec::policy<mixprec::float16, float, float>;
  using all_f64 = mixprec::policy<double, double, double>;
  CHECK(mixprec::visit<f16_f32, all_f64>(mixprec::parse_policy("p=f16,c=f32"),
                                         [](auto policy) { return std::is_same_v<decltype(policy), f16_f32>; }));
  CHECK(mixprec::visit<f16_f32, all_f64>(mixprec::parse_policy("f64"),
                                         [](auto policy) { return std::is_same_v<decltype(policy), all_f64>; }));
}

TEST_CASE("visit<P...> refuses a float8 runtime_policy with the float8 rule's explanation",
          "[policy][visit][listed][errors]") {
  bool called = false;
  const auto mark = [&called](auto) { called = true; };
  const runtime_policy f8{dtype::float32, dtype::float32, dtype::float8_e5m2};
  CHECK_THROWS_AS((mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16>(f8, mark)), mixprec::policy_error);
  CHECK_THROWS_WITH((mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16>(f8, mark)),
                    Contains("mixprec::visit: runtime_policy.output (float8_e5m2)") &&
                        Contains("which no policy holds") && Contains("scaled::float8_weight_dot"));
  CHECK_FALSE(called);
}

TEST_CASE("visit<P...> returns what f returns, by value or by reference, and forwards f", "[policy][visit][listed]") {
  int counter = 0;
  int& r = mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16>(
      runtime_policy{}, [&counter](auto) -> int& { return counter; });
  r = 5;
  CHECK(counter == 5);

  counting f;  // callable only as an lvalue
  mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16>(runtime_policy{}, f);
  mixprec::visit<mixprec::full_precision, mixprec::mixed_bfloat16>(mixprec::parse_policy("p=f32,c=bf16,o=f32"), f);
  CHECK(f.calls == 2);

  // A void f.
  bool called = false;
  mixprec::visit<mixprec::mixed_bfloat16>(mixprec::parse_policy("p=f32,c=bf16,o=f32"),
                                          [&called](auto) { called = true; });
  CHECK(called);
}

TEST_CASE("visit<P...> throws a policy_error naming the runtime policy and every listed one",
          "[policy][visit][listed][errors]") {
  using mixprec::full_precision;
  using mixprec::mixed_bfloat16;
  using mixprec::mixed_float16;
  bool called = false;
  const auto mark = [&called](auto) { called = true; };
  const runtime_policy all_f16 = mixprec::parse_policy("c=f16");  // p=f32,c=f16,o=f16: not mixed_float16
  CHECK_THROWS_AS((mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(all_f16, mark)),
                  mixprec::policy_error);
  CHECK_THROWS_AS((mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(all_f16, mark)),
                  std::invalid_argument);
  CHECK_THROWS_WITH((mixprec::visit<full_precision, mixed_bfloat16, mixed_float16>(all_f16, mark)),
                    Contains("policy p=f32,c=f16,o=f16 is not one of the 3 listed policies") &&
                        Contains("(p=f32,c=f32,o=f32; p=f32,c=bf16,o=f32; p=f32,c=f16,o=f32)"));
  CHECK_FALSE(called);
  // A policy that no to_string accepts is still described.
  CHECK_THROWS_WITH(
      (mixprec::visit<full_precision>(runtime_policy{dtype::float32, dtype::int8, static_cast<dtype>(200)}, mark)),
      Contains("policy p=f32,c=int8,o=? is not one of the 1 listed policies (p=f32,c=f32,o=f32)"));
  CHECK_FALSE(called);
}

TEST_CASE("the 64-way visit also throws a policy_error", "[policy][visit][errors]") {
  CHECK_THROWS_AS(mixprec::visit(runtime_policy{dtype::float32, dtype::float8_e4m3fn, dtype::float32}, [](auto) {}),
                  mixprec::policy_error);
  CHECK_THROWS_AS(mixprec::visit(runtime_policy{dtype::float32, dtype::complex64, dtype::float32}, [](auto) {}),
                  mixprec::policy_error);
}

TEST_CASE("visit accepts exactly the policies parse_policy accepts", "[policy][visit][parse]") {
  // Every dtype name in every role: a policy string parses exactly when the 64-way visit dispatches its
  // policy, and parse_policy's error for a float8/float6/float4 name carries the explanation visit gives.
  for (const dtype d : mixprec::all_dtypes) {
    const std::string text = "p=f32,c=" + std::string(mixprec::name(d)) + ",o=f32";
    CAPTURE(text);
    const runtime_policy by_hand{dtype::float32, d, dtype::float32};
    bool parsed = true;
    std::string parse_message;
    try {
      const runtime_policy p = mixprec::parse_policy(text);  // outside CHECK, which would catch the throw
      CHECK(p == by_hand);
    } catch (const mixprec::policy_parse_error& e) {
      parsed = false;
      parse_message = e.what();
    }
    bool visited = true;
    std::string visit_message;
    try {
      mixprec::visit(by_hand, [](auto) {});
    } catch (const mixprec::policy_error& e) {
      visited = false;
      visit_message = e.what();
    }
    CHECK(parsed == visited);
    if (mixprec::is_small_float(d)) {
      const std::string explanation = std::string(mixprec::detail::small_float_policy_message(""));
      CHECK_THAT(parse_message, Contains(explanation));
      CHECK_THAT(visit_message, Contains(explanation));
    }
  }
}

}  // namespace visit_test
