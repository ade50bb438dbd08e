// Must not compile: one small float does not convert implicitly to another, even where it would be
// exact, because in general it rounds (bfloat16 -> float8_e5m2 drops 5 significand bits).
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/formats/float8.hpp>

inline mixprec::float8_e5m2 to_e5m2(mixprec::bfloat16 b) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  mixprec::float8_e5m2 f = b;  // implicit narrowing between formats
#else
  mixprec::float8_e5m2 f(b);  // explicit: rounds once, through float
#endif
  return f;
}
