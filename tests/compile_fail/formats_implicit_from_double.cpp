// Must not compile: double -> float8_e4m3fn rounds to 4 significand bits (and turns values above
// 464 into NaN), so the conversion is explicit.
#include <mixprec/formats/float8.hpp>

inline mixprec::float8_e4m3fn from_double(double x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  mixprec::float8_e4m3fn f = x;  // implicit narrowing
#else
  mixprec::float8_e4m3fn f(x);  // explicit
#endif
  return f;
}
