// Must not compile: a from_scope layer that lists no policy stops at the static_assert sentence of
// mixprec/policies/policy_scope.hpp saying what to list. The twin lists one.
#include <cstddef>

#include <mixprec/nn/dense.hpp>

#ifdef MIXPREC_EXPECT_COMPILE_ERROR
using scoped = mixprec::from_scope<>;
#else
using scoped = mixprec::from_scope<mixprec::full_precision>;
#endif

inline std::size_t width() { return mixprec::nn::dense<scoped>(4, 8).policy() == mixprec::runtime_policy{} ? 8 : 0; }
