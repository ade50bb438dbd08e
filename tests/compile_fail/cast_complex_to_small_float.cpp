// Must not compile: a complex leaf cast to bfloat16, which has no complex counterpart; the
// static_assert in mixprec/policies/cast.hpp says to cast to float or double instead. The float target compiles.
#include <complex>
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/policies/cast.hpp>

inline auto cast_complex(const std::complex<float>& z) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::cast_floating<mixprec::bfloat16>(z);
#else
  return mixprec::cast_floating<float>(z);  // std::complex<float>
#endif
}
