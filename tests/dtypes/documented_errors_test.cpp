// The error audit of the dtypes (issue 12, "Every public entry point documents what it throws; a test
// covers each documented error"). Every documented error of include/mixprec/dtypes/ is triggered, with
// its message checked, by an existing test:
// - promotion.hpp: promote_types and result_type without a common type (float8, float6, float4, int4,
//   weak, strict mode), result_type of no dtypes, a value that is no enumerator (std::invalid_argument,
//   can_promote false): promotion_test.cpp; promote_t without a common type: tests/compile_fail/.
// - dtype.hpp: documents no throw; parse_dtype's std::nullopt for an unknown name was exercised only by
//   the fuzz target (tests/fuzz/parse_dtype_fuzz.cpp), so it is tested here.
// What the audit added: `name(d)` of a value that is no enumerator read out of bounds; it now gives
// "(not a dtype)", tested here.
#include <catch2/catch.hpp>

#include <optional>
#include <sstream>
#include <string>

#include "mixprec/dtypes/dtype.hpp"

namespace documented_errors_test {

using mixprec::dtype;

TEST_CASE("dtype.hpp: name of a value that is no enumerator does not read out of bounds", "[dtypes][errors][dtype]") {
  CHECK(mixprec::name(static_cast<dtype>(250)) == "(not a dtype)");
  CHECK(mixprec::name(static_cast<dtype>(mixprec::dtype_count)) == "(not a dtype)");
  CHECK(mixprec::name(dtype::weak_complex) == "complex*");
  STATIC_REQUIRE(mixprec::name(static_cast<dtype>(255)) == "(not a dtype)");
  std::ostringstream os;
  os << static_cast<dtype>(250);
  CHECK(os.str() == "dtype(250)");
}

TEST_CASE("dtype.hpp: parse_dtype of an unknown name gives std::nullopt", "[dtypes][errors][dtype]") {
  CHECK(mixprec::parse_dtype("float") == std::nullopt);
  CHECK(mixprec::parse_dtype("BF16") == std::nullopt);
  CHECK(mixprec::parse_dtype("") == std::nullopt);
  CHECK(mixprec::parse_dtype("(not a dtype)") == std::nullopt);
  CHECK(mixprec::parse_dtype("bf16") == dtype::bfloat16);
}

}  // namespace documented_errors_test
