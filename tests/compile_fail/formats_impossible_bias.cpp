// Must not compile: a float_format whose exponent bias puts its values outside float's range (here
// 5 exponent bits, 2 mantissa bits, bias 200: the smallest subnormal would be 2^(1 - 200 - 2) =
// 2^-201, below float's 2^-149). basic_float computes in float and decodes to float exactly, so its
// static_assert refuses the description; bias 15 (float8_e5m2's) compiles.
#include <mixprec/formats/basic_float.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
inline constexpr int test_bias = 200;
#else
inline constexpr int test_bias = 15;
#endif

struct test_e5m2 : mixprec::basic_float<test_e5m2, mixprec::float_format{.exponent_bits = 5,
                                                                         .mantissa_bits = 2,
                                                                         .exponent_bias = test_bias,
                                                                         .nan = mixprec::nan_encoding::ieee}> {
  using basic_float::basic_float;
};

inline float twice(float x) { return static_cast<float>(test_e5m2(x) + test_e5m2(x)); }
