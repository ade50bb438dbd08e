// Must not compile: MX block scaling of an element type that is not an OCP MX element format.
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/formats/float8.hpp>
#include <mixprec/scaled/block_scaling.hpp>

#include <span>

inline auto blocks(std::span<const float> x) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::mx_quantise<mixprec::bfloat16>(x);
#else
  return mixprec::mx_quantise<mixprec::float8_e4m3fn>(x);
#endif
}
