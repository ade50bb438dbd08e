// Must not compile: Flax's promote over leaves with no common type on the JAX lattice (a float8 type
// and bfloat16); promotion.hpp's static_assert says to cast one explicitly. Two bfloat16 leaves compile.
#include <mixprec/formats/bfloat16.hpp>
#include <mixprec/formats/float8.hpp>
#include <mixprec/policies/cast.hpp>
#include <utility>

inline auto promote_leaves() {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::cast_floating<mixprec::promote>(std::pair{mixprec::float8_e4m3fn(1.0f), mixprec::bfloat16(1.0f)});
#else
  return mixprec::cast_floating<mixprec::promote>(std::pair{mixprec::bfloat16(1.0f), mixprec::bfloat16(1.0f)});
#endif
}
