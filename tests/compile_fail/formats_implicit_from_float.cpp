// Must not compile: float -> bfloat16 rounds (24 significand bits to 8), so it is explicit.
// Only widening conversions (bfloat16 -> float) are implicit.
#include <mixprec/formats/bfloat16.hpp>

inline mixprec::bfloat16 from_float(float x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  mixprec::bfloat16 b = x;  // implicit narrowing
#else
  mixprec::bfloat16 b(x);  // explicit: the reader sees the rounding
#endif
  return b;
}
