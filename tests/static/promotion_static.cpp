// Compile-time tests of mixprec/dtypes/promotion.hpp: static_asserts only; compiling this file is passing.
// Expected values: JAX's published promotion table (docs/type_promotion.rst) and JAX's
// tests/dtypes_test.py; the lattice laws hold for JAX's lattice by construction (see
// docs/promotion.md). The exhaustive associativity check over triples is a run-time test
// (tests/dtypes/promotion_test.cpp): it exceeds Clang's default constexpr step limit.

#include <array>
#include <complex>
#include <cstdint>
#include <type_traits>

#include "mixprec/dtypes/promotion.hpp"

namespace {

using mixprec::dtype;
using mixprec::promotion_mode;
using mixprec::promotion_options;

constexpr std::array<promotion_options, 4> all_options{{
    {promotion_mode::standard, true},
    {promotion_mode::standard, false},
    {promotion_mode::strict, true},
    {promotion_mode::strict, false},
}};

// The example the issue asks for.
static_assert(mixprec::promote_types(dtype::bfloat16, dtype::float16) == dtype::float32);

// Commutative over all pairs, in every mode (defined on one side iff on the other). One
// static_assert per mode: each evaluation has its own constexpr step budget (Clang's is 1M steps).
constexpr bool commutative(promotion_options o) {
  for (dtype a : mixprec::all_dtypes) {
    for (dtype b : mixprec::all_dtypes) {
      const bool ab = mixprec::can_promote(a, b, o);
      if (ab != mixprec::can_promote(b, a, o)) return false;
      if (ab && mixprec::promote_types(a, b, o) != mixprec::promote_types(b, a, o)) return false;
    }
  }
  return true;
}
static_assert(commutative(all_options[0]));
static_assert(commutative(all_options[1]));
static_assert(commutative(all_options[2]));
static_assert(commutative(all_options[3]));

// Idempotent (x64 on): a v a == a for every dtype, small floats and weak types included.
static_assert([] {
  for (dtype a : mixprec::all_dtypes) {
    if (mixprec::promote_types(a, a) != a) return false;
  }
  return true;
}());

// bool is the bottom of the standard lattice (JAX testPromoteDtypesStandard: t v bool == t).
static_assert([] {
  for (dtype a : mixprec::all_dtypes) {
    if (mixprec::promote_types(a, dtype::bool_) != a) return false;
  }
  return true;
}());

// complex128 is the top for everything but the small floats and sub-byte integers (JAX
// testPromoteDtypesStandard: promote_types(t, complex128) == complex128 outside fp8/intn).
static_assert([] {
  for (dtype a : mixprec::all_dtypes) {
    const bool small =
        mixprec::is_small_float(a) || a == dtype::int2 || a == dtype::int4 || a == dtype::uint2 || a == dtype::uint4;
    if (small == mixprec::can_promote(a, dtype::complex128)) return false;
    if (!small && mixprec::promote_types(a, dtype::complex128) != dtype::complex128) return false;
  }
  return true;
}());

// Published table, a few landmark cells (all of it is checked at run time).
static_assert(mixprec::promote_types(dtype::uint8, dtype::int8) == dtype::int16);                 // u1 x i1 = i2
static_assert(mixprec::promote_types(dtype::uint32, dtype::int32) == dtype::int64);               // u4 x i4 = i8
static_assert(mixprec::promote_types(dtype::uint64, dtype::int8) == dtype::weak_float);           // u8 x i1 = f*
static_assert(mixprec::promote_types(dtype::int64, dtype::float16) == dtype::float16);            // i8 x f2 = f2
static_assert(mixprec::promote_types(dtype::bfloat16, dtype::weak_complex) == dtype::complex64);  // bf x c* = c8
static_assert(mixprec::promote_types(dtype::float64, dtype::complex64) == dtype::complex128);     // f8 x c8 = c16
static_assert(mixprec::promote_types(dtype::weak_int, dtype::weak_float) == dtype::weak_float);   // i* x f* = f*

// x64 off (JAX tests/dtypes_test.py, testObservedPromotionTable): u4 x i4 = i4, and 64-bit
// inputs are canonicalised.
static_assert(mixprec::promote_types(dtype::uint32, dtype::int32, {.x64 = false}) == dtype::int32);
static_assert(mixprec::promote_types(dtype::float64, dtype::complex64, {.x64 = false}) == dtype::complex64);
static_assert(mixprec::promote_types(dtype::uint64, dtype::int64, {.x64 = false}) == dtype::int32);

// Strict mode (JAX testPromoteDtypesStrict).
static_assert(mixprec::promote_types(dtype::float16, dtype::weak_float, {.mode = promotion_mode::strict}) ==
              dtype::float16);
static_assert(!mixprec::can_promote(dtype::float16, dtype::float32, {.mode = promotion_mode::strict}));
static_assert(!mixprec::can_promote(dtype::bool_, dtype::weak_int, {.mode = promotion_mode::strict}));

// Small types (JAX _type_promotion_lattice: no successors).
static_assert(!mixprec::can_promote(dtype::float8_e4m3fn, dtype::bfloat16));
static_assert(!mixprec::can_promote(dtype::float8_e4m3fn, dtype::float8_e5m2));
static_assert(!mixprec::can_promote(dtype::int4, dtype::int8));
static_assert(mixprec::promote_types(dtype::float8_e4m3fn, dtype::weak_float) == dtype::float8_e4m3fn);
static_assert(mixprec::promote_types(dtype::uint4, dtype::weak_int) == dtype::uint4);

// n-ary.
static_assert(mixprec::result_type(dtype::int8, dtype::uint8, dtype::weak_float, dtype::float16) == dtype::float16);
static_assert(mixprec::result_type(promotion_options{.x64 = false}, dtype::float64) == dtype::float32);

// Type level.
using mixprec::bfloat16;
using mixprec::promote_t;
using mixprec::weak;
static_assert(std::is_same_v<promote_t<bfloat16, mixprec::float16>, float>);
static_assert(std::is_same_v<promote_t<bfloat16, weak<double>>, bfloat16>);
static_assert(std::is_same_v<promote_t<bfloat16, double>, double>);
static_assert(std::is_same_v<promote_t<weak<double>, weak<int>>, weak<double>>);
static_assert(std::is_same_v<promote_t<std::complex<float>, weak<double>>, std::complex<float>>);
static_assert(mixprec::dtype_of_v<weak<std::int16_t>> == dtype::weak_int);
static_assert(!mixprec::promotable<mixprec::float8_e4m3fn, bfloat16>);
static_assert(mixprec::promotable<mixprec::float8_e4m3fn, weak<float>>);

}  // namespace

// Integers of 1 to 8 bytes have dtypes; the extended __int128 (integral under -std=gnu++20) has none,
// as in NumPy and JAX, rather than passing for int64.
static_assert(mixprec::dtype_of_v<std::int64_t> == dtype::int64 && mixprec::dtype_of_v<std::uint8_t> == dtype::uint8);
#ifdef __SIZEOF_INT128__
__extension__ typedef __int128 mixprec_static_int128;
__extension__ typedef unsigned __int128 mixprec_static_uint128;
static_assert(!mixprec::has_dtype<mixprec_static_int128> && !mixprec::has_dtype<mixprec_static_uint128>);
#endif
