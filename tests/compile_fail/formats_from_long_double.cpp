// Must not compile: long double is refused even explicitly; the static_assert in
// formats/basic_float.hpp says to convert to double first, so the double rounding is visible.
#include <mixprec/formats/bfloat16.hpp>

inline mixprec::bfloat16 from_long_double(long double x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  mixprec::bfloat16 b(x);
#else
  mixprec::bfloat16 b(static_cast<double>(x));
#endif
  return b;
}
