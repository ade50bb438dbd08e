// Must not compile: visit's f must return one type for all 64 policies (like std::visit).
#include <mixprec/policies/runtime_policy.hpp>

inline auto run(const mixprec::runtime_policy& p) {
#ifdef MIXPREC_EXPECT_COMPILE_ERROR
  return mixprec::visit(p, [](auto policy) { return typename decltype(policy)::compute_type{}; });
#else
  return mixprec::visit(p, [](auto policy) { return float(typename decltype(policy)::compute_type{}); });
#endif
}
