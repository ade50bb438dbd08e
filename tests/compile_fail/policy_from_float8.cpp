// Must not compile: policy_from<"c=float8_e4m3fn"> names a float8 dtype, which no policy holds; the
// static_assert says why and names the explicit float8 paths, as parse_policy's policy_parse_error does.
#include <mixprec/policies/policy_string.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using chosen = mixprec::policy_from<"p=f32,c=float8_e4m3fn,o=f32">;
#else
using chosen = mixprec::policy_from<"p=f32,c=bf16,o=f32">;  // float8 through scaled::float8_dot
#endif
inline constexpr chosen policy{};
