// Must not compile: policy_from<"c=int8"> is malformed; the static_assert says why.
#include <mixprec/policies/policy_string.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using chosen = mixprec::policy_from<"c=int8">;
#else
using chosen = mixprec::policy_from<"c=bf16">;
#endif
inline constexpr chosen policy{};
