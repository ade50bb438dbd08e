// Tests of printing (mixprec/dtypes/dtype.hpp, formats/basic_float.hpp): `operator<<` and, where the
// standard library has <format>, `std::formatter` for dtype and the small float types. The expected
// names are NumPy's and JAX's spellings (`numpy.dtype(ml_dtypes.bfloat16).name` is "bfloat16"; the weak
// types are written int*, float*, complex* in JAX's type promotion table), typed here by hand.
#include <catch2/catch.hpp>

#include <array>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#endif

#include "mixprec/dtypes/dtype.hpp"

namespace dtype_print_test {

using mixprec::dtype;

namespace {

template <class T>
std::string printed(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Every enumerator and its NumPy/JAX name.
const std::array<std::pair<dtype, std::string_view>, 33> expected_names{{
    {dtype::bool_, "bool"},
    {dtype::int2, "int2"},
    {dtype::int4, "int4"},
    {dtype::int8, "int8"},
    {dtype::int16, "int16"},
    {dtype::int32, "int32"},
    {dtype::int64, "int64"},
    {dtype::uint2, "uint2"},
    {dtype::uint4, "uint4"},
    {dtype::uint8, "uint8"},
    {dtype::uint16, "uint16"},
    {dtype::uint32, "uint32"},
    {dtype::uint64, "uint64"},
    {dtype::bfloat16, "bfloat16"},
    {dtype::float16, "float16"},
    {dtype::float32, "float32"},
    {dtype::float64, "float64"},
    {dtype::complex64, "complex64"},
    {dtype::complex128, "complex128"},
    {dtype::float8_e4m3fn, "float8_e4m3fn"},
    {dtype::float8_e5m2, "float8_e5m2"},
    {dtype::float8_e4m3fnuz, "float8_e4m3fnuz"},
    {dtype::float8_e5m2fnuz, "float8_e5m2fnuz"},
    {dtype::float8_e4m3b11fnuz, "float8_e4m3b11fnuz"},
    {dtype::float8_e3m4, "float8_e3m4"},
    {dtype::float8_e4m3, "float8_e4m3"},
    {dtype::float8_e8m0fnu, "float8_e8m0fnu"},
    {dtype::float6_e2m3fn, "float6_e2m3fn"},
    {dtype::float6_e3m2fn, "float6_e3m2fn"},
    {dtype::float4_e2m1fn, "float4_e2m1fn"},
    {dtype::weak_int, "int*"},
    {dtype::weak_float, "float*"},
    {dtype::weak_complex, "complex*"},
}};

}  // namespace

TEST_CASE("std::cout << dtype prints its NumPy/JAX name", "[dtype][print]") {
  CHECK(printed(dtype::bfloat16) == "bfloat16");
  REQUIRE(expected_names.size() == mixprec::dtype_count);
  for (const auto& [d, text] : expected_names) {
    CAPTURE(text);
    CHECK(printed(d) == text);
  }
}

TEST_CASE("operator<< of dtype honours the stream's width and fill", "[dtype][print]") {
  std::ostringstream os;
  os << '[' << std::setw(10) << dtype::int8 << "][" << std::left << std::setfill('.') << std::setw(8) << dtype::float16
     << ']';
  CHECK(os.str() == "[      int8][float16.]");
}

TEST_CASE("a value that is no dtype enumerator prints as dtype(<number>)", "[dtype][print]") {
  CHECK(printed(static_cast<dtype>(200)) == "dtype(200)");
  CHECK(printed(static_cast<dtype>(33)) == "dtype(33)");  // one past weak_complex
}

TEST_CASE("the named formats print their value as a float", "[dtype][print][formats]") {
  // bfloat16(0.1) is 0x3DCD = 0.10009765625, which float's default precision (6) shows as 0.100098.
  CHECK(printed(mixprec::bfloat16(0.1f)) == "0.100098");
  CHECK(printed(mixprec::float16(-2.5f)) == "-2.5");
  // 300 lies between 288 and 320 in float8_e4m3fn, nearer 288.
  CHECK(printed(mixprec::float8_e4m3fn(300.0f)) == "288");
  CHECK(printed(mixprec::float8_e5m2(-0.0f)) == "-0");
  CHECK(printed(mixprec::float4_e2m1fn(6.0f)) == "6");
}

#if defined(__cpp_lib_format)
TEST_CASE("std::format writes a dtype's name with a string's format spec", "[dtype][print][format]") {
  CHECK(std::format("{}", dtype::bfloat16) == "bfloat16");
  CHECK(std::format("{}", dtype::weak_float) == "float*");
  CHECK(std::format("[{:>10}]", dtype::int8) == "[      int8]");
  CHECK(std::format("{}", static_cast<dtype>(200)) == "dtype(200)");
  for (const auto& [d, text] : expected_names) CHECK(std::format("{}", d) == text);
}

TEST_CASE("std::format writes a small float's value with float's format spec", "[dtype][print][format]") {
  CHECK(std::format("{}", mixprec::bfloat16(1.5f)) == "1.5");
  CHECK(std::format("{}", mixprec::float8_e4m3fn(300.0f)) == "288");
  // float16(0.1) is 0.0999755859375.
  CHECK(std::format("{:.2f}", mixprec::float16(0.1f)) == "0.10");
  CHECK(std::format("{:>6}", mixprec::float4_e2m1fn(-3.0f)) == "    -3");
}
#endif

}  // namespace dtype_print_test
