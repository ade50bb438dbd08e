// Tests of mixprec/dtypes/promotion.hpp on dtype values: promote_types, result_type, can_promote,
// type_promotion_error.
//
// Expected values come from JAX, never from this code:
//   - the published binary promotion table, docs/type_promotion.rst (jax-ml/jax, also served at
//     https://docs.jax.dev/en/latest/type_promotion.html), transcribed below in full;
//   - JAX's own test tables and rules in tests/dtypes_test.py: TestPromotionTables.
//     testObservedPromotionTable (the x64-off table, observed from real `x + y` in jax.numpy),
//     DtypesTest.testPromoteDtypesStrict and testPromoteDtypesStandard, testFloat8PromotionError,
//     testInt2PromotionError;
//   - where neither has a case (float6/float4, intn against floats, order of error reasons), the
//     rules of jax/_src/dtypes.py (`_type_promotion_lattice`, `_least_upper_bound`), worked by
//     hand in the comments.

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "mixprec/dtypes/promotion.hpp"

namespace promotion_test {

using Catch::Matchers::Contains;
using mixprec::dtype;
using mixprec::promotion_mode;
using mixprec::promotion_options;

namespace {

constexpr promotion_options x64_on{};
constexpr promotion_options x64_off{.mode = promotion_mode::standard, .x64 = false};
constexpr promotion_options strict_x64{.mode = promotion_mode::strict, .x64 = true};
constexpr promotion_options strict_x32{.mode = promotion_mode::strict, .x64 = false};
constexpr std::array<promotion_options, 4> all_options{x64_on, x64_off, strict_x64, strict_x32};

std::string describe(promotion_options o) {
  return std::string(o.mode == promotion_mode::strict ? "strict" : "standard") + (o.x64 ? ", x64 on" : ", x64 off");
}

/// promote_types through its throwing interface: nullopt when it throws type_promotion_error.
std::optional<dtype> try_promote(dtype a, dtype b, promotion_options o) {
  try {
    return mixprec::promote_types(a, b, o);
  } catch (const mixprec::type_promotion_error&) {
    return std::nullopt;
  }
}

std::optional<dtype> try_result_type(std::vector<dtype> ds, promotion_options o) {
  try {
    return mixprec::result_type(ds, o);
  } catch (const mixprec::type_promotion_error&) {
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------
// The published table. JAX's docs name dtypes by kind and BYTE size: u1 = uint8, u2 = uint16,
// u4 = uint32, u8 = uint64, i1..i8 likewise, bf = bfloat16, f2 = float16, f4 = float32,
// f8 = float64, c8 = complex64, c16 = complex128, and i*, f*, c* are the weak int, float and
// complex (Python scalars). (Not to be confused with mixprec's bit-size short names, where "u8" is
// uint8.) In mixprec's bit-size names the rows/columns are
// b1 u8 u16 u32 u64 i8 i16 i32 i64 bf16 f16 f32 f64 c64 c128 i* f* c*.
// ---------------------------------------------------------------------------------------------

constexpr std::size_t table_size = 18;
using code_row = std::array<std::string_view, table_size>;

dtype from_docs_code(std::string_view code) {
  static constexpr std::array<std::pair<std::string_view, dtype>, table_size> codes{{
      {"b1", dtype::bool_},
      {"u1", dtype::uint8},
      {"u2", dtype::uint16},
      {"u4", dtype::uint32},
      {"u8", dtype::uint64},
      {"i1", dtype::int8},
      {"i2", dtype::int16},
      {"i4", dtype::int32},
      {"i8", dtype::int64},
      {"bf", dtype::bfloat16},
      {"f2", dtype::float16},
      {"f4", dtype::float32},
      {"f8", dtype::float64},
      {"c8", dtype::complex64},
      {"c16", dtype::complex128},
      {"i*", dtype::weak_int},
      {"f*", dtype::weak_float},
      {"c*", dtype::weak_complex},
  }};
  for (const auto& [c, d] : codes) {
    if (c == code) return d;
  }
  throw std::logic_error("unknown docs type code " + std::string(code));
}

// docs/type_promotion.rst, "Promotion between any two types is given by their join on this
// lattice, which generates the following binary promotion table" (x64 enabled), cell by cell.
constexpr code_row docs_header{"b1", "u1", "u2", "u4", "u8", "i1",  "i2", "i4", "i8",
                               "bf", "f2", "f4", "f8", "c8", "c16", "i*", "f*", "c*"};
constexpr std::array<code_row, table_size> docs_table{{
    // Columns in docs_header order. The first column (x b1) is the row's own type, since bool is the
    // bottom of the lattice, so each row starts with its label.
    {"b1", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i*", "f*", "c*"},
    {"u1", "u1", "u2", "u4", "u8", "i2", "i2", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "u1", "f*", "c*"},
    {"u2", "u2", "u2", "u4", "u8", "i4", "i4", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "u2", "f*", "c*"},
    {"u4", "u4", "u4", "u4", "u8", "i8", "i8", "i8", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "u4", "f*", "c*"},
    {"u8", "u8", "u8", "u8", "u8", "f*", "f*", "f*", "f*", "bf", "f2", "f4", "f8", "c8", "c16", "u8", "f*", "c*"},
    {"i1", "i2", "i4", "i8", "f*", "i1", "i2", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i1", "f*", "c*"},
    {"i2", "i2", "i4", "i8", "f*", "i2", "i2", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i2", "f*", "c*"},
    {"i4", "i4", "i4", "i8", "f*", "i4", "i4", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i4", "f*", "c*"},
    {"i8", "i8", "i8", "i8", "f*", "i8", "i8", "i8", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i8", "f*", "c*"},
    {"bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "f4", "f4", "f8", "c8", "c16", "bf", "bf", "c8"},
    {"f2", "f2", "f2", "f2", "f2", "f2", "f2", "f2", "f2", "f4", "f2", "f4", "f8", "c8", "c16", "f2", "f2", "c8"},
    {"f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f8", "c8", "c16", "f4", "f4", "c8"},
    {"f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "c16", "c16", "f8", "f8", "c16"},
    {"c8", "c8", "c8", "c8", "c8", "c8", "c8", "c8", "c8", "c8", "c8", "c8", "c16", "c8", "c16", "c8", "c8", "c8"},
    {"c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16", "c16",
     "c16", "c16"},
    {"i*", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "bf", "f2", "f4", "f8", "c8", "c16", "i*", "f*", "c*"},
    {"f*", "f*", "f*", "f*", "f*", "f*", "f*", "f*", "f*", "bf", "f2", "f4", "f8", "c8", "c16", "f*", "f*", "c*"},
    {"c*", "c*", "c*", "c*", "c*", "c*", "c*", "c*", "c*", "c8", "c8", "c8", "c16", "c8", "c16", "c*", "c*", "c*"},
}};

// ---------------------------------------------------------------------------------------------
// The x64-off table. The docs show none; JAX's tests/dtypes_test.py has one
// (TestPromotionTables.testObservedPromotionTable, `else:` branch), observed from `v1 + v2` on
// jax.numpy values with jax_enable_x64 off. That test uses its own codes: the same byte sizes,
// except complex is c4 = complex64 and c8 = complex128 (so "c8" means something else than in the
// docs table above).
//
// Worked from the source rules, it is what we expect: (1) every 64-bit input is canonicalised to
// 32 bits first (u8 -> u4, i8 -> i4, f8 -> f4, c8 -> c4), so those rows and columns repeat the
// 32-bit ones; (2) the x32 lattice replaces uint32's successors [i64, u64] by [i32, u64], so
// u4 x i1, u4 x i2, u4 x i4 give i4 where the x64 table has i8; (3) nothing else changes, because
// the patch only adds int32 to UB(uint32), and int32 was already an upper bound of everything
// below uint32.
// ---------------------------------------------------------------------------------------------

dtype from_jax_test_code(std::string_view code) {
  static constexpr std::array<std::pair<std::string_view, dtype>, table_size> codes{{
      {"b1", dtype::bool_},
      {"u1", dtype::uint8},
      {"u2", dtype::uint16},
      {"u4", dtype::uint32},
      {"u8", dtype::uint64},
      {"i1", dtype::int8},
      {"i2", dtype::int16},
      {"i4", dtype::int32},
      {"i8", dtype::int64},
      {"bf", dtype::bfloat16},
      {"f2", dtype::float16},
      {"f4", dtype::float32},
      {"f8", dtype::float64},
      {"c4", dtype::complex64},
      {"c8", dtype::complex128},
      {"i*", dtype::weak_int},
      {"f*", dtype::weak_float},
      {"c*", dtype::weak_complex},
  }};
  for (const auto& [c, d] : codes) {
    if (c == code) return d;
  }
  throw std::logic_error("unknown JAX test type code " + std::string(code));
}

constexpr code_row jax_test_header{"b1", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8",
                                   "bf", "f2", "f4", "f8", "c4", "c8", "i*", "f*", "c*"};
constexpr std::array<code_row, table_size> jax_test_x32_table{{
    {"b1", "u1", "u2", "u4", "u4", "i1", "i2", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i*", "f*", "c*"},
    {"u1", "u1", "u2", "u4", "u4", "i2", "i2", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "u1", "f*", "c*"},
    {"u2", "u2", "u2", "u4", "u4", "i4", "i4", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "u2", "f*", "c*"},
    {"u4", "u4", "u4", "u4", "u4", "i4", "i4", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "u4", "f*", "c*"},
    {"u4", "u4", "u4", "u4", "u4", "i4", "i4", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "u4", "f*", "c*"},
    {"i1", "i2", "i4", "i4", "i4", "i1", "i2", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i1", "f*", "c*"},
    {"i2", "i2", "i4", "i4", "i4", "i2", "i2", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i2", "f*", "c*"},
    {"i4", "i4", "i4", "i4", "i4", "i4", "i4", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i4", "f*", "c*"},
    {"i4", "i4", "i4", "i4", "i4", "i4", "i4", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i4", "f*", "c*"},
    {"bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "bf", "f4", "f4", "f4", "c4", "c4", "bf", "bf", "c4"},
    {"f2", "f2", "f2", "f2", "f2", "f2", "f2", "f2", "f2", "f4", "f2", "f4", "f4", "c4", "c4", "f2", "f2", "c4"},
    {"f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "c4", "c4", "f4", "f4", "c4"},
    {"f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "c4", "c4", "f4", "f4", "c4"},
    {"c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4"},
    {"c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4", "c4"},
    {"i*", "u1", "u2", "u4", "u4", "i1", "i2", "i4", "i4", "bf", "f2", "f4", "f4", "c4", "c4", "i*", "f*", "c*"},
    {"f*", "f*", "f*", "f*", "f*", "f*", "f*", "f*", "f*", "bf", "f2", "f4", "f4", "c4", "c4", "f*", "f*", "c*"},
    {"c*", "c*", "c*", "c*", "c*", "c*", "c*", "c*", "c*", "c4", "c4", "c4", "c4", "c4", "c4", "c*", "c*", "c*"},
}};

// ---------------------------------------------------------------------------------------------
// The dtype groups of JAX's tests/dtypes_test.py, written out here (not taken from dtype.hpp).
// ---------------------------------------------------------------------------------------------
constexpr std::array bool_dtypes{dtype::bool_};
constexpr std::array int_dtypes{dtype::int2,  dtype::int4,  dtype::int8,  dtype::int16,  dtype::int32,  dtype::int64,
                                dtype::uint2, dtype::uint4, dtype::uint8, dtype::uint16, dtype::uint32, dtype::uint64};
constexpr std::array float_dtypes{dtype::bfloat16,        dtype::float16,         dtype::float32,
                                  dtype::float64,         dtype::float8_e4m3fn,   dtype::float8_e5m2,
                                  dtype::float8_e4m3fnuz, dtype::float8_e5m2fnuz, dtype::float8_e4m3b11fnuz,
                                  dtype::float8_e3m4,     dtype::float8_e4m3,     dtype::float8_e8m0fnu,
                                  dtype::float6_e2m3fn,   dtype::float6_e3m2fn,   dtype::float4_e2m1fn};
constexpr std::array complex_dtypes{dtype::complex64, dtype::complex128};
constexpr std::array fp8_dtypes{dtype::float8_e4m3fn,   dtype::float8_e5m2,        dtype::float8_e4m3fnuz,
                                dtype::float8_e5m2fnuz, dtype::float8_e4m3b11fnuz, dtype::float8_e3m4,
                                dtype::float8_e4m3,     dtype::float8_e8m0fnu};
constexpr std::array intn_dtypes{dtype::int2, dtype::uint2, dtype::int4, dtype::uint4};
constexpr std::array small_float_dtypes{dtype::float8_e4m3fn,   dtype::float8_e5m2,        dtype::float8_e4m3fnuz,
                                        dtype::float8_e5m2fnuz, dtype::float8_e4m3b11fnuz, dtype::float8_e3m4,
                                        dtype::float8_e4m3,     dtype::float8_e8m0fnu,     dtype::float6_e2m3fn,
                                        dtype::float6_e3m2fn,   dtype::float4_e2m1fn};
constexpr std::array weak_dtypes{dtype::weak_int, dtype::weak_float, dtype::weak_complex};

/// JAX's x64-off canonicalisation, as JAX's tests/dtypes_test.py spells it
/// (_EXPECTED_CANONICALIZE_X32: int64 -> int32, uint64 -> uint32, float64 -> float32,
/// complex128 -> complex64; everything else unchanged).
dtype canonical(dtype d, promotion_options o) {
  if (o.x64) return d;
  switch (d) {
    case dtype::int64: return dtype::int32;
    case dtype::uint64: return dtype::uint32;
    case dtype::float64: return dtype::float32;
    case dtype::complex128: return dtype::complex64;
    default: return d;
  }
}

template <class Range>
bool contains(const Range& r, dtype d) {
  return std::find(std::begin(r), std::end(r), d) != std::end(r);
}

}  // namespace

TEST_CASE("the test's dtype groups cover every dtype exactly once", "[promotion]") {
  for (dtype d : mixprec::all_dtypes) {
    INFO(mixprec::name(d));
    const int groups = int(contains(bool_dtypes, d)) + int(contains(int_dtypes, d)) + int(contains(float_dtypes, d)) +
                       int(contains(complex_dtypes, d)) + int(contains(weak_dtypes, d));
    CHECK(groups == 1);
  }
}

TEST_CASE("promote_types reproduces JAX's published promotion table with x64 on", "[promotion][jax-table]") {
  for (std::size_t r = 0; r < table_size; ++r) {
    for (std::size_t c = 0; c < table_size; ++c) {
      const dtype a = from_docs_code(docs_header[r]);
      const dtype b = from_docs_code(docs_header[c]);
      const dtype expected = from_docs_code(docs_table[r][c]);
      INFO(docs_header[r] << " x " << docs_header[c] << " -> " << docs_table[r][c]);
      CHECK(mixprec::promote_types(a, b) == expected);
      CHECK(mixprec::promote_types(a, b, x64_on) == expected);
    }
  }
}

TEST_CASE("promote_types reproduces the x64-off table of JAX's own tests", "[promotion][jax-table][x64]") {
  for (std::size_t r = 0; r < table_size; ++r) {
    for (std::size_t c = 0; c < table_size; ++c) {
      const dtype a = from_jax_test_code(jax_test_header[r]);
      const dtype b = from_jax_test_code(jax_test_header[c]);
      const dtype expected = from_jax_test_code(jax_test_x32_table[r][c]);
      INFO(jax_test_header[r] << " x " << jax_test_header[c] << " -> " << jax_test_x32_table[r][c]);
      CHECK(mixprec::promote_types(a, b, x64_off) == expected);
    }
  }
}

TEST_CASE("the x64 switch changes exactly the cells JAX's source says it does", "[promotion][x64]") {
  // The uint32 edge: uint32 x int8/int16/int32 is int64 with x64 on, int32 with it off.
  for (dtype i : {dtype::int8, dtype::int16, dtype::int32}) {
    INFO(mixprec::name(i));
    CHECK(mixprec::promote_types(dtype::uint32, i, x64_on) == dtype::int64);
    CHECK(mixprec::promote_types(dtype::uint32, i, x64_off) == dtype::int32);
  }
  // Canonicalisation of 64-bit inputs (JAX canonicalize_dtype), e.g. jnp.result_type('float64')
  // is float32 with x64 off (jax.numpy.result_type docs).
  CHECK(mixprec::result_type(x64_off, dtype::float64) == dtype::float32);
  CHECK(mixprec::result_type(x64_off, dtype::int64) == dtype::int32);
  CHECK(mixprec::result_type(x64_off, dtype::uint64) == dtype::uint32);
  CHECK(mixprec::result_type(x64_off, dtype::complex128) == dtype::complex64);
  CHECK(mixprec::result_type(x64_on, dtype::float64) == dtype::float64);
  // uint64 x int64 is the weak float f* with x64 on (docs table), int32 with x64 off (JAX test table).
  CHECK(mixprec::promote_types(dtype::uint64, dtype::int64, x64_on) == dtype::weak_float);
  CHECK(mixprec::promote_types(dtype::uint64, dtype::int64, x64_off) == dtype::int32);
  // Weak dtypes are not canonicalised away.
  CHECK(mixprec::promote_types(dtype::weak_int, dtype::weak_float, x64_off) == dtype::weak_float);
}

TEST_CASE("with x64 off no promotion produces a 64-bit dtype", "[promotion][x64]") {
  const std::array wide{dtype::int64, dtype::uint64, dtype::float64, dtype::complex128};
  for (dtype a : mixprec::all_dtypes) {
    for (dtype b : mixprec::all_dtypes) {
      INFO(mixprec::name(a) << " x " << mixprec::name(b));
      for (promotion_options o : {x64_off, strict_x32}) {
        if (const auto r = try_promote(a, b, o)) CHECK_FALSE(contains(wide, *r));
      }
    }
  }
}

TEST_CASE("every dtype promotes with itself to itself, and with bool to itself", "[promotion][laws]") {
  // JAX testPromoteDtypesStandard: promote_types(t1, t1) == t1 and promote_types(t1, bool) == t1
  // for all dtypes, float8 and intn included.
  for (dtype d : mixprec::all_dtypes) {
    INFO(mixprec::name(d));
    CHECK(mixprec::promote_types(d, d) == d);
    CHECK(mixprec::promote_types(d, dtype::bool_) == d);
    CHECK(mixprec::promote_types(dtype::bool_, d) == d);
    // Idempotence in every mode (after x64-off canonicalisation: float64 x float64 is float32).
    for (promotion_options o : all_options) {
      INFO(describe(o));
      CHECK(mixprec::promote_types(d, d, o) == canonical(d, o));
      CHECK(mixprec::result_type(o, d) == canonical(d, o));
    }
  }
}

TEST_CASE("promote_types is commutative over every pair of dtypes in every mode", "[promotion][laws]") {
  for (promotion_options o : all_options) {
    for (dtype a : mixprec::all_dtypes) {
      for (dtype b : mixprec::all_dtypes) {
        INFO(describe(o) << ": " << mixprec::name(a) << " x " << mixprec::name(b));
        CHECK(try_promote(a, b, o) == try_promote(b, a, o));
        CHECK(mixprec::can_promote(a, b, o) == try_promote(a, b, o).has_value());
      }
    }
  }
}

namespace {
// The dtype's enumerator value, or -1 for "no upper bound".
int code(std::optional<dtype> d) { return d ? static_cast<int>(*d) : -1; }
}  // namespace

TEST_CASE("promote_types is associative over every triple of dtypes in every mode", "[promotion][laws]") {
  // JAX's lattices are well formed (every pair with a common upper bound has a least one; JAX
  // raises "Internal Type Promotion error" otherwise, and lattice.hpp static_asserts it). Then
  // a v (b v c) is defined iff b v c is and CUB(a, b, c) is non-empty, which implies CUB(a, b) is
  // non-empty, so (a v b) v c is defined too, and both equal the join of {a, b, c}, which is what
  // JAX's n-ary _least_upper_bound computes. So a triple where one grouping is defined and the other
  // is not would be an associativity failure, not a JAX rule: the check below demands both or neither.
  for (promotion_options o : all_options) {
    std::size_t defined = 0;
    for (dtype a : mixprec::all_dtypes) {
      for (dtype b : mixprec::all_dtypes) {
        const auto ab = try_promote(a, b, o);
        for (dtype c : mixprec::all_dtypes) {
          const auto bc = try_promote(b, c, o);
          // Compared as codes (-1: undefined): GCC 12 at -O2 reports a false -Wmaybe-uninitialized
          // for `!=` between two std::optional<dtype> built by conditional expressions.
          const int left = ab ? code(try_promote(*ab, c, o)) : -1;
          const int right = bc ? code(try_promote(a, *bc, o)) : -1;
          const int all3 = code(try_result_type({a, b, c}, o));
          if (left != right || left != all3) {
            FAIL_CHECK(describe(o) << ": (" << mixprec::name(a) << " v " << mixprec::name(b) << ") v "
                                   << mixprec::name(c) << " differs from the other grouping or from result_type");
          }
          defined += left >= 0 ? 1 : 0;
        }
      }
    }
    INFO(describe(o));
    CHECK(defined > 0);  // the loop did test something
  }
}

TEST_CASE("strict mode follows JAX's testPromoteDtypesStrict", "[promotion][strict]") {
  for (promotion_options o : {strict_x64, strict_x32}) {
    INFO(describe(o));
    // Strong dtypes have a diagonal promotion table (x64 on; with x64 off, 64-bit inputs are
    // canonicalised first, so int64 and int32 are the same dtype: checked further down).
    if (o.x64) {
      for (dtype t1 : mixprec::all_dtypes) {
        for (dtype t2 : mixprec::all_dtypes) {
          if (contains(weak_dtypes, t1) || contains(weak_dtypes, t2)) continue;
          INFO(mixprec::name(t1) << " x " << mixprec::name(t2));
          if (t1 == t2) {
            CHECK(mixprec::promote_types(t1, t2, o) == t1);
          } else {
            CHECK_THROWS_WITH(mixprec::promote_types(t1, t2, o), Contains("strict"));
          }
        }
      }
    }
    // Weak x weak matches Python: int + float is float, anything + complex is complex.
    CHECK(mixprec::promote_types(dtype::weak_int, dtype::weak_int, o) == dtype::weak_int);
    CHECK(mixprec::promote_types(dtype::weak_int, dtype::weak_float, o) == dtype::weak_float);
    CHECK(mixprec::promote_types(dtype::weak_int, dtype::weak_complex, o) == dtype::weak_complex);
    CHECK(mixprec::promote_types(dtype::weak_float, dtype::weak_float, o) == dtype::weak_float);
    CHECK(mixprec::promote_types(dtype::weak_float, dtype::weak_complex, o) == dtype::weak_complex);
    CHECK(mixprec::promote_types(dtype::weak_complex, dtype::weak_complex, o) == dtype::weak_complex);
    // "weak promotion only works if strong value is not cast":
    for (dtype t : bool_dtypes) {
      for (dtype w : weak_dtypes) CHECK_THROWS_AS(mixprec::promote_types(t, w, o), mixprec::type_promotion_error);
    }
    for (dtype t : int_dtypes) {
      INFO(mixprec::name(t));
      CHECK(mixprec::promote_types(t, dtype::weak_int, o) == canonical(t, o));
      CHECK_THROWS_AS(mixprec::promote_types(t, dtype::weak_float, o), mixprec::type_promotion_error);
      CHECK_THROWS_AS(mixprec::promote_types(t, dtype::weak_complex, o), mixprec::type_promotion_error);
    }
    for (dtype t : float_dtypes) {
      INFO(mixprec::name(t));
      CHECK(mixprec::promote_types(t, dtype::weak_int, o) == canonical(t, o));
      CHECK(mixprec::promote_types(t, dtype::weak_float, o) == canonical(t, o));
      CHECK_THROWS_AS(mixprec::promote_types(t, dtype::weak_complex, o), mixprec::type_promotion_error);
    }
    for (dtype t : complex_dtypes) {
      INFO(mixprec::name(t));
      CHECK(mixprec::promote_types(t, dtype::weak_int, o) == canonical(t, o));
      CHECK(mixprec::promote_types(t, dtype::weak_float, o) == canonical(t, o));
      CHECK(mixprec::promote_types(t, dtype::weak_complex, o) == canonical(t, o));
    }
  }
  // x64 off canonicalises inputs before the lattice, so 64-bit and 32-bit of one kind meet as one
  // dtype (JAX lattice_result_type's "trivial promotion" of equal dtypes); with x64 on they do not.
  CHECK(mixprec::promote_types(dtype::int64, dtype::int32, strict_x32) == dtype::int32);
  CHECK(mixprec::promote_types(dtype::float64, dtype::float32, strict_x32) == dtype::float32);
  CHECK_THROWS_AS(mixprec::promote_types(dtype::int64, dtype::int32, strict_x64), mixprec::type_promotion_error);
  CHECK_THROWS_AS(mixprec::promote_types(dtype::int8, dtype::int16, strict_x32), mixprec::type_promotion_error);
}

TEST_CASE("strict mode errors name the dtypes and say how to fix them", "[promotion][strict][errors]") {
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float32, dtype::float64, strict_x64),
                    Contains("cannot promote float32 and float64") && Contains("strict") &&
                        Contains("cast one explicitly") && Contains("promotion_mode::standard"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::bool_, dtype::weak_int, strict_x64),
                    Contains("cannot promote bool and int*") && Contains("strict"));
  // Strict wins over the float8 reason, as in JAX's _least_upper_bound.
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float8_e5m2, dtype::bfloat16, strict_x64),
                    Contains("strict") && !Contains("float8 types"));
}

TEST_CASE("the standard lattice promotes integers and bool into every float, small floats included",
          "[promotion][small-types]") {
  // JAX testPromoteDtypesStandard: "Promotions of non-inexact types against inexact types always
  // prefer the inexact types" (bool and the 8..64-bit integers; JAX skips fp8 there). The lattice
  // puts the small floats under f*, so the rule holds for them too: int8 -> int16 -> int32 ->
  // int64 -> f* -> float8_e4m3fn, and uint8 -> ... -> uint64 -> f* likewise.
  const std::array exact{dtype::bool_, dtype::int8,   dtype::int16,  dtype::int32,  dtype::int64,
                         dtype::uint8, dtype::uint16, dtype::uint32, dtype::uint64, dtype::weak_int};
  for (dtype t : float_dtypes) {
    for (dtype i : exact) {
      INFO(mixprec::name(t) << " x " << mixprec::name(i));
      CHECK(mixprec::promote_types(t, i) == t);
      CHECK(mixprec::promote_types(i, t) == t);
    }
  }
  for (dtype t : complex_dtypes) {
    for (dtype i : exact) CHECK(mixprec::promote_types(t, i) == t);
  }
  // A weak float adapts to any float, small ones included (f*: [*small_float_types, bf16, f16, c_]).
  for (dtype t : float_dtypes) {
    INFO(mixprec::name(t));
    CHECK(mixprec::promote_types(t, dtype::weak_float) == t);
  }
  // A weak int adapts to the sub-byte integers (i*: [u8, u2, u4, i8, i2, i4]).
  for (dtype t : intn_dtypes) {
    INFO(mixprec::name(t));
    CHECK(mixprec::promote_types(t, dtype::weak_int) == t);
    CHECK(mixprec::promote_types(dtype::bool_, t) == t);
  }
}

TEST_CASE("float8 types do not promote implicitly, with a message that names both dtypes",
          "[promotion][small-types][errors]") {
  // JAX testFloat8PromotionError: every float8 + float32 raises "8-bit floats do not support
  // implicit promotion".
  for (dtype f8 : fp8_dtypes) {
    INFO(mixprec::name(f8));
    CHECK_THROWS_AS(mixprec::promote_types(f8, dtype::float32), mixprec::type_promotion_error);
    CHECK_THROWS_AS(mixprec::promote_types(f8, dtype::float32), std::invalid_argument);
    CHECK_THROWS_WITH(mixprec::promote_types(f8, dtype::float32),
                      Contains(std::string(mixprec::name(f8))) && Contains("float32") &&
                          Contains("float8 types do not promote implicitly") && Contains("cast one explicitly"));
  }
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float8_e4m3fn, dtype::bfloat16),
                    Contains("cannot promote float8_e4m3fn and bfloat16: float8 types do not promote implicitly; "
                             "cast one explicitly"));
  // Two different float8 types, float8 against complex and the weak complex (f* reaches the small
  // floats, c* does not).
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float8_e4m3fn, dtype::float8_e5m2),
                    Contains("float8_e4m3fn and float8_e5m2") && Contains("float8 types"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float8_e5m2, dtype::complex64), Contains("float8 types"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float8_e5m2, dtype::weak_complex),
                    Contains("float8_e5m2 and complex*") && Contains("float8 types"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float16, dtype::float8_e8m0fnu),
                    Contains("float16 and float8_e8m0fnu"));
}

TEST_CASE("float6 and float4 types do not promote implicitly", "[promotion][small-types][errors]") {
  // JAX _least_upper_bound: "6-bit floats do not support implicit promotion", and 4-bit likewise.
  CHECK_THROWS_WITH(
      mixprec::promote_types(dtype::float6_e2m3fn, dtype::float6_e3m2fn),
      Contains("cannot promote float6_e2m3fn and float6_e3m2fn") && Contains("float6 types do not promote implicitly"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float6_e3m2fn, dtype::bfloat16),
                    Contains("float6 types do not promote implicitly"));
  CHECK_THROWS_WITH(
      mixprec::promote_types(dtype::float4_e2m1fn, dtype::float16),
      Contains("cannot promote float4_e2m1fn and float16") && Contains("float4 types do not promote implicitly"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::complex128, dtype::float4_e2m1fn),
                    Contains("float4 types do not promote implicitly"));
  // JAX tests float8 before float6 before float4.
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float4_e2m1fn, dtype::float6_e2m3fn), Contains("float6 types"));
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float6_e2m3fn, dtype::float8_e4m3), Contains("float8 types"));
}

TEST_CASE("int2, int4, uint2 and uint4 do not promote implicitly", "[promotion][small-types][errors]") {
  // JAX testInt2PromotionError: every intn + int32 raises "[24]-bit integers do not support
  // implicit promotion". The lattice gives them no successors at all, so they meet nothing but
  // themselves, bool and i* (the weak float does not reach them either).
  for (dtype t : intn_dtypes) {
    INFO(mixprec::name(t));
    CHECK_THROWS_WITH(mixprec::promote_types(t, dtype::int32),
                      Contains(std::string(mixprec::name(t)) + " and int32") &&
                          Contains("int2, int4, uint2 and uint4 do not promote implicitly") &&
                          Contains("cast one explicitly"));
    CHECK_THROWS_AS(mixprec::promote_types(t, dtype::weak_float), mixprec::type_promotion_error);
    CHECK_THROWS_AS(mixprec::promote_types(t, dtype::float32), mixprec::type_promotion_error);
    CHECK_THROWS_AS(mixprec::promote_types(t, dtype::uint8), mixprec::type_promotion_error);
  }
  CHECK_THROWS_AS(mixprec::promote_types(dtype::int4, dtype::uint4), mixprec::type_promotion_error);
  CHECK_THROWS_AS(mixprec::promote_types(dtype::int2, dtype::int4), mixprec::type_promotion_error);
  // A small float and a sub-byte integer: JAX names the float8 reason first.
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::int4, dtype::float8_e4m3fn),
                    Contains("int4 and float8_e4m3fn") && Contains("float8 types"));
}

TEST_CASE("exactly the small floats, the sub-byte integers and their partners fail to promote",
          "[promotion][small-types][errors]") {
  // In standard mode a pair fails iff one side is a small float or intn that the other side does
  // not lie under. The dtypes under a small float: itself, bool, the integers of 8..64 bits and the
  // weak int and float; under an intn: itself, bool and the weak int (hand-read from the lattice).
  const std::array under_small_float{dtype::bool_,  dtype::int8,     dtype::int16,     dtype::int32,
                                     dtype::int64,  dtype::uint8,    dtype::uint16,    dtype::uint32,
                                     dtype::uint64, dtype::weak_int, dtype::weak_float};
  for (promotion_options o : {x64_on, x64_off}) {
    for (dtype a : mixprec::all_dtypes) {
      for (dtype b : mixprec::all_dtypes) {
        bool expect_ok = true;
        for (auto [s, t] : {std::pair{a, b}, std::pair{b, a}}) {
          if (s == t) continue;
          if (contains(small_float_dtypes, s) && !contains(under_small_float, t)) expect_ok = false;
          if (contains(intn_dtypes, s) && t != dtype::bool_ && t != dtype::weak_int) expect_ok = false;
        }
        INFO(describe(o) << ": " << mixprec::name(a) << " x " << mixprec::name(b));
        CHECK(mixprec::can_promote(a, b, o) == expect_ok);
      }
    }
  }
}

TEST_CASE("result_type joins any number of dtypes", "[promotion][result_type]") {
  // jax.numpy.result_type docs: result_type('int32', 'float32') is float32; result_type(np.uint16,
  // np.dtype('int32')) is int32; result_type(1.0, jnp.bfloat16(2)) is bfloat16.
  CHECK(mixprec::result_type(dtype::int32, dtype::float32) == dtype::float32);
  CHECK(mixprec::result_type(dtype::uint16, dtype::int32) == dtype::int32);
  CHECK(mixprec::result_type(dtype::weak_float, dtype::bfloat16) == dtype::bfloat16);
  // jax.numpy.promote_types docs: promote_types('uint8', int) is uint8, ('float16', float) float16.
  CHECK(mixprec::promote_types(dtype::uint8, dtype::weak_int) == dtype::uint8);
  CHECK(mixprec::promote_types(dtype::float16, dtype::weak_float) == dtype::float16);
  // One dtype is itself (x64 on).
  for (dtype d : mixprec::all_dtypes) CHECK(mixprec::result_type(d) == d);
  // Three and more, from the docs table: u1 v i1 = i2; i2 v f* = f*; f* v bf = bf.
  CHECK(mixprec::result_type(dtype::uint8, dtype::int8) == dtype::int16);
  CHECK(mixprec::result_type(dtype::uint8, dtype::int8, dtype::weak_float) == dtype::weak_float);
  CHECK(mixprec::result_type(dtype::uint8, dtype::int8, dtype::weak_float, dtype::bfloat16) == dtype::bfloat16);
  // bf v f2 = f4 (the one notable bfloat16 rule), then f4 v c* = c8 = complex64.
  CHECK(mixprec::result_type(dtype::bfloat16, dtype::float16, dtype::weak_complex) == dtype::complex64);
  // With options first, and as a span.
  CHECK(mixprec::result_type(x64_off, dtype::uint32, dtype::int32, dtype::int8) == dtype::int32);
  CHECK(mixprec::result_type(x64_on, dtype::uint32, dtype::int32, dtype::int8) == dtype::int64);
  const std::vector<dtype> inputs{dtype::int8, dtype::bfloat16, dtype::weak_float};
  CHECK(mixprec::result_type(inputs) == dtype::bfloat16);
  CHECK_THROWS_AS(mixprec::result_type(inputs, strict_x64), mixprec::type_promotion_error);  // int8 x bfloat16
  const std::array<dtype, 2> strict_ok{dtype::float16, dtype::weak_float};
  CHECK(mixprec::result_type(strict_ok, strict_x64) == dtype::float16);
}

TEST_CASE("result_type does not depend on the order of its arguments", "[promotion][result_type]") {
  std::array<dtype, 4> ds{dtype::bfloat16, dtype::float16, dtype::uint8, dtype::weak_int};  // sorted by enum value
  std::sort(ds.begin(), ds.end());
  do {
    CHECK(mixprec::result_type(std::span<const dtype>(ds)) == dtype::float32);
  } while (std::next_permutation(ds.begin(), ds.end()));
}

TEST_CASE("result_type errors list every input dtype", "[promotion][result_type][errors]") {
  CHECK_THROWS_WITH(mixprec::result_type(dtype::int8, dtype::bfloat16, dtype::float8_e4m3fn),
                    Contains("cannot promote int8, bfloat16 and float8_e4m3fn: float8 types do not promote"));
  const std::vector<dtype> none;
  CHECK_THROWS_AS(mixprec::result_type(none), mixprec::type_promotion_error);
  CHECK_THROWS_WITH(mixprec::result_type(none), Contains("at least one dtype"));
  CHECK_THROWS_WITH(mixprec::result_type(strict_x64, dtype::int8, dtype::bfloat16),
                    Contains("cannot promote int8 and bfloat16") && Contains("strict"));
}

TEST_CASE("promote_types is usable in constant expressions", "[promotion][constexpr]") {
  static_assert(mixprec::promote_types(dtype::bfloat16, dtype::float16) == dtype::float32);
  static_assert(mixprec::promote_types(dtype::uint64, dtype::int8) == dtype::weak_float);
  static_assert(mixprec::result_type(dtype::int32, dtype::weak_float, dtype::float16) == dtype::float16);
  static_assert(mixprec::result_type(promotion_options{.x64 = false}, dtype::uint32, dtype::int32) == dtype::int32);
  static_assert(!mixprec::can_promote(dtype::float8_e4m3fn, dtype::bfloat16));
  STATIC_REQUIRE(mixprec::promote_types(dtype::weak_int, dtype::weak_float) == dtype::weak_float);
}

TEST_CASE("a dtype value outside the enumeration is rejected with std::invalid_argument, not read out of bounds",
          "[promotion][errors]") {
  const auto bad = static_cast<dtype>(200);
  const auto one_past = static_cast<dtype>(mixprec::dtype_count);
  // (Catch2 v2's combined matchers hold pointers to their parts: build each one in place.)
#define MIXPREC_TEST_BAD_DTYPE_MESSAGE (Contains("is not a mixprec::dtype") && Contains("200"))
  CHECK_THROWS_AS(mixprec::promote_types(bad, dtype::float32), std::invalid_argument);
  CHECK_THROWS_WITH(mixprec::promote_types(bad, dtype::float32), MIXPREC_TEST_BAD_DTYPE_MESSAGE);
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float32, bad), MIXPREC_TEST_BAD_DTYPE_MESSAGE);
  CHECK_THROWS_WITH(mixprec::promote_types(dtype::float32, one_past),
                    Contains("is not a mixprec::dtype") && Contains(std::to_string(mixprec::dtype_count)));
  CHECK_THROWS_WITH(mixprec::promote_types(bad, bad, promotion_options{.x64 = false}), MIXPREC_TEST_BAD_DTYPE_MESSAGE);
  CHECK_THROWS_WITH(mixprec::promote_types(bad, dtype::int8, strict_x64), MIXPREC_TEST_BAD_DTYPE_MESSAGE);
  CHECK_THROWS_WITH(mixprec::result_type(dtype::int8, dtype::bfloat16, bad), MIXPREC_TEST_BAD_DTYPE_MESSAGE);
  // Not a type_promotion_error: the input is invalid, not the promotion.
  CHECK_THROWS_MATCHES(mixprec::promote_types(bad, dtype::float32), std::invalid_argument,
                       Catch::Matchers::Predicate<std::invalid_argument>([](const std::invalid_argument& e) {
                         return dynamic_cast<const mixprec::type_promotion_error*>(&e) == nullptr;
                       }));
  CHECK_FALSE(mixprec::can_promote(bad, dtype::float32));
  CHECK_FALSE(mixprec::can_promote(dtype::float32, one_past));
#undef MIXPREC_TEST_BAD_DTYPE_MESSAGE
}

}  // namespace promotion_test
