// Must not compile: promote cannot be a policy's Param type (parameters need one stored type).
#include <mixprec/policies/policy.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using chosen = mixprec::policy<mixprec::promote, float>;
#else
using chosen = mixprec::policy<float, mixprec::promote>;
#endif
inline constexpr chosen policy{};
