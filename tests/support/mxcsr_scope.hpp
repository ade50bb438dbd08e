// Test support: `mxcsr_scope`, which sets the SSE control and status register (MXCSR: flush-to-zero,
// denormals-are-zero, rounding mode) for a scope and restores it, for the tests that check a conversion
// does not depend on the floating-point environment. x86 only (MIXPREC_TEST_HAS_MXCSR says whether).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MIXPREC_TEST_HAS_MXCSR 1

namespace test_support {

/// Sets MXCSR for the scope and restores it.
class mxcsr_scope {
 public:
  explicit mxcsr_scope(unsigned value) : saved_(_mm_getcsr()) { _mm_setcsr(value); }
  mxcsr_scope(const mxcsr_scope&) = delete;
  mxcsr_scope& operator=(const mxcsr_scope&) = delete;
  ~mxcsr_scope() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

}  // namespace test_support
#endif
