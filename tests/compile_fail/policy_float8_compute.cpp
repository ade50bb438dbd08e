// Must not compile: no policy holds a float8 (or float6, float4) type; the static_assert says why (a
// policy converts without a scale: 1000 becomes NaN in float8_e4m3fn) and names the explicit float8 paths.
#include <mixprec/formats/float8.hpp>
#include <mixprec/policies/policy.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using chosen = mixprec::policy<float, mixprec::float8_e4m3fn, float>;
#else
using chosen = mixprec::policy<float, mixprec::bfloat16, float>;  // float8 through scaled::float8_dot
#endif
inline constexpr chosen policy{};
