// Tests for mixprec::parse_policy, to_string and operator<< (mixprec/policies/runtime_policy.hpp).
//
// References: jmp's own tests and docs, google-deepmind/jmp at commit
// 7b3a5f784eca7e1f0f9d231ef8c9dae181f01f16:
//   jmp/_src/policy_test.py  test_get_policy, test_get_policy_almost_dtype, test_get_policy_mixed,
//                            test_get_policy_compute, test_str
//   jmp/_src/policy.py       the grammar comment in get_policy and dtype_to_names
//   README.md                get_policy("params=float32,compute=float16,output=float32"), ("float16")
// Expected dtypes below are written from those sources, not computed by mixprec.
#include <catch2/catch.hpp>

#include <array>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/policies/runtime_policy.hpp"

namespace parse_policy_test {

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::parse_policy;
using mixprec::policy_parse_errc;
using mixprec::policy_parse_error;
using mixprec::runtime_policy;

namespace {

// jmp's dtype_to_names (policy.py), typed here as the reference.
struct named_dtype {
  std::string_view text;
  dtype value;
};
constexpr std::array<named_dtype, 9> jmp_dtype_names{{
    {"bf16", dtype::bfloat16},
    {"bfloat16", dtype::bfloat16},
    {"f16", dtype::float16},
    {"float16", dtype::float16},
    {"full", dtype::float32},
    {"f32", dtype::float32},
    {"float32", dtype::float32},
    {"f64", dtype::float64},
    {"float64", dtype::float64},
}};

// The outcome of parse_policy(text) when it must fail: the exception, for its accessors.
policy_parse_error parse_error(std::string_view text) {
  try {
    static_cast<void>(parse_policy(text));
  } catch (const policy_parse_error& e) {
    return e;
  }
  FAIL("parse_policy(\"" << std::string(text) << "\") did not throw");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("parse_policy reads a lone dtype as all three roles (jmp test_get_policy)", "[policy][parse]") {
  // jmp: parameters ("float16", np.float16), ("float32", np.float32), ("bfloat16", jnp.bfloat16).
  CHECK(parse_policy("float16") == runtime_policy{dtype::float16, dtype::float16, dtype::float16});
  CHECK(parse_policy("float32") == runtime_policy{dtype::float32, dtype::float32, dtype::float32});
  CHECK(parse_policy("bfloat16") == runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::bfloat16});
  // Every name of jmp's dtype_to_names works alone.
  for (const auto& [text, d] : jmp_dtype_names) {
    CAPTURE(text);
    CHECK(parse_policy(text) == runtime_policy{d, d, d});
  }
}

TEST_CASE("parse_policy defaults p to f32 and lets o follow c (jmp test_get_policy_mixed)", "[policy][parse]") {
  // jmp: get_policy(f"c={name}") -> param f32, compute = output = name, for float16, bfloat16, float32.
  CHECK(parse_policy("c=float16") == runtime_policy{dtype::float32, dtype::float16, dtype::float16});
  CHECK(parse_policy("c=bfloat16") == runtime_policy{dtype::float32, dtype::bfloat16, dtype::bfloat16});
  CHECK(parse_policy("c=float32") == runtime_policy{dtype::float32, dtype::float32, dtype::float32});
}

TEST_CASE("parse_policy reads c=<dtype>,o=full as p=f32,o=f32 (jmp test_get_policy_compute)", "[policy][parse]") {
  CHECK(parse_policy("c=float16,o=full") == runtime_policy{dtype::float32, dtype::float16, dtype::float32});
  CHECK(parse_policy("c=bfloat16,o=full") == runtime_policy{dtype::float32, dtype::bfloat16, dtype::float32});
  CHECK(parse_policy("c=float32,o=full") == runtime_policy{dtype::float32, dtype::float32, dtype::float32});
}

TEST_CASE("parse_policy accepts the examples of jmp's get_policy comment and README", "[policy][parse]") {
  // policy.py: "c=f16" (params full, compute+output in f16).
  CHECK(parse_policy("c=f16") == runtime_policy{dtype::float32, dtype::float16, dtype::float16});
  // "p=f16,c=f16" (params, compute and output in f16).
  CHECK(parse_policy("p=f16,c=f16") == runtime_policy{dtype::float16, dtype::float16, dtype::float16});
  // "p=f16,c=bf16" (params in f16, compute in bf16, output in bf16).
  CHECK(parse_policy("p=f16,c=bf16") == runtime_policy{dtype::float16, dtype::bfloat16, dtype::bfloat16});
  // "compute follows params": p alone sets all three.
  CHECK(parse_policy("p=bf16") == runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::bfloat16});
  // o alone: p defaults to f32, c follows p.
  CHECK(parse_policy("o=f16") == runtime_policy{dtype::float32, dtype::float32, dtype::float16});
  // README.md.
  CHECK(parse_policy("params=float32,compute=float16,output=float32") ==
        runtime_policy{dtype::float32, dtype::float16, dtype::float32});
  CHECK(parse_policy("float16") == runtime_policy{dtype::float16, dtype::float16, dtype::float16});
}

TEST_CASE("parse_policy accepts every key spelling with every dtype spelling", "[policy][parse]") {
  struct key {
    std::string_view text;
    int role;  // 0 param, 1 compute, 2 output
  };
  constexpr std::array<key, 6> keys{{{"p", 0}, {"params", 0}, {"c", 1}, {"compute", 1}, {"o", 2}, {"output", 2}}};
  for (const auto& k : keys) {
    for (const auto& [text, d] : jmp_dtype_names) {
      const std::string policy_text = std::string(k.text) + "=" + std::string(text);
      CAPTURE(policy_text);
      // The defaults chain p -> c -> o from float32.
      const dtype p = k.role == 0 ? d : dtype::float32;
      const dtype c = k.role == 1 ? d : p;
      const dtype o = k.role == 2 ? d : c;
      CHECK(parse_policy(policy_text) == runtime_policy{p, c, o});
    }
  }
}

TEST_CASE("parse_policy accepts the parts in any order", "[policy][parse]") {
  const runtime_policy expected{dtype::float64, dtype::bfloat16, dtype::float16};
  CHECK(parse_policy("p=f64,c=bf16,o=f16") == expected);
  CHECK(parse_policy("o=f16,c=bf16,p=f64") == expected);
  CHECK(parse_policy("c=bf16,o=f16,p=f64") == expected);
  CHECK(parse_policy("output=float16,params=float64,compute=bfloat16") == expected);
  // Defaults chain from the roles given, whatever their order: c follows p, o follows c.
  CHECK(parse_policy("c=bf16,p=f64") == runtime_policy{dtype::float64, dtype::bfloat16, dtype::bfloat16});
  CHECK(parse_policy("o=f16,p=f64") == runtime_policy{dtype::float64, dtype::float64, dtype::float16});
}

TEST_CASE("parse_policy ignores spaces around tokens", "[policy][parse]") {
  const runtime_policy mixed{dtype::float32, dtype::bfloat16, dtype::float32};
  CHECK(parse_policy(" p = f32 , c = bf16 , o = f32 ") == mixed);
  CHECK(parse_policy("p=f32, c=bf16, o=f32") == mixed);
  CHECK(parse_policy("\tp=f32,\tc=bf16\n,o=f32\r\n") == mixed);
  CHECK(parse_policy("  bf16  ") == runtime_policy{dtype::bfloat16, dtype::bfloat16, dtype::bfloat16});
}

TEST_CASE("parse_policy refuses a float8 dtype in each role, at its position, with the float8 rule",
          "[policy][parse][errors]") {
  struct bad {
    std::string_view text;
    std::size_t position;
    std::string_view token;
  };
  // Positions are 0-based character offsets, counted by hand.
  const std::array<bad, 7> cases{{
      {"p=float8_e4m3fn,c=bf16,o=f32", 2, "float8_e4m3fn"},
      {"p=f32,c=float8_e4m3fn,o=f32", 8, "float8_e4m3fn"},
      {"p=f32,c=bf16,o=float8_e5m2", 15, "float8_e5m2"},
      {"params=f32, compute = float8_e4m3fn ", 22, "float8_e4m3fn"},
      {"output=float8_e4m3fnuz", 7, "float8_e4m3fnuz"},
      {"c=float8_e8m0fnu", 2, "float8_e8m0fnu"},
      {"float8_e4m3fn", 0, "float8_e4m3fn"},  // a lone dtype: all three roles
  }};
  for (const bad& b : cases) {
    CAPTURE(b.text);
    const policy_parse_error e = parse_error(b.text);
    CHECK(e.code() == policy_parse_errc::small_float_dtype);
    CHECK(e.position() == b.position);
    CHECK(e.token() == b.token);
    CHECK_THAT(e.what(),
               Contains(std::string("dtype '").append(b.token).append("' at position ") + std::to_string(b.position)));
    CHECK_THAT(e.what(), Contains("is a float8, float6 or float4 dtype, which no policy holds"));
    // Why, and the explicit paths.
    CHECK_THAT(e.what(), Contains("1000 becomes NaN in float8_e4m3fn") && Contains("small values flush to zero"));
    CHECK_THAT(e.what(), Contains("\"p=f32,c=bf16,o=f32\"") && Contains("mixprec::scaled::float8_dot<>") &&
                             Contains("set_dot") && Contains("mixprec::scaled::float8_weight_dot") &&
                             Contains("mixprec::quantise<Format>") && Contains("mixprec::saturate_cast"));
  }
}

TEST_CASE("parse_policy refuses every float8, float6 and float4 dtype, and only those as small_float_dtype",
          "[policy][parse][errors]") {
  int refused = 0;
  for (const dtype d : mixprec::all_dtypes) {
    if (!mixprec::is_small_float(d)) continue;
    const std::string name(mixprec::name(d));
    CAPTURE(name);
    CHECK(parse_error("c=" + name).code() == policy_parse_errc::small_float_dtype);
    CHECK(parse_error(name).code() == policy_parse_errc::small_float_dtype);
    CHECK(parse_error("p=" + name + ",c=bf16").token() == name);
    ++refused;
  }
  CHECK(refused == 11);  // 8 float8, 2 float6, 1 float4
  CHECK(parse_error("c=float6_e2m3fn").code() == policy_parse_errc::small_float_dtype);
  CHECK(parse_error("o=float4_e2m1fn").code() == policy_parse_errc::small_float_dtype);
  // The first problem is reported: a float8 value before an unknown key later on.
  CHECK(parse_error("c=float8_e4m3fn,q=f32").code() == policy_parse_errc::small_float_dtype);
}

TEST_CASE("parse_policy errors are std::invalid_argument with the token, its position and the input",
          "[policy][parse][errors]") {
  CHECK_THROWS_AS(parse_policy("q=bf16"), std::invalid_argument);
  CHECK_THROWS_AS(parse_policy("q=bf16"), policy_parse_error);
  CHECK_THROWS_AS(parse_policy("q=bf16"), mixprec::policy_error);  // the one typed error of policies
  CHECK_THROWS_WITH(parse_policy("p=f32,q=bf16"), Contains("unknown key 'q'") && Contains("position 6") &&
                                                      Contains("\"p=f32,q=bf16\"") && Contains("p (or params)"));
}

TEST_CASE("parse_policy rejects each malformed form with its own code, token and position", "[policy][parse][errors]") {
  struct bad {
    std::string_view text;
    policy_parse_errc code;
    std::size_t position;
    std::string_view token;
    std::string_view message_part;  // a phrase what() must contain
  };
  // Positions are 0-based character offsets, counted by hand.
  const std::array<bad, 28> cases{{
      {"", policy_parse_errc::empty_input, 0, "", "empty policy string"},
      {"   ", policy_parse_errc::empty_input, 0, "", "empty policy string"},
      {"p=f32,,c=bf16", policy_parse_errc::empty_part, 6, "", "empty part at position 6"},
      {"p=f32,", policy_parse_errc::empty_part, 6, "", "empty part at position 6"},
      {",p=f32", policy_parse_errc::empty_part, 0, "", "empty part at position 0"},
      {"f32,", policy_parse_errc::empty_part, 4, "", "empty part at position 4"},
      {"p=f32, ,c=bf16", policy_parse_errc::empty_part, 6, "", "empty part at position 6"},
      {"p=f32,bf16", policy_parse_errc::missing_equals, 6, "bf16", "part 'bf16' at position 6"},
      {"bf16,f16", policy_parse_errc::missing_equals, 0, "bf16", "has no '='"},
      {"=bf16", policy_parse_errc::missing_key, 0, "", "missing key before '=' at position 0"},
      {"p=f32, =bf16", policy_parse_errc::missing_key, 7, "", "missing key before '=' at position 7"},
      {"q=bf16", policy_parse_errc::unknown_key, 0, "q", "unknown key 'q' at position 0"},
      {"p=f32,param=bf16", policy_parse_errc::unknown_key, 6, "param", "unknown key 'param' at position 6"},
      {"P=f32", policy_parse_errc::unknown_key, 0, "P", "unknown key 'P'"},
      {"p=f32,params=bf16", policy_parse_errc::repeated_key, 6, "params",
       "key 'params' at position 6 in \"p=f32,params=bf16\" sets the param dtype again "
       "(already set by 'p' at position 0)"},
      {"c=bf16, o=f32, c=f16", policy_parse_errc::repeated_key, 15, "c", "already set by 'c' at position 0"},
      {"p=", policy_parse_errc::missing_value, 2, "", "missing dtype after 'p=' at position 2"},
      {"p=f32,c= ", policy_parse_errc::missing_value, 8, "", "missing dtype after 'c=' at position 8"},
      {"p=f32=bf16", policy_parse_errc::extra_equals, 5, "=", "second '=' at position 5"},
      {"c=f8", policy_parse_errc::unknown_dtype, 2, "f8", "unknown dtype 'f8' at position 2"},
      {"p=f32,c=BF16", policy_parse_errc::unknown_dtype, 8, "BF16", "unknown dtype 'BF16' at position 8"},
      {"compute_float16", policy_parse_errc::unknown_dtype, 0, "compute_float16", "unknown dtype 'compute_float16'"},
      {"c=half", policy_parse_errc::platform_dependent_dtype, 2, "half", "write bf16 or f16"},
      {"half", policy_parse_errc::platform_dependent_dtype, 0, "half", "bfloat16 on TPU, float16 elsewhere"},
      {"c=int8", policy_parse_errc::not_floating_dtype, 2, "int8",
       "dtype 'int8' at position 2 in \"c=int8\" is not a floating dtype"},
      {"p = complex64", policy_parse_errc::not_floating_dtype, 4, "complex64",
       "'complex64' at position 4 in \"p = complex64\" is not a floating dtype"},
      {"o=float*", policy_parse_errc::weak_dtype, 2, "float*", "weakly typed float"},
      {"c=float8_e4m3fn", policy_parse_errc::small_float_dtype, 2, "float8_e4m3fn", "which no policy holds"},
  }};
  for (const bad& b : cases) {
    CAPTURE(b.text);
    const policy_parse_error e = parse_error(b.text);
    CHECK(e.code() == b.code);
    CHECK(e.position() == b.position);
    CHECK(e.token() == b.token);
    CHECK_THAT(e.what(), Contains(std::string(b.message_part)));
    // Appended, not `"\"" + std::string(...)`: GCC 12 -O3 reports a false -Wstringop-overflow there.
    CHECK_THAT(e.what(), Contains(std::string("\"").append(b.text).append("\"")));
  }
}

TEST_CASE("parse_policy rejects int8, bool and the integer and complex short names as not floating",
          "[policy][parse][errors]") {
  for (std::string_view name : {"i8", "int8", "u8", "bool", "b1", "int32", "c64", "complex128", "int*", "complex*"}) {
    CAPTURE(name);
    CHECK(parse_error("c=" + std::string(name)).code() == policy_parse_errc::not_floating_dtype);
    CHECK(parse_error(std::string(name)).code() == policy_parse_errc::not_floating_dtype);
  }
}

TEST_CASE("to_string writes the canonical p=,c=,o= form (jmp test_str, with f32 for full)", "[policy][to_string]") {
  // jmp test_str: str(Policy(d, d, d)) has each piece equal to dtype_to_names[d][0]; jmp's first name
  // for float32 is "full", mixprec's canonical one is "f32" (both parse).
  CHECK(mixprec::to_string({dtype::float16, dtype::float16, dtype::float16}) == "p=f16,c=f16,o=f16");
  CHECK(mixprec::to_string({dtype::bfloat16, dtype::bfloat16, dtype::bfloat16}) == "p=bf16,c=bf16,o=bf16");
  CHECK(mixprec::to_string({dtype::float32, dtype::float32, dtype::float32}) == "p=f32,c=f32,o=f32");
  CHECK(mixprec::to_string({dtype::float32, dtype::bfloat16, dtype::float32}) == "p=f32,c=bf16,o=f32");
  CHECK(mixprec::to_string({dtype::float64, dtype::float16, dtype::bfloat16}) == "p=f64,c=f16,o=bf16");
}

TEST_CASE("to_string round-trips through parse_policy for all 64 policies over f32, f64, bf16, f16",
          "[policy][to_string]") {
  constexpr std::array<named_dtype, 4> dtypes{
      {{"f32", dtype::float32}, {"f64", dtype::float64}, {"bf16", dtype::bfloat16}, {"f16", dtype::float16}}};
  int count = 0;
  for (const auto& p : dtypes) {
    for (const auto& c : dtypes) {
      for (const auto& o : dtypes) {
        const runtime_policy policy{p.value, c.value, o.value};
        const std::string expected =
            "p=" + std::string(p.text) + ",c=" + std::string(c.text) + ",o=" + std::string(o.text);
        CAPTURE(expected);
        CHECK(mixprec::to_string(policy) == expected);
        CHECK(parse_policy(mixprec::to_string(policy)) == policy);
        CHECK(parse_policy(expected) == policy);
        ++count;
      }
    }
  }
  CHECK(count == 64);
}

TEST_CASE("to_string refuses a hand-built runtime_policy holding a float8, float6 or float4 dtype",
          "[policy][to_string][errors]") {
  for (dtype d : mixprec::all_dtypes) {
    if (!mixprec::is_small_float(d)) continue;
    CAPTURE(mixprec::name(d));
    const runtime_policy policy{dtype::float32, d, dtype::bfloat16};
    CHECK_THROWS_AS(mixprec::to_string(policy), mixprec::policy_error);
    CHECK_THROWS_WITH(mixprec::to_string(policy),
                      Contains(std::string("mixprec::to_string: runtime_policy.compute (").append(mixprec::name(d))) &&
                          Contains("which no policy holds") && Contains("1000 becomes NaN in float8_e4m3fn") &&
                          Contains("scaled::float8_dot<>"));
    std::ostringstream os;
    CHECK_THROWS_AS(os << policy, mixprec::policy_error);
  }
}

TEST_CASE("to_string rejects a runtime_policy holding a non-floating dtype", "[policy][to_string][errors]") {
  CHECK_THROWS_AS(mixprec::to_string({dtype::float32, dtype::int8, dtype::float32}), std::invalid_argument);
  CHECK_THROWS_AS(mixprec::to_string({dtype::float32, dtype::int8, dtype::float32}), mixprec::policy_error);
  CHECK_THROWS_WITH(mixprec::to_string({dtype::float32, dtype::int8, dtype::float32}),
                    Contains("runtime_policy.compute is int8"));
  CHECK_THROWS_WITH(mixprec::to_string({dtype::weak_float, dtype::float32, dtype::float32}),
                    Contains("runtime_policy.param is float*"));
  CHECK_THROWS_WITH(mixprec::to_string({dtype::float32, dtype::float32, static_cast<dtype>(200)}),
                    Contains("runtime_policy.output holds 200"));
}

TEST_CASE("policy_parse_error is a policy_error, which is a std::invalid_argument", "[policy][errors]") {
  STATIC_REQUIRE(std::is_base_of_v<mixprec::policy_error, policy_parse_error>);
  STATIC_REQUIRE(std::is_base_of_v<std::invalid_argument, mixprec::policy_error>);
}

TEST_CASE("operator<< writes the canonical form", "[policy][to_string]") {
  std::ostringstream os;
  os << runtime_policy{dtype::float32, dtype::float16, dtype::float32};
  CHECK(os.str() == "p=f32,c=f16,o=f32");
}

#if defined(__cpp_lib_format)
TEST_CASE("std::format writes the canonical form, with a string's format spec", "[policy][to_string][format]") {
  const runtime_policy p{dtype::float32, dtype::float16, dtype::float32};
  CHECK(std::format("{}", p) == "p=f32,c=f16,o=f32");
  CHECK(std::format("[{:>20}]", p) == "[   p=f32,c=f16,o=f32]");
  CHECK_THROWS_AS(std::format("{}", runtime_policy{dtype::float32, dtype::int8, dtype::float32}),
                  mixprec::policy_error);
}
#endif

TEST_CASE("runtime_policy defaults to float32 everywhere and compares member-wise", "[policy]") {
  CHECK(runtime_policy{} == runtime_policy{dtype::float32, dtype::float32, dtype::float32});
  CHECK(runtime_policy{dtype::float32, dtype::bfloat16, dtype::float32} !=
        runtime_policy{dtype::float32, dtype::bfloat16, dtype::bfloat16});
  CHECK(runtime_policy{dtype::float16, dtype::float32, dtype::float32} !=
        runtime_policy{dtype::float32, dtype::float32, dtype::float32});
}

TEST_CASE("resolve gives each role of a runtime_policy", "[policy][resolve]") {
  const runtime_policy p{dtype::float64, dtype::bfloat16, dtype::float16};
  CHECK(mixprec::resolve(mixprec::semantic_dtype::param, p) == dtype::float64);
  CHECK(mixprec::resolve(mixprec::semantic_dtype::compute, p) == dtype::bfloat16);
  CHECK(mixprec::resolve(mixprec::semantic_dtype::output, p) == dtype::float16);
}

}  // namespace parse_policy_test
