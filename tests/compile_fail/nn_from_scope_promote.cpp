// Must not compile: from_scope lists a policy whose compute type is promote, which no policy_scope can
// hold; the static_assert sentence says to list concrete policies. The twin lists a concrete one.
#include <cstddef>

#include <mixprec/nn/layer_norm.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using scoped = mixprec::from_scope<mixprec::full_precision, mixprec::promote_policy>;
#else
using scoped = mixprec::from_scope<mixprec::full_precision, mixprec::mixed_bfloat16>;
#endif

inline bool built() { return mixprec::nn::layer_norm<scoped>(std::size_t{8}).policy() == mixprec::runtime_policy{}; }
