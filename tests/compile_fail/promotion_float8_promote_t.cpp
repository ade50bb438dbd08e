// Must not compile: float8 types have no implicit promotion in the JAX lattice; promote_t says so
// (and how to fix it) in a static_assert. bfloat16 and float16 promote to float32 and compile.
#include <mixprec/dtypes/promotion.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using joined = mixprec::promote_t<mixprec::float8_e4m3fn, mixprec::bfloat16>;
#else
using joined = mixprec::promote_t<mixprec::float16, mixprec::bfloat16>;
#endif
inline constexpr joined value{};
