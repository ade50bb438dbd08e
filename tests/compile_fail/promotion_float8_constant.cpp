// Must not compile: promote_types with no upper bound throws type_promotion_error, which is not a
// constant expression, so a constexpr use is rejected at compile time.
#include <mixprec/dtypes/promotion.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
constexpr auto joined = mixprec::promote_types(mixprec::dtype::float8_e4m3fn, mixprec::dtype::bfloat16);
#else
constexpr auto joined = mixprec::promote_types(mixprec::dtype::float16, mixprec::dtype::bfloat16);
#endif
static_assert(joined == joined);
