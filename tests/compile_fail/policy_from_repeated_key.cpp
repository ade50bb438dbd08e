// Must not compile: policy_from<"p=f32,params=bf16"> is malformed; the static_assert says why.
#include <mixprec/policies/policy_string.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using chosen = mixprec::policy_from<"p=f32,params=bf16">;
#else
using chosen = mixprec::policy_from<"p=f32,c=bf16">;
#endif
inline constexpr chosen policy{};
